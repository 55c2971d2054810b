//! Arguments of `gpufeed watch`.

use super::*;

#[derive(Debug, Clone, Args)]
pub struct WatchArgs {
    /// Host and process sampling interval (GPU utilization keeps every driver sample)
    #[arg(long, value_name = "DURATION", default_value = "250ms", value_parser = crate::cli::parse_interval)]
    pub interval: Duration,
    /// Screen refresh interval (at most 500ms: the view refreshes at least twice a second)
    #[arg(long, value_name = "DURATION", default_value = "250ms", value_parser = parse_duration)]
    pub refresh: Duration,
    /// Follow this running process and its children
    #[arg(long, value_name = "PID", conflicts_with = "command")]
    pub pid: Option<u32>,
    /// Create the step-marker socket at PATH (removed at exit) instead of a private one: for a job
    /// already started with GPUFEED_STEP_SOCKET=PATH, whose markers are dropped until gpufeed
    /// listens (docs/step-protocol.md)
    #[arg(long, value_name = "PATH")]
    pub step_socket: Option<PathBuf>,
    #[command(flatten)]
    pub inject: crate::cli::InjectOpts,
    /// Do not time the job's torch DataLoader batches as steps (on by default for a job started
    /// here; the job's own step markers win when it sends any)
    #[arg(long)]
    pub no_auto_steps: bool,
    #[command(flatten)]
    pub py: crate::cli::PyStackOpts,
    /// Where the job's stdout and stderr go while the screen is in use
    #[arg(long, value_name = "PATH", default_value = "gpufeed-watch-job.log")]
    pub job_log: PathBuf,
    /// A command to start and follow, after `--`; its output goes to --job-log
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    pub command: Vec<String>,
}
