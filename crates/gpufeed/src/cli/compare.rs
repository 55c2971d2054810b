//! Arguments of `gpufeed compare`.

use super::*;

#[derive(Debug, Clone, Args)]
#[command(after_help = "EXAMPLES:\n    \
    gpufeed compare before.ndjson after.ndjson           two recordings (gpufeed run/record)\n    \
    gpufeed compare workers0.pt.trace.json.gz workers4.pt.trace.json.gz   two profiler traces\n    \
    gpufeed compare sweep-old/sweep.json sweep-new/sweep.json   two sweeps' sweet spots\n    \
    gpufeed compare --format markdown a.ndjson b.ndjson >> PR.md")]
pub struct CompareArgs {
    /// The baseline: a recording (.ndjson[.zst]), an nvidia-smi/dcgmi log, a profiler trace (.json/.json.gz) or a sweep.json
    #[arg(value_name = "BEFORE")]
    pub before: PathBuf,
    /// The same kind of file after the change
    #[arg(value_name = "AFTER")]
    pub after: PathBuf,
    /// Output format on stdout
    #[arg(long, value_parser = OutputFormat::parser(OutputFormat::ALL), default_value = "text")]
    pub format: OutputFormat,
    /// Also write the comparison as a self-contained HTML page to FILE
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Also write the comparison as JSON to FILE
    #[arg(long, value_name = "FILE")]
    pub export_json: Option<PathBuf>,
}
