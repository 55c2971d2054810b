//! Driver and CUDA toolchain checks: NVIDIA driver, the CUDA version the driver supports
//! against the GPU generation, `nvcc`, and cuDNN (found through `ldconfig -p`, `LD_LIBRARY_PATH`
//! and Python's `site-packages/nvidia/cudnn`; version from `cudnn_version.h` or `cudnnGetVersion`).

use super::gpu::{GpuProbeError, GpuSystem};
use super::proc;
use super::python::{cudnn_version_str, Probe};
use super::version::{cc_str, generation, min_cuda, CudaVersion};
use super::{Check, Group, Status};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `nvcc --version`, when nvcc is on PATH.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Nvcc {
    NotOnPath,
    Found {
        version: Option<CudaVersion>,
        raw: String,
    },
    Failed(String),
}

pub(crate) fn probe_nvcc() -> Nvcc {
    match proc::run(Path::new("nvcc"), &["--version"], Duration::from_secs(10)) {
        Ok(o) => Nvcc::Found {
            version: parse_nvcc(&o.stdout),
            raw: o
                .stdout
                .lines()
                .find(|l| l.contains("release"))
                .unwrap_or("")
                .trim()
                .to_string(),
        },
        Err(proc::RunError::NotFound { .. }) => Nvcc::NotOnPath,
        Err(e) => Nvcc::Failed(e.to_string()),
    }
}

/// "Cuda compilation tools, release 12.4, V12.4.131" → 12.4.
pub(crate) fn parse_nvcc(out: &str) -> Option<CudaVersion> {
    let line = out.lines().find(|l| l.contains("release"))?;
    let after = line.split("release").nth(1)?;
    CudaVersion::parse(after.trim().split(',').next()?)
}

/// Where a cuDNN library was found, and its version when readable.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CudnnFound {
    pub libraries: Vec<PathBuf>,
    pub version: Option<String>,
    /// "cudnn_version.h" path or "cudnnGetVersion".
    pub version_source: Option<String>,
}

pub(crate) fn probe_cudnn(site_packages: &[PathBuf]) -> Option<CudnnFound> {
    // In the loader's order of precedence: LD_LIBRARY_PATH, then the ld.so cache; Python's
    // nvidia-cudnn wheel (loaded by torch through its own path) last.
    let mut libs: Vec<PathBuf> = Vec::new();
    let scan = |d: &Path, libs: &mut Vec<PathBuf>| {
        if let Ok(rd) = std::fs::read_dir(d) {
            let mut found: Vec<PathBuf> = rd
                .flatten()
                .filter(|e| is_cudnn_lib(&e.file_name().to_string_lossy()))
                .map(|e| e.path())
                .collect();
            found.sort();
            libs.extend(found);
        }
    };
    if let Some(v) = std::env::var_os("LD_LIBRARY_PATH") {
        for d in std::env::split_paths(&v) {
            scan(&d, &mut libs);
        }
    }
    let ldconfig = ["ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"]
        .iter()
        .find_map(|p| proc::run(Path::new(p), &["-p"], Duration::from_secs(10)).ok());
    if let Some(o) = ldconfig {
        libs.extend(parse_ldconfig(&o.stdout));
    }
    for s in site_packages {
        scan(&s.join("nvidia/cudnn/lib"), &mut libs);
    }
    let mut seen = std::collections::HashSet::new();
    libs.retain(|p| seen.insert(p.clone()));
    if libs.is_empty() {
        return None;
    }
    // Headers: next to each library (../include), in site-packages, then the usual places.
    let mut headers: Vec<PathBuf> = Vec::new();
    for l in &libs {
        if let Some(dir) = l.parent().and_then(|p| p.parent()) {
            headers.push(dir.join("include/cudnn_version.h"));
        }
    }
    for s in site_packages {
        headers.push(s.join("nvidia/cudnn/include/cudnn_version.h"));
    }
    for h in [
        "/usr/include/cudnn_version.h",
        "/usr/include/x86_64-linux-gnu/cudnn_version_v9.h",
        "/usr/include/x86_64-linux-gnu/cudnn_version_v8.h",
        "/usr/include/aarch64-linux-gnu/cudnn_version_v9.h",
        "/usr/local/cuda/include/cudnn_version.h",
    ] {
        headers.push(PathBuf::from(h));
    }
    for h in headers {
        if let Some(v) = std::fs::read_to_string(&h)
            .ok()
            .and_then(|t| parse_cudnn_header(&t))
        {
            return Some(CudnnFound {
                libraries: libs,
                version: Some(v),
                version_source: Some(h.display().to_string()),
            });
        }
    }
    let version = libs.iter().find_map(|l| cudnn_get_version(l));
    Some(CudnnFound {
        libraries: libs,
        version_source: version.as_ref().map(|_| "cudnnGetVersion".to_string()),
        version,
    })
}

fn is_cudnn_lib(name: &str) -> bool {
    name == "libcudnn.so" || name.starts_with("libcudnn.so.")
}

/// Library paths of libcudnn.so* from `ldconfig -p`.
pub(crate) fn parse_ldconfig(out: &str) -> Vec<PathBuf> {
    out.lines()
        .filter_map(|l| {
            let (name, path) = l.trim().split_once(" => ")?;
            let name = name.split_whitespace().next()?;
            is_cudnn_lib(name).then(|| PathBuf::from(path.trim()))
        })
        .collect()
}

/// "#define CUDNN_MAJOR 9" … → "9.1.0".
pub(crate) fn parse_cudnn_header(text: &str) -> Option<String> {
    let get = |key: &str| {
        text.lines().find_map(|l| {
            let mut it = l.split_whitespace();
            (it.next()? == "#define" && it.next()? == key)
                .then(|| it.next()?.parse::<u32>().ok())
                .flatten()
        })
    };
    Some(format!(
        "{}.{}.{}",
        get("CUDNN_MAJOR")?,
        get("CUDNN_MINOR")?,
        get("CUDNN_PATCHLEVEL")?
    ))
}

/// dlopen the library and call `size_t cudnnGetVersion(void)`.
fn cudnn_get_version(lib: &Path) -> Option<String> {
    // SAFETY: loading a library runs its initialisers; libcudnn's are benign. The symbol's
    // signature is cuDNN's documented `size_t cudnnGetVersion(void)`.
    unsafe {
        let l = libloading::Library::new(lib).ok()?;
        let f: libloading::Symbol<unsafe extern "C" fn() -> usize> =
            l.get(b"cudnnGetVersion\0").ok()?;
        let v = f();
        (v > 0).then(|| cudnn_version_str(v as u64))
    }
}

pub(crate) fn checks(
    gpus: &Result<GpuSystem, GpuProbeError>,
    nvcc: &Nvcc,
    cudnn: &Option<CudnnFound>,
    py: &Probe,
) -> Vec<Check> {
    let torch_cudnn = match py {
        Probe::Ran(f) => f.cudnn_version.map(cudnn_version_str),
        _ => None,
    };
    let driver_cuda = gpus.as_ref().ok().and_then(|g| g.cuda_driver_version);
    vec![
        judge_driver(gpus),
        judge_cuda_driver(gpus),
        judge_nvcc(nvcc, driver_cuda),
        judge_cudnn(cudnn.as_ref(), torch_cudnn),
    ]
}

pub(crate) fn judge_driver(gpus: &Result<GpuSystem, GpuProbeError>) -> Check {
    let id = "nvidia_driver";
    let sys = match gpus {
        Err(e) => return Check::skip(id, Group::Driver, format!("{e}")),
        Ok(s) => s,
    };
    let Some(v) = &sys.driver_version else {
        return Check::new(
            id,
            Group::Driver,
            Status::Warn,
            "NVML loaded but did not report the driver version",
        );
    };
    let major: Option<u32> = v.split('.').next().and_then(|m| m.parse().ok());
    let c = Check::new(
        id,
        Group::Driver,
        Status::Pass,
        format!("NVIDIA driver {v}"),
    )
    .with("driver_version", v.clone());
    match major {
        Some(m) if m < 525 => Check {
            status: Status::Warn,
            summary: format!(
                "NVIDIA driver {v} is older than 525: current PyTorch wheels (CUDA 12) need ≥ 525"
            ),
            ..c
        }
        .fix("update the driver (e.g. the distribution's nvidia-driver-570 or newer)"),
        _ => c,
    }
}

/// The CUDA version the driver supports, against what the GPUs need.
pub(crate) fn judge_cuda_driver(gpus: &Result<GpuSystem, GpuProbeError>) -> Check {
    let id = "cuda_driver";
    let sys = match gpus {
        Err(e) => return Check::skip(id, Group::Driver, format!("{e}")),
        Ok(s) => s,
    };
    let Some(v) = sys.cuda_driver_version else {
        return Check::skip(
            id,
            Group::Driver,
            "the driver did not report its CUDA version",
        );
    };
    let c = |st, s: String| {
        Check::new(id, Group::Driver, st, s).with("cuda_driver_version", v.to_string())
    };
    if let Some(cc) = sys.min_cc() {
        // The newest GPU decides what the driver must support.
        let newest = sys
            .devices
            .iter()
            .filter_map(|d| d.compute_capability)
            .max()
            .unwrap_or(cc);
        if let Some(min) = min_cuda(newest) {
            if v < min {
                return c(
                    Status::Fail,
                    format!("the driver supports CUDA {v}, but {} GPUs (compute capability {}) need CUDA ≥ {min}", generation(newest), cc_str(newest)),
                )
                .with("min_cuda", min.to_string())
                .fix("update the NVIDIA driver to a release that supports this GPU");
            }
        }
    }
    if v.major < 12 {
        return c(
            Status::Warn,
            format!("the driver supports CUDA {v} only: current PyTorch wheels are built for CUDA 12 or 13"),
        )
        .fix("update the NVIDIA driver (≥ 525 for CUDA 12, ≥ 580 for CUDA 13)");
    }
    c(Status::Pass, format!("the driver supports CUDA up to {v}"))
}

pub(crate) fn judge_nvcc(nvcc: &Nvcc, driver_cuda: Option<CudaVersion>) -> Check {
    let id = "nvcc";
    match nvcc {
        Nvcc::NotOnPath => Check::skip(id, Group::Driver, "nvcc is not on PATH (not needed for pip/conda PyTorch; only for building CUDA extensions)"),
        Nvcc::Failed(e) => Check::new(id, Group::Driver, Status::Warn, format!("nvcc --version failed: {e}")),
        Nvcc::Found { version: None, raw } => Check::new(id, Group::Driver, Status::Warn, format!("could not read nvcc's version ({raw})")),
        Nvcc::Found { version: Some(v), .. } => {
            let c = Check::new(id, Group::Driver, Status::Pass, format!("nvcc {v}"))
                .with("nvcc_version", v.to_string())
                .with("driver_cuda", driver_cuda.map(|d| d.to_string()));
            match driver_cuda {
                Some(d) if v.major > d.major => Check {
                    status: Status::Warn,
                    summary: format!("nvcc {v} is newer than the driver's CUDA {d}: code it builds will not run on this driver"),
                    ..c
                }
                .fix("update the driver, or put a CUDA toolkit ≤ the driver's version first on PATH"),
                _ => c,
            }
        }
    }
}

pub(crate) fn judge_cudnn(found: Option<&CudnnFound>, torch_cudnn: Option<String>) -> Check {
    let id = "cudnn";
    let Some(f) = found else {
        return match torch_cudnn {
            Some(t) => Check::new(id, Group::Driver, Status::Pass, format!("cuDNN {t} (bundled with PyTorch)"))
                .with("torch_cudnn_version", t),
            None => Check::skip(id, Group::Driver, "no libcudnn found (ldconfig, LD_LIBRARY_PATH, site-packages/nvidia/cudnn); PyTorch wheels bring their own"),
        };
    };
    let c = Check::new(id, Group::Driver, Status::Pass, String::new())
        .with(
            "libraries",
            serde_json::json!(f
                .libraries
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()),
        )
        .with("cudnn_version", f.version.clone())
        .with("version_source", f.version_source.clone())
        .with("torch_cudnn_version", torch_cudnn.clone());
    let major: Option<u32> = f
        .version
        .as_deref()
        .and_then(|v| v.split('.').next()?.parse().ok());
    match (&f.version, major) {
        (Some(v), Some(m)) if m < 8 => Check {
            status: Status::Warn,
            summary: format!("cuDNN {v} is old: convolutions miss years of tuned kernels"),
            ..c
        }
        .fix("install cuDNN 9 (pip install nvidia-cudnn-cu12) or use a PyTorch wheel, which bundles it"),
        (Some(v), _) => Check {
            summary: format!("cuDNN {v} ({})", f.libraries[0].display()),
            ..c
        },
        (None, _) => Check {
            summary: format!("libcudnn found ({}), version unreadable", f.libraries[0].display()),
            ..c
        },
    }
}

#[cfg(test)]
mod tests {
    use super::super::gpu::GpuFacts;
    use super::*;

    #[test]
    fn nvcc_output() {
        let out = "nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2024 NVIDIA Corporation\nBuilt on Thu_Mar_28_02:18:24_PDT_2024\nCuda compilation tools, release 12.4, V12.4.131\nBuild cuda_12.4.r12.4/compiler.34097967_0\n";
        assert_eq!(parse_nvcc(out), Some(CudaVersion::new(12, 4)));
        assert_eq!(parse_nvcc("garbage"), None);
    }

    #[test]
    fn ldconfig_output() {
        let out = "1234 libs found in cache `/etc/ld.so.cache'\n\tlibcudnn.so.9 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcudnn.so.9\n\tlibcudnn_ops.so.9 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcudnn_ops.so.9\n\tlibc.so.6 (libc6,x86-64) => /lib/x86_64-linux-gnu/libc.so.6\n";
        assert_eq!(
            parse_ldconfig(out),
            vec![PathBuf::from("/usr/lib/x86_64-linux-gnu/libcudnn.so.9")]
        );
    }

    #[test]
    fn cudnn_header() {
        let h = "#define CUDNN_MAJOR 9\n#define CUDNN_MINOR 1\n#define CUDNN_PATCHLEVEL 0\n#define CUDNN_VERSION (CUDNN_MAJOR * 10000)\n";
        assert_eq!(parse_cudnn_header(h).as_deref(), Some("9.1.0"));
        assert_eq!(parse_cudnn_header("#define CUDNN_MAJOR 9\n"), None);
    }

    fn sys(cuda: (u32, u32), cc: (u32, u32)) -> Result<GpuSystem, GpuProbeError> {
        Ok(GpuSystem {
            driver_version: Some("550.54.15".into()),
            cuda_driver_version: Some(CudaVersion::new(cuda.0, cuda.1)),
            devices: vec![GpuFacts {
                compute_capability: Some(cc),
                ..Default::default()
            }],
        })
    }

    #[test]
    fn driver_judgement() {
        assert_eq!(judge_driver(&sys((12, 4), (9, 0))).status, Status::Pass);
        let mut old = sys((11, 4), (8, 0)).unwrap();
        old.driver_version = Some("470.82.01".into());
        assert_eq!(judge_driver(&Ok(old)).status, Status::Warn);
        let none = Err(GpuProbeError::Open("no NVIDIA driver found".into()));
        assert_eq!(judge_driver(&none).status, Status::Skip);
        assert_eq!(judge_cuda_driver(&none).status, Status::Skip);
    }

    #[test]
    fn cuda_driver_judgement() {
        assert_eq!(
            judge_cuda_driver(&sys((12, 4), (9, 0))).status,
            Status::Pass
        );
        assert_eq!(
            judge_cuda_driver(&sys((11, 4), (9, 0))).status,
            Status::Fail
        );
        assert_eq!(
            judge_cuda_driver(&sys((11, 4), (8, 0))).status,
            Status::Warn
        );
        assert_eq!(
            judge_cuda_driver(&sys((12, 4), (10, 0))).status,
            Status::Fail
        );
    }

    #[test]
    fn nvcc_judgement() {
        assert_eq!(judge_nvcc(&Nvcc::NotOnPath, None).status, Status::Skip);
        let n = |v| Nvcc::Found {
            version: Some(v),
            raw: String::new(),
        };
        assert_eq!(
            judge_nvcc(&n(CudaVersion::new(12, 4)), Some(CudaVersion::new(12, 8))).status,
            Status::Pass
        );
        assert_eq!(
            judge_nvcc(&n(CudaVersion::new(13, 0)), Some(CudaVersion::new(12, 8))).status,
            Status::Warn
        );
    }

    #[test]
    fn cudnn_judgement() {
        assert_eq!(judge_cudnn(None, None).status, Status::Skip);
        assert_eq!(judge_cudnn(None, Some("9.1.0".into())).status, Status::Pass);
        let f = |v: &str| CudnnFound {
            libraries: vec![PathBuf::from("/usr/lib/libcudnn.so.9")],
            version: Some(v.into()),
            version_source: None,
        };
        assert_eq!(judge_cudnn(Some(&f("9.1.0")), None).status, Status::Pass);
        assert_eq!(judge_cudnn(Some(&f("7.6.5")), None).status, Status::Warn);
    }
}
