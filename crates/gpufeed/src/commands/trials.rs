//! What `sweep` and `batch-size` share: the trial options, their checks, the output folder, the
//! trial spec, the progress bar, Ctrl-C and the one-line trial report. `sweep`, `batch-size` and
//! `tune` build on this module; none imports another.

use crate::cli::{GlobalOpts, TrialOpts};
use crate::exit::{Exit, Failure};
use crate::job::SignalWatch;
use crate::present::fmt::num as fmt_num;
use crate::tune::params;
use crate::tune::progress::RateRegex;
use crate::tune::sweep::TrialResult;
use crate::tune::trial::{Live, TrialSpec};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

fn usage(msg: impl Into<String>) -> anyhow::Error {
    Failure::new(Exit::Usage, msg).into()
}

/// Checks shared trial options; returns the compiled regex.
pub(crate) fn check_trial_opts(
    t: &TrialOpts,
    command: &[String],
) -> anyhow::Result<Option<RateRegex>> {
    if let Some(first) = command.first().filter(|c| c.starts_with('-')) {
        return Err(usage(format!(
            "unknown option '{first}': put gpufeed's options before `--` and the command after it"
        )));
    }
    if t.min_time > t.max_time {
        return Err(usage(format!(
            "--min-time ({}) is longer than --max-time ({})",
            humantime::format_duration(t.min_time),
            humantime::format_duration(t.max_time)
        )));
    }
    if t.max_time.is_zero() {
        return Err(usage("--max-time must be above 0"));
    }
    if t.interval < Duration::from_millis(10) {
        return Err(usage("--interval must be at least 10ms"));
    }
    t.rate_regex
        .as_deref()
        .map(RateRegex::new)
        .transpose()
        .map_err(usage)
}

/// The batch size of a setting, from `--batch` (`None` when not given).
pub(crate) fn batch_of(t: &TrialOpts, values: &[(String, String)]) -> anyhow::Result<Option<f64>> {
    let Some(tpl) = &t.batch else { return Ok(None) };
    let s = params::substitute(tpl, values);
    match s.trim().parse::<f64>() {
        Ok(b) if b > 0.0 && b.is_finite() => Ok(Some(b)),
        _ => Err(usage(format!(
            "--batch '{tpl}' gives '{s}', not a positive number"
        ))),
    }
}

/// The output directory (created): `--output-dir`, which must not hold the trial recordings of an
/// earlier run, or a new `PREFIX-YYYYMMDD-HHMMSS-mmm` folder (suffixed `-2`, `-3` ... when taken).
pub(crate) fn output_dir(t: &TrialOpts, prefix: &str) -> anyhow::Result<PathBuf> {
    let cannot = |dir: &Path, e: std::io::Error| {
        Failure::input(format!(
            "cannot create output directory {}: {e} (choose another with --output-dir)",
            dir.display()
        ))
    };
    let Some(dir) = t.output_dir.clone() else {
        let base = PathBuf::from(crate::record::recorder::default_stamp(
            prefix,
            SystemTime::now(),
        ));
        return crate::outfile::create_dir_unique(&base).map_err(|e| cannot(&base, e).into());
    };
    // A symlink is not followed: the recordings would land wherever it points.
    if std::fs::symlink_metadata(&dir).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(Failure::new(
            Exit::Usage,
            format!(
                "--output-dir {} is a symlink: give the real folder it points to, or another folder",
                dir.display()
            ),
        )
        .into());
    }
    std::fs::create_dir_all(&dir).map_err(|e| cannot(&dir, e))?;
    let earlier = std::fs::read_dir(&dir)
        .map_err(|e| cannot(&dir, e))?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("trial-") && n.ends_with(".ndjson"));
    if let Some(n) = earlier {
        return Err(Failure::new(
            Exit::Usage,
            format!(
                "{} already holds trial recordings of an earlier run ({n}): choose another --output-dir, or leave it out for a new folder",
                dir.display()
            ),
        )
        .into());
    }
    Ok(dir)
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

/// Everything a trial needs apart from its command, env and paths.
pub fn spec(
    global: &GlobalOpts,
    t: &TrialOpts,
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
        min_time: t.min_time,
        max_time: t.max_time,
        rel_tol: t.tolerance,
        rate_regex: regex,
        rate_unit: t.rate_unit.clone(),
        batch,
        show_output: t.show_output,
        interval: t.interval,
        nvml_lib: global.nvml_lib.clone(),
        no_gpu: false,
        py: t.py.config(false),
        grace: t.grace,
        inject: None,
        auto_steps: !t.no_auto_steps,
    }
}

/// The progress bar (hidden with --quiet or when stderr is not a terminal).
pub(crate) fn progress_bar(len: u64, quiet: bool) -> ProgressBar {
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
    pb
}

/// A line above the bar, or on stderr when the bar is hidden.
pub fn say(pb: &ProgressBar, quiet: bool, line: String) {
    if quiet {
        return;
    }
    if pb.is_hidden() {
        eprintln!("{line}");
    } else {
        pb.println(line);
    }
}

/// The bar's message while a trial runs.
pub(crate) fn live_msg(label: &str, l: &Live) -> String {
    match (l.value, &l.unit) {
        (Some(v), Some(u)) => format!(
            "{label}: {} {u}{} at {:.0}s",
            fmt_num(v),
            l.rel_half_width
                .map(|r| format!(" ±{:.1}%", r * 100.0))
                .unwrap_or_default(),
            l.elapsed_s
        ),
        _ => format!("{label}: waiting for throughput, {:.0}s", l.elapsed_s),
    }
}

/// Ctrl-C / SIGTERM: set a flag that stops the running trial cleanly.
pub(crate) fn interrupt_flag() -> anyhow::Result<(Arc<AtomicBool>, SignalWatch)> {
    let flag = Arc::new(AtomicBool::new(false));
    let f = Arc::clone(&flag);
    let watch =
        SignalWatch::start(move |_| f.store(true, Ordering::SeqCst)).map_err(Failure::from)?;
    Ok((flag, watch))
}

/// One line per finished trial.
pub(crate) fn trial_line(i: usize, n: usize, r: &TrialResult) -> String {
    let tp = match &r.throughput {
        Some(t) => format!(
            "{} {}{} (from {})",
            fmt_num(t.value),
            t.unit,
            t.rel_half_width()
                .map(|h| format!(" ±{:.1}%", h * 100.0))
                .unwrap_or_default(),
            word(&t.source)
        ),
        None => "no throughput".into(),
    };
    let how = match (r.exit.status, r.exit.code, r.exit.signal) {
        (crate::tune::trial::Status::Failed, Some(c), _) => format!("failed with exit {c}"),
        (crate::tune::trial::Status::Failed, _, Some(s)) => format!("failed with signal {s}"),
        (st, _, _) => word(&st),
    };
    format!(
        "trial {i}/{n} {}: {tp}, {how} after {:.1}s",
        r.label, r.duration_s
    )
}

/// The JSON name of an enum value (`step_socket`, `max_time`).
pub(crate) fn word<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names() {
        assert_eq!(file_safe("workers=2_pin=a/b"), "workers=2_pin=a_b");
    }
}
