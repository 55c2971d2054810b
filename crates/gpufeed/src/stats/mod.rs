//! Statistics shared by the layers that measure (`diagnose`, `tune`, `compare`): the median, the
//! t quantile, the ratio of two means with its interval, and the steady-state estimate of a rate
//! ([`steady`]). Beneath them all; imports nothing of gpufeed but `units`.

pub(crate) mod steady;

use serde::{Deserialize, Serialize};

pub(crate) use gpufeed_telemetry::stats::{lower_median, median, upper_median};

/// Student's t quantile for a two-sided 95% interval.
pub(crate) fn t975(df: usize) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::INFINITY,
        1..=30 => T[df - 1],
        31..=60 => 2.000,
        61..=120 => 1.980,
        _ => 1.960,
    }
}

/// What a speed-up is the ratio of. On the wire a string: the name of a fixed metric, else the
/// throughput's unit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum SpeedupMetric {
    /// `mean_step_time`: traces.
    MeanStepTime,
    /// `loop_estimate`: recordings without step markers, from the training loop's phases.
    LoopEstimate,
    /// `gpu_busy_pct`: GPU busy time, a proxy.
    GpuBusyPct,
    /// `job_duration`: the jobs' wall times; no longer written (without step markers the runs'
    /// work cannot be told equal), still read.
    JobDuration,
    /// A throughput in this unit (`steps/s` from step markers, a sweep's `samples/s`).
    Throughput(String),
}

impl SpeedupMetric {
    const NAMED: [(SpeedupMetric, &'static str); 4] = [
        (SpeedupMetric::MeanStepTime, "mean_step_time"),
        (SpeedupMetric::LoopEstimate, "loop_estimate"),
        (SpeedupMetric::GpuBusyPct, "gpu_busy_pct"),
        (SpeedupMetric::JobDuration, "job_duration"),
    ];

    /// The wire string.
    pub fn as_str(&self) -> &str {
        match self {
            SpeedupMetric::Throughput(unit) => unit,
            m => Self::NAMED
                .iter()
                .find(|(n, _)| n == m)
                .map_or("", |(_, s)| s),
        }
    }
}

impl From<String> for SpeedupMetric {
    fn from(s: String) -> SpeedupMetric {
        Self::NAMED
            .iter()
            .find(|(_, n)| *n == s)
            .map_or(SpeedupMetric::Throughput(s), |(m, _)| m.clone())
    }
}

impl From<SpeedupMetric> for String {
    fn from(m: SpeedupMetric) -> String {
        m.as_str().to_string()
    }
}

/// How much faster AFTER is: `value` > 1 is faster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Speedup {
    pub value: f64,
    /// What the ratio is of.
    pub metric: SpeedupMetric,
    /// 95% interval `[low, high]`, where both inputs carry their spread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci95: Option<[f64; 2]>,
    /// How it was computed and what it assumes.
    pub basis: String,
}

/// Ratio `num / den` of two independent means with their standard errors: the 95% interval by
/// the delta method, `r × sqrt((se_n/n)² + (se_d/d)²) × t`.
pub(crate) fn ratio_ci(num: f64, se_num: f64, den: f64, se_den: f64, t: f64) -> Option<[f64; 2]> {
    if num <= 0.0 || den <= 0.0 || !se_num.is_finite() || !se_den.is_finite() || !t.is_finite() {
        return None;
    }
    let r = num / den;
    let rel = ((se_num / num).powi(2) + (se_den / den).powi(2)).sqrt();
    let hw = r * rel * t;
    Some([
        crate::units::round(r - hw, 3),
        crate::units::round(r + hw, 3),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratio_interval_by_the_delta_method() {
        // 100 ± 1 (se) over 50 ± 1: ratio 2, relative error sqrt(1e-4 + 4e-4) = 0.02236
        let ci = ratio_ci(100.0, 1.0, 50.0, 1.0, 1.96).unwrap();
        assert!(
            (ci[0] - (2.0 - 2.0 * 0.02236 * 1.96)).abs() < 1e-3,
            "{ci:?}"
        );
        assert!(
            (ci[1] - (2.0 + 2.0 * 0.02236 * 1.96)).abs() < 1e-3,
            "{ci:?}"
        );
        assert!(ratio_ci(0.0, 1.0, 50.0, 1.0, 1.96).is_none());
        assert!(ratio_ci(1.0, 1.0, 50.0, 1.0, f64::INFINITY).is_none());
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&mut []), None);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(upper_median(&mut [4.0, 1.0, 3.0, 2.0]), Some(3.0));
        assert_eq!(upper_median(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(lower_median(&mut [4.0, 1.0, 3.0, 2.0]), Some(2.0));
        assert_eq!(lower_median(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(lower_median(&mut []), None);
    }
}
