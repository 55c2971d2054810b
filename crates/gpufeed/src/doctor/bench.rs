//! `gpufeed bench`: on the GPU present, measure what the usual advice promises.
//!
//! - Host→device and device→host copy bandwidth, pinned vs pageable, at sizes from 1 MiB to
//!   1 GiB, against the PCIe link's theoretical maximum.
//! - GEMM throughput in fp32, TF32, fp16 and bf16 (cuBLAS `cublasGemmEx`, fp32 accumulation as
//!   AMP uses) → the mixed-precision speed-up to expect on this GPU.
//!
//! The CUDA driver API and cuBLAS are loaded at run time (cudarc, `dynamic-loading`): the binary
//! builds and starts without CUDA; without libcuda, `run` returns [`BenchError::NoDriver`]. cudarc
//! panics when a library or symbol is missing; every CUDA call runs under `catch_unwind` and such
//! a panic becomes an error (GEMM: a `gemm_skipped` reason, the bandwidth still reported).
//!
//! The best pinned bandwidths are saved to `~/.cache/gpufeed/bench.json` ([`SavedBench`]) for
//! scripts and later runs; `diagnose` does not read it (it judges `transfer_bound` against the
//! link's theoretical rate, the same wherever a recording is diagnosed).

use crate::units::pcie_link_bytes_per_s;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Instant;

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
    pub fn is_half(self) -> bool {
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
pub fn copy_sizes(min: u64, max: u64) -> Vec<u64> {
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
pub fn repetitions(size: u64) -> u32 {
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
pub fn format_uuid(b: &[u8; 16]) -> String {
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

// ───────────────────────── saved results (read by diagnose) ─────────────────────────

/// `~/.cache/gpufeed/bench.json`: the last bench per GPU.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SavedBench {
    pub schema_version: u32,
    pub gpus: Vec<SavedGpu>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedGpu {
    /// NVML/nvidia-smi UUID ("GPU-…"): the key.
    pub uuid: Option<String>,
    pub name: Option<String>,
    /// CUDA ordinal at measurement time (informative only; the UUID identifies the GPU).
    pub index: usize,
    pub measured_at_unix_s: u64,
    pub h2d_pinned_bytes_per_s: Option<f64>,
    pub d2h_pinned_bytes_per_s: Option<f64>,
    pub h2d_pageable_bytes_per_s: Option<f64>,
    pub d2h_pageable_bytes_per_s: Option<f64>,
    pub link_theoretical_bytes_per_s: Option<f64>,
    pub pcie_gen: Option<u32>,
    pub pcie_width: Option<u32>,
}

/// `$XDG_CACHE_HOME/gpufeed/bench.json`, else `$HOME/.cache/gpufeed/bench.json`.
pub fn default_saved_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        })?;
    Some(base.join("gpufeed").join("bench.json"))
}

impl SavedBench {
    /// Reads the file; `None` when absent or unreadable (a missing ceiling is not an error).
    pub fn load(path: &Path) -> Option<SavedBench> {
        let text = std::fs::read_to_string(path).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// The entry for a GPU by UUID.
    pub fn for_uuid(&self, uuid: &str) -> Option<&SavedGpu> {
        self.gpus.iter().find(|g| g.uuid.as_deref() == Some(uuid))
    }

    /// Replaces the entry of the same GPU (by UUID, else by index when no UUID) or adds it.
    pub fn upsert(&mut self, g: SavedGpu) {
        self.schema_version = SCHEMA_VERSION;
        let same = |o: &SavedGpu| match (&o.uuid, &g.uuid) {
            (Some(a), Some(b)) => a == b,
            (None, None) => o.index == g.index,
            _ => false,
        };
        match self.gpus.iter_mut().find(|o| same(o)) {
            Some(o) => *o = g,
            None => self.gpus.push(g),
        }
    }

    /// Writes atomically (temp file + rename), creating the directory.
    pub fn save(&self, path: &Path) -> Result<(), BenchError> {
        let err = |source| BenchError::Save {
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
        let text = serde_json::to_string_pretty(self).expect("plain data serializes");
        crate::outfile::write_atomic(path, (text + "\n").as_bytes()).map_err(err)
    }
}

pub fn saved_entry(r: &BenchReport, now_unix_s: u64) -> SavedGpu {
    SavedGpu {
        uuid: r.gpu_uuid.clone(),
        name: r.gpu_name.clone(),
        index: r.gpu_index,
        measured_at_unix_s: now_unix_s,
        h2d_pinned_bytes_per_s: r.best.h2d_pinned_bytes_per_s,
        d2h_pinned_bytes_per_s: r.best.d2h_pinned_bytes_per_s,
        h2d_pageable_bytes_per_s: r.best.h2d_pageable_bytes_per_s,
        d2h_pageable_bytes_per_s: r.best.d2h_pageable_bytes_per_s,
        link_theoretical_bytes_per_s: r.link.theoretical_bytes_per_s,
        pcie_gen: r.link.pcie_cur_gen,
        pcie_width: r.link.pcie_cur_width,
    }
}

// ───────────────────────────── measuring (needs a GPU) ─────────────────────────────

/// Runs `f`, turning a panic inside cudarc (missing library or symbol) into an error message.
fn guarded<T>(what: &str, f: impl FnOnce() -> Result<T, BenchError>) -> Result<T, BenchError> {
    use std::sync::Mutex;
    static LAST: Mutex<Option<String>> = Mutex::new(None);
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| info.payload().downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "unknown panic".into());
        if let Ok(mut g) = LAST.lock() {
            *g = Some(msg);
        }
    }));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    std::panic::set_hook(prev);
    match r {
        Ok(v) => v,
        Err(_) => {
            let detail = LAST
                .lock()
                .ok()
                .and_then(|mut g| g.take())
                .unwrap_or_else(|| "unknown panic".into());
            Err(BenchError::Cuda {
                what: what.to_string(),
                detail: detail.chars().take(300).collect(),
            })
        }
    }
}

/// The error's CUresult name (`CUDA_ERROR_NO_DEVICE`): formatted without calling back into
/// libcuda (`Display` would call `cuGetErrorString`).
fn driver_error_name(e: &cudarc::driver::DriverError) -> String {
    format!("{:?}", e.0)
}

fn cuda_err(what: &str) -> impl Fn(cudarc::driver::DriverError) -> BenchError + '_ {
    move |e| BenchError::Cuda {
        what: what.to_string(),
        detail: driver_error_name(&e),
    }
}

/// Is libcuda loadable at all?
pub fn cuda_driver_present() -> bool {
    // SAFETY: only tries to dlopen the library names cudarc would use.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// Measures everything on `opts.device`. Needs a GPU.
pub fn run(opts: &BenchOptions) -> Result<BenchReport, BenchError> {
    if !cuda_driver_present() {
        return Err(BenchError::NoDriver);
    }
    // Any failure here (no device, a driver without the GPU's kernel module, a libcuda missing
    // functions) means there is no usable GPU.
    let count = guarded("cuInit", || {
        cudarc::driver::CudaContext::device_count().map_err(|e| {
            BenchError::NoDevice(format!(
                "CUDA found no usable GPU ({})",
                driver_error_name(&e)
            ))
        })
    })
    .map_err(|e| match e {
        BenchError::Cuda { detail, .. } => BenchError::NoDevice(format!(
            "the CUDA driver could not be initialised ({detail})"
        )),
        e => e,
    })?;
    let count = usize::try_from(count).unwrap_or(0);
    if count == 0 {
        return Err(BenchError::NoDevice("CUDA reports no GPU".into()));
    }
    if opts.device >= count {
        return Err(BenchError::BadDevice {
            index: opts.device,
            count,
        });
    }
    guarded("the bandwidth benchmark", || measure(opts))
}

fn measure(opts: &BenchOptions) -> Result<BenchReport, BenchError> {
    use cudarc::driver::CudaContext;
    let ctx = CudaContext::new(opts.device).map_err(cuda_err("creating a context"))?;
    let name = ctx.name().ok();
    let uuid = ctx.uuid().ok().map(|u| {
        let mut b = [0u8; 16];
        for (d, s) in b.iter_mut().zip(u.bytes.iter()) {
            *d = *s as u8;
        }
        format_uuid(&b)
    });
    let cc = ctx
        .compute_capability()
        .ok()
        .and_then(|(a, b)| Some([u32::try_from(a).ok()?, u32::try_from(b).ok()?]));
    let (free, _total) = ctx
        .mem_get_info()
        .map_err(cuda_err("reading free memory"))?;
    // Leave room: the copy buffer must fit in a quarter of free memory.
    let max = opts
        .max_bytes
        .min(free as u64 / 4)
        .max(opts.min_bytes.min(free as u64 / 4));
    let sizes = copy_sizes(opts.min_bytes.min(max), max);

    let mut copies = measure_copies(&ctx, &sizes)?;
    let link = link_info(opts.nvml_lib.as_deref(), uuid.as_deref());
    for c in &mut copies {
        c.fraction_of_link = link.theoretical_bytes_per_s.map(|t| c.bytes_per_s / t);
    }
    let best = best_bandwidth(&copies);

    let (mut gemm, gemm_skipped) = match opts.gemm_n {
        None => (Vec::new(), Some("--no-gemm".to_string())),
        Some(n) => {
            if !cublas_present() {
                (
                    Vec::new(),
                    Some("cuBLAS (libcublas.so.13/.12) was not found on the library path; install the CUDA toolkit or the nvidia-cublas wheel and add its lib directory to LD_LIBRARY_PATH".into()),
                )
            } else {
                let n = gemm_size_for(n, free as u64);
                match guarded("GEMM", || measure_gemm(&ctx, n)) {
                    Ok(g) => (g, None),
                    Err(e) => (Vec::new(), Some(e.to_string())),
                }
            }
        }
    };
    let expected_amp_speedup = gemm_speedups(&mut gemm);
    Ok(BenchReport {
        schema_version: SCHEMA_VERSION,
        gpu_index: opts.device,
        gpu_name: name,
        gpu_uuid: uuid,
        compute_capability: cc,
        link,
        copies,
        best,
        gemm,
        gemm_skipped,
        expected_amp_speedup,
        saved_to: None,
    })
}

fn cublas_present() -> bool {
    // SAFETY: only tries to dlopen cuBLAS under the names cudarc would use.
    let by_name = || unsafe { cudarc::cublas::sys::is_culib_present() };
    by_name() || {
        preload_cublas();
        by_name()
    }
}

/// Directories where a CUDA toolkit keeps cuBLAS when they are not on the loader's path.
fn cublas_dirs() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(std::env::var_os)
        .map(|h| PathBuf::from(h).join("lib64"))
        .collect();
    v.push(PathBuf::from("/usr/local/cuda/lib64"));
    v.push(PathBuf::from("/usr/local/cuda/targets/x86_64-linux/lib"));
    v.push(PathBuf::from("/usr/local/cuda/targets/sbsa-linux/lib"));
    v
}

/// cudarc looks cuBLAS up by name (`libcublas.so.13`, `.12`…) on the loader's path. A toolkit in
/// /usr/local/cuda is often not on it: load libcublasLt and libcublas from there by full path
/// first (and keep them loaded), so the later lookup by name finds the already-loaded library.
fn preload_cublas() {
    for dir in cublas_dirs() {
        for major in ["13", "12"] {
            let lt = dir.join(format!("libcublasLt.so.{major}"));
            let blas = dir.join(format!("libcublas.so.{major}"));
            if !blas.exists() {
                continue;
            }
            // SAFETY: loading NVIDIA's cuBLAS runs only its own initialisers.
            unsafe {
                if let Ok(l) = libloading::Library::new(&lt) {
                    std::mem::forget(l);
                }
                if let Ok(l) = libloading::Library::new(&blas) {
                    std::mem::forget(l);
                    return;
                }
            }
        }
    }
}

/// Shrinks n until three fp32 n×n matrices fit in half the free memory.
pub fn gemm_size_for(n: usize, free_bytes: u64) -> usize {
    let mut n = n.max(256);
    while n > 256 && 3 * (n as u64) * (n as u64) * 4 > free_bytes / 2 {
        n /= 2;
    }
    n
}

fn link_info(nvml_lib: Option<&Path>, uuid: Option<&str>) -> LinkInfo {
    let Ok(nvml) = crate::sample::nvml::open(nvml_lib) else {
        return LinkInfo::default();
    };
    let Some(uuid) = uuid else {
        return LinkInfo::default();
    };
    let Ok(d) = nvml.device_by_uuid(uuid) else {
        return LinkInfo::default();
    };
    let (mg, mw) = (d.max_pcie_link_gen().ok(), d.max_pcie_link_width().ok());
    LinkInfo {
        pcie_cur_gen: d.current_pcie_link_gen().ok(),
        pcie_cur_width: d.current_pcie_link_width().ok(),
        pcie_max_gen: mg,
        pcie_max_width: mw,
        theoretical_bytes_per_s: match (mg, mw) {
            (Some(g), Some(w)) => pcie_link_bytes_per_s(g, w),
            _ => None,
        },
    }
}

fn measure_copies(
    ctx: &std::sync::Arc<cudarc::driver::CudaContext>,
    sizes: &[u64],
) -> Result<Vec<CopyResult>, BenchError> {
    let max = *sizes.iter().max().unwrap_or(&0) as usize;
    let stream = ctx.default_stream();
    let mut dev = stream
        .alloc_zeros::<u8>(max)
        .map_err(cuda_err("allocating device memory"))?;
    // Plain page-locked memory (flags 0), as `cudaHostAlloc` gives PyTorch's pin_memory; not
    // cudarc's default write-combined kind, which is slow for the host to read.
    // SAFETY: the buffer is fully written just below, before any copy reads it.
    let mut pinned = unsafe { ctx.alloc_pinned_with_flags::<u8>(max, 0) }
        .map_err(cuda_err("allocating pinned host memory"))?;
    let pinned_host: &mut [u8] = pinned
        .as_mut_slice()
        .map_err(cuda_err("mapping pinned memory"))?;
    pinned_host.fill(1);
    // Touched pages, so first-touch faults are not measured.
    let mut pageable = vec![1u8; max];
    let mut out = Vec::new();
    for &size in sizes {
        let n = size as usize;
        let reps = repetitions(size);
        for memory in [HostMemory::Pinned, HostMemory::Pageable] {
            for direction in [Direction::H2d, Direction::D2h] {
                let mut once = |dev: &mut cudarc::driver::CudaSlice<u8>| -> Result<(), BenchError> {
                    let mut view = dev.slice_mut(0..n);
                    let host: &mut [u8] = match memory {
                        HostMemory::Pinned => &mut pinned_host[..n],
                        HostMemory::Pageable => &mut pageable[..n],
                    };
                    match direction {
                        Direction::H2d => stream.memcpy_htod(&*host, &mut view),
                        Direction::D2h => stream.memcpy_dtoh(&view, host),
                    }
                    .map_err(cuda_err("copying"))
                };
                once(&mut dev)?; // warm-up
                stream.synchronize().map_err(cuda_err("synchronizing"))?;
                let t0 = Instant::now();
                for _ in 0..reps {
                    once(&mut dev)?;
                }
                stream.synchronize().map_err(cuda_err("synchronizing"))?;
                let secs = t0.elapsed().as_secs_f64();
                out.push(CopyResult {
                    direction,
                    memory,
                    size_bytes: size,
                    repetitions: reps,
                    bytes_per_s: size as f64 * reps as f64 / secs.max(1e-9),
                    fraction_of_link: None,
                });
            }
        }
    }
    Ok(out)
}

/// Host data for one precision: values in [-1, 1) from a fixed LCG (a 1 Mi-element pattern,
/// repeated), as raw bytes.
fn matrix_bytes(precision: Precision, count: usize) -> Vec<u8> {
    let pattern = count.min(1 << 20);
    let mut state: u32 = 0x1234_5678;
    let mut next = || {
        state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        (state >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0
    };
    let elem = if precision.is_half() { 2 } else { 4 };
    let mut out = Vec::with_capacity(count * elem);
    for _ in 0..pattern {
        let v = next();
        match precision {
            Precision::Fp16 => out.extend_from_slice(&f32_to_f16_bits(v).to_le_bytes()),
            Precision::Bf16 => out.extend_from_slice(&((v.to_bits() >> 16) as u16).to_le_bytes()),
            Precision::Fp32 | Precision::Tf32 => out.extend_from_slice(&v.to_le_bytes()),
        }
    }
    let pattern_bytes = out.len();
    while out.len() < count * elem {
        let n = pattern_bytes.min(count * elem - out.len());
        out.extend_from_within(..n);
    }
    out
}

/// IEEE half from a float in [-1, 1] (truncating; subnormals flushed to zero).
pub fn f32_to_f16_bits(v: f32) -> u16 {
    let b = v.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32 - 127 + 15;
    if exp <= 0 {
        return sign;
    }
    if exp >= 31 {
        return sign | 0x7c00;
    }
    sign | ((exp as u16) << 10) | ((b >> 13) & 0x3ff) as u16
}

fn measure_gemm(
    ctx: &std::sync::Arc<cudarc::driver::CudaContext>,
    n: usize,
) -> Result<Vec<GemmResult>, BenchError> {
    use cudarc::cublas::sys::{
        cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType,
    };
    use cudarc::driver::{DevicePtr, DevicePtrMut};
    let stream = ctx.default_stream();
    let blas = cudarc::cublas::CudaBlas::new(stream.clone()).map_err(|e| BenchError::Cuda {
        what: "creating a cuBLAS handle".into(),
        detail: format!("{e:?}"),
    })?;
    let count = n * n;
    let mut results = Vec::new();
    for &precision in Precision::ALL {
        let (dtype, compute, elem) = match precision {
            Precision::Fp32 => (
                cudaDataType::CUDA_R_32F,
                cublasComputeType_t::CUBLAS_COMPUTE_32F,
                4,
            ),
            Precision::Tf32 => (
                cudaDataType::CUDA_R_32F,
                cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
                4,
            ),
            Precision::Fp16 => (
                cudaDataType::CUDA_R_16F,
                cublasComputeType_t::CUBLAS_COMPUTE_32F,
                2,
            ),
            Precision::Bf16 => (
                cudaDataType::CUDA_R_16BF,
                cublasComputeType_t::CUBLAS_COMPUTE_32F,
                2,
            ),
        };
        let host = matrix_bytes(precision, count);
        let a = stream.clone_htod(&host).map_err(cuda_err("uploading A"))?;
        let b = stream.clone_htod(&host).map_err(cuda_err("uploading B"))?;
        let mut c = stream
            .alloc_zeros::<u8>(count * elem)
            .map_err(cuda_err("allocating C"))?;
        let (alpha, beta) = (1.0f32, 0.0f32);
        let ni = n as i32;
        let mut gemm = || -> Result<(), BenchError> {
            let (pa, _ra) = a.device_ptr(&stream);
            let (pb, _rb) = b.device_ptr(&stream);
            let (pc, _rc) = c.device_ptr_mut(&stream);
            // SAFETY: A, B and C are n×n matrices of `dtype` on this context; alpha/beta are f32
            // as the 32F compute types require.
            unsafe {
                cudarc::cublas::result::gemm_ex(
                    *blas.handle(),
                    cublasOperation_t::CUBLAS_OP_N,
                    cublasOperation_t::CUBLAS_OP_N,
                    ni,
                    ni,
                    ni,
                    (&alpha as *const f32).cast(),
                    pa as *const _,
                    dtype,
                    ni,
                    pb as *const _,
                    dtype,
                    ni,
                    (&beta as *const f32).cast(),
                    pc as *mut _,
                    dtype,
                    ni,
                    compute,
                    cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                )
            }
            .map_err(|e| BenchError::Cuda {
                what: format!("{precision} GEMM"),
                detail: format!("{e:?}"),
            })
        };
        gemm()?;
        gemm()?;
        stream.synchronize().map_err(cuda_err("synchronizing"))?;
        // Batches of 5 until 0.3 s.
        let t0 = Instant::now();
        let mut reps = 0u32;
        while reps < 200 && (reps == 0 || t0.elapsed().as_secs_f64() < 0.3) {
            for _ in 0..5 {
                gemm()?;
            }
            stream.synchronize().map_err(cuda_err("synchronizing"))?;
            reps += 5;
        }
        let secs = t0.elapsed().as_secs_f64();
        results.push(GemmResult {
            precision,
            n,
            repetitions: reps,
            flops_per_s: 2.0 * (n as f64).powi(3) * reps as f64 / secs.max(1e-9),
            speedup_vs_fp32: None,
        });
    }
    Ok(results)
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

    #[test]
    fn half_conversion() {
        assert_eq!(f32_to_f16_bits(1.0), 0x3c00);
        assert_eq!(f32_to_f16_bits(-0.5), 0xb800);
        assert_eq!(f32_to_f16_bits(0.0), 0);
        assert_eq!(matrix_bytes(Precision::Fp16, 3).len(), 6);
        assert_eq!(matrix_bytes(Precision::Fp32, 3).len(), 12);
        let big = matrix_bytes(Precision::Bf16, (1 << 20) + 3);
        assert_eq!(big.len(), ((1 << 20) + 3) * 2);
        assert_eq!(big[(1 << 21)..], big[..6], "the pattern repeats");
    }

    #[test]
    fn gemm_size_shrinks_to_fit() {
        assert_eq!(gemm_size_for(8192, 80 << 30), 8192);
        assert_eq!(gemm_size_for(8192, 1 << 30), 4096);
        assert_eq!(gemm_size_for(8192, 0), 256);
    }

    #[test]
    fn saved_file_round_trip_and_upsert() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/bench.json");
        assert_eq!(SavedBench::load(&path), None);
        let g = |uuid: &str, bw| SavedGpu {
            uuid: Some(uuid.into()),
            name: Some("NVIDIA H200".into()),
            index: 0,
            measured_at_unix_s: 1,
            h2d_pinned_bytes_per_s: Some(bw),
            d2h_pinned_bytes_per_s: Some(bw),
            h2d_pageable_bytes_per_s: None,
            d2h_pageable_bytes_per_s: None,
            link_theoretical_bytes_per_s: Some(63e9),
            pcie_gen: Some(5),
            pcie_width: Some(16),
        };
        let mut s = SavedBench::default();
        s.upsert(g("GPU-a", 50e9));
        s.upsert(g("GPU-b", 40e9));
        s.upsert(g("GPU-a", 55e9));
        assert_eq!(s.gpus.len(), 2);
        s.save(&path).unwrap();
        let back = SavedBench::load(&path).unwrap();
        assert_eq!(back.schema_version, SCHEMA_VERSION);
        assert_eq!(
            back.for_uuid("GPU-a").unwrap().h2d_pinned_bytes_per_s,
            Some(55e9)
        );
        assert_eq!(back.for_uuid("GPU-c"), None);
        std::fs::write(&path, "not json").unwrap();
        assert_eq!(SavedBench::load(&path), None);
    }

    /// On a real GPU only: the whole bench at small sizes.
    #[test]
    #[ignore = "needs an NVIDIA GPU"]
    fn measures_on_a_real_gpu() {
        let r = run(&BenchOptions {
            device: 0,
            min_bytes: 1 << 20,
            max_bytes: 64 << 20,
            gemm_n: Some(2048),
            nvml_lib: None,
        })
        .expect("bench runs on a GPU");
        assert!(r.best.h2d_pinned_bytes_per_s.unwrap() > 1e9);
        assert!(r.best.d2h_pinned_bytes_per_s.unwrap() > 1e9);
        assert_eq!(r.copies.len(), 4 * copy_sizes(1 << 20, 64 << 20).len());
        assert!(r.gpu_uuid.as_deref().is_some_and(|u| u.starts_with("GPU-")));
        if r.gemm_skipped.is_none() {
            assert_eq!(r.gemm.len(), 4);
            assert!(r.gemm.iter().all(|g| g.flops_per_s > 1e11), "{:?}", r.gemm);
        } else {
            eprintln!("GEMM skipped: {:?}", r.gemm_skipped);
        }
    }
}
