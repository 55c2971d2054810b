//! Arguments of `gpufeed sweep`.

use super::*;

#[derive(Debug, Clone, Args)]
#[command(after_help = "EXAMPLES:
    gpufeed sweep -L workers 0,2,4,8 -- python train.py --num-workers {workers}
    gpufeed sweep -L workers 2,4 -L pin 0,1 --export-json sweep.json -- python train.py --workers {workers} --pin {pin}
    gpufeed sweep -L threads 1,2,4 --env OMP_NUM_THREADS={threads} -- python train.py
    gpufeed sweep -L w 0,2,4,8 --dataloader num_workers={w} -- python train.py
    gpufeed sweep -L p high,highest --torch matmul_precision={p} -- python train.py

--dataloader/--torch change a PyTorch job's DataLoader arguments and global switches with no code
change (a sitecustomize put first on the job's PYTHONPATH; see docs/sweep.md).

Throughput comes from step markers on GPUFEED_STEP_SOCKET (python/gpufeed_probe.py), else
--rate-regex, else a tqdm progress bar, else mean GPU utilization as a stated proxy.
Exit: 0 when a trial succeeded, 1 when none did, 2 bad options, 127/126 command not found /
not executable, 130 interrupted (results so far are written).")]
pub struct SweepArgs {
    /// A knob and the values to try, in order of cost: -L workers 0,2,4,8 (repeat for a product)
    #[arg(short = 'L', long = "parameter-list", num_args = 2,
          value_names = ["NAME", "VALUES"], required = true)]
    pub lists: Vec<String>,
    /// Set an environment variable per trial, e.g. --env OMP_NUM_THREADS={threads}
    #[arg(long = "env", value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    #[command(flatten)]
    pub inject: InjectOpts,
    #[command(flatten)]
    pub trial: TrialOpts,
    /// Write the results as JSON after every trial
    #[arg(long, value_name = "PATH")]
    pub export_json: Option<PathBuf>,
    /// Write the results as CSV after every trial
    #[arg(long, value_name = "PATH")]
    pub export_csv: Option<PathBuf>,
    /// Write the results as a Markdown table after every trial
    #[arg(long, value_name = "PATH")]
    pub export_markdown: Option<PathBuf>,
    /// Write an SVG chart of throughput (and GPU utilization) against the knob after every trial
    #[arg(long, value_name = "PATH")]
    pub export_svg: Option<PathBuf>,
    /// Write a self-contained HTML page (sweep curve, sweet spot) after every trial
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Re-run a trial whose throughput never settled (interval still wider than --tolerance at
    /// --max-time) up to N more times, keeping the steadiest run
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=10))]
    pub retries: u32,
    /// The command, after `--`, with {name} where each knob's value goes
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    pub command: Vec<String>,
}
