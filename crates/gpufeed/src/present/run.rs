//! What `gpufeed run` / `record` print when the recording ends: the summary of measured figures
//! followed by the diagnosis of the same recording.

use super::OutputFormat;
use crate::diagnose::{self, verdict::Verdict, DiagnoseReport};
use crate::finding::Finding;
use crate::record::summary::Summary;
use serde::{Deserialize, Serialize};

/// The JSON printed by `run --format json`: the summary's fields plus `verdict`, `findings` and
/// `notes` from the diagnosis (absent when the recording could not be diagnosed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    #[serde(flatten)]
    pub summary: Summary,
    #[serde(default)]
    pub verdict: Option<Verdict>,
    #[serde(default)]
    pub findings: Vec<Finding>,
    #[serde(default)]
    pub notes: Vec<String>,
    /// The training loop seen through its Python stacks, when they were sampled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<diagnose::pyloop::PythonEvidence>,
    /// The job's step markers (`GPUFEED_STEP_SOCKET`), when it sent any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<diagnose::pyloop::StepEvidence>,
}

impl RunReport {
    pub fn new(summary: Summary, diagnosis: Option<&DiagnoseReport>) -> Self {
        RunReport {
            summary,
            verdict: diagnosis.map(|d| d.verdict.clone()),
            findings: diagnosis.map(|d| d.findings.clone()).unwrap_or_default(),
            notes: diagnosis.map(|d| d.notes.clone()).unwrap_or_default(),
            python: diagnosis.and_then(|d| d.python.clone()),
            steps: diagnosis.and_then(|d| d.steps.clone()),
        }
    }
}

/// One JSON line.
pub fn json(summary: &Summary, diagnosis: Option<&DiagnoseReport>) -> String {
    serde_json::to_string(&RunReport::new(summary.clone(), diagnosis)).expect("report serializes")
}

/// The summary, then the diagnosis as `gpufeed diagnose` prints it, less what the summary
/// already says (its header, the GPU, host and job figures): each figure once.
pub fn text(summary: &Summary, diagnosis: Option<&DiagnoseReport>, color: bool) -> String {
    let said = diagnosis.is_some_and(super::diagnose::verdict_states_busy);
    let mut out = super::summary::text_with(summary, said);
    if let Some(d) = diagnosis {
        out.push('\n');
        out.push_str(&super::diagnose::render_with(
            d,
            OutputFormat::Text,
            super::diagnose::TextOptions {
                color,
                verbose: false,
                after_summary: true,
            },
        ));
    }
    out
}
