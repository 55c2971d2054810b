//! NVML's C types, as laid out in `nvml.h` (mirrors nvml-wrapper-sys 0.10's bindings; the
//! integration test checks sizes and offsets against those bindings).
#![allow(non_camel_case_types, non_snake_case)]

use std::os::raw::{c_int, c_uint, c_ulong, c_ulonglong, c_ushort};

pub type nvmlReturn_t = c_uint;

pub const NVML_SUCCESS: nvmlReturn_t = 0;
pub const NVML_ERROR_UNINITIALIZED: nvmlReturn_t = 1;
pub const NVML_ERROR_INVALID_ARGUMENT: nvmlReturn_t = 2;
pub const NVML_ERROR_NOT_SUPPORTED: nvmlReturn_t = 3;
pub const NVML_ERROR_NOT_FOUND: nvmlReturn_t = 6;
pub const NVML_ERROR_INSUFFICIENT_SIZE: nvmlReturn_t = 7;
pub const NVML_ERROR_ARGUMENT_VERSION_MISMATCH: nvmlReturn_t = 25;
pub const NVML_ERROR_UNKNOWN: nvmlReturn_t = 999;

/// Opaque device; handles point into a static table (see `ffi::DEVICE_TABLE`).
#[repr(C)]
pub struct nvmlDevice_st {
    _unused: [u8; 0],
}
pub type nvmlDevice_t = *mut nvmlDevice_st;

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct nvmlMemory_t {
    pub total: c_ulonglong,
    pub free: c_ulonglong,
    pub used: c_ulonglong,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct nvmlMemory_v2_t {
    pub version: c_uint,
    pub total: c_ulonglong,
    pub reserved: c_ulonglong,
    pub free: c_ulonglong,
    pub used: c_ulonglong,
}

/// `NVML_STRUCT_VERSION(Memory, 2)`: `sizeof(nvmlMemory_v2_t) | (2 << 24)`.
pub const NVML_MEMORY_V2: c_uint = (std::mem::size_of::<nvmlMemory_v2_t>() as c_uint) | (2 << 24);

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct nvmlUtilization_t {
    pub gpu: c_uint,
    pub memory: c_uint,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union nvmlValue_t {
    pub dVal: f64,
    pub siVal: c_int,
    pub uiVal: c_uint,
    pub ulVal: c_ulong,
    pub ullVal: c_ulonglong,
    pub sllVal: i64,
    pub usVal: c_ushort,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct nvmlSample_t {
    pub timeStamp: c_ulonglong,
    pub sampleValue: nvmlValue_t,
}

pub type nvmlValueType_t = c_uint;
pub const NVML_VALUE_TYPE_UNSIGNED_INT: nvmlValueType_t = 1;
pub const NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: nvmlValueType_t = 3;

pub type nvmlSamplingType_t = c_uint;
pub const NVML_TOTAL_POWER_SAMPLES: nvmlSamplingType_t = 0;
pub const NVML_GPU_UTILIZATION_SAMPLES: nvmlSamplingType_t = 1;
pub const NVML_MEMORY_UTILIZATION_SAMPLES: nvmlSamplingType_t = 2;
pub const NVML_PROCESSOR_CLK_SAMPLES: nvmlSamplingType_t = 5;
pub const NVML_MEMORY_CLK_SAMPLES: nvmlSamplingType_t = 6;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct nvmlFieldValue_t {
    pub fieldId: c_uint,
    pub scopeId: c_uint,
    pub timestamp: i64,
    pub latencyUsec: i64,
    pub valueType: nvmlValueType_t,
    pub nvmlReturn: nvmlReturn_t,
    pub value: nvmlValue_t,
}

pub const NVML_FI_DEV_PCIE_COUNT_TX_BYTES: c_uint = 197;
pub const NVML_FI_DEV_PCIE_COUNT_RX_BYTES: c_uint = 198;

/// `nvmlProcessInfo_v3_t` (same layout as v2): what `..._ComputeRunningProcesses_v3` fills.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct nvmlProcessInfo_t {
    pub pid: c_uint,
    pub usedGpuMemory: c_ulonglong,
    pub gpuInstanceId: c_uint,
    pub computeInstanceId: c_uint,
}

/// Reported as `gpuInstanceId` / `computeInstanceId` when MIG is off (`0xFFFFFFFF`).
pub const NO_INSTANCE_ID: c_uint = 0xFFFF_FFFF;

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct nvmlProcessUtilizationSample_t {
    pub pid: c_uint,
    pub timeStamp: c_ulonglong,
    pub smUtil: c_uint,
    pub memUtil: c_uint,
    pub encUtil: c_uint,
    pub decUtil: c_uint,
}

pub type nvmlClockType_t = c_uint;
pub const NVML_CLOCK_GRAPHICS: nvmlClockType_t = 0;
pub const NVML_CLOCK_SM: nvmlClockType_t = 1;
pub const NVML_CLOCK_MEM: nvmlClockType_t = 2;
pub const NVML_CLOCK_VIDEO: nvmlClockType_t = 3;

pub type nvmlTemperatureSensors_t = c_uint;
pub const NVML_TEMPERATURE_GPU: nvmlTemperatureSensors_t = 0;

pub type nvmlPcieUtilCounter_t = c_uint;
pub const NVML_PCIE_UTIL_TX_BYTES: nvmlPcieUtilCounter_t = 0;
pub const NVML_PCIE_UTIL_RX_BYTES: nvmlPcieUtilCounter_t = 1;

pub type nvmlEnableState_t = c_uint;
