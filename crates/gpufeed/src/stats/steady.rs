//! Steady state: when has warm-up ended, and how sure is the throughput figure?
//!
//! Observations become *intervals*: `(t_end_s, duration_s, rate)`. From counters (step markers,
//! a tqdm counter) each interval is the count gained over the time between two observations; from
//! shown rates (tqdm's rate field, `--rate-regex`, GPU busy %) each reading stands for the time
//! since the previous one.
//!
//! Warm-up is cut with MSER-5 (White 1997, the standard truncation rule in simulation output
//! analysis): batch the intervals by fives and cut where the marginal standard error of what is
//! left is smallest, never more than half of the data. The steady part is then split into about
//! ten contiguous blocks (batch means, which survives the autocorrelation of pipelined loaders
//! that deliver batches in bursts), and the 95% confidence interval of the mean rate uses
//! Student's t over the block rates. A trial is steady when the interval's half-width is at most
//! `rel_tol` (3%) of the median block rate.

use super::t975;

/// One interval of the throughput series.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Interval {
    pub t_end_s: f64,
    pub dur_s: f64,
    pub rate: f64,
}

/// Intervals from a counter: `(t_s, cumulative count)` points in time order.
pub(crate) fn from_counts(points: &[(f64, f64)]) -> Vec<Interval> {
    points
        .windows(2)
        .filter_map(|w| {
            let dur = w[1].0 - w[0].0;
            let d = w[1].1 - w[0].1;
            (dur > 0.0 && d >= 0.0).then(|| Interval {
                t_end_s: w[1].0,
                dur_s: dur,
                rate: d / dur,
            })
        })
        .collect()
}

/// Intervals from shown rates: `(t_s, rate)` readings in time order (the first one only starts
/// the clock).
pub(crate) fn from_rates(points: &[(f64, f64)]) -> Vec<Interval> {
    points
        .windows(2)
        .filter_map(|w| {
            let dur = w[1].0 - w[0].0;
            (dur > 0.0 && w[1].1.is_finite()).then(|| Interval {
                t_end_s: w[1].0,
                dur_s: dur,
                rate: w[1].1,
            })
        })
        .collect()
}

/// The throughput of a trial with its confidence interval.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Estimate {
    /// Time-weighted mean rate over the steady part.
    pub value: f64,
    pub ci_low: f64,
    pub ci_high: f64,
    /// Half-width of the CI over the median block rate.
    pub rel_half_width: f64,
    /// When warm-up ended (the steady part starts), seconds since the trial started.
    pub warmup_end_s: f64,
    /// Intervals in the steady part.
    pub intervals: usize,
    /// Number of blocks behind the CI.
    pub blocks: usize,
    /// The CI is tight enough and rests on enough data.
    pub steady: bool,
}

/// Fewest steady intervals and blocks for a trial to count as steady.
pub(crate) const MIN_INTERVALS: usize = 10;
pub(crate) const MIN_BLOCKS: usize = 5;
const TARGET_BLOCKS: usize = 10;

fn weighted_mean(iv: &[Interval]) -> f64 {
    let (s, w) = iv
        .iter()
        .fold((0.0, 0.0), |(s, w), i| (s + i.rate * i.dur_s, w + i.dur_s));
    if w > 0.0 {
        s / w
    } else {
        f64::NAN
    }
}

/// MSER-5: index of the first interval of the steady part.
pub(crate) fn warmup_cut(iv: &[Interval]) -> usize {
    let batches: Vec<f64> = iv.chunks_exact(5).map(weighted_mean).collect();
    let k = batches.len();
    if k < 4 {
        return 0;
    }
    let mut best = (f64::INFINITY, 0);
    for d in 0..=k / 2 {
        let rest = &batches[d..];
        let n = rest.len() as f64;
        let mean = rest.iter().sum::<f64>() / n;
        let ss: f64 = rest.iter().map(|x| (x - mean).powi(2)).sum();
        let stat = ss / (n * n);
        if stat < best.0 {
            best = (stat, d);
        }
    }
    best.1 * 5
}

/// The estimate over `iv` (in time order); `None` with fewer than two intervals.
pub(crate) fn estimate(iv: &[Interval], rel_tol: f64) -> Option<Estimate> {
    if iv.len() < 2 {
        return None;
    }
    let cut = warmup_cut(iv);
    let steady = &iv[cut..];
    let warmup_end_s = steady[0].t_end_s - steady[0].dur_s;
    let value = weighted_mean(steady);
    let n = steady.len();
    let b = (n / TARGET_BLOCKS).max(1);
    // Whole blocks counted from the end; the leftover at the start (nearest warm-up) is dropped.
    let skip = n % b;
    let mut block_rates: Vec<f64> = steady[skip..].chunks_exact(b).map(weighted_mean).collect();
    let k = block_rates.len();
    let (ci_low, ci_high, rel) = if k >= 2 {
        let mean = block_rates.iter().sum::<f64>() / k as f64;
        let var = block_rates.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (k - 1) as f64;
        let hw = t975(k - 1) * (var / k as f64).sqrt();
        let med = super::median(&mut block_rates).unwrap_or(f64::NAN);
        let rel = if med > 0.0 { hw / med } else { f64::INFINITY };
        (value - hw, value + hw, rel)
    } else {
        (f64::NAN, f64::NAN, f64::INFINITY)
    };
    Some(Estimate {
        value,
        ci_low: ci_low.max(0.0),
        ci_high,
        rel_half_width: rel,
        warmup_end_s,
        intervals: n,
        blocks: k,
        steady: n >= MIN_INTERVALS && k >= MIN_BLOCKS && rel <= rel_tol,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic noise in [-1, 1].
    fn noise(i: usize) -> f64 {
        let x = ((i as f64 + 1.0) * 12.9898).sin() * 43_758.545;
        (x - x.floor()) * 2.0 - 1.0
    }

    fn steps(n: usize, warm: usize, slow: f64, fast: f64, jitter: f64) -> Vec<(f64, f64)> {
        let mut t = 0.0;
        let mut pts = vec![(0.0, 0.0)];
        for i in 0..n {
            let dt = if i < warm { slow } else { fast } * (1.0 + jitter * noise(i));
            t += dt;
            pts.push((t, (i + 1) as f64));
        }
        pts
    }

    #[test]
    fn steady_rate_is_found_after_warm_up() {
        // 20 slow steps (0.5 s each), then 100 steps at 100/s with ±10% jitter.
        let iv = from_counts(&steps(120, 20, 0.5, 0.01, 0.1));
        let e = estimate(&iv, 0.03).unwrap();
        assert!((e.value - 100.0).abs() < 3.0, "{e:?}");
        assert!(e.warmup_end_s >= 9.0, "{e:?}");
        assert!(e.steady, "{e:?}");
        assert!(e.ci_low <= e.value && e.value <= e.ci_high);
    }

    #[test]
    fn noisy_or_short_series_are_not_steady() {
        let iv = from_counts(&steps(6, 0, 0.1, 0.1, 0.0));
        assert!(!estimate(&iv, 0.03).unwrap().steady, "too few steps");
        let iv = from_counts(&steps(60, 0, 0.1, 0.1, 0.9));
        let e = estimate(&iv, 0.03).unwrap();
        assert!(!e.steady, "{e:?}");
        assert!(estimate(&from_counts(&[(0.0, 0.0)]), 0.03).is_none());
    }

    #[test]
    fn bursts_average_out_in_blocks() {
        // Two batches arrive together, then a gap: per-step rates alternate 1000/s and ~10/s.
        let mut pts = vec![(0.0, 0.0)];
        let mut t = 0.0;
        for i in 0..200 {
            t += if i % 2 == 0 { 0.099 } else { 0.001 };
            pts.push((t, (i + 1) as f64));
        }
        let e = estimate(&from_counts(&pts), 0.03).unwrap();
        assert!((e.value - 20.0).abs() < 0.2, "{e:?}");
        assert!(e.steady, "{e:?}");
    }

    #[test]
    fn rates_series() {
        let pts: Vec<(f64, f64)> = (0..50).map(|i| (i as f64 * 0.5, 40.0 + noise(i))).collect();
        let e = estimate(&from_rates(&pts), 0.03).unwrap();
        assert!((e.value - 40.0).abs() < 0.5 && e.steady, "{e:?}");
    }

    #[test]
    fn t_quantiles() {
        assert_eq!(t975(9), 2.262);
        assert_eq!(t975(1000), 1.96);
        assert!(t975(0).is_infinite());
    }
}
