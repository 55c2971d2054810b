//! gpufeed's series as a TensorBoard event file (`run --tensorboard`, `export --tensorboard`):
//! GPU busy and memory per GPU, data wait and steps/s from the step markers, the training loop's
//! phases from the Python stacks, the job's CPU (training process and its workers), and the
//! verdict with the top fix as a text summary.
//!
//! [`TbSeries`] is a consumer of the recording reader, fed in the diagnosis's one pass; it keeps
//! at most [`MAX_BUCKETS`] buckets per series (the width doubles as time grows), so memory stays
//! flat however long the recording. [`event_file`] turns it and the diagnosis into the file's
//! bytes; the command writes them.
//!
//! The x axis: where step markers exist, a point's step is the number of steps done by the end of
//! its bucket (the loss curve's step); buckets in which no step ended are folded into the next one.
//! Without markers the step is whole seconds since the recording started. Every point's wall time
//! is the real time of its bucket's end, so TensorBoard's "Relative" and "Wall" axes work too.

use super::fmt::md_prose;
use super::tfevents::{self, Event, EventKind, Value};
use crate::diagnose::evidence::Role;
use crate::diagnose::DiagnoseReport;
use crate::record::reader::Sink;
use crate::sample::event::{Header, Line};
use crate::sample::pyphase::Phase;
use crate::sample::{GpuSample, ProcSample};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Most buckets kept per series (TensorBoard itself keeps 1000 points of a scalar by default).
pub(crate) const MAX_BUCKETS: usize = 512;
/// The narrowest bucket: one second (the step axis without markers counts seconds).
const MIN_WIDTH_S: f64 = 1.0;

/// What a series holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    GpuBusy(u32),
    GpuMem(u32),
    /// Sums: steps ended, their seconds, seconds waited (and the seconds of the steps that
    /// reported a wait), samples (and the seconds of the steps that reported them).
    Steps,
    Span,
    Wait,
    WaitSpan,
    Items,
    ItemsSpan,
    /// A thread's Python stack samples in one phase (pid, tid, phase index).
    Phase(u32, u64, usize),
    /// A process's CPU, percent of one core (mean).
    ProcCpu(u32),
}

/// Time buckets shared by every series, so that one bucket index is one interval everywhere.
#[derive(Debug)]
struct Grid {
    width_s: f64,
    len: usize,
    series: BTreeMap<Key, Vec<(f64, u32)>>,
}

impl Default for Grid {
    fn default() -> Self {
        Grid {
            width_s: MIN_WIDTH_S,
            len: 0,
            series: BTreeMap::new(),
        }
    }
}

impl Grid {
    fn push(&mut self, key: Key, t_s: f64, v: f64) {
        if !t_s.is_finite() || !v.is_finite() || t_s < 0.0 {
            return;
        }
        let mut i = (t_s / self.width_s) as usize;
        while i >= MAX_BUCKETS {
            self.halve();
            i = (t_s / self.width_s) as usize;
        }
        self.len = self.len.max(i + 1);
        let s = self.series.entry(key).or_default();
        if s.len() <= i {
            s.resize(i + 1, (0.0, 0));
        }
        s[i].0 += v;
        s[i].1 += 1;
    }

    /// Doubles the width: pairs of buckets merge.
    fn halve(&mut self) {
        for s in self.series.values_mut() {
            let n = s.len().div_ceil(2);
            for k in 0..n {
                let (a, b) = (s[2 * k], s.get(2 * k + 1).copied().unwrap_or((0.0, 0)));
                s[k] = (a.0 + b.0, a.1 + b.1);
            }
            s.truncate(n);
        }
        self.len = self.len.div_ceil(2);
        self.width_s *= 2.0;
    }

    fn get(&self, key: Key, i: usize) -> (f64, u32) {
        self.series
            .get(&key)
            .and_then(|s| s.get(i))
            .copied()
            .unwrap_or((0.0, 0))
    }
}

/// gpufeed's series read back from a recording for TensorBoard.
#[derive(Debug, Default)]
pub(crate) struct TbSeries {
    grid: Grid,
    start_unix_s: f64,
    hostname: Option<String>,
    any_steps: bool,
}

impl TbSeries {
    /// The thread with the most training-loop samples (data wait to checkpoint), for when the
    /// diagnosis names no training thread (stacks without their frames).
    fn busiest_loop_thread(&self) -> Option<(u32, u64)> {
        let mut by_thread: BTreeMap<(u32, u64), f64> = BTreeMap::new();
        for (k, v) in &self.grid.series {
            if let Key::Phase(pid, tid, p) = *k {
                if p != Phase::Other.index() {
                    *by_thread.entry((pid, tid)).or_default() += v.iter().map(|x| x.0).sum::<f64>();
                }
            }
        }
        by_thread
            .into_iter()
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(k, _)| k)
    }
}

impl Sink for TbSeries {
    fn header(&mut self, h: &Header) {
        self.start_unix_s = h.start_unix_us as f64 / 1e6;
        self.hostname.clone_from(&h.host.hostname);
    }

    fn gpu(&mut self, g: &GpuSample) {
        match &g.util_samples {
            Some(v) if !v.is_empty() => v
                .iter()
                .for_each(|&[t, x]| self.grid.push(Key::GpuBusy(g.index), t, x)),
            _ => {
                if let Some(x) = g.util_pct {
                    self.grid.push(Key::GpuBusy(g.index), g.t_s, x)
                }
            }
        }
        if let Some(m) = g.mem_used_bytes {
            let gib = m as f64 / (1u64 << 30) as f64;
            self.grid.push(Key::GpuMem(g.index), g.t_s, gib);
        }
    }

    fn procs(&mut self, t_s: f64, procs: &[ProcSample]) {
        for p in procs {
            if let Some(c) = p.cpu_pct {
                self.grid.push(Key::ProcCpu(p.pid), t_s, c);
            }
        }
    }

    fn line(&mut self, l: &Line) {
        match l {
            Line::Steps(s) if s.steps > 0 => {
                self.any_steps = true;
                let t = s.t_s;
                self.grid.push(Key::Steps, t, s.steps as f64);
                self.grid.push(Key::Span, t, s.span_s);
                if let Some(w) = s.wait_s {
                    self.grid.push(Key::Wait, t, w);
                    self.grid.push(Key::WaitSpan, t, s.span_s);
                }
                if let Some(n) = s.items {
                    self.grid.push(Key::Items, t, n as f64);
                    self.grid.push(Key::ItemsSpan, t, s.span_s);
                }
            }
            Line::PySamples(p) => {
                for th in &p.threads {
                    // Only threads in the training loop; which one is *the* training thread is
                    // known at the end (the diagnosis's `python.main`).
                    if !th.phases.keys().any(|ph| *ph != Phase::Other) {
                        continue;
                    }
                    for (ph, n) in &th.phases {
                        let key = Key::Phase(p.pid, th.tid, ph.index());
                        self.grid.push(key, p.t_s, *n as f64);
                    }
                }
            }
            _ => {}
        }
    }
}

/// Sums of several series over a run of buckets (those folded into one point).
#[derive(Debug, Default, Clone)]
struct Acc(BTreeMap<Key, (f64, u32)>);

impl Acc {
    fn add(&mut self, grid: &Grid, i: usize) {
        for k in grid.series.keys() {
            let (s, n) = grid.get(*k, i);
            if n > 0 {
                let e = self.0.entry(*k).or_default();
                e.0 += s;
                e.1 += n;
            }
        }
    }

    fn sum(&self, k: Key) -> Option<f64> {
        self.0.get(&k).map(|v| v.0)
    }

    fn mean(&self, k: Key) -> Option<f64> {
        self.0
            .get(&k)
            .filter(|v| v.1 > 0)
            .map(|v| v.0 / f64::from(v.1))
    }

    fn ratio(&self, num: Key, den: Key) -> Option<f64> {
        let d = self.sum(den).filter(|d| *d > 0.0)?;
        Some(self.sum(num).unwrap_or(0.0) / d)
    }
}

/// The scalars of one point. `main`: the training thread; `roles`: each process's role.
fn values(acc: &Acc, main: Option<(u32, u64)>, roles: &BTreeMap<u32, Role>) -> Vec<Value> {
    let mut out = Vec::new();
    let mut put = |tag: String, v: Option<f64>| {
        if let Some(v) = v.filter(|v| v.is_finite()) {
            out.push(Value::Scalar {
                tag,
                value: v as f32,
            });
        }
    };
    for k in acc.0.keys() {
        match *k {
            Key::GpuBusy(i) => put(format!("gpufeed/gpu{i}/busy_pct"), acc.mean(*k)),
            Key::GpuMem(i) => put(format!("gpufeed/gpu{i}/mem_used_gib"), acc.mean(*k)),
            _ => {}
        }
    }
    put(
        "gpufeed/steps_per_s".into(),
        acc.ratio(Key::Steps, Key::Span),
    );
    put(
        "gpufeed/data_wait_pct".into(),
        acc.ratio(Key::Wait, Key::WaitSpan)
            .map(|r| (r * 100.0).clamp(0.0, 100.0)),
    );
    put(
        "gpufeed/samples_per_s".into(),
        acc.ratio(Key::Items, Key::ItemsSpan),
    );
    if let Some((pid, tid)) = main {
        let counts: Vec<f64> = (0..Phase::ALL.len())
            .map(|p| acc.sum(Key::Phase(pid, tid, p)).unwrap_or(0.0))
            .collect();
        let n: f64 = counts.iter().sum();
        if n > 0.0 {
            for (p, c) in Phase::ALL.iter().zip(counts) {
                put(
                    format!("gpufeed/phase/{}_pct", p.as_str()),
                    Some(c * 100.0 / n),
                );
            }
        }
    }
    let cpu = |role: Role| {
        let v: Vec<f64> = roles
            .iter()
            .filter(|(_, r)| **r == role)
            .filter_map(|(pid, _)| acc.mean(Key::ProcCpu(*pid)))
            .collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>())
    };
    put("gpufeed/cpu/main_pct".into(), cpu(Role::Main));
    put("gpufeed/cpu/workers_pct".into(), cpu(Role::Worker));
    out
}

/// The verdict and the top fix, as Markdown for the text plugin.
pub(crate) fn verdict_markdown(r: &DiagnoseReport) -> String {
    let mut s = format!(
        "**{}** ({:.0}% sure): {}",
        r.verdict.id.as_str(),
        r.verdict.confidence * 100.0,
        md_prose(&r.verdict.summary)
    );
    if let Some(f) = r.findings.first() {
        let _ = write!(s, "\n\n**Top finding:** {}", md_prose(&f.title));
        if !f.recommendation.is_empty() {
            let _ = write!(s, "\n\n**Fix:** {}", md_prose(&f.recommendation));
        }
        if let Some(x) = f.expected_speedup {
            let _ = write!(s, " (up to {x:.2}x faster if fixed)");
        }
    }
    s
}

/// One event per point with every scalar of that point. `main`: the training thread; `roles`:
/// each process's role.
fn points(series: &TbSeries, main: Option<(u32, u64)>, roles: &BTreeMap<u32, Role>) -> Vec<Event> {
    let g = &series.grid;
    let mut events = Vec::new();
    let mut acc = Acc::default();
    let mut steps_done = 0.0;
    let mut last_step = -1i64;
    for i in 0..g.len {
        acc.add(g, i);
        let end_s = (i + 1) as f64 * g.width_s;
        let step = if series.any_steps {
            steps_done += g.get(Key::Steps, i).0;
            // The first marker only starts the clock (a step is timed from the previous
            // marker to its own): the markers received are one more than the steps timed.
            if steps_done > 0.0 {
                steps_done.round() as i64 + 1
            } else {
                0
            }
        } else {
            end_s.round() as i64
        };
        // With markers, a bucket in which no step ended folds into the next point.
        if step <= last_step && series.any_steps && i + 1 < g.len {
            continue;
        }
        let vals = values(&acc, main, roles);
        acc = Acc::default();
        if vals.is_empty() {
            continue;
        }
        last_step = step.max(last_step);
        events.push(Event {
            wall_time_s: series.start_unix_s + end_s,
            step: last_step,
            what: EventKind::Summary(vals),
        });
    }
    events
}

/// The event file's bytes: the points, then the verdict as text at the last step.
pub(crate) fn event_file(series: &TbSeries, report: &DiagnoseReport) -> Vec<u8> {
    let main = report
        .python
        .as_ref()
        .and_then(|p| p.main.as_ref())
        .map(|m| (m.pid, m.tid))
        .or_else(|| series.busiest_loop_thread());
    let roles: BTreeMap<u32, Role> = report
        .job
        .processes
        .iter()
        .map(|p| (p.pid, p.role))
        .collect();
    let mut events = points(series, main, &roles);
    let last_step = events.last().map_or(0, |e| e.step);
    events.push(Event {
        wall_time_s: series.start_unix_s + report.duration_s.max(0.0),
        step: last_step,
        what: EventKind::Summary(vec![Value::Text {
            tag: "gpufeed/verdict".into(),
            text: verdict_markdown(report),
        }]),
    });
    tfevents::file(series.start_unix_s, &events)
}

/// The file's name in the directory: TensorBoard reads every file whose name holds `tfevents`.
/// Named after the recording's host and start to the microsecond, so exporting the same
/// recording again replaces its file, and two runs started in the same second each get their
/// own (one run's scalars were lost).
pub(crate) fn file_name(series: &TbSeries) -> String {
    let host: String = series
        .hostname
        .as_deref()
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let us = (series.start_unix_s * 1e6).round().max(0.0) as u64;
    format!(
        "events.out.tfevents.{}.{}.{:06}.gpufeed",
        us / 1_000_000,
        if host.is_empty() { "host" } else { &host },
        us % 1_000_000
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::event::{PySamples, PyThreadCounts, StepsLine};

    fn gpu(t: f64, util: f64) -> GpuSample {
        GpuSample {
            index: 0,
            t_s: t,
            util_samples: None,
            util_pct: Some(util),
            mem_used_bytes: Some(2 << 30),
            ..Default::default()
        }
    }

    fn steps(t: f64, n: u64, wait: f64) -> Line {
        Line::Steps(StepsLine {
            t_s: t,
            dt_s: 0.5,
            steps: n,
            span_s: 0.5,
            wait_s: Some(wait),
            items: None,
            rank: None,
        })
    }

    fn scalars(e: &Event) -> BTreeMap<String, f32> {
        match &e.what {
            EventKind::Summary(v) => v
                .iter()
                .filter_map(|v| match v {
                    Value::Scalar { tag, value } => Some((tag.clone(), *value)),
                    Value::Text { .. } => None,
                })
                .collect(),
            EventKind::Version => BTreeMap::new(),
        }
    }

    /// The points as (step, scalars).
    fn events_of(s: &TbSeries) -> Vec<(i64, BTreeMap<String, f32>)> {
        points(s, None, &BTreeMap::new())
            .iter()
            .map(|e| (e.step, scalars(e)))
            .collect()
    }

    #[test]
    fn by_time_without_markers() {
        let mut s = TbSeries::default();
        for k in 0..20 {
            s.gpu(&gpu(k as f64 * 0.25, if k < 8 { 100.0 } else { 0.0 }));
        }
        let ev = events_of(&s);
        assert_eq!(ev.len(), 5);
        assert_eq!(ev[0].0, 1);
        assert_eq!(ev[0].1["gpufeed/gpu0/busy_pct"], 100.0);
        assert_eq!(ev[2].1["gpufeed/gpu0/busy_pct"], 0.0);
        assert_eq!(ev[0].1["gpufeed/gpu0/mem_used_gib"], 2.0);
        assert!(!ev[0].1.contains_key("gpufeed/steps_per_s"));
    }

    #[test]
    fn step_aligned_with_markers() {
        let mut s = TbSeries::default();
        // Steps end at 1.5 s (10 of them) and 3.5 s (10 more); the bucket [2, 3) has none.
        s.line(&steps(1.5, 10, 0.25));
        s.line(&steps(3.5, 10, 0.0));
        for k in 0..16 {
            s.gpu(&gpu(k as f64 * 0.25, 50.0));
        }
        let ev = events_of(&s);
        let steps: Vec<i64> = ev.iter().map(|e| e.0).collect();
        assert_eq!(steps, [0, 11, 21]);
        assert_eq!(ev[1].1["gpufeed/steps_per_s"], 20.0);
        assert_eq!(ev[1].1["gpufeed/data_wait_pct"], 50.0);
        assert_eq!(ev[2].1["gpufeed/data_wait_pct"], 0.0);
        assert_eq!(ev[2].1["gpufeed/gpu0/busy_pct"], 50.0);
    }

    #[test]
    fn phases_of_the_training_thread() {
        let mut s = TbSeries::default();
        let th = PyThreadCounts::with_phases;
        s.line(&Line::PySamples(PySamples {
            t_s: 0.5,
            dt_s: 0.5,
            pid: 7,
            ticks: 50,
            threads: vec![
                th(1, &[(Phase::Forward, 30), (Phase::DataWait, 10)]),
                th(2, &[(Phase::Other, 50)]),
            ],
        }));
        let mut acc = Acc::default();
        acc.add(&s.grid, 0);
        let v = values(&acc, Some((7, 1)), &BTreeMap::new());
        let e = Event {
            wall_time_s: 0.0,
            step: 0,
            what: EventKind::Summary(v),
        };
        let sc = scalars(&e);
        assert_eq!(sc["gpufeed/phase/forward_pct"], 75.0);
        assert_eq!(sc["gpufeed/phase/data_wait_pct"], 25.0);
        assert_eq!(sc["gpufeed/phase/other_pct"], 0.0);
    }

    #[test]
    fn memory_stays_bounded() {
        let mut g = Grid::default();
        for k in 0..100_000 {
            g.push(Key::GpuBusy(0), k as f64, 1.0);
        }
        assert!(g.len <= MAX_BUCKETS);
        let total: u32 = g.series[&Key::GpuBusy(0)].iter().map(|v| v.1).sum();
        assert_eq!(total, 100_000);
    }

    #[test]
    fn file_names_are_safe() {
        let s = TbSeries {
            start_unix_s: 1_700_000_000.7,
            hostname: Some("node/1 x".into()),
            ..Default::default()
        };
        assert_eq!(
            file_name(&s),
            "events.out.tfevents.1700000000.node_1_x.700000.gpufeed"
        );
        // two recordings started in the same second: two files
        let t = TbSeries {
            start_unix_s: 1_700_000_000.700_001,
            hostname: Some("node/1 x".into()),
            ..Default::default()
        };
        assert_ne!(file_name(&s), file_name(&t));
    }
}
