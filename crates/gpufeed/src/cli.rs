//! Command-line definitions (clap). Kept free of behaviour: `commands::*` does the work.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;

use crate::commands::analyze::AnalyzeArgs;
use crate::commands::batch_size::BatchSizeArgs;
use crate::commands::bench::BenchArgs;
use crate::commands::compare::CompareArgs;
use crate::commands::diagnose::DiagnoseArgs;
use crate::commands::doctor::DoctorArgs;
use crate::commands::export::ExportArgs;
use crate::commands::serve::ServeArgs;
use crate::commands::sweep::SweepArgs;
use crate::commands::watch::WatchArgs;

const ABOUT: &str =
    "Find out why your GPU is starving during training, what to change, and measure the fix.";

#[derive(Debug, Parser)]
#[command(name = "gpufeed", version, about = ABOUT, long_about = None,
          after_help = HELP_TEXT, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalOpts,
    #[command(subcommand)]
    pub command: Command,
}

/// `after_help` text: examples, environment and the exit-code table.
const HELP_TEXT: &str = concat!(
    "EXAMPLES:\n",
    "    gpufeed run -- python train.py --epochs 1     wrap a job, record it, print a summary\n",
    "    gpufeed record --duration 60s                 record the whole machine for a minute\n",
    "    gpufeed record --pid 4242                     attach to a running job and its children\n",
    "    gpufeed diagnose gpufeed-20261202-120000.ndjson   why was the GPU starving?\n",
    "    gpufeed analyze trace.json.gz                 analyze a PyTorch profiler trace\n",
    "    gpufeed compare before.ndjson after.ndjson    did the fix work? speed-up and what changed\n",
    "    gpufeed sweep -L workers 0,2,4,8 -- python train.py --workers {workers}\n",
    "    gpufeed batch-size --param bs --start 64 -- python train.py --batch-size {bs}\n",
    "    gpufeed watch -- python train.py              live view of a job (q quits, r records)\n",
    "    gpufeed serve --listen 127.0.0.1:9400         Prometheus metrics on /metrics\n",
    "    gpufeed diagnose --html report.html rec.ndjson   the diagnosis as a page with charts\n",
    "    gpufeed export --perfetto t.json rec.ndjson   counter tracks for ui.perfetto.dev\n",
    "    gpufeed doctor                                check the machine and its software stack\n",
    "    gpufeed bench                                 measure copy bandwidth and GEMM speed-ups\n",
    "\n",
    "ENVIRONMENT:\n",
    "    GPUFEED_NVML_LIB   path of the NVML library to load (same as --nvml-lib)\n",
    "    GPUFEED_STEP_SOCKET  set by sweep/batch-size for the job: where to send step markers\n",
    "\n",
    "EXIT CODES:\n",
    "    0      success (for `run`: the job's own exit code is passed through)\n",
    "    1      unexpected error\n",
    "    2      bad command line (unknown option or bad value)\n",
    "    3      bad input: missing, unreadable, empty or malformed file\n",
    "    4      a check failed (doctor)\n",
    "    5      a GPU is required and no NVIDIA driver was found\n",
    "    126    the command to run could not be executed (permission, not a program)\n",
    "    127    the command to run was not found\n",
    "    128+N  the job was killed by signal N (for `run`)\n",
);

#[derive(Debug, Clone, Args)]
pub struct GlobalOpts {
    /// Path of the NVML library to load instead of the system's libnvidia-ml.so.1
    #[arg(long, global = true, env = "GPUFEED_NVML_LIB", value_name = "PATH")]
    pub nvml_lib: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command, record GPU and host behaviour while it runs, print a summary at the end
    Run(RunArgs),
    /// Record the machine for a duration, or attach to a running job with --pid
    Record(RecordArgs),
    /// Diagnose a recording or an nvidia-smi / dcgmi log: the bottleneck, its evidence and the fix
    Diagnose(DiagnoseArgs),
    /// Analyze PyTorch profiler (Kineto) traces: per-step breakdown, starvation, copies, precision
    Analyze(AnalyzeArgs),
    /// Compare two recordings, two traces or two sweeps: figures side by side, speed-up, verdict change
    Compare(CompareArgs),
    /// Run your command once per knob setting (num_workers, pin_memory, ...) and find the sweet spot
    Sweep(SweepArgs),
    /// Find the largest batch size that fits, the one to use, and a gradient-accumulation plan
    BatchSize(BatchSizeArgs),
    /// Serve Prometheus metrics (dcgm-exporter names plus busy ratio, oscillation, starvation)
    Serve(ServeArgs),
    /// Full-screen live view: GPU sparklines, memory, PCIe, CPU cores, the job's processes, a verdict
    Watch(WatchArgs),
    /// Export a recording as a Perfetto/Chrome trace, optionally merged with a PyTorch profiler trace
    Export(ExportArgs),
    /// Check the driver, CUDA, cuDNN, PyTorch, GPU link and health, /dev/shm, CPUs and data storage
    Doctor(DoctorArgs),
    /// Measure host<->GPU copy bandwidth (pinned vs pageable) and GEMM throughput per precision
    Bench(BenchArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum SummaryFormat {
    #[default]
    Text,
    Json,
}

/// Options shared by `run` and `record`.
#[derive(Debug, Clone, Args)]
pub struct RecordingOpts {
    /// Where to write the NDJSON recording [default: gpufeed-YYYYMMDD-HHMMSS.ndjson in the working directory]
    #[arg(short, long, value_name = "PATH")]
    pub output: Option<PathBuf>,
    /// Host and process sampling interval (GPU utilization keeps every driver sample regardless)
    #[arg(long, value_name = "DURATION", default_value = "100ms", value_parser = parse_duration)]
    pub interval: Duration,
    /// Summary format printed at the end (to stdout for json, stderr for text)
    #[arg(long, value_enum, default_value_t = SummaryFormat::Text)]
    pub format: SummaryFormat,
    /// Do not print the summary at the end
    #[arg(short, long)]
    pub quiet: bool,
    /// Also write the summary and diagnosis as JSON to FILE; stdout then carries nothing but the job's output
    #[arg(long, value_name = "FILE")]
    pub export_json: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub rec: RecordingOpts,
    /// Also write a self-contained HTML report (charts, findings and fixes) to FILE
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// The command to run, after `--`
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    pub command: Vec<String>,
}

#[derive(Debug, Clone, Args)]
pub struct RecordArgs {
    #[command(flatten)]
    pub rec: RecordingOpts,
    /// Stop after this long (e.g. 60s, 5m); without it, record until Ctrl-C (or until --pid exits)
    #[arg(short, long, value_name = "DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Attach to this running process and its descendants; stops when it exits
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
}

/// Parses `100ms`, `1s`, `2m`, `1h30m` or a bare number of seconds (`0.5`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if let Ok(secs) = t.parse::<f64>() {
        if secs.is_finite() && secs >= 0.0 {
            return Ok(Duration::from_secs_f64(secs));
        }
        return Err(format!("'{s}' is not a valid duration"));
    }
    humantime::parse_duration(t)
        .map_err(|e| format!("'{s}' is not a valid duration ({e}); use e.g. 100ms, 30s, 5m"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("100ms").unwrap(), Duration::from_millis(100));
        assert_eq!(parse_duration("0.25").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-1").is_err());
    }
}
