//! The recording file: NDJSON, one JSON object per line, each with a `type`.
//!
//! The first line is a [`Header`] carrying `schema_version`; then samples in time order
//! (`gpu`, `host`, `proc_start`, `procs`, `proc_exit`, and since schema 2 the Python stack lines
//! `py_status`, `py_frame`, `py_stack`, `py_samples`) and, when the recording ended cleanly,
//! an `end` line. Readers ignore line types they do not know, accept every schema version up to
//! [`SCHEMA_VERSION`], and treat a last line cut mid-way (a killed recorder) as the end.

//!
//! The line types themselves live with the samples ([`crate::sample::event`]), so that the
//! importers of other tools' logs produce them without importing this layer; this module owns
//! how they are stored (rounding, the tagged header) and read back (errors, statistics).

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

use crate::sample::event::{Header, Line, ProcsLine, SCHEMA_VERSION};

/// Rounds `x` to `dp` decimal places.
fn round_dp(x: f64, dp: i32) -> f64 {
    let m = 10f64.powi(dp);
    (x * m).round() / m
}

fn round_opt(x: &mut Option<f64>, dp: i32) {
    if let Some(v) = x {
        *v = round_dp(*v, dp);
    }
}

impl Line {
    /// Rounds the line's figures to what they can mean: times to the microsecond, percentages to
    /// 0.01, rates to the byte per second. Full-precision floats (`33.33333333333333`) would make
    /// the most frequent lines of a recording half again as long for no information.
    pub(crate) fn round_for_storage(&mut self) {
        const T: i32 = 6;
        const PCT: i32 = 2;
        match self {
            Line::Gpu(g) => {
                g.t_s = round_dp(g.t_s, T);
                if let Some(v) = &mut g.util_samples {
                    for p in v.iter_mut() {
                        p[0] = round_dp(p[0], T);
                        p[1] = round_dp(p[1], PCT);
                    }
                }
                round_opt(&mut g.util_pct, PCT);
                round_opt(&mut g.mem_util_pct, PCT);
                round_opt(&mut g.power_w, 3);
                round_opt(&mut g.pcie_rx_bytes_per_s, 0);
                round_opt(&mut g.pcie_tx_bytes_per_s, 0);
            }
            Line::Host(h) => {
                h.t_s = round_dp(h.t_s, T);
                for c in h.cpu_pct.iter_mut() {
                    *c = round_dp(*c, PCT);
                }
                for x in [
                    &mut h.cpu_total_pct,
                    &mut h.iowait_pct,
                    &mut h.psi_cpu_some_pct,
                    &mut h.psi_io_some_pct,
                    &mut h.psi_io_full_pct,
                    &mut h.psi_mem_some_pct,
                    &mut h.psi_mem_full_pct,
                ] {
                    round_opt(x, PCT);
                }
                for d in h.disks.iter_mut() {
                    d.read_bytes_per_s = round_dp(d.read_bytes_per_s, 0);
                    d.write_bytes_per_s = round_dp(d.write_bytes_per_s, 0);
                }
            }
            Line::ProcStart(p) => p.t_s = round_dp(p.t_s, T),
            Line::Procs(ProcsLine { t_s, procs }) => {
                *t_s = round_dp(*t_s, T);
                for p in procs.iter_mut() {
                    round_opt(&mut p.cpu_pct, PCT);
                }
            }
            Line::ProcExit { t_s, .. } => *t_s = round_dp(*t_s, T),
            Line::End(e) => e.t_s = round_dp(e.t_s, T),
            Line::Overrides(o) => o.t_s = round_dp(o.t_s, T),
            Line::PyStatus(p) => p.t_s = round_dp(p.t_s, T),
            Line::PySamples(p) => {
                p.t_s = round_dp(p.t_s, T);
                p.dt_s = round_dp(p.dt_s, T);
            }
            Line::Steps(st) => {
                st.t_s = round_dp(st.t_s, T);
                st.dt_s = round_dp(st.dt_s, T);
                st.span_s = round_dp(st.span_s, T);
                round_opt(&mut st.wait_s, T);
            }
            Line::PyFrame(_) | Line::PyStack(_) | Line::Unknown => {}
        }
    }
}

/// Header line as written: the header plus its `type` tag.
#[derive(Serialize, Deserialize)]
struct TaggedHeader {
    #[serde(rename = "type")]
    kind: String,
    #[serde(flatten)]
    header: Header,
}

pub fn header_line(h: &Header) -> String {
    serde_json::to_string(&TaggedHeader {
        kind: "header".into(),
        header: h.clone(),
    })
    .expect("header serializes")
}

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot open recording {path}: {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is empty: nothing was recorded")]
    Empty { path: PathBuf },
    #[error("{path} is not a gpufeed recording (first line: {detail})")]
    NotARecording { path: PathBuf, detail: String },
    #[error("{path} was written by a newer gpufeed (schema {found}, this one reads up to {SCHEMA_VERSION}): upgrade gpufeed")]
    TooNew { path: PathBuf, found: u32 },
    #[error("error reading {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// What a read found besides the lines.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ReadStats {
    pub lines: u64,
    /// Lines that were not valid JSON of a known shape, other than a cut last line.
    pub malformed: u64,
    /// The last line was cut mid-way (the recorder was killed): it was dropped.
    pub truncated: bool,
    /// No `end` line: the recorder did not finish.
    pub unfinished: bool,
    /// Lines dropped for a time outside `0..=reader::MAX_TIME_S` (a year).
    pub bad_time: u64,
    /// Lines kept with a string cut to `reader::MAX_STRING_BYTES`.
    pub long_strings: u64,
}

pub(crate) fn parse_header(path: &Path, line: &str) -> Result<Header, ReadError> {
    let v: serde_json::Value =
        serde_json::from_str(line.trim()).map_err(|e| ReadError::NotARecording {
            path: path.to_path_buf(),
            detail: format!("not JSON: {e}"),
        })?;
    if v.get("type").and_then(|t| t.as_str()) != Some("header") {
        return Err(ReadError::NotARecording {
            path: path.to_path_buf(),
            detail: "no gpufeed header".into(),
        });
    }
    let found = v
        .get("schema_version")
        .and_then(|s| s.as_u64())
        .unwrap_or(0) as u32;
    if found > SCHEMA_VERSION {
        return Err(ReadError::TooNew {
            path: path.to_path_buf(),
            found,
        });
    }
    serde_json::from_value::<TaggedHeader>(v)
        .map(|t| t.header)
        .map_err(|e| ReadError::NotARecording {
            path: path.to_path_buf(),
            detail: format!("bad header: {e}"),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::reader::{read_from, Collect};
    use crate::sample::event::{
        End, PyFrameDef, PySamples, PyStackDef, PyStatusLine, PyThreadCounts,
    };
    use crate::sample::pyphase::Phase;
    use crate::sample::pystacks::PyStatus;
    use crate::sample::{GpuSample, GpuStatic, HostInfo, HostSample, ProcSample, ProcStart};

    fn header() -> Header {
        Header {
            schema_version: SCHEMA_VERSION,
            gpufeed_version: Some("0.1.0".into()),
            start_time: "2026-12-02T12:00:00Z".into(),
            start_unix_us: 1_700_000_000_000_000,
            interval_s: 0.1,
            host: HostInfo {
                cpu_count: 2,
                ..Default::default()
            },
            driver: None,
            gpus: vec![GpuStatic {
                index: 0,
                name: Some("Fake".into()),
                ..Default::default()
            }],
            gpu_error: None,
            command: Some(vec!["python".into(), "train.py".into()]),
            pid: Some(42),
            py_rate_hz: Some(100.0),
        }
    }

    fn lines() -> Vec<Line> {
        vec![
            Line::Gpu(GpuSample {
                index: 0,
                t_s: 0.1,
                util_samples: Some(vec![[0.05, 80.0], [0.1, 10.0]]),
                mem_used_bytes: Some(1 << 30),
                ..Default::default()
            }),
            Line::ProcStart(ProcStart {
                t_s: 0.1,
                pid: 42,
                ppid: 1,
                cmd: Some("python train.py".into()),
                comm: Some("python".into()),
            }),
            Line::Procs(ProcsLine {
                t_s: 0.2,
                procs: vec![ProcSample {
                    pid: 42,
                    cpu_pct: Some(99.0),
                    state: Some('R'),
                    ..Default::default()
                }],
            }),
            Line::PyStatus(PyStatusLine {
                t_s: 0.2,
                pid: 42,
                status: PyStatus::Ok,
                detail: Some("3.11.2".into()),
                rank: None,
            }),
            Line::PyFrame(PyFrameDef {
                id: 0,
                name: "main".into(),
                file: "train.py".into(),
                line: 3,
                src: Some("x = next(it)".into()),
            }),
            Line::PyStack(PyStackDef {
                id: 0,
                frames: vec![0],
            }),
            Line::PySamples(PySamples {
                t_s: 0.25,
                dt_s: 0.25,
                pid: 42,
                ticks: 25,
                threads: vec![PyThreadCounts {
                    tid: 42,
                    name: Some("MainThread".into()),
                    stacks: vec![[0, 25, 20]],
                    phases: [(Phase::DataWait, 25)].into_iter().collect(),
                    cpu_ns: None,
                    runq_ns: None,
                    gil_held: 0,
                    gil_free: Vec::new(),
                }],
            }),
            Line::End(End {
                t_s: 0.3,
                exit_code: Some(0),
                signal: None,
                reason: Some(crate::sample::event::EndReason::JobExited),
                steps_dropped: None,
                steps_flooded: None,
                steps_unfollowed: None,
                ranks_unfollowed: None,
            }),
        ]
    }

    fn write(h: &Header, ls: &[Line]) -> String {
        let mut s = header_line(h);
        s.push('\n');
        for l in ls {
            s.push_str(&serde_json::to_string(l).unwrap());
            s.push('\n');
        }
        s
    }

    fn read(text: &str) -> Result<(Header, ReadStats, Vec<Line>), ReadError> {
        read_bytes(text.as_bytes())
    }

    fn read_bytes(b: &[u8]) -> Result<(Header, ReadStats, Vec<Line>), ReadError> {
        let mut got = Collect::default();
        let (h, st) = read_from(Path::new("t.ndjson"), b, &mut got)?;
        Ok((h, st, got.0))
    }

    #[test]
    fn storage_rounding_keeps_meaningful_digits_only() {
        let mut l = Line::Host(HostSample {
            t_s: 0.100289128,
            cpu_pct: vec![33.333333333333336, 100.0],
            psi_io_some_pct: Some(4.993686799762249),
            disks: vec![crate::sample::DiskRate {
                device: "vda".into(),
                read_bytes_per_s: 6198224.585401869,
                write_bytes_per_s: 0.0,
            }],
            ..Default::default()
        });
        l.round_for_storage();
        let s = serde_json::to_string(&l).unwrap();
        assert!(s.contains("\"t_s\":0.100289,"), "{s}");
        assert!(s.contains("\"cpu_pct\":[33.33,100.0]"), "{s}");
        assert!(s.contains("\"psi_io_some_pct\":4.99,"), "{s}");
        assert!(s.contains("\"read_bytes_per_s\":6198225.0"), "{s}");
    }

    #[test]
    fn round_trip_keeps_everything() {
        let text = write(&header(), &lines());
        assert!(text.starts_with("{\"type\":\"header\",\"schema_version\":2"));
        let (h, st, got) = read(&text).unwrap();
        assert_eq!(h, header());
        assert_eq!(got, lines());
        assert_eq!(
            st,
            ReadStats {
                lines: 8,
                ..Default::default()
            }
        );
    }

    #[test]
    fn a_line_cut_mid_way_is_dropped_and_reported() {
        let text = write(&header(), &lines()[..3]);
        let cut = &text[..text.len() - 20];
        let (_, st, got) = read(cut).unwrap();
        assert_eq!(got.len(), 2);
        let _ = &lines()[3..];
        assert!(st.truncated && st.unfinished);
        assert_eq!(st.malformed, 0);
    }

    #[test]
    fn unknown_line_types_and_fields_are_ignored() {
        let mut text = write(&header(), &[]);
        text.push_str("{\"type\":\"from_the_future\",\"x\":1}\n");
        text.push_str("{\"type\":\"proc_exit\",\"t_s\":1.0,\"pid\":7,\"new_field\":true}\n");
        let (_, st, got) = read(&text).unwrap();
        assert_eq!(
            got,
            vec![Line::Unknown, Line::ProcExit { t_s: 1.0, pid: 7 }]
        );
        assert_eq!(st.malformed, 0);
    }

    #[test]
    fn garbage_in_the_middle_is_counted_not_fatal() {
        let mut text = write(&header(), &lines()[..1]);
        text.push_str("not json\n");
        text.push_str(&serde_json::to_string(lines().last().unwrap()).unwrap());
        text.push('\n');
        let (_, st, got) = read(&text).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(st.malformed, 1);
        assert!(!st.truncated && !st.unfinished);
    }

    #[test]
    fn bad_files_get_clear_errors() {
        assert!(matches!(read(""), Err(ReadError::Empty { .. })));
        assert!(matches!(
            read("hello\n"),
            Err(ReadError::NotARecording { .. })
        ));
        assert!(matches!(
            read("{\"a\":1}\n"),
            Err(ReadError::NotARecording { .. })
        ));
        let newer = header_line(&header()).replace("\"schema_version\":2", "\"schema_version\":99");
        let e = read(&newer).unwrap_err();
        assert!(matches!(e, ReadError::TooNew { found: 99, .. }), "{e}");
        assert!(e.to_string().contains("upgrade gpufeed"));
    }

    proptest::proptest! {
        /// Whatever follows a valid header — garbage, or a valid recording cut at any byte —
        /// reading never panics, and a cut recording yields a prefix of its lines.
        #[test]
        fn reading_never_panics_and_cuts_keep_a_prefix(garbage in proptest::collection::vec(proptest::num::u8::ANY, 0..400), cut in 0usize..2000) {
            let mut text = header_line(&header()).into_bytes();
            text.push(b'\n');
            text.extend_from_slice(&garbage);
            let _ = read_bytes(&text[..]);

            let full = write(&header(), &lines());
            let cut = cut.min(full.len());
            if let Ok((_, st, got)) = read_bytes(&full.as_bytes()[..cut]) {
                proptest::prop_assert_eq!(&got[..], &lines()[..got.len()]);
                proptest::prop_assert_eq!(st.malformed, 0);
            }
        }
    }

    #[test]
    fn missing_optional_header_fields_default() {
        let text = "{\"type\":\"header\",\"schema_version\":1,\"start_time\":\"x\",\"start_unix_us\":0,\"interval_s\":0.1,\"host\":{\"cpu_count\":1,\"hostname\":null,\"kernel\":null,\"cpus_allowed\":null,\"mem_total_bytes\":null,\"clock_ticks_per_s\":null}}\n";
        let (h, _, _) = read(text).unwrap();
        assert!(h.gpus.is_empty() && h.command.is_none());
    }
}
