//! Trial options shared by `gpufeed sweep` and `gpufeed batch-size`.

use super::*;

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
    /// Where each trial's recording goes [default: a new gpufeed-sweep-YYYYMMDD-HHMMSS-mmm folder]
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
    /// Do not time the job's torch DataLoader batches as steps (on by default: exact steps/s and
    /// data wait with no code change; the job's own step markers win when it sends any)
    #[arg(long)]
    pub no_auto_steps: bool,
}

impl TrialOpts {
    /// The options as the trial runner takes them.
    pub fn config(&self, global: &crate::cli::GlobalOpts) -> crate::tune::runner::TrialConfig {
        crate::tune::runner::TrialConfig {
            min_time: self.min_time,
            max_time: self.max_time,
            tolerance: self.tolerance,
            rate_regex: self.rate_regex.clone(),
            rate_unit: self.rate_unit.clone(),
            batch: self.batch.clone(),
            show_output: self.show_output,
            interval: self.interval,
            grace: self.grace,
            output_dir: self.output_dir.clone(),
            quiet: self.quiet,
            py: self.py.config(false),
            auto_steps: !self.no_auto_steps,
            nvml_lib: global.nvml_lib.clone(),
        }
    }
}

/// `3%`, `0.03` or `3` (percent when above 1).
pub(crate) fn parse_fraction(s: &str) -> Result<f64, String> {
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
}
