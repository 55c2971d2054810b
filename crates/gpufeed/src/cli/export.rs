//! Arguments of `gpufeed export`.

use super::*;

#[derive(Debug, Clone, Args)]
pub struct ExportArgs {
    /// Write a Chrome trace JSON (open it in ui.perfetto.dev) with counter tracks: GPU
    /// utilization, memory, PCIe, CPU per core, CPU per job process
    #[arg(long, value_name = "OUT.json", required = true)]
    pub perfetto: PathBuf,
    /// Merge a PyTorch profiler (Kineto) trace, on one time base (Unix epoch microseconds)
    #[arg(long, value_name = "TRACE.json[.gz]")]
    pub merge: Option<PathBuf>,
    /// The gpufeed recording (.ndjson or .ndjson.zst)
    #[arg(value_name = "RECORDING")]
    pub recording: PathBuf,
}
