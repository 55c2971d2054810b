//! `fake-nvml`: a test double of `libnvidia-ml.so`.
//!
//! Built as `libfake_nvml.so`, it exports the NVML functions gpufeed uses, with NVML's C ABI,
//! and answers them from a JSON scenario named by `FAKE_NVML_SCENARIO` (read in `nvmlInit_v2`,
//! played against the wall clock since init). See `README.md` for the scenario format.
//!
//! - [`scenario`]: parsing, validation and evaluation of the scenario (pure Rust, unit-tested).
//! - [`procs`]: expanding `"children"` / `"self"` PIDs from /proc.
//! - [`types`]: NVML's C structs and constants.
//! - [`ffi`]: the exported functions (thin).

pub mod ffi;
pub mod procs;
pub mod scenario;
pub mod types;
