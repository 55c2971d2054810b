//! Python stack sampling through the real binary: real CPython jobs (the bundled stdlib example)
//! under `gpufeed run`, and stacks captured from real PyTorch, Lightning and accelerate runs
//! stored as recordings in tests/fixtures/pystacks/ (see capture_torch.py there).

use crate::run_ok;
use crate::PHASES;
use assert_cmd::Command;
use serde_json::Value;
use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

fn gpufeed() -> Command {
    let mut c = Command::cargo_bin("gpufeed").unwrap();
    c.env_remove("GPUFEED_NVML_LIB")
        .env_remove("FAKE_NVML_SCENARIO")
        .env("GPUFEED_NVML_LIB", "/nonexistent/libnvidia-ml.so.1");
    c
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/pystacks")
        .join(name)
}

fn python3() -> Option<&'static str> {
    let ok = std::process::Command::new("python3")
        .arg("-c")
        .arg("import sys; sys.exit(0 if sys.version_info >= (3, 8) else 1)")
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: no python3 >= 3.8 on PATH: live Python stack tests did not run"
        );
    }
    ok.then_some("python3")
}

/// The last stdout line of `run --format json`.
fn run_json(stdout: &[u8]) -> Value {
    let text = String::from_utf8_lossy(stdout);
    let last = text.lines().last().expect("a JSON line");
    serde_json::from_str(last).unwrap_or_else(|e| panic!("bad JSON {e}: {last}"))
}

/// What the example measured itself: "waited for data N% of the time", from its output (on
/// gpufeed's stderr under `run --format json`, whose stdout is the JSON alone).
fn example_wait_pct(output: &[u8]) -> f64 {
    let text = String::from_utf8_lossy(output);
    let line = text
        .lines()
        .find(|l| l.starts_with("done:"))
        .expect("the example's summary line");
    let i = line.find("waited for data ").unwrap() + "waited for data ".len();
    line[i..].split('%').next().unwrap().trim().parse().unwrap()
}

fn phase(p: &Value, name: &str) -> f64 {
    p["main"]["phases_pct"][name].as_f64().unwrap()
}

fn run_example(workers: u32) -> Option<(Value, f64)> {
    let py = python3()?;
    let dir = tempfile::tempdir().unwrap();
    let out = run_ok(
        gpufeed()
            .current_dir(repo())
            .args(["run", "--format", "json", "-o"])
            .arg(dir.path().join("r.ndjson"))
            .args(["--", py, "examples/starving_pipeline.py", "--seconds", "6"])
            .args(["--workers", &workers.to_string()]),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("note:"),
        "a child job needs no note: {stderr}"
    );
    Some((run_json(&out.stdout), example_wait_pct(&out.stderr)))
}

#[test]
fn stdlib_example_without_workers_waits_for_data_as_it_measures_itself() {
    let Some((j, truth)) = run_example(0) else {
        return;
    };
    let p = &j["python"];
    assert_eq!(p["status"], "ok", "{p}");
    assert_eq!(p["rate_hz"], 100.0);
    assert!(p["sampled_processes"].as_u64().unwrap() >= 1);
    let wait = phase(p, "data_wait");
    // The loop's own clock against the stacks: within 15 points.
    assert!(
        (wait - truth).abs() <= 15.0,
        "stacks say {wait}% waiting, the example measured {truth}%: {p}"
    );
    let sum: f64 = PHASES.iter().map(|k| phase(p, k)).sum();
    assert!((sum - 100.0).abs() < 0.5, "{sum}");
    assert!(phase(p, "forward") + phase(p, "backward") > 5.0, "{p}");
    // The slow stage is the decode transform, and the verdict says so with the fix.
    assert_eq!(
        p["data_hotspots"][0]["function"], "DecodeImage.__call__",
        "{p}"
    );
    assert_eq!(j["verdict"]["id"], "input_bound", "{}", j["verdict"]);
    let f = &j["findings"][0];
    assert_eq!(f["id"], "input_bound");
    assert_eq!(f["evidence"]["kind"], "main_process_loading");
    assert_eq!(f["evidence"]["hot_stage"], "DecodeImage.__call__");
    assert!(f["evidence"]["data_wait_pct"].as_f64().unwrap() >= 20.0);
    assert!(f["recommendation"]
        .as_str()
        .unwrap()
        .contains("num_workers="));
    // `run` opened GPUFEED_STEP_SOCKET: the example's step markers give the exact wait, which
    // wins over the stacks' estimate, and the finding says which one it used.
    let steps = &j["steps"];
    let probe = steps["data_wait_pct"]
        .as_f64()
        .expect("steps.data_wait_pct");
    assert!(
        (probe - truth).abs() <= 5.0,
        "the probe says {probe}%, the example {truth}%: {steps}"
    );
    assert!(steps["steps"].as_u64().unwrap() >= 10, "{steps}");
    assert_eq!(f["evidence"]["data_wait_source"], "step_probe", "{f}");
    assert_eq!(f["evidence"]["data_wait_pct"], steps["data_wait_pct"]);
    assert_eq!(f["evidence"]["stacks_data_wait_pct"], p["data_wait_pct"]);
    // The example reports its batch size: milliseconds of loading work per sample.
    let ms = p["data_hotspots"][0]["ms_per_sample"]
        .as_f64()
        .expect("ms_per_sample");
    assert!(ms > 0.0 && ms < 1000.0, "{ms}");
    assert!(j["notes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n.as_str().unwrap().contains("step markers")));
}

/// `record` opens a socket too and says where: a job started afterwards with that variable
/// gets its steps recorded.
#[test]
fn record_tells_the_step_socket_and_records_a_jobs_steps() {
    use std::io::BufRead;
    let Some(py) = python3() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.ndjson");
    let mut g = std::process::Command::new(assert_cmd::cargo::cargo_bin("gpufeed"))
        .env("GPUFEED_NVML_LIB", "/nonexistent/libnvidia-ml.so.1")
        .args(["record", "--duration", "4s", "--format", "json", "-o"])
        .arg(&rec)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = std::io::BufReader::new(g.stderr.take().unwrap());
    let mut path = None;
    let mut seen = String::new();
    let mut line = String::new();
    while path.is_none() && err.read_line(&mut line).unwrap() > 0 {
        seen.push_str(&line);
        if let Some(i) = line.find("GPUFEED_STEP_SOCKET=") {
            path = Some(line[i + "GPUFEED_STEP_SOCKET=".len()..].trim().to_string());
        }
        line.clear();
    }
    let path = path.unwrap_or_else(|| panic!("no socket told: {seen}"));
    let job = probe_job(py, 30, 2, 5_000_000)
        .env("GPUFEED_STEP_SOCKET", &path)
        .status()
        .unwrap();
    assert!(job.success());
    let out = g.wait_with_output().unwrap();
    assert!(out.status.success());
    let j = run_json(&out.stdout);
    assert_eq!(j["steps"]["steps"], 29, "{}", j["steps"]);
    assert_eq!(j["steps"]["items"], 58, "{}", j["steps"]);
    assert!(
        !Path::new(&path).exists(),
        "the socket is removed when recording ends"
    );
}

/// A job using the bundled probe (python/gpufeed_probe.py) under `run`, with stacks off: the
/// probe alone gives steps and the exact wait.
#[test]
fn run_opens_the_step_socket_for_the_probe() {
    let Some(py) = python3() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("job.py");
    std::fs::write(
        &script,
        "import os, stat, sys, time\n\
         sys.path.insert(0, sys.argv[1])\n\
         import gpufeed_probe as probe\n\
         p = os.environ['GPUFEED_STEP_SOCKET']\n\
         d = os.path.dirname(p)\n\
         assert len(os.path.basename(d)) > len('gpufeed-steps-'), d\n\
         assert stat.S_IMODE(os.stat(d).st_mode) == 0o700, oct(os.stat(d).st_mode)\n\
         def batches():\n\
         \x20   while True:\n\
         \x20       time.sleep(0.03)\n\
         \x20       yield [0] * 4\n\
         for i, b in enumerate(probe.wrap(batches(), items=len)):\n\
         \x20   time.sleep(0.01)\n\
         \x20   if i == 40: break\n",
    )
    .unwrap();
    let rec = dir.path().join("r.ndjson");
    let out = run_ok(
        gpufeed()
            .args(["run", "--py-stacks", "off", "--format", "json", "-o"])
            .arg(&rec)
            .arg("--")
            .arg(py)
            .arg(&script)
            .arg(repo().join("python")),
    );
    let j = run_json(&out.stdout);
    let steps = &j["steps"];
    // 30 ms of waiting in each 40 ms step.
    let wait = steps["data_wait_pct"].as_f64().expect("a data wait");
    assert!((60.0..=90.0).contains(&wait), "{steps}");
    assert!(steps["steps"].as_u64().unwrap() >= 30, "{steps}");
    assert_eq!(
        steps["items"].as_u64().unwrap(),
        4 * steps["steps"].as_u64().unwrap()
    );
    assert!(j.get("python").is_none_or(|p| p.is_null()), "{j}");
    let text = std::fs::read_to_string(&rec).unwrap();
    assert!(text.contains(r#""type":"steps""#), "no steps line");
}

#[test]
fn stdlib_example_with_workers_samples_them_and_matches_its_own_wait() {
    let Some((j, truth)) = run_example(2) else {
        return;
    };
    let p = &j["python"];
    assert_eq!(p["status"], "ok", "{p}");
    assert!(p["sampled_processes"].as_u64().unwrap() >= 3, "{p}");
    assert_eq!(p["loader_processes"], 2, "{p}");
    let wait = phase(p, "data_wait");
    assert!(
        (wait - truth).abs() <= 15.0,
        "stacks say {wait}% waiting, the example measured {truth}%: {p}"
    );
    assert_eq!(p["data_in_main_pct"], 0.0, "{p}");
    let top: Vec<&str> = p["data_hotspots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["function"].as_str().unwrap())
        .collect();
    assert!(top.contains(&"DecodeImage.__call__"), "{top:?}");
}

#[test]
fn a_job_that_is_not_python_is_passed_over_silently() {
    let dir = tempfile::tempdir().unwrap();
    let out = gpufeed()
        .args(["run", "--format", "json", "-o"])
        .arg(dir.path().join("r.ndjson"))
        .args(["--", "sh", "-c", "sleep 1.2"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.to_lowercase().contains("python"), "{stderr}");
    let j = run_json(&out.stdout);
    assert_eq!(j["python"]["status"], "not_python", "{}", j["python"]);
    assert!(j["python"]["main"].is_null());
}

#[test]
fn py_stacks_off_records_no_stacks() {
    let Some(py) = python3() else { return };
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.ndjson");
    let out = gpufeed()
        .args(["run", "--py-stacks", "off", "--format", "json", "-o"])
        .arg(&rec)
        .args(["--", py, "-c", "import time; time.sleep(1)"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(run_json(&out.stdout).get("python").is_none());
    let text = std::fs::read_to_string(&rec).unwrap();
    assert!(!text.contains("\"py_"), "no Python lines");
    assert!(!text.contains("py_rate_hz"));
}

#[test]
fn bad_rates_are_usage_errors() {
    gpufeed()
        .args(["run", "--py-rate", "0", "--", "true"])
        .assert()
        .code(2);
    gpufeed()
        .args(["run", "--py-stacks", "maybe", "--", "true"])
        .assert()
        .code(2);
}

fn diagnose_json(path: &Path) -> Value {
    let out = run_ok(gpufeed().args(["diagnose", "--format", "json"]).arg(path));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn hot(p: &Value) -> Vec<String> {
    p["data_hotspots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["function"].as_str().unwrap().to_string())
        .collect()
}

/// Captured from real CPU runs of capture_torch.py (torch 2.x, torchvision, CPython 3.11):
/// JPEG decode + RandomResizedCrop + ColorJitter + ToTensor + Normalize, a small CNN.
#[test]
fn real_torch_loop_without_workers_waits_in_the_main_process() {
    let j = diagnose_json(&fixture("plain0.ndjson"));
    let p = &j["python"];
    assert_eq!(p["status"], "ok");
    // The PyTorch profiler's DataLoader share of the same kind of run is about 56 %.
    let wait = phase(p, "data_wait");
    assert!((45.0..=70.0).contains(&wait), "{p}");
    assert!(
        phase(p, "forward") > 3.0 && phase(p, "backward") > 10.0,
        "{p}"
    );
    assert!(phase(p, "optimizer") > 0.0, "{p}");
    assert!(
        phase(p, "other") < 15.0,
        "start-up is outside the loop window: {p}"
    );
    let h = hot(p);
    assert_eq!(h[0], "ImageFile.load", "{h:?}");
    for s in [
        "ColorJitter.forward",
        "ToTensor.__call__",
        "RandomResizedCrop.forward",
    ] {
        assert!(h[..6].contains(&s.to_string()), "{s} in {h:?}");
    }
    let f = &j["findings"][0];
    assert_eq!(f["id"], "input_bound");
    assert_eq!(f["evidence"]["kind"], "main_process_loading");
    assert_eq!(f["evidence"]["hot_stage_kind"], "decode");
    assert_eq!(j["verdict"]["id"], "input_bound");
}

#[test]
fn real_torch_loop_with_two_workers_ranks_the_workers_stages() {
    let j = diagnose_json(&fixture("plain2.ndjson"));
    let p = &j["python"];
    assert_eq!(p["loader_processes"], 2, "{p}");
    assert_eq!(p["sampled_processes"], 3, "{p}");
    assert_eq!(
        p["data_in_main_pct"], 0.0,
        "the main process only waits: {p}"
    );
    // Workers' helper threads (Queue._feed, _ResourceSharer) are not the data path.
    let h = hot(p);
    assert_eq!(h[0], "ImageFile.load", "{h:?}");
    assert!(h.contains(&"Image.resize".to_string()), "{h:?}");
    // The main thread of the training process, not a worker's, is the training thread.
    assert_eq!(p["main"]["pid"], p["main"]["tid"]);
    assert!(phase(p, "backward") > phase(p, "forward"), "{p}");
}

#[test]
fn real_lightning_fit_classifies_inside_the_optimizer_closure() {
    let j = diagnose_json(&fixture("lightning.ndjson"));
    let p = &j["python"];
    let wait = phase(p, "data_wait");
    assert!((45.0..=70.0).contains(&wait), "{p}");
    // Forward and backward run inside SGD.step's closure: the innermost frame decides.
    assert!(
        phase(p, "forward") > 5.0 && phase(p, "backward") > 10.0,
        "{p}"
    );
    assert!(phase(p, "optimizer") < 10.0, "{p}");
    assert_eq!(hot(p)[0], "ImageFile.load");
    assert_eq!(j["findings"][0]["evidence"]["kind"], "main_process_loading");
}

#[test]
fn real_accelerate_loop_fetches_through_its_dataloader_shard() {
    let j = diagnose_json(&fixture("accelerate.ndjson"));
    let p = &j["python"];
    let wait = phase(p, "data_wait");
    assert!((45.0..=70.0).contains(&wait), "{p}");
    assert!(phase(p, "backward") > 10.0, "{p}");
    assert_eq!(hot(p)[0], "ImageFile.load");
}

/// Hand-assembled from the frame names of transformers' Trainer (see make_hf_fixture.py):
/// transformers could not be installed where the other fixtures were captured.
#[test]
fn hf_trainer_frames_classify_to_the_known_split() {
    let j = diagnose_json(&fixture("hf_trainer.ndjson"));
    let p = &j["python"];
    for (k, v) in [
        ("data_wait", 40.0),
        ("forward", 25.0),
        ("backward", 20.0),
        ("optimizer", 10.0),
        ("sync", 5.0),
        ("other", 0.0),
    ] {
        assert_eq!(phase(p, k), v, "{k}: {p}");
    }
    assert_eq!(p["sync_sites"][0]["line"], 33);
    assert_eq!(hot(p)[0], "TokenizedDataset.__getitem__");
}

#[test]
fn schema_1_recordings_still_read_and_have_no_python_object() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("v1.ndjson");
    std::fs::write(
        &rec,
        "{\"type\":\"header\",\"schema_version\":1,\"start_time\":\"x\",\"start_unix_us\":0,\"interval_s\":0.1,\"host\":{\"cpu_count\":2}}\n\
         {\"type\":\"host\",\"t_s\":0.1,\"cpu_pct\":[10.0,20.0]}\n\
         {\"type\":\"end\",\"t_s\":0.2,\"exit_code\":0,\"signal\":null,\"reason\":\"job_exited\"}\n",
    )
    .unwrap();
    let j = diagnose_json(&rec);
    assert!(j.get("python").is_none(), "{j}");
}

#[test]
fn text_and_markdown_show_the_training_loop_block() {
    let out = gpufeed()
        .args(["diagnose"])
        .arg(fixture("plain0.ndjson"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("TRAINING LOOP"), "{text}");
    assert!(text.contains("data_wait 60%"), "{text}");
    assert!(text.contains("ImageFile.load"), "{text}");
    let out = gpufeed()
        .args(["diagnose", "--format", "markdown"])
        .arg(fixture("plain0.ndjson"))
        .output()
        .unwrap();
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(md.contains("## Training loop"), "{md}");
    assert!(md.contains("| data_wait | 59.5% |"), "{md}");
}

/// A Python process with a thread that spins and a main thread asleep in `sleeper()`, once
/// both are under way.
fn spinner_and_sleeper(py: &str) -> std::process::Child {
    use std::io::BufRead;
    let mut job = std::process::Command::new(py)
        .arg("-c")
        .arg(
            "import threading, time\n\
             def spin():\n    while True: pass\n\
             def sleeper():\n    time.sleep(60)\n\
             threading.Thread(target=spin, daemon=True).start()\n\
             print('ready', flush=True)\n\
             sleeper()\n",
        )
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(job.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
    job
}

/// The vendored py-spy's frame cache, data-stack reads and Python-threads-only run-state scan
/// (issue 10, vendor/py-spy/PATCHES.md) give the same stacks and idle flags as py-spy without
/// them, on a real CPython with a spinning thread and a sleeping main thread, and hit in the
/// steady state.
#[test]
fn the_frame_cache_reads_the_same_stacks_and_idle_flags_as_without_it() {
    let Some(py) = python3() else {
        return;
    };
    let mut job = spinner_and_sleeper(py);
    let spy = |cache: bool, frame_names: bool| {
        let config = py_spy::Config {
            blocking: py_spy::config::LockingStrategy::NonBlocking,
            frame_cache: cache,
            scan_python_threads_only: cache,
            frame_names,
            ..Default::default()
        };
        py_spy::PythonSpy::retry_new(job.id() as py_spy::Pid, &config, 20).unwrap()
    };
    // Cached, uncached, and cached with frames that carry only their code's serial (patch 13,
    // as gpufeed reads): named here from the codes given once.
    let (mut on, mut off, mut lean) = (spy(true, true), spy(false, true), spy(true, false));
    assert!(off.frame_cache_stats().is_none());
    let mut codes: HashMap<u64, (String, String)> = HashMap::new();
    let mut given = Vec::new();
    // Per sampler: (samples where the main thread was idle, where the spinner was active).
    let mut flags = [(0, 0), (0, 0), (0, 0)];
    let samples = 30;
    for _ in 0..samples {
        let mut got = Vec::new();
        for (k, s) in [&mut on, &mut off, &mut lean].into_iter().enumerate() {
            let mut traces = s.get_stack_traces().unwrap();
            s.take_new_codes(&mut given);
            for (code, name, file) in given.drain(..) {
                assert!(codes.insert(code, (name, file)).is_none(), "given once");
            }
            traces.sort_by_key(|t| t.os_thread_id);
            let mut stacks = Vec::new();
            for t in &traces {
                let names: Vec<String> = t
                    .frames
                    .iter()
                    .map(|f| match codes.get(&f.code) {
                        Some((name, file)) if k == 2 => {
                            assert!(f.name.is_empty() && f.filename.is_empty());
                            format!("{file}:{name}:{}", f.line)
                        }
                        _ => format!("{}:{}:{}", f.filename, f.name, f.line),
                    })
                    .collect();
                if names.iter().any(|n| n.contains(":sleeper:")) && !t.active {
                    flags[k].0 += 1;
                }
                if names.iter().any(|n| n.contains(":spin:")) && t.active {
                    flags[k].1 += 1;
                }
                stacks.push(names);
            }
            got.push(stacks);
        }
        assert_eq!(got[0], got[1], "cache on (left) and off (right)");
        assert_eq!(got[0], got[2], "names (left) and serials (right)");
        assert_eq!(got[0].len(), 2, "{:?}", got[0]);
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let _ = job.kill();
    let _ = job.wait();
    assert_eq!(
        flags[0].0, samples,
        "main thread idle in every sample, cached: {flags:?}"
    );
    assert_eq!(
        flags[1].0, samples,
        "main thread idle in every sample, uncached: {flags:?}"
    );
    // The spinner is runnable all the time; it may be caught between states now and then.
    assert!(flags[0].1 >= samples * 2 / 3, "{flags:?}");
    assert!(flags[1].1 >= samples * 2 / 3, "{flags:?}");
    assert_eq!(flags[2].0, samples, "serials: {flags:?}");
    assert!(flags[2].1 >= samples * 2 / 3, "{flags:?}");
    assert!(!codes.is_empty());
    let stats = on.frame_cache_stats().unwrap();
    // About 6 distinct frames; a clear (every 3 s) would read them again.
    assert!(stats.code_misses <= 20, "{stats:?}");
    assert!(stats.code_hits >= 100, "{stats:?}");
    assert!(stats.line_hits >= 100, "{stats:?}");
    if (on.version.major, on.version.minor) >= (3, 11) {
        // The data-stack chunk copied in one read per thread, its frames taken from it, and
        // the second thread's state read ahead with the first one's frames.
        assert!(stats.stack_reads >= 2 * samples as u64 - 4, "{stats:?}");
        assert!(stats.stack_frames >= 2 * stats.stack_reads, "{stats:?}");
        assert!(stats.threads_read_ahead >= samples as u64 - 2, "{stats:?}");
    }
}

/// Records `script` under `gpufeed run` with Python stacks at `rate` Hz into `out` (with `env`
/// set) and gives the recording's lines.
fn record_script(
    py: &str,
    script: &Path,
    rate: &str,
    env: &[(&str, &str)],
    out: &Path,
) -> Vec<Value> {
    gpufeed()
        .envs(env.iter().copied())
        .args(["run", "--format", "json", "--py-rate", rate, "-o"])
        .arg(out)
        .arg("--")
        .arg(py)
        .arg(script)
        .assert()
        .success();
    std::fs::read_to_string(out)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Workers share their parent's budget (issue 24 item 5): with 4 busy children each is read
/// about an eighth as often as the parent (a quarter with 1 or 2), so their cost does not grow
/// with `num_workers`; the recording's readings per process say so.
#[test]
fn four_workers_share_their_parents_reading_budget() {
    let Some(py) = python3() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("kids.py");
    std::fs::write(
        &script,
        "import subprocess, sys, time\n\
         busy = 'import time\\nt = time.time()\\nwhile time.time() - t < 4: sum(range(1000))\\n'\n\
         kids = [subprocess.Popen([sys.executable, '-c', busy]) for _ in range(4)]\n\
         t = time.time()\n\
         while time.time() - t < 4: sum(range(1000))\n\
         for k in kids: k.wait()\n",
    )
    .unwrap();
    let lines = record_script(py, &script, "100", &[], &dir.path().join("rec.ndjson"));
    let mut ticks: std::collections::BTreeMap<u64, u64> = Default::default();
    for l in lines {
        if l["type"] == "py_samples" {
            *ticks.entry(l["pid"].as_u64().unwrap()).or_default() += l["ticks"].as_u64().unwrap();
        }
    }
    assert_eq!(ticks.len(), 5, "{ticks:?}");
    let (&parent, &n_parent) = ticks.iter().max_by_key(|(_, n)| **n).unwrap();
    let kids: Vec<u64> = ticks
        .iter()
        .filter(|(p, _)| **p != parent)
        .map(|(_, n)| *n)
        .collect();
    let sum: u64 = kids.iter().sum();
    // An eighth each (a quarter until all four are found): the four together about half.
    assert!(
        sum * 10 <= n_parent * 7 && sum * 10 >= n_parent * 3,
        "parent {n_parent}, workers {kids:?}"
    );
}

/// The vendored py-spy's patch 9: a thread named to pass over is not read (left out, listed as
/// skipped), the others read as ever; a thread id it does not know is read anyway.
#[test]
fn py_spy_passes_over_the_threads_it_is_told_did_not_run() {
    let Some(py) = python3() else {
        return;
    };
    let mut job = spinner_and_sleeper(py);
    let config = py_spy::Config {
        blocking: py_spy::config::LockingStrategy::NonBlocking,
        ..Default::default()
    };
    let mut spy = py_spy::PythonSpy::retry_new(job.id() as py_spy::Pid, &config, 20).unwrap();
    let all = spy.get_stack_traces().unwrap();
    assert_eq!(all.len(), 2);
    if (spy.version.major, spy.version.minor) < (3, 11) {
        // No OS thread id in the thread state: nothing can be passed over.
        let _ = job.kill();
        let _ = job.wait();
        return;
    }
    let main = all
        .iter()
        .find(|t| t.frames.iter().any(|f| f.name == "sleeper"))
        .and_then(|t| t.os_thread_id)
        .unwrap();
    for _ in 0..10 {
        let traces = spy.get_stack_traces_skipping(&[main, 999_999_999]).unwrap();
        assert_eq!(spy.skipped(), &[main][..]);
        assert_eq!(traces.len(), 1, "the spinner only");
        assert!(traces[0].frames.iter().any(|f| f.name == "spin"));
        assert_ne!(traces[0].os_thread_id, Some(main));
        // Without a list, every thread again, and nothing skipped.
        let traces = spy.get_stack_traces().unwrap();
        assert_eq!(traces.len(), 2);
        assert!(spy.skipped().is_empty());
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let _ = job.kill();
    let _ = job.wait();
}

/// A recording of a loop thread and three sleeping threads: the sleepers, passed over after
/// their first reading, are counted at every reading with the stack they sleep in, idle,
/// exactly as when every thread is read (`GPUFEED_PY_IDLE_SKIP=0`).
#[test]
fn sleeping_threads_passed_over_are_counted_as_when_read() {
    let Some(py) = python3() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("threads.py");
    std::fs::write(
        &script,
        "import threading, time\n\
         def sleeper():\n    time.sleep(60)\n\
         for i in range(3):\n    threading.Thread(target=sleeper, name='sleeper%d' % i, daemon=True).start()\n\
         t = time.time()\n\
         while time.time() - t < 2.5:\n    sum(range(1000))\n",
    )
    .unwrap();
    for skip in ["1", "0"] {
        let out = dir.path().join(format!("rec{skip}.ndjson"));
        let lines = record_script(py, &script, "50", &[("GPUFEED_PY_IDLE_SKIP", skip)], &out);
        let stacks: std::collections::HashMap<u64, Vec<u64>> = lines
            .iter()
            .filter(|l| l["type"] == "py_stack")
            .map(|l| {
                let frames = l["frames"].as_array().unwrap();
                (
                    l["id"].as_u64().unwrap(),
                    frames.iter().map(|f| f.as_u64().unwrap()).collect(),
                )
            })
            .collect();
        let frame_names: std::collections::HashMap<u64, String> = lines
            .iter()
            .filter(|l| l["type"] == "py_frame")
            .map(|l| {
                (
                    l["id"].as_u64().unwrap(),
                    l["name"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        // Per sleeper: (readings, idle readings, whether every one is in `sleeper`).
        let mut sleepers: std::collections::BTreeMap<String, (u64, u64, bool)> = Default::default();
        let mut ticks = 0;
        for l in lines.iter().filter(|l| l["type"] == "py_samples") {
            ticks += l["ticks"].as_u64().unwrap();
            for t in l["threads"].as_array().unwrap() {
                let Some(name) = t["name"].as_str().filter(|n| n.starts_with("sleeper")) else {
                    continue;
                };
                let e = sleepers.entry(name.to_string()).or_insert((0, 0, true));
                for s in t["stacks"].as_array().unwrap() {
                    let (id, n, idle) = (
                        s[0].as_u64().unwrap(),
                        s[1].as_u64().unwrap(),
                        s[2].as_u64().unwrap(),
                    );
                    e.0 += n;
                    e.1 += idle;
                    e.2 &= stacks[&id].iter().any(|f| frame_names[f] == "sleeper");
                }
            }
        }
        assert!(ticks >= 40, "GPUFEED_PY_IDLE_SKIP={skip}: {ticks} readings");
        assert_eq!(
            sleepers.len(),
            3,
            "GPUFEED_PY_IDLE_SKIP={skip}: {sleepers:?}"
        );
        for (name, (n, idle, in_sleeper)) in &sleepers {
            assert!(*in_sleeper, "{name} always in sleeper()");
            assert_eq!(n, idle, "{name} idle at every reading (skip={skip})");
            // Counted at (nearly) every reading of the process: a thread started after the
            // first readings misses those.
            assert!(*n + 5 >= ticks, "{name}: {n} of {ticks} (skip={skip})");
        }
    }
}

/// A job started earlier with GPUFEED_STEP_SOCKET=PATH (its probe drops markers while nobody
/// listens) gets its steps recorded once `record --pid --step-socket PATH` attaches.
#[test]
fn record_pid_attaches_to_a_running_jobs_step_socket() {
    let Some(py) = python3() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("steps.sock");
    let mut job = probe_job(py, 300, 3, 1_000_000)
        .env("GPUFEED_STEP_SOCKET", &sock)
        .spawn()
        .unwrap();
    // The job runs a while with nobody listening.
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(!sock.exists());
    let rec = dir.path().join("r.ndjson");
    let out = gpufeed()
        .args([
            "record",
            "--duration",
            "2s",
            "--py-stacks",
            "off",
            "--format",
            "json",
        ])
        .arg("--pid")
        .arg(job.id().to_string())
        .arg("--step-socket")
        .arg(&sock)
        .arg("-o")
        .arg(&rec)
        .output()
        .unwrap();
    let _ = job.kill();
    let _ = job.wait();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("step markers: reading"), "{stderr}");
    let j = run_json(&out.stdout);
    let steps = j["steps"]["steps"].as_u64().unwrap_or(0);
    // 2 s of 20 ms steps (fewer on a loaded machine).
    assert!(steps >= 20, "{}", j["steps"]);
    assert_eq!(
        j["steps"]["items"].as_u64(),
        Some(3 * steps),
        "{}",
        j["steps"]
    );
    let text = std::fs::read_to_string(&rec).unwrap();
    assert!(text.contains(r#""type":"steps""#), "no steps line");
    assert!(!sock.exists(), "the socket is removed at exit");
}

#[test]
fn step_socket_over_a_file_that_is_not_a_socket_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    std::fs::write(&path, "keep me").unwrap();
    let out = gpufeed()
        .args([
            "record",
            "--duration",
            "1s",
            "--py-stacks",
            "off",
            "--step-socket",
        ])
        .arg(&path)
        .arg("-o")
        .arg(dir.path().join("r.ndjson"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("not a socket"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "keep me");
    assert!(!dir.path().join("r.ndjson").exists(), "nothing recorded");
}

/// A Python job that takes `steps` steps of 20 ms through the step probe (python/), each
/// reporting `items` samples and `wait_ns` of data wait.
fn probe_job(py: &str, steps: u32, items: u32, wait_ns: u64) -> std::process::Command {
    let mut c = std::process::Command::new(py);
    c.arg("-c")
        .arg(format!(
            "import sys, time\nsys.path.insert(0, sys.argv[1])\nimport gpufeed_probe as p\n\
             for i in range({steps}):\n    time.sleep(0.02)\n    p.step(items={items}, wait_ns={wait_ns})\n"
        ))
        .arg(repo().join("python"));
    c
}

/// A real PyTorch loop on the CPU: `workers` DataLoader workers, a dataset whose `__getitem__`
/// waits `sleep_ms` per sample (a read), a model of `width` channels, `steps` steps.
const TORCH_LOOP: &str = r#"
import sys, time, torch
from torch.utils.data import Dataset, DataLoader
workers, sleep_ms, width, steps = (float(a) for a in sys.argv[1:5])

class Jpegs(Dataset):
    def __len__(self):
        return 1 << 20
    def __getitem__(self, i):
        time.sleep(sleep_ms / 1000.0)
        return torch.randn(3, 32, 32), i % 10

if __name__ == "__main__":
    torch.set_num_threads(1)
    w = int(width)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, w, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(w, w, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(w * 32 * 32, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Jpegs(), batch_size=16, num_workers=int(workers))
    for step, (x, y) in enumerate(loader):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
        if step + 1 >= steps:
            break
"#;

/// `run --format json` of [`TORCH_LOOP`] with no NVML to load, and `diagnose --format json` of
/// its recording as a machine without an NVIDIA driver writes it (the header's `gpu_error` is
/// what the recorder writes when `libnvidia-ml.so.1` cannot be loaded; here the library is
/// pointed elsewhere, so that the test judges the same whatever GPU the test machine has).
fn run_torch_loop(py: &str, args: [&str; 4]) -> (Value, Value) {
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("train.py");
    std::fs::write(&job, TORCH_LOOP).unwrap();
    let rec = dir.path().join("r.ndjson");
    let out = run_ok(
        gpufeed()
            .args(["run", "--format", "json", "-o"])
            .arg(&rec)
            .args(["--", py])
            .arg(&job)
            .args(args),
    );
    let text = std::fs::read_to_string(&rec).unwrap();
    let (head, rest) = text.split_once('\n').unwrap();
    let mut h: Value = serde_json::from_str(head).unwrap();
    assert!(h["gpus"].as_array().is_none_or(|g| g.is_empty()), "{h}");
    h["gpu_error"] = "no NVIDIA driver found (libnvidia-ml.so.1 could not be loaded)".into();
    let no_driver = dir.path().join("no_driver.ndjson");
    std::fs::write(&no_driver, format!("{h}\n{rest}")).unwrap();
    (run_json(&out.stdout), diagnose_json(&no_driver))
}

/// Issue 25 item 3: a real loop loading in the training process, its `__getitem__` waiting 3 ms
/// per sample: worker processes are the first fix (more than the cores: the waits overlap), the
/// slow stage the next step, and no GPU-only setting where there is no GPU.
#[test]
fn real_torch_loading_in_the_loop_that_waits_gets_workers_first() {
    let Some(py) = crate::inject::torch_python() else {
        eprintln!("SKIPPED: no Python with PyTorch (set GPUFEED_TEST_PYTHON=/path/to/python): the real-PyTorch num_workers=0 loop did not run");
        return;
    };
    let (run, j) = run_torch_loop(&py, ["0", "3", "4", "120"]);
    for j in [&run, &j] {
        assert_eq!(j["verdict"]["id"], "input_bound", "{}", j["verdict"]);
        let f = &j["findings"][0];
        assert_eq!(f["evidence"]["kind"], "main_process_loading", "{f}");
        assert_eq!(f["evidence"]["hot_stage"], "Jpegs.__getitem__", "{f}");
        assert!(
            f["evidence"]["recommended_num_workers"].as_u64().unwrap() >= 2,
            "{f}"
        );
        let r = f["recommendation"].as_str().unwrap();
        assert!(r.starts_with("Load batches in worker processes: DataLoader(dataset, batch_size=..., num_workers="), "{r}");
        assert!(r.contains("waits overlap across workers"), "{r}");
        let then = r.find("Then, if it still waits: the dataset's own code (Jpegs.__getitem__");
        assert!(then.is_some(), "the slow stage is the next step: {r}");
    }
    // NVML failed to load from the path given: the machine may have a GPU, pin_memory stays.
    let r = run["findings"][0]["recommendation"].as_str().unwrap();
    assert!(r.contains("pin_memory=True"), "{r}");
    // No driver: no GPU-only setting.
    let f = &j["findings"][0];
    let n = f["evidence"]["recommended_num_workers"].as_u64().unwrap();
    let r = f["recommendation"].as_str().unwrap();
    assert!(
        r.starts_with(&format!(
            "Load batches in worker processes: DataLoader(dataset, batch_size=..., num_workers={n}, persistent_workers=True)"
        )),
        "{r}"
    );
    assert!(!r.contains("pin_memory"), "no GPU here: {r}");
}

/// Issue 25 item 6: a real loop with two workers that computes more than it loads (64 channels:
/// wide enough that its data wait stays far from 20% when the whole suite loads the machine), without a
/// GPU: a verdict from the loop's own phases, the GPU figures said to be not measured.
#[test]
fn real_torch_loop_that_computes_without_a_gpu_gets_a_verdict_from_the_loop() {
    let Some(py) = crate::inject::torch_python() else {
        eprintln!("SKIPPED: no Python with PyTorch (set GPUFEED_TEST_PYTHON=/path/to/python): the real-PyTorch two-worker loop did not run");
        return;
    };
    let (run, j) = run_torch_loop(&py, ["2", "0", "64", "60"]);
    for j in [&run, &j] {
        let v = &j["verdict"];
        let p = &j["python"]["main"]["phases_pct"];
        assert!(p["data_wait"].as_f64().unwrap() < 20.0, "{p}");
        assert_eq!(v["id"], "compute_bound", "{v} {p}");
        assert!(v["confidence"].as_f64().unwrap() <= 0.75, "{v}");
        assert!(v["gpu_busy_fraction"].is_null(), "{v}");
        let s = v["summary"].as_str().unwrap();
        assert!(
            s.starts_with("Not input-bound: the training loop waits for data only"),
            "{s}"
        );
        assert!(
            j["notes"].as_array().unwrap().iter().any(|n| n
                .as_str()
                .unwrap()
                .contains("the verdict comes from the training loop's own phases")),
            "{}",
            j["notes"]
        );
        assert!(
            !j["findings"].to_string().contains("pin_memory"),
            "{}",
            j["findings"]
        );
    }
    let s = j["verdict"]["summary"].as_str().unwrap();
    assert!(s.contains("GPU not measured: no NVIDIA driver"), "{s}");
}
