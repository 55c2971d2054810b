//! Sources of facts and the sample types they produce.
//!
//! GPUs sit behind the `GpuSource` trait so the recorder, tests and benchmarks
//! can drive any implementation. A metric that could not be read is `None` — never 0 or -1.
//! Units live in the field names (`_bytes`, `_pct`, `_mhz`, `_w`, `_c`, `_s`).

pub(crate) mod event;
pub(crate) mod figures;
pub(crate) mod host;
pub(crate) mod nvml;
pub(crate) mod pyphase;
pub(crate) mod pystacks;
pub(crate) mod ranks;
pub(crate) mod stepmark;
pub(crate) mod steps;

use serde::{Deserialize, Serialize};

use gpufeed_json::json_fields;
pub(crate) use gpufeed_telemetry::reading::throttle;
pub use gpufeed_telemetry::reading::GpuStatic;

/// Driver-wide facts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DriverInfo {
    pub driver_version: Option<String>,
    /// CUDA driver API version, e.g. "12.4".
    pub cuda_driver_version: Option<String>,
}

json_fields! {
    /// One process seen on a GPU.
    #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
    pub struct GpuProcess {
        pub pid: u32,
        pub used_memory_bytes: Option<u64>,
        /// SM utilization of this process since the previous reading (0–100).
        pub sm_util_pct: Option<u32>,
    }
}

json_fields! {
    /// One reading of one GPU. Metrics that were not read are left out of the line (read back as
    /// `None`); `util_samples` is always written, since `null` (no sample buffer) and `[]` (no new
    /// sample) differ.
    #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
    pub struct GpuSample {
        pub index: u32,
        /// Seconds since the recording started.
        pub t_s: f64,
        /// Every utilization sample the driver produced since the previous reading, as
        /// `[t_s, util_pct]` pairs (t_s relative to the recording's start). Empty when the driver had
        /// nothing new; `None` when the driver cannot give per-period samples (then `util_pct` is the
        /// `GetUtilizationRates` fallback).
        pub util_samples: Option<Vec<[f64; 2]>>,
        /// Utilization over the driver's last sample period (`GetUtilizationRates`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub util_pct: Option<f64>,
        /// Percent of time device memory was read or written (not capacity).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub mem_util_pct: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub mem_used_bytes: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub sm_clock_mhz: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub power_w: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub temperature_c: Option<u32>,
        /// Cumulative PCIe bytes received by the GPU (host → device), where the driver counts them.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub pcie_rx_bytes: Option<u64>,
        /// Cumulative PCIe bytes sent by the GPU (device → host).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub pcie_tx_bytes: Option<u64>,
        /// PCIe receive rate over a 20 ms window (`GetPcieThroughput`, read at a lower rate).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub pcie_rx_bytes_per_s: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub pcie_tx_bytes_per_s: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub pcie_gen: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub pcie_width: Option<u32>,
        /// Clock-event (throttle) reasons bitmask as NVML reports it; bit 0x1 (GpuIdle) is not throttling.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub throttle_reasons: Option<u64>,
        /// Compute processes on this GPU (read at a lower rate; `None` between readings).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub processes: Option<Vec<GpuProcess>>,
    }
}

/// Static facts about the host.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostInfo {
    pub hostname: Option<String>,
    pub kernel: Option<String>,
    /// Logical CPUs online.
    pub cpu_count: u32,
    /// CPUs this process may run on (sched_getaffinity).
    pub cpus_allowed: Option<u32>,
    pub mem_total_bytes: Option<u64>,
    pub clock_ticks_per_s: Option<u64>,
}

json_fields! {
    /// Per-device disk throughput over one interval.
    #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
    pub struct DiskRate {
        pub device: String,
        pub read_bytes_per_s: f64,
        pub write_bytes_per_s: f64,
    }
}

json_fields! {
    /// One reading of the whole machine.
    #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
    pub struct HostSample {
        pub t_s: f64,
        /// Busy percent of each logical CPU over the interval (user+nice+system+irq+softirq+steal).
        pub cpu_pct: Vec<f64>,
        /// Mean over all CPUs.
        pub cpu_total_pct: Option<f64>,
        /// Percent of the interval CPUs spent waiting for I/O (iowait, machine-wide).
        pub iowait_pct: Option<f64>,
        pub mem_total_bytes: Option<u64>,
        pub mem_available_bytes: Option<u64>,
        pub mem_cached_bytes: Option<u64>,
        pub swap_total_bytes: Option<u64>,
        pub swap_free_bytes: Option<u64>,
        /// Pressure stall information: percent of the interval some task stalled (from the `total` counters).
        pub psi_cpu_some_pct: Option<f64>,
        pub psi_io_some_pct: Option<f64>,
        pub psi_io_full_pct: Option<f64>,
        pub psi_mem_some_pct: Option<f64>,
        pub psi_mem_full_pct: Option<f64>,
        pub disks: Vec<DiskRate>,
    }
}

/// One process of the job's tree, as first seen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcStart {
    pub t_s: f64,
    pub pid: u32,
    pub ppid: u32,
    /// Command line (arguments joined by spaces); `None` when unreadable.
    pub cmd: Option<String>,
    /// Short name from /proc/PID/comm.
    pub comm: Option<String>,
}

json_fields! {
    /// One reading of one process of the job's tree. Fields not read at this reading are left out
    /// of the line (the most frequent line of a recording), and read back as `None`.
    #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
    pub struct ProcSample {
        pub pid: u32,
        /// user+system CPU over the interval, percent of one core (can exceed 100 with threads).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub cpu_pct: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub rss_bytes: Option<u64>,
        /// Cumulative bytes read from storage (/proc/PID/io read_bytes), where permitted.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub read_bytes: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub write_bytes: Option<u64>,
        /// Scheduler state letter: R running, S sleeping, D uninterruptible (usually I/O), Z, T, ...
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub state: Option<char>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub threads: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub voluntary_ctxt_switches: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub nonvoluntary_ctxt_switches: Option<u64>,
    }
}

/// Abstraction over a GPU driver, so tests and the recorder never depend on real hardware.
pub(crate) trait GpuSource: Send {
    fn driver(&self) -> DriverInfo;
    fn devices(&self) -> Vec<GpuStatic>;
    /// Reads every device once. `t0_unix_us` is the recording's start (Unix µs), to convert driver
    /// timestamps; `slow` asks for the expensive metrics too (process lists, PCIe throughput).
    fn sample(&mut self, t_s: f64, t0_unix_us: u64, slow: bool) -> Vec<GpuSample>;
}

/// A reading of a GPU log as a recording's `gpu` line: a log holds no driver sample buffer
/// (`util_samples` is `None`) and no processes per reading.
impl From<&gpufeed_telemetry::reading::Reading> for GpuSample {
    fn from(r: &gpufeed_telemetry::reading::Reading) -> Self {
        GpuSample {
            index: r.index,
            t_s: r.t_s,
            util_samples: None,
            util_pct: r.util_pct,
            mem_util_pct: r.mem_util_pct,
            mem_used_bytes: r.mem_used_bytes,
            sm_clock_mhz: r.sm_clock_mhz,
            power_w: r.power_w,
            temperature_c: r.temperature_c,
            pcie_rx_bytes: r.pcie_rx_bytes,
            pcie_tx_bytes: r.pcie_tx_bytes,
            pcie_rx_bytes_per_s: r.pcie_rx_bytes_per_s,
            pcie_tx_bytes_per_s: r.pcie_tx_bytes_per_s,
            pcie_gen: r.pcie_gen,
            pcie_width: r.pcie_width,
            throttle_reasons: r.throttle_reasons,
            processes: None,
        }
    }
}
