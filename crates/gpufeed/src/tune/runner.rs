//! The trial runner `sweep`, `batch-size` and `tune` share: the options every trial takes and
//! their checks, the output folder, each trial's spec, the progress bar, Ctrl-C and the one-line
//! trial report. The commands turn their arguments into a [`TrialConfig`] and drive a [`Runner`].

use crate::exit::{Exit, Failure};
use crate::job::SignalWatch;
use crate::tune::progress::RateRegex;
use crate::tune::sweep_report::TrialResult;
use crate::tune::trial::{run_trial, Live, TrialOutcome, TrialSpec, TrialStatus};
use crate::tune::TuneError;
use crate::units::num;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// How each trial is measured: the trial options of the command line, and the NVML library.
#[derive(Debug, Clone)]
pub struct TrialConfig {
    pub min_time: Duration,
    pub max_time: Duration,
    /// CI half-width over the median that counts as steady (0.03).
    pub tolerance: f64,
    pub rate_regex: Option<String>,
    pub rate_unit: String,
    /// Samples per step, a template that may use `{name}`.
    pub batch: Option<String>,
    pub show_output: bool,
    pub interval: Duration,
    pub grace: Duration,
    pub output_dir: Option<PathBuf>,
    pub quiet: bool,
    pub py: Option<crate::record::pyrec::PyConfig>,
    pub auto_steps: bool,
    pub nvml_lib: Option<PathBuf>,
}

fn usage(msg: impl Into<String>) -> Failure {
    Failure::new(Exit::Usage, msg)
}

impl TrialConfig {
    /// Checks the options against each other and the command; returns the compiled regex.
    pub fn check(&self, command: &[String]) -> Result<Option<RateRegex>, Failure> {
        if let Some(first) = command.first().filter(|c| c.starts_with('-')) {
            return Err(usage(format!(
                "unknown option '{first}': put gpufeed's options before `--` and the command after it"
            )));
        }
        if self.min_time > self.max_time {
            return Err(usage(format!(
                "--min-time ({}) is longer than --max-time ({})",
                humantime::format_duration(self.min_time),
                humantime::format_duration(self.max_time)
            )));
        }
        if self.max_time.is_zero() {
            return Err(usage("--max-time must be above 0"));
        }
        self.rate_regex
            .as_deref()
            .map(RateRegex::new)
            .transpose()
            .map_err(usage)
    }

    /// The batch size of a setting, from `--batch` (`None` when not given).
    pub(crate) fn batch_of(&self, values: &[(String, String)]) -> Result<Option<f64>, Failure> {
        let Some(tpl) = &self.batch else {
            return Ok(None);
        };
        let s = crate::inject::substitute(tpl, values);
        match s.trim().parse::<f64>() {
            Ok(b) if b > 0.0 && b.is_finite() => Ok(Some(b)),
            _ => Err(usage(format!(
                "--batch '{tpl}' gives '{s}', not a positive number"
            ))),
        }
    }

    /// The output directory (created): `--output-dir`, which must not hold the trial recordings
    /// of an earlier run, or a new `PREFIX-YYYYMMDD-HHMMSS-mmm` folder (suffixed `-2`, `-3` ...
    /// when taken).
    pub fn output_dir(&self, prefix: &str) -> Result<PathBuf, Failure> {
        let cannot = |dir: &Path, e: std::io::Error| {
            Failure::input(format!(
                "cannot create output directory {}: {e} (choose another with --output-dir)",
                dir.display()
            ))
        };
        let Some(dir) = self.output_dir.clone() else {
            let base = PathBuf::from(crate::record::recorder::default_stamp(
                prefix,
                SystemTime::now(),
            ));
            return crate::outfile::create_dir_unique(&base).map_err(|e| cannot(&base, e));
        };
        // A symlink is not followed: the recordings would land wherever it points.
        if std::fs::symlink_metadata(&dir).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(usage(format!(
                "--output-dir {} is a symlink: give the real folder it points to, or another folder",
                dir.display()
            )));
        }
        std::fs::create_dir_all(&dir).map_err(|e| cannot(&dir, e))?;
        let earlier = std::fs::read_dir(&dir)
            .map_err(|e| cannot(&dir, e))?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .find(|n| n.starts_with("trial-") && n.ends_with(".ndjson"));
        if let Some(n) = earlier {
            return Err(usage(format!(
                "{} already holds trial recordings of an earlier run ({n}): choose another --output-dir, or leave it out for a new folder",
                dir.display()
            )));
        }
        Ok(dir)
    }

    /// Everything a trial needs apart from its command, env and paths.
    pub fn spec(
        &self,
        regex: Option<RateRegex>,
        argv: Vec<String>,
        env: Vec<(String, String)>,
        recording: PathBuf,
        batch: Option<f64>,
    ) -> TrialSpec {
        TrialSpec {
            argv,
            env,
            recording,
            min_time: self.min_time,
            max_time: self.max_time,
            rel_tol: self.tolerance,
            rate_regex: regex,
            rate_unit: self.rate_unit.clone(),
            batch,
            show_output: self.show_output,
            interval: self.interval,
            nvml_lib: self.nvml_lib.clone(),
            no_gpu: false,
            py: self.py,
            grace: self.grace,
            inject: None,
            auto_steps: self.auto_steps,
        }
    }
}

/// A file-name-safe version of a label.
pub(crate) fn file_safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "=._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Runs trials one after another: the progress bar (hidden with `--quiet` or when stderr is not
/// a terminal), the lines above it, and the Ctrl-C / SIGTERM flag that stops the running trial
/// cleanly.
pub(crate) struct Runner {
    pub pb: ProgressBar,
    quiet: bool,
    interrupt: Arc<AtomicBool>,
    _watch: SignalWatch,
    gpu_note_said: Cell<bool>,
}

impl Runner {
    /// Starts watching for Ctrl-C and shows a bar of `len` trials (0: grown as they come).
    pub(crate) fn start(len: u64, quiet: bool) -> Result<Runner, Failure> {
        let interrupt = Arc::new(AtomicBool::new(false));
        let f = Arc::clone(&interrupt);
        let watch = SignalWatch::start(move |_| f.store(true, Ordering::SeqCst))?;
        let pb = if quiet {
            ProgressBar::hidden()
        } else {
            ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr())
        };
        pb.set_style(
            ProgressStyle::with_template(
                "{spinner} {elapsed_precise} [{bar:25}] {pos}/{len} trials, ETA {eta}  {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        pb.enable_steady_tick(Duration::from_millis(200));
        Ok(Runner {
            pb,
            quiet,
            interrupt,
            _watch: watch,
            gpu_note_said: Cell::new(false),
        })
    }

    /// Ctrl-C or SIGTERM arrived.
    pub(crate) fn stopped(&self) -> bool {
        self.interrupt.load(Ordering::SeqCst)
    }

    /// A line above the bar, or on stderr when the bar is hidden.
    pub(crate) fn say(&self, line: String) {
        if self.quiet {
            return;
        }
        if self.pb.is_hidden() {
            eprintln!("{line}");
        } else {
            self.pb.println(line);
        }
    }

    /// Runs one trial, its live readings in the bar's message; says once per run when the GPUs
    /// could not be recorded.
    pub(crate) fn run(&self, spec: &TrialSpec, label: &str) -> Result<TrialOutcome, TuneError> {
        self.pb.set_message(format!("{label}: starting"));
        let pb = self.pb.clone();
        let o = run_trial(spec, &self.interrupt, |l| {
            pb.set_message(live_msg(label, l))
        })?;
        if let (Some(e), false) = (&o.gpu_error, self.gpu_note_said.get()) {
            self.say(format!("gpufeed: {e}: recording host metrics only"));
            self.gpu_note_said.set(true);
        }
        Ok(o)
    }
}

/// The bar's message while a trial runs.
fn live_msg(label: &str, l: &Live) -> String {
    match (l.value, &l.unit) {
        (Some(v), Some(u)) => format!(
            "{label}: {} {u}{} at {:.0}s",
            num(v),
            l.rel_half_width
                .map(|r| format!(" ±{:.1}%", r * 100.0))
                .unwrap_or_default(),
            l.elapsed_s
        ),
        _ => format!("{label}: waiting for throughput, {:.0}s", l.elapsed_s),
    }
}

/// One line per finished trial: `trial 2/6 workers=4: ...` (`n` None: `trial 2 ...`).
pub(crate) fn trial_line(i: usize, n: Option<usize>, r: &TrialResult) -> String {
    let tp = match &r.figures.throughput {
        Some(t) => format!(
            "{} {}{} (from {})",
            num(t.value),
            t.unit,
            t.rel_half_width()
                .map(|h| format!(" ±{:.1}%", h * 100.0))
                .unwrap_or_default(),
            t.source.as_str()
        ),
        None => "no throughput".into(),
    };
    let how = match (r.run.exit.status, r.run.exit.code, r.run.exit.signal) {
        (TrialStatus::Failed, Some(c), _) => format!("failed with exit {c}"),
        (TrialStatus::Failed, _, Some(s)) => format!("failed with signal {s}"),
        (st, _, _) => st.as_str().to_string(),
    };
    let of = n.map(|n| format!("/{n}")).unwrap_or_default();
    format!(
        "trial {i}{of} {}: {tp}, {how} after {:.1}s",
        r.label, r.run.duration_s
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names() {
        assert_eq!(file_safe("workers=2_pin=a/b"), "workers=2_pin=a_b");
    }
}
