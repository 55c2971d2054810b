//! Arguments of `gpufeed serve`.

use super::*;
use std::net::SocketAddr;

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to serve /metrics on (0.0.0.0:9400 to be scraped from other machines)
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:9400")]
    pub listen: SocketAddr,
    /// Print one exposition to stdout (after about 1.5 s of sampling) and exit
    #[arg(long)]
    pub once: bool,
    /// Sampling interval of host and processes (GPU utilization keeps every driver sample)
    #[arg(long, value_name = "DURATION", default_value = "200ms", value_parser = crate::cli::parse_interval)]
    pub interval: Duration,
    /// Window of the busy ratio, oscillation, starvation score and verdict
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub window: Duration,
    /// Follow this job's process tree (worker CPU, starvation verdict, training-loop phases)
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
    /// Create the step-marker socket at PATH (removed at exit) instead of a private one: for a job
    /// already started with GPUFEED_STEP_SOCKET=PATH, whose markers are dropped until gpufeed
    /// listens (docs/step-protocol.md)
    #[arg(long, value_name = "PATH", conflicts_with = "once")]
    pub step_socket: Option<PathBuf>,
    #[command(flatten)]
    pub py: crate::cli::PyStackOpts,
}
