//! Command-line definitions (clap), one file per command under `cli/`. Kept free of behaviour:
//! `commands::*` does the work and imports from here, never the other way.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

mod analyze;
mod batch_size;
mod bench;
mod compare;
mod completions;
mod diagnose;
mod doctor;
mod export;
mod man;
mod serve;
mod sweep;
mod trial_opts;
mod tune;
mod watch;

pub(crate) use analyze::AnalyzeArgs;
pub(crate) use batch_size::BatchSizeArgs;
pub(crate) use bench::BenchArgs;
pub(crate) use compare::CompareArgs;
pub(crate) use completions::CompletionsArgs;
pub(crate) use diagnose::{ColorChoice, DiagnoseArgs};
pub(crate) use doctor::DoctorArgs;
pub(crate) use export::ExportArgs;
pub(crate) use man::ManArgs;
pub(crate) use serve::ServeArgs;
pub(crate) use sweep::SweepArgs;
pub(crate) use trial_opts::{parse_fraction, TrialOpts};
pub(crate) use tune::TuneArgs;
pub(crate) use watch::WatchArgs;

const ABOUT: &str =
    "Find out why your GPU is starving during training, what to change, and measure the fix.";

#[derive(Debug, Parser)]
#[command(name = "gpufeed", version, about = ABOUT, long_about = None,
          after_help = after_help(), propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalOpts,
    #[command(subcommand)]
    pub command: Command,
}

/// `after_help` text before the exit-code table: examples and environment.
const HELP_TEXT: &str = concat!(
    "EXAMPLES:\n",
    "    gpufeed run -- python train.py --epochs 1     wrap a job, record it, print a summary\n",
    "    gpufeed tune -- python train.py               find the settings, measure them, write fix.patch\n",
    "    gpufeed record --duration 60s                 record the whole machine for a minute\n",
    "    gpufeed record --pid 4242                     attach to a running job and its children\n",
    "    gpufeed diagnose gpufeed-20261202-120000.ndjson   why was the GPU starving?\n",
    "    gpufeed analyze trace.json.gz                 analyze a PyTorch profiler trace\n",
    "    gpufeed compare before.ndjson after.ndjson    did the fix work? speed-up and what changed\n",
    "    gpufeed sweep -L workers 0,2,4,8 -- python train.py --workers {workers}\n",
    "    gpufeed sweep -L w 0,2,4,8 --dataloader num_workers={w} -- python train.py   no code change\n",
    "    gpufeed batch-size --param bs --start 64 -- python train.py --batch-size {bs}\n",
    "    gpufeed watch -- python train.py              live view of a job (q quits, r records)\n",
    "    gpufeed serve --listen 127.0.0.1:9400         Prometheus metrics on /metrics\n",
    "    gpufeed diagnose --html report.html rec.ndjson   the diagnosis as a page with charts\n",
    "    gpufeed export --perfetto t.json rec.ndjson   counter tracks for ui.perfetto.dev\n",
    "    gpufeed export --tensorboard runs/ rec.ndjson   gpufeed's series as TensorBoard scalars\n",
    "    gpufeed doctor                                check the machine and its software stack\n",
    "    gpufeed bench                                 measure copy bandwidth and GEMM speed-ups\n",
    "    gpufeed completions bash > ~/.local/share/bash-completion/completions/gpufeed\n",
    "    gpufeed man | man -l -                        this help as a man page\n",
    "\n",
    "ENVIRONMENT:\n",
    "    GPUFEED_NVML_LIB   path of the NVML library to load (same as --nvml-lib)\n",
    "    GPUFEED_STEP_SOCKET  set by run/watch/sweep/batch-size for the job (record and serve print it):\n",
    "                         where to send step markers (docs/step-protocol.md)\n",
    "\n",
);

/// `after_help`: examples, environment and the exit-code table ([`crate::exit::Exit`]).
fn after_help() -> String {
    format!("{HELP_TEXT}{}", crate::exit::help_table())
}

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
    /// Find the settings that feed the GPU (baseline, diagnosis, search), measure the speed-up, write fix.patch
    Tune(TuneArgs),
    /// Find the largest batch size that fits, the one to use, and a gradient-accumulation plan
    BatchSize(BatchSizeArgs),
    /// Serve Prometheus metrics (dcgm-exporter names plus busy ratio, oscillation, starvation)
    Serve(ServeArgs),
    /// Full-screen live view: GPU sparklines, memory, PCIe, CPU cores, the job's processes, a verdict
    Watch(WatchArgs),
    /// Export a recording as a Perfetto/Chrome trace (optionally merged with a PyTorch profiler trace) or as TensorBoard scalars
    Export(ExportArgs),
    /// Check the driver, CUDA, cuDNN, PyTorch, GPU link and health, /dev/shm, CPUs and data storage
    Doctor(DoctorArgs),
    /// Measure host<->GPU copy bandwidth (pinned vs pageable) and GEMM throughput per precision
    Bench(BenchArgs),
    /// Print a shell completion script (bash, zsh, fish, powershell, elvish)
    Completions(CompletionsArgs),
    /// Print the man page (roff): `gpufeed man | man -l -`
    Man(ManArgs),
}

use crate::present::OutputFormat;

/// On or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum OnOff {
    #[default]
    On,
    Off,
}

/// Python stack sampling (shared by `run`, `record`, `watch`, `sweep`, `batch-size`).
#[derive(Debug, Clone, Args)]
pub struct PyStackOpts {
    /// Sample the job's Python stacks (training-loop phases, the slow data stage); reading a
    /// process not started by gpufeed (`record --pid`) needs CAP_SYS_PTRACE
    #[arg(long, value_enum, value_name = "on|off", default_value_t = OnOff::On)]
    pub py_stacks: OnOff,
    /// Python stack samples per second per process (1-1000)
    #[arg(long, value_name = "HZ", default_value_t = 100.0, value_parser = parse_rate)]
    pub py_rate: f64,
}

impl PyStackOpts {
    /// The recorder's setting; `notes`: print one note when a process refuses to be read.
    pub fn config(&self, notes: bool) -> Option<crate::record::pyrec::PyConfig> {
        (self.py_stacks == OnOff::On).then(|| crate::record::pyrec::PyConfig {
            rate_hz: self.py_rate,
            opts: crate::sample::pystacks::PyOptions {
                // Measured in bench/pystacks_overhead.py: reading live costs the job less.
                blocking: std::env::var_os("GPUFEED_PY_BLOCKING").is_some_and(|v| v == "1"),
                // GPUFEED_PY_CHILD_EVERY=1 reads workers at the full rate (for the bench).
                child_every: std::env::var("GPUFEED_PY_CHILD_EVERY")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(crate::sample::pystacks::CHILD_EVERY),
                // GPUFEED_PY_CACHE=0 turns the frame cache off (for the bench's side by side).
                cache: std::env::var_os("GPUFEED_PY_CACHE").is_none_or(|v| v != "0"),
                // GPUFEED_PY_IDLE_SKIP=0 reads idle processes too (for the bench).
                idle_skip: std::env::var_os("GPUFEED_PY_IDLE_SKIP").is_none_or(|v| v != "0"),
            },
            notes,
        })
    }
}

/// Parses a sampling rate in Hz (1 to 1000).
pub(crate) fn parse_rate(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if (1.0..=1000.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "'{s}' is not a rate between 1 and 1000 (samples per second)"
        )),
    }
}

/// Options shared by `run` and `record`.
#[derive(Debug, Clone, Args)]
pub struct RecordingOpts {
    /// Where to write the NDJSON recording, zstd-compressed when the name ends in .zst [default: gpufeed-YYYYMMDD-HHMMSS-mmm.ndjson.zst in the working directory, suffixed -2, -3 ... if taken]
    #[arg(short, long, value_name = "PATH")]
    pub output: Option<PathBuf>,
    /// Replace an existing file at --output (without it, an existing file is never touched)
    #[arg(long)]
    pub force: bool,
    /// Host and process sampling interval (GPU utilization keeps every driver sample regardless)
    #[arg(long, value_name = "DURATION", default_value = "100ms", value_parser = crate::cli::parse_interval)]
    pub interval: Duration,
    /// Summary format printed at the end (to stdout for json, stderr for text); with json on stdout, run sends the job's own stdout to stderr
    #[arg(long, value_parser = OutputFormat::parser(OutputFormat::TEXT_JSON), default_value = "text")]
    pub format: OutputFormat,
    /// Do not print the summary at the end
    #[arg(short, long)]
    pub quiet: bool,
    #[command(flatten)]
    pub py: PyStackOpts,
    /// Also write the summary and diagnosis as JSON to FILE; stdout then carries nothing but the job's output
    #[arg(long, value_name = "FILE")]
    pub export_json: Option<PathBuf>,
}

/// `--dataloader` and `--torch` (run, sweep, batch-size, watch): see [`crate::inject`].
#[derive(Debug, Clone, Default, Args)]
pub struct InjectOpts {
    /// Put VALUE in place of the job's own in every torch DataLoader it creates, no code change
    /// (repeatable; KEY: num_workers, pin_memory, prefetch_factor, persistent_workers, batch_size;
    /// VALUE may use {knob} in sweep/batch-size)
    #[arg(long = "dataloader", value_name = "KEY=VALUE")]
    pub dataloader: Vec<String>,
    /// Set a PyTorch switch when the job imports torch (repeatable; matmul_precision=high|medium|highest,
    /// cudnn_benchmark=0|1, allow_tf32=0|1)
    #[arg(long = "torch", value_name = "KEY=VALUE")]
    pub torch: Vec<String>,
}

impl InjectOpts {
    /// The parsed overrides; a bad key or value is a usage error (exit 2).
    pub fn spec(&self) -> Result<crate::inject::InjectSpec, crate::inject::InjectError> {
        crate::inject::InjectSpec::parse(&self.dataloader, &self.torch)
    }
}

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub rec: RecordingOpts,
    #[command(flatten)]
    pub inject: InjectOpts,
    /// Also write a self-contained HTML report (charts, findings and fixes) to FILE
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Also write gpufeed's series as TensorBoard scalars, and the verdict as text, in an event
    /// file in DIR (created if absent): point `tensorboard --logdir` at it
    #[arg(long, value_name = "DIR")]
    pub tensorboard: Option<PathBuf>,
    /// Do not time the job's torch DataLoader batches as steps (on by default: exact steps/s and
    /// data wait with no code change; the job's own step markers win when it sends any)
    #[arg(long)]
    pub no_auto_steps: bool,
    /// The command to run, after `--` (passed as it is, bytes that are not UTF-8 included)
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    pub command: Vec<OsString>,
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
    /// Create the step-marker socket at PATH (removed at exit) instead of a private one: for a job
    /// already started with GPUFEED_STEP_SOCKET=PATH, whose markers are dropped until gpufeed
    /// listens (docs/step-protocol.md)
    #[arg(long, value_name = "PATH")]
    pub step_socket: Option<PathBuf>,
}

/// The longest duration any option takes: a year. Longer values are refused (exit 2), so that
/// no deadline computed from an option (`Instant + d`) can overflow.
pub(crate) const MAX_DURATION: Duration = Duration::from_secs(366 * 24 * 3600);
/// The longest sampling interval (`--interval`).
pub(crate) const MAX_INTERVAL: Duration = Duration::from_secs(3600);

/// Parses `100ms`, `1s`, `2m`, `1h30m` or a bare number of seconds (`0.5`), at most
/// [`MAX_DURATION`].
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let d = if let Ok(secs) = t.parse::<f64>() {
        if !(secs.is_finite() && secs >= 0.0) {
            return Err(format!("'{s}' is not a valid duration"));
        }
        if secs > MAX_DURATION.as_secs_f64() {
            None
        } else {
            Some(Duration::from_secs_f64(secs))
        }
    } else {
        match humantime::parse_duration(t) {
            Ok(d) => Some(d),
            // humantime's own overflow ("number is too large"): too long, not malformed.
            Err(humantime::DurationError::NumberOverflow) => None,
            Err(e) => {
                return Err(format!(
                    "'{s}' is not a valid duration ({e}); use e.g. 100ms, 30s, 5m"
                ))
            }
        }
    };
    match d {
        Some(d) if d <= MAX_DURATION => Ok(d),
        _ => Err(format!("'{s}' is too long: durations are at most 366 days")),
    }
}

/// Parses a sampling interval: a duration from 10ms to 1h.
pub(crate) fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < Duration::from_millis(10) {
        return Err(format!(
            "'{s}' is too short: the interval must be at least 10ms (the default is right for most jobs)"
        ));
    }
    if d > MAX_INTERVAL {
        return Err(format!(
            "'{s}' is too long: the interval must be at most 1h"
        ));
    }
    Ok(d)
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
        // Bounded, never an overflow or a panic.
        for huge in [
            "18446744073709551615s",
            "18446744073709551615",
            "1e300",
            "367days",
            "99999999999999999999999h",
        ] {
            let e = parse_duration(huge).unwrap_err();
            assert!(e.contains("too long"), "{huge}: {e}");
        }
        assert_eq!(parse_duration("366days").unwrap(), MAX_DURATION);
        assert!(parse_interval("5ms").is_err());
        assert!(parse_interval("2h").is_err());
        assert_eq!(parse_interval("1h").unwrap(), MAX_INTERVAL);
    }
}
