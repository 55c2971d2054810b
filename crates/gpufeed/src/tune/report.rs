//! `gpufeed tune`'s report: the baseline, every trial with its verdict, the settings chosen and
//! rejected, the before → after figures of the interleaved re-run, the patch and the `run` line.
//! Its text and HTML are `present::tune`'s.

use super::plan::{Knob, KnobPlan};
use super::sweep_report::TrialResult;
use crate::diagnose::verdict::VerdictId;
use crate::stats::Speedup;
use serde::{Deserialize, Serialize};

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
    pub verdict: Option<VerdictId>,
    pub result: TrialResult,
}

impl Step {
    /// A run of the job with no knob being tried: the baseline, a re-run.
    pub fn run(result: TrialResult, verdict: Option<VerdictId>) -> Step {
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
    pub verdict: Option<VerdictId>,
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
