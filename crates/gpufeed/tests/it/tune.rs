//! `gpufeed tune -- CMD` end to end on real PyTorch (GPUFEED_TEST_PYTHON; skipped loudly
//! without it): an input-bound script comes out with workers, a measured speed-up and a patch
//! that applies; a compute-bound one stops after the baseline with nothing to tune.

use assert_cmd::Command;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn torch_python() -> Option<String> {
    let p = std::env::var("GPUFEED_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    std::process::Command::new(&p)
        .args(["-c", "import torch"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|_| p)
}

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

/// A git work tree holding `script` (as train.py) and the step probe.
fn project(script: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(data().join(script), dir.path().join("train.py")).unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/gpufeed_probe.py"),
        dir.path().join("gpufeed_probe.py"),
    )
    .unwrap();
    let git = |args: &[&str]| {
        let ok = std::process::Command::new("git")
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap()
            .status
            .success();
        assert!(ok, "git {args:?}");
    };
    git(&["init", "-q", "."]);
    git(&["add", "-A"]);
    git(&[
        "-c",
        "user.email=t@t",
        "-c",
        "user.name=t",
        "commit",
        "-qm",
        "job",
    ]);
    dir
}

fn tune(dir: &Path, python: &str, format: &str) -> std::process::Output {
    // one throughput-measuring test at a time (sweep's too): each wants the cores to itself
    let _g = crate::sweep::serial();
    Command::cargo_bin("gpufeed")
        .unwrap()
        .env_remove("GPUFEED_NVML_LIB")
        .env_remove("FAKE_NVML_SCENARIO")
        .env_remove("GPUFEED_STEP_SOCKET")
        .current_dir(dir)
        .args([
            "tune",
            "--cores",
            "2",
            "--budget",
            "60s",
            "--final-pairs",
            "2",
        ])
        .args(["--min-time", "1s", "--max-time", "30s", "--tolerance", "5%"])
        .args([
            "--format",
            format,
            "--output-dir",
            "out",
            "--html",
            "out/tune.html",
            "--",
            python,
            "train.py",
        ])
        .output()
        .unwrap()
}

#[test]
fn tune_gives_an_input_bound_script_workers_a_speedup_and_a_patch() {
    let Some(python) = torch_python() else {
        eprintln!("SKIPPED: no Python with PyTorch (set GPUFEED_TEST_PYTHON=/path/to/python): gpufeed tune's end-to-end test did not run");
        return;
    };
    let dir = project("tune_input_bound.py");
    let before = std::fs::read(dir.path().join("train.py")).unwrap();
    let out = tune(dir.path(), &python, "json");
    assert!(out.status.success(), "{out:?}");
    let rep: Value = serde_json::from_slice(&out.stdout).unwrap();
    let workers = rep["chosen"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["knob"] == "num_workers")
        .and_then(|c| c["value"].as_str()?.parse::<u32>().ok())
        .unwrap_or_else(|| panic!("num_workers chosen: {rep}"));
    assert!(workers >= 2, "{rep}");
    let s = &rep["before_after"]["speedup"];
    let lo = s["ci95"][0]
        .as_f64()
        .unwrap_or_else(|| panic!("an interval: {s}"));
    eprintln!(
        "tune: num_workers={workers}, {} ({lo}..{})",
        s["value"], s["ci95"][1]
    );
    assert!(lo > 1.5, "{s}");
    // the patch applies and changes only the DataLoader call
    let patch = dir.path().join("out/fix.patch");
    let diff = std::fs::read_to_string(&patch).unwrap();
    let changed: Vec<&str> = diff
        .lines()
        .filter(|l| {
            (l.starts_with('-') || l.starts_with('+'))
                && !l.starts_with("---")
                && !l.starts_with("+++")
        })
        .collect();
    assert_eq!(changed.len(), 2, "{diff}");
    assert!(
        changed[0].contains("DataLoader(") && changed[0].contains("num_workers=0"),
        "{diff}"
    );
    assert!(
        changed[1].contains(&format!("num_workers={workers}")),
        "{diff}"
    );
    let check = std::process::Command::new("git")
        .args(["apply", "--check"])
        .arg(&patch)
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(check.status.success(), "{check:?}");
    assert_eq!(
        std::fs::read(dir.path().join("train.py")).unwrap(),
        before,
        "the script is untouched"
    );
    assert!(
        rep["run_line"].as_str().unwrap().starts_with(&format!(
            "gpufeed run --dataloader num_workers={workers} -- "
        )),
        "{rep}"
    );
    let page = std::fs::read_to_string(dir.path().join("out/tune.html")).unwrap();
    assert!(
        page.contains("× faster") && page.contains("fix.patch") && page.contains("num_workers=0"),
        "{page}"
    );
    // every trial's recording is in the folder
    for st in rep["steps"].as_array().unwrap() {
        assert!(
            Path::new(st["result"]["recording"].as_str().unwrap()).exists()
                || dir
                    .path()
                    .join(st["result"]["recording"].as_str().unwrap())
                    .exists()
        );
    }
}

#[test]
fn tune_stops_after_the_baseline_when_there_is_nothing_to_tune() {
    let Some(python) = torch_python() else {
        eprintln!("SKIPPED: no Python with PyTorch (set GPUFEED_TEST_PYTHON=/path/to/python): gpufeed tune's compute-bound test did not run");
        return;
    };
    let dir = project("tune_compute_bound.py");
    let out = tune(dir.path(), &python, "text");
    assert!(out.status.success(), "{out:?}");
    let t = String::from_utf8_lossy(&out.stdout);
    assert!(t.contains("Stopped: nothing to tune"), "{t}");
    let rep: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("out/tune.json")).unwrap())
            .unwrap();
    assert_eq!(rep["stop"], "nothing_to_tune", "{rep}");
    assert_eq!(
        rep["steps"].as_array().unwrap().len(),
        1,
        "the baseline only: {rep}"
    );
    assert!(rep["patch"].is_null() && !dir.path().join("out/fix.patch").exists());
}

/// Under the fake driver (an H100, busy): the input keeps up, so tune tries TF32 and cuDNN
/// autotuning through `--torch`; the stand-in torch's job runs twice as fast with TF32, and that
/// is kept; the switch that does nothing is rejected; the patch notes say where to set it.
#[test]
fn tune_tries_tf32_on_a_busy_tensor_core_gpu() {
    let python_ok = std::process::Command::new("python3")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !python_ok {
        eprintln!("SKIPPED: no python3: gpufeed tune's fake-driver TF32 test did not run");
        return;
    }
    let dir = project("tune_fp32_matmul.py");
    let sc = crate::common_fake::scenario(
        dir.path(),
        r#"{"devices":[{"name":"NVIDIA H100 80GB HBM3","memory_total_bytes":85899345920,
            "memory_used_bytes":40000000000,"compute_capability":[9,0],
            "util":{"pattern":"constant","value":98}}]}"#,
    );
    // one throughput-measuring test at a time (sweep's too): each wants the cores to itself
    let _g = crate::sweep::serial();
    let out = Command::cargo_bin("gpufeed")
        .unwrap()
        .env("FAKE_NVML_SCENARIO", &sc)
        .env("PYTHONPATH", data().join("fake_torch"))
        .env_remove("GPUFEED_STEP_SOCKET")
        .current_dir(dir.path())
        .arg("--nvml-lib")
        .arg(crate::common_fake::fake_nvml())
        .args([
            "tune",
            "--min-time",
            "1s",
            "--max-time",
            "15s",
            "--tolerance",
            "5%",
        ])
        .args([
            "--format",
            "json",
            "--output-dir",
            "out",
            "--",
            "python3",
            "train.py",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let rep: Value = serde_json::from_slice(&out.stdout).unwrap();
    let knobs: Vec<&str> = rep["plan"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["knob"].as_str().unwrap())
        .collect();
    assert_eq!(knobs, ["matmul_precision", "cudnn_benchmark"], "{rep}");
    assert_eq!(rep["chosen"][0]["knob"], "matmul_precision", "{rep}");
    assert_eq!(rep["chosen"][0]["value"], "high", "{rep}");
    assert!(
        rep["chosen"][0]["gain_ci95"][0].as_f64().unwrap() > 1.3,
        "{rep}"
    );
    // cuDNN autotuning does nothing to this job: tried, and on a quiet machine rejected (a busy
    // one can make noise look like a 5% gain, so only the trial is asserted)
    assert!(
        rep["steps"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["knob"] == "cudnn_benchmark"),
        "{rep}"
    );
    assert!(rep["patch"].is_null(), "no DataLoader change: no patch");
    assert!(
        rep["patch_notes"][0]
            .as_str()
            .unwrap()
            .contains("torch.set_float32_matmul_precision(\"high\")"),
        "{rep}"
    );
    assert!(rep["run_line"]
        .as_str()
        .unwrap()
        .starts_with("gpufeed run --torch matmul_precision=high -- python3"));
    assert!(
        rep["before_after"]["speedup"]["value"].as_f64().unwrap() > 1.5,
        "{rep}"
    );
}
