//! Streaming statistics with memory fixed in advance: a percent histogram (percentiles and a
//! two-cluster split), a periodicity detector (windowed autocorrelation on a regularly resampled
//! series) and a decimating timeline for sparklines.

use serde::{Deserialize, Serialize};

/// Running count / sum / sum of squares / min / max.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Moments {
    pub n: u64,
    pub sum: f64,
    pub sum_sq: f64,
    pub min: f64,
    pub max: f64,
}

impl Moments {
    #[inline]
    pub(crate) fn push(&mut self, v: f64) {
        if !v.is_finite() {
            return;
        }
        if self.n == 0 {
            self.min = v;
            self.max = v;
        } else {
            self.min = self.min.min(v);
            self.max = self.max.max(v);
        }
        self.n += 1;
        self.sum += v;
        self.sum_sq += v * v;
    }
    pub(crate) fn mean(&self) -> Option<f64> {
        (self.n > 0).then(|| self.sum / self.n as f64)
    }
    pub(crate) fn std(&self) -> Option<f64> {
        let m = self.mean()?;
        Some((self.sum_sq / self.n as f64 - m * m).max(0.0).sqrt())
    }
    pub(crate) fn max(&self) -> Option<f64> {
        (self.n > 0).then_some(self.max)
    }
}

/// Number of bins of [`PctHistogram`] (5 percentage points each).
pub(crate) const PCT_BINS: usize = 20;

/// Bins of a tenth of a percent each in [`PctHistogram`]'s fine histogram (0.0 to 100.0).
const FINE_BINS: usize = 1001;

/// Histogram of a 0–100 % quantity in 5-point bins (the split, the shares, the report's
/// histogram), and in tenths of a percent for its percentiles.
#[derive(Debug, Clone, Default)]
pub(crate) struct PctHistogram {
    pub bins: [u64; PCT_BINS],
    /// Counts by tenth of a percent (allocated with the first value): a percentile is a value
    /// read to the tenth, not one interpolated inside a 5-point bin (a GPU at 0% with one
    /// reading at 1% read "p10 0.5%"; 0% and 100% alternating read "p50 5%").
    fine: Vec<u32>,
    pub n: u64,
    /// The lowest and highest value pushed (clamped to 0-100): a percentile never lies outside
    /// them (a GPU at 0% all along read "p10 0.5%, p50 2.5%, p90 4.5%" from its bin alone).
    lo: f64,
    hi: f64,
}

/// Two clusters found in a distribution (Otsu's split of the histogram).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Split {
    /// Values below this belong to the low cluster.
    pub threshold_pct: f64,
    pub low_mean_pct: f64,
    pub high_mean_pct: f64,
    /// Share of samples in the low cluster (0–1).
    pub low_weight: f64,
    /// Between-cluster variance over total variance (1 = two clean levels; uniform noise = 0.75;
    /// a normal bump ≈ 0.64).
    pub separation: f64,
}

impl Split {
    /// Two well separated levels, each holding a fair share of the time.
    pub(crate) fn is_bimodal(&self) -> bool {
        self.separation >= 0.8
            && self.high_mean_pct - self.low_mean_pct >= 35.0
            && self.low_weight >= 0.1
            && self.low_weight <= 0.9
    }
}

impl PctHistogram {
    #[inline]
    pub(crate) fn push(&mut self, pct: f64) {
        if !pct.is_finite() {
            return;
        }
        let v = pct.clamp(0.0, 100.0);
        // `v / 5` lies in 0..=20: the i32 conversion is the shorter one.
        let b = ((v / 5.0) as i32 as usize).min(PCT_BINS - 1);
        self.bins[b] += 1;
        if self.fine.is_empty() {
            self.fine = vec![0; FINE_BINS];
        }
        // `v * 10` lies in 0..=1000: rounded to the nearest tenth.
        let f = ((v * 10.0 + 0.5) as i32 as usize).min(FINE_BINS - 1);
        self.fine[f] = self.fine[f].saturating_add(1);
        (self.lo, self.hi) = if self.n == 0 {
            (v, v)
        } else {
            (self.lo.min(v), self.hi.max(v))
        };
        self.n += 1;
    }

    /// Percentile (0–100), by nearest rank: the lowest value (to the tenth) that at least `p` %
    /// of the values are at or under, within the lowest and highest value pushed.
    pub(crate) fn percentile(&self, p: f64) -> Option<f64> {
        if self.n == 0 {
            return None;
        }
        let rank = ((p / 100.0).clamp(0.0, 1.0) * self.n as f64)
            .ceil()
            .max(1.0) as u64;
        let mut acc = 0u64;
        for (i, &c) in self.fine.iter().enumerate() {
            acc += u64::from(c);
            if c > 0 && acc >= rank {
                return Some((i as f64 / 10.0).clamp(self.lo, self.hi));
            }
        }
        Some(self.hi)
    }

    /// Share of samples at or above `pct` (bin resolution).
    pub(crate) fn fraction_at_least(&self, pct: f64) -> Option<f64> {
        if self.n == 0 {
            return None;
        }
        let from = ((pct / 5.0).floor() as usize).min(PCT_BINS);
        let c: u64 = self.bins[from..].iter().sum();
        Some(c as f64 / self.n as f64)
    }

    /// Share of samples below `pct` (bin resolution).
    pub(crate) fn fraction_below(&self, pct: f64) -> Option<f64> {
        self.fraction_at_least(pct).map(|f| 1.0 - f)
    }

    /// Otsu's two-cluster split over bin centres.
    pub(crate) fn split(&self) -> Option<Split> {
        if self.n < 4 {
            return None;
        }
        let n = self.n as f64;
        let centre = |i: usize| i as f64 * 5.0 + 2.5;
        let total_mean: f64 = self
            .bins
            .iter()
            .enumerate()
            .map(|(i, &c)| centre(i) * c as f64)
            .sum::<f64>()
            / n;
        let total_var: f64 = self
            .bins
            .iter()
            .enumerate()
            .map(|(i, &c)| (centre(i) - total_mean).powi(2) * c as f64)
            .sum::<f64>()
            / n;
        if total_var <= 1e-9 {
            return None;
        }
        let mut best: Option<(f64, usize)> = None;
        let (mut w0, mut s0) = (0.0, 0.0);
        for k in 0..PCT_BINS - 1 {
            w0 += self.bins[k] as f64;
            s0 += centre(k) * self.bins[k] as f64;
            let w1 = n - w0;
            if w0 == 0.0 || w1 == 0.0 {
                continue;
            }
            let m0 = s0 / w0;
            let m1 = (total_mean * n - s0) / w1;
            let between = (w0 / n) * (w1 / n) * (m1 - m0).powi(2);
            if best.is_none() || best.is_some_and(|(b, _)| between > b) {
                best = Some((between, k));
            }
        }
        let (between, k) = best?;
        let w0: f64 = self.bins[..=k].iter().sum::<u64>() as f64;
        let s0: f64 = (0..=k).map(|i| centre(i) * self.bins[i] as f64).sum();
        Some(Split {
            threshold_pct: (k + 1) as f64 * 5.0,
            low_mean_pct: s0 / w0,
            high_mean_pct: (total_mean * n - s0) / (n - w0),
            low_weight: w0 / n,
            separation: between / total_var,
        })
    }
}

/// Window length (bins) of the periodicity detector; lags up to half of it.
const WINDOW: usize = 512;
const MAX_LAG: usize = WINDOW / 2;
/// Samples used to choose the resampling step.
const CALIBRATION: usize = 64;
/// Full windows analysed before the detector starts skipping windows (cost stays bounded).
const WINDOWS_BEFORE_THINNING: u64 = 64;

/// The "busy, then starved, over and over" signature.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PeriodicityResult {
    /// Period of the strongest repeating pattern.
    pub period_s: f64,
    /// Autocorrelation at that period (0–1; ≥ 0.3 is a clear repeating pattern).
    pub strength: f64,
    /// Resampling step of the analysed series.
    pub step_s: f64,
    /// Windows analysed.
    pub windows: u64,
}

impl PeriodicityResult {
    pub(crate) fn is_strong(&self) -> bool {
        self.strength >= 0.3
    }
}

/// Resamples a series onto a regular grid (bin means, gaps carried forward) and averages the
/// unbiased autocorrelation of fixed windows. Memory is fixed: one window and one ACF sum.
#[derive(Debug, Clone)]
pub(crate) struct PeriodicityDetector {
    calib: Vec<(f64, f64)>,
    step: Option<f64>,
    t0: f64,
    cur_bin: i64,
    bin_sum: f64,
    bin_n: u32,
    last: Option<f64>,
    window: Vec<f64>,
    acf_sum: Vec<f64>,
    acf_len: usize,
    used: u64,
    seen: u64,
    stride: u64,
    flat: u64,
    /// The last [`RECENT`] values pushed before the window was last emptied: with the window's,
    /// the last values pushed (kept when the window empties, not per value).
    recent: Vec<f64>,
}

/// Resampled values kept for a zoomed sparkline.
pub(crate) const RECENT: usize = 60;

impl Default for PeriodicityDetector {
    fn default() -> Self {
        PeriodicityDetector {
            calib: Vec::with_capacity(CALIBRATION),
            step: None,
            t0: 0.0,
            cur_bin: 0,
            bin_sum: 0.0,
            bin_n: 0,
            last: None,
            window: Vec::with_capacity(WINDOW),
            acf_sum: vec![0.0; MAX_LAG],
            acf_len: MAX_LAG,
            used: 0,
            seen: 0,
            stride: 1,
            flat: 0,
            recent: Vec::with_capacity(2 * RECENT),
        }
    }
}

impl PeriodicityDetector {
    #[inline(always)]
    pub(crate) fn push(&mut self, t: f64, v: f64) {
        if !t.is_finite() || !v.is_finite() {
            return;
        }
        match self.step {
            Some(_) => self.push_binned(t, v),
            None => {
                self.calib.push((t, v));
                if self.calib.len() >= CALIBRATION {
                    self.calibrate();
                }
            }
        }
    }

    #[cold]
    fn calibrate(&mut self) {
        let mut gaps: Vec<f64> = self
            .calib
            .windows(2)
            .map(|w| w[1].0 - w[0].0)
            .filter(|g| *g > 1e-6)
            .collect();
        gaps.sort_by(f64::total_cmp);
        let median = gaps.get(gaps.len() / 2).copied().unwrap_or(0.2);
        let step = median.clamp(0.1, 5.0);
        self.step = Some(step);
        self.t0 = self.calib.first().map(|c| c.0).unwrap_or(0.0);
        self.cur_bin = 0;
        let calib = std::mem::take(&mut self.calib);
        for (t, v) in calib {
            self.push_binned(t, v);
        }
    }

    #[inline(always)]
    fn push_binned(&mut self, t: f64, v: f64) {
        let step = self.step.unwrap_or(0.2);
        let b = floor_i64((t - self.t0) / step);
        if b > self.cur_bin {
            self.close_bin();
            let gap = b - self.cur_bin - 1;
            if gap > MAX_LAG as i64 {
                // A long hole: the pattern before it says nothing about the one after.
                self.empty_window();
            } else if let Some(last) = self.last {
                for _ in 0..gap {
                    self.push_value(last);
                }
            }
            self.cur_bin = b;
        }
        self.bin_sum += v;
        self.bin_n += 1;
    }

    #[inline(always)]
    fn close_bin(&mut self) {
        if self.bin_n > 0 {
            let v = self.bin_sum / self.bin_n as f64;
            self.bin_sum = 0.0;
            self.bin_n = 0;
            self.last = Some(v);
            self.push_value(v);
        }
    }

    #[inline(always)]
    fn push_value(&mut self, v: f64) {
        self.window.push(v);
        if self.window.len() == WINDOW {
            if self.seen % self.stride == 0 {
                let w = std::mem::take(&mut self.window);
                self.analyse(&w, MAX_LAG);
                self.window = w;
            }
            self.seen += 1;
            if self.seen >= WINDOWS_BEFORE_THINNING * self.stride {
                self.stride *= 2;
            }
            self.empty_window();
        }
    }

    #[inline(never)]
    fn analyse(&mut self, x: &[f64], lags: usize) {
        let n = x.len();
        let mean = x.iter().sum::<f64>() / n as f64;
        let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n as f64;
        if var < 1.0 {
            // Flat within one percentage point: nothing repeats.
            self.flat += 1;
            return;
        }
        let mut centred = [0.0f64; WINDOW];
        for (c, v) in centred.iter_mut().zip(x) {
            *c = v - mean;
        }
        let c = &centred[..n];
        let lags = lags.min(self.acf_len);
        let mut sums = [0.0f64; MAX_LAG];
        lag_products(c, &mut sums[..lags]);
        for (k, (acc, s)) in self.acf_sum.iter_mut().zip(&sums[..lags]).enumerate() {
            *acc += s / (n - k) as f64 / var;
        }
        self.used += 1;
    }

    /// Keeps the last [`RECENT`] values pushed, of those kept and the window's: before the
    /// window empties.
    fn keep_recent(&mut self) {
        if self.window.len() >= RECENT {
            self.recent.clear();
        } else {
            let past = self.recent.len() + self.window.len();
            self.recent.drain(..past.saturating_sub(RECENT));
        }
        let from = self.window.len().saturating_sub(RECENT);
        self.recent.extend_from_slice(&self.window[from..]);
    }

    fn empty_window(&mut self) {
        self.keep_recent();
        self.window.clear();
    }

    /// The last [`RECENT`] resampled values and their step (call after [`Self::finish`]).
    pub(crate) fn recent(&self) -> (f64, Vec<f64>) {
        let mut recent = [&self.recent[..], &self.window[..]].concat();
        recent.drain(..recent.len().saturating_sub(RECENT));
        (self.step.unwrap_or(0.0), recent)
    }

    /// The strongest repeat, if the series has any non-flat stretch long enough to tell.
    pub(crate) fn finish(&mut self) -> Option<PeriodicityResult> {
        if self.step.is_none() && self.calib.len() >= 8 {
            self.calibrate();
        }
        self.close_bin();
        if self.used == 0 && self.window.len() >= 16 {
            self.keep_recent();
            let w = std::mem::take(&mut self.window);
            let lags = w.len() / 2;
            self.acf_len = lags;
            self.analyse(&w, lags);
        }
        if self.used == 0 {
            return None;
        }
        let step = self.step?;
        let a: Vec<f64> = self.acf_sum[..self.acf_len]
            .iter()
            .map(|s| s / self.used as f64)
            .collect();
        peak_after_first_dip(&a).map(|(lag, strength)| PeriodicityResult {
            period_s: lag * step,
            strength,
            step_s: step,
            windows: self.used,
        })
    }
}

/// `sums[k]` = the sum over `j` of `c[j] * c[j + k]`, added up in order of `j` (the same
/// floating-point result as one sequential sum per lag), for `k < sums.len() <= c.len()`.
///
/// Lags are taken [`LAG_BLOCK`] at a time so that each step of `j` feeds that many independent
/// sums: one sum per lag is a chain of dependent additions, which the CPU runs at one addition
/// per add latency; the block keeps its adders busy. Each lag still adds its own products in the
/// same order, so every sum has the same bits.
/// `x.floor() as i64`, without `floor`, a library call on every sample in the baseline x86-64
/// build: the cast truncates (saturating, NaN to 0), one less below zero where that rounded up.
#[inline]
fn floor_i64(x: f64) -> i64 {
    let i = x as i64;
    if (i as f64) > x {
        i.saturating_sub(1)
    } else {
        i
    }
}

fn lag_products(c: &[f64], sums: &mut [f64]) {
    let n = c.len();
    debug_assert!(sums.len() <= n);
    let mut k0 = 0;
    while k0 + LAG_BLOCK <= sums.len() {
        // `-0.0`: the neutral element std's `Sum for f64` starts from.
        let mut acc = [-0.0f64; LAG_BLOCK];
        // Every lag of the block has the products j < common ...
        let common = n - k0 - (LAG_BLOCK - 1);
        for j in 0..common {
            let x = c[j];
            let ys: &[f64; LAG_BLOCK] = c[j + k0..j + k0 + LAG_BLOCK].try_into().unwrap();
            for (a, y) in acc.iter_mut().zip(ys) {
                *a += x * y;
            }
        }
        // ... then lag k0 + q has LAG_BLOCK - 1 - q more, the last ones of its sum.
        for (q, a) in acc.iter_mut().enumerate() {
            for j in common..n - k0 - q {
                *a += c[j] * c[j + k0 + q];
            }
        }
        sums[k0..k0 + LAG_BLOCK].copy_from_slice(&acc);
        k0 += LAG_BLOCK;
    }
    for (k, s) in sums.iter_mut().enumerate().skip(k0) {
        *s = c[..n - k].iter().zip(&c[k..]).map(|(a, b)| a * b).sum();
    }
}

/// Lags summed side by side by [`lag_products`].
const LAG_BLOCK: usize = 8;

/// First clear ACF peak after the function has dipped below zero; (fractional lag, height).
fn peak_after_first_dip(a: &[f64]) -> Option<(f64, f64)> {
    let dip = a.iter().position(|v| *v < 0.0)?;
    let rest = a.get(dip..)?;
    let global = rest.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if global <= 0.0 {
        return None;
    }
    // The first local maximum close to the global one (avoid picking a harmonic).
    for k in dip + 1..a.len().saturating_sub(1) {
        if a[k] >= a[k - 1] && a[k] >= a[k + 1] && a[k] >= 0.8 * global {
            let (y0, y1, y2) = (a[k - 1], a[k], a[k + 1]);
            let denom = y0 - 2.0 * y1 + y2;
            let shift = if denom.abs() > 1e-12 {
                (0.5 * (y0 - y2) / denom).clamp(-0.5, 0.5)
            } else {
                0.0
            };
            return Some((k as f64 + shift, y1.min(1.0)));
        }
    }
    None
}

/// Number of points a [`Timeline`] keeps at most.
const TIMELINE_CAP: usize = 128;

/// Mean value per time bucket; buckets double in width when the cap is reached.
#[derive(Debug, Clone)]
pub(crate) struct Timeline {
    t0: Option<f64>,
    width: f64,
    /// `1 / width`, exact (a width is a power of two): a product rounds as the quotient does, and
    /// costs a fraction of a division.
    per_width: f64,
    sums: Vec<(f64, u32)>,
    /// The bucket the latest sample fell in and, once a second sample fell in it, the times that
    /// fall in it, `lo <= t < hi` (finite; empty until found): a log's next sample mostly falls
    /// in the same bucket, and two comparisons place it as the bucket's formula would.
    cur: usize,
    lo: f64,
    hi: f64,
}

impl Default for Timeline {
    fn default() -> Self {
        Timeline {
            t0: None,
            width: 0.5,
            per_width: 2.0,
            sums: Vec::with_capacity(TIMELINE_CAP),
            cur: usize::MAX,
            lo: f64::INFINITY,
            hi: f64::NEG_INFINITY,
        }
    }
}

/// A finite f64's place in the order of all finite f64s (and back): the bit patterns of
/// negative numbers run backwards.
fn f64_rank(x: f64) -> i64 {
    let b = x.to_bits() as i64;
    if b < 0 {
        b ^ i64::MAX
    } else {
        b
    }
}

fn f64_of_rank(r: i64) -> f64 {
    f64::from_bits((if r < 0 { r ^ i64::MAX } else { r }) as u64)
}

impl Timeline {
    /// The bucket of time `t`: never less for a later time.
    fn bucket(t0: f64, per_width: f64, t: f64) -> usize {
        ((t - t0).max(0.0) * per_width) as usize
    }

    /// The earliest finite time whose bucket is `k` or later (`inf`: none), searched from
    /// where the arithmetic puts it, a few steps away at most in a log.
    fn first_time_of(&self, t0: f64, k: usize) -> f64 {
        let at_least = |r: i64| Self::bucket(t0, self.per_width, f64_of_rank(r)) >= k;
        let (min, max) = (f64_rank(f64::MIN), f64_rank(f64::MAX));
        let guess = t0 + k as f64 * self.width;
        let guess = if guess.is_nan() {
            return f64::INFINITY;
        } else {
            f64_rank(guess.clamp(f64::MIN, f64::MAX))
        };
        // Bracket the first rank that is `at_least` in (no, yes], widening by doubling steps.
        let (mut no, mut yes);
        if at_least(guess) {
            yes = guess;
            let mut step = 1i64;
            loop {
                let r = yes.saturating_sub(step).max(min);
                if !at_least(r) {
                    no = r;
                    break;
                }
                yes = r;
                if r == min {
                    return f64::MIN;
                }
                step = step.saturating_mul(2);
            }
        } else {
            no = guess;
            let mut step = 1i64;
            loop {
                let r = no.saturating_add(step).min(max);
                if at_least(r) {
                    yes = r;
                    break;
                }
                no = r;
                if r == max {
                    return f64::INFINITY;
                }
                step = step.saturating_mul(2);
            }
        }
        // The ranks span more than an i64: their distance is taken as a u64.
        while yes.wrapping_sub(no) as u64 > 1 {
            let mid = no.wrapping_add((yes.wrapping_sub(no) as u64 / 2) as i64);
            if at_least(mid) {
                yes = mid;
            } else {
                no = mid;
            }
        }
        f64_of_rank(yes)
    }

    #[inline(always)]
    pub(crate) fn push(&mut self, t: f64, v: f64) {
        // `lo` and `hi` are finite or empty, so `t` is finite here.
        if t >= self.lo && t < self.hi && v.is_finite() {
            let s = &mut self.sums[self.cur];
            s.0 += v;
            s.1 += 1;
            return;
        }
        self.push_placed(t, v);
    }

    #[inline(never)]
    fn push_placed(&mut self, t: f64, v: f64) {
        if !t.is_finite() || !v.is_finite() {
            return;
        }
        let t0 = *self.t0.get_or_insert(t);
        let mut b = Self::bucket(t0, self.per_width, t);
        while b >= TIMELINE_CAP {
            self.width *= 2.0;
            self.per_width = 1.0 / self.width;
            let merged: Vec<(f64, u32)> = self
                .sums
                .chunks(2)
                .map(|c| c.iter().fold((0.0, 0), |a, x| (a.0 + x.0, a.1 + x.1)))
                .collect();
            self.sums = merged;
            self.cur = usize::MAX;
            b = Self::bucket(t0, self.per_width, t);
        }
        if self.sums.len() <= b {
            self.sums.resize(b + 1, (0.0, 0));
        }
        self.sums[b].0 += v;
        self.sums[b].1 += 1;
        // A bucket's times are found when a second sample in a row falls in it: a log whose
        // every sample starts a bucket (or that jumps back and forth) searches for none.
        if b == self.cur {
            self.lo = if b == 0 {
                f64::MIN
            } else {
                self.first_time_of(t0, b)
            };
            self.hi = self.first_time_of(t0, b + 1);
        } else {
            (self.lo, self.hi) = (f64::INFINITY, f64::NEG_INFINITY);
        }
        self.cur = b;
    }

    /// Bucket width in seconds and the bucket means (gaps carry the previous value).
    pub(crate) fn points(&self) -> (f64, Vec<f64>) {
        let mut out = Vec::with_capacity(self.sums.len());
        let mut last = None;
        for &(s, n) in &self.sums {
            let v = if n > 0 { Some(s / n as f64) } else { last };
            if let Some(v) = v {
                out.push(v);
                last = Some(v);
            }
        }
        (self.width, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The blocked lag sums have the bits of one sequential sum per lag (the autocorrelation,
        /// hence the report, is unchanged by the blocking), whatever the values (zeros of both
        /// signs, cancelling terms, wide magnitudes) and the number of lags.
        #[test]
        fn lag_products_are_the_sequential_sums_bit_for_bit(
            c in proptest::collection::vec(prop_oneof![
                Just(0.0f64),
                Just(-0.0f64),
                -100.0f64..100.0,
                any::<f64>().prop_filter("finite", |x| x.is_finite()),
                (-3i32..4).prop_map(|v| v as f64 * 0.1),
            ], 1..=WINDOW),
            lag_share in 0.0f64..=1.0,
        ) {
            let lags = ((c.len() as f64 * lag_share) as usize).min(c.len());
            let mut got = vec![f64::NAN; lags];
            lag_products(&c, &mut got);
            for (k, g) in got.iter().enumerate() {
                let want: f64 = c[..c.len() - k].iter().zip(&c[k..]).map(|(a, b)| a * b).sum();
                prop_assert_eq!(g.to_bits(), want.to_bits(), "lag {} of {}", k, c.len());
            }
        }
    }

    fn square(t: f64, period: f64, duty: f64, hi: f64, lo: f64) -> f64 {
        if (t / period).fract() < duty {
            hi
        } else {
            lo
        }
    }

    #[test]
    fn moments() {
        let mut m = Moments::default();
        for v in [1.0, 2.0, 3.0, f64::NAN] {
            m.push(v);
        }
        assert_eq!(m.n, 3);
        assert_eq!(m.mean(), Some(2.0));
        assert!((m.std().unwrap() - (2.0f64 / 3.0).sqrt()).abs() < 1e-9);
        assert_eq!((m.min, m.max()), (1.0, Some(3.0)));
        assert_eq!(Moments::default().mean(), None);
    }

    #[test]
    fn percentiles_interpolate_within_bins() {
        let mut h = PctHistogram::default();
        for i in 0..100 {
            h.push(i as f64);
        }
        let p50 = h.percentile(50.0).unwrap();
        assert!((p50 - 50.0).abs() <= 5.0, "{p50}");
        assert!((h.fraction_at_least(80.0).unwrap() - 0.2).abs() < 1e-9);
        assert!((h.fraction_below(10.0).unwrap() - 0.1).abs() < 1e-9);
        h.push(150.0); // clamped into the top bin
        assert_eq!(h.bins[PCT_BINS - 1], 6);
    }

    #[test]
    fn percentiles_are_values_read() {
        // A GPU at 0% but for one reading at 1%; 0% and 100% alternating; a steady 91-93%.
        let mut one = PctHistogram::default();
        for i in 0..473 {
            one.push(if i == 100 { 1.0 } else { 0.0 });
        }
        assert_eq!(
            [10.0, 50.0, 90.0].map(|p| one.percentile(p)),
            [Some(0.0); 3]
        );
        let mut two = PctHistogram::default();
        for i in 0..1000 {
            two.push(if i % 2 == 0 { 0.0 } else { 100.0 });
        }
        let got = [10.0, 50.0, 51.0, 90.0].map(|p| two.percentile(p));
        assert_eq!(got, [Some(0.0), Some(0.0), Some(100.0), Some(100.0)]);
        let mut near = PctHistogram::default();
        for v in [91.0, 92.0, 92.0, 93.0, 92.0] {
            near.push(v);
        }
        assert_eq!(near.percentile(50.0), Some(92.0));
        assert_eq!(near.percentile(0.0), Some(91.0));
        assert_eq!(near.percentile(100.0), Some(93.0));
        let mut tenths = PctHistogram::default();
        tenths.push(37.25);
        assert_eq!(tenths.percentile(50.0), Some(37.25), "within what was seen");
    }

    #[test]
    fn percentiles_stay_within_what_was_seen() {
        let mut idle = PctHistogram::default();
        for _ in 0..100 {
            idle.push(0.0);
        }
        assert_eq!(
            [10.0, 50.0, 90.0].map(|p| idle.percentile(p)),
            [Some(0.0); 3]
        );
        let mut steady = PctHistogram::default();
        for _ in 0..100 {
            steady.push(87.0);
        }
        assert_eq!(steady.percentile(10.0), Some(87.0));
        assert_eq!(steady.percentile(90.0), Some(87.0));
    }

    #[test]
    fn two_levels_are_bimodal_a_bump_is_not() {
        let mut two = PctHistogram::default();
        for i in 0..1000 {
            two.push(if i % 10 < 3 {
                85.0 + (i % 3) as f64
            } else {
                10.0
            });
        }
        let s = two.split().unwrap();
        assert!(s.is_bimodal(), "{s:?}");
        assert!((s.low_weight - 0.7).abs() < 0.01);
        assert!((s.low_mean_pct - 12.5).abs() < 3.0 && s.high_mean_pct > 80.0);

        let mut bump = PctHistogram::default();
        // Roughly normal around 60 with sd ~10.
        for i in 0..1000 {
            let z = ((i as f64 + 0.5) / 1000.0 - 0.5) * 6.0;
            let v = 60.0 + 10.0 * z.signum() * (z.abs()).powf(0.8);
            bump.push(v);
        }
        assert!(!bump.split().unwrap().is_bimodal());

        let mut flat = PctHistogram::default();
        for _ in 0..100 {
            flat.push(97.0);
        }
        assert!(flat.split().is_none());
    }

    #[test]
    fn square_wave_period_is_found_at_driver_rate() {
        let mut d = PeriodicityDetector::default();
        let mut t = 0.0;
        while t < 600.0 {
            d.push(t, square(t, 2.0, 0.3, 85.0, 10.0));
            t += 1.0 / 6.0;
        }
        let r = d.finish().unwrap();
        assert!((r.period_s - 2.0).abs() < 0.15, "{r:?}");
        assert!(r.strength > 0.7, "{r:?}");
        assert!(r.is_strong());
    }

    #[test]
    fn short_recordings_still_show_the_period() {
        // 6 s of a 2 s square wave, as the fake driver produces in tests.
        let mut d = PeriodicityDetector::default();
        let mut t = 0.0;
        while t < 6.0 {
            d.push(t, square(t, 2.0, 0.3, 85.0, 10.0));
            t += 1.0 / 6.0;
        }
        let r = d.finish().unwrap();
        assert!((r.period_s - 2.0).abs() < 0.4, "{r:?}");
        assert!(r.is_strong(), "{r:?}");
    }

    #[test]
    fn one_second_logs_with_a_slow_cycle() {
        let mut d = PeriodicityDetector::default();
        for i in 0..3000 {
            let t = i as f64;
            d.push(t, square(t, 12.0, 0.5, 90.0, 5.0));
        }
        let r = d.finish().unwrap();
        assert!((r.step_s - 1.0).abs() < 1e-9);
        assert!((r.period_s - 12.0).abs() < 0.6, "{r:?}");
    }

    #[test]
    fn steady_and_noisy_series_have_no_strong_period() {
        let mut steady = PeriodicityDetector::default();
        let mut noisy = PeriodicityDetector::default();
        let mut x: u64 = 12345;
        for i in 0..20_000 {
            let t = i as f64 / 6.0;
            steady.push(t, 97.0 + (i % 2) as f64 * 0.5);
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            noisy.push(t, 50.0 + ((x >> 33) % 40) as f64);
        }
        assert!(steady.finish().is_none());
        assert!(!noisy.finish().is_some_and(|r| r.is_strong()));
    }

    #[test]
    fn very_long_series_cost_is_bounded() {
        let mut d = PeriodicityDetector::default();
        let n = 6 * 3600 * 6; // six hours at the driver rate
        for i in 0..n {
            let t = i as f64 / 6.0;
            d.push(t, square(t, 3.0, 0.5, 80.0, 10.0));
        }
        let r = d.finish().unwrap();
        assert!(r.windows < 200, "{r:?}");
        assert!((r.period_s - 3.0).abs() < 0.2, "{r:?}");
        assert!(d.window.capacity() <= WINDOW && d.acf_sum.len() == MAX_LAG);
    }

    /// The timeline as it placed every sample by its formula, before it knew a bucket's times.
    struct FormulaTimeline {
        t0: Option<f64>,
        width: f64,
        sums: Vec<(f64, u32)>,
    }

    impl FormulaTimeline {
        fn push(&mut self, t: f64, v: f64) {
            if !t.is_finite() || !v.is_finite() {
                return;
            }
            let t0 = *self.t0.get_or_insert(t);
            let mut b = ((t - t0).max(0.0) / self.width) as usize;
            while b >= TIMELINE_CAP {
                self.width *= 2.0;
                self.sums = self
                    .sums
                    .chunks(2)
                    .map(|c| c.iter().fold((0.0, 0), |a, x| (a.0 + x.0, a.1 + x.1)))
                    .collect();
                b = ((t - t0).max(0.0) / self.width) as usize;
            }
            if self.sums.len() <= b {
                self.sums.resize(b + 1, (0.0, 0));
            }
            self.sums[b].0 += v;
            self.sums[b].1 += 1;
        }
    }

    fn timeline_times() -> impl Strategy<Value = Vec<(f64, f64)>> {
        let start = prop_oneof![
            Just(0.0f64),
            Just(1_706_659_200.0f64),
            -1e6f64..1e6,
            Just(f64::MAX / 2.0),
            Just(-f64::MAX),
        ];
        let step = prop_oneof![
            4 => 0.0f64..3.0,
            1 => Just(0.0f64),
            1 => Just(1.0f64),
            1 => -5.0f64..0.0,
            1 => 1e3f64..1e9,
            1 => any::<f64>(),
        ];
        let value = prop_oneof![
            8 => (0u32..=100).prop_map(f64::from),
            2 => -1e3f64..1e3,
            1 => Just(f64::NAN),
            1 => Just(f64::INFINITY),
        ];
        (start, proptest::collection::vec((step, value), 0..2000)).prop_map(|(t0, steps)| {
            let mut t = t0;
            steps
                .into_iter()
                .map(|(d, v)| {
                    t = if (t + d).is_finite() { t + d } else { d };
                    (t, v)
                })
                .collect()
        })
    }

    proptest! {
        #[test]
        fn timeline_places_samples_as_its_formula_does_bit_for_bit(samples in timeline_times()) {
            let mut fast = Timeline::default();
            let mut formula = FormulaTimeline { t0: None, width: 0.5, sums: Vec::new() };
            for &(t, v) in &samples {
                fast.push(t, v);
                formula.push(t, v);
            }
            prop_assert_eq!(fast.width.to_bits(), formula.width.to_bits());
            let bits = |s: &[(f64, u32)]| s.iter().map(|&(a, n)| (a.to_bits(), n)).collect::<Vec<_>>();
            prop_assert_eq!(bits(&fast.sums), bits(&formula.sums));
        }
    }

    #[test]
    fn a_buckets_times_are_the_times_its_formula_gives_it() {
        for (t0, width) in [
            (0.0, 0.5),
            (1_706_659_200.0, 65536.0),
            (-3.0, 2.0),
            (1e300, 0.5),
        ] {
            let tl = Timeline {
                t0: Some(t0),
                width,
                per_width: 1.0 / width,
                ..Timeline::default()
            };
            for k in [1, 2, 77, 127, 128] {
                let first = tl.first_time_of(t0, k);
                let b = |t: f64| Timeline::bucket(t0, tl.per_width, t);
                assert!(b(first) >= k, "{t0} {width} {k}: {first}");
                assert!(b(first.next_down()) < k, "{t0} {width} {k}: {first}");
            }
        }
        let wide = Timeline {
            t0: Some(0.0),
            width: f64::INFINITY,
            per_width: 0.0,
            ..Timeline::default()
        };
        assert_eq!(wide.first_time_of(0.0, 1), f64::INFINITY);
    }

    #[test]
    fn floor_i64_is_floor_as_i64() {
        for x in [
            0.0,
            -0.0,
            0.5,
            -0.5,
            1.0,
            -1.0,
            2.999,
            -2.0001,
            1e18,
            -1e18,
            9.3e18,
            -9.3e18,
            1e300,
            -1e300,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            f64::MIN_POSITIVE,
            -f64::MIN_POSITIVE,
        ] {
            assert_eq!(floor_i64(x), x.floor() as i64, "{x}");
        }
    }

    proptest! {
        #[test]
        fn floor_i64_is_floor_as_i64_everywhere(x in any::<f64>(), y in -1e6f64..1e6) {
            prop_assert_eq!(floor_i64(x), x.floor() as i64);
            prop_assert_eq!(floor_i64(y), y.floor() as i64);
        }

        #[test]
        fn recent_values_are_the_last_pushed_in_order(
            n in 0usize..2000,
            holes in proptest::collection::vec(0usize..300, 0..8),
            finish in any::<bool>(),
        ) {
            let mut d = PeriodicityDetector::default();
            for i in 0..n {
                if holes.contains(&i) {
                    d.empty_window();
                }
                d.push_value(i as f64);
            }
            if finish {
                d.step = Some(1.0);
                d.finish();
            }
            let want: Vec<f64> = (n.saturating_sub(RECENT)..n).map(|i| i as f64).collect();
            prop_assert_eq!(d.recent().1, want);
            prop_assert!(d.recent.len() <= RECENT, "{} kept", d.recent.len());
        }
    }

    #[test]
    fn timeline_decimates_to_a_fixed_size() {
        let mut tl = Timeline::default();
        for i in 0..100_000 {
            tl.push(i as f64 * 0.1, if i < 50_000 { 10.0 } else { 90.0 });
        }
        let (w, pts) = tl.points();
        assert!(pts.len() <= TIMELINE_CAP && pts.len() > TIMELINE_CAP / 2);
        assert!(w >= 10_000.0 / TIMELINE_CAP as f64);
        assert!((pts[0] - 10.0).abs() < 1e-9 && (pts[pts.len() - 1] - 90.0).abs() < 1e-9);
    }
}
