//! End-to-end: `gpufeed run` records a fake GPU (crates/fake-nvml) while real child processes
//! shaped like each bottleneck run, then `gpufeed diagnose` must name the bottleneck.
//!
//! Readers stuck in I/O (D state, io pressure) cannot be produced on demand on a test machine;
//! that class is covered by a generated recording in tests/diagnose_cli.rs.
//! The scenarios burn CPU, so they run one at a time.

use crate::common_fake;

use crate::gpufeed;
use crate::run_ok;
use common_fake::{fake_nvml, scenario};
use gpufeed::diagnose::DiagnoseReport;
use std::path::Path;
use std::sync::Mutex;

static SERIAL: Mutex<()> = Mutex::new(());

const SQUARE: &str = r#""util":{"pattern":"square","period_s":2.0,"high":85,"low":10,"duty":0.3}"#;

/// A scenario of one H100 with 80 of its 85.9 GB in use and `device` (more of its JSON fields),
/// written into `dir`.
fn full_h100(dir: &std::path::Path, device: &str) -> std::path::PathBuf {
    scenario(
        dir,
        &format!(
            r#"{{"devices":[{{"name":"NVIDIA H100 80GB HBM3","memory_total_bytes":85899345920,"memory_used_bytes":80000000000,{device}}}]}}"#
        ),
    )
}

/// Records `script` (run by sh) under the fake driver with `device` JSON, then diagnoses it.
fn run_and_diagnose(device: &str, script: &str) -> DiagnoseReport {
    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let sc = full_h100(dir.path(), device);
    let rec = dir.path().join("r.ndjson");
    gpufeed()
        .env("FAKE_NVML_SCENARIO", &sc)
        .arg("--nvml-lib")
        .arg(fake_nvml())
        .args(["run", "-q", "-o"])
        .arg(&rec)
        .args(["--", "sh", "-c", script])
        .assert()
        .success();
    diagnose(&rec)
}

fn diagnose(rec: &Path) -> DiagnoseReport {
    let out = run_ok(gpufeed().args(["diagnose", "--format", "json"]).arg(rec));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn ids(r: &DiagnoseReport) -> Vec<&str> {
    r.findings.iter().map(|f| f.id.as_str()).collect()
}

/// A main shell that forks `n` busy workers (subshells share its command line, as DataLoader
/// workers share python's) and stops them after `secs`. Each worker also stops by itself once
/// the main shell is gone (`kill -0` is a builtin: no extra processes), so nothing outlives a
/// killed test.
fn busy_workers(n: usize, secs: u32) -> String {
    let mut s = String::from("p=''; ");
    for _ in 0..n {
        s.push_str("(while kill -0 $$ 2>/dev/null; do :; done) & p=\"$p $!\"; ");
    }
    format!("{s}sleep {secs}; kill $p")
}

#[test]
fn one_pinned_worker_and_a_square_wave_gpu_is_input_bound() {
    let r = run_and_diagnose(SQUARE, &busy_workers(1, 6));
    assert_eq!(r.verdict.id.as_str(), "input_bound", "{:#?}", r.verdict);
    let f = &r.findings[0];
    assert_eq!(f.id.as_str(), "input_bound", "{:?}", ids(&r));
    let period = f.evidence.to_json()["util_period_s"].as_f64().unwrap();
    assert!((period - 2.0).abs() < 0.3, "period {period}");
    assert_eq!(r.job.workers_max, 1, "{:#?}", r.job.processes);
    assert_eq!(r.job.workers_seen, 1, "the `sleep` helper is not a worker");
    // A gpufeed recording has host and process data: the kind is always decided, and the fix
    // never asks to record the host.
    assert_ne!(f.evidence.to_json()["kind"], "unknown", "{f:#?}");
    assert!(!f.recommendation.contains("Record the host"), "{f:#?}");
    // Other builds may share this machine's cores (then the worker gets less than a core and
    // the CPU is the limit); when the host stayed quiet, the worker is pinned and the kind must
    // say so.
    let idle = r.host.idle_cores_mean.unwrap_or(0.0);
    let busy = r.host.cpu_mean_pct.unwrap_or(100.0);
    if idle >= 1.0 && busy < 70.0 && r.job.worker_cpu_mean_pct.unwrap_or(0.0) >= 85.0 {
        assert!(r.job.saturated_workers >= 1, "{:#?}", r.job);
        assert_eq!(f.evidence.to_json()["kind"], "too_few_workers", "{f:#?}");
        assert!(f.recommendation.contains("num_workers="));
    } else {
        eprintln!(
            "host busy ({busy:.0}%, {idle:.1} idle cores): kind {}",
            f.evidence.to_json()["kind"]
        );
    }
}

#[test]
fn every_core_busy_is_input_bound_cpu_saturated() {
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let r = run_and_diagnose(SQUARE, &busy_workers(cpus + 1, 6));
    assert_eq!(r.verdict.id.as_str(), "input_bound", "{:#?}", r.verdict);
    assert_eq!(
        r.findings[0].evidence.to_json()["kind"],
        "cpu_saturated",
        "{:#?}",
        r.host
    );
    // One finding per cause: no separate cpu_saturated finding beside the kind.
    assert!(!ids(&r).contains(&"cpu_saturated"), "{:?}", ids(&r));
}

#[test]
fn healthy_steady_gpu_gets_no_starvation_finding() {
    let r = run_and_diagnose(r#""util":97"#, "sleep 5");
    assert_eq!(r.verdict.id.as_str(), "compute_bound", "{:#?}", r.verdict);
    for bad in [
        "input_bound",
        "cpu_saturated",
        "io_bound",
        "main_process_bound",
        "batch_too_small",
    ] {
        assert!(!ids(&r).contains(&bad), "{:?}", ids(&r));
    }
    // 80 of 86 GB in use is mentioned only as weak evidence.
    assert!(r.notes.iter().any(|n| n.contains("weak evidence")));
}

#[test]
fn degraded_link_at_its_limit_is_transfer_bound() {
    // A Gen4 x16 card trained at Gen1 x4 (1 GB/s) moving 0.95 GB/s.
    let r = run_and_diagnose(
        r#""util":60,"pcie":{"max_gen":4,"max_width":16,"cur_gen":1,"cur_width":4,"rx_bytes_per_s":9.5e8}"#,
        "sleep 5",
    );
    assert_eq!(
        r.verdict.id.as_str(),
        "transfer_bound",
        "{:#?}",
        r.gpus[0].pcie
    );
    assert!(ids(&r).contains(&"transfer_bound"));
    let link = r
        .findings
        .iter()
        .find(|f| f.id.as_str() == "pcie_link_degraded")
        .unwrap_or_else(|| panic!("{:?}", ids(&r)));
    assert_eq!(link.evidence.to_json()["pcie_gen"], 1);
    assert_eq!(link.evidence.to_json()["pcie_width_max"], 16);
}

#[test]
fn degraded_link_with_little_traffic_is_only_a_warning() {
    let r = run_and_diagnose(
        r#""util":95,"pcie":{"max_gen":5,"max_width":16,"cur_gen":3,"cur_width":8,"rx_bytes_per_s":1e8}"#,
        "sleep 4",
    );
    assert_eq!(r.verdict.id.as_str(), "compute_bound");
    // The link warning first, then the busy GPU's levers (info).
    assert_eq!(ids(&r), ["pcie_link_degraded", "compute_bound"]);
    assert_eq!(r.findings[0].severity, gpufeed::Severity::Warning);
}

#[test]
fn thermal_throttling_is_throttled() {
    // SW thermal (0x20) + HW thermal (0x40) on a busy GPU.
    let r = run_and_diagnose(r#""util":97,"throttle_reasons":96"#, "sleep 5");
    assert_eq!(r.verdict.id.as_str(), "throttled", "{:#?}", r.verdict);
    assert_eq!(ids(&r), ["throttled"]);
    assert!(r.findings[0].recommendation.contains("airflow"));
}

#[test]
fn idle_gpu_bit_while_starving_is_not_throttling() {
    // The driver sets GpuIdle whenever nothing runs: a starving job flickers it.
    let r = run_and_diagnose(
        &format!(
            r#"{SQUARE},"throttle_reasons":{{"pattern":"square","period_s":2.0,"high":0,"low":1,"duty":0.3}}"#
        ),
        "sleep 5",
    );
    assert!(!ids(&r).contains(&"throttled"), "{:?}", ids(&r));
    assert_eq!(r.verdict.id.as_str(), "input_bound");
}

#[test]
fn run_prints_the_summary_then_the_diagnosis_each_figure_once() {
    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let sc = full_h100(dir.path(), SQUARE);
    let rec = dir.path().join("r.ndjson");
    let out = gpufeed()
        .env("FAKE_NVML_SCENARIO", &sc)
        .arg("--nvml-lib")
        .arg(fake_nvml())
        .args(["run", "-o"])
        .arg(&rec)
        .args(["--", "sh", "-c", &busy_workers(1, 5)])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stderr).unwrap();
    let r = diagnose(&rec);
    // The summary gives the GPU, host and job figures; the diagnosis after it adds the verdict
    // and the fix, not a second header or a second copy of those figures.
    assert!(text.starts_with("gpufeed: recorded"), "{text}");
    assert!(!text.contains("gpufeed diagnose:"), "{text}");
    assert_eq!(text.matches("NVIDIA H100 80GB HBM3").count(), 1, "{text}");
    assert_eq!(text.matches(" CPUs").count(), 1, "{text}");
    assert!(!text.contains("JOB "), "{text}");
    let top = &r.findings[0];
    assert_eq!(
        text.matches(top.recommendation.as_str()).count(),
        1,
        "{text}"
    );
    let busy = format!("{:.0}%", r.verdict.gpu_busy_fraction.unwrap() * 100.0);
    assert!(r.verdict.summary.contains(&busy));
    assert!(
        !text.contains(&format!("utilization mean {busy}")),
        "{text}"
    );
}
