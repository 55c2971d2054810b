//! What happens to the job when gpufeed itself is SIGKILLed (issue 13, item 6), through the real
//! binary on real process trees:
//! - `sweep` / `batch-size` trials are gpufeed's own experiments: within 5 s of gpufeed's death no
//!   process of the trial's tree is left (the watchdog, see `job::watchdog`);
//! - `run` is the opposite choice: a three-day training job must not die because its monitor was
//!   OOM-killed, so the job keeps running.

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

fn gpufeed(mark: &str) -> Command {
    let mut c = Command::new(assert_cmd::cargo::cargo_bin("gpufeed"));
    c.env_remove("GPUFEED_NVML_LIB")
        .env_remove("FAKE_NVML_SCENARIO")
        .env("GPUFEED_TEST_MARK", mark);
    c
}

/// Live (not zombie) processes other than `except` whose environment carries the mark.
fn marked(mark: &str, except: u32) -> Vec<u32> {
    let needle = format!("GPUFEED_TEST_MARK={mark}");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| p != except)
        .filter(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, r)| r.trim_start().chars().next());
            !matches!(state, Some('Z') | Some('X') | None)
        })
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|kv| kv == needle.as_bytes()))
        })
        .collect()
}

fn wait_for(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) -> Duration {
    let t = Instant::now();
    while !ok() {
        assert!(t.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
    t.elapsed()
}

fn kill9(c: &mut Child) {
    // SAFETY: kill(2) on our own child.
    unsafe {
        libc::kill(c.id() as libc::pid_t, libc::SIGKILL);
    }
    c.wait().unwrap();
}

fn has_python() -> bool {
    Command::new("python3")
        .args(["-c", "import multiprocessing"])
        .status()
        .is_ok_and(|s| s.success())
}

/// The trial: `sh` with a background `sleep`, and Python with three multiprocessing workers.
fn trial_script() -> String {
    let py = if has_python() {
        "python3 -c 'import multiprocessing as mp, time\n\
         def f(_): time.sleep(60)\n\
         if __name__ == \"__main__\":\n    mp.Pool(3).map(f, range(3))' &"
    } else {
        eprintln!("SKIPPED the multiprocessing part: python3 not found");
        ""
    };
    format!("sleep 40 & {py} echo {{w}}; wait")
}

fn sigkilled_gpufeed_leaves_nothing(args: &[&str], dir: &Path, mark: &str) {
    let mut g = gpufeed(mark)
        .args(args)
        .arg("--output-dir")
        .arg(dir.join("out"))
        .args(["--min-time", "50s", "--max-time", "60s", "-q", "--"])
        .args(["sh", "-c", &trial_script()])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let gpid = g.id();
    let want = if has_python() { 6 } else { 2 };
    wait_for("the trial's tree", Duration::from_secs(20), || {
        marked(mark, gpid).len() >= want
    });
    let before = marked(mark, gpid);
    kill9(&mut g);
    let took = wait_for(
        "the trial's tree to go after gpufeed's SIGKILL",
        Duration::from_secs(5),
        || marked(mark, gpid).is_empty(),
    );
    eprintln!(
        "{}: {} processes gone {:?} after gpufeed's SIGKILL",
        args[0],
        before.len(),
        took
    );
}

#[test]
fn a_sigkilled_sweep_leaves_no_process_of_its_trial() {
    let d = tempfile::tempdir().unwrap();
    let mark = format!("sweep-{}", std::process::id());
    sigkilled_gpufeed_leaves_nothing(&["sweep", "-L", "w", "1,2"], d.path(), &mark);
}

#[test]
fn a_sigkilled_batch_size_leaves_no_process_of_its_trial() {
    let d = tempfile::tempdir().unwrap();
    let mark = format!("batch-{}", std::process::id());
    sigkilled_gpufeed_leaves_nothing(
        &["batch-size", "--param", "w", "--start", "2", "--max", "4"],
        d.path(),
        &mark,
    );
}

#[test]
fn a_sigkilled_run_leaves_its_job_running() {
    let d = tempfile::tempdir().unwrap();
    let done = d.path().join("done");
    let mark = format!("run-{}", std::process::id());
    let mut g = gpufeed(&mark)
        .args(["run", "-q", "-o"])
        .arg(d.path().join("r.ndjson"))
        .args(["--", "sh", "-c", "sleep 1.5; touch \"$0\""])
        .arg(&done)
        .spawn()
        .unwrap();
    let gpid = g.id();
    wait_for("the job", Duration::from_secs(10), || {
        !marked(&mark, gpid).is_empty()
    });
    kill9(&mut g);
    // The job finishes its work although its monitor is gone.
    wait_for(
        "the job to finish on its own",
        Duration::from_secs(10),
        || done.exists(),
    );
    // The recording it leaves is unfinished but readable.
    let rec = std::fs::read_to_string(d.path().join("r.ndjson")).unwrap();
    assert!(rec.starts_with("{\"type\":\"header\""));
    assert!(!rec.contains("\"type\":\"end\""));
}
