//! `gpufeed watch` as a person sees it: in a tmux pane (skips loudly when tmux is absent).

use crate::common_fake;

use common_fake::{fake_nvml, scenario};
use std::io::Write as _;
use std::process::Command;
use std::time::{Duration, Instant};

const SCENARIO: &str = r#"{"devices":[{"name":"NVIDIA H100 80GB HBM3",
  "memory_used_bytes":42949672960,
  "util":{"pattern":"square","period_s":2.0,"high":90,"low":10,"duty":0.3},
  "pcie":{"rx_bytes_per_s":2000000000}}]}"#;

/// A tmux server of our own (its own socket), killed when the test ends.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn cmd(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .expect("tmux runs")
    }
    fn capture(&self) -> String {
        String::from_utf8_lossy(&self.cmd(&["capture-pane", "-p", "-t", "w"]).stdout).to_string()
    }
    fn wait_for(&self, what: &str, secs: u64) -> String {
        let end = Instant::now() + Duration::from_secs(secs);
        loop {
            let s = self.capture();
            if s.contains(what) {
                return s;
            }
            if Instant::now() > end {
                panic!("{what:?} never appeared; the pane:\n{s}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
}

#[test]
fn watch_in_tmux_shows_gpu_cpu_job_and_quits_on_q() {
    if Command::new("tmux").arg("-V").output().is_err() {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED watch_in_tmux_shows_gpu_cpu_job_and_quits_on_q: tmux is not installed"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = assert_cmd::cargo::cargo_bin("gpufeed");
    let script = dir.path().join("run.sh");
    std::fs::write(
        &script,
        format!(
            "cd '{dir}' && GPUFEED_NVML_LIB='{lib}' FAKE_NVML_SCENARIO='{sc}' '{bin}' watch --job-log job.log -- sh -c 'echo hello; sleep 60'; echo EXIT=$?; sleep 30\n",
            dir = dir.path().display(),
            lib = fake_nvml().display(),
            sc = scenario(dir.path(), SCENARIO).display(),
            bin = bin.display()
        ),
    )
    .unwrap();
    let t = Tmux {
        socket: format!("gpufeed-test-{}", std::process::id()),
    };
    let out = t.cmd(&[
        "new-session",
        "-d",
        "-s",
        "w",
        "-x",
        "120",
        "-y",
        "40",
        "sh",
        script.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let screen = t.wait_for("sleep", 30);
    assert!(screen.contains("GPU0"), "{screen}");
    assert!(screen.contains("H100"), "{screen}");
    assert!(screen.contains("CPU "), "{screen}");
    assert!(screen.contains("Job: "), "{screen}");
    t.wait_for("PCIe RX 2.00 GB/s", 20);
    t.cmd(&["send-keys", "-t", "w", "r"]);
    t.wait_for("REC gpufeed-", 10);
    std::thread::sleep(Duration::from_millis(1500));
    t.cmd(&["send-keys", "-t", "w", "r"]);
    t.wait_for("saved gpufeed-", 10);
    t.cmd(&["send-keys", "-t", "w", "q"]);
    let end = t.wait_for("EXIT=", 20);
    // The job was stopped with SIGTERM when the view quit: 128 + 15.
    assert!(end.contains("EXIT=143"), "{end}");
    assert!(end.contains("the job was stopped"), "{end}");
    let rec = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".ndjson.zst"))
        .expect("r wrote a recording");
    let (h, stats) = gpufeed::read_path(&rec, ()).unwrap();
    assert_eq!(h.gpus.len(), 1);
    assert!(stats.lines > 3 && !stats.unfinished, "{stats:?}");
    assert!(std::fs::read_to_string(dir.path().join("job.log"))
        .unwrap()
        .contains("hello"));
}

#[test]
fn sigterm_ends_watch_and_stops_its_job() {
    if Command::new("tmux").arg("-V").output().is_err() {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED sigterm_ends_watch_and_stops_its_job: tmux is not installed"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = assert_cmd::cargo::cargo_bin("gpufeed");
    let pidfile = dir.path().join("job.pid");
    let script = dir.path().join("run.sh");
    std::fs::write(
        &script,
        format!(
            "cd '{dir}' && GPUFEED_NVML_LIB=/nonexistent/libnvidia-ml.so.1 NO_COLOR=1 '{bin}' watch -- sh -c 'echo $$ > {pid}; sleep 60'; echo EXIT=$?; sleep 30\n",
            dir = dir.path().display(),
            bin = bin.display(),
            pid = pidfile.display(),
        ),
    )
    .unwrap();
    let t = Tmux {
        socket: format!("gpufeed-test-term-{}", std::process::id()),
    };
    t.cmd(&[
        "new-session",
        "-d",
        "-s",
        "w",
        "-x",
        "100",
        "-y",
        "30",
        "sh",
        script.to_str().unwrap(),
    ]);
    let screen = t.wait_for("No GPU", 30);
    assert!(screen.contains("Job: "), "{screen}");
    let job: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The job was started by watch: its parent is the watch process.
    let stat = std::fs::read_to_string(format!("/proc/{job}/stat")).unwrap();
    let after_comm = &stat[stat.rfind(')').unwrap() + 2..];
    let watch: i32 = after_comm
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    // SAFETY: kill(2) on a pid this test started.
    unsafe { libc::kill(watch, libc::SIGTERM) };
    let end = t.wait_for("EXIT=", 20);
    assert!(end.contains("EXIT=143"), "{end}");
    let gone = (0..50).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        // SAFETY: signal 0 only checks that the pid exists.
        unsafe { libc::kill(job, 0) != 0 }
    });
    assert!(gone, "the job {job} was stopped");
}

#[test]
fn watch_refuses_a_pipe_with_one_line() {
    let out = Command::new(assert_cmd::cargo::cargo_bin("gpufeed"))
        .args(["watch"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("watch needs a terminal"), "{err}");
    assert_eq!(err.lines().count(), 1);
}
