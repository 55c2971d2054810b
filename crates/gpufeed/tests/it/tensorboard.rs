//! `export --tensorboard` and `run --tensorboard`, read back with TensorBoard's own reader
//! (`EventAccumulator`) from a Python that has the `tensorboard` package: `GPUFEED_TEST_PYTHON`,
//! else `python3`; skipped loudly without one.

use crate::common::python_with;
use crate::{fake_gpu, gpufeed, gpufeed_no_gpu, h100_header, run_ok, usage_error};
use gpufeed::header_line;
use gpufeed::Phase;
use gpufeed::{End, Line, ProcsLine};
use gpufeed::{GpuSample, ProcSample, ProcStart};
use gpufeed::{PySamples, PyThreadCounts, StepsLine};
use predicates::prelude::*;
use serde_json::Value;
use std::io::Write as _;
use std::path::{Path, PathBuf};

const START_US: u64 = 1_764_676_800_000_000;

/// A Python that imports `tensorboard`, or `None` after saying so on stderr.
fn tb_python(what: &str) -> Option<String> {
    python_with("tensorboard", what)
}

/// What TensorBoard's `EventAccumulator` reads from `dir`: `{"scalars": {tag: [[step, value,
/// wall_time], ...]}, "text": {tag: "..."}}`.
fn read_back(py: &str, dir: &Path) -> Value {
    const SCRIPT: &str = r#"
import json, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
ea = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0, "tensors": 0})
ea.Reload()
tags = ea.Tags()
out = {"scalars": {}, "text": {}}
for t in tags["scalars"]:
    out["scalars"][t] = [[e.step, e.value, e.wall_time] for e in ea.Scalars(t)]
for t in tags["tensors"]:
    out["text"][t] = ea.Tensors(t)[-1].tensor_proto.string_val[0].decode()
print(json.dumps(out))
"#;
    let out = std::process::Command::new(py)
        .args(["-c", SCRIPT])
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// 20 s of a starving job: GPU 0 busy 30%, a main process and 2 workers, 5 steps ending every
/// 0.5 s from 2 s on (the first 2 s are start-up), each waiting 40% of its time for data, and the
/// training thread's Python samples (60% data wait, 40% forward).
fn recording(dir: &Path) -> PathBuf {
    let p = dir.join("rec.ndjson");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&p).unwrap());
    let mut h = h100_header("node1", 4, 1);
    h.start_unix_us = START_US;
    h.command = Some(vec!["python".into(), "train.py".into()]);
    h.pid = Some(100);
    h.py_rate_hz = Some(100.0);
    writeln!(f, "{}", header_line(&h)).unwrap();
    let mut line = |l: Line| writeln!(f, "{}", serde_json::to_string(&l).unwrap()).unwrap();
    for (pid, ppid) in [(100, 1), (101, 100), (102, 100)] {
        line(Line::ProcStart(ProcStart {
            t_s: 0.0,
            pid,
            ppid,
            cmd: Some("python train.py".into()),
            comm: Some("python".into()),
        }));
    }
    for k in 1..=40u64 {
        let t = k as f64 * 0.5;
        line(Line::Gpu(GpuSample {
            index: 0,
            t_s: t,
            util_samples: None,
            util_pct: Some(30.0),
            mem_used_bytes: Some(6 << 30),
            ..Default::default()
        }));
        line(Line::Procs(ProcsLine {
            t_s: t,
            procs: [(100, 40.0), (101, 90.0), (102, 80.0)]
                .into_iter()
                .map(|(pid, c)| ProcSample {
                    pid,
                    cpu_pct: Some(c),
                    ..Default::default()
                })
                .collect(),
        }));
        if t > 2.0 {
            line(Line::Steps(StepsLine {
                t_s: t,
                dt_s: 0.5,
                steps: 5,
                span_s: 0.5,
                wait_s: Some(0.2),
                items: Some(5 * 32),
                rank: None,
            }));
            line(Line::PySamples(PySamples {
                t_s: t,
                dt_s: 0.5,
                pid: 100,
                ticks: 50,
                threads: vec![PyThreadCounts {
                    tid: 100,
                    name: Some("MainThread".into()),
                    stacks: Vec::new(),
                    phases: [(Phase::DataWait, 30), (Phase::Forward, 20)]
                        .into_iter()
                        .collect(),
                    cpu_ns: None,
                    runq_ns: None,
                    gil_held: 0,
                    gil_free: Vec::new(),
                }],
            }));
        }
    }
    line(Line::End(End {
        t_s: 20.0,
        exit_code: Some(0),
        ..Default::default()
    }));
    f.flush().unwrap();
    drop(f);
    p
}

fn values(tb: &Value, tag: &str) -> Vec<(i64, f64)> {
    tb["scalars"][tag]
        .as_array()
        .unwrap_or_else(|| panic!("no scalar {tag}: {tb}"))
        .iter()
        .map(|e| (e[0].as_i64().unwrap(), e[1].as_f64().unwrap()))
        .collect()
}

#[test]
fn export_tensorboard_is_read_back_by_tensorboard_step_aligned() {
    let Some(py) = tb_python("export --tensorboard read back") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let rec = recording(dir.path());
    let tb = dir.path().join("runs/a");
    let out = run_ok(
        gpufeed()
            .args(["export", "--tensorboard"])
            .arg(&tb)
            .arg(&rec),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("tensorboard --logdir"), "{stderr}");
    let files: Vec<_> = std::fs::read_dir(&tb).unwrap().flatten().collect();
    assert_eq!(files.len(), 1);
    let name = files[0].file_name().to_string_lossy().into_owned();
    assert_eq!(name, "events.out.tfevents.1764676800.node1.000000.gpufeed");

    let got = read_back(&py, &tb);
    // Steps: 5 per 0.5 s from 2.5 s to 20 s, 180 timed (181 markers: the first starts the
    // clock); each point at the markers received by then.
    let steps = values(&got, "gpufeed/steps_per_s");
    assert_eq!(steps.last().unwrap().0, 181, "{steps:?}");
    assert!(steps.windows(2).all(|w| w[0].0 < w[1].0), "{steps:?}");
    for (_, v) in &steps {
        assert!((v - 10.0).abs() < 1e-6, "{steps:?}");
    }
    for (_, v) in values(&got, "gpufeed/data_wait_pct") {
        assert!((v - 40.0).abs() < 1e-4, "{v}");
    }
    for (_, v) in values(&got, "gpufeed/samples_per_s") {
        assert!((v - 320.0).abs() < 1e-3, "{v}");
    }
    let busy = values(&got, "gpufeed/gpu0/busy_pct");
    assert!(
        busy.iter().all(|(_, v)| (v - 30.0).abs() < 1e-6),
        "{busy:?}"
    );
    assert_eq!(busy.last().unwrap().0, 181);
    let mem = values(&got, "gpufeed/gpu0/mem_used_gib");
    assert!(mem.iter().all(|(_, v)| (v - 6.0).abs() < 1e-6), "{mem:?}");
    // The training thread's phases (after start-up, where it had no loop samples).
    let wait = values(&got, "gpufeed/phase/data_wait_pct");
    assert!((wait.last().unwrap().1 - 60.0).abs() < 1e-4, "{wait:?}");
    let fwd = values(&got, "gpufeed/phase/forward_pct");
    assert!((fwd.last().unwrap().1 - 40.0).abs() < 1e-4, "{fwd:?}");
    // CPU: the main process, and its two workers together (percent of one core).
    let main = values(&got, "gpufeed/cpu/main_pct");
    assert!(
        main.iter().all(|(_, v)| (v - 40.0).abs() < 1e-4),
        "{main:?}"
    );
    let workers = values(&got, "gpufeed/cpu/workers_pct");
    assert!(
        workers.iter().all(|(_, v)| (v - 170.0).abs() < 1e-3),
        "{workers:?}"
    );
    // The verdict and the top fix as text.
    let text = got["text"]["gpufeed/verdict"].as_str().unwrap();
    assert!(text.starts_with("**"), "{text}");
    assert!(text.contains("Fix:"), "{text}");

    // Exporting again replaces the file, it does not add one.
    run_ok(
        gpufeed()
            .args(["export", "--tensorboard"])
            .arg(&tb)
            .arg(&rec),
    );
    assert_eq!(std::fs::read_dir(&tb).unwrap().count(), 1);
}

#[test]
fn run_tensorboard_writes_a_real_jobs_steps_by_step() {
    let Some(py) = tb_python("run --tensorboard with the step probe") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let tb = dir.path().join("tb");
    let probe = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python");
    // 60 steps of 30 ms, each reporting 10 ms of data wait and 8 samples.
    let job = "import sys, time\nsys.path.insert(0, sys.argv[1])\nimport gpufeed_probe as p\n\
               for i in range(60):\n    time.sleep(0.03)\n    p.step(items=8, wait_ns=10_000_000)\n";
    let out = run_ok(
        gpufeed_no_gpu()
            .args(["run", "-q", "-o"])
            .arg(dir.path().join("r.ndjson"))
            .arg("--tensorboard")
            .arg(&tb)
            .args(["--", &py, "-c", job])
            .arg(&probe),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("tfevents"), "{stderr}");
    let got = read_back(&py, &tb);
    let steps = values(&got, "gpufeed/steps_per_s");
    assert_eq!(steps.last().unwrap().0, 60, "{steps:?}");
    let wait = values(&got, "gpufeed/data_wait_pct");
    for (_, v) in &wait {
        // 10 ms of each ~30 ms step.
        assert!((15.0..=40.0).contains(v), "{wait:?}");
    }
    assert!(got["text"]["gpufeed/verdict"].as_str().is_some(), "{got}");
}

/// One GPU busy 62% all the time (the fake NVML).
const BUSY_62: &str = r#"{"devices":[{"name":"NVIDIA H100 80GB HBM3","memory_total_bytes":85899345920,
    "memory_used_bytes":40000000000,"util":{"pattern":"constant","value":62}}]}"#;

/// The hooks' figures under `gpufeed run` are gpufeed's (docs/step-protocol.md, the reply
/// direction): a plain-Python loop through `gpufeed.accelerate.wrap` with a stand-in accelerator
/// logs GPU 0's busy % (which only gpufeed knows: the fake NVML's 62%) and gpufeed's steps/s and
/// data wait, at its logging cadence.
#[test]
fn run_answers_the_hooks_with_its_own_figures() {
    let dir = tempfile::tempdir().unwrap();
    let logged = dir.path().join("logged.json");
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python");
    // 60 batches: 20 ms fetching each, 10 ms training on it; logged every 20 batches.
    let job = "import json, sys, time\nsys.path.insert(0, sys.argv[1])\n\
               from gpufeed.accelerate import wrap\n\
               class Acc:\n    is_local_main_process = True\n    trackers = [None]\n    logged = []\n\
               \x20   def log(self, values, step=None):\n        self.logged.append([step, values])\n\
               def loader():\n    for i in range(60):\n        time.sleep(0.02)\n        yield [0] * 8\n\
               acc = Acc()\nfor b in wrap(loader(), acc, log_every=20):\n    time.sleep(0.01)\n\
               json.dump(acc.logged, open(sys.argv[2], 'w'))\n";
    run_ok(
        fake_gpu(&mut gpufeed(), dir.path(), BUSY_62)
            .args(["run", "-q", "--py-stacks", "off", "-o"])
            .arg(dir.path().join("r.ndjson"))
            .args(["--", "python3", "-c", job])
            .arg(&python)
            .arg(&logged),
    );
    let got: Value = serde_json::from_str(&std::fs::read_to_string(&logged).unwrap()).unwrap();
    let logs = got.as_array().unwrap();
    assert_eq!(logs.len(), 3, "{got}");
    for (i, l) in logs.iter().enumerate() {
        let v = &l[1];
        // The first log comes about 0.6 s in: on a loaded machine gpufeed may have no GPU reading
        // yet (then it says none, never a made-up one); by the second it has.
        match v["gpufeed/gpu0/busy_pct"].as_f64() {
            Some(busy) => assert!((busy - 62.0).abs() < 1e-6, "{got}"),
            None => assert_eq!(i, 0, "GPU busy from gpufeed: {got}"),
        }
        let sps = v["gpufeed/steps_per_s"].as_f64().unwrap();
        assert!((10.0..=40.0).contains(&sps), "{got}");
        let wait = v["gpufeed/data_wait_pct"].as_f64().unwrap();
        assert!((30.0..=95.0).contains(&wait), "{got}");
        assert!(v["gpufeed/samples_per_s"].as_f64().unwrap() > 50.0, "{got}");
    }
    assert_eq!(logs[2][0], 60, "{got}");
}

/// The same with real Lightning and its TensorBoard logger, read back by TensorBoard: the
/// callback's scalars under `gpufeed run` carry gpufeed's GPU busy.
#[test]
fn run_gives_lightning_gpufeeds_figures_in_tensorboard() {
    let Some(py) = python_with(
        "torch, lightning, tensorboard",
        "the Lightning figures under run",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("tb");
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python");
    let job = r#"
import sys, time
sys.path.insert(0, sys.argv[1])
import torch, lightning.pytorch as pl
from lightning.pytorch.loggers import TensorBoardLogger
from torch.utils.data import DataLoader, Dataset
from gpufeed.lightning import GpufeedCallback

class Slow(Dataset):
    def __len__(self):
        return 64
    def __getitem__(self, i):
        time.sleep(0.005)
        return torch.randn(3), torch.randn(1)

class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 1)
    def training_step(self, b, i):
        return torch.nn.functional.mse_loss(self.lin(b[0]), b[1])
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

pl.Trainer(max_epochs=1, accelerator="cpu", devices=1, enable_checkpointing=False,
           enable_progress_bar=False, enable_model_summary=False, log_every_n_steps=4,
           logger=TensorBoardLogger(sys.argv[2], name="run"),
           callbacks=[GpufeedCallback()]).fit(Model(), DataLoader(Slow(), batch_size=4))
"#;
    run_ok(
        fake_gpu(&mut gpufeed(), dir.path(), BUSY_62)
            .args(["run", "-q", "-o"])
            .arg(dir.path().join("r.ndjson"))
            .args(["--", &py, "-c", job])
            .arg(&python)
            .arg(&logs),
    );
    let got = read_back(&py, &logs.join("run/version_0"));
    let busy = values(&got, "gpufeed/gpu0/busy_pct");
    assert_eq!(busy.len(), 4, "{got}"); // 16 steps, every 4
    assert!(
        busy.iter().all(|(_, v)| (v - 62.0).abs() < 1e-6),
        "{busy:?}"
    );
    assert_eq!(values(&got, "gpufeed/steps_per_s").len(), 4, "{got}");
}

#[test]
fn export_needs_an_output_and_a_usable_directory() {
    usage_error(["export", "rec.ndjson"]).stderr(
        predicate::str::contains("--perfetto").and(predicate::str::contains("--tensorboard")),
    );
    usage_error([
        "export",
        "--tensorboard",
        "d",
        "--merge",
        "t.json",
        "rec.ndjson",
    ])
    .stderr(predicate::str::contains("--perfetto"));
    let dir = tempfile::tempdir().unwrap();
    let rec = recording(dir.path());
    // A file where the directory should be: a clear one-line error, exit 3, nothing written.
    let blocker = dir.path().join("file");
    std::fs::write(&blocker, "x").unwrap();
    let out = gpufeed()
        .args(["export", "--tensorboard"])
        .arg(&blocker)
        .arg(&rec)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("TensorBoard directory"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&blocker).unwrap(), "x");
    // Not a recording: refused before anything is created.
    let notrec = dir.path().join("x.txt");
    std::fs::write(&notrec, "hello\n").unwrap();
    let tb = dir.path().join("tb");
    let out = gpufeed()
        .args(["export", "--tensorboard"])
        .arg(&tb)
        .arg(&notrec)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(!tb.exists());
}

/// The exported file served by a real `tensorboard` on 127.0.0.1: its scalars API lists the
/// gpufeed tags, and its scalars page renders in headless Chromium (when installed).
#[test]
fn tensorboard_serves_the_export_and_its_page_renders() {
    let Some(py) = tb_python("the tensorboard server test") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let rec = recording(dir.path());
    let logs = dir.path().join("logs");
    run_ok(
        gpufeed()
            .args(["export", "--tensorboard"])
            .arg(logs.join("job"))
            .arg(&rec),
    );
    let port = crate::free_port();
    let server = std::process::Command::new(&py)
        .args(["-m", "tensorboard.main", "--host", "127.0.0.1", "--port"])
        .arg(port.to_string())
        .arg("--logdir")
        .arg(&logs)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let _server = crate::Reap(server);
    // The server loads the logdir in the background: wait for the tag to appear.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let tags = loop {
        match crate::http_get(port, "/data/plugin/scalars/tags") {
            Some(b) if b.contains("gpufeed/data_wait_pct") => break b,
            _ if std::time::Instant::now() > deadline => {
                panic!("tensorboard never listed the gpufeed tags")
            }
            _ => std::thread::sleep(std::time::Duration::from_millis(300)),
        }
    };
    let tags: Value = serde_json::from_str(&tags).unwrap();
    for t in [
        "gpufeed/gpu0/busy_pct",
        "gpufeed/steps_per_s",
        "gpufeed/cpu/workers_pct",
    ] {
        assert!(tags["job"][t].is_object(), "{t}: {tags}");
    }
    let series = crate::http_get(
        port,
        "/data/plugin/scalars/scalars?run=job&tag=gpufeed%2Fdata_wait_pct",
    )
    .unwrap();
    let series: Value = serde_json::from_str(&series).unwrap();
    let last = series.as_array().unwrap().last().unwrap().clone();
    assert_eq!(last[1], 181, "{series}");
    assert!((last[2].as_f64().unwrap() - 40.0).abs() < 1e-4, "{series}");

    let Some(chromium) = crate::which("chromium").or_else(|| crate::which("chromium-browser"))
    else {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: chromium is not installed: TensorBoard's page was not rendered"
        );
        return;
    };
    let png = dir.path().join("tb.png");
    let profile = tempfile::tempdir().unwrap();
    let st = std::process::Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--no-first-run",
            "--hide-scrollbars",
            "--window-size=1300,750",
            "--virtual-time-budget=20000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!(
            "http://127.0.0.1:{port}/?darkMode=false#scalars&tagFilter=gpufeed%2F"
        ))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    // A page with charts, not a blank or an error page (those are a few KB).
    let size = std::fs::metadata(&png).unwrap().len();
    assert!(size > 40_000, "{size} bytes");
}

/// Issue 39 item 10: `run --tensorboard` with a file, a folder that cannot be written or a
/// symlink there is refused (exit 2) before the job starts; it was found out after the job ended
/// (and the symlink was followed).
#[test]
fn run_checks_its_tensorboard_folder_before_the_job_starts() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, "x").unwrap();
    let real = dir.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    // /proc takes no files, not even from root; a 0555 folder stops everyone else
    let mut cases: Vec<(PathBuf, &str)> = vec![
        (file.clone(), "it is a file, not a folder"),
        (link, "is a symlink"),
        (PathBuf::from("/proc"), "cannot write in it"),
    ];
    let ro = dir.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    }
    if tempfile::tempfile_in(&ro).is_err() {
        cases.push((ro, "cannot write in it"));
    }
    for (tb, why) in cases {
        gpufeed_no_gpu()
            .current_dir(dir.path())
            .args(["run", "-q", "-o", "r.ndjson", "--tensorboard"])
            .arg(&tb)
            .args(["--", "sh", "-c", "touch ran"])
            .assert()
            .code(2)
            .stderr(predicate::str::contains(why));
        assert!(
            !dir.path().join("ran").exists(),
            "{tb:?}: the job never started"
        );
        assert!(!dir.path().join("r.ndjson").exists(), "{tb:?}");
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
    assert_eq!(
        std::fs::read_dir(&real).unwrap().count(),
        0,
        "nothing through the symlink"
    );
}

/// Issue 39 item 10: two runs writing to one `--tensorboard DIR` in the same second each keep
/// their own event file (they shared one name and one run's scalars were lost).
#[test]
fn two_runs_in_the_same_second_write_two_event_files() {
    let dir = tempfile::tempdir().unwrap();
    let tb = dir.path().join("tb");
    let start = |n: &str| {
        std::process::Command::new(assert_cmd::cargo::cargo_bin("gpufeed"))
            .args([
                "--nvml-lib",
                "/nonexistent/libnvidia-ml.so.1",
                "run",
                "-q",
                "-o",
            ])
            .arg(dir.path().join(n))
            .arg("--tensorboard")
            .arg(&tb)
            .args(["--", "sleep", "0.3"])
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let (mut a, mut b) = (start("a.ndjson"), start("b.ndjson"));
    assert!(a.wait().unwrap().success() && b.wait().unwrap().success());
    let names: Vec<String> = std::fs::read_dir(&tb)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.iter().all(|n| n.contains("tfevents")), "{names:?}");
}
