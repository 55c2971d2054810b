//! `gpufeed bench`: copy bandwidth and GEMM throughput on the GPU; exit 5 without one.

use crate::cli::{GlobalOpts, OutputFormat};
use crate::doctor::bench::{self, BenchError, BenchOptions, SavedBench};
use crate::doctor::parse_size;
use crate::exit::{self, Failure};
use clap::Args;
use std::io::Write;
use std::path::PathBuf;

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

pub fn run(global: &GlobalOpts, args: &BenchArgs) -> anyhow::Result<u8> {
    if args.min_size == 0 || args.min_size > args.max_size {
        return Err(anyhow::Error::new(Failure::new(
            exit::USAGE,
            format!(
                "--min-size must be above 0 and at most --max-size (got {} and {})",
                args.min_size, args.max_size
            ),
        )));
    }
    let opts = BenchOptions {
        device: args.device,
        min_bytes: args.min_size,
        max_bytes: args.max_size,
        gemm_n: (!args.no_gemm).then_some(args.gemm_size),
        nvml_lib: global.nvml_lib.clone(),
    };
    let mut report = bench::run(&opts).map_err(|e| {
        let code = match e {
            BenchError::NoDriver | BenchError::NoDevice(_) => exit::NO_GPU,
            BenchError::BadDevice { .. } => exit::USAGE,
            _ => exit::FAILURE,
        };
        anyhow::Error::new(Failure::new(code, e.to_string()))
    })?;
    if !args.no_save {
        match args.save_to.clone().or_else(bench::default_saved_path) {
            Some(path) => {
                let mut saved = SavedBench::load(&path).unwrap_or_default();
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                saved.upsert(bench::saved_entry(&report, now));
                match saved.save(&path) {
                    Ok(()) => report.saved_to = Some(path),
                    Err(e) => eprintln!("gpufeed: warning: {e}"),
                }
            }
            None => eprintln!("gpufeed: warning: no HOME or XDG_CACHE_HOME: results not saved"),
        }
    }
    let text = match args.format {
        OutputFormat::Json => serde_json::to_string_pretty(&report)? + "\n",
        OutputFormat::Text | OutputFormat::Markdown | OutputFormat::Html => {
            bench::render_text(&report)
        }
    };
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|_| out.flush());
    Ok(exit::OK)
}
