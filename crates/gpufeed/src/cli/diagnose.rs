//! Arguments of `gpufeed diagnose`.

use super::*;
use crate::diagnose::input::InputFormat;

#[derive(Debug, Clone, Args)]
pub struct DiagnoseArgs {
    /// gpufeed recordings (.ndjson or .ndjson.zst), nvidia-smi CSV logs, or nvidia-smi/dcgmi dmon logs
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Report format (json: one object per file; several files give a JSON array)
    #[arg(long, value_parser = OutputFormat::parser(OutputFormat::REPORTS), default_value = "text")]
    pub format: OutputFormat,
    /// Input format; auto detects it from the first lines
    #[arg(long, value_enum, default_value_t = InputFormat::Auto)]
    pub input_format: InputFormat,
    /// Field names of a header-less nvidia-smi CSV log, as given to --query-gpu; or, for another
    /// tool's CSV, NAME=KNOWN renames of columns gpufeed does not know (gpu_busy=utilization.gpu)
    #[arg(long, value_name = "FIELDS", value_delimiter = ',')]
    pub columns: Option<Vec<String>>,
    /// Seconds between polls, for logs without timestamps (nvidia-smi -l N, dmon -d N) [default: 1]
    #[arg(long, value_name = "SECONDS")]
    pub sample_interval: Option<f64>,
    /// Colour in text output: auto (when stdout is a terminal and NO_COLOR is unset), always, never
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
    /// Also write a self-contained HTML report (charts, findings and fixes) to FILE
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Also write the JSON report (as --format json prints it) to FILE
    #[arg(long, value_name = "FILE")]
    pub export_json: Option<PathBuf>,
    /// FILEs are one job's recordings from several nodes: a job verdict naming the starving and
    /// straggling nodes, and a per-node table (files are read one at a time)
    #[arg(long, conflicts_with = "html")]
    pub job: bool,
    /// Text: every finding with all of its evidence (by default the top fix shows the few
    /// figures that decide it, each said once)
    #[arg(short, long)]
    pub verbose: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}
