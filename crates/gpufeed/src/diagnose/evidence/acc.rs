//! The running accumulators the builder keeps per GPU and per process, and how a GPU's turn into
//! its [`GpuEvidence`]: sums, fixed histograms and fixed-size buffers only.

use crate::diagnose::streaming::{Moments, PctHistogram, PeriodicityDetector, Timeline};
use crate::units::pcie_link_bytes_per_s;
use std::collections::{BTreeMap, HashMap};

use super::types::*;
use crate::import::dcgmi::ProfilingMeans;

/// Impossible values seen while building evidence.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Impossible {
    pub(super) util: u64,
    pub(super) mem: u64,
    pub(super) power: u64,
    pub(super) time_not_finite: u64,
    pub(super) backwards: u64,
    pub(super) steps_dropped: u64,
    /// Step markers let go unread under a flood.
    pub(super) steps_flooded: u64,
    /// Step markers of ranks the recorder did not follow apart, and how many ranks.
    pub(super) steps_unfollowed: u64,
    pub(super) ranks_unfollowed: u64,
    /// `steps` lines of ranks beyond the first [`crate::sample::steps::MAX_RANKS`] here.
    pub(super) rank_lines_over_cap: u64,
    /// Processes beyond [`MAX_PROCESSES`].
    pub(super) procs_over_cap: u64,
    /// GPU samples of GPUs beyond the first [`MAX_GPUS`].
    pub(super) gpus_over_cap: u64,
}

use crate::import::MAX_GPUS;

impl Impossible {
    pub(super) fn warnings(&self, span_s: f64) -> Vec<String> {
        let mut out = Vec::new();
        if self.util > 0 {
            out.push(format!(
                "{} utilization values outside 0-100 % were ignored (impossible: check the log's columns)",
                self.util
            ));
        }
        if self.mem > 0 {
            out.push(format!(
                "{} memory values above 1 PiB were ignored (impossible: check the log's units)",
                self.mem
            ));
        }
        if self.power > 0 {
            out.push(format!(
                "{} power values below 0 W or above 10 kW were ignored",
                self.power
            ));
        }
        if self.time_not_finite > 0 {
            out.push(format!(
                "{} samples without a usable time were ignored",
                self.time_not_finite
            ));
        }
        if self.procs_over_cap > 0 {
            out.push(format!(
                "{BOUND_PREFIX}{} process lines and readings beyond the first {MAX_PROCESSES} processes count in the job's totals only, not one by one",
                self.procs_over_cap
            ));
        }
        if self.gpus_over_cap > 0 {
            out.push(format!(
                "{BOUND_PREFIX}{} readings of GPUs beyond the first {MAX_GPUS} were left out (more \
                 GPUs than any node holds: check the log's GPU column)",
                self.gpus_over_cap
            ));
        }
        if self.steps_dropped > 0 {
            out.push(format!(
                "{} step markers with a time outside the job's run or more than a billion samples in one step were dropped by the recorder (the job's step clock is not CLOCK_MONOTONIC, or a marker is corrupt)",
                self.steps_dropped
            ));
        }
        if self.steps_flooded > 0 {
            out.push(format!(
                "{} step markers arrived faster than the recorder could fold them (a flood: more than {} waiting at once) and were not counted: the step rate covers the rest",
                self.steps_flooded,
                crate::sample::steps::MAX_KEPT_MARKS
            ));
        }
        if self.steps_unfollowed > 0 {
            out.push(format!(
                "{BOUND_PREFIX}{} step markers of {}{} ranks beyond the first {} were counted, not \
                 followed (a node runs dozens of ranks: check the RANK each process sends)",
                self.steps_unfollowed,
                if self.ranks_unfollowed >= crate::sample::steps::MAX_RANKS_COUNTED as u64 { "at least " } else { "" },
                self.ranks_unfollowed,
                crate::sample::steps::MAX_RANKS
            ));
        }
        if self.rank_lines_over_cap > 0 {
            out.push(format!(
                "{BOUND_PREFIX}{} step lines of ranks beyond the first {} count in the job's step \
                 rate only, not rank by rank",
                self.rank_lines_over_cap,
                crate::sample::steps::MAX_RANKS
            ));
        }
        if self.backwards > 0 {
            out.push(format!(
                "time goes backwards {} times (samples out of order, or a clock change): durations and rates may be wrong",
                self.backwards
            ));
        }
        if span_s > MAX_PLAUSIBLE_SPAN_S {
            out.push(format!(
                "the input spans {:.0} days: its timestamps are probably wrong, and so are durations",
                span_s / 86400.0
            ));
        }
        out
    }
}

pub(super) fn pct_ok(v: f64) -> bool {
    (0.0..=100.0).contains(&v)
}

#[derive(Debug, Default)]
pub(super) struct GpuAcc {
    pub(super) index: u32,
    pub(super) util: Moments,
    pub(super) hist: PctHistogram,
    pub(super) period: PeriodicityDetector,
    pub(super) timeline: Timeline,
    pub(super) mem_used: Moments,
    pub(super) mem_total: Option<u64>,
    pub(super) last_t: Option<f64>,
    pub(super) last_rx: Option<(f64, u64)>,
    pub(super) last_util: Option<f64>,
    /// Time of the latest utilization sample, and the first spacings between samples.
    pub(super) last_util_t: Option<f64>,
    pub(super) spacings: Vec<f64>,
    pub(super) rx_rate: Moments,
    pub(super) rx_frac: Moments,
    pub(super) rx_frac_hist: PctHistogram,
    pub(super) link_counts: HashMap<(u32, u32), u64>,
    /// The link state last read (the recorder reads it only on slow ticks).
    pub(super) last_link: Option<(u32, u32)>,
    pub(super) gen_max_seen: Option<u32>,
    pub(super) width_max_seen: Option<u32>,
    pub(super) loaded_link: u64,
    pub(super) loaded_degraded: u64,
    pub(super) throttle_observed: f64,
    pub(super) throttle_slowing: f64,
    pub(super) throttle_by_bit: [f64; 9],
    pub(super) temp: Moments,
    pub(super) power: Moments,
    pub(super) clock: Moments,
}

/// Spacings kept to find the sampling interval (the median of the first ones).
pub(super) const SPACINGS: usize = 257;

impl GpuAcc {
    /// A sample at `t`: its spacing from the latest one before it counts when time moved
    /// forward past every sample so far. A sample back in time is no spacing, and neither is the
    /// way forward again (a log alternating between 12:00:00 and 11:00:01 was read as "sampled
    /// every 3599 s").
    pub(super) fn spacing(&mut self, t: f64) {
        match self.last_util_t {
            Some(l) if t > l => {
                if self.spacings.len() < SPACINGS {
                    self.spacings.push(t - l);
                }
                self.last_util_t = Some(t);
            }
            Some(_) => {}
            None => self.last_util_t = Some(t),
        }
    }

    /// A utilization sample `v` at `t`, into every figure made of them.
    #[inline(always)]
    pub(super) fn util_sample(&mut self, t: f64, v: f64) {
        self.spacing(t);
        self.util.push(v);
        self.hist.push(v);
        self.period.push(t, v);
        self.timeline.push(t, v);
    }

    pub(super) fn sample_interval_s(&self) -> Option<f64> {
        // A spacing that was seen (the upper median), not the mean of two.
        crate::stats::upper_median(&mut self.spacings.clone())
    }
}

#[derive(Debug)]
pub(super) struct ProcAcc {
    pub(super) ppid: u32,
    pub(super) cmd: Option<String>,
    pub(super) cpu: Moments,
    pub(super) saturated: u64,
    pub(super) rss_max: Option<u64>,
    pub(super) states: u64,
    pub(super) d_states: u64,
    pub(super) read_first: Option<u64>,
    pub(super) read_last: Option<u64>,
    pub(super) first_t: f64,
    pub(super) last_t: f64,
}

impl ProcAcc {
    pub(super) fn new(ppid: u32, cmd: Option<String>, t: f64) -> Self {
        ProcAcc {
            ppid,
            cmd,
            cpu: Moments::default(),
            saturated: 0,
            rss_max: None,
            states: 0,
            d_states: 0,
            read_first: None,
            read_last: None,
            first_t: t,
            last_t: t,
        }
    }
}

pub(super) fn finish_gpu(
    g: GpuAcc,
    st: Option<&crate::sample::GpuStatic>,
    profiling: Option<ProfilingMeans>,
) -> GpuEvidence {
    let mut g = g;
    let split = g.hist.split();
    let periodicity = g.period.finish();
    let (recent_step_s, recent_pct) = g.period.recent();
    let mem_total = st.and_then(|s| s.memory_total_bytes).or(g.mem_total);
    let mem_used_max = g.mem_used.max().map(|m| m as u64);
    let (timeline_step_s, timeline_pct) = g.timeline.points();
    let pcie = pcie_evidence(&mut g, st);
    let throttle = throttle_evidence(&g);
    let mean = g.util.mean();
    GpuEvidence {
        index: g.index,
        name: st.and_then(|s| s.name.clone()),
        util_samples: g.util.n,
        util_sample_interval_s: g.sample_interval_s(),
        compute_capability: st.and_then(|s| s.compute_capability),
        util_mean_pct: mean,
        util_std_pct: g.util.std(),
        util_p10_pct: g.hist.percentile(10.0),
        util_p50_pct: g.hist.percentile(50.0),
        util_p90_pct: g.hist.percentile(90.0),
        busy_fraction: mean.map(|m| (m / 100.0).clamp(0.0, 1.0)),
        low_util_fraction: g.hist.fraction_below(30.0),
        util_histogram: g.hist.bins.to_vec(),
        util_split: split,
        bimodal: split.is_some_and(|s| s.is_bimodal()),
        periodicity,
        mem_total_bytes: mem_total,
        mem_used_max_bytes: mem_used_max,
        mem_used_mean_bytes: g.mem_used.mean(),
        mem_used_max_fraction: mem_used_max
            .zip(mem_total)
            .filter(|(_, t)| *t > 0)
            .map(|(u, t)| u as f64 / t as f64),
        pcie,
        throttle,
        profiling,
        temperature_mean_c: g.temp.mean(),
        power_mean_w: g.power.mean(),
        sm_clock_mean_mhz: g.clock.mean(),
        timeline_step_s,
        timeline_pct,
        recent_step_s,
        recent_pct,
        verdict: None,
    }
}

/// The PCIe traffic against the link's capacity, and the link's state while loaded.
pub(super) fn pcie_evidence(g: &mut GpuAcc, st: Option<&crate::sample::GpuStatic>) -> PcieEvidence {
    // Link state: the most common one while loaded.
    let current = g
        .link_counts
        .iter()
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
        .map(|(k, _)| *k);
    let gen_max = st.and_then(|s| s.pcie_max_gen).or(g.gen_max_seen);
    let width_max = st.and_then(|s| s.pcie_max_width).or(g.width_max_seen);
    for (&(gen, width), &n) in &g.link_counts {
        g.loaded_link += n;
        if gen_max.is_some_and(|m| gen < m) || width_max.is_some_and(|m| width < m) {
            g.loaded_degraded += n;
        }
    }
    PcieEvidence {
        rx_samples: g.rx_rate.n,
        rx_mean_bytes_per_s: g.rx_rate.mean(),
        rx_max_bytes_per_s: g.rx_rate.max(),
        rx_capacity_mean_fraction: g.rx_frac.mean(),
        rx_capacity_p90_fraction: g.rx_frac_hist.percentile(90.0).map(|p| p / 100.0),
        rx_near_capacity_fraction: g.rx_frac_hist.fraction_at_least(70.0),
        gen_current: current.map(|c| c.0),
        width_current: current.map(|c| c.1),
        gen_max,
        width_max,
        capacity_current_bytes_per_s: current.and_then(|(a, b)| pcie_link_bytes_per_s(a, b)),
        capacity_max_bytes_per_s: gen_max
            .zip(width_max)
            .and_then(|(a, b)| pcie_link_bytes_per_s(a, b)),
        loaded_link_samples: g.loaded_link,
        degraded_loaded_fraction: (g.loaded_link > 0)
            .then(|| g.loaded_degraded as f64 / g.loaded_link as f64),
    }
}

/// The share of observed time each throttle reason (but idle) was active.
pub(super) fn throttle_evidence(g: &GpuAcc) -> ThrottleEvidence {
    let names = [
        "gpu_idle",
        "applications_clocks_setting",
        "sw_power_cap",
        "hw_slowdown",
        "sync_boost",
        "sw_thermal",
        "hw_thermal",
        "hw_power_brake",
        "display_clock",
    ];
    let mut by_reason = BTreeMap::new();
    if g.throttle_observed > 0.0 {
        for (bit, secs) in g.throttle_by_bit.iter().enumerate() {
            if bit == 0 || *secs <= 0.0 {
                continue;
            }
            by_reason.insert(names[bit].to_string(), secs / g.throttle_observed);
        }
    }
    ThrottleEvidence {
        observed_s: g.throttle_observed,
        slowing_fraction: (g.throttle_observed > 0.0)
            .then(|| g.throttle_slowing / g.throttle_observed),
        by_reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_running_backwards_gives_no_sampling_interval() {
        let interval = |ts: &[f64]| {
            let mut g = GpuAcc::default();
            for &t in ts {
                g.spacing(t);
            }
            g.sample_interval_s()
        };
        assert_eq!(interval(&[0.0, 1.0, 2.0, 3.0]), Some(1.0));
        // alternating between two clocks an hour apart: no interval, not 3599 s
        let alternating: Vec<f64> = (0..200)
            .map(|i| if i % 2 == 0 { 0.0 } else { -3599.0 })
            .collect();
        assert_eq!(interval(&alternating), None);
        // a log written backwards
        let reversed: Vec<f64> = (0..100).map(|i| -f64::from(i)).collect();
        assert_eq!(interval(&reversed), None);
        // one clock step back: the spacings either side of it still count, the step does not
        assert_eq!(
            interval(&[0.0, 2.0, 4.0, -3600.0, 6.0, 8.0, 10.0]),
            Some(2.0)
        );
    }
}
