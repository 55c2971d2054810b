//! GPUs against each other.

use super::r1;
use crate::diagnose::evidence::Evidence;
use crate::finding::{Finding, FindingId, Item, Severity};

/// Spread of mean utilization (points) from which GPUs count as imbalanced.
pub(crate) const IMBALANCE_PTS: f64 = 20.0;

/// `gpu_imbalance`: some GPUs of the job work much less than others.
pub(crate) fn gpu_imbalance(e: &Evidence) -> Option<Finding> {
    let active: Vec<(u32, f64)> = e
        .measured_gpus()
        .filter_map(|g| g.util_mean_pct.map(|u| (g.index, u)))
        .collect();
    if active.len() < 2 {
        return None;
    }
    let (hi_i, hi) = active.iter().copied().max_by(|a, b| a.1.total_cmp(&b.1))?;
    let (lo_i, lo) = active.iter().copied().min_by(|a, b| a.1.total_cmp(&b.1))?;
    // An idle GPU the job never used is not an imbalance within the job.
    if hi - lo < IMBALANCE_PTS || lo < 1.0 {
        return None;
    }
    let f = Finding::new(
        FindingId::GpuImbalance,
        Severity::Warning,
        format!("GPUs are unevenly used: GPU {hi_i} at {hi:.0}%, GPU {lo_i} at {lo:.0}%"),
    )
    .with(Item::UtilMaxPct(r1(hi)))
    .with(Item::UtilMinPct(r1(lo)))
    .with(Item::BusiestGpu(hi_i))
    .with(Item::IdlestGpu(lo_i))
    .with(Item::SpreadPct(r1(hi - lo)));
    Some(f.recommend(
        "In data-parallel training every rank waits for the slowest: check that each rank gets \
         the same batch size and data (DistributedSampler, drop_last=True), that per-rank input \
         pipelines have equal workers and CPU cores (pin ranks to their NUMA node), and that rank 0 \
         does not do extra work (logging, evaluation, checkpointing) inside the step.",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::rules::fixtures::*;

    #[test]
    fn even_gpus_are_fine_uneven_are_not() {
        let mut e = base(90.0);
        e.gpus.push(gpu(1, 85.0));
        assert!(gpu_imbalance(&e).is_none());
        e.gpus.push(gpu(2, 40.0));
        let f = gpu_imbalance(&e).unwrap();
        assert_eq!(f.evidence.to_json()["idlest_gpu"], 2);
        assert_eq!(f.evidence.to_json()["spread_pct"], 50.0);
    }

    #[test]
    fn an_unused_gpu_is_not_imbalance() {
        let mut e = base(90.0);
        e.gpus.push(gpu(1, 0.0));
        assert!(gpu_imbalance(&e).is_none());
    }
}
