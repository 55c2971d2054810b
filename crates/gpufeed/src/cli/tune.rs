//! Arguments of `gpufeed tune`.

use super::*;

#[derive(Debug, Clone, Args)]
#[command(mut_arg("output_dir", |a| a.help(
    "Where each trial's recording, tune.json and fix.patch go [default: a new \
     gpufeed-tune-YYYYMMDD-HHMMSS-mmm folder]"
)))]
#[command(after_help = "EXAMPLES:
    gpufeed tune -- python train.py
    gpufeed tune --budget 5m --export-json tune.json -- python train.py --epochs 1
    gpufeed tune --allow-batch -- python train.py      also search the DataLoader's batch_size
    git apply gpufeed-tune-*/fix.patch        the settings found, written into your DataLoader calls

tune runs the command once as it is (the baseline, to steady throughput) and diagnoses it, then
tries the knobs the diagnosis points at with no code change (--dataloader/--torch injection):
num_workers (doubled past the cores while it still gains), persistent_workers, prefetch_factor
when input-bound; pin_memory when copies come from pageable memory; matmul_precision=high and
cudnn_benchmark=1 for fp32 matmuls on tensor cores; with --allow-batch, when the batch is too
small, batch_size last (batch-size's search from twice the job's own batch, compared in
samples/s, with the learning-rate plan). A value is kept only when the 95% interval
of its throughput over the best so far lies above 1 and it gains at least 5%. It stops when the
job turns compute-bound, when every knob was tried, or when --budget is spent, then re-runs the
baseline and the chosen setting interleaved (A/B/A/B) for the speed-up. Your files are never
changed: fix.patch and the equivalent `gpufeed run --dataloader ...` line are printed instead.
Throughput comes as in sweep: step markers, --rate-regex, a tqdm bar, else GPU busy as a proxy.
Exit: 0 done (also \"nothing to tune\"), 1 the baseline failed or gave no throughput, 2 bad
options, 127/126 command not found / not executable, 130 interrupted (best so far reported).")]
pub struct TuneArgs {
    /// Stop starting search trials after this long (the final re-run comes on top)
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = parse_duration)]
    pub budget: Duration,
    /// Also search the DataLoader's batch_size when the batch is too small (it changes the
    /// optimisation: the report gives the learning-rate plan)
    #[arg(long)]
    pub allow_batch: bool,
    /// Cores per rank for the num_workers range (default: the CPUs this process may use)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub cores: Option<u32>,
    /// Interleaved re-runs of baseline and tuned setting for the final speed-up (pairs)
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=5))]
    pub final_pairs: u32,
    #[command(flatten)]
    pub trial: TrialOpts,
    /// Write the report as JSON (also written as tune.json in the output folder)
    #[arg(long, value_name = "PATH")]
    pub export_json: Option<PathBuf>,
    /// Write the report as a self-contained HTML page (rewritten after every trial)
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// The command, after `--`
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    pub command: Vec<String>,
}
