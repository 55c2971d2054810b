//! `gpufeed serve` through the binary with the fake driver, and end to end with a real
//! Prometheus server when the `prometheus` binary is installed (.ci/run installs it).

use crate::common_fake;
use crate::PHASES;
use crate::{free_port, http_get, which, Reap};

use assert_cmd::Command;
use common_fake::{fake_nvml, scenario};
use predicates::prelude::*;
use std::io::Write;
use std::net::TcpListener;
use std::path::Path;
use std::process::Stdio;
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
        http_get(port, "/metrics").filter(|b| b.contains("DCGM_FI_DEV_GPU_UTIL{"))
    })
    .expect("gpufeed serves /metrics");
    assert!(body.starts_with("# HELP gpufeed_up"));
    assert!(http_get(port, "/nope").is_none());
}

/// A real CPython job (the stdlib example) followed with `--pid`: /metrics gets the training
/// loop's phase split from its stacks, and, once the job sends step markers to the socket
/// `serve` printed, the steps and the probe's exact wait.
#[test]
fn serve_exports_the_loop_phase_split_of_a_real_python_job() {
    use std::io::BufRead;
    let py_ok = std::process::Command::new("python3")
        .args(["-c", "import sys; sys.exit(sys.version_info < (3, 8))"])
        .status()
        .is_ok_and(|s| s.success());
    if !py_ok {
        eprintln!("SKIPPED: no python3 >= 3.8: the live loop-phase export did not run");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let sock_file = dir.path().join("sock");
    // The job lets any process of its user read it (Yama ptrace_scope 1 would refuse gpufeed,
    // which is not its parent), waits to be told the step socket, then runs the example.
    let job = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import ctypes, os, runpy, sys, time\n\
             try:\n    ctypes.CDLL(None).prctl(0x59616d61, ctypes.c_ulong(-1), 0, 0, 0)\n\
             except Exception:\n    pass\n\
             end = time.time() + 20\n\
             while not os.path.exists(sys.argv[1]) and time.time() < end:\n    time.sleep(0.05)\n\
             os.environ['GPUFEED_STEP_SOCKET'] = open(sys.argv[1]).read().strip()\n\
             sys.argv = [sys.argv[2], '--seconds', '30', '--workers', '0']\n\
             runpy.run_path(sys.argv[0], run_name='__main__')\n",
        )
        .arg(&sock_file)
        .arg(repo.join("examples/starving_pipeline.py"))
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let _job = Reap(job);
    let port = free_port();
    let bin = assert_cmd::cargo::cargo_bin("gpufeed");
    let mut child = std::process::Command::new(bin)
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--window", "5s", "--pid", &_job.0.id().to_string()])
        .env("GPUFEED_NVML_LIB", "/nonexistent/libnvidia-ml.so.1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = child.stderr.take().unwrap();
    let _g = Reap(child);
    let mut lines = std::io::BufReader::new(err).lines();
    let mut told = String::new();
    let path = loop {
        let Some(Ok(l)) = lines.next() else {
            panic!("serve never told its step socket: {told}");
        };
        told.push_str(&l);
        if let Some(i) = l.find("GPUFEED_STEP_SOCKET=") {
            break l[i + "GPUFEED_STEP_SOCKET=".len()..].trim().to_string();
        }
    };
    std::fs::write(&sock_file, &path).unwrap();
    wait_for(Duration::from_secs(25), || {
        http_get(port, "/metrics").filter(|b| {
            b.contains("gpufeed_loop_phase_ratio{") && b.contains("gpufeed_loop_steps_per_second{")
        })
    })
    .unwrap_or_else(|| {
        panic!(
            "no loop phases or steps in /metrics: {}",
            http_get(port, "/metrics").unwrap_or_default()
        )
    });
    // Once the 5 s window holds nothing but the loop (no start-up), stacks and probe agree.
    std::thread::sleep(Duration::from_secs(6));
    let body = http_get(port, "/metrics").unwrap();
    assert!(body.contains("# HELP gpufeed_loop_phase_ratio Share of wall time"));
    let value = |prefix: &str| -> f64 {
        body.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {prefix}: {body}"))
    };
    let mut sum = 0.0;
    for phase in PHASES {
        let series = body
            .lines()
            .find(|l| l.contains(&format!("phase=\"{phase}\"")))
            .unwrap_or_else(|| panic!("no {phase}: {body}"));
        let v: f64 = series.rsplit(' ').next().unwrap().parse().unwrap();
        assert!((0.0..=1.0).contains(&v), "{series}");
        sum += v;
    }
    assert!((sum - 1.0).abs() < 0.02, "phases sum to {sum}: {body}");
    // num_workers=0: a good part of the loop's time is spent loading (waiting for) data (about
    // 20% on a 2-core box, more on a fast one).
    let dw: f64 = body
        .lines()
        .find(|l| l.contains("phase=\"data_wait\""))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap();
    assert!(dw > 0.1, "data_wait {dw}: {body}");
    // The exported data wait is the probe's exact one; the stacks' estimate is within 15 points.
    let wait = value("gpufeed_data_wait_ratio{");
    assert!(wait > 0.1 && wait <= 1.0, "{wait}");
    assert!(
        (wait - dw).abs() <= 0.15,
        "probe {wait} vs stacks {dw}: {body}"
    );
    assert!(value("gpufeed_loop_steps_per_second{") > 0.0);
}

#[test]
fn a_real_prometheus_scrapes_gpufeed() {
    let Some(prom) = which("prometheus") else {
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
        let body = http_get(prom_port, &format!("/api/v1/query?query={query}"))?;
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

/// Issue 47 item 1: a job names its processes with exposition syntax (`prctl(PR_SET_NAME)`, here
/// through /proc/self/comm) and its GPU has such a UUID: no forged series, no early `# EOF`, and
/// Prometheus' own parser (`promtool check metrics`) reads the exposition whole.
#[test]
fn hostile_process_and_gpu_names_cannot_forge_series() {
    let dir = tempfile::tempdir().unwrap();
    let gpu = r#"{"devices":[{"name":"NVIDIA H100 80GB HBM3","uuid":"GPU-\"} 1\nforged{a=\"","util":50}]}"#;
    let (lib, scen) = (fake_nvml(), scenario(dir.path(), gpu));
    // The main process and a child, each renamed; both live 30 s at most.
    let job = r#"printf 'a"} 1\nx{a="' > /proc/self/comm
( printf 'q\n# EOF\n' > /proc/self/comm; i=0; while [ $i -lt 120 ]; do sleep 0.25; i=$((i+1)); done ) &
i=0; while [ $i -lt 120 ]; do sleep 0.25; i=$((i+1)); done"#;
    let child = std::process::Command::new("sh")
        .args(["-c", job])
        .spawn()
        .unwrap();
    let pid = child.id();
    let _job = Reap(child);
    // Until both names are set.
    let comm = |p: u32| std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
    let until = Instant::now() + Duration::from_secs(10);
    while !(comm(pid).starts_with("a\"")
        && std::fs::read_dir("/proc").unwrap().any(|e| {
            let e = e.unwrap();
            comm(e.file_name().to_str().unwrap_or("").parse().unwrap_or(0)).starts_with("q\n")
        }))
    {
        assert!(Instant::now() < until, "the job never renamed itself");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = Command::cargo_bin("gpufeed")
        .unwrap()
        .env("GPUFEED_NVML_LIB", lib)
        .env("FAKE_NVML_SCENARIO", scen)
        .args(["serve", "--once", "--interval", "100ms", "--pid"])
        .arg(pid.to_string())
        .timeout(Duration::from_secs(30))
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains("comm=\"a\\\"} 1\\nx{a=\\\"\""),
        "the main process's name, escaped: {text}"
    );
    assert!(
        text.contains("comm=\"q\\n# EOF\\n\""),
        "the child's: {text}"
    );
    for l in text.lines() {
        assert!(
            !l.starts_with("x{") && !l.starts_with("forged") && !l.starts_with("q"),
            "a forged line: {l}\n{text}"
        );
    }
    assert_eq!(text.matches("\n# EOF\n").count(), 1, "{text}");
    assert!(text.ends_with("\n# EOF\n"));
    let Some(promtool) = which("promtool") else {
        let _ = writeln!(std::io::stderr(), "SKIPPED the promtool check of hostile names: no `promtool` (apt-get install prometheus; .ci/run does)");
        return;
    };
    let mut check = std::process::Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // promtool reads the Prometheus text format, where a family is named as its samples are
    // (OpenMetrics names `gpufeed_build` for `gpufeed_build_info`, `X` for `X_total`) and `info`
    // is no type: only those comment lines are rewritten; every sample and label is as served.
    let mut text_format = String::new();
    let mut renamed = std::collections::HashMap::new();
    for l in text.lines() {
        if let Some((name, kind)) = l.strip_prefix("# TYPE ").and_then(|t| t.split_once(' ')) {
            match kind {
                "info" => renamed.insert(name.to_string(), (format!("{name}_info"), "gauge")),
                "counter" => renamed.insert(name.to_string(), (format!("{name}_total"), "counter")),
                _ => None,
            };
        }
    }
    for l in text.lines() {
        let mut line = l.to_string();
        for (from, (to, kind)) in &renamed {
            if l == format!(
                "# TYPE {from} {}",
                if *kind == "gauge" { "info" } else { kind }
            ) {
                line = format!("# TYPE {to} {kind}");
            } else if let Some(help) = l.strip_prefix(&format!("# HELP {from} ")) {
                line = format!("# HELP {to} {help}");
            }
        }
        text_format.push_str(&line);
        text_format.push('\n');
    }
    check
        .stdin
        .take()
        .unwrap()
        .write_all(text_format.as_bytes())
        .unwrap();
    let res = check.wait_with_output().unwrap();
    let said =
        String::from_utf8_lossy(&res.stdout).to_string() + &String::from_utf8_lossy(&res.stderr);
    // A forged series is a metric without HELP ("x no help text"), a broken label a parse error.
    assert!(
        res.status.success() && said.trim().is_empty(),
        "promtool: {said}\n{text_format}"
    );
}
