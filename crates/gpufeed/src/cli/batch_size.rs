//! Arguments of `gpufeed batch-size`.

use super::*;

#[derive(Debug, Clone, Args)]
#[command(mut_arg("output_dir", |a| a.help(
    "Where each trial's recording and batch-size.json go [default: a new \
     gpufeed-batch-size-YYYYMMDD-HHMMSS-mmm folder]"
)))]
#[command(after_help = "EXAMPLES:
    gpufeed batch-size --param bs --start 64 -- python train.py --batch-size {bs}
    gpufeed batch-size --param bs --start 32 --max 1024 --mem-target 85% --target-batch 2048 -- python train.py --bs {bs}

Doubles the batch until the first out-of-memory, then bisects between the last size that ran and
the first that did not. Out-of-memory is recognised from the job's output (CUDA out of memory,
torch.OutOfMemoryError, CUBLAS_STATUS_ALLOC_FAILED, DefaultCPUAllocator, RESOURCE_EXHAUSTED,
DataLoader worker killed) or a SIGKILL / exit 137; any other failure stops the search.
Exit: 0 when a batch size ran, 1 when none did or the command failed otherwise, 2 bad options,
130 interrupted.")]
pub struct BatchSizeArgs {
    /// The name used in the command (or in --dataloader batch_size={NAME}) as {NAME}
    #[arg(long, value_name = "NAME")]
    pub param: String,
    #[command(flatten)]
    pub inject: crate::cli::InjectOpts,
    /// First batch size to try
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub start: u64,
    /// Never try more than this
    #[arg(long, value_name = "N")]
    pub max: Option<u64>,
    /// Recommend the largest batch whose peak GPU memory stays under this share of the total
    #[arg(long, value_name = "PCT", default_value = "90%", value_parser = parse_fraction)]
    pub mem_target: f64,
    /// Plan gradient accumulation to reach this effective batch
    #[arg(long, value_name = "N")]
    pub target_batch: Option<u64>,
    #[command(flatten)]
    pub trial: TrialOpts,
    /// Write the report as JSON after every trial
    #[arg(long, value_name = "PATH")]
    pub export_json: Option<PathBuf>,
    /// The command, after `--`, with {NAME} where the batch size goes
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    pub command: Vec<String>,
}
