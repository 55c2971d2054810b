//! The report of `gpufeed analyze` over one or more traces: each trace's findings ranked, the
//! verdict, a line per rank. Its JSON is `--format json`; `present::trace` writes the text
//! and Markdown.

use serde::{Deserialize, Serialize};

use super::breakdown::{StepRow, StepSource, TraceSummary};
use super::verdict::{decide, TraceVerdict};
use crate::finding::{rank, Finding, Item};

pub const SCHEMA_VERSION: u32 = 1;

/// Per-rank line of a multi-trace report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RankLine {
    pub rank: Option<u64>,
    pub path: String,
    pub steps: usize,
    pub step_us: f64,
    pub communication_pct: f64,
    pub gpu_busy_pct: Option<f64>,
    /// This trace's (rank's) own verdict.
    pub verdict: TraceVerdict,
}

/// The `--format json` document. `steps`, `breakdown` and `devices` are those of the first trace;
/// `traces` holds every trace's full summary.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub schema_version: u32,
    pub truncated: bool,
    pub warnings: Vec<String>,
    pub step_source: StepSource,
    pub tb_plugin_compatible: bool,
    pub steps: Vec<StepRow>,
    pub breakdown: StepRow,
    pub devices: Vec<super::breakdown::Device>,
    /// What holds the job back, over every trace given (the same shape as diagnose's).
    pub verdict: TraceVerdict,
    pub findings: Vec<Finding>,
    pub ranks: Vec<RankLine>,
    pub traces: Vec<TraceSummary>,
    /// Ranks of one job only: the world, straggler and communication-bound ranks (`traces` then
    /// holds only the lowest rank's summary).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<RankJob>,
}

/// The job part of a ranks report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankJob {
    pub world_size: u64,
    /// Ranks given.
    pub ranks: usize,
    /// Ranks of the world without a trace.
    pub missing_ranks: u64,
    pub median_step_us: Option<f64>,
    /// Ranks whose steps take ≥ 10% longer than the median rank's, slowest first.
    pub stragglers: Vec<u64>,
    /// Ranks where communication not hidden behind compute exceeds 10% of the step.
    pub comm_bound: Vec<u64>,
}

impl Report {
    pub fn new(traces: Vec<TraceSummary>) -> Report {
        let mut findings = Vec::new();
        let multi = traces.len() > 1;
        let mut verdicts = Vec::new();
        for t in &traces {
            let mut own = super::rules::evaluate(t);
            rank(&mut own);
            verdicts.push(decide(&own, t.gpu_busy_pct));
            for mut f in own {
                if multi {
                    let who = t
                        .rank
                        .map(|r| format!("rank {r}"))
                        .unwrap_or_else(|| t.path.clone());
                    f.title = format!("[{who}] {}", f.title);
                    f = f.with(Item::Trace(t.path.clone()));
                }
                findings.push(f);
            }
        }
        if let Some(f) = super::rules::straggler(&traces) {
            findings.push(f);
        }
        rank(&mut findings);
        let first = traces.first().cloned().unwrap_or_default();
        let ranks: Vec<RankLine> = traces
            .iter()
            .zip(verdicts)
            .map(|(t, verdict)| RankLine {
                rank: t.rank,
                path: t.path.clone(),
                steps: t.steps.len(),
                step_us: t.breakdown.total_us,
                communication_pct: t.communication.share_pct,
                gpu_busy_pct: t.gpu_busy_pct,
                verdict,
            })
            .collect();
        let verdict = decide(&findings, mean_busy(&ranks));
        Report {
            schema_version: SCHEMA_VERSION,
            truncated: traces.iter().any(|t| t.truncated),
            warnings: traces
                .iter()
                .flat_map(|t| {
                    t.warnings.iter().map(move |w| {
                        if multi {
                            format!("{}: {w}", t.path)
                        } else {
                            w.clone()
                        }
                    })
                })
                .collect(),
            step_source: first.step_source,
            tb_plugin_compatible: first.tb_plugin_compatible,
            steps: first.steps.clone(),
            breakdown: first.breakdown.clone(),
            devices: first.devices.clone(),
            verdict,
            findings,
            ranks,
            traces,
            job: None,
        }
    }
}

/// The mean GPU busy share over the traces that have GPU work.
pub(crate) fn mean_busy(lines: &[RankLine]) -> Option<f64> {
    let v: Vec<f64> = lines.iter().filter_map(|l| l.gpu_busy_pct).collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}
