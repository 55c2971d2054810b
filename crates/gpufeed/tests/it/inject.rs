//! `--dataloader` / `--torch` through the real binary on real CPython jobs. A stand-in `torch`
//! package (tests/data/fake_torch: DataLoader with PyTorch's argument checks, the global switches)
//! makes these run without PyTorch; the last test uses real PyTorch (CPU) when it is installed
//! (`GPUFEED_TEST_PYTHON=/path/to/python`, else `python3` if it can `import torch`) and skips loudly
//! otherwise.

pub(crate) use crate::common::torch_python;
use crate::{read_json, run_ok};
use assert_cmd::Command;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Sweeps measure throughput: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

fn fake_torch() -> String {
    data().join("fake_torch").display().to_string()
}

fn has_python() -> bool {
    let ok = std::process::Command::new("python3")
        .arg("-c")
        .arg("pass")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("SKIPPED: no python3 on PATH: the --dataloader/--torch tests did not run");
    }
    ok
}

/// gpufeed, run from tests/data (so sites read `inject_job.py:N`), with the stand-in torch on
/// PYTHONPATH.
fn gpufeed(pythonpath: &str) -> Command {
    let mut c = Command::cargo_bin("gpufeed").unwrap();
    c.env_remove("GPUFEED_NVML_LIB")
        .env_remove("FAKE_NVML_SCENARIO")
        .env_remove("GPUFEED_STEP_SOCKET")
        .env("PYTHONPATH", pythonpath)
        .current_dir(data());
    c
}

/// `inject_job.py:N`, N the line holding `marker`.
fn site(marker: &str) -> String {
    let text = std::fs::read_to_string(data().join("inject_job.py")).unwrap();
    let n = text
        .lines()
        .position(|l| l.contains(marker))
        .expect("marker in inject_job.py")
        + 1;
    format!("inject_job.py:{n}")
}

/// The JSON summary: the last line of stdout.
fn summary(out: &[u8]) -> Value {
    let s = String::from_utf8_lossy(out);
    serde_json::from_str(s.lines().last().expect("a JSON line")).unwrap()
}

#[test]
fn run_overrides_a_hard_coded_dataloader_and_reports_its_site() {
    if !has_python() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("seen.json");
    let rec = dir.path().join("rec.ndjson");
    let out = run_ok(
        gpufeed(&fake_torch())
            .args(["run", "--format", "json", "-o"])
            .arg(&rec)
            .args([
                "--dataloader",
                "num_workers=3",
                "--dataloader",
                "pin_memory=1",
                "--torch",
                "cudnn_benchmark=1",
                "--torch",
                "matmul_precision=high",
                "--",
                "python3",
                "inject_job.py",
            ])
            .arg(&seen)
            .arg("plain"),
    );
    // The job saw gpufeed's values instead of its own.
    let s = read_json(&seen);
    assert_eq!(s["num_workers"], 3);
    assert_eq!(s["pin_memory"], true);
    assert_eq!(s["batch_size"], 4, "not asked for: left alone");
    assert_eq!(s["cudnn_benchmark"], true);
    assert_eq!(s["matmul_precision"], "high");
    // And gpufeed says so, with the DataLoader's file:line.
    let j = summary(&out.stdout);
    let ov = j["overrides"].as_array().unwrap();
    let at = site("SITE-PLAIN");
    assert!(
        ov.iter().any(|o| o["target"] == "DataLoader"
            && o["key"] == "num_workers"
            && o["value"] == 3
            && o["original"] == 0
            && o["site"] == at.as_str()),
        "{j}"
    );
    assert!(
        ov.iter().any(|o| o["target"] == "torch.backends.cudnn"
            && o["key"] == "benchmark"
            && o["original"] == false
            && o["site"].is_null()),
        "{j}"
    );
    assert!(
        ov.iter()
            .any(|o| o["key"] == "matmul_precision" && o["original"] == "highest"),
        "{j}"
    );
    assert!(j.get("override_notes").is_none(), "{j}");
    // The recording keeps them: the text summary and the HTML report of the same run show them.
    let out = gpufeed(&fake_torch())
        .args(["run", "-o"])
        .arg(dir.path().join("rec2.ndjson"))
        .arg("--html")
        .arg(dir.path().join("r.html"))
        .args([
            "--dataloader",
            "num_workers=3",
            "--",
            "python3",
            "inject_job.py",
        ])
        .arg(&seen)
        .arg("plain")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    let line = format!("DataLoader(num_workers=3) at {at}, was 0");
    assert!(
        text.contains("overridden (--dataloader/--torch):"),
        "{text}"
    );
    assert!(text.contains(&line), "{text}");
    let html = std::fs::read_to_string(dir.path().join("r.html")).unwrap();
    assert!(html.contains("Overridden with --dataloader / --torch"));
    assert!(html.contains(&line), "the HTML lists it too");
}

#[test]
fn pytorch_rules_are_kept_and_what_cannot_apply_is_said() {
    if !has_python() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("seen.json");
    // num_workers=0 on a loader created with prefetch_factor=2, persistent_workers=True: PyTorch
    // would raise, so those go back to their defaults; a batch_sampler rules out batch_size.
    let out = gpufeed(&fake_torch())
        .args(["run", "--format", "json", "-o"])
        .arg(dir.path().join("rec.ndjson"))
        .args([
            "--dataloader",
            "num_workers=0",
            "--dataloader",
            "batch_size=64",
            "--",
            "python3",
            "inject_job.py",
        ])
        .arg(&seen)
        .arg("rules")
        .output()
        .unwrap();
    assert!(out.status.success(), "the job must not crash: {out:?}");
    let s = read_json(&seen);
    assert_eq!(s["num_workers"], 0);
    assert_eq!(s["prefetch_factor"], Value::Null);
    assert_eq!(s["persistent_workers"], false);
    assert_eq!(s["batch_size"], 64);
    assert_eq!(s["sampler_batch_size"], 1, "left alone");
    let j = summary(&out.stdout);
    let ov = j["overrides"].as_array().unwrap();
    let rules = site("SITE-RULES");
    let reset = ov
        .iter()
        .find(|o| o["key"] == "persistent_workers")
        .unwrap_or_else(|| panic!("{j}"));
    assert_eq!(reset["site"], rules.as_str());
    assert_eq!(reset["original"], true);
    assert!(reset["reason"]
        .as_str()
        .unwrap()
        .contains("num_workers > 0"));
    let notes: Vec<&str> = j["override_notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    let sampler = site("SITE-SAMPLER");
    assert!(
        notes.iter().any(|n| n.contains(&format!(
            "DataLoader at {sampler}: batch_size=64 not applied: left alone: it has a batch_sampler"
        ))),
        "{notes:?}"
    );
}

#[test]
fn what_an_old_torch_does_not_take_is_a_note_not_a_crash() {
    if !has_python() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let old = data().join("fake_torch_old").display().to_string();
    let prog = "from torch.utils.data import DataLoader; d = DataLoader([1, 2], num_workers=0); print(d.num_workers)";
    let out = run_ok(
        gpufeed(&old)
            .args(["run", "--format", "json", "-o"])
            .arg(dir.path().join("rec.ndjson"))
            .args([
                "--dataloader",
                "num_workers=2",
                "--dataloader",
                "persistent_workers=1",
                "--torch",
                "matmul_precision=high",
                "--torch",
                "cudnn_benchmark=1",
                "--",
                "python3",
                "-c",
                prog,
            ]),
    );
    // The job's own output: on stderr, as stdout holds the JSON alone.
    assert!(String::from_utf8_lossy(&out.stderr)
        .lines()
        .any(|l| l == "2"));
    let j = summary(&out.stdout);
    assert_eq!(j["overrides"][0]["key"], "num_workers", "{j}");
    assert_eq!(j["overrides"].as_array().unwrap().len(), 1, "{j}");
    let notes = j["override_notes"].to_string();
    for want in [
        "persistent_workers=True not applied: this torch's DataLoader has no persistent_workers argument",
        "matmul_precision='high' not applied: this torch has no set_float32_matmul_precision",
        "cudnn_benchmark=True not applied: this torch refused it",
    ] {
        assert!(notes.contains(want), "{want}: {notes}");
    }
}

#[test]
fn chains_to_the_sitecustomize_that_was_there() {
    if !has_python() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let marker = dir.path().join("marker");
    std::fs::write(
        other.join("sitecustomize.py"),
        format!(
            "import sys\nopen({:?}, 'w').write('ran')\nsys.path.append('/gpufeed-test-added')\nORIGINAL = True\n",
            marker.display().to_string()
        ),
    )
    .unwrap();
    let seen = dir.path().join("seen.json");
    let pp = format!("{}:{}", other.display(), fake_torch());
    run_ok(
        gpufeed(&pp)
            .args(["run", "-q", "-o"])
            .arg(dir.path().join("rec.ndjson"))
            .args([
                "--dataloader",
                "num_workers=2",
                "--",
                "python3",
                "-c",
                "import sys, sitecustomize, runpy; \
             assert getattr(sitecustomize, 'ORIGINAL', False), 'the original is the module'; \
             assert '/gpufeed-test-added' in sys.path; \
             sys.argv = ['inject_job.py', sys.argv[1], 'plain']; \
             runpy.run_path('inject_job.py', run_name='__main__')",
            ])
            .arg(&seen),
    );
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "ran");
    assert_eq!(read_json(&seen)["num_workers"], 2, "and the patch applied");
}

#[test]
fn other_programs_are_left_alone() {
    if !has_python() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // A Python program that does not use torch: torch is never imported (though it is on the
    // path), its output is its own, and gpufeed says the flags changed nothing.
    let prog =
        "import sys; print('torch' in sys.modules, sorted(m for m in sys.modules if 'torch' in m))";
    // `gpufeed run --format json` of `job` with the override `flags`, recorded to `rec`.
    let run = |rec: &str, flags: [&str; 2], job: &[&str]| {
        gpufeed(&fake_torch())
            .args(["run", "--format", "json", "-o"])
            .arg(dir.path().join(rec))
            .args(flags)
            .arg("--")
            .args(job)
            .output()
            .unwrap()
    };
    let dataloader = ["--dataloader", "num_workers=2"];
    let out = run("a.ndjson", dataloader, &["python3", "-c", prog]);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.lines().any(|l| l == "False []"), "{stderr}");
    let j = summary(&out.stdout);
    assert!(j.get("overrides").is_none(), "{j}");
    assert!(
        j["override_notes"][0]
            .as_str()
            .unwrap()
            .contains("the job never imported torch"),
        "{j}"
    );
    // A torch job that creates no DataLoader.
    let out = run("c.ndjson", dataloader, &["python3", "-c", "import torch"]);
    let j = summary(&out.stdout);
    assert_eq!(
        j["override_notes"][0],
        "--dataloader changed nothing: the job created no torch.utils.data.DataLoader",
        "{j}"
    );
    // A job that is not Python at all.
    let torch = ["--torch", "allow_tf32=1"];
    let out = run("b.ndjson", torch, &["sh", "-c", "echo hello; exit 3"]);
    assert_eq!(out.status.code(), Some(3), "its exit code passes through");
    assert!(String::from_utf8_lossy(&out.stderr)
        .lines()
        .any(|l| l == "hello"));
    let j = summary(&out.stdout);
    assert!(
        j["override_notes"][0]
            .as_str()
            .unwrap()
            .contains("no Python process of the job loaded gpufeed's sitecustomize"),
        "{j}"
    );
}

#[test]
fn bad_keys_and_values_are_usage_errors() {
    for args in [
        vec!["--dataloader", "workers=4"],
        vec!["--dataloader", "num_workers=lots"],
        vec!["--torch", "matmul_precision=fast"],
        vec!["--dataloader", "num_workers={w}"],
    ] {
        let out = Command::cargo_bin("gpufeed")
            .unwrap()
            .arg("run")
            .args(&args)
            .args(["--", "true"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    // In a sweep every value is checked before the first trial.
    let out = Command::cargo_bin("gpufeed")
        .unwrap()
        .args(["sweep", "-L", "w", "2,x", "--dataloader", "num_workers={w}"])
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("num_workers=x"));
}

fn sweep_args(dir: &Path, python: &str, job: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = [
        "sweep",
        "-L",
        "w",
        "0,2",
        "--dataloader",
        "num_workers={w}",
        "--rate-regex",
        r"rate: ([0-9.]+) batches/s",
        "--rate-unit",
        "batches/s",
        "--format",
        "json",
        "-q",
    ]
    .map(String::from)
    .to_vec();
    v.push("--output-dir".into());
    v.push(dir.display().to_string());
    v.push("--".into());
    v.push(python.into());
    v.extend(job.iter().map(|s| s.to_string()));
    v
}

#[test]
fn a_sweep_over_an_injected_knob_reports_each_override() {
    if !has_python() {
        return;
    }
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("seen.json").display().to_string();
    let mut args = sweep_args(dir.path(), "python3", &["inject_job.py", &seen, "sweep"]);
    args.splice(
        1..1,
        ["--min-time", "1s", "--max-time", "10s"].map(String::from),
    );
    let out = gpufeed(&fake_torch()).args(&args).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let rep: Value = serde_json::from_slice(&out.stdout).unwrap();
    let at = site("SITE-PLAIN");
    for (r, w) in rep["results"].as_array().unwrap().iter().zip([0, 2]) {
        let ov = &r["overrides"][0];
        assert_eq!(
            (
                ov["key"].as_str(),
                ov["value"].as_i64(),
                ov["original"].as_i64()
            ),
            (Some("num_workers"), Some(w), Some(0)),
            "{r}"
        );
        assert_eq!(ov["site"], at.as_str());
    }
    assert_eq!(rep["sweet_spot"]["parameters"]["w"], 2, "{rep}");
    // The table shows them.
    let table = std::fs::read_to_string(dir.path().join("sweep.json")).unwrap();
    assert!(table.contains("num_workers"));
    // A second sweep needs a folder of its own (one holding trial recordings is refused).
    let dir2 = dir.path().join("text");
    let first_dir = dir.path().display().to_string();
    let out = gpufeed(&fake_torch())
        .args(args.iter().map(|a| {
            if a == "json" {
                "text".to_string()
            } else if *a == first_dir {
                dir2.display().to_string()
            } else {
                a.clone()
            }
        }))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines().next().unwrap().ends_with("overridden"),
        "{text}"
    );
    assert!(
        text.contains(&format!("DataLoader(num_workers=2) at {at}, was 0")),
        "{text}"
    );
}

#[test]
fn a_sweep_whose_override_never_applies_says_so() {
    if !has_python() {
        return;
    }
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut args = sweep_args(dir.path(), "python3", &["inject_job.py", "-", "notorch"]);
    args.splice(
        1..1,
        ["--min-time", "1s", "--max-time", "5s"].map(String::from),
    );
    let out =
        run_ok(
            gpufeed(&fake_torch()).args(args.iter().map(|a| if a == "json" { "text" } else { a })),
        );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("No sweet spot: the overrides never took effect (--dataloader changed nothing: the job never imported torch)"),
        "{text}"
    );
    assert!(!text.contains("Sweet spot:"), "{text}");
    let rep = read_json(&dir.path().join("sweep.json"));
    assert!(rep["sweet_spot"].is_null());
    assert!(rep["overrides_never_applied"].is_string());
    assert_eq!(rep["results"][0]["overrides"], serde_json::json!([]));
}

#[test]
fn batch_size_searches_an_injected_batch_size() {
    if !has_python() {
        return;
    }
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("seen.json").display().to_string();
    // A batch-size search of the injected DataLoader batch_size from `start` to `max`.
    let search = |start: &str, max: &str, out_dir: &Path| {
        let mut c = gpufeed(&fake_torch());
        c.args([
            "batch-size",
            "--param",
            "bs",
            "--start",
            start,
            "--max",
            max,
        ])
        .args(["--dataloader", "batch_size={bs}"])
        .args(["--min-time", "1s", "--max-time", "4s"])
        .args(["--rate-regex", r"rate: ([0-9.]+) batches/s", "-q"])
        .arg("--output-dir")
        .arg(out_dir)
        .args(["--", "python3", "inject_job.py", &seen, "batch"]);
        c
    };
    run_ok(&mut search("4", "64", dir.path()));
    // The job's own batch_size is 4: only the injected value can make it run out of memory.
    let rep = read_json(&dir.path().join("batch-size.json"));
    assert_eq!(
        (rep["max_batch"].as_u64(), rep["first_oom_batch"].as_u64()),
        (Some(16), Some(17)),
        "{rep}"
    );
    let out = search("16", "16", &dir.path().join("again"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!(
            "batch 16 overridden: DataLoader(batch_size=16) at {}, was 4",
            site("SITE-PLAIN")
        )),
        "{text}"
    );
}

/// Children of the recording's root process seen in it.
/// The Python child processes of the job's root (DataLoader workers: forks with the root's own
/// command line, or started by multiprocessing). A short-lived helper a library runs at import
/// (`ldconfig -p` under ctypes' `find_library`, say) is no worker: a loaded machine records it
/// more often.
fn child_processes(recording: &Path) -> usize {
    let text = std::fs::read_to_string(recording).unwrap();
    let mut lines = text.lines();
    let header: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    let root = header["pid"].as_u64().unwrap();
    let starts: Vec<Value> = lines
        .map(|l| serde_json::from_str(l).unwrap_or(Value::Null))
        .filter(|v| v["type"] == "proc_start")
        .collect();
    let root_cmd = starts
        .iter()
        .find(|v| v["pid"].as_u64() == Some(root))
        .and_then(|v| v["cmd"].as_str())
        .unwrap_or_default()
        .to_string();
    let mut pids = std::collections::BTreeSet::new();
    for v in &starts {
        let cmd = v["cmd"].as_str().unwrap_or_default();
        let python_child = cmd == root_cmd || cmd.contains("multiprocessing");
        if v["ppid"].as_u64() == Some(root) && python_child {
            pids.insert(v["pid"].as_u64().unwrap());
        }
    }
    pids.len()
}

#[test]
fn real_pytorch_sweep_over_num_workers_finds_workers_faster() {
    let Some(python) = torch_python() else {
        eprintln!(
            "SKIPPED: no Python with PyTorch (set GPUFEED_TEST_PYTHON=/path/to/python): the real-PyTorch --dataloader sweep did not run"
        );
        return;
    };
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut args = sweep_args(dir.path(), &python, &["inject_torch_loader.py"]);
    // Importing torch takes seconds on a loaded machine: the warm-up detection cuts it off.
    args.splice(
        1..1,
        ["--min-time", "4s", "--max-time", "90s"].map(String::from),
    );
    let out = gpufeed("").args(&args).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let rep: Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = rep["results"].as_array().unwrap();
    let tput = |i: usize| r[i]["throughput"]["value"].as_f64().unwrap();
    let ratio = tput(1) / tput(0);
    eprintln!(
        "real PyTorch: num_workers=0 {:.1} batches/s, num_workers=2 {:.1} batches/s ({ratio:.2}x)",
        tput(0),
        tput(1)
    );
    assert!(ratio > 1.3, "{rep}");
    for (i, w) in [0, 2].into_iter().enumerate() {
        let ov = &r[i]["overrides"][0];
        assert_eq!(ov["value"], w, "{}", r[i]);
        assert_eq!(ov["original"], 0);
        assert_eq!(ov["site"], "inject_torch_loader.py:19", "{}", r[i]);
    }
    let rec = |i: usize| PathBuf::from(r[i]["recording"].as_str().unwrap());
    assert_eq!(child_processes(&rec(0)), 0, "no worker at num_workers=0");
    assert!(
        child_processes(&rec(1)) >= 2,
        "two DataLoader workers in the recording"
    );
    assert_eq!(
        rep["sweet_spot"]["parameters"]["w"], 2,
        "{:#}",
        rep["sweet_spot"]
    );
}

#[test]
fn watch_says_what_it_overrode_when_the_view_closes() {
    if !has_python() {
        return;
    }
    if std::process::Command::new("tmux")
        .arg("-V")
        .output()
        .is_err()
    {
        eprintln!(
            "SKIPPED watch_says_what_it_overrode_when_the_view_closes: tmux is not installed"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("run.sh");
    std::fs::write(
        &script,
        format!(
            "cd '{data}' && PYTHONPATH='{pp}' '{bin}' watch --job-log '{log}' --dataloader num_workers=3 -- python3 inject_job.py '{seen}' plain; echo EXIT=$?; sleep 30\n",
            data = data().display(),
            pp = fake_torch(),
            bin = assert_cmd::cargo::cargo_bin("gpufeed").display(),
            log = dir.path().join("job.log").display(),
            seen = dir.path().join("seen.json").display(),
        ),
    )
    .unwrap();
    let socket = format!("gpufeed-inject-test-{}", std::process::id());
    let tmux = |args: &[&str]| {
        std::process::Command::new("tmux")
            .args(["-L", &socket])
            .args(args)
            .output()
            .expect("tmux runs")
    };
    struct Kill<F: Fn()>(F);
    impl<F: Fn()> Drop for Kill<F> {
        fn drop(&mut self) {
            (self.0)()
        }
    }
    let _kill = Kill(|| {
        let _ = tmux(&["kill-server"]);
    });
    let out = tmux(&[
        "new-session",
        "-d",
        "-s",
        "w",
        "-x",
        "160",
        "-y",
        "40",
        "sh",
        script.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let wait_for = |what: &str| {
        let end = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let pane = String::from_utf8_lossy(&tmux(&["capture-pane", "-p", "-t", "w"]).stdout)
                .to_string();
            if pane.contains(what) {
                return pane;
            }
            assert!(
                std::time::Instant::now() < end,
                "{what:?} never appeared:\n{pane}"
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    };
    // The job ran with the override (it writes what its DataLoader got), then q closes the view.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !dir.path().join("seen.json").exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    wait_for("Job");
    tmux(&["send-keys", "-t", "w", "q"]);
    let pane = wait_for("EXIT=");
    assert_eq!(read_json(&dir.path().join("seen.json"))["num_workers"], 3);
    assert!(
        pane.contains(&format!(
            "DataLoader(num_workers=3) at {}, was 0",
            site("SITE-PLAIN")
        )),
        "{pane}"
    );
}
