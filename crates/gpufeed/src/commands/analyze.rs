//! `gpufeed analyze`: PyTorch profiler (Kineto) traces.

use crate::cli::GlobalOpts;
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Clone, Args)]
pub struct AnalyzeArgs {
    /// Trace files (.json or .json.gz), directories of per-rank traces, or - for stdin
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
}

pub fn run(_global: &GlobalOpts, _args: &AnalyzeArgs) -> anyhow::Result<u8> {
    anyhow::bail!("analyze is not implemented yet")
}
