//! What `sweep` and `batch-size` share: the trial options, their checks, the output folder, the
//! trial spec, the progress bar and Ctrl-C. Both commands build on this module; neither imports
//! the other.

use crate::cli::{parse_duration, GlobalOpts};
use crate::exit::{self, Failure};
use crate::job::SignalWatch;
use crate::present::OutputFormat;
use crate::tune::params;
use crate::tune::progress::RateRegex;
use crate::tune::sweep::fmt_num;
use crate::tune::trial::{Live, TrialSpec};
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// How each trial is measured (shared by `sweep` and `batch-size`).
#[derive(Debug, Clone, Args)]
pub struct TrialOpts {
    /// Shortest trial, even when throughput is steady sooner
    #[arg(long, value_name = "DURATION", default_value = "3s", value_parser = parse_duration)]
    pub min_time: Duration,
    /// Longest trial: stop there even if throughput is not yet steady
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub max_time: Duration,
    /// Steady when the 95% CI half-width is at most this share of the median rate (e.g. 3%, 0.03)
    #[arg(long, value_name = "PCT", default_value = "3%", value_parser = parse_fraction)]
    pub tolerance: f64,
    /// Read the rate from output lines matching this regex (first capture group = the number)
    #[arg(long, value_name = "REGEX")]
    pub rate_regex: Option<String>,
    /// Unit of the --rate-regex rate
    #[arg(long, value_name = "UNIT", default_value = "samples/s")]
    pub rate_unit: String,
    /// Samples per step (may use {name}): adds samples/s to step and it/s throughputs
    #[arg(long, value_name = "N")]
    pub batch: Option<String>,
    /// Pass the job's output through to stderr (it is always parsed)
    #[arg(long)]
    pub show_output: bool,
    /// Host and process sampling interval of each trial's recording
    #[arg(long, value_name = "DURATION", default_value = "100ms", value_parser = crate::cli::parse_interval)]
    pub interval: Duration,
    /// How long SIGINT and then SIGTERM are given to stop a trial before the next signal
    #[arg(long, value_name = "DURATION", default_value = "3s", value_parser = parse_duration)]
    pub grace: Duration,
    /// Where each trial's recording goes [default: gpufeed-sweep-YYYYMMDD-HHMMSS]
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
    /// Report format on stdout
    #[arg(long, value_parser = OutputFormat::parser(OutputFormat::REPORTS), default_value = "text")]
    pub format: OutputFormat,
    /// No progress bar or per-trial lines on stderr
    #[arg(short, long)]
    pub quiet: bool,
    #[command(flatten)]
    pub py: crate::cli::PyStackOpts,
}

/// `3%`, `0.03` or `3` (percent when above 1).
pub fn parse_fraction(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let (num, pct) = match t.strip_suffix('%') {
        Some(n) => (n, true),
        None => (t, false),
    };
    let x: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a percentage; use e.g. 3% or 0.03"))?;
    let f = if pct || x > 1.0 { x / 100.0 } else { x };
    if !(f > 0.0 && f <= 1.0) {
        return Err(format!("'{s}' must be above 0% and at most 100%"));
    }
    Ok(f)
}

fn usage(msg: impl Into<String>) -> anyhow::Error {
    Failure::new(exit::USAGE, msg).into()
}

/// Checks shared trial options; returns the compiled regex.
pub fn check_trial_opts(t: &TrialOpts, command: &[String]) -> anyhow::Result<Option<RateRegex>> {
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
pub fn batch_of(t: &TrialOpts, values: &[(String, String)]) -> anyhow::Result<Option<f64>> {
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
pub fn output_dir(t: &TrialOpts, prefix: &str) -> anyhow::Result<PathBuf> {
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
    std::fs::create_dir_all(&dir).map_err(|e| cannot(&dir, e))?;
    let earlier = std::fs::read_dir(&dir)
        .map_err(|e| cannot(&dir, e))?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("trial-") && n.ends_with(".ndjson"));
    if let Some(n) = earlier {
        return Err(Failure::new(
            exit::USAGE,
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
pub fn file_safe(s: &str) -> String {
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
    }
}

/// The progress bar (hidden with --quiet or when stderr is not a terminal).
pub fn progress_bar(len: u64, quiet: bool) -> ProgressBar {
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
pub fn live_msg(label: &str, l: &Live) -> String {
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
pub fn interrupt_flag() -> anyhow::Result<(Arc<AtomicBool>, SignalWatch)> {
    let flag = Arc::new(AtomicBool::new(false));
    let f = Arc::clone(&flag);
    let watch = SignalWatch::start(move |_| f.store(true, Ordering::SeqCst))
        .map_err(|e| Failure::new(e.exit_code(), e.to_string()))?;
    Ok((flag, watch))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractions() {
        assert_eq!(parse_fraction("3%").unwrap(), 0.03);
        assert_eq!(parse_fraction("0.03").unwrap(), 0.03);
        assert_eq!(parse_fraction("90").unwrap(), 0.9);
        assert!(parse_fraction("0").is_err());
        assert!(parse_fraction("abc").is_err());
        assert!(parse_fraction("150%").is_err());
    }

    #[test]
    fn file_names() {
        assert_eq!(file_safe("workers=2_pin=a/b"), "workers=2_pin=a_b");
    }
}
