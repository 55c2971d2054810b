//! Arguments of `gpufeed doctor`.

use super::*;
use crate::doctor::parse_size;

const DOCTOR_HELP: &str = concat!(
    "Each check is pass, warn, fail or skip (with the reason); fixes are printed under it.\n",
    "Without a GPU, a driver or Python, the dependent checks are skipped and doctor still exits 0.\n",
    "\n",
    "EXAMPLES:\n",
    "    gpufeed doctor                                   check everything that can be checked\n",
    "    gpufeed doctor --data /datasets/imagenet         also check where the data lives\n",
    "    gpufeed doctor --python .venv/bin/python         probe this Python's PyTorch\n",
    "    gpufeed doctor --num-workers 16 --batch-bytes 300M   size /dev/shm for this loader\n",
    "    gpufeed doctor --format json | jq '.checks[] | select(.status==\"fail\")'\n",
    "\n",
    "EXIT CODES:\n",
    "    0      no check failed (warnings and skips allowed)\n",
    "    2      bad command line\n",
    "    4      at least one check failed\n",
);

#[derive(Debug, Clone, Args)]
#[command(after_help = DOCTOR_HELP)]
pub struct DoctorArgs {
    /// Output format
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,
    /// Python interpreter to probe for PyTorch (a name on PATH or a path)
    #[arg(long, value_name = "PATH", default_value = "python3")]
    pub python: PathBuf,
    /// How long the Python probe may take (importing torch and initialising CUDA)
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub python_timeout: Duration,
    /// Dataset directory or file: filesystem type, rotational or network, read throughput sample
    #[arg(long, value_name = "PATH")]
    pub data: Option<PathBuf>,
    /// Most bytes the --data read sample reads (e.g. 256M, 1G)
    #[arg(long, value_name = "SIZE", default_value = "512M", value_parser = parse_size)]
    pub data_sample: u64,
    /// Most time the --data read sample takes
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub data_sample_time: Duration,
    /// DataLoader num_workers per GPU, for the /dev/shm estimate
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub num_workers: u32,
    /// DataLoader prefetch_factor, for the /dev/shm estimate
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub prefetch_factor: u32,
    /// Bytes of one batch as the workers produce it [default: 147M, 256 float32 images 3×224×224]
    #[arg(long, value_name = "SIZE", default_value = "154140672", value_parser = parse_size)]
    pub batch_bytes: u64,
    /// Shared-memory mount to check
    #[arg(long, value_name = "PATH", default_value = "/dev/shm")]
    pub shm_path: PathBuf,
}
