//! `gpufeed analyze` against the real traces in ../shared/traces and the anchors' goldens.
//! Skipped, loudly, only where that folder is absent.

use crate::gpufeed as bin;
use crate::{find_by, json_ok, read_json, run_ok};
use gpufeed::trace::breakdown::TraceSummary;
use gpufeed::trace::{self};
use serde::Deserialize;
use std::path::PathBuf;

fn traces_dir() -> Option<PathBuf> {
    crate::shared_traces("real-trace tests")
}

const CATS: [&str; 9] = [
    "Kernel",
    "Memcpy",
    "Memset",
    "Communication",
    "Runtime",
    "DataLoader",
    "CpuOp",
    "Other",
    "Total",
];

/// Every shared trace analyzed once (in parallel), shared by the tests.
fn all() -> &'static std::collections::BTreeMap<String, TraceSummary> {
    static ALL: std::sync::OnceLock<std::collections::BTreeMap<String, TraceSummary>> =
        std::sync::OnceLock::new();
    ALL.get_or_init(|| {
        let d = traces_dir().expect("checked by the caller");
        let mut paths: Vec<PathBuf> = std::fs::read_dir(&d)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.to_string_lossy().ends_with(".json.gz"))
            .collect();
        paths.sort();
        paths
            .iter()
            .zip(trace::analyze_many(&paths))
            .map(|(p, r)| {
                let n = p.file_name().unwrap().to_string_lossy().into_owned();
                let s = r.unwrap_or_else(|e| panic!("{n}: {e}"));
                (n, s)
            })
            .collect()
    })
}

fn analyze(name: &str) -> Option<TraceSummary> {
    traces_dir()?;
    Some(
        all()
            .get(name)
            .unwrap_or_else(|| panic!("{name} missing"))
            .clone(),
    )
}

#[test]
fn step_breakdown_matches_tb_plugin_goldens_within_1pct() {
    let Some(d) = traces_dir() else { return };
    let mut checked = 0;
    let mut names: Vec<_> = std::fs::read_dir(&d)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .collect();
    names.sort();
    for p in names {
        let n = p.file_name().unwrap().to_string_lossy().into_owned();
        if !n.ends_with(".json.gz") {
            continue;
        }
        let g = d.join("golden").join(n.replace(".json.gz", ".golden.json"));
        let Ok(text) = std::fs::read_to_string(&g) else {
            continue;
        };
        let golden: serde_json::Value = serde_json::from_str(&text).unwrap();
        let Some(gsteps) = golden["tb_plugin"]["steps"].as_array() else {
            continue;
        };
        let s = &all()[&n];
        // where steps were inferred, the plugin-compatible breakdown is kept aside
        let mine = s.tb_plugin_steps.clone().unwrap_or(s.steps.clone());
        assert_eq!(mine.len(), gsteps.len(), "{n}: step count");
        let mut worst: f64 = 0.0;
        for (m, gs) in mine.iter().zip(gsteps) {
            assert_eq!(m.step, gs["step"].as_str().unwrap(), "{n}: step names");
            let total = gs["Total"].as_f64().unwrap().max(1.0);
            for (i, c) in CATS.iter().enumerate() {
                let gv = gs[*c].as_f64().unwrap();
                let err = (m.values()[i] - gv).abs() / total;
                worst = worst.max(err);
                assert!(
                    err <= 0.01,
                    "{n} step {}: {c} = {:.1}, golden {gv}",
                    m.step,
                    m.values()[i]
                );
            }
        }
        eprintln!(
            "{n}: {} steps, worst deviation {:.3}% of the step",
            mine.len(),
            worst * 100.0
        );
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} goldens checked");
}

#[test]
fn gpu_utilization_close_to_tb_plugin() {
    let Some(d) = traces_dir() else { return };
    for n in [
        "kineto_resnet50_v100_workers0",
        "kineto_resnet50_v100_workers4",
        "hta_a100_rank3_control",
        "hta_v100_test",
    ] {
        let s = &all()[&format!("{n}.json.gz")];
        let g = read_json(&d.join(format!("golden/{n}.golden.json")));
        let (dev, gv) = g["tb_plugin"]["gpu_utilization"]
            .as_object()
            .unwrap()
            .iter()
            .next()
            .unwrap();
        let mine = s
            .devices
            .iter()
            .find(|x| x.device.to_string() == *dev)
            .unwrap()
            .busy_pct;
        eprintln!(
            "{n}: GPU {dev} busy {mine:.2}% vs plugin {:.2}%",
            gv.as_f64().unwrap() * 100.0
        );
        assert!(
            (mine - gv.as_f64().unwrap() * 100.0).abs() < 2.0,
            "{n}: {mine}"
        );
    }
}

#[test]
fn tensor_core_figures_match_tb_plugin_goldens_under_their_names() {
    let Some(d) = traces_dir() else { return };
    let mut checked = 0;
    for (n, s) in all() {
        let g = d.join("golden").join(n.replace(".json.gz", ".golden.json"));
        let Ok(text) = std::fs::read_to_string(&g) else {
            continue;
        };
        let golden: serde_json::Value = serde_json::from_str(&text).unwrap();
        // The plugin's tc_ratio is per device: compare where one device has a figure.
        let Some(ratios) = golden["tb_plugin"]["tc_ratio"].as_array() else {
            continue;
        };
        let set: Vec<f64> = ratios.iter().filter_map(|v| v.as_f64()).collect();
        let k = &s.kernels;
        if let [r] = set[..] {
            assert!(
                (k.tb_plugin_tensor_core_pct - r * 100.0).abs() < 1.0,
                "{n}: plugin's figure {} vs golden {}",
                k.tb_plugin_tensor_core_pct,
                r * 100.0
            );
            checked += 1;
        }
        // gpufeed's own figure is the families' and counts at least the plugin's kernels.
        assert_eq!(k.tensor_core_pct, k.families.tensor_core_pct, "{n}");
        assert!(
            k.tensor_core_pct + 0.1 >= k.tb_plugin_tensor_core_pct,
            "{n}: {} < plugin's {}",
            k.tensor_core_pct,
            k.tb_plugin_tensor_core_pct
        );
    }
    assert!(checked >= 2, "only {checked} goldens with a tc_ratio");
}

#[test]
fn idle_breakdown_close_to_hta() {
    let Some(d) = traces_dir() else { return };
    for n in [
        "kineto_resnet50_v100_workers0",
        "kineto_resnet50_v100_workers4",
        "hta_v100_ns_resolution_rank0",
        "hta_nccl_2rank",
    ] {
        let s = &all()[&format!("{n}.json.gz")];
        let g = read_json(&d.join(format!("golden/{n}.golden.json")));
        for row in g["hta"]["idle_time_breakdown"].as_array().unwrap() {
            let stream = row["stream"].as_u64().unwrap();
            let Some(st) = s
                .devices
                .iter()
                .flat_map(|d| &d.streams)
                .find(|x| x.stream == stream)
            else {
                continue;
            };
            let mine = match row["idle_category"].as_str().unwrap() {
                "host_wait" => st.host_wait_us,
                "kernel_wait" => st.kernel_wait_us,
                _ => st.other_us,
            };
            let gv = row["idle_time"].as_f64().unwrap();
            eprintln!(
                "{n} stream {stream} {}: {mine:.0} vs HTA {gv:.0}",
                row["idle_category"]
            );
            // µs-resolution traces match HTA exactly; HTA rounds sub-µs timestamps of the newer
            // (ns-resolution) traces, so those differ by up to a few ms
            let exact = ["kineto_", "hta_alexnet", "hta_cuda_event", "hta_sampled"];
            if exact.iter().any(|p| n.starts_with(p)) {
                assert!(
                    (mine - gv).abs() <= 0.01 * gv.max(100.0),
                    "{n} stream {stream}: {mine} vs {gv}"
                );
            }
        }
    }
}

#[test]
fn resnet_workers0_is_input_bound_with_pageable_copies_and_no_amp() {
    let Some(s) = analyze("kineto_resnet50_v100_workers0.json.gz") else {
        return;
    };
    let f = trace::rules::evaluate(&s);
    let ids: Vec<&str> = f.iter().map(|x| x.id.as_str()).collect();
    for want in ["input_bound", "pageable_memcpy", "amp_unused"] {
        assert!(ids.contains(&want), "missing {want} in {ids:?}");
    }
    let ib = f.iter().find(|x| x.id.as_str() == "input_bound").unwrap();
    assert_eq!(ib.evidence.to_json()["num_workers"], 0);
    assert_eq!(s.dataloader.iterator.as_str(), "single_process");
    assert!(
        (s.kernels.tc_eligible_pct - 67.6).abs() < 1.0,
        "{}",
        s.kernels.tc_eligible_pct
    );
}

#[test]
fn resnet_workers4_is_not_input_bound() {
    let Some(s) = analyze("kineto_resnet50_v100_workers4.json.gz") else {
        return;
    };
    let ids: Vec<String> = trace::rules::evaluate(&s)
        .into_iter()
        .map(|x| x.id.to_string())
        .collect();
    assert!(!ids.contains(&"input_bound".to_string()), "{ids:?}");
    assert!(ids.contains(&"amp_unused".to_string()), "{ids:?}");
    assert_eq!(s.dataloader.iterator.as_str(), "multi_process");
}

#[test]
fn special_traces_are_handled() {
    let Some(_) = traces_dir() else { return };
    let cpu = analyze("hta_cpu_only_rank34.json.gz").unwrap();
    assert!(cpu.devices.is_empty() && cpu.warnings.iter().any(|w| w.contains("CPU-only")));
    assert!(trace::rules::evaluate(&cpu)
        .iter()
        .any(|f| f.id.as_str() == "comm_bound"));
    let nccl = analyze("hta_nccl_2rank.json.gz").unwrap();
    assert!(nccl.communication.kernel_us > 0.0);
    let amd = analyze("hta_amd_mi250_train.json.gz").unwrap();
    assert!(
        amd.kernels.count > 0 && amd.launch.launch_calls > 0,
        "hip launches: {}",
        amd.launch.launch_calls
    );
    let triton = analyze("hta_triton_example.json.gz").unwrap();
    assert_eq!(triton.kernels.count, 1);
    assert!(triton.launch.launch_calls >= 1, "cuLaunchKernel");
    let sync = analyze("hta_cuda_event_sync.json.gz").unwrap();
    assert!(sync.sync.cuda_sync_events > 0);
    let alex = analyze("hta_alexnet_pageable.json.gz").unwrap();
    assert!(trace::rules::evaluate(&alex)
        .iter()
        .any(|f| f.id.as_str() == "pageable_memcpy"));
}

// ---------- the binary ----------

#[derive(Deserialize)]
struct JsonStep {
    step: String,
    kernel_us: f64,
    memcpy_us: f64,
    memset_us: f64,
    communication_us: f64,
    runtime_us: f64,
    dataloader_us: f64,
    cpu_op_us: f64,
    other_us: f64,
    total_us: f64,
}

#[derive(Deserialize)]
struct JsonFinding {
    id: String,
    severity: String,
    title: String,
    evidence: std::collections::BTreeMap<String, serde_json::Value>,
    recommendation: String,
}

#[derive(Deserialize)]
struct JsonDevice {
    device: u64,
    busy_pct: f64,
}

#[derive(Deserialize)]
struct JsonReport {
    schema_version: u32,
    truncated: bool,
    steps: Vec<JsonStep>,
    breakdown: JsonStep,
    devices: Vec<JsonDevice>,
    findings: Vec<JsonFinding>,
}

#[test]
fn json_output_deserializes_into_typed_structs() {
    let Some(d) = traces_dir() else { return };
    let out = run_ok(
        bin()
            .args(["analyze", "--format", "json"])
            .arg(d.join("kineto_resnet50_v100_workers0.json.gz")),
    );
    let r: JsonReport = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r.schema_version, 1);
    assert!(!r.truncated);
    assert_eq!(r.steps.len(), 6);
    assert_eq!(r.steps[0].step, "5");
    for s in &r.steps {
        let parts = s.kernel_us
            + s.memcpy_us
            + s.memset_us
            + s.communication_us
            + s.runtime_us
            + s.dataloader_us
            + s.cpu_op_us
            + s.other_us;
        assert!(
            (parts - s.total_us).abs() < 1.0,
            "categories add up to the step"
        );
    }
    assert!(r.breakdown.dataloader_us > 50_000.0);
    assert_eq!(r.devices[0].device, 0);
    assert!(r.devices[0].busy_pct > 50.0);
    assert_eq!(r.findings[0].id, "input_bound", "top fix first");
    assert!(r
        .findings
        .iter()
        .all(|f| !f.title.is_empty() && !f.recommendation.is_empty() && !f.severity.is_empty()));
    assert!(r.findings[0].evidence.contains_key("dataloader_pct"));
}

#[test]
fn text_markdown_and_steps_table() {
    let Some(d) = traces_dir() else { return };
    let p = d.join("kineto_resnet50_v100_workers4.json.gz");
    let out = bin().args(["analyze", "--steps"]).arg(&p).output().unwrap();
    assert!(out.status.success());
    let t = String::from_utf8_lossy(&out.stdout);
    assert!(
        t.contains("dataload") && t.contains("amp") || t.contains("Tensor cores"),
        "{t}"
    );
    let out = bin()
        .args(["analyze", "--format", "markdown", "--steps"])
        .arg(&p)
        .output()
        .unwrap();
    assert!(out.status.success());
    let m = String::from_utf8_lossy(&out.stdout);
    assert!(
        m.starts_with("# gpufeed analyze") && m.contains("| step |"),
        "{m}"
    );
}

#[test]
fn directory_of_ranks_and_stdin() {
    let Some(d) = traces_dir() else { return };
    let tmp = tempfile::tempdir().unwrap();
    for n in ["hta_a100_rank3_control.json.gz", "hta_v100_test.json.gz"] {
        std::fs::copy(d.join(n), tmp.path().join(n)).unwrap();
    }
    let out = run_ok(bin().args(["analyze", "--format", "json"]).arg(tmp.path()));
    // Rank 3 of 8 and rank 1 of 2 are not ranks of one job: each is analyzed on its own, and
    // `compare` is suggested.
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let each = v.as_array().unwrap();
    assert_eq!(each.len(), 2);
    assert!(each
        .iter()
        .all(|r| r["ranks"].as_array().unwrap().len() == 1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not ranks of one job (their world sizes differ (8 and 2))")
            && err.contains("gpufeed compare"),
        "{err}"
    );
    let bytes = std::fs::read(d.join("hta_triton_example.json.gz")).unwrap();
    bin()
        .args(["analyze", "-"])
        .write_stdin(bytes)
        .assert()
        .success();
}

#[test]
fn missing_file_exits_3_with_one_line() {
    let out = bin()
        .args(["analyze", "/nonexistent/trace.json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    assert!(e.contains("/nonexistent/trace.json"));
}

#[test]
fn truncated_gzip_is_analyzed_with_a_warning() {
    let Some(d) = traces_dir() else { return };
    let bytes = std::fs::read(d.join("kineto_resnet50_v100_workers0.json.gz")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let half = tmp.path().join("half.json.gz");
    std::fs::write(&half, &bytes[..bytes.len() / 2]).unwrap();
    let out = bin()
        .args(["analyze", "--format", "json"])
        .arg(&half)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["truncated"], true);
    assert!(String::from_utf8_lossy(&out.stderr).contains("truncated"));
    // text output says so too
    let out = bin().arg("analyze").arg(&half).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("truncated"));
    // nothing usable: exit 3
    let tiny = tmp.path().join("tiny.json.gz");
    std::fs::write(&tiny, &bytes[..40]).unwrap();
    let out = bin().arg("analyze").arg(&tiny).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn garbage_and_empty_inputs_exit_3() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, content) in [
        ("garbage.json", &b"\x00\x01not json at all"[..]),
        ("empty.json", &b""[..]),
        (
            "noevents.json",
            &br#"{"schemaVersion":1,"traceEvents":[]}"#[..],
        ),
        ("other.json", &br#"{"hello":"world"}"#[..]),
    ] {
        let p = tmp.path().join(name);
        std::fs::write(&p, content).unwrap();
        let out = bin().arg("analyze").arg(&p).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(3),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stderr).trim().lines().count(),
            1,
            "{name}"
        );
    }
}

#[test]
fn compare_two_real_traces_speedup_is_the_ratio_of_mean_step_times() {
    let Some(d) = traces_dir() else { return };
    let v = json_ok(
        bin()
            .args(["compare", "--format", "json"])
            .arg(d.join("kineto_resnet50_v100_workers0.json.gz"))
            .arg(d.join("kineto_resnet50_v100_workers4.json.gz")),
    );
    let b = analyze("kineto_resnet50_v100_workers0.json.gz").unwrap();
    let a = analyze("kineto_resnet50_v100_workers4.json.gz").unwrap();
    let want = b.breakdown.total_us / a.breakdown.total_us;
    let got = v["speedup"]["value"].as_f64().unwrap();
    assert!((got - want).abs() < 1e-3, "{got} vs {want}");
    assert_eq!(v["speedup"]["metric"], "mean_step_time");
    let ci = v["speedup"]["ci95"].as_array().unwrap();
    assert!(ci[0].as_f64().unwrap() < got && got < ci[1].as_f64().unwrap());
    assert_eq!(v["verdict"]["before"], "input_bound");
    assert_ne!(v["verdict"]["after"], "input_bound");
    let dl = find_by(&v["changes"], "metric", "data_wait_pct").unwrap();
    assert!(
        dl["before"].as_f64().unwrap() > 30.0 && dl["after"].as_f64().unwrap() < 5.0,
        "{dl}"
    );
}
