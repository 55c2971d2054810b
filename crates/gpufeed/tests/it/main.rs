//! The integration tests: one binary (ripgrep's layout), one module per area. Each runs the
//! real `gpufeed` binary as a child process (assert_cmd); `common_fake` builds the fake NVML,
//! `common` finds the Python the real-framework tests run.

// The 100-line rule (clippy.toml) is for the library: a scenario test and the bad-input corpus
// read best top to bottom.
#![allow(clippy::too_many_lines)]

mod analyze_ranks;
mod analyze_rules;
mod analyze_traces;
mod auto_steps;
mod bad_inputs;
mod cli_limits;
mod common;
mod common_fake;
mod completions_man;
mod dashboard;
mod data_stages;
mod deploy_files;
mod diagnose_cli;
mod diagnose_job;
mod diagnose_logs;
mod diagnose_scenarios;
mod doctor;
mod fleet_prometheus;
mod golden;
mod inject;
mod jobs_corpus;
mod notebook;
mod outputs;
mod processes;
mod pystacks;
mod ranks;
mod real_corpus;
mod record;
mod reports;
mod serve;
mod serve_http;
mod sweep;
mod tensorboard;
mod tune;
mod watch;

/// The `gpufeed` binary under test, with no driver or scenario inherited from the environment
/// (a test that wants the fake NVML sets it) and no colour.
pub fn gpufeed() -> assert_cmd::Command {
    let mut c = assert_cmd::Command::cargo_bin("gpufeed").unwrap();
    c.env_remove("GPUFEED_NVML_LIB")
        .env_remove("FAKE_NVML_SCENARIO")
        .env("NO_COLOR", "1");
    c
}

/// `../shared/traces` (real profiler traces, never copied into the repository), or `None` after
/// saying loudly on stderr that `what` did not run.
pub fn shared_traces(what: &str) -> Option<std::path::PathBuf> {
    let d = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces");
    if d.is_dir() {
        Some(d)
    } else {
        // Straight to stderr, not eprintln!: the test harness captures that, and a skip must show.
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: {} not found: {what} did not run",
            d.display()
        );
        None
    }
}

/// Runs `cmd` to its end and asserts that it succeeded, showing its stderr if it did not.
pub fn run_ok(cmd: &mut assert_cmd::Command) -> std::process::Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs `cmd`, asserts that it succeeded ([`run_ok`]) and parses its stdout as JSON.
pub fn json_ok(cmd: &mut assert_cmd::Command) -> serde_json::Value {
    serde_json::from_slice(&run_ok(cmd).stdout).unwrap()
}

/// Sets `cmd` to read the fake NVML (`--nvml-lib`) with the scenario `json`, written into `dir`.
pub fn fake_gpu<'a>(
    cmd: &'a mut assert_cmd::Command,
    dir: &std::path::Path,
    json: &str,
) -> &'a mut assert_cmd::Command {
    cmd.env("FAKE_NVML_SCENARIO", common_fake::scenario(dir, json))
        .arg("--nvml-lib")
        .arg(common_fake::fake_nvml())
}

/// A loopback port free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `name` on the PATH, if it is there.
pub fn which(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

/// Reads a JSON file.
pub fn read_json(p: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// Kills and reaps a child when the test ends, however it ends.
pub struct Reap(pub std::process::Child);
impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// GET over plain HTTP/1.0 on loopback: the body of a 200 answer, else None.
pub fn http_get(port: u16, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut r = String::new();
    s.read_to_string(&mut r).ok()?;
    let (head, body) = r.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?;
    (status == "200").then(|| body.to_string())
}

/// Runs `gpufeed ARGS` and asserts the usage-error exit code, 2; more can be asserted on what it
/// returns (the one line on stderr).
pub fn usage_error<I, S>(args: I) -> assert_cmd::assert::Assert
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    gpufeed().args(args).assert().code(2)
}

/// [`gpufeed`] with no GPU driver to load (`--nvml-lib` names a library that is not there): the
/// host-only path, whatever the machine running the tests has.
pub fn gpufeed_no_gpu() -> assert_cmd::Command {
    let mut c = gpufeed();
    c.args(["--nvml-lib", "/nonexistent/libnvidia-ml.so.1"]);
    c
}

/// The phases of a training step, as `run`'s JSON and `serve`'s metrics name them, in order.
pub const PHASES: [&str; 7] = [
    "data_wait",
    "forward",
    "backward",
    "optimizer",
    "sync",
    "checkpoint_io",
    "other",
];

/// The first object of the JSON array `list` whose `key` is `value`.
pub fn find_by<'a>(
    list: &'a serde_json::Value,
    key: &str,
    value: &str,
) -> Option<&'a serde_json::Value> {
    list.as_array().unwrap().iter().find(|e| e[key] == value)
}

/// The header of a made-up recording: `host` with `cpu_count` CPUs and `gpus` H100s of 80 GiB,
/// sampled at 10 Hz from 2026-12-02T12:00:00Z, by gpufeed 0.1.0; all else unknown. A test sets
/// what it is about on the result.
pub fn h100_header(host: &str, cpu_count: u32, gpus: u32) -> gpufeed::Header {
    use gpufeed::{GpuStatic, HostInfo};
    gpufeed::Header {
        schema_version: 1,
        gpufeed_version: Some("0.1.0".into()),
        start_time: "2026-12-02T12:00:00Z".into(),
        start_unix_us: 1_780_000_000_000_000,
        interval_s: 0.1,
        host: HostInfo {
            hostname: Some(host.into()),
            cpu_count,
            ..Default::default()
        },
        driver: None,
        gpus: (0..gpus)
            .map(|index| GpuStatic {
                index,
                name: Some("NVIDIA H100 80GB HBM3".into()),
                memory_total_bytes: Some(80 << 30),
                ..Default::default()
            })
            .collect(),
        gpu_error: None,
        command: None,
        pid: None,
        py_rate_hz: None,
    }
}
