//! Step markers from the DataLoader itself (gpufeed's hook, no code change), on real PyTorch
//! (GPUFEED_TEST_PYTHON; skipped loudly without it): a plain script with no tqdm and no markers
//! gets exact steps under `run` and a measured fix under `tune`; the training loader is told
//! from a validation loader; the job's own markers win; odd uses of DataLoader leave the job's
//! behaviour unchanged.

use crate::common::python_with;
use crate::{gpufeed_no_gpu, read_json};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/plain_imagefolder.py")
}

/// The JPEG folder the script reads, made once per test run (by the script itself, once).
fn images(python: &str) -> PathBuf {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let d = tempfile::tempdir().unwrap();
        let ok = std::process::Command::new(python)
            .arg(script())
            .arg(d.path().join("imgs"))
            .arg("0")
            .output()
            .unwrap()
            .status
            .success();
        assert!(ok, "the script makes its images");
        d
    });
    dir.path().join("imgs")
}

/// `gpufeed run` on the plain script with `flags`: (the report, the job's stdout).
fn run(python: &str, seconds: &str, flags: &[&str], extra: &[&str]) -> (Value, String) {
    let _g = crate::sweep::serial();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    let out = gpufeed_no_gpu()
        .current_dir(dir.path())
        .env_remove("GPUFEED_STEP_SOCKET")
        .env(
            "PYTHONPATH",
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python"),
        )
        .args(["run", "-q", "--export-json"])
        .arg(&json)
        .arg("-o")
        .arg(dir.path().join("rec.ndjson"))
        .args(extra)
        .arg("--")
        .arg(python)
        .arg(script())
        .arg(images(python))
        .arg(seconds)
        .args(flags)
        .timeout(std::time::Duration::from_secs(240))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rec = std::fs::read_to_string(dir.path().join("rec.ndjson")).unwrap();
    let mut v = read_json(&json);
    // The loader notes are in the recording's overrides line.
    let notes: Vec<Value> = rec
        .lines()
        .filter(|l| l.contains("\"type\":\"overrides\""))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .flat_map(|o| o["loader_notes"].as_array().cloned().unwrap_or_default())
        .collect();
    v["loader_notes"] = Value::Array(notes);
    (v, stdout)
}

/// The number the script printed last: `done: N steps`.
fn done_steps(stdout: &str) -> u64 {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("done: ")?.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no 'done:' line in {stdout}"))
}

fn steps(v: &Value) -> u64 {
    v["steps"]["steps"]
        .as_u64()
        .unwrap_or_else(|| panic!("steps in {:#}", v["steps"]))
}

fn notes(v: &Value) -> String {
    v["loader_notes"].to_string()
}

#[test]
fn a_plain_script_gets_exact_steps_and_its_validation_loader_is_left_out() {
    let Some(python) = python_with("torch, torchvision, PIL", "the DataLoader step hook test")
    else {
        return;
    };
    let (v, out) = run(&python, "6", &["--val"], &[]);
    let done = done_steps(&out);
    let n = steps(&v);
    // Every training batch is a step (the one cut short by the script's own stop is not ended).
    assert!(
        n + 2 >= done && n <= done,
        "{n} steps timed, {done} run: {:#}",
        v["steps"]
    );
    assert!(
        v["steps"]["data_wait_pct"].as_f64().unwrap() > 30.0,
        "{:#}",
        v["steps"]
    );
    assert_eq!(v["steps"]["items"].as_u64().unwrap() % 8, 0, "batches of 8");
    let ns = notes(&v);
    assert!(
        ns.contains("training loader, the DataLoader created at")
            && ns.contains("plain_imagefolder.py:62"),
        "{ns}"
    );
    assert!(ns.contains("left out of the step rate"), "{ns}");
    assert_eq!(v["verdict"]["id"], "input_bound", "{:#}", v["verdict"]);
}

#[test]
fn the_jobs_own_markers_win_and_no_auto_steps_turns_the_hook_off() {
    let Some(python) = python_with("torch, torchvision, PIL", "the DataLoader step hook test")
    else {
        return;
    };
    let (v, out) = run(&python, "4", &["--probe"], &[]);
    let done = done_steps(&out);
    let n = steps(&v);
    // One marker per step, not two (the probe's and the hook's).
    assert!(n <= done && n + 2 >= done, "{n} steps timed, {done} run");
    let (v, _) = run(&python, "3", &[], &["--no-auto-steps"]);
    assert!(v["steps"].is_null(), "{:#}", v["steps"]);
    assert_eq!(notes(&v), "[]");
}

#[test]
fn odd_uses_of_the_dataloader_keep_the_job_unchanged() {
    let Some(python) = python_with("torch, torchvision, PIL", "the DataLoader step hook test")
    else {
        return;
    };
    for flag in ["--threads", "--iter-only", "--subclass", "--monkeypatch"] {
        let (v, out) = run(&python, "3", &[flag], &[]);
        let done = done_steps(&out);
        assert!(done > 0, "{flag}");
        let n = steps(&v);
        assert!(n > 0 && n <= done, "{flag}: {n} of {done}");
        if flag == "--threads" {
            assert!(notes(&v).contains("more than one thread"), "{}", notes(&v));
        }
    }
}

#[test]
fn tune_fixes_a_plain_script_with_no_tqdm_and_no_markers() {
    let Some(python) = python_with("torch, torchvision, PIL", "tune on a plain script") else {
        return;
    };
    let imgs = images(&python);
    let dir = crate::tune::project("plain_imagefolder.py");
    let _g = crate::sweep::serial();
    let out = assert_cmd::Command::cargo_bin("gpufeed")
        .unwrap()
        .env_remove("GPUFEED_NVML_LIB")
        .env_remove("FAKE_NVML_SCENARIO")
        .env_remove("GPUFEED_STEP_SOCKET")
        .current_dir(dir.path())
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
        .args(["--format", "json", "--output-dir", "out", "--"])
        .arg(&python)
        .arg("train.py")
        .arg(&imgs)
        .arg("1000")
        .timeout(std::time::Duration::from_secs(600))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let rep: Value = serde_json::from_slice(&out.stdout).unwrap();
    let base = &rep["steps"][0]["result"]["throughput"];
    assert_eq!(
        base["source"], "step_socket",
        "timed at the DataLoader: {base}"
    );
    let workers = rep["chosen"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["knob"] == "num_workers")
        .and_then(|c| c["value"].as_str()?.parse::<u32>().ok())
        .unwrap_or_else(|| panic!("num_workers chosen: {rep:#}"));
    assert!(workers >= 2, "{rep:#}");
    let s = &rep["before_after"]["speedup"];
    let lo = s["ci95"][0]
        .as_f64()
        .unwrap_or_else(|| panic!("an interval: {s}"));
    eprintln!(
        "tune on a plain script: num_workers={workers}, {} ({lo}..{})",
        s["value"], s["ci95"][1]
    );
    // Loading waits on storage (4 ms a file) more than it decodes: workers overlap it. Alone
    // the interval starts near 2; with the notebook and stage tests running beside it on 2
    // cores it widened below 1.2 once: the bound is that the gain is real, not its size.
    assert!(lo > 1.0, "{s}");
}

#[test]
fn a_loop_with_no_dataloader_is_counted_at_its_optimizer_steps() {
    let Some(python) = python_with("torch", "the optimizer-step counting test") else {
        return;
    };
    let _g = crate::sweep::serial();
    let dir = tempfile::tempdir().unwrap();
    let job = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/plain_batch_loop.py");
    let out = gpufeed_no_gpu()
        .current_dir(dir.path())
        .env_remove("GPUFEED_STEP_SOCKET")
        .args([
            "run",
            "-q",
            "--export-json",
            "run.json",
            "-o",
            "rec.ndjson",
            "--",
        ])
        .arg(&python)
        .arg(&job)
        .args(["20", "5"])
        .timeout(std::time::Duration::from_secs(120))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let done = done_steps(&String::from_utf8_lossy(&out.stdout));
    let v = read_json(&dir.path().join("run.json"));
    let n = steps(&v);
    assert!(n + 2 >= done && n <= done, "{n} steps counted, {done} run");
    assert!(
        v["steps"]["data_wait_pct"].is_null(),
        "no wait is known: {:#}",
        v["steps"]
    );
    let rec = std::fs::read_to_string(dir.path().join("rec.ndjson")).unwrap();
    assert!(
        rec.contains("counted at each optimizer.step()"),
        "a note says how"
    );
    // A sweep over its load gets a rate per trial from the same source.
    let out = gpufeed_no_gpu()
        .current_dir(dir.path())
        .env_remove("GPUFEED_STEP_SOCKET")
        .args([
            "sweep",
            "-L",
            "load",
            "40,5",
            "--min-time",
            "2s",
            "--max-time",
            "30s",
        ])
        .args(["--format", "json", "--output-dir", "sw", "--"])
        .arg(&python)
        .arg(&job)
        .arg("{load}")
        .timeout(std::time::Duration::from_secs(200))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let rep: Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = rep["results"].as_array().unwrap();
    let rate = |i: usize| {
        assert_eq!(r[i]["throughput"]["source"], "step_socket", "{}", r[i]);
        r[i]["throughput"]["value"].as_f64().unwrap()
    };
    // About 62 ms a step against 27: 2.3x.
    assert!(rate(1) / rate(0) > 1.6, "{} vs {}", rate(0), rate(1));
}

/// Issue 47 item 6: `python -I` and `-E` ignore PYTHONPATH, so gpufeed's step hook never loads
/// and the job's steps go untimed: said in a note (as `tune` says it), and only then.
#[test]
fn python_ignoring_pythonpath_is_said_to_lose_its_steps() {
    let dir = tempfile::tempdir().unwrap();
    let run = |flags: &[&str]| {
        let rec = dir.path().join(format!("r{}.ndjson", flags.join("")));
        let out = gpufeed_no_gpu()
            .args(["run", "--py-stacks", "off", "-o"])
            .arg(&rec)
            .arg("--")
            .arg("python3")
            .args(flags)
            .args(["-c", "import time; time.sleep(0.3)"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr)
    };
    for flag in ["-I", "-E"] {
        let said = run(&[flag]);
        assert!(
            said.contains("step markers could not be injected") && said.contains("python -E/-I/-S"),
            "python3 {flag}: {said}"
        );
    }
    assert!(!run(&[]).contains("could not be injected"));
}
