//! Turns streamed events into the compact facts the analyses need (interval lists, per-kernel
//! records, per-name aggregates). Nothing here keeps raw JSON.

use std::collections::{HashMap, HashSet};

use super::ranges::{self, Range};
use gpufeed_kineto::event::{Event, EventSink};

/// Category of an `X` event, both Kineto schemas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Kernel,
    Memcpy,
    Memset,
    /// 2021 `Runtime`: the TensorBoard plugin 0.4.3 books these as Runtime.
    RuntimeLegacy,
    /// `cuda_runtime` (also AMD `hip*` calls): unknown to the plugin 0.4.3.
    CudaRuntime,
    CudaDriver,
    Operator,
    Python,
    UserAnnotation,
    GpuUserAnnotation,
    CudaSync,
    Other,
}

pub(crate) fn kind_of(cat: &[u8]) -> Kind {
    let lower: [u8; 24] = {
        let mut a = [0u8; 24];
        for (i, b) in cat.iter().take(24).enumerate() {
            a[i] = b.to_ascii_lowercase();
        }
        a
    };
    let l = &lower[..cat.len().min(24)];
    match l {
        b"kernel" => Kind::Kernel,
        b"gpu_memcpy" | b"memcpy" => Kind::Memcpy,
        b"gpu_memset" | b"memset" => Kind::Memset,
        b"runtime" => Kind::RuntimeLegacy,
        b"cuda_runtime" => Kind::CudaRuntime,
        b"cuda_driver" => Kind::CudaDriver,
        b"cpu_op" | b"operator" => Kind::Operator,
        b"python" => Kind::Python,
        b"user_annotation" => Kind::UserAnnotation,
        b"gpu_user_annotation" => Kind::GpuUserAnnotation,
        b"cuda_sync" => Kind::CudaSync,
        _ => Kind::Other,
    }
}

pub(crate) const COMM_OPS: [&str; 10] = [
    "nccl:broadcast",
    "nccl:reduce",
    "nccl:all_reduce",
    "nccl:all_gather",
    "nccl:reduce_scatter",
    "gloo:broadcast",
    "gloo:reduce",
    "gloo:all_reduce",
    "gloo:all_gather",
    "gloo:reduce_scatter",
];

/// Substrings of tensor-core kernel names: the plugin's list plus newer families.
pub(crate) const TC_KERNEL_PATTERNS: [&str; 27] = [
    "h884",
    "s884",
    "h1688",
    "s1688",
    "c1688",
    "hmma",
    "i8816",
    "16816",
    "16832",
    "xmma_gemm",
    "xmma_implicit_gemm",
    "xmma_sparse",
    "xmma_warp_specialized",
    "tensorop",
    "wgmma",
    "gmma_",
    "_bf16",
    "bf16_",
    "_f16",
    "f16_",
    "fp16",
    "tf32",
    "flash_fwd",
    "flash_bwd",
    "fmha",
    "sm90_xmma",
    "sm80_xmma",
];

/// Operators whose kernels can use tensor cores (the plugin's allow-list, substring match).
pub(crate) const TC_ELIGIBLE_OPS: [&str; 44] = [
    "aten::_convolution",
    "aten::conv1d",
    "aten::conv2d",
    "aten::conv3d",
    "aten::conv_tbc",
    "aten::conv_transpose1d",
    "aten::conv_transpose2d",
    "aten::conv_transpose3d",
    "aten::convolution",
    "aten::cudnn_convolution",
    "aten::cudnn_convolution_transpose",
    "aten::prelu",
    "aten::addmm",
    "aten::addmv",
    "aten::addr",
    "aten::matmul",
    "aten::mm",
    "aten::mv",
    "aten::linear",
    "aten::addbmm",
    "aten::baddbmm",
    "aten::bmm",
    "aten::chain_matmul",
    "aten::linalg_multi_dot",
    "aten::_thnn_fused_lstm_cell",
    "aten::_thnn_fused_gru_cell",
    "aten::lstm_cell",
    "aten::gru_cell",
    "aten::rnn_tanh_cell",
    "aten::rnn_relu_cell",
    "CudnnConvolutionBackward",
    "BmmBackward0",
    "aten::cudnn_convolution_transpose_backward",
    "CudnnConvolutionTransposeBackward",
    "MmBackward",
    "aten::cudnn_convolution_backward_weight",
    "aten::addmm_",
    "AddmvBackward",
    "MvBackward",
    "aten::cudnn_convolution_transpose_backward_weight",
    "aten::cudnn_convolution_transpose_backward_input",
    "AddmmBackward",
    "aten::cudnn_convolution_backward_input",
    "aten::cudnn_convolution_backward",
];

pub(crate) fn is_tc_kernel(name: &str) -> bool {
    let l = name.to_ascii_lowercase();
    TC_KERNEL_PATTERNS.iter().any(|p| l.contains(p))
}

pub(crate) fn is_tc_eligible_op(name: &str) -> bool {
    TC_ELIGIBLE_OPS.iter().any(|p| name.contains(p))
}

#[derive(Debug, Clone, Copy)]
pub struct DevRec {
    pub ts: f64,
    pub te: f64,
    /// Correlation id (`NONE` when absent); see [`DevRec::corr`].
    pub corr_raw: u64,
    pub ext_raw: u64,
    pub device: u64,
    pub stream: u64,
    /// Kernel name index for kernels, copy class for memcpys.
    pub tag: u32,
    pub bytes: f32,
}

/// Stands for a missing id in the compact records.
pub(crate) const NONE: u64 = u64::MAX;

fn some(x: u64) -> Option<u64> {
    (x != NONE).then_some(x)
}

impl DevRec {
    pub fn corr(&self) -> Option<u64> {
        some(self.corr_raw)
    }
    pub fn ext(&self) -> Option<u64> {
        some(self.ext_raw)
    }
}

impl RtRec {
    pub fn corr(&self) -> Option<u64> {
        some(self.corr_raw)
    }
}

#[derive(Debug, Clone, Copy)]
pub struct RtRec {
    pub ts: f64,
    pub te: f64,
    pub corr_raw: u64,
    /// 2021 `Runtime` category (the plugin's Runtime role).
    pub legacy: bool,
    pub class: RtClass,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RtClass {
    Launch,
    Sync,
    Memcpy,
    Other,
}

pub(crate) fn runtime_class(name: &str) -> RtClass {
    let n = name
        .trim_start_matches("cuda")
        .trim_start_matches("hip")
        .trim_start_matches("cu");
    if name.contains("Synchronize") {
        RtClass::Sync
    } else if n.starts_with("LaunchKernel")
        || n.starts_with("ModuleLaunchKernel")
        || n.starts_with("ExtModuleLaunchKernel")
        || n.starts_with("LaunchCooperativeKernel")
        || n.starts_with("GraphLaunch")
        || name.contains("LaunchKernel")
    {
        RtClass::Launch
    } else if n.starts_with("Memcpy") {
        RtClass::Memcpy
    } else {
        RtClass::Other
    }
}

/// Copy direction and memory kind from `Memcpy HtoD (Pageable -> Device)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CopyClass {
    pub dir: &'static str,
    pub src: &'static str,
    pub dst: &'static str,
}

pub(crate) fn copy_class(name: &str) -> CopyClass {
    let dir = [
        "HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "HtoA", "AtoH", "DtoA", "AtoD",
    ]
    .into_iter()
    .find(|d| name.contains(d))
    .unwrap_or("unknown");
    let kind = |s: &str| -> &'static str {
        let s = s.trim();
        match s {
            "Pageable" => "Pageable",
            "Pinned" => "Pinned",
            "Device" => "Device",
            "Array" => "Array",
            "Managed" => "Managed",
            "Host" => "Host", // ROCm: the memory kind is not known
            _ => "unknown",
        }
    };
    let (mut src, mut dst) = ("unknown", "unknown");
    if let (Some(a), Some(b)) = (name.find('('), name.rfind(')')) {
        if a < b {
            if let Some((x, y)) = name[a + 1..b].split_once("->") {
                src = kind(x);
                dst = kind(y);
            }
        }
    }
    CopyClass { dir, src, dst }
}

#[derive(Debug, Clone, Default)]
pub struct KernelAgg {
    pub collective: bool,
    pub count: u64,
    pub total_us: f64,
    pub short: u64,
}

#[derive(Debug, Clone)]
pub struct StepAnn {
    pub ts: f64,
    pub te: f64,
    pub name: String,
    /// Order of appearance, to keep a stable sort.
    pub seq: u64,
    /// A `gpu_user_annotation` copy of the step on a GPU stream.
    pub on_gpu: bool,
}

/// Distinct kernel names kept one by one; kernels with later names are booked under one
/// "other kernels" name. Real traces have a few hundred to a few thousand.
pub(crate) const MAX_KERNEL_NAMES: usize = 4096;
/// Distinct devices and (device, stream) pairs kept apart; events on later ones are booked on
/// the last device / stream id, [`OTHER_ID`]. Real traces have up to a few dozen of each.
pub(crate) const MAX_DEVICES: usize = 1024;
pub(crate) const MAX_STREAMS: usize = 4096;
/// The device or stream id that stands for "all the others" past the caps.
pub(crate) const OTHER_ID: u64 = u64::MAX - 1;

/// What the caps above folded together (without them, a crafted trace of 100,000 kernels each on
/// its own device with 8 KB names took analyze to 1.6 GB and ten minutes).
#[derive(Debug, Default, Clone, Copy)]
pub struct Capped {
    pub kernel_names: u64,
    pub devices: u64,
    pub streams: u64,
}

/// Everything the analyses need from one trace.
#[derive(Debug, Default)]
pub struct Collected {
    pub capped: Capped,
    devices_seen: HashSet<u64>,
    streams_seen: HashSet<(u64, u64)>,
    pub base_time_ns: Option<f64>,
    pub device_props: Vec<serde_json::Value>,
    pub dist: Option<serde_json::Value>,
    pub x_events: u64,
    pub min_ts: f64,
    pub max_ts: f64,
    pub cpu_min: f64,
    pub cpu_max: f64,
    pub steps: Vec<StepAnn>,
    pub kernels: Vec<DevRec>,
    pub memcpys: Vec<DevRec>,
    pub memsets: Vec<DevRec>,
    pub runtimes: Vec<RtRec>,
    pub cpu_op: Vec<Range>,
    pub comm_cpu: Vec<Range>,
    pub comm_ext: HashSet<u64>,
    pub dataloader_plugin: Vec<Range>,
    pub dataloader_any: Vec<Range>,
    pub dataloader_starts: Vec<f64>,
    pub dl_single: u64,
    pub dl_multi: u64,
    pub optimizer_steps: Vec<Range>,
    pub tc_eligible_ext: HashSet<u64>,
    pub kernel_names: Vec<String>,
    pub kernel_index: HashMap<Vec<u8>, u32>,
    pub kernel_agg: Vec<KernelAgg>,
    pub copy_classes: Vec<CopyClass>,
    pub cuda_sync_events: u64,
    pub cuda_sync_us: f64,
    pub launch_calls: u64,
    pub step_seq: u64,
    /// Blocking calls by name: cuda*/hip*Synchronize and synchronous cudaMemcpy.
    pub sync_calls: std::collections::BTreeMap<String, (u64, f64)>,
    /// Caches by event name (few distinct names, many events).
    pub runtime_names: HashMap<Vec<u8>, (RtClass, bool)>,
    pub eligible_names: HashMap<Vec<u8>, bool>,
}

impl Collected {
    pub fn new() -> Self {
        Collected {
            min_ts: f64::INFINITY,
            max_ts: f64::NEG_INFINITY,
            cpu_min: f64::INFINITY,
            cpu_max: f64::NEG_INFINITY,
            ..Default::default()
        }
    }

    fn kernel_tag(&mut self, name: &[u8]) -> u32 {
        if let Some(&i) = self.kernel_index.get(name) {
            return i;
        }
        if self.kernel_names.len() >= MAX_KERNEL_NAMES {
            self.capped.kernel_names += 1;
            let other: &[u8] = b"(other kernels, past the first 4096 names)";
            if let Some(&i) = self.kernel_index.get(other) {
                return i;
            }
            let i = self.kernel_names.len() as u32;
            self.kernel_names
                .push(String::from_utf8_lossy(other).into_owned());
            self.kernel_agg.push(KernelAgg::default());
            self.kernel_index.insert(other.to_vec(), i);
            return i;
        }
        let i = self.kernel_names.len() as u32;
        self.kernel_names
            .push(String::from_utf8_lossy(name).into_owned());
        self.kernel_agg.push(KernelAgg::default());
        self.kernel_index.insert(name.to_vec(), i);
        i
    }

    /// Books an event past [`MAX_DEVICES`] / [`MAX_STREAMS`] on [`OTHER_ID`].
    fn cap_ids(&mut self, r: &mut DevRec) {
        if !self.devices_seen.contains(&r.device) {
            if self.devices_seen.len() >= MAX_DEVICES {
                self.capped.devices += 1;
                r.device = OTHER_ID;
            } else {
                self.devices_seen.insert(r.device);
            }
        }
        let key = (r.device, r.stream);
        if !self.streams_seen.contains(&key) {
            if self.streams_seen.len() >= MAX_STREAMS {
                self.capped.streams += 1;
                r.stream = OTHER_ID;
            } else {
                self.streams_seen.insert(key);
            }
        }
    }

    fn copy_tag(&mut self, name: &[u8]) -> u32 {
        let c = copy_class(&String::from_utf8_lossy(name));
        match self.copy_classes.iter().position(|x| *x == c) {
            Some(i) => i as u32,
            None => {
                self.copy_classes.push(c);
                (self.copy_classes.len() - 1) as u32
            }
        }
    }
}

const COMPACT_AT: usize = 1 << 18;

fn push_range(v: &mut Vec<Range>, r: Range) {
    v.push(r);
    if v.len() >= COMPACT_AT && v.len().is_power_of_two() {
        ranges::compact(v);
    }
}

impl EventSink for Collected {
    fn top_level(&mut self, key: &str, value: serde_json::Value) {
        match key {
            "baseTimeNanoseconds" => self.base_time_ns = value.as_f64(),
            "deviceProperties" => {
                if let serde_json::Value::Array(a) = value {
                    self.device_props = a;
                }
            }
            "distributedInfo" => {
                // keep only the small fields (pg_config can be large)
                if let serde_json::Value::Object(mut m) = value {
                    m.retain(|k, _| matches!(k.as_str(), "rank" | "world_size" | "backend"));
                    self.dist = Some(serde_json::Value::Object(m));
                }
            }
            _ => {}
        }
    }

    fn event(&mut self, ev: &Event<'_>) {
        if ev.ph != b'X' {
            return;
        }
        let Some(ts) = ev.ts else { return };
        let dur = ev.dur.unwrap_or(0.0).max(0.0);
        let te = ts + dur;
        self.x_events += 1;
        let kind = kind_of(&ev.cat);
        self.min_ts = self.min_ts.min(ts);
        self.max_ts = self.max_ts.max(te);
        if kind == Kind::Other && !ev.cat.eq_ignore_ascii_case(b"trace") {
            // python_function and unknown categories: only the global span
            return;
        }
        match kind {
            Kind::Kernel | Kind::Memcpy | Kind::Memset => self.device_event(kind, ev, ts, te, dur),
            Kind::RuntimeLegacy | Kind::CudaRuntime | Kind::CudaDriver => {
                self.runtime_event(kind, ev, ts, te, dur)
            }
            Kind::CudaSync => {
                self.cuda_sync_events += 1;
                self.cuda_sync_us += dur;
            }
            Kind::Operator | Kind::Python | Kind::UserAnnotation | Kind::GpuUserAnnotation => {
                self.host_event(kind, ev, ts, te)
            }
            Kind::Other => {}
        }
    }
}

impl Collected {
    /// A kernel, memcpy or memset on the GPU.
    #[inline]
    fn device_event(&mut self, kind: Kind, ev: &Event<'_>, ts: f64, te: f64, dur: f64) {
        let a = &ev.args;
        let mut r = DevRec {
            ts,
            te,
            corr_raw: a.correlation.unwrap_or(NONE),
            ext_raw: a.external_id.unwrap_or(NONE),
            device: a.device.or(ev.pid).unwrap_or(0),
            stream: a.stream.or(ev.tid).unwrap_or(0),
            tag: 0,
            bytes: a.bytes.unwrap_or(0.0) as f32,
        };
        self.cap_ids(&mut r);
        match kind {
            Kind::Kernel => {
                r.tag = self.kernel_tag(&ev.name);
                let agg = &mut self.kernel_agg[r.tag as usize];
                agg.count += 1;
                agg.total_us += dur;
                if dur < 10.0 {
                    agg.short += 1;
                }
                if a.collective {
                    agg.collective = true;
                }
                self.kernels.push(r);
            }
            Kind::Memcpy => {
                r.tag = self.copy_tag(&ev.name);
                self.memcpys.push(r);
            }
            _ => self.memsets.push(r),
        }
    }

    /// A CUDA runtime or driver call: launches, and the blocking calls by name.
    #[inline]
    fn runtime_event(&mut self, kind: Kind, ev: &Event<'_>, ts: f64, te: f64, dur: f64) {
        let a = &ev.args;
        let (class, blocking) = match self.runtime_names.get(&ev.name[..]) {
            Some(&v) => v,
            None => {
                let name = String::from_utf8_lossy(&ev.name);
                let class = runtime_class(&name);
                let blocking_copy = matches!(
                    &*name,
                    "cudaMemcpy" | "hipMemcpy" | "cuMemcpyDtoH_v2" | "cuMemcpyDtoH"
                );
                let v = (class, class == RtClass::Sync || blocking_copy);
                self.runtime_names.insert(ev.name.to_vec(), v);
                v
            }
        };
        if class == RtClass::Launch {
            self.launch_calls += 1;
        }
        if blocking {
            let name = String::from_utf8_lossy(&ev.name);
            let e = self.sync_calls.entry(name.into_owned()).or_insert((0, 0.0));
            e.0 += 1;
            e.1 += dur;
        }
        self.runtimes.push(RtRec {
            ts,
            te,
            corr_raw: a.correlation.unwrap_or(NONE),
            legacy: kind == Kind::RuntimeLegacy,
            class,
        });
    }

    /// A CPU operator, Python function or annotation: steps, DataLoader waits, optimizer
    /// steps, communication, tensor-core-eligible ops, and the CPU span.
    #[inline]
    fn host_event(&mut self, kind: Kind, ev: &Event<'_>, ts: f64, te: f64) {
        let a = &ev.args;
        let name = &ev.name[..];
        let is_step = kind != Kind::Python && name.starts_with(b"ProfilerStep#");
        let is_dl = (name.starts_with(b"enumerate(DataLoader)#") && name.ends_with(b".__next__"))
            || name.starts_with(b"enumerate(DataPipe)#");
        if is_dl && kind != Kind::GpuUserAnnotation {
            push_range(&mut self.dataloader_any, (ts, te));
            self.dataloader_starts.push(ts);
            if memfind(name, b"_SingleProcessDataLoaderIter") {
                self.dl_single += 1;
            } else if memfind(name, b"_MultiProcessingDataLoaderIter") {
                self.dl_multi += 1;
            }
        }
        if name.starts_with(b"Optimizer.step#") && kind != Kind::GpuUserAnnotation {
            self.optimizer_steps.push((ts, te));
        }
        let is_comm = COMM_OPS.iter().any(|c| c.as_bytes() == name);
        if is_step {
            let n = String::from_utf8_lossy(&name[b"ProfilerStep#".len()..]).into_owned();
            self.step_seq += 1;
            self.steps.push(StepAnn {
                ts,
                te,
                name: n,
                seq: self.step_seq,
                on_gpu: kind == Kind::GpuUserAnnotation,
            });
        } else if kind == Kind::Operator && is_dl {
            push_range(&mut self.dataloader_plugin, (ts, te));
        } else if is_comm {
            push_range(&mut self.comm_cpu, (ts, te));
        } else if matches!(kind, Kind::Operator | Kind::Python) {
            push_range(&mut self.cpu_op, (ts, te));
        }
        if is_comm {
            if let Some(x) = a.external_id {
                self.comm_ext.insert(x);
            }
        }
        if kind == Kind::Operator {
            if let Some(x) = a.external_id {
                let eligible = match self.eligible_names.get(name) {
                    Some(&v) => v,
                    None => {
                        let v = is_tc_eligible_op(&String::from_utf8_lossy(name));
                        self.eligible_names.insert(name.to_vec(), v);
                        v
                    }
                };
                if eligible {
                    self.tc_eligible_ext.insert(x);
                }
            }
        }
        if is_step || matches!(kind, Kind::Operator | Kind::Python) {
            self.cpu_min = self.cpu_min.min(ts);
            self.cpu_max = self.cpu_max.max(te);
        }
    }
}

fn memfind(h: &[u8], n: &[u8]) -> bool {
    h.windows(n.len()).any(|w| w == n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_classes() {
        let c = copy_class("Memcpy HtoD (Pageable -> Device)");
        assert_eq!((c.dir, c.src, c.dst), ("HtoD", "Pageable", "Device"));
        let c = copy_class("Memcpy DtoH (Device -> Pinned)");
        assert_eq!((c.dir, c.src, c.dst), ("DtoH", "Device", "Pinned"));
        assert_eq!(copy_class("weird").dir, "unknown");
    }

    #[test]
    fn runtime_classes() {
        assert_eq!(runtime_class("cudaLaunchKernel"), RtClass::Launch);
        assert_eq!(runtime_class("cuLaunchKernel"), RtClass::Launch);
        assert_eq!(runtime_class("hipLaunchKernel"), RtClass::Launch);
        assert_eq!(runtime_class("hipExtModuleLaunchKernel"), RtClass::Launch);
        assert_eq!(runtime_class("cudaStreamSynchronize"), RtClass::Sync);
        assert_eq!(runtime_class("cudaMemcpyAsync"), RtClass::Memcpy);
        assert_eq!(runtime_class("cudaEventRecord"), RtClass::Other);
    }

    #[test]
    fn tensor_core_patterns() {
        assert!(is_tc_kernel("volta_h884gemm_64x64_ldg8_nn"));
        assert!(is_tc_kernel(
            "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4>"
        ));
        assert!(!is_tc_kernel("volta_sgemm_128x64_nn"));
        assert!(is_tc_eligible_op("aten::conv2d"));
        assert!(is_tc_eligible_op(
            "autograd::engine::evaluate_function: CudnnConvolutionBackward0"
        ));
        assert!(!is_tc_eligible_op("aten::relu"));
    }
}
