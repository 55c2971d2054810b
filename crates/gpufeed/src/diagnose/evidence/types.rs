//! The evidence the rules read ([`Evidence`] and its parts), and the bounds it is built within.

use super::python::{PythonEvidence, StepEvidence};
use crate::diagnose::streaming::{PeriodicityResult, Split};
use crate::sample::event::Header;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A GPU counts as "under load" (for judging its PCIe link) at or above this utilization.
pub const LOADED_PCT: f64 = 50.0;
/// A core counts as idle below this, busy at or above [`BUSY_CORE_PCT`].
pub const IDLE_CORE_PCT: f64 = 20.0;
pub const BUSY_CORE_PCT: f64 = 90.0;
/// A process whose mean CPU is at least this (percent of one core) is pinned on a core.
pub const SATURATED_PROC_PCT: f64 = 85.0;

use crate::import::dcgmi::ProfilingMeans;

/// What kind of input the evidence came from (what it can and cannot contain).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// A gpufeed recording (`gpufeed run` / `gpufeed record`): host and process data when the
    /// machine allowed reading them.
    #[default]
    Recording,
    /// An nvidia-smi or dcgmi log: GPU figures only, never host or process data.
    GpuLog,
}

/// Why a recording knows its machine had no GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoGpu {
    /// No NVIDIA driver could be loaded.
    NoDriver,
    /// The driver loaded and reported no device.
    NoDevice,
}

impl NoGpu {
    /// From a recording's header: `None` unless it recorded no GPU for a reason that means the
    /// machine has none (the driver's absence is written as [`crate::sample::nvml::NO_DRIVER`]).
    pub fn of(header: &Header) -> Option<NoGpu> {
        if !header.gpus.is_empty() {
            return None;
        }
        match (&header.driver, header.gpu_error.as_deref()) {
            (Some(_), None) => Some(NoGpu::NoDevice),
            (None, Some(e)) if e.starts_with(crate::sample::nvml::NO_DRIVER) => {
                Some(NoGpu::NoDriver)
            }
            _ => None,
        }
    }

    /// For people: why there is no GPU.
    pub(crate) fn as_words(self) -> &'static str {
        match self {
            NoGpu::NoDriver => "no NVIDIA driver",
            NoGpu::NoDevice => "the NVIDIA driver reported no device",
        }
    }
}

/// A GPU's mean utilization under which it counts as unused (when another GPU works).
pub const UNUSED_PCT: f64 = 1.0;
/// Memory a GPU may hold and still count as unused: a CUDA context is about 300–500 MiB.
pub const UNUSED_MEM_BYTES: u64 = 1 << 30;

/// Everything the rules look at.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// Seconds between the first and last sample (of the judged span, for logs split in phases).
    pub duration_s: f64,
    pub gpus: Vec<GpuEvidence>,
    pub host: HostEvidence,
    pub job: JobEvidence,
    /// What the job's Python stacks say, when they were sampled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<PythonEvidence>,
    /// What the job's step markers say, when it sent any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<StepEvidence>,
    #[serde(default)]
    pub origin: Origin,
    /// Why the recording has no GPU, when gpufeed knows the machine had none (no NVIDIA driver,
    /// or a driver without a device): fixes then name no setting that only acts on a GPU.
    /// `None` when GPUs were recorded or their absence is not known (GPU sampling disabled,
    /// NVML failed to start, a log).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_gpu: Option<NoGpu>,
    /// Impossible values that were dropped (utilization outside 0-100 %, absurd memory or power,
    /// time going backwards, an absurd span): said in the report's notes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// More memory than any GPU has (1 PiB): a value above it is a unit or parsing error.
pub const MAX_PLAUSIBLE_MEM_BYTES: u64 = 1 << 50;
/// More power than any GPU board draws.
pub const MAX_PLAUSIBLE_POWER_W: f64 = 10_000.0;
/// A span longer than this (a year) comes from broken timestamps, not a job.
pub const MAX_PLAUSIBLE_SPAN_S: f64 = 366.0 * 86400.0;

/// Distinct processes followed one by one; later ones count in the job's totals only. A real
/// job has a few hundred over its life (DataLoader workers respawned each epoch); a crafted
/// recording of millions of short `proc_start` lines must not grow memory without end.
pub const MAX_PROCESSES: usize = 10_000;

/// What starts a warning about a bound of memory (not an impossible value).
pub const BOUND_PREFIX: &str = "Bounded: ";

impl Evidence {
    /// GPUs that produced utilization samples.
    pub(crate) fn measured_gpus(&self) -> impl Iterator<Item = &GpuEvidence> {
        self.gpus.iter().filter(|g| g.util_mean_pct.is_some())
    }

    /// Is this measured GPU unused while another one works (0% and no more than a context's
    /// memory)? Such a GPU is judged on its own (`gpu_unused`) and kept out of pooled figures.
    pub(crate) fn is_unused(&self, g: &GpuEvidence) -> bool {
        if g.tiny_kernels().is_some() {
            return false;
        }
        let idle = g.util_mean_pct.is_some_and(|u| u < UNUSED_PCT)
            && g.util_p90_pct.is_none_or(|p| p < 5.0)
            && g.mem_used_max_bytes.is_none_or(|m| m <= UNUSED_MEM_BYTES);
        idle && self
            .measured_gpus()
            .any(|o| o.index != g.index && o.util_mean_pct.is_some_and(|u| u >= 5.0))
    }

    /// The GPUs the job used: the measured ones, less those left unused while another works.
    pub(crate) fn used_gpus(&self) -> impl Iterator<Item = &GpuEvidence> {
        self.measured_gpus().filter(|g| !self.is_unused(g))
    }

    /// Mean busy fraction over the GPUs the job used.
    pub(crate) fn busy_fraction(&self) -> Option<f64> {
        let v: Vec<f64> = self.used_gpus().filter_map(|g| g.busy_fraction).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    }

    /// Strongest periodicity among the used GPUs.
    pub(crate) fn strongest_period(&self) -> Option<PeriodicityResult> {
        self.used_gpus()
            .filter(|g| g.shape_readable())
            .filter_map(|g| g.periodicity)
            .max_by(|a, b| a.strength.total_cmp(&b.strength))
    }

    /// Any used GPU whose utilization sits at two separated levels.
    pub(crate) fn any_bimodal(&self) -> bool {
        self.used_gpus().any(|g| g.bimodal && g.shape_readable())
    }

    /// Logical CPUs per GPU (the CPUs this job may use, divided by the GPUs it drives).
    pub(crate) fn cores_per_gpu(&self) -> Option<f64> {
        let cpus = self.host.cpus_allowed.or(self.host.cpu_count)? as f64;
        // One rank per GPU, or ranks on CPU: the cores are shared by the ranks on this node.
        let gpus = self
            .used_gpus()
            .count()
            .max(self.job.rank_pids.len())
            .max(1) as f64;
        Some(cpus / gpus)
    }

    /// Host samples were recorded.
    pub(crate) fn has_host(&self) -> bool {
        self.host.samples > 0
    }

    /// Process samples of the job were recorded.
    pub(crate) fn has_job(&self) -> bool {
        self.job.samples > 0
    }

    /// Median seconds between utilization samples over the used GPUs (the coarsest wins).
    pub(crate) fn sample_interval_s(&self) -> Option<f64> {
        self.used_gpus()
            .filter_map(|g| g.util_sample_interval_s)
            .reduce(f64::max)
    }

    /// Peak memory in use over the used GPUs, as a fraction of their total.
    pub(crate) fn mem_used_max_fraction(&self) -> Option<f64> {
        self.used_gpus()
            .filter_map(|g| g.mem_used_max_fraction)
            .reduce(f64::max)
    }
}

/// One GPU.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuEvidence {
    pub index: u32,
    pub name: Option<String>,
    /// Utilization samples seen (every driver sample when the recorder kept them).
    pub util_samples: u64,
    /// Median seconds between utilization samples (what the log's sampling can resolve).
    #[serde(default)]
    pub util_sample_interval_s: Option<f64>,
    pub util_mean_pct: Option<f64>,
    pub util_std_pct: Option<f64>,
    pub util_p10_pct: Option<f64>,
    pub util_p50_pct: Option<f64>,
    pub util_p90_pct: Option<f64>,
    /// Mean utilization as a fraction: the share of time a kernel was running.
    pub busy_fraction: Option<f64>,
    /// Share of samples below 30 %.
    pub low_util_fraction: Option<f64>,
    /// Utilization histogram, 20 bins of 5 points (0–5, 5–10, … 95–100).
    pub util_histogram: Vec<u64>,
    /// Two-cluster split of the utilization distribution.
    pub util_split: Option<Split>,
    /// The split shows two separated levels (busy / starved).
    pub bimodal: bool,
    pub periodicity: Option<PeriodicityResult>,
    /// CUDA compute capability `[major, minor]` where the input says (recordings).
    #[serde(default)]
    pub compute_capability: Option<[u32; 2]>,
    pub mem_total_bytes: Option<u64>,
    pub mem_used_max_bytes: Option<u64>,
    pub mem_used_mean_bytes: Option<f64>,
    /// Peak used / total.
    pub mem_used_max_fraction: Option<f64>,
    pub pcie: PcieEvidence,
    pub throttle: ThrottleEvidence,
    pub profiling: Option<ProfilingMeans>,
    /// Mean temperature, power and SM clock where recorded.
    pub temperature_mean_c: Option<f64>,
    pub power_mean_w: Option<f64>,
    pub sm_clock_mean_mhz: Option<f64>,
    /// Utilization over time for a sparkline: bucket width and bucket means.
    pub timeline_step_s: f64,
    pub timeline_pct: Vec<f64>,
    /// The end of the run at full resolution (up to 60 resampled values) for a zoomed sparkline.
    pub recent_step_s: f64,
    pub recent_pct: Vec<f64>,
    /// This GPU judged on its own, set with the verdict (`None` in evidence not yet judged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<GpuVerdict>,
}

/// One GPU's own verdict: its state and a line on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuVerdict {
    pub state: GpuState,
    pub summary: String,
}

/// What one GPU did over the judged span.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[strum(serialize_all = "snake_case")]
#[serde(rename_all = "snake_case")]
pub enum GpuState {
    /// Steadily busy (≥ 80 % without a busy/starved pattern): compute-bound.
    Busy,
    /// Busy and starved in turn (a repeating pattern or two levels, < 80 % busy).
    Starving,
    /// Neither busy nor starving: a flat, partial utilization.
    Underused,
    /// Under 5 % busy.
    Idle,
    /// 0 % with no more than a CUDA context's memory while another GPU works.
    Unused,
    /// A kernel runs nearly all the time (graphics engine active or utilization high) but its
    /// SMs are almost empty (SM active low): kernels too small to fill the GPU (batch too small,
    /// launch-bound). Seen only where the input has DCGM's SM activity.
    TinyKernels,
}

/// SM active (%) under which a GPU that always has a kernel running is running tiny kernels.
pub const TINY_SM_ACTIVE_PCT: f64 = 20.0;
/// Engine activity (%) from which a GPU counts as always having a kernel running.
pub const QUEUED_PCT: f64 = 60.0;

/// Fewest utilization readings in which a repeating pattern or two levels mean anything (ten
/// readings of a log show neither).
pub const MIN_SHAPE_SAMPLES: u64 = 30;

impl GpuEvidence {
    /// Are there readings enough to read a shape (a period, two levels) from?
    pub(crate) fn shape_readable(&self) -> bool {
        self.util_samples >= MIN_SHAPE_SAMPLES
    }

    /// SM active and the engine's activity (graphics engine active, else utilization) of a GPU
    /// that always has a kernel running but almost no SM in use: kernels too small to fill it.
    pub(crate) fn tiny_kernels(&self) -> Option<(f64, f64)> {
        let p = self.profiling.as_ref()?;
        let sm = p.sm_active_pct?;
        let engine = p.gr_active_pct.or(p.util_pct)?;
        (sm < TINY_SM_ACTIVE_PCT && engine >= QUEUED_PCT).then_some((sm, engine))
    }
}

/// Host-to-device PCIe traffic against the link's capacity.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PcieEvidence {
    /// Rate readings (from cumulative counters or the 20 ms throughput call).
    pub rx_samples: u64,
    pub rx_mean_bytes_per_s: Option<f64>,
    pub rx_max_bytes_per_s: Option<f64>,
    /// Mean and 90th percentile of RX / capacity at the link's current generation × width.
    pub rx_capacity_mean_fraction: Option<f64>,
    pub rx_capacity_p90_fraction: Option<f64>,
    /// Share of rate readings at ≥ 70 % of capacity.
    pub rx_near_capacity_fraction: Option<f64>,
    /// Most common current generation and width while loaded (or overall when never loaded).
    pub gen_current: Option<u32>,
    pub width_current: Option<u32>,
    pub gen_max: Option<u32>,
    pub width_max: Option<u32>,
    /// Capacity per direction at the current and the maximum link state.
    pub capacity_current_bytes_per_s: Option<f64>,
    pub capacity_max_bytes_per_s: Option<f64>,
    /// Samples taken with the GPU at ≥ 50 % utilization and a known link state.
    pub loaded_link_samples: u64,
    /// Share of those below the maximum generation or width.
    pub degraded_loaded_fraction: Option<f64>,
}

/// Time spent with clock-slowing reasons (never counting GpuIdle).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ThrottleEvidence {
    /// Seconds covered by throttle-reason readings.
    pub observed_s: f64,
    /// Share of that time with any slowing reason (power cap, thermal, HW slowdown, power brake).
    pub slowing_fraction: Option<f64>,
    /// Share of observed time per reason name (GpuIdle excluded).
    pub by_reason: BTreeMap<String, f64>,
}

/// The machine.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostEvidence {
    pub cpu_count: Option<u32>,
    pub cpus_allowed: Option<u32>,
    pub samples: u64,
    pub cpu_mean_pct: Option<f64>,
    /// Mean number of cores below 20 % / at or above 90 %.
    pub idle_cores_mean: Option<f64>,
    pub busy_cores_mean: Option<f64>,
    pub iowait_mean_pct: Option<f64>,
    pub psi_cpu_some_mean_pct: Option<f64>,
    pub psi_io_some_mean_pct: Option<f64>,
    pub psi_io_full_mean_pct: Option<f64>,
    pub psi_mem_some_mean_pct: Option<f64>,
    pub psi_mem_full_mean_pct: Option<f64>,
    /// Sum over block devices.
    pub disk_read_mean_bytes_per_s: Option<f64>,
    pub disk_read_max_bytes_per_s: Option<f64>,
    pub mem_total_bytes: Option<u64>,
    pub mem_available_min_bytes: Option<u64>,
}

/// Role of a process in the job's tree.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Role {
    /// The training loop (the root, or the first busy process under a launcher).
    Main,
    /// A descendant of the main process (DataLoader workers and the like).
    Worker,
    /// Launchers and anything else in the tree.
    Other,
}

impl Role {
    /// The wire name (the JSON's).
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// One process of the job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcEvidence {
    pub pid: u32,
    pub ppid: u32,
    pub cmd: Option<String>,
    pub role: Role,
    pub samples: u64,
    pub cpu_mean_pct: Option<f64>,
    pub cpu_max_pct: Option<f64>,
    pub rss_max_bytes: Option<u64>,
    /// Share of samples in uninterruptible sleep (D: usually waiting for I/O).
    pub d_state_fraction: Option<f64>,
    /// Bytes read from storage while recorded.
    pub read_bytes: Option<u64>,
    pub first_t_s: f64,
    pub last_t_s: f64,
}

/// The job's process tree.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobEvidence {
    pub pid: Option<u32>,
    pub main_pid: Option<u32>,
    pub main_cmd: Option<String>,
    pub main_cpu_mean_pct: Option<f64>,
    /// Share of samples with the main process at ≥ 90 % of a core.
    pub main_saturated_fraction: Option<f64>,
    /// Most worker processes alive at once.
    pub workers_max: u32,
    /// Worker processes seen over the whole run.
    pub workers_seen: u32,
    /// Mean CPU of one worker, and of all workers together (percent of one core).
    pub worker_cpu_mean_pct: Option<f64>,
    pub workers_cpu_total_mean_pct: Option<f64>,
    /// Workers whose mean CPU is ≥ 85 % of a core.
    pub saturated_workers: u32,
    /// Whole tree, percent of one core.
    pub cpu_mean_pct: Option<f64>,
    pub samples: u64,
    /// Share of process samples in D state, and share of sampling instants with any process in D.
    pub d_state_fraction: Option<f64>,
    pub d_state_time_fraction: Option<f64>,
    /// Storage read rate of the whole tree.
    pub read_mean_bytes_per_s: Option<f64>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub processes: Vec<ProcEvidence>,
    /// The training processes of a multi-process job (torchrun, accelerate, Lightning DDP...),
    /// by pid; empty for a single training process. Each has role `main`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rank_pids: Vec<u32>,
}
