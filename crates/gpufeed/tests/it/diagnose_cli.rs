//! `gpufeed diagnose` through the real binary: recordings written here (one per bottleneck
//! class, including the ones a test machine cannot produce for real, such as processes stuck in
//! D state), real-format nvidia-smi / dcgmi logs from tests/data, bad input, and the JSON
//! contract deserialized into its typed structs.

use crate::find_by;
use crate::gpufeed;
use crate::h100_header;
use crate::json_ok;
use gpufeed::diagnose::DiagnoseReport;
use gpufeed::header_line;
use gpufeed::{DiskRate, GpuSample, HostSample, ProcSample, ProcStart};
use gpufeed::{End, Line, ProcsLine};
use predicates::prelude::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// The shape of a synthetic job, sampled at 10 Hz.
#[derive(Clone)]
struct Shape {
    seconds: f64,
    cpus: u32,
    /// GPU utilization at time t.
    util: fn(f64) -> f64,
    /// Per-core busy % (same for every sample).
    cores: Vec<f64>,
    /// (cpu %, state) of the main process and of each worker.
    main: (f64, char),
    workers: Vec<(f64, char)>,
    psi_io: f64,
    pcie: Option<(u32, u32, f64)>,
    throttle: u64,
    mem_used_gib: u64,
}

fn healthy() -> Shape {
    Shape {
        seconds: 60.0,
        cpus: 8,
        util: |_| 97.0,
        cores: vec![60.0, 40.0, 35.0, 30.0, 5.0, 5.0, 5.0, 5.0],
        main: (70.0, 'R'),
        workers: vec![(40.0, 'S'), (40.0, 'R'), (35.0, 'S'), (30.0, 'R')],
        psi_io: 0.5,
        pcie: Some((4, 16, 2e9)),
        throttle: 0,
        mem_used_gib: 70,
    }
}

/// Starving: the GPU busy in bursts, one worker pinned at 100% of a core and the rest idle.
fn one_pinned_worker() -> Shape {
    Shape {
        util: square,
        cores: vec![100.0, 30.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0],
        main: (30.0, 'S'),
        workers: vec![(99.0, 'R')],
        ..healthy()
    }
}

fn square(t: f64) -> f64 {
    if (t / 2.0).fract() < 0.3 {
        85.0
    } else {
        10.0
    }
}

fn write_recording(dir: &Path, name: &str, s: &Shape) -> PathBuf {
    let mut h = h100_header("node1", s.cpus, 1);
    h.gpus[0].pcie_max_gen = Some(4);
    h.gpus[0].pcie_max_width = Some(16);
    h.command = Some(vec!["python".into(), "train.py".into()]);
    h.pid = Some(1000);
    let mut out = header_line(&h);
    out.push('\n');
    let mut push = |l: Line| {
        out.push_str(&serde_json::to_string(&l).unwrap());
        out.push('\n');
    };
    push(Line::ProcStart(ProcStart {
        t_s: 0.0,
        pid: 1000,
        ppid: 1,
        cmd: Some("python train.py".into()),
        comm: Some("python".into()),
    }));
    for w in 0..s.workers.len() as u32 {
        push(Line::ProcStart(ProcStart {
            t_s: 0.05,
            pid: 1001 + w,
            ppid: 1000,
            cmd: Some("python train.py".into()),
            comm: Some("pt_data_worker".into()),
        }));
    }
    let n = (s.seconds * 10.0) as u64;
    let mut rx: u64 = 0;
    for i in 1..=n {
        let t = i as f64 / 10.0;
        let slow = i % 10 == 0;
        let u = (s.util)(t);
        if let Some((_, _, rate)) = s.pcie {
            rx += (rate * 0.1) as u64;
        }
        push(Line::Gpu(GpuSample {
            index: 0,
            t_s: t,
            util_samples: Some(vec![[t - 0.05, u]]),
            util_pct: Some(u),
            mem_used_bytes: Some(s.mem_used_gib << 30),
            pcie_rx_bytes: s.pcie.map(|_| rx),
            pcie_gen: s.pcie.filter(|_| slow).map(|p| p.0),
            pcie_width: s.pcie.filter(|_| slow).map(|p| p.1),
            throttle_reasons: Some(if u < 20.0 { 1 } else { s.throttle }),
            temperature_c: Some(70),
            power_w: Some(500.0),
            ..Default::default()
        }));
        push(Line::Host(HostSample {
            t_s: t,
            cpu_pct: s.cores.clone(),
            cpu_total_pct: Some(s.cores.iter().sum::<f64>() / s.cores.len() as f64),
            iowait_pct: Some(s.psi_io / 2.0),
            psi_cpu_some_pct: Some(1.0),
            psi_io_some_pct: Some(s.psi_io),
            psi_io_full_pct: Some(s.psi_io / 2.0),
            psi_mem_some_pct: Some(0.0),
            psi_mem_full_pct: Some(0.0),
            disks: vec![DiskRate {
                device: "nvme0n1".into(),
                read_bytes_per_s: 50e6,
                write_bytes_per_s: 0.0,
            }],
            ..Default::default()
        }));
        let mut procs = vec![ProcSample {
            pid: 1000,
            cpu_pct: Some(s.main.0),
            rss_bytes: Some(8 << 30),
            state: Some(s.main.1),
            read_bytes: Some(0),
            ..Default::default()
        }];
        for (w, (cpu, st)) in s.workers.iter().enumerate() {
            procs.push(ProcSample {
                pid: 1001 + w as u32,
                cpu_pct: Some(*cpu),
                rss_bytes: Some(2 << 30),
                state: Some(if *st == 'D' && i % 3 == 0 { 'R' } else { *st }),
                read_bytes: Some(i * 1_000_000),
                ..Default::default()
            });
        }
        push(Line::Procs(ProcsLine { t_s: t, procs }));
    }
    push(Line::End(End {
        t_s: s.seconds,
        exit_code: Some(0),
        signal: None,
        reason: Some(gpufeed::EndReason::JobExited),
        ..Default::default()
    }));
    let p = dir.join(name);
    std::fs::write(&p, out).unwrap();
    p
}

fn diagnose_json(path: &Path, extra: &[&str]) -> DiagnoseReport {
    let out = gpufeed()
        .arg("diagnose")
        .args(["--format", "json"])
        .args(extra)
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "diagnose failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "JSON does not match the contract: {e}\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn ids(r: &DiagnoseReport) -> Vec<&str> {
    r.findings.iter().map(|f| f.id.as_str()).collect()
}

#[test]
fn healthy_recording_is_compute_bound_without_findings() {
    let dir = tempfile::tempdir().unwrap();
    let p = write_recording(dir.path(), "healthy.ndjson", &healthy());
    let r = diagnose_json(&p, &[]);
    assert_eq!(r.verdict.id.as_str(), "compute_bound");
    assert!(r.verdict.confidence >= 0.8, "{:?}", r.verdict);
    // Only the info finding with the next levers: nothing starves the GPU.
    assert_eq!(ids(&r), ["compute_bound"]);
    assert_eq!(r.findings[0].severity, gpufeed::Severity::Info);
    assert!(r.findings[0].recommendation.contains("bf16"), "an H100");
    assert_eq!(r.source.format.as_str(), "recording");
    assert!(!r.source.unfinished && !r.source.truncated);
    assert_eq!(r.gpus.len(), 1);
    assert_eq!(r.gpus[0].util_samples, 600);
    assert_eq!(r.job.pid, Some(1000));
    assert_eq!(r.job.workers_max, 4);
    assert_eq!(r.job.exit_code, Some(0));
    assert_eq!(r.host.cpu_count, Some(8));
    // 70 of 80 GiB: the weak-evidence caveat is there, and it is only a note.
    assert!(r.notes.iter().any(|n| n.contains("caching allocator")));
}

#[test]
fn one_pinned_worker_with_idle_cores_is_input_bound_too_few_workers() {
    let dir = tempfile::tempdir().unwrap();
    let s = one_pinned_worker();
    let p = write_recording(dir.path(), "starving.ndjson", &s);
    let r = diagnose_json(&p, &[]);
    assert_eq!(r.verdict.id.as_str(), "input_bound");
    assert!(r.verdict.confidence >= 0.9);
    let f = &r.findings[0];
    assert_eq!(f.id.as_str(), "input_bound");
    assert_eq!(f.evidence.to_json()["kind"], "too_few_workers");
    assert_eq!(f.evidence.to_json()["recommended_num_workers"], 3);
    assert!(f.recommendation.contains("num_workers=3"));
    let period = f.evidence.to_json()["util_period_s"].as_f64().unwrap();
    assert!((period - 2.0).abs() < 0.2, "{period}");
    assert!(f.expected_speedup.unwrap() > 2.0);
    assert!(!ids(&r).contains(&"cpu_saturated"));
}

#[test]
fn a_worker_beside_a_core_that_is_not_quite_idle_still_decides_the_kind() {
    // Two CPUs: the worker pins one, the other is at 25% (gpufeed and the main process), so no
    // core counts as idle and no threshold names the kind; the host data still decide it.
    let dir = tempfile::tempdir().unwrap();
    let s = Shape {
        util: square,
        cpus: 2,
        cores: vec![100.0, 25.0],
        main: (20.0, 'S'),
        workers: vec![(99.0, 'R')],
        ..healthy()
    };
    let p = write_recording(dir.path(), "two_cpus.ndjson", &s);
    let r = diagnose_json(&p, &[]);
    assert_eq!(r.verdict.id.as_str(), "input_bound");
    let f = &r.findings[0];
    assert_eq!(f.evidence.to_json()["kind"], "too_few_workers", "{f:#?}");
    assert_eq!(f.evidence.to_json()["kind_basis"], "nearest");
    // A fix never asks for what the input already has.
    for f in &r.findings {
        assert!(!f.recommendation.contains("gpufeed run"), "{f:#?}");
    }
    assert!(!r.verdict.summary.contains("gpufeed run"));
}

#[test]
fn all_cores_busy_is_input_bound_cpu_saturated() {
    let dir = tempfile::tempdir().unwrap();
    let s = Shape {
        util: square,
        cores: vec![100.0; 8],
        workers: vec![(95.0, 'R'); 7],
        ..healthy()
    };
    let p = write_recording(dir.path(), "cpu.ndjson", &s);
    let r = diagnose_json(&p, &[]);
    assert_eq!(r.verdict.id.as_str(), "input_bound");
    // One finding per cause: the CPU detail is input_bound's evidence.
    assert_eq!(ids(&r), ["input_bound"]);
    assert_eq!(r.findings[0].evidence.to_json()["kind"], "cpu_saturated");
    assert_eq!(r.findings[0].evidence.to_json()["host_cpu_mean_pct"], 100.0);
}

#[test]
fn readers_stuck_in_io_are_input_bound_io_bound() {
    // D state cannot be produced on demand on a test machine: this recording stands in for it.
    let dir = tempfile::tempdir().unwrap();
    let s = Shape {
        util: square,
        cores: vec![10.0; 8],
        workers: vec![(8.0, 'D'), (7.0, 'D'), (9.0, 'D'), (6.0, 'D')],
        psi_io: 45.0,
        ..healthy()
    };
    let p = write_recording(dir.path(), "io.ndjson", &s);
    let r = diagnose_json(&p, &[]);
    assert_eq!(r.verdict.id.as_str(), "input_bound");
    assert_eq!(ids(&r), ["input_bound"]);
    let io = &r.findings[0];
    assert_eq!(io.evidence.to_json()["kind"], "io_bound");
    assert!(
        io.evidence.to_json()["d_state_time_fraction"]
            .as_f64()
            .unwrap()
            > 0.5
    );
    assert_eq!(io.evidence.to_json()["psi_io_some_mean_pct"], 45.0);
    assert!(io.recommendation.contains("shards"));
}

#[test]
fn degraded_saturated_link_is_transfer_bound() {
    let dir = tempfile::tempdir().unwrap();
    let s = Shape {
        util: |_| 60.0,
        pcie: Some((2, 4, 1.8e9)),
        ..healthy()
    };
    let p = write_recording(dir.path(), "link.ndjson", &s);
    let r = diagnose_json(&p, &[]);
    assert_eq!(r.verdict.id.as_str(), "transfer_bound");
    assert!(ids(&r).contains(&"transfer_bound"));
    let link = r
        .findings
        .iter()
        .find(|f| f.id.as_str() == "pcie_link_degraded")
        .unwrap();
    assert_eq!(link.evidence.to_json()["pcie_gen"], 2);
    assert_eq!(link.evidence.to_json()["pcie_width"], 4);
    assert_eq!(link.expected_speedup, Some(15.8));
}

#[test]
fn thermal_throttling_is_throttled() {
    let dir = tempfile::tempdir().unwrap();
    let s = Shape {
        throttle: 0x20 | 0x40,
        ..healthy()
    };
    let p = write_recording(dir.path(), "hot.ndjson", &s);
    let r = diagnose_json(&p, &[]);
    assert_eq!(r.verdict.id.as_str(), "throttled");
    assert_eq!(ids(&r), ["throttled"]);
    assert!(r.findings[0]
        .evidence
        .to_json()
        .contains_key("hw_thermal_time_fraction"));
}

#[test]
fn several_files_give_a_json_array_and_text_per_file() {
    let dir = tempfile::tempdir().unwrap();
    let a = write_recording(dir.path(), "a.ndjson", &healthy());
    let b = data("dcgmi_dmon_starving.log");
    let out = gpufeed()
        .args(["diagnose", "--format", "json"])
        .arg(&a)
        .arg(&b)
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: Vec<DiagnoseReport> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v.len(), 2);
    assert_eq!(v[1].source.format.as_str(), "dcgmi");
    gpufeed()
        .arg("diagnose")
        .arg(&a)
        .arg(&b)
        .assert()
        .success()
        .stdout(
            predicate::str::contains("compute_bound").and(predicate::str::contains("input_bound")),
        );
}

#[test]
fn smi_csv_log_with_two_gpus_repeated_header_and_cut_end() {
    let r = diagnose_json(&data("smi_query_starving.csv"), &[]);
    assert_eq!(r.source.format.as_str(), "smi_csv");
    assert!(r.source.truncated);
    assert_eq!(r.source.malformed, 0);
    assert_eq!(r.gpus.len(), 2);
    assert_eq!(r.gpus[0].name.as_deref(), Some("NVIDIA A100-SXM4-80GB"));
    assert_eq!(r.gpus[1].util_samples, 120);
    assert_eq!(r.gpus[0].mem_total_bytes, Some(81920 << 20));
    let p = r.gpus[0].periodicity.unwrap();
    assert!((p.period_s - 10.0).abs() < 0.5, "{p:?}");
    assert_eq!(r.verdict.id.as_str(), "input_bound");
    assert_eq!(r.findings[0].evidence.to_json()["kind"], "unknown");
    assert!(r
        .notes
        .iter()
        .any(|n| n.contains("no host or process data")));
}

#[test]
fn headerless_csv_needs_columns() {
    gpufeed()
        .arg("diagnose")
        .arg(data("smi_noheader_nounits_healthy.csv"))
        .assert()
        .code(3)
        .stderr(predicate::str::contains("--columns"));
    let r = diagnose_json(
        &data("smi_noheader_nounits_healthy.csv"),
        &[
            "--columns",
            "utilization.gpu,memory.used [MiB],memory.total [MiB]",
        ],
    );
    assert_eq!(r.verdict.id.as_str(), "compute_bound");
    assert_eq!(r.gpus[0].util_samples, 60);
    assert!((r.duration_s - 59.0).abs() < 1e-9);
}

#[test]
fn dmon_logs() {
    let r = diagnose_json(&data("smi_dmon_healthy.log"), &[]);
    assert_eq!(r.source.format.as_str(), "smi_dmon");
    assert_eq!(r.verdict.id.as_str(), "compute_bound");
    assert_eq!(ids(&r), ["compute_bound"]);
    let r = diagnose_json(&data("dcgmi_dmon_starving.log"), &[]);
    assert_eq!(r.verdict.id.as_str(), "input_bound");
    let prof = r.gpus[0].profiling.as_ref().unwrap();
    assert!(prof.sm_active_pct.unwrap() > 20.0);
    // Forcing the format works too.
    let r = diagnose_json(
        &data("dcgmi_dmon_starving.log"),
        &["--input-format", "dcgmi"],
    );
    assert_eq!(r.gpus.len(), 2);
}

fn one_line_exit_3(args: &[&str], path: &Path, needle: &str) {
    let out = gpufeed()
        .arg("diagnose")
        .args(args)
        .arg(path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.contains(needle), "{needle:?} not in {err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn bad_input_is_one_line_and_exit_3() {
    let dir = tempfile::tempdir().unwrap();
    one_line_exit_3(&[], &dir.path().join("nope.ndjson"), "cannot open");
    one_line_exit_3(&[], dir.path(), "directory");
    let empty = dir.path().join("empty.csv");
    std::fs::write(&empty, "").unwrap();
    one_line_exit_3(&[], &empty, "is empty");
    let blank = dir.path().join("blank.log");
    std::fs::write(&blank, "\n\n  \n").unwrap();
    one_line_exit_3(&[], &blank, "is empty");
    let junk = dir.path().join("junk.txt");
    std::fs::write(&junk, "hello\nworld\n").unwrap();
    one_line_exit_3(&[], &junk, "unrecognized format");
    let json = dir.path().join("other.json");
    std::fs::write(&json, "{\"a\": 1}\n").unwrap();
    one_line_exit_3(&[], &json, "not a gpufeed recording");
    one_line_exit_3(
        &["--input-format", "recording"],
        &data("smi_dmon_healthy.log"),
        "not a gpufeed recording",
    );
    one_line_exit_3(
        &["--input-format", "dcgmi"],
        &data("smi_query_starving.csv"),
        "header",
    );
    let newer = dir.path().join("newer.ndjson");
    let text = std::fs::read_to_string(write_recording(dir.path(), "x.ndjson", &healthy()))
        .unwrap()
        .replacen("\"schema_version\":1", "\"schema_version\":99", 1);
    std::fs::write(&newer, text).unwrap();
    one_line_exit_3(&[], &newer, "upgrade gpufeed");
    let header_only = dir.path().join("header_only.csv");
    std::fs::write(&header_only, "index, utilization.gpu [%]\n").unwrap();
    one_line_exit_3(&[], &header_only, "no nvidia-smi CSV rows");
}

#[test]
fn cut_recordings_still_diagnose() {
    let dir = tempfile::tempdir().unwrap();
    let p = write_recording(dir.path(), "cut.ndjson", &healthy());
    let text = std::fs::read_to_string(&p).unwrap();
    // Drop the end line and cut the one before it mid-way (a killed recorder).
    let cut = &text[..text.len() - 200];
    std::fs::write(&p, cut).unwrap();
    let r = diagnose_json(&p, &[]);
    assert!(r.source.truncated && r.source.unfinished);
    assert_eq!(r.verdict.id.as_str(), "compute_bound");
    assert!(r.notes.iter().any(|n| n.contains("cut")));
}

fn redact(s: &str, dir: &Path) -> String {
    s.replace(&dir.display().to_string(), "[dir]")
}

#[test]
fn text_and_markdown_reports() {
    let dir = tempfile::tempdir().unwrap();
    let s = one_pinned_worker();
    let p = write_recording(dir.path(), "starving.ndjson", &s);
    let text = gpufeed()
        .args(["diagnose", "--color", "never"])
        .arg(&p)
        .output()
        .unwrap();
    assert!(text.status.success());
    let text = redact(&String::from_utf8(text.stdout).unwrap(), dir.path());
    // The top fix comes before the details; the sparkline shows the oscillation.
    let top = text.find("TOP FIX").unwrap();
    assert!(top < text.find("GPU 0").unwrap());
    assert!(text.contains('▂') && text.contains('▇'), "{text}");
    insta::assert_snapshot!("diagnose_text_starving", text);

    let md = gpufeed()
        .args(["diagnose", "--format", "markdown"])
        .arg(&p)
        .output()
        .unwrap();
    let md = redact(&String::from_utf8(md.stdout).unwrap(), dir.path());
    assert!(md.starts_with("# gpufeed diagnosis"));
    insta::assert_snapshot!("diagnose_markdown_starving", md);

    let colored = gpufeed()
        .args(["diagnose", "--color", "always"])
        .arg(&p)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&colored.stdout).contains("\x1b[1;31minput_bound"));
}

#[test]
fn json_contract_top_level_keys() {
    let dir = tempfile::tempdir().unwrap();
    let p = write_recording(dir.path(), "h.ndjson", &healthy());
    let out = gpufeed()
        .args(["diagnose", "--format", "json"])
        .arg(&p)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for k in [
        "schema_version",
        "source",
        "duration_s",
        "verdict",
        "findings",
        "gpus",
        "host",
        "job",
        "notes",
    ] {
        assert!(v.get(k).is_some(), "missing {k}");
    }
    assert!(v["verdict"]["id"].is_string() && v["verdict"]["confidence"].is_number());
    // The run summary's fields are a subset of the diagnose report's.
    for k in [
        "index",
        "name",
        "util_mean_pct",
        "util_samples",
        "mem_used_max_bytes",
        "mem_total_bytes",
    ] {
        assert!(v["gpus"][0].get(k).is_some(), "gpus[].{k}");
    }
    for k in ["pid", "exit_code", "cpu_mean_pct", "processes"] {
        assert!(v["job"].get(k).is_some(), "job.{k}");
    }
    for k in ["pid", "ppid", "cmd", "cpu_mean_pct", "rss_max_bytes"] {
        assert!(
            v["job"]["processes"][0].get(k).is_some(),
            "job.processes[].{k}"
        );
    }
}

/// BEFORE: a job starving on one pinned worker; AFTER: a healthy one of `after_s` seconds.
fn before_and_after(dir: &Path, after_s: f64) -> (PathBuf, PathBuf) {
    let before = write_recording(dir, "before.ndjson", &one_pinned_worker());
    let after = write_recording(
        dir,
        "after.ndjson",
        &Shape {
            seconds: after_s,
            ..healthy()
        },
    );
    (before, after)
}

/// `gpufeed compare --format json BEFORE AFTER`.
fn compare_json(before: &Path, after: &Path) -> Value {
    json_ok(
        gpufeed()
            .args(["compare", "--format", "json"])
            .arg(before)
            .arg(after),
    )
}

/// `gpufeed compare BEFORE AFTER`'s text.
fn compare_text(before: &Path, after: &Path) -> String {
    let out = gpufeed()
        .arg("compare")
        .arg(before)
        .arg(after)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn compare_two_recordings_side_by_side() {
    let dir = tempfile::tempdir().unwrap();
    let (before, after) = before_and_after(dir.path(), 30.0);
    let v = compare_json(&before, &after);
    for k in ["before", "after", "speedup", "changes", "verdict"] {
        assert!(v.get(k).is_some(), "missing {k}: {v}");
    }
    assert_eq!(v["kind"], "recording");
    assert_eq!(v["verdict"]["before"], "input_bound");
    assert_eq!(v["verdict"]["after"], "compute_bound");
    // No step markers, no stacks: the GPU busy share's ratio, a proxy. Both jobs ran to
    // completion (60 s, 30 s), but their wall times are no speed-up: nothing says that both did
    // the same work (issue 37 item 6).
    assert_eq!(v["speedup"]["metric"], "gpu_busy_pct", "{v}");
    let busy = find_by(&v["changes"], "metric", "gpu_busy_pct").unwrap();
    let ratio = busy["after"].as_f64().unwrap() / busy["before"].as_f64().unwrap();
    assert!(
        (v["speedup"]["value"].as_f64().unwrap() - ratio).abs() < 0.01,
        "{v}"
    );
    assert!(
        v["notes"].to_string().contains(
            "The jobs' wall times (60.0 s before, 30.0 s after) are not compared: without step markers"
        ),
        "{}",
        v["notes"]
    );
    assert!(busy["after"].as_f64().unwrap() > busy["before"].as_f64().unwrap());
    assert!(busy["delta_pct"].as_f64().unwrap() > 100.0, "{busy}");
    for c in v["changes"].as_array().unwrap() {
        for k in ["metric", "before", "after", "delta_pct"] {
            assert!(c.get(k).is_some(), "{k} in {c}");
        }
    }
    // text, markdown and html
    let t = compare_text(&before, &after);
    assert!(t.starts_with("AFTER ran "), "{t}");
    assert!(
        t.lines()
            .next()
            .unwrap()
            .ends_with("times faster than BEFORE, by GPU busy time, a proxy"),
        "{t}"
    );
    assert!(!t.contains("by the job's wall time"), "{t}");
    assert!(
        t.contains("verdict: better: input_bound -> compute_bound"),
        "{t}"
    );
    let md = gpufeed()
        .args(["compare", "--format", "markdown"])
        .arg(&before)
        .arg(&after)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&md.stdout).contains("| GPU busy % |"));
    let html = dir.path().join("c.html");
    gpufeed()
        .args(["compare", "--html"])
        .arg(&html)
        .arg(&before)
        .arg(&after)
        .assert()
        .success()
        .stderr(predicate::str::contains("wrote"));
    assert!(std::fs::read_to_string(&html).unwrap().contains("<table>"));
}

/// Adds step-marker lines (`rate` steps/s after a slow first 2 s, `wait` of each step waiting
/// for data) before a recording's last line.
fn with_steps(path: &Path, rate: f64, wait: f64, seconds: f64) {
    let text = std::fs::read_to_string(path).unwrap();
    let (body, last) = text.trim_end().rsplit_once('\n').unwrap();
    let mut out = format!("{body}\n");
    let mut t = 0.0;
    let mut i = 0u64;
    while t < seconds {
        t += 0.5;
        i += 1;
        // a slow start, then a steady rate with a small deterministic wobble
        let r = if t <= 2.0 {
            rate / 3.0
        } else {
            rate * (1.0 + 0.02 * ((i % 5) as f64 - 2.0) / 2.0)
        };
        let steps = (r * 0.5).round().max(1.0);
        let span = steps / r;
        out.push_str(&format!(
            "{{\"type\":\"steps\",\"t_s\":{t},\"dt_s\":0.5,\"steps\":{steps},\"span_s\":{span},\"wait_s\":{},\"items\":{}}}\n",
            span * wait,
            steps as u64 * 32
        ));
    }
    out.push_str(last);
    out.push('\n');
    std::fs::write(path, out).unwrap();
}

/// With step markers on both sides the speed-up is the steady step rates' ratio with an
/// interval (not the wall time, which holds the start-up), the data wait is compared, and the
/// verdict line says better.
#[test]
fn compare_recordings_with_step_markers_uses_the_steady_step_rate() {
    let dir = tempfile::tempdir().unwrap();
    let (before, after) = before_and_after(dir.path(), 50.0);
    with_steps(&before, 20.0, 0.7, 40.0);
    with_steps(&after, 40.0, 0.1, 40.0);
    let v = compare_json(&before, &after);
    let s = &v["speedup"];
    assert_eq!(s["metric"], "steps/s", "{v}");
    let x = s["value"].as_f64().unwrap();
    assert!((x - 2.0).abs() < 0.1, "{s}");
    let ci = s["ci95"].as_array().expect("an interval");
    let (lo, hi) = (ci[0].as_f64().unwrap(), ci[1].as_f64().unwrap());
    assert!(lo > 1.5 && lo < x && x < hi && hi < 2.5, "{s}");
    let wait = find_by(&v["changes"], "metric", "data_wait_pct").unwrap();
    assert!(
        (wait["before"].as_f64().unwrap() - 70.0).abs() < 1.0
            && (wait["after"].as_f64().unwrap() - 10.0).abs() < 1.0,
        "{wait}"
    );
    let rate = find_by(&v["changes"], "metric", "steps_per_s").unwrap();
    assert!(
        (rate["before"].as_f64().unwrap() - 20.0).abs() < 1.0,
        "{rate}"
    );
    assert_eq!(v["verdict"]["direction"], "better", "{v}");
    let t = compare_text(&before, &after);
    assert!(
        t.starts_with("AFTER ran 2.0") && t.contains("by the step markers' rate (steps/s)"),
        "{t}"
    );
    assert!(
        t.contains("verdict: better: input_bound -> compute_bound"),
        "{t}"
    );
    assert!(t.contains("waiting for data %"), "{t}");
    // the same recording on both sides: same
    let v = compare_json(&after, &after);
    assert_eq!(v["verdict"]["direction"], "same", "{v}");
}

/// Issue 37 item 6: two real PyTorch runs without step markers (tests/fixtures/pystacks:
/// `num_workers` 0, then 2) did not do the same work, and their wall times say nothing of their
/// speed: the headline is the training loop's own estimate from its phases, said to be one, with
/// how to measure it; the wall times are a note.
#[test]
fn compare_without_step_markers_estimates_from_the_loops_phases_not_wall_time() {
    let fx = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pystacks");
    let (before, after) = (fx.join("plain0.ndjson"), fx.join("plain2.ndjson"));
    let v = compare_json(&before, &after);
    let s = &v["speedup"];
    assert_eq!(s["metric"], "loop_estimate", "{v}");
    let wait = find_by(&v["changes"], "metric", "data_wait_pct").unwrap();
    let (b, a) = (
        wait["before"].as_f64().unwrap(),
        wait["after"].as_f64().unwrap(),
    );
    assert!(b > 50.0 && a < 40.0, "{wait}");
    let x = s["value"].as_f64().unwrap();
    assert!(((100.0 - a) / (100.0 - b) - x).abs() < 0.01, "{s}");
    assert!(s.get("ci95").is_none(), "an estimate has no interval: {s}");
    let basis = s["basis"].as_str().unwrap();
    assert!(
        basis.starts_with("an estimate from each training loop's phases"),
        "{basis}"
    );
    assert!(basis.contains("gpufeed.wrap(loader)"), "{basis}");
    assert!(
        v["notes"]
            .to_string()
            .contains("wall times (128.4 s before, 179.6 s after) are not compared"),
        "{}",
        v["notes"]
    );
    assert_eq!(v["verdict"]["direction"], "better", "{v}");
    let t = compare_text(&before, &after);
    assert!(
        t.starts_with(&format!(
            "AFTER runs about {x:.2} times faster than BEFORE, estimated from the training loop's \
             phases (no step markers)\n"
        )),
        "{t}"
    );
    assert!(!t.contains("by the job's wall time"), "{t}");
}

#[test]
fn compare_refuses_two_kinds_and_missing_files() {
    let dir = tempfile::tempdir().unwrap();
    let rec = write_recording(dir.path(), "r.ndjson", &healthy());
    let sweep = dir.path().join("sweep.json");
    std::fs::write(
        &sweep,
        "{\n  \"schema_version\": 1,\n  \"command\": [],\n  \"knobs\": []\n}",
    )
    .unwrap();
    gpufeed()
        .arg("compare")
        .arg(&rec)
        .arg(&sweep)
        .assert()
        .code(3)
        .stderr(predicate::str::contains("compare two of a kind"));
    gpufeed()
        .arg("compare")
        .arg(&rec)
        .arg(dir.path().join("nope.ndjson"))
        .assert()
        .code(3);
}

#[test]
fn a_profiler_trace_given_to_diagnose_points_at_analyze() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("trace.json");
    std::fs::write(
        &t,
        r#"{"schemaVersion": 1, "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 0, "dur": 1}]}"#,
    )
    .unwrap();
    gpufeed()
        .arg("diagnose")
        .arg(&t)
        .assert()
        .code(3)
        .stderr(predicate::str::contains("use gpufeed analyze"));
}

/// One recording of each class, written into `dir` (also the golden files' inputs).
pub(crate) fn scenario_recordings(dir: &Path) -> Vec<(&'static str, PathBuf)> {
    let shapes: Vec<(&'static str, Shape)> = vec![
        ("healthy", healthy()),
        ("too_few_workers", one_pinned_worker()),
        (
            "cpu_saturated",
            Shape {
                util: square,
                cores: vec![100.0; 8],
                workers: vec![(95.0, 'R'); 7],
                ..healthy()
            },
        ),
        (
            "io_bound",
            Shape {
                util: square,
                cores: vec![10.0; 8],
                workers: vec![(8.0, 'D'), (7.0, 'D'), (9.0, 'D'), (6.0, 'D')],
                psi_io: 45.0,
                ..healthy()
            },
        ),
        (
            "transfer_bound",
            Shape {
                util: |_| 60.0,
                pcie: Some((2, 4, 1.8e9)),
                ..healthy()
            },
        ),
        (
            "throttled",
            Shape {
                throttle: 0x20 | 0x40,
                ..healthy()
            },
        ),
    ];
    shapes
        .into_iter()
        .map(|(name, s)| (name, write_recording(dir, &format!("{name}.ndjson"), &s)))
        .collect()
}

/// The text report of each class of recording, as a new user reads it.
fn scenario_texts(dir: &Path) -> Vec<(&'static str, String)> {
    scenario_recordings(dir)
        .into_iter()
        .map(|(name, p)| {
            let out = gpufeed()
                .args(["diagnose", "--color", "never"])
                .arg(&p)
                .output()
                .unwrap();
            assert!(out.status.success());
            (name, redact(&String::from_utf8(out.stdout).unwrap(), dir))
        })
        .collect()
}

/// Figures with a unit (`33%`, `2.0 s`, `0.05 GB/s`, `70.0 GiB`, `3.00x`) in a text.
fn figures(text: &str) -> Vec<String> {
    let units = [
        "%", " s", " GB/s", " MB/s", " KB/s", " B/s", " GiB", " MiB", " KiB", "x", " °C", " W",
    ];
    let mut out = Vec::new();
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let starts = b[i].is_ascii_digit()
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'.'));
        if !starts {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < b.len() && (b[j].is_ascii_digit() || b[j] == b'.') {
            j += 1;
        }
        let rest = &text[j..];
        // A percentile is a different statistic that may meet a mean or a level by chance.
        let percentile = ["p10 ", "p50 ", "p90 "]
            .iter()
            .any(|p| text[..i].ends_with(p));
        if percentile {
            i = j;
            continue;
        }
        if let Some(u) = units.iter().find(|u| {
            rest.starts_with(**u)
                && !rest[u.len()..].starts_with(|c: char| c.is_ascii_alphanumeric())
        }) {
            out.push(format!("{}{u}", &text[i..j]));
        }
        i = j;
    }
    out
}

#[test]
fn text_reports_say_each_thing_once() {
    let dir = tempfile::tempdir().unwrap();
    let texts = scenario_texts(dir.path());
    let mut all = String::new();
    for (name, text) in &texts {
        let p = dir.path().join(format!("{name}.ndjson"));
        let r = diagnose_json(&p, &[]);
        // The top fix once, with its gain and deciding figures beside it.
        let top = &r.findings[0];
        assert_eq!(
            text.matches(top.recommendation.as_str()).count(),
            1,
            "{text}"
        );
        if let Some(x) = top.expected_speedup {
            assert_eq!(text.matches(&format!("{x:.2}x")).count(), 1, "{text}");
        }
        let fix_at = text.find("TOP FIX").unwrap();
        assert!(text[fix_at..].contains("measured: "), "{text}");
        // Every other finding's fix once too.
        for f in &r.findings[1..] {
            assert_eq!(text.matches(f.recommendation.as_str()).count(), 1, "{text}");
        }
        // No figure repeated in the lines of the report (the sparklines' time scales and the
        // memory caveat aside, whose % is of a different total than the GiB figures).
        let body: String = text
            .lines()
            .filter(|l| !l.contains("/cell") && !l.starts_with("NOTE"))
            .collect::<Vec<_>>()
            .join("\n");
        let f = figures(&body);
        for (i, x) in f.iter().enumerate() {
            // 0% and 100% are limits, not measurements worth telling apart.
            if x == "0%" || x == "100%" {
                continue;
            }
            assert!(!f[..i].contains(x), "{name}: {x} said twice:\n{text}");
        }
        // Evidence names are for JSON: the text uses words and units.
        assert!(
            !text.contains("_fraction") && !text.contains("_pct"),
            "{text}"
        );
        all.push_str(&format!("===== {name}\n{text}\n"));
    }
    insta::assert_snapshot!("diagnose_text_scenarios", all);
    // Two GPUs from a log: per-GPU figures equal to the pooled ones beside the fix are not
    // repeated, and a note does not repeat the fix's sentence.
    for log in ["smi_query_starving.csv", "dcgmi_dmon_starving.log"] {
        let out = gpufeed()
            .args(["diagnose", "--color", "never"])
            .arg(data(log))
            .output()
            .unwrap();
        let t = String::from_utf8(out.stdout).unwrap();
        assert_eq!(t.matches("no host or process data").count(), 1, "{t}");
        assert_eq!(t.matches("repeats every").count(), 1, "{t}");
    }
    // --verbose lists every evidence entry of every finding.
    let p = dir.path().join("too_few_workers.ndjson");
    let out = gpufeed()
        .args(["diagnose", "--verbose", "--color", "never"])
        .arg(&p)
        .output()
        .unwrap();
    let v = String::from_utf8(out.stdout).unwrap();
    let r = diagnose_json(&p, &[]);
    for k in r.findings[0].evidence.to_json().keys() {
        assert!(
            v.contains(&format!("{k}=")),
            "{k} missing from --verbose:\n{v}"
        );
    }
    assert!(v.contains("fix: the TOP FIX above"), "{v}");
}

/// Issue 47: a GPU, a disk, a process and a Python thread named with markup. The Markdown
/// report, rendered by a CommonMark renderer with raw HTML on (as an issue tracker or wiki
/// renders a pasted report), holds none of it as markup; HTML and the terminal were already
/// safe.
#[test]
fn markdown_reports_carry_no_markup_from_names() {
    const HOSTILE: &str = "x`<script>alert(1)</script>`<img src=x onerror=alert(1)>|q";
    let json = serde_json::to_string(HOSTILE).unwrap();
    let json = &json[1..json.len() - 1];
    let dir = tempfile::tempdir().unwrap();
    let io = Shape {
        util: |t| if (t * 2.0).fract() < 0.5 { 95.0 } else { 5.0 },
        cores: vec![10.0; 8],
        workers: vec![(8.0, 'D'), (7.0, 'D'), (9.0, 'D'), (6.0, 'D')],
        psi_io: 45.0,
        ..healthy()
    };
    let rec = write_recording(dir.path(), "io.ndjson", &io);
    let text = std::fs::read_to_string(&rec).unwrap();
    let text = text
        .replace("NVIDIA H100 80GB HBM3", json)
        .replace("nvme0n1", json)
        .replace("python train.py", json);
    let hostile_gpu = dir.path().join("hostile.ndjson");
    std::fs::write(&hostile_gpu, text).unwrap();
    let stacks = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pystacks/plain0.ndjson"),
    )
    .unwrap()
    .replace("\"MainThread\"", &format!("\"{json}\""))
    .replace("capture_torch.py", json);
    let hostile_py = dir.path().join("hostile_py.ndjson");
    std::fs::write(&hostile_py, stacks).unwrap();
    let renderer = crate::common::python_with("markdown_it", "rendering the Markdown reports");
    for rec in [&hostile_gpu, &hostile_py] {
        let out = gpufeed()
            .args(["diagnose", "--format", "markdown", "--verbose"])
            .arg(rec)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let md = String::from_utf8(out.stdout).unwrap();
        assert!(md.contains("alert(1)"), "the names are shown: {md}");
        let Some(py) = &renderer else { continue };
        let mdfile = dir.path().join("report.md");
        std::fs::write(&mdfile, &md).unwrap();
        let html = std::process::Command::new(py)
            .args([
                "-c",
                "import sys; from markdown_it import MarkdownIt; \
                 sys.stdout.write(MarkdownIt('commonmark').enable('table')\
                 .render(open(sys.argv[1]).read()))",
            ])
            .arg(&mdfile)
            .output()
            .unwrap();
        assert!(html.status.success(), "{html:?}");
        let html = String::from_utf8(html.stdout).unwrap();
        for tag in ["<script", "<img"] {
            assert!(
                !html.contains(tag),
                "{tag} rendered from {}:\n{html}",
                rec.display()
            );
        }
    }
}
