//! `gpufeed bench`: on the GPU present, measure what the usual advice promises.
//!
//! - Host→device and device→host copy bandwidth, pinned vs pageable, at sizes from 1 MiB to
//!   1 GiB, against the PCIe link's theoretical maximum.
//! - GEMM throughput in fp32, TF32, fp16 and bf16 (cuBLAS `cublasGemmEx`, fp32 accumulation as
//!   AMP uses) → the mixed-precision speed-up to expect on this GPU.
//!
//! This module holds what a bench produces and the pure arithmetic on it; [`measure`] runs it on
//! the GPU and [`saved`] keeps the best pinned bandwidths in `~/.cache/gpufeed/bench.json`. Its
//! text is rendered by `present::bench`.

mod measure;
mod saved;

pub(crate) use measure::run;
pub(crate) use saved::{default_saved_path, saved_entry, SavedBench};

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Version of the saved bench file and of `gpufeed bench --format json`.
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(
        "gpufeed bench needs an NVIDIA GPU: the CUDA driver library (libcuda.so.1) was not found"
    )]
    NoDriver,
    #[error("gpufeed bench needs an NVIDIA GPU: {0}")]
    NoDevice(String),
    #[error(
        "GPU {index} does not exist ({} visible to CUDA)",
        crate::units::plural(*.count, "GPU", "GPUs")
    )]
    BadDevice { index: usize, count: usize },
    #[error("CUDA failed during {what}: {detail}")]
    Cuda { what: String, detail: String },
    #[error("cannot save {path}: {source}")]
    Save {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl crate::exit::HasExit for BenchError {
    fn exit(&self) -> crate::exit::Exit {
        use crate::exit::Exit;
        match self {
            BenchError::NoDriver | BenchError::NoDevice(_) => Exit::NoGpu,
            BenchError::BadDevice { .. } => Exit::Usage,
            _ => Exit::Failure,
        }
    }
}

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// CUDA device ordinal.
    pub device: usize,
    pub min_bytes: u64,
    pub max_bytes: u64,
    /// GEMM matrix size (n × n × n); `None`: skip GEMM.
    pub gemm_n: Option<usize>,
    /// NVML library for the link facts (`--nvml-lib`).
    pub nvml_lib: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    H2d,
    D2h,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HostMemory {
    Pinned,
    Pageable,
}

/// One copy measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CopyResult {
    pub direction: Direction,
    pub memory: HostMemory,
    pub size_bytes: u64,
    pub repetitions: u32,
    pub bytes_per_s: f64,
    /// Fraction of the link's theoretical one-direction bandwidth.
    pub fraction_of_link: Option<f64>,
}

/// The number formats the GEMM bench measures, in the order it measures them.
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
pub enum Precision {
    Fp32,
    Tf32,
    Fp16,
    Bf16,
}

impl Precision {
    pub const ALL: &'static [Precision] = <Precision as strum::VariantArray>::VARIANTS;

    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// fp16 and bf16: two-byte elements, the formats autocast computes in.
    pub(crate) fn is_half(self) -> bool {
        matches!(self, Precision::Fp16 | Precision::Bf16)
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// One GEMM measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GemmResult {
    pub precision: Precision,
    pub n: usize,
    pub repetitions: u32,
    pub flops_per_s: f64,
    pub speedup_vs_fp32: Option<f64>,
}

/// The link the GPU sits on (from NVML), when known.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LinkInfo {
    pub pcie_cur_gen: Option<u32>,
    pub pcie_cur_width: Option<u32>,
    pub pcie_max_gen: Option<u32>,
    pub pcie_max_width: Option<u32>,
    /// One direction, at the maximum generation and width.
    pub theoretical_bytes_per_s: Option<f64>,
}

/// Best bandwidth per direction and memory kind.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BestBandwidth {
    pub h2d_pinned_bytes_per_s: Option<f64>,
    pub d2h_pinned_bytes_per_s: Option<f64>,
    pub h2d_pageable_bytes_per_s: Option<f64>,
    pub d2h_pageable_bytes_per_s: Option<f64>,
    /// Pinned over pageable host→device: what `pin_memory=True` buys.
    pub pinned_speedup_h2d: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchReport {
    pub schema_version: u32,
    pub gpu_index: usize,
    pub gpu_name: Option<String>,
    pub gpu_uuid: Option<String>,
    pub compute_capability: Option<[u32; 2]>,
    pub link: LinkInfo,
    pub copies: Vec<CopyResult>,
    pub best: BestBandwidth,
    pub gemm: Vec<GemmResult>,
    /// Why GEMM was not measured (no cuBLAS…); `None` when it was.
    pub gemm_skipped: Option<String>,
    /// Best of bf16/fp16 over fp32: the speed-up mixed precision can bring to matmul-bound work.
    pub expected_amp_speedup: Option<f64>,
    /// Where the pinned bandwidth was saved.
    pub saved_to: Option<PathBuf>,
}

/// Copy sizes: powers of 4 from `min` to `max` (1 MiB, 4 MiB … 1 GiB), always including `max`.
pub(crate) fn copy_sizes(min: u64, max: u64) -> Vec<u64> {
    let mut v = Vec::new();
    let mut s = min.max(1);
    while s < max {
        v.push(s);
        s = s.saturating_mul(4);
    }
    if max > 0 {
        v.push(max);
    }
    v
}

/// Repetitions so each size moves about 1 GiB, between 3 and 50.
pub(crate) fn repetitions(size: u64) -> u32 {
    ((1u64 << 30) / size.max(1)).clamp(3, 50) as u32
}

pub fn best_bandwidth(copies: &[CopyResult]) -> BestBandwidth {
    let best = |d: Direction, m: HostMemory| {
        copies
            .iter()
            .filter(|c| c.direction == d && c.memory == m)
            .map(|c| c.bytes_per_s)
            .filter(|b| b.is_finite() && *b > 0.0)
            .reduce(f64::max)
    };
    let h2d_pinned = best(Direction::H2d, HostMemory::Pinned);
    let h2d_pageable = best(Direction::H2d, HostMemory::Pageable);
    BestBandwidth {
        h2d_pinned_bytes_per_s: h2d_pinned,
        d2h_pinned_bytes_per_s: best(Direction::D2h, HostMemory::Pinned),
        h2d_pageable_bytes_per_s: h2d_pageable,
        d2h_pageable_bytes_per_s: best(Direction::D2h, HostMemory::Pageable),
        pinned_speedup_h2d: match (h2d_pinned, h2d_pageable) {
            (Some(a), Some(b)) if b > 0.0 => Some(a / b),
            _ => None,
        },
    }
}

/// Fills in each result's speed-up over fp32; returns the best of fp16/bf16.
pub fn gemm_speedups(g: &mut [GemmResult]) -> Option<f64> {
    let fp32 = g
        .iter()
        .find(|r| r.precision == Precision::Fp32)
        .map(|r| r.flops_per_s)
        .filter(|f| *f > 0.0)?;
    for r in g.iter_mut() {
        r.speedup_vs_fp32 = Some(r.flops_per_s / fp32);
    }
    g.iter()
        .filter(|r| r.precision.is_half())
        .filter_map(|r| r.speedup_vs_fp32)
        .reduce(f64::max)
}

/// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as NVML and nvidia-smi print it.
pub(crate) fn format_uuid(b: &[u8; 16]) -> String {
    let h: Vec<String> = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        h[0..4].concat(),
        h[4..6].concat(),
        h[6..8].concat(),
        h[8..10].concat(),
        h[10..16].concat()
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn sizes_from_1mib_to_1gib() {
        let s = copy_sizes(1 << 20, 1 << 30);
        assert_eq!(s.first(), Some(&(1 << 20)));
        assert_eq!(s.last(), Some(&(1 << 30)));
        assert_eq!(s.len(), 6);
        assert_eq!(copy_sizes(1 << 20, 3 << 20), vec![1 << 20, 3 << 20]);
        assert_eq!(copy_sizes(1 << 20, 1 << 20), vec![1 << 20]);
        assert_eq!(repetitions(1 << 20), 50);
        assert_eq!(repetitions(1 << 30), 3);
    }

    pub(crate) fn copy(d: Direction, m: HostMemory, b: f64) -> CopyResult {
        CopyResult {
            direction: d,
            memory: m,
            size_bytes: 1 << 20,
            repetitions: 3,
            bytes_per_s: b,
            fraction_of_link: None,
        }
    }

    #[test]
    fn best_and_pinned_gain() {
        let c = vec![
            copy(Direction::H2d, HostMemory::Pinned, 20e9),
            copy(Direction::H2d, HostMemory::Pinned, 25e9),
            copy(Direction::H2d, HostMemory::Pageable, 10e9),
            copy(Direction::D2h, HostMemory::Pinned, 24e9),
        ];
        let b = best_bandwidth(&c);
        assert_eq!(b.h2d_pinned_bytes_per_s, Some(25e9));
        assert_eq!(
            b.d2h_pageable_bytes_per_s, None,
            "not measured is None, not 0"
        );
        assert_eq!(b.pinned_speedup_h2d, Some(2.5));
    }

    #[test]
    fn speedups() {
        use Precision::*;
        let g = |p: Precision, f| GemmResult {
            precision: p,
            n: 4096,
            repetitions: 5,
            flops_per_s: f,
            speedup_vs_fp32: None,
        };
        let mut v = vec![
            g(Fp32, 50e12),
            g(Tf32, 400e12),
            g(Fp16, 800e12),
            g(Bf16, 790e12),
        ];
        assert_eq!(gemm_speedups(&mut v), Some(16.0));
        assert_eq!(v[1].speedup_vs_fp32, Some(8.0));
        let mut none = vec![g(Fp16, 1.0)];
        assert_eq!(gemm_speedups(&mut none), None);
    }

    #[test]
    fn uuid_format() {
        let b: [u8; 16] = [0xfa, 0x4e, 0, 0, 0, 0, 0x40, 0, 0x80, 0, 0, 0, 0, 0, 0, 3];
        assert_eq!(format_uuid(&b), "GPU-fa4e0000-0000-4000-8000-000000000003");
    }
}
