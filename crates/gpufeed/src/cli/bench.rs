//! Arguments of `gpufeed bench`.

use super::*;
use crate::doctor::parse_size;

const BENCH_HELP: &str = concat!(
    "Measures host->device and device->host bandwidth with pinned and pageable host memory\n",
    "(1 MiB to 1 GiB) against the PCIe link's theoretical maximum, and GEMM throughput in fp32,\n",
    "TF32, fp16 and bf16. Loads libcuda and libcublas at run time; takes about a minute.\n",
    "The best bandwidths are saved per GPU to ~/.cache/gpufeed/bench.json ($XDG_CACHE_HOME\n",
    "honoured) for scripts; `diagnose` judges copies against the link's theoretical rate.\n",
    "\n",
    "EXAMPLES:\n",
    "    gpufeed bench\n",
    "    gpufeed bench --device 1 --format json\n",
    "    gpufeed bench --max-size 256M --no-gemm      a quick bandwidth-only run\n",
    "\n",
    "EXIT CODES:\n",
    "    0      measured\n",
    "    1      a CUDA call failed during the measurement\n",
    "    2      bad command line, or --device names a GPU that does not exist\n",
    "    5      no NVIDIA GPU or CUDA driver\n",
);

#[derive(Debug, Clone, Args)]
#[command(after_help = BENCH_HELP)]
pub struct BenchArgs {
    /// Output format
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,
    /// CUDA device ordinal to measure
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub device: usize,
    /// Smallest copy size
    #[arg(long, value_name = "SIZE", default_value = "1M", value_parser = parse_size)]
    pub min_size: u64,
    /// Largest copy size
    #[arg(long, value_name = "SIZE", default_value = "1G", value_parser = parse_size)]
    pub max_size: u64,
    /// GEMM matrix size n (n×n times n×n)
    #[arg(long, value_name = "N", default_value_t = 8192)]
    pub gemm_size: usize,
    /// Skip the GEMM measurement
    #[arg(long)]
    pub no_gemm: bool,
    /// Do not save the pinned bandwidth for `diagnose`
    #[arg(long)]
    pub no_save: bool,
    /// Where to save the results [default: ~/.cache/gpufeed/bench.json]
    #[arg(long, value_name = "PATH")]
    pub save_to: Option<PathBuf>,
}
