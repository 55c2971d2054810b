//! The corpus of real telemetry files (tests/data/real/SOURCES.md): every file diagnosed, its GPU
//! count and verdict checked against what a careful engineer reads from it, the score printed.
//!
//! The files come from other public repositories and are not committed here: they are read from
//! `../shared/telemetry/`, else from `tests/data/real/files/` (ignored by git;
//! `scripts/corpus-extract.sh` fills it from the repositories' history). Without either the test
//! says so and checks nothing.
//!
//! A file in [`KNOWN_MISSES`] may be judged wrong (its row says why it is still open); any other
//! miss fails the test, and so does a known miss that is now right (take it off the list).

use crate::gpufeed;
use serde_json::Value;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Files gpufeed does not yet judge as their row says, with why.
const KNOWN_MISSES: &[(&str, &str)] = &[
    (
        "monitor-text__jacgeborys-aerial_image_recognition__gpu_monitor.log",
        "bursts of 2-3 busy polls (30 s apart) between long idle stretches while the CPU fetches \
         map tiles: the phases judge the 26 bursts alone, without the idle poll that follows \
         each (which ends the burst), at 68% busy (underused), where the idle stretches are the \
         starvation; telling a job's own waits from time it did not run needs more than \
         utilization at 30 s",
    ),
    (
        "dcgm-csv__HuaizhengZhang-MIGProfiler__A100-40g_finetune_moco_dcgm.csv",
        "GRACT 72% inside the runs (11 gaps between runs left out): under the 80% gpufeed calls \
         busy, so `unknown` (underused); the gatherer read 63-69% as busy",
    ),
    (
        "dcgm-csv__atharvanihalani-gpu-telemetry-exploration__t2_telemetry.csv",
        "SM active a steady 62% (utilization ~80%) in a 25 s warm-up excerpt: busy is SM \
         activity and 62% is under the 80% line, so `unknown` (underused); an engine-active \
         figure beside a mid SM activity is not yet weighed",
    ),
    (
        "dcgm-field-csv__4179e1-dcgm_test__dmon.csv",
        "power and clock-event reasons only (the GpuIdle reason on every sample): gpufeed judges \
         no busy figure from power or the idle reason yet, and refuses the file",
    ),
    (
        "rocm-smi__cmontemuino-amd-mi300x-ml-benchmarks__gpu_power_Llama-3.1-8B_latency_bs1_in128_out128_float16_mem0.8_20250807_185823.csv",
        "power only (card0 324 W, the others at an idle 145 W): refused, no busy figure",
    ),
    (
        "wandb-events__MoonBlvd-mil_ucf_cvpr2018__run-20191205_171425-uezx3fqj-wandb-events.jsonl",
        "GPU 0 holds the job at 4% busy for 2 hours beside three GPUs at 0%: all four read as \
         idle (under 5%); W&B gives memory as a percent with no total, so the memory that would \
         tell the job's GPU from the others is not weighed",
    ),
    (
        "wandb-run__AbrahamWG-bridge-rna__run-nn061kou.wandb",
        "two GPUs at a steady 70% in W&B's 15 s averages, GPU 1 falling to 40-50% in the last \
         fifth as GPU 0 reaches 100%: read as input_bound (GPU 1 starving), where the averages \
         support no cause",
    ),
    (
        "xpu-smi__jkwack-JKBench_Tools__sample_xpu-smi.csv",
        "a benchmark at 97% that stops for 1-2 s every 14.7 s (between its repetitions) and \
         ramps up over 4 s: read as input_bound at 80% busy; as with a checkpoint stall, a log \
         alone cannot tell a benchmark's host phase from a data stall",
    ),
    (
        "gpustat__alifarahani1998-IO-Workload-Characterization__gpustat.txt",
        "utilization 57-88% (mean 70%) in 18 one-minute samples, every one above 50%: under the \
         80% gpufeed calls busy, so `unknown` (underused); a steady mid load sampled a minute \
         apart is not yet told from an underused GPU",
    ),
    (
        "smi-query__grantwilkins-training_profile__power-trace_2gpu_2025-12-05-19-21-36.csv",
        "70% busy with a 2-3 s dip to 8% every 13.6 s (the script's periodic checkpoints): read \
         as input_bound; a log alone cannot tell a checkpoint stall from a data stall",
    ),
];

struct Row {
    file: String,
    gpus: Option<u64>,
    verdict: String,
}

fn rows() -> Vec<Row> {
    let text = include_str!("../data/real/SOURCES.md");
    let mut lines = text.lines().filter(|l| l.starts_with('|'));
    let header: Vec<String> = lines
        .next()
        .expect("a table")
        .split('|')
        .map(|c| c.trim().to_string())
        .collect();
    let col = |name: &str| header.iter().position(|h| h == name).expect(name);
    let (f, g, v) = (col("file"), col("gpus"), col("verdict"));
    lines
        .skip(1)
        .map(|l| {
            let c: Vec<&str> = l.split('|').map(str::trim).collect();
            Row {
                file: c[f].to_string(),
                gpus: c[g]
                    .split(|ch: char| !ch.is_ascii_digit())
                    .next()
                    .and_then(|n| n.parse().ok()),
                verdict: c[v].to_string(),
            }
        })
        .collect()
}

/// `GPUFEED_TELEMETRY_CORPUS` (a folder with new files beside the shared ones, to try rows not
/// yet copied), else `../shared/telemetry/`, else `tests/data/real/files/`.
fn corpus_dir() -> Option<PathBuf> {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    std::env::var_os("GPUFEED_TELEMETRY_CORPUS")
        .map(PathBuf::from)
        .into_iter()
        .chain([
            here.join("../../../shared/telemetry"),
            here.join("tests/data/real/files"),
        ])
        .find(|d| d.is_dir())
}

/// What gpufeed said of one file.
enum Said {
    Refused(String),
    Report(Value),
}

fn diagnose(p: &Path) -> Said {
    let out = gpufeed()
        .args(["diagnose", "--format", "json"])
        .arg(p)
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    if out.status.success() {
        Said::Report(serde_json::from_slice(&out.stdout).unwrap())
    } else {
        let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
        assert_eq!(
            out.status.code(),
            Some(3),
            "{}: a refusal is exit 3 with one line, got {:?}: {err}",
            p.display(),
            out.status
        );
        assert_eq!(err.lines().count(), 1, "{}: {err}", p.display());
        Said::Refused(err)
    }
}

/// Does the report match the row? `Err` says how it does not.
fn judge(row: &Row, said: &Said) -> Result<String, String> {
    let r = match said {
        Said::Refused(e) if row.verdict == "unclear" => return Ok(format!("refused: {e}")),
        Said::Refused(e) => return Err(format!("refused: {e}")),
        Said::Report(r) => r,
    };
    let v = &r["verdict"];
    let id = v["id"].as_str().unwrap_or_default();
    let states: Vec<&str> = v["gpus"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| g["state"].as_str())
        .collect();
    let gpus = r["gpus"].as_array().map_or(0, Vec::len) as u64;
    let busy = v["gpu_busy_fraction"].as_f64();
    let got = format!("{id} ({gpus} GPUs: {})", states.join(" "));
    if let Some(n) = row.gpus.filter(|&n| n != gpus) {
        return Err(format!("{n} GPUs expected, read {got}"));
    }
    let worked = |s: &&str| matches!(*s, "busy" | "starving" | "underused" | "tiny_kernels");
    let rested = |s: &&str| matches!(*s, "unused" | "idle");
    let ok = match row.verdict.as_str() {
        "busy" => matches!(id, "compute_bound" | "throttled"),
        "starved" => {
            matches!(id, "input_bound" | "unknown" | "idle")
                && busy.is_none_or(|b| b < 0.6)
                && !states.contains(&"busy")
        }
        "idle" => id == "idle",
        "tiny" => id == "launch_bound",
        "mixed" => states.iter().any(worked) && states.iter().any(rested),
        "unclear" => matches!(id, "unknown" | "idle"),
        other => panic!("{}: no such expected verdict {other}", row.file),
    };
    if ok {
        Ok(got)
    } else {
        Err(got)
    }
}

#[test]
fn every_real_file_is_read_as_a_careful_engineer_reads_it() {
    let Some(dir) = corpus_dir() else {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: no real telemetry corpus (../shared/telemetry or tests/data/real/files; \
             scripts/corpus-extract.sh fills it): the corpus test did not run"
        );
        return;
    };
    let rows = rows();
    assert!(rows.len() >= 40, "{} rows", rows.len());
    let mut right = 0;
    let mut absent = 0;
    let mut wrong = Vec::new();
    let mut report = String::new();
    for row in &rows {
        let p = dir.join(&row.file);
        if !p.exists() {
            absent += 1;
            continue;
        }
        let known = KNOWN_MISSES.iter().find(|(f, _)| *f == row.file);
        let verdict = judge(row, &diagnose(&p));
        let mark = match (&verdict, known) {
            (Ok(_), None) => {
                right += 1;
                "ok  "
            }
            (Ok(_), Some(_)) => {
                right += 1;
                wrong.push(format!("{}: now right, take it off KNOWN_MISSES", row.file));
                "NOW"
            }
            (Err(_), Some(_)) => "known",
            (Err(e), None) => {
                wrong.push(format!("{}: expected {}, {e}", row.file, row.verdict));
                "MISS"
            }
        };
        let said = verdict.unwrap_or_else(|e| e);
        report.push_str(&format!(
            "  {mark:5} {:60.60}  expected {:8} {}\n",
            row.file,
            row.verdict,
            said.chars().take(110).collect::<String>()
        ));
    }
    let present = rows.len() - absent;
    let _ = writeln!(
        std::io::stderr(),
        "real telemetry corpus ({}): {right} of {present} files read right ({absent} absent)\n{report}",
        dir.display()
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
