//! The scenario file: what the fake GPUs report, as pure Rust data and functions.
//!
//! Everything here is independent of the C ABI so it can be unit-tested directly.
//! Time `t` is always seconds since `nvmlInit_v2` (the scenario clock).

use serde::de::{Deserializer, Error as _};
use serde::Deserialize;
use serde_json::Value;

/// The sampling period of the fake driver's utilization buffer (a real one samples every 1/6 s).
pub const SAMPLES_PER_SECOND: u64 = 6;
/// How many past sample periods the fake driver keeps (20 s at 6 per second).
pub const SAMPLE_HISTORY: u64 = 120;

/// Every NVML function the library exports; names in `unsupported` lists must be among these.
pub const EXPORTED_FUNCTIONS: &[&str] = &[
    "nvmlInit_v2",
    "nvmlInitWithFlags",
    "nvmlShutdown",
    "nvmlErrorString",
    "nvmlSystemGetDriverVersion",
    "nvmlSystemGetCudaDriverVersion_v2",
    "nvmlSystemGetNVMLVersion",
    "nvmlDeviceGetCount_v2",
    "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetIndex",
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetMemoryInfo_v2",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetCudaComputeCapability",
    "nvmlDeviceGetMaxPcieLinkGeneration",
    "nvmlDeviceGetMaxPcieLinkWidth",
    "nvmlDeviceGetCurrPcieLinkGeneration",
    "nvmlDeviceGetCurrPcieLinkWidth",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetPowerManagementLimit",
    "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetPersistenceMode",
    "nvmlDeviceGetSamples",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetFieldValues",
    "nvmlDeviceGetPcieThroughput",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetProcessUtilization",
    "nvmlDeviceGetNumaNodeId",
    "nvmlDeviceGetEccMode",
    "nvmlDeviceGetTotalEccErrors",
];

/// Functions that cannot be made unsupported (the fake needs them to work at all).
const ALWAYS_SUPPORTED: &[&str] = &[
    "nvmlInit_v2",
    "nvmlInitWithFlags",
    "nvmlShutdown",
    "nvmlErrorString",
];

/// A time-varying value. In JSON either a plain number (a constant) or a pattern object.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "pattern", rename_all = "lowercase", deny_unknown_fields)]
pub enum Pattern {
    /// `{"pattern": "constant", "value": 97}`
    Constant { value: f64 },
    /// `{"pattern": "square", "period_s": 2.0, "high": 85, "low": 10, "duty": 0.3}`:
    /// `high` for the first `duty` fraction of every period, `low` for the rest.
    Square {
        period_s: f64,
        high: f64,
        low: f64,
        duty: f64,
    },
    /// `{"pattern": "steps", "points": [[0.0, 10], [3.0, 90]]}`: the value of the last point
    /// at or before `t`; before the first point, the first point's value.
    Steps { points: Vec<(f64, f64)> },
}

impl Pattern {
    pub const fn constant(value: f64) -> Self {
        Pattern::Constant { value }
    }

    /// Checks the pattern's parameters; the error says what is wrong (without the field path).
    pub fn validate(&self) -> Result<(), String> {
        let finite = |name: &str, v: f64| {
            if v.is_finite() {
                Ok(())
            } else {
                Err(format!("{name} must be a finite number, got {v}"))
            }
        };
        match self {
            Pattern::Constant { value } => finite("value", *value),
            Pattern::Square {
                period_s,
                high,
                low,
                duty,
            } => {
                finite("period_s", *period_s)?;
                finite("high", *high)?;
                finite("low", *low)?;
                finite("duty", *duty)?;
                if *period_s <= 0.0 {
                    return Err(format!("period_s must be > 0, got {period_s}"));
                }
                if !(0.0..=1.0).contains(duty) {
                    return Err(format!("duty must be within 0..=1, got {duty}"));
                }
                Ok(())
            }
            Pattern::Steps { points } => {
                if points.is_empty() {
                    return Err("steps needs at least one point".into());
                }
                let mut prev = f64::NEG_INFINITY;
                for (i, (t, v)) in points.iter().enumerate() {
                    finite(&format!("points[{i}] time"), *t)?;
                    finite(&format!("points[{i}] value"), *v)?;
                    if *t < 0.0 {
                        return Err(format!("points[{i}] time must be >= 0, got {t}"));
                    }
                    if *t < prev {
                        return Err(format!(
                            "points must be in time order, points[{i}] at {t} s comes after {prev} s"
                        ));
                    }
                    prev = *t;
                }
                Ok(())
            }
        }
    }

    /// The value at `t_s` seconds since init.
    pub fn value_at(&self, t_s: f64) -> f64 {
        match self {
            Pattern::Constant { value } => *value,
            Pattern::Square {
                period_s,
                high,
                low,
                duty,
            } => {
                let phase = t_s.rem_euclid(*period_s);
                if phase < duty * period_s {
                    *high
                } else {
                    *low
                }
            }
            Pattern::Steps { points } => points
                .iter()
                .rev()
                .find(|(t, _)| *t <= t_s)
                .or_else(|| points.first())
                .map_or(0.0, |(_, v)| *v),
        }
    }

    /// The integral of the value from 0 to `t_s` (value × seconds); 0 for `t_s <= 0`.
    pub fn integral(&self, t_s: f64) -> f64 {
        if t_s <= 0.0 || t_s.is_nan() {
            return 0.0;
        }
        match self {
            Pattern::Constant { value } => value * t_s,
            Pattern::Square {
                period_s,
                high,
                low,
                duty,
            } => {
                let high_len = duty * period_s;
                let per_cycle = high_len * high + (period_s - high_len) * low;
                let cycles = (t_s / period_s).floor();
                let rest = t_s - cycles * period_s;
                let partial = if rest < high_len {
                    rest * high
                } else {
                    high_len * high + (rest - high_len) * low
                };
                cycles * per_cycle + partial
            }
            Pattern::Steps { points } => {
                let mut acc = 0.0;
                let mut prev_t = 0.0;
                let mut v = self.value_at(0.0);
                for (pt, pv) in points.iter().filter(|(pt, _)| *pt > 0.0) {
                    if *pt >= t_s {
                        break;
                    }
                    acc += v * (pt - prev_t);
                    prev_t = *pt;
                    v = *pv;
                }
                acc + v * (t_s - prev_t)
            }
        }
    }

    /// The mean value over `[a_s, b_s]`; the value at `a_s` when the window is empty.
    pub fn mean(&self, a_s: f64, b_s: f64) -> f64 {
        if b_s > a_s {
            (self.integral(b_s) - self.integral(a_s)) / (b_s - a_s)
        } else {
            self.value_at(a_s)
        }
    }
}

/// A field that may be a number or a pattern object.
#[derive(Debug, Clone, PartialEq)]
pub struct Signal(pub Pattern);

impl Signal {
    pub const fn constant(value: f64) -> Self {
        Signal(Pattern::constant(value))
    }
}

impl std::ops::Deref for Signal {
    type Target = Pattern;
    fn deref(&self) -> &Pattern {
        &self.0
    }
}

impl<'de> Deserialize<'de> for Signal {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        match v {
            Value::Number(n) => n
                .as_f64()
                .map(Signal::constant)
                .ok_or_else(|| D::Error::custom("number out of range")),
            Value::Object(_) => serde_json::from_value::<Pattern>(v)
                .map(Signal)
                .map_err(D::Error::custom),
            other => Err(D::Error::custom(format!(
                "expected a number or a pattern object ({{\"pattern\": \"constant\"|\"square\"|\"steps\", ...}}), got {other}"
            ))),
        }
    }
}

/// Which process(es) a `processes` entry stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PidSpec {
    /// A literal PID.
    Pid(u32),
    /// `"children"`: every direct child of the process that loaded the library, at call time.
    Children,
    /// `"self"`: the process that loaded the library.
    SelfPid,
}

impl<'de> Deserialize<'de> for PidSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::Number(n) => n
                .as_u64()
                .and_then(|p| u32::try_from(p).ok())
                .map(PidSpec::Pid)
                .ok_or_else(|| D::Error::custom(format!("pid must be a u32, got {n}"))),
            Value::String(s) if s == "children" => Ok(PidSpec::Children),
            Value::String(s) if s == "self" => Ok(PidSpec::SelfPid),
            other => Err(D::Error::custom(format!(
                "pid must be a number, \"children\" or \"self\", got {other}"
            ))),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessSpec {
    pub pid: PidSpec,
    #[serde(default)]
    pub used_memory_bytes: u64,
    #[serde(default = "zero")]
    pub sm_util: Signal,
    #[serde(default = "zero")]
    pub mem_util: Signal,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pcie {
    #[serde(default = "default_pcie_gen")]
    pub max_gen: u32,
    #[serde(default = "default_pcie_width")]
    pub max_width: u32,
    /// Defaults to `max_gen`.
    #[serde(default)]
    pub cur_gen: Option<u32>,
    /// Defaults to `max_width`.
    #[serde(default)]
    pub cur_width: Option<u32>,
    /// Host-to-device bytes per second (RX as seen from the GPU).
    #[serde(default = "zero")]
    pub rx_bytes_per_s: Signal,
    /// Device-to-host bytes per second (TX as seen from the GPU).
    #[serde(default = "zero")]
    pub tx_bytes_per_s: Signal,
}

impl Default for Pcie {
    fn default() -> Self {
        Pcie {
            max_gen: default_pcie_gen(),
            max_width: default_pcie_width(),
            cur_gen: None,
            cur_width: None,
            rx_bytes_per_s: zero(),
            tx_bytes_per_s: zero(),
        }
    }
}

impl Pcie {
    pub fn cur_gen(&self) -> u32 {
        self.cur_gen.unwrap_or(self.max_gen)
    }
    pub fn cur_width(&self) -> u32 {
        self.cur_width.unwrap_or(self.max_width)
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceSpec {
    #[serde(default = "default_name")]
    pub name: String,
    /// Defaults to [`default_uuid`] of the device index.
    #[serde(default)]
    pub uuid: Option<String>,
    #[serde(default = "default_memory_total")]
    pub memory_total_bytes: u64,
    #[serde(default = "zero")]
    pub memory_used_bytes: Signal,
    #[serde(default)]
    pub memory_reserved_bytes: u64,
    #[serde(default = "default_cc")]
    pub compute_capability: (i32, i32),
    #[serde(default = "zero")]
    pub util: Signal,
    #[serde(default = "zero")]
    pub mem_util: Signal,
    #[serde(default = "default_sm_clock")]
    pub sm_clock_mhz: Signal,
    #[serde(default = "default_mem_clock")]
    pub mem_clock_mhz: Signal,
    #[serde(default = "default_video_clock")]
    pub video_clock_mhz: Signal,
    #[serde(default = "default_power")]
    pub power_mw: Signal,
    #[serde(default = "default_power_limit")]
    pub power_limit_mw: u32,
    #[serde(default = "default_temperature")]
    pub temperature_c: Signal,
    #[serde(default)]
    pub pcie: Pcie,
    #[serde(default = "zero")]
    pub throttle_reasons: Signal,
    #[serde(default)]
    pub mig_mode: u32,
    #[serde(default = "default_true")]
    pub persistence_mode: bool,
    #[serde(default)]
    pub unsupported: Vec<String>,
    /// Field ids for which `nvmlDeviceGetFieldValues` reports NOT_SUPPORTED in that field's slot.
    #[serde(default)]
    pub unsupported_field_ids: Vec<u32>,
    #[serde(default)]
    pub processes: Vec<ProcessSpec>,
    /// NUMA node of the GPU (`nvmlDeviceGetNumaNodeId`); `None`: NOT_SUPPORTED.
    #[serde(default)]
    pub numa_node: Option<u32>,
    /// ECC mode and error counts; `None`: ECC NOT_SUPPORTED (as on a consumer GPU).
    #[serde(default)]
    pub ecc: Option<Ecc>,
}

/// ECC state of a device (`nvmlDeviceGetEccMode`, `nvmlDeviceGetTotalEccErrors`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ecc {
    #[serde(default = "default_true")]
    pub enabled: bool,
    #[serde(default)]
    pub volatile_corrected: u64,
    #[serde(default)]
    pub volatile_uncorrected: u64,
    #[serde(default)]
    pub aggregate_corrected: u64,
    #[serde(default)]
    pub aggregate_uncorrected: u64,
}

impl Ecc {
    /// The count for NVML's (errorType, counterType): corrected = 0 / uncorrected = 1,
    /// volatile = 0 / aggregate = 1; `None` for any other value.
    pub fn count(&self, error_type: u32, counter_type: u32) -> Option<u64> {
        match (error_type, counter_type) {
            (0, 0) => Some(self.volatile_corrected),
            (1, 0) => Some(self.volatile_uncorrected),
            (0, 1) => Some(self.aggregate_corrected),
            (1, 1) => Some(self.aggregate_uncorrected),
            _ => None,
        }
    }
}

impl Default for DeviceSpec {
    fn default() -> Self {
        // An empty object takes every default.
        serde_json::from_str("{}").expect("empty device spec deserializes")
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    #[serde(default = "default_driver_version")]
    pub driver_version: String,
    #[serde(default = "default_cuda_driver_version")]
    pub cuda_driver_version: i32,
    #[serde(default)]
    pub init_error: Option<u32>,
    #[serde(default)]
    pub unsupported: Vec<String>,
    #[serde(default = "default_devices")]
    pub devices: Vec<DeviceSpec>,
}

fn zero() -> Signal {
    Signal::constant(0.0)
}
fn default_true() -> bool {
    true
}
fn default_pcie_gen() -> u32 {
    5
}
fn default_pcie_width() -> u32 {
    16
}
fn default_name() -> String {
    "NVIDIA H100 80GB HBM3".into()
}
fn default_memory_total() -> u64 {
    80 * 1024 * 1024 * 1024
}
fn default_cc() -> (i32, i32) {
    (9, 0)
}
fn default_sm_clock() -> Signal {
    Signal::constant(1980.0)
}
fn default_mem_clock() -> Signal {
    Signal::constant(2619.0)
}
fn default_video_clock() -> Signal {
    Signal::constant(1755.0)
}
fn default_power() -> Signal {
    Signal::constant(70_000.0)
}
fn default_power_limit() -> u32 {
    700_000
}
fn default_temperature() -> Signal {
    Signal::constant(40.0)
}
fn default_driver_version() -> String {
    "550.54.15".into()
}
fn default_cuda_driver_version() -> i32 {
    12040
}
fn default_devices() -> Vec<DeviceSpec> {
    vec![DeviceSpec::default()]
}

/// The UUID a device gets when the scenario gives none.
pub fn default_uuid(index: usize) -> String {
    format!("GPU-fa4e0000-0000-4000-8000-{index:012x}")
}

/// Device handles map to a fixed table, so a scenario can have at most this many devices.
pub const MAX_DEVICES: usize = 64;

impl Scenario {
    /// Parses and validates a scenario; the error is one line saying what is wrong.
    pub fn parse(json: &str) -> Result<Scenario, String> {
        let v: Value = serde_json::from_str(json).map_err(|e| e.to_string())?;
        if !v.is_object() {
            return Err("the top level must be a JSON object".into());
        }
        let s: Scenario = serde_json::from_str(json).map_err(|e| e.to_string())?;
        s.validate()?;
        Ok(s)
    }

    pub fn validate(&self) -> Result<(), String> {
        if let Some(code) = self.init_error {
            if code == 0 {
                return Err("init_error must be a non-zero nvmlReturn_t code".into());
            }
        }
        check_unsupported("unsupported", &self.unsupported, |_| true)?;
        if self.devices.len() > MAX_DEVICES {
            return Err(format!(
                "at most {MAX_DEVICES} devices are supported, got {}",
                self.devices.len()
            ));
        }
        for (i, d) in self.devices.iter().enumerate() {
            d.validate().map_err(|e| format!("devices[{i}].{e}"))?;
        }
        Ok(())
    }
}

fn check_unsupported(
    what: &str,
    names: &[String],
    allowed: impl Fn(&str) -> bool,
) -> Result<(), String> {
    for (i, n) in names.iter().enumerate() {
        if !EXPORTED_FUNCTIONS.contains(&n.as_str()) {
            return Err(format!(
                "{what}[{i}]: {n:?} is not a function fake-nvml exports"
            ));
        }
        if ALWAYS_SUPPORTED.contains(&n.as_str()) || !allowed(n) {
            return Err(format!(
                "{what}[{i}]: {n:?} cannot be made unsupported here"
            ));
        }
    }
    Ok(())
}

impl DeviceSpec {
    fn validate(&self) -> Result<(), String> {
        let signals: [(&str, &Signal); 11] = [
            ("memory_used_bytes", &self.memory_used_bytes),
            ("util", &self.util),
            ("mem_util", &self.mem_util),
            ("sm_clock_mhz", &self.sm_clock_mhz),
            ("mem_clock_mhz", &self.mem_clock_mhz),
            ("video_clock_mhz", &self.video_clock_mhz),
            ("power_mw", &self.power_mw),
            ("temperature_c", &self.temperature_c),
            ("throttle_reasons", &self.throttle_reasons),
            ("pcie.rx_bytes_per_s", &self.pcie.rx_bytes_per_s),
            ("pcie.tx_bytes_per_s", &self.pcie.tx_bytes_per_s),
        ];
        for (name, s) in signals {
            s.validate().map_err(|e| format!("{name}: {e}"))?;
        }
        for (i, p) in self.processes.iter().enumerate() {
            p.sm_util
                .validate()
                .map_err(|e| format!("processes[{i}].sm_util: {e}"))?;
            p.mem_util
                .validate()
                .map_err(|e| format!("processes[{i}].mem_util: {e}"))?;
        }
        if self.name.len() >= 96 {
            return Err("name: must be shorter than 96 bytes".into());
        }
        if let Some(u) = &self.uuid {
            if u.len() >= 96 {
                return Err("uuid: must be shorter than 96 bytes".into());
            }
        }
        if self.name.contains('\0') || self.uuid.as_deref().is_some_and(|u| u.contains('\0')) {
            return Err("name/uuid: must not contain NUL".into());
        }
        check_unsupported("unsupported", &self.unsupported, |n| {
            n.starts_with("nvmlDevice")
                && n != "nvmlDeviceGetCount_v2"
                && n != "nvmlDeviceGetHandleByIndex_v2"
        })
    }

    pub fn uuid_for(&self, index: usize) -> String {
        self.uuid.clone().unwrap_or_else(|| default_uuid(index))
    }

    pub fn is_unsupported(&self, func: &str) -> bool {
        self.unsupported.iter().any(|n| n == func)
    }
}

/// Converts a signal value to an unsigned reading (rounded, clamped to the type's range).
pub fn to_u32(v: f64) -> u32 {
    if v.is_nan() {
        0
    } else {
        v.round().clamp(0.0, u32::MAX as f64) as u32
    }
}

/// Converts a signal value to an unsigned 64-bit reading (rounded, clamped at 0).
pub fn to_u64(v: f64) -> u64 {
    if v.is_nan() {
        0
    } else {
        v.round().clamp(0.0, u64::MAX as f64) as u64
    }
}

/// The driver's sampling grid: sample `k` covers `[k/6 s, (k+1)/6 s)` after init and carries
/// the timestamp of the end of that window, in microseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleGrid {
    /// Wall-clock time of init, microseconds since the Unix epoch.
    pub epoch0_us: u64,
}

impl SampleGrid {
    /// Number of sample windows completed by `t_s`.
    pub fn completed(t_s: f64) -> u64 {
        if t_s <= 0.0 || t_s.is_nan() {
            0
        } else {
            (t_s * SAMPLES_PER_SECOND as f64).floor() as u64
        }
    }

    /// Window `[start, end)` of sample `k`, in seconds since init.
    pub fn window(k: u64) -> (f64, f64) {
        let p = SAMPLES_PER_SECOND as f64;
        (k as f64 / p, (k + 1) as f64 / p)
    }

    /// Timestamp of sample `k` (end of its window), µs since the Unix epoch.
    pub fn timestamp(&self, k: u64) -> u64 {
        self.epoch0_us + (k + 1) * 1_000_000 / SAMPLES_PER_SECOND
    }

    /// The samples in the bounded history at time `t_s` that are strictly newer than
    /// `last_seen_us`, oldest first.
    pub fn newer_than(&self, t_s: f64, last_seen_us: u64) -> std::ops::Range<u64> {
        let n = Self::completed(t_s);
        let first_kept = n.saturating_sub(SAMPLE_HISTORY);
        // First k with timestamp(k) > last_seen_us.
        let first_new = if last_seen_us < self.epoch0_us {
            0
        } else {
            let d = last_seen_us - self.epoch0_us;
            // timestamp(k) > last_seen  <=>  (k+1)*1e6/6 > d (integer division) <=> (k+1)*1e6 >= (d+1)*6
            let need = (u128::from(d) + 1) * u128::from(SAMPLES_PER_SECOND); // (k+1)*1e6 >= need
            u64::try_from(need.div_ceil(1_000_000) - 1).unwrap_or(u64::MAX)
        };
        first_kept.max(first_new).min(n)..n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn square() -> Pattern {
        Pattern::Square {
            period_s: 2.0,
            high: 85.0,
            low: 10.0,
            duty: 0.3,
        }
    }

    #[test]
    fn square_is_high_for_duty_fraction() {
        let p = square();
        assert_eq!(p.value_at(0.0), 85.0);
        assert_eq!(p.value_at(0.59), 85.0);
        assert_eq!(p.value_at(0.61), 10.0);
        assert_eq!(p.value_at(1.99), 10.0);
        assert_eq!(p.value_at(2.0), 85.0);
        assert_eq!(p.value_at(2.7), 10.0);
    }

    #[test]
    fn square_duty_edges() {
        let always_high = Pattern::Square {
            period_s: 1.0,
            high: 1.0,
            low: 0.0,
            duty: 1.0,
        };
        let always_low = Pattern::Square {
            period_s: 1.0,
            high: 1.0,
            low: 0.0,
            duty: 0.0,
        };
        for t in [0.0, 0.3, 0.999, 5.5] {
            assert_eq!(always_high.value_at(t), 1.0);
            assert_eq!(always_low.value_at(t), 0.0);
        }
    }

    #[test]
    fn square_integral_and_mean() {
        let p = square();
        // One full cycle: 0.6 s at 85 + 1.4 s at 10.
        let cycle = 0.6 * 85.0 + 1.4 * 10.0;
        assert!((p.integral(2.0) - cycle).abs() < 1e-9);
        assert!((p.integral(5.0) - (2.0 * cycle + 0.6 * 85.0 + 0.4 * 10.0)).abs() < 1e-9);
        assert!((p.mean(0.0, 0.5) - 85.0).abs() < 1e-9);
        assert!((p.mean(0.5, 0.7) - (85.0 + 10.0) / 2.0).abs() < 1e-9);
        assert!((p.mean(1.0, 1.5) - 10.0).abs() < 1e-9);
    }

    #[test]
    fn steps_take_last_point_at_or_before() {
        let p = Pattern::Steps {
            points: vec![(1.0, 10.0), (3.0, 90.0), (3.0, 95.0), (5.0, 0.0)],
        };
        assert_eq!(p.value_at(0.0), 10.0, "before the first point: first value");
        assert_eq!(p.value_at(1.0), 10.0);
        assert_eq!(p.value_at(2.99), 10.0);
        assert_eq!(
            p.value_at(3.0),
            95.0,
            "the later of two points at the same time"
        );
        assert_eq!(p.value_at(4.0), 95.0);
        assert_eq!(p.value_at(100.0), 0.0);
        // 0..3 at 10, 3..5 at 95, then 0.
        assert!((p.integral(3.0) - 30.0).abs() < 1e-9);
        assert!((p.integral(4.0) - 125.0).abs() < 1e-9);
        assert!((p.integral(10.0) - 220.0).abs() < 1e-9);
    }

    #[test]
    fn constant_integral() {
        let p = Pattern::constant(1e9);
        assert_eq!(p.integral(0.0), 0.0);
        assert_eq!(p.integral(-1.0), 0.0);
        assert!((p.integral(2.5) - 2.5e9).abs() < 1.0);
    }

    #[test]
    fn parses_the_documented_example() {
        let s = Scenario::parse(
            r#"{
              "driver_version": "550.54.15",
              "cuda_driver_version": 12040,
              "unsupported": ["nvmlDeviceGetSamples"],
              "devices": [{
                "name": "NVIDIA H100 80GB HBM3",
                "memory_total_bytes": 85899345920, "memory_used_bytes": 80000000000,
                "compute_capability": [9, 0],
                "util": {"pattern": "square", "period_s": 2.0, "high": 85, "low": 10, "duty": 0.3},
                "mem_util": {"pattern": "steps", "points": [[0.0, 10], [3.0, 90]]},
                "sm_clock_mhz": 1980, "power_mw": 350000, "power_limit_mw": 700000, "temperature_c": 65,
                "pcie": {"max_gen": 5, "max_width": 16, "cur_gen": 4, "cur_width": 8,
                         "rx_bytes_per_s": 1.0e9, "tx_bytes_per_s": 1.0e8},
                "throttle_reasons": {"pattern": "constant", "value": 4},
                "mig_mode": 0,
                "unsupported": ["nvmlDeviceGetFieldValues"],
                "processes": [{"pid": 1234, "used_memory_bytes": 1000000000, "sm_util": 90},
                              {"pid": "children", "used_memory_bytes": 2000000000, "sm_util": 95},
                              {"pid": "self"}]
              }]
            }"#,
        )
        .unwrap();
        assert_eq!(s.unsupported, vec!["nvmlDeviceGetSamples"]);
        let d = &s.devices[0];
        assert_eq!(d.memory_used_bytes, Signal::constant(80e9));
        assert_eq!(*d.util, square());
        assert_eq!(d.pcie.cur_gen(), 4);
        assert_eq!(d.pcie.cur_width(), 8);
        assert_eq!(d.throttle_reasons.value_at(1.0), 4.0);
        assert_eq!(d.processes[0].pid, PidSpec::Pid(1234));
        assert_eq!(d.processes[1].pid, PidSpec::Children);
        assert_eq!(d.processes[2].pid, PidSpec::SelfPid);
        assert_eq!(d.processes[2].used_memory_bytes, 0);
        assert!(d.is_unsupported("nvmlDeviceGetFieldValues"));
    }

    #[test]
    fn defaults() {
        let s = Scenario::parse("{}").unwrap();
        assert_eq!(s.driver_version, "550.54.15");
        assert_eq!(s.cuda_driver_version, 12040);
        assert_eq!(s.init_error, None);
        assert_eq!(s.devices.len(), 1, "no `devices` means one default device");
        let d = &s.devices[0];
        assert_eq!(d.name, "NVIDIA H100 80GB HBM3");
        assert_eq!(d.uuid_for(3), "GPU-fa4e0000-0000-4000-8000-000000000003");
        assert_eq!(d.memory_total_bytes, 85_899_345_920);
        assert_eq!(d.compute_capability, (9, 0));
        assert_eq!(d.util.value_at(10.0), 0.0);
        assert_eq!(d.mem_util.value_at(10.0), 0.0);
        assert_eq!(d.sm_clock_mhz.value_at(0.0), 1980.0);
        assert_eq!(d.pcie.cur_gen(), 5);
        assert_eq!(d.pcie.cur_width(), 16);
        assert!(d.persistence_mode);
        assert!(d.processes.is_empty());
        assert_eq!(d.numa_node, None);
        assert_eq!(d.ecc, None);

        let s = Scenario::parse(r#"{"devices": []}"#).unwrap();
        assert!(s.devices.is_empty());
    }

    #[test]
    fn numa_and_ecc() {
        let s = Scenario::parse(
            r#"{"devices": [{"numa_node": 1,
                "ecc": {"volatile_uncorrected": 2, "aggregate_corrected": 7}}]}"#,
        )
        .unwrap();
        let d = &s.devices[0];
        assert_eq!(d.numa_node, Some(1));
        let ecc = d.ecc.as_ref().unwrap();
        assert!(ecc.enabled);
        assert_eq!(ecc.count(1, 0), Some(2));
        assert_eq!(ecc.count(0, 1), Some(7));
        assert_eq!(ecc.count(0, 0), Some(0));
        assert_eq!(ecc.count(2, 0), None);
        assert!(err(r#"{"devices": [{"ecc": {"enable": true}}]}"#).contains("unknown field"));
    }

    fn err(json: &str) -> String {
        Scenario::parse(json).unwrap_err()
    }

    #[test]
    fn malformed_inputs_are_rejected_with_a_reason() {
        let e = err("{");
        assert!(e.contains("EOF"), "{e}");
        let e = err(r#"{"driver_versoin": "1"}"#);
        assert!(e.contains("unknown field `driver_versoin`"), "{e}");
        let e = err(r#"{"devices": [{"utl": 5}]}"#);
        assert!(e.contains("unknown field `utl`"), "{e}");
        let e = err(r#"{"devices": [{"util": {"pattern": "sine", "value": 1}}]}"#);
        assert!(e.contains("unknown variant `sine`"), "{e}");
        let e = err(r#"{"devices": [{"util": {"pattern": "constant", "value": 1, "x": 2}}]}"#);
        assert!(e.contains("unknown field `x`"), "{e}");
        let e = err(
            r#"{"devices": [{"util": {"pattern": "square", "period_s": 1, "high": 1, "low": 0, "duty": 1.5}}]}"#,
        );
        assert_eq!(e, "devices[0].util: duty must be within 0..=1, got 1.5");
        let e = err(
            r#"{"devices": [{"util": {"pattern": "square", "period_s": 0, "high": 1, "low": 0, "duty": 0.5}}]}"#,
        );
        assert!(e.contains("period_s must be > 0"), "{e}");
        let e = err(r#"{"devices": [{"util": {"pattern": "square", "period_s": 1}}]}"#);
        assert!(e.contains("missing field `high`"), "{e}");
        let e = err(r#"{"devices": [{"util": {"pattern": "steps", "points": []}}]}"#);
        assert!(e.contains("at least one point"), "{e}");
        let e = err(r#"{"devices": [{"util": {"pattern": "steps", "points": [[2, 1], [1, 2]]}}]}"#);
        assert!(e.contains("time order"), "{e}");
        let e = err(r#"{"devices": [{"util": "high"}]}"#);
        assert!(e.contains("expected a number or a pattern object"), "{e}");
        let e = err(r#"{"devices": [{"processes": [{"pid": "parent"}]}]}"#);
        assert!(e.contains("\"children\" or \"self\""), "{e}");
        let e = err(r#"{"unsupported": ["nvmlDeviceGetSample"]}"#);
        assert!(e.contains("not a function fake-nvml exports"), "{e}");
        let e = err(r#"{"unsupported": ["nvmlShutdown"]}"#);
        assert!(e.contains("cannot be made unsupported"), "{e}");
        let e = err(r#"{"devices": [{"unsupported": ["nvmlSystemGetDriverVersion"]}]}"#);
        assert!(e.contains("cannot be made unsupported"), "{e}");
        let e = err(r#"{"init_error": 0}"#);
        assert!(e.contains("non-zero"), "{e}");
        let e = err(r#"[]"#);
        assert!(e.contains("must be a JSON object"), "{e}");
        // Every message is one line.
        for json in ["{", r#"{"devices": [{"util": "high"}]}"#] {
            assert!(!err(json).contains('\n'));
        }
    }

    #[test]
    fn sample_grid_selects_strictly_newer_samples() {
        let g = SampleGrid {
            epoch0_us: 1_000_000_000,
        };
        assert_eq!(SampleGrid::completed(0.0), 0);
        assert_eq!(SampleGrid::completed(0.16), 0);
        assert_eq!(SampleGrid::completed(0.17), 1);
        assert_eq!(SampleGrid::completed(1.0), 6);
        assert_eq!(g.timestamp(0), 1_000_166_666);
        assert_eq!(g.timestamp(5), 1_001_000_000);
        assert_eq!(g.newer_than(1.05, 0), 0..6);
        assert_eq!(g.newer_than(1.05, g.timestamp(2)), 3..6);
        assert_eq!(g.newer_than(1.05, g.timestamp(2) - 1), 2..6);
        assert_eq!(g.newer_than(1.05, g.timestamp(5)), 6..6);
        assert_eq!(g.newer_than(1.05, u64::MAX / 2), 6..6);
        // Bounded history: at 100 s only the last 120 remain.
        assert_eq!(g.newer_than(100.0, 0), 480..600);
        for k in 0..600 {
            assert!(g.timestamp(k + 1) > g.timestamp(k));
            assert_eq!(g.newer_than(100.0, g.timestamp(k)), (k + 1).max(480)..600);
        }
    }

    #[test]
    fn conversions_clamp() {
        assert_eq!(to_u32(-5.0), 0);
        assert_eq!(to_u32(97.4), 97);
        assert_eq!(to_u32(1e20), u32::MAX);
        assert_eq!(to_u64(1.5e10), 15_000_000_000);
    }
}
