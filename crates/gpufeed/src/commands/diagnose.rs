//! `gpufeed diagnose`: a verdict with evidence and a fix, from recordings and existing logs.

use crate::cli::GlobalOpts;
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Clone, Args)]
pub struct DiagnoseArgs {
    /// gpufeed recordings (.ndjson), nvidia-smi CSV logs, or nvidia-smi/dcgmi dmon logs
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
}

pub fn run(_global: &GlobalOpts, _args: &DiagnoseArgs) -> anyhow::Result<u8> {
    anyhow::bail!("diagnose is not implemented yet")
}
