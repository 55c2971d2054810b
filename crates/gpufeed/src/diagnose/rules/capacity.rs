//! How much of the GPU the job asks for: an idle GPU, and a batch too small to fill it.

use super::{input, r1, r2, r3};
use crate::diagnose::evidence::Evidence;
use crate::finding::{Finding, Severity};

/// Mean utilization under which a GPU counts as idle.
pub const IDLE_PCT: f64 = 5.0;

/// `gpu_idle`: the GPUs did essentially nothing.
pub fn gpu_idle(e: &Evidence) -> Option<Finding> {
    let busy = e.busy_fraction()?;
    if busy * 100.0 >= IDLE_PCT {
        return None;
    }
    let mut f = Finding::new(
        "gpu_idle",
        Severity::Warning,
        format!("The GPU was idle ({:.1}% utilization)", busy * 100.0),
    )
    .with("gpu_busy_fraction", r3(busy))
    .with("duration_s", r1(e.duration_s));
    if let Some(m) = e
        .gpus
        .iter()
        .filter_map(|g| g.mem_used_max_fraction)
        .reduce(f64::max)
    {
        f = f.with("mem_used_max_fraction", r2(m));
    }
    Some(f.recommend(
        "Check that the job uses the GPU at all (model and tensors moved with .to('cuda'), \
         CUDA_VISIBLE_DEVICES, torch.cuda.is_available()), and that the recording covers the \
         training phase rather than start-up, data preparation or evaluation.",
    ))
}

/// `batch_too_small`: low utilization, lots of free memory, and nothing starving the GPU.
pub fn batch_too_small(e: &Evidence) -> Option<Finding> {
    let busy = e.busy_fraction()?;
    if !(busy * 100.0 >= IDLE_PCT && busy < 0.6) {
        return None;
    }
    if input::classify(e).is_some() || input::starving_signature(e) || input::io_stalled(e) {
        return None;
    }
    let used = e
        .gpus
        .iter()
        .filter_map(|g| g.mem_used_max_fraction)
        .reduce(f64::max)?;
    if used >= 0.5 {
        return None;
    }
    let headroom = (0.85 / used.max(0.01)).floor().clamp(1.0, 16.0);
    Some(
        Finding::new(
            "batch_too_small",
            Severity::Warning,
            format!(
                "The GPU is busy only {:.0}% of the time with {:.0}% of its memory in use",
                busy * 100.0,
                used * 100.0
            ),
        )
        .with("gpu_busy_fraction", r3(busy))
        .with("mem_used_max_fraction", r2(used))
        .with("batch_scale_headroom", headroom)
        .recommend(format!(
            "Work per step is too small to fill the GPU: raise the batch size (memory allows \
             roughly {headroom:.0}x; scale the learning rate accordingly, or keep the effective \
             batch with fewer gradient-accumulation steps), use mixed precision \
             (torch.autocast(\"cuda\", dtype=torch.bfloat16)), or torch.compile / CUDA graphs to \
             cut per-kernel launch overhead."
        ))
        .speedup(Some(r2((1.0 / busy).min(headroom)))),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::rules::fixtures::*;

    #[test]
    fn idle_gpu() {
        let e = base(1.0);
        let f = gpu_idle(&e).unwrap();
        assert_eq!(f.evidence["gpu_busy_fraction"], 0.01);
        assert!(gpu_idle(&base(50.0)).is_none());
    }

    #[test]
    fn small_batch_needs_free_memory_and_no_starvation() {
        let mut e = base(40.0);
        assert!(batch_too_small(&e).is_none(), "memory is 87% used");
        e.gpus[0].mem_used_max_fraction = Some(0.2);
        let f = batch_too_small(&e).unwrap();
        assert_eq!(f.evidence["batch_scale_headroom"], 4.0);
        assert_eq!(f.expected_speedup, Some(2.5));
        let starving = too_few_workers(starving(e.clone()));
        assert!(batch_too_small(&starving).is_none());
        assert!(batch_too_small(&base(97.0)).is_none());
    }
}
