//! Live view of a machine: the state `watch` draws and `serve` exports.
//!
//! [`sampler`] collects on its own threads; [`LiveState`] folds the [`Line`]s it sends into what
//! the presenters need (recent utilization samples, the latest readings, counters, the job's
//! processes) and, every few seconds, runs `diagnose`'s evidence, rules and verdict over a sliding
//! window. Neither `LiveState` nor its presenters touch hardware, so they are tested from fixed
//! lines.

pub(crate) mod http;
pub(crate) mod sampler;
pub(crate) mod shared;

use crate::diagnose::evidence::{EvidenceBuilder, GpuEvidence};
use crate::diagnose::{rules, verdict};
use crate::finding::Finding;
use crate::sample::event::{Header, Line, ProcsLine};
use crate::sample::{throttle, GpuSample, HostSample, ProcStart};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

/// Utilization samples kept per GPU for sparklines (seconds).
pub(crate) const HISTORY_S: f64 = 120.0;
/// Default window the live verdict and the busy ratio are computed over.
pub(crate) const DEFAULT_WINDOW_S: f64 = 30.0;
/// How often the live verdict is recomputed.
pub(crate) const EVAL_EVERY_S: f64 = 2.0;

/// One GPU as last seen.
#[derive(Debug, Clone, Default)]
pub(crate) struct GpuLive {
    pub index: u32,
    pub name: Option<String>,
    pub uuid: Option<String>,
    pub mem_total_bytes: Option<u64>,
    pub pcie_max_gen: Option<u32>,
    pub pcie_max_width: Option<u32>,
    /// `(t_s, util_pct)`, oldest first, the last [`HISTORY_S`] seconds (every driver sample).
    pub util: VecDeque<(f64, f64)>,
    /// The latest reading, with the slowly-read fields (PCIe link, processes) carried forward.
    pub last: Option<GpuSample>,
    /// PCIe rates from the cumulative counters (or the 20 ms throughput reading).
    pub pcie_rx_bytes_per_s: Option<f64>,
    pub pcie_tx_bytes_per_s: Option<f64>,
    /// Bytes moved since gpufeed started (counter deltas, wraps handled, or integrated rates).
    pub pcie_rx_bytes_total: Option<f64>,
    pub pcie_tx_bytes_total: Option<f64>,
    /// Seconds with each slowing clock-event reason set since gpufeed started (GpuIdle excluded).
    pub throttle_s: BTreeMap<&'static str, f64>,
    /// Seconds covered by throttle readings (0 when the driver gives none).
    pub throttle_observed_s: f64,
    prev_rx: Option<(f64, u64)>,
    prev_tx: Option<(f64, u64)>,
    prev_throttle: Option<(f64, u64)>,
    prev_rate_t: Option<f64>,
}

/// One process of the job.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ProcLive {
    pub pid: u32,
    pub ppid: u32,
    pub comm: Option<String>,
    pub cmd: Option<String>,
    /// Percent of one core over the last interval.
    pub cpu_pct: Option<f64>,
    pub rss_bytes: Option<u64>,
    pub state: Option<char>,
}

/// The diagnosis over the last window.
#[derive(Debug, Clone)]
pub(crate) struct LiveReport {
    pub window_s: f64,
    pub verdict: verdict::Verdict,
    pub findings: Vec<Finding>,
    pub gpus: Vec<GpuEvidence>,
    /// The training loop over the window, when its Python stacks are sampled.
    pub python: Option<crate::diagnose::evidence::PythonEvidence>,
    /// The job's step markers over the window, when it sends any.
    pub steps: Option<crate::diagnose::evidence::StepEvidence>,
}

/// Everything `watch` and `serve` show.
#[derive(Debug, Clone)]
pub(crate) struct LiveState {
    pub header: Header,
    pub hostname: String,
    /// Latest time seen (seconds since sampling started).
    pub t_s: f64,
    pub gpus: Vec<GpuLive>,
    pub host: Option<HostSample>,
    /// The job's processes alive now, by pid.
    pub procs: BTreeMap<u32, ProcLive>,
    /// Job processes that exited.
    pub procs_exited: u64,
    pub report: Option<LiveReport>,
    window_s: f64,
    /// Lines of the last `window_s` seconds (shared, so an evaluation can run outside a lock).
    window: VecDeque<Arc<Line>>,
    /// Python frame and stack definitions and each process's `py_status` (its rank variables):
    /// each sent once, so kept for the whole session.
    py_defs: Vec<Arc<Line>>,
    last_eval: Option<f64>,
    auto_evaluate: bool,
}

/// What an evaluation needs, taken from the state so it can run without holding it.
pub(crate) struct EvalInput {
    header: Header,
    py_defs: Vec<Arc<Line>>,
    procs: Vec<ProcStart>,
    window: Vec<Arc<Line>>,
    t_s: f64,
    t0: f64,
}

impl EvalInput {
    /// Evidence, rules and verdict over the window.
    pub(crate) fn run(self) -> LiveReport {
        let mut b = EvidenceBuilder::new();
        for p in &self.procs {
            b.push(&Line::ProcStart(p.clone()));
        }
        for l in &self.py_defs {
            b.push(l);
        }
        for l in &self.window {
            b.push(l);
        }
        let e = b.finish(&self.header);
        let findings = rules::evaluate(&e);
        let v = verdict::decide(&e, &findings);
        LiveReport {
            window_s: (self.t_s - self.t0).max(0.0),
            verdict: v,
            findings,
            gpus: e.gpus,
            python: e.python,
            steps: e.steps,
        }
    }
}

fn line_t(l: &Line) -> Option<f64> {
    match l {
        Line::Gpu(g) => Some(g.t_s),
        Line::Host(h) => Some(h.t_s),
        Line::ProcStart(p) => Some(p.t_s),
        Line::Procs(ProcsLine { t_s, .. }) | Line::ProcExit { t_s, .. } => Some(*t_s),
        Line::End(e) => Some(e.t_s),
        Line::Overrides(o) => Some(o.t_s),
        Line::PyStatus(p) => Some(p.t_s),
        Line::PySamples(p) => Some(p.t_s),
        Line::Steps(s) => Some(s.t_s),
        Line::PyFrame(_) | Line::PyStack(_) | Line::Unknown => None,
    }
}

/// Bytes between two readings of a cumulative counter that may wrap at 2^32 or 2^64.
fn counter_delta(prev: u64, now: u64) -> u64 {
    if now >= prev {
        now - prev
    } else if prev <= u32::MAX as u64 {
        (u32::MAX as u64 - prev) + now + 1
    } else {
        (u64::MAX - prev) + now + 1
    }
}

impl LiveState {
    pub(crate) fn new(header: Header, window_s: f64) -> LiveState {
        let hostname = header
            .host
            .hostname
            .clone()
            .unwrap_or_else(|| "unknown".to_string());
        let gpus = header
            .gpus
            .iter()
            .map(|s| GpuLive {
                index: s.index,
                name: s.name.clone(),
                uuid: s.uuid.clone(),
                mem_total_bytes: s.memory_total_bytes,
                pcie_max_gen: s.pcie_max_gen,
                pcie_max_width: s.pcie_max_width,
                ..Default::default()
            })
            .collect();
        LiveState {
            header,
            hostname,
            t_s: 0.0,
            gpus,
            host: None,
            procs: BTreeMap::new(),
            procs_exited: 0,
            report: None,
            window_s: window_s.max(1.0),
            window: VecDeque::new(),
            py_defs: Vec::new(),
            last_eval: None,
            auto_evaluate: true,
        }
    }

    /// Whether `push` evaluates by itself when due (the default); `serve` turns it off and
    /// evaluates outside its lock with [`LiveState::eval_input`].
    pub(crate) fn set_auto_evaluate(&mut self, on: bool) {
        self.auto_evaluate = on;
    }

    /// [`EVAL_EVERY_S`] has passed since the last evaluation.
    pub(crate) fn evaluation_due(&self) -> bool {
        self.last_eval
            .is_none_or(|l| self.t_s - l >= EVAL_EVERY_S || self.t_s < l)
    }

    /// Takes what an evaluation needs and marks it done now.
    pub(crate) fn eval_input(&mut self) -> EvalInput {
        self.last_eval = Some(self.t_s);
        let t0 = self
            .window
            .front()
            .and_then(|l| line_t(l))
            .unwrap_or(self.t_s);
        EvalInput {
            header: self.header.clone(),
            py_defs: self.py_defs.clone(),
            procs: self
                .procs
                .values()
                .map(|p| ProcStart {
                    t_s: t0,
                    pid: p.pid,
                    ppid: p.ppid,
                    cmd: p.cmd.clone(),
                    comm: p.comm.clone(),
                })
                .collect(),
            window: self.window.iter().cloned().collect(),
            t_s: self.t_s,
            t0,
        }
    }

    /// The Python frame and stack definitions received so far.
    pub(crate) fn py_defs(&self) -> impl Iterator<Item = &Line> {
        self.py_defs.iter().map(|l| l.as_ref())
    }

    pub(crate) fn set_report(&mut self, r: LiveReport) {
        self.report = Some(r);
    }

    fn gpu_mut(&mut self, index: u32) -> &mut GpuLive {
        let pos = match self.gpus.iter().position(|g| g.index == index) {
            Some(p) => p,
            None => {
                self.gpus.push(GpuLive {
                    index,
                    ..Default::default()
                });
                self.gpus.sort_by_key(|g| g.index);
                self.gpus.iter().position(|g| g.index == index).unwrap_or(0)
            }
        };
        &mut self.gpus[pos]
    }

    /// Folds one line in; re-evaluates the verdict when [`EVAL_EVERY_S`] has passed.
    pub(crate) fn push(&mut self, line: Line) {
        if let Some(t) = line_t(&line) {
            if t.is_finite() && t > self.t_s {
                self.t_s = t;
            }
        }
        match &line {
            Line::Gpu(s) => self.push_gpu(s),
            Line::Host(h) => self.host = Some(h.clone()),
            Line::ProcStart(p) => {
                self.procs.insert(
                    p.pid,
                    ProcLive {
                        pid: p.pid,
                        ppid: p.ppid,
                        comm: p.comm.clone(),
                        cmd: p.cmd.clone(),
                        ..Default::default()
                    },
                );
            }
            Line::Procs(ProcsLine { procs, .. }) => {
                for s in procs {
                    let p = self.procs.entry(s.pid).or_insert_with(|| ProcLive {
                        pid: s.pid,
                        ..Default::default()
                    });
                    p.cpu_pct = s.cpu_pct;
                    p.rss_bytes = s.rss_bytes.or(p.rss_bytes);
                    p.state = s.state.or(p.state);
                }
            }
            Line::ProcExit { pid, .. } => {
                if self.procs.remove(pid).is_some() {
                    self.procs_exited += 1;
                }
            }
            Line::End(_) | Line::Overrides(_) | Line::Unknown => {}
            // A rank's `py_status` comes once, when it is first read: past the window, its
            // rank would be lost (the rank shown as its pid).
            Line::PyFrame(_) | Line::PyStack(_) | Line::PyStatus(_) => {
                self.py_defs.push(Arc::new(line));
                return;
            }
            Line::PySamples(_) | Line::Steps(_) => {}
        }
        if line_t(&line).is_some() && !matches!(line, Line::ProcStart(_) | Line::Overrides(_)) {
            self.window.push_back(Arc::new(line));
        }
        let cutoff = self.t_s - self.window_s;
        while self
            .window
            .front()
            .and_then(|l| line_t(l))
            .is_some_and(|t| t < cutoff)
        {
            self.window.pop_front();
        }
        if self.auto_evaluate && self.evaluation_due() {
            self.evaluate();
        }
    }

    fn push_gpu(&mut self, s: &GpuSample) {
        let t_s = self.t_s;
        let g = self.gpu_mut(s.index);
        match &s.util_samples {
            Some(v) => g.util.extend(v.iter().map(|&[t, u]| (t, u))),
            None => {
                if let Some(u) = s.util_pct {
                    g.util.push_back((s.t_s, u));
                }
            }
        }
        while g.util.front().is_some_and(|&(t, _)| t < t_s - HISTORY_S) {
            g.util.pop_front();
        }
        // Rates from the cumulative counters.
        let dt_rate = g.prev_rate_t.map(|p| s.t_s - p).filter(|d| *d > 0.0);
        for (now, prev, rate, total) in [
            (
                s.pcie_rx_bytes,
                &mut g.prev_rx,
                &mut g.pcie_rx_bytes_per_s,
                &mut g.pcie_rx_bytes_total,
            ),
            (
                s.pcie_tx_bytes,
                &mut g.prev_tx,
                &mut g.pcie_tx_bytes_per_s,
                &mut g.pcie_tx_bytes_total,
            ),
        ] {
            if let Some(now) = now {
                if let Some((pt, pv)) = *prev {
                    let d = counter_delta(pv, now) as f64;
                    let dt = s.t_s - pt;
                    if dt > 0.0 {
                        *rate = Some(d / dt);
                    }
                    *total = Some(total.unwrap_or(0.0) + d);
                } else {
                    *total = Some(total.unwrap_or(0.0));
                }
                *prev = Some((s.t_s, now));
            }
        }
        if s.pcie_rx_bytes.is_none() {
            if let Some(r) = s.pcie_rx_bytes_per_s {
                g.pcie_rx_bytes_per_s = Some(r);
                if let Some(dt) = dt_rate {
                    g.pcie_rx_bytes_total = Some(g.pcie_rx_bytes_total.unwrap_or(0.0) + r * dt);
                }
            }
            if let Some(r) = s.pcie_tx_bytes_per_s {
                g.pcie_tx_bytes_per_s = Some(r);
                if let Some(dt) = dt_rate {
                    g.pcie_tx_bytes_total = Some(g.pcie_tx_bytes_total.unwrap_or(0.0) + r * dt);
                }
            }
        }
        g.prev_rate_t = Some(s.t_s);
        // Throttle time: the previous reading's reasons held until this one.
        if let Some((pt, mask)) = g.prev_throttle {
            let dt = (s.t_s - pt).clamp(0.0, 10.0);
            g.throttle_observed_s += dt;
            for name in throttle::names(mask & throttle::SLOWING) {
                *g.throttle_s.entry(name).or_insert(0.0) += dt;
            }
        }
        g.prev_throttle = s.throttle_reasons.map(|m| (s.t_s, m));
        // Keep the slow fields of the previous reading.
        let mut merged = s.clone();
        if let Some(prev) = &g.last {
            if merged.pcie_gen.is_none() {
                merged.pcie_gen = prev.pcie_gen;
                merged.pcie_width = prev.pcie_width;
            }
            if merged.processes.is_none() {
                merged.processes = prev.processes.clone();
            }
        }
        g.last = Some(merged);
    }

    /// Runs evidence, rules and verdict over the window now.
    pub(crate) fn evaluate(&mut self) {
        let input = self.eval_input();
        self.report = Some(input.run());
    }

    /// Mean utilization over the last `secs` seconds of one GPU's samples.
    pub(crate) fn util_mean(&self, g: &GpuLive, secs: f64) -> Option<f64> {
        let from = self.t_s - secs;
        let (n, sum) = g
            .util
            .iter()
            .filter(|(t, _)| *t >= from)
            .fold((0usize, 0.0), |(n, s), (_, u)| (n + 1, s + u));
        (n > 0).then(|| sum / n as f64)
    }

    /// Evidence of one GPU from the last evaluation.
    pub(crate) fn gpu_evidence(&self, index: u32) -> Option<&GpuEvidence> {
        self.report.as_ref()?.gpus.iter().find(|g| g.index == index)
    }

    /// Data-starvation score of one GPU, 0–1: its idle share (1 − busy) when the verdict says the
    /// input pipeline is why, weighted by the verdict's confidence; 0 under any other verdict.
    pub(crate) fn starvation_score(&self, index: u32) -> Option<f64> {
        let r = self.report.as_ref()?;
        let busy = self.gpu_evidence(index)?.busy_fraction?;
        Some(if r.verdict.id == verdict::VerdictId::InputBound {
            ((1.0 - busy) * r.verdict.confidence).clamp(0.0, 1.0)
        } else {
            0.0
        })
    }

    /// Processes of the job as a tree: `(depth, process)` in depth-first order, roots first.
    pub(crate) fn proc_tree(&self) -> Vec<(usize, &ProcLive)> {
        let mut out = Vec::with_capacity(self.procs.len());
        let roots: Vec<&ProcLive> = self
            .procs
            .values()
            .filter(|p| !self.procs.contains_key(&p.ppid) || p.ppid == p.pid)
            .collect();
        let mut stack: Vec<(usize, &ProcLive)> = roots.into_iter().rev().map(|p| (0, p)).collect();
        while let Some((d, p)) = stack.pop() {
            out.push((d, p));
            if out.len() > self.procs.len() {
                break;
            }
            let kids: Vec<&ProcLive> = self
                .procs
                .values()
                .filter(|c| c.ppid == p.pid && c.pid != p.pid)
                .collect();
            stack.extend(kids.into_iter().rev().map(|c| (d + 1, c)));
        }
        out
    }
}

#[cfg(test)]
pub(crate) mod fixture {
    //! A fixed state for presenter tests: two GPUs (one oscillating, one busy), 4 cores, a job
    //! with a main process and two workers.
    use super::*;
    use crate::sample::{GpuStatic, HostInfo, ProcSample};

    pub(crate) fn header(gpus: u32) -> Header {
        Header {
            schema_version: 1,
            gpufeed_version: Some("0.1.0".into()),
            start_time: "2026-12-02T12:00:00.000Z".into(),
            start_unix_us: 1_764_676_800_000_000,
            interval_s: 0.1,
            host: HostInfo {
                hostname: Some("node1".into()),
                kernel: None,
                cpu_count: 4,
                cpus_allowed: Some(4),
                mem_total_bytes: Some(64 << 30),
                clock_ticks_per_s: Some(100),
            },
            driver: None,
            gpus: (0..gpus)
                .map(|i| GpuStatic {
                    index: i,
                    name: Some("NVIDIA H100 80GB HBM3".into()),
                    uuid: Some(format!("GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd")),
                    memory_total_bytes: Some(80 << 30),
                    pcie_max_gen: Some(5),
                    pcie_max_width: Some(16),
                    ..Default::default()
                })
                .collect(),
            gpu_error: None,
            command: Some(vec!["python".into(), "train.py".into()]),
            pid: Some(100),
            py_rate_hz: None,
        }
    }

    /// `secs` seconds of a square-wave GPU 0 (85 % for 0.6 s, 10 % for 1.4 s), a steady GPU 1.
    pub(crate) fn state(gpus: u32, secs: u32) -> LiveState {
        let mut st = LiveState::new(header(gpus), DEFAULT_WINDOW_S);
        st.push(Line::ProcStart(ProcStart {
            t_s: 0.0,
            pid: 100,
            ppid: 1,
            cmd: Some("python train.py".into()),
            comm: Some("python".into()),
        }));
        for w in 0..2 {
            st.push(Line::ProcStart(ProcStart {
                t_s: 0.0,
                pid: 101 + w,
                ppid: 100,
                cmd: Some("python train.py".into()),
                comm: Some("pt_data_worker".into()),
            }));
        }
        let ticks = secs * 2;
        for k in 1..=ticks {
            let t = k as f64 * 0.5;
            for i in 0..gpus {
                let samples: Vec<[f64; 2]> = (0..3)
                    .map(|j| {
                        let ts = t - 0.5 + (j as f64 + 1.0) / 6.0;
                        let u = if i == 0 {
                            if ts % 2.0 < 0.6 {
                                85.0
                            } else {
                                10.0
                            }
                        } else {
                            97.0
                        };
                        [ts, u]
                    })
                    .collect();
                st.push(Line::Gpu(GpuSample {
                    index: i,
                    t_s: t,
                    util_samples: Some(samples),
                    util_pct: Some(50.0),
                    mem_util_pct: Some(20.0),
                    mem_used_bytes: Some(60 << 30),
                    sm_clock_mhz: Some(1980),
                    power_w: Some(350.0 + i as f64),
                    temperature_c: Some(61),
                    pcie_rx_bytes: Some(k as u64 * 3_000_000_000),
                    pcie_tx_bytes: Some(k as u64 * 100_000_000),
                    pcie_gen: Some(5),
                    pcie_width: Some(16),
                    throttle_reasons: Some(if i == 1 { throttle::SW_POWER_CAP } else { 0 }),
                    ..Default::default()
                }));
            }
            st.push(Line::Host(HostSample {
                t_s: t,
                cpu_pct: vec![100.0, 98.0, 12.0, 4.0],
                cpu_total_pct: Some(53.5),
                iowait_pct: Some(0.5),
                mem_total_bytes: Some(64 << 30),
                mem_available_bytes: Some(40 << 30),
                ..Default::default()
            }));
            st.push(Line::Procs(ProcsLine {
                t_s: t,
                procs: vec![
                    ProcSample {
                        pid: 100,
                        cpu_pct: Some(35.0),
                        rss_bytes: Some(4 << 30),
                        state: Some('S'),
                        ..Default::default()
                    },
                    ProcSample {
                        pid: 101,
                        cpu_pct: Some(99.0),
                        rss_bytes: Some(1 << 30),
                        state: Some('R'),
                        ..Default::default()
                    },
                    ProcSample {
                        pid: 102,
                        cpu_pct: Some(98.0),
                        rss_bytes: Some(1 << 30),
                        state: Some('R'),
                        ..Default::default()
                    },
                ],
            }));
        }
        st.evaluate();
        st
    }

    /// [`state`] whose main process's Python stacks were sampled at 100 Hz for `secs` seconds:
    /// data_wait 50%, forward 25%, backward 15%, optimizer 5%, other 5%; and step markers
    /// saying the loop waits 46% of each step.
    pub(crate) fn state_with_loop(gpus: u32, secs: u32) -> LiveState {
        use crate::sample::event::{PyFrameDef, PySamples, PyStackDef, PyThreadCounts, StepsLine};
        let mut st = state(gpus, secs);
        let frames = [
            ("<module>", "/home/u/train.py"),
            (
                "_next_data",
                "/v/site-packages/torch/utils/data/dataloader.py",
            ),
            ("Net.forward", "/home/u/train.py"),
            ("backward", "/v/site-packages/torch/autograd/__init__.py"),
            ("SGD.step", "/v/site-packages/torch/optim/sgd.py"),
            ("log_metrics", "/home/u/train.py"),
        ];
        for (id, (name, file)) in frames.iter().enumerate() {
            st.push(Line::PyFrame(PyFrameDef {
                id: id as u32,
                name: name.to_string(),
                file: file.to_string(),
                line: 10,
                src: None,
            }));
        }
        for id in 1..=5u32 {
            st.push(Line::PyStack(PyStackDef {
                id: id - 1,
                frames: vec![0, id],
            }));
        }
        for t in 1..=secs {
            st.push(Line::PySamples(PySamples {
                t_s: t as f64,
                dt_s: 1.0,
                pid: 100,
                ticks: 100,
                threads: vec![PyThreadCounts {
                    tid: 100,
                    name: Some("MainThread".into()),
                    stacks: vec![[0, 50, 50], [1, 25, 0], [2, 15, 0], [3, 5, 0], [4, 5, 0]],
                    phases: Default::default(),
                    cpu_ns: None,
                    runq_ns: None,
                    gil_held: 0,
                    gil_free: Vec::new(),
                }],
            }));
            st.push(Line::Steps(StepsLine {
                t_s: t as f64,
                dt_s: 1.0,
                steps: 10,
                span_s: 1.0,
                wait_s: Some(0.46),
                items: Some(80),
                rank: None,
            }));
        }
        st.evaluate();
        st
    }

    /// [`state_with_loop`] for a two-rank job: each rank sends its step markers (rank 0 at 10
    /// steps/s, rank 1 at 8) and the window's loops are those of two ranks, rank 1 waiting for
    /// data far longer (the per-rank split itself is unit-tested in `diagnose::evidence::pyloop`).
    pub(crate) fn state_with_ranks(gpus: u32, secs: u32) -> LiveState {
        use crate::diagnose::evidence::RankLoop;
        use crate::sample::event::StepsLine;
        let mut st = state_with_loop(gpus, secs);
        for t in 1..=secs {
            for (rank, steps) in [(0, 10), (1, 8)] {
                st.push(Line::Steps(StepsLine {
                    t_s: t as f64,
                    dt_s: 1.0,
                    steps,
                    span_s: 1.0,
                    wait_s: None,
                    items: None,
                    rank: Some(rank),
                }));
            }
        }
        st.evaluate();
        let r = st.report.as_mut().unwrap();
        let p = r.python.as_mut().unwrap();
        let main = p.main.clone().unwrap();
        p.ranks = [(0, 101, 12.0), (1, 102, 55.0)]
            .map(|(rank, pid, wait)| RankLoop {
                rank: Some(rank),
                pid,
                tid: u64::from(pid),
                samples: main.samples,
                phases_pct: main.phases_pct.clone(),
                data_wait_pct: wait,
                steps_per_s: None,
                data_hotspots: vec![],
            })
            .to_vec();
        p.slow_rank = Some(crate::diagnose::evidence::SlowRank {
            rank: Some(1),
            pid: 102,
            data_wait_pct: 55.0,
            others_data_wait_pct: 12.0,
        });
        crate::diagnose::evidence::pyloop::fill_rank_steps(p, r.steps.as_ref());
        st
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_gives_the_training_loops_phases_and_steps() {
        let st = fixture::state_with_loop(1, 20);
        let r = st.report.as_ref().unwrap();
        let m = r.python.as_ref().unwrap().main.as_ref().unwrap();
        assert_eq!((m.pid, m.tid), (100, 100));
        assert_eq!(m.phases_pct.data_wait, 50.0);
        assert_eq!(m.phases_pct.forward, 25.0);
        assert_eq!(m.phases_pct.backward, 15.0);
        assert_eq!(m.phases_pct.optimizer, 5.0);
        assert_eq!(m.phases_pct.other, 5.0);
        let s = r.steps.as_ref().unwrap();
        assert_eq!(s.data_wait_pct, Some(46.0));
        assert_eq!(s.steps_per_s, Some(10.0));
        // Frame and stack definitions are kept beyond the window; samples are not.
        assert_eq!(st.py_defs().count(), 11);
    }

    #[test]
    fn a_ranks_py_status_outlives_the_window() {
        use crate::sample::event::PyStatusLine;
        use crate::sample::ranks::RankEnv;
        let mut st = LiveState::new(fixture::header(1), 5.0);
        st.push(Line::PyStatus(PyStatusLine {
            t_s: 0.1,
            pid: 4246,
            status: crate::sample::pystacks::PyStatus::Ok,
            detail: None,
            rank: Some(RankEnv {
                rank: Some(1),
                local_rank: Some(1),
                world_size: Some(2),
            }),
        }));
        let mut later = fixture::state(1, 20);
        for l in later.window.drain(..) {
            st.push(Arc::try_unwrap(l).unwrap_or_else(|a| (*a).clone()));
        }
        assert!(st.t_s > 10.0, "past the 5 s window: {}", st.t_s);
        assert!(
            st.py_defs()
                .any(|l| matches!(l, Line::PyStatus(p) if p.pid == 4246 && p.rank.is_some())),
            "the rank's py_status is kept"
        );
    }

    #[test]
    fn counters_wrap() {
        assert_eq!(counter_delta(10, 15), 5);
        assert_eq!(counter_delta(u32::MAX as u64 - 1, 3), 5);
        assert_eq!(counter_delta(u64::MAX - 1, 3), 5);
    }

    #[test]
    fn folds_rates_counters_throttle_and_tree() {
        let st = fixture::state(2, 20);
        let g0 = &st.gpus[0];
        assert!((g0.pcie_rx_bytes_per_s.unwrap() - 6e9).abs() < 1.0);
        assert!((g0.pcie_rx_bytes_total.unwrap() - 39.0 * 3e9).abs() < 1.0);
        assert!(g0.throttle_s.is_empty());
        let g1 = &st.gpus[1];
        assert!((g1.throttle_s["sw_power_cap"] - 19.5).abs() < 1e-9);
        assert!(g0.util.len() >= 100);
        let tree = st.proc_tree();
        assert_eq!(tree.len(), 3);
        assert_eq!((tree[0].0, tree[0].1.pid), (0, 100));
        assert_eq!((tree[1].0, tree[1].1.pid), (1, 101));
        let r = st.report.as_ref().unwrap();
        assert!(r.window_s > 19.0, "{}", r.window_s);
        let busy0 = st.gpu_evidence(0).unwrap().busy_fraction.unwrap();
        assert!(busy0 < 0.5, "{busy0}");
    }

    #[test]
    fn evaluation_can_run_outside_the_state() {
        let full = fixture::state(1, 6);
        let mut st = LiveState::new(fixture::header(1), 30.0);
        st.set_auto_evaluate(false);
        st.push(Line::Host(full.host.clone().unwrap()));
        assert!(st.report.is_none());
        assert!(st.evaluation_due());
        let input = st.eval_input();
        assert!(!st.evaluation_due());
        st.set_report(input.run());
        assert_eq!(
            st.report.as_ref().unwrap().verdict.id,
            verdict::VerdictId::Unknown
        );
    }

    #[test]
    fn a_gpu_without_readings_has_no_values() {
        let st = LiveState::new(fixture::header(1), 30.0);
        assert!(st.gpus[0].last.is_none());
        assert!(st.gpus[0].pcie_rx_bytes_total.is_none());
        assert_eq!(st.util_mean(&st.gpus[0], 5.0), None);
        assert_eq!(st.starvation_score(0), None);
    }
}
