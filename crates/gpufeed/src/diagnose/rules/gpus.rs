//! Every GPU judged on its own: its state, a GPU the job never used (`gpu_unused`), and the
//! levers left on GPUs that stay busy (`compute_bound`).

use super::{input, pcie, r1, r2, r3, IDLE_PCT};
use crate::diagnose::evidence::{Evidence, GpuEvidence};
use crate::finding::{Finding, FindingId, Item, Severity};

/// The most GPUs one machine holds (an HGX/DGX board has 8, the largest nodes 16).
pub(crate) const MAX_GPUS_PER_NODE: usize = 16;

/// Busy fraction from which a GPU without a starving pattern counts as steadily busy.
pub(crate) const BUSY: f64 = 0.80;

use crate::diagnose::evidence::{GpuState, GpuVerdict};

/// SM active and engine activity of a GPU running tiny kernels ([`GpuEvidence::tiny_kernels`]).
pub(crate) fn tiny_kernels(g: &GpuEvidence) -> Option<(f64, f64)> {
    g.tiny_kernels()
}

/// `launch_bound` from DCGM's profiling fields: a GPU that is never without a kernel while its
/// SMs stay almost empty. Not an unused or idle GPU: the work per launch is too small.
pub(crate) fn tiny_kernel_gpus(e: &Evidence) -> Option<Finding> {
    let tiny: Vec<(u32, f64, f64)> = e
        .measured_gpus()
        .filter_map(|g| tiny_kernels(g).map(|(s, a)| (g.index, s, a)))
        .collect();
    let &(_, sm, engine) = tiny.first()?;
    let list = tiny
        .iter()
        .map(|t| t.0.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let (plural, verb) = if tiny.len() == 1 {
        ("", "has")
    } else {
        ("s", "have")
    };
    Some(
        Finding::new(
            FindingId::LaunchBound,
            Severity::Warning,
            format!(
                "GPU{plural} {list} {verb} a kernel running {engine:.0}% of the time but only \
                 {sm:.1}% SM activity: kernels too small to fill the GPU (batch too small or \
                 launch-bound), not an idle GPU"
            ),
        )
        .with(Item::Gpus(tiny.iter().map(|t| t.0).collect::<Vec<_>>()))
        .with(Item::SmActivePct(r1(sm)))
        .with(Item::EngineActivePct(r1(engine)))
        .recommend(
            "Give each kernel more work: raise the batch size (or the sequence length per \
             step), fuse small operations (torch.compile, CUDA graphs to cut launch overhead), \
             and avoid per-sample Python loops on the GPU; a PyTorch profiler trace \
             (`gpufeed analyze TRACE`) names the small kernels.",
        ),
    )
}

impl GpuState {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// One GPU's own verdict: its state and a line saying what it did and what that means.
pub(crate) fn gpu_verdict(g: &GpuEvidence, state: GpuState) -> GpuVerdict {
    let busy = g
        .busy_fraction
        .map_or(String::new(), |b| format!("{:.0}% busy", b * 100.0));
    let mem = g.mem_used_max_bytes.map_or(String::new(), |b| {
        format!(", {} used", crate::units::bytes(b))
    });
    let summary = match state {
        GpuState::Busy => format!("{busy}{mem}: kept fed, compute-bound"),
        GpuState::Starving => {
            format!("{busy}{mem}: busy and starved in turn, the input does not keep up")
        }
        GpuState::Underused => {
            format!("{busy}{mem}: a flat, partial load with no starving pattern")
        }
        GpuState::Idle => format!("{busy}{mem}: idle while the job ran"),
        GpuState::Unused => format!("{busy}{mem}: never used by the job"),
        GpuState::TinyKernels => match g.tiny_kernels() {
            Some((sm, engine)) => format!(
                "a kernel running {engine:.0}% of the time at {sm:.1}% SM activity: kernels too \
                 small to fill it"
            ),
            None => busy,
        },
    };
    GpuVerdict { state, summary }
}

/// The state of one measured GPU (`None` without utilization samples).
pub(crate) fn gpu_state(e: &Evidence, g: &GpuEvidence) -> Option<GpuState> {
    let b = g.busy_fraction?;
    Some(if tiny_kernels(g).is_some() {
        GpuState::TinyKernels
    } else if e.is_unused(g) {
        GpuState::Unused
    } else if b * 100.0 < IDLE_PCT {
        GpuState::Idle
    } else if b < super::STARVED_BUSY
        && g.shape_readable()
        && (g.periodicity.is_some_and(|p| p.is_strong()) || g.bimodal)
    {
        GpuState::Starving
    } else if b >= BUSY {
        GpuState::Busy
    } else {
        GpuState::Underused
    })
}

/// `gpu_unused`: a GPU stayed at 0 % while another worked.
pub(crate) fn gpu_unused(e: &Evidence) -> Option<Finding> {
    let unused: Vec<&GpuEvidence> = e.measured_gpus().filter(|g| e.is_unused(g)).collect();
    if unused.is_empty() {
        return None;
    }
    let total = e.measured_gpus().count();
    let used: Vec<u32> = e.used_gpus().map(|g| g.index).collect();
    let idle_list = crate::units::index_ranges(&unused.iter().map(|g| g.index).collect::<Vec<_>>());
    let mem = unused
        .iter()
        .filter_map(|g| g.mem_used_max_bytes)
        .max()
        .map(|b| format!(" with {} MiB", b >> 20))
        .unwrap_or_default();
    let plural = if unused.len() == 1 { "" } else { "s" };
    let f = Finding::new(
        FindingId::GpuUnused,
        Severity::Warning,
        format!(
            "The job uses {} of {total} GPUs: GPU{plural} {idle_list} stayed at 0%{mem}",
            used.len()
        ),
    )
    .with(Item::GpusUsed(used.len()))
    .with(Item::GpusTotal(total))
    .with(Item::UnusedGpus(
        unused.iter().map(|g| g.index).collect::<Vec<_>>(),
    ));
    let visible = used
        .iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",");
    // More GPUs than one machine holds (a fleet's export): no one command line fits them.
    let rec = if total > MAX_GPUS_PER_NODE {
        format!(
            "{} of {total} GPUs did no work: more GPUs than one machine holds, so this is a \
             fleet; give the idle ones work (more ranks, another job) or free them for others, \
             machine by machine.",
            total - used.len()
        )
    } else {
        format!(
            "The job uses {} of {total} GPUs: start it with torchrun / DDP, or free the GPU for \
             others. To use them all: torchrun --nproc-per-node={total} train.py, with \
             DistributedDataParallel and a DistributedSampler; to leave the rest to others: \
             CUDA_VISIBLE_DEVICES={visible}.",
            used.len()
        )
    };
    Some(
        f.recommend(rec)
            // Data-parallel over every GPU: at most total / used times the throughput.
            .speedup((!used.is_empty()).then(|| r2(total as f64 / used.len() as f64))),
    )
}

/// CUDA compute capability major from a GPU's marketing name, where the name says it clearly.
pub(crate) fn arch_major_from_name(name: &str) -> Option<u32> {
    let n = name.to_ascii_uppercase();
    let toks: Vec<&str> = n
        .split(|c: char| c.is_whitespace() || c == '-' || c == '_')
        .filter(|t| !t.is_empty())
        .collect();
    let has = |p: &str| toks.contains(&p);
    let starts = |p: &str| toks.iter().any(|t| t.starts_with(p));
    if starts("B100") || starts("B200") || starts("GB200") || starts("B300") {
        Some(10)
    } else if starts("H100") || starts("H200") || starts("GH200") || starts("H800") {
        Some(9)
    } else if starts("A100")
        || starts("A800")
        || [
            "A10", "A10G", "A30", "A40", "A16", "A2", "L4", "L40", "L40S", "L20",
        ]
        .iter()
        .any(|p| has(p))
        || (has("RTX") && toks.iter().any(|t| t.starts_with('A') && t.len() == 5))
        || toks.iter().any(|t| {
            t.len() == 4 && (t.starts_with("30") || t.starts_with("40")) && t.ends_with('0')
        })
        || has("ADA")
    {
        Some(8)
    } else if starts("V100")
        || has("T4")
        || (has("TITAN") && (has("V") || has("RTX")))
        || toks
            .iter()
            .any(|t| t.len() == 4 && t.starts_with("20") && t.ends_with('0'))
        || (has("QUADRO") && has("RTX"))
    {
        Some(7)
    } else if starts("P100") || has("P40") || has("P4") || has("GTX") || starts("TITAN") {
        Some(6)
    } else if starts("K80") || starts("M60") || starts("M40") {
        Some(3)
    } else {
        None
    }
}

/// The compute capability major of the used GPUs (header first, else the name).
fn arch_major(e: &Evidence) -> Option<u32> {
    e.used_gpus()
        .filter_map(|g| {
            g.compute_capability
                .map(|c| c[0])
                .or_else(|| g.name.as_deref().and_then(arch_major_from_name))
        })
        .min()
}

fn precision_lever(major: Option<u32>) -> &'static str {
    match major {
        Some(m) if m >= 8 => {
            "mixed precision in bf16 (with torch.autocast(\"cuda\", dtype=torch.bfloat16)) and \
             TF32 for what stays fp32 (torch.backends.cuda.matmul.allow_tf32 = True; \
             torch.backends.cudnn.allow_tf32 = True), if not on already"
        }
        Some(7) => {
            "mixed precision in fp16 (torch.autocast(\"cuda\", dtype=torch.float16) with \
             torch.amp.GradScaler; this GPU has tensor cores but no bf16 or TF32), if not on \
             already"
        }
        Some(_) => {
            "this GPU has no tensor cores: mixed precision saves memory and bandwidth but gains \
             little speed"
        }
        None => {
            "mixed precision (bf16 with torch.autocast on Ampere or newer, fp16 with a \
             GradScaler on Volta/Turing) and TF32 matmuls on Ampere or newer, if not on already"
        }
    }
}

/// `compute_bound` (info): every used GPU stays busy without a starving pattern; the input
/// keeps up. Names the levers that fit the evidence.
pub(crate) fn compute_bound(e: &Evidence) -> Option<Finding> {
    let busy = e.busy_fraction()?;
    let states: Vec<GpuState> = e.used_gpus().filter_map(|g| gpu_state(e, g)).collect();
    if states.is_empty() || states.iter().any(|s| *s != GpuState::Busy) {
        return None;
    }
    // A saturated link or clocks held down is the cause to report, not compute.
    if pcie::transfer_bound(e).is_some()
        || e.used_gpus()
            .any(|g| g.throttle.slowing_fraction.is_some_and(|f| f >= 0.2))
    {
        return None;
    }
    let p50 = e
        .used_gpus()
        .filter_map(|g| g.util_p50_pct)
        .reduce(f64::min);
    let major = arch_major(e);
    let mut f = Finding::new(
        FindingId::ComputeBound,
        Severity::Info,
        match p50 {
            Some(p) => format!(
                "The GPU stays busy ({:.0}% mean, p50 {p:.0}%): compute-bound, not starving",
                busy * 100.0
            ),
            None => format!(
                "The GPU stays busy ({:.0}% mean): compute-bound, not starving",
                busy * 100.0
            ),
        },
    )
    .with(Item::GpuBusyFraction(r3(busy)));
    if let Some(p) = p50 {
        f = f.with(Item::UtilP50Pct(r1(p)));
    }
    if let Some(m) = major {
        f = f.with(Item::ComputeCapabilityMajor(m));
    }
    let mut levers = vec![precision_lever(major).to_string()];
    if let Some(used) = e.mem_used_max_fraction() {
        f = f.with(Item::MemUsedMaxFraction(r2(used)));
        if used < input::MOSTLY_FREE {
            let headroom = (0.85 / used.max(0.01)).floor().clamp(1.0, 16.0);
            f = f.with(Item::BatchScaleHeadroom(headroom));
            levers.push(format!(
                "a larger batch: memory has room ({:.0}% used at peak, roughly {headroom:.0}x \
                 fits), and larger steps usually process more samples per second (scale the \
                 learning rate, or keep the effective batch with less gradient accumulation)",
                used * 100.0
            ));
        }
    }
    levers.push("torch.compile to fuse kernels".into());
    let rec = format!(
        "The input keeps up; the next levers are on the GPU side: {}. Measure each change with \
         `gpufeed sweep`.",
        levers.join("; ")
    );
    Some(f.recommend(rec))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::rules::fixtures::*;
    use crate::diagnose::verdict::{decide, VerdictId};
    use crate::import::dcgmi::ProfilingMeans;

    fn profiled(mut g: GpuEvidence, sm: f64, gract: f64) -> GpuEvidence {
        g.profiling = Some(ProfilingMeans {
            sm_active_pct: Some(sm),
            gr_active_pct: Some(gract),
            ..Default::default()
        });
        g
    }

    #[test]
    fn a_gpu_always_running_tiny_kernels_is_not_idle_or_unused() {
        // The case that was misread: SMACT 0.9 beside 0.006 with a kernel queued all the time.
        let mut e = base(90.0);
        e.gpus[0] = profiled(e.gpus[0].clone(), 90.0, 99.0);
        let mut g1 = profiled(gpu(1, 0.6), 0.6, 97.0);
        g1.mem_used_max_bytes = Some(15 << 20);
        g1.util_p90_pct = Some(1.0);
        e.gpus.push(g1);
        assert_eq!(gpu_state(&e, &e.gpus[1]), Some(GpuState::TinyKernels));
        assert!(!e.is_unused(&e.gpus[1]));
        let f = tiny_kernel_gpus(&e).unwrap();
        assert_eq!(f.id, FindingId::LaunchBound);
        assert!(
            f.title.starts_with("GPU 1 has a kernel running 97%"),
            "{}",
            f.title
        );
        let findings = crate::diagnose::rules::evaluate(&e);
        assert!(!findings.iter().any(|f| f.id == FindingId::GpuUnused));
        let v = decide(&e, &findings);
        assert_eq!(v.id, VerdictId::LaunchBound);
        assert!(v.summary.contains("GPU 0 busy (90% busy)"), "{}", v.summary);
        // Without the engine's activity, a low SM activity says nothing of queued work.
        e.gpus[1].profiling.as_mut().unwrap().gr_active_pct = None;
        assert!(tiny_kernel_gpus(&e).is_none());
        // Nor when the engine itself is mostly idle.
        e.gpus[1].profiling.as_mut().unwrap().gr_active_pct = Some(10.0);
        assert!(tiny_kernel_gpus(&e).is_none());
    }

    #[test]
    fn states_of_each_gpu() {
        let mut e = base(91.0);
        e.gpus.push(gpu(1, 0.0));
        e.gpus[1].mem_used_max_bytes = Some(15 << 20);
        e.gpus[1].util_p90_pct = Some(0.0);
        e.gpus.push(gpu(2, 40.0));
        assert_eq!(gpu_state(&e, &e.gpus[0]), Some(GpuState::Busy));
        assert_eq!(gpu_state(&e, &e.gpus[1]), Some(GpuState::Unused));
        assert_eq!(gpu_state(&e, &e.gpus[2]), Some(GpuState::Underused));
        let s = starving(base(30.0));
        assert_eq!(gpu_state(&s, &s.gpus[0]), Some(GpuState::Starving));
        let i = base(1.0);
        assert_eq!(
            gpu_state(&i, &i.gpus[0]),
            Some(GpuState::Idle),
            "alone: idle"
        );
    }

    #[test]
    fn one_of_two_gpus_unused() {
        let mut e = base(91.0);
        e.gpus.push(gpu(1, 0.0));
        e.gpus[1].mem_used_max_bytes = Some(15 << 20);
        e.gpus[1].util_p90_pct = Some(0.0);
        let f = gpu_unused(&e).unwrap();
        assert!(f.title.contains("uses 1 of 2 GPUs"), "{}", f.title);
        assert!(f.recommendation.contains("torchrun / DDP"));
        assert!(f.recommendation.contains("free the GPU for others"));
        assert_eq!(f.evidence.to_json()["unused_gpus"], serde_json::json!([1]));
        assert_eq!(f.expected_speedup, Some(2.0));
        // The pooled figure is GPU 0's: the unused one does not halve it.
        assert!((e.busy_fraction().unwrap() - 0.91).abs() < 1e-9);
        // A GPU holding 20 GiB at 0% is not "unused" (a hung rank, another job).
        e.gpus[1].mem_used_max_bytes = Some(20 << 30);
        assert!(gpu_unused(&e).is_none());
        // Every GPU at 0%: idle, not unused.
        assert!(gpu_unused(&base(0.0)).is_none());
    }

    #[test]
    fn busy_gpu_gets_levers_that_fit_the_evidence() {
        // 83% mean, p50 91%, an A100 with 20% of memory used.
        let mut e = base(83.0);
        e.gpus[0].util_p50_pct = Some(91.0);
        e.gpus[0].name = Some("NVIDIA A100-SXM4-80GB".into());
        e.gpus[0].mem_used_max_fraction = Some(0.2);
        let f = compute_bound(&e).unwrap();
        assert_eq!(f.severity, Severity::Info);
        assert!(f.title.contains("83% mean, p50 91%"), "{}", f.title);
        assert!(f.recommendation.contains("bf16"), "{}", f.recommendation);
        assert!(f.recommendation.contains("allow_tf32"));
        assert!(f.recommendation.contains("larger batch"));
        assert_eq!(f.evidence.to_json()["batch_scale_headroom"], 4.0);
        // A V100 near full memory: fp16, no batch lever.
        e.gpus[0].name = Some("Tesla V100-SXM2-32GB".into());
        e.gpus[0].mem_used_max_fraction = Some(0.9);
        let f = compute_bound(&e).unwrap();
        assert!(f.recommendation.contains("float16"), "{}", f.recommendation);
        assert!(!f.recommendation.contains("TF32 for"));
        assert!(!f.recommendation.contains("larger batch"));
        // A recording's compute capability wins over the name.
        e.gpus[0].compute_capability = Some([9, 0]);
        assert!(compute_bound(&e).unwrap().recommendation.contains("bf16"));
        // Not busy, or starving: no compute_bound.
        assert!(compute_bound(&base(60.0)).is_none());
        assert!(compute_bound(&starving(base(30.0))).is_none());
        // One busy GPU and one at 40%: not every GPU is busy.
        let mut m = base(97.0);
        m.gpus.push(gpu(1, 70.0));
        assert!(compute_bound(&m).is_none());
    }

    #[test]
    fn architectures_from_names() {
        for (n, m) in [
            ("NVIDIA H100 80GB HBM3", Some(9)),
            ("NVIDIA A100-SXM4-80GB", Some(8)),
            ("NVIDIA A10G", Some(8)),
            ("NVIDIA L4", Some(8)),
            ("NVIDIA RTX A6000", Some(8)),
            ("NVIDIA GeForce RTX 4090", Some(8)),
            ("NVIDIA GeForce RTX 3090", Some(8)),
            ("Tesla V100-SXM2-32GB", Some(7)),
            ("Tesla T4", Some(7)),
            ("NVIDIA GeForce RTX 2080 Ti", Some(7)),
            ("Tesla P100-PCIE-16GB", Some(6)),
            ("NVIDIA GeForce GTX 1080 Ti", Some(6)),
            ("Tesla K80", Some(3)),
            ("Fake GPU", None),
        ] {
            assert_eq!(arch_major_from_name(n), m, "{n}");
        }
    }
}
