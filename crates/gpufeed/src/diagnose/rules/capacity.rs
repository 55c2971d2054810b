//! How much of the GPU the job asks for: an idle GPU, and a batch too small to fill it.

use super::{input, r1, r2, r3, IDLE_PCT};
use crate::diagnose::evidence::Evidence;
use crate::finding::{Finding, FindingId, Item, Severity};

/// `gpu_idle`: the GPUs did essentially nothing.
pub(crate) fn gpu_idle(e: &Evidence) -> Option<Finding> {
    let busy = e.busy_fraction()?;
    // A GPU that always has a kernel running but few SMs in use is not idle (tiny kernels).
    if busy * 100.0 >= IDLE_PCT
        || e.measured_gpus()
            .any(|g| super::gpus::tiny_kernels(g).is_some())
    {
        return None;
    }
    let mut f = Finding::new(
        FindingId::GpuIdle,
        Severity::Warning,
        format!("The GPU was idle ({:.1}% utilization)", busy * 100.0),
    )
    .with(Item::GpuBusyFraction(r3(busy)))
    .with(Item::DurationS(r1(e.duration_s)));
    if let Some(m) = e
        .gpus
        .iter()
        .filter_map(|g| g.mem_used_max_fraction)
        .reduce(f64::max)
    {
        f = f.with(Item::MemUsedMaxFraction(r2(m)));
    }
    Some(f.recommend(
        "Check that the job uses the GPU at all (model and tensors moved with .to('cuda'), \
         CUDA_VISIBLE_DEVICES, torch.cuda.is_available()), and that the recording covers the \
         training phase rather than start-up, data preparation or evaluation.",
    ))
}

/// The smallest memory of a GPU made for training (8 GB): a log with memory.used but no
/// memory.total and no GPU name is judged against it.
pub(crate) const SMALLEST_TRAINING_GPU_BYTES: u64 = 8 << 30;

/// Peak memory in use as a share of the GPU's, and whether the total was assumed: measured when
/// the total is known; else, for a small absolute use (under a quarter of the smallest training
/// GPU's 8 GB, a wide margin), its share of 8 GB, an upper bound on the true share.
pub(crate) fn used_fraction(e: &Evidence) -> Option<(f64, bool)> {
    if let Some(f) = e.mem_used_max_fraction() {
        return Some((f, false));
    }
    if e.used_gpus()
        .any(|g| g.mem_total_bytes.is_some() || g.name.is_some())
    {
        return None;
    }
    let used = e.used_gpus().filter_map(|g| g.mem_used_max_bytes).max()?;
    let f = used as f64 / SMALLEST_TRAINING_GPU_BYTES as f64;
    (f < input::MOSTLY_FREE / 2.0).then_some((f, true))
}

/// Confidence that a batch or model too small for the GPU explains its low utilization, from
/// how free memory stayed and how little the utilization looks starved.
pub(crate) fn batch_confidence(e: &Evidence) -> Option<f64> {
    let (used, _) = used_fraction(e)?;
    if used >= input::MOSTLY_FREE {
        return None;
    }
    let mut c = 0.3 + 0.3 * (1.0 - used / input::MOSTLY_FREE);
    // A busy/starved square wave is waiting, not small work: the batch is a weaker candidate.
    if e.any_bimodal() {
        c -= 0.2;
    }
    if e.strongest_period().is_some_and(|p| p.is_strong()) {
        c -= 0.1;
    }
    // A coarse interval may hide a busy/starved pattern behind the flat level: less sure.
    let f = super::sampling_factor(e.sample_interval_s());
    Some(r2((c * f).max(0.1)))
}

/// The host data show the input keeps up (no starvation named from them).
fn input_cleared(e: &Evidence) -> bool {
    (e.has_host() || e.has_job()) && input::classify(e).is_none() && !input::io_stalled(e)
}

/// `batch_too_small`: low utilization with memory mostly free. With host data showing the
/// input keeps up it is the cause; without host data it is named as a candidate beside any
/// starvation, with no speed-up bound (the cause is not established).
pub(crate) fn batch_too_small(e: &Evidence) -> Option<Finding> {
    let busy = e.busy_fraction()?;
    if !(busy * 100.0 >= IDLE_PCT && busy < 0.6) {
        return None;
    }
    let host = e.has_host() || e.has_job();
    if host && !input_cleared(e) {
        return None;
    }
    let (used, assumed) = used_fraction(e)?;
    let confidence = batch_confidence(e)?;
    let headroom = (0.85 / used.max(0.01)).floor().clamp(1.0, 16.0);
    let memory = if assumed {
        format!(
            "{} of memory in use (no memory.total in the log: at most {:.0}% of even an 8 GB \
             GPU, the smallest made for training)",
            crate::units::bytes((used * SMALLEST_TRAINING_GPU_BYTES as f64) as u64),
            used * 100.0
        )
    } else {
        format!("{:.0}% of its memory in use", used * 100.0)
    };
    let title = if host {
        format!(
            "The GPU is busy only {:.0}% of the time with {memory}",
            busy * 100.0
        )
    } else {
        format!(
            "The GPU is busy only {:.0}% of the time with {memory}: the batch or model may be far too small for it",
            busy * 100.0
        )
    };
    let mut rec = format!(
        "Work per step may be too small to fill the GPU: raise the batch size (memory allows \
         roughly {headroom:.0}x; scale the learning rate accordingly, or keep the effective \
         batch with fewer gradient-accumulation steps), use mixed precision \
         (torch.autocast(\"cuda\", dtype=torch.bfloat16)), or torch.compile / CUDA graphs to \
         cut per-kernel launch overhead."
    );
    if !host {
        rec.push_str(
            " This log cannot tell it from a slow input: `gpufeed run -- <your command>` \
             records the host and the job's processes too and decides.",
        );
    }
    Some(
        Finding::new(FindingId::BatchTooSmall, Severity::Warning, title)
            .with(Item::GpuBusyFraction(r3(busy)))
            .with(Item::MemUsedMaxFraction(r2(used)))
            .with(Item::BatchScaleHeadroom(headroom))
            .with(Item::MemTotalAssumed(assumed))
            .with(Item::CandidateConfidence(confidence))
            .recommend(rec)
            .speedup(host.then(|| r2((1.0 / busy).min(headroom)))),
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
        assert_eq!(f.evidence.to_json()["gpu_busy_fraction"], 0.01);
        assert!(gpu_idle(&base(50.0)).is_none());
    }

    #[test]
    fn small_batch_needs_free_memory_and_no_starvation() {
        let mut e = base(40.0);
        assert!(batch_too_small(&e).is_none(), "memory is 87% used");
        e.gpus[0].mem_used_max_fraction = Some(0.2);
        let f = batch_too_small(&e).unwrap();
        assert_eq!(f.evidence.to_json()["batch_scale_headroom"], 4.0);
        assert_eq!(f.expected_speedup, Some(2.5));
        let starving = too_few_workers(starving(e.clone()));
        assert!(batch_too_small(&starving).is_none());
        assert!(batch_too_small(&base(97.0)).is_none());
    }

    #[test]
    fn without_host_data_a_small_batch_is_a_candidate_without_a_bound() {
        // A flat 25% with 472 MiB of 32 GB in use, from a 1 s log.
        let mut e = as_log(base(25.0), 1.0);
        e.gpus[0].mem_total_bytes = Some(32 << 30);
        e.gpus[0].mem_used_max_fraction = Some(472.0 / 32768.0);
        let f = batch_too_small(&e).unwrap();
        assert_eq!(f.expected_speedup, None, "the cause is not established");
        assert!(
            f.evidence.to_json()["candidate_confidence"]
                .as_f64()
                .unwrap()
                >= 0.5
        );
        assert!(f.recommendation.contains("gpufeed run"));
        // A square wave makes it a weaker candidate, still named.
        let s = as_log(starving(e.clone()), 1.0);
        let f = batch_too_small(&s).unwrap();
        assert!(
            f.evidence.to_json()["candidate_confidence"]
                .as_f64()
                .unwrap()
                < 0.35
        );
    }

    #[test]
    fn without_a_total_a_small_absolute_use_counts_as_headroom() {
        // 7% busy, 512 MiB, no memory.total and no GPU name.
        let mut e = as_log(base(7.0), 1.0);
        e.gpus[0].mem_total_bytes = None;
        e.gpus[0].name = None;
        e.gpus[0].mem_used_max_fraction = None;
        e.gpus[0].mem_used_max_bytes = Some(512 << 20);
        assert_eq!(used_fraction(&e), Some((1.0 / 16.0, true)));
        let f = batch_too_small(&e).expect("a candidate, not nothing");
        assert_eq!(f.evidence.to_json()["mem_total_assumed"], true);
        assert!(f.title.contains("512 MiB of memory in use"), "{}", f.title);
        assert!(
            f.title.contains("at most 6% of even an 8 GB GPU"),
            "{}",
            f.title
        );
        // 4 GiB is not small against 8 GB: not assumed.
        e.gpus[0].mem_used_max_bytes = Some(4 << 30);
        assert_eq!(used_fraction(&e), None);
        assert!(batch_too_small(&e).is_none());
        // A named GPU without a total is not assumed to be the smallest.
        e.gpus[0].mem_used_max_bytes = Some(512 << 20);
        e.gpus[0].name = Some("NVIDIA H100".into());
        assert_eq!(used_fraction(&e), None);
    }
}
