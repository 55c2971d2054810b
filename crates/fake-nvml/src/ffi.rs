//! The exported C functions: a thin layer that checks arguments, looks up the scenario and
//! writes NVML's structs. All scenario logic lives in [`crate::scenario`].
//!
//! Safety contract (NVML's own): every pointer argument is either NULL (answered with
//! `NVML_ERROR_INVALID_ARGUMENT` where NVML requires it) or valid for writes of the pointed-to
//! type, and buffers are valid for the element count passed alongside them. Device handles are
//! never dereferenced, so a bad handle is answered with `NVML_ERROR_INVALID_ARGUMENT`.
//! No panic crosses the boundary: every body runs under `catch_unwind` (→ `NVML_ERROR_UNKNOWN`).
#![allow(clippy::missing_safety_doc, non_snake_case)]

use std::ffi::CStr;
use std::io::Write as _;
use std::os::raw::{c_char, c_int, c_uint, c_ulonglong};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::procs;
use crate::scenario::{to_u32, to_u64, DeviceSpec, Pattern, SampleGrid, Scenario, MAX_DEVICES};
use crate::types::*;

/// The scenario in force between a successful `nvmlInit_v2` and the matching `nvmlShutdown`.
struct Loaded {
    scenario: Scenario,
    t0: Instant,
    grid: SampleGrid,
}

impl Loaded {
    /// Seconds since init.
    fn t(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }
    /// Microseconds since the Unix epoch, on the same (monotonic) clock as the samples.
    fn now_us(&self) -> u64 {
        let e = u64::try_from(self.t0.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.grid.epoch0_us.saturating_add(e)
    }
}

struct Global {
    /// NVML counts inits; the library stays initialized until as many shutdowns.
    refcount: u32,
    loaded: Option<Arc<Loaded>>,
}

static GLOBAL: Mutex<Global> = Mutex::new(Global {
    refcount: 0,
    loaded: None,
});

/// Device handles are addresses in this table; the offset is the device index.
static DEVICE_TABLE: [u8; MAX_DEVICES] = [0; MAX_DEVICES];

fn lock() -> MutexGuard<'static, Global> {
    GLOBAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn handle_for(index: usize) -> nvmlDevice_t {
    DEVICE_TABLE.as_ptr().wrapping_add(index) as nvmlDevice_t
}

fn index_of(device: nvmlDevice_t) -> Option<usize> {
    let off = (device as usize).wrapping_sub(DEVICE_TABLE.as_ptr() as usize);
    (off < MAX_DEVICES).then_some(off)
}

type R = Result<(), nvmlReturn_t>;

fn guard(f: impl FnOnce() -> R) -> nvmlReturn_t {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => NVML_SUCCESS,
        Ok(Err(code)) => code,
        Err(_) => NVML_ERROR_UNKNOWN,
    }
}

fn loaded() -> Result<Arc<Loaded>, nvmlReturn_t> {
    lock().loaded.clone().ok_or(NVML_ERROR_UNINITIALIZED)
}

/// Runs a system-level function: initialized? globally unsupported?
fn system_call(func: &str, f: impl FnOnce(&Loaded) -> R) -> nvmlReturn_t {
    guard(|| {
        let st = loaded()?;
        if st.scenario.unsupported.iter().any(|n| n == func) {
            return Err(NVML_ERROR_NOT_SUPPORTED);
        }
        f(&st)
    })
}

/// Runs a per-device function: initialized? valid handle? unsupported (globally or here)?
fn device_call(
    func: &str,
    device: nvmlDevice_t,
    f: impl FnOnce(&Loaded, usize, &DeviceSpec) -> R,
) -> nvmlReturn_t {
    guard(|| {
        let st = loaded()?;
        let idx = index_of(device)
            .filter(|i| *i < st.scenario.devices.len())
            .ok_or(NVML_ERROR_INVALID_ARGUMENT)?;
        let dev = &st.scenario.devices[idx];
        if st.scenario.unsupported.iter().any(|n| n == func) || dev.is_unsupported(func) {
            return Err(NVML_ERROR_NOT_SUPPORTED);
        }
        f(&st, idx, dev)
    })
}

/// Turns an output pointer into a reference, or INVALID_ARGUMENT when it is NULL.
unsafe fn out<'a, T>(p: *mut T) -> Result<&'a mut T, nvmlReturn_t> {
    p.as_mut().ok_or(NVML_ERROR_INVALID_ARGUMENT)
}

/// Writes `s` NUL-terminated into a caller buffer of `len` bytes.
unsafe fn write_cstr(buf: *mut c_char, len: c_uint, s: &str) -> R {
    if buf.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    let bytes = s.as_bytes();
    if (len as usize) < bytes.len() + 1 {
        return Err(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), buf, bytes.len());
    *buf.add(bytes.len()) = 0;
    Ok(())
}

fn say(line: std::fmt::Arguments<'_>) {
    // One line, and never a panic if stderr is gone.
    let _ = writeln!(std::io::stderr(), "fake-nvml: {line}");
}

fn load_scenario() -> Result<Scenario, nvmlReturn_t> {
    let Some(path) = std::env::var_os("FAKE_NVML_SCENARIO") else {
        say(format_args!("FAKE_NVML_SCENARIO is not set"));
        return Err(NVML_ERROR_UNKNOWN);
    };
    let path = std::path::PathBuf::from(path);
    let text = std::fs::read_to_string(&path).map_err(|e| {
        say(format_args!("invalid scenario {}: {e}", path.display()));
        NVML_ERROR_UNKNOWN
    })?;
    Scenario::parse(&text).map_err(|e| {
        say(format_args!("invalid scenario {}: {e}", path.display()));
        NVML_ERROR_UNKNOWN
    })
}

fn init() -> nvmlReturn_t {
    guard(|| {
        let mut g = lock();
        if g.refcount > 0 {
            g.refcount += 1;
            return Ok(());
        }
        let scenario = load_scenario()?;
        if let Some(code) = scenario.init_error {
            return Err(code);
        }
        let epoch0_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        g.loaded = Some(Arc::new(Loaded {
            scenario,
            t0: Instant::now(),
            grid: SampleGrid { epoch0_us },
        }));
        g.refcount = 1;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlInit_v2() -> nvmlReturn_t {
    init()
}

/// Flags (`NVML_INIT_FLAG_NO_GPUS`, `NVML_INIT_FLAG_NO_ATTACH`) are accepted and ignored.
#[no_mangle]
pub unsafe extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> nvmlReturn_t {
    init()
}

#[no_mangle]
pub unsafe extern "C" fn nvmlShutdown() -> nvmlReturn_t {
    guard(|| {
        let mut g = lock();
        if g.refcount == 0 {
            return Err(NVML_ERROR_UNINITIALIZED);
        }
        g.refcount -= 1;
        if g.refcount == 0 {
            g.loaded = None;
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlErrorString(result: nvmlReturn_t) -> *const c_char {
    let s: &'static CStr = match result {
        0 => c"Success",
        1 => c"Uninitialized",
        2 => c"Invalid Argument",
        3 => c"Not Supported",
        4 => c"Insufficient Permissions",
        5 => c"Already Initialized",
        6 => c"Not Found",
        7 => c"Insufficient Size",
        8 => c"Insufficient External Power",
        9 => c"Driver Not Loaded",
        10 => c"Timeout",
        11 => c"Interrupt request issue",
        12 => c"NVML Shared Library Not Found",
        13 => c"Function Not Found",
        14 => c"Corrupted infoROM",
        15 => c"GPU is lost",
        16 => c"GPU requires restart",
        17 => c"The operating system has blocked the request.",
        18 => c"RM has detected an NVML/RM version mismatch.",
        19 => c"In use by another client",
        20 => c"Insufficient Memory",
        21 => c"No data",
        25 => c"Argument version mismatch",
        _ => c"Unknown Error",
    };
    s.as_ptr()
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(
    version: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    system_call("nvmlSystemGetDriverVersion", |st| {
        write_cstr(version, length, &st.scenario.driver_version)
    })
}

/// "12." followed by the driver version, as real NVML reports it (e.g. `12.550.54.15`).
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(
    version: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    system_call("nvmlSystemGetNVMLVersion", |st| {
        write_cstr(
            version,
            length,
            &format!("12.{}", st.scenario.driver_version),
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(
    cuda_driver_version: *mut c_int,
) -> nvmlReturn_t {
    system_call("nvmlSystemGetCudaDriverVersion_v2", |st| {
        *out(cuda_driver_version)? = st.scenario.cuda_driver_version;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(device_count: *mut c_uint) -> nvmlReturn_t {
    system_call("nvmlDeviceGetCount_v2", |st| {
        *out(device_count)? = st.scenario.devices.len() as c_uint;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    system_call("nvmlDeviceGetHandleByIndex_v2", |st| {
        let out = out(device)?;
        if (index as usize) >= st.scenario.devices.len() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        *out = handle_for(index as usize);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetIndex(
    device: nvmlDevice_t,
    index: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetIndex", device, |_, i, _| {
        *out(index)? = i as c_uint;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetName(
    device: nvmlDevice_t,
    name: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetName", device, |_, _, d| {
        write_cstr(name, length, &d.name)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    device: nvmlDevice_t,
    uuid: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetUUID", device, |_, i, d| {
        write_cstr(uuid, length, &d.uuid_for(i))
    })
}

/// (total, reserved, used, free) at `t`, used clamped to what is not reserved.
fn memory(d: &DeviceSpec, t: f64) -> (u64, u64, u64, u64) {
    let total = d.memory_total_bytes;
    let reserved = d.memory_reserved_bytes.min(total);
    let used = to_u64(d.memory_used_bytes.value_at(t)).min(total - reserved);
    (total, reserved, used, total - reserved - used)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: nvmlDevice_t,
    memory_out: *mut nvmlMemory_v2_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetMemoryInfo_v2", device, |st, _, d| {
        let m = out(memory_out)?;
        if m.version != NVML_MEMORY_V2 {
            return Err(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
        }
        let (total, reserved, used, free) = memory(d, st.t());
        m.total = total;
        m.reserved = reserved;
        m.used = used;
        m.free = free;
        Ok(())
    })
}

/// The v1 struct has no `reserved`: like real NVML, reserved memory counts as used.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(
    device: nvmlDevice_t,
    memory_out: *mut nvmlMemory_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetMemoryInfo", device, |st, _, d| {
        let m = out(memory_out)?;
        let (total, reserved, used, free) = memory(d, st.t());
        *m = nvmlMemory_t {
            total,
            used: used + reserved,
            free,
        };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCudaComputeCapability(
    device: nvmlDevice_t,
    major: *mut c_int,
    minor: *mut c_int,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetCudaComputeCapability", device, |_, _, d| {
        let (ma, mi) = (out(major)?, out(minor)?);
        (*ma, *mi) = d.compute_capability;
        Ok(())
    })
}

/// A device function that writes one `c_uint` computed from the device spec.
unsafe fn uint_query(
    func: &str,
    device: nvmlDevice_t,
    dst: *mut c_uint,
    f: impl FnOnce(&DeviceSpec, f64) -> c_uint,
) -> nvmlReturn_t {
    device_call(func, device, |st, _, d| {
        *out(dst)? = f(d, st.t());
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxPcieLinkGeneration(
    device: nvmlDevice_t,
    v: *mut c_uint,
) -> nvmlReturn_t {
    uint_query("nvmlDeviceGetMaxPcieLinkGeneration", device, v, |d, _| {
        d.pcie.max_gen
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxPcieLinkWidth(
    device: nvmlDevice_t,
    v: *mut c_uint,
) -> nvmlReturn_t {
    uint_query("nvmlDeviceGetMaxPcieLinkWidth", device, v, |d, _| {
        d.pcie.max_width
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCurrPcieLinkGeneration(
    device: nvmlDevice_t,
    v: *mut c_uint,
) -> nvmlReturn_t {
    uint_query("nvmlDeviceGetCurrPcieLinkGeneration", device, v, |d, _| {
        d.pcie.cur_gen()
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCurrPcieLinkWidth(
    device: nvmlDevice_t,
    v: *mut c_uint,
) -> nvmlReturn_t {
    uint_query("nvmlDeviceGetCurrPcieLinkWidth", device, v, |d, _| {
        d.pcie.cur_width()
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: nvmlDevice_t,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetMigMode", device, |_, _, d| {
        let (c, p) = (out(current)?, out(pending)?);
        *c = d.mig_mode;
        *p = d.mig_mode;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPowerManagementLimit(
    device: nvmlDevice_t,
    v: *mut c_uint,
) -> nvmlReturn_t {
    uint_query("nvmlDeviceGetPowerManagementLimit", device, v, |d, _| {
        d.power_limit_mw
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetEnforcedPowerLimit(
    device: nvmlDevice_t,
    v: *mut c_uint,
) -> nvmlReturn_t {
    uint_query("nvmlDeviceGetEnforcedPowerLimit", device, v, |d, _| {
        d.power_limit_mw
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPersistenceMode(
    device: nvmlDevice_t,
    mode: *mut nvmlEnableState_t,
) -> nvmlReturn_t {
    uint_query("nvmlDeviceGetPersistenceMode", device, mode, |d, _| {
        d.persistence_mode as c_uint
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNumaNodeId(
    device: nvmlDevice_t,
    node: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetNumaNodeId", device, |_, _, d| {
        *out(node)? = d.numa_node.ok_or(NVML_ERROR_NOT_SUPPORTED)?;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetEccMode(
    device: nvmlDevice_t,
    current: *mut nvmlEnableState_t,
    pending: *mut nvmlEnableState_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetEccMode", device, |_, _, d| {
        let ecc = d.ecc.as_ref().ok_or(NVML_ERROR_NOT_SUPPORTED)?;
        let (c, p) = (out(current)?, out(pending)?);
        *c = ecc.enabled as nvmlEnableState_t;
        *p = ecc.enabled as nvmlEnableState_t;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTotalEccErrors(
    device: nvmlDevice_t,
    error_type: c_uint,
    counter_type: c_uint,
    count: *mut u64,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetTotalEccErrors", device, |_, _, d| {
        let ecc = d.ecc.as_ref().ok_or(NVML_ERROR_NOT_SUPPORTED)?;
        if !ecc.enabled {
            return Err(NVML_ERROR_NOT_SUPPORTED);
        }
        let v = ecc
            .count(error_type, counter_type)
            .ok_or(NVML_ERROR_INVALID_ARGUMENT)?;
        *out(count)? = v;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPowerUsage(
    device: nvmlDevice_t,
    v: *mut c_uint,
) -> nvmlReturn_t {
    uint_query("nvmlDeviceGetPowerUsage", device, v, |d, t| {
        to_u32(d.power_mw.value_at(t))
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTemperature(
    device: nvmlDevice_t,
    sensor: nvmlTemperatureSensors_t,
    v: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetTemperature", device, |st, _, d| {
        if sensor != NVML_TEMPERATURE_GPU {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        *out(v)? = to_u32(d.temperature_c.value_at(st.t()));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetClockInfo(
    device: nvmlDevice_t,
    clock_type: nvmlClockType_t,
    v: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetClockInfo", device, |st, _, d| {
        let sig = match clock_type {
            NVML_CLOCK_GRAPHICS | NVML_CLOCK_SM => &d.sm_clock_mhz,
            NVML_CLOCK_MEM => &d.mem_clock_mhz,
            NVML_CLOCK_VIDEO => &d.video_clock_mhz,
            _ => return Err(NVML_ERROR_INVALID_ARGUMENT),
        };
        *out(v)? = to_u32(sig.value_at(st.t()));
        Ok(())
    })
}

/// The value of a pattern averaged over the most recent complete sample window (or its value
/// now, before the first window completes).
fn last_period(p: &Pattern, t: f64) -> f64 {
    match SampleGrid::completed(t) {
        0 => p.value_at(t),
        n => {
            let (a, b) = SampleGrid::window(n - 1);
            p.mean(a, b)
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(
    device: nvmlDevice_t,
    utilization: *mut nvmlUtilization_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetUtilizationRates", device, |st, _, d| {
        let u = out(utilization)?;
        let t = st.t();
        u.gpu = to_u32(last_period(&d.util, t));
        u.memory = to_u32(last_period(&d.mem_util, t));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetSamples(
    device: nvmlDevice_t,
    sample_type: nvmlSamplingType_t,
    last_seen_time_stamp: c_ulonglong,
    sample_val_type: *mut nvmlValueType_t,
    sample_count: *mut c_uint,
    samples: *mut nvmlSample_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetSamples", device, |st, _, d| {
        let val_type = out(sample_val_type)?;
        let count = out(sample_count)?;
        let sig = match sample_type {
            NVML_TOTAL_POWER_SAMPLES => &d.power_mw,
            NVML_GPU_UTILIZATION_SAMPLES => &d.util,
            NVML_MEMORY_UTILIZATION_SAMPLES => &d.mem_util,
            NVML_PROCESSOR_CLK_SAMPLES => &d.sm_clock_mhz,
            NVML_MEMORY_CLK_SAMPLES => &d.mem_clock_mhz,
            _ => return Err(NVML_ERROR_NOT_SUPPORTED),
        };
        let range = st.grid.newer_than(st.t(), last_seen_time_stamp);
        if range.is_empty() {
            return Err(NVML_ERROR_NOT_FOUND);
        }
        *val_type = NVML_VALUE_TYPE_UNSIGNED_INT;
        let available = (range.end - range.start) as c_uint;
        if samples.is_null() {
            *count = available;
            return Ok(());
        }
        if *count == 0 {
            *count = available;
            return Err(NVML_ERROR_INSUFFICIENT_SIZE);
        }
        let n = available.min(*count);
        // Oldest first: a caller whose buffer is too small gets the rest on its next call.
        for (i, k) in (range.start..range.start + u64::from(n)).enumerate() {
            let (a, b) = SampleGrid::window(k);
            *samples.add(i) = nvmlSample_t {
                timeStamp: st.grid.timestamp(k),
                sampleValue: nvmlValue_t {
                    ullVal: 0, // clear all 8 bytes before setting the 4 that count
                },
            };
            (*samples.add(i)).sampleValue.uiVal = to_u32(sig.mean(a, b));
        }
        *count = n;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetFieldValues(
    device: nvmlDevice_t,
    values_count: c_int,
    values: *mut nvmlFieldValue_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetFieldValues", device, |st, _, d| {
        if values.is_null() || values_count <= 0 {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let t = st.t();
        let now = i64::try_from(st.now_us()).unwrap_or(i64::MAX);
        for i in 0..values_count as usize {
            let v = &mut *values.add(i);
            v.timestamp = now;
            v.latencyUsec = 0;
            let counter = match v.fieldId {
                _ if d.unsupported_field_ids.contains(&v.fieldId) => None,
                NVML_FI_DEV_PCIE_COUNT_TX_BYTES => Some(&d.pcie.tx_bytes_per_s),
                NVML_FI_DEV_PCIE_COUNT_RX_BYTES => Some(&d.pcie.rx_bytes_per_s),
                _ => None,
            };
            match counter {
                Some(rate) => {
                    v.valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
                    v.value = nvmlValue_t {
                        ullVal: to_u64(rate.integral(t).floor()),
                    };
                    v.nvmlReturn = NVML_SUCCESS;
                }
                None => v.nvmlReturn = NVML_ERROR_NOT_SUPPORTED,
            }
        }
        Ok(())
    })
}

/// How long `nvmlDeviceGetPcieThroughput` blocks, like the real one's measuring window.
const PCIE_THROUGHPUT_WINDOW: Duration = Duration::from_millis(20);

/// KB/s with KB = 1024 bytes, averaged over the 20 ms the call blocks.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPcieThroughput(
    device: nvmlDevice_t,
    counter: nvmlPcieUtilCounter_t,
    value: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetPcieThroughput", device, |st, _, d| {
        let v = out(value)?;
        let rate = match counter {
            NVML_PCIE_UTIL_TX_BYTES => &d.pcie.tx_bytes_per_s,
            NVML_PCIE_UTIL_RX_BYTES => &d.pcie.rx_bytes_per_s,
            _ => return Err(NVML_ERROR_INVALID_ARGUMENT),
        };
        let a = st.t();
        std::thread::sleep(PCIE_THROUGHPUT_WINDOW);
        let b = st.t();
        *v = to_u32(rate.mean(a, b) / 1024.0);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksThrottleReasons(
    device: nvmlDevice_t,
    reasons: *mut c_ulonglong,
) -> nvmlReturn_t {
    device_call(
        "nvmlDeviceGetCurrentClocksThrottleReasons",
        device,
        |st, _, d| {
            *out(reasons)? = to_u64(d.throttle_reasons.value_at(st.t()));
            Ok(())
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksEventReasons(
    device: nvmlDevice_t,
    reasons: *mut c_ulonglong,
) -> nvmlReturn_t {
    device_call(
        "nvmlDeviceGetCurrentClocksEventReasons",
        device,
        |st, _, d| {
            *out(reasons)? = to_u64(d.throttle_reasons.value_at(st.t()));
            Ok(())
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: nvmlDevice_t,
    info_count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    device_call(
        "nvmlDeviceGetComputeRunningProcesses_v3",
        device,
        |_, _, d| {
            let count = out(info_count)?;
            let procs = procs::resolve(&d.processes);
            let n = procs.len() as c_uint;
            if infos.is_null() || *count < n {
                *count = n;
                return if n == 0 {
                    Ok(())
                } else {
                    Err(NVML_ERROR_INSUFFICIENT_SIZE)
                };
            }
            for (i, p) in procs.iter().enumerate() {
                *infos.add(i) = nvmlProcessInfo_t {
                    pid: p.pid,
                    usedGpuMemory: p.spec.used_memory_bytes,
                    gpuInstanceId: NO_INSTANCE_ID,
                    computeInstanceId: NO_INSTANCE_ID,
                };
            }
            *count = n;
            Ok(())
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetProcessUtilization(
    device: nvmlDevice_t,
    utilization: *mut nvmlProcessUtilizationSample_t,
    process_samples_count: *mut c_uint,
    last_seen_time_stamp: c_ulonglong,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetProcessUtilization", device, |st, _, d| {
        let count = out(process_samples_count)?;
        let range = st.grid.newer_than(st.t(), last_seen_time_stamp);
        // One entry per process: its most recent sample window, since lastSeen, in which it
        // had non-zero SM or memory utilization.
        let entries: Vec<nvmlProcessUtilizationSample_t> = procs::resolve(&d.processes)
            .iter()
            .filter_map(|p| {
                range.clone().rev().find_map(|k| {
                    let (a, b) = SampleGrid::window(k);
                    let sm = to_u32(p.spec.sm_util.mean(a, b));
                    let mem = to_u32(p.spec.mem_util.mean(a, b));
                    (sm > 0 || mem > 0).then(|| nvmlProcessUtilizationSample_t {
                        pid: p.pid,
                        timeStamp: st.grid.timestamp(k),
                        smUtil: sm,
                        memUtil: mem,
                        encUtil: 0,
                        decUtil: 0,
                    })
                })
            })
            .collect();
        if entries.is_empty() {
            *count = 0;
            return Err(NVML_ERROR_NOT_FOUND);
        }
        let n = entries.len() as c_uint;
        if utilization.is_null() || *count < n {
            *count = n;
            return Err(NVML_ERROR_INSUFFICIENT_SIZE);
        }
        std::ptr::copy_nonoverlapping(entries.as_ptr(), utilization, entries.len());
        *count = n;
        Ok(())
    })
}
