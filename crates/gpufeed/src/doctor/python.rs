//! The Python/PyTorch probe: a short subprocess (`python -c SCRIPT`) with a timeout that prints
//! one line `GPUFEED_PROBE {json}`; then checks of torch, its CUDA and its GPU architectures.

use super::gpu::{GpuProbeError, GpuSystem};
use super::proc::{self, RunError};
use super::version::{cc_str, Cc, CudaVersion};
use super::{Check, Group, Status};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Marks the probe's answer among whatever else Python prints (import warnings…).
pub(crate) const MARKER: &str = "GPUFEED_PROBE ";

/// The probe. Standard library plus torch only; every step guarded so one failure still
/// leaves an answer. `torch.cuda.is_available()` initialises CUDA (a second or two).
pub(crate) const SCRIPT: &str = r#"
import json, sys, site, warnings
out = {"python_version": sys.version.split()[0], "executable": sys.executable}
try:
    out["site_packages"] = list(site.getsitepackages()) + [site.getusersitepackages()]
except Exception:
    out["site_packages"] = [p for p in sys.path if p.endswith("site-packages")]
try:
    import torch
except Exception as e:
    out["torch_error"] = "%s: %s" % (type(e).__name__, e)
    print("GPUFEED_PROBE " + json.dumps(out)); sys.exit(0)
out["torch_version"] = torch.__version__
out["torch_cuda"] = torch.version.cuda
try:
    out["cudnn_version"] = torch.backends.cudnn.version()
except Exception:
    pass
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    try:
        out["cuda_available"] = bool(torch.cuda.is_available())
    except Exception as e:
        out["cuda_available"] = False
        out["cuda_error"] = "%s: %s" % (type(e).__name__, e)
    if w and "cuda_error" not in out:
        out["cuda_error"] = " ".join(str(x.message) for x in w)[:500]
try:
    out["arch_list"] = torch.cuda.get_arch_list()
except Exception:
    pass
if out.get("cuda_available"):
    try:
        out["device_capability"] = list(torch.cuda.get_device_capability(0))
        out["device_name"] = torch.cuda.get_device_name(0)
    except Exception as e:
        out["cuda_error"] = "%s: %s" % (type(e).__name__, e)
print("GPUFEED_PROBE " + json.dumps(out))
"#;

/// What the probe printed; absent fields are `None`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub(crate) struct PyFacts {
    pub python_version: Option<String>,
    pub executable: Option<String>,
    #[serde(default)]
    pub site_packages: Vec<PathBuf>,
    pub torch_version: Option<String>,
    pub torch_error: Option<String>,
    /// `torch.version.cuda`: `None` for a CPU-only build.
    pub torch_cuda: Option<String>,
    /// `torch.backends.cudnn.version()`, e.g. 90100 or 8902.
    pub cudnn_version: Option<u64>,
    pub cuda_available: Option<bool>,
    pub cuda_error: Option<String>,
    pub arch_list: Option<Vec<String>>,
    pub device_capability: Option<Vec<u32>>,
    pub device_name: Option<String>,
}

impl PyFacts {
    pub(crate) fn torch_cuda_version(&self) -> Option<CudaVersion> {
        self.torch_cuda.as_deref().and_then(CudaVersion::parse)
    }

    pub(crate) fn device_cc(&self) -> Option<Cc> {
        match self.device_capability.as_deref() {
            Some([a, b, ..]) => Some((*a, *b)),
            _ => None,
        }
    }
}

/// Outcome of running the probe.
#[derive(Debug, Clone)]
pub(crate) enum Probe {
    Ran(Box<PyFacts>),
    /// No Python, a timeout or an unreadable answer: why.
    Failed {
        python: String,
        reason: String,
    },
}

/// Runs `python -c SCRIPT` with a timeout.
pub(crate) fn probe(python: &Path, timeout: Duration) -> Probe {
    let name = python.display().to_string();
    match proc::run(python, &["-c", SCRIPT], timeout) {
        Ok(out) => match parse_answer(&out.stdout) {
            Some(f) => Probe::Ran(Box::new(f)),
            None => {
                let tail: String = out
                    .stderr
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("")
                    .chars()
                    .take(200)
                    .collect();
                Probe::Failed {
                    python: name,
                    reason: format!(
                        "the probe printed no answer (exit code {}){}",
                        out.status_code.map_or("none".into(), |c| c.to_string()),
                        if tail.is_empty() {
                            String::new()
                        } else {
                            format!(": {tail}")
                        }
                    ),
                }
            }
        },
        Err(e @ RunError::NotFound { .. }) => Probe::Failed {
            python: name,
            reason: format!("{e} (give another with --python PATH)"),
        },
        Err(e) => Probe::Failed {
            python: name,
            reason: e.to_string(),
        },
    }
}

/// Finds the marked line and parses it.
pub(crate) fn parse_answer(stdout: &str) -> Option<PyFacts> {
    let line = stdout.lines().rev().find_map(|l| l.strip_prefix(MARKER))?;
    serde_json::from_str(line.trim()).ok()
}

/// Decodes a cuDNN version integer: 9.x as `M*10000 + m*100 + p`, 8.x and older `M*1000 + m*100 + p`.
pub(crate) fn cudnn_version_str(v: u64) -> String {
    if v >= 9_0000 {
        format!("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100)
    } else {
        format!("{}.{}.{}", v / 1000, (v % 1000) / 100, v % 100)
    }
}

pub(crate) fn checks(py: &Probe, gpus: &Result<GpuSystem, GpuProbeError>) -> Vec<Check> {
    let f = match py {
        Probe::Failed { python, reason } => {
            let why = format!("no Python probe: {reason}");
            let status = if reason.contains("did not finish") {
                Status::Warn
            } else {
                Status::Skip
            };
            let mut c = Check::new(
                "python",
                Group::Python,
                status,
                format!("{python}: {reason}"),
            )
            .with("python", python.clone());
            if status == Status::Warn {
                c = c.fix("importing torch took too long (a slow network filesystem or a broken CUDA install?); raise --python-timeout to wait longer");
            }
            return vec![
                c,
                Check::skip("torch", Group::Python, why.clone()),
                Check::skip("torch_cuda", Group::Python, why.clone()),
                Check::skip("torch_arch", Group::Python, why.clone()),
                Check::skip("cuda_stack_age", Group::Python, why),
            ];
        }
        Probe::Ran(f) => f,
    };
    let gpu_cc = gpus
        .as_ref()
        .ok()
        .and_then(|g| g.min_cc())
        .or(f.device_cc());
    let driver_cuda = gpus.as_ref().ok().and_then(|g| g.cuda_driver_version);
    let has_gpu = gpus.as_ref().is_ok_and(|g| !g.devices.is_empty()) || f.device_cc().is_some();
    vec![
        Check::new(
            "python",
            Group::Python,
            Status::Pass,
            format!(
                "Python {} ({})",
                f.python_version.as_deref().unwrap_or("?"),
                f.executable.as_deref().unwrap_or("?")
            ),
        )
        .with("python_version", f.python_version.clone())
        .with("executable", f.executable.clone()),
        judge_torch(f),
        judge_torch_cuda(f, driver_cuda, has_gpu),
        judge_torch_arch(f, gpu_cc),
        judge_stack_age(f.torch_cuda_version(), gpu_cc, f.torch_version.is_some()),
    ]
}

pub(crate) fn judge_torch(f: &PyFacts) -> Check {
    let id = "torch";
    let Some(v) = &f.torch_version else {
        return Check::skip(
            id,
            Group::Python,
            format!(
                "PyTorch is not importable in this Python ({})",
                f.torch_error.as_deref().unwrap_or("no torch")
            ),
        );
    };
    let cudnn = f.cudnn_version.map(cudnn_version_str);
    let c = Check::new(id, Group::Python, Status::Pass, String::new())
        .with("torch_version", v.clone())
        .with("torch_cuda", f.torch_cuda.clone())
        .with("cudnn_version", cudnn.clone());
    match &f.torch_cuda {
        None => Check {
            status: Status::Warn,
            summary: format!("torch {v} is a CPU-only build: it cannot use the GPU"),
            ..c
        }
        .fix("install a CUDA build: `pip install torch --index-url https://download.pytorch.org/whl/cu126` (pick the CUDA your driver supports)"),
        Some(cu) => Check {
            summary: format!(
                "torch {v} (CUDA {cu}, cuDNN {})",
                cudnn.as_deref().unwrap_or("unknown")
            ),
            ..c
        },
    }
}

/// Can this torch use the GPU through this driver?
pub(crate) fn judge_torch_cuda(
    f: &PyFacts,
    driver_cuda: Option<CudaVersion>,
    has_gpu: bool,
) -> Check {
    let id = "torch_cuda";
    if f.torch_version.is_none() {
        return Check::skip(id, Group::Python, "no PyTorch");
    }
    let Some(wheel) = f.torch_cuda_version() else {
        return Check::skip(id, Group::Python, "CPU-only PyTorch build");
    };
    let c = |st, s: String| {
        Check::new(id, Group::Python, st, s)
            .with("torch_cuda", wheel.to_string())
            .with("driver_cuda", driver_cuda.map(|v| v.to_string()))
            .with("cuda_available", f.cuda_available)
            .with("cuda_error", f.cuda_error.clone())
    };
    let too_old_driver = driver_cuda.is_some_and(|d| d.major < wheel.major);
    if f.cuda_available == Some(true) {
        return match driver_cuda {
            Some(d) if d < wheel => c(
                Status::Warn,
                format!("CUDA works, through minor-version compatibility: the wheel is built for CUDA {wheel}, the driver supports {d}; PTX JIT and newer features may fail"),
            )
            .fix("update the NVIDIA driver to one that supports the wheel's CUDA"),
            _ => c(Status::Pass, format!("torch.cuda.is_available(): CUDA {wheel} wheel runs on this driver")),
        };
    }
    if !has_gpu {
        return Check::skip(
            id,
            Group::Python,
            "no GPU, so torch.cuda.is_available() is expected to be False",
        );
    }
    if too_old_driver {
        let d = driver_cuda.expect("checked above");
        return c(
            Status::Fail,
            format!("torch.cuda.is_available() is False: the wheel needs CUDA {wheel}, the driver supports only {d}"),
        )
        .fix(format!("update the NVIDIA driver (CUDA {}.x needs driver ≥ {}), or install a wheel built for CUDA {}.x", wheel.major, min_driver_for(wheel.major), d.major));
    }
    c(
        Status::Fail,
        format!(
            "torch.cuda.is_available() is False although a GPU is present{}",
            f.cuda_error
                .as_deref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        ),
    )
    .fix("check CUDA_VISIBLE_DEVICES, that /dev/nvidia* are visible (containers: --gpus all), and that the driver and the wheel's CUDA match")
}

/// The first driver branch of each CUDA major release (Linux).
fn min_driver_for(cuda_major: u32) -> &'static str {
    match cuda_major {
        13 => "580",
        12 => "525",
        11 => "450",
        _ => "a newer release",
    }
}

/// One entry of `torch.cuda.get_arch_list()`: "sm_86", "sm_90a", "compute_90".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Arch {
    pub cc: Cc,
    /// PTX (`compute_XY`), JIT-compiled at start for newer GPUs.
    pub ptx: bool,
    /// Architecture-specific (`sm_90a`): runs only on exactly that GPU.
    pub specific: bool,
}

pub(crate) fn parse_arch(s: &str) -> Option<Arch> {
    let (ptx, rest) = if let Some(r) = s.strip_prefix("sm_") {
        (false, r)
    } else {
        (true, s.strip_prefix("compute_")?)
    };
    let specific = rest.ends_with('a') || rest.ends_with('f');
    let digits = rest.trim_end_matches(['a', 'f']);
    if digits.len() < 2 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (maj, min) = digits.split_at(digits.len() - 1);
    Some(Arch {
        cc: (maj.parse().ok()?, min.parse().ok()?),
        ptx,
        specific,
    })
}

/// Does the wheel carry code for this GPU?
pub(crate) fn judge_torch_arch(f: &PyFacts, cc: Option<Cc>) -> Check {
    let id = "torch_arch";
    if f.torch_version.is_none() || f.torch_cuda.is_none() {
        return Check::skip(id, Group::Python, "no CUDA build of PyTorch");
    }
    let Some(cc) = cc else {
        return Check::skip(id, Group::Python, "no GPU compute capability known");
    };
    let Some(list) = f.arch_list.as_ref().filter(|l| !l.is_empty()) else {
        return Check::skip(
            id,
            Group::Python,
            "torch.cuda.get_arch_list() gave nothing (CUDA not available)",
        );
    };
    let archs: Vec<Arch> = list.iter().filter_map(|s| parse_arch(s)).collect();
    let c = |st, s: String| {
        Check::new(id, Group::Python, st, s)
            .with("compute_capability", cc_str(cc))
            .with("arch_list", serde_json::json!(list))
    };
    let sm = format!("sm_{}{}", cc.0, cc.1);
    if archs.iter().any(|a| !a.ptx && a.cc == cc) {
        return c(
            Status::Pass,
            format!("the wheel carries {sm} kernels for this GPU"),
        );
    }
    // SASS runs on later minors of the same major (sm_86 on 8.9), unless arch-specific.
    if let Some(a) = archs
        .iter()
        .filter(|a| !a.ptx && !a.specific && a.cc.0 == cc.0 && a.cc.1 < cc.1)
        .max_by_key(|a| a.cc)
    {
        return c(
            Status::Pass,
            format!(
                "no {sm} kernels, but sm_{}{} kernels run on this GPU (same major)",
                a.cc.0, a.cc.1
            ),
        );
    }
    if let Some(a) = archs
        .iter()
        .filter(|a| a.ptx && !a.specific && a.cc <= cc)
        .max_by_key(|a| a.cc)
    {
        return c(
            Status::Warn,
            format!("no {sm} kernels: PTX for compute_{}{} is JIT-compiled at start-up (minutes, cached later) and may run slower", a.cc.0, a.cc.1),
        )
        .fix("install a PyTorch build that lists this architecture (a newer wheel or one for a newer CUDA)");
    }
    c(
        Status::Fail,
        format!("the wheel has no kernels for compute capability {}: expect \"no kernel image is available for execution on the device\"", cc_str(cc)),
    )
    .fix(if list.iter().filter_map(|s| parse_arch(s)).all(|a| a.cc > cc) {
        "this GPU is older than the wheel supports: install an older PyTorch or one built for an older CUDA (CUDA 13 dropped Maxwell, Pascal and Volta)".to_string()
    } else {
        "install a PyTorch wheel built for a CUDA that supports this GPU".to_string()
    })
}

/// The wheel's CUDA against what this GPU generation needs.
pub(crate) fn judge_stack_age(
    wheel: Option<CudaVersion>,
    cc: Option<Cc>,
    has_torch: bool,
) -> Check {
    use super::version::{generation, max_cuda_major, min_cuda, recommended_cuda};
    let id = "cuda_stack_age";
    if !has_torch {
        return Check::skip(id, Group::Python, "no PyTorch to judge");
    }
    let Some(wheel) = wheel else {
        return Check::skip(id, Group::Python, "CPU-only PyTorch build");
    };
    let Some(cc) = cc else {
        return Check::skip(id, Group::Python, "no GPU compute capability known");
    };
    let gen = generation(cc);
    let c = |st, s: String| {
        Check::new(id, Group::Python, st, s)
            .with("torch_cuda", wheel.to_string())
            .with("compute_capability", cc_str(cc))
            .with("min_cuda", min_cuda(cc).map(|v| v.to_string()))
            .with(
                "recommended_cuda",
                recommended_cuda(cc).map(|v| v.to_string()),
            )
    };
    if let Some(max) = max_cuda_major(cc) {
        if wheel.major > max {
            return c(
                Status::Fail,
                format!(
                    "CUDA {wheel} no longer supports {gen} GPUs (compute capability {})",
                    cc_str(cc)
                ),
            )
            .fix(format!("install a PyTorch wheel built for CUDA {max}.x"));
        }
    }
    match (min_cuda(cc), recommended_cuda(cc)) {
        (Some(min), _) if wheel < min => c(
            Status::Fail,
            format!("CUDA {wheel} predates {gen} GPUs (needs ≥ {min})"),
        )
        .fix(format!("install a PyTorch wheel built for CUDA ≥ {}", recommended_cuda(cc).unwrap_or(min))),
        (_, Some(rec)) if wheel < rec => c(
            Status::Warn,
            format!("CUDA {wheel} on a {gen} GPU: cuBLAS/cuDNN tuned for it arrived with CUDA {rec}; an old stack can cost tens of percent"),
        )
        .fix(format!("install a PyTorch wheel built for CUDA ≥ {rec}, e.g. `pip install torch --index-url https://download.pytorch.org/whl/cu126`")),
        (None, None) => Check::skip(id, Group::Python, format!("compute capability {} unknown to gpufeed", cc_str(cc))),
        _ => c(Status::Pass, format!("CUDA {wheel} is recent enough for a {gen} GPU")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn torch(cuda: &str, available: bool, archs: &[&str]) -> PyFacts {
        PyFacts {
            python_version: Some("3.11.4".into()),
            torch_version: Some("2.4.1".into()),
            torch_cuda: Some(cuda.into()),
            cudnn_version: Some(90100),
            cuda_available: Some(available),
            arch_list: Some(archs.iter().map(|s| s.to_string()).collect()),
            ..Default::default()
        }
    }

    #[test]
    fn parses_the_marked_line_among_noise() {
        let out = "UserWarning: something\nGPUFEED_PROBE {\"python_version\": \"3.10.1\", \"torch_version\": \"2.1.0\", \"torch_cuda\": null, \"extra\": 1}\n";
        let f = parse_answer(out).unwrap();
        assert_eq!(f.python_version.as_deref(), Some("3.10.1"));
        assert_eq!(f.torch_cuda, None);
        assert_eq!(parse_answer("no marker"), None);
        assert_eq!(parse_answer("GPUFEED_PROBE {broken"), None);
    }

    #[test]
    fn cudnn_versions() {
        assert_eq!(cudnn_version_str(90100), "9.1.0");
        assert_eq!(cudnn_version_str(8902), "8.9.2");
        assert_eq!(cudnn_version_str(7605), "7.6.5");
    }

    #[test]
    fn arches() {
        assert_eq!(
            parse_arch("sm_86"),
            Some(Arch {
                cc: (8, 6),
                ptx: false,
                specific: false
            })
        );
        assert_eq!(
            parse_arch("sm_90a"),
            Some(Arch {
                cc: (9, 0),
                ptx: false,
                specific: true
            })
        );
        assert_eq!(
            parse_arch("compute_90"),
            Some(Arch {
                cc: (9, 0),
                ptx: true,
                specific: false
            })
        );
        assert_eq!(
            parse_arch("sm_100"),
            Some(Arch {
                cc: (10, 0),
                ptx: false,
                specific: false
            })
        );
        assert_eq!(parse_arch("sm_x"), None);
        assert_eq!(parse_arch("foo"), None);
    }

    #[test]
    fn torch_judgement() {
        assert_eq!(judge_torch(&PyFacts::default()).status, Status::Skip);
        let cpu = PyFacts {
            torch_cuda: None,
            ..torch("12.1", false, &[])
        };
        assert_eq!(judge_torch(&cpu).status, Status::Warn);
        let ok = judge_torch(&torch("12.1", true, &[]));
        assert_eq!(ok.status, Status::Pass);
        assert!(ok.summary.contains("cuDNN 9.1.0"), "{}", ok.summary);
    }

    #[test]
    fn torch_cuda_judgement() {
        let d = |s| CudaVersion::parse(s);
        assert_eq!(
            judge_torch_cuda(&torch("12.1", true, &[]), d("12.4"), true).status,
            Status::Pass
        );
        assert_eq!(
            judge_torch_cuda(&torch("12.4", true, &[]), d("12.2"), true).status,
            Status::Warn
        );
        let c = judge_torch_cuda(&torch("12.1", false, &[]), d("11.4"), true);
        assert_eq!(c.status, Status::Fail);
        assert!(c.summary.contains("11.4"));
        assert!(c.fix.unwrap().contains("525"));
        assert_eq!(
            judge_torch_cuda(&torch("12.1", false, &[]), d("12.4"), true).status,
            Status::Fail
        );
        assert_eq!(
            judge_torch_cuda(&torch("12.1", false, &[]), None, false).status,
            Status::Skip
        );
    }

    #[test]
    fn arch_judgement() {
        let list = [
            "sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90",
        ];
        let f = torch("12.1", true, &list);
        assert_eq!(judge_torch_arch(&f, Some((9, 0))).status, Status::Pass);
        assert_eq!(
            judge_torch_arch(&f, Some((8, 9))).status,
            Status::Pass,
            "sm_86 runs on 8.9"
        );
        assert_eq!(
            judge_torch_arch(&f, Some((6, 1))).status,
            Status::Pass,
            "sm_60 runs on 6.1"
        );
        let c = judge_torch_arch(&f, Some((10, 0)));
        assert_eq!(c.status, Status::Fail);
        let with_ptx = torch("12.1", true, &["sm_80", "sm_90", "compute_90"]);
        assert_eq!(
            judge_torch_arch(&with_ptx, Some((10, 0))).status,
            Status::Warn
        );
        let new_only = torch("13.0", true, &["sm_75", "sm_80", "sm_90"]);
        let c = judge_torch_arch(&new_only, Some((6, 1)));
        assert_eq!(c.status, Status::Fail);
        assert!(c.fix.unwrap().contains("older"));
        let specific = torch("12.8", true, &["sm_90a"]);
        assert_eq!(
            judge_torch_arch(&specific, Some((9, 0))).status,
            Status::Pass
        );
        assert_eq!(judge_torch_arch(&f, None).status, Status::Skip);
    }

    #[test]
    fn stack_age_judgement() {
        let v = |s| CudaVersion::parse(s);
        assert_eq!(
            judge_stack_age(v("11.8"), Some((9, 0)), true).status,
            Status::Warn
        );
        assert_eq!(
            judge_stack_age(v("12.4"), Some((9, 0)), true).status,
            Status::Pass
        );
        assert_eq!(
            judge_stack_age(v("11.7"), Some((9, 0)), true).status,
            Status::Fail
        );
        assert_eq!(
            judge_stack_age(v("11.8"), Some((8, 0)), true).status,
            Status::Pass
        );
        assert_eq!(
            judge_stack_age(v("11.3"), Some((8, 0)), true).status,
            Status::Warn
        );
        assert_eq!(
            judge_stack_age(v("13.0"), Some((6, 1)), true).status,
            Status::Fail
        );
        assert_eq!(
            judge_stack_age(v("12.1"), Some((6, 1)), true).status,
            Status::Pass
        );
        assert_eq!(judge_stack_age(v("12.1"), None, true).status, Status::Skip);
        assert_eq!(
            judge_stack_age(None, Some((9, 0)), true).status,
            Status::Skip
        );
        assert_eq!(
            judge_stack_age(v("12.1"), Some((9, 0)), false).status,
            Status::Skip
        );
    }
}
