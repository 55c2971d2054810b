//! Precision advice by compute capability: what mixed precision buys on this GPU.

use super::gpu::{GpuProbeError, GpuSystem};
use super::python::Probe;
use super::version::{cc_str, generation, Cc};
use super::{Check, Group, Status};

pub(crate) fn check(gpus: &Result<GpuSystem, GpuProbeError>, py: &Probe) -> Check {
    let cc = gpus.as_ref().ok().and_then(|g| g.min_cc()).or(match py {
        Probe::Ran(f) => f.device_cc(),
        _ => None,
    });
    match cc {
        Some(cc) => judge(cc),
        None => Check::skip("precision", Group::Gpu, "no GPU compute capability known"),
    }
}

/// The formats with tensor-core support on this GPU, best first.
pub(crate) fn formats(cc: Cc) -> Vec<&'static str> {
    let mut v = Vec::new();
    if cc >= (8, 9) {
        v.push("fp8");
    }
    if cc >= (8, 0) {
        v.push("bf16");
        v.push("tf32");
    }
    if cc >= (7, 0) {
        v.push("fp16");
    }
    v
}

pub(crate) fn judge(cc: Cc) -> Check {
    let gen = generation(cc);
    let c = |st, s: String| {
        Check::new("precision", Group::Gpu, st, s)
            .with("compute_capability", cc_str(cc))
            .with("tensor_core_formats", serde_json::json!(formats(cc)))
    };
    if cc >= (8, 9) {
        c(
            Status::Pass,
            format!("{gen} (compute capability {}): FP8, bf16 and TF32 tensor cores", cc_str(cc)),
        )
        .fix("train in bf16 (`torch.autocast('cuda', dtype=torch.bfloat16)`), enable TF32 for the rest (`torch.set_float32_matmul_precision('high')`); for large transformers, FP8 through NVIDIA Transformer Engine")
    } else if cc >= (8, 0) {
        c(
            Status::Pass,
            format!("{gen} (compute capability {}): bf16 and TF32 tensor cores", cc_str(cc)),
        )
        .fix("train in bf16 (`torch.autocast('cuda', dtype=torch.bfloat16)`, no GradScaler needed) and set `torch.set_float32_matmul_precision('high')` so fp32 matmuls use TF32")
    } else if cc >= (7, 0) {
        c(
            Status::Pass,
            format!("{gen} (compute capability {}): fp16 tensor cores (no bf16, no TF32)", cc_str(cc)),
        )
        .fix("use AMP with fp16: `torch.autocast('cuda', dtype=torch.float16)` plus `torch.amp.GradScaler()`; bf16 is emulated and slow here")
    } else {
        c(
            Status::Warn,
            format!("{gen} (compute capability {}): no tensor cores, so AMP saves memory but brings little speed", cc_str(cc)),
        )
        .fix("mixed precision still halves activation memory (a larger batch fits); for speed, a GPU with compute capability ≥ 7.0")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_from_torch_when_nvml_is_missing() {
        use crate::doctor::python::PyFacts;
        let no_nvml = Err(GpuProbeError::Open("no NVIDIA driver found".into()));
        let py = Probe::Ran(Box::new(PyFacts {
            device_capability: Some(vec![8, 6]),
            ..Default::default()
        }));
        let c = check(&no_nvml, &py);
        assert_eq!(c.evidence["compute_capability"], "8.6");
        let none = Probe::Failed {
            python: "python3".into(),
            reason: "not found".into(),
        };
        assert_eq!(check(&no_nvml, &none).status, Status::Skip);
    }

    #[test]
    fn by_capability() {
        let hopper = judge((9, 0));
        assert_eq!(hopper.status, Status::Pass);
        assert!(hopper.fix.as_ref().unwrap().contains("Transformer Engine"));
        let ada = judge((8, 9));
        assert!(ada.summary.contains("FP8"));
        let ampere = judge((8, 0));
        assert!(ampere
            .fix
            .as_ref()
            .unwrap()
            .contains("set_float32_matmul_precision('high')"));
        assert!(!ampere.summary.contains("FP8"));
        let volta = judge((7, 0));
        assert!(volta.fix.as_ref().unwrap().contains("GradScaler"));
        let pascal = judge((6, 1));
        assert_eq!(pascal.status, Status::Warn);
        assert!(pascal.summary.contains("memory"));
        assert_eq!(formats((9, 0)), ["fp8", "bf16", "tf32", "fp16"]);
        assert!(formats((6, 1)).is_empty());
    }
}
