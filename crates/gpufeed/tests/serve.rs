//! `gpufeed serve` through the binary with the fake driver, and end to end with a real
//! Prometheus server when the `prometheus` binary is installed (.ci/run installs it).

mod common_fake;

use assert_cmd::Command;
use common_fake::{fake_nvml, scenario};
use predicates::prelude::*;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

const TWO_GPUS: &str = r#"{"devices":[
  {"name":"NVIDIA H100 80GB HBM3","uuid":"GPU-11111111-2222-3333-4444-555555555555",
   "memory_total_bytes":85899345920,"memory_used_bytes":42949672960,
   "util":{"pattern":"square","period_s":2.0,"high":90,"low":10,"duty":0.3},
   "pcie":{"rx_bytes_per_s":2000000000}},
  {"name":"NVIDIA H100 80GB HBM3","util":97}]}"#;

fn gpufeed(dir: &Path) -> Command {
    let mut c = Command::cargo_bin("gpufeed").unwrap();
    c.env("GPUFEED_NVML_LIB", fake_nvml())
        .env("FAKE_NVML_SCENARIO", scenario(dir, TWO_GPUS));
    c
}

/// Kills and reaps a child when the test ends, however it ends.
struct Reap(Child);
impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// GET over plain HTTP/1.0: the body of a 200 answer, else None.
fn get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut r = String::new();
    s.read_to_string(&mut r).ok()?;
    let (head, body) = r.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?;
    (status == "200").then(|| body.to_string())
}

fn wait_for(deadline: Duration, mut f: impl FnMut() -> Option<String>) -> Option<String> {
    let end = Instant::now() + deadline;
    while Instant::now() < end {
        if let Some(v) = f() {
            return Some(v);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    None
}

#[test]
fn once_prints_dcgm_and_gpufeed_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let out = gpufeed(dir.path())
        .args(["serve", "--once"])
        .timeout(Duration::from_secs(30))
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(out).unwrap();
    let body: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(body[0], "gpufeed_up 1");
    assert!(body[1].starts_with("gpufeed_build_info{"));
    assert!(text.contains("gpufeed_gpus 2"));
    assert!(text.contains(
        "DCGM_FI_DEV_FB_USED{gpu=\"0\",uuid=\"GPU-11111111-2222-3333-4444-555555555555\",hostname="
    ));
    assert!(text.contains("DCGM_FI_DEV_GPU_UTIL{gpu=\"1\""), "{text}");
    assert!(text.contains("gpufeed_gpu_busy_ratio{gpu=\"1\""));
    assert!(text.contains("gpufeed_pcie_rx_bytes_total{gpu=\"0\""));
    assert!(text.ends_with("# EOF\n"));
}

#[test]
fn bad_addresses_and_busy_ports_are_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    gpufeed(dir.path())
        .args(["serve", "--listen", "localhost-ish"])
        .assert()
        .code(2);
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    gpufeed(dir.path())
        .args(["serve", "--listen", &addr])
        .timeout(Duration::from_secs(20))
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("cannot listen on")
                .and(predicate::str::contains("choose another with --listen")),
        );
    gpufeed(dir.path())
        .args(["serve", "--once", "--pid", "999999999"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("no process with pid"));
}

fn spawn_serve(dir: &Path, port: u16) -> Reap {
    let bin = assert_cmd::cargo::cargo_bin("gpufeed");
    let child = std::process::Command::new(bin)
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .env("GPUFEED_NVML_LIB", fake_nvml())
        .env("FAKE_NVML_SCENARIO", scenario(dir, TWO_GPUS))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Reap(child)
}

#[test]
fn serves_metrics_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let _g = spawn_serve(dir.path(), port);
    let body = wait_for(Duration::from_secs(20), || {
        get(port, "/metrics").filter(|b| b.contains("DCGM_FI_DEV_GPU_UTIL{"))
    })
    .expect("gpufeed serves /metrics");
    assert!(body.starts_with("# HELP gpufeed_up"));
    assert!(get(port, "/nope").is_none());
}

#[test]
fn a_real_prometheus_scrapes_gpufeed() {
    let Ok(prom) = which("prometheus") else {
        let _ = writeln!(std::io::stderr(), "SKIPPED a_real_prometheus_scrapes_gpufeed: no `prometheus` binary (apt-get install prometheus; .ci/run does)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let _g = spawn_serve(dir.path(), port);
    let prom_port = free_port();
    let cfg = dir.path().join("prometheus.yml");
    std::fs::write(
        &cfg,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: gpufeed\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
        ),
    )
    .unwrap();
    let data = dir.path().join("data");
    let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
    let _p = Reap(
        std::process::Command::new(prom)
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!("--storage.tsdb.path={}", data.display()))
            .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let q = |query: &str| {
        let body = get(prom_port, &format!("/api/v1/query?query={query}"))?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        let res = v["data"]["result"].as_array()?.clone();
        (!res.is_empty()).then(|| serde_json::to_string(&res).unwrap())
    };
    let util = wait_for(Duration::from_secs(60), || {
        q("DCGM_FI_DEV_GPU_UTIL%7Bgpu%3D%221%22%7D")
    })
    .unwrap_or_else(|| {
        let log = std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap_or_default();
        panic!("Prometheus never answered the query; its log:\n{log}")
    });
    let v: serde_json::Value = serde_json::from_str(&util).unwrap();
    let value: f64 = v[0]["value"][1].as_str().unwrap().parse().unwrap();
    assert_eq!(value, 97.0, "{util}");
    assert_eq!(v[0]["metric"]["job"], "gpufeed");
    let up = wait_for(Duration::from_secs(20), || q("gpufeed_up")).unwrap();
    assert!(up.contains("\"1\""), "{up}");
    // rate() needs a full window of scrapes; wait until 5 s of samples are stored.
    let full = |r: &String| {
        let v: serde_json::Value = serde_json::from_str(r).ok()?;
        let n: f64 = v[0]["value"][1].as_str()?.parse().ok()?;
        (n >= 5.0).then_some(())
    };
    wait_for(Duration::from_secs(30), || {
        q("count_over_time(gpufeed_pcie_rx_bytes_total%7Bgpu%3D%220%22%7D%5B5s%5D)")
            .filter(|r| full(r).is_some())
    })
    .expect("5 s of PCIe counter samples");
    let rx = wait_for(Duration::from_secs(20), || {
        q("rate(gpufeed_pcie_rx_bytes_total%7Bgpu%3D%220%22%7D%5B5s%5D)")
    })
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&rx).unwrap();
    let rate: f64 = v[0]["value"][1].as_str().unwrap().parse().unwrap();
    assert!(
        (rate - 2e9).abs() / 2e9 < 0.1,
        "PCIe rate through PromQL: {rate}"
    );
}

fn which(name: &str) -> Result<std::path::PathBuf, ()> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or(())
}
