//! GPU source backed by NVML through nvml-wrapper, with the library loaded at run time.
//!
//! NVML is initialised once, on the sampler's own thread (see `record::recorder`), and device
//! handles are kept for the whole recording. A function the driver lacks (`FailedToLoadSymbol`,
//! `NotSupported`, `FunctionNotFound`) makes that metric `None` and is not called again.

use super::{DriverInfo, GpuProcess, GpuSample, GpuSource, GpuStatic};
use nvml_wrapper::enum_wrappers::device::{Clock, PcieUtilCounter, Sampling, TemperatureSensor};
use nvml_wrapper::enums::device::{SampleValue, UsedGpuMemory};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::FieldValueSample;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::{Device, Nvml};
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// NVML field ids for the cumulative PCIe byte counters (nvml.h).
const FI_PCIE_COUNT_TX_BYTES: u32 = 197;
const FI_PCIE_COUNT_RX_BYTES: u32 = 198;

/// How a recording's `gpu_error` starts when no NVIDIA driver was found (diagnose reads it back:
/// the machine has no GPU).
pub(crate) const NO_DRIVER: &str = "no NVIDIA driver found";

/// Why no GPU could be recorded.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NvmlOpenError {
    #[error("no NVIDIA driver found ({detail})")]
    NoDriver { detail: String },
    #[error("NVML library {path} could not be used: {detail}")]
    BadLibrary { path: PathBuf, detail: String },
    #[error("NVML initialisation failed: {0}")]
    Init(String),
}

/// Loads NVML: from `lib_path` when given, else the system's `libnvidia-ml.so.1`.
pub(crate) fn open(lib_path: Option<&Path>) -> Result<Nvml, NvmlOpenError> {
    let result = match lib_path {
        Some(p) => Nvml::builder().lib_path(p.as_os_str()).init(),
        None => Nvml::init(),
    };
    result.map_err(|e| match (&e, lib_path) {
        (NvmlError::LibloadingError(_), Some(p)) => NvmlOpenError::BadLibrary {
            path: p.to_path_buf(),
            detail: e.to_string(),
        },
        (NvmlError::LibloadingError(_), None) => NvmlOpenError::NoDriver {
            detail: "libnvidia-ml.so.1 could not be loaded".into(),
        },
        (NvmlError::DriverNotLoaded, _) => NvmlOpenError::NoDriver {
            detail: "the NVIDIA kernel driver is not loaded".into(),
        },
        (NvmlError::NoPermission, _) => NvmlOpenError::Init(
            "no permission to open the NVIDIA device files (/dev/nvidia*)".into(),
        ),
        _ => NvmlOpenError::Init(e.to_string()),
    })
}

/// True when an error means "this driver/device will never answer this call".
fn is_permanent(e: &NvmlError) -> bool {
    matches!(
        e,
        NvmlError::NotSupported
            | NvmlError::FailedToLoadSymbol(_)
            | NvmlError::FunctionNotFound
            | NvmlError::NoPermission
            | NvmlError::InvalidArg
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Metric {
    UtilSamples,
    UtilRates,
    MemInfo,
    SmClock,
    Power,
    Temperature,
    PcieCounters,
    PcieThroughput,
    PcieLink,
    Throttle,
    Processes,
    ProcessUtil,
}

struct DeviceState<'n> {
    index: u32,
    device: Device<'n>,
    last_util_ts_us: u64,
    last_proc_util_ts_us: u64,
    disabled: HashSet<Metric>,
}

impl DeviceState<'_> {
    /// Calls `f` unless the metric is known unsupported; a permanent failure disables it.
    fn read<T>(&mut self, m: Metric, f: impl FnOnce(&Device) -> Result<T, NvmlError>) -> Option<T> {
        if self.disabled.contains(&m) {
            return None;
        }
        match f(&self.device) {
            Ok(v) => Some(v),
            Err(e) => {
                if is_permanent(&e) {
                    self.disabled.insert(m);
                }
                None
            }
        }
    }
}

/// A `GpuSource` over an initialised NVML; borrows it, so both live on the sampler thread.
pub(crate) struct NvmlSource<'n> {
    nvml: &'n Nvml,
    devices: Vec<DeviceState<'n>>,
    statics: Vec<GpuStatic>,
}

impl<'n> NvmlSource<'n> {
    /// Opens every device once and reads its static facts.
    pub(crate) fn new(nvml: &'n Nvml) -> Result<Self, NvmlOpenError> {
        let count = nvml
            .device_count()
            .map_err(|e| NvmlOpenError::Init(format!("cannot count devices: {e}")))?;
        let mut devices = Vec::new();
        let mut statics = Vec::new();
        for index in 0..count {
            let device = match nvml.device_by_index(index) {
                Ok(d) => d,
                Err(e) => {
                    eprintln!("gpufeed: warning: GPU {index} cannot be opened ({e}); skipping it");
                    continue;
                }
            };
            statics.push(read_static(index, &device));
            devices.push(DeviceState {
                index,
                device,
                last_util_ts_us: 0,
                last_proc_util_ts_us: 0,
                disabled: HashSet::new(),
            });
        }
        Ok(NvmlSource {
            nvml,
            devices,
            statics,
        })
    }
}

fn read_static(index: u32, d: &Device) -> GpuStatic {
    GpuStatic {
        index,
        name: d.name().ok(),
        uuid: d.uuid().ok(),
        memory_total_bytes: d.memory_info().ok().map(|m| m.total),
        compute_capability: d
            .cuda_compute_capability()
            .ok()
            .and_then(|c| Some([u32::try_from(c.major).ok()?, u32::try_from(c.minor).ok()?])),
        pcie_max_gen: d.max_pcie_link_gen().ok(),
        pcie_max_width: d.max_pcie_link_width().ok(),
        mig_enabled: d.mig_mode().ok().map(|m| m.current == 1),
        power_limit_w: d.power_management_limit().ok().map(|mw| mw as f64 / 1000.0),
    }
}

fn sample_value_f64(v: &SampleValue) -> f64 {
    match *v {
        SampleValue::F64(x) => x,
        SampleValue::U32(x) => x as f64,
        SampleValue::U64(x) => x as f64,
        SampleValue::I64(x) => x as f64,
    }
}

fn sample_value_u64(v: &SampleValue) -> Option<u64> {
    match *v {
        SampleValue::U32(x) => Some(x as u64),
        SampleValue::U64(x) => Some(x),
        SampleValue::I64(x) => u64::try_from(x).ok(),
        SampleValue::F64(x) if x >= 0.0 => Some(x as u64),
        SampleValue::F64(_) => None,
    }
}

fn field_u64(r: Option<&Result<FieldValueSample, NvmlError>>) -> Option<u64> {
    let s = r?.as_ref().ok()?;
    sample_value_u64(s.value.as_ref().ok()?)
}

impl GpuSource for NvmlSource<'_> {
    fn driver(&self) -> DriverInfo {
        DriverInfo {
            driver_version: self.nvml.sys_driver_version().ok(),
            cuda_driver_version: self
                .nvml
                .sys_cuda_driver_version()
                .ok()
                .map(|v| format!("{}.{}", v / 1000, (v % 1000) / 10)),
        }
    }

    fn devices(&self) -> Vec<GpuStatic> {
        self.statics.clone()
    }

    fn sample(&mut self, t_s: f64, t0_unix_us: u64, slow: bool) -> Vec<GpuSample> {
        let rel = |ts_us: u64| (ts_us as f64 - t0_unix_us as f64) / 1e6;
        let mut out = Vec::with_capacity(self.devices.len());
        for st in &mut self.devices {
            let mut s = GpuSample {
                index: st.index,
                t_s,
                ..Default::default()
            };
            let last = st.last_util_ts_us;
            // NOT_FOUND: the driver has no sample newer than `last` (not an error).
            if let Some(samples) = st.read(Metric::UtilSamples, |d| {
                match d.samples(Sampling::GpuUtilization, last) {
                    Err(NvmlError::NotFound) => Ok(Vec::new()),
                    r => r,
                }
            }) {
                let mut v = Vec::with_capacity(samples.len());
                for smp in samples {
                    if smp.timestamp <= last {
                        continue;
                    }
                    st.last_util_ts_us = st.last_util_ts_us.max(smp.timestamp);
                    v.push([rel(smp.timestamp), sample_value_f64(&smp.value)]);
                }
                v.sort_by(|a, b| a[0].total_cmp(&b[0]));
                s.util_samples = Some(v);
            }
            if let Some(u) = st.read(Metric::UtilRates, |d| d.utilization_rates()) {
                s.util_pct = Some(u.gpu as f64);
                s.mem_util_pct = Some(u.memory as f64);
            }
            s.mem_used_bytes = st
                .read(Metric::MemInfo, |d| d.memory_info())
                .map(|m| m.used);
            s.sm_clock_mhz = st.read(Metric::SmClock, |d| d.clock_info(Clock::SM));
            s.power_w = st
                .read(Metric::Power, |d| d.power_usage())
                .map(|mw| mw as f64 / 1000.0);
            s.temperature_c = st.read(Metric::Temperature, |d| {
                d.temperature(TemperatureSensor::Gpu)
            });
            if let Some(fields) = st.read(Metric::PcieCounters, |d| {
                d.field_values_for(&[
                    FieldId(FI_PCIE_COUNT_TX_BYTES),
                    FieldId(FI_PCIE_COUNT_RX_BYTES),
                ])
            }) {
                s.pcie_tx_bytes = field_u64(fields.first());
                s.pcie_rx_bytes = field_u64(fields.get(1));
                if s.pcie_tx_bytes.is_none() && s.pcie_rx_bytes.is_none() {
                    st.disabled.insert(Metric::PcieCounters);
                }
            }
            s.throttle_reasons = st
                .read(Metric::Throttle, |d| d.current_throttle_reasons())
                .map(|r| r.bits());
            if slow {
                if let Some((g, w)) = st.read(Metric::PcieLink, |d| {
                    Ok((d.current_pcie_link_gen()?, d.current_pcie_link_width()?))
                }) {
                    s.pcie_gen = Some(g);
                    s.pcie_width = Some(w);
                }
                // GetPcieThroughput blocks ~20 ms per call: only on slow ticks, and only when the
                // cumulative counters are unavailable.
                if s.pcie_rx_bytes.is_none() {
                    s.pcie_rx_bytes_per_s = st
                        .read(Metric::PcieThroughput, |d| {
                            d.pcie_throughput(PcieUtilCounter::Receive)
                        })
                        .map(|kb| kb as f64 * 1024.0);
                    s.pcie_tx_bytes_per_s = st
                        .read(Metric::PcieThroughput, |d| {
                            d.pcie_throughput(PcieUtilCounter::Send)
                        })
                        .map(|kb| kb as f64 * 1024.0);
                }
                s.processes = read_processes(st);
            }
            out.push(s);
        }
        out
    }
}

fn read_processes(st: &mut DeviceState) -> Option<Vec<GpuProcess>> {
    let procs = st.read(Metric::Processes, |d| d.running_compute_processes())?;
    let since = st.last_proc_util_ts_us;
    let utils = if st.disabled.contains(&Metric::ProcessUtil) {
        None
    } else {
        match st.device.process_utilization_stats(since) {
            Ok(v) => Some(v),
            // NOT_FOUND: no process used the GPU since `since`: every process is at 0.
            Err(NvmlError::NotFound) => Some(Vec::new()),
            Err(e) => {
                if is_permanent(&e) {
                    st.disabled.insert(Metric::ProcessUtil);
                }
                None
            }
        }
    };
    if let Some(u) = &utils {
        if let Some(max) = u.iter().map(|x| x.timestamp).max() {
            st.last_proc_util_ts_us = st.last_proc_util_ts_us.max(max);
        }
    }
    Some(
        procs
            .into_iter()
            .map(|p| GpuProcess {
                pid: p.pid,
                used_memory_bytes: match p.used_gpu_memory {
                    UsedGpuMemory::Used(b) => Some(b),
                    UsedGpuMemory::Unavailable => None,
                },
                sm_util_pct: utils.as_ref().map(|u| {
                    u.iter()
                        .filter(|x| x.pid == p.pid)
                        .map(|x| x.sm_util.min(100))
                        .max()
                        .unwrap_or(0)
                }),
            })
            .collect(),
    )
}
