//! Arguments of `gpufeed analyze`.

use super::*;

#[derive(Debug, Clone, Args)]
pub struct AnalyzeArgs {
    /// Trace files (.json or .json.gz), directories of per-rank traces, or - for stdin
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Output format
    #[arg(long, value_parser = OutputFormat::parser(OutputFormat::REPORTS), default_value = "text")]
    pub format: OutputFormat,
    /// Print the per-step breakdown table (text and markdown)
    #[arg(long)]
    pub steps: bool,
    /// List every evidence entry of each finding (text), not only the deciding ones
    #[arg(short, long)]
    pub verbose: bool,
    /// Also write a self-contained HTML report (per-step breakdown chart, findings) to FILE
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Also write the JSON report (as --format json prints it) to FILE
    #[arg(long, value_name = "FILE")]
    pub export_json: Option<PathBuf>,
}
