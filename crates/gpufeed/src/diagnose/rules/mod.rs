//! Rules: pure functions of the [`Evidence`], each returning at most one [`Finding`].
//!
//! One file per family: `input` (starvation and its kinds), `pcie` (transfer and link),
//! `throttle`, `balance` (GPUs against each other), `capacity` (idle GPU, small batch), `gpus`
//! (each GPU's state, an unused GPU, the levers of a busy one).

pub(crate) mod balance;
pub(crate) mod capacity;
pub(crate) mod gpus;
pub(crate) mod host;
pub(crate) mod input;
pub(crate) mod pcie;
pub(crate) mod stacks;
pub(crate) mod throttle;

use super::evidence::Evidence;
use crate::finding::{rank, Finding};

/// A rule: evidence in, at most one finding out.
pub type Rule = fn(&Evidence) -> Option<Finding>;

/// Every rule, in no particular order (findings are ranked afterwards).
pub const ALL: &[Rule] = &[
    capacity::gpu_idle,
    input::input_bound,
    input::main_process_bound,
    pcie::transfer_bound,
    pcie::pcie_link_degraded,
    throttle::throttled,
    capacity::batch_too_small,
    balance::gpu_imbalance,
    stacks::sync_bound,
    host::host_bound,
    stacks::slow_rank,
    gpus::gpu_unused,
    gpus::compute_bound,
    gpus::tiny_kernel_gpus,
];

/// Runs every rule and ranks what they found.
pub fn evaluate(e: &Evidence) -> Vec<Finding> {
    let mut out: Vec<Finding> = ALL.iter().filter_map(|r| r(e)).collect();
    rank(&mut out);
    out
}

/// How much a pattern seen at this sampling interval can be trusted: 1 at the driver's own rate
/// (≤ 0.25 s), about 0.87 at 1 s, 0.66 at 10 s, 0.5 at 60 s. Sub-second stalls average out
/// at coarse intervals, so a verdict drawn from the shape of utilization weakens with them.
pub(crate) fn sampling_factor(interval_s: Option<f64>) -> f64 {
    match interval_s {
        Some(i) if i > 0.25 => (1.0 - 0.21 * (i / 0.25).log10()).clamp(0.4, 1.0),
        _ => 1.0,
    }
}

pub(crate) use crate::units::{r1, r2, r3};

/// Mean utilization under which a GPU counts as idle: `capacity` (an idle machine) and `gpus`
/// (an idle GPU among busy ones) share it, so it lives above both.
pub(crate) const IDLE_PCT: f64 = 5.0;

/// Busy fraction under which a starving signature matters (`input`); at or above it the GPU's
/// busy figure is trusted over the Python stacks' (`stacks`).
pub const STARVED_BUSY: f64 = 0.80;

#[cfg(test)]
pub(crate) mod fixtures {
    //! Synthetic evidence for rule tests.
    use crate::diagnose::evidence::*;
    use crate::diagnose::streaming::{PeriodicityResult, Split};

    /// The ids of every finding the rules make of `e`.
    pub(crate) fn finding_ids(e: &Evidence) -> Vec<crate::finding::FindingId> {
        super::evaluate(e).into_iter().map(|f| f.id).collect()
    }

    /// One GPU, steadily busy at `util` %, 8 CPUs, a main process with `workers` idle workers.
    pub(crate) fn base(util: f64) -> Evidence {
        Evidence {
            duration_s: 600.0,
            gpus: vec![gpu(0, util)],
            host: HostEvidence {
                cpu_count: Some(8),
                samples: 6000,
                cpu_mean_pct: Some(20.0),
                idle_cores_mean: Some(6.0),
                busy_cores_mean: Some(1.0),
                iowait_mean_pct: Some(0.5),
                psi_cpu_some_mean_pct: Some(1.0),
                psi_io_some_mean_pct: Some(0.5),
                psi_io_full_mean_pct: Some(0.1),
                psi_mem_some_mean_pct: Some(0.0),
                psi_mem_full_mean_pct: Some(0.0),
                ..Default::default()
            },
            python: None,
            steps: None,
            job: JobEvidence {
                pid: Some(100),
                main_pid: Some(100),
                main_cmd: Some("python train.py".into()),
                main_cpu_mean_pct: Some(40.0),
                main_saturated_fraction: Some(0.0),
                workers_max: 2,
                workers_seen: 2,
                worker_cpu_mean_pct: Some(30.0),
                workers_cpu_total_mean_pct: Some(60.0),
                saturated_workers: 0,
                cpu_mean_pct: Some(100.0),
                samples: 6000,
                d_state_fraction: Some(0.0),
                d_state_time_fraction: Some(0.0),
                ..Default::default()
            },
            origin: Origin::Recording,
            no_gpu: None,
            warnings: Vec::new(),
        }
    }

    /// The same evidence as an nvidia-smi log would give: GPUs only, sampled every `interval_s`.
    pub(crate) fn as_log(mut e: Evidence, interval_s: f64) -> Evidence {
        e.host = Default::default();
        e.job = Default::default();
        e.origin = Origin::GpuLog;
        for g in &mut e.gpus {
            g.util_sample_interval_s = Some(interval_s);
        }
        e
    }

    pub(crate) fn gpu(index: u32, util: f64) -> GpuEvidence {
        GpuEvidence {
            index,
            name: Some("Fake H100".into()),
            util_samples: 3600,
            util_mean_pct: Some(util),
            util_p10_pct: Some((util - 2.0).max(0.0)),
            util_p50_pct: Some(util),
            util_p90_pct: Some((util + 2.0).min(100.0)),
            util_sample_interval_s: Some(1.0 / 6.0),
            util_std_pct: Some(1.0),
            busy_fraction: Some(util / 100.0),
            low_util_fraction: Some(if util < 30.0 { 1.0 } else { 0.0 }),
            mem_total_bytes: Some(80 << 30),
            mem_used_max_bytes: Some(70 << 30),
            mem_used_max_fraction: Some(70.0 / 80.0),
            ..Default::default()
        }
    }

    /// Turns GPU 0 into the "85 % then 10 %, every 2 s" signature.
    pub(crate) fn starving(mut e: Evidence) -> Evidence {
        let g = &mut e.gpus[0];
        g.util_mean_pct = Some(32.5);
        g.busy_fraction = Some(0.325);
        g.low_util_fraction = Some(0.7);
        g.util_split = Some(Split {
            threshold_pct: 50.0,
            low_mean_pct: 10.0,
            high_mean_pct: 85.0,
            low_weight: 0.7,
            separation: 0.98,
        });
        g.bimodal = true;
        g.periodicity = Some(PeriodicityResult {
            period_s: 2.0,
            strength: 0.8,
            step_s: 0.2,
            windows: 5,
        });
        e
    }

    /// One worker pinned at 100 % with cores idle.
    pub(crate) fn too_few_workers(mut e: Evidence) -> Evidence {
        e.job.workers_max = 1;
        e.job.workers_seen = 1;
        e.job.worker_cpu_mean_pct = Some(99.0);
        e.job.workers_cpu_total_mean_pct = Some(99.0);
        e.job.saturated_workers = 1;
        e
    }

    pub(crate) fn all_cores_busy(mut e: Evidence) -> Evidence {
        e.host.cpu_mean_pct = Some(97.0);
        e.host.idle_cores_mean = Some(0.0);
        e.host.busy_cores_mean = Some(7.8);
        e.host.psi_cpu_some_mean_pct = Some(45.0);
        e.job.workers_max = 7;
        e.job.workers_seen = 7;
        e.job.worker_cpu_mean_pct = Some(95.0);
        e.job.saturated_workers = 7;
        e.job.cpu_mean_pct = Some(7.0 * 95.0 + 40.0);
        e
    }

    pub(crate) fn io_stuck(mut e: Evidence) -> Evidence {
        e.host.psi_io_some_mean_pct = Some(55.0);
        e.host.psi_io_full_mean_pct = Some(30.0);
        e.host.iowait_mean_pct = Some(25.0);
        e.host.disk_read_mean_bytes_per_s = Some(180e6);
        e.job.d_state_fraction = Some(0.5);
        e.job.d_state_time_fraction = Some(0.8);
        e.job.worker_cpu_mean_pct = Some(15.0);
        e
    }
}
