//! Chrome trace JSON (loads in ui.perfetto.dev and chrome://tracing) with counter tracks from a
//! recording, optionally merged with a Kineto trace on one time base.
//!
//! Time base: microseconds since the Unix epoch. A recording's `t_s` is shifted by its header's
//! `start_unix_us`; a Kineto trace's `ts` is kept when it is already absolute, or shifted by its
//! `baseTimeNanoseconds` when it is relative to that. Tracks: one process per GPU (utilization,
//! memory, PCIe), one for the host (CPU per core), and a `cpu_pct` counter on each job process's
//! own pid, so in a merged view a DataLoader worker's CPU sits next to its operators.

use crate::record::reader::Sink;
use crate::sample::event::{Header, Line};
use crate::sample::{GpuSample, HostSample, ProcSample};
use crate::trace::merge::{MergeHead, MergeTrace};
use crate::trace::TraceError;
use serde::ser::SerializeMap;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::Write;

/// Synthetic pids of gpufeed's own tracks: above any OS pid (at most 2^22), below 2^31 (trace
/// viewers read pids as 32-bit signed integers), away from Kineto's device ids.
pub(crate) const GPU_PID_BASE: u64 = 2_000_000_000;
pub(crate) const HOST_PID: u64 = 2_100_000_000;

/// What an export wrote.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct ExportStats {
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
    pub(crate) fn overlap_warning(&self) -> Option<String> {
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

/// A counter event's arguments: a few named numbers, written as a JSON object.
struct Args<'a>(&'a [(&'a str, f64)]);

impl Serialize for Args<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

/// A counter event, fields in the order serde_json's maps give them (sorted).
#[derive(Serialize)]
struct Counter<'a> {
    args: Args<'a>,
    name: &'a str,
    ph: &'static str,
    pid: u64,
    tid: u32,
    ts: f64,
}

/// Tracks (GPUs, processes) named one by one, and GPUs whose PCIe counters are followed; later
/// ones keep their events but not a name (a crafted recording of millions of distinct pids or GPU
/// indices must not grow memory without end).
pub(crate) const MAX_NAMED_TRACKS: usize = 10_000;

/// The recording's counter tracks, written event by event as the recording reader hands over its
/// lines: memory stays flat whatever the recording's length. [`CounterWriter::finish`] adds the
/// track names and closes the JSON.
pub(crate) struct CounterWriter<W: Write> {
    out: W,
    /// A comma is due before the next event.
    comma: bool,
    named: BTreeMap<u64, String>,
    prev_pcie: BTreeMap<u32, (f64, Option<u64>, Option<u64>)>,
    t0_us: f64,
    stats: ExportStats,
    err: Option<std::io::Error>,
}

impl<W: Write> CounterWriter<W> {
    /// Continues a `traceEvents` list already opened on `out`; `comma`: events were written
    /// before (a merged trace's).
    pub(crate) fn new(out: W, comma: bool, stats: ExportStats) -> Self {
        CounterWriter {
            out,
            comma,
            named: BTreeMap::new(),
            prev_pcie: BTreeMap::new(),
            t0_us: 0.0,
            stats,
            err: None,
        }
    }

    fn event(&mut self, e: &impl Serialize) {
        if self.err.is_some() {
            return;
        }
        let r = (|| {
            if self.comma {
                self.out.write_all(b",\n")?;
            }
            self.comma = true;
            serde_json::to_writer(&mut self.out, e).map_err(std::io::Error::from)
        })();
        if let Err(e) = r {
            self.err = Some(e);
        }
    }

    fn counter(&mut self, pid: u64, name: &str, t_s: f64, args: &[(&str, f64)]) {
        let ts = self.t0_us + t_s * 1e6;
        widen(&mut self.stats.recording_span_us, ts, ts);
        self.stats.counter_events += 1;
        self.event(&Counter {
            args: Args(args),
            name,
            ph: "C",
            pid,
            tid: 0,
            ts,
        });
    }

    /// Writes the track names, closes the list and the object; returns the writer and the counts.
    pub(crate) fn finish(mut self) -> std::io::Result<(W, ExportStats)> {
        for (pid, name) in std::mem::take(&mut self.named) {
            self.event(&json!({"ph": "M", "pid": pid, "tid": 0, "name": "process_name", "args": {"name": name}}));
        }
        if let Some(e) = self.err.take() {
            return Err(e);
        }
        self.out.write_all(b"]}\n")?;
        Ok((self.out, self.stats))
    }
}

impl<W: Write> Sink for CounterWriter<W> {
    fn header(&mut self, h: &Header) {
        self.t0_us = h.start_unix_us as f64;
        for g in &h.gpus {
            let name = format!(
                "GPU {} {} (gpufeed)",
                g.index,
                g.name.as_deref().unwrap_or("")
            );
            self.named.insert(GPU_PID_BASE + g.index as u64, name);
        }
        self.named.insert(
            HOST_PID,
            format!(
                "host {} CPU (gpufeed)",
                h.host.hostname.as_deref().unwrap_or("")
            ),
        );
    }

    fn gpu(&mut self, g: &GpuSample) {
        let pid = GPU_PID_BASE + g.index as u64;
        if self.named.len() < MAX_NAMED_TRACKS {
            self.named
                .entry(pid)
                .or_insert_with(|| format!("GPU {} (gpufeed)", g.index));
        }
        match &g.util_samples {
            Some(v) => {
                for &[t, u] in v {
                    self.counter(pid, "utilization %", t, &[("util_pct", u)]);
                }
            }
            None => {
                if let Some(u) = g.util_pct {
                    self.counter(pid, "utilization %", g.t_s, &[("util_pct", u)]);
                }
            }
        }
        if let Some(m) = g.mem_used_bytes {
            self.counter(
                pid,
                "memory used GiB",
                g.t_s,
                &[("mem_used_gib", m as f64 / (1u64 << 30) as f64)],
            );
        }
        let mut rates = (g.pcie_rx_bytes_per_s, g.pcie_tx_bytes_per_s);
        if let Some((pt, prx, ptx)) = self.prev_pcie.get(&g.index).copied() {
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
        if self.prev_pcie.len() < MAX_NAMED_TRACKS || self.prev_pcie.contains_key(&g.index) {
            self.prev_pcie
                .insert(g.index, (g.t_s, g.pcie_rx_bytes, g.pcie_tx_bytes));
        }
        let args: Vec<(&str, f64)> = [("rx_gb_per_s", rates.0), ("tx_gb_per_s", rates.1)]
            .into_iter()
            .filter_map(|(k, r)| r.map(|r| (k, r / 1e9)))
            .collect();
        if !args.is_empty() {
            self.counter(pid, "PCIe GB/s", g.t_s, &args);
        }
    }

    fn host(&mut self, hs: &HostSample) {
        for (i, v) in hs.cpu_pct.iter().enumerate() {
            self.counter(HOST_PID, &format!("cpu{i} %"), hs.t_s, &[("busy_pct", *v)]);
        }
    }

    fn procs(&mut self, t_s: f64, procs: &[ProcSample]) {
        for p in procs {
            if let Some(c) = p.cpu_pct {
                self.counter(p.pid as u64, "CPU % (gpufeed)", t_s, &[("cpu_pct", c)]);
            }
        }
    }

    fn line(&mut self, l: &Line) {
        if let Line::ProcStart(p) = l {
            if self.named.len() >= MAX_NAMED_TRACKS {
                return;
            }
            self.named
                .entry(p.pid as u64)
                .or_insert_with(|| format!("{} {}", p.comm.as_deref().unwrap_or("process"), p.pid));
        }
    }
}

/// Opens the trace object on `w` and writes a merged trace's events first (on the Unix-epoch time
/// base); leaves the `traceEvents` list open for [`CounterWriter`]. Returns whether events were
/// written, and the counts so far.
pub(crate) fn write_head(
    w: &mut impl Write,
    kineto: Option<(&MergeTrace, &MergeHead)>,
) -> std::io::Result<Result<(bool, ExportStats), TraceError>> {
    let mut stats = ExportStats::default();
    w.write_all(b"{\"displayTimeUnit\":\"ms\",")?;
    let mut first = true;
    if let Some((trace, head)) = kineto {
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
            Err(e) => return Ok(Err(e)),
        }
    } else {
        w.write_all(b"\"traceEvents\":[")?;
    }
    Ok(Ok((!first, stats)))
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
