//! Measuring on the GPU. The CUDA driver API and cuBLAS are loaded at run time (cudarc,
//! `dynamic-loading`): the binary builds and starts without CUDA; without libcuda, [`run`] returns
//! [`BenchError::NoDriver`]. cudarc panics when a library or symbol is missing; every CUDA call
//! runs under `catch_unwind` and such a panic becomes an error (GEMM: a `gemm_skipped` reason,
//! the bandwidth still reported).

use super::*;
use crate::units::pcie_link_bytes_per_s;
use std::path::{Path, PathBuf};
use std::time::Instant;

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
pub(crate) fn cuda_driver_present() -> bool {
    // SAFETY: only tries to dlopen the library names cudarc would use.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// Measures everything on `opts.device`. Needs a GPU.
pub(crate) fn run(opts: &BenchOptions) -> Result<BenchReport, BenchError> {
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
pub(crate) fn gemm_size_for(n: usize, free_bytes: u64) -> usize {
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
pub(crate) fn f32_to_f16_bits(v: f32) -> u16 {
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
mod tests {
    use super::*;

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
