//! The three line types that make up almost all of a recording (`gpu`, `host`, `procs`), read
//! in a single pass over the bytes with next to no allocation per line (buffers are reused,
//! numbers parsed in place). Their fields are declared once, on the structs themselves
//! ([`gpufeed_json::json_fields`]): the same list gives serde its fields and this reader
//! its keys. Anything the reader is not sure of (escapes in keys or names, exponents it cannot
//! do exactly, a missing required field, a repeated key) makes it give up on that line, and the
//! reader ([`super::reader`]) falls back to serde: the result is the same either way.
//!
//! Each line is tried first in the recorder's own layout (keys in serde's field order, absent
//! ones left out, no whitespace: each `,"key":` stepped over with one constant-length
//! comparison), then in any layout (keys walked against the field list). `diagnose` of a 1 h ×
//! 8 GPU recording took about a quarter of the time it takes through serde alone (bench/README.md).

use crate::sample::event::ProcsLine;
use crate::sample::{GpuSample, HostSample, ProcSample};
use gpufeed_json::fields::read_line;

/// The tags of the three lines, as `Line`'s serde derive writes them (`rename_all = "snake_case"`;
/// the tests write each line with serde and read it back here).
const GPU: &[u8] = b"gpu";
const HOST: &[u8] = b"host";
const PROCS: &[u8] = b"procs";

/// Parses a `gpu` line into `out` (its buffers are reused). `None`: use serde for this line.
pub(crate) fn gpu(line: &[u8], out: &mut GpuSample) -> Option<()> {
    read_line(line, GPU, out)
}

/// Parses a `host` line into `out` (buffers reused).
pub(crate) fn host(line: &[u8], out: &mut HostSample) -> Option<()> {
    read_line(line, HOST, out)
}

/// Parses a `procs` line: its time, and the samples into `out` (reused).
pub(crate) fn procs(line: &[u8], out: &mut Vec<ProcSample>) -> Option<f64> {
    let mut l = ProcsLine {
        t_s: 0.0,
        procs: std::mem::take(out),
    };
    let read = read_line(line, PROCS, &mut l);
    *out = l.procs;
    read.map(|()| l.t_s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::event::Line;
    use crate::sample::{DiskRate, GpuProcess};
    use gpufeed_json::fields::{line_any, line_written, Fields};

    fn serde_gpu(l: &str) -> GpuSample {
        match serde_json::from_str::<Line>(l).unwrap() {
            Line::Gpu(g) => g,
            other => panic!("{other:?}"),
        }
    }

    type Path<T> = fn(&[u8], &[u8], &mut T) -> Option<()>;

    /// A line read by the in-order path alone and by the any-layout path alone.
    fn paths<T: Fields + Default>(line: &str, tag: &[u8]) -> [Option<T>; 2] {
        [line_written::<T> as Path<T>, line_any::<T>].map(|f| {
            let mut out = T::default();
            f(line.as_bytes(), tag, &mut out).map(|()| out)
        })
    }

    fn gpu_paths(line: &str) -> [Option<GpuSample>; 2] {
        paths(line, GPU)
    }

    fn host_paths(line: &str) -> [Option<HostSample>; 2] {
        paths(line, HOST)
    }

    fn procs_paths(line: &str) -> [Option<(f64, Vec<ProcSample>)>; 2] {
        paths::<ProcsLine>(line, PROCS).map(|l| l.map(|l| (l.t_s, l.procs)))
    }

    #[test]
    fn gpu_lines_match_serde() {
        let lines = [
            r#"{"type":"gpu","index":0,"t_s":0.200208608,"util_samples":[[0.166238,85.0]],"util_pct":85.0,"mem_util_pct":0.0,"mem_used_bytes":80000000000,"sm_clock_mhz":1980,"power_w":70.0,"temperature_c":40,"pcie_rx_bytes":401503284,"pcie_tx_bytes":0,"pcie_rx_bytes_per_s":null,"pcie_tx_bytes_per_s":null,"pcie_gen":null,"pcie_width":null,"throttle_reasons":0}"#,
            r#"{"type":"gpu","index":1,"t_s":0.000695457,"util_samples":[],"util_pct":50.0,"mem_util_pct":0.0,"mem_used_bytes":0,"sm_clock_mhz":1980,"power_w":70.0,"temperature_c":40,"pcie_rx_bytes":0,"pcie_tx_bytes":0,"pcie_rx_bytes_per_s":null,"pcie_tx_bytes_per_s":null,"pcie_gen":5,"pcie_width":16,"throttle_reasons":0,"processes":[{"pid":7,"used_memory_bytes":null,"sm_util_pct":3}]}"#,
            r#"{"type":"gpu","index":2,"t_s":1e-3,"util_samples":null,"util_pct":12.345678901234567,"power_w":-1.5E2, "pcie_rx_bytes_per_s":123456.789}"#,
            r#"{"t_s":3.25,"type":"gpu","index":3,"util_samples":[[1.0,2.0],[3.0,4.5]],"new_field":{"a":[1,"x\"y"]}}"#,
        ];
        let mut g = GpuSample::default();
        for l in lines {
            gpu(l.as_bytes(), &mut g).unwrap_or_else(|| panic!("fast path gave up on {l}"));
            assert_eq!(g, serde_gpu(l), "{l}");
        }
    }

    /// `v` as the recorder writes it in `line`, read back whole by each path alone (a field the
    /// in-order path does not know would make it give up on every line the recorder writes, which
    /// the fallback would hide but for this) and by the fast reader `fast`.
    fn reads_back<T: Clone + Default + PartialEq + std::fmt::Debug>(
        line: &Line,
        v: &T,
        paths: fn(&str) -> [Option<T>; 2],
        fast: fn(&[u8], &mut T) -> Option<()>,
    ) {
        let line = serde_json::to_string(line).unwrap();
        assert_eq!(paths(&line), [Some(v.clone()), Some(v.clone())], "{line}");
        let mut out = T::default();
        fast(line.as_bytes(), &mut out).unwrap_or_else(|| panic!("gave up on {line}"));
        assert_eq!(&out, v);
    }

    /// Every field set, each struct written out in full (no `..Default`): a field added to a
    /// sample type fails to compile here until it is added, and then fails this test until the
    /// fast path reads it (its key table would otherwise go stale silently).
    #[test]
    fn every_field_of_every_sample_type_is_read() {
        let g = GpuSample {
            index: 3,
            t_s: 1.5,
            util_samples: Some(vec![[1.25, 80.0], [1.5, 90.5]]),
            util_pct: Some(85.25),
            mem_util_pct: Some(12.5),
            mem_used_bytes: Some(1 << 33),
            sm_clock_mhz: Some(1980),
            power_w: Some(301.125),
            temperature_c: Some(61),
            pcie_rx_bytes: Some(123_456_789),
            pcie_tx_bytes: Some(987_654),
            pcie_rx_bytes_per_s: Some(2.5e9),
            pcie_tx_bytes_per_s: Some(1.25e6),
            pcie_gen: Some(5),
            pcie_width: Some(16),
            throttle_reasons: Some(4),
            processes: Some(vec![GpuProcess {
                pid: 77,
                used_memory_bytes: Some(1 << 30),
                sm_util_pct: Some(40),
            }]),
        };
        reads_back(&Line::Gpu(g.clone()), &g, gpu_paths, gpu);

        let h = HostSample {
            t_s: 2.0,
            cpu_pct: vec![10.0, 20.5],
            cpu_total_pct: Some(15.25),
            iowait_pct: Some(1.5),
            mem_total_bytes: Some(64 << 30),
            mem_available_bytes: Some(32 << 30),
            mem_cached_bytes: Some(8 << 30),
            swap_total_bytes: Some(1 << 30),
            swap_free_bytes: Some(1 << 29),
            psi_cpu_some_pct: Some(3.5),
            psi_io_some_pct: Some(4.5),
            psi_io_full_pct: Some(5.5),
            psi_mem_some_pct: Some(6.5),
            psi_mem_full_pct: Some(7.5),
            disks: vec![DiskRate {
                device: "nvme0n1".into(),
                read_bytes_per_s: 1e6,
                write_bytes_per_s: 2e6,
            }],
        };
        reads_back(&Line::Host(h.clone()), &h, host_paths, host);

        let p = ProcSample {
            pid: 9,
            cpu_pct: Some(99.5),
            rss_bytes: Some(1 << 28),
            read_bytes: Some(4096),
            write_bytes: Some(8192),
            state: Some('R'),
            threads: Some(12),
            voluntary_ctxt_switches: Some(5),
            nonvoluntary_ctxt_switches: Some(6),
        };
        let line = serde_json::to_string(&Line::Procs(ProcsLine {
            t_s: 3.0,
            procs: vec![p.clone()],
        }))
        .unwrap();
        let mut out = Vec::new();
        assert_eq!(procs(line.as_bytes(), &mut out), Some(3.0), "{line}");
        assert_eq!(out, vec![p.clone()]);
        let want = Some((3.0, vec![p]));
        assert_eq!(procs_paths(&line), [want.clone(), want], "{line}");
    }

    #[test]
    fn lines_in_another_layout_are_read_by_the_keyed_path() {
        for l in [
            r#"{"type":"gpu","t_s":1.5,"index":2,"util_pct":50.0}"#,
            r#"{"type":"gpu","index":2, "t_s":1.5,"util_pct":50.0}"#,
            r#"{"type":"gpu","index":2,"t_s":1.5,"util_pct":50.0 }"#,
            r#"{"type":"gpu","index":2,"t_s":1.5,"new_field":[1],"util_pct":50.0}"#,
            r#"{"type":"gpu","index":2,"t_s":1.5,"power_w":5.0,"util_pct":50.0}"#,
        ] {
            let [in_order, keyed] = gpu_paths(l);
            assert_eq!(in_order, None, "{l}");
            assert_eq!(keyed, Some(serde_gpu(l)), "{l}");
        }
        let h = r#"{"type":"host","t_s":1.0,"cpu_pct":[1.0,2.0] ,"disks":[]}"#;
        assert_eq!(host_paths(h)[0], None);
        assert_eq!(host_paths(h)[1].as_ref().map(|h| h.cpu_pct.len()), Some(2));
        let p = r#"{"type":"procs","t_s":1.0,"procs":[{"cpu_pct":1.0,"pid":3}]}"#;
        assert_eq!(procs_paths(p)[0], None);
        assert_eq!(procs_paths(p)[1].as_ref().map(|(_, v)| v[0].pid), Some(3));
    }

    #[test]
    fn unusual_gpu_lines_fall_back() {
        let mut g = GpuSample::default();
        for l in [
            r#"{"type":"gpu","t_s":1.0}"#,
            r#"{"type":"gpu","index":0,"t_s":1.0"#,
            r#"{"type":"gpu","index":0,"t_s":1.0,"a\"b":1}"#,
            r#"{"type":"host","index":0,"t_s":1.0}"#,
            r#"{"type":"gpu","index":0,"t_s":1.0} trailing"#,
            r#"{"type":"gpu","index":-1,"t_s":1.0}"#,
        ] {
            assert!(gpu(l.as_bytes(), &mut g).is_none(), "{l}");
        }
    }

    #[test]
    fn host_and_procs_lines_match_serde() {
        let h = r#"{"type":"host","t_s":0.300156467,"cpu_pct":[0.0,12.5,100.0],"cpu_total_pct":37.5,"iowait_pct":0.0,"mem_total_bytes":25275990016,"mem_available_bytes":24422350848,"mem_cached_bytes":12228521984,"swap_total_bytes":0,"swap_free_bytes":0,"psi_cpu_some_pct":0.0,"psi_io_some_pct":1.5,"psi_io_full_pct":null,"psi_mem_some_pct":0.0,"psi_mem_full_pct":0.0,"disks":[{"device":"vda","read_bytes_per_s":1000.5,"write_bytes_per_s":0.0},{"device":"zram0","read_bytes_per_s":0.0,"write_bytes_per_s":2.0}]}"#;
        let mut got = HostSample::default();
        host(h.as_bytes(), &mut got).unwrap();
        let Line::Host(want) = serde_json::from_str::<Line>(h).unwrap() else {
            panic!()
        };
        assert_eq!(got, want);

        let p = r#"{"type":"procs","t_s":0.2,"procs":[{"pid":28423,"cpu_pct":0.0,"rss_bytes":1462272,"read_bytes":0,"write_bytes":0,"state":"S","threads":1},{"pid":28426,"cpu_pct":99.5,"rss_bytes":null,"read_bytes":null,"write_bytes":null,"state":"D","threads":4,"voluntary_ctxt_switches":5}]}"#;
        let mut got = Vec::new();
        assert_eq!(procs(p.as_bytes(), &mut got), Some(0.2));
        let Line::Procs(ProcsLine { procs: want, .. }) = serde_json::from_str::<Line>(p).unwrap()
        else {
            panic!()
        };
        assert_eq!(got, want);
        assert!(procs(
            br#"{"type":"procs","t_s":0.2,"procs":[{"pid":1,"state":"\u0044"}]}"#,
            &mut got
        )
        .is_none());
    }

    mod props {
        use super::super::*;
        use super::{gpu_paths, host_paths, procs_paths};
        use crate::sample::event::Line;
        use crate::sample::DiskRate;
        use proptest::prelude::*;

        fn f() -> impl Strategy<Value = f64> {
            prop_oneof![
                -1e6f64..1e6,
                0.0f64..100.0,
                any::<f64>().prop_filter("finite", |x| x.is_finite()),
                (0u32..1_000_000).prop_map(|x| x as f64 / 1000.0),
            ]
        }

        fn gpu_sample() -> impl Strategy<Value = GpuSample> {
            (
                (
                    any::<u32>(),
                    f(),
                    proptest::option::of(proptest::collection::vec((f(), f()), 0..4)),
                ),
                (
                    proptest::option::of(f()),
                    proptest::option::of(any::<u64>()),
                    proptest::option::of(any::<u32>()),
                ),
                (
                    proptest::option::of(any::<u64>()),
                    proptest::option::of(f()),
                    proptest::option::of(0u32..7),
                ),
                proptest::option::of(any::<u64>()),
            )
                .prop_map(|((index, t_s, us), (u, mem, clk), (rx, rxs, gen), thr)| {
                    GpuSample {
                        index,
                        t_s,
                        util_samples: us.map(|v| v.into_iter().map(|(a, b)| [a, b]).collect()),
                        util_pct: u,
                        mem_used_bytes: mem,
                        sm_clock_mhz: clk,
                        pcie_rx_bytes: rx,
                        pcie_rx_bytes_per_s: rxs,
                        pcie_gen: gen,
                        pcie_width: gen.map(|g| g * 4),
                        throttle_reasons: thr,
                        ..Default::default()
                    }
                })
        }

        fn proc_sample() -> impl Strategy<Value = ProcSample> {
            (
                any::<u32>(),
                proptest::option::of(f()),
                proptest::option::of(any::<u64>()),
                proptest::option::of(prop_oneof![Just('R'), Just('S'), Just('D'), Just('Z')]),
                proptest::option::of(any::<u32>()),
            )
                .prop_map(|(pid, cpu, rss, state, threads)| ProcSample {
                    pid,
                    cpu_pct: cpu,
                    rss_bytes: rss,
                    read_bytes: rss.map(|r| r / 3),
                    state,
                    threads,
                    ..Default::default()
                })
        }

        proptest! {
            #[test]
            fn fast_gpu_reads_back_exactly_what_serde_wrote(g in gpu_sample()) {
                let line = serde_json::to_string(&Line::Gpu(g.clone())).unwrap();
                let mut out = GpuSample::default();
                prop_assert!(gpu(line.as_bytes(), &mut out).is_some(), "{}", line);
                prop_assert_eq!(&out, &g);
                prop_assert_eq!(gpu_paths(&line), [Some(g.clone()), Some(g)], "{}", line);
            }

            #[test]
            fn fast_procs_reads_back_exactly_what_serde_wrote(
                t in f(),
                ps in proptest::collection::vec(proc_sample(), 0..6),
            ) {
                let line = serde_json::to_string(&Line::Procs(ProcsLine { t_s: t, procs: ps.clone() })).unwrap();
                let mut out = Vec::new();
                prop_assert_eq!(procs(line.as_bytes(), &mut out), Some(t));
                prop_assert_eq!(&out, &ps);
                let want = Some((t, ps));
                prop_assert_eq!(procs_paths(&line), [want.clone(), want], "{}", line);
            }

            #[test]
            fn fast_host_reads_back_exactly_what_serde_wrote(
                t in f(),
                cpus in proptest::collection::vec(f(), 0..70),
                psi in proptest::option::of(f()),
                reads in proptest::collection::vec(f(), 0..3),
            ) {
                let h = HostSample {
                    t_s: t,
                    cpu_pct: cpus,
                    psi_io_some_pct: psi,
                    disks: reads
                        .iter()
                        .map(|r| DiskRate { device: String::new(), read_bytes_per_s: *r, write_bytes_per_s: 1.0 })
                        .collect(),
                    ..Default::default()
                };
                let line = serde_json::to_string(&Line::Host(h.clone())).unwrap();
                let mut out = HostSample::default();
                prop_assert!(host(line.as_bytes(), &mut out).is_some(), "{}", line);
                prop_assert_eq!(&out, &h);
                prop_assert_eq!(host_paths(&line), [Some(h.clone()), Some(h)], "{}", line);
            }

            #[test]
            fn never_panics_on_cut_or_garbled_lines(g in gpu_sample(), cut in 0usize..400, flip in 0usize..400) {
                let line = serde_json::to_string(&Line::Gpu(g)).unwrap().into_bytes();
                let mut b = line[..cut.min(line.len())].to_vec();
                if !b.is_empty() {
                    let i = flip % b.len();
                    b[i] = b[i].wrapping_add(1);
                }
                let mut out = GpuSample::default();
                let _ = gpu(&b, &mut out);
                let mut p = Vec::new();
                let _ = procs(&b, &mut p);
                let mut h = HostSample::default();
                let _ = host(&b, &mut h);
            }
        }
    }
}
