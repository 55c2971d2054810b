//! What `gpufeed run` / `record` print when the recording ends: the summary of measured figures
//! followed by the diagnosis of the same recording.

use super::OutputFormat;
use crate::diagnose::{DiagnoseReport, RunReport};
use crate::record::summary::Summary;

/// One JSON line.
pub(crate) fn json(summary: &Summary, diagnosis: Option<&DiagnoseReport>) -> String {
    serde_json::to_string(&RunReport::new(summary.clone(), diagnosis)).expect("report serializes")
}

/// The summary, then the diagnosis as `gpufeed diagnose` prints it, less what the summary
/// already says (its header, the GPU, host and job figures): each figure once.
pub(crate) fn text(summary: &Summary, diagnosis: Option<&DiagnoseReport>, color: bool) -> String {
    let said = diagnosis.is_some_and(super::diagnose::verdict_states_busy);
    let mut out = super::end_summary::text_with(summary, said);
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
