//! Arguments of `gpufeed export`.

use super::*;

#[derive(Debug, Clone, Args)]
#[command(group(clap::ArgGroup::new("to").required(true).multiple(true).args(["perfetto", "tensorboard"])))]
pub struct ExportArgs {
    /// Write a Chrome trace JSON (open it in ui.perfetto.dev) with counter tracks: GPU
    /// utilization, memory, PCIe, CPU per core, CPU per job process
    #[arg(long, value_name = "OUT.json")]
    pub perfetto: Option<PathBuf>,
    /// Write gpufeed's series as TensorBoard scalars (GPU busy and memory, data wait, steps/s,
    /// phases, CPU) and the verdict as text, in an event file in DIR (created if absent)
    #[arg(long, value_name = "DIR")]
    pub tensorboard: Option<PathBuf>,
    /// Merge a PyTorch profiler (Kineto) trace, on one time base (Unix epoch microseconds)
    #[arg(long, value_name = "TRACE.json[.gz]", requires = "perfetto")]
    pub merge: Option<PathBuf>,
    /// The gpufeed recording (.ndjson or .ndjson.zst)
    #[arg(value_name = "RECORDING")]
    pub recording: PathBuf,
}
