//! `gpufeed tune -- CMD` end to end on real PyTorch (GPUFEED_TEST_PYTHON; skipped loudly
//! without it): an input-bound script comes out with workers, a measured speed-up and a patch
//! that applies; a compute-bound one stops after the baseline with nothing to tune.

use crate::common::torch_python;
use assert_cmd::Command;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

/// A git work tree holding `script` (as train.py) and the step probe.
pub(crate) fn project(script: &str) -> tempfile::TempDir {
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

/// `gpufeed tune` of `python3 train.py` under the fake driver with `device` (one GPU's JSON) and
/// the stand-in torch, `extra` options before `--`; its JSON report.
fn fake_tune(dir: &Path, device: &str, extra: &[&str]) -> Value {
    let sc = crate::common_fake::scenario(dir, &format!(r#"{{"devices":[{device}]}}"#));
    // one throughput-measuring test at a time (sweep's too): each wants the cores to itself
    let _g = crate::sweep::serial();
    let out = Command::cargo_bin("gpufeed")
        .unwrap()
        .env("FAKE_NVML_SCENARIO", &sc)
        .env("PYTHONPATH", data().join("fake_torch"))
        .env_remove("GPUFEED_STEP_SOCKET")
        .current_dir(dir)
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
        .args(extra)
        .args(["--format", "json", "--", "python3", "train.py"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

fn python3_or_skip(what: &str) -> bool {
    let ok = std::process::Command::new("python3")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("SKIPPED: no python3: gpufeed tune's fake-driver {what} test did not run");
    }
    ok
}

/// The lines a patch removes and adds.
fn changed_lines(diff: &str) -> Vec<&str> {
    diff.lines()
        .filter(|l| {
            (l.starts_with('-') || l.starts_with('+'))
                && !l.starts_with("---")
                && !l.starts_with("+++")
        })
        .collect()
}

fn git_apply_check(dir: &Path, patch: &Path) {
    let check = std::process::Command::new("git")
        .args(["apply", "--check"])
        .arg(patch)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(check.status.success(), "{check:?}");
}

/// Under the fake driver a Gen4 x16 card trained at Gen1 x4 moves 0.95 GB/s (the link's limit:
/// transfer_bound, the recording's sign of copies from pageable memory): tune tries
/// `pin_memory=1`; the stand-in torch's job runs twice as fast with it, so it is kept, and the
/// patch turns the DataLoader's `pin_memory=False` into `True`.
#[test]
fn tune_pins_memory_when_copies_fill_the_link() {
    if !python3_or_skip("pin_memory") {
        return;
    }
    let dir = project("tune_pageable_copies.py");
    let rep = fake_tune(
        dir.path(),
        r#"{"name":"Tesla V100-SXM2-32GB","memory_total_bytes":34359738368,
            "memory_used_bytes":30000000000,"compute_capability":[7,0],"util":60,
            "pcie":{"max_gen":4,"max_width":16,"cur_gen":1,"cur_width":4,"rx_bytes_per_s":9.5e8}}"#,
        &["--output-dir", "out"],
    );
    let knobs: Vec<&str> = rep["plan"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["knob"].as_str().unwrap())
        .collect();
    assert_eq!(knobs, ["pin_memory"], "{rep}");
    assert!(
        rep["plan"][0]["why"]
            .as_str()
            .unwrap()
            .starts_with("transfer_bound"),
        "{rep}"
    );
    // the injection reached the job's DataLoader: value and the job's own
    let tried = &rep["steps"][1]["result"]["overrides"][0];
    assert_eq!(
        (&tried["key"], &tried["value"], &tried["original"]),
        (
            &Value::from("pin_memory"),
            &Value::from(true),
            &Value::from(false)
        ),
        "{rep}"
    );
    assert_eq!(rep["chosen"][0]["knob"], "pin_memory", "{rep}");
    assert_eq!(rep["chosen"][0]["value"], "1", "{rep}");
    assert!(
        rep["chosen"][0]["gain_ci95"][0].as_f64().unwrap() > 1.3,
        "{rep}"
    );
    let patch = dir.path().join("out/fix.patch");
    let diff = std::fs::read_to_string(&patch).unwrap();
    let changed = changed_lines(&diff);
    assert_eq!(changed.len(), 2, "{diff}");
    assert!(changed[0].contains("pin_memory=False"), "{diff}");
    assert!(
        changed[1].contains("DataLoader(") && changed[1].contains("pin_memory=True"),
        "{diff}"
    );
    git_apply_check(dir.path(), &patch);
    assert!(
        rep["run_line"]
            .as_str()
            .unwrap()
            .starts_with("gpufeed run --dataloader pin_memory=1 -- python3 train.py"),
        "{rep}"
    );
    assert!(
        rep["before_after"]["speedup"]["value"].as_f64().unwrap() > 1.5,
        "{rep}"
    );
}

/// A batch too small for the GPU (the fake driver: 40% busy, 4 of 32 GB used, no data wait):
/// without `--allow-batch` tune leaves it alone and says so; with it, the batch-size search
/// doubles the job's own batch (8) while samples/s gains, bisects below the out-of-memory at
/// 64, keeps 32 (or 40 on a loaded machine), and writes the DataLoader's new `batch_size=`
/// into the patch with the learning-rate plan beside it.
#[test]
fn tune_searches_the_batch_size_only_with_allow_batch() {
    if !python3_or_skip("batch-size") {
        return;
    }
    const V100_40PCT: &str = r#"{"name":"Tesla V100-SXM2-32GB","memory_total_bytes":34359738368,
        "memory_used_bytes":4000000000,"compute_capability":[7,0],"util":40}"#;
    let dir = project("tune_small_batch.py");
    let rep = fake_tune(dir.path(), V100_40PCT, &["--output-dir", "plain"]);
    assert_eq!(rep["stop"], "nothing_to_tune", "{rep}");
    assert!(
        rep["notes"].as_array().unwrap().iter().any(|n| n
            .as_str()
            .unwrap()
            .starts_with("batch_too_small")
            && n.as_str().unwrap().contains("--allow-batch")),
        "{rep}"
    );
    assert_eq!(rep["steps"].as_array().unwrap().len(), 1, "{rep}");

    let rep = fake_tune(
        dir.path(),
        V100_40PCT,
        &["--allow-batch", "--output-dir", "out"],
    );
    let knobs: Vec<&str> = rep["plan"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["knob"].as_str().unwrap())
        .collect();
    assert_eq!(knobs, ["batch_size"], "{rep}");
    let steps = rep["steps"].as_array().unwrap();
    let tried: Vec<&str> = steps
        .iter()
        .filter(|s| s["knob"] == "batch_size")
        .map(|s| s["value"].as_str().unwrap())
        .collect();
    // doubling from the job's own 8, then bisecting below the first out-of-memory
    assert_eq!(&tried[..3], ["16", "32", "64"], "{rep}");
    let oom = steps.iter().find(|s| s["value"] == "64").unwrap();
    assert!(!oom["kept"].as_bool().unwrap(), "{rep}");
    assert!(
        oom["result"]["last_lines"][0]
            .as_str()
            .unwrap()
            .contains("CUDA out of memory"),
        "{rep}"
    );
    let b = &rep["batch"];
    assert_eq!(b["from"], 8, "{rep}");
    let to = b["to"].as_u64().unwrap();
    assert!(to == 32 || to == 40, "{rep}");
    assert!(b["first_oom"].as_u64().unwrap() > 40, "{rep}");
    assert_eq!(rep["chosen"][0]["value"], to.to_string(), "{rep}");
    let plan = b["lr_plan"].as_str().unwrap();
    assert!(
        plan.contains(&format!("{to}/8")) && plan.contains("learning rate"),
        "{plan}"
    );
    assert!(
        rep["patch_notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n == plan),
        "{rep}"
    );
    let patch = dir.path().join("out/fix.patch");
    let diff = std::fs::read_to_string(&patch).unwrap();
    let changed = changed_lines(&diff);
    assert_eq!(changed.len(), 2, "{diff}");
    assert!(changed[0].contains("batch_size=8,"), "{diff}");
    assert!(changed[1].contains(&format!("batch_size={to},")), "{diff}");
    git_apply_check(dir.path(), &patch);
    assert!(
        rep["run_line"].as_str().unwrap().starts_with(&format!(
            "gpufeed run --dataloader batch_size={to} -- python3"
        )),
        "{rep}"
    );
    // before and after in samples/s: a per-step rate would hide the gain
    let s = &rep["before_after"]["speedup"];
    assert_eq!(s["metric"], "samples/s", "{rep}");
    assert!(s["value"].as_f64().unwrap() > 1.3, "{rep}");
}
