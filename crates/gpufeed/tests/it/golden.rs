//! Golden outputs of every report renderer, in every format each one has (issue 28): the
//! renderers moved into `present/` with these snapshots unchanged, which proves the move changed
//! no byte. Each snapshot is one renderer over several inputs, each section headed `=== name`.
//! The inputs are built here or read from `tests/data` and `tests/fixtures`, never from a GPU.

use crate::diagnose_cli::scenario_recordings;
use gpufeed::bench::{
    self, BenchReport, CopyResult, Direction, GemmResult, HostMemory, LinkInfo, Precision,
};
use gpufeed::compare;
use gpufeed::diagnose::input::InputFormat;
use gpufeed::diagnose::verdict::VerdictId;
use gpufeed::diagnose::{self, input::LogOptions, nodes, DiagnoseReport};
use gpufeed::present::diagnose as render;
use gpufeed::present::{self, OutputFormat};
use gpufeed::trace::breakdown::TraceSummary;
use gpufeed::trace::{ranks, report};
use gpufeed::tune::params::{parse_knobs, product, Setting};
use gpufeed::tune::sweep_report::{self, SweepReport, TrialResult};
use gpufeed::tune::trial::{
    RateSource, Throughput, TrialExit, TrialFigures, TrialOutcome, TrialRun, TrialStatus,
};
use gpufeed::WaitSource;
use serde_json::json;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Paths that differ between machines, replaced by stable names.
fn redact(s: &str, dir: &Path) -> String {
    s.replace(&dir.display().to_string(), "[DIR]")
        .replace(&crate_dir().display().to_string(), "[CRATE]")
}

fn section(all: &mut String, name: &str, body: &str) {
    let _ = writeln!(all, "=== {name}");
    all.push_str(body);
    if !body.ends_with('\n') {
        all.push('\n');
    }
}

/// Every input `diagnose` reads here: the logs of `tests/data`, the Python-stack recordings of
/// `tests/fixtures/pystacks`, and the scenario recordings of `diagnose_cli`.
fn diagnose_inputs(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut v: Vec<(String, PathBuf)> = [
        "smi_query_starving.csv",
        "dcgmi_dmon_starving.log",
        "smi_dmon_healthy.log",
    ]
    .iter()
    .map(|n| (n.to_string(), crate_dir().join("tests/data").join(n)))
    .collect();
    for n in [
        "plain0.ndjson",
        "plain2.ndjson",
        "hf_trainer.ndjson",
        "lightning.ndjson",
        "accelerate.ndjson",
    ] {
        v.push((
            n.to_string(),
            crate_dir().join("tests/fixtures/pystacks").join(n),
        ));
    }
    for (name, p) in scenario_recordings(dir) {
        v.push((name.to_string(), p));
    }
    v
}

fn diagnose_report(p: &Path) -> DiagnoseReport {
    diagnose::diagnose_file(p, InputFormat::Auto, &LogOptions::default())
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn text_opts(color: bool, verbose: bool, after_summary: bool) -> render::TextOptions {
    render::TextOptions {
        color,
        verbose,
        after_summary,
    }
}

#[test]
fn diagnose_reports() {
    let dir = tempfile::tempdir().unwrap();
    let (mut text, mut verbose, mut md, mut json) =
        (String::new(), String::new(), String::new(), String::new());
    let mut other = String::new();
    for (i, (name, p)) in diagnose_inputs(dir.path()).into_iter().enumerate() {
        let r = diagnose_report(&p);
        let out = |f, o| redact(&render::render_with(&r, f, o), dir.path());
        section(
            &mut text,
            &name,
            &out(OutputFormat::Text, text_opts(false, false, false)),
        );
        section(
            &mut verbose,
            &name,
            &out(OutputFormat::Text, text_opts(false, true, false)),
        );
        section(
            &mut md,
            &name,
            &out(OutputFormat::Markdown, text_opts(false, false, false)),
        );
        section(
            &mut json,
            &name,
            &out(OutputFormat::Json, text_opts(false, false, false)),
        );
        // Colour and the layout after `run`'s summary, on a few inputs.
        if i % 3 == 0 {
            section(
                &mut other,
                &format!("{name} color"),
                &out(OutputFormat::Text, text_opts(true, false, false)),
            );
            section(
                &mut other,
                &format!("{name} after_summary"),
                &out(OutputFormat::Text, text_opts(false, false, true)),
            );
            section(
                &mut other,
                &format!("{name} html-as-text"),
                &out(OutputFormat::Html, text_opts(false, false, false)),
            );
        }
    }
    insta::assert_snapshot!("golden_diagnose_text", text);
    insta::assert_snapshot!("golden_diagnose_verbose", verbose);
    insta::assert_snapshot!("golden_diagnose_markdown", md);
    insta::assert_snapshot!("golden_diagnose_json", json);
    insta::assert_snapshot!("golden_diagnose_other", other);
}

#[test]
fn job_reports() {
    let dir = tempfile::tempdir().unwrap();
    let recs = scenario_recordings(dir.path());
    let node =
        |p: &Path| diagnose::diagnose_node(p, InputFormat::Auto, &LogOptions::default()).unwrap();
    let mut all = String::new();
    let groups: Vec<(&str, Vec<PathBuf>)> = vec![
        ("all", recs.iter().map(|(_, p)| p.clone()).collect()),
        (
            "healthy_and_starving",
            vec![recs[0].1.clone(), recs[0].1.clone(), recs[1].1.clone()],
        ),
        ("one", vec![recs[0].1.clone()]),
        // Relative to the crate (the tests' working directory): the RECORDING column is as wide
        // as the longest path, so an absolute one would make the table depend on the checkout.
        (
            "logs",
            vec![
                PathBuf::from("tests/data/smi_dmon_healthy.log"),
                PathBuf::from("tests/data/dcgmi_dmon_starving.log"),
            ],
        ),
    ];
    for (name, files) in groups {
        let nodes: Vec<nodes::NodeSummary> = files.iter().map(|p| node(p)).collect();
        let r = nodes::JobReport {
            schema_version: nodes::JOB_SCHEMA_VERSION,
            job: nodes::judge(&nodes),
            nodes,
        };
        section(&mut all, &format!("{name} text"), &present::nodes::text(&r));
        section(
            &mut all,
            &format!("{name} markdown"),
            &present::nodes::markdown(&r),
        );
        section(
            &mut all,
            &format!("{name} json"),
            &serde_json::to_string_pretty(&r).unwrap(),
        );
    }
    insta::assert_snapshot!("golden_job", redact(&all, dir.path()));
}

// ---- traces (the same hand-written events as analyze_rules) ----

use crate::analyze_rules::{kernel, steps_with_kernel as steps, summarize, v100, x};

fn traces() -> Vec<(&'static str, TraceSummary)> {
    let single = "_SingleProcessDataLoaderIter";
    let multi = "_MultiProcessingDataLoaderIter";
    let mut pageable = steps(3, 1000.0, 10.0, multi, "volta_sgemm_128x64_nn");
    pageable.push(
        json!({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)",
        "pid": 0, "tid": 7, "ts": 500.0, "dur": 300.0, "args": {"device": 0, "stream": 7}}),
    );
    let mut comm = steps(3, 1000.0, 10.0, multi, "sgemm");
    comm.push(x(
        "user_annotation",
        "nccl:all_reduce",
        400.0,
        50.0,
        json!({"External id": 99}),
    ));
    comm.push(kernel(
        "ncclKernel_AllReduce_RING_LL_Sum_float",
        400.0,
        400.0,
        99,
    ));
    vec![
        (
            "input_bound_v100",
            summarize(
                steps(4, 1000.0, 300.0, single, "volta_sgemm_128x64_nn"),
                v100(),
            ),
        ),
        (
            "healthy",
            summarize(steps(4, 1000.0, 10.0, multi, "sgemm"), json!({})),
        ),
        (
            "low_util",
            summarize(steps(3, 1000.0, 600.0, multi, "sgemm"), json!({})),
        ),
        ("pageable", summarize(pageable, v100())),
        ("comm", summarize(comm, json!({}))),
    ]
}

fn ranked(r: u64, step: f64) -> TraceSummary {
    let mut s = summarize(
        steps(
            3,
            step,
            10.0 + r as f64 * 50.0,
            "_MultiProcessingDataLoaderIter",
            "sgemm",
        ),
        json!({}),
    );
    s.rank = Some(r);
    s
}

fn trace_sections(all: &mut String, name: &str, rep: &report::Report) {
    let job = rep
        .job
        .as_ref()
        .map(present::trace::job_text)
        .unwrap_or_default();
    section(all, &format!("{name} job_text"), &job);
    section(
        all,
        &format!("{name} text"),
        &present::trace::text_with(rep, false, false),
    );
    section(
        all,
        &format!("{name} text steps verbose"),
        &present::trace::text_with(rep, true, true),
    );
    section(
        all,
        &format!("{name} text steps"),
        &present::trace::text(rep, true),
    );
    section(
        all,
        &format!("{name} markdown"),
        &present::trace::markdown(rep, false),
    );
    section(
        all,
        &format!("{name} markdown steps"),
        &present::trace::markdown(rep, true),
    );
    section(
        all,
        &format!("{name} json"),
        &serde_json::to_string_pretty(rep).unwrap(),
    );
}

#[test]
fn trace_reports() {
    let mut all = String::new();
    for (name, t) in traces() {
        trace_sections(&mut all, name, &report::Report::new(vec![t]));
    }
    let several = vec![ranked(0, 1000.0), ranked(1, 1500.0), ranked(2, 990.0)];
    trace_sections(
        &mut all,
        "three_ranks",
        &report::Report::new(several.clone()),
    );
    let digests: Vec<ranks::RankDigest> = several.iter().map(ranks::RankDigest::of).collect();
    let job = ranks::job_report(digests, several[0].clone(), 3);
    trace_sections(&mut all, "rank_job", &job);
    insta::assert_snapshot!("golden_trace", all);
}

// ---- sweeps ----

fn trial(setting: &Setting, v: Option<f64>, status: TrialStatus, wait: Option<f64>) -> TrialResult {
    TrialResult::new(
        setting,
        vec!["train".into()],
        TrialOutcome {
            figures: TrialFigures {
                throughput: v.map(|v| Throughput {
                    value: v,
                    unit: "steps/s".into(),
                    ci_low: Some(v * 0.98),
                    ci_high: Some(v * 1.02),
                    source: RateSource::StepSocket,
                    steady: status != TrialStatus::MaxTime,
                    warmup_s: Some(0.5),
                    intervals: 50,
                    samples_per_s: Some(v * 32.0),
                }),
                gpu_util_mean_pct: v.map(|v| v.min(97.0)),
                gpu_mem_max_bytes: v.map(|v| (v as u64) << 28),
                data_wait_fraction: wait,
                data_wait_source: wait.map(|_| WaitSource::StepProbe),
                job_cpu_mean_pct: Some(150.0),
                job_rss_max_bytes: Some(3 << 30),
            },
            run: TrialRun {
                exit: TrialExit {
                    status,
                    code: Some(if status == TrialStatus::Failed { 1 } else { 0 }),
                    signal: None,
                    stop_signal: Some(2),
                },
                duration_s: 3.0,
                last_lines: vec!["Traceback".into(), "ValueError: boom, \"quoted\"".into()],
                recording: "r.ndjson".into(),
                overrides: None,
                override_notes: vec![],
            },
            oom_line: None,
            gpu_mem_total_bytes: Some(80 << 30),
            gpu_error: None,
        },
    )
}

fn sweep_report(
    knob_args: &[&str],
    vals: &[(Option<f64>, TrialStatus, Option<f64>)],
) -> SweepReport {
    let args: Vec<String> = knob_args.iter().map(|s| s.to_string()).collect();
    let knobs = parse_knobs(&args).unwrap();
    let settings = product(&knobs);
    let results: Vec<TrialResult> = vals
        .iter()
        .zip(&settings)
        .map(|((v, st, w), s)| trial(s, *v, *st, *w))
        .collect();
    let knob_list: Vec<(String, Vec<String>)> = knobs
        .iter()
        .map(|k| (k.name.clone(), k.values.clone()))
        .collect();
    let (sweet_spot, mixed_units) = sweep_report::sweet_spot(&results, &knob_list);
    SweepReport {
        schema_version: sweep_report::SCHEMA_VERSION,
        command: vec!["python".into(), "train.py".into()],
        knobs: knob_list,
        results,
        sweet_spot,
        trials_planned: settings.len(),
        interrupted: false,
        mixed_units,
        overrides_never_applied: None,
    }
}

fn sweeps() -> Vec<(&'static str, SweepReport)> {
    use TrialStatus::*;
    vec![
        (
            "workers",
            sweep_report(
                &["workers", "0,1,2,4,8"],
                &[
                    (Some(15.0), Steady, Some(0.6)),
                    (Some(25.0), Steady, Some(0.4)),
                    (Some(39.0), Steady, Some(0.05)),
                    (Some(40.5), MaxTime, Some(0.02)),
                    (None, Failed, None),
                ],
            ),
        ),
        (
            "still_waiting",
            sweep_report(
                &["workers", "0,2,4"],
                &[
                    (Some(10.0), Steady, Some(0.7)),
                    (Some(20.0), Steady, Some(0.5)),
                    (Some(30.0), Steady, Some(0.4)),
                ],
            ),
        ),
        (
            "two_knobs",
            sweep_report(
                &["workers", "2,4", "pin_memory", "false,true"],
                &[
                    (Some(20.0), Steady, None),
                    (Some(22.0), Steady, None),
                    (Some(30.0), Steady, None),
                    (Some(31.0), Interrupted, None),
                ],
            ),
        ),
        (
            "nothing_usable",
            sweep_report(
                &["workers", "0,1"],
                &[(None, Failed, None), (None, Exited, None)],
            ),
        ),
    ]
}

#[test]
fn sweep_reports() {
    let mut all = String::new();
    let mut charts = String::new();
    for (name, rep) in sweeps() {
        section(
            &mut all,
            &format!("{name} text"),
            &present::sweep::text(&rep),
        );
        section(
            &mut all,
            &format!("{name} markdown"),
            &present::sweep::markdown(&rep),
        );
        section(&mut all, &format!("{name} csv"), &present::sweep::csv(&rep));
        section(
            &mut all,
            &format!("{name} notes_for_page"),
            &present::sweep::notes_for_page(&rep).join("\n"),
        );
        section(
            &mut charts,
            name,
            &present::sweep_chart::svg(&rep).unwrap_or_else(|| "(no chart)".into()),
        );
    }
    insta::assert_snapshot!("golden_sweep", all);
    insta::assert_snapshot!("golden_sweep_chart", charts);
}

// ---- compare ----

fn compare_sections(all: &mut String, name: &str, c: &compare::Comparison) {
    section(all, &format!("{name} text"), &present::compare::text(c));
    section(
        all,
        &format!("{name} markdown"),
        &present::compare::markdown(c),
    );
    section(all, &format!("{name} json"), &present::compare::json(c));
    section(all, &format!("{name} html"), &present::compare::html(c));
}

#[test]
fn compare_reports() {
    let dir = tempfile::tempdir().unwrap();
    let recs = scenario_recordings(dir.path());
    let mut all = String::new();
    let r0 = diagnose_report(&recs[1].1);
    let r1 = diagnose_report(&recs[0].1);
    compare_sections(&mut all, "recordings", &compare::recordings(&r0, &r1));
    compare_sections(
        &mut all,
        "recordings_reversed",
        &compare::recordings(&r1, &r0),
    );
    let logs = [
        diagnose_report(&crate_dir().join("tests/data/dcgmi_dmon_starving.log")),
        diagnose_report(&crate_dir().join("tests/data/smi_dmon_healthy.log")),
    ];
    compare_sections(&mut all, "logs", &compare::recordings(&logs[0], &logs[1]));
    let t = traces();
    let (a, b) = (&t[0].1, &t[1].1);
    let fa = report::Report::new(vec![a.clone()]).findings;
    let fb = report::Report::new(vec![b.clone()]).findings;
    compare_sections(&mut all, "traces", &compare::traces(a, &fa, b, &fb));
    let s = sweeps();
    compare_sections(
        &mut all,
        "sweeps",
        &compare::sweeps("before.json", &s[1].1, "after.json", &s[0].1),
    );
    insta::assert_snapshot!("golden_compare", redact(&all, dir.path()));
}

// ---- bench and batch-size ----

fn copy(d: Direction, m: HostMemory, size: u64, b: f64) -> CopyResult {
    CopyResult {
        direction: d,
        memory: m,
        size_bytes: size,
        repetitions: 3,
        bytes_per_s: b,
        fraction_of_link: pcie_fraction(b),
    }
}

fn pcie_fraction(b: f64) -> Option<f64> {
    gpufeed::pcie_link_bytes_per_s(5, 16).map(|l| b / l)
}

fn gemm(p: Precision, f: f64) -> GemmResult {
    GemmResult {
        precision: p,
        n: 8192,
        repetitions: 10,
        flops_per_s: f,
        speedup_vs_fp32: None,
    }
}

#[test]
fn bench_and_batch_reports() {
    let copies = vec![
        copy(Direction::H2d, HostMemory::Pinned, 1 << 20, 20e9),
        copy(Direction::H2d, HostMemory::Pinned, 1 << 30, 50e9),
        copy(Direction::H2d, HostMemory::Pageable, 1 << 30, 12e9),
        copy(Direction::D2h, HostMemory::Pinned, 1 << 30, 48e9),
        copy(Direction::D2h, HostMemory::Pageable, 1 << 30, 9e9),
    ];
    let mut g = vec![
        gemm(Precision::Fp32, 50e12),
        gemm(Precision::Tf32, 400e12),
        gemm(Precision::Fp16, 800e12),
        gemm(Precision::Bf16, 790e12),
    ];
    let amp = bench::gemm_speedups(&mut g);
    let full = BenchReport {
        schema_version: bench::SCHEMA_VERSION,
        gpu_index: 0,
        gpu_name: Some("NVIDIA H200".into()),
        gpu_uuid: Some("GPU-00000000-1111-2222-3333-444444444444".into()),
        compute_capability: Some([9, 0]),
        link: LinkInfo {
            pcie_cur_gen: Some(4),
            pcie_cur_width: Some(16),
            pcie_max_gen: Some(5),
            pcie_max_width: Some(16),
            theoretical_bytes_per_s: gpufeed::pcie_link_bytes_per_s(5, 16),
        },
        best: bench::best_bandwidth(&copies),
        copies,
        gemm: g,
        gemm_skipped: None,
        expected_amp_speedup: amp,
        saved_to: Some("/home/u/.cache/gpufeed/bench.json".into()),
    };
    let bare = BenchReport {
        gpu_name: None,
        gpu_uuid: None,
        compute_capability: None,
        link: LinkInfo::default(),
        copies: vec![],
        best: bench::best_bandwidth(&[]),
        gemm: vec![],
        gemm_skipped: Some("cuBLAS not found".into()),
        expected_amp_speedup: None,
        saved_to: None,
        ..full.clone()
    };
    let mut all = String::new();
    section(&mut all, "bench full", &present::bench::text(&full));
    section(&mut all, "bench bare", &present::bench::text(&bare));
    for (name, rep) in batch_reports() {
        section(
            &mut all,
            &format!("batch {name}"),
            &present::batch::text(&rep),
        );
    }
    insta::assert_snapshot!("golden_bench_batch", all);
}

fn batch_reports() -> Vec<(&'static str, gpufeed::tune::batch_plan::BatchReport)> {
    let trial = |b: u64, verdict: &str, status: &str, tput: Option<f64>, mem: Option<u64>| {
        json!({
            "batch": b, "verdict": verdict,
            "oom_kind": if verdict == "oom" { json!("cuda_oom") } else { json!(null) },
            "oom_line": if verdict == "oom" {
                json!("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
            } else { json!(null) },
            "throughput": tput.map(|v| json!({"value": v, "unit": "steps/s", "ci_low": v * 0.97,
                "ci_high": v * 1.03, "source": "step_socket", "steady": true, "warmup_s": 1.0,
                "intervals": 40, "samples_per_s": v * b as f64})),
            "gpu_mem_max_bytes": mem, "gpu_util_mean_pct": tput.map(|_| 91.5),
            "duration_s": 12.5,
            "exit": {"status": status, "code": if status == "failed" { json!(1) } else { json!(0) },
                     "signal": null, "stop_signal": 2},
            "last_lines": if verdict == "ok" { json!([]) } else { json!(["Traceback", "boom"]) },
            "recording": format!("bs{b}.ndjson"),
        })
    };
    let full = json!({
        "schema_version": 1, "command": ["python", "train.py"], "param": "--batch-size",
        "mem_target_pct": 90.0, "max_batch": 64, "first_oom_batch": 128,
        "recommended_batch": 48,
        "recommendation": {"batch": 48, "basis": "memory_fit", "predicted_mem_bytes": 64u64 << 30},
        "fastest_batch": 64, "gpu_mem_total_bytes": 80u64 << 30,
        "trials": [
            trial(16, "ok", "steady", Some(10.0), Some(20 << 30)),
            trial(32, "ok", "steady", Some(6.0), Some(38 << 30)),
            trial(64, "ok", "steady", Some(3.2), Some(70 << 30)),
            trial(128, "oom", "failed", None, None),
            trial(96, "failed", "failed", None, None),
        ],
        "accumulation": {"target_batch": 256, "micro_batch": 64, "steps": 4,
                         "note": "4 micro-batches of 64 per optimizer step"},
        "stopped": null,
    });
    let none = json!({
        "schema_version": 1, "command": ["python", "train.py"], "param": "--batch-size",
        "mem_target_pct": 90.0, "max_batch": null, "first_oom_batch": 1,
        "recommended_batch": null, "recommendation": null, "fastest_batch": null,
        "gpu_mem_total_bytes": null,
        "trials": [trial(1, "oom", "failed", None, None)],
        "accumulation": null, "stopped": "interrupted",
    });
    vec![
        ("full", serde_json::from_value(full).unwrap()),
        ("nothing_ran", serde_json::from_value(none).unwrap()),
    ]
}

// ---- doctor ----

fn doctor_report() -> gpufeed::doctor::Report {
    use gpufeed::doctor::{Check, Group, Report, Status};
    Report::new(vec![
        Check::new(
            "driver_version",
            Group::Driver,
            Status::Pass,
            "driver 550.54.15, CUDA 12.4",
        )
        .with("driver_version", "550.54.15"),
        Check::new(
            "shm_size",
            Group::Host,
            Status::Warn,
            "/dev/shm is 64 MiB: workers need 2.0 GiB",
        )
        .fix("docker run --shm-size=8g (or --ipc=host)"),
        Check::new(
            "pcie_link",
            Group::Gpu,
            Status::Fail,
            "PCIe Gen3 x8 of Gen5 x16",
        )
        .gpu(1)
        .fix("reseat the card or move it to a x16 slot"),
        Check::new("pcie_link", Group::Gpu, Status::Pass, "PCIe Gen5 x16").gpu(0),
        Check::new(
            "persistence_mode",
            Group::Gpu,
            Status::Pass,
            "persistence mode on",
        )
        .fix("keep it on: nvidia-smi -pm 1"),
        Check::skip("torch_cuda", Group::Python, "python3 not found on PATH"),
        Check::new(
            "data_read_throughput",
            Group::Data,
            Status::Pass,
            "1.2 GB/s from /data",
        ),
    ])
}

#[test]
fn doctor_reports() {
    let mut all = String::new();
    section(
        &mut all,
        "doctor full",
        &present::doctor::text(&doctor_report()),
    );
    section(
        &mut all,
        "doctor empty",
        &present::doctor::text(&gpufeed::doctor::Report::new(vec![])),
    );
    insta::assert_snapshot!("golden_doctor", all);
}

// ---- tune ----

fn tune_step(
    knob: Option<(gpufeed::tune::plan::Knob, &str)>,
    tput: Option<f64>,
    status: TrialStatus,
    kept: bool,
    gain: Option<f64>,
) -> gpufeed::tune::report::Step {
    let setting = Setting {
        values: knob
            .map(|(k, v)| vec![(k.key().to_string(), v.to_string())])
            .unwrap_or_default(),
        positions: vec![0],
    };
    let mut result = trial(&setting, tput, status, tput.map(|t| 0.5 / t));
    if knob.is_none() {
        result.label = "baseline".into();
    }
    gpufeed::tune::report::Step {
        knob: knob.map(|(k, _)| k),
        value: knob.map(|(_, v)| v.to_string()),
        gain,
        gain_ci95: gain.map(|g| [g * 0.9, g * 1.1]),
        kept,
        verdict: Some(if kept {
            VerdictId::ComputeBound
        } else {
            VerdictId::InputBound
        }),
        result,
    }
}

fn tune_reports() -> Vec<(&'static str, gpufeed::tune::report::TuneReport)> {
    use gpufeed::tune::plan::{Knob, KnobPlan};
    use gpufeed::tune::report::{BatchChange, BeforeAfter, Choice, Figures, Stop, TuneReport};
    use gpufeed::Speedup;
    use TrialStatus::*;
    let mut oom = tune_step(Some((Knob::PrefetchFactor, "8")), None, Failed, false, None);
    oom.result.run.last_lines = vec!["torch.OutOfMemoryError: CUDA out of memory.".into()];
    let choice = |knob, value: &str, gain: Option<f64>| Choice {
        knob,
        value: value.into(),
        gain,
        gain_ci95: gain.map(|g| [g - 0.2, g + 0.2]),
    };
    let figures = |t: f64, busy: f64, wait: f64, verdict: VerdictId| Figures {
        throughput: Some(t),
        unit: Some("steps/s".into()),
        gpu_util_mean_pct: Some(busy),
        data_wait_pct: Some(wait),
        verdict: Some(verdict),
    };
    let full = TuneReport {
        schema_version: gpufeed::tune::report::SCHEMA_VERSION,
        command: vec![
            "python".into(),
            "train.py".into(),
            "--epochs".into(),
            "1".into(),
        ],
        cores_per_rank: 8,
        budget_s: 600.0,
        plan: vec![KnobPlan {
            knob: Knob::NumWorkers,
            values: vec!["4".into(), "8".into()],
            why: "input_bound".into(),
            extend: true,
        }],
        steps: vec![
            tune_step(None, Some(2.5), Steady, false, None),
            tune_step(
                Some((Knob::NumWorkers, "4")),
                Some(6.1),
                Steady,
                true,
                Some(2.44),
            ),
            tune_step(
                Some((Knob::NumWorkers, "8")),
                Some(6.3),
                Steady,
                false,
                Some(1.03),
            ),
            oom,
            tune_step(Some((Knob::PinMemory, "true")), None, Failed, false, None),
            tune_step(
                Some((Knob::PersistentWorkers, "true")),
                Some(6.2),
                MaxTime,
                false,
                None,
            ),
            tune_step(
                Some((Knob::BatchSize, "64")),
                Some(3.4),
                Steady,
                true,
                Some(1.1),
            ),
            tune_step(None, Some(2.4), Steady, false, None),
        ],
        chosen: vec![
            choice(Knob::NumWorkers, "4", Some(2.44)),
            choice(Knob::BatchSize, "64", None),
        ],
        rejected: vec![choice(Knob::NumWorkers, "8", Some(1.03))],
        before_after: Some(BeforeAfter {
            speedup: Some(Speedup {
                value: 2.5,
                metric: gpufeed::SpeedupMetric::Throughput("steps/s".into()),
                ci95: Some([2.3, 2.7]),
                basis: "3 interleaved runs of each".into(),
            }),
            before: figures(2.45, 38.0, 61.0, VerdictId::InputBound),
            after: Figures {
                unit: None,
                ..figures(6.05, 96.4, 2.0, VerdictId::ComputeBound)
            },
        }),
        stop: Some(Stop::ComputeBound),
        patch: Some("out/fix.patch".into()),
        patch_notes: vec!["num_workers in train.py:40 is not a literal".into()],
        run_line: Some("gpufeed run --dataloader num_workers=4 -- python train.py".into()),
        batch: Some(BatchChange {
            from: 32,
            to: Some(64),
            largest_ran: Some(64),
            first_oom: Some(128),
            lr_plan: Some("scale the learning rate by 2".into()),
        }),
        notes: vec!["the job ran on 1 of 2 GPUs".into()],
        output_dir: "out".into(),
    };
    let slower = TuneReport {
        steps: full.steps[..3].to_vec(),
        chosen: vec![],
        before_after: Some(BeforeAfter {
            speedup: Some(Speedup {
                value: 0.8,
                metric: gpufeed::SpeedupMetric::Throughput("steps/s".into()),
                ci95: None,
                basis: "1 run of each".into(),
            }),
            before: Figures::default(),
            after: Figures::default(),
        }),
        stop: Some(Stop::Budget),
        patch: None,
        patch_notes: vec![],
        run_line: None,
        batch: Some(BatchChange {
            from: 32,
            to: None,
            largest_ran: None,
            first_oom: Some(64),
            lr_plan: None,
        }),
        notes: vec![],
        ..full.clone()
    };
    let nothing = TuneReport {
        steps: vec![tune_step(None, None, Failed, false, None)],
        rejected: vec![],
        before_after: None,
        stop: Some(Stop::NothingToTune),
        batch: None,
        ..slower.clone()
    };
    let mut others = Vec::new();
    for (i, (stop, batch)) in [
        (Stop::PlanDone, (Some(64), None)),
        (Stop::Interrupted, (None, None)),
    ]
    .into_iter()
    .enumerate()
    {
        others.push(TuneReport {
            stop: Some(stop),
            before_after: None,
            batch: Some(BatchChange {
                from: 16,
                to: None,
                largest_ran: batch.0,
                first_oom: batch.1,
                lr_plan: None,
            }),
            command: vec![format!("job{i}")],
            ..nothing.clone()
        });
    }
    let mut v = vec![("full", full), ("slower", slower), ("nothing", nothing)];
    v.extend(["plan_done", "interrupted"].into_iter().zip(others));
    v
}

#[test]
fn tune_reports_text_and_html() {
    let mut all = String::new();
    for (name, rep) in tune_reports() {
        section(
            &mut all,
            &format!("tune {name} text"),
            &present::tune::text(&rep),
        );
        if !matches!(name, "full" | "nothing") {
            continue; // the page's frame is the same for every report
        }
        let patch = rep
            .patch
            .as_ref()
            .map(|_| "--- a/train.py\n+++ b/train.py\n<&>\n");
        section(
            &mut all,
            &format!("tune {name} html"),
            &present::tune::html(&rep, patch),
        );
    }
    insta::assert_snapshot!("golden_tune", all);
}

/// The JSON `sweep`, `batch-size` and `tune` write (`--format json` and the output folder's
/// report): every trial's figures are one struct flattened into each report, and this holds
/// the bytes scripts read, key order included.
#[test]
fn trial_reports_json() {
    let mut all = String::new();
    for (name, rep) in sweeps() {
        let json = serde_json::to_string_pretty(&rep).unwrap();
        section(&mut all, &format!("sweep {name} json"), &json);
    }
    for (name, rep) in batch_reports() {
        let json = serde_json::to_string_pretty(&rep).unwrap();
        section(&mut all, &format!("batch {name} json"), &json);
    }
    for (name, rep) in tune_reports() {
        let json = serde_json::to_string_pretty(&rep).unwrap();
        section(&mut all, &format!("tune {name} json"), &json);
    }
    insta::assert_snapshot!("golden_trial_json", all);
}
