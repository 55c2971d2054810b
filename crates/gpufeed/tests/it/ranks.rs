//! Multi-process training jobs under `gpufeed run`, with real frameworks: torchrun with two
//! ranks (gloo, CPU), `accelerate launch` with two processes, and Lightning DDP with two. Each
//! job is `tests/data/ddp_train.py` (or its Lightning twin) with rank 1's loading made four
//! times heavier: rank 1 must be named as the one that starves the others, both ranks found, the
//! launcher never taken as the training loop.
//!
//! They need a Python with torch, torchvision and Pillow (`GPUFEED_TEST_PYTHON`, as the other
//! real-framework tests) and skip loudly without one; Lightning's and accelerate's tests also
//! skip loudly when the package is missing.

use crate::{gpufeed_no_gpu, read_json, run_ok};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// One multi-process job at a time: each keeps two cores busy.
static SERIAL: Mutex<()> = Mutex::new(());

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// The real-framework Python when it imports `modules`, else `None` after saying so on stderr.
fn python_with(modules: &str, what: &str) -> Option<String> {
    let python = std::env::var("GPUFEED_TEST_PYTHON").ok();
    let ok = python.as_ref().is_some_and(|p| {
        std::process::Command::new(p)
            .args(["-c", &format!("import {modules}")])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if !ok {
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: no GPUFEED_TEST_PYTHON that imports {modules}: {what} did not run"
        );
        return None;
    }
    python
}

/// Runs `cmd` under `gpufeed run` (no GPU driver) in `dir`, rank 1 slowed down, and returns
/// the run's JSON summary.
fn run_job(dir: &Path, cmd: &[String]) -> Value {
    let mut c = gpufeed_no_gpu();
    // The summary goes to a file: the job's own output is on stdout.
    c.current_dir(dir)
        .env("STEPS", "25")
        .env("SLOW_RANK", "1")
        .env("NUM_WORKERS", "0")
        .args(["run", "-q", "--export-json"])
        .arg(dir.join("run.json"))
        .arg("-o")
        .arg(dir.join("rec.ndjson"))
        .arg("--")
        .args(cmd)
        .timeout(std::time::Duration::from_secs(240));
    run_ok(&mut c);
    read_json(&dir.join("run.json"))
}

/// The verdict of a job whose rank 1 starves the other (no GPU: from the ranks' own loops):
/// input-bound, from the straggler finding, naming rank 1, whatever the median rank shows.
fn assert_straggler_verdict(v: &Value) {
    let verdict = &v["verdict"];
    assert_eq!(verdict["id"], "input_bound", "{verdict:#}");
    assert_eq!(verdict["finding"], "straggler", "{verdict:#}");
    assert!(
        verdict["summary"]
            .as_str()
            .unwrap()
            .starts_with("Input-bound: rank 1 starves the others"),
        "{verdict:#}"
    );
    assert!(
        verdict["confidence"].as_f64().unwrap() >= 0.7,
        "{verdict:#}"
    );
}

/// Both ranks found with rank 1 waiting for data the most and named as the straggler; the
/// loop shown is a rank's, never the launcher's; the verdict is input-bound from rank 1.
fn assert_ranks(v: &Value, launcher_word: &str) {
    assert_straggler_verdict(v);
    let p = &v["python"];
    let ranks = p["ranks"].as_array().expect("python.ranks[]");
    let found: Vec<u64> = ranks.iter().map(|r| r["rank"].as_u64().unwrap()).collect();
    assert_eq!(found, [0, 1], "{p:#}");
    let wait = |i: usize| ranks[i]["data_wait_pct"].as_f64().unwrap();
    assert!(wait(1) > wait(0) + 15.0, "rank 1 starves: {p:#}");
    assert!(wait(1) >= 40.0, "{p:#}");
    for r in ranks {
        assert!(
            r["samples"].as_u64().unwrap() >= 100,
            "full-rate reads: {r}"
        );
        assert!(r["phases_pct"]["backward"].as_f64().unwrap() > 0.0, "{r}");
    }
    assert_eq!(p["slow_rank"]["rank"], 1, "{p:#}");
    let main = p["main"]["pid"].as_u64().unwrap();
    let pids: Vec<u64> = ranks.iter().map(|r| r["pid"].as_u64().unwrap()).collect();
    assert!(pids.contains(&main), "main is a rank: {p:#}");
    let launcher = v["job"]["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["cmd"].as_str().is_some_and(|c| c.contains(launcher_word)))
        .expect("the launcher is in the tree");
    assert_ne!(launcher["pid"].as_u64(), Some(main), "{launcher}");
    assert!(
        !pids.contains(&launcher["pid"].as_u64().unwrap()),
        "{launcher}"
    );
    let f = crate::find_by(&v["findings"], "id", "straggler").expect("straggler finding");
    assert!(
        f["title"]
            .as_str()
            .unwrap()
            .starts_with("rank 1 starves the others"),
        "{f}"
    );
}

#[test]
fn torchrun_two_ranks_on_cpu_names_the_rank_that_starves_the_other() {
    let Some(python) = python_with("torch, torchvision, PIL", "the torchrun ranks test") else {
        return;
    };
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(data("ddp_train.py"), dir.path().join("ddp_train.py")).unwrap();
    let torchrun = Path::new(&python).with_file_name("torchrun");
    let mut cmd: Vec<String> = if torchrun.is_file() {
        vec![torchrun.display().to_string()]
    } else {
        vec![python.clone(), "-m".into(), "torch.distributed.run".into()]
    };
    cmd.extend(["--nproc_per_node", "2", "ddp_train.py"].map(String::from));
    let v = run_job(dir.path(), &cmd);
    assert_ranks(&v, "torch");
    // The script sends no step marker: each rank's DataLoader gives its own steps.
    let by_rank = v["steps"]["steps_per_s_by_rank"]
        .as_object()
        .unwrap_or_else(|| panic!("steps per rank: {:#}", v["steps"]));
    let mut ranks: Vec<&String> = by_rank.keys().collect();
    ranks.sort();
    assert_eq!(ranks, ["0", "1"], "{:#}", v["steps"]);
    // The recording holds each rank's environment.
    let rec = std::fs::read_to_string(dir.path().join("rec.ndjson")).unwrap();
    let ranked = rec
        .lines()
        .filter(|l| l.contains("\"py_status\"") && l.contains("\"world_size\":2"))
        .count();
    assert_eq!(ranked, 2, "one py_status line with its rank per rank");
}

#[test]
fn accelerate_launch_two_processes_on_cpu() {
    let Some(python) = python_with("torch, torchvision, PIL, accelerate", "the accelerate test")
    else {
        return;
    };
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(data("ddp_train.py"), dir.path().join("ddp_train.py")).unwrap();
    // `--multi_gpu` is accelerate's torchrun launcher; on a machine without a GPU the script's
    // own gloo process group runs on CPU (accelerate's `--cpu` starts one process only).
    let accelerate = Path::new(&python).with_file_name("accelerate");
    let cmd: Vec<String> = [
        accelerate.to_str().unwrap(),
        "launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "ddp_train.py",
    ]
    .map(String::from)
    .to_vec();
    let v = run_job(dir.path(), &cmd);
    assert_ranks(&v, "accelerate");
}

#[test]
fn lightning_ddp_two_processes_on_cpu_counts_the_relaunching_script_as_rank_0() {
    let Some(python) = python_with(
        "torch, torchvision, PIL, lightning",
        "the Lightning DDP test",
    ) else {
        return;
    };
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    for f in ["ddp_train.py", "ddp_lightning.py"] {
        std::fs::copy(data(f), dir.path().join(f)).unwrap();
    }
    // Rank 0 is the script itself (no rank variables); it starts rank 1 with LOCAL_RANK=1.
    let v = run_job(dir.path(), &[python, "ddp_lightning.py".into()]);
    let p = &v["python"];
    let ranks = p["ranks"].as_array().expect("python.ranks[]");
    let found: Vec<u64> = ranks.iter().map(|r| r["rank"].as_u64().unwrap()).collect();
    assert_eq!(found, [0, 1], "{p:#}");
    assert_eq!(
        Some(ranks[0]["pid"].as_u64().unwrap()),
        v["job"]["pid"].as_u64()
    );
    let wait = |i: usize| ranks[i]["data_wait_pct"].as_f64().unwrap();
    assert!(wait(1) > wait(0) + 15.0, "rank 1 starves: {p:#}");
    assert_eq!(p["slow_rank"]["rank"], 1, "{p:#}");
    assert!(crate::find_by(&v["findings"], "id", "straggler").is_some());
    assert_straggler_verdict(&v);
}

/// Issue 47 item 4: a job whose step markers each name a new rank (20 s of them took `run` to
/// 297 MB, the recording to 348 MB and the JSON report to 89 MB). Only the first 1,024 ranks
/// are followed apart; the rest are counted and said. A recording written with more ranks
/// (another tool, an older gpufeed) is bounded the same way when read.
#[test]
fn step_markers_of_countless_ranks_stay_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("ranks.py");
    std::fs::write(
        &job,
        r#"import os, socket, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
path = os.environ["GPUFEED_STEP_SOCKET"]
for r in range(0, 6000, 40):
    t = time.monotonic_ns()
    msg = "".join("step %d 0 1 %d\nstep %d 0 1 %d\n" % (t, i, t + 1000, i) for i in range(r, r + 40))
    s.sendto(msg.encode(), path)
    time.sleep(0.001)
"#,
    )
    .unwrap();
    let rec = dir.path().join("r.ndjson");
    run_ok(
        gpufeed_no_gpu()
            .args(["run", "-q", "--py-stacks", "off", "-o"])
            .arg(&rec)
            .args(["--", "python3"])
            .arg(&job),
    );
    let text = std::fs::read_to_string(&rec).unwrap();
    let mut ranks = std::collections::BTreeSet::new();
    let mut end = Value::Null;
    for l in text.lines() {
        let v: Value = serde_json::from_str(l).unwrap();
        if v["type"] == "steps" {
            ranks.insert(v["rank"].as_u64());
        } else if v["type"] == "end" {
            end = v;
        }
    }
    assert!(ranks.len() <= 1024, "{} ranks followed apart", ranks.len());
    assert_eq!(end["steps_unfollowed"], 2 * (6000 - 1024), "{end}");
    assert_eq!(end["ranks_unfollowed"], 6000 - 1024, "{end}");
    let json = dir.path().join("r.json");
    let out = run_ok(
        gpufeed_no_gpu()
            .arg("diagnose")
            .arg(&rec)
            .args(["--color", "never"]),
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("step markers of 4976 ranks beyond the first 1024 were counted"),
        "{said}"
    );
    // Read back with 5,000 ranks of step lines, as another writer could have made it.
    let mut many = String::new();
    for (i, l) in text.lines().enumerate() {
        many.push_str(l);
        many.push('\n');
        if i == 0 {
            for r in 0..5000 {
                many.push_str(&format!(
                    "{{\"type\":\"steps\",\"t_s\":1.0,\"dt_s\":1.0,\"steps\":2,\"span_s\":0.5,\"rank\":{r}}}\n"
                ));
            }
        }
    }
    let big = dir.path().join("many.ndjson");
    std::fs::write(&big, many).unwrap();
    run_ok(
        gpufeed_no_gpu()
            .arg("diagnose")
            .arg(&big)
            .args(["--format", "json", "--export-json"])
            .arg(&json),
    );
    let v = read_json(&json);
    let by_rank = v["steps"]["steps_per_s_by_rank"].as_object().unwrap();
    assert!(
        by_rank.len() <= 1024,
        "{} ranks in the report",
        by_rank.len()
    );
    let notes = v["notes"].to_string();
    assert!(notes.contains("beyond the first 1024"), "{notes}");
}
