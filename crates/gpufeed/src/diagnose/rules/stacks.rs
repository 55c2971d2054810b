//! Rules on the training loop's Python stacks: `input_bound` from the measured data wait (with or
//! without a GPU), and `sync_bound` from host–device synchronisation.

use super::{r1, r2};
use crate::diagnose::evidence::Evidence;
use crate::diagnose::evidence::{Hotspot, PythonEvidence};
use crate::finding::{Finding, FindingId, Item, Kind, Severity};
use crate::sample::pyphase::{DataLibrary, StageKind};

/// Share of the training thread's time waiting for data from which the loop is input-bound.
pub(crate) const DATA_WAIT_PCT: f64 = 20.0;
/// ... and from which it is critical.
pub(crate) const DATA_WAIT_CRITICAL_PCT: f64 = 40.0;
/// A measured data wait under which the loop is not waiting for its input, whatever the GPU's
/// utilization pattern suggests.
pub(crate) const NOT_WAITING_PCT: f64 = 10.0;
/// Share of the training thread's time in host–device syncs that makes a finding.
pub(crate) const SYNC_PCT: f64 = 15.0;
/// Share of the training loop one host-side cause must take to be a finding (`host_bound`) and
/// to decide the verdict, where it also exceeds the data wait.
pub(crate) const HOST_PCT: f64 = 25.0;
/// GPU busy fraction above which a measured data wait is overlapped by GPU work (the loop runs
/// ahead of the device) rather than starving it.
pub(crate) const GPU_BUSY_TRUSTED: f64 = super::STARVED_BUSY;

/// The kind of input bottleneck the stacks show (defined in [`crate::finding`], beside the
/// finding that carries it).
use crate::finding::{StackKind, WaitSource};

/// The wait the job's step markers measured (exact, every step timed), if they sent waits.
fn step_wait(e: &Evidence) -> Option<f64> {
    e.steps.as_ref().and_then(|s| s.data_wait_pct)
}

/// The measured data wait, when the stacks give one that can be judged, and its source: the
/// probe's exact wait wins over the stacks' estimate when the job sent step markers with waits.
pub(crate) fn data_wait_from(e: &Evidence) -> Option<(f64, WaitSource, &PythonEvidence)> {
    let p = e.python.as_ref()?;
    match step_wait(e) {
        Some(w) => Some((w, WaitSource::StepProbe, p)),
        None => Some((p.data_wait_pct?, WaitSource::PythonStacks, p)),
    }
}

/// The training loop's measured data wait, stacks or not: the step markers' wait (a short run
/// may end before any stack is read), else the stacks' estimate.
pub(crate) fn loop_wait_pct(e: &Evidence) -> Option<f64> {
    step_wait(e).or_else(|| e.python.as_ref()?.data_wait_pct)
}

/// Does GPU utilization contradict a measured wait (busy although the loop waits)?
pub(crate) fn gpu_overlaps_wait(e: &Evidence) -> Option<f64> {
    e.busy_fraction().filter(|b| *b >= GPU_BUSY_TRUSTED)
}

/// Share of the training loop spent starting and stopping DataLoader workers from which their
/// restart every epoch is the first fix.
pub(crate) const WORKER_RESTART_PCT: f64 = 10.0;
/// Generations of workers (worker processes seen ÷ the most alive at once) from which they are
/// taken to be started anew every epoch.
pub(crate) const WORKER_GENERATIONS: u32 = 3;

/// The DataLoader workers alive at once. Every worker process the job had counts only when they
/// did not come and go: where more were seen than were ever alive at once (workers started anew
/// every epoch), the count at once.
pub(crate) fn workers_at_once(e: &Evidence, p: &PythonEvidence) -> u32 {
    if e.job.workers_max > 0 && e.job.workers_seen > e.job.workers_max {
        e.job.workers_max
    } else {
        p.loader_processes.max(e.job.workers_max)
    }
}

/// Workers started anew every epoch (`persistent_workers=False` with short epochs), when
/// starting and stopping them is a large part of the loop.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Restarts {
    /// Worker processes started over the recording.
    pub started: u32,
    /// The most alive at once (`num_workers`, summed over ranks).
    pub at_once: u32,
    /// Generations of workers: about the epochs begun.
    pub epochs: u32,
    pub start_stop: crate::diagnose::evidence::WorkerStartStop,
}

pub(crate) fn restarts(e: &Evidence, p: &PythonEvidence) -> Option<Restarts> {
    let at_once = e.job.workers_max;
    let ss = p.worker_start_stop?;
    if at_once == 0
        || e.job.workers_seen < WORKER_GENERATIONS * at_once
        || ss.loop_pct < WORKER_RESTART_PCT
    {
        return None;
    }
    Some(Restarts {
        started: e.job.workers_seen,
        at_once,
        epochs: (e.job.workers_seen as f64 / at_once as f64).round() as u32,
        start_stop: ss,
    })
}

/// The kind. Loading in the training process comes first, whatever its slow stage (CPU work,
/// I/O waits, the dataset's own code): worker processes are its first fix. Workers started anew
/// every epoch come next: keeping them is a one-word fix.
pub(crate) fn kind(e: &Evidence, p: &PythonEvidence) -> StackKind {
    if p.data_in_main_pct.is_some_and(|x| x >= 50.0) {
        StackKind::MainProcessLoading
    } else if restarts(e, p).is_some() {
        StackKind::WorkersRestarted
    } else if loading_waits(e, p) {
        StackKind::IoBound
    } else if p.loader_processes > 0
        && p.loader_busy_pct.is_some_and(|b| b >= 70.0)
        && e.host.idle_cores_mean.is_some_and(|i| i >= 1.0)
    {
        StackKind::TooFewWorkers
    } else {
        StackKind::SlowStage
    }
}

/// Share of loading blocked in reads or system calls (sleeps, network, locks) from which loading
/// waits rather than computes.
pub(crate) const LOADING_WAITS_PCT: f64 = 50.0;

/// Loading mostly waits (blocked in a read or a system call) rather than computes; the job's
/// processes in D state a fifth of the time count as waiting too.
pub(crate) fn loading_waits(e: &Evidence, p: &PythonEvidence) -> bool {
    p.data_io_pct.is_some_and(|x| x >= LOADING_WAITS_PCT)
        || e.job.d_state_time_fraction.is_some_and(|f| f >= 0.2)
}

pub(crate) fn cores(e: &Evidence) -> u32 {
    e.cores_per_gpu()
        .map(|c| c.floor() as u32)
        .or(e.host.cpus_allowed)
        .or(e.host.cpu_count)
        .unwrap_or(2)
        .max(1)
}

/// Workers busy less than this share of their time are not what the loop waits for: more of
/// them would not help.
pub(crate) const WORKERS_LIMIT_BUSY_PCT: f64 = 50.0;

/// Workers that would hide a data wait of `wait_pct`, from what the stacks measured.
///
/// The loop waits `w` of its time; without the wait it would run `1/(1-w)` times as fast. Today
/// `now` workers, each busy loading `busy` of the time, supply `now*busy` worker-seconds of
/// loading per second; at the faster rate the same work per step takes `now*busy/(1-w)` busy
/// workers (at least one more than now: workers with slack while the loop waits are bursty).
/// With `num_workers=0` the training thread loads itself, `w` of its time: `w/(1-w)` workers,
/// plus one for the hand-over between processes. Workers busy under
/// [`WORKERS_LIMIT_BUSY_PCT`] are not the limit: the answer is `now`. An unknown busy share
/// counts as fully busy. The machine's cores are not a cap here ([`workers_caveat`] says when
/// the answer exceeds them).
pub(crate) fn workers_needed(wait_pct: f64, now: u32, busy_pct: Option<f64>) -> u32 {
    let w = (wait_pct / 100.0).clamp(0.0, 0.98);
    if now == 0 {
        return (w / (1.0 - w) - 1e-9).ceil().max(0.0) as u32 + 1;
    }
    let busy = busy_pct.unwrap_or(100.0).clamp(0.0, 100.0);
    if busy < WORKERS_LIMIT_BUSY_PCT {
        return now;
    }
    let need = (now as f64 * busy / 100.0 / (1.0 - w) - 1e-9).ceil() as u32;
    need.max(now + 1)
}

/// Workers that fit beside the training loop on `cores` without sharing a core with it.
pub(crate) fn workers_cap(cores: u32) -> u32 {
    cores.saturating_sub(1).max(1)
}

/// Who has the `cores` the advice counts: the machine, or each rank of a multi-process job
/// (the node's cores divided among its `ranks`).
fn cores_owner(cores: u32, ranks: usize) -> String {
    if ranks >= 2 {
        format!(
            "each of the {ranks} ranks has {} of the machine's",
            count(cores, "core", "cores")
        )
    } else {
        format!("this machine has {}", count(cores, "core", "cores"))
    }
}

/// The caveat when `n` workers exceed what `cores` hold beside the loop: measure before trusting.
/// `ranks`: the job's ranks on this node (0 or 1 for a single process).
pub(crate) fn workers_caveat(n: u32, now: u32, cores: u32, ranks: usize) -> Option<String> {
    let cap = workers_cap(cores);
    (n > cap).then(|| {
        let mut vals = vec![now, cap, n];
        vals.sort_unstable();
        vals.dedup();
        let list: Vec<String> = vals.iter().map(u32::to_string).collect();
        format!(
            " Caveat: {}, so beyond {} they share cores with the training \
             loop; measure it: `gpufeed sweep -L w {} --dataloader num_workers={{w}} -- <your \
             command>`.",
            cores_owner(cores, ranks),
            count(cap, "worker", "workers"),
            list.join(",")
        )
    })
}

/// The slow stage of a webdataset pipeline, in webdataset's terms: its shards and its
/// `.decode(...)`; `None` for stages whose fix is the same whatever the library.
fn webdataset_advice(h: &Hotspot) -> Option<String> {
    Some(match h.kind {
        StageKind::Decode => format!(
            "decoding images in the webdataset pipeline ({} at {}) is the slow stage: write the \
             shards with images already resized to the training size (wds.ShardWriter), or \
             leave .decode() out for the images and decode whole batches on the GPU \
             (torchvision.io.decode_jpeg(list_of_tensors, device='cuda')); with workers, \
             .decode(\"torchrgb8\") and uint8 batches keep the copy small",
            h.function,
            h.at()
        ),
        StageKind::Image => format!(
            "{} ({}) on every sample of the webdataset pipeline is the slow stage: resize once \
             when writing the shards (wds.ShardWriter), so that the pipeline only decodes, or \
             resize uint8 batches on the GPU (torchvision.transforms.v2)",
            h.function,
            h.at()
        ),
        StageKind::Read => format!(
            "reading the tar shards ({} at {}) is the slow stage: keep the shards on local NVMe \
             or in RAM, write at least as many shards as workers (times ranks) so that each \
             worker streams its own, and use more workers to overlap the reads",
            h.function,
            h.at()
        ),
        _ => return None,
    })
}

/// The slow stages Hugging Face datasets adds, in its terms (`map` once, `with_format`).
fn datasets_advice(h: &Hotspot) -> String {
    match h.kind {
        StageKind::ArrowFormat => format!(
            "converting Arrow rows to Python objects and tensors (Hugging Face datasets' {} at \
             {}) is the slow stage: ask for the columns as tensors at once \
             (ds.with_format(\"torch\", columns=[...]) with only the columns the model reads), \
             store fixed-size values as arrays (an Array2D/Array3D feature) rather than nested \
             lists, and let the DataLoader read whole batches (datasets >= 2.14 gives it \
             __getitems__)",
            h.function,
            h.at()
        ),
        _ => format!(
            "{} ({}) runs on every batch as it is read (Hugging Face datasets' set_transform / \
             with_transform) and is the slow stage: where its result is the same every epoch, \
             run it once ahead of training with ds.map({}, batched=True, num_proc=N) (then \
             ds.save_to_disk) and train on ds.with_format(\"torch\"); keep only random \
             augmentation per batch, on tensors rather than Python loops",
            h.function,
            h.at(),
            h.function
        ),
    }
}

/// A transform stage's fix: torchvision v2 (on tensors: the GPU), v1 (on PIL images: v2), any
/// other.
fn transform_advice(h: &Hotspot) -> String {
    match () {
        _ if h.file.contains("torchvision/transforms/v2/") => format!(
            "the torchvision v2 transform {} ({}) is the slow stage: it already works on tensors, \
             so move it to the GPU: send the uint8 batch to the device first and apply the v2 \
             transforms there (to the whole batch, or per sample on the GPU), decoding with \
             torchvision.io.decode_jpeg(..., device='cuda'); on the CPU, keep images uint8 until \
             the last step (v2.ToDtype at the end)",
            h.function,
            h.at()
        ),
        _ if h.file.contains("torchvision/transforms/transforms.py") => format!(
            "the torchvision v1 transform {} ({}) is the slow stage: v1 transforms work on one PIL \
             image at a time; switch to torchvision.transforms.v2 on uint8 tensors \
             (torchvision.io.decode_image, then the same transforms from v2): faster on the CPU, \
             and they run on the GPU on whole batches",
            h.function,
            h.at()
        ),
        _ => format!(
            "the transform {} is the slow stage: run it on the GPU on batched tensors \
             (torchvision.transforms.v2 / kornia / DALI), cache its output if it is deterministic, \
             or make it cheaper",
            h.function
        ),
    }
}

/// What to do about the slow stage; `waits`: loading mostly waits (reads, system calls).
/// A stage whose time is in native code the user's function calls (C, C++ or Rust that
/// released the GIL): the Python line that calls it, and how to make that call cheaper.
fn native_advice(h: &Hotspot) -> String {
    format!(
        "{} ({}{}) is the slow stage: {:.0}% of its time is in a compiled library it calls \
         there (C, C++ or Rust, running with the GIL released), not in its Python; see \
         which call with `py-spy dump --native --pid <worker pid>`, then make that call cheaper: \
         once per batch instead of once per sample, the library's GPU version, or done once \
         offline",
        h.name(),
        h.at(),
        h.code
            .as_deref()
            .map(|c| format!(": `{c}`"))
            .unwrap_or_default(),
        h.native_pct.unwrap_or(0.0)
    )
}

fn stage_advice(h: &Hotspot, waits: bool) -> String {
    if h.native_under_user_code() {
        return native_advice(h);
    }
    if h.library == Some(DataLibrary::Webdataset) {
        if let Some(a) = webdataset_advice(h) {
            return a;
        }
    }
    match h.kind {
        StageKind::Getitem if waits => format!(
            "the dataset's own code ({} at {}) is the slow stage and mostly waits: find what it \
             waits on (`py-spy dump`, `strace -f -e trace=%file,read`), read from local NVMe or \
             RAM, and cache or prefetch what it fetches per sample",
            h.function,
            h.at()
        ),
        StageKind::Decode => format!(
            "JPEG/PNG decoding ({}) is the slow stage: store images pre-resized to the training \
             size, use PIL's draft mode (img.draft('RGB', size)) or pillow-simd, or decode on the \
             GPU (torchvision.io.decode_jpeg(..., device='cuda'), NVIDIA DALI)",
            h.function
        ),
        StageKind::Image => format!(
            "{} ({}) is the slow stage: resize/convert once offline and store the result, or do \
             it on the GPU on tensors (torchvision.transforms.v2)",
            h.function,
            h.at()
        ),
        StageKind::Transform => transform_advice(h),
        StageKind::Array => format!(
            "array work in {} ({}) is the slow stage: vectorise it, avoid per-sample copies and \
             dtype conversions, or move it to the GPU",
            h.function,
            h.at()
        ),
        StageKind::Read => format!(
            "reading files ({} at {}) is the slow stage: copy the data to local NVMe or RAM, pack \
             small files into shards (WebDataset, tar), and keep enough workers to overlap reads",
            h.function,
            h.at()
        ),
        StageKind::Getitem => format!(
            "the dataset's own code ({} at {}) is the slow stage: profile that function, cache \
             what it recomputes per sample, or precompute it offline",
            h.function,
            h.at()
        ),
        StageKind::Collate if h.function == "default_collate" => format!(
            "PyTorch's default_collate ({}) is the slow stage: it walks each sample's nested \
             Python structures (lists, dicts, numbers) one element at a time; return tensors or \
             numpy arrays from __getitem__ instead of lists, or give the DataLoader a collate_fn \
             that builds the batch at once",
            h.at()
        ),
        StageKind::Collate => format!(
            "the collate function {} ({}) is the slow stage: it runs once per batch; build the \
             batch with tensor operations (torch.nn.utils.rnn.pad_sequence, torch.stack, a \
             preallocated torch.full and slice assignment) instead of Python loops over \
             elements, or pad and bucket the data once offline",
            h.function,
            h.at()
        ),
        StageKind::Sampler => format!(
            "the sampler {} ({}) is the slow stage: it runs in the training process whatever \
             num_workers is, so more workers cannot hide it; draw each epoch's indices at once \
             with tensor operations (torch.randperm, torch.multinomial) or precompute them",
            h.function,
            h.at()
        ),
        StageKind::Tokenize => format!(
            "tokenizing ({} at {}) is the slow stage: tokenize a whole batch in one call in the \
             collate_fn (tokenizer(texts, padding=True, truncation=True, \
             return_tensors=\"pt\")) rather than one text per __getitem__, use a fast (Rust) \
             tokenizer (AutoTokenizer.from_pretrained(..., use_fast=True)), or tokenize the \
             dataset once ahead of training (datasets' .map(tokenize, batched=True, \
             num_proc=N)) and load token ids",
            h.function,
            h.at()
        ),
        StageKind::ArrowFormat | StageKind::OnTheFly => datasets_advice(h),
        StageKind::PinMemory => format!(
            "copying batches into pinned memory ({} at {}) is the slow stage: send smaller \
             batches to the pin-memory thread (uint8 images, not float32; convert on the GPU), \
             or measure with pin_memory=False",
            h.function,
            h.at()
        ),
    }
}

/// `input_bound` from the measured data wait; `None` when the stacks do not show one.
pub(crate) fn input_bound(e: &Evidence) -> Option<Finding> {
    let (wait, source, p) = data_wait_from(e)?;
    if wait < DATA_WAIT_PCT || gpu_overlaps_wait(e).is_some() {
        return None;
    }
    let k = kind(e, p);
    let hot = p.data_hotspots.first();
    let workers = workers_at_once(e, p);
    let severity = if wait >= DATA_WAIT_CRITICAL_PCT {
        Severity::Critical
    } else {
        Severity::Warning
    };
    let f = Finding::new(
        FindingId::InputBound,
        severity,
        title(k, wait, hot, workers),
    )
    .kind(Kind::PythonStacks(Some(k)))
    .with(Item::DataWaitPct(r1(wait)))
    .with(Item::DataWaitSource(source.as_str().into()));
    let f = with_loading_figures(f, e, p, source, workers);
    let (f, rec) = fix(k, f, e, p, wait, workers);
    let speedup = r2((100.0 / (100.0 - wait).max(2.0)).min(50.0));
    Some(f.recommend(rec).speedup(Some(speedup)))
}

fn title(k: StackKind, wait: f64, hot: Option<&Hotspot>, workers: u32) -> String {
    let named = hot
        .map(|h| format!("; slowest stage: {} ({:.0}% of loading)", h.name(), h.pct))
        .unwrap_or_default();
    match k {
        StackKind::MainProcessLoading => format!(
            "Input-bound: the training loop loads its own data (num_workers=0) and waits for it \
             {wait:.0}% of its time{named}"
        ),
        StackKind::TooFewWorkers => format!(
            "Input-bound: too few data workers: the training loop waits for data {wait:.0}% of its \
             time while {} leave cores idle{named}",
            if workers == 1 {
                "1 busy worker".to_string()
            } else {
                format!("{workers} busy workers")
            }
        ),
        StackKind::IoBound => format!(
            "Input-bound: reading data is the bottleneck: the training loop waits for data \
             {wait:.0}% of its time{named}"
        ),
        StackKind::WorkersRestarted => format!(
            "Input-bound: the DataLoader's workers are started anew every epoch: the training \
             loop waits for data {wait:.0}% of its time{named}"
        ),
        StackKind::SlowStage => {
            format!("Input-bound: the training loop waits for data {wait:.0}% of its time{named}")
        }
    }
}

/// The stacks' own estimate beside the probe's, the hot stage, the workers' busy share, where
/// loading happens, idle cores, and the GPU's agreeing busy share.
fn with_loading_figures(
    mut f: Finding,
    e: &Evidence,
    p: &PythonEvidence,
    source: WaitSource,
    workers: u32,
) -> Finding {
    let hot = p.data_hotspots.first();
    if source == WaitSource::StepProbe {
        if let Some(s) = p.data_wait_pct {
            f = f.with(Item::StacksDataWaitPct(r1(s)));
        }
    }
    if let Some(m) = &p.main {
        f = f.with(Item::TrainingThreadSamples(m.samples));
    }
    if let Some(h) = hot {
        f = f
            .with(Item::HotStage(h.function.as_str().into()))
            .with(Item::HotStageAt(h.at()))
            .with(Item::HotStagePct(r1(h.pct)))
            .with(Item::HotStageKind(h.kind.as_str().into()));
        // Where the stage is named as the native code it calls (the verdict says so too).
        if let Some(n) = h.native_pct.filter(|_| h.native_under_user_code()) {
            f = f.with(Item::HotStageNativePct(r1(n)));
        }
    }
    f = f.with(Item::Workers(workers));
    if let Some(r) = restarts(e, p) {
        f = f
            .with(Item::WorkersStarted(r.started))
            .with(Item::WorkerGenerations(r.epochs))
            .with(Item::WorkerStartStopPct(r1(r.start_stop.loop_pct)))
            .with(Item::WorkerStartStopS(r1(r.start_stop.seconds)));
    }
    if let Some(b) = p.loader_busy_pct {
        f = f.with(Item::WorkerBusyPct(r1(b)));
    }
    if let Some(x) = p.data_in_main_pct {
        f = f.with(Item::LoadingInMainPct(r1(x)));
    }
    if let Some(x) = p.data_io_pct {
        f = f.with(Item::LoadingBlockedOrReadingPct(r1(x)));
    }
    if let Some(i) = e.host.idle_cores_mean {
        f = f.with(Item::IdleCoresMean(r1(i)));
    }
    if let Some(b) = e.busy_fraction() {
        f = f
            .with(Item::GpuBusyFraction(super::r3(b)))
            .with(Item::Agreement("gpu_and_stacks_agree".into()));
    }
    f
}

/// The fix for the kind (`c` cores), with the worker counts it adds to the finding.
fn fix(
    k: StackKind,
    mut f: Finding,
    e: &Evidence,
    p: &PythonEvidence,
    wait: f64,
    workers: u32,
) -> (Finding, String) {
    let c = cores(e);
    let cr = (c, e.job.rank_pids.len());
    let waits = loading_waits(e, p);
    // The slowest stage's fix, and what it costs (said once, after it).
    let work = loading_work(wait, workers, p.loader_busy_pct);
    let stage = (p.data_hotspots.first()).map(|h| (stage_advice(h, waits), stage_cost(h, work)));
    let rec = match k {
        StackKind::MainProcessLoading => {
            let n = workers_needed(wait, 0, None);
            f = f
                .with(Item::RecommendedNumWorkers(n))
                .with(Item::WorkersCapCores(workers_cap(c)));
            let code = format!(
                "DataLoader(dataset, batch_size=..., num_workers={n}, {})",
                loader_flags(e)
            );
            f = f.apply(&code);
            // The first fix whatever the slow stage is: the stage is the next step.
            format!(
                "Load batches in worker processes: {code}: the training loop loads {wait:.0}% of \
                 its time, which takes about {} to hide. Today the training loop loads every \
                 sample itself.{}{}",
                count(n, "worker", "workers"),
                cores_note(n, 0, cr, waits, p.data_io_pct, loading_work(wait, 0, None)),
                stage
                    .map(|(s, cost)| format!(" Then, if it still waits: {s}.{cost}"))
                    .unwrap_or_default()
            )
        }
        StackKind::WorkersRestarted => {
            let r = restarts(e, p).expect("the kind says so");
            let ss = r.start_stop;
            let code = format!(
                "DataLoader(dataset, batch_size=..., num_workers={workers}, \
                 persistent_workers=True)"
            );
            f = f
                .with(Item::PersistentWorkersSavesS(r1(ss.seconds)))
                .apply(&code);
            format!(
                "Keep the workers between epochs: {code}. Today they are started anew \
                 every epoch: {} started, {} alive at once ({} generations, about one per \
                 epoch), and starting and stopping them takes {:.0}% of the training loop \
                 ({} of {}, about {:.0} ms an epoch), which persistent workers save, besides part \
                 of the wait for each epoch's first batches.{}",
                count(r.started, "worker process", "worker processes"),
                r.at_once,
                r.epochs,
                ss.loop_pct,
                crate::units::duration(r1(ss.seconds)),
                crate::units::duration(r1(ss.loop_seconds)),
                ss.seconds * 1000.0 / f64::from(r.epochs.max(1)),
                stage
                    .map(|(s, cost)| format!(" Then, if it still waits: {s}.{cost}"))
                    .unwrap_or_default()
            )
        }
        StackKind::TooFewWorkers | StackKind::IoBound
            if workers_needed(wait, workers, p.loader_busy_pct) > workers =>
        {
            let n = workers_needed(wait, workers, p.loader_busy_pct);
            f = f
                .with(Item::RecommendedNumWorkers(n))
                .with(Item::WorkersCapCores(workers_cap(c)))
                .apply(format!(
                    "DataLoader(dataset, batch_size=..., num_workers={n}, {})",
                    loader_flags(e)
                ));
            format!(
                "Raise num_workers from {workers} to {n}: each worker is busy loading {} of the \
                 time and the loop still waits {wait:.0}%, so {n} workers are needed to keep \
                 up.{}{}",
                p.loader_busy_pct
                    .map(|b| format!("{b:.0}%"))
                    .unwrap_or_else(|| "all".into()),
                cores_note(n, workers, cr, waits, p.data_io_pct, work),
                stage
                    .map(|(s, cost)| format!(" Also: {s}.{cost}"))
                    .unwrap_or_default()
            )
        }
        StackKind::TooFewWorkers | StackKind::IoBound => stage
            .map(|(s, cost)| format!("{}.{cost}", capitalise(&s)))
            .unwrap_or_else(|| {
                "Loading waits on reads: copy the data to local NVMe or RAM, pack small files into \
             shards (WebDataset, tar), and keep enough workers to overlap reads."
                    .into()
            }),
        StackKind::SlowStage => match stage {
            Some((s, cost)) => format!(
                "{}.{cost} The workers ({workers}) cannot keep up at this cost per sample{}.",
                capitalise(&s),
                more_workers(workers, c, waits, work)
            ),
            None => format!(
                "Make each sample cheaper to load, or raise num_workers (up to {}).",
                c.saturating_sub(1).max(1)
            ),
        },
    };
    (f, rec)
}

/// CPU loading of `work` workers' time that needs more than 1.5 times the cores beside the loop
/// (workers only share the same cores, whatever their number): what it needs and what there is,
/// as the fixes say it.
fn beyond_the_cores(work: f64, cores: u32) -> Option<String> {
    let spare = workers_cap(cores);
    (work > spare as f64 * 1.5).then(|| {
        format!(
            "loading needs about {work:.1} cores' time beside the training loop, which has {} to \
             spare",
            count(spare, "core", "cores")
        )
    })
}

/// After "the workers cannot keep up" of a slow stage: that no number of workers can where the
/// loading is CPU work beyond the `cores` beside the loop (more workers only share them), else
/// how many more the cores would take.
fn more_workers(workers: u32, cores: u32, waits: bool, work: f64) -> String {
    if let Some(need) = beyond_the_cores(work, cores).filter(|_| !waits) {
        format!(", and on these cores no number of workers can: {need}")
    } else if cores > workers + 1 {
        format!("; more workers (up to {}) would also help", cores - 1)
    } else {
        String::new()
    }
}

/// What the slowest stage `h` costs, said once after its fix: its milliseconds per sample and
/// share of loading, and the workers' time it alone takes at the loop's pace (`work`: the
/// workers' time all loading takes, as [`loading_work`]). Whether any number of workers can
/// give that on these cores is said once, for all loading, by [`cores_note`] or
/// [`more_workers`]. Empty without a share.
fn stage_cost(h: &Hotspot, work: f64) -> String {
    if !(h.pct > 0.0 && work.is_finite() && work > 0.0) {
        return String::new();
    }
    let share = work * h.pct / 100.0;
    let took = match h.ms_per_sample {
        Some(ms) => format!(
            "{} per sample ({:.0}% of loading)",
            crate::units::ms(ms),
            h.pct
        ),
        None => format!("{:.0}% of loading", h.pct),
    };
    // In hundredths of a worker below one: "0.0 of one worker's time" read as nothing at all.
    let time = if share < 0.01 {
        "under 1% of one worker's time".to_string()
    } else if share < 0.95 {
        format!("about {:.0}% of one worker's time", share * 100.0)
    } else {
        format!("about {share:.1} workers' time")
    };
    format!(
        " {} takes {took}: {time} at the loop's pace.",
        capitalise(&h.name())
    )
}

/// The DataLoader settings beside `num_workers` that can take effect on the recorded machine:
/// no `pin_memory` where gpufeed knows there is no GPU (PyTorch ignores it there, with a warning).
pub(crate) fn loader_flags(e: &Evidence) -> &'static str {
    if e.no_gpu.is_some() {
        "persistent_workers=True"
    } else {
        "pin_memory=True, persistent_workers=True"
    }
}

fn count(n: u32, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Workers' time (worker-seconds per second) that loading takes once the loop no longer waits
/// `wait_pct`: `w/(1-w)` when the loop loads itself (`now` = 0), else `now*busy/(1-w)`, as in
/// [`workers_needed`].
fn loading_work(wait_pct: f64, now: u32, busy_pct: Option<f64>) -> f64 {
    let w = (wait_pct / 100.0).clamp(0.0, 0.98);
    let today = if now == 0 {
        w
    } else {
        now as f64 * busy_pct.unwrap_or(100.0).clamp(0.0, 100.0) / 100.0
    };
    today / (1.0 - w)
}

/// What `n` workers mean for `cores`: when loading waits (`blocked_pct` of it blocked, when
/// measured), waits overlap across workers and the count may exceed the cores (the CPU the
/// workers need, `work` workers' time of which the unblocked share computes, is said when it
/// can be); otherwise the caveat when they exceed what the cores hold beside the loop.
fn cores_note(
    n: u32,
    now: u32,
    (cores, ranks): (u32, usize),
    waits: bool,
    blocked_pct: Option<f64>,
    work: f64,
) -> String {
    if !waits {
        let mut note = workers_caveat(n, now, cores, ranks).unwrap_or_default();
        if let Some(need) = beyond_the_cores(work, cores).filter(|_| !note.is_empty()) {
            note.push_str(&format!(
                " On these cores no number of workers can hide it: {need}, so the lasting fix is \
                 the slow stage itself (cheaper, on the GPU, or done once offline)."
            ));
        }
        return note;
    }
    let cpu = blocked_pct.map(|io| work * (1.0 - io / 100.0));
    let mut tries = vec![now, n.div_ceil(2).max(now), n];
    tries.sort_unstable();
    tries.dedup();
    let tries: Vec<String> = tries.iter().map(u32::to_string).collect();
    format!(
        " Loading waits {}(reads, sleeps, system calls) and waits overlap across workers, so the \
         count may exceed {}{}. Try it: `gpufeed sweep -L w {} --dataloader \
         num_workers={{w}} -- <your command>`.",
        blocked_pct
            .map(|b| format!("{b:.0}% of its time "))
            .unwrap_or_default(),
        if ranks >= 2 {
            format!(
                "the {} of each of the {ranks} ranks",
                count(cores, "core", "cores")
            )
        } else {
            format!("this machine's {}", count(cores, "core", "cores"))
        },
        cpu.map(|c| if c < 0.05 {
            format!(": {n} workers need under a tenth of a core of CPU between them")
        } else {
            format!(
                ": {n} workers need about {c:.1} {} of CPU between them",
                if (c - 1.0).abs() < 0.05 {
                    "core"
                } else {
                    "cores"
                }
            )
        })
        .unwrap_or_default(),
        tries.join(",")
    )
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().collect::<String>() + c.as_str(),
        None => String::new(),
    }
}

/// `sync_bound`: the training thread spends a large share of its time synchronising with the
/// device (`.item()`, `.cpu()`, `torch.cuda.synchronize`), named by file and line.
pub(crate) fn sync_bound(e: &Evidence) -> Option<Finding> {
    let p = e.python.as_ref()?;
    let m = p.main.as_ref()?;
    let share = m.phases_pct.sync;
    if share < SYNC_PCT {
        return None;
    }
    // Syncs that are the loop's main host-side cause are `host_bound`'s, named by the call.
    if p.host_causes()
        .first()
        .is_some_and(|(c, pct, _)| *c == crate::finding::HostCause::HostSync && *pct >= HOST_PCT)
    {
        return None;
    }
    let site = p.sync_sites.first();
    let where_ = site
        .map(|s| {
            let file = std::path::Path::new(&s.file)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_else(|| s.file.clone());
            format!("{file}:{}", s.line)
        })
        .unwrap_or_else(|| "unknown".into());
    let code = site.and_then(|s| s.code.clone());
    let mut f =
        Finding::new(
            FindingId::SyncBound,
            Severity::Warning,
            format!(
            "The training loop waits for the GPU in host–device syncs {share:.0}% of its time, \
             most at {where_}{}",
            code.as_ref().map(|c| format!(" (`{c}`)")).unwrap_or_default()
        ),
        )
        .kind(Kind::PythonStacks(None))
        .with(Item::SyncPct(r1(share)))
        .with(Item::SyncAt(where_.as_str().into()));
    if let Some(s) = site {
        f = f.with(Item::SyncSitePct(r1(s.pct)));
    }
    Some(
        f.recommend(
            "Keep values on the GPU between steps: accumulate losses and metrics as tensors and \
             call .item()/.cpu()/.tolist() every N steps (or once per epoch); drop \
             torch.cuda.synchronize() outside timing code; log asynchronously.",
        )
        .speedup(Some(r2((100.0 / (100.0 - share).max(2.0)).min(50.0)))),
    )
}

/// `straggler` (multi-process jobs): one rank waits for its data far longer than the others,
/// and in synchronous training they all wait for it in the collective.
pub(crate) fn slow_rank(e: &Evidence) -> Option<Finding> {
    let p = e.python.as_ref()?;
    let s = p.slow_rank.as_ref()?;
    let r = p.ranks.iter().find(|r| r.pid == s.pid)?;
    let who = r.label();
    let stage = r.data_hotspots.first();
    let mut f = Finding::new(
        FindingId::Straggler,
        Severity::Warning,
        format!(
            "{who} starves the others: it waits for data {:.0}% of its time, the other ranks \
             {:.0}% (they wait for {who} in the collective)",
            s.data_wait_pct, s.others_data_wait_pct
        ),
    )
    .kind(Kind::PythonStacks(None))
    .with(Item::StragglerPid(s.pid))
    .with(Item::DataWaitPct(s.data_wait_pct))
    .with(Item::OthersDataWaitPct(s.others_data_wait_pct));
    if let Some(rank) = s.rank {
        f = f.with(Item::StragglerRank(rank));
    }
    if let Some(h) = stage {
        f = f.with(Item::SlowestStage(h.function.as_str().into()));
    }
    let what = stage.map_or(String::new(), |h| {
        format!(" (its slowest data stage: {})", h.function)
    });
    Some(
        f.recommend(format!(
            "Give {who} the same input work as the others{what}: check its data shard (larger \
             or slower files), its DataLoader arguments (num_workers) and what else runs on its \
             cores; the whole job runs at its pace."
        ))
        .speedup(Some(r2(((100.0 - s.others_data_wait_pct)
            / (100.0 - s.data_wait_pct).max(2.0))
        .clamp(1.0, 50.0)))),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::evidence::{PhasesPct, PyMain, RankLoop, SlowRank, SyncSite};
    use crate::sample::pystacks::PyStatus;

    fn py(wait: f64) -> PythonEvidence {
        PythonEvidence {
            status: PyStatus::Ok,
            rate_hz: Some(100.0),
            samples: 5000,
            sampled_processes: 1,
            main: Some(PyMain {
                pid: 100,
                tid: 100,
                thread_name: Some("MainThread".into()),
                samples: 1000,
                phases_pct: PhasesPct {
                    data_wait: wait,
                    forward: 100.0 - wait,
                    ..Default::default()
                },
            }),
            data_hotspots: vec![Hotspot {
                function: "ImageFile.load".into(),
                file: "/v/site-packages/PIL/ImageFile.py".into(),
                line: 300,
                pct: 61.0,
                ms_per_sample: None,
                core_wait_ms_per_sample: None,
                native_pct: None,
                code: None,
                kind: StageKind::Decode,
                library: None,
                samples: 610,
                work_s: 6.1,
                runq_s: None,
            }],
            data_wait_pct: Some(wait),
            data_in_main_pct: Some(95.0),
            loader_processes: 0,
            loader_busy_pct: None,
            data_io_pct: Some(2.0),
            sync_sites: vec![],
            loop_code: vec![],
            host_calls: vec![],
            checkpoint_saves: None,
            no_loop_sites: vec![],
            worker_start_stop: None,
            ranks: vec![],
            slow_rank: None,
            main_waited_for: false,
            ranks_unread: vec![],
            detail: None,
        }
    }

    fn no_gpu(p: PythonEvidence) -> Evidence {
        let mut e = crate::diagnose::rules::fixtures::base(50.0);
        e.gpus.clear();
        e.job.workers_max = 0;
        e.host.idle_cores_mean = Some(0.5);
        e.python = Some(p);
        e
    }

    #[test]
    fn main_process_loading_without_a_gpu_names_the_stage_and_the_fix() {
        let f = input_bound(&no_gpu(py(58.0))).unwrap();
        assert_eq!(f.evidence.to_json()["kind"], "main_process_loading");
        assert_eq!(f.evidence.to_json()["data_wait_pct"], 58.0);
        assert_eq!(f.evidence.to_json()["hot_stage"], "ImageFile.load");
        assert_eq!(f.severity, Severity::Critical);
        assert!(
            f.recommendation.contains("num_workers="),
            "{}",
            f.recommendation
        );
        assert!(f.recommendation.contains("decod"), "{}", f.recommendation);
        assert!(!f.evidence.to_json().contains_key("agreement"));
    }

    /// A real ImageFolder-like job with `num_workers=2` and short epochs
    /// started 80 worker processes in 40 epochs, 2 alive at once; the fix counted all 80.
    fn restarted(start_stop_pct: f64) -> Evidence {
        let mut p = py(88.0);
        p.data_in_main_pct = Some(0.0);
        p.loader_processes = 24;
        p.loader_busy_pct = Some(81.0);
        p.data_hotspots[0].kind = StageKind::Getitem;
        p.data_hotspots[0].function = "Images.__getitem__".into();
        p.data_hotspots[0].file = "/home/u/train.py".into();
        p.data_hotspots[0].line = 11;
        p.worker_start_stop = Some(crate::diagnose::evidence::WorkerStartStop {
            loop_pct: start_stop_pct,
            seconds: 16.5 * start_stop_pct / 100.0,
            loop_seconds: 16.5,
        });
        let mut e = no_gpu(p);
        e.job.workers_max = 2;
        e.job.workers_seen = 80;
        e.host.idle_cores_mean = Some(0.0);
        e
    }

    #[test]
    fn workers_started_every_epoch_get_persistent_workers_with_the_time_it_saves() {
        let e = restarted(50.0);
        let f = input_bound(&e).unwrap();
        assert_eq!(f.evidence.to_json()["kind"], "workers_restarted");
        assert_eq!(
            f.evidence.to_json()["workers"],
            2,
            "alive at once, not the 80 seen"
        );
        assert_eq!(f.evidence.to_json()["workers_started"], 80);
        assert_eq!(f.evidence.to_json()["worker_generations"], 40);
        assert_eq!(f.evidence.to_json()["worker_start_stop_pct"], 50.0);
        assert_eq!(f.evidence.to_json()["persistent_workers_saves_s"], 8.3);
        let r = &f.recommendation;
        assert!(
            r.starts_with(
                "Keep the workers between epochs: DataLoader(dataset, batch_size=..., \
                 num_workers=2, persistent_workers=True). Today they are started anew every \
                 epoch: 80 worker processes started, 2 alive at once (40 generations"
            ),
            "{r}"
        );
        assert!(
            r.contains("takes 50% of the training loop (8.3 s of 16.5 s, about 206 ms an epoch)"),
            "{r}"
        );
        assert!(
            r.contains("Then, if it still waits: the dataset's own code (Images.__getitem__ at train.py:11)"),
            "{r}"
        );
        assert!(f.title.contains("started anew every epoch"), "{}", f.title);
    }

    #[test]
    fn workers_that_come_and_go_are_counted_at_once() {
        // Start and stop are a small part of the loop: the stage is the fix, with the workers
        // alive at once.
        let e = restarted(4.0);
        let f = input_bound(&e).unwrap();
        assert_eq!(f.evidence.to_json()["kind"], "slow_stage");
        assert_eq!(f.evidence.to_json()["workers"], 2);
        assert!(!f.evidence.to_json().contains_key("workers_started"));
        assert!(
            f.recommendation.contains("The workers (2) cannot keep up"),
            "{}",
            f.recommendation
        );
        // Two generations are no per-epoch restart.
        let mut e = restarted(50.0);
        e.job.workers_seen = 4;
        let f = input_bound(&e).unwrap();
        assert_ne!(f.evidence.to_json()["kind"], "workers_restarted");
        // Workers that all ran at once: every loader process counts (a recording without the
        // job's process tree has only the stacks' count).
        let mut e = restarted(50.0);
        e.job.workers_seen = 2;
        e.job.workers_max = 0;
        let p = e.python.as_mut().unwrap();
        p.loader_processes = 3;
        assert_eq!(workers_at_once(&e, e.python.as_ref().unwrap()), 3);
    }

    #[test]
    fn the_probes_exact_wait_wins_over_the_stacks_estimate() {
        let mut e = no_gpu(py(58.0));
        let f = input_bound(&e).unwrap();
        assert_eq!(f.evidence.to_json()["data_wait_source"], "python_stacks");
        assert!(!f.evidence.to_json().contains_key("stacks_data_wait_pct"));
        e.steps = Some(crate::diagnose::evidence::StepEvidence {
            steps: 200,
            steps_per_s: Some(20.0),
            data_wait_pct: Some(12.0),
            items: None,
            samples_per_s: None,
            ..Default::default()
        });
        // 12% measured per step: under the threshold, whatever the stacks estimated.
        assert!(input_bound(&e).is_none());
        e.steps.as_mut().unwrap().data_wait_pct = Some(47.5);
        let f = input_bound(&e).unwrap();
        assert_eq!(f.evidence.to_json()["data_wait_pct"], 47.5);
        assert_eq!(f.evidence.to_json()["data_wait_source"], "step_probe");
        assert_eq!(f.evidence.to_json()["stacks_data_wait_pct"], 58.0);
        // Steps without waits leave the stacks' figure in charge.
        e.steps.as_mut().unwrap().data_wait_pct = None;
        assert_eq!(
            input_bound(&e).unwrap().evidence.to_json()["data_wait_source"],
            "python_stacks"
        );
    }

    #[test]
    fn a_small_wait_is_no_finding_and_a_busy_gpu_overrides_the_stacks() {
        assert!(input_bound(&no_gpu(py(10.0))).is_none());
        let mut e = no_gpu(py(50.0));
        e.gpus = vec![crate::diagnose::rules::fixtures::gpu(0, 95.0)];
        assert!(input_bound(&e).is_none());
        e.gpus = vec![crate::diagnose::rules::fixtures::gpu(0, 40.0)];
        let f = input_bound(&e).unwrap();
        assert_eq!(f.evidence.to_json()["agreement"], "gpu_and_stacks_agree");
    }

    #[test]
    fn kinds() {
        let mut p = py(50.0);
        p.data_in_main_pct = Some(3.0);
        p.loader_processes = 2;
        p.loader_busy_pct = Some(97.0);
        let mut e = no_gpu(p.clone());
        e.host.idle_cores_mean = Some(3.0);
        e.host.cpu_count = Some(8);
        let f = input_bound(&e).unwrap();
        assert_eq!(f.evidence.to_json()["kind"], "too_few_workers");
        assert_eq!(f.evidence.to_json()["recommended_num_workers"], 4);
        e.host.idle_cores_mean = Some(0.2);
        assert_eq!(
            input_bound(&e).unwrap().evidence.to_json()["kind"],
            "slow_stage"
        );
        p.data_io_pct = Some(80.0);
        assert_eq!(
            input_bound(&no_gpu(p)).unwrap().evidence.to_json()["kind"],
            "io_bound"
        );
    }

    #[test]
    fn workers_needed_follow_the_measured_busy_share_not_the_cores() {
        // num_workers=0: the loop's own loading share, plus one for the hand-over.
        assert_eq!(workers_needed(50.0, 0, None), 2);
        assert_eq!(workers_needed(60.0, 0, None), 3);
        assert_eq!(workers_needed(80.0, 0, None), 5);
        // 2 workers at 98% while the loop waits half its time: 2*0.98/0.5 = 3.92 -> 4, whatever
        // the cores (the 2-core box whose sweep found 4 best).
        assert_eq!(workers_needed(50.0, 2, Some(98.0)), 4);
        assert_eq!(workers_needed(50.0, 2, None), 4);
        // 4 workers at 90%, 20% waiting: 4.5 -> 5.
        assert_eq!(workers_needed(20.0, 4, Some(90.0)), 5);
        // Slack in the workers while the loop waits: one more, not fewer.
        assert_eq!(workers_needed(20.0, 4, Some(70.0)), 5);
        // Workers mostly idle are not the limit.
        assert_eq!(workers_needed(50.0, 2, Some(40.0)), 2);
        // The cap is a caveat only.
        assert_eq!(workers_cap(2), 1);
        assert_eq!(workers_cap(1), 1);
        assert!(workers_caveat(3, 0, 8, 1).is_none());
        let c = workers_caveat(4, 2, 2, 1).unwrap();
        assert!(
            c.contains("2 cores, so beyond 1 worker they") && c.contains("-L w 1,2,4"),
            "{c}"
        );
    }

    #[test]
    fn main_process_loading_on_two_cores_recommends_what_the_wait_needs_with_a_caveat() {
        let mut e = no_gpu(py(60.0));
        e.host.cpu_count = Some(2);
        let f = input_bound(&e).unwrap();
        assert_eq!(f.evidence.to_json()["recommended_num_workers"], 3);
        assert_eq!(f.evidence.to_json()["workers_cap_cores"], 1);
        assert!(
            f.recommendation.contains("num_workers=3"),
            "{}",
            f.recommendation
        );
        assert!(f
            .recommendation
            .contains("Caveat: this machine has 2 cores"));
    }

    /// The loop loads its own batches and its `__getitem__` mostly waits (a 3 ms read per
    /// sample): 84% waiting, 79% of loading blocked, 2 cores, no NVIDIA driver.
    fn waiting_in_main() -> Evidence {
        let mut p = py(84.0);
        p.data_io_pct = Some(79.0);
        p.data_in_main_pct = Some(99.0);
        p.data_hotspots[0] = Hotspot {
            function: "Jpegs.__getitem__".into(),
            file: "/home/u/train.py".into(),
            line: 9,
            pct: 99.0,
            ms_per_sample: None,
            core_wait_ms_per_sample: None,
            native_pct: None,
            code: None,
            kind: StageKind::Getitem,
            library: None,
            samples: 990,
            work_s: 9.9,
            runq_s: None,
        };
        let mut e = no_gpu(p);
        e.host.cpu_count = Some(2);
        e.no_gpu = Some(crate::diagnose::evidence::NoGpu::NoDriver);
        e
    }

    #[test]
    fn loading_in_the_training_process_gets_workers_first_whatever_the_stage() {
        let e = waiting_in_main();
        let f = input_bound(&e).unwrap();
        // Not io_bound: where the loading runs decides the first fix.
        assert_eq!(f.evidence.to_json()["kind"], "main_process_loading");
        // 84% of the loop's time loading: 0.84/0.16 = 5.25 -> 6 workers' time, + 1 hand-over.
        assert_eq!(f.evidence.to_json()["recommended_num_workers"], 7);
        let r = &f.recommendation;
        assert!(
            r.starts_with("Load batches in worker processes: DataLoader(dataset, batch_size=..., num_workers=7,"),
            "{r}"
        );
        // Waits overlap across workers: more workers than cores, with the CPU they need
        // (5.25 workers' time x 21% computing = 1.1 cores) and the sweep that measures it.
        assert!(
            r.contains("waits overlap across workers, so the count may exceed this machine's 2 cores: 7 workers need about 1.1 cores of CPU"),
            "{r}"
        );
        assert!(
            r.contains("`gpufeed sweep -L w 0,4,7 --dataloader num_workers={w}"),
            "{r}"
        );
        assert!(
            !r.contains("Caveat"),
            "no core caveat for waiting workers: {r}"
        );
        // The slow stage is the next step, after the workers.
        let then = r.find(
            "Then, if it still waits: the dataset's own code (Jpegs.__getitem__ at train.py:9)",
        );
        assert!(
            then.is_some_and(|i| i > r.find("num_workers=7").unwrap()),
            "{r}"
        );
        assert!(r.contains("mostly waits"), "{r}");
        assert!(!r.contains("profile that function"), "{r}");
        // The same loop computing (decode) instead: workers first too, with the core caveat.
        let mut c = waiting_in_main();
        c.python.as_mut().unwrap().data_io_pct = Some(3.0);
        c.python.as_mut().unwrap().data_hotspots[0].kind = StageKind::Decode;
        let r = input_bound(&c).unwrap().recommendation;
        assert!(r.starts_with("Load batches in worker processes"), "{r}");
        assert!(r.contains("Caveat: this machine has 2 cores"), "{r}");
        assert!(
            r.contains("Then, if it still waits: JPEG/PNG decoding"),
            "{r}"
        );
        // Processes in D state mean waiting as well.
        let mut d = waiting_in_main();
        d.python.as_mut().unwrap().data_io_pct = None;
        d.job.d_state_time_fraction = Some(0.5);
        let f = input_bound(&d).unwrap();
        assert_eq!(f.evidence.to_json()["kind"], "main_process_loading");
        assert!(!f.recommendation.contains("Caveat"), "{}", f.recommendation);
    }

    #[test]
    fn no_gpu_only_settings_where_the_machine_has_no_gpu() {
        let e = waiting_in_main();
        let r = input_bound(&e).unwrap().recommendation;
        assert!(!r.contains("pin_memory"), "{r}");
        assert!(r.contains("persistent_workers=True"), "{r}");
        // Without knowing (GPU sampling disabled, NVML failed) the GPU settings stay.
        let mut u = waiting_in_main();
        u.no_gpu = None;
        let r = input_bound(&u).unwrap().recommendation;
        assert!(
            r.contains("pin_memory=True, persistent_workers=True"),
            "{r}"
        );
    }

    #[test]
    fn waiting_workers_that_are_busy_get_more_workers_before_the_stage() {
        let mut p = py(50.0);
        p.data_in_main_pct = Some(2.0);
        p.data_io_pct = Some(85.0);
        p.loader_processes = 2;
        p.loader_busy_pct = Some(95.0);
        p.data_hotspots[0].kind = StageKind::Read;
        let mut e = no_gpu(p.clone());
        e.host.cpu_count = Some(2);
        e.host.idle_cores_mean = Some(0.0);
        let f = input_bound(&e).unwrap();
        assert_eq!(f.evidence.to_json()["kind"], "io_bound");
        // 2 workers at 95% while the loop waits half its time: 3.8 -> 4, beyond the cores.
        assert_eq!(f.evidence.to_json()["recommended_num_workers"], 4);
        let r = &f.recommendation;
        assert!(r.starts_with("Raise num_workers from 2 to 4"), "{r}");
        // 2 x 95% / 0.5 = 3.8 workers' time, 15% of it computing: 0.6 cores.
        assert!(
            r.contains("waits overlap across workers, so the count may exceed this machine's 2 cores: 4 workers need about 0.6 cores of CPU"),
            "{r}"
        );
        assert!(r.contains("Also: reading files"), "{r}");
        // Workers mostly idle are not the limit: the reads are.
        p.loader_busy_pct = Some(30.0);
        let r = input_bound(&no_gpu(p)).unwrap().recommendation;
        assert!(r.starts_with("Reading files"), "{r}");
    }

    #[test]
    fn sync_bound_names_the_line() {
        let mut p = py(5.0);
        if let Some(m) = p.main.as_mut() {
            m.phases_pct.sync = 30.0;
        }
        p.sync_sites = vec![SyncSite {
            function: "train".into(),
            file: "/home/u/train.py".into(),
            line: 42,
            code: Some("total += loss.item()".into()),
            pct: 28.0,
        }];
        let f = sync_bound(&no_gpu(p)).unwrap();
        assert_eq!(f.evidence.to_json()["sync_at"], "train.py:42");
        assert!(f.title.contains("loss.item()"));
        assert!(sync_bound(&no_gpu(py(5.0))).is_none());
    }

    fn rank(rank: u32, pid: u32, wait: f64) -> RankLoop {
        RankLoop {
            rank: Some(rank),
            pid,
            tid: pid as u64,
            samples: 1000,
            phases_pct: PhasesPct {
                data_wait: wait,
                backward: 100.0 - wait,
                ..Default::default()
            },
            data_wait_pct: wait,
            steps_per_s: None,
            data_hotspots: py(wait).data_hotspots,
        }
    }

    #[test]
    fn a_rank_that_starves_the_others_is_named_with_its_stage() {
        let mut p = py(17.0);
        p.ranks = vec![rank(0, 100, 17.0), rank(1, 101, 68.0)];
        assert!(
            slow_rank(&no_gpu(p.clone())).is_none(),
            "no slow rank found"
        );
        p.slow_rank = Some(SlowRank {
            rank: Some(1),
            pid: 101,
            data_wait_pct: 68.0,
            others_data_wait_pct: 17.0,
        });
        let f = slow_rank(&no_gpu(p)).unwrap();
        assert_eq!(f.id, FindingId::Straggler);
        assert!(
            f.title.starts_with("rank 1 starves the others"),
            "{}",
            f.title
        );
        assert_eq!(f.evidence.to_json()["straggler_rank"], 1);
        assert_eq!(f.evidence.to_json()["slowest_stage"], "ImageFile.load");
        // 83 % of the others' time is work; the slow rank's 32 %: up to 2.6x.
        assert_eq!(f.expected_speedup, Some(2.59));
    }

    #[test]
    fn num_workers_advice_divides_the_cores_among_the_ranks() {
        let mut e = crate::diagnose::rules::fixtures::base(30.0);
        e.host.cpu_count = Some(64);
        e.host.cpus_allowed = None;
        assert_eq!(e.cores_per_gpu(), Some(64.0));
        e.job.rank_pids = (100..108).collect();
        assert_eq!(e.cores_per_gpu(), Some(8.0), "8 ranks share 64 cores");
        e.job.workers_max = 16;
        assert_eq!(crate::diagnose::rules::input::workers_per_gpu(&e), 2);
        let (_, cap) = crate::diagnose::rules::input::recommended_workers(&e).unwrap();
        assert!(cap <= 8, "never num_workers=63 for one of 8 ranks: {cap}");
    }

    /// The user's function whose running time is mostly native code it calls (GIL released):
    /// named as that native code, with the line that calls it, and the fix is that call.
    #[test]
    fn a_stage_in_native_code_is_named_under_its_caller_with_the_line() {
        let mut e = waiting_in_main();
        let p = e.python.as_mut().unwrap();
        p.data_io_pct = None;
        let h = &mut p.data_hotspots[0];
        h.native_pct = Some(91.5);
        h.code = Some("digest = hashlib.sha256(self.blob).digest()".into());
        let f = input_bound(&e).unwrap();
        let r = &f.recommendation;
        assert!(
            r.contains(
                "native code under Jpegs.__getitem__ (train.py:9: `digest = \
                 hashlib.sha256(self.blob).digest()`) is the slow stage: 92% of its time is in a \
                 compiled library it calls there"
            ),
            "{r}"
        );
        assert!(r.contains("py-spy dump --native"), "{r}");
        assert!(
            f.title
                .contains("slowest stage: native code under Jpegs.__getitem__"),
            "{}",
            f.title
        );
        assert_eq!(f.evidence.to_json()["hot_stage_native_pct"], 91.5);
        assert_eq!(f.evidence.to_json()["hot_stage"], "Jpegs.__getitem__");
        // Mostly its own Python: named as before, and no native figure.
        e.python.as_mut().unwrap().data_hotspots[0].native_pct = Some(20.0);
        let f = input_bound(&e).unwrap();
        assert!(
            !f.recommendation.contains("native code"),
            "{}",
            f.recommendation
        );
        assert!(f.evidence.to_json().get("hot_stage_native_pct").is_none());
    }

    /// A slow stage's workers that cannot keep up: beyond the cores no number can (CPU work);
    /// loading that waits, or within reach, gets the cores' count as before.
    #[test]
    fn a_slow_stage_beyond_the_cores_is_said_to_be_beyond_any_workers() {
        assert_eq!(
            more_workers(2, 2, false, 20.8),
            ", and on these cores no number of workers can: loading needs about 20.8 cores' \
             time beside the training loop, which has 1 core to spare"
        );
        assert_eq!(more_workers(2, 2, true, 20.8), "");
        assert_eq!(
            more_workers(2, 8, false, 4.0),
            "; more workers (up to 7) would also help"
        );
        assert_eq!(more_workers(2, 2, false, 1.4), "");
    }

    /// The slowest stage's cost is said once, after its fix: ms per sample, share of loading,
    /// and the workers' time it alone takes at the loop's pace.
    #[test]
    fn the_slowest_stage_says_what_it_costs_and_the_workers_time_it_takes() {
        let mut e = waiting_in_main();
        let p = e.python.as_mut().unwrap();
        p.data_io_pct = None;
        p.data_hotspots[0].ms_per_sample = Some(1.28);
        p.data_hotspots[0].pct = 63.0;
        let f = input_bound(&e).unwrap();
        let r = &f.recommendation;
        // 84% waiting in the loop: 0.84/0.16 = 5.25 workers' time of loading; 63% of it 3.3.
        assert!(
            r.contains(
                "Jpegs.__getitem__ takes 1.28 ms per sample (63% of loading): about 3.3 \
                 workers' time at the loop's pace."
            ),
            "{r}"
        );
        assert_eq!(r.matches("ms per sample").count(), 1, "said once: {r}");
        let h = &e.python.as_ref().unwrap().data_hotspots[0];
        assert_eq!(
            stage_cost(h, 0.5),
            " Jpegs.__getitem__ takes 1.28 ms per sample (63% of loading): about 32% of one \
             worker's time at the loop's pace."
        );
        // Under a hundredth of a worker: said so, never "0.0 of one worker's time".
        assert_eq!(
            stage_cost(h, 0.005),
            " Jpegs.__getitem__ takes 1.28 ms per sample (63% of loading): under 1% of one \
             worker's time at the loop's pace."
        );
        assert_eq!(stage_cost(h, 0.0), "");
        assert_eq!(stage_cost(h, f64::NAN), "");
    }

    /// CPU loading that needs several times the cores beside the loop: the TOP FIX says no
    /// number of workers can hide it on these cores and that the lasting fix is the stage.
    #[test]
    fn cpu_loading_beyond_the_cores_is_said_to_need_the_stage_itself() {
        // 87% wait loaded in the loop: about 6.7 workers' time; 2 cores leave 1 beside the loop.
        let work = loading_work(87.0, 0, None);
        let n = workers_needed(87.0, 0, None);
        let note = cores_note(n, 0, (2, 1), false, None, work);
        assert!(note.contains("Caveat: this machine has 2 cores"), "{note}");
        assert!(
            note.contains("no number of workers can hide it: loading needs about 6.7 cores' time beside the training loop, which has 1 core to spare"),
            "{note}"
        );
        // Within reach of the cores: only the caveat.
        let work = loading_work(60.0, 0, None);
        let note = cores_note(workers_needed(60.0, 0, None), 0, (2, 1), false, None, work);
        assert!(!note.contains("no number of workers"), "{note}");
        // Loading that waits: workers overlap the waits, no such sentence.
        let note = cores_note(n, 0, (2, 1), true, Some(80.0), work);
        assert!(!note.contains("no number of workers"), "{note}");
    }

    #[test]
    fn the_cores_caveat_of_a_rank_says_they_are_the_ranks_share() {
        // The torchrun job on 2 cores: 1 core per rank, not "this machine has 1 core".
        let c = workers_caveat(2, 0, 1, 2).unwrap();
        assert!(
            c.starts_with(
                " Caveat: each of the 2 ranks has 1 core of the machine's, so beyond 1 worker"
            ),
            "{c}"
        );
        assert!(workers_caveat(2, 0, 1, 1)
            .unwrap()
            .starts_with(" Caveat: this machine has 1 core, so"));
        let n = cores_note(4, 0, (1, 2), true, Some(50.0), 2.0);
        assert!(
            n.contains("may exceed the 1 core of each of the 2 ranks: "),
            "{n}"
        );
    }
}
