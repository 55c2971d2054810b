//! `gpufeed diagnose` on the nvidia-smi logs people already keep, through the real binary.
//!
//! The corpus is made here by a generator (`LogSpec` → CSV text): one log per class of issue 18
//! (steadily busy, one of two GPUs unused, memory mostly free, long logs with start-up, eval-like
//! stretches and an idle tail, 200 ms to 60 s sampling, logging scripts' own headers), with
//! deterministic noise so the numbers are stable. docs/diagnose.md has the table of what each
//! class gets and why.

use crate::gpufeed;
use crate::run_ok;
use gpufeed::diagnose::phases::PhaseKind;
use gpufeed::diagnose::DiagnoseReport;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// How the logging script wrote its header and timestamps.
#[derive(Clone, Copy, PartialEq)]
enum Style {
    /// `nvidia-smi --query-gpu=timestamp,index,name,utilization.gpu,memory.used,memory.total
    /// --format=csv -l N`: units in the header and the values.
    Smi,
    /// `timestamp,gpu_index,temperature_C,utilization_gpu_percent,power_W` with ISO timestamps.
    ScriptIso,
    /// `timestamp,memory.used,memory.total,utilization.gpu` with Unix-epoch seconds, nounits.
    ScriptEpoch,
    /// `nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used,power.draw --format=csv
    /// -lms N`: no index column, one row per GPU per reading a few ms apart, units in values.
    SmiNoIndex,
    /// `--query-gpu=utilization.gpu,memory.used,power.draw --format=csv`: no index, no timestamp.
    SmiNoTimestamp,
}

/// One GPU of a generated log.
#[derive(Clone)]
struct GpuSpec {
    name: &'static str,
    mem_total_mib: u64,
    mem_used_mib: u64,
    /// Utilization at time t (seconds from the start) and a uniform 0–1 draw.
    util: fn(f64, f64) -> f64,
}

struct LogSpec {
    style: Style,
    interval_s: f64,
    duration_s: f64,
    gpus: Vec<GpuSpec>,
}

/// A small deterministic generator (the corpus must not change between runs).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// `2026/12/02 12:00:00.000` (nvidia-smi) or ISO 8601 with an offset, from seconds of the day.
fn clock(t: f64, iso: bool) -> String {
    let ms = (t * 1000.0).round() as u64;
    let day = ms / 86_400_000;
    let rem = ms % 86_400_000;
    let (h, m, s, f) = (
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60,
        rem % 1000,
    );
    if iso {
        format!(
            "2026-12-{:02}T{h:02}:{m:02}:{s:02}.{f:03}000+00:00",
            2 + day
        )
    } else {
        format!("2026/12/{:02} {h:02}:{m:02}:{s:02}.{f:03}", 2 + day)
    }
}

fn generate(spec: &LogSpec) -> String {
    let mut rng = Lcg(42);
    let mut out = String::new();
    out.push_str(match spec.style {
        Style::Smi => {
            "timestamp, index, name, utilization.gpu [%], memory.used [MiB], memory.total [MiB]\n"
        }
        Style::ScriptIso => "timestamp,gpu_index,temperature_C,utilization_gpu_percent,power_W\n",
        Style::ScriptEpoch => "timestamp,memory.used,memory.total,utilization.gpu\n",
        Style::SmiNoIndex => "timestamp, utilization.gpu [%], memory.used [MiB], power.draw [W]\n",
        Style::SmiNoTimestamp => "utilization.gpu [%], memory.used [MiB], power.draw [W]\n",
    });
    let polls = (spec.duration_s / spec.interval_s).round() as u64;
    for k in 0..=polls {
        let t = k as f64 * spec.interval_s;
        for (i, g) in spec.gpus.iter().enumerate() {
            // GPUs of one poll are read a millisecond (no index: 2-4 ms) apart.
            let ts = match spec.style {
                Style::SmiNoIndex => t + i as f64 * 0.002 + (k % 3) as f64 * 0.001,
                _ => t + i as f64 * 0.001,
            };
            let u = (g.util)(t, rng.next()).clamp(0.0, 100.0).round();
            let _ = match spec.style {
                Style::Smi => writeln!(
                    out,
                    "{}, {i}, {}, {u} %, {} MiB, {} MiB",
                    clock(ts, false),
                    g.name,
                    g.mem_used_mib,
                    g.mem_total_mib
                ),
                Style::ScriptIso => writeln!(
                    out,
                    "{},{i},{},{u},{:.1}",
                    clock(ts, true),
                    40.0 + u * 0.3,
                    60.0 + u * 2.4
                ),
                Style::ScriptEpoch => writeln!(
                    out,
                    "{:.3},{},{},{u}",
                    1_796_083_200.0 + ts,
                    g.mem_used_mib,
                    g.mem_total_mib
                ),
                Style::SmiNoIndex => writeln!(
                    out,
                    "{}, {u} %, {} MiB, {:.2} W",
                    clock(ts, false),
                    g.mem_used_mib,
                    60.0 + u * 2.4
                ),
                Style::SmiNoTimestamp => {
                    writeln!(
                        out,
                        "{u} %, {} MiB, {:.2} W",
                        g.mem_used_mib,
                        60.0 + u * 2.4
                    )
                }
            };
        }
    }
    out
}

fn write(dir: &Path, name: &str, spec: &LogSpec) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, generate(spec)).unwrap();
    p
}

fn diagnose(path: &Path) -> DiagnoseReport {
    let out = run_ok(gpufeed().args(["diagnose", "--format", "json"]).arg(path));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn text(path: &Path) -> String {
    let out = gpufeed()
        .args(["diagnose", "--color", "never"])
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

fn ids(r: &DiagnoseReport) -> Vec<&str> {
    r.findings.iter().map(|f| f.id.as_str()).collect()
}

const A100: &str = "NVIDIA A100-SXM4-80GB";

/// Busy around 91% with occasional dips: mean about 83%, p50 about 91%.
fn busy(_: f64, r: f64) -> f64 {
    if r < 0.15 {
        40.0 + r * 200.0
    } else {
        88.0 + (r - 0.15) * 8.0
    }
}

/// The starving signature: 85% for 0.6 s, then 10% for 1.4 s, every 2 s.
fn square(t: f64, r: f64) -> f64 {
    if (t / 2.0).fract() < 0.3 {
        83.0 + r * 4.0
    } else {
        8.0 + r * 4.0
    }
}

#[test]
fn a_steadily_busy_gpu_is_compute_bound_with_levers() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "busy_10s.csv",
        &LogSpec {
            style: Style::Smi,
            interval_s: 10.0,
            duration_s: 2.0 * 3600.0,
            gpus: vec![GpuSpec {
                name: A100,
                mem_total_mib: 81920,
                mem_used_mib: 30000,
                util: busy,
            }],
        },
    );
    let r = diagnose(&p);
    let g = &r.gpus[0];
    assert!(g.util_mean_pct.unwrap() < 86.0, "{:?}", g.util_mean_pct);
    assert!(g.util_p50_pct.unwrap() >= 88.0);
    assert_eq!(r.verdict.id.as_str(), "compute_bound", "{:#?}", r.verdict);
    let f = &r.findings[0];
    assert_eq!(f.id.as_str(), "compute_bound");
    // An A100: bf16 and TF32; 37% of memory used: a larger batch fits.
    assert!(f.recommendation.contains("bf16"), "{}", f.recommendation);
    assert!(f.recommendation.contains("allow_tf32"));
    assert!(f.recommendation.contains("larger batch"));
    assert!(!text(&p).contains("No findings"));
}

#[test]
fn one_of_two_gpus_unused_gets_its_own_finding() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "two_gpus.csv",
        &LogSpec {
            style: Style::Smi,
            interval_s: 1.0,
            duration_s: 1800.0,
            gpus: vec![
                GpuSpec {
                    name: A100,
                    mem_total_mib: 81920,
                    mem_used_mib: 60000,
                    util: |_, r| 89.0 + r * 4.0,
                },
                GpuSpec {
                    name: A100,
                    mem_total_mib: 81920,
                    mem_used_mib: 15,
                    util: |_, _| 0.0,
                },
            ],
        },
    );
    let r = diagnose(&p);
    assert_eq!(r.verdict.id.as_str(), "compute_bound", "{:#?}", r.verdict);
    let b = r.verdict.gpu_busy_fraction.unwrap();
    assert!(b > 0.88, "the unused GPU does not halve the figure: {b}");
    assert_eq!(r.verdict.gpus.len(), 2);
    assert_eq!(r.verdict.gpus[1].state.as_str(), "unused");
    assert_eq!(ids(&r)[0], "gpu_unused", "{:?}", ids(&r));
    let f = &r.findings[0];
    assert!(f.title.contains("uses 1 of 2 GPUs"), "{}", f.title);
    assert!(f
        .recommendation
        .contains("start it with torchrun / DDP, or free the GPU for others"));
    let t = text(&p);
    // GPUs that differ get a verdict row each, and the job verdict names the GPU it rests on.
    assert!(t.contains("GPU 0   busy"), "{t}");
    assert!(t.contains("GPU 1   unused"), "{t}");
    assert!(t.contains("never used by the job"), "{t}");
    assert!(t.contains("Compute-bound: GPU 0 is busy"), "{t}");
}

#[test]
fn memory_mostly_free_without_host_data_names_candidates_and_no_bound() {
    // Flat 21–29% with 472 MiB of 32 GB, from a script writing epoch seconds without units.
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "small_batch_epoch.csv",
        &LogSpec {
            style: Style::ScriptEpoch,
            interval_s: 1.0,
            duration_s: 1800.0,
            gpus: vec![GpuSpec {
                name: "",
                mem_total_mib: 32768,
                mem_used_mib: 472,
                util: |_, r| 21.0 + r * 8.0,
            }],
        },
    );
    let r = diagnose(&p);
    assert_eq!(r.gpus[0].mem_used_max_bytes, Some(472 << 20));
    assert!(ids(&r).contains(&"batch_too_small"), "{:?}", ids(&r));
    assert_ne!(r.verdict.id.as_str(), "input_bound", "{:#?}", r.verdict);
    assert!(r
        .verdict
        .candidates
        .iter()
        .any(|c| c.id.as_str() == "batch_too_small" && c.confidence < 0.9));
    for f in &r.findings {
        assert_eq!(f.expected_speedup, None, "{} claims a bound", f.id);
    }
    assert!(
        r.verdict.summary.contains("gpufeed run"),
        "{}",
        r.verdict.summary
    );
    let t = text(&p);
    assert!(!t.contains("nothing is holding the GPU back"), "{t}");
    assert!(!t.contains("expected speed-up"), "{t}");
}

#[test]
fn a_long_log_is_split_into_phases_and_the_active_part_judged() {
    // 6.8 hours at 10 s: 3 min start-up, 86 min of training at about 90% with a 2-minute eval
    // at 25% every 15 min, then 5 h 02 min at 0% while the logger went on.
    let dir = tempfile::tempdir().unwrap();
    let train = |t: f64, r: f64| {
        if t < 180.0 {
            0.0
        } else if t < 180.0 + 86.0 * 60.0 {
            if (t - 180.0) % 900.0 >= 780.0 {
                20.0 + r * 10.0
            } else {
                87.0 + r * 6.0
            }
        } else {
            0.0
        }
    };
    let p = write(
        dir.path(),
        "long_10s.csv",
        &LogSpec {
            style: Style::Smi,
            interval_s: 10.0,
            duration_s: 180.0 + 86.0 * 60.0 + 302.0 * 60.0,
            gpus: vec![GpuSpec {
                name: A100,
                mem_total_mib: 81920,
                mem_used_mib: 70000,
                util: train,
            }],
        },
    );
    let r = diagnose(&p);
    let kinds: Vec<PhaseKind> = r.phases.iter().map(|p| p.kind).collect();
    assert_eq!(kinds.first(), Some(&PhaseKind::StartUp), "{:#?}", r.phases);
    assert_eq!(kinds.last(), Some(&PhaseKind::IdleTail));
    assert!(kinds.contains(&PhaseKind::EvalLike));
    assert!(
        (r.duration_s - (180.0 + 388.0 * 60.0)).abs() < 20.0,
        "{}",
        r.duration_s
    );
    // Judged on training: busy, not idle or unknown.
    assert_eq!(r.verdict.id.as_str(), "compute_bound", "{:#?}", r.verdict);
    assert!(
        r.notes.iter().any(|n| n
            .contains("Idle for the last 5h 02m: the job had ended or hung while logging went on")),
        "{:#?}",
        r.notes
    );
    assert!(r.notes.iter().any(|n| n.contains("eval-like")));
}

#[test]
fn the_sampling_interval_is_weighed() {
    let dir = tempfile::tempdir().unwrap();
    let mk = |interval_s: f64| LogSpec {
        style: Style::Smi,
        interval_s,
        duration_s: if interval_s < 1.0 {
            600.0
        } else {
            4.0 * 3600.0
        },
        gpus: vec![GpuSpec {
            name: A100,
            mem_total_mib: 81920,
            mem_used_mib: 76000,
            util: square,
        }],
    };
    // `nvidia-smi ... -lms 200` sees the square wave: input-bound, and no interval caveat.
    let fine = diagnose(&write(dir.path(), "starving_200ms.csv", &mk(0.2)));
    assert_eq!(
        fine.verdict.id.as_str(),
        "input_bound",
        "{:#?}",
        fine.verdict
    );
    assert!(fine.verdict.confidence >= 0.75, "{:?}", fine.verdict);
    assert!(!fine.notes.iter().any(|n| n.contains("was sampled every")));
    // The memory bar is full and utilization low: one line says why that is not the cause.
    assert!(fine
        .notes
        .iter()
        .any(|n| n.contains("caching allocator") && n.contains("not the bottleneck")));
    for (interval, words) in [(10.0, "10 s"), (60.0, "1 min")] {
        let r = diagnose(&write(
            dir.path(),
            &format!("starving_{interval}s.csv"),
            &mk(interval),
        ));
        let note = r
            .notes
            .iter()
            .find(|n| n.contains("was sampled every"))
            .unwrap_or_else(|| panic!("no interval note: {:#?}", r.notes));
        assert!(note.contains(words), "{note}");
        assert!(
            note.contains("-lms 200") && note.contains("gpufeed record"),
            "{note}"
        );
        assert!(
            r.verdict.confidence < fine.verdict.confidence,
            "{interval}s: {:?}",
            r.verdict
        );
    }
}

#[test]
fn a_scripts_own_header_with_iso_timestamps_and_two_gpus() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "script_iso.csv",
        &LogSpec {
            style: Style::ScriptIso,
            interval_s: 5.0,
            duration_s: 3600.0,
            gpus: vec![
                GpuSpec {
                    name: "",
                    mem_total_mib: 0,
                    mem_used_mib: 0,
                    util: |_, r| 90.0 + r * 5.0,
                },
                GpuSpec {
                    name: "",
                    mem_total_mib: 0,
                    mem_used_mib: 0,
                    util: |_, r| 88.0 + r * 5.0,
                },
            ],
        },
    );
    let r = diagnose(&p);
    assert_eq!(r.source.format.as_str(), "smi_csv");
    assert_eq!(r.gpus.len(), 2);
    assert!((r.duration_s - 3600.0).abs() < 1.0, "{}", r.duration_s);
    assert!(r.gpus[0].temperature_mean_c.unwrap() > 60.0);
    assert!(r.gpus[1].power_mean_w.unwrap() > 250.0);
    assert_eq!(r.verdict.id.as_str(), "compute_bound");
}

#[test]
fn columns_that_cannot_be_known_still_ask_for_them() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("nounits.csv");
    std::fs::write(&p, "1796083200,87,1024\n1796083201,12,1024\n").unwrap();
    let out = gpufeed().arg("diagnose").arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--columns"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1);
}

#[test]
fn an_unknown_verdict_says_what_data_is_missing() {
    // A flat 45% with memory 90% full: nothing in a log names the cause.
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "flat_45.csv",
        &LogSpec {
            style: Style::Smi,
            interval_s: 1.0,
            duration_s: 1800.0,
            gpus: vec![GpuSpec {
                name: A100,
                mem_total_mib: 81920,
                mem_used_mib: 74000,
                util: |_, r| 42.0 + r * 6.0,
            }],
        },
    );
    let r = diagnose(&p);
    assert_eq!(r.verdict.id.as_str(), "unknown", "{:#?}", r.verdict);
    assert!(
        r.verdict.summary.contains("gpufeed run --"),
        "{}",
        r.verdict.summary
    );
    let t = text(&p);
    assert!(!t.contains("nothing is holding the GPU back"), "{t}");
}

/// `n` GPUs of which those in `busy` train at about 90% (the others idle at 4 MiB).
fn node(n: usize, busy: &[usize]) -> Vec<GpuSpec> {
    (0..n)
        .map(|i| GpuSpec {
            name: "",
            mem_total_mib: 0,
            mem_used_mib: if busy.contains(&i) {
                30_000 + i as u64 * 7
            } else {
                4
            },
            util: if busy.contains(&i) {
                |_, r| 86.0 + r * 10.0
            } else {
                |_, _| 0.0
            },
        })
        .collect()
}

fn no_index(style: Style, interval_s: f64, n: usize, busy: &[usize]) -> LogSpec {
    LogSpec {
        style,
        interval_s,
        duration_s: 120.0,
        gpus: node(n, busy),
    }
}

#[test]
fn logs_without_an_index_column_find_the_gpu_count_from_the_readings() {
    let dir = tempfile::tempdir().unwrap();
    // A 2-GPU node polled every 100 ms, a single-GPU job: not 8 GPUs, not "3 of 6".
    let p = write(
        dir.path(),
        "two.csv",
        &no_index(Style::SmiNoIndex, 0.1, 2, &[0]),
    );
    let r = diagnose(&p);
    assert_eq!(r.gpus.len(), 2, "{:?}", r.notes);
    assert!(
        r.notes[0].contains("2 GPUs were found from the readings"),
        "{}",
        r.notes[0]
    );
    let f = r.findings.iter().find(|f| f.id.as_str() == "gpu_unused");
    assert!(
        f.is_some_and(|f| f.title.contains("uses 1 of 2 GPUs")),
        "{:?}",
        ids(&r)
    );
    assert!(!text(&p).contains("of 6 GPUs"));
    // An 8-GPU node, all training: 8 GPUs, not 50+.
    let p = write(
        dir.path(),
        "eight.csv",
        &no_index(Style::SmiNoIndex, 0.1, 8, &[0, 1, 2, 3, 4, 5, 6, 7]),
    );
    let r = diagnose(&p);
    assert_eq!(r.gpus.len(), 8, "{:?}", r.notes);
    assert_eq!(r.verdict.id.as_str(), "compute_bound", "{:#?}", r.verdict);
    // Each GPU's figures are its own: GPU 7 busy like the rest.
    assert!(r.gpus[7].util_mean_pct.unwrap() > 85.0);
    // Every second at 1 s: the same.
    let p = write(
        dir.path(),
        "two_1s.csv",
        &no_index(Style::SmiNoIndex, 1.0, 2, &[1]),
    );
    let r = diagnose(&p);
    assert_eq!(r.gpus.len(), 2, "{:?}", r.notes);
    assert!(r.gpus[1].util_mean_pct.unwrap() > 85.0);
}

#[test]
fn a_log_without_timestamps_says_the_interval_is_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "nots.csv",
        &no_index(Style::SmiNoTimestamp, 1.0, 2, &[0]),
    );
    let r = diagnose(&p);
    assert_eq!(r.gpus.len(), 2, "{:?}", r.notes);
    let notes = r.notes.join("\n");
    assert!(
        notes.contains("repeating pattern of memory.used"),
        "{notes}"
    );
    assert!(
        notes.contains("the time between readings is unknown"),
        "{notes}"
    );
    assert!(!notes.contains("sampled every"), "{notes}");
    assert!(r.gpus.iter().all(|g| g.util_sample_interval_s.is_none()));
}

#[test]
fn two_runs_appended_are_judged_by_the_last() {
    let dir = tempfile::tempdir().unwrap();
    // First run: idle; second run (appended, header again): busy.
    let mut first = generate(&no_index(Style::SmiNoIndex, 1.0, 1, &[]));
    first.push_str(&generate(&no_index(Style::SmiNoIndex, 1.0, 1, &[0])));
    let p = dir.path().join("appended.csv");
    std::fs::write(&p, first).unwrap();
    let r = diagnose(&p);
    assert!(r.gpus[0].util_mean_pct.unwrap() > 85.0, "{:?}", r.gpus[0]);
    assert!(
        r.notes
            .iter()
            .any(|n| n.contains("2 runs appended") && n.contains("from line 123")),
        "{:?}",
        r.notes
    );
    assert_eq!(r.source.lines, 121);
}

#[test]
fn a_log_without_memory_total_or_name_gets_a_candidate_from_small_memory() {
    // 7% busy with 512 MiB in use, no memory.total, no GPU name.
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::from("timestamp, utilization.gpu [%], memory.used [MiB]\n");
    for k in 0..600 {
        let _ = writeln!(text, "{}, {} %, 512 MiB", clock(k as f64, false), 5 + k % 5);
    }
    let p = dir.path().join("small.csv");
    std::fs::write(&p, text).unwrap();
    let r = diagnose(&p);
    assert!(!r.verdict.candidates.is_empty(), "{:#?}", r.verdict);
    let f = r
        .findings
        .iter()
        .find(|f| f.id.as_str() == "batch_too_small");
    assert!(
        f.is_some_and(|f| f.title.contains("no memory.total in the log")),
        "{:?}",
        ids(&r)
    );
}

/// Issue 47 item 7: four small misreadings of hand-made logs, each said as it is.
#[test]
fn odd_logs_are_described_as_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str, body: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, body).unwrap();
        let out = gpufeed()
            .args(["diagnose", "--color", "never"])
            .arg(&p)
            .output()
            .unwrap();
        let all = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name}: {all}");
        all
    };
    // Temperatures under a percent's name: left out, and not called a counter.
    let mut temps = String::from("timestamp,device,gpu_use_percent\n");
    for i in 0..20 {
        let _ = writeln!(temps, "{},card0,{}", 1754586812 + i, 95 + i);
    }
    let t = run("temps.csv", &temps);
    assert!(!t.contains("counter"), "{t}");
    assert!(t.contains("above 100 % (up to 114)"), "{t}");
    // A garbled timestamp: no duration of billions of hours.
    let t = run(
        "garbled.csv",
        "timestamp,utilization.gpu [%]\n0,50\n1e30,60\n2e30,70\n",
    );
    assert!(!t.contains("18446744073709551615h"), "{t}");
    assert!(t.contains("more than a century"), "{t}");
    // Rows written with other delimiters are unreadable rows, not a cut last line.
    let t = run(
        "mixed.csv",
        "timestamp, index, utilization.gpu [%]\n2024/01/01 00:00:00.000, 0, 50\n\
         2024/01/01 00:00:01.000; 0; 60\n2024/01/01 00:00:02.000, 0, 55\n\
         2024/01/01 00:00:03.000;0;20\n",
    );
    assert!(!t.contains("last line was cut"), "{t}");
    assert!(t.contains("2 unreadable lines"), "{t}");
    // A quoted header with a line break inside is read as one header.
    let t = run(
        "quoted.csv",
        "\"timestamp\",\"utilization.gpu\n[%]\"\n2024/01/01 00:00:00.000,50\n\
         2024/01/01 00:00:01.000,60\n2024/01/01 00:00:02.000,70\n",
    );
    assert!(!t.contains("cut"), "{t}");
    assert!(t.contains("1 GPU"), "{t}");
}

/// The input opened once and read as a stream (issue 46, item 1): stdin `-`, a pipe given as a
/// path (`<(zcat gpu.csv.gz)` is `/dev/fd/N`), a FIFO, gzip and zstd told by their magic (a
/// `.dat` name too), a UTF-8 byte-order mark, UTF-16 with one. Before, these said "cannot open
/// -", "Illegal seek", hung, "a PyTorch profiler trace?", or "binary data".
#[test]
fn any_input_is_opened_once_and_decoded() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let spec = LogSpec {
        style: Style::Smi,
        interval_s: 1.0,
        duration_s: 120.0,
        gpus: vec![
            GpuSpec {
                name: A100,
                mem_total_mib: 81920,
                mem_used_mib: 60000,
                util: busy,
            },
            GpuSpec {
                name: A100,
                mem_total_mib: 81920,
                mem_used_mib: 4,
                util: |_, _| 0.0,
            },
        ],
    };
    let csv = generate(&spec);
    let plain = d.join("gpu.csv");
    std::fs::write(&plain, &csv).unwrap();
    let want = diagnose(&plain);
    assert_eq!(want.gpus.len(), 2);
    let same = |what: &str, r: &DiagnoseReport| {
        assert_eq!(r.gpus.len(), 2, "{what}");
        assert_eq!(r.verdict.id, want.verdict.id, "{what}");
        assert!(
            (r.duration_s - want.duration_s).abs() < 1e-6,
            "{what}: {}",
            r.duration_s
        );
    };
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(csv.as_bytes()).unwrap();
    let gz = gz.finish().unwrap();
    let zst = zstd::encode_all(csv.as_bytes(), 3).unwrap();
    let bom = [b"\xEF\xBB\xBF".as_slice(), csv.as_bytes()].concat();
    let le: Vec<u8> = [0xFF, 0xFE]
        .into_iter()
        .chain(csv.encode_utf16().flat_map(u16::to_le_bytes))
        .collect();
    let be: Vec<u8> = [0xFE, 0xFF]
        .into_iter()
        .chain(csv.encode_utf16().flat_map(u16::to_be_bytes))
        .collect();
    for (name, bytes) in [
        ("gpu.csv.gz", &gz),
        ("gpu.dat", &gz),
        ("gpu.csv.zst", &zst),
        ("bom.csv", &bom),
        ("powershell-le.txt", &le),
        ("powershell-be.txt", &be),
    ] {
        let p = d.join(name);
        std::fs::write(&p, bytes).unwrap();
        same(name, &diagnose(&p));
    }
    // stdin as `-`, and a pipe under a path (/dev/stdin), gzip through it.
    for (arg, bytes) in [("-", csv.as_bytes()), ("/dev/stdin", &gz[..])] {
        let out = run_ok(
            gpufeed()
                .args(["diagnose", "--format", "json", arg])
                .write_stdin(bytes.to_vec())
                .timeout(std::time::Duration::from_secs(60)),
        );
        same(arg, &serde_json::from_slice(&out.stdout).unwrap());
    }
    // A FIFO: read once until its writer closes it (it hung: opened a second time, with no
    // writer left).
    let fifo = d.join("fifo");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo on a path we own, with a NUL-terminated string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let writer = {
        let (fifo, csv) = (fifo.clone(), csv.clone());
        std::thread::spawn(move || std::fs::write(fifo, csv).unwrap())
    };
    let out = run_ok(
        gpufeed()
            .args(["diagnose", "--format", "json"])
            .arg(&fifo)
            .timeout(std::time::Duration::from_secs(60)),
    );
    writer.join().unwrap();
    same("fifo", &serde_json::from_slice(&out.stdout).unwrap());
}

/// A DCGM CSV saved with a byte-order mark: its `EntityId` column was read as an unknown name
/// and its two GPUs merged into one.
#[test]
fn a_byte_order_mark_keeps_a_dcgm_csvs_gpus_apart() {
    let dir = tempfile::tempdir().unwrap();
    let mut csv = String::from("\u{feff}EntityId,GRACT,FBUSD,TimeStamp\n");
    for t in 0..120 {
        writeln!(csv, "0,0.95,60000,{}", 1_700_000_000 + t).unwrap();
        writeln!(csv, "1,0.0,4,{}", 1_700_000_000 + t).unwrap();
    }
    let p = dir.path().join("dcgm.csv");
    std::fs::write(&p, csv).unwrap();
    let r = diagnose(&p);
    assert_eq!(r.gpus.len(), 2);
}

/// One `nvidia-smi` table as the driver prints it (535's layout, or 470's with `old`), its date
/// line first, and the process table when `procs` holds any.
fn smi_table(date: &str, gpus: &[(u32, u32, u32)], procs: &[(u32, u32, u32)], old: bool) -> String {
    let mut s = format!("{date}\n");
    if old {
        s += "+-----------------------------------------------------------------------------+\n\
              | NVIDIA-SMI 470.82.01    Driver Version: 470.82.01    CUDA Version: 11.4     |\n\
              |-------------------------------+----------------------+----------------------+\n\
              | GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |\n\
              | Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | GPU-Util  Compute M. |\n\
              |                               |                      |               MIG M. |\n\
              |===============================+======================+======================|\n";
    } else {
        s += "+---------------------------------------------------------------------------------------+\n\
              | NVIDIA-SMI 535.54.03              Driver Version: 535.54.03    CUDA Version: 12.2     |\n\
              |-----------------------------------------+----------------------+----------------------+\n\
              | GPU  Name                 Persistence-M | Bus-Id        Disp.A | Volatile Uncorr. ECC |\n\
              | Fan  Temp   Perf          Pwr:Usage/Cap |         Memory-Usage | GPU-Util  Compute M. |\n\
              |                                         |                      |               MIG M. |\n\
              |=========================================+======================+======================|\n";
    }
    for &(i, util, used) in gpus {
        if old {
            writeln!(s, "|   {i}  Tesla V100-SXM2...  On   | 00000000:0{i}:00.0 Off |                    0 |").unwrap();
            writeln!(s, "| N/A   41C    P0   180W / 300W | {used:>6}MiB / 32510MiB | {util:>6}%      Default |").unwrap();
            s += "|                               |                      |                  N/A |\n\
                  +-------------------------------+----------------------+----------------------+\n";
        } else {
            writeln!(s, "|   {i}  NVIDIA A100-SXM4-80GB          On  | 00000000:0{i}:00.0 Off |                    0 |").unwrap();
            writeln!(s, "| N/A   33C    P0             250W / 400W | {used:>6}MiB / 81920MiB | {util:>6}%      Default |").unwrap();
            s += "|                                         |                      |             Disabled |\n\
                  +-----------------------------------------+----------------------+----------------------+\n";
        }
    }
    if !procs.is_empty() {
        s += "\n+---------------------------------------------------------------------------------------+\n\
              | Processes:                                                                            |\n\
              |  GPU   GI   CI        PID   Type   Process name                            GPU Memory |\n\
              |        ID   ID                                                             Usage      |\n\
              |=======================================================================================|\n";
        for &(g, pid, mib) in procs {
            if old {
                writeln!(s, "|    {g}   N/A  N/A  {pid:>8}      C   python                            {mib}MiB |").unwrap();
            } else {
                writeln!(s, "|    {g}   N/A  N/A  {pid:>8}      C   ...conda/envs/train/bin/python        {mib}MiB |").unwrap();
            }
        }
        s += "+---------------------------------------------------------------------------------------+\n";
    }
    s
}

/// A `date` banner or nvidia-smi's own date line, `s` seconds after 12:00:00.
fn ctime(s: u32) -> String {
    format!("Wed Jan 10 12:{:02}:{:02} 2024", s / 60, s % 60)
}

/// The plain `nvidia-smi` table (issue 46, item 2): one pasted snapshot gets a reading (memory
/// against utilization, what it suggests, the command that tells), looped tables are a time
/// series (a shell loop's `date` banners, `watch`'s header, the older driver layout), and the
/// process table gives the PIDs. All were "unrecognized format".
#[test]
fn the_nvidia_smi_table_people_paste_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let one = d.join("snapshot.txt");
    std::fs::write(
        &one,
        smi_table(
            &ctime(0),
            &[(0, 30, 74143), (1, 0, 4)],
            &[(0, 175134, 74134)],
            false,
        ),
    )
    .unwrap();
    let r = diagnose(&one);
    assert_eq!(r.source.format.as_str(), "smi_table");
    assert_eq!(r.gpus.len(), 2);
    let notes = r.notes.join("\n");
    assert!(notes.contains("A single snapshot"), "{notes}");
    assert!(notes.contains("memory held with compute low"), "{notes}");
    assert!(notes.contains("`gpufeed run -- <your command>`"), "{notes}");
    assert!(notes.contains("GPU 0 PID 175134"), "{notes}");
    // No fix or speed-up is weighed from one instant.
    assert_eq!(r.verdict.id.as_str(), "unknown");
    assert!(r.findings.is_empty(), "{:?}", r.findings);
    // Every GPU at 0% but one holding 14.5 GiB for a process: a job is there, not `idle`
    // ("check that the job uses the GPU at all", said to a new user's pasted table).
    let held = d.join("held.txt");
    std::fs::write(
        &held,
        smi_table(
            &ctime(0),
            &[(0, 0, 14850), (1, 0, 2)],
            &[(0, 1234, 14846)],
            false,
        ),
    )
    .unwrap();
    let r = diagnose(&held);
    assert_eq!(r.verdict.id.as_str(), "unknown", "{:?}", r.verdict);
    assert!(r.findings.is_empty(), "{:?}", r.findings);
    // A shell loop (`while :; do date; nvidia-smi; sleep 2; done`) of a starving pair, then
    // `watch -n 2 nvidia-smi` captured, in the older layout.
    let mut looped = String::new();
    let mut watched = String::new();
    for k in 0..90u32 {
        let t = k * 2;
        let util = if k % 3 == 0 { 90 } else { 5 };
        looped += &format!("{} UTC\n", ctime(t));
        looped += &smi_table(&ctime(t), &[(0, util, 70000), (1, util, 70000)], &[], false);
        watched += &format!("Every 2.0s: nvidia-smi          node7: {}\n\n", ctime(t));
        watched += &smi_table(&ctime(t), &[(0, util, 30000)], &[(0, 4242, 29990)], true);
    }
    for (name, text, gpus) in [("loop.log", &looped, 2), ("watch.log", &watched, 1)] {
        let p = d.join(name);
        std::fs::write(&p, text).unwrap();
        let r = diagnose(&p);
        assert_eq!(r.gpus.len(), gpus, "{name}");
        assert!(
            (r.duration_s - 178.0).abs() < 1e-6,
            "{name}: {}",
            r.duration_s
        );
        let busy = r.verdict.gpu_busy_fraction.unwrap();
        assert!(busy < 0.6, "{name}: {busy}");
        assert!(!r.notes.join(" ").contains("single snapshot"), "{name}");
    }
}

/// gpustat (text and `--json`), an `nvitop -1` snapshot (nvidia-smi's table drawn with `│`),
/// and `nvidia-smi -q` text and XML reports, looped: each read into the same GPUs and time.
#[test]
fn gpustat_nvitop_and_query_reports_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (mut text, mut json, mut q, mut x) =
        (String::new(), String::new(), String::new(), String::new());
    for k in 0..60u32 {
        let util = if k % 2 == 0 { 95 } else { 10 };
        writeln!(text, "node7                  {}  535.54.03", ctime(k)).unwrap();
        writeln!(text, "[0] NVIDIA A100-SXM4-80GB | 40°C, {util:>3} % | 70000 / 81920 MB | alice:python/4242(69990M)").unwrap();
        writeln!(
            text,
            "[1] NVIDIA A100-SXM4-80GB | 30°C,   0 % |     4 / 81920 MB |"
        )
        .unwrap();
        writeln!(
            json,
            r#"{{"hostname": "node7", "query_time": "2024-01-10T12:{:02}:{:02}.000001", "gpus": [{{"index": 0, "uuid": "GPU-a", "name": "NVIDIA A100-SXM4-80GB", "utilization.gpu": {util}, "memory.used": 70000, "memory.total": 81920, "processes": [{{"pid": 4242, "command": "python", "gpu_memory_usage": 69990}}]}}, {{"index": 1, "uuid": "GPU-b", "name": "NVIDIA A100-SXM4-80GB", "utilization.gpu": 0, "memory.used": 4, "memory.total": 81920, "processes": []}}]}}"#,
            k / 60,
            k % 60
        )
        .unwrap();
        write!(q, "\n==============NVSMI LOG==============\n\nTimestamp                                 : {}\nDriver Version                            : 535.54.03\n\nAttached GPUs                             : 2\n", ctime(k)).unwrap();
        write!(
            x,
            "<?xml version=\"1.0\" ?>\n<nvidia_smi_log>\n\t<timestamp>{}</timestamp>\n",
            ctime(k)
        )
        .unwrap();
        for (g, u, mib) in [(0, util, 70000), (1, 0, 4)] {
            write!(q, "GPU 00000000:0{g}:00.0\n    Product Name                          : NVIDIA A100-SXM4-80GB\n    FB Memory Usage\n        Total                             : 81920 MiB\n        Used                              : {mib} MiB\n    BAR1 Memory Usage\n        Used                              : 1 MiB\n    Utilization\n        Gpu                               : {u} %\n").unwrap();
            write!(x, "\t<gpu id=\"00000000:0{g}:00.0\">\n\t\t<product_name>NVIDIA A100-SXM4-80GB</product_name>\n\t\t<fb_memory_usage>\n\t\t\t<total>81920 MiB</total>\n\t\t\t<used>{mib} MiB</used>\n\t\t</fb_memory_usage>\n\t\t<utilization>\n\t\t\t<gpu_util>{u} %</gpu_util>\n\t\t</utilization>\n\t</gpu>\n").unwrap();
        }
        x += "</nvidia_smi_log>\n";
    }
    let nvitop = smi_table(&ctime(0), &[(0, 31, 70000), (1, 0, 4)], &[], true)
        .replace("NVIDIA-SMI 470.82.01", "NVITOP 1.3.2        ")
        .replace('|', "│");
    for (name, body, format, seconds) in [
        ("gpustat.txt", &text, "gpustat", 59.0),
        ("gpustat.json", &json, "gpustat_json", 59.0),
        ("q.txt", &q, "smi_q", 59.0),
        ("q.xml", &x, "smi_q_xml", 59.0),
        ("nvitop.txt", &nvitop, "smi_table", 0.0),
    ] {
        let p = d.join(name);
        std::fs::write(&p, body).unwrap();
        let r = diagnose(&p);
        assert_eq!(r.source.format.as_str(), format, "{name}");
        assert_eq!(r.gpus.len(), 2, "{name}");
        assert!(
            (r.duration_s - seconds).abs() < 1e-6,
            "{name}: {}",
            r.duration_s
        );
        let g0 = &r.gpus[0];
        assert!(
            g0.mem_used_max_bytes.is_some_and(|b| b > 60 << 30),
            "{name}"
        );
    }
}

/// A 20-minute starving job inside a 4-hour log at 0% (issue 46, item 3): judged alone, the
/// idle hours around it said (it was `idle (0.90)`: under a tenth of the log active, the whole
/// log was one block).
#[test]
fn a_short_job_in_a_long_idle_log_is_judged_alone() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "mostly_idle.csv",
        &LogSpec {
            style: Style::Smi,
            interval_s: 1.0,
            duration_s: 4.0 * 3600.0,
            gpus: vec![GpuSpec {
                name: A100,
                mem_total_mib: 81920,
                mem_used_mib: 70000,
                util: |t, r| {
                    if (7200.0..8400.0).contains(&t) {
                        square(t, r)
                    } else {
                        0.0
                    }
                },
            }],
        },
    );
    let r = diagnose(&p);
    assert_ne!(r.verdict.id.as_str(), "idle", "{:?}", r.verdict);
    let busy = r.verdict.gpu_busy_fraction.unwrap();
    assert!((0.15..0.6).contains(&busy), "{busy}");
    assert!(!r.phases.is_empty());
    let notes = r.notes.join(" ");
    assert!(
        notes.contains("A short job in a long log: judged the 20m"),
        "{notes}"
    );
}

/// Utilization logged as a 0–1 fraction under a percent's name (issue 46, item 3): read as
/// percent it was an idle GPU; it is said and scaled.
#[test]
fn a_fraction_under_a_percent_name_is_said_and_scaled() {
    let dir = tempfile::tempdir().unwrap();
    let mut csv = String::from("timestamp,gpu_util_percent,mem_used_mib\n");
    for t in 0..600 {
        writeln!(
            csv,
            "2026-12-02T12:{:02}:{:02}Z,{:.2},60000",
            t / 60,
            t % 60,
            0.90 + (t % 7) as f64 / 100.0
        )
        .unwrap();
    }
    let p = dir.path().join("fraction.csv");
    std::fs::write(&p, csv).unwrap();
    let r = diagnose(&p);
    assert_ne!(r.verdict.id.as_str(), "idle");
    let mean = r.gpus[0].util_mean_pct.unwrap();
    assert!((90.0..97.0).contains(&mean), "{mean}");
    let notes = r.notes.join(" ");
    assert!(notes.contains("0-1 fraction"), "{notes}");
}

/// Epoch seconds in the year 9999 (issue 46, item 3): read as milliseconds, a 10-minute log
/// was 0.6 s long; they stay seconds, and the absurd year is said.
#[test]
fn absurd_epoch_seconds_are_said() {
    let dir = tempfile::tempdir().unwrap();
    let mut csv = String::from("time,gpu_util,mem_used_mib\n");
    for t in 0..600u64 {
        writeln!(csv, "{},{},60000", 253_402_200_000 + t, 90 + t % 5).unwrap();
    }
    let p = dir.path().join("year9999.csv");
    std::fs::write(&p, csv).unwrap();
    let r = diagnose(&p);
    assert!((r.duration_s - 599.0).abs() < 1.0, "{}", r.duration_s);
    let notes = r.notes.join(" ");
    assert!(notes.contains("in the year 9999"), "{notes}");
}

/// 8 GPUs busy for 30 minutes, then the header again (its times carrying on) and 2 GPUs
/// starving (issue 46, item 3): two runs, told apart by their GPUs, the last judged (both were
/// blended: "busy 89%").
#[test]
fn runs_on_other_gpus_are_told_apart() {
    let dir = tempfile::tempdir().unwrap();
    let gpus = |n: usize, util: fn(f64, f64) -> f64| -> Vec<GpuSpec> {
        (0..n)
            .map(|_| GpuSpec {
                name: A100,
                mem_total_mib: 81920,
                mem_used_mib: 70000,
                util,
            })
            .collect()
    };
    let first = generate(&LogSpec {
        style: Style::Smi,
        interval_s: 1.0,
        duration_s: 1800.0,
        gpus: gpus(8, busy),
    });
    // The second run starts one second after the first ends.
    let second = generate(&LogSpec {
        style: Style::Smi,
        interval_s: 1.0,
        duration_s: 600.0,
        gpus: gpus(2, square),
    });
    let shifted: String = second
        .lines()
        .map(|l| match l.split_once(", ") {
            Some((ts, rest)) if ts.starts_with("2026") => {
                let (hms, _) = ts.split_at(ts.len() - 4);
                let secs: u32 = hms[11..13].parse::<u32>().unwrap() * 3600
                    + hms[14..16].parse::<u32>().unwrap() * 60
                    + hms[17..19].parse::<u32>().unwrap()
                    + 1801;
                format!(
                    "{}{:02}:{:02}:{:02}.000, {rest}\n",
                    &hms[..11],
                    secs / 3600,
                    secs / 60 % 60,
                    secs % 60
                )
            }
            _ => format!("{l}\n"),
        })
        .collect();
    let p = dir.path().join("two_runs.csv");
    std::fs::write(&p, format!("{first}{shifted}")).unwrap();
    let r = diagnose(&p);
    assert_eq!(r.gpus.len(), 2, "{:?}", r.notes);
    let busy = r.verdict.gpu_busy_fraction.unwrap();
    assert!(busy < 0.6, "{busy}");
    assert!(
        r.notes.join(" ").contains("2 runs appended"),
        "{:?}",
        r.notes
    );
}

#[test]
fn a_few_readings_after_a_start_up_get_no_confident_verdict() {
    let dir = tempfile::tempdir().unwrap();
    // nvidia-smi dmon: eight polls at 0% (a start-up), then two at 100% as it was stopped.
    let mut log =
        String::from("# gpu     sm    mem    enc    dec\n# Idx      %      %      %      %\n");
    for i in 0..10 {
        let u = if i < 8 { 0 } else { 100 };
        log.push_str(&format!("    0    {u:3}    {:3}      0      0\n", u / 2));
    }
    let p = dir.path().join("dmon.log");
    std::fs::write(&p, &log).unwrap();
    let r = diagnose(&p);
    assert_eq!(r.verdict.id.as_str(), "unknown", "{:?}", r.verdict);
    assert!(r.verdict.confidence <= 0.2, "{:?}", r.verdict);
    assert!(
        r.verdict.summary.contains("Too few readings"),
        "{}",
        r.verdict.summary
    );
    assert!(r.findings.is_empty(), "{:?}", ids(&r));

    // One reading, then rows of dashes: idle, but not at 0.9, and the dashes are said.
    let mut dashes = String::from("# gpu     sm    mem    enc    dec\n# Idx      %      %      %      %\n    0      0      0      0      0\n");
    for _ in 0..26 {
        dashes.push_str("    0      -      -      -      -\n");
    }
    let p = dir.path().join("dashes.log");
    std::fs::write(&p, &dashes).unwrap();
    let r = diagnose(&p);
    assert_eq!(r.verdict.id.as_str(), "idle");
    assert!(r.verdict.confidence <= 0.3, "{:?}", r.verdict);
    assert!(
        r.notes
            .iter()
            .any(|n| n.contains("26 of 27 rows held a dash")),
        "{:?}",
        r.notes
    );
}

#[test]
fn the_timeline_says_the_time_of_its_cells_in_what_was_judged() {
    let dir = tempfile::tempdir().unwrap();
    // Ten minutes at 0% (a start-up left out), then four of training at 90%: the chart draws
    // the four minutes, 4 s a cell, not the log's fourteen.
    let mut log = String::from("timestamp, index, utilization.gpu [%], memory.used [MiB]\n");
    for s in 0..840u32 {
        let u = if s < 600 { 0 } else { 88 + s % 5 };
        log.push_str(&format!("{}, 0, {u} %, 20000 MiB\n", 1_700_000_000 + s));
    }
    let p = dir.path().join("gpu.csv");
    std::fs::write(&p, &log).unwrap();
    let t = text(&p);
    let cells = t.lines().find(|l| l.contains("/cell")).unwrap_or_default();
    assert!(cells.ends_with(" 4.0 s/cell"), "{t}");
}
