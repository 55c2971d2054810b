//! A specialised parser for the three line types that make up almost all of a recording
//! (`gpu`, `host`, `procs`): a single pass over the bytes, next to no allocation per line (buffers
//! are reused), numbers parsed in place. Anything it does not expect (escapes in keys or names,
//! exponents it cannot do exactly, a missing required field) makes it give up on that line, and
//! the reader ([`super::reader`]) falls back to serde: the result is the same either way, field for
//! field (the tests build every struct without `..Default` so that a new field breaks them until
//! it is read here too).
//!
//! Each type is tried twice. First in the recorder's own layout (`*_in_order`): keys in serde's
//! field order, absent ones left out, no whitespace, each `,"key":` stepped over with one
//! constant-length comparison. Then, if the line is laid out any other way, by walking its keys
//! against a table (`*_keyed`). Diagnose of a 24 h × 8 GPU recording took 12-16 % less wall time
//! with the first path (interleaved runs on 2 cores).

use crate::json::Cursor;
use crate::sample::{DiskRate, GpuProcess, GpuSample, HostSample, ProcSample};

/// Keys in the order the recorder writes them (serde's field order).
const GPU_KEYS: [&[u8]; 18] = [
    b"type",
    b"index",
    b"t_s",
    b"util_samples",
    b"util_pct",
    b"mem_util_pct",
    b"mem_used_bytes",
    b"sm_clock_mhz",
    b"power_w",
    b"temperature_c",
    b"pcie_rx_bytes",
    b"pcie_tx_bytes",
    b"pcie_rx_bytes_per_s",
    b"pcie_tx_bytes_per_s",
    b"pcie_gen",
    b"pcie_width",
    b"throttle_reasons",
    b"processes",
];
const GPU_PROC_KEYS: [&[u8]; 3] = [b"pid", b"used_memory_bytes", b"sm_util_pct"];
const HOST_KEYS: [&[u8]; 16] = [
    b"type",
    b"t_s",
    b"cpu_pct",
    b"cpu_total_pct",
    b"iowait_pct",
    b"mem_total_bytes",
    b"mem_available_bytes",
    b"mem_cached_bytes",
    b"swap_total_bytes",
    b"swap_free_bytes",
    b"psi_cpu_some_pct",
    b"psi_io_some_pct",
    b"psi_io_full_pct",
    b"psi_mem_some_pct",
    b"psi_mem_full_pct",
    b"disks",
];
const DISK_KEYS: [&[u8]; 3] = [b"device", b"read_bytes_per_s", b"write_bytes_per_s"];
const PROCS_KEYS: [&[u8]; 3] = [b"type", b"t_s", b"procs"];
const PROC_KEYS: [&[u8]; 9] = [
    b"pid",
    b"cpu_pct",
    b"rss_bytes",
    b"read_bytes",
    b"write_bytes",
    b"state",
    b"threads",
    b"voluntary_ctxt_switches",
    b"nonvoluntary_ctxt_switches",
];

/// The nullable fields: `null` or a value.
trait Nullable {
    fn opt_f64(&mut self) -> Option<Option<f64>>;
    fn opt_u64(&mut self) -> Option<Option<u64>>;
    fn opt_u32(&mut self) -> Option<Option<u32>>;
}

/// `null` (`Some(None)`), else the value `read` reads.
#[inline]
fn nullable<'a, T>(
    c: &mut Cursor<'a>,
    read: impl FnOnce(&mut Cursor<'a>) -> Option<T>,
) -> Option<Option<T>> {
    if c.null() {
        Some(None)
    } else {
        read(c).map(Some)
    }
}

impl Nullable for Cursor<'_> {
    #[inline]
    fn opt_f64(&mut self) -> Option<Option<f64>> {
        nullable(self, Cursor::f64)
    }

    #[inline]
    fn opt_u64(&mut self) -> Option<Option<u64>> {
        nullable(self, Cursor::u64)
    }

    #[inline]
    fn opt_u32(&mut self) -> Option<Option<u32>> {
        match self.opt_u64()? {
            Some(v) => u32::try_from(v).ok().map(Some),
            None => Some(None),
        }
    }
}

/// Parses a `gpu` line into `out` (its buffers are reused). `None`: use serde for this line.
pub(crate) fn gpu(line: &[u8], out: &mut GpuSample) -> Option<()> {
    let mut samples = out.util_samples.take().unwrap_or_default();
    samples.clear();
    *out = GpuSample::default();
    let has_samples = match gpu_in_order(line, out, &mut samples) {
        Some(has) => has,
        None => {
            samples.clear();
            *out = GpuSample::default();
            gpu_keyed(line, out, &mut samples)?
        }
    };
    out.util_samples = has_samples.then_some(samples);
    Some(())
}

/// A `gpu` line as the recorder writes it: the keys of [`GPU_KEYS`] in that order (absent ones
/// left out), no whitespace. Each key is stepped over with one constant-length comparison
/// ([`Cursor::lit`]); anything else (another order, an unknown key, whitespace) is `None`, and
/// [`gpu_keyed`] reads the line instead. Some(whether `util_samples` was given).
fn gpu_in_order(line: &[u8], out: &mut GpuSample, samples: &mut Vec<[f64; 2]>) -> Option<bool> {
    let mut c = Cursor::new(line);
    c.lit(b"{\"type\":\"gpu\",\"index\":").then_some(())?;
    out.index = u32::try_from(c.u64()?).ok()?;
    c.lit(b",\"t_s\":").then_some(())?;
    out.t_s = c.f64()?;
    let mut has_samples = false;
    if c.lit(b",\"util_samples\":") && !c.null() {
        util_samples(&mut c, samples)?;
        has_samples = true;
    }
    if c.lit(b",\"util_pct\":") {
        out.util_pct = c.opt_f64()?;
    }
    if c.lit(b",\"mem_util_pct\":") {
        out.mem_util_pct = c.opt_f64()?;
    }
    if c.lit(b",\"mem_used_bytes\":") {
        out.mem_used_bytes = c.opt_u64()?;
    }
    if c.lit(b",\"sm_clock_mhz\":") {
        out.sm_clock_mhz = c.opt_u32()?;
    }
    if c.lit(b",\"power_w\":") {
        out.power_w = c.opt_f64()?;
    }
    if c.lit(b",\"temperature_c\":") {
        out.temperature_c = c.opt_u32()?;
    }
    if c.lit(b",\"pcie_rx_bytes\":") {
        out.pcie_rx_bytes = c.opt_u64()?;
    }
    if c.lit(b",\"pcie_tx_bytes\":") {
        out.pcie_tx_bytes = c.opt_u64()?;
    }
    if c.lit(b",\"pcie_rx_bytes_per_s\":") {
        out.pcie_rx_bytes_per_s = c.opt_f64()?;
    }
    if c.lit(b",\"pcie_tx_bytes_per_s\":") {
        out.pcie_tx_bytes_per_s = c.opt_f64()?;
    }
    if c.lit(b",\"pcie_gen\":") {
        out.pcie_gen = c.opt_u32()?;
    }
    if c.lit(b",\"pcie_width\":") {
        out.pcie_width = c.opt_u32()?;
    }
    if c.lit(b",\"throttle_reasons\":") {
        out.throttle_reasons = c.opt_u64()?;
    }
    if c.lit(b",\"processes\":") && !c.null() {
        out.processes = Some(gpu_processes(&mut c)?);
    }
    c.lit(b"}").then_some(())?;
    c.end()?;
    Some(has_samples)
}

/// A `gpu` line with its keys in any order, unknown ones skipped. Some(whether `util_samples`
/// was given).
fn gpu_keyed(line: &[u8], out: &mut GpuSample, samples: &mut Vec<[f64; 2]>) -> Option<bool> {
    let mut c = Cursor::new(line);
    let (mut has_index, mut has_t, mut has_samples) = (false, false, false);
    c.keyed(&GPU_KEYS, |k, c| {
        match k {
            0 => {
                if c.plain_str()? != b"gpu" {
                    return None;
                }
            }
            1 => {
                out.index = u32::try_from(c.u64()?).ok()?;
                has_index = true;
            }
            2 => {
                out.t_s = c.f64()?;
                has_t = true;
            }
            3 => {
                if !c.null() {
                    util_samples(c, samples)?;
                    has_samples = true;
                }
            }
            4 => out.util_pct = c.opt_f64()?,
            5 => out.mem_util_pct = c.opt_f64()?,
            6 => out.mem_used_bytes = c.opt_u64()?,
            7 => out.sm_clock_mhz = c.opt_u32()?,
            8 => out.power_w = c.opt_f64()?,
            9 => out.temperature_c = c.opt_u32()?,
            10 => out.pcie_rx_bytes = c.opt_u64()?,
            11 => out.pcie_tx_bytes = c.opt_u64()?,
            12 => out.pcie_rx_bytes_per_s = c.opt_f64()?,
            13 => out.pcie_tx_bytes_per_s = c.opt_f64()?,
            14 => out.pcie_gen = c.opt_u32()?,
            15 => out.pcie_width = c.opt_u32()?,
            16 => out.throttle_reasons = c.opt_u64()?,
            17 => {
                if !c.null() {
                    out.processes = Some(gpu_processes(c)?);
                }
            }
            _ => return Some(false),
        }
        Some(true)
    })?;
    c.end()?;
    (has_index && has_t).then_some(has_samples)
}

/// `util_samples`' value (not null): `[[t, v], ...]`, appended to `samples`.
fn util_samples(c: &mut Cursor, samples: &mut Vec<[f64; 2]>) -> Option<()> {
    c.array(|c| {
        c.eat(b'[')?;
        let t = c.f64()?;
        c.eat(b',')?;
        let v = c.f64()?;
        c.eat(b']')?;
        samples.push([t, v]);
        Some(())
    })
}

/// `processes`' value (not null): an array of objects with a `pid`.
fn gpu_processes(c: &mut Cursor) -> Option<Vec<GpuProcess>> {
    let mut v = Vec::new();
    c.array(|c| {
        let mut p = GpuProcess {
            pid: 0,
            used_memory_bytes: None,
            sm_util_pct: None,
        };
        let mut has_pid = false;
        c.keyed(&GPU_PROC_KEYS, |k, c| {
            match k {
                0 => {
                    p.pid = u32::try_from(c.u64()?).ok()?;
                    has_pid = true;
                }
                1 => p.used_memory_bytes = c.opt_u64()?,
                2 => p.sm_util_pct = c.opt_u32()?,
                _ => return Some(false),
            }
            Some(true)
        })?;
        has_pid.then_some(())?;
        v.push(p);
        Some(())
    })?;
    Some(v)
}

/// Parses a `host` line into `out` (buffers reused).
pub(crate) fn host(line: &[u8], out: &mut HostSample) -> Option<()> {
    let mut cpus = std::mem::take(&mut out.cpu_pct);
    let mut disks = std::mem::take(&mut out.disks);
    cpus.clear();
    disks.clear();
    *out = HostSample::default();
    if host_in_order(line, out, &mut cpus, &mut disks).is_none() {
        cpus.clear();
        disks.clear();
        *out = HostSample::default();
        host_keyed(line, out, &mut cpus, &mut disks)?;
    }
    out.cpu_pct = cpus;
    out.disks = disks;
    Some(())
}

/// A `host` line as the recorder writes it (see [`gpu_in_order`]).
fn host_in_order(
    line: &[u8],
    out: &mut HostSample,
    cpus: &mut Vec<f64>,
    disks: &mut Vec<DiskRate>,
) -> Option<()> {
    let mut c = Cursor::new(line);
    c.lit(b"{\"type\":\"host\",\"t_s\":").then_some(())?;
    out.t_s = c.f64()?;
    c.lit(b",\"cpu_pct\":").then_some(())?;
    c.array(|c| {
        cpus.push(c.f64()?);
        Some(())
    })?;
    if c.lit(b",\"cpu_total_pct\":") {
        out.cpu_total_pct = c.opt_f64()?;
    }
    if c.lit(b",\"iowait_pct\":") {
        out.iowait_pct = c.opt_f64()?;
    }
    if c.lit(b",\"mem_total_bytes\":") {
        out.mem_total_bytes = c.opt_u64()?;
    }
    if c.lit(b",\"mem_available_bytes\":") {
        out.mem_available_bytes = c.opt_u64()?;
    }
    if c.lit(b",\"mem_cached_bytes\":") {
        out.mem_cached_bytes = c.opt_u64()?;
    }
    if c.lit(b",\"swap_total_bytes\":") {
        out.swap_total_bytes = c.opt_u64()?;
    }
    if c.lit(b",\"swap_free_bytes\":") {
        out.swap_free_bytes = c.opt_u64()?;
    }
    if c.lit(b",\"psi_cpu_some_pct\":") {
        out.psi_cpu_some_pct = c.opt_f64()?;
    }
    if c.lit(b",\"psi_io_some_pct\":") {
        out.psi_io_some_pct = c.opt_f64()?;
    }
    if c.lit(b",\"psi_io_full_pct\":") {
        out.psi_io_full_pct = c.opt_f64()?;
    }
    if c.lit(b",\"psi_mem_some_pct\":") {
        out.psi_mem_some_pct = c.opt_f64()?;
    }
    if c.lit(b",\"psi_mem_full_pct\":") {
        out.psi_mem_full_pct = c.opt_f64()?;
    }
    c.lit(b",\"disks\":").then_some(())?;
    c.array(|c| {
        disks.push(disk(c)?);
        Some(())
    })?;
    c.lit(b"}").then_some(())?;
    c.end()
}

/// A `host` line with its keys in any order, unknown ones skipped.
fn host_keyed(
    line: &[u8],
    out: &mut HostSample,
    cpus: &mut Vec<f64>,
    disks: &mut Vec<DiskRate>,
) -> Option<()> {
    let mut c = Cursor::new(line);
    let (mut has_t, mut has_cpu, mut has_disks) = (false, false, false);
    c.keyed(&HOST_KEYS, |k, c| {
        match k {
            0 => {
                if c.plain_str()? != b"host" {
                    return None;
                }
            }
            1 => {
                out.t_s = c.f64()?;
                has_t = true;
            }
            2 => {
                c.array(|c| {
                    cpus.push(c.f64()?);
                    Some(())
                })?;
                has_cpu = true;
            }
            3 => out.cpu_total_pct = c.opt_f64()?,
            4 => out.iowait_pct = c.opt_f64()?,
            5 => out.mem_total_bytes = c.opt_u64()?,
            6 => out.mem_available_bytes = c.opt_u64()?,
            7 => out.mem_cached_bytes = c.opt_u64()?,
            8 => out.swap_total_bytes = c.opt_u64()?,
            9 => out.swap_free_bytes = c.opt_u64()?,
            10 => out.psi_cpu_some_pct = c.opt_f64()?,
            11 => out.psi_io_some_pct = c.opt_f64()?,
            12 => out.psi_io_full_pct = c.opt_f64()?,
            13 => out.psi_mem_some_pct = c.opt_f64()?,
            14 => out.psi_mem_full_pct = c.opt_f64()?,
            15 => {
                c.array(|c| {
                    disks.push(disk(c)?);
                    Some(())
                })?;
                has_disks = true;
            }
            _ => return Some(false),
        }
        Some(true)
    })?;
    c.end()?;
    (has_t && has_cpu && has_disks).then_some(())
}

/// One element of `disks`.
fn disk(c: &mut Cursor) -> Option<DiskRate> {
    let (mut r, mut w) = (None, None);
    let mut name = None;
    c.keyed(&DISK_KEYS, |k, c| {
        match k {
            0 => name = Some(std::str::from_utf8(c.plain_str()?).ok()?),
            1 => r = Some(c.f64()?),
            2 => w = Some(c.f64()?),
            _ => return Some(false),
        }
        Some(true)
    })?;
    Some(DiskRate {
        device: name?.to_string(),
        read_bytes_per_s: r?,
        write_bytes_per_s: w?,
    })
}

/// Parses a `procs` line: its time, and the samples into `out` (reused).
pub(crate) fn procs(line: &[u8], out: &mut Vec<ProcSample>) -> Option<f64> {
    out.clear();
    procs_in_order(line, out).or_else(|| {
        out.clear();
        procs_keyed(line, out)
    })
}

/// A `procs` line as the recorder writes it (see [`gpu_in_order`]).
fn procs_in_order(line: &[u8], out: &mut Vec<ProcSample>) -> Option<f64> {
    let mut c = Cursor::new(line);
    c.lit(b"{\"type\":\"procs\",\"t_s\":").then_some(())?;
    let t = c.f64()?;
    c.lit(b",\"procs\":").then_some(())?;
    c.array(|c| {
        out.push(proc_in_order(c)?);
        Some(())
    })?;
    c.lit(b"}").then_some(())?;
    c.end()?;
    Some(t)
}

/// One element of `procs` as the recorder writes it.
#[inline]
fn proc_in_order(c: &mut Cursor) -> Option<ProcSample> {
    let mut p = ProcSample::default();
    c.lit(b"{\"pid\":").then_some(())?;
    p.pid = u32::try_from(c.u64()?).ok()?;
    if c.lit(b",\"cpu_pct\":") {
        p.cpu_pct = c.opt_f64()?;
    }
    if c.lit(b",\"rss_bytes\":") {
        p.rss_bytes = c.opt_u64()?;
    }
    if c.lit(b",\"read_bytes\":") {
        p.read_bytes = c.opt_u64()?;
    }
    if c.lit(b",\"write_bytes\":") {
        p.write_bytes = c.opt_u64()?;
    }
    if c.lit(b",\"state\":") {
        p.state = state(c)?;
    }
    if c.lit(b",\"threads\":") {
        p.threads = c.opt_u32()?;
    }
    if c.lit(b",\"voluntary_ctxt_switches\":") {
        p.voluntary_ctxt_switches = c.opt_u64()?;
    }
    if c.lit(b",\"nonvoluntary_ctxt_switches\":") {
        p.nonvoluntary_ctxt_switches = c.opt_u64()?;
    }
    c.lit(b"}").then_some(p)
}

/// A process's `state`: null or a one-character ASCII string.
fn state(c: &mut Cursor) -> Option<Option<char>> {
    if c.null() {
        return Some(None);
    }
    match c.plain_str()? {
        [s] if s.is_ascii() => Some(Some(*s as char)),
        _ => None,
    }
}

/// A `procs` line with its keys in any order, unknown ones skipped.
fn procs_keyed(line: &[u8], out: &mut Vec<ProcSample>) -> Option<f64> {
    let mut c = Cursor::new(line);
    let mut t = None;
    let mut has_procs = false;
    c.keyed(&PROCS_KEYS, |k, c| {
        match k {
            0 => {
                if c.plain_str()? != b"procs" {
                    return None;
                }
            }
            1 => t = Some(c.f64()?),
            2 => {
                c.array(|c| {
                    let mut p = ProcSample::default();
                    let mut has_pid = false;
                    c.keyed(&PROC_KEYS, |k, c| {
                        match k {
                            0 => {
                                p.pid = u32::try_from(c.u64()?).ok()?;
                                has_pid = true;
                            }
                            1 => p.cpu_pct = c.opt_f64()?,
                            2 => p.rss_bytes = c.opt_u64()?,
                            3 => p.read_bytes = c.opt_u64()?,
                            4 => p.write_bytes = c.opt_u64()?,
                            5 => p.state = state(c)?,
                            6 => p.threads = c.opt_u32()?,
                            7 => p.voluntary_ctxt_switches = c.opt_u64()?,
                            8 => p.nonvoluntary_ctxt_switches = c.opt_u64()?,
                            _ => return Some(false),
                        }
                        Some(true)
                    })?;
                    has_pid.then_some(())?;
                    out.push(p);
                    Some(())
                })?;
                has_procs = true;
            }
            _ => return Some(false),
        }
        Some(true)
    })?;
    c.end()?;
    has_procs.then_some(())?;
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::event::Line;

    fn serde_gpu(l: &str) -> GpuSample {
        match serde_json::from_str::<Line>(l).unwrap() {
            Line::Gpu(g) => g,
            other => panic!("{other:?}"),
        }
    }

    /// A `gpu` line read by the in-order path alone and by the keyed path alone.
    fn gpu_paths(line: &str) -> [Option<GpuSample>; 2] {
        type Path = fn(&[u8], &mut GpuSample, &mut Vec<[f64; 2]>) -> Option<bool>;
        let read = |f: Path| {
            let (mut g, mut s) = (GpuSample::default(), Vec::new());
            let has = f(line.as_bytes(), &mut g, &mut s)?;
            g.util_samples = has.then_some(s);
            Some(g)
        };
        [read(gpu_in_order), read(gpu_keyed)]
    }

    /// A `host` line by each path alone.
    fn host_paths(line: &str) -> [Option<HostSample>; 2] {
        type Path = fn(&[u8], &mut HostSample, &mut Vec<f64>, &mut Vec<DiskRate>) -> Option<()>;
        let read = |f: Path| {
            let (mut h, mut c, mut d) = (HostSample::default(), Vec::new(), Vec::new());
            f(line.as_bytes(), &mut h, &mut c, &mut d)?;
            h.cpu_pct = c;
            h.disks = d;
            Some(h)
        };
        [read(host_in_order), read(host_keyed)]
    }

    /// A `procs` line by each path alone.
    fn procs_paths(line: &str) -> [Option<(f64, Vec<ProcSample>)>; 2] {
        let read = |f: fn(&[u8], &mut Vec<ProcSample>) -> Option<f64>| {
            let mut v = Vec::new();
            Some((f(line.as_bytes(), &mut v)?, v))
        };
        [read(procs_in_order), read(procs_keyed)]
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
        let line = serde_json::to_string(&Line::Procs {
            t_s: 3.0,
            procs: vec![p.clone()],
        })
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
        let Line::Procs { procs: want, .. } = serde_json::from_str::<Line>(p).unwrap() else {
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
                let line = serde_json::to_string(&Line::Procs { t_s: t, procs: ps.clone() }).unwrap();
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
