//! Chrome trace JSON (loads in ui.perfetto.dev and chrome://tracing) with counter tracks from a
//! recording, optionally merged with a Kineto trace on one time base.
//!
//! Time base: microseconds since the Unix epoch. A recording's `t_s` is shifted by its header's
//! `start_unix_us`; a Kineto trace's `ts` is kept when it is already absolute, or shifted by its
//! `baseTimeNanoseconds` when it is relative to that. Tracks: one process per GPU (utilization,
//! memory, PCIe), one for the host (CPU per core), and a `cpu_pct` counter on each job process's
//! own pid, so in a merged view a DataLoader worker's CPU sits next to its operators.

use crate::record::format::{read_recording, Line, ReadError};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

/// Synthetic pids of gpufeed's own tracks: above any OS pid (at most 2^22), below 2^31 (trace
/// viewers read pids as 32-bit signed integers), away from Kineto's device ids.
pub const GPU_PID_BASE: u64 = 2_000_000_000;
pub const HOST_PID: u64 = 2_100_000_000;

#[derive(Debug, thiserror::Error)]
pub enum PerfettoError {
    #[error(transparent)]
    Recording(#[from] ReadError),
    #[error("cannot read the trace {path}: {detail}")]
    Trace { path: String, detail: String },
    #[error("cannot write {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
}

/// What an export wrote.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ExportStats {
    pub counter_events: u64,
    pub trace_events: u64,
    /// First and last time (Unix µs) of the recording's counters and of the merged trace's events.
    pub recording_span_us: Option<(f64, f64)>,
    pub trace_span_us: Option<(f64, f64)>,
    /// What the trace reader warned about in the merged trace (a cut `.gz`, skipped events).
    pub trace_warnings: Vec<String>,
}

fn widen(span: &mut Option<(f64, f64)>, a: f64, b: f64) {
    *span = Some(match *span {
        None => (a, b),
        Some((x, y)) => (x.min(a), y.max(b)),
    });
}

impl ExportStats {
    /// A warning when the merged trace and the recording do not overlap in time (another run, or a
    /// trace whose clock is not the Unix epoch): their tracks would sit apart in Perfetto.
    pub fn overlap_warning(&self) -> Option<String> {
        let ((r0, r1), (t0, t1)) = (self.recording_span_us?, self.trace_span_us?);
        if t0 <= r1 && r0 <= t1 {
            return None;
        }
        let gap_s = if t1 < r0 { r0 - t1 } else { t0 - r1 } / 1e6;
        Some(format!(
            "the trace and the recording do not overlap in time: the trace {} the recording by {}; \
             were they taken during the same run? (Kineto traces without baseTimeNanoseconds may use another clock)",
            if t1 < r0 { "ends before" } else { "starts after" },
            humantime::format_duration(std::time::Duration::from_secs_f64(if gap_s.is_finite() { gap_s.round().clamp(0.0, 1e12) } else { 0.0 }))
        ))
    }
}

/// Counter and metadata events from a recording, in Unix µs.
pub fn recording_events(path: &Path) -> Result<Vec<Value>, ReadError> {
    let mut out = Vec::new();
    let mut named: BTreeMap<u64, String> = BTreeMap::new();
    let mut prev_pcie: BTreeMap<u32, (f64, Option<u64>, Option<u64>)> = BTreeMap::new();
    let mut t0 = 0.0f64;
    let mut first = true;
    read_recording(path, |h, l| {
        if first {
            first = false;
            t0 = h.start_unix_us as f64;
            for g in &h.gpus {
                let name = format!(
                    "GPU {} {} (gpufeed)",
                    g.index,
                    g.name.as_deref().unwrap_or("")
                );
                named.insert(GPU_PID_BASE + g.index as u64, name);
            }
            named.insert(
                HOST_PID,
                format!(
                    "host {} CPU (gpufeed)",
                    h.host.hostname.as_deref().unwrap_or("")
                ),
            );
        }
        let ts = |t: f64| t0 + t * 1e6;
        let counter = |pid: u64, name: &str, t: f64, args: Value| json!({"ph": "C", "pid": pid, "tid": 0, "name": name, "ts": ts(t), "args": args});
        match l {
            Line::Gpu(g) => {
                let pid = GPU_PID_BASE + g.index as u64;
                named
                    .entry(pid)
                    .or_insert_with(|| format!("GPU {} (gpufeed)", g.index));
                match &g.util_samples {
                    Some(v) => {
                        for &[t, u] in v {
                            out.push(counter(pid, "utilization %", t, json!({"util_pct": u})));
                        }
                    }
                    None => {
                        if let Some(u) = g.util_pct {
                            out.push(counter(pid, "utilization %", g.t_s, json!({"util_pct": u})));
                        }
                    }
                }
                if let Some(m) = g.mem_used_bytes {
                    out.push(counter(
                        pid,
                        "memory used GiB",
                        g.t_s,
                        json!({"mem_used_gib": m as f64 / (1u64 << 30) as f64}),
                    ));
                }
                let mut rates = (g.pcie_rx_bytes_per_s, g.pcie_tx_bytes_per_s);
                if let Some((pt, prx, ptx)) = prev_pcie.get(&g.index).copied() {
                    let dt = g.t_s - pt;
                    if dt > 0.0 {
                        if let (Some(a), Some(b)) = (prx, g.pcie_rx_bytes) {
                            rates.0 = Some(b.saturating_sub(a) as f64 / dt);
                        }
                        if let (Some(a), Some(b)) = (ptx, g.pcie_tx_bytes) {
                            rates.1 = Some(b.saturating_sub(a) as f64 / dt);
                        }
                    }
                }
                prev_pcie.insert(g.index, (g.t_s, g.pcie_rx_bytes, g.pcie_tx_bytes));
                if rates.0.is_some() || rates.1.is_some() {
                    let mut a = serde_json::Map::new();
                    if let Some(r) = rates.0 {
                        a.insert("rx_gb_per_s".into(), json!(r / 1e9));
                    }
                    if let Some(r) = rates.1 {
                        a.insert("tx_gb_per_s".into(), json!(r / 1e9));
                    }
                    out.push(counter(pid, "PCIe GB/s", g.t_s, Value::Object(a)));
                }
            }
            Line::Host(hs) => {
                for (i, v) in hs.cpu_pct.iter().enumerate() {
                    out.push(counter(
                        HOST_PID,
                        &format!("cpu{i} %"),
                        hs.t_s,
                        json!({"busy_pct": v}),
                    ));
                }
            }
            Line::ProcStart(p) => {
                named.entry(p.pid as u64).or_insert_with(|| {
                    format!("{} {}", p.comm.as_deref().unwrap_or("process"), p.pid)
                });
            }
            Line::Procs { t_s, procs } => {
                for p in &procs {
                    if let Some(c) = p.cpu_pct {
                        out.push(counter(
                            p.pid as u64,
                            "CPU % (gpufeed)",
                            t_s,
                            json!({"cpu_pct": c}),
                        ));
                    }
                }
            }
            _ => {}
        }
    })?;
    for (pid, name) in named {
        out.push(json!({"ph": "M", "pid": pid, "tid": 0, "name": "process_name", "args": {"name": name}}));
    }
    Ok(out)
}

/// Writes the export. With `merge`, the Kineto trace's events come first, on the same time base.
pub fn export(
    recording: &Path,
    merge: Option<&Path>,
    out: &Path,
) -> Result<ExportStats, PerfettoError> {
    let counters = recording_events(recording)?;
    let mut stats = ExportStats {
        counter_events: counters.iter().filter(|e| e["ph"] == "C").count() as u64,
        ..Default::default()
    };
    for e in counters.iter().filter(|e| e["ph"] == "C") {
        if let Some(ts) = e.get("ts").and_then(Value::as_f64) {
            widen(&mut stats.recording_span_us, ts, ts);
        }
    }
    // The trace goes through analyze's reader (gzip, a cut .gz, a BOM, non-UTF-8 names; a
    // trace without events refused as analyze refuses it), streamed: never held whole.
    let mut kineto = None;
    if let Some(t) = merge {
        let terr = |e: crate::trace::TraceError| PerfettoError::Trace {
            path: t.display().to_string(),
            detail: e.to_string(),
        };
        let trace = crate::trace::merge::MergeTrace::open(t).map_err(terr)?;
        let head = trace.head().map_err(terr)?;
        kineto = Some((trace, head));
    }
    let werr = |source: std::io::Error| PerfettoError::Write {
        path: out.display().to_string(),
        source,
    };
    let mut trace_error = None;
    // Written beside `out` under a temporary name, then renamed: a failed export leaves `out` as
    // it was, and a symlink at `out` is replaced, not followed.
    crate::outfile::write_atomic_with(out, |w| {
        w.write_all(b"{\"displayTimeUnit\":\"ms\",")?;
        let mut first = true;
        if let Some((trace, head)) = &kineto {
            // ts relative to baseTimeNanoseconds (newer Kineto) become absolute Unix µs.
            let shift_us = head.shift_us;
            for (key, json) in &head.fields {
                serde_json::to_writer(&mut *w, key).map_err(std::io::Error::from)?;
                w.write_all(b":")?;
                w.write_all(json.as_bytes())?;
                w.write_all(b",")?;
            }
            w.write_all(b"\"traceEvents\":[")?;
            let copied = trace.events(|e| {
                if let Some(ts) = e.ts {
                    if matches!(e.ph, b'X' | b'B' | b'i') {
                        let dur = e.dur.unwrap_or(0.0);
                        widen(&mut stats.trace_span_us, ts + shift_us, ts + shift_us + dur);
                    }
                }
                if !first {
                    w.write_all(b",\n")?;
                }
                first = false;
                match e.ts {
                    Some(ts) if shift_us != 0.0 => {
                        let mut v: Value =
                            serde_json::from_str(e.json).map_err(std::io::Error::from)?;
                        v["ts"] = json!(ts + shift_us);
                        serde_json::to_writer(&mut *w, &v).map_err(std::io::Error::from)?;
                    }
                    _ => w.write_all(e.json.as_bytes())?,
                }
                Ok(())
            });
            match copied {
                Ok((n, st, write_error)) => {
                    if let Some(e) = write_error {
                        return Err(e);
                    }
                    stats.trace_events = n;
                    stats.trace_warnings = st.warnings;
                }
                Err(e) => {
                    trace_error = Some(e);
                    return Err(std::io::Error::other("the trace could not be read again"));
                }
            }
        } else {
            w.write_all(b"\"traceEvents\":[")?;
        }
        for e in &counters {
            if !first {
                w.write_all(b",\n")?;
            }
            first = false;
            serde_json::to_writer(&mut *w, e).map_err(std::io::Error::from)?;
        }
        w.write_all(b"]}\n")?;
        Ok(())
    })
    .map_err(|e| match trace_error.take() {
        Some(t) => PerfettoError::Trace {
            path: merge.map(|p| p.display().to_string()).unwrap_or_default(),
            detail: t.to_string(),
        },
        None => werr(e),
    })?;
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::ExportStats;

    #[test]
    fn warns_only_when_trace_and_recording_are_apart() {
        let mut s = ExportStats {
            recording_span_us: Some((1_000_000.0, 61_000_000.0)),
            trace_span_us: Some((30_000_000.0, 90_000_000.0)),
            ..Default::default()
        };
        assert!(s.overlap_warning().is_none());
        s.trace_span_us = Some((3_700_000_000.0, 3_800_000_000.0));
        let w = s.overlap_warning().unwrap();
        assert!(w.contains("starts after the recording by 1h"), "{w}");
        s.trace_span_us = None;
        assert!(s.overlap_warning().is_none());
    }
}
