//! Loads the built `libfake_nvml.so` through nvml-wrapper, exactly as gpufeed does, and checks
//! what it answers.
//!
//! NVML state in the fake is process-global and so is the environment, so everything that
//! initializes the library runs in ONE test function, sequentially. The stderr check runs in a
//! child process (this same test binary, re-run in "child mode").

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use nvml_wrapper::enum_wrappers::device::{Clock, PcieUtilCounter, Sampling, TemperatureSensor};
use nvml_wrapper::enums::device::{SampleValue, UsedGpuMemory};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::Nvml;

/// The built `libfake_nvml.so` next to this test executable: `target/debug/deps/` (where
/// `cargo test` rebuilds it) or `target/debug/` (where `cargo build` puts it), the newer one;
/// built with `cargo build -p fake-nvml` when neither exists.
fn lib_path() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    if let Some(lib) = fake_nvml::library_path_near(&exe) {
        return lib;
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "-p", "fake-nvml"])
        .status();
    fake_nvml::library_path_near(&exe).unwrap_or_else(|| {
        panic!(
            "libfake_nvml.so is not next to {} and `cargo build -p fake-nvml` did not produce it ({status:?})",
            exe.display()
        )
    })
}

fn write(dir: &Path, name: &str, json: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, json).expect("write scenario");
    p
}

fn init_with(lib: &Path, scenario: Option<&Path>) -> Result<Nvml, NvmlError> {
    match scenario {
        Some(p) => std::env::set_var("FAKE_NVML_SCENARIO", p),
        None => std::env::remove_var("FAKE_NVML_SCENARIO"),
    }
    Nvml::builder().lib_path(lib.as_os_str()).init()
}

const MAIN_SCENARIO: &str = r#"{
  "driver_version": "550.54.15",
  "cuda_driver_version": 12040,
  "devices": [
    {
      "name": "NVIDIA H100 80GB HBM3",
      "uuid": "GPU-11111111-2222-3333-4444-555555555555",
      "memory_total_bytes": 85899345920,
      "memory_used_bytes": 80000000000,
      "memory_reserved_bytes": 536870912,
      "compute_capability": [9, 0],
      "util": {"pattern": "square", "period_s": 2.0, "high": 85, "low": 10, "duty": 0.3},
      "mem_util": 40,
      "sm_clock_mhz": 1980, "power_limit_mw": 700000, "temperature_c": 65,
      "pcie": {"cur_gen": 4, "rx_bytes_per_s": 1.0e9, "tx_bytes_per_s": 1.0e8},
      "throttle_reasons": 4,
      "persistence_mode": false,
      "numa_node": 1,
      "ecc": {"volatile_corrected": 5, "volatile_uncorrected": 1, "aggregate_uncorrected": 2},
      "unsupported": ["nvmlDeviceGetPowerUsage"],
      "processes": [
        {"pid": 1234, "used_memory_bytes": 1000000000, "sm_util": 90},
        {"pid": "children", "used_memory_bytes": 2000000000, "sm_util": 95}
      ]
    },
    {"name": "NVIDIA A100-SXM4-40GB", "compute_capability": [8, 0], "unsupported_field_ids": [198]}
  ]
}"#;

#[test]
fn fake_library_through_nvml_wrapper() {
    let lib = lib_path();
    let dir = tempfile::tempdir().expect("tempdir");

    // --- The main scenario ------------------------------------------------------------
    let main = write(dir.path(), "main.json", MAIN_SCENARIO);
    let nvml = init_with(&lib, Some(&main)).expect("init with the main scenario");
    let started = Instant::now();
    assert_eq!(nvml.sys_driver_version().unwrap(), "550.54.15");
    assert_eq!(nvml.sys_nvml_version().unwrap(), "12.550.54.15");
    assert_eq!(nvml.sys_cuda_driver_version().unwrap(), 12040);
    assert_eq!(nvml.device_count().unwrap(), 2);
    assert!(matches!(
        nvml.device_by_index(2),
        Err(NvmlError::InvalidArg)
    ));

    let dev = nvml.device_by_index(0).unwrap();
    let dev1 = nvml.device_by_index(1).unwrap();
    // Early on (t < 0.67 s) the last window is in the high phase of the square wave.
    let u = dev.utilization_rates().unwrap();
    assert_eq!((u.gpu, u.memory), (85, 40));
    assert_eq!(dev.index().unwrap(), 0);
    assert_eq!(dev1.index().unwrap(), 1);
    assert_eq!(dev.name().unwrap(), "NVIDIA H100 80GB HBM3");
    assert_eq!(dev1.name().unwrap(), "NVIDIA A100-SXM4-40GB");
    assert_eq!(
        dev.uuid().unwrap(),
        "GPU-11111111-2222-3333-4444-555555555555"
    );
    assert_eq!(
        dev1.uuid().unwrap(),
        "GPU-fa4e0000-0000-4000-8000-000000000001"
    );

    let mem = dev.memory_info().unwrap();
    assert_eq!(mem.total, 85_899_345_920);
    assert_eq!(mem.used, 80_000_000_000);
    assert_eq!(mem.reserved, 536_870_912);
    assert_eq!(mem.free, 85_899_345_920 - 80_000_000_000 - 536_870_912);

    let cc = dev.cuda_compute_capability().unwrap();
    assert_eq!((cc.major, cc.minor), (9, 0));
    let cc = dev1.cuda_compute_capability().unwrap();
    assert_eq!((cc.major, cc.minor), (8, 0));

    assert_eq!(dev.max_pcie_link_gen().unwrap(), 5);
    assert_eq!(dev.current_pcie_link_gen().unwrap(), 4);
    assert_eq!(dev.max_pcie_link_width().unwrap(), 16);
    assert_eq!(dev.current_pcie_link_width().unwrap(), 16);
    assert_eq!(dev.mig_mode().unwrap().current, 0);
    assert_eq!(dev.power_management_limit().unwrap(), 700_000);
    assert_eq!(dev.enforced_power_limit().unwrap(), 700_000);
    assert!(!dev.is_in_persistent_mode().unwrap());
    assert!(dev1.is_in_persistent_mode().unwrap());
    // NUMA and ECC: answered where the scenario has them, NOT_SUPPORTED elsewhere.
    assert_eq!(dev.numa_node_id().unwrap(), 1);
    assert!(matches!(dev1.numa_node_id(), Err(NvmlError::NotSupported)));
    assert!(dev.is_ecc_enabled().unwrap().currently_enabled);
    {
        use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError};
        let ecc = |e, c| dev.total_ecc_errors(e, c).unwrap();
        assert_eq!(ecc(MemoryError::Corrected, EccCounter::Volatile), 5);
        assert_eq!(ecc(MemoryError::Uncorrected, EccCounter::Volatile), 1);
        assert_eq!(ecc(MemoryError::Uncorrected, EccCounter::Aggregate), 2);
        assert_eq!(ecc(MemoryError::Corrected, EccCounter::Aggregate), 0);
        assert!(matches!(
            dev1.is_ecc_enabled(),
            Err(NvmlError::NotSupported)
        ));
        assert!(matches!(
            dev1.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile),
            Err(NvmlError::NotSupported)
        ));
    }
    assert_eq!(dev.clock_info(Clock::SM).unwrap(), 1980);
    assert_eq!(dev.temperature(TemperatureSensor::Gpu).unwrap(), 65);
    assert_eq!(dev.current_throttle_reasons().unwrap().bits(), 4);
    assert_eq!(dev1.power_usage().unwrap(), 70_000);

    // "unsupported" per device: only on device 0.
    assert!(matches!(dev.power_usage(), Err(NvmlError::NotSupported)));

    // Processes: the literal PID and this process's child.
    let mut child = Command::new("sleep")
        .arg("30")
        .spawn()
        .expect("spawn sleep");
    let procs = dev.running_compute_processes().unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let p1234 = procs
        .iter()
        .find(|p| p.pid == 1234)
        .expect("pid 1234 listed");
    assert_eq!(p1234.used_gpu_memory, UsedGpuMemory::Used(1_000_000_000));
    assert_eq!(p1234.gpu_instance_id, None);
    let kid = procs
        .iter()
        .find(|p| p.pid == child.id())
        .unwrap_or_else(|| panic!("child {} missing from {procs:?}", child.id()));
    assert_eq!(kid.used_gpu_memory, UsedGpuMemory::Used(2_000_000_000));
    assert!(dev1.running_compute_processes().unwrap().is_empty());

    // PCIe byte counters grow at the scenario's rates; unknown ids are NOT_SUPPORTED per slot.
    let ids = [FieldId(197), FieldId(198), FieldId(4242)];
    let read = |d: &nvml_wrapper::Device<'_>| -> Vec<Result<(u64, i64), NvmlError>> {
        d.field_values_for(&ids)
            .unwrap()
            .into_iter()
            .map(|s| {
                s.and_then(|s| {
                    let ts = s.timestamp;
                    s.value.map(|v| match v {
                        SampleValue::U64(v) => (v, ts),
                        other => panic!("unexpected value type {other:?}"),
                    })
                })
            })
            .collect()
    };
    let first = read(&dev);
    std::thread::sleep(Duration::from_millis(200));
    let second = read(&dev);
    let ((tx0, ts0), (rx0, _)) = (*first[0].as_ref().unwrap(), *first[1].as_ref().unwrap());
    let ((tx1, ts1), (rx1, _)) = (*second[0].as_ref().unwrap(), *second[1].as_ref().unwrap());
    assert!(tx1 > tx0 && rx1 > rx0, "tx {tx0}->{tx1} rx {rx0}->{rx1}");
    let dt_s = (ts1 - ts0) as f64 / 1e6;
    assert!(
        dt_s >= 0.19,
        "field timestamps are epoch µs: {ts0} -> {ts1}"
    );
    let rx_rate = (rx1 - rx0) as f64 / dt_s;
    let tx_rate = (tx1 - tx0) as f64 / dt_s;
    assert!((0.95e9..1.05e9).contains(&rx_rate), "rx rate {rx_rate} B/s");
    assert!((0.95e8..1.05e8).contains(&tx_rate), "tx rate {tx_rate} B/s");
    assert!(matches!(first[2], Err(NvmlError::NotSupported)));
    let other = read(&dev1);
    assert!(matches!(other[0], Ok((0, _))), "device 1 has no traffic");
    assert!(matches!(other[1], Err(NvmlError::NotSupported)));

    // PCIe throughput blocks ~20 ms and reports KB/s (1024 B).
    let t = Instant::now();
    let kbs = dev.pcie_throughput(PcieUtilCounter::Receive).unwrap();
    assert!(t.elapsed() >= Duration::from_millis(19));
    // ±1 KB/s: the rate is a difference of cumulative floats over the window.
    assert!(kbs.abs_diff(976_563) <= 1, "{kbs}"); // 1e9 B/s / 1024
    let tx = dev.pcie_throughput(PcieUtilCounter::Send).unwrap();
    assert!(tx.abs_diff(97_656) <= 1, "{tx}"); // 1e8 B/s / 1024

    // Utilization samples after ~1.1 s of a 2 s square wave (85 for 0.6 s, then 10).
    let wait = Duration::from_millis(1100).saturating_sub(started.elapsed());
    std::thread::sleep(wait);
    let samples = dev.samples(Sampling::GpuUtilization, None).unwrap();
    assert!(samples.len() >= 5, "{samples:?}");
    let values: Vec<u32> = samples
        .iter()
        .map(|s| match s.value {
            SampleValue::U32(v) => v,
            ref other => panic!("unexpected sample type {other:?}"),
        })
        .collect();
    assert!(values.iter().any(|v| *v >= 80), "{values:?}");
    assert!(values.iter().any(|v| *v <= 15), "{values:?}");
    assert!(samples.windows(2).all(|w| w[1].timestamp > w[0].timestamp));
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    let last = samples.last().unwrap().timestamp;
    assert!(
        last <= now_us && last + 5_000_000 > now_us,
        "epoch µs timestamps"
    );
    match dev.samples(Sampling::GpuUtilization, last) {
        Ok(newer) => assert!(newer.iter().all(|s| s.timestamp > last)),
        Err(NvmlError::NotFound) => {} // nothing newer yet, like the real driver
        Err(e) => panic!("samples since {last}: {e:?}"),
    }
    let mem_samples = dev.samples(Sampling::MemoryUtilization, None).unwrap();
    assert!(mem_samples.iter().all(|s| s.value == SampleValue::U32(40)));

    // By now (t ≈ 1.1 s) the last complete window is in the low phase.
    assert_eq!(dev.utilization_rates().unwrap().gpu, 10);

    // Per-process utilization: one sample per busy process; NOT_FOUND when none was busy.
    let pu = dev.process_utilization_stats(None).unwrap();
    let s = pu.iter().find(|s| s.pid == 1234).expect("1234 busy");
    assert_eq!(s.sm_util, 90);
    assert!(matches!(
        dev1.process_utilization_stats(None),
        Err(NvmlError::NotFound)
    ));

    // Raw bindings: clock event reasons (not wrapped), a bad handle, NULL outputs.
    unsafe {
        let raw = nvml.lib();
        let mut reasons = 0u64;
        assert_eq!(
            raw.nvmlDeviceGetCurrentClocksEventReasons(dev.handle(), &mut reasons),
            0
        );
        assert_eq!(reasons, 4);
        let mut idx = 0u32;
        let bogus = 0x10 as nvml_wrapper_sys::bindings::nvmlDevice_t;
        assert_eq!(raw.nvmlDeviceGetIndex(bogus, &mut idx), 2);
        assert_eq!(raw.nvmlDeviceGetIndex(std::ptr::null_mut(), &mut idx), 2);
        assert_eq!(
            raw.nvmlDeviceGetIndex(dev.handle(), std::ptr::null_mut()),
            2
        );
        let mut short = [0 as std::os::raw::c_char; 4];
        assert_eq!(
            raw.nvmlDeviceGetName(dev.handle(), short.as_mut_ptr(), 4),
            7
        );
        let msg = std::ffi::CStr::from_ptr(raw.nvmlErrorString(9));
        assert_eq!(msg.to_str().unwrap(), "Driver Not Loaded");
        let mut v1: nvml_wrapper_sys::bindings::nvmlMemory_t = std::mem::zeroed();
        assert_eq!(raw.nvmlDeviceGetMemoryInfo(dev.handle(), &mut v1), 0);
        assert_eq!(v1.used, 80_000_000_000 + 536_870_912);
        // Wrong struct version for the v2 memory call.
        let mut v2: nvml_wrapper_sys::bindings::nvmlMemory_v2_t = std::mem::zeroed();
        assert_eq!(raw.nvmlDeviceGetMemoryInfo_v2(dev.handle(), &mut v2), 25);
    }

    // A second init nests (NVML counts inits): dropping it keeps the first one working.
    let nested = init_with(&lib, Some(&main)).expect("nested init");
    drop(nested);
    assert_eq!(nvml.device_count().unwrap(), 2);
    nvml.shutdown().expect("shutdown");

    // --- A globally unsupported function ----------------------------------------------------
    let unsup = write(
        dir.path(),
        "unsupported.json",
        r#"{"unsupported": ["nvmlDeviceGetSamples", "nvmlSystemGetCudaDriverVersion_v2"],
            "devices": [{"util": 50}, {}]}"#,
    );
    let nvml = init_with(&lib, Some(&unsup)).expect("init with unsupported.json");
    for i in 0..2 {
        let d = nvml.device_by_index(i).unwrap();
        assert!(matches!(
            d.samples(Sampling::GpuUtilization, None),
            Err(NvmlError::NotSupported)
        ));
    }
    assert!(matches!(
        nvml.sys_cuda_driver_version(),
        Err(NvmlError::NotSupported)
    ));
    assert_eq!(
        nvml.device_by_index(0)
            .unwrap()
            .utilization_rates()
            .unwrap()
            .gpu,
        50
    );
    drop(nvml);

    // --- init errors -----------------------------------------------------------------------
    let no_driver = write(dir.path(), "no_driver.json", r#"{"init_error": 9}"#);
    assert!(matches!(
        init_with(&lib, Some(&no_driver)),
        Err(NvmlError::DriverNotLoaded)
    ));
    let bad_json = write(dir.path(), "bad.json", r#"{"devices": [{"name": "x",}]}"#);
    assert!(matches!(
        init_with(&lib, Some(&bad_json)),
        Err(NvmlError::Unknown)
    ));
    let typo = write(dir.path(), "typo.json", r#"{"devices": [{"utll": 3}]}"#);
    assert!(matches!(
        init_with(&lib, Some(&typo)),
        Err(NvmlError::Unknown)
    ));
    let missing = dir.path().join("does-not-exist.json");
    assert!(matches!(
        init_with(&lib, Some(&missing)),
        Err(NvmlError::Unknown)
    ));
    assert!(matches!(init_with(&lib, None), Err(NvmlError::Unknown)));

    // After failed inits a good scenario still initializes, with a fresh clock.
    let nvml = init_with(&lib, Some(&main)).expect("init after failures");
    assert_eq!(
        nvml.device_by_index(0)
            .unwrap()
            .utilization_rates()
            .unwrap()
            .gpu,
        85
    );
    drop(nvml);
}

/// The one stderr line for a malformed scenario, checked in a child process.
#[test]
fn malformed_scenario_prints_one_line() {
    const CHILD: &str = "FAKE_NVML_TEST_CHILD";
    if std::env::var_os(CHILD).is_some() {
        // Child mode: just try to initialize; the parent inspects stderr.
        let lib = lib_path();
        let r = Nvml::builder().lib_path(lib.as_os_str()).init();
        assert!(matches!(r, Err(NvmlError::Unknown)), "{r:?}");
        return;
    }
    let lib = lib_path(); // build it here, not in the child
    assert!(lib.exists());
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let run = |scenario: Option<&Path>| {
        let mut cmd = Command::new(&exe);
        cmd.args([
            "--exact",
            "malformed_scenario_prints_one_line",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1");
        match scenario {
            Some(p) => cmd.env("FAKE_NVML_SCENARIO", p),
            None => cmd.env_remove("FAKE_NVML_SCENARIO"),
        };
        let out = cmd.output().expect("run child");
        assert!(out.status.success(), "child failed: {out:?}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        let ours: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("fake-nvml:"))
            .collect();
        assert_eq!(ours.len(), 1, "stderr: {stderr}");
        ours[0].to_string()
    };

    let bad = write(
        dir.path(),
        "dutyless.json",
        r#"{"devices": [{"util": {"pattern": "square", "period_s": 2, "high": 1, "low": 0, "duty": 2}}]}"#,
    );
    assert_eq!(
        run(Some(&bad)),
        format!(
            "fake-nvml: invalid scenario {}: devices[0].util: duty must be within 0..=1, got 2",
            bad.display()
        )
    );
    let typo = write(dir.path(), "typo.json", r#"{"devices": [{"uitl": 3}]}"#);
    let line = run(Some(&typo));
    assert!(
        line.starts_with(&format!("fake-nvml: invalid scenario {}: ", typo.display()))
            && line.contains("unknown field `uitl`"),
        "{line}"
    );
    assert_eq!(run(None), "fake-nvml: FAKE_NVML_SCENARIO is not set");
}

/// The fake's C structs match nvml-wrapper-sys's bindings byte for byte.
#[test]
fn struct_layouts_match_the_bindings() {
    use fake_nvml::types as f;
    use nvml_wrapper_sys::bindings as b;
    use std::mem::{align_of, offset_of, size_of};

    macro_rules! same_size {
        ($a:ty, $b:ty) => {
            assert_eq!(size_of::<$a>(), size_of::<$b>(), stringify!($a));
            assert_eq!(align_of::<$a>(), align_of::<$b>(), stringify!($a));
        };
    }
    macro_rules! same_offsets {
        ($a:ty, $b:ty, $($field:ident),+) => {
            $(assert_eq!(offset_of!($a, $field), offset_of!($b, $field),
                concat!(stringify!($a), ".", stringify!($field)));)+
        };
    }
    same_size!(f::nvmlMemory_t, b::nvmlMemory_t);
    same_offsets!(f::nvmlMemory_t, b::nvmlMemory_t, total, free, used);
    same_size!(f::nvmlMemory_v2_t, b::nvmlMemory_v2_t);
    same_offsets!(
        f::nvmlMemory_v2_t,
        b::nvmlMemory_v2_t,
        version,
        total,
        reserved,
        free,
        used
    );
    same_size!(f::nvmlUtilization_t, b::nvmlUtilization_t);
    same_offsets!(f::nvmlUtilization_t, b::nvmlUtilization_t, gpu, memory);
    same_size!(f::nvmlValue_t, b::nvmlValue_t);
    same_size!(f::nvmlSample_t, b::nvmlSample_t);
    same_offsets!(f::nvmlSample_t, b::nvmlSample_t, timeStamp, sampleValue);
    same_size!(f::nvmlFieldValue_t, b::nvmlFieldValue_t);
    same_offsets!(
        f::nvmlFieldValue_t,
        b::nvmlFieldValue_t,
        fieldId,
        scopeId,
        timestamp,
        latencyUsec,
        valueType,
        nvmlReturn,
        value
    );
    same_size!(f::nvmlProcessInfo_t, b::nvmlProcessInfo_t);
    same_offsets!(
        f::nvmlProcessInfo_t,
        b::nvmlProcessInfo_t,
        pid,
        usedGpuMemory,
        gpuInstanceId,
        computeInstanceId
    );
    same_size!(
        f::nvmlProcessUtilizationSample_t,
        b::nvmlProcessUtilizationSample_t
    );
    same_offsets!(
        f::nvmlProcessUtilizationSample_t,
        b::nvmlProcessUtilizationSample_t,
        pid,
        timeStamp,
        smUtil,
        memUtil,
        encUtil,
        decUtil
    );
    assert_eq!(
        f::NVML_FI_DEV_PCIE_COUNT_TX_BYTES,
        b::field_id::NVML_FI_DEV_PCIE_COUNT_TX_BYTES
    );
    assert_eq!(
        f::NVML_FI_DEV_PCIE_COUNT_RX_BYTES,
        b::field_id::NVML_FI_DEV_PCIE_COUNT_RX_BYTES
    );
    assert_eq!(
        f::NVML_MEMORY_V2,
        (size_of::<b::nvmlMemory_v2_t>() | (2 << 24)) as u32
    );
}
