//! Starvation: the GPU waits for its input. `input_bound` names the kind (too few workers, CPU
//! saturated, I/O bound, main process bound, or unknown when the host was not recorded) and
//! carries its host-side detail: one finding per cause. `main_process_bound` is a second cause
//! (a pinned training loop beside a starving input of another kind).

use super::{r1, r2, r3};
use crate::diagnose::evidence::{Evidence, Origin, SATURATED_PROC_PCT};
use crate::finding::{self, Basis, Finding, FindingId, InputKind, Item, Severity};

use super::STARVED_BUSY;
/// Busy fraction under which host-side evidence alone is enough to call starvation.
pub(crate) const LOW_BUSY: f64 = 0.60;

/// Does the utilization itself look starved: a repeating busy/idle pattern or two levels?
pub(crate) fn starving_signature(e: &Evidence) -> bool {
    let busy = match e.busy_fraction() {
        Some(b) => b,
        None => return false,
    };
    busy < STARVED_BUSY && (e.strongest_period().is_some_and(|p| p.is_strong()) || e.any_bimodal())
}

/// The I/O side is stalling: processes in D state, io pressure, or iowait.
pub(crate) fn io_stalled(e: &Evidence) -> bool {
    e.job.d_state_time_fraction.is_some_and(|f| f >= 0.2)
        || e.host.psi_io_some_mean_pct.is_some_and(|p| p >= 20.0)
        || e.host.iowait_mean_pct.is_some_and(|p| p >= 20.0)
}

/// Every core is busy (or CPU pressure is high).
pub(crate) fn cpu_full(e: &Evidence) -> bool {
    let by_mean = e.host.cpu_mean_pct.is_some_and(|c| c >= 85.0);
    let by_cores = match (e.host.idle_cores_mean, e.host.cpu_count) {
        (Some(idle), Some(n)) if n > 1 => {
            idle < 0.5 && e.host.busy_cores_mean.unwrap_or(0.0) >= n as f64 * 0.75
        }
        _ => false,
    };
    let by_psi = e.host.psi_cpu_some_mean_pct.is_some_and(|p| p >= 30.0)
        && e.host.cpu_mean_pct.is_some_and(|c| c >= 70.0);
    by_mean || by_cores || by_psi
}

/// Cores kept busy by processes outside the job, when they outweigh the job's own use
/// (a noisy neighbour): (others' cores, the job's cores).
pub(crate) fn other_load(e: &Evidence) -> Option<(f64, f64)> {
    if e.job.samples == 0 {
        return None;
    }
    let n = e.host.cpu_count? as f64;
    let host = e.host.cpu_mean_pct? / 100.0 * n;
    let job = e.job.cpu_mean_pct.unwrap_or(0.0) / 100.0;
    let others = host - job;
    (others >= 1.0 && others > job).then_some((others, job))
}

/// The training loop's own process is pinned at a core.
pub(crate) fn main_saturated(e: &Evidence) -> bool {
    e.job.main_saturated_fraction.is_some_and(|f| f >= 0.6)
        || e.job.main_cpu_mean_pct.is_some_and(|c| c >= 90.0)
}

/// Workers pinned at a core while cores sit idle.
pub(crate) fn workers_short(e: &Evidence) -> bool {
    let idle = e.host.idle_cores_mean.unwrap_or(0.0);
    let saturated = e.job.saturated_workers >= 1
        || e.job
            .worker_cpu_mean_pct
            .is_some_and(|c| c >= SATURATED_PROC_PCT);
    saturated && idle >= 1.0
}

/// The kind the host and process data name by their thresholds, `Unknown` when none is met.
fn kind_by_thresholds(e: &Evidence) -> InputKind {
    if io_stalled(e) {
        InputKind::IoBound
    } else if cpu_full(e) {
        InputKind::CpuSaturated
    } else if main_saturated(e) && e.job.workers_max == 0 {
        // num_workers=0: the loading happens in the main process.
        InputKind::MainProcess
    } else if workers_short(e) {
        InputKind::TooFewWorkers
    } else if main_saturated(e) {
        InputKind::MainProcess
    } else {
        InputKind::Unknown
    }
}

/// When no threshold is met but host or process data exist, the kind whose figures come
/// nearest to their threshold (each score is figure / threshold): a worker at 80% of a core
/// beside a core that is only mostly idle is still a worker short, not "unknown".
pub(crate) fn nearest_kind(e: &Evidence) -> Option<(InputKind, f64)> {
    if !e.has_host() && !e.has_job() {
        return None;
    }
    let io = [
        e.job.d_state_time_fraction.map(|f| f / 0.2),
        e.host.psi_io_some_mean_pct.map(|p| p / 20.0),
        e.host.iowait_mean_pct.map(|p| p / 20.0),
    ]
    .into_iter()
    .flatten()
    .fold(0.0, f64::max);
    let cpu = e.host.cpu_mean_pct.map_or(0.0, |c| c / 85.0);
    let main = e.job.main_cpu_mean_pct.map_or(0.0, |c| c / 90.0);
    let workers = if e.job.workers_max > 0 {
        e.job
            .worker_cpu_mean_pct
            .map_or(0.0, |c| c / SATURATED_PROC_PCT)
    } else {
        0.0
    };
    // Without workers the main process does the loading: its score stands for the loader's.
    let scored = [
        (InputKind::IoBound, io),
        (InputKind::CpuSaturated, cpu),
        (InputKind::TooFewWorkers, workers),
        (InputKind::MainProcess, main),
    ];
    scored
        .into_iter()
        .filter(|(_, s)| s.is_finite())
        .reduce(|a, b| if b.1 > a.1 { b } else { a })
}

/// Starvation and its kind, when there is starvation. With host or process data the kind is
/// always decided: by the thresholds, else the nearest one ([`nearest_kind`]).
pub(crate) fn classify(e: &Evidence) -> Option<InputKind> {
    let busy = e.busy_fraction()?;
    // The training loop's measured wait says it is not waiting for its input: whatever starves
    // the GPU, it is not the data (see `stacks`). The step markers' wait counts on its own: a
    // short trial (tune's baseline) may end before the stacks are read, and a busy host must
    // not then outvote the loop's exact measure.
    if super::stacks::loop_wait_pct(e).is_some_and(|w| w < super::stacks::NOT_WAITING_PCT) {
        return None;
    }
    let host_known = e.has_host() || e.has_job();
    let sig = starving_signature(e);
    let kind = kind_by_thresholds(e);
    let host_says = kind != InputKind::Unknown;
    let starving =
        (sig && (host_says || !host_known || busy < LOW_BUSY)) || (host_says && busy < LOW_BUSY);
    if !starving {
        return None;
    }
    if kind == InputKind::Unknown {
        if let Some((k, _)) = nearest_kind(e) {
            return Some(k);
        }
    }
    Some(kind)
}

/// The kind was named by a threshold (rather than as the nearest one).
pub(crate) fn kind_is_clear(e: &Evidence) -> bool {
    kind_by_thresholds(e) != InputKind::Unknown
}

/// `num_workers` worth trying: enough saturated workers to keep the GPU busy, within the cores
/// one GPU can use (leaving one for the training loop).
pub(crate) fn recommended_workers(e: &Evidence) -> Option<(u32, u32)> {
    let cores = e.cores_per_gpu()?;
    // Leave the training loop what it uses (at least a tenth of a core).
    let main = (e.job.main_cpu_mean_pct.unwrap_or(100.0) / 100.0).clamp(0.1, 1.0);
    let cap = ((cores - main + 0.15).floor() as i64).max(1) as u32;
    let busy = e.busy_fraction()?.max(0.05);
    let now = workers_per_gpu(e);
    let want = if now == 0 {
        4
    } else {
        // Saturated workers deliver at a fixed rate each: the GPU could take 1/busy times more.
        let per_worker = e.job.worker_cpu_mean_pct.unwrap_or(100.0).max(1.0) / 100.0;
        ((now as f64 * per_worker / busy).ceil() as u32).max(now + 1)
    };
    Some((want.min(cap).max(1), cap))
}

/// DataLoader workers per GPU (per rank): the job's workers split over the GPUs it drives.
pub(crate) fn workers_per_gpu(e: &Evidence) -> u32 {
    let gpus = e.measured_gpus().count().max(e.job.rank_pids.len()).max(1) as u32;
    e.job.workers_max.div_ceil(gpus)
}

fn speedup_bound(e: &Evidence) -> Option<f64> {
    e.busy_fraction()
        .filter(|b| *b > 0.02)
        .map(|b| r2((1.0 / b).min(50.0)))
}

fn with_signature(mut f: Finding, e: &Evidence) -> Finding {
    if let Some(b) = e.busy_fraction() {
        f = f.with(Item::GpuBusyFraction(r3(b)));
    }
    if let Some(p) = e.strongest_period() {
        f = f
            .with(Item::UtilPeriodS(r2(p.period_s)))
            .with(Item::UtilPeriodStrength(r2(p.strength)));
    }
    if let Some(s) = e
        .measured_gpus()
        .find_map(|g| g.util_split.filter(|s| s.is_bimodal()))
    {
        f = f
            .with(Item::UtilHighLevelPct(r1(s.high_mean_pct)))
            .with(Item::UtilLowLevelPct(r1(s.low_mean_pct)))
            .with(Item::UtilLowTimeFraction(r2(s.low_weight)));
    }
    f
}

const LOADER_FLAGS: &str = "pin_memory=True, persistent_workers=True, prefetch_factor=4";

/// `input_bound`: the GPU is starved by its input pipeline.
pub(crate) fn input_bound(e: &Evidence) -> Option<Finding> {
    // The training loop's measured data wait (Python stacks) is direct evidence, GPU or not.
    if let Some(f) = super::stacks::input_bound(e) {
        return Some(f);
    }
    let kind = classify(e)?;
    let busy = e.busy_fraction()?;
    let title = title_of(kind, &pattern_of(e, busy));
    let mut f = Finding::new(FindingId::InputBound, Severity::Critical, title)
        .kind(finding::Kind::Input(kind));
    let clear = kind_is_clear(e);
    if kind != InputKind::Unknown && !clear {
        // No threshold met: the kind is the nearest one, and says so.
        f = f.with(Item::KindBasis("nearest".into()));
    }
    f = f.basis(Basis::Input {
        kind_is_clear: clear,
    });
    f = with_job_figures(f, e);
    // One finding per cause: the host-side detail of the kind lives here, not in a second finding.
    match kind {
        InputKind::CpuSaturated => f = with_cpu_detail(f, e),
        InputKind::IoBound => f = with_io_detail(f, e),
        _ => {}
    }
    // Without host data the cause is not established when a batch too small for the GPU
    // explains the low utilization as well (memory mostly free): no bound from it.
    let speedup = if e.origin == Origin::GpuLog && memory_mostly_free(e) {
        None
    } else {
        speedup_bound(e)
    };
    let (f, speedup, rec) = fix(kind, e, f, speedup);
    Some(f.recommend(rec).speedup(speedup))
}

/// How the starvation shows in the utilization: a period, an alternation, or the busy share.
fn pattern_of(e: &Evidence, busy: f64) -> String {
    let period = e.strongest_period().filter(|p| p.is_strong());
    match (period, e.any_bimodal()) {
        (Some(p), _) => format!(
            "utilization repeats every {:.1} s between busy and starved",
            p.period_s
        ),
        (None, true) => "utilization alternates between busy and starved".to_string(),
        _ => format!("the GPU is busy only {:.0}% of the time", busy * 100.0),
    }
}

fn title_of(kind: InputKind, pattern: &str) -> String {
    match kind {
        InputKind::TooFewWorkers => format!("Input-bound: too few DataLoader workers ({pattern})"),
        InputKind::CpuSaturated => format!("Input-bound: the CPU is saturated ({pattern})"),
        InputKind::IoBound => format!("Input-bound: reading data is the bottleneck ({pattern})"),
        InputKind::MainProcess => {
            format!("Input-bound: the main process is pinned at a core ({pattern})")
        }
        InputKind::Unknown => format!("Input-bound: the GPU waits for data ({pattern})"),
    }
}

/// The signature, the cores per GPU and idle cores, and the job's worker figures.
fn with_job_figures(mut f: Finding, e: &Evidence) -> Finding {
    f = with_signature(f, e);
    if let Some(c) = e.cores_per_gpu() {
        f = f.with(Item::CoresPerGpu(r1(c)));
    }
    if let Some(i) = e.host.idle_cores_mean {
        f = f.with(Item::IdleCoresMean(r1(i)));
    }
    if e.job.samples > 0 {
        f = f
            .with(Item::Workers(e.job.workers_max))
            .with(Item::SaturatedWorkers(e.job.saturated_workers));
        if let Some(w) = e.job.worker_cpu_mean_pct {
            f = f.with(Item::WorkerCpuMeanPct(r1(w)));
        }
        if let Some(m) = e.job.main_cpu_mean_pct {
            f = f.with(Item::MainCpuMeanPct(r1(m)));
        }
    }
    f
}

/// The fix for the kind, with what it adds to the finding and to the speed-up bound.
fn fix(
    kind: InputKind,
    e: &Evidence,
    f: Finding,
    speedup: Option<f64>,
) -> (Finding, Option<f64>, String) {
    match kind {
        InputKind::TooFewWorkers | InputKind::MainProcess
            if e.job.workers_max == 0 || kind == InputKind::TooFewWorkers =>
        {
            workers_fix(e, f, speedup)
        }
        _ => {
            let mut f = f;
            let rec = match kind {
            InputKind::TooFewWorkers | InputKind::MainProcess => "The training loop's own process is pinned at a core: move per-sample \
                work (decoding, augmentation, collation) into DataLoader workers, avoid per-step host \
                syncs (.item(), .cpu(), printing tensors), and consider CUDA graphs or torch.compile to \
                cut Python overhead per step."
                .to_string(),
            InputKind::CpuSaturated => match other_load(e) {
                Some((others, job)) => {
                    f = f
                        .with(Item::OtherProcessesCores(r1(others)))
                        .with(Item::JobCores(r1(job)));
                    format!(
                        "Every core is busy, mostly with processes outside this job ({others:.1} cores \
                         vs the job's {job:.1}): find them (top, ps -eo pid,pcpu,args --sort=-pcpu), \
                         move them off this machine or give the job its own cores (taskset, cgroups \
                         cpusets, the scheduler's exclusive mode), then measure again."
                    )
                }
                None => "More workers will not help: every core is busy. Make each sample \
                    cheaper: decode and augment on the GPU (NVIDIA DALI, or torchvision.transforms.v2 \
                    on CUDA tensors), cache decoded samples, store pre-resized data, and use \
                    Pillow-SIMD or decode at reduced size."
                    .to_string(),
            },
            InputKind::IoBound => {
                let storage = "copy the dataset to local SSD or /dev/shm, use larger shards \
                    (WebDataset / TFRecord-style tar shards of 100 MB–1 GB instead of many small \
                    files), leave RAM for the page cache, and raise prefetch_factor so reads \
                    overlap compute.";
                match main_loading_workers(e) {
                    // The reads wait in the training process: workers overlap them first.
                    Some(n) => {
                        f = f.with(Item::RecommendedNumWorkers(n));
                        format!(
                            "Load batches in worker processes: DataLoader(dataset, batch_size=..., \
                             num_workers={n}, {LOADER_FLAGS}): the job has no worker process, so \
                             the training loop waits for every read itself; reads overlap across \
                             workers, so the count may exceed the cores (the GPU idles {:.0}% of \
                             the time, which takes about {n} workers to hide). Then, if it still \
                             waits: {storage}",
                            (1.0 - e.busy_fraction().unwrap_or(0.0)) * 100.0
                        )
                    }
                    None => format!("Reading data is the bottleneck: {storage}"),
                }
            }
            // Only reached without host and process data (with them the kind is always decided).
            InputKind::Unknown => match e.origin {
                Origin::GpuLog => format!(
                    "The GPU waits for data between steps. gpufeed reads no host or process data \
                     from a log: record the job with `gpufeed run -- <your command>` (or attach with `gpufeed \
                     record --pid PID`) to tell which part is short; meanwhile try more DataLoader \
                     workers with {LOADER_FLAGS}, and check that nothing in the training loop \
                     synchronizes with the host every step."
                ),
                Origin::Recording => format!(
                    "The GPU waits for data between steps. This recording has no host or process \
                     samples (/proc was not readable where it ran), so the short part cannot be \
                     named: try more DataLoader workers with {LOADER_FLAGS}, and check that nothing \
                     in the training loop synchronizes with the host every step."
                ),
            },
        };
            (f, speedup, rec)
        }
    }
}

/// More workers: how many (per GPU, within this GPU's share of the cores) and the sweep that
/// measures it; or, when the share is used up, cheaper samples.
fn workers_fix(
    e: &Evidence,
    mut f: Finding,
    mut speedup: Option<f64>,
) -> (Finding, Option<f64>, String) {
    let (n, cap) = recommended_workers(e).unwrap_or((4, 4));
    let now = workers_per_gpu(e);
    f = f
        .with(Item::WorkersPerGpu(now))
        .with(Item::RecommendedNumWorkers(n))
        .with(Item::MaxUsefulWorkers(cap));
    if now > 0 && e.job.worker_cpu_mean_pct.is_some() {
        // Each saturated worker adds about the same rate: the gain is bounded by it too.
        let gain = (n as f64 / now as f64).max(1.0);
        speedup = speedup.map(|s| r2(s.min(gain)));
    }
    let rec = if n > now {
        let code = format!("DataLoader(dataset, batch_size=..., num_workers={n}, {LOADER_FLAGS})");
        f = f.apply(&code);
        // Measure it right away, no code change: the current count, the advice, the cap.
        let mut tries = vec![now, n, cap];
        tries.sort_unstable();
        tries.dedup();
        let tries: Vec<String> = tries.iter().map(|w| w.to_string()).collect();
        format!(
            "Raise the DataLoader's worker count (per GPU/rank) from {now} to {n}: \
             {code}. Each \
             worker is saturating a core and cores are idle; this GPU's share of the \
             machine allows up to {cap} workers. Try it: `gpufeed sweep -L w {} \
             --dataloader num_workers={{w}} -- <your command>`.",
            tries.join(",")
        )
    } else {
        format!(
            "Workers are saturated but each GPU already has {now}, its share of the CPUs: \
             make each sample cheaper (GPU-side decoding/augmentation with NVIDIA DALI or \
             torchvision.transforms.v2 on CUDA tensors, cached decoded samples, \
             pre-resized data) and keep {LOADER_FLAGS}."
        )
    };
    (f, speedup, rec)
}

/// Workers for a job that loads in its training process (process data show no worker) while
/// reads stall: enough to hide the GPU's idle share, as [`super::stacks::workers_needed`] hides
/// a measured wait (not capped by the cores: waits overlap across workers).
fn main_loading_workers(e: &Evidence) -> Option<u32> {
    if !e.has_job() || e.job.workers_max > 0 {
        return None;
    }
    let idle_pct = (1.0 - e.busy_fraction()?) * 100.0;
    Some(super::stacks::workers_needed(idle_pct, 0, None))
}

/// Memory peaked under half of the total on the used GPUs: a batch or model far too small for
/// the GPU is a candidate cause of low utilization.
pub(crate) fn memory_mostly_free(e: &Evidence) -> bool {
    e.mem_used_max_fraction().is_some_and(|m| m < MOSTLY_FREE)
}

/// Peak memory share under which memory counts as mostly free.
pub(crate) const MOSTLY_FREE: f64 = 0.5;

/// The CPU side of kind `cpu_saturated` (once a separate `cpu_saturated` finding).
fn with_cpu_detail(mut f: Finding, e: &Evidence) -> Finding {
    if let Some(c) = e.host.cpu_mean_pct {
        f = f.with(Item::HostCpuMeanPct(r1(c)));
    }
    if let Some(c) = e.host.busy_cores_mean {
        f = f.with(Item::BusyCoresMean(r1(c)));
    }
    if let Some(n) = e.host.cpu_count {
        f = f.with(Item::CpuCount(n));
    }
    if let Some(p) = e.host.psi_cpu_some_mean_pct {
        f = f.with(Item::PsiCpuSomeMeanPct(r1(p)));
    }
    f
}

/// The storage side of kind `io_bound` (once a separate `io_bound` finding).
fn with_io_detail(mut f: Finding, e: &Evidence) -> Finding {
    if let Some(d) = e.job.d_state_time_fraction {
        f = f.with(Item::DStateTimeFraction(r2(d)));
    }
    if let Some(p) = e.host.psi_io_some_mean_pct {
        f = f.with(Item::PsiIoSomeMeanPct(r1(p)));
    }
    if let Some(p) = e.host.psi_io_full_mean_pct {
        f = f.with(Item::PsiIoFullMeanPct(r1(p)));
    }
    if let Some(p) = e.host.iowait_mean_pct {
        f = f.with(Item::IowaitMeanPct(r1(p)));
    }
    if let Some(r) = e.host.disk_read_mean_bytes_per_s {
        f = f.with(Item::DiskReadMeanBytesPerS(r.round()));
    }
    if let Some(r) = e.job.read_mean_bytes_per_s {
        f = f.with(Item::JobReadMeanBytesPerS(r.round()));
    }
    f
}

/// `main_process_bound`: the training loop's process is at 100 % of a core while the GPU starves.
pub(crate) fn main_process_bound(e: &Evidence) -> Option<Finding> {
    let kind = classify(e)?;
    // One finding per cause: a main-process kind is input_bound's own.
    if !main_saturated(e) || matches!(kind, InputKind::IoBound | InputKind::MainProcess) {
        return None;
    }
    let mut f = Finding::new(
        FindingId::MainProcessBound,
        Severity::Warning,
        "The training loop's own process is at 100% of a core",
    )
    .with(Item::Workers(e.job.workers_max));
    if let Some(c) = e.job.main_cpu_mean_pct {
        f = f.with(Item::MainCpuMeanPct(r1(c)));
    }
    if let Some(s) = e.job.main_saturated_fraction {
        f = f.with(Item::MainSaturatedFraction(r2(s)));
    }
    if let Some(p) = e.job.main_pid {
        f = f.with(Item::MainPid(p));
    }
    let rec = if e.job.workers_max == 0 {
        let n = recommended_workers(e).map(|r| r.0).unwrap_or(4);
        let code = format!("DataLoader(..., num_workers={n}, {LOADER_FLAGS})");
        f = f.apply(&code);
        format!(
            "Data is loaded in the main process (num_workers=0). Use {code} so loading runs \
             beside the training loop."
        )
    } else {
        "Move per-sample work out of the training loop into the Dataset (run by workers); avoid \
         host syncs each step (.item(), .cpu(), .numpy(), printing tensors); use \
         torch.compile or CUDA graphs to cut Python/launch overhead."
            .to_string()
    };
    Some(f.recommend(rec).speedup(speedup_bound(e)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::rules::fixtures::*;

    #[test]
    fn healthy_steady_run_is_not_starving() {
        let e = base(97.0);
        assert_eq!(classify(&e), None);
        assert!(input_bound(&e).is_none());
        assert!(main_process_bound(&e).is_none());
    }

    #[test]
    fn busy_gpu_with_saturated_workers_is_not_starving() {
        // Saturated workers keeping up: the GPU is busy, nothing to fix on the input side.
        let e = too_few_workers(base(96.0));
        assert!(input_bound(&e).is_none());
    }

    #[test]
    fn one_saturated_worker_with_idle_cores_wants_more_workers() {
        let e = too_few_workers(starving(base(30.0)));
        let f = input_bound(&e).unwrap();
        assert_eq!(f.evidence.to_json()["kind"], "too_few_workers");
        let n = f.evidence.to_json()["recommended_num_workers"]
            .as_u64()
            .unwrap();
        assert_eq!(
            n, 4,
            "ceil(1 worker / 0.325 busy) = 4, within 7 cores: {f:?}"
        );
        assert!(
            f.recommendation.contains("from 1 to 4"),
            "{}",
            f.recommendation
        );
        assert!(f.recommendation.contains("num_workers=4"));
        assert!(
            f.recommendation.contains(
                "Try it: `gpufeed sweep -L w 1,4,7 --dataloader num_workers={w} -- <your command>`"
            ),
            "{}",
            f.recommendation
        );
        assert!(f.recommendation.contains("pin_memory=True"));
        assert!(f.recommendation.contains("persistent_workers=True"));
        let s = f.expected_speedup.unwrap();
        assert!((s - 3.08).abs() < 0.01, "{s}");
        assert!(
            !f.evidence.to_json().contains_key("kind_basis"),
            "a clear kind"
        );
        assert!(main_process_bound(&e).is_none());
    }

    #[test]
    fn recommended_workers_respect_cores_per_gpu() {
        let mut e = too_few_workers(starving(base(30.0)));
        e.gpus.push(gpu(1, 30.0));
        e.gpus[1].busy_fraction = Some(0.1);
        e.gpus[0].busy_fraction = Some(0.1);
        // 8 cpus / 2 gpus = 4 per GPU → at most 3 workers.
        assert_eq!(recommended_workers(&e), Some((3, 3)));
        // Four saturated workers over two GPUs: two per rank, the cap is 3.
        e.job.workers_max = 4;
        let f = input_bound(&e).unwrap();
        assert_eq!(f.evidence.to_json()["workers_per_gpu"], 2);
        assert_eq!(f.evidence.to_json()["recommended_num_workers"], 3);
        assert!(f.expected_speedup.unwrap() >= 1.0);
        // Six: the cap is reached, the advice turns to cheaper samples, never a gain below 1.
        e.job.workers_max = 6;
        let f = input_bound(&e).unwrap();
        assert!(
            f.recommendation.contains("already has 3"),
            "{}",
            f.recommendation
        );
        assert!(f.expected_speedup.unwrap() >= 1.0);
        e.job.workers_max = 0;
        assert_eq!(recommended_workers(&e), Some((3, 3)));
    }

    #[test]
    fn a_loop_whose_step_markers_say_it_does_not_wait_is_not_starving_without_stacks() {
        // A busy host and a GPU 30 % busy would say cpu_saturated; the loop's own markers
        // (every step timed, 1 % waiting for its batch) say the input keeps up, stacks or not.
        let mut e = all_cores_busy(starving(base(30.0)));
        assert!(classify(&e).is_some());
        e.steps = Some(crate::diagnose::evidence::StepEvidence {
            steps: 80,
            data_wait_pct: Some(1.0),
            ..Default::default()
        });
        assert_eq!(e.python, None);
        assert_eq!(classify(&e), None);
        assert!(input_bound(&e).is_none());
        // A loop that does wait is still judged by the host's figures.
        e.steps.as_mut().unwrap().data_wait_pct = Some(40.0);
        assert!(classify(&e).is_some());
    }

    #[test]
    fn all_cores_busy_is_cpu_saturated() {
        let e = all_cores_busy(starving(base(30.0)));
        let f = input_bound(&e).unwrap();
        assert_eq!(f.evidence.to_json()["kind"], "cpu_saturated");
        assert!(f.recommendation.contains("More workers will not help"));
        assert!(f.recommendation.contains("DALI"));
        // The CPU detail is input_bound's own evidence: one finding for one cause.
        assert_eq!(f.evidence.to_json()["host_cpu_mean_pct"], 97.0);
        assert_eq!(f.evidence.to_json()["psi_cpu_some_mean_pct"], 45.0);
        assert_eq!(finding_ids(&e), [FindingId::InputBound]);
    }

    #[test]
    fn a_busy_host_with_a_light_job_points_at_the_neighbours() {
        let mut e = all_cores_busy(starving(base(30.0)));
        // The job uses half a core; 7.3 of 8 cores go to something else.
        e.job.cpu_mean_pct = Some(50.0);
        e.job.saturated_workers = 0;
        e.job.worker_cpu_mean_pct = Some(5.0);
        let f = input_bound(&e).unwrap();
        assert_eq!(f.evidence.to_json()["kind"], "cpu_saturated");
        assert_eq!(f.evidence.to_json()["other_processes_cores"], 7.3);
        assert!(
            f.recommendation.contains("outside this job"),
            "{}",
            f.recommendation
        );
        // A job that is itself the load gets the cheaper-samples advice.
        let e = all_cores_busy(starving(base(30.0)));
        assert!(other_load(&e).is_none());
    }

    #[test]
    fn d_state_and_io_pressure_is_io_bound() {
        let e = io_stuck(starving(base(30.0)));
        let f = input_bound(&e).unwrap();
        assert_eq!(f.evidence.to_json()["kind"], "io_bound");
        assert_eq!(f.evidence.to_json()["d_state_time_fraction"], 0.8);
        assert_eq!(f.evidence.to_json()["psi_io_some_mean_pct"], 55.0);
        assert!(
            f.recommendation.contains("local SSD"),
            "{}",
            f.recommendation
        );
        assert_eq!(finding_ids(&e), [FindingId::InputBound]);
    }

    #[test]
    fn io_stalls_without_workers_get_workers_first_then_storage() {
        let mut e = io_stuck(starving(base(30.0)));
        e.job.workers_max = 0;
        e.job.workers_seen = 0;
        let f = input_bound(&e).unwrap();
        assert_eq!(f.evidence.to_json()["kind"], "io_bound");
        // The GPU idles 67.5%: 0.675/0.325 = 2.08 -> 3 workers' time, + 1 hand-over.
        assert_eq!(f.evidence.to_json()["recommended_num_workers"], 4);
        let r = &f.recommendation;
        assert!(r.starts_with("Load batches in worker processes"), "{r}");
        assert!(r.contains("the count may exceed the cores"), "{r}");
        assert!(
            r.find("local SSD").unwrap() > r.find("Then, if it still waits").unwrap(),
            "{r}"
        );
        // With workers, the storage is the fix.
        let f = input_bound(&io_stuck(starving(base(30.0)))).unwrap();
        assert!(f
            .recommendation
            .starts_with("Reading data is the bottleneck"));
        assert!(!f.evidence.to_json().contains_key("recommended_num_workers"));
    }

    #[test]
    fn host_data_always_decides_the_kind() {
        // One worker just under "saturated" beside a core that is only mostly idle (a 2-core
        // machine shared with gpufeed): no threshold is met, the nearest kind is named.
        let mut e = starving(base(30.0));
        e.host.cpu_count = Some(2);
        e.host.idle_cores_mean = Some(0.7);
        e.host.cpu_mean_pct = Some(58.0);
        e.job.workers_max = 1;
        e.job.workers_seen = 1;
        e.job.worker_cpu_mean_pct = Some(82.0);
        e.job.saturated_workers = 0;
        e.job.main_cpu_mean_pct = Some(20.0);
        let f = input_bound(&e).unwrap();
        assert_eq!(f.evidence.to_json()["kind"], "too_few_workers", "{f:?}");
        assert_eq!(f.evidence.to_json()["kind_basis"], "nearest");
        // The fix never asks for what the recording already has.
        assert!(
            !f.recommendation.contains("gpufeed run"),
            "{}",
            f.recommendation
        );
        assert!(!f.recommendation.contains("Record the host"));
    }

    #[test]
    fn a_log_names_no_kind_and_says_how_to_get_one() {
        let e = as_log(starving(base(30.0)), 0.2);
        let f = input_bound(&e).unwrap();
        assert_eq!(f.evidence.to_json()["kind"], "unknown");
        assert!(
            f.recommendation.contains("gpufeed run --"),
            "{}",
            f.recommendation
        );
        // A recording that lacks host samples is not told to record the host.
        let mut r = as_log(starving(base(30.0)), 0.2);
        r.origin = Origin::Recording;
        let f = input_bound(&r).unwrap();
        assert!(
            !f.recommendation.contains("gpufeed run"),
            "{}",
            f.recommendation
        );
    }

    #[test]
    fn num_workers_zero_with_a_pinned_main_process() {
        let mut e = starving(base(30.0));
        e.job.workers_max = 0;
        e.job.workers_seen = 0;
        e.job.worker_cpu_mean_pct = None;
        e.job.main_cpu_mean_pct = Some(99.0);
        e.job.main_saturated_fraction = Some(0.95);
        let f = input_bound(&e).unwrap();
        assert_eq!(f.evidence.to_json()["kind"], "main_process_bound");
        assert!(
            f.recommendation.contains("num_workers=4"),
            "{}",
            f.recommendation
        );
        // One cause, one finding: the main-process kind is input_bound's.
        assert!(main_process_bound(&e).is_none());
    }

    #[test]
    fn pinned_main_with_workers_is_main_process_bound() {
        let mut e = starving(base(30.0));
        e.job.main_cpu_mean_pct = Some(99.0);
        e.job.main_saturated_fraction = Some(0.9);
        let f = input_bound(&e).unwrap();
        assert_eq!(f.evidence.to_json()["kind"], "main_process_bound");
        assert!(f.recommendation.contains(".item()"), "{}", f.recommendation);
        assert!(main_process_bound(&e).is_none());
        // A pinned loop beside a worker shortage is a second cause: its own finding.
        let mut e = too_few_workers(e);
        e.job.main_saturated_fraction = Some(0.9);
        assert_eq!(
            input_bound(&e).unwrap().evidence.to_json()["kind"],
            "too_few_workers"
        );
        assert!(main_process_bound(&e)
            .unwrap()
            .recommendation
            .contains(".item()"));
    }

    #[test]
    fn log_without_host_data_still_sees_the_signature() {
        let e = as_log(starving(base(30.0)), 0.2);
        let f = input_bound(&e).unwrap();
        assert_eq!(f.evidence.to_json()["kind"], "unknown");
        assert!(f.recommendation.contains("gpufeed run"));
    }

    #[test]
    fn low_flat_utilization_without_host_signals_is_not_input_bound() {
        let e = base(40.0);
        assert!(input_bound(&e).is_none());
    }
}
