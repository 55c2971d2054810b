//! Fleet end to end: a real Prometheus scrapes four `gpufeed serve` on loopback (fake drivers:
//! one starved GPU, three healthy) with the shipped rules of deploy/prometheus/ (only their
//! `for:` durations shortened to 5 s), and the starving alert fires for exactly the starved
//! instance, read through Prometheus' HTTP API. The dashboard's fleet panels return data from
//! the same Prometheus. Skips loudly without a `prometheus` binary (.ci/run installs it).

use crate::common_fake;
use crate::{free_port, http_get, which, Reap};

use common_fake::fake_nvml;
use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant};

const STARVED: &str = r#"{"devices":[{"name":"NVIDIA H100 80GB HBM3",
  "uuid":"GPU-aaaaaaaa-0000-0000-0000-000000000000",
  "util":{"pattern":"square","period_s":2.0,"high":95,"low":0,"duty":0.3}}]}"#;
const HEALTHY: &str = r#"{"devices":[{"name":"NVIDIA H100 80GB HBM3","util":97}]}"#;

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The result vector of an instant query.
fn query(port: u16, q: &str) -> Vec<serde_json::Value> {
    http_get(port, &format!("/api/v1/query?query={}", urlencode(q)))
        .and_then(|b| serde_json::from_str::<serde_json::Value>(&b).ok())
        .and_then(|v| v["data"]["result"].as_array().cloned())
        .unwrap_or_default()
}

/// Instances with a GpufeedGpuStarving alert in `state` (pending or firing).
fn starving(port: u16, state: &str) -> Vec<String> {
    let mut v: Vec<String> = query(
        port,
        &format!("ALERTS{{alertname=\"GpufeedGpuStarving\",alertstate=\"{state}\"}}"),
    )
    .iter()
    .filter_map(|r| r["metric"]["instance"].as_str().map(String::from))
    .collect();
    v.sort();
    v
}

#[test]
fn prometheus_names_the_one_starving_node_of_four() {
    let Some(prom) = which("prometheus") else {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED prometheus_names_the_one_starving_node_of_four: no `prometheus` binary (apt-get install prometheus; .ci/run does)"
        );
        return;
    };
    let t0 = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = Vec::new();
    let mut targets = Vec::new();
    for i in 0..4 {
        let scen = dir.path().join(format!("node{i}.json"));
        std::fs::write(&scen, if i == 2 { STARVED } else { HEALTHY }).unwrap();
        let port = free_port();
        let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("gpufeed"))
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--window", "10s"])
            .env("GPUFEED_NVML_LIB", fake_nvml())
            .env("FAKE_NVML_SCENARIO", &scen)
            .env("SLURM_JOB_ID", "4242")
            .env("SLURM_NODEID", i.to_string())
            .env("SLURM_PROCID", i.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        nodes.push(Reap(child));
        targets.push(format!("127.0.0.1:{port}"));
    }
    let starved = targets[2].clone();
    // The shipped rules, with every `for:` shortened so the test takes seconds, not minutes.
    let shipped = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/prometheus/gpufeed-rules.yml"
    ))
    .unwrap();
    let fors = regex::Regex::new(r"(?m)^(\s+for: )\d+m$").unwrap();
    assert!(fors.find_iter(&shipped).count() >= 5);
    let rules = dir.path().join("rules.yml");
    std::fs::write(&rules, fors.replace_all(&shipped, "${1}5s").as_ref()).unwrap();
    let prom_port = free_port();
    let cfg = dir.path().join("prometheus.yml");
    let list = targets
        .iter()
        .map(|t| format!("'{t}'"))
        .collect::<Vec<_>>()
        .join(", ");
    std::fs::write(
        &cfg,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\nscrape_configs:\n  - job_name: gpufeed\n    static_configs:\n      - targets: [{list}]\n",
            rules.display()
        ),
    )
    .unwrap();
    let log_path = dir.path().join("prometheus.log");
    let _p = Reap(
        std::process::Command::new(prom)
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log_path).unwrap())
            .spawn()
            .unwrap(),
    );
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();

    // Bounded: the alert must fire within 120 s of the start.
    let deadline = t0 + Duration::from_secs(120);
    let mut fired = Vec::new();
    while Instant::now() < deadline {
        fired = starving(prom_port, "firing");
        if !fired.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let fired_after = t0.elapsed();
    assert_eq!(
        fired,
        vec![starved.clone()],
        "after {fired_after:?}; Prometheus log:\n{}",
        log()
    );
    // A few more evaluations: still exactly the starved node, and no healthy one pending.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(starving(prom_port, "firing"), vec![starved.clone()]);
    assert!(starving(prom_port, "pending").is_empty());
    // The alert's labels name the node and the Slurm job.
    let alert = query(
        prom_port,
        "ALERTS{alertname=\"GpufeedGpuStarving\",alertstate=\"firing\"}",
    );
    assert_eq!(alert[0]["metric"]["slurm_job_id"], "4242");
    assert_eq!(alert[0]["metric"]["slurm_nodeid"], "2");
    assert_eq!(alert[0]["metric"]["gpu"], "0");
    assert!(alert[0]["metric"]["hostname"].as_str().is_some());
    // All four targets are up, and no other alert fires for a healthy node.
    assert_eq!(query(prom_port, "up{job=\"gpufeed\"} == 1").len(), 4);
    for a in query(prom_port, "ALERTS{alertstate=\"firing\"}") {
        assert_eq!(a["metric"]["instance"], starved.as_str(), "{a}");
    }

    // The dashboard's fleet view: every fleet panel's query returns data here, and the top
    // starving node is the starved one.
    let d: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../dashboards/gpufeed.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let fleet: Vec<&serde_json::Value> = d["panels"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["title"].as_str().unwrap_or("").starts_with("Fleet:"))
        .collect();
    assert!(fleet.len() >= 3, "the dashboard has no fleet view");
    for p in &fleet {
        for t in p["targets"].as_array().unwrap() {
            let expr = t["expr"].as_str().unwrap().replace("$hostname", ".*");
            let res = query(prom_port, &expr);
            assert!(
                !res.is_empty(),
                "panel {}: {expr} returned nothing",
                p["title"]
            );
            if p["title"] == "Fleet: top starving nodes" {
                assert_eq!(res[0]["metric"]["instance"], starved.as_str());
                assert_eq!(res.len(), 4, "{res:?}");
            }
        }
    }
    eprintln!(
        "fleet test: alert fired after {:.1} s, whole test {:.1} s",
        fired_after.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
}
