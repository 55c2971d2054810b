//! The training loop seen through its Python stacks: the phase split of the training thread and
//! the hot stages of data loading, from a recording's `py_*` lines (schema 2).
//!
//! **The training thread** is chosen as follows: in the job's main process (the one
//! [`JobEvidence`] calls main; when it has no Python samples, the sampled process without a
//! sampled Python parent that has the most training-loop samples), the thread with the most
//! samples in a training-loop phase (fetching a batch, forward, backward, optimizer step, sync,
//! checkpoint); when no thread has any, the interpreter's main thread (thread id = pid).
//!
//! **Data loading** is every sample, in any thread of any process, whose stack passes through a
//! dataset's `__getitem__` or PyTorch's fetcher; each is charged to one stage by
//! [`crate::sample::pyphase::data_stage`].

use super::python::*;
use super::types::{JobEvidence, BOUND_PREFIX};
use crate::sample::event::{Header, Line, PyFrameDef};
use crate::sample::pyphase::{
    data_library, data_stage, is_loader_plumbing, starts_or_stops_workers, DataLibrary, FrameRef,
    Phase, StageKind,
};
use crate::sample::pystacks::PyStatus;
use crate::sample::ranks::RankEnv;
use std::collections::{BTreeMap, BTreeSet, HashMap};

mod loopcode;

/// Backward and optimizer samples from which a process runs a training loop of its own.
pub(crate) const MIN_RANK_STEP_SAMPLES: u64 = 5;
/// Share of a rank's loop in torch.distributed collectives from which the job's loop is read
/// on the rank the others wait for ([`PyAcc::main_rank`]).
const RANK_WAIT_SHARE: f64 = 0.2;
/// Training-thread samples under which no phase split is given.
pub(crate) const MIN_MAIN_SAMPLES: u64 = 20;
/// Stages kept in the evidence (presenters show five).
const HOTSPOTS_KEPT: usize = 10;

/// Step lines kept for the steady-state estimate; beyond it, every other one is merged into its
/// neighbour (a long recording keeps its whole span at a coarser grain).
const MAX_STEP_LINES: usize = 8192;

/// Streams `steps` lines.
#[derive(Debug, Default)]
pub(crate) struct StepAcc {
    steps: u64,
    span_s: f64,
    wait_s: Option<f64>,
    items: Option<u64>,
    any: bool,
    /// Per line: end time, steps, span and wait (`NaN` when not reported).
    lines: Vec<[f64; 4]>,
    /// Steps and seconds per rank (at most [`crate::sample::steps::MAX_RANKS`] ranks).
    by_rank: BTreeMap<u32, (u64, f64)>,
    /// Lines of ranks beyond those, counted in the totals only.
    rank_lines_over_cap: u64,
}

impl StepAcc {
    pub(crate) fn push(&mut self, line: &Line) {
        let Line::Steps(s) = line else { return };
        if s.steps == 0 {
            return;
        }
        if !self.any {
            self.any = true;
            self.wait_s = Some(0.0);
            self.items = Some(0);
        }
        self.steps += s.steps;
        self.span_s += s.span_s;
        if let Some(r) = s.rank {
            if self.by_rank.len() < crate::sample::steps::MAX_RANKS || self.by_rank.contains_key(&r)
            {
                let e = self.by_rank.entry(r).or_default();
                e.0 += s.steps;
                e.1 += s.span_s;
            } else {
                self.rank_lines_over_cap += 1;
            }
        }
        self.wait_s = self.wait_s.zip(s.wait_s).map(|(a, b)| a + b);
        self.items = self.items.zip(s.items).map(|(a, b)| a + b);
        self.lines.push([
            s.t_s,
            s.steps as f64,
            s.span_s,
            s.wait_s.unwrap_or(f64::NAN),
        ]);
        if self.lines.len() >= MAX_STEP_LINES {
            self.lines = self
                .lines
                .chunks(2)
                .map(|c| match c {
                    [a, b] => [b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3]],
                    [a] => *a,
                    _ => unreachable!("chunks(2) yields one or two"),
                })
                .collect();
        }
    }

    /// `steps` lines of ranks beyond the first [`crate::sample::steps::MAX_RANKS`].
    pub(crate) fn rank_lines_over_cap(&self) -> u64 {
        self.rank_lines_over_cap
    }

    /// The steady part's rate, its interval, the warm-up cut and the steady data wait.
    fn steady(&self) -> (Option<f64>, Option<[f64; 2]>, Option<f64>, Option<f64>) {
        use crate::stats::steady::{estimate, Interval};
        let iv: Vec<Interval> = self
            .lines
            .iter()
            .filter(|l| l[2] > 0.0)
            .map(|l| Interval {
                t_end_s: l[0],
                dur_s: l[2],
                rate: l[1] / l[2],
            })
            .collect();
        // a step line covers about a second: fewer than ten give no interval worth the name
        let Some(e) =
            estimate(&iv, 0.03).filter(|_| iv.len() >= crate::stats::steady::MIN_INTERVALS)
        else {
            return (None, None, None, None);
        };
        let steady_lines: Vec<&[f64; 4]> = self
            .lines
            .iter()
            .filter(|l| l[2] > 0.0)
            .skip(iv.len() - e.intervals)
            .collect();
        let span: f64 = steady_lines.iter().map(|l| l[2]).sum();
        let wait: f64 = steady_lines.iter().map(|l| l[3]).sum();
        let wait_pct = (span > 0.0 && wait.is_finite())
            .then(|| crate::units::r1((wait / span * 100.0).clamp(0.0, 100.0)));
        let first = self.lines.first().map(|l| l[0] - l[2]).unwrap_or(0.0);
        let ci = e
            .ci_high
            .is_finite()
            .then(|| [crate::units::r2(e.ci_low), crate::units::r2(e.ci_high)]);
        (
            Some(crate::units::r2(e.value)),
            ci,
            Some(crate::units::r1((e.warmup_end_s - first).max(0.0))),
            wait_pct,
        )
    }

    /// The evidence, or `None` when no step was timed.
    pub(crate) fn finish(self) -> Option<StepEvidence> {
        if !self.any || self.span_s <= 0.0 {
            return None;
        }
        let per_s = |n: f64| crate::units::r2(n / self.span_s);
        let (steady_steps_per_s, steady_ci95, warmup_s, steady_data_wait_pct) = self.steady();
        Some(StepEvidence {
            steady_steps_per_s,
            steady_ci95,
            warmup_s,
            steady_data_wait_pct,
            steps: self.steps,
            steps_per_s: Some(per_s(self.steps as f64)),
            data_wait_pct: self
                .wait_s
                .map(|w| crate::units::r1((w / self.span_s * 100.0).clamp(0.0, 100.0))),
            items: self.items,
            samples_per_s: self.items.map(|i| per_s(i as f64)),
            steps_per_s_by_rank: self
                .by_rank
                .iter()
                .filter(|(_, (_, span))| *span > 0.0)
                .map(|(r, (n, span))| (*r, crate::units::r2(*n as f64 / span)))
                .collect(),
        })
    }
}

/// Fills each rank's steps per second from its step markers (named by rank, else by pid).
pub(crate) fn fill_rank_steps(p: &mut PythonEvidence, steps: Option<&StepEvidence>) {
    let Some(s) = steps else { return };
    for r in &mut p.ranks {
        r.steps_per_s = r
            .rank
            .and_then(|n| s.steps_per_s_by_rank.get(&n))
            .or_else(|| s.steps_per_s_by_rank.get(&r.pid))
            .copied();
    }
}

/// Fills each hot stage's milliseconds of loading work per sample loaded, from the samples the
/// step markers counted: a stage's stack samples over all threads, each weighted by its
/// process's reading interval, are its seconds of work, spread over the `items` loaded meanwhile.
pub(crate) fn fill_ms_per_sample(p: &mut PythonEvidence, items: Option<u64>) {
    let Some(items) = items.filter(|i| *i > 0) else {
        return;
    };
    let rate = p.rate_hz.filter(|r| *r > 0.0);
    let ms = |secs: f64| (secs * 1000.0 / items as f64 * 1000.0).round() / 1000.0;
    for h in &mut p.data_hotspots {
        let (secs, runq) = if h.work_s > 0.0 {
            (h.work_s, h.runq_s)
        } else if let Some(r) = rate {
            (h.samples as f64 / r, None)
        } else {
            continue;
        };
        let runq = runq.map(|w| w.clamp(0.0, secs));
        h.ms_per_sample = Some(ms(secs - runq.unwrap_or(0.0)));
        h.core_wait_ms_per_sample = runq.map(ms);
    }
}

/// The share of a thread's busy time (on a CPU, or runnable waiting for one) it waited for a
/// core over an interval; `None` without its scheduler clock.
fn runq_share(t: &crate::sample::event::PyThreadCounts) -> Option<f64> {
    match (t.cpu_ns, t.runq_ns) {
        (None, None) => None,
        (c, w) => {
            let (c, w) = (c.unwrap_or(0) as f64, w.unwrap_or(0) as f64);
            Some(if c + w > 0.0 { w / (c + w) } else { 0.0 })
        }
    }
}

impl ThreadTotals {
    /// An interval of this thread: its phase counts, its stacks' counts and its `(end,
    /// length)`, into the totals and the loop window; `runq_share` the share of its busy time
    /// it waited for a core, when its scheduler clock was read.
    fn add_interval(
        &mut self,
        mut interval: [u64; Phase::ALL.len()],
        stacks: &[KeptStack],
        (t_s, dt_s): (f64, f64),
        runq_share: Option<f64>,
    ) {
        let loop_here = interval[..Phase::LOOP].iter().any(|n| *n > 0);
        let any = interval.iter().any(|n| *n > 0);
        // The interval the loop starts in, after intervals of start-up, also holds the end of
        // that start-up (imports, building the model and optimizer): its samples outside the
        // loop's phases are not the loop's. (A window that opens inside the loop, as `watch`'s
        // does, has no start-up before it.)
        let starts = loop_here && !self.in_loop && self.before_loop;
        if !loop_here && !self.in_loop && any {
            self.before_loop = true;
        }
        if starts {
            interval[Phase::Other.index()] = 0;
        }
        let ckpt = interval[Phase::CheckpointIo.index()] > 0;
        if ckpt && !self.in_ckpt {
            self.ckpt_runs += 1;
        }
        let total: u64 = interval.iter().sum();
        if ckpt && interval[Phase::CheckpointIo.index()] * 10 < total * 9 {
            self.ckpt_mixed += 1;
        }
        if ckpt || any {
            self.in_ckpt = ckpt;
        }
        if loop_here {
            for sid in self.pending_stacks.drain(..) {
                if let Some(c) = self.stacks.get_mut(&sid) {
                    c.win += std::mem::take(&mut c.win_pending);
                }
            }
        }
        let runq_share = runq_share.filter(|f| *f > 0.0);
        for k in stacks {
            let c = self.stacks.entry(k.sid).or_default();
            c.n += k.n;
            c.idle += k.idle;
            if let Some(f) = runq_share {
                let active = k.n.saturating_sub(k.idle) as f64;
                *self.runq.entry(k.sid).or_default() += active * f;
            }
            if loop_here {
                if !(starts && k.other) {
                    c.win += k.n;
                }
            } else if self.in_loop {
                if c.win_pending == 0 && k.n > 0 {
                    self.pending_stacks.push(k.sid);
                }
                c.win_pending += k.n;
            }
        }
        if loop_here {
            for (i, n) in interval.iter().enumerate() {
                self.phases[i] += self.pending[i] + n;
            }
            self.pending = [0; Phase::ALL.len()];
            self.in_loop = true;
            if t_s.is_finite() {
                let dt = if dt_s.is_finite() { dt_s.max(0.0) } else { 0.0 };
                let first = self.loop_span.map_or(t_s - dt, |(a, _)| a);
                self.loop_span = Some((first, t_s));
            }
        } else if self.in_loop {
            for (p, n) in self.pending.iter_mut().zip(interval) {
                *p += n;
            }
        }
    }

    /// An interval's `[stack id, running samples without the GIL]`.
    fn add_gil_free(&mut self, gil_free: &[[u64; 2]]) {
        for [sid, n] in gil_free {
            if let Ok(id) = u32::try_from(*sid) {
                *self.gil_free.entry(id).or_default() += n;
            }
        }
    }
}

/// One stack's samples in one thread.
#[derive(Debug, Default, Clone, Copy)]
struct StackCounts {
    /// Over the whole recording, and of them idle (not running).
    n: u64,
    idle: u64,
    /// Over the loop window (as [`ThreadTotals::phases`]): they name the loop's code.
    win: u64,
    /// Of intervals after the last one with a loop sample (as [`ThreadTotals::pending`]).
    win_pending: u64,
}

#[derive(Debug, Default)]
struct ThreadTotals {
    name: Option<String>,
    /// Per stack, its counts: one entry, found once per stack of each interval.
    stacks: HashMap<u32, StackCounts>,
    /// Per stack: its samples that found the thread runnable but waiting for a core (each
    /// interval's active samples times the thread's run-queue share of its busy time).
    runq: HashMap<u32, f64>,
    /// Some interval had the thread's scheduler clock (`cpu_ns` / `runq_ns`).
    sched: bool,
    /// Per stack: running samples without the GIL (native code under its innermost frame).
    gil_free: HashMap<u32, u64>,
    /// Phase counts over the loop window: from the first interval with a training-loop sample
    /// to the last one (start-up imports and teardown are not the loop).
    phases: [u64; Phase::ALL.len()],
    /// Counts of intervals after the last one with a loop sample, added once another comes.
    pending: [u64; Phase::ALL.len()],
    in_loop: bool,
    /// The loop window's wall time: the start of its first interval and the end of its last.
    loop_span: Option<(f64, f64)>,
    /// The stacks with `win_pending` samples.
    pending_stacks: Vec<u32>,
    /// Runs of consecutive intervals with checkpoint samples: the saves seen.
    ckpt_runs: u64,
    in_ckpt: bool,
    /// Intervals with checkpoint samples mixed with others (under 90%): a save's run has at
    /// most two, one at each end; more mean saves closer together than readings.
    ckpt_mixed: u64,
    /// An interval with samples but no loop sample came before the loop: start-up.
    before_loop: bool,
}

/// Streams a recording's Python lines; bounded by the distinct frames and stacks.
#[derive(Debug, Default)]
pub(crate) struct PyAcc {
    frames: HashMap<u32, PyFrameDef>,
    stacks: HashMap<u32, Vec<u32>>,
    statuses: BTreeMap<u32, (PyStatus, Option<String>)>,
    threads: BTreeMap<(u32, u64), ThreadTotals>,
    ticks: BTreeMap<u32, u64>,
    /// Seconds covered by each process's `py_samples` lines.
    secs: BTreeMap<u32, f64>,
    /// Phase of each stack (classified once; `None` for an empty stack: no Python running).
    phase_of: HashMap<u32, Option<Phase>>,
    /// Processes that start a rank of a multi-process job, from their status lines.
    rank_env: BTreeMap<u32, RankEnv>,
    /// Processes where some running sample held the GIL: their GIL was read, so running without
    /// it means native code.
    gil_read: BTreeSet<u32>,
    /// Frame and stack definitions beyond [`MAX_FRAMES`] / [`MAX_STACKS`], and samples of
    /// stacks counted as [`OTHER_STACK`] because of them.
    over_cap: u64,
    /// An interval's stacks as kept, reused from interval to interval (no allocation per line).
    kept_scratch: Vec<KeptStack>,
}

/// A stack's samples in one interval of one thread, as kept.
#[derive(Debug, Clone, Copy)]
struct KeptStack {
    sid: u32,
    n: u64,
    idle: u64,
    /// Outside the loop's phases (other, or no Python running).
    other: bool,
}

/// Distinct Python frames kept; later definitions are ignored (their stacks count as other).
/// With strings cut to 4 KiB by the reader, at most ~120 MB even for crafted frames; real jobs
/// have a few thousand.
pub(crate) const MAX_FRAMES: usize = 10_000;
/// Distinct Python stacks kept; samples of later ones are counted under `OTHER_STACK`.
pub(crate) const MAX_STACKS: usize = 50_000;
/// Frames kept per stack (the recorder keeps 128).
const MAX_STACK_DEPTH: usize = 128;
/// The stack id samples of stacks beyond the caps are booked under: never defined, so
/// unclassified ("other").
const OTHER_STACK: u32 = u32::MAX;

impl PyAcc {
    pub(crate) fn push(&mut self, line: &Line) {
        match line {
            Line::PyFrame(f) => {
                if self.frames.len() < MAX_FRAMES || self.frames.contains_key(&f.id) {
                    self.frames.insert(f.id, f.clone());
                } else {
                    self.over_cap += 1;
                }
            }
            Line::PyStack(s) => {
                if (self.stacks.len() < MAX_STACKS || self.stacks.contains_key(&s.id))
                    && s.id != OTHER_STACK
                {
                    let depth = s.frames.len().min(MAX_STACK_DEPTH);
                    self.stacks.insert(s.id, s.frames[..depth].to_vec());
                } else {
                    self.over_cap += 1;
                }
            }
            Line::PyStatus(s) => {
                self.statuses.insert(s.pid, (s.status, s.detail.clone()));
                if let Some(r) = s.rank {
                    self.rank_env.insert(s.pid, r);
                }
            }
            Line::PySamples(s) => {
                *self.ticks.entry(s.pid).or_default() += s.ticks;
                if s.dt_s.is_finite() && s.dt_s > 0.0 {
                    *self.secs.entry(s.pid).or_default() += s.dt_s;
                }
                for t in &s.threads {
                    // Phases are classified here from the stacks (the recorded counts are for
                    // other readers): a better classifier then serves old recordings too.
                    let mut interval = [0u64; Phase::ALL.len()];
                    let mut kept = std::mem::take(&mut self.kept_scratch);
                    kept.clear();
                    for &[sid, n, idle] in &t.stacks {
                        let (sid, phase) = self.kept_phase(sid);
                        if let Some(p) = phase {
                            interval[p.index()] += n;
                        }
                        kept.push(KeptStack {
                            sid,
                            n,
                            idle,
                            other: matches!(phase, Some(Phase::Other) | None),
                        });
                    }
                    let acc = self.threads.entry((s.pid, t.tid)).or_default();
                    if t.name.is_some() {
                        acc.name.clone_from(&t.name);
                    }
                    // The share of the thread's busy time (on a CPU, or runnable waiting for
                    // one) it waited: its active samples were taken in either state alike.
                    let runq_share = runq_share(t);
                    acc.sched |= runq_share.is_some();
                    if t.gil_held > 0 {
                        self.gil_read.insert(s.pid);
                    }
                    acc.add_gil_free(&t.gil_free);
                    acc.add_interval(interval, &kept, (s.t_s, s.dt_s), runq_share);
                    self.kept_scratch = kept;
                }
            }
            _ => {}
        }
    }

    /// A sample's stack as kept ([`PyAcc::kept_stack`]) and its phase, classified at its first
    /// sample; a stack beyond the caps (or never defined) is counted in `over_cap`. One map
    /// lookup for a kept stack met before: this runs for every stack of every reading.
    fn kept_phase(&mut self, sid: u64) -> (u32, Option<Phase>) {
        if let Ok(id) = u32::try_from(sid) {
            if id != OTHER_STACK {
                if let Some(p) = self.phase_of.get(&id) {
                    return (id, *p);
                }
            }
        }
        let id = self.kept_stack(sid);
        if id == OTHER_STACK {
            self.over_cap += 1;
        }
        let phase = match self.phase_of.get(&id) {
            Some(p) => *p,
            None => {
                let p = self
                    .frame_refs(id)
                    .and_then(|f| (!f.is_empty()).then(|| crate::sample::pyphase::classify(&f)));
                self.phase_of.insert(id, p);
                p
            }
        };
        (id, phase)
    }

    /// `sid` when its stack was defined (and kept), else [`OTHER_STACK`]: the per-thread and
    /// per-stack maps then hold at most the kept stacks, whatever ids the samples name.
    fn kept_stack(&self, sid: u64) -> u32 {
        match u32::try_from(sid) {
            Ok(id) if self.stacks.contains_key(&id) => id,
            _ => OTHER_STACK,
        }
    }

    /// The warning for frames and stacks beyond the caps, if any were.
    pub(crate) fn bound_warning(&self) -> Option<String> {
        (self.over_cap > 0).then(|| {
            format!(
                "{}{} Python frame or stack lines and samples beyond the first {MAX_FRAMES} frames and {MAX_STACKS} stacks are counted as \"other\" (not classified, not listed as hotspots)",
                BOUND_PREFIX,
                self.over_cap
            )
        })
    }

    /// The processes that run a training loop themselves, by pid: some thread of theirs ran
    /// [`MIN_RANK_STEP_SAMPLES`] samples of backward passes or optimizer steps, and none of
    /// their stacks is a DataLoader worker's loop. Ranks started without rank variables
    /// (`torch.multiprocessing.spawn`, `multiprocessing.Process`, Lightning's `ddp_spawn`)
    /// are told from DataLoader workers this way: by what they do, not by who started them.
    pub(crate) fn training_pids(&self) -> Vec<u32> {
        let step = |t: &ThreadTotals| {
            t.phases[Phase::Backward.index()] + t.phases[Phase::Optimizer.index()]
        };
        let mut pids: BTreeSet<u32> = self
            .threads
            .iter()
            .filter(|(_, t)| step(t) >= MIN_RANK_STEP_SAMPLES)
            .map(|((pid, _), _)| *pid)
            .collect();
        pids.retain(|pid| {
            !self
                .threads
                .range((*pid, 0)..=(*pid, u64::MAX))
                .any(|(_, t)| {
                    t.stacks.keys().any(|sid| {
                        self.frame_refs(*sid)
                            .is_some_and(|f| f.iter().any(crate::sample::pyphase::is_worker_loop))
                    })
                })
        });
        pids.into_iter().collect()
    }

    /// The processes recorded as starting a rank, with their rank variables.
    pub(crate) fn rank_envs(&self) -> &BTreeMap<u32, RankEnv> {
        &self.rank_env
    }

    fn frame_refs(&self, sid: u32) -> Option<Vec<FrameRef<'_>>> {
        self.stacks
            .get(&sid)?
            .iter()
            .map(|id| self.frames.get(id).map(FrameRef::from))
            .collect()
    }

    /// The evidence, or `None` when stacks were not sampled at all.
    pub(crate) fn finish(self, header: &Header, job: &JobEvidence) -> Option<PythonEvidence> {
        if header.py_rate_hz.is_none() && self.statuses.is_empty() && self.threads.is_empty() {
            return None;
        }
        let (status, detail) = self.status();
        let samples: u64 = self
            .threads
            .values()
            .map(|t| t.stacks.values().map(|c| c.n).sum::<u64>())
            .sum();
        let (ranks, ranks_unread) = self.rank_loops(header, job);
        let (main_rank, main_waited_for) = self.main_rank(&ranks);
        let main = match main_rank {
            Some(m) => self.main_loop((m.pid, m.tid), &self.threads[&(m.pid, m.tid)]),
            None if !job.rank_pids.is_empty() => None,
            None => self
                .main_thread(job)
                .and_then(|(key, t)| self.main_loop(key, t)),
        };
        let slow_rank = slow_rank(&ranks);
        let mut ranks = ranks;
        ranks.sort_by_key(|r| (r.rank.unwrap_or(u32::MAX), r.pid));
        let (data_hotspots, data) = self.data_stages(header, |_| true);
        let main_p = main.as_ref().map(|m| m.main.pid);
        let loaders: Vec<f64> = data
            .loading_by_pid
            .iter()
            .filter(|(p, _)| Some(**p) != main_p && !job.rank_pids.contains(p))
            .filter_map(|(p, n)| {
                let ticks = *self.ticks.get(p)?;
                (ticks > 0).then(|| (*n as f64 / ticks as f64).min(1.0) * 100.0)
            })
            .collect();
        let nominal_s = header
            .py_rate_hz
            .filter(|r| *r > 0.0)
            .map_or(0.01, |r| 1.0 / r);
        let worker_start_stop = main.as_ref().and_then(|m| {
            let key = (m.main.pid, m.main.tid);
            self.worker_start_stop(key, &self.threads[&key], m.main.samples, nominal_s)
        });
        let code = main.as_ref().map(|m| {
            let key = (m.main.pid, m.main.tid);
            let t = &self.threads[&key];
            let loop_s = t
                .loop_span
                .map(|(a, b)| b - a)
                .filter(|s| *s > 0.0)
                .unwrap_or_else(|| m.main.samples as f64 * self.period_s(key.0, nominal_s));
            self.loop_code(key.0, t, m.main.samples, loop_s)
        });
        let no_loop_sites = if main.is_none() && job.rank_pids.is_empty() {
            self.no_loop_sites(job)
        } else {
            Vec::new()
        };
        let (loop_code, host_calls, checkpoint_saves) = match code {
            Some(c) => (c.phases, c.host_calls, c.checkpoint_saves),
            None => (Vec::new(), Vec::new(), None),
        };
        let (main, data_wait_pct, data_in_main_pct, sync_sites) = match main {
            Some(m) => (
                Some(m.main),
                Some(m.data_wait_pct),
                m.data_in_main_pct,
                m.sync_sites,
            ),
            None => (None, None, None, Vec::new()),
        };
        Some(PythonEvidence {
            status,
            rate_hz: header.py_rate_hz,
            samples,
            sampled_processes: self.ticks.len() as u32,
            main,
            data_hotspots,
            data_wait_pct,
            data_in_main_pct,
            loader_processes: loaders.len() as u32,
            loader_busy_pct: (!loaders.is_empty())
                .then(|| crate::units::r1(loaders.iter().sum::<f64>() / loaders.len() as f64)),
            data_io_pct: (data.total_s > 0.0)
                .then(|| crate::units::r1(data.io_s * 100.0 / data.total_s)),
            sync_sites,
            loop_code,
            host_calls,
            checkpoint_saves,
            no_loop_sites,
            worker_start_stop,
            ranks,
            slow_rank,
            main_waited_for,
            ranks_unread,
            detail,
        })
    }

    /// No training loop at all (a script that only preprocesses): where the main thread's time
    /// goes instead; empty when it ran any loop phase or has too few samples.
    fn no_loop_sites(&self, job: &JobEvidence) -> Vec<LoopSite> {
        let Some(((pid, _), t)) = self.main_thread(job) else {
            return Vec::new();
        };
        let n: u64 = t.stacks.values().map(|c| c.n).sum();
        if n < MIN_MAIN_SAMPLES || t.phases[..Phase::LOOP].iter().any(|n| *n > 0) {
            return Vec::new();
        }
        let stacks = t.stacks.iter().map(|(sid, c)| (*sid, c.n));
        self.hot_sites(pid, t, stacks, n).0
    }

    /// The rank whose loop stands for the job (`ranks` sorted by data wait): the median rank;
    /// but when some rank spends [`RANK_WAIT_SHARE`] of its loop in collectives (waiting for the
    /// others at a broadcast or barrier), the rank that waits least: the one the others wait
    /// for, whose loop holds the cause (then `true`).
    fn main_rank<'r>(&self, ranks: &'r [RankLoop]) -> (Option<&'r RankLoop>, bool) {
        let median = ranks.get(ranks.len().saturating_sub(1) / 2);
        if ranks.len() < 2 {
            return (median, false);
        }
        let waits: Vec<f64> = ranks
            .iter()
            .map(|r| self.collective_share(&self.threads[&(r.pid, r.tid)]))
            .collect();
        if waits.iter().all(|w| *w < RANK_WAIT_SHARE) {
            return (median, false);
        }
        let least = ranks
            .iter()
            .zip(&waits)
            .min_by(|a, b| a.1.total_cmp(b.1))
            .map(|(r, _)| r);
        (least, least.map(|r| r.pid) != median.map(|r| r.pid))
    }

    /// The share of a thread's loop-window samples inside a torch.distributed collective.
    fn collective_share(&self, t: &ThreadTotals) -> f64 {
        let (mut coll, mut all) = (0u64, 0u64);
        for (sid, c) in &t.stacks {
            all += c.win;
            if c.win > 0
                && self
                    .frame_refs(*sid)
                    .is_some_and(|f| f.iter().any(crate::sample::pyphase::is_collective))
            {
                coll += c.win;
            }
        }
        if all == 0 {
            0.0
        } else {
            coll as f64 / all as f64
        }
    }

    /// Each rank's training-thread loop, sorted by data wait, and the ranks that have none (not
    /// Python, gone before the loop, too few samples).
    fn rank_loops(&self, header: &Header, job: &JobEvidence) -> (Vec<RankLoop>, Vec<u32>) {
        let mut loops = Vec::new();
        let mut unread = Vec::new();
        let zero_taken = self.rank_env.values().any(|e| e.shown() == Some(0));
        for &pid in &job.rank_pids {
            let rank = match self.rank_env.get(&pid) {
                Some(e) => e.shown(),
                // Lightning's rank 0 is the process the user started: no rank variables.
                None if !zero_taken && job.rank_pids.first() == Some(&pid) => Some(0),
                None => None,
            };
            let Some(((_, tid), t)) = self.loop_thread(pid) else {
                unread.push(pid);
                continue;
            };
            let Some(m) = self.main_loop((pid, tid), t) else {
                unread.push(pid);
                continue;
            };
            let mine = descendants(job, pid);
            let (mut hot, _) = self.data_stages(header, |p| mine.contains(&p));
            hot.truncate(3);
            loops.push(RankLoop {
                rank,
                pid,
                tid,
                samples: m.main.samples,
                data_wait_pct: m.data_wait_pct,
                phases_pct: m.main.phases_pct,
                steps_per_s: None,
                data_hotspots: hot,
            });
        }
        // A rank restarted (torchrun's elastic restarts) has several pids: the one read longest
        // stands for it, the others are listed with the unread.
        loops.sort_by_key(|r| (r.rank.is_none(), r.rank, std::cmp::Reverse(r.samples)));
        let mut kept: Vec<RankLoop> = Vec::with_capacity(loops.len());
        for r in loops {
            match kept.last() {
                Some(k) if r.rank.is_some() && k.rank == r.rank => unread.push(r.pid),
                _ => kept.push(r),
            }
        }
        kept.sort_by(|a, b| {
            a.data_wait_pct
                .total_cmp(&b.data_wait_pct)
                .then(a.pid.cmp(&b.pid))
        });
        unread.sort_unstable();
        (kept, unread)
    }

    /// The thread of `pid` with the most training-loop samples (the main thread on a tie).
    fn loop_thread(&self, pid: u32) -> Option<((u32, u64), &ThreadTotals)> {
        self.threads
            .range((pid, 0)..=(pid, u64::MAX))
            .max_by_key(|((_, tid), t)| {
                (
                    t.phases[..Phase::LOOP].iter().sum::<u64>(),
                    *tid == pid as u64,
                    t.phases.iter().sum::<u64>(),
                )
            })
            .map(|(k, t)| (*k, t))
    }

    /// Ok when any process was sampled; otherwise the reason none was (denied first), with the
    /// first detail given for it.
    fn status(&self) -> (PyStatus, Option<String>) {
        let status = if !self.ticks.is_empty() {
            PyStatus::Ok
        } else if self.statuses.values().any(|s| s.0 == PyStatus::Denied) {
            PyStatus::Denied
        } else if self
            .statuses
            .values()
            .any(|s| s.0 == PyStatus::UnsupportedVersion)
        {
            PyStatus::UnsupportedVersion
        } else {
            PyStatus::NotPython
        };
        let detail = (status != PyStatus::Ok)
            .then(|| {
                self.statuses
                    .values()
                    .find(|s| s.0 == status)
                    .and_then(|s| s.1.clone())
            })
            .flatten();
        (status, detail)
    }

    /// The training thread (see the module's documentation): in the job's main process when it
    /// was sampled, else in the sampled process without a sampled parent that has the most loop
    /// samples; there, the thread with the most loop samples.
    fn main_thread(&self, job: &JobEvidence) -> Option<((u32, u64), &ThreadTotals)> {
        let loop_samples = |pid: u32| -> u64 {
            self.threads
                .range((pid, 0)..=(pid, u64::MAX))
                .map(|(_, t)| t.phases[..Phase::LOOP].iter().sum::<u64>())
                .max()
                .unwrap_or(0)
        };
        let proc = |pid: u32| job.processes.iter().find(|p| p.pid == pid);
        // A launcher (torchrun, accelerate launch, mpirun...) only waits: never the loop, and
        // its children count as having no sampled parent.
        let launcher = |pid: u32| {
            proc(pid)
                .and_then(|p| p.cmd.as_deref())
                .is_some_and(crate::sample::ranks::is_launcher_cmd)
        };
        let sampled = |pid: u32| self.ticks.contains_key(&pid) && !launcher(pid);
        let main_pid = job.main_pid.filter(|m| sampled(*m)).or_else(|| {
            self.ticks
                .keys()
                .copied()
                .filter(|p| !launcher(*p))
                .filter(|p| !proc(*p).is_some_and(|pp| sampled(pp.ppid)))
                .max_by_key(|p| (loop_samples(*p), std::cmp::Reverse(*p)))
        })?;
        self.loop_thread(main_pid)
    }

    /// The training thread's phase split, how much of its data wait is loading done in the
    /// thread itself, and its sync sites; None under [`MIN_MAIN_SAMPLES`].
    fn main_loop(&self, (pid, tid): (u32, u64), t: &ThreadTotals) -> Option<MainLoop> {
        let n: u64 = t.phases.iter().sum();
        if n < MIN_MAIN_SAMPLES {
            return None;
        }
        let phases_pct = PhasesPct::from_counts(&t.phases);
        // Loading in the training thread itself: data_wait stacks with a data stage, other than
        // the sampler (which stays in the training process whatever num_workers is).
        // (Both over the whole recording: the stack counts are not windowed.)
        let is_wait = |sid: &u32| self.phase_of.get(sid) == Some(&Some(Phase::DataWait));
        let dw: u64 = t
            .stacks
            .iter()
            .filter(|(sid, _)| is_wait(sid))
            .map(|(_, c)| c.n)
            .sum();
        let data_in_main_pct = (dw > 0).then(|| {
            let loading: u64 = t
                .stacks
                .iter()
                .filter(|(sid, _)| is_wait(sid))
                .filter(|(sid, _)| {
                    self.frame_refs(**sid).is_some_and(|f| {
                        data_stage(&f).is_some_and(|(_, k)| k != StageKind::Sampler)
                    })
                })
                .map(|(_, c)| c.n)
                .sum();
            crate::units::r1(loading as f64 * 100.0 / dw as f64)
        });
        Some(MainLoop {
            data_wait_pct: phases_pct.data_wait,
            data_in_main_pct,
            sync_sites: self.sync_sites(t, n),
            main: PyMain {
                pid,
                tid,
                thread_name: t.name.clone(),
                samples: n,
                phases_pct,
            },
        })
    }

    /// The training thread's samples starting or stopping DataLoader workers, of its `n` loop
    /// samples; `None` when it was never seen doing so.
    fn worker_start_stop(
        &self,
        (pid, _): (u32, u64),
        t: &ThreadTotals,
        n: u64,
        nominal_s: f64,
    ) -> Option<WorkerStartStop> {
        let c: u64 = t
            .stacks
            .iter()
            .filter(|(sid, _)| {
                self.frame_refs(**sid)
                    .is_some_and(|f| starts_or_stops_workers(&f))
            })
            .map(|(_, c)| c.n)
            .sum();
        // Sampled in the loop window (they are data_wait stacks), counted over the recording.
        let c = c.min(n);
        // The loop's wall time; without interval times, its samples at the reading interval.
        let loop_s = t
            .loop_span
            .map(|(a, b)| b - a)
            .filter(|s| *s > 0.0)
            .unwrap_or_else(|| n as f64 * self.period_s(pid, nominal_s));
        let share = c as f64 / n.max(1) as f64;
        (c > 0 && n > 0).then(|| WorkerStartStop {
            loop_pct: crate::units::r1(share * 100.0),
            seconds: crate::units::r1(share * loop_s),
            loop_seconds: crate::units::r1(loop_s),
        })
    }

    /// The three heaviest sync sites of a thread with `n` loop samples: the innermost user
    /// frame of each sync stack (the innermost frame when all are library code).
    fn sync_sites(&self, t: &ThreadTotals, n: u64) -> Vec<SyncSite> {
        let mut sites: HashMap<u32, u64> = HashMap::new();
        for (sid, c) in &t.stacks {
            let Some(frames) = self.stacks.get(sid) else {
                continue;
            };
            let Some(refs) = self.frame_refs(*sid) else {
                continue;
            };
            if crate::sample::pyphase::classify(&refs) != Phase::Sync {
                continue;
            }
            let site = frames
                .iter()
                .rev()
                .find(|id| {
                    self.frames
                        .get(id)
                        .is_some_and(|f| !crate::sample::pyphase::is_library(&f.file))
                })
                .or(frames.last());
            if let Some(id) = site {
                *sites.entry(*id).or_default() += c.n;
            }
        }
        let mut sites: Vec<(u32, u64)> = sites.into_iter().collect();
        sites.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        sites
            .into_iter()
            .take(3)
            .filter_map(|(id, c)| {
                let f = self.frames.get(&id)?;
                Some(SyncSite {
                    function: f.name.clone(),
                    file: f.file.clone(),
                    line: f.line,
                    code: f.src.clone(),
                    pct: crate::units::r1(c as f64 * 100.0 / n as f64),
                })
            })
            .collect()
    }

    /// Seconds per reading of each process (workers are read less often than the training
    /// process); without interval data, the nominal period.
    fn period_s(&self, pid: u32, nominal_s: f64) -> f64 {
        match (self.secs.get(&pid), self.ticks.get(&pid)) {
            (Some(s), Some(t)) if *t > 0 && *s > 0.0 => s / *t as f64,
            _ => nominal_s,
        }
    }

    /// The data-loading stages over every thread of every process, heaviest first (at most
    /// [`HOTSPOTS_KEPT`]), and the loading totals.
    fn data_stages(
        &self,
        header: &Header,
        keep: impl Fn(u32) -> bool,
    ) -> (Vec<Hotspot>, DataTotals) {
        let mut by_stage: HashMap<(String, String), StageAcc> = HashMap::new();
        let nominal_s = header
            .py_rate_hz
            .filter(|r| *r > 0.0)
            .map_or(0.01, |r| 1.0 / r);
        let mut totals = DataTotals::default();
        type StageOf = (
            String,
            String,
            (i32, Option<String>),
            StageKind,
            bool,
            Option<DataLibrary>,
        );
        let mut stage_cache: HashMap<u32, Option<StageOf>> = HashMap::new();
        for ((pid, _), t) in self.threads.iter().filter(|((p, _), _)| keep(*p)) {
            for (sid, &StackCounts { n, idle, .. }) in &t.stacks {
                let stage = stage_cache.entry(*sid).or_insert_with(|| {
                    let refs = self.frame_refs(*sid)?;
                    let (i, k) = data_stage(&refs)?;
                    let frame = &self.frames[&self.stacks[sid][i]];
                    let line = (frame.line, frame.src.clone());
                    let plumbing = is_loader_plumbing(&refs[i]);
                    Some((
                        refs[i].name.to_string(),
                        refs[i].file.to_string(),
                        line,
                        k,
                        plumbing,
                        data_library(&refs),
                    ))
                });
                let Some((name, file, line, kind, plumbing, library)) = stage.clone() else {
                    continue;
                };
                let w = self.period_s(*pid, nominal_s);
                totals.total_s += n as f64 * w;
                totals.io_s += if kind == StageKind::Read { n } else { idle } as f64 * w;
                *totals.loading_by_pid.entry(*pid).or_default() += n;
                if plumbing {
                    // Loading time, but no stage: the DataLoader's own frame with nothing of the
                    // user's or a library's beneath it (a call in flight, a C `__getitem__`).
                    continue;
                }
                let e = by_stage.entry((name, file)).or_insert_with(|| StageAcc {
                    kind,
                    samples: 0,
                    lines: HashMap::new(),
                    work_s: 0.0,
                    runq_s: None,
                    library,
                    gil_read: (0, 0),
                });
                e.samples += n;
                if self.gil_read.contains(pid) {
                    e.gil_read.0 += n;
                    e.gil_read.1 += t.gil_free.get(sid).copied().unwrap_or(0);
                }
                e.lines.entry(line.0).or_insert((0, line.1)).0 += n;
                e.work_s += n as f64 * w;
                if t.sched {
                    let waited = t.runq.get(sid).copied().unwrap_or(0.0) * w;
                    e.runq_s = Some(e.runq_s.unwrap_or(0.0) + waited);
                }
            }
        }
        let mut hotspots: Vec<Hotspot> = by_stage
            .into_iter()
            .map(|((function, file), acc)| acc.hotspot(function, file, totals.total_s))
            .collect();
        // Work summed in hash-map order differs in its last bits from run to run: compared to the
        // microsecond, stages of equal work keep one order (samples, then name) in every run.
        let work_us = |h: &Hotspot| (h.work_s * 1e6).round();
        hotspots.sort_by(|a, b| {
            work_us(b)
                .total_cmp(&work_us(a))
                .then(b.samples.cmp(&a.samples))
                .then(a.function.cmp(&b.function))
                .then(a.file.cmp(&b.file))
        });
        hotspots.truncate(HOTSPOTS_KEPT);
        (hotspots, totals)
    }
}

/// One data stage's totals over every thread, while [`PyAcc::data_stages`] sums them.
struct StageAcc {
    kind: StageKind,
    samples: u64,
    /// Samples per line of the stage's function, with the line's source text.
    lines: HashMap<i32, (u64, Option<String>)>,
    work_s: f64,
    runq_s: Option<f64>,
    library: Option<DataLibrary>,
    /// Samples in processes whose GIL was read, and of them those running without it.
    gil_read: (u64, u64),
}

impl StageAcc {
    /// The stage as a hotspot: its line the one seen most often, its share of `total_s`.
    fn hotspot(self, function: String, file: String, total_s: f64) -> Hotspot {
        let (line, code) = self
            .lines
            .into_iter()
            .max_by_key(|(l, (c, _))| (*c, std::cmp::Reverse(*l)))
            .map(|(l, (_, src))| (l, src))
            .unwrap_or((0, None));
        let (ran, native) = self.gil_read;
        Hotspot {
            native_pct: (ran > 0)
                .then(|| crate::units::r1(native.min(ran) as f64 * 100.0 / ran as f64)),
            code,
            function,
            file,
            line,
            pct: crate::units::r1(if total_s > 0.0 {
                self.work_s * 100.0 / total_s
            } else {
                0.0
            }),
            ms_per_sample: None,
            core_wait_ms_per_sample: None,
            kind: self.kind,
            library: self.library,
            samples: self.samples,
            work_s: self.work_s,
            runq_s: self.runq_s,
        }
    }
}

/// `pid` and every process below it in the job's tree.
fn descendants(job: &JobEvidence, pid: u32) -> Vec<u32> {
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() && out.len() < 10_000 {
        let p = out[i];
        out.extend(
            job.processes
                .iter()
                .filter(|c| c.ppid == p && c.pid != p)
                .map(|c| c.pid),
        );
        i += 1;
    }
    out
}

/// The rank whose data wait is [`SLOW_RANK_GAP_PCT`] points above the other ranks' median
/// (and at least [`SLOW_RANK_MIN_PCT`]); `ranks` sorted by data wait.
fn slow_rank(ranks: &[RankLoop]) -> Option<SlowRank> {
    let (last, others) = ranks.split_last()?;
    if others.is_empty() {
        return None;
    }
    let mut w: Vec<f64> = others.iter().map(|r| r.data_wait_pct).collect();
    let median = crate::stats::median(&mut w)?;
    (last.data_wait_pct >= SLOW_RANK_MIN_PCT && last.data_wait_pct - median >= SLOW_RANK_GAP_PCT)
        .then(|| SlowRank {
            rank: last.rank,
            pid: last.pid,
            data_wait_pct: last.data_wait_pct,
            others_data_wait_pct: crate::units::r1(median),
        })
}

/// What [`PyAcc::main_loop`] finds in the training thread.
struct MainLoop {
    main: PyMain,
    data_wait_pct: f64,
    data_in_main_pct: Option<f64>,
    sync_sites: Vec<SyncSite>,
}

/// Loading work over all processes, seconds weighted by each process's reading interval.
#[derive(Default)]
struct DataTotals {
    total_s: f64,
    /// In reads, or idle (blocked) inside a data stage.
    io_s: f64,
    /// Samples in a data stage, per process.
    loading_by_pid: BTreeMap<u32, u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::event::{PySamples, PyStackDef, PyThreadCounts};

    fn stack(id: u32, frames: &[u32]) -> Line {
        Line::PyStack(PyStackDef {
            id,
            frames: frames.to_vec(),
        })
    }

    /// The recording header of these tests: the job's main process is pid 10, stacks at 100 Hz.
    fn header() -> Header {
        serde_json::from_str(
            r#"{"schema_version":2,"start_time":"x","start_unix_us":0,"interval_s":0.1,"host":{"cpu_count":2},"pid":10,"py_rate_hz":100.0}"#,
        )
        .unwrap()
    }

    fn frame(id: u32, name: &str, file: &str) -> Line {
        Line::PyFrame(PyFrameDef {
            id,
            name: name.into(),
            file: file.into(),
            line: 1,
            src: None,
        })
    }

    #[test]
    fn distinct_frames_and_stacks_beyond_the_caps_count_as_other() {
        let mut acc = PyAcc::default();
        for id in 0..MAX_FRAMES as u32 + 5 {
            acc.push(&frame(id, "f", "x.py"));
        }
        for id in 0..MAX_STACKS as u32 + 5 {
            acc.push(&Line::PyStack(PyStackDef {
                id,
                frames: vec![id % 7; 1000],
            }));
        }
        assert_eq!(
            acc.bound_warning().map(|w| w.contains("10 Python")),
            Some(true)
        );
        // Samples of stacks kept, beyond the cap, and never defined (any id).
        let kept = MAX_STACKS as u64 - 1;
        acc.push(&samples(
            1.0,
            9,
            vec![(9, vec![[kept, 3, 0], [kept + 2, 4, 0], [u64::MAX, 5, 0]])],
        ));
        assert_eq!(acc.frames.len(), MAX_FRAMES);
        assert_eq!(acc.stacks.len(), MAX_STACKS);
        assert!(acc.stacks.values().all(|f| f.len() == MAX_STACK_DEPTH));
        let t = &acc.threads[&(9, 9)];
        assert_eq!(t.stacks.len(), 2, "{:?}", t.stacks);
        assert_eq!(t.stacks[&OTHER_STACK].n, 9);
        assert_eq!(t.stacks[&(kept as u32)].n, 3);
        assert!(acc.bound_warning().unwrap().starts_with("Bounded: 12 "));
    }

    fn samples(t: f64, pid: u32, threads: Vec<(u64, Vec<[u64; 3]>)>) -> Line {
        Line::PySamples(PySamples {
            t_s: t,
            dt_s: 1.0,
            pid,
            ticks: 100,
            threads: threads
                .into_iter()
                .map(|(tid, stacks)| PyThreadCounts {
                    tid,
                    name: None,
                    stacks,
                    phases: BTreeMap::new(),
                    cpu_ns: None,
                    runq_ns: None,
                    gil_held: 0,
                    gil_free: Vec::new(),
                })
                .collect(),
        })
    }

    #[test]
    fn phases_over_the_loop_window_on_the_busiest_loop_thread() {
        let dl = "/v/site-packages/torch/utils/data/dataloader.py";
        let mut acc = PyAcc::default();
        for l in [
            frame(0, "<module>", "/home/u/t.py"),
            frame(1, "_next_data", dl),
            frame(2, "Net.forward", "/home/u/t.py"),
            frame(3, "_find_and_load", "<frozen importlib._bootstrap>"),
            frame(
                4,
                "Queue._feed",
                "/usr/lib/python3.11/multiprocessing/queues.py",
            ),
            stack(0, &[0, 1]),
            stack(1, &[0, 2]),
            stack(2, &[0, 3]),
            stack(3, &[4]),
            stack(4, &[]),
        ] {
            acc.push(&l);
        }
        // Start-up: imports and an empty stack, before the loop.
        acc.push(&samples(1.0, 10, vec![(10, vec![[2, 90, 0], [4, 10, 10]])]));
        acc.push(&samples(
            2.0,
            10,
            vec![
                (10, vec![[0, 60, 60], [1, 40, 0]]),
                (11, vec![[3, 100, 100]]),
            ],
        ));
        acc.push(&samples(
            3.0,
            10,
            vec![(10, vec![[0, 30, 30], [1, 60, 0], [2, 10, 0]])],
        ));
        // Teardown after the loop: not in the split.
        acc.push(&samples(4.0, 10, vec![(10, vec![[4, 100, 100]])]));
        let header = header();
        let job = JobEvidence {
            main_pid: Some(10),
            ..Default::default()
        };
        let p = acc.finish(&header, &job).unwrap();
        let m = p.main.unwrap();
        assert_eq!((m.pid, m.tid), (10, 10));
        assert_eq!(m.samples, 200);
        assert_eq!(m.phases_pct.data_wait, 45.0);
        assert_eq!(m.phases_pct.forward, 50.0);
        assert_eq!(m.phases_pct.other, 5.0);
        assert_eq!(p.data_wait_pct, Some(45.0));
        assert_eq!(p.data_in_main_pct, Some(0.0));
        assert_eq!(p.status, PyStatus::Ok);
        assert_eq!(p.samples, 500);
    }

    /// The training thread's time starting and stopping workers (every epoch
    /// with `persistent_workers=False`), as a share of the loop and of its wall time; absent
    /// where it was never seen.
    #[test]
    fn the_loop_starting_and_stopping_workers_is_measured() {
        let dl = "/v/site-packages/torch/utils/data/dataloader.py";
        let mut acc = PyAcc::default();
        for l in [
            frame(0, "<module>", "/home/u/t.py"),
            frame(1, "_MultiProcessingDataLoaderIter._get_data", dl),
            frame(2, "_MultiProcessingDataLoaderIter.__init__", dl),
            frame(3, "_MultiProcessingDataLoaderIter._shutdown_workers", dl),
            frame(4, "Net.forward", "/home/u/t.py"),
            stack(0, &[0, 1]),
            stack(1, &[0, 2]),
            stack(2, &[0, 3]),
            stack(3, &[0, 4]),
        ] {
            acc.push(&l);
        }
        // Two seconds of loop: 100 samples waiting, 30 starting, 20 stopping, 50 computing.
        acc.push(&samples(
            1.0,
            10,
            vec![(10, vec![[0, 50, 50], [1, 30, 0], [3, 20, 0]])],
        ));
        acc.push(&samples(
            2.0,
            10,
            vec![(10, vec![[0, 50, 50], [2, 20, 20], [3, 30, 0]])],
        ));
        let job = JobEvidence {
            main_pid: Some(10),
            ..Default::default()
        };
        let p = acc.finish(&header(), &job).unwrap();
        let w = p.worker_start_stop.unwrap();
        assert_eq!(w.loop_pct, 25.0);
        assert_eq!(w.loop_seconds, 2.0);
        assert_eq!(w.seconds, 0.5);
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["worker_start_stop"]["loop_pct"], 25.0);

        // A loop that never started a worker has none, not 0.
        let mut acc = PyAcc::default();
        for l in [
            frame(0, "<module>", "/home/u/t.py"),
            frame(1, "_MultiProcessingDataLoaderIter._get_data", dl),
            stack(0, &[0, 1]),
        ] {
            acc.push(&l);
        }
        acc.push(&samples(1.0, 10, vec![(10, vec![[0, 100, 100]])]));
        let p = acc.finish(&header(), &job).unwrap();
        assert_eq!(p.worker_start_stop, None);
        let json = serde_json::to_value(&p).unwrap();
        assert!(json.get("worker_start_stop").is_none(), "{json}");
    }

    /// An accumulator that knows two data stages: stack 0 is `__getitem__` → Decode, stack 1
    /// `__getitem__` → Crop.
    fn decode_and_crop() -> PyAcc {
        let mut acc = PyAcc::default();
        for l in [
            frame(0, "Dataset.__getitem__", "/home/u/ds.py"),
            frame(1, "Decode.__call__", "/home/u/ds.py"),
            frame(2, "Crop.__call__", "/home/u/ds.py"),
            stack(0, &[0, 1]),
            stack(1, &[0, 2]),
        ] {
            acc.push(&l);
        }
        acc
    }

    /// A stage's running samples without the GIL are its native share, counted only in a
    /// process where the GIL was seen held (else its GIL could not be read at all).
    #[test]
    fn a_stage_running_without_the_gil_is_native_where_the_gil_was_read() {
        let with_gil = |pid: u32, held: u64, free: Vec<[u64; 2]>, stacks: Vec<[u64; 3]>| {
            let Line::PySamples(mut s) = samples(1.0, pid, vec![(u64::from(pid), stacks)]) else {
                unreachable!()
            };
            s.threads[0].gil_held = held;
            s.threads[0].gil_free = free;
            Line::PySamples(s)
        };
        // Decode: 80 samples, 10 idle, 63 running without the GIL (79% of its time); Crop: 20,
        // all running with it.
        let mut acc = decode_and_crop();
        acc.push(&with_gil(
            20,
            20,
            vec![[0, 63]],
            vec![[0, 80, 10], [1, 20, 0]],
        ));
        let p = acc.finish(&header(), &JobEvidence::default()).unwrap();
        let native: Vec<(&str, Option<f64>)> = p
            .data_hotspots
            .iter()
            .map(|h| (h.function.as_str(), h.native_pct))
            .collect();
        assert_eq!(
            native,
            [
                ("Decode.__call__", Some(78.8)),
                ("Crop.__call__", Some(0.0))
            ]
        );
        assert!(p.data_hotspots[0].native_under_user_code());
        assert_eq!(
            p.data_hotspots[0].name(),
            "native code under Decode.__call__"
        );
        assert_eq!(p.data_hotspots[1].name(), "Crop.__call__");
        // No sample ever held the GIL: it was not read, so nothing is called native.
        let mut acc = decode_and_crop();
        acc.push(&with_gil(
            20,
            0,
            vec![[0, 70], [1, 20]],
            vec![[0, 80, 10], [1, 20, 0]],
        ));
        let p = acc.finish(&header(), &JobEvidence::default()).unwrap();
        assert!(p.data_hotspots.iter().all(|h| h.native_pct.is_none()));
        assert_eq!(p.data_hotspots[0].name(), "Decode.__call__");
    }

    #[test]
    fn workers_read_less_often_are_weighted_by_their_own_interval() {
        let mut acc = decode_and_crop();
        // Process 20 read 100 times a second, all in Crop; process 21 read 25 times a second
        // (a quarter rate), all in Decode: each of its samples stands for 40 ms, not 10.
        acc.push(&samples(1.0, 20, vec![(20, vec![[1, 100, 0]])]));
        let Line::PySamples(mut w) = samples(1.0, 21, vec![(21, vec![[0, 25, 0]])]) else {
            unreachable!()
        };
        w.ticks = 25;
        acc.push(&Line::PySamples(w));
        let header = header();
        let mut p = acc.finish(&header, &JobEvidence::default()).unwrap();
        let h: Vec<(&str, f64, u64)> = p
            .data_hotspots
            .iter()
            .map(|h| (h.function.as_str(), h.pct, h.samples))
            .collect();
        assert_eq!(
            h,
            vec![("Crop.__call__", 50.0, 100), ("Decode.__call__", 50.0, 25)]
        );
        // One second of work each, over 100 samples loaded: 10 ms per sample.
        fill_ms_per_sample(&mut p, Some(100));
        assert_eq!(p.data_hotspots[1].ms_per_sample, Some(10.0));
        assert_eq!(p.loader_busy_pct, Some(100.0));
    }

    #[test]
    fn waiting_for_a_core_is_told_apart_from_a_stages_work() {
        let mut acc = decode_and_crop();
        // Process 20 (100 readings a second, all in Crop) had a core to itself; worker 21
        // (25 readings, all in Decode, 5 of them blocked) ran 250 ms and waited 750 ms for a
        // core: 3/4 of its 20 active samples were waiting, 15 x 40 ms = 0.6 s of its second.
        let Line::PySamples(mut main) = samples(1.0, 20, vec![(20, vec![[1, 100, 0]])]) else {
            unreachable!()
        };
        main.threads[0].cpu_ns = Some(1_000_000_000);
        main.threads[0].runq_ns = None;
        acc.push(&Line::PySamples(main));
        let Line::PySamples(mut w) = samples(1.0, 21, vec![(21, vec![[0, 25, 5]])]) else {
            unreachable!()
        };
        w.ticks = 25;
        w.threads[0].cpu_ns = Some(250_000_000);
        w.threads[0].runq_ns = Some(750_000_000);
        acc.push(&Line::PySamples(w));
        // An old recording's thread (no clocks) in the same stage: its samples all work.
        acc.push(&samples(1.0, 22, vec![(22, vec![[1, 100, 0]])]));
        let header = header();
        let mut p = acc.finish(&header, &JobEvidence::default()).unwrap();
        fill_ms_per_sample(&mut p, Some(100));
        let got: Vec<(&str, Option<f64>, Option<f64>)> = p
            .data_hotspots
            .iter()
            .map(|h| {
                (
                    h.function.as_str(),
                    h.ms_per_sample,
                    h.core_wait_ms_per_sample,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("Crop.__call__", Some(20.0), Some(0.0)),
                ("Decode.__call__", Some(4.0), Some(6.0)),
            ]
        );
        let json = serde_json::to_value(&p.data_hotspots[1]).unwrap();
        assert_eq!(json["core_wait_ms_per_sample"], 6.0);

        // Without any clock (a recording from before): as before, no core-wait figure.
        let mut old = PyAcc::default();
        for l in [
            frame(0, "Dataset.__getitem__", "/home/u/ds.py"),
            frame(1, "Decode.__call__", "/home/u/ds.py"),
            stack(0, &[0, 1]),
        ] {
            old.push(&l);
        }
        old.push(&samples(1.0, 21, vec![(21, vec![[0, 100, 0]])]));
        let mut p = old.finish(&header, &JobEvidence::default()).unwrap();
        fill_ms_per_sample(&mut p, Some(100));
        assert_eq!(p.data_hotspots[0].ms_per_sample, Some(10.0));
        assert_eq!(p.data_hotspots[0].core_wait_ms_per_sample, None);
        let json = serde_json::to_value(&p.data_hotspots[0]).unwrap();
        assert!(json.get("core_wait_ms_per_sample").is_none());
    }

    #[test]
    fn steps_fold_into_the_exact_wait_and_ms_per_sample_needs_their_items() {
        use crate::sample::event::StepsLine;
        let mut acc = StepAcc::default();
        assert_eq!(StepAcc::default().finish(), None);
        // Two ranks' lines over the same second: figures per rank, averaged.
        for (steps, span, wait, items, rank) in [
            (10, 1.0, Some(0.4), Some(80), 0),
            (10, 1.0, Some(0.6), Some(80), 1),
        ] {
            acc.push(&Line::Steps(StepsLine {
                t_s: 1.0,
                dt_s: 1.0,
                steps,
                span_s: span,
                wait_s: wait,
                items,
                rank: Some(rank),
            }));
        }
        acc.push(&Line::Steps(StepsLine {
            t_s: 2.0,
            dt_s: 1.0,
            steps: 0,
            span_s: 0.5,
            wait_s: None,
            items: None,
            rank: Some(1),
        }));
        let s = acc.finish().unwrap();
        assert_eq!(
            s.steps_per_s_by_rank,
            BTreeMap::from([(0, 10.0), (1, 10.0)]),
            "a line with no step is skipped"
        );
        assert_eq!(
            (s.steps, s.data_wait_pct, s.items),
            (20, Some(50.0), Some(160))
        );
        assert_eq!((s.steps_per_s, s.samples_per_s), (Some(10.0), Some(80.0)));
        let mut p = PythonEvidence {
            status: PyStatus::Ok,
            rate_hz: Some(100.0),
            samples: 0,
            sampled_processes: 1,
            main: None,
            data_hotspots: vec![Hotspot {
                function: "DecodeImage.__call__".into(),
                file: "/u/t.py".into(),
                line: 3,
                pct: 60.0,
                ms_per_sample: None,
                core_wait_ms_per_sample: None,
                native_pct: None,
                code: None,
                kind: StageKind::Transform,
                library: None,
                samples: 320,
                work_s: 0.0,
                runq_s: None,
            }],
            data_wait_pct: None,
            data_in_main_pct: None,
            loader_processes: 0,
            loader_busy_pct: None,
            data_io_pct: None,
            sync_sites: vec![],
            loop_code: vec![],
            host_calls: vec![],
            checkpoint_saves: None,
            no_loop_sites: vec![],
            worker_start_stop: None,
            ranks: vec![],
            slow_rank: None,
            main_waited_for: false,
            ranks_unread: vec![],
            detail: None,
        };
        fill_ms_per_sample(&mut p, None);
        assert_eq!(p.data_hotspots[0].ms_per_sample, None, "unknown, not 0");
        // 320 samples at 100 Hz = 3.2 s of work over 160 samples loaded: 20 ms each.
        fill_ms_per_sample(&mut p, Some(160));
        assert_eq!(p.data_hotspots[0].ms_per_sample, Some(20.0));
    }

    #[test]
    fn statuses_without_samples() {
        let header: Header = serde_json::from_str(
            r#"{"schema_version":2,"start_time":"x","start_unix_us":0,"interval_s":0.1,"host":{"cpu_count":2},"py_rate_hz":100.0}"#,
        )
        .unwrap();
        let mut acc = PyAcc::default();
        acc.push(&Line::PyStatus(crate::sample::event::PyStatusLine {
            t_s: 0.1,
            pid: 3,
            status: PyStatus::Denied,
            detail: Some("Operation not permitted".into()),
            rank: None,
        }));
        let p = acc.finish(&header, &JobEvidence::default()).unwrap();
        assert_eq!(p.status, PyStatus::Denied);
        assert!(p.main.is_none());
        let p = PyAcc::default()
            .finish(&header, &JobEvidence::default())
            .unwrap();
        assert_eq!(p.status, PyStatus::NotPython);
        let mut h1 = header.clone();
        h1.py_rate_hz = None;
        assert!(PyAcc::default()
            .finish(&h1, &JobEvidence::default())
            .is_none());
    }
}
