//! From collected facts to a [`TraceSummary`]: the plugin-compatible step breakdown, GPU busy time,
//! HTA-style idle time per stream, copies, DataLoader, synchronisation, kernels, launch-bound
//! stretches and communication.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use super::collect::{is_tc_kernel, Collected, DevRec, RtClass};
use super::families::{self, FamilyStat, KernelFamily};
use super::ranges::{self, Range};

/// One step's time by category (µs), each category counting only time not claimed by an earlier
/// one: kernel > memcpy > memset > communication > runtime > dataloader > cpu_op > other.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepRow {
    pub step: String,
    pub start_us: f64,
    pub kernel_us: f64,
    pub memcpy_us: f64,
    pub memset_us: f64,
    pub communication_us: f64,
    pub runtime_us: f64,
    pub dataloader_us: f64,
    pub cpu_op_us: f64,
    pub other_us: f64,
    pub total_us: f64,
}

impl StepRow {
    pub fn values(&self) -> [f64; 9] {
        [
            self.kernel_us,
            self.memcpy_us,
            self.memset_us,
            self.communication_us,
            self.runtime_us,
            self.dataloader_us,
            self.cpu_op_us,
            self.other_us,
            self.total_us,
        ]
    }
}

impl StepRow {
    /// Each category's time, in the plugin's order (the total left out).
    pub(crate) fn by_category(&self) -> [(StepCategory, f64); 8] {
        let v = self.values();
        std::array::from_fn(|i| (StepCategory::ALL[i], v[i]))
    }
}

/// The categories of the TensorBoard plugin's step breakdown, in its order (that of
/// [`StepRow::values`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum StepCategory {
    Kernel,
    Memcpy,
    Memset,
    Communication,
    Runtime,
    Dataloader,
    CpuOp,
    Other,
}

impl StepCategory {
    pub const ALL: &'static [StepCategory] = <StepCategory as strum::VariantArray>::VARIANTS;

    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Device {
    pub device: u64,
    pub name: Option<String>,
    pub compute_capability: Option<String>,
    /// Time with at least one kernel running ÷ the steps' span (the plugin's GPU utilization).
    pub busy_pct: f64,
    pub kernel_us: f64,
    pub kernels: u64,
    pub streams: Vec<StreamIdle>,
}

/// Idle time between consecutive GPU operations on one stream, split as HTA does, over the GPU work
/// launched from the first ProfilerStep's start to the last one's (HTA drops the last iteration).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StreamIdle {
    pub stream: u64,
    pub ops: u64,
    pub busy_us: f64,
    /// The next operation's launch call started after the previous operation ended.
    pub host_wait_us: f64,
    /// Gap shorter than 30 µs otherwise.
    pub kernel_wait_us: f64,
    pub other_us: f64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CopyStat {
    pub direction: String,
    pub src: String,
    pub dst: String,
    pub count: u64,
    pub bytes: f64,
    pub time_us: f64,
    pub bandwidth_gbps: f64,
}

/// How the DataLoader loads: in the training process or in worker processes.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[strum(serialize_all = "snake_case")]
#[serde(rename_all = "snake_case")]
pub enum LoaderIterator {
    /// `num_workers=0`: the training process loads its own batches.
    SingleProcess,
    MultiProcess,
    #[default]
    Unknown,
}

impl LoaderIterator {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl std::fmt::Display for LoaderIterator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// Where the step boundaries came from.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[strum(serialize_all = "snake_case")]
#[serde(rename_all = "snake_case")]
pub enum StepSource {
    /// `ProfilerStep#N` annotations.
    #[default]
    ProfilerStep,
    /// Inferred from `Optimizer.step#` calls.
    OptimizerStep,
    /// Inferred from DataLoader `__next__` calls.
    Dataloader,
    /// No steps: the whole trace is one.
    WholeTrace,
}

impl StepSource {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl std::fmt::Display for StepSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DataLoaderStat {
    pub calls: u64,
    pub time_us: f64,
    /// `single_process` (num_workers=0), `multi_process` or `unknown`.
    pub iterator: LoaderIterator,
    pub per_step_us: f64,
    pub share_pct: f64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SyncStat {
    pub calls: u64,
    pub time_us: f64,
    pub cuda_sync_events: u64,
    pub cuda_sync_event_us: f64,
    pub by_call: BTreeMap<String, (u64, f64)>,
    pub per_step_us: f64,
    pub share_pct: f64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct KernelStat {
    pub count: u64,
    pub time_us: f64,
    pub short_kernel_pct: f64,
    pub median_us: f64,
    /// Share of kernel time on tensor cores: every kernel of the tensor-core GEMM and attention
    /// families (the same figure as `families.tensor_core_pct`; `top[].tensor_core` marks the
    /// same kernels).
    pub tensor_core_pct: f64,
    /// The TensorBoard profiler plugin's narrower figure: only kernels on its name list
    /// (`h884gemm`, `xmma`, `wgrad`...), as the plugin books it. Newer tensor-core kernels
    /// (nvjet, CUTLASS `device_kernel`, flash attention) are not on it.
    #[serde(default)]
    pub tb_plugin_tensor_core_pct: f64,
    /// Share of kernel time launched by operators that could use tensor cores (conv, matmul...).
    pub tc_eligible_pct: f64,
    pub top: Vec<TopKernel>,
    /// Kernel time by family (tensor-core GEMM, attention, communication beyond NCCL), beside
    /// the plugin-compatible figures; see [`super::families`].
    #[serde(default)]
    pub families: FamilyStat,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TopKernel {
    pub name: String,
    pub count: u64,
    pub time_us: f64,
    /// Runs on tensor cores: its family is tensor-core GEMM or attention (what
    /// `tensor_core_pct` counts; the plugin's name list is part of the GEMM family).
    pub tensor_core: bool,
    #[serde(default)]
    pub family: KernelFamily,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LaunchStat {
    pub launch_calls: u64,
    /// Runs of ≥ 20 short kernels on one stream, each waiting for its own launch.
    pub stretches: u64,
    pub stretch_us: f64,
    pub stretch_idle_us: f64,
    pub longest_stretch_us: f64,
    pub host_wait_us: f64,
    pub host_wait_pct: f64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CommStat {
    /// Time with a communication kernel (NCCL/RCCL, or launched by a collective) running.
    pub kernel_us: f64,
    /// ...of which compute kernels ran at the same time.
    pub overlapped_us: f64,
    pub overlap_pct: f64,
    /// Communication kernel time not hidden behind compute, per step.
    pub exposed_us_per_step: f64,
    /// The plugin's Communication category as a share of the step.
    pub share_pct: f64,
}

/// Everything `analyze` says about one trace (one rank).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TraceSummary {
    pub path: String,
    pub rank: Option<u64>,
    pub world_size: Option<u64>,
    pub truncated: bool,
    pub warnings: Vec<String>,
    pub bytes: u64,
    pub events: u64,
    /// `profiler_step` (ProfilerStep#N), `optimizer_step`, `dataloader` (inferred) or `whole_trace`.
    pub step_source: StepSource,
    /// True when `steps` follow the TensorBoard plugin 0.4.3 exactly.
    pub tb_plugin_compatible: bool,
    pub steps: Vec<StepRow>,
    pub breakdown: StepRow,
    /// The plugin's breakdown when `steps` were inferred instead (one step for the whole trace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tb_plugin_steps: Option<Vec<StepRow>>,
    pub devices: Vec<Device>,
    pub gpu_busy_pct: Option<f64>,
    pub copies: Vec<CopyStat>,
    pub dataloader: DataLoaderStat,
    pub sync: SyncStat,
    pub kernels: KernelStat,
    pub launch: LaunchStat,
    pub communication: CommStat,
}

/// Launch time by correlation id: a sorted vector (half the memory of a hash map).
struct CorrIndex(Vec<(u64, f64)>);

impl CorrIndex {
    fn new(it: impl Iterator<Item = (u64, f64)>) -> Self {
        let mut v: Vec<(u64, f64)> = it.collect();
        v.sort_unstable_by_key(|p| p.0);
        CorrIndex(v)
    }
    fn get(&self, corr: &u64) -> Option<&f64> {
        let i = self.0.partition_point(|p| p.0 < *corr);
        self.0.get(i).filter(|p| p.0 == *corr).map(|p| &p.1)
    }
}

fn step_windows(c: &Collected) -> Vec<(f64, f64, String)> {
    let mut s: Vec<_> = c.steps.iter().collect();
    s.sort_by(|a, b| a.ts.total_cmp(&b.ts).then(a.seq.cmp(&b.seq)));
    s.into_iter()
        .map(|x| (x.ts, x.te, x.name.clone()))
        .collect()
}

fn is_comm_kernel(c: &Collected, k: &DevRec) -> bool {
    k.ext().is_some_and(|x| c.comm_ext.contains(&x))
}

/// The plugin's role ranges, merged, in priority order (7 roles; Other is what is left).
fn roles(c: &Collected) -> [Vec<Range>; 7] {
    let mut kernel = Vec::with_capacity(c.kernels.len());
    let mut comm = c.comm_cpu.clone();
    for k in &c.kernels {
        if is_comm_kernel(c, k) {
            comm.push((k.ts, k.te));
        } else {
            kernel.push((k.ts, k.te));
        }
    }
    let memcpy = c.memcpys.iter().map(|k| (k.ts, k.te)).collect();
    let memset = c.memsets.iter().map(|k| (k.ts, k.te)).collect();
    let runtime = c
        .runtimes
        .iter()
        .filter(|r| r.legacy)
        .map(|r| (r.ts, r.te))
        .collect();
    [
        ranges::merge(kernel),
        ranges::merge(memcpy),
        ranges::merge(memset),
        ranges::merge(comm),
        ranges::merge(runtime),
        ranges::merge(c.dataloader_plugin.clone()),
        ranges::merge(c.cpu_op.clone()),
    ]
}

/// The plugin's step-end extension: a step ends no earlier than the GPU work launched by the
/// (2021-schema) runtime calls inside it; a later step starts no earlier than the previous end;
/// trailing steps that launched (almost) nothing are dropped.
fn extend_steps(c: &Collected, steps: &mut Vec<(f64, f64, String)>) {
    let Some(l) = launched(c, steps) else {
        return;
    };
    stretch(steps, &l);
    drop_empty_tail(steps, &l.count);
}

/// The device work launched from inside each step.
struct Launched<'a> {
    /// Kernels, memcpys and memsets.
    all: Vec<&'a DevRec>,
    /// Which of `all` some step launched.
    matched: Vec<bool>,
    /// Per step: the span of its device work (infinite when none).
    span: Vec<(f64, f64)>,
    /// Per step: how many device ops it launched.
    count: Vec<usize>,
}

/// Matches the legacy runtime calls inside each step to their device ops by correlation; None
/// when nothing matched.
fn launched<'a>(c: &'a Collected, steps: &[(f64, f64, String)]) -> Option<Launched<'a>> {
    let mut rts: Vec<_> = c
        .runtimes
        .iter()
        .filter(|r| r.legacy && r.corr().is_some())
        .collect();
    if rts.is_empty() || steps.is_empty() {
        return None;
    }
    rts.sort_by(|a, b| a.ts.total_cmp(&b.ts));
    // device ops by correlation
    let all: Vec<&DevRec> = c
        .kernels
        .iter()
        .chain(c.memcpys.iter())
        .chain(c.memsets.iter())
        .collect();
    // (correlation, index) sorted: a compact multimap from correlation to device ops
    let mut by_corr: Vec<(u64, u32)> = all
        .iter()
        .enumerate()
        .filter_map(|(i, d)| d.corr().map(|x| (x, i as u32)))
        .collect();
    by_corr.sort_unstable();
    let ops_of = |corr: u64| {
        let a = by_corr.partition_point(|p| p.0 < corr);
        let b = by_corr.partition_point(|p| p.0 <= corr);
        by_corr[a..b].iter().map(|p| p.1 as usize)
    };
    let n = steps.len();
    let mut dev = vec![(f64::INFINITY, f64::NEG_INFINITY); n];
    let mut matched_count = vec![0usize; n];
    let mut matched = vec![false; all.len()];
    let mut any = false;
    let (mut i, mut k) = (0, 0);
    let (mut mn, mut mx) = (f64::INFINITY, f64::NEG_INFINITY);
    while i < n && k < rts.len() {
        let (hs, he) = (steps[i].0, steps[i].1);
        let r = rts[k];
        if r.ts < hs {
            k += 1;
        } else if r.te <= he {
            if let Some(x) = r.corr() {
                for d in ops_of(x) {
                    mn = mn.min(all[d].ts);
                    mx = mx.max(all[d].te);
                    matched[d] = true;
                    any = true;
                    matched_count[i] += 1;
                }
            }
            k += 1;
        } else if r.ts < he {
            k += 1;
        } else {
            dev[i] = (mn, mx);
            i += 1;
            mn = f64::INFINITY;
            mx = f64::NEG_INFINITY;
        }
    }
    while i < n {
        dev[i] = (mn, mx);
        mn = f64::INFINITY;
        mx = f64::NEG_INFINITY;
        i += 1;
    }
    any.then_some(Launched {
        all,
        matched,
        span: dev,
        count: matched_count,
    })
}

/// Each step ends no earlier than its device work and starts no earlier than the previous end
/// (the first no earlier than unmatched device work before its own).
fn stretch(steps: &mut [(f64, f64, String)], l: &Launched<'_>) {
    let mut prev = steps[0].0;
    if l.span[0].0.is_finite() {
        for (d, m) in l.all.iter().zip(&l.matched) {
            if !m && d.te < l.span[0].0 {
                prev = prev.max(d.te);
            }
        }
    }
    for (step, span) in steps.iter_mut().zip(&l.span) {
        let start = prev.max(step.0);
        let mut end = step.1;
        if !span.0.is_finite() {
            end = end.max(start);
        } else {
            end = end.max(span.1).max(start);
        }
        step.0 = start;
        step.1 = end;
        prev = end;
    }
}

/// Drops the trailing steps that launched nothing, and the last one that launched under 80% of
/// the one before it (a cut-off step).
fn drop_empty_tail(steps: &mut Vec<(f64, f64, String)>, count: &[usize]) {
    let n = steps.len();
    if n > 1 {
        let mut i = n as isize - 1;
        while i >= 0 && count[i as usize] == 0 {
            i -= 1;
        }
        if i >= 0 {
            let iu = i as usize;
            let mut keep = iu + 1;
            if iu > 0 && count[iu - 1] as f64 * 0.8 > count[iu] as f64 {
                keep = iu;
            }
            steps.truncate(keep);
        }
    }
}

/// Per-step breakdown over the given windows (plugin `OverallParser` semantics).
pub fn breakdown(windows: &[(f64, f64, String)], roles: &[Vec<Range>; 7]) -> Vec<StepRow> {
    let mut slots = ranges::merge(windows.iter().map(|w| (w.0, w.1)).collect());
    let mut cost: Vec<Vec<Range>> = Vec::with_capacity(8);
    for (i, r) in roles.iter().enumerate() {
        let claimed = if i == 0 {
            r.clone()
        } else {
            ranges::intersect(&slots, r)
        };
        slots = ranges::subtract(&slots, &claimed);
        cost.push(claimed);
    }
    cost.push(slots);
    windows
        .iter()
        .map(|(s, e, name)| {
            let v: Vec<f64> = cost
                .iter()
                .map(|r| ranges::total_within(r, *s, *e))
                .collect();
            StepRow {
                step: name.clone(),
                start_us: *s,
                kernel_us: v[0],
                memcpy_us: v[1],
                memset_us: v[2],
                communication_us: v[3],
                runtime_us: v[4],
                dataloader_us: v[5],
                cpu_op_us: v[6],
                other_us: v[7],
                total_us: e - s,
            }
        })
        .collect()
}

pub(crate) fn average(steps: &[StepRow]) -> StepRow {
    let n = steps.len().max(1) as f64;
    let mut a = StepRow {
        step: "average".into(),
        ..Default::default()
    };
    for s in steps {
        a.kernel_us += s.kernel_us / n;
        a.memcpy_us += s.memcpy_us / n;
        a.memset_us += s.memset_us / n;
        a.communication_us += s.communication_us / n;
        a.runtime_us += s.runtime_us / n;
        a.dataloader_us += s.dataloader_us / n;
        a.cpu_op_us += s.cpu_op_us / n;
        a.other_us += s.other_us / n;
        a.total_us += s.total_us / n;
    }
    a
}

/// Iterations when there is no ProfilerStep: between consecutive `Optimizer.step#` ends, or
/// between consecutive DataLoader `__next__` starts.
/// A step window: start, end (µs) and name.
pub type Window = (f64, f64, String);

fn infer_windows(c: &Collected) -> Option<(Vec<Window>, StepSource)> {
    let mut opt: Vec<f64> = c.optimizer_steps.iter().map(|r| r.1).collect();
    opt.sort_by(f64::total_cmp);
    if opt.len() >= 2 {
        let w = opt
            .windows(2)
            .enumerate()
            .map(|(i, p)| (p[0], p[1], format!("{}", i + 1)))
            .collect();
        return Some((w, StepSource::OptimizerStep));
    }
    let mut dl = c.dataloader_starts.clone();
    dl.sort_by(f64::total_cmp);
    dl.dedup();
    if dl.len() >= 3 {
        let w = dl
            .windows(2)
            .enumerate()
            .map(|(i, p)| (p[0], p[1], format!("{}", i + 1)))
            .collect();
        return Some((w, StepSource::Dataloader));
    }
    None
}

pub fn summarize(c: &Collected) -> TraceSummary {
    let mut s = TraceSummary::default();
    let windows = steps(c, &mut s);
    s.breakdown = average(&s.steps);
    let span = if windows.is_empty() {
        (c.min_ts, c.max_ts)
    } else {
        (
            windows.iter().map(|w| w.0).fold(f64::INFINITY, f64::min),
            windows
                .iter()
                .map(|w| w.1)
                .fold(f64::NEG_INFINITY, f64::max),
        )
    };
    let nsteps = s.steps.len().max(1) as f64;
    let step_total: f64 = s.steps.iter().map(|r| r.total_us).sum::<f64>().max(1e-9);

    devices(c, span, &mut s);
    copies(c, &mut s);
    s.dataloader = dataloader(c, &windows, nsteps, step_total);
    s.sync = sync(c, span, nsteps);
    kernels(c, &mut s);
    launch(c, span, &mut s);
    s.communication = communication(c, &windows, nsteps, &s.breakdown);
    if let Some(d) = &c.dist {
        s.rank = d.get("rank").and_then(|v| v.as_u64());
        s.world_size = d.get("world_size").and_then(|v| v.as_u64());
    }
    s
}

/// The steps (ProfilerStep annotations, else steps inferred from the DataLoader or optimizer,
/// else the whole trace as one) with their breakdowns into `s`; returns their windows.
fn steps(c: &Collected, s: &mut TraceSummary) -> Vec<Window> {
    let roles = roles(c);
    let mut windows = step_windows(c);
    let has_steps = !windows.is_empty();
    if has_steps {
        extend_steps(c, &mut windows);
        s.step_source = StepSource::ProfilerStep;
        s.tb_plugin_compatible = true;
        s.steps = breakdown(&windows, &roles);
    } else {
        let (a, b) = if c.cpu_min.is_finite() {
            (c.cpu_min, c.cpu_max)
        } else {
            (c.min_ts, c.max_ts)
        };
        let mut whole = vec![(a, b, "0".to_string())];
        if a.is_finite() && b.is_finite() {
            extend_steps(c, &mut whole);
        } else {
            whole.clear();
        }
        let plugin = breakdown(&whole, &roles);
        match infer_windows(c) {
            Some((w, src)) => {
                s.step_source = src;
                s.steps = breakdown(&w, &roles);
                windows = w;
                s.tb_plugin_steps = Some(plugin);
            }
            None => {
                s.step_source = StepSource::WholeTrace;
                s.tb_plugin_compatible = true;
                s.steps = plugin;
                windows = whole;
            }
        }
    }
    windows
}

/// Time waiting for the DataLoader, within the steps.
fn dataloader(c: &Collected, windows: &[Window], nsteps: f64, step_total: f64) -> DataLoaderStat {
    let dl = ranges::merge(c.dataloader_any.clone());
    let dl_in: f64 = windows
        .iter()
        .map(|w| ranges::total_within(&dl, w.0, w.1))
        .sum();
    DataLoaderStat {
        calls: c.dataloader_starts.len() as u64,
        time_us: ranges::total(&dl),
        iterator: if c.dl_single > 0 {
            LoaderIterator::SingleProcess
        } else if c.dl_multi > 0 {
            LoaderIterator::MultiProcess
        } else {
            LoaderIterator::Unknown
        },
        per_step_us: dl_in / nsteps,
        share_pct: 100.0 * dl_in / step_total,
    }
}

/// Blocking host-device synchronisation calls.
fn sync(c: &Collected, span: (f64, f64), nsteps: f64) -> SyncStat {
    let (calls, time) = c
        .sync_calls
        .values()
        .fold((0, 0.0), |a, v| (a.0 + v.0, a.1 + v.1));
    SyncStat {
        calls,
        time_us: time,
        cuda_sync_events: c.cuda_sync_events,
        cuda_sync_event_us: c.cuda_sync_us,
        by_call: c.sync_calls.clone(),
        per_step_us: time / nsteps,
        share_pct: 100.0 * time / (span.1 - span.0).max(1e-9),
    }
}

/// Communication kernels: their time, how much compute overlaps them, and what is exposed.
fn communication(c: &Collected, windows: &[Window], nsteps: f64, breakdown: &StepRow) -> CommStat {
    let mut comm_k = Vec::new();
    let mut comp_k = Vec::new();
    let comm_name: Vec<bool> = c
        .kernel_names
        .iter()
        .map(|n| families::family(n) == KernelFamily::Communication)
        .collect();
    for k in &c.kernels {
        let agg = &c.kernel_agg[k.tag as usize];
        if is_comm_kernel(c, k) || agg.collective || comm_name[k.tag as usize] {
            comm_k.push((k.ts, k.te));
        } else {
            comp_k.push((k.ts, k.te));
        }
    }
    let comm_k = ranges::merge(comm_k);
    let comp_k = ranges::merge(comp_k);
    let ck = ranges::total(&comm_k);
    let ov = ranges::total(&ranges::intersect(&comm_k, &comp_k));
    CommStat {
        kernel_us: ck,
        overlapped_us: ov,
        overlap_pct: if ck > 0.0 { 100.0 * ov / ck } else { 0.0 },
        exposed_us_per_step: {
            let exposed = ranges::subtract(&comm_k, &comp_k);
            windows
                .iter()
                .map(|w| ranges::total_within(&exposed, w.0, w.1))
                .sum::<f64>()
                / nsteps
        },
        share_pct: 100.0 * breakdown.communication_us / breakdown.total_us.max(1e-9),
    }
}

/// HTA analyzes iterations from the first ProfilerStep's start to the last one's start.
fn hta_window(c: &Collected) -> Option<(f64, f64)> {
    // CPU-side annotations only (a gpu_user_annotation copy is not an iteration to HTA)
    let starts: Vec<f64> = c.steps.iter().filter(|x| !x.on_gpu).map(|x| x.ts).collect();
    if starts.len() < 2 {
        return None;
    }
    let first = starts.iter().copied().fold(f64::INFINITY, f64::min);
    let last = starts.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (last > first).then_some((first, last))
}

fn devices(c: &Collected, span: (f64, f64), s: &mut TraceSummary) {
    let mut per: BTreeMap<u64, Vec<Range>> = BTreeMap::new();
    let mut count: BTreeMap<u64, u64> = BTreeMap::new();
    for k in &c.kernels {
        per.entry(k.device).or_default().push((k.ts, k.te));
        *count.entry(k.device).or_default() += 1;
    }
    let launch_ts = CorrIndex::new(
        c.runtimes
            .iter()
            .filter_map(|r| r.corr().map(|x| (x, r.ts))),
    );
    // streams: all GPU operations launched within the complete iterations (as HTA: from the first
    // ProfilerStep's start to the last one's start, the last iteration being possibly incomplete)
    let window = hta_window(c);
    let mut streams: BTreeMap<(u64, u64), Vec<&DevRec>> = BTreeMap::new();
    for d in c
        .kernels
        .iter()
        .chain(c.memcpys.iter())
        .chain(c.memsets.iter())
    {
        let at = d
            .corr()
            .and_then(|x| launch_ts.get(&x))
            .copied()
            .unwrap_or(d.ts);
        if window.is_none_or(|(a, b)| at >= a && at < b) {
            streams.entry((d.device, d.stream)).or_default().push(d);
        }
    }
    let width = (span.1 - span.0).max(1e-9);
    let mut busy_sum = 0.0;
    let mut n = 0;
    for (dev, r) in per {
        let m = ranges::merge(r);
        let busy = ranges::total_within(&m, span.0, span.1);
        let prop = c
            .device_props
            .iter()
            .find(|p| p.get("id").and_then(|v| v.as_u64()) == Some(dev));
        let d = Device {
            device: dev,
            name: prop
                .and_then(|p| p.get("name"))
                .and_then(|v| v.as_str())
                .map(String::from),
            compute_capability: prop.and_then(|p| {
                Some(format!(
                    "{}.{}",
                    p.get("computeMajor")?.as_u64()?,
                    p.get("computeMinor")?.as_u64()?
                ))
            }),
            busy_pct: 100.0 * busy / width,
            kernel_us: ranges::total(&m),
            kernels: count[&dev],
            streams: Vec::new(),
        };
        busy_sum += d.busy_pct;
        n += 1;
        s.devices.push(d);
    }
    for ((dev, stream), mut ops) in streams {
        ops.sort_by(|a, b| a.ts.total_cmp(&b.ts));
        let mut st = StreamIdle {
            stream,
            ops: ops.len() as u64,
            ..Default::default()
        };
        let mut prev_end = f64::NEG_INFINITY;
        for o in &ops {
            st.busy_us += o.te - o.ts;
            if prev_end.is_finite() && o.ts > prev_end {
                let gap = o.ts - prev_end;
                let launched = o.corr().and_then(|x| launch_ts.get(&x)).copied();
                if launched.is_some_and(|l| l > prev_end) {
                    st.host_wait_us += gap;
                } else if gap < 30.0 {
                    st.kernel_wait_us += gap;
                } else {
                    st.other_us += gap;
                }
            }
            prev_end = prev_end.max(o.te);
        }
        match s.devices.iter_mut().find(|d| d.device == dev) {
            Some(d) => d.streams.push(st),
            None => s.devices.push(Device {
                device: dev,
                streams: vec![st],
                ..Default::default()
            }),
        }
    }
    s.gpu_busy_pct = if n > 0 {
        Some(busy_sum / n as f64)
    } else {
        None
    };
}

fn copies(c: &Collected, s: &mut TraceSummary) {
    let mut agg: BTreeMap<u32, CopyStat> = BTreeMap::new();
    for m in &c.memcpys {
        let cl = c.copy_classes[m.tag as usize];
        let e = agg.entry(m.tag).or_insert_with(|| CopyStat {
            direction: cl.dir.into(),
            src: cl.src.into(),
            dst: cl.dst.into(),
            ..Default::default()
        });
        e.count += 1;
        e.bytes += m.bytes as f64;
        e.time_us += m.te - m.ts;
    }
    for (_, mut v) in agg {
        v.bandwidth_gbps = if v.time_us > 0.0 {
            v.bytes / (v.time_us * 1e3)
        } else {
            0.0
        };
        s.copies.push(v);
    }
    s.copies.sort_by(|a, b| b.time_us.total_cmp(&a.time_us));
}

fn kernels(c: &Collected, s: &mut TraceSummary) {
    let mut durs: Vec<f64> = c.kernels.iter().map(|k| k.te - k.ts).collect();
    let total: f64 = durs.iter().sum();
    let count = durs.len() as u64;
    let median = if durs.is_empty() {
        0.0
    } else {
        let mid = durs.len() / 2;
        *durs.select_nth_unstable_by(mid, f64::total_cmp).1
    };
    let short: u64 = c.kernel_agg.iter().map(|a| a.short).sum();
    let fams: Vec<KernelFamily> = c.kernel_names.iter().map(|n| families::family(n)).collect();
    let tc_flags: Vec<bool> = c.kernel_names.iter().map(|n| is_tc_kernel(n)).collect();
    let tc_time: f64 = c
        .kernel_agg
        .iter()
        .zip(&tc_flags)
        .filter(|(_, t)| **t)
        .map(|(a, _)| a.total_us)
        .sum::<f64>()
        + 0.0; // an empty float sum is -0.0
    let eligible: f64 = c
        .kernels
        .iter()
        .filter(|k| k.ext().is_some_and(|x| c.tc_eligible_ext.contains(&x)))
        .map(|k| k.te - k.ts)
        .sum::<f64>()
        + 0.0;
    let mut idx: Vec<usize> = (0..c.kernel_names.len()).collect();
    idx.sort_by(|&a, &b| {
        c.kernel_agg[b]
            .total_us
            .total_cmp(&c.kernel_agg[a].total_us)
    });
    let top = idx
        .into_iter()
        .take(10)
        .map(|i| TopKernel {
            name: c.kernel_names[i].clone(),
            count: c.kernel_agg[i].count,
            time_us: c.kernel_agg[i].total_us,
            tensor_core: matches!(
                fams[i],
                KernelFamily::TensorCoreGemm | KernelFamily::Attention
            ),
            family: fams[i],
        })
        .collect();
    let pct = |x: f64| if total > 0.0 { 100.0 * x / total } else { 0.0 };
    let families = families::stat(
        c.kernels
            .iter()
            .map(|k| ((k.ts, k.te), fams[k.tag as usize])),
    );
    s.kernels = KernelStat {
        count,
        time_us: total,
        short_kernel_pct: if count > 0 {
            100.0 * short as f64 / count as f64
        } else {
            0.0
        },
        median_us: median,
        tensor_core_pct: families.tensor_core_pct,
        tb_plugin_tensor_core_pct: pct(tc_time),
        tc_eligible_pct: pct(eligible),
        top,
        families,
    };
}

const SHORT_KERNEL_US: f64 = 20.0;
const MIN_STRETCH: usize = 20;

fn launch(c: &Collected, span: (f64, f64), s: &mut TraceSummary) {
    let launch_ts = CorrIndex::new(
        c.runtimes
            .iter()
            .filter(|r| r.class == RtClass::Launch)
            .filter_map(|r| r.corr().map(|x| (x, r.ts))),
    );
    let mut streams: BTreeMap<(u64, u64), Vec<&DevRec>> = BTreeMap::new();
    for k in &c.kernels {
        streams.entry((k.device, k.stream)).or_default().push(k);
    }
    let mut st = LaunchStat {
        launch_calls: c.launch_calls,
        ..Default::default()
    };
    for (_, mut ks) in streams {
        ks.sort_by(|a, b| a.ts.total_cmp(&b.ts));
        let mut run_start: Option<usize> = None;
        let mut run_idle = 0.0;
        let flush = |st: &mut LaunchStat, a: usize, b: usize, idle: f64, ks: &[&DevRec]| {
            if b + 1 - a >= MIN_STRETCH {
                let len = ks[b].te - ks[a].ts;
                st.stretches += 1;
                st.stretch_us += len;
                st.stretch_idle_us += idle;
                st.longest_stretch_us = st.longest_stretch_us.max(len);
            }
        };
        for i in 0..ks.len() {
            let k = ks[i];
            let short = k.te - k.ts < SHORT_KERNEL_US;
            let waited = i > 0
                && k.ts > ks[i - 1].te
                && k.corr()
                    .and_then(|x| launch_ts.get(&x))
                    .is_some_and(|&l| l > ks[i - 1].te);
            if short && (waited || run_start.is_none()) {
                if run_start.is_none() {
                    run_start = Some(i);
                    run_idle = 0.0;
                } else {
                    run_idle += k.ts - ks[i - 1].te;
                }
            } else {
                if let Some(a) = run_start.take() {
                    flush(&mut st, a, i - 1, run_idle, &ks);
                }
                if short {
                    run_start = Some(i);
                    run_idle = 0.0;
                }
            }
        }
        if let Some(a) = run_start {
            flush(&mut st, a, ks.len() - 1, run_idle, &ks);
        }
    }
    st.host_wait_us = s
        .devices
        .iter()
        .flat_map(|d| &d.streams)
        .map(|x| x.host_wait_us)
        .sum();
    let width = (span.1 - span.0).max(1e-9);
    let nstreams = s
        .devices
        .iter()
        .map(|d| d.streams.len())
        .sum::<usize>()
        .max(1) as f64;
    st.host_wait_pct = 100.0 * st.host_wait_us / (width * nstreams);
    s.launch = st;
}
