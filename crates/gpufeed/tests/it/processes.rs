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

/// A trial that starts a daemon the classic way: fork, `setsid`, fork again, the middle process
/// exits (issue 27, item 3). The daemon writes its pid to `$0` and runs for a minute.
fn double_forking_trial(pidfile: &Path, then: &str) -> Vec<String> {
    let py = "import os, sys, time\n\
              if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        \
              open(sys.argv[1], 'w').write(str(os.getpid()))\n        time.sleep(60)\n    \
              os._exit(0)\n\
              os.wait()\n";
    // `{w}`: the sweep's knob must appear in the command.
    let sh = format!("python3 -c \"$1\" \"$0\"; : {{w}}; {then}");
    vec![
        "sh".into(),
        "-c".into(),
        sh,
        pidfile.display().to_string(),
        py.into(),
    ]
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .and_then(|(_, r)| r.trim_start().chars().next())
            .is_some_and(|st| st != 'Z' && st != 'X')
    })
}

fn daemon_pid(pidfile: &Path) -> u32 {
    wait_for("the daemon's pid", Duration::from_secs(20), || {
        std::fs::read_to_string(pidfile).is_ok_and(|s| s.trim().parse::<u32>().is_ok())
    });
    std::fs::read_to_string(pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn a_double_forked_daemon_does_not_outlive_its_trial() {
    if !has_python() {
        eprintln!("SKIPPED: python3 not found (the daemon double-forks with os.fork)");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    // (how the trial ends, what the job does after starting its daemon, signal to gpufeed)
    let cases = [
        ("normal end", "sleep 0.5", None),
        ("--max-time", "sleep 30", None),
        ("SIGTERM to gpufeed", "sleep 30", Some(libc::SIGTERM)),
        ("SIGINT to gpufeed", "sleep 30", Some(libc::SIGINT)),
    ];
    for (i, (how, then, sig)) in cases.into_iter().enumerate() {
        let pidfile = d.path().join(format!("daemon{i}.pid"));
        let mark = format!("daemon-{}-{i}", std::process::id());
        let mut g = gpufeed(&mark)
            .args([
                "sweep",
                "-L",
                "w",
                "1",
                "--min-time",
                "1s",
                "--max-time",
                "3s",
            ])
            .arg("--output-dir")
            .arg(d.path().join(format!("out{i}")))
            .args(["-q", "--"])
            .args(double_forking_trial(&pidfile, then))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let daemon = daemon_pid(&pidfile);
        assert!(alive(daemon), "{how}: the daemon never ran");
        if let Some(sig) = sig {
            // SAFETY: kill(2) on our own child.
            unsafe {
                libc::kill(g.id() as libc::pid_t, sig);
            }
        }
        let t = Instant::now();
        g.wait().unwrap();
        let gone = !alive(daemon);
        let left = marked(&mark, 0);
        if !gone {
            // SAFETY: kill(2) on the survivor this test made, so the next run is clean.
            unsafe {
                libc::kill(daemon as libc::pid_t, libc::SIGKILL);
            }
        }
        assert!(gone, "{how}: daemon {daemon} outlived gpufeed");
        assert_eq!(left, Vec::<u32>::new(), "{how}: processes left");
        eprintln!(
            "{how}: gpufeed ended {:?} after the signal or start",
            t.elapsed()
        );
    }
}

#[test]
fn fast_forks_under_run_give_one_start_and_one_exit_per_pid() {
    if !has_python() {
        eprintln!("SKIPPED: fast_forks_under_run_give_one_start_and_one_exit_per_pid: no python3");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("r.ndjson");
    // 60 children that exit at once; the parent reaps them only a second later: zombies meanwhile.
    let script = "import os, time\n\
                  for _ in range(60):\n    \
                      if os.fork() == 0: os._exit(0)\n    \
                      time.sleep(0.005)\n\
                  time.sleep(1.0)\n\
                  while True:\n    \
                      try: os.wait()\n    \
                      except ChildProcessError: break\n\
                  time.sleep(0.3)\n";
    crate::gpufeed()
        .args(["run", "-q", "--interval", "20ms", "-o"])
        .arg(&out)
        .args(["--", "python3", "-c", script])
        .timeout(Duration::from_secs(60))
        .assert()
        .success();
    // Keyed by command too: a process that execs is announced again with its new command.
    let mut counts: std::collections::HashMap<(String, u64, String), u32> = Default::default();
    for line in std::fs::read_to_string(&out).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let kind = v["type"].as_str().unwrap_or_default();
        if kind == "proc_start" || kind == "proc_exit" {
            let cmd = v["cmd"].to_string();
            *counts
                .entry((kind.to_string(), v["pid"].as_u64().unwrap(), cmd))
                .or_default() += 1;
        }
    }
    let starts = counts.keys().filter(|(k, _, _)| k == "proc_start").count();
    assert!(starts > 10, "too few children seen: {counts:?}");
    let repeated: Vec<_> = counts.iter().filter(|(_, &n)| n > 1).collect();
    assert!(
        repeated.is_empty(),
        "announced more than once: {repeated:?}"
    );
}
