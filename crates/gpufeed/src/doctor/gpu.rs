//! GPU checks from NVML: the GPUs present, PCIe link, persistence mode, ECC errors, current
//! throttle reasons and MIG mode.
//!
//! `probe` reads the facts (through nvml-wrapper, with the library chosen by `--nvml-lib`); the
//! `judge_*` functions are pure.

use super::version::{cc_str, Cc, CudaVersion};
use super::{Check, Group, Status};
use crate::sample::nvml::{open, NvmlOpenError};
use crate::sample::throttle;
use crate::units::pcie_link_bytes_per_s;
use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError};
use nvml_wrapper::Device;
use std::path::Path;

/// Why no GPU facts could be read.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum GpuProbeError {
    #[error("{0}")]
    Open(String),
    #[error("NVML could not count the GPUs: {0}")]
    Count(String),
}

impl From<NvmlOpenError> for GpuProbeError {
    fn from(e: NvmlOpenError) -> Self {
        GpuProbeError::Open(e.to_string())
    }
}

/// What NVML says about the machine.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct GpuSystem {
    pub driver_version: Option<String>,
    /// The newest CUDA version the driver supports.
    pub cuda_driver_version: Option<CudaVersion>,
    pub devices: Vec<GpuFacts>,
}

impl GpuSystem {
    /// The lowest compute capability among the GPUs (what code must run on).
    pub(crate) fn min_cc(&self) -> Option<Cc> {
        self.devices
            .iter()
            .filter_map(|d| d.compute_capability)
            .min()
    }
}

/// What NVML says about one GPU; `None` where the driver did not answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct GpuFacts {
    pub index: u32,
    pub name: Option<String>,
    pub uuid: Option<String>,
    pub compute_capability: Option<Cc>,
    pub memory_total_bytes: Option<u64>,
    pub pcie_cur_gen: Option<u32>,
    pub pcie_cur_width: Option<u32>,
    pub pcie_max_gen: Option<u32>,
    pub pcie_max_width: Option<u32>,
    /// GPU utilization now, to tell a link stepped down at idle from a degraded one.
    pub util_pct: Option<u32>,
    pub persistence_mode: Option<bool>,
    pub ecc_enabled: Option<bool>,
    pub ecc_volatile_corrected: Option<u64>,
    pub ecc_volatile_uncorrected: Option<u64>,
    pub ecc_aggregate_uncorrected: Option<u64>,
    pub throttle_reasons: Option<u64>,
    pub mig_enabled: Option<bool>,
    pub pci_bus_id: Option<String>,
    pub numa_node: Option<u32>,
}

/// Opens NVML and reads every GPU's facts.
pub(crate) fn probe(lib: Option<&Path>) -> Result<GpuSystem, GpuProbeError> {
    let nvml = open(lib)?;
    let count = nvml
        .device_count()
        .map_err(|e| GpuProbeError::Count(e.to_string()))?;
    let mut sys = GpuSystem {
        driver_version: nvml.sys_driver_version().ok(),
        cuda_driver_version: nvml
            .sys_cuda_driver_version()
            .ok()
            .and_then(CudaVersion::from_int),
        devices: Vec::new(),
    };
    for index in 0..count {
        match nvml.device_by_index(index) {
            Ok(d) => sys.devices.push(read_device(index, &d)),
            Err(_) => sys.devices.push(GpuFacts {
                index,
                ..Default::default()
            }),
        }
    }
    Ok(sys)
}

fn read_device(index: u32, d: &Device) -> GpuFacts {
    let pci_bus_id = d.pci_info().ok().map(|p| p.bus_id);
    let numa_node = d
        .numa_node_id()
        .ok()
        .or_else(|| pci_bus_id.as_deref().and_then(numa_node_from_sysfs));
    let ecc_enabled = d.is_ecc_enabled().ok().map(|m| m.currently_enabled);
    let ecc = |e: MemoryError, c: EccCounter| {
        if ecc_enabled == Some(true) {
            d.total_ecc_errors(e, c).ok()
        } else {
            None
        }
    };
    GpuFacts {
        index,
        name: d.name().ok(),
        uuid: d.uuid().ok(),
        compute_capability: d
            .cuda_compute_capability()
            .ok()
            .and_then(|c| Some((u32::try_from(c.major).ok()?, u32::try_from(c.minor).ok()?))),
        memory_total_bytes: d.memory_info().ok().map(|m| m.total),
        pcie_cur_gen: d.current_pcie_link_gen().ok(),
        pcie_cur_width: d.current_pcie_link_width().ok(),
        pcie_max_gen: d.max_pcie_link_gen().ok(),
        pcie_max_width: d.max_pcie_link_width().ok(),
        util_pct: d.utilization_rates().ok().map(|u| u.gpu),
        persistence_mode: d.is_in_persistent_mode().ok(),
        ecc_enabled,
        ecc_volatile_corrected: ecc(MemoryError::Corrected, EccCounter::Volatile),
        ecc_volatile_uncorrected: ecc(MemoryError::Uncorrected, EccCounter::Volatile),
        ecc_aggregate_uncorrected: ecc(MemoryError::Uncorrected, EccCounter::Aggregate),
        throttle_reasons: d.current_throttle_reasons().ok().map(|r| r.bits()),
        mig_enabled: d.mig_mode().ok().map(|m| m.current == 1),
        pci_bus_id,
        numa_node,
    }
}

/// NVML's bus id ("00000000:17:00.0") as the sysfs name ("0000:17:00.0").
pub(crate) fn sysfs_bus_id(nvml_bus_id: &str) -> Option<String> {
    let id = nvml_bus_id.trim().to_ascii_lowercase();
    let (domain, rest) = id.split_once(':')?;
    let domain = u32::from_str_radix(domain, 16).ok()?;
    Some(format!("{domain:04x}:{rest}"))
}

fn numa_node_from_sysfs(bus_id: &str) -> Option<u32> {
    let dev = sysfs_bus_id(bus_id)?;
    let s = std::fs::read_to_string(format!("/sys/bus/pci/devices/{dev}/numa_node")).ok()?;
    // -1: the platform reports no NUMA affinity.
    u32::try_from(s.trim().parse::<i64>().ok()?).ok()
}

/// Utilization at or above which the GPU counts as under load (its link should be at full speed).
pub(crate) const LOADED_UTIL_PCT: u32 = 50;

/// All GPU checks; without NVML, one `gpus` skip says why.
pub(crate) fn checks(gpus: &Result<GpuSystem, GpuProbeError>) -> Vec<Check> {
    let sys = match gpus {
        Ok(s) => s,
        Err(e) => {
            return vec![Check::skip(
                "gpus",
                Group::Gpu,
                format!("no GPU checks: {e}"),
            )]
        }
    };
    let mut out = vec![judge_gpus(sys)];
    for d in &sys.devices {
        out.push(judge_pcie(d).gpu(d.index));
        out.push(judge_persistence(d).gpu(d.index));
        out.push(judge_ecc(d).gpu(d.index));
        out.push(judge_throttle(d).gpu(d.index));
        out.push(judge_mig(d).gpu(d.index));
    }
    out
}

pub(crate) fn judge_gpus(sys: &GpuSystem) -> Check {
    if sys.devices.is_empty() {
        return Check::skip(
            "gpus",
            Group::Gpu,
            "the NVIDIA driver is loaded but reports no GPU",
        );
    }
    let names: Vec<String> = sys
        .devices
        .iter()
        .map(|d| {
            let name = d.name.clone().unwrap_or_else(|| "unknown GPU".into());
            match d.compute_capability {
                Some(cc) => format!("{name} (compute capability {})", cc_str(cc)),
                None => name,
            }
        })
        .collect();
    Check::new(
        "gpus",
        Group::Gpu,
        Status::Pass,
        format!(
            "{}: {}",
            crate::units::plural(sys.devices.len(), "GPU", "GPUs"),
            names.join(", ")
        ),
    )
    .with("gpu_count", sys.devices.len() as u64)
    .with(
        "names",
        serde_json::json!(sys
            .devices
            .iter()
            .map(|d| d.name.clone())
            .collect::<Vec<_>>()),
    )
}

pub(crate) fn judge_pcie(d: &GpuFacts) -> Check {
    let id = "pcie_link";
    let (Some(cg), Some(cw), Some(mg), Some(mw)) = (
        d.pcie_cur_gen,
        d.pcie_cur_width,
        d.pcie_max_gen,
        d.pcie_max_width,
    ) else {
        return Check::skip(
            id,
            Group::Gpu,
            "the driver does not report this GPU's PCIe link (SXM/NVLink-only boards may not)",
        );
    };
    let link = format!("gen{cg} x{cw} (max gen{mg} x{mw})");
    let base = |st, s: String| {
        Check::new(id, Group::Gpu, st, s)
            .with("pcie_cur_gen", cg)
            .with("pcie_cur_width", cw)
            .with("pcie_max_gen", mg)
            .with("pcie_max_width", mw)
            .with("util_pct", d.util_pct)
            .with("max_link_bytes_per_s", pcie_link_bytes_per_s(mg, mw))
            .with("cur_link_bytes_per_s", pcie_link_bytes_per_s(cg, cw))
    };
    if cg >= mg && cw >= mw {
        return base(Status::Pass, format!("PCIe {link}: full speed"));
    }
    let loaded = d.util_pct.is_some_and(|u| u >= LOADED_UTIL_PCT);
    let fix_hw = "the link trained below its maximum: reseat the card or riser, check the slot's \
                  wiring (an x16 card in an x8 slot), the BIOS PCIe generation setting, and \
                  `nvidia-smi -q -d PCIE` for replay errors";
    if loaded {
        return base(
            Status::Fail,
            format!(
                "PCIe {link} while the GPU is {}% busy: degraded link",
                d.util_pct.unwrap_or(0)
            ),
        )
        .fix(fix_hw);
    }
    if cw < mw {
        return base(
            Status::Warn,
            format!("PCIe {link} at idle: idle links step down their generation, but a narrower width usually stays"),
        )
        .fix(format!("re-check under load (run `gpufeed doctor` while training, or `gpufeed bench`); if it stays narrow, {fix_hw}"));
    }
    base(
        Status::Pass,
        format!("PCIe {link} at idle: links step down when idle, so this is expected"),
    )
    .fix("to confirm full speed, run `gpufeed doctor` while training or `gpufeed bench`")
}

pub(crate) fn judge_persistence(d: &GpuFacts) -> Check {
    let id = "persistence_mode";
    match d.persistence_mode {
        None => Check::skip(id, Group::Gpu, "the driver does not report persistence mode"),
        Some(true) => Check::new(id, Group::Gpu, Status::Pass, "persistence mode on")
            .with("persistence_mode", true),
        Some(false) => Check::new(
            id,
            Group::Gpu,
            Status::Warn,
            "persistence mode off: every process that opens the GPU pays the driver's initialisation (seconds on multi-GPU machines) and clocks/ECC state reset between jobs",
        )
        .with("persistence_mode", false)
        .fix("`sudo nvidia-smi -pm 1`, or better enable the nvidia-persistenced service"),
    }
}

pub(crate) fn judge_ecc(d: &GpuFacts) -> Check {
    let id = "ecc";
    match d.ecc_enabled {
        None => Check::skip(id, Group::Gpu, "ECC not supported on this GPU"),
        Some(false) => {
            Check::new(id, Group::Gpu, Status::Pass, "ECC disabled").with("ecc_enabled", false)
        }
        Some(true) => {
            let base = |st, s: &str| {
                Check::new(id, Group::Gpu, st, s.to_string())
                    .with("ecc_enabled", true)
                    .with("volatile_corrected", d.ecc_volatile_corrected)
                    .with("volatile_uncorrected", d.ecc_volatile_uncorrected)
                    .with("aggregate_uncorrected", d.ecc_aggregate_uncorrected)
            };
            if d.ecc_volatile_uncorrected.is_some_and(|n| n > 0) {
                base(Status::Fail, "uncorrectable ECC errors since the last driver reload: the GPU's memory is failing or needs a reset")
                    .fix("drain the GPU, reset it (`nvidia-smi -r`) or reboot; if errors return, have the GPU replaced (check `nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER`)")
            } else if d.ecc_aggregate_uncorrected.is_some_and(|n| n > 0) {
                base(Status::Warn, "uncorrectable ECC errors in the GPU's lifetime (none since the last reload)")
                    .fix("watch `nvidia-smi -q -d ECC,ROW_REMAPPER`; pending row remaps need a GPU reset")
            } else if d.ecc_volatile_uncorrected.is_none() && d.ecc_aggregate_uncorrected.is_none()
            {
                base(Status::Pass, "ECC on (the driver gave no error counts)")
            } else {
                base(Status::Pass, "ECC on, no uncorrectable errors")
            }
        }
    }
}

pub(crate) fn judge_throttle(d: &GpuFacts) -> Check {
    let id = "throttle";
    let Some(mask) = d.throttle_reasons else {
        return Check::skip(
            id,
            Group::Gpu,
            "the driver does not report clock throttle reasons",
        );
    };
    let names = throttle::names(mask);
    let base = |st, s: String| {
        Check::new(id, Group::Gpu, st, s)
            .with("throttle_reasons_mask", mask)
            .with("throttle_reasons", serde_json::json!(names))
    };
    let hw = throttle::HW_SLOWDOWN | throttle::HW_THERMAL | throttle::HW_POWER_BRAKE;
    let soft =
        throttle::SW_THERMAL | throttle::SW_POWER_CAP | throttle::APPLICATIONS_CLOCKS_SETTING;
    let active: Vec<&str> = throttle::names(mask & (hw | soft));
    if mask & hw != 0 {
        base(
            Status::Fail,
            format!("clocks held down by the hardware now: {}", active.join(", ")),
        )
        .fix("check cooling (fans, airflow, `nvidia-smi -q -d TEMPERATURE`) and the power supply; HW slowdown at normal temperatures points to a failing PSU or cable")
    } else if mask & soft != 0 {
        let fix = if mask & throttle::APPLICATIONS_CLOCKS_SETTING != 0 {
            "application clocks are set below the maximum: `sudo nvidia-smi -rac` resets them"
        } else if mask & throttle::SW_THERMAL != 0 {
            "the GPU is hot enough for the driver to lower clocks: improve cooling"
        } else {
            "at the power cap under load this is normal; if the limit was lowered, `nvidia-smi -q -d POWER` shows it and `sudo nvidia-smi -pl <watts>` raises it"
        };
        base(
            Status::Warn,
            format!("clocks lowered now: {}", active.join(", ")),
        )
        .fix(fix)
    } else if mask & throttle::GPU_IDLE != 0 {
        base(
            Status::Pass,
            "no throttling (GpuIdle only: the GPU has nothing to run, which is not throttling)"
                .into(),
        )
    } else {
        base(Status::Pass, "no throttling".into())
    }
}

pub(crate) fn judge_mig(d: &GpuFacts) -> Check {
    let id = "mig";
    match d.mig_enabled {
        None => Check::skip(id, Group::Gpu, "MIG not supported on this GPU"),
        Some(false) => {
            Check::new(id, Group::Gpu, Status::Pass, "MIG off: the whole GPU is available")
                .with("mig_enabled", false)
        }
        Some(true) => Check::new(
            id,
            Group::Gpu,
            Status::Warn,
            "MIG on: a job gets only its instance's share of SMs, memory and copy engines, and NVML utilization and PCIe counters are not per instance",
        )
        .with("mig_enabled", true)
        .fix("if one job should use the whole GPU: `sudo nvidia-smi -i <gpu> -mig 0` (needs an idle GPU and a reset)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev() -> GpuFacts {
        GpuFacts {
            index: 0,
            name: Some("NVIDIA A100".into()),
            compute_capability: Some((8, 0)),
            pcie_cur_gen: Some(4),
            pcie_cur_width: Some(16),
            pcie_max_gen: Some(4),
            pcie_max_width: Some(16),
            util_pct: Some(0),
            ..Default::default()
        }
    }

    #[test]
    fn bus_ids() {
        assert_eq!(
            sysfs_bus_id("00000000:17:00.0").as_deref(),
            Some("0000:17:00.0")
        );
        assert_eq!(
            sysfs_bus_id("00000001:AB:00.0").as_deref(),
            Some("0001:ab:00.0")
        );
        assert_eq!(sysfs_bus_id("garbage"), None);
    }

    #[test]
    fn link_bandwidth() {
        let b = pcie_link_bytes_per_s(4, 16).unwrap();
        assert!((b / 1e9 - 31.5).abs() < 0.1, "{b}");
        let b = pcie_link_bytes_per_s(5, 16).unwrap();
        assert!((b / 1e9 - 63.0).abs() < 0.1, "{b}");
        // Gen6 is FLIT-encoded (242/256), not twice Gen5: about 121 GB/s at x16.
        let b = pcie_link_bytes_per_s(6, 16).unwrap();
        assert!((b / 1e9 - 121.0).abs() < 0.1, "{b}");
        assert_eq!(pcie_link_bytes_per_s(9, 16), None);
    }

    #[test]
    fn pcie_judgement() {
        assert_eq!(judge_pcie(&dev()).status, Status::Pass);
        // Gen stepped down at idle: expected.
        let idle = GpuFacts {
            pcie_cur_gen: Some(1),
            ..dev()
        };
        let c = judge_pcie(&idle);
        assert_eq!(c.status, Status::Pass);
        assert!(c.summary.contains("idle"));
        // Narrow at idle: worth a look.
        let narrow = GpuFacts {
            pcie_cur_width: Some(8),
            ..dev()
        };
        assert_eq!(judge_pcie(&narrow).status, Status::Warn);
        // Anything below max under load: degraded.
        let loaded = GpuFacts {
            pcie_cur_gen: Some(3),
            util_pct: Some(95),
            ..dev()
        };
        let c = judge_pcie(&loaded);
        assert_eq!(c.status, Status::Fail);
        assert!(c.fix.is_some());
        // Unknown link: skip.
        let unknown = GpuFacts {
            pcie_cur_gen: None,
            ..dev()
        };
        assert_eq!(judge_pcie(&unknown).status, Status::Skip);
        // Unknown utilization counts as idle (cannot prove load).
        let no_util = GpuFacts {
            pcie_cur_gen: Some(3),
            util_pct: None,
            ..dev()
        };
        assert_eq!(judge_pcie(&no_util).status, Status::Pass);
    }

    #[test]
    fn persistence_judgement() {
        assert_eq!(judge_persistence(&dev()).status, Status::Skip);
        let on = GpuFacts {
            persistence_mode: Some(true),
            ..dev()
        };
        assert_eq!(judge_persistence(&on).status, Status::Pass);
        let off = GpuFacts {
            persistence_mode: Some(false),
            ..dev()
        };
        let c = judge_persistence(&off);
        assert_eq!(c.status, Status::Warn);
        assert!(c.fix.unwrap().contains("nvidia-smi -pm 1"));
    }

    #[test]
    fn ecc_judgement() {
        assert_eq!(judge_ecc(&dev()).status, Status::Skip);
        let clean = GpuFacts {
            ecc_enabled: Some(true),
            ecc_volatile_uncorrected: Some(0),
            ecc_aggregate_uncorrected: Some(0),
            ..dev()
        };
        assert_eq!(judge_ecc(&clean).status, Status::Pass);
        let old = GpuFacts {
            ecc_aggregate_uncorrected: Some(3),
            ..clean.clone()
        };
        assert_eq!(judge_ecc(&old).status, Status::Warn);
        let bad = GpuFacts {
            ecc_volatile_uncorrected: Some(1),
            ..clean
        };
        assert_eq!(judge_ecc(&bad).status, Status::Fail);
        let off = GpuFacts {
            ecc_enabled: Some(false),
            ..dev()
        };
        assert_eq!(judge_ecc(&off).status, Status::Pass);
    }

    #[test]
    fn throttle_judgement() {
        let with = |m| {
            judge_throttle(&GpuFacts {
                throttle_reasons: Some(m),
                ..dev()
            })
        };
        assert_eq!(judge_throttle(&dev()).status, Status::Skip);
        assert_eq!(with(0).status, Status::Pass);
        let idle = with(throttle::GPU_IDLE);
        assert_eq!(idle.status, Status::Pass, "GpuIdle is not throttling");
        assert!(idle.summary.contains("GpuIdle"));
        assert_eq!(with(throttle::SW_POWER_CAP).status, Status::Warn);
        assert_eq!(
            with(throttle::SW_THERMAL | throttle::GPU_IDLE).status,
            Status::Warn
        );
        assert_eq!(with(throttle::HW_SLOWDOWN).status, Status::Fail);
        assert_eq!(
            with(throttle::HW_THERMAL | throttle::SW_POWER_CAP).status,
            Status::Fail
        );
        assert_eq!(with(throttle::SYNC_BOOST).status, Status::Pass);
    }

    #[test]
    fn mig_judgement() {
        assert_eq!(judge_mig(&dev()).status, Status::Skip);
        assert_eq!(
            judge_mig(&GpuFacts {
                mig_enabled: Some(false),
                ..dev()
            })
            .status,
            Status::Pass
        );
        assert_eq!(
            judge_mig(&GpuFacts {
                mig_enabled: Some(true),
                ..dev()
            })
            .status,
            Status::Warn
        );
    }

    #[test]
    fn gpus_judgement() {
        let sys = GpuSystem {
            devices: vec![
                dev(),
                GpuFacts {
                    index: 1,
                    name: None,
                    compute_capability: None,
                    ..dev()
                },
            ],
            ..Default::default()
        };
        let c = judge_gpus(&sys);
        assert_eq!(c.status, Status::Pass);
        assert_eq!(c.evidence["gpu_count"], 2);
        assert!(
            c.summary.contains("NVIDIA A100 (compute capability 8.0)"),
            "{}",
            c.summary
        );
        assert!(c.summary.contains("unknown GPU"), "{}", c.summary);
        assert_eq!(sys.min_cc(), Some((8, 0)));
        let none = judge_gpus(&GpuSystem::default());
        assert_eq!(none.status, Status::Skip);
        assert_eq!(
            checks(&Ok(sys)).len(),
            1 + 2 * 5,
            "gpus plus five checks per GPU"
        );
    }

    #[test]
    fn no_driver_is_one_skip() {
        let c = checks(&Err(GpuProbeError::Open("no NVIDIA driver found".into())));
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].status, Status::Skip);
        assert!(c[0].summary.contains("no NVIDIA driver"));
    }
}
