//! `gpufeed compare BEFORE AFTER`: the figures that matter side by side, their changes, the
//! speed-up (with a 95% interval where the inputs allow one) and the change of verdict.
//!
//! Pure functions over what the existing readers produce: a recording's diagnosis
//! ([`DiagnoseReport`]), a trace's [`TraceSummary`] (with its findings), or a sweep's
//! [`SweepReport`]. The command (`commands::compare`) reads the files; `present::compare` renders.

use crate::diagnose::verdict::VerdictId;
use crate::diagnose::DiagnoseReport;
use crate::finding::{Finding, FindingId};
use crate::trace::TraceSummary;
use crate::tune::steady::t975;
use crate::tune::sweep::SweepReport;
use serde::{Deserialize, Serialize};

pub const SCHEMA_VERSION: u32 = 1;

/// What both inputs are.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[strum(serialize_all = "snake_case")]
#[serde(rename_all = "snake_case")]
pub enum InputKind {
    Recording,
    Trace,
    Sweep,
}

impl InputKind {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Which way a metric should move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Better {
    Higher,
    Lower,
    /// Neither direction is good in itself (memory used, a count).
    Neutral,
}

/// One side of the comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Side {
    pub path: String,
    /// Verdict id (recordings), top finding id (traces; `none` without findings) or the sweet
    /// spot's setting (sweeps).
    pub verdict: Option<SideVerdict>,
    /// One line for people: the verdict's summary or the top finding's title.
    pub verdict_summary: Option<String>,
    /// The top fix of this side, when there is one.
    pub top_fix: Option<String>,
}

/// One row of the table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// Stable id with its unit in the name (`gpu_busy_pct`, `step_ms`, ...).
    pub metric: String,
    /// The row's label for people.
    pub label: String,
    pub before: Option<f64>,
    pub after: Option<f64>,
    /// `100 × (after − before) / before`; `None` when either side is missing or before is 0.
    pub delta_pct: Option<f64>,
    pub better: Better,
}

/// How much faster AFTER is: `value` > 1 is faster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Speedup {
    pub value: f64,
    /// What the ratio is of: `mean_step_time` (traces), a throughput unit such as `steps/s`
    /// (sweeps), `gpu_busy_pct` (a proxy) or `job_duration` (recordings of whole runs).
    pub metric: String,
    /// 95% interval `[low, high]`, where both inputs carry their spread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci95: Option<[f64; 2]>,
    /// How it was computed and what it assumes.
    pub basis: String,
}

/// Whether AFTER is better than BEFORE, in one word.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[strum(serialize_all = "snake_case")]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    Better,
    Worse,
    Same,
}

impl Direction {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerdictChange {
    pub before: Option<SideVerdict>,
    pub after: Option<SideVerdict>,
    pub changed: bool,
    /// Better / worse / same: from the speed-up's 95% interval (it must clear 1), else from the
    /// speed-up itself (more than 5% either way), else from the verdicts' order of severity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<Direction>,
}

/// A speed-up counts as a change when its interval clears 1, or, without an interval, when it
/// is more than this far from 1.
pub const SAME_WITHIN: f64 = 0.05;

/// Better / worse / same from a speed-up (see [`VerdictChange::direction`]).
pub fn direction_of(s: &Speedup) -> Direction {
    match s.ci95 {
        Some([lo, _]) if lo > 1.0 => Direction::Better,
        Some([_, hi]) if hi < 1.0 => Direction::Worse,
        Some(_) => Direction::Same,
        None if s.value > 1.0 + SAME_WITHIN => Direction::Better,
        None if s.value < 1.0 / (1.0 + SAME_WITHIN) => Direction::Worse,
        None => Direction::Same,
    }
}

/// What a side's verdict names, typed: a recording's verdict, a trace's top finding (`None`
/// when no rule fired) or a sweep's chosen setting. The JSON writes it as one string
/// (`input_bound`, `amp_unused`, `none`, `workers=4`), as before it was typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SideVerdict {
    Recording(VerdictId),
    TopFinding(Option<FindingId>),
    Setting(String),
}

impl SideVerdict {
    pub fn as_str(&self) -> &str {
        match self {
            SideVerdict::Recording(v) => v.as_str(),
            SideVerdict::TopFinding(Some(f)) => f.as_str(),
            SideVerdict::TopFinding(None) => "none",
            SideVerdict::Setting(s) => s,
        }
    }
}

impl std::fmt::Display for SideVerdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

impl Serialize for SideVerdict {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// The string alone does not say which input it came from (the comparison's `kind` does): a
/// verdict id reads as a recording's, else a finding id or `none` as a trace's, else a setting.
impl<'de> Deserialize<'de> for SideVerdict {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(
            if let Some(v) = VerdictId::ALL.iter().find(|v| v.as_str() == s) {
                SideVerdict::Recording(*v)
            } else if let Some(f) = FindingId::ALL.iter().find(|f| f.as_str() == s) {
                SideVerdict::TopFinding(Some(*f))
            } else if s == "none" {
                SideVerdict::TopFinding(None)
            } else {
                SideVerdict::Setting(s)
            },
        )
    }
}

/// Recording verdicts from worst to best (a bound job is worse than a balanced one).
fn verdict_rank(v: &SideVerdict) -> Option<u8> {
    match v {
        SideVerdict::Recording(id) => match id {
            VerdictId::InputBound
            | VerdictId::TransferBound
            | VerdictId::Throttled
            | VerdictId::Idle => Some(0),
            VerdictId::ComputeBound => Some(1),
            VerdictId::Unknown => None,
        },
        SideVerdict::TopFinding(_) | SideVerdict::Setting(_) => None,
    }
}

/// The `--format json` document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub schema_version: u32,
    pub kind: InputKind,
    pub before: Side,
    pub after: Side,
    pub speedup: Option<Speedup>,
    pub changes: Vec<Change>,
    pub verdict: VerdictChange,
    /// Caveats (different GPUs, a proxy metric, an unsettled trial ...).
    pub notes: Vec<String>,
}

fn round(x: f64, digits: i32) -> f64 {
    let m = 10f64.powi(digits);
    (x * m).round() / m + 0.0
}

fn change(metric: &str, label: &str, b: Option<f64>, a: Option<f64>, better: Better) -> Change {
    let delta_pct = match (b, a) {
        (Some(b), Some(a)) if b.abs() > 1e-12 => Some(round(100.0 * (a - b) / b.abs(), 1)),
        _ => None,
    };
    Change {
        metric: metric.into(),
        label: label.into(),
        before: b.map(|x| round(x, 3)),
        after: a.map(|x| round(x, 3)),
        delta_pct,
        better,
    }
}

/// Ratio `num / den` of two independent means with their standard errors: the 95% interval by
/// the delta method, `r × sqrt((se_n/n)² + (se_d/d)²) × t`.
pub fn ratio_ci(num: f64, se_num: f64, den: f64, se_den: f64, t: f64) -> Option<[f64; 2]> {
    if num <= 0.0 || den <= 0.0 || !se_num.is_finite() || !se_den.is_finite() || !t.is_finite() {
        return None;
    }
    let r = num / den;
    let rel = ((se_num / num).powi(2) + (se_den / den).powi(2)).sqrt();
    let hw = r * rel * t;
    Some([round(r - hw, 3), round(r + hw, 3)])
}

/// Mean and standard error of the mean (`None` for the error with fewer than two values).
fn mean_se(xs: &[f64]) -> Option<(f64, Option<f64>)> {
    if xs.is_empty() {
        return None;
    }
    let n = xs.len() as f64;
    let m = xs.iter().sum::<f64>() / n;
    if xs.len() < 2 {
        return Some((m, None));
    }
    let var = xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0);
    Some((m, Some((var / n).sqrt())))
}

fn verdict_change(b: &Side, a: &Side, speedup: Option<&Speedup>) -> VerdictChange {
    let by_rank = || {
        let rb = b.verdict.as_ref().and_then(verdict_rank)?;
        let ra = a.verdict.as_ref().and_then(verdict_rank)?;
        Some(match ra.cmp(&rb) {
            std::cmp::Ordering::Greater => Direction::Better,
            std::cmp::Ordering::Less => Direction::Worse,
            std::cmp::Ordering::Equal => Direction::Same,
        })
    };
    VerdictChange {
        before: b.verdict.clone(),
        after: a.verdict.clone(),
        changed: b.verdict != a.verdict,
        direction: speedup.map(direction_of).or_else(by_rank),
    }
}

// ---------- recordings ----------

fn rec_side(r: &DiagnoseReport) -> Side {
    Side {
        path: r.source.path.clone(),
        verdict: Some(SideVerdict::Recording(r.verdict.id)),
        verdict_summary: Some(r.verdict.summary.clone()),
        top_fix: r.findings.first().map(|f| f.recommendation.clone()),
    }
}

fn mean_of(xs: impl Iterator<Item = f64>) -> Option<f64> {
    let v: Vec<f64> = xs.collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// Two recordings (or logs) diagnosed.
pub fn recordings(before: &DiagnoseReport, after: &DiagnoseReport) -> Comparison {
    let mut notes = Vec::new();
    let names = |r: &DiagnoseReport| -> Vec<String> {
        r.gpus.iter().filter_map(|g| g.name.clone()).collect()
    };
    if names(before) != names(after) && !names(before).is_empty() && !names(after).is_empty() {
        notes.push(format!(
            "The GPUs differ ({} before, {} after): the figures compare machines as well as settings.",
            names(before).join(", "),
            names(after).join(", ")
        ));
    }
    let speedup = recording_speedup(before, after);
    if speedup.is_none() {
        notes
            .push("No speed-up: neither a step rate nor GPU utilization is in both inputs.".into());
    }
    let (b, a) = (rec_side(before), rec_side(after));
    Comparison {
        schema_version: SCHEMA_VERSION,
        kind: InputKind::Recording,
        verdict: verdict_change(&b, &a, speedup.as_ref()),
        before: b,
        after: a,
        speedup,
        changes: recording_changes(before, after),
        notes,
    }
}

/// The pooled GPU busy share in percent, as the verdict measured it.
fn busy_pct(r: &DiagnoseReport) -> Option<f64> {
    r.verdict.gpu_busy_fraction.map(|f| f * 100.0)
}

/// Two diagnoses' figures side by side (those either side has).
#[allow(clippy::too_many_lines)] // a table: one change() per compared figure
fn recording_changes(before: &DiagnoseReport, after: &DiagnoseReport) -> Vec<Change> {
    let util = |r: &DiagnoseReport| mean_of(r.gpus.iter().filter_map(|g| g.util_mean_pct));
    let low = |r: &DiagnoseReport| {
        mean_of(r.gpus.iter().filter_map(|g| g.low_util_fraction)).map(|f| f * 100.0)
    };
    let pcie = |r: &DiagnoseReport| {
        let v: Vec<f64> = r
            .gpus
            .iter()
            .filter_map(|g| g.pcie.rx_mean_bytes_per_s)
            .collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / 1e9)
    };
    let mem = |r: &DiagnoseReport| {
        r.gpus
            .iter()
            .filter_map(|g| g.mem_used_max_bytes)
            .max()
            .map(|b| b as f64 / (1u64 << 30) as f64)
    };
    let workers = |r: &DiagnoseReport| (r.job.samples > 0).then_some(r.job.workers_max as f64);
    let mut changes = step_changes(before, after);
    changes.extend([
        change(
            "gpu_busy_pct",
            "GPU busy %",
            busy_pct(before),
            busy_pct(after),
            Better::Higher,
        ),
        change(
            "gpu_util_mean_pct",
            "GPU utilization (mean) %",
            util(before),
            util(after),
            Better::Higher,
        ),
        change(
            "gpu_low_util_time_pct",
            "time with GPU under 50 % (%)",
            low(before),
            low(after),
            Better::Lower,
        ),
        change(
            "pcie_rx_gb_per_s",
            "host→GPU copies (GB/s)",
            pcie(before),
            pcie(after),
            Better::Neutral,
        ),
        change(
            "gpu_mem_max_gib",
            "GPU memory peak (GiB)",
            mem(before),
            mem(after),
            Better::Neutral,
        ),
        change(
            "main_process_cpu_pct",
            "main process CPU (% of a core)",
            before.job.main_cpu_mean_pct,
            after.job.main_cpu_mean_pct,
            Better::Neutral,
        ),
        change(
            "workers",
            "DataLoader workers",
            workers(before),
            workers(after),
            Better::Neutral,
        ),
        change(
            "worker_cpu_mean_pct",
            "CPU per worker (% of a core)",
            before.job.worker_cpu_mean_pct,
            after.job.worker_cpu_mean_pct,
            Better::Neutral,
        ),
        change(
            "host_cpu_mean_pct",
            "machine CPU %",
            before.host.cpu_mean_pct,
            after.host.cpu_mean_pct,
            Better::Neutral,
        ),
        change(
            "iowait_mean_pct",
            "I/O wait %",
            before.host.iowait_mean_pct,
            after.host.iowait_mean_pct,
            Better::Lower,
        ),
        change(
            "duration_s",
            "recording length (s)",
            Some(before.duration_s),
            Some(after.duration_s),
            Better::Neutral,
        ),
    ]);
    changes.extend(phase_changes(before, after));
    changes.retain(|c| c.before.is_some() || c.after.is_some());
    changes
}

/// The step markers' figures: the steady step rate, samples/s and the data wait (the step
/// markers' exact one, else the Python stacks' estimate).
fn step_changes(before: &DiagnoseReport, after: &DiagnoseReport) -> Vec<Change> {
    let steps = |r: &DiagnoseReport| {
        r.steps
            .as_ref()
            .and_then(|s| s.steady_steps_per_s.or(s.steps_per_s))
    };
    let samples = |r: &DiagnoseReport| r.steps.as_ref().and_then(|s| s.samples_per_s);
    let wait = |r: &DiagnoseReport| {
        r.steps
            .as_ref()
            .and_then(|s| s.steady_data_wait_pct.or(s.data_wait_pct))
            .or_else(|| r.python.as_ref().and_then(|p| p.data_wait_pct))
    };
    vec![
        change(
            "steps_per_s",
            "steps/s (steady)",
            steps(before),
            steps(after),
            Better::Higher,
        ),
        change(
            "samples_per_s",
            "samples/s",
            samples(before),
            samples(after),
            Better::Higher,
        ),
        change(
            "data_wait_pct",
            "waiting for data %",
            wait(before),
            wait(after),
            Better::Lower,
        ),
    ]
}

/// The training loop's phases (Python stacks), as shares of its time.
fn phase_changes(before: &DiagnoseReport, after: &DiagnoseReport) -> Vec<Change> {
    let ph = |r: &DiagnoseReport| {
        r.python
            .as_ref()
            .and_then(|p| p.main.as_ref())
            .map(|m| m.phases_pct.clone())
    };
    let (b, a) = (ph(before), ph(after));
    if b.is_none() && a.is_none() {
        return vec![];
    }
    type Get = fn(&crate::diagnose::pyloop::PhasesPct) -> f64;
    let rows: [(&str, &str, Get); 6] = [
        ("data_wait", "data wait", |p| p.data_wait),
        ("forward", "forward", |p| p.forward),
        ("backward", "backward", |p| p.backward),
        ("optimizer", "optimizer", |p| p.optimizer),
        ("sync", "sync", |p| p.sync),
        ("other", "other", |p| p.other + p.checkpoint_io),
    ];
    rows.iter()
        .map(|(id, label, get)| {
            change(
                &format!("loop_{id}_pct"),
                &format!("  loop: {label} %"),
                b.as_ref().map(get),
                a.as_ref().map(get),
                if *id == "data_wait" {
                    Better::Lower
                } else {
                    Better::Neutral
                },
            )
        })
        // a phase neither side spent time in is no figure
        .filter(|c| c.before.unwrap_or(0.0) > 0.0 || c.after.unwrap_or(0.0) > 0.0)
        .collect()
}

/// The steady step rates' ratio with its interval, when both recordings carry step markers.
fn step_rate_speedup(before: &DiagnoseReport, after: &DiagnoseReport) -> Option<Speedup> {
    let rate = |r: &DiagnoseReport| {
        let s = r.steps.as_ref()?;
        if let Some(v) = s.steady_steps_per_s.filter(|v| *v > 0.0) {
            // the interval is mean ± t·se with t ≥ 1.96: backing se out with 1.96 errs wide
            let se = s.steady_ci95.map(|[l, h]| (h - l) / 2.0 / 1.96);
            let warm = s
                .warmup_s
                .map(|w| format!(" ({w:.1} s of warm-up cut)"))
                .unwrap_or_default();
            return Some((v, se, format!("steady{warm}")));
        }
        let v = s.steps_per_s.filter(|v| *v > 0.0)?;
        Some((
            v,
            None,
            format!("over all {} steps (too few for a steady interval)", s.steps),
        ))
    };
    let ((b, seb, wb), (a, sea, wa)) = (rate(before)?, rate(after)?);
    let ci = seb.zip(sea).and_then(|(x, y)| ratio_ci(a, y, b, x, 1.96));
    Some(Speedup {
        value: round(a / b, 3),
        metric: "steps/s".into(),
        ci95: ci,
        basis: format!(
            "step rate from the step markers: {} steps/s before, {wb}; {} steps/s after, {wa}",
            crate::units::num(b),
            crate::units::num(a),
        ),
    })
}

/// The steady step rates' ratio when both have step markers, else the whole job's wall time
/// ratio when both ran to completion, else the GPU busy share's.
fn recording_speedup(before: &DiagnoseReport, after: &DiagnoseReport) -> Option<Speedup> {
    if let Some(s) = step_rate_speedup(before, after) {
        return Some(s);
    }
    // A speed-up needs a rate of work. Without step markers the whole job's wall time stands in when both recordings are of jobs that ran to completion (same work assumed);
    // failing that, the GPU's busy share (a proxy, said so).
    let whole = |r: &DiagnoseReport| r.job.exit_code == Some(0) && r.duration_s > 0.0;
    if whole(before) && whole(after) {
        Some(Speedup {
            value: round(before.duration_s / after.duration_s, 3),
            metric: "job_duration".into(),
            ci95: None,
            basis: format!(
                "job wall time {:.1} s before, {:.1} s after; assumes both runs did the same work",
                before.duration_s, after.duration_s
            ),
        })
    } else {
        match (busy_pct(before), busy_pct(after)) {
            (Some(b), Some(a)) if b > 0.0 && a > 0.0 => Some(Speedup {
                value: round(a / b, 3),
                metric: "gpu_busy_pct".into(),
                ci95: None,
                basis: format!(
                    "GPU busy {b:.1}% before, {a:.1}% after: a proxy for throughput (no step rate in the recordings); \
                     it holds when the GPU work per step is unchanged"
                ),
            }),
            _ => None,
        }
    }
}

// ---------- traces ----------

fn trace_side(t: &TraceSummary, findings: &[Finding]) -> Side {
    Side {
        path: t.path.clone(),
        verdict: Some(SideVerdict::TopFinding(findings.first().map(|f| f.id))),
        verdict_summary: Some(
            findings
                .first()
                .map(|f| f.title.clone())
                .unwrap_or_else(|| "No problems found.".into()),
        ),
        top_fix: findings.first().map(|f| f.recommendation.clone()),
    }
}

/// Two traces, each with its ranked findings. The speed-up is the ratio of mean step times.
pub fn traces(
    before: &TraceSummary,
    before_findings: &[Finding],
    after: &TraceSummary,
    after_findings: &[Finding],
) -> Comparison {
    let speedup = step_speedup(before, after);
    let notes = trace_notes(before, after, speedup.as_ref());
    let (bs, as_) = (
        trace_side(before, before_findings),
        trace_side(after, after_findings),
    );
    Comparison {
        schema_version: SCHEMA_VERSION,
        kind: InputKind::Trace,
        verdict: verdict_change(&bs, &as_, speedup.as_ref()),
        before: bs,
        after: as_,
        speedup,
        changes: trace_changes(before, after),
        notes,
    }
}

/// Per-step figures of two traces side by side: step time, GPU busy, data wait, each time
/// category, copies, tensor cores.
#[allow(clippy::too_many_lines)] // a table: one change() per compared figure
fn trace_changes(before: &TraceSummary, after: &TraceSummary) -> Vec<Change> {
    let ms = |x: f64| x / 1000.0;
    let b = &before.breakdown;
    let a = &after.breakdown;
    let per_step_pageable = |t: &TraceSummary| {
        let steps = t.steps.len().max(1) as f64;
        t.copies
            .iter()
            .filter(|c| c.src == "Pageable" || c.dst == "Pageable")
            .map(|c| c.bytes)
            .sum::<f64>()
            / steps
            / 1e6
    };
    let per_step_copy_ms = |t: &TraceSummary| {
        let steps = t.steps.len().max(1) as f64;
        ms(t.copies
            .iter()
            .filter(|c| c.direction == "HtoD" || c.direction == "DtoH")
            .map(|c| c.time_us)
            .sum::<f64>()
            / steps)
    };
    let has_gpu = |t: &TraceSummary| !t.devices.is_empty();
    let mut changes = vec![
        change(
            "step_ms",
            "step time (ms)",
            Some(ms(b.total_us)),
            Some(ms(a.total_us)),
            Better::Lower,
        ),
        change(
            "steps_per_s",
            "steps/s",
            (b.total_us > 0.0).then(|| 1e6 / b.total_us),
            (a.total_us > 0.0).then(|| 1e6 / a.total_us),
            Better::Higher,
        ),
        change(
            "gpu_busy_pct",
            "GPU busy %",
            before.gpu_busy_pct,
            after.gpu_busy_pct,
            Better::Higher,
        ),
        change(
            "data_wait_pct",
            "waiting for the DataLoader %",
            Some(before.dataloader.share_pct),
            Some(after.dataloader.share_pct),
            Better::Lower,
        ),
    ];
    let cats = [
        ("kernel", "kernel", b.kernel_us, a.kernel_us),
        ("memcpy", "memcpy", b.memcpy_us, a.memcpy_us),
        ("memset", "memset", b.memset_us, a.memset_us),
        (
            "communication",
            "communication",
            b.communication_us,
            a.communication_us,
        ),
        ("runtime", "CUDA runtime", b.runtime_us, a.runtime_us),
        ("dataloader", "DataLoader", b.dataloader_us, a.dataloader_us),
        ("cpu_op", "CPU ops", b.cpu_op_us, a.cpu_op_us),
        ("other", "other", b.other_us, a.other_us),
    ];
    for (id, label, x, y) in cats {
        if x > 0.0 || y > 0.0 {
            changes.push(change(
                &format!("step_{id}_ms"),
                &format!("  {label} per step (ms)"),
                Some(ms(x)),
                Some(ms(y)),
                // time moves between categories when one shrinks: only the total is better or worse
                if id == "dataloader" {
                    Better::Lower
                } else {
                    Better::Neutral
                },
            ));
        }
    }
    changes.push(change(
        "copy_ms_per_step",
        "host↔GPU copies per step (ms)",
        Some(per_step_copy_ms(before)),
        Some(per_step_copy_ms(after)),
        Better::Lower,
    ));
    changes.push(change(
        "pageable_copy_mb_per_step",
        "pageable copies per step (MB)",
        Some(per_step_pageable(before)),
        Some(per_step_pageable(after)),
        Better::Lower,
    ));
    if has_gpu(before) || has_gpu(after) {
        changes.push(change(
            "tensor_core_pct",
            "kernel time on tensor cores %",
            Some(before.kernels.tensor_core_pct),
            Some(after.kernels.tensor_core_pct),
            Better::Higher,
        ));
    }
    changes
}

/// The ratio of mean step times with its 95% interval (Welch), when both traces have steps.
fn step_speedup(before: &TraceSummary, after: &TraceSummary) -> Option<Speedup> {
    let ms = |x: f64| x / 1000.0;
    let step_times = |t: &TraceSummary| -> Vec<f64> {
        t.steps
            .iter()
            .map(|s| s.total_us)
            .filter(|x| *x > 0.0)
            .collect()
    };
    let (sb, sa) = (step_times(before), step_times(after));
    match (mean_se(&sb), mean_se(&sa)) {
        (Some((mb, seb)), Some((ma, sea))) if mb > 0.0 && ma > 0.0 => {
            let ci = match (seb, sea) {
                (Some(x), Some(y)) => {
                    // Welch–Satterthwaite degrees of freedom for the t quantile.
                    let (vb, va) = (x * x, y * y);
                    let df = (vb + va).powi(2)
                        / (vb * vb / (sb.len() as f64 - 1.0) + va * va / (sa.len() as f64 - 1.0))
                            .max(1e-300);
                    let df = if df.is_finite() {
                        df.floor().max(1.0) as usize
                    } else {
                        sb.len() + sa.len() - 2
                    };
                    ratio_ci(mb, x, ma, y, t975(df))
                }
                _ => None,
            };
            Some(Speedup {
                value: round(mb / ma, 3),
                metric: "mean_step_time".into(),
                ci95: ci,
                basis: format!(
                    "mean step time {:.1} ms over {} steps before, {:.1} ms over {} steps after",
                    ms(mb),
                    sb.len(),
                    ms(ma),
                    sa.len()
                ),
            })
        }
        _ => None,
    }
}

/// What makes two traces less comparable: steps found differently, other GPUs, too few steps.
fn trace_notes(
    before: &TraceSummary,
    after: &TraceSummary,
    speedup: Option<&Speedup>,
) -> Vec<String> {
    let mut notes = Vec::new();
    if before.step_source != after.step_source {
        notes.push(format!(
            "Steps were found differently ({} before, {} after): step times may not measure the same work.",
            before.step_source, after.step_source
        ));
    }
    let gpu = |t: &TraceSummary| t.devices.iter().find_map(|d| d.name.clone());
    if let (Some(x), Some(y)) = (gpu(before), gpu(after)) {
        if x != y {
            notes.push(format!(
                "The GPUs differ ({x} before, {y} after): the figures compare machines as well as settings."
            ));
        }
    }
    if speedup.is_some_and(|s| s.ci95.is_none()) {
        notes.push(
            "Too few steps for an interval: profile more steps (schedule(active=N)) for one."
                .into(),
        );
    }
    notes
}

// ---------- sweeps ----------

fn label(p: &std::collections::BTreeMap<String, serde_json::Value>) -> String {
    p.iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => format!("{k}={s}"),
            v => format!("{k}={v}"),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The trial a sweep stands for: its sweet spot, else its fastest trial.
fn sweep_pick(r: &SweepReport) -> Option<&crate::tune::sweep::TrialResult> {
    if let Some(s) = &r.sweet_spot {
        if let Some(t) = r.results.iter().find(|t| t.parameters == s.parameters) {
            return Some(t);
        }
    }
    r.results
        .iter()
        .filter(|t| t.exit.ok() && t.throughput.is_some())
        .max_by(|a, b| {
            let v = |t: &crate::tune::sweep::TrialResult| {
                t.throughput.as_ref().map(|x| x.value).unwrap_or(0.0)
            };
            v(a).total_cmp(&v(b))
        })
}

fn sweep_side(path: &str, r: &SweepReport) -> Side {
    let pick = sweep_pick(r);
    Side {
        path: path.into(),
        verdict: pick.map(|t| SideVerdict::Setting(label(&t.parameters))),
        verdict_summary: r.sweet_spot.as_ref().map(|s| s.reason.clone()),
        top_fix: None,
    }
}

/// Two sweeps: each one's sweet spot (else its fastest trial) side by side.
pub fn sweeps(
    before_path: &str,
    before: &SweepReport,
    after_path: &str,
    after: &SweepReport,
) -> Comparison {
    let (pb, pa) = (sweep_pick(before), sweep_pick(after));
    let mut notes = Vec::new();
    let speedup = sweep_speedup(pb, pa, &mut notes);
    let (bs, as_) = (
        sweep_side(before_path, before),
        sweep_side(after_path, after),
    );
    Comparison {
        schema_version: SCHEMA_VERSION,
        kind: InputKind::Sweep,
        verdict: verdict_change(&bs, &as_, speedup.as_ref()),
        before: bs,
        after: as_,
        speedup,
        changes: sweep_changes(before, after, pb, pa),
        notes,
    }
}

type Trial = crate::tune::sweep::TrialResult;

/// The picks' figures side by side, then the throughput of every setting both sweeps tried.
fn sweep_changes(
    before: &SweepReport,
    after: &SweepReport,
    pb: Option<&Trial>,
    pa: Option<&Trial>,
) -> Vec<Change> {
    let get =
        |t: Option<&crate::tune::sweep::TrialResult>,
         f: &dyn Fn(&crate::tune::sweep::TrialResult) -> Option<f64>| t.and_then(f);
    let unit_of = |t: Option<&crate::tune::sweep::TrialResult>| {
        t.and_then(|t| t.throughput.as_ref().map(|x| x.unit.clone()))
    };
    let unit = unit_of(pb)
        .or_else(|| unit_of(pa))
        .unwrap_or_else(|| "throughput".into());
    let tp = |t: &crate::tune::sweep::TrialResult| t.throughput.as_ref().map(|x| x.value);
    let mut changes = vec![
        change(
            "throughput",
            &unit,
            get(pb, &tp),
            get(pa, &tp),
            Better::Higher,
        ),
        change(
            "samples_per_s",
            "samples/s",
            get(pb, &|t| t.throughput.as_ref().and_then(|x| x.samples_per_s)),
            get(pa, &|t| t.throughput.as_ref().and_then(|x| x.samples_per_s)),
            Better::Higher,
        ),
        change(
            "gpu_util_mean_pct",
            "GPU utilization (mean) %",
            get(pb, &|t| t.gpu_util_mean_pct),
            get(pa, &|t| t.gpu_util_mean_pct),
            Better::Higher,
        ),
        change(
            "data_wait_pct",
            "waiting for data %",
            get(pb, &|t| t.data_wait_fraction.map(|f| f * 100.0)),
            get(pa, &|t| t.data_wait_fraction.map(|f| f * 100.0)),
            Better::Lower,
        ),
        change(
            "job_cpu_mean_pct",
            "job CPU (% of a core)",
            get(pb, &|t| t.job_cpu_mean_pct),
            get(pa, &|t| t.job_cpu_mean_pct),
            Better::Neutral,
        ),
        change(
            "gpu_mem_max_gib",
            "GPU memory peak (GiB)",
            get(pb, &|t| {
                t.gpu_mem_max_bytes.map(|b| b as f64 / (1u64 << 30) as f64)
            }),
            get(pa, &|t| {
                t.gpu_mem_max_bytes.map(|b| b as f64 / (1u64 << 30) as f64)
            }),
            Better::Neutral,
        ),
    ];
    changes.retain(|c| c.before.is_some() || c.after.is_some());
    // The same settings in both sweeps, throughput by throughput.
    for t in &before.results {
        if Some(t) == pb {
            continue;
        }
        if let Some(u) = after.results.iter().find(|u| u.parameters == t.parameters) {
            if tp(t).is_some() || tp(u).is_some() {
                changes.push(change(
                    &format!("throughput[{}]", label(&t.parameters)),
                    &format!("{unit} at {}", label(&t.parameters)),
                    tp(t),
                    tp(u),
                    Better::Higher,
                ));
            }
        }
    }
    changes
}

/// The ratio of the picks' throughputs with its interval; what stands in the way goes to `notes`.
fn sweep_speedup(
    pb: Option<&Trial>,
    pa: Option<&Trial>,
    notes: &mut Vec<String>,
) -> Option<Speedup> {
    match (
        pb.and_then(|t| t.throughput.as_ref()),
        pa.and_then(|t| t.throughput.as_ref()),
    ) {
        (Some(x), Some(y)) if x.unit == y.unit && x.value > 0.0 && y.value > 0.0 => {
            // each trial's interval is mean ± t·se: back out se with the normal quantile
            let se = |t: &crate::tune::trial::Throughput| {
                t.ci_low.zip(t.ci_high).map(|(l, h)| (h - l) / 2.0 / 1.96)
            };
            let ci = match (se(x), se(y)) {
                (Some(a), Some(b)) => ratio_ci(y.value, b, x.value, a, 1.96),
                _ => None,
            };
            if x.source == crate::tune::trial::Source::GpuBusyProxy {
                notes.push("The throughput is the GPU-busy proxy (no step rate was found): it holds when the GPU work per step is unchanged.".into());
            }
            for (side, t) in [("before", pb), ("after", pa)] {
                if let Some(t) = t {
                    if t.throughput.as_ref().is_some_and(|x| !x.steady) {
                        notes.push(format!(
                            "The {side} pick ({}) never settled: its interval stayed wider than the tolerance.",
                            label(&t.parameters)
                        ));
                    }
                }
            }
            Some(Speedup {
                value: round(y.value / x.value, 3),
                metric: x.unit.clone(),
                ci95: ci,
                basis: format!(
                    "{} {} at {} before, {} {} at {} after",
                    crate::units::num(x.value),
                    x.unit,
                    pb.map(|t| label(&t.parameters)).unwrap_or_default(),
                    crate::units::num(y.value),
                    y.unit,
                    pa.map(|t| label(&t.parameters)).unwrap_or_default()
                ),
            })
        }
        (Some(x), Some(y)) if x.unit != y.unit => {
            notes.push(format!(
                "The throughputs are in different units ({} before, {} after): no speed-up.",
                x.unit, y.unit
            ));
            None
        }
        _ => {
            notes.push("One of the sweeps has no trial with a throughput: no speed-up.".into());
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn side_verdicts_are_one_string_in_the_json() {
        let cases = [
            (SideVerdict::Recording(VerdictId::InputBound), "input_bound"),
            (
                SideVerdict::TopFinding(Some(FindingId::AmpUnused)),
                "amp_unused",
            ),
            (SideVerdict::TopFinding(None), "none"),
            (
                SideVerdict::Setting("workers=4 pin=true".into()),
                "workers=4 pin=true",
            ),
        ];
        for (v, s) in cases {
            assert_eq!(serde_json::to_value(&v).unwrap(), s);
            assert_eq!(serde_json::from_value::<SideVerdict>(s.into()).unwrap(), v);
        }
    }

    #[test]
    fn ratio_interval_by_the_delta_method() {
        // 100 ± 1 (se) over 50 ± 1: ratio 2, relative error sqrt(1e-4 + 4e-4) = 0.02236
        let ci = ratio_ci(100.0, 1.0, 50.0, 1.0, 1.96).unwrap();
        assert!(
            (ci[0] - (2.0 - 2.0 * 0.02236 * 1.96)).abs() < 1e-3,
            "{ci:?}"
        );
        assert!(
            (ci[1] - (2.0 + 2.0 * 0.02236 * 1.96)).abs() < 1e-3,
            "{ci:?}"
        );
        assert!(ratio_ci(0.0, 1.0, 50.0, 1.0, 1.96).is_none());
        assert!(ratio_ci(1.0, 1.0, 50.0, 1.0, f64::INFINITY).is_none());
    }

    #[test]
    fn deltas() {
        let c = change("x", "x", Some(50.0), Some(75.0), Better::Higher);
        assert_eq!(c.delta_pct, Some(50.0));
        let c = change("x", "x", Some(0.0), Some(75.0), Better::Higher);
        assert_eq!(c.delta_pct, None);
        let c = change("x", "x", None, Some(75.0), Better::Higher);
        assert_eq!(c.delta_pct, None);
    }

    fn trace_with_steps(step_us: &[f64]) -> TraceSummary {
        let mut t = TraceSummary {
            path: "t".into(),
            step_source: crate::trace::summary::StepSource::ProfilerStep,
            ..Default::default()
        };
        t.steps = step_us
            .iter()
            .map(|x| crate::trace::StepRow {
                total_us: *x,
                kernel_us: x / 2.0,
                ..Default::default()
            })
            .collect();
        t.breakdown = crate::trace::summary::average(&t.steps);
        t
    }

    #[test]
    fn trace_speedup_is_the_ratio_of_mean_step_times_with_an_interval() {
        let b = trace_with_steps(&[180_000.0, 176_000.0, 178_000.0, 177_000.0]);
        let a = trace_with_steps(&[141_000.0, 140_000.0, 142_000.0, 141_500.0]);
        let c = traces(&b, &[], &a, &[]);
        let s = c.speedup.unwrap();
        assert_eq!(s.metric, "mean_step_time");
        assert!(
            (s.value - 177_750.0 / 141_125.0).abs() < 1e-3,
            "{}",
            s.value
        );
        let ci = s.ci95.unwrap();
        assert!(
            ci[0] < s.value && s.value < ci[1] && ci[1] - ci[0] < 0.1,
            "{ci:?}"
        );
        assert_eq!(c.verdict.before, Some(SideVerdict::TopFinding(None)));
        assert!(!c.verdict.changed);
        let step = c.changes.iter().find(|c| c.metric == "step_ms").unwrap();
        assert!((step.delta_pct.unwrap() - (-20.6)).abs() < 0.1, "{step:?}");
    }

    #[test]
    fn one_step_traces_give_a_ratio_without_an_interval() {
        let b = trace_with_steps(&[200_000.0]);
        let a = trace_with_steps(&[100_000.0]);
        let c = traces(&b, &[], &a, &[]);
        assert_eq!(c.speedup.as_ref().unwrap().value, 2.0);
        assert!(c.speedup.unwrap().ci95.is_none());
        assert!(c.notes.iter().any(|n| n.contains("Too few steps")));
    }

    #[test]
    fn sweeps_compare_their_sweet_spots_with_an_interval() {
        use crate::tune::sweep::tests::report;
        use crate::tune::trial::Status::*;
        let b = report(&[
            (Some(15.0), Steady),
            (Some(25.0), Steady),
            (Some(26.0), Steady),
        ]);
        let a = report(&[
            (Some(30.0), Steady),
            (Some(45.0), Steady),
            (Some(46.0), MaxTime),
        ]);
        let c = sweeps("b.json", &b, "a.json", &a);
        assert_eq!(c.kind, InputKind::Sweep);
        let s = c.speedup.as_ref().unwrap();
        // sweet spots: workers=1 at 25 before, workers=1 at 45 after
        assert_eq!(
            c.verdict.before,
            Some(SideVerdict::Setting("workers=1".into()))
        );
        assert_eq!(s.metric, "steps/s");
        assert!((s.value - 1.8).abs() < 1e-9, "{s:?}");
        let ci = s.ci95.unwrap();
        assert!(ci[0] < 1.8 && 1.8 < ci[1] && ci[1] - ci[0] < 0.15, "{ci:?}");
        let row = c
            .changes
            .iter()
            .find(|x| x.metric == "throughput[workers=0]")
            .unwrap();
        assert_eq!(
            (row.before, row.after, row.delta_pct),
            (Some(15.0), Some(30.0), Some(100.0))
        );
        // `1.80 ± 0.05 times faster` (present::compare's words; the golden files show them)
        assert_eq!(format!("{:.2}", (ci[1] - ci[0]) / 2.0), "0.05");
    }
}
