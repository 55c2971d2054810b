//! Rules: each a pure function of a [`TraceSummary`] (or of several ranks' summaries) returning at
//! most one finding with its evidence, a concrete fix and, where it can be bounded, a speed-up.

use crate::finding::{Finding, FindingId, Item, Severity};
use crate::stats::lower_median;

use super::breakdown::{LoaderIterator, TraceSummary};

/// DataLoader share of step time above which the input pipeline is the bottleneck (plugin: 5%).
pub const INPUT_BOUND_PCT: f64 = 5.0;
pub const LOW_UTIL_PCT: f64 = 50.0;
pub const COMM_BOUND_PCT: f64 = 10.0;
pub const SYNC_BOUND_PCT: f64 = 10.0;
/// ...and only while the GPU is idle a fair share of the time.
pub const SYNC_GPU_BUSY_PCT: f64 = 80.0;
pub const STRAGGLER_RATIO: f64 = 1.10;
/// Pageable copies matter from 1 MB per step or 1% of the step time.
pub const PAGEABLE_MIN_BYTES_PER_STEP: f64 = 1e6;
pub const PAGEABLE_MIN_PCT: f64 = 1.0;
/// GPU idle inside launch-bound stretches, as a share of the step, above which launches are the problem.
pub const LAUNCH_IDLE_PCT: f64 = 10.0;
/// AMP is worth suggesting when it could save at least 5% of the step.
pub const MIN_AMP_SPEEDUP: f64 = 1.05;

fn r1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0 + 0.0 // never -0.0
}

fn speedup(total: f64, saved: f64) -> Option<f64> {
    if total > 0.0 && saved > 0.0 && saved < total {
        Some((total / (total - saved) * 100.0).round() / 100.0)
    } else {
        None
    }
}

/// Fires from the DataLoader share gpufeed measures (every `enumerate(DataLoader)#...__next__`
/// event, whatever its category, inside the steps, whatever their source), not from the
/// plugin's `dataloader` category, which misses `user_annotation` events and books DataLoader
/// time that overlaps GPU work to kernel/memcpy/runtime first.
pub fn input_bound(s: &TraceSummary) -> Option<Finding> {
    let b = &s.breakdown;
    let pct = s.dataloader.share_pct;
    if pct <= INPUT_BOUND_PCT || s.dataloader.per_step_us <= 0.0 {
        return None;
    }
    let sev = if pct > 25.0 {
        Severity::Critical
    } else {
        Severity::Warning
    };
    let gpu = !s.devices.is_empty();
    let title = if gpu {
        format!("Input-bound: the training loop waits for the DataLoader {pct:.0}% of each step, and the GPU with it")
    } else {
        // a CPU-only trace: nothing says a GPU waits, only the loop does
        format!("Input-bound: the training loop waits for the DataLoader {pct:.0}% of each step")
    };
    let mut f = Finding::new(FindingId::InputBound, sev, title)
        .with(Item::DataloaderPct(r1(pct)))
        .with(Item::DataloaderUsPerStep(r1(s.dataloader.per_step_us)))
        .with(Item::StepUs(r1(b.total_us)))
        .with(Item::TbPluginDataloaderPct(r1(
            100.0 * b.dataloader_us / b.total_us.max(1e-9)
        )))
        .with(Item::StepSource(s.step_source.as_str().into()))
        .with(Item::DataloaderIterator(
            s.dataloader.iterator.as_str().into(),
        ));
    let single = s.dataloader.iterator == LoaderIterator::SingleProcess;
    if single {
        f = f.with(Item::NumWorkers(0));
    }
    let rec = if single {
        "The DataLoader runs in the training process (_SingleProcessDataLoaderIter: num_workers=0). Load in \
         worker processes: DataLoader(dataset, batch_size=..., num_workers=min(8, os.cpu_count()), \
         pin_memory=True, persistent_workers=True, prefetch_factor=4)."
    } else {
        "Data loading cannot keep up even with workers: raise num_workers (up to the CPU cores), set \
         persistent_workers=True and prefetch_factor=4, move decoding/augmentation to the GPU (DALI, \
         torchvision.transforms.v2 on tensors) or pre-process the dataset once."
    };
    Some(
        f.recommend(rec)
            .speedup(speedup(b.total_us, s.dataloader.per_step_us)),
    )
}

pub fn pageable_memcpy(s: &TraceSummary) -> Option<Finding> {
    let pageable: Vec<_> = s
        .copies
        .iter()
        .filter(|c| {
            (c.direction == "HtoD" || c.direction == "DtoH")
                && (c.src == "Pageable" || c.dst == "Pageable")
        })
        .collect();
    if pageable.is_empty() {
        return None;
    }
    let bytes: f64 = pageable.iter().map(|c| c.bytes).sum();
    let time: f64 = pageable.iter().map(|c| c.time_us).sum();
    let count: u64 = pageable.iter().map(|c| c.count).sum();
    let bw = if time > 0.0 {
        bytes / (time * 1e3)
    } else {
        0.0
    };
    let steps = s.steps.len().max(1) as f64;
    let per_step = time / steps;
    let share = 100.0 * per_step / s.breakdown.total_us.max(1e-9);
    if bytes / steps < PAGEABLE_MIN_BYTES_PER_STEP && share < PAGEABLE_MIN_PCT {
        return None; // a few small pageable copies (e.g. scalars) cost nothing worth fixing
    }
    let sev = if share > 5.0 {
        Severity::Warning
    } else {
        Severity::Info
    };
    // pinned copies typically run 2-3x faster and can overlap compute; bound by half the copy time
    Some(
        Finding::new(
            FindingId::PageableMemcpy,
            sev,
            format!(
                "{count} host/device {} pageable memory ({:.1} MiB, {:.1} GB/s): {} staged and synchronous",
                if count == 1 { "copy uses" } else { "copies use" },
                bytes / (1u64 << 20) as f64,
                bw,
                if count == 1 { "it is" } else { "they are" }
            ),
        )
        .with(Item::Copies(count))
        .with(Item::Bytes(bytes))
        .with(Item::CopyUs(r1(time)))
        .with(Item::CopyUsPerStep(r1(per_step)))
        .with(Item::CopyPctOfStep(r1(share)))
        .with(Item::BandwidthGbps(r1(bw)))
        .recommend(
            "Use pinned host memory and asynchronous copies: DataLoader(..., pin_memory=True) and \
             batch.to(device, non_blocking=True); for your own tensors, tensor.pin_memory() once.",
        )
        .speedup(speedup(s.breakdown.total_us, per_step * 0.5)),
    )
}

pub fn amp_unused(s: &TraceSummary) -> Option<Finding> {
    let cc_major = s
        .devices
        .iter()
        .filter_map(|d| d.compute_capability.as_deref())
        .filter_map(|c| c.split('.').next()?.parse::<u32>().ok())
        .max()?;
    let k = &s.kernels;
    if cc_major < 7 || k.time_us <= 0.0 || k.tensor_core_pct >= 1.0 || k.tc_eligible_pct < 30.0 {
        return None;
    }
    let gpu_name = s
        .devices
        .iter()
        .find_map(|d| d.name.clone())
        .unwrap_or_default();
    if is_amd(&gpu_name) {
        return None; // compute capability and kernel names mean something else on ROCm
    } // eligible kernels typically run 2x+ faster in fp16/bf16 on tensor cores
    let kernel_share = s.breakdown.kernel_us / s.breakdown.total_us.max(1e-9);
    let saved = s.breakdown.total_us * kernel_share * (k.tc_eligible_pct / 100.0) * 0.5;
    Some(
        Finding::new(
            FindingId::AmpUnused,
            Severity::Warning,
            format!(
                "Tensor cores idle: {:.0}% of kernel time is in ops that could use them, 0% runs on them",
                k.tc_eligible_pct
            ),
        )
        .with(Item::TcEligiblePct(r1(k.tc_eligible_pct)))
        .with(Item::TensorCorePct(r1(k.tensor_core_pct)))
        .with(Item::ComputeCapabilityMajor(cc_major))
        .with(Item::Gpu(gpu_name))
        .recommend(if cc_major >= 8 {
            "Enable automatic mixed precision in bf16: with torch.autocast(device_type=\"cuda\", \
             dtype=torch.bfloat16): loss = model(x); at the very least allow TF32: \
             torch.backends.cuda.matmul.allow_tf32 = True; torch.backends.cudnn.allow_tf32 = True."
        } else {
            "Enable automatic mixed precision in fp16 (this GPU has no bf16): scaler = torch.amp.GradScaler(\"cuda\"); \
             with torch.autocast(device_type=\"cuda\", dtype=torch.float16): loss = model(x); \
             scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update()."
        })
        .speedup(speedup(s.breakdown.total_us, saved)),
    )
    .filter(|f| f.expected_speedup.is_some_and(|x| x >= MIN_AMP_SPEEDUP))
}

/// AMD GPUs (ROCm traces): their `computeMajor` is the gfx generation.
fn is_amd(gpu_name: &str) -> bool {
    gpu_name.contains("AMD") || gpu_name.contains("Radeon") || gpu_name.contains("Instinct")
}

pub fn sync_bound(s: &TraceSummary) -> Option<Finding> {
    let sy = &s.sync;
    if sy.share_pct <= SYNC_BOUND_PCT || sy.calls == 0 {
        return None;
    }
    // blocking while the GPU is busy costs nothing: the CPU is simply ahead
    if s.gpu_busy_pct.is_some_and(|b| b >= SYNC_GPU_BUSY_PCT) {
        return None;
    }
    let top = sy
        .by_call
        .iter()
        .max_by(|a, b| a.1 .1.total_cmp(&b.1 .1))
        .map(|(n, _)| n.clone())
        .unwrap_or_default();
    Some(
        Finding::new(
            FindingId::SyncBound,
            if sy.share_pct > 30.0 { Severity::Critical } else { Severity::Warning },
            format!("The CPU blocks on the GPU {:.0}% of the time ({} synchronising calls, mostly {top})", sy.share_pct, sy.calls),
        )
        .with(Item::SyncCalls(sy.calls))
        .with(Item::SyncUs(r1(sy.time_us)))
        .with(Item::SyncUsPerStep(r1(sy.per_step_us)))
        .with(Item::SyncPct(r1(sy.share_pct)))
        .with(Item::TopCall(top))
        .recommend(
            "Remove host-device synchronisation from the training loop: no loss.item(), tensor.cpu(), print(tensor) \
             or torch.cuda.synchronize() every step (accumulate on the GPU and read every N steps); avoid \
             data-dependent shapes (nonzero, masked_select) and torch.cuda.set_sync_debug_mode(\"warn\") to find them.",
        )
        .speedup(speedup(s.breakdown.total_us, sy.per_step_us * 0.8)),
    )
}

pub fn launch_bound(s: &TraceSummary) -> Option<Finding> {
    let l = &s.launch;
    let k = &s.kernels;
    let busy = s.gpu_busy_pct?;
    let idle_per_step = l.stretch_idle_us / s.steps.len().max(1) as f64;
    let idle_pct = 100.0 * idle_per_step / s.breakdown.total_us.max(1e-9);
    if k.count < 100
        || k.short_kernel_pct < 50.0
        || l.host_wait_pct < 20.0
        || busy > 80.0
        || idle_pct < LAUNCH_IDLE_PCT
    {
        return None;
    }
    Some(
        Finding::new(
            FindingId::LaunchBound,
            Severity::Warning,
            format!(
                "Launch-bound: {:.0}% of kernels are shorter than 10 µs and the GPU waits for the CPU to launch them {:.0}% of the time",
                k.short_kernel_pct, l.host_wait_pct
            ),
        )
        .with(Item::ShortKernelPct(r1(k.short_kernel_pct)))
        .with(Item::MedianKernelUs(r1(k.median_us)))
        .with(Item::HostWaitPct(r1(l.host_wait_pct)))
        .with(Item::LaunchCalls(l.launch_calls))
        .with(Item::Stretches(l.stretches))
        .with(Item::LongestStretchUs(r1(l.longest_stretch_us)))
        .with(Item::LaunchIdlePctOfStep(r1(idle_pct)))
        .recommend(
            "Launch fewer, larger kernels: model = torch.compile(model) (fuses elementwise ops), \
             torch.compile(model, mode=\"reduce-overhead\") or CUDA graphs for static shapes, fused optimizers \
             (torch.optim.AdamW(..., fused=True)), and a bigger batch per step.",
        )
        .speedup(speedup(s.breakdown.total_us, idle_per_step)),
    )
}

pub fn comm_bound(s: &TraceSummary) -> Option<Finding> {
    let b = &s.breakdown;
    // the plugin's category (CPU-side collectives, kernels linked to them) or, when larger, the
    // NCCL kernel time not hidden behind compute
    let comm_us = b.communication_us.max(s.communication.exposed_us_per_step);
    let pct = 100.0 * comm_us / b.total_us.max(1e-9);
    if pct <= COMM_BOUND_PCT {
        return None;
    }
    Some(
        Finding::new(
            FindingId::CommBound,
            if pct > 30.0 { Severity::Critical } else { Severity::Warning },
            format!("Communication takes {pct:.0}% of each step without overlapping compute"),
        )
        .with(Item::CommunicationPct(r1(pct)))
        .with(Item::CommunicationUsPerStep(r1(comm_us)))
        .with(Item::TbPluginCommunicationPct(r1(100.0 * b.communication_us / b.total_us.max(1e-9))))
        .with(Item::ExposedNcclPct(r1(100.0 * s.communication.exposed_us_per_step / b.total_us.max(1e-9))))
        .with(Item::CommOverlapPct(r1(s.communication.overlap_pct)))
        .recommend(
            "Overlap and shrink gradient communication: DDP(model, bucket_cap_mb=50, gradient_as_bucket_view=True), \
             gradient accumulation with model.no_sync() on all but the last micro-batch, a bigger batch per step, or \
             DDP communication hooks (register_comm_hook(state=None, hook=default_hooks.fp16_compress_hook)).",
        )
        .speedup(speedup(b.total_us, comm_us * 0.5)),
    )
}

pub fn low_gpu_util(s: &TraceSummary) -> Option<Finding> {
    let busy = s.gpu_busy_pct?;
    if busy >= LOW_UTIL_PCT {
        return None;
    }
    Some(
        Finding::new(
            FindingId::LowGpuUtil,
            if busy < 20.0 { Severity::Warning } else { Severity::Info },
            format!("The GPU runs kernels only {busy:.0}% of the profiled steps"),
        )
        .with(Item::GpuBusyPct(r1(busy)))
        .recommend(
            "Give the GPU more work per launch: increase the batch size (scale the learning rate), and fix the \
             other findings first: they say where the idle time goes.",
        ),
    )
}

/// Rank step times: a straggler is a rank whose average step is ≥ 10% slower than the median rank.
pub fn straggler(ranks: &[TraceSummary]) -> Option<Finding> {
    if ranks.len() < 2 {
        return None;
    }
    let mut times: Vec<(String, f64)> = ranks
        .iter()
        .enumerate()
        .map(|(i, r)| {
            (
                r.rank
                    .map(|x| x.to_string())
                    .unwrap_or_else(|| i.to_string()),
                r.breakdown.total_us,
            )
        })
        .filter(|x| x.1 > 0.0)
        .collect();
    if times.len() < 2 {
        return None;
    }
    times.sort_by(|a, b| a.1.total_cmp(&b.1));
    let median = lower_median(&mut times.iter().map(|t| t.1).collect::<Vec<_>>())?;
    let (slow_rank, slow) = times.last()?.clone();
    if slow < median * STRAGGLER_RATIO {
        return None;
    }
    let per_rank: std::collections::BTreeMap<String, f64> =
        times.iter().map(|(r, t)| (r.clone(), r1(*t))).collect();
    Some(
        Finding::new(
            FindingId::Straggler,
            Severity::Warning,
            format!("Rank {slow_rank} is a straggler: its steps take {:.0}% longer than the median rank's", 100.0 * (slow / median - 1.0)),
        )
        .with(Item::TraceStragglerRank(slow_rank))
        .with(Item::StepUs(r1(slow)))
        .with(Item::MedianStepUs(r1(median)))
        .with(Item::StepUsByRank(per_rank))
        .recommend(
            "Find what differs on that rank: its findings above (input pipeline, throttling, a noisy neighbour), \
             uneven data shards (use DistributedSampler with drop_last=True), or uneven work per rank; the other \
             ranks wait for it in every all-reduce.",
        )
        .speedup(speedup(slow, slow - median)),
    )
}

/// All single-trace rules.
pub fn evaluate(s: &TraceSummary) -> Vec<Finding> {
    [
        input_bound,
        pageable_memcpy,
        amp_unused,
        sync_bound,
        launch_bound,
        comm_bound,
        low_gpu_util,
    ]
    .iter()
    .filter_map(|r| r(s))
    .collect()
}
