//! `gpufeed run` / `gpufeed record` through the real binary on real child processes, with the
//! real NVML code path driven by the fake driver (crates/fake-nvml).

use crate::common_fake;

use crate::{gpufeed, gpufeed_no_gpu, read_json, usage_error};
use common_fake::{fake_nvml, scenario};
use gpufeed::{read_path, Collect};
use gpufeed::{summarize, Summary};
use gpufeed::{Header, Line, ProcsLine};
use gpufeed::{ReadError, ReadStats};
use predicates::prelude::*;
use std::path::Path;
use std::time::Duration;

/// Reads a recording through the one reader, every line collected, handing each to `visit`.
fn read_recording(
    path: &Path,
    mut visit: impl FnMut(&Header, Line),
) -> Result<(Header, ReadStats), ReadError> {
    let mut got = Collect::default();
    let (h, st) = read_path(path, &mut got)?;
    for l in got.0 {
        visit(&h, l);
    }
    Ok((h, st))
}

/// The JSON summary is the last line of stdout.
fn summary_of(stdout: &[u8]) -> Summary {
    let text = String::from_utf8_lossy(stdout);
    let last = text.lines().last().expect("a summary line");
    serde_json::from_str(last).unwrap_or_else(|e| panic!("bad summary {e}: {last}"))
}

const SQUARE: &str = r#"{"devices":[{"name":"NVIDIA H100 80GB HBM3","memory_total_bytes":85899345920,
  "memory_used_bytes":80000000000,"compute_capability":[9,0],
  "util":{"pattern":"square","period_s":2.0,"high":85,"low":10,"duty":0.3}}]}"#;

#[test]
fn exit_codes_pass_through() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.ndjson");
    gpufeed()
        .args(["run", "-q", "-o"])
        .arg(&out)
        .args(["--", "sh", "-c", "exit 7"])
        .assert()
        .code(7);
    gpufeed()
        .args(["run", "-q", "--force", "-o"])
        .arg(&out)
        .args(["--", "sh", "-c", "kill -KILL $$"])
        .assert()
        .code(137);
}

#[test]
fn a_command_that_cannot_start_gets_one_line_and_a_shell_code() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.ndjson");
    gpufeed()
        .args(["run", "-o"])
        .arg(&out)
        .args(["--", "no-such-program-gpufeed-test"])
        .assert()
        .code(127)
        .stderr(predicate::str::contains(
            "command not found: no-such-program-gpufeed-test",
        ));
    assert!(!out.exists(), "no empty recording is left behind");
    let script = dir.path().join("script.sh");
    std::fs::write(&script, "echo hi\n").unwrap(); // not executable
    gpufeed()
        .args(["run", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&script)
        .assert()
        .code(126)
        .stderr(predicate::str::contains("cannot execute"));
}

#[test]
fn bad_command_lines_exit_2() {
    usage_error(["run", "--no-such-flag", "--", "true"]);
    usage_error(["run"]);
    usage_error(["record", "--interval", "soon"])
        .stderr(predicate::str::contains("not a valid duration"));
}

#[test]
fn stdin_and_stdout_pass_through() {
    let dir = tempfile::tempdir().unwrap();
    gpufeed()
        .args(["run", "-q", "-o"])
        .arg(dir.path().join("r.ndjson"))
        .args(["--", "tr", "a-z", "A-Z"])
        .write_stdin("hello\n")
        .assert()
        .success()
        .stdout("HELLO\n");
}

#[test]
fn no_driver_records_host_only_with_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.ndjson");
    let a = gpufeed_no_gpu()
        .args(["run", "--format", "json", "-o"])
        .arg(&out)
        .args(["--", "sleep", "0.5"])
        .assert()
        .success()
        .stderr(predicate::str::contains("recording host metrics only"));
    let s = summary_of(&a.get_output().stdout);
    assert!(s.gpus.is_empty());
    assert!(s.gpu_error.is_some());
    assert!(s.host.cpu_count >= 1);
    assert!(s.host.cpu_mean_pct.is_some());
    assert_eq!(s.job.as_ref().unwrap().exit_code, Some(0));
}

/// A tree shaped like a training job: the main process starts two workers late; they burn CPU
/// and exit before the main process does.
#[test]
fn process_tree_with_late_starting_early_exiting_workers() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.ndjson");
    let script = "sleep 0.5; \
        (timeout 1.2 sh -c 'while :; do :; done') & \
        (timeout 1.2 sh -c 'while :; do :; done') & \
        wait; sleep 0.5";
    let a = gpufeed_no_gpu()
        .args(["run", "--format", "json", "--interval", "50ms", "-o"])
        .arg(&out)
        .args(["--", "sh", "-c", script])
        .assert()
        .success();
    let s = summary_of(&a.get_output().stdout);
    let job = s.job.expect("job summary");
    let root = job.pid;
    let burners: Vec<_> = job
        .processes
        .iter()
        .filter(|p| p.cmd.as_deref() == Some("sh -c while :; do :; done"))
        .collect();
    assert_eq!(burners.len(), 2, "{:#?}", job.processes);
    for b in &burners {
        assert!(
            b.first_seen_s >= 0.4,
            "worker seen at {} before it started",
            b.first_seen_s
        );
        assert!(
            b.last_seen_s < s.duration_s - 0.2,
            "worker exited early: {} vs {}",
            b.last_seen_s,
            s.duration_s
        );
        // A busy loop shows CPU (loosely: the test may share 2 cores with many others), far
        // more than the waiting shell at the root.
        let root_cpu = job
            .processes
            .iter()
            .find(|p| p.pid == root)
            .and_then(|p| p.cpu_mean_pct)
            .unwrap();
        let cpu = b.cpu_mean_pct.unwrap();
        assert!(
            cpu > 5.0 && cpu > root_cpu + 5.0,
            "busy loop {cpu} vs root {root_cpu}"
        );
        assert_ne!(b.ppid, 0);
    }
    assert!(job.processes.iter().any(|p| p.pid == root));
    assert!(
        job.processes_max >= 5,
        "root, 2 timeouts, 2 loops: {}",
        job.processes_max
    );
    // The recording carries per-process state, threads and RSS.
    let mut saw_state = false;
    read_recording(&out, |_, l| {
        if let Line::Procs(ProcsLine { procs, .. }) = l {
            saw_state |= procs
                .iter()
                .any(|p| p.state.is_some() && p.rss_bytes.is_some() && p.threads.is_some());
        }
    })
    .unwrap();
    assert!(saw_state);
}

#[test]
fn fake_driver_square_wave_keeps_every_driver_sample() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.ndjson");
    let sc = scenario(dir.path(), SQUARE);
    let a = gpufeed()
        .env("FAKE_NVML_SCENARIO", &sc)
        .arg("--nvml-lib")
        .arg(fake_nvml())
        .args(["run", "--format", "json", "-o"])
        .arg(&out)
        .args(["--", "sleep", "6"])
        .assert()
        .success();
    let s = summary_of(&a.get_output().stdout);
    assert_eq!(s.gpus.len(), 1);
    let g = &s.gpus[0];
    assert_eq!(g.name.as_deref(), Some("NVIDIA H100 80GB HBM3"));
    assert_eq!(g.mem_total_bytes, Some(85_899_345_920));
    assert_eq!(g.mem_used_max_bytes, Some(80_000_000_000));
    assert!(g.util_samples >= 30, "{} samples in 6 s", g.util_samples);
    // 0.3 * 85 + 0.7 * 10 = 32.5
    let mean = g.util_mean_pct.unwrap();
    assert!((mean - 32.5).abs() < 6.0, "mean {mean}");
    assert_eq!(g.util_min_pct, Some(10.0));
    assert_eq!(g.util_max_pct, Some(85.0));
    let period = g.util_sample_period_s.unwrap();
    assert!((period - 1.0 / 6.0).abs() < 0.03, "driver period {period}");
    // The same run's diagnosis rides along: a 2 s square wave of busy and starved.
    let report: gpufeed::diagnose::RunReport = serde_json::from_str(
        String::from_utf8_lossy(&a.get_output().stdout)
            .lines()
            .last()
            .unwrap(),
    )
    .unwrap();
    let verdict = report.verdict.expect("a verdict");
    assert_ne!(verdict.id.as_str(), "compute_bound", "{verdict:?}");
    assert!(!report.findings.is_empty());
    // Header: static facts and the driver.
    let (h, _) = read_recording(&out, |_, _| {}).unwrap();
    assert_eq!(h.gpus[0].compute_capability, Some([9, 0]));
    assert!(h.driver.unwrap().driver_version.is_some());
}

#[test]
fn malformed_scenario_is_one_clear_error_and_the_run_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let sc = scenario(
        dir.path(),
        r#"{"devices": [{"name": "x", "util": {"pattern": "sine"}}]}"#,
    );
    gpufeed()
        .env("FAKE_NVML_SCENARIO", &sc)
        .arg("--nvml-lib")
        .arg(fake_nvml())
        .args(["run", "-q", "-o"])
        .arg(dir.path().join("r.ndjson"))
        .args(["--", "true"])
        .assert()
        .success()
        .stderr(predicate::str::contains("fake-nvml: invalid scenario"))
        .stderr(predicate::str::contains("recording host metrics only"));
}

#[test]
fn driver_not_loaded_is_reported_as_no_driver() {
    let dir = tempfile::tempdir().unwrap();
    let sc = scenario(dir.path(), r#"{"init_error": 9, "devices": []}"#);
    gpufeed()
        .env("FAKE_NVML_SCENARIO", &sc)
        .env("GPUFEED_NVML_LIB", fake_nvml())
        .args(["run", "-q", "-o"])
        .arg(dir.path().join("r.ndjson"))
        .args(["--", "true"])
        .assert()
        .success()
        .stderr(predicate::str::contains("no NVIDIA driver found"));
}

/// Starts gpufeed (no GPU) as a plain child process, for tests that signal it.
fn spawn_gpufeed(args: &[&str], out: &Path) -> std::process::Child {
    let (sub, rest) = args.split_first().unwrap();
    let dash = rest.iter().position(|a| *a == "--").unwrap_or(rest.len());
    std::process::Command::new(assert_cmd::cargo::cargo_bin("gpufeed"))
        .args(["--nvml-lib", "/nonexistent.so", sub])
        .args(&rest[..dash])
        .arg("-o")
        .arg(out)
        .args(&rest[dash..])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

fn wait_for_lines(path: &Path, min: usize) {
    for _ in 0..100 {
        if std::fs::read_to_string(path)
            .map(|s| s.lines().count())
            .unwrap_or(0)
            >= min
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{} never reached {min} lines", path.display());
}

#[test]
fn sigint_is_forwarded_to_the_job_and_the_recording_stays_readable() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.ndjson");
    let mut child = spawn_gpufeed(&["run", "-q", "--", "sleep", "30"], &out);
    wait_for_lines(&out, 4);
    // SAFETY: plain kill(2) of our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let st = child.wait().unwrap();
    assert_eq!(st.code(), Some(130), "sleep killed by the forwarded SIGINT");
    let mut end = None;
    let (_, stats) = read_recording(&out, |_, l| {
        if let Line::End(e) = l {
            end = Some(e)
        }
    })
    .unwrap();
    assert!(!stats.truncated && !stats.unfinished);
    assert_eq!(end.unwrap().signal, Some(libc::SIGINT));
}

#[test]
fn a_killed_recorder_loses_at_most_the_last_second() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.ndjson");
    let mut child = spawn_gpufeed(&["record", "-q", "--interval", "50ms"], &out);
    std::thread::sleep(Duration::from_millis(2500));
    child.kill().unwrap();
    child.wait().unwrap();
    let (s, stats) = summarize(&out).unwrap();
    assert!(stats.unfinished);
    assert!(
        s.duration_s >= 1.4,
        "only {} s of 2.5 s survived",
        s.duration_s
    );
}

#[test]
fn record_for_a_duration_and_attached_to_a_pid() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.ndjson");
    let a = gpufeed_no_gpu()
        .args(["record", "--duration", "1s", "--format", "json", "-o"])
        .arg(&out)
        .assert()
        .success();
    let s = summary_of(&a.get_output().stdout);
    assert!((0.9..2.0).contains(&s.duration_s), "{}", s.duration_s);
    assert!(s.job.is_none());

    let mut job = std::process::Command::new("sh")
        .args(["-c", "sleep 0.3; (sleep 0.6) ; true"])
        .spawn()
        .unwrap();
    let a = gpufeed_no_gpu()
        .args(["record", "--format", "json", "--pid"])
        .arg(job.id().to_string())
        .arg("-o")
        .arg(dir.path().join("r2.ndjson"))
        .timeout(Duration::from_secs(20))
        .assert()
        .success();
    job.wait().unwrap();
    let s = summary_of(&a.get_output().stdout);
    let j = s.job.unwrap();
    assert_eq!(j.pid, job.id());
    assert!(
        j.processes.len() >= 2,
        "the attached process and its child: {:?}",
        j.processes
    );

    gpufeed()
        .args(["record", "--pid", "999999999"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("no process with pid 999999999"));
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

/// SIGTERM sent to gpufeed alone (as a scheduler does) reaches every process of the job, not only
/// the shell at its root: no orphaned workers keep running.
#[test]
fn sigterm_is_forwarded_to_the_whole_tree() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.ndjson");
    let mut child = spawn_gpufeed(
        &[
            "run",
            "-q",
            "--interval",
            "50ms",
            "--",
            "sh",
            "-c",
            "sleep 31 & sleep 32 & wait",
        ],
        &out,
    );
    // Wait until the recorder has seen the whole tree (root + 2 sleeps); a loaded machine can
    // take seconds to start the three processes and flush the lines.
    let mut pids = Vec::new();
    for _ in 0..400 {
        pids.clear();
        // The file exists, empty, until the header is written.
        let _ = read_recording(&out, |_, l| {
            if let Line::ProcStart(p) = l {
                pids.push(p.pid)
            }
        });
        if pids.len() >= 3 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(pids.len(), 3, "root and two sleeps seen: {pids:?}");
    // SAFETY: plain kill(2) of our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let st = child.wait().unwrap();
    assert_eq!(st.code(), Some(128 + libc::SIGTERM));
    std::thread::sleep(Duration::from_millis(200));
    for pid in pids {
        assert!(!alive(pid), "process {pid} of the job survived SIGTERM");
    }
}

#[test]
fn export_json_keeps_stdout_for_the_job_alone() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.ndjson");
    let json = dir.path().join("s.json");
    let a = gpufeed_no_gpu()
        .args(["run", "--format", "json", "-o"])
        .arg(&out)
        .arg("--export-json")
        .arg(&json)
        .args(["--", "sh", "-c", "echo job-output; sleep 0.3"])
        .assert()
        .success();
    assert_eq!(
        String::from_utf8_lossy(&a.get_output().stdout),
        "job-output\n",
        "nothing but the job's output on stdout"
    );
    assert!(String::from_utf8_lossy(&a.get_output().stderr).contains("wrote"));
    let v = read_json(&json);
    assert!(v.get("verdict").is_some() && v.get("job").is_some(), "{v}");
    assert_eq!(v["job"]["end_reason"], "job_exited");
}

/// With the JSON summary on stdout (`run --format json`), the job's own stdout goes to stderr:
/// `gpufeed run --format json -- python train.py > report.json` is valid JSON even when the
/// job prints.
#[test]
fn json_on_stdout_sends_the_jobs_stdout_to_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let a = gpufeed_no_gpu()
        .args(["run", "--format", "json", "-o"])
        .arg(dir.path().join("r.ndjson"))
        .args([
            "--",
            "sh",
            "-c",
            "echo job-output; echo job-error >&2; sleep 0.3",
        ])
        .assert()
        .success();
    let out = &a.get_output();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    assert!(v.get("verdict").is_some(), "{v}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("job-output") && err.contains("job-error"),
        "{err}"
    );
}

/// A job that failed is said first among the notes: the reading covers only what ran.
#[test]
fn a_failed_job_is_said_in_the_notes() {
    let dir = tempfile::tempdir().unwrap();
    let a = gpufeed_no_gpu()
        .args(["run", "--format", "json", "-o"])
        .arg(dir.path().join("r.ndjson"))
        .args(["--", "sh", "-c", "sleep 0.3; exit 3"])
        .assert()
        .code(3);
    let v: serde_json::Value = serde_json::from_slice(&a.get_output().stdout).unwrap();
    let first = v["notes"][0].as_str().unwrap_or_default();
    assert!(first.starts_with("The job failed (exit code 3)"), "{v}");
}

/// Issue 39 item 11: under `umask 000`, `--step-socket PATH` made a world-writable socket
/// (anyone on the machine could send markers); it is 0600 whatever the umask.
#[test]
fn a_step_socket_is_the_users_alone_under_umask_000() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("steps.sock");
    let bin = assert_cmd::cargo::cargo_bin("gpufeed");
    let mut child = std::process::Command::new("sh")
        .args(["-c", "umask 000; exec \"$0\" \"$@\""])
        .arg(&bin)
        .args([
            "--nvml-lib",
            "/nonexistent/libnvidia-ml.so.1",
            "record",
            "-q",
        ])
        .args(["--duration", "3s", "--py-stacks", "off", "--step-socket"])
        .arg(&sock)
        .arg("-o")
        .arg(dir.path().join("r.ndjson"))
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let until = std::time::Instant::now() + Duration::from_secs(20);
    while !sock.exists() && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    let mode = std::fs::symlink_metadata(&sock).map(|m| m.permissions().mode() & 0o777);
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert_eq!(mode.ok(), Some(0o600), "the socket's mode");
    assert!(!sock.exists(), "removed at exit");
    // the recording is the only thing left beside it (no staging folder)
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["r.ndjson"], "{names:?}");
}

/// Issue 47 item 5: the job replaced the `--step-socket` path with a file of its own while
/// gpufeed ran; gpufeed removes only the socket it made, never what took its place (a
/// regular file, or another socket bound there).
#[test]
fn only_the_step_socket_gpufeed_made_is_removed_at_exit() {
    let dir = tempfile::tempdir().unwrap();
    for replacement in ["file", "socket"] {
        let sock = dir.path().join(format!("steps-{replacement}.sock"));
        let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("gpufeed"))
            .args([
                "--nvml-lib",
                "/nonexistent/libnvidia-ml.so.1",
                "record",
                "-q",
            ])
            .args(["--duration", "2s", "--py-stacks", "off", "--step-socket"])
            .arg(&sock)
            .arg("-o")
            .arg(dir.path().join(format!("r-{replacement}.ndjson")))
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let until = std::time::Instant::now() + Duration::from_secs(20);
        while !sock.exists() && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(sock.exists(), "the socket was never bound");
        std::fs::remove_file(&sock).unwrap();
        let _theirs = if replacement == "file" {
            std::fs::write(&sock, "the job's own file").unwrap();
            None
        } else {
            Some(std::os::unix::net::UnixDatagram::bind(&sock).unwrap())
        };
        let status = child.wait().unwrap();
        assert!(status.success(), "{status:?}");
        assert!(
            sock.exists(),
            "the {replacement} the job put at the socket's path was deleted"
        );
        if replacement == "file" {
            assert_eq!(
                std::fs::read_to_string(&sock).unwrap(),
                "the job's own file"
            );
        }
    }
}
