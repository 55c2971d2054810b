//! Phases of a long log: start-up, active training, eval-like stretches, idle stretches and an
//! idle tail. Logs people keep run for hours and often go on after the job ended; judging the
//! whole file as one block would blame the GPU for time the job was not running.
//!
//! Pure functions over a pooled utilization series (the busiest GPU at each poll: the job's
//! phase is the same on all its GPUs).

use crate::units::duration;
use serde::{Deserialize, Serialize};

/// Utilization (%) under which a poll counts as idle.
pub const IDLE_PCT: f64 = 5.0;
/// Shortest start-up and eval-like stretch worth splitting off, in seconds (and at least three
/// polls).
pub const MIN_STRETCH_S: f64 = 30.0;
/// Shortest idle tail worth splitting off, in seconds (and at least three polls).
pub const MIN_TAIL_S: f64 = 60.0;

/// What the job was doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PhaseKind {
    /// Idle before the first busy poll (loading data and model, compiling).
    StartUp,
    /// Training: the part that is judged.
    Active,
    /// A stretch well below the training level but not idle, inside the active span (evaluation,
    /// checkpointing with some GPU work, a slow epoch boundary).
    EvalLike,
    /// A stretch at idle inside the active span (a pause, a checkpoint written by the CPU).
    Idle,
    /// Idle with the GPUs' memory released (no more than a CUDA context's on any GPU) between
    /// busy stretches: one run ended and the next had not started (benchmarks and sweeps that
    /// append their runs to one log). Split off however short (three polls at least).
    BetweenRuns,
    /// Idle after the last busy poll up to the end of the log: the job ended or hung while the
    /// logger went on.
    IdleTail,
}

/// One stretch of the log.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Phase {
    pub kind: PhaseKind,
    /// Seconds from the start of the log.
    pub start_s: f64,
    pub end_s: f64,
    /// Mean pooled utilization over the stretch.
    pub util_mean_pct: f64,
}

impl Phase {
    pub fn duration_s(&self) -> f64 {
        (self.end_s - self.start_s).max(0.0)
    }
}

/// Readings closer than this to the first of a pooled point belong to it.
pub const POOL_S: f64 = 0.5;

/// Pools per-GPU readings `(t_s, util_pct)` as they stream in (several GPUs interleaved) into
/// one series: readings within [`POOL_S`] of a point's first reading are one point, valued at
/// the busiest GPU. Memory grows with the log's duration, not its sampling rate or GPU count
/// (at most two points a second: about 2.8 MB for a day), up to [`MAX_POOLED`] points: past
/// that the points are pooled coarser (twice as wide each time), so that a log of months
/// stays within 32 MB here.
#[derive(Debug)]
pub struct Pooler {
    points: Vec<(f64, f64)>,
    /// Per point: the most memory any GPU held (`None`: none said).
    mem: Vec<Option<u64>>,
    /// Seconds a point pools: [`POOL_S`], doubled each time the points reach [`MAX_POOLED`].
    width_s: f64,
}

impl Default for Pooler {
    fn default() -> Self {
        Pooler {
            points: Vec::new(),
            mem: Vec::new(),
            width_s: POOL_S,
        }
    }
}

/// The most points a [`Pooler`] holds (32 bytes each): about 12 days of readings a second.
pub(crate) const MAX_POOLED: usize = 1 << 20;

fn max_mem(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// Memory (bytes) up to which a GPU holds no job: a CUDA context's worth.
pub const RELEASED_BYTES: u64 = 1 << 30;

impl Pooler {
    pub fn push(&mut self, t_s: f64, util_pct: f64) {
        self.push_with_memory(t_s, util_pct, None);
    }

    /// As [`Pooler::push`], with the GPU's memory in use at that reading.
    #[inline(always)]
    pub(crate) fn push_with_memory(&mut self, t_s: f64, util_pct: f64, mem_bytes: Option<u64>) {
        if !(t_s.is_finite() && util_pct.is_finite()) {
            return;
        }
        match (self.points.last_mut(), self.mem.last_mut()) {
            (Some(last), Some(m)) if t_s >= last.0 && t_s - last.0 < self.width_s => {
                last.1 = last.1.max(util_pct);
                *m = max_mem(*m, mem_bytes);
            }
            _ => {
                self.points.push((t_s, util_pct));
                self.mem.push(mem_bytes);
                if self.points.len() >= MAX_POOLED {
                    self.coarsen();
                }
            }
        }
    }

    /// Pools the points held again, twice as wide each time, until they fill at most half of
    /// [`MAX_POOLED`]; when a wider pool hardly shrinks them (times that run backwards, which
    /// no width pools), neighbours are pooled in pairs.
    #[cold]
    fn coarsen(&mut self) {
        while self.points.len() > MAX_POOLED / 2 {
            self.width_s *= 2.0;
            let before = self.points.len();
            let width = self.width_s;
            self.repool(|last, t| t >= last && t - last < width);
            if self.points.len() * 10 > before * 9 {
                let mut odd = false;
                self.repool(|_, _| {
                    odd = !odd;
                    odd
                });
            }
        }
    }

    /// Merges each point into the one kept before it where `joins(its time, this time)`.
    fn repool(&mut self, mut joins: impl FnMut(f64, f64) -> bool) {
        let mut kept = 0;
        for i in 0..self.points.len() {
            let (p, m) = (self.points[i], self.mem[i]);
            if i > 0 && joins(self.points[kept - 1].0, p.0) {
                let last = &mut self.points[kept - 1];
                last.1 = last.1.max(p.1);
                self.mem[kept - 1] = max_mem(self.mem[kept - 1], m);
            } else {
                self.points[kept] = p;
                self.mem[kept] = m;
                kept += 1;
            }
        }
        self.points.truncate(kept);
        self.mem.truncate(kept);
    }

    /// Seconds one point pools: [`POOL_S`], or more when the log was too long to pool finer.
    pub(crate) fn width_s(&self) -> f64 {
        self.width_s
    }

    /// The pooled series, sorted by time.
    pub fn finish(self) -> Vec<(f64, f64)> {
        self.finish_with_released().0
    }

    /// The pooled series, sorted by time, and for each point whether every GPU's memory was
    /// released: known, no more than [`RELEASED_BYTES`], and under half of what the job held
    /// (the 99th percentile of the log's memory): a job that holds under 1 GiB itself has its
    /// dips at 780 of 800 MiB read as dips, not as gaps between runs.
    pub(crate) fn finish_with_released(self) -> (Vec<(f64, f64)>, Vec<bool>) {
        let mut known: Vec<u64> = self.mem.iter().flatten().copied().collect();
        let job = (!known.is_empty()).then(|| {
            let k = (known.len() - 1) * 99 / 100;
            *known.select_nth_unstable(k).1
        });
        let mut both: Vec<((f64, f64), Option<u64>)> =
            self.points.into_iter().zip(self.mem).collect();
        both.sort_by(|a, b| a.0 .0.total_cmp(&b.0 .0));
        let released = |b: u64| b <= RELEASED_BYTES && job.is_some_and(|j| b.saturating_mul(2) < j);
        both.into_iter()
            .map(|(p, m)| (p, m.is_some_and(released)))
            .unzip()
    }
}

fn mean(s: &[(f64, f64)]) -> f64 {
    if s.is_empty() {
        0.0
    } else {
        s.iter().map(|p| p.1).sum::<f64>() / s.len() as f64
    }
}

/// Splits a pooled series into phases covering it from its first to its last poll. Returns an
/// empty list when there is nothing to split (too short, never busy, or one active block).
/// `released[i]` says the GPUs' memory was released at point `i` (may be empty: not known).
pub(crate) fn segment(series: &[(f64, f64)], released: &[bool]) -> Vec<Phase> {
    if series.len() < 10 {
        return Vec::new();
    }
    let mut dts: Vec<f64> = series.windows(2).map(|w| w[1].0 - w[0].0).collect();
    let interval = crate::stats::upper_median(&mut dts)
        .unwrap_or(1.0)
        .max(1e-3);
    let t0 = series[0].0;
    let t_end = series[series.len() - 1].0;
    // The first busy poll that the next one confirms: a lone reading over the line as the logger
    // starts (xpu-smi's first reading of a benchmark was 6 %, then 0 % for 10 s) is no start.
    let busy_at = |i: usize| series.get(i).is_some_and(|p| p.1 >= IDLE_PCT);
    let (Some(first), Some(last)) = (
        (0..series.len())
            .find(|&i| busy_at(i) && busy_at(i + 1))
            .or_else(|| series.iter().position(|p| p.1 >= IDLE_PCT)),
        series.iter().rposition(|p| p.1 >= IDLE_PCT),
    ) else {
        return Vec::new();
    };
    let at = |i: usize| series[i].0 - t0;
    let mut out = Vec::new();
    let min_stretch = MIN_STRETCH_S.max(3.0 * interval);
    let min_tail = MIN_TAIL_S.max(3.0 * interval);
    // Start-up: idle polls before the first busy one (in a short log, a tenth of it is worth
    // splitting off: 5 s of loading in a 25 s excerpt reads as a starved level otherwise).
    let mut active_from = 0;
    let min_start = min_stretch.min((0.1 * (t_end - t0)).max(3.0 * interval));
    if series[first].0 - t0 >= min_start {
        out.push(Phase {
            kind: PhaseKind::StartUp,
            start_s: 0.0,
            end_s: at(first),
            util_mean_pct: mean(&series[..first]),
        });
        active_from = first;
    }
    // Idle tail: idle polls after the last busy one.
    let mut active_to = series.len() - 1;
    // As for the start-up, a tenth of a short log is an idle tail worth splitting off.
    let min_tail = min_tail.min((0.1 * (t_end - t0)).max(3.0 * interval));
    let tail =
        (last + 1 < series.len() && t_end - series[last + 1].0 + interval >= min_tail).then(|| {
            Phase {
                kind: PhaseKind::IdleTail,
                start_s: at(last + 1),
                end_s: t_end - t0,
                util_mean_pct: mean(&series[last + 1..]),
            }
        });
    if tail.is_some() {
        active_to = last;
    }
    // Inside the active span: long stretches well below the training level.
    let span = &series[active_from..=active_to];
    let mut busy: Vec<f64> = span
        .iter()
        .map(|p| p.1)
        .filter(|u| *u >= IDLE_PCT)
        .collect();
    let level = crate::stats::upper_median(&mut busy).unwrap_or(IDLE_PCT);
    let low = (0.5 * level).max(IDLE_PCT);
    // Start of the last active stretch.
    let cursor = low_stretches(
        series,
        released,
        (active_from, active_to),
        low,
        (min_stretch, interval),
        &mut out,
    );
    let active_end = match &tail {
        Some(t) => t.start_s,
        None => t_end - t0,
    };
    if cursor <= active_to {
        out.push(Phase {
            kind: PhaseKind::Active,
            start_s: at(cursor),
            end_s: active_end,
            util_mean_pct: mean(&series[cursor..=active_to]),
        });
    }
    out.extend(tail);
    out.sort_by(|a, b| a.start_s.total_cmp(&b.start_s));
    if out.len() == 1 && out[0].kind == PhaseKind::Active {
        return Vec::new();
    }
    // A log that hovers at the idle line (a GPU flat at 4-6 % for hours) has no start-up to cut:
    // judging the sliver above the line would judge nothing. Under a tenth left, it is one block
    // unless the part left is a job: long enough and clear of the line (a 20-minute job at 40 %
    // in 4 hours at 0 % was judged `idle` with the hours around it).
    let active: f64 = out
        .iter()
        .filter(|p| p.kind == PhaseKind::Active)
        .map(Phase::duration_s)
        .sum();
    let active_mean = out
        .iter()
        .filter(|p| p.kind == PhaseKind::Active)
        .map(|p| p.util_mean_pct * p.duration_s())
        .sum::<f64>()
        / active.max(1e-9);
    let a_job = active >= min_stretch.max(10.0 * interval) && active_mean >= 3.0 * IDLE_PCT;
    if active < 0.1 * (t_end - t0) && !a_job {
        return Vec::new();
    }
    out
}

/// Inside the active span `from..=to`: each stretch below `low` that lasts `min_stretch` or
/// more (and neither starts the span nor reaches its end) becomes an idle or eval-like phase,
/// after the active stretch before it. Returns where the last active stretch starts.
fn low_stretches(
    series: &[(f64, f64)],
    released: &[bool],
    (active_from, active_to): (usize, usize),
    low: f64,
    (min_stretch, interval): (f64, f64),
    out: &mut Vec<Phase>,
) -> usize {
    let t0 = series[0].0;
    let at = |i: usize| series[i].0 - t0;
    let mut cursor = active_from;
    let mut i = active_from;
    while i <= active_to {
        if series[i].1 >= low {
            i += 1;
            continue;
        }
        let a = i;
        while i <= active_to && series[i].1 < low {
            i += 1;
        }
        // The stretch lasts until the next poll at training level.
        let end_t = if i <= active_to {
            series[i].0
        } else {
            series[active_to].0 + interval
        };
        let dur = end_t - series[a].0;
        // Memory released for most of it (a run's end and the next one's loading hold some): a
        // gap between runs, split off however short.
        let freed = released
            .get(a..i)
            .map_or(0, |r| r.iter().filter(|&&x| x).count());
        let between = freed >= 3 && freed * 2 >= i - a;
        if (dur >= min_stretch || between) && a > active_from && i <= active_to {
            let m = mean(&series[a..i]);
            if a > cursor {
                out.push(Phase {
                    kind: PhaseKind::Active,
                    start_s: at(cursor),
                    end_s: at(a),
                    util_mean_pct: mean(&series[cursor..a]),
                });
            }
            out.push(Phase {
                kind: if between {
                    PhaseKind::BetweenRuns
                } else if m < IDLE_PCT {
                    PhaseKind::Idle
                } else {
                    PhaseKind::EvalLike
                },
                start_s: at(a),
                end_s: end_t - t0,
                util_mean_pct: m,
            });
            cursor = i;
        }
    }
    cursor
}

/// Maps a time of the log onto the judged (active-only) timeline: `None` outside the active
/// phases, else the time with every earlier non-active stretch cut out.
pub(crate) fn judged_time(phases: &[Phase], t_s: f64) -> Option<f64> {
    let mut cut = 0.0;
    for (i, p) in phases.iter().enumerate() {
        if p.kind == PhaseKind::Active {
            // The last poll of the log sits on the end of its last stretch: both ends belong to
            // it. A stretch followed by another ends where the next one's first poll is: that
            // poll (the idle one after a run ended, 0 MiB) is the next one's.
            let next_starts_here = phases.get(i + 1).is_some_and(|n| n.start_s <= p.end_s);
            if t_s >= p.start_s && (t_s < p.end_s || (t_s == p.end_s && !next_starts_here)) {
                return Some(t_s - cut);
            }
        } else if t_s >= p.end_s {
            cut += p.duration_s();
        }
    }
    None
}

/// [`judged_time`] for every reading of a log: the phases looked up by binary search from
/// where the time falls, not walked from the first (a log of a million readings with thousands
/// of phases spent seconds walking them). Phases out of order are walked as before.
pub(crate) struct JudgedClock<'a> {
    phases: &'a [Phase],
    /// The time cut out before each phase: the non-active phases' durations before it, summed
    /// in the order `judged_time` sums them (the same bits).
    cut_before: Vec<f64>,
    sorted: bool,
}

impl<'a> JudgedClock<'a> {
    pub(crate) fn new(phases: &'a [Phase]) -> Self {
        let mut cut_before = Vec::with_capacity(phases.len());
        let mut cut = 0.0;
        for p in phases {
            cut_before.push(cut);
            if p.kind != PhaseKind::Active {
                cut += p.duration_s();
            }
        }
        let sorted = phases
            .windows(2)
            .all(|w| w[0].start_s <= w[1].start_s && w[0].end_s <= w[1].end_s);
        JudgedClock {
            phases,
            cut_before,
            sorted,
        }
    }

    /// [`judged_time`] of `t_s`.
    pub(crate) fn at(&self, t_s: f64) -> Option<f64> {
        if !self.sorted {
            return judged_time(self.phases, t_s);
        }
        // Every phase that ends before `t_s` is cut out whole (when not active) and cannot hold
        // it; a phase that starts after it cannot either, nor any after that.
        let from = self.phases.partition_point(|p| p.end_s < t_s);
        let mut cut = self.cut_before.get(from).copied().unwrap_or(0.0);
        for (i, p) in self.phases.iter().enumerate().skip(from) {
            if p.start_s > t_s || t_s.is_nan() {
                break;
            }
            if p.kind == PhaseKind::Active {
                let next_starts_here = self.phases.get(i + 1).is_some_and(|n| n.start_s <= p.end_s);
                if t_s < p.end_s || (t_s == p.end_s && !next_starts_here) {
                    return Some(t_s - cut);
                }
            } else if t_s >= p.end_s {
                cut += p.duration_s();
            }
        }
        None
    }
}

/// One line for people about what was split off, or `None` when nothing was.
pub(crate) fn describe(phases: &[Phase]) -> Option<String> {
    if phases.is_empty() {
        return None;
    }
    let active: f64 = phases
        .iter()
        .filter(|p| p.kind == PhaseKind::Active)
        .map(Phase::duration_s)
        .sum();
    let total: f64 = phases.iter().map(Phase::duration_s).sum();
    let lead = if active < 0.1 * total {
        // A short job in a long log: the log's idle hours are not the job's.
        format!(
            "A short job in a long log: judged the {} it ran, alone (the log spans {})",
            duration(active),
            duration(total)
        )
    } else {
        format!("Judged the {} of training", duration(active))
    };
    let mut parts = vec![lead];
    for p in phases.iter().filter(|p| p.kind == PhaseKind::StartUp) {
        parts.push(format!(
            "start-up of {} at {:.0}% left out",
            duration(p.duration_s()),
            p.util_mean_pct
        ));
    }
    let evals: Vec<&Phase> = phases
        .iter()
        .filter(|p| p.kind == PhaseKind::EvalLike)
        .collect();
    if !evals.is_empty() {
        let total: f64 = evals.iter().map(|p| p.duration_s()).sum();
        let u = evals.iter().map(|p| p.util_mean_pct).sum::<f64>() / evals.len() as f64;
        let mut s = format!(
            "{} eval-like stretch{} ({} in all, about {} each at {:.0}%",
            evals.len(),
            if evals.len() == 1 { "" } else { "es" },
            duration(total),
            duration(total / evals.len() as f64),
            u
        );
        if evals.len() >= 2 {
            let gaps: Vec<f64> = evals
                .windows(2)
                .map(|w| w[1].start_s - w[0].start_s)
                .collect();
            let every = gaps.iter().sum::<f64>() / gaps.len() as f64;
            s.push_str(&format!(", every {}", duration(every)));
        }
        s.push_str(&format!(
            ": {:.0}% of the training time) reported, not judged",
            100.0 * total / (active + total).max(1e-9)
        ));
        parts.push(s);
    }
    let idles: Vec<&Phase> = phases
        .iter()
        .filter(|p| p.kind == PhaseKind::Idle)
        .collect();
    if !idles.is_empty() {
        let total: f64 = idles.iter().map(|p| p.duration_s()).sum();
        parts.push(format!(
            "{} idle stretch{} inside the run ({} in all) left out",
            idles.len(),
            if idles.len() == 1 { "" } else { "es" },
            duration(total)
        ));
    }
    let gaps: Vec<&Phase> = phases
        .iter()
        .filter(|p| p.kind == PhaseKind::BetweenRuns)
        .collect();
    if !gaps.is_empty() {
        let total: f64 = gaps.iter().map(|p| p.duration_s()).sum();
        parts.push(format!(
            "{} gap{} between runs (memory released, {} in all) left out",
            gaps.len(),
            if gaps.len() == 1 { "" } else { "s" },
            duration(total)
        ));
    }
    let mut line = parts.join("; ");
    line.push('.');
    if let Some(t) = phases.iter().find(|p| p.kind == PhaseKind::IdleTail) {
        line.push_str(&format!(
            " Idle for the last {}: the job had ended or hung while logging went on.",
            duration(t.duration_s())
        ));
    }
    Some(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Phases from a seed: in order, touching or with holes between them, of every kind; or,
    /// with `shuffle`, some out of order.
    fn random_phases(seed: u64, n: usize, shuffle: bool) -> Vec<Phase> {
        let mut x = seed | 1;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let kinds = [
            PhaseKind::Active,
            PhaseKind::StartUp,
            PhaseKind::BetweenRuns,
            PhaseKind::IdleTail,
        ];
        let mut t = 0.0;
        let mut out: Vec<Phase> = (0..n)
            .map(|_| {
                let start = t + [0.0, 0.0, 1.0, 0.5][(next() % 4) as usize];
                let end = start + (next() % 50) as f64 * 0.25;
                t = end;
                Phase {
                    kind: kinds[(next() % 4) as usize],
                    start_s: start,
                    end_s: end,
                    util_mean_pct: 50.0,
                }
            })
            .collect();
        if shuffle && n > 2 {
            out.swap(0, n - 1);
        }
        out
    }

    #[test]
    fn memory_is_released_only_below_what_the_job_held() {
        // A job that holds 800 MiB, wobbling by 20, with dips of utilization: no gap between runs.
        let mib = |m: u64| m << 20;
        let mut small = Pooler::default();
        for i in 0..3600u64 {
            let u = if i % 50 < 5 { 2.0 } else { 90.0 };
            small.push_with_memory(i as f64, u, Some(mib(800 + i % 41 - 20)));
        }
        let (_, released) = small.finish_with_released();
        assert!(!released.iter().any(|&r| r));
        // Runs of 40 GiB with 0 MiB between them: released there.
        let mut runs = Pooler::default();
        for i in 0..3600u64 {
            let gap = i % 600 >= 570;
            let m = if gap { 0 } else { 40 << 10 };
            runs.push_with_memory(i as f64, if gap { 0.0 } else { 90.0 }, Some(mib(m)));
        }
        let (_, released) = runs.finish_with_released();
        assert_eq!(released.iter().filter(|&&r| r).count(), 6 * 30);
    }

    #[test]
    fn the_judged_clock_tells_the_time_judged_time_tells() {
        for seed in 1..300u64 {
            let phases = random_phases(seed, (seed % 40) as usize, seed % 7 == 0);
            let clock = JudgedClock::new(&phases);
            let end = phases.last().map_or(1.0, |p| p.end_s) + 2.0;
            let mut t = -1.0;
            while t < end {
                let (want, got) = (judged_time(&phases, t), clock.at(t));
                assert_eq!(
                    want.map(f64::to_bits),
                    got.map(f64::to_bits),
                    "t {t} {phases:?}"
                );
                t += 0.125;
            }
            for p in &phases {
                for t in [p.start_s, p.end_s, f64::NAN] {
                    let (want, got) = (judged_time(&phases, t), clock.at(t));
                    assert_eq!(want.map(f64::to_bits), got.map(f64::to_bits), "t {t}");
                }
            }
        }
    }

    #[test]
    fn a_long_log_is_pooled_coarser_within_the_cap() {
        // Months of readings a second: the points held stay under the cap, and the series
        // still spans the log with its busy and idle stretches.
        let mut p = Pooler::default();
        let n = 3 * MAX_POOLED as u64;
        for i in 0..n {
            let busy = (i / 100_000) % 2 == 0;
            p.push(i as f64, if busy { 90.0 } else { 0.0 });
            assert!(p.points.len() < MAX_POOLED);
        }
        assert!(p.width_s() > 2.0, "{}", p.width_s());
        let s = p.finish();
        assert!(s.len() < MAX_POOLED, "{}", s.len());
        assert_eq!(s[0].0, 0.0);
        assert!(s[s.len() - 1].0 > (n - 10) as f64);
        assert!(s.iter().any(|x| x.1 == 0.0) && s.iter().any(|x| x.1 == 90.0));
        // A short log is pooled as before.
        let mut p = Pooler::default();
        for i in 0..1000 {
            p.push(f64::from(i), 50.0);
        }
        assert_eq!((p.width_s(), p.finish().len()), (POOL_S, 1000));
        // Times that run backwards are pooled in pairs: still bounded.
        let mut p = Pooler::default();
        for i in 0..(MAX_POOLED as u64 + 10) {
            p.push(-(i as f64), 50.0);
        }
        assert!(p.points.len() <= MAX_POOLED / 2 + 10);
    }

    /// One poll every `dt` seconds from `f(t)`.
    fn series(secs: f64, dt: f64, f: impl Fn(f64) -> f64) -> Vec<(f64, f64)> {
        let n = (secs / dt) as usize;
        (0..=n).map(|i| (i as f64 * dt, f(i as f64 * dt))).collect()
    }

    #[test]
    fn the_poll_after_a_run_ended_is_not_judged_with_it() {
        // One table a minute: start-up, three at 93-100 %, then the job gone for ten minutes.
        let mut util = vec![0.0; 4];
        util.extend([93.0, 93.0, 100.0]);
        util.extend([0.0; 10]);
        let s: Vec<(f64, f64)> = util
            .iter()
            .enumerate()
            .map(|(i, u)| (60.0 * i as f64, *u))
            .collect();
        let phases = segment(&s, &[]);
        let judged: Vec<f64> = s
            .iter()
            .filter(|p| judged_time(&phases, p.0).is_some())
            .map(|p| p.1)
            .collect();
        assert_eq!(judged, [93.0, 93.0, 100.0], "{phases:?}");
        // Without a tail after it, the last poll of the log is judged.
        let run: Vec<(f64, f64)> = (0..12).map(|i| (60.0 * f64::from(i), 90.0)).collect();
        let phases = segment(&run, &[]);
        assert!(phases.is_empty() || judged_time(&phases, 660.0).is_some());
    }

    #[test]
    fn one_active_block_is_not_split() {
        assert!(segment(&series(3600.0, 1.0, |_| 90.0), &[]).is_empty());
        // A starving square wave (lows of a few seconds) stays one block.
        let s = series(3600.0, 1.0, |t| {
            if (t / 10.0).fract() < 0.3 {
                85.0
            } else {
                10.0
            }
        });
        assert!(segment(&s, &[]).is_empty());
        // Runs appended to one log: 10 s gaps with the memory released are split off, the same
        // gaps with memory held are part of the run.
        let runs: Vec<(f64, f64)> = (0..300)
            .map(|i| (i as f64, if i % 60 < 50 { 80.0 } else { 0.0 }))
            .collect();
        let released: Vec<bool> = runs.iter().map(|p| p.1 == 0.0).collect();
        let p = segment(&runs, &released);
        let gaps = p
            .iter()
            .filter(|x| x.kind == PhaseKind::BetweenRuns)
            .count();
        assert_eq!(gaps, 4, "{p:?}");
        assert!(
            describe(&p).unwrap().contains("4 gaps between runs"),
            "{p:?}"
        );
        assert!(segment(&runs, &vec![false; runs.len()]).is_empty());
        // Hovering at the idle line for an hour, above it only at the end: one block, not a
        // start-up of 59 minutes and a minute judged.
        let flat: Vec<(f64, f64)> = (0..3600)
            .map(|i| (i as f64, if i < 3550 { 4.0 } else { 6.0 }))
            .collect();
        assert!(segment(&flat, &[]).is_empty());
        assert!(
            segment(&series(3600.0, 1.0, |_| 0.0), &[]).is_empty(),
            "never busy"
        );
    }

    #[test]
    fn a_lone_reading_over_the_line_does_not_start_the_job() {
        // xpu-smi's log of a benchmark: 6 % on its first reading, 0 % for 10 s, then the job
        // at 97 % for 70 s, polled every second.
        let f = |t: f64| match t {
            t if t < 1.0 => 6.0,
            t if t < 11.0 => 0.0,
            _ => 97.0,
        };
        let p = segment(&series(81.0, 1.0, f), &[]);
        assert_eq!(
            p.first().map(|p| p.kind),
            Some(PhaseKind::StartUp),
            "{p:#?}"
        );
        assert_eq!(p[0].end_s, 11.0);
    }

    #[test]
    fn start_up_training_with_eval_and_an_idle_tail() {
        // 3 min start-up, 86 min of training at 90% with a 2-minute eval at 25% every 15 min,
        // then 5 h 02 min at 0%; polled every 10 s.
        let f = |t: f64| {
            if t < 180.0 {
                0.0
            } else if t < 180.0 + 86.0 * 60.0 {
                let k = (t - 180.0) % 900.0;
                if k >= 780.0 {
                    25.0
                } else {
                    90.0
                }
            } else {
                0.0
            }
        };
        let total = 180.0 + 86.0 * 60.0 + 302.0 * 60.0;
        let p = segment(&series(total, 10.0, f), &[]);
        let kinds: Vec<PhaseKind> = p.iter().map(|p| p.kind).collect();
        assert_eq!(kinds[0], PhaseKind::StartUp);
        assert_eq!(*kinds.last().unwrap(), PhaseKind::IdleTail);
        let evals = kinds.iter().filter(|k| **k == PhaseKind::EvalLike).count();
        assert_eq!(evals, 5, "{p:#?}");
        let tail = p.last().unwrap();
        assert!((tail.duration_s() - 302.0 * 60.0).abs() <= 20.0, "{tail:?}");
        let line = describe(&p).unwrap();
        assert!(line.contains("Idle for the last 5h 0"), "{line}");
        assert!(line.contains("the job had ended or hung while logging went on"));
        assert!(line.contains("5 eval-like stretches"), "{line}");
        // The judged timeline: active polls map, others do not; cut time is removed.
        assert_eq!(judged_time(&p, 10.0), None, "start-up");
        assert_eq!(judged_time(&p, 200.0), Some(20.0));
        assert_eq!(judged_time(&p, total - 10.0), None, "idle tail");
        let after_eval = 180.0 + 900.0 + 10.0;
        let j = judged_time(&p, after_eval).unwrap();
        assert!((j - (after_eval - 180.0 - 120.0)).abs() <= 10.0, "{j}");
    }

    #[test]
    fn pooling_takes_the_busiest_gpu_of_each_poll() {
        let mut p = Pooler::default();
        for (t, u) in [
            (0.0, 0.0),
            (0.02, 80.0),
            (1.0, 5.0),
            (1.01, 0.0),
            (2.0, 50.0),
        ] {
            p.push(t, u);
        }
        assert_eq!(p.finish(), [(0.0, 80.0), (1.0, 5.0), (2.0, 50.0)]);
        // 200 ms polls pool into points about 0.6 s apart: memory follows the duration.
        let mut p = Pooler::default();
        for i in 0..3000 {
            p.push(i as f64 * 0.2, 50.0);
        }
        assert_eq!(p.finish().len(), 1000);
    }
}
