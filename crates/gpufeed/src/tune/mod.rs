//! The tuner: runs the user's own command once per knob setting (`sweep`) or batch size
//! (`batch-size`), records each trial with the same recorder as `gpufeed run`, measures
//! throughput until it is steady, and picks the setting to use.
//!
//! - [`params`]: `-L name v1,v2` lists, their Cartesian product and `{name}` substitution.
//! - [`progress`]: throughput from tqdm-style progress lines or a user regex.
//! - [`crate::stats::steady`]: warm-up detection (MSER-5) and batch-means confidence intervals.
//! - [`trial`]: one trial: spawn, observe, stop the whole process tree, summarise.
//! - [`sweep_report`]: a sweep's results and the sweet spot (their tables, JSON, CSV, Markdown
//!   and SVG chart are written by `present::sweep` and `present::sweep_chart`).
//! - [`batch_plan`]: the batch sizes to try (double, then bisect), the batch to recommend at a
//!   memory target, the accumulation plan, and `batch-size`'s report.
//! - [`plan`], [`report`], [`patch`]: `gpufeed tune`'s knobs from a diagnosis and its search
//!   rules, its report, and `fix.patch`.
//! - [`runner`]: the trial runner the three commands share (options, checks, output folder,
//!   progress bar, Ctrl-C); [`sweep_search`], [`batch_search`] and [`knob_search`]: the
//!   searches of `sweep`, `batch-size` and `tune`.

pub mod batch_plan;
pub(crate) mod batch_search;
pub(crate) mod knob_search;
pub(crate) mod oom;
pub mod params;
pub(crate) mod patch;
pub mod plan;
pub(crate) mod progress;
pub mod report;
pub(crate) mod runner;
pub mod sweep_report;
pub(crate) mod sweep_search;
pub mod trial;

/// Errors of the tuner. Each says its exit code through [`crate::exit::HasExit`].
#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Job(#[from] crate::job::JobError),
    #[error(transparent)]
    Record(#[from] crate::record::recorder::RecordError),
    #[error(transparent)]
    Inject(crate::inject::InjectError),
    #[error("step-marker socket: {0}")]
    Socket(std::io::Error),
    #[error("cannot start a reader thread: {0}")]
    Thread(std::io::Error),
    #[error("writing {path}: {source}")]
    Write {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

impl crate::exit::HasExit for TuneError {
    fn exit(&self) -> crate::exit::Exit {
        use crate::exit::Exit;
        match self {
            TuneError::Usage(_) => Exit::Usage,
            TuneError::Job(e) => e.exit(),
            TuneError::Inject(e) => e.exit(),
            TuneError::Record(_) | TuneError::Write { .. } => Exit::Input,
            _ => Exit::Failure,
        }
    }
}
