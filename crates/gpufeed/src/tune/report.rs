//! `gpufeed tune`'s report: the baseline, every trial with its verdict, the settings chosen and
//! rejected, the before → after figures of the interleaved re-run, the patch and the `run` line.

use super::batch::oom_marker;
use super::plan::{Knob, KnobPlan};
use super::sweep::{fmt_num, TrialResult};
use crate::stats::Speedup;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

pub const SCHEMA_VERSION: u32 = 1;

/// Why the search ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// The baseline showed nothing a knob could fix.
    NothingToTune,
    /// A kept setting made the job compute-bound (the input keeps up).
    ComputeBound,
    /// Every planned knob was tried.
    PlanDone,
    /// `--budget` was spent.
    Budget,
    /// Ctrl-C.
    Interrupted,
}

/// One trial of the search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// The knob tried, with its value (`None` for the baseline and the re-runs).
    pub knob: Option<Knob>,
    pub value: Option<String>,
    /// Its throughput over the best so far, with the ratio's 95% interval.
    pub gain: Option<f64>,
    pub gain_ci95: Option<[f64; 2]>,
    pub kept: bool,
    /// The diagnosis' verdict of this trial's recording.
    pub verdict: Option<String>,
    pub result: TrialResult,
}

impl Step {
    /// A run of the job with no knob being tried: the baseline, a re-run.
    pub fn run(result: TrialResult, verdict: Option<String>) -> Step {
        Step {
            knob: None,
            value: None,
            gain: None,
            gain_ci95: None,
            kept: false,
            verdict,
            result,
        }
    }
}

/// A knob value kept (or rejected) with what it measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Choice {
    pub knob: Knob,
    pub value: String,
    pub gain: Option<f64>,
    pub gain_ci95: Option<[f64; 2]>,
}

/// The baseline and the tuned setting as re-measured interleaved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BeforeAfter {
    pub speedup: Option<Speedup>,
    pub before: Figures,
    pub after: Figures,
}

/// A setting's figures, averaged over its runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    pub throughput: Option<f64>,
    pub unit: Option<String>,
    pub gpu_util_mean_pct: Option<f64>,
    pub data_wait_pct: Option<f64>,
    pub verdict: Option<String>,
}

/// The batch-size search of `--allow-batch`: the job's own batch, the one chosen (when one
/// gained), what the search found of memory, and what the change asks of the training.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchChange {
    /// The job's own DataLoader batch size (as the injection read it).
    pub from: u64,
    /// The batch chosen (`None`: no larger batch gained enough).
    pub to: Option<u64>,
    /// Largest batch that ran, and the smallest that ran out of memory.
    pub largest_ran: Option<u64>,
    pub first_oom: Option<u64>,
    /// The learning-rate scaling / gradient-accumulation plan, when the batch changes.
    pub lr_plan: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TuneReport {
    pub schema_version: u32,
    pub command: Vec<String>,
    pub cores_per_rank: u32,
    pub budget_s: f64,
    pub plan: Vec<KnobPlan>,
    pub steps: Vec<Step>,
    pub chosen: Vec<Choice>,
    pub rejected: Vec<Choice>,
    pub before_after: Option<BeforeAfter>,
    pub stop: Option<Stop>,
    /// `fix.patch` in the output folder, when there is one.
    pub patch: Option<String>,
    /// What the patch could not do: values that are not literals, switches with no call site.
    pub patch_notes: Vec<String>,
    /// The `gpufeed run` line that reproduces the result without the patch.
    pub run_line: Option<String>,
    /// The batch-size search (`--allow-batch`), when it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<BatchChange>,
    pub notes: Vec<String>,
    pub output_dir: String,
}

impl TuneReport {
    /// The settings chosen as `--dataloader k=v` / `--torch k=v` pairs, in the plan's order.
    pub fn flags(&self) -> Vec<(Knob, String)> {
        self.chosen
            .iter()
            .map(|c| (c.knob, c.value.clone()))
            .collect()
    }
}

fn pct(x: Option<f64>) -> String {
    x.map(|v| format!("{v:.0}%")).unwrap_or_else(|| "-".into())
}

fn ratio(g: Option<f64>, ci: Option<[f64; 2]>) -> String {
    match (g, ci) {
        (Some(g), Some([l, h])) => format!("{g:.2}× ({l:.2}–{h:.2})"),
        (Some(g), None) => format!("{g:.2}×"),
        _ => "-".into(),
    }
}

/// "2.9× faster (2.6–3.2)".
pub(crate) fn faster_words(s: &Speedup) -> String {
    let ci = s
        .ci95
        .map(|[l, h]| format!(" ({l:.2}–{h:.2})"))
        .unwrap_or_default();
    if s.value >= 1.0 {
        format!("{:.2}× faster{ci}", s.value)
    } else {
        format!("{:.2}× slower{ci}", 1.0 / s.value)
    }
}

fn stop_words(s: Stop) -> &'static str {
    match s {
        Stop::NothingToTune => "nothing to tune: the baseline shows no input stall, pageable copies or fp32 matmuls that a knob could fix",
        Stop::ComputeBound => "the job became compute-bound: the input keeps up",
        Stop::PlanDone => "every planned knob was tried",
        Stop::Budget => "the --budget was spent (best so far below)",
        Stop::Interrupted => "interrupted (best so far below)",
    }
}

fn before_after(o: &mut String, ba: &BeforeAfter) {
    let (b, a) = (&ba.before, &ba.after);
    let unit = b
        .unit
        .clone()
        .or_else(|| a.unit.clone())
        .unwrap_or_default();
    let _ = writeln!(o, "\nBefore → after (interleaved re-run):");
    let num = |x: Option<f64>| x.map(fmt_num).unwrap_or_else(|| "-".into());
    let _ = writeln!(
        o,
        "  throughput   {} → {} {unit}",
        num(b.throughput),
        num(a.throughput)
    );
    let _ = writeln!(
        o,
        "  GPU busy     {} → {}",
        pct(b.gpu_util_mean_pct),
        pct(a.gpu_util_mean_pct)
    );
    let _ = writeln!(
        o,
        "  data wait    {} → {}",
        pct(b.data_wait_pct),
        pct(a.data_wait_pct)
    );
    let v = |x: &Option<String>| x.clone().unwrap_or_else(|| "-".into());
    let _ = writeln!(o, "  verdict      {} → {}", v(&b.verdict), v(&a.verdict));
    if let Some(s) = &ba.speedup {
        let _ = writeln!(o, "  {}  ({})", faster_words(s), s.basis);
    }
}

fn batch(o: &mut String, b: &BatchChange) {
    let mem = match (b.largest_ran, b.first_oom) {
        (Some(l), Some(f)) => format!(" (largest that ran: {l}; {f} ran out of memory)"),
        (Some(l), None) => format!(" (largest tried: {l}, it ran)"),
        (None, Some(f)) => format!(" ({f} ran out of memory)"),
        (None, None) => String::new(),
    };
    match b.to {
        Some(t) => {
            let _ = writeln!(o, "\nBatch size: {} → {t}{mem}", b.from);
        }
        None => {
            let _ = writeln!(
                o,
                "\nBatch size: {} kept: no larger batch gained enough{mem}",
                b.from
            );
        }
    }
    if b.lr_plan.is_some() {
        let _ = writeln!(
            o,
            "  the learning rate changes with it: see the by-hand note under the patch"
        );
    }
}

/// The terminal report.
pub fn text(r: &TuneReport) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "gpufeed tune: {}", r.command.join(" "));
    for s in &r.steps {
        let what = match (&s.knob, &s.value) {
            (Some(k), Some(v)) => format!("{}={v}", k.key()),
            _ => s.result.label.clone(),
        };
        let tp = s
            .result
            .throughput
            .as_ref()
            .map(|t| format!("{} {}", fmt_num(t.value), t.unit))
            .unwrap_or_else(|| "no throughput".into());
        let mark = match (s.knob.is_some(), s.kept) {
            (false, _) => "",
            (true, true) => "  kept",
            (true, false) if s.result.last_lines.iter().any(|l| oom_marker(l).is_some()) => {
                "  out of memory"
            }
            (true, false) if !s.result.exit.ok() => "  failed",
            (true, false) if s.gain.is_none() => "  not compared",
            (true, false) => "  rejected",
        };
        let _ = writeln!(
            o,
            "  {what:<24} {tp:>16}  data wait {:>4}  {}{mark}",
            pct(s.result.data_wait_fraction.map(|f| f * 100.0)),
            if s.knob.is_some() {
                ratio(s.gain, s.gain_ci95)
            } else {
                String::new()
            }
        );
    }
    if let Some(stop) = r.stop {
        let _ = writeln!(o, "\nStopped: {}.", stop_words(stop));
    }
    if !r.chosen.is_empty() {
        let _ = writeln!(o, "\nSettings chosen:");
        for c in &r.chosen {
            let _ = writeln!(
                o,
                "  {}={}  {}",
                c.knob.key(),
                c.value,
                ratio(c.gain, c.gain_ci95)
            );
        }
    }
    if !r.rejected.is_empty() {
        let _ = writeln!(
            o,
            "Tried and rejected (no gain whose interval clears the best):"
        );
        for c in &r.rejected {
            let _ = writeln!(
                o,
                "  {}={}  {}",
                c.knob.key(),
                c.value,
                ratio(c.gain, c.gain_ci95)
            );
        }
    }
    if let Some(b) = &r.batch {
        batch(&mut o, b);
    }
    if let Some(ba) = &r.before_after {
        before_after(&mut o, ba);
    }
    if let Some(p) = &r.patch {
        let _ = writeln!(
            o,
            "\nPatch: {p}  (git apply {p}; your files were not changed)"
        );
    }
    for n in &r.patch_notes {
        let _ = writeln!(o, "  by hand: {n}");
    }
    if let Some(l) = &r.run_line {
        let _ = writeln!(o, "Without the patch: {l}");
    }
    for n in &r.notes {
        let _ = writeln!(o, "note: {n}");
    }
    o
}
