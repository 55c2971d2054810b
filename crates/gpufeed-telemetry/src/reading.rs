//! What the engine hands on: one reading of one GPU at one moment ([`Reading`]), the GPUs a log
//! showed ([`GpuStatic`]) and the interval it was read at ([`LogHeader`]). A metric the log did not
//! give is `None`, never 0. Units live in the field names (`_bytes`, `_pct`, `_mhz`, `_w`, `_c`).
//! The caller turns them into its own records (gpufeed: the lines of a recording).

use serde::{Deserialize, Serialize};

/// What does not change while a GPU is recorded.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuStatic {
    pub index: u32,
    pub name: Option<String>,
    pub uuid: Option<String>,
    pub memory_total_bytes: Option<u64>,
    /// CUDA compute capability as `[major, minor]`.
    pub compute_capability: Option<[u32; 2]>,
    pub pcie_max_gen: Option<u32>,
    pub pcie_max_width: Option<u32>,
    /// MIG mode currently enabled.
    pub mig_enabled: Option<bool>,
    pub power_limit_w: Option<f64>,
}

/// One reading of one GPU from a log.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reading {
    pub index: u32,
    /// Seconds since the log's first reading.
    pub t_s: f64,
    /// Utilization (the best busy measure the log gave, 0–100).
    pub util_pct: Option<f64>,
    /// Percent of time device memory was read or written (not capacity).
    pub mem_util_pct: Option<f64>,
    pub mem_used_bytes: Option<u64>,
    pub sm_clock_mhz: Option<u32>,
    pub power_w: Option<f64>,
    pub temperature_c: Option<u32>,
    /// Cumulative PCIe bytes received by the GPU (host → device).
    pub pcie_rx_bytes: Option<u64>,
    /// Cumulative PCIe bytes sent by the GPU (device → host).
    pub pcie_tx_bytes: Option<u64>,
    pub pcie_rx_bytes_per_s: Option<f64>,
    pub pcie_tx_bytes_per_s: Option<f64>,
    pub pcie_gen: Option<u32>,
    pub pcie_width: Option<u32>,
    /// Clock-event (throttle) reasons as NVML's bitmask ([`throttle`]).
    pub throttle_reasons: Option<u64>,
}

/// What a log says about itself besides its readings: the GPUs it showed (names and totals where
/// it gave them) and the time between readings.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogHeader {
    pub gpus: Vec<GpuStatic>,
    pub interval_s: f64,
}

/// Clock-event reason bits (nvml.h `nvmlClocksEventReason*`).
pub mod throttle {
    pub const GPU_IDLE: u64 = 0x1;
    pub const APPLICATIONS_CLOCKS_SETTING: u64 = 0x2;
    pub const SW_POWER_CAP: u64 = 0x4;
    pub const HW_SLOWDOWN: u64 = 0x8;
    pub const SYNC_BOOST: u64 = 0x10;
    pub const SW_THERMAL: u64 = 0x20;
    pub const HW_THERMAL: u64 = 0x40;
    pub const HW_POWER_BRAKE: u64 = 0x80;
    pub const DISPLAY_CLOCK: u64 = 0x100;

    /// Bits that mean the GPU is really being slowed (not GpuIdle, not an application setting).
    pub const SLOWING: u64 = SW_POWER_CAP | HW_SLOWDOWN | SW_THERMAL | HW_THERMAL | HW_POWER_BRAKE;

    /// Names of the set bits, GpuIdle included (callers decide what counts as throttling).
    pub fn names(mask: u64) -> Vec<&'static str> {
        const ALL: [(u64, &str); 9] = [
            (GPU_IDLE, "gpu_idle"),
            (APPLICATIONS_CLOCKS_SETTING, "applications_clocks_setting"),
            (SW_POWER_CAP, "sw_power_cap"),
            (HW_SLOWDOWN, "hw_slowdown"),
            (SYNC_BOOST, "sync_boost"),
            (SW_THERMAL, "sw_thermal"),
            (HW_THERMAL, "hw_thermal"),
            (HW_POWER_BRAKE, "hw_power_brake"),
            (DISPLAY_CLOCK, "display_clock"),
        ];
        ALL.iter()
            .filter(|(bit, _)| mask & bit != 0)
            .map(|(_, n)| *n)
            .collect()
    }
}
