//! Presenter for `gpufeed batch-size`: the table of tried batches, the overrides and failures,
//! the largest batch, the recommendation and the accumulation plan, from a [`BatchReport`]; its
//! JSON is serde's.

use super::fmt::num;
use crate::tune::batch_plan::{samples_per_s, BatchReport, Verdict};
use std::fmt::Write as _;

/// The text report (`--format text`).
pub fn text(rep: &BatchReport) -> String {
    super::fmt::terminal_safe(rep, false, text_raw)
}

fn text_raw(rep: &BatchReport) -> String {
    let mut s = String::new();
    trials_table(&mut s, rep);
    overrides_and_failures(&mut s, rep);
    largest_batch(&mut s, rep);
    recommendation(&mut s, rep);
    s
}

/// One row per trial: batch, result, throughput, samples/s, peak GPU memory, time.
fn trials_table(s: &mut String, rep: &BatchReport) {
    let _ = writeln!(
        s,
        "{:>8}  {:<8}  {:>14}  {:>10}  {:>12}  {:>6}",
        "batch", "result", "throughput", "samples/s", "GPU mem peak", "time"
    );
    for t in &rep.trials {
        let tp = t
            .throughput
            .as_ref()
            .map(|x| format!("{} {}", num(x.value), x.unit))
            .unwrap_or_else(|| "-".into());
        let verdict = match t.verdict {
            Verdict::Ok => "ok".to_string(),
            Verdict::Oom => "OOM".to_string(),
            Verdict::Failed => "failed".to_string(),
        };
        let _ = writeln!(
            s,
            "{:>8}  {:<8}  {:>14}  {:>10}  {:>12}  {:>5.1}s",
            t.batch,
            verdict,
            tp,
            samples_per_s(t).map(num).unwrap_or_else(|| "-".into()),
            t.gpu_mem_max_bytes
                .map(|b| format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64))
                .unwrap_or_else(|| "-".into()),
            t.run.duration_s
        );
    }
}

/// What `--dataloader`/`--torch` overrode in each trial, the notes once each, and the last
/// output of trials that failed for a reason other than memory.
fn overrides_and_failures(s: &mut String, rep: &BatchReport) {
    let mut notes: Vec<&String> = Vec::new();
    for t in &rep.trials {
        if let Some(o) = &t.run.overrides {
            let what = if o.is_empty() {
                "nothing".to_string()
            } else {
                o.iter()
                    .map(|x| x.describe())
                    .collect::<Vec<_>>()
                    .join("; ")
            };
            let _ = writeln!(s, "  batch {} overridden: {what}", t.batch);
        }
        for n in &t.run.override_notes {
            if !notes.contains(&n) {
                notes.push(n);
            }
        }
    }
    for n in notes {
        let _ = writeln!(s, "  note: {n}");
    }
    for t in rep.trials.iter().filter(|t| t.verdict == Verdict::Failed) {
        let _ = writeln!(
            s,
            "\nBatch {} failed (not out of memory); last output:",
            t.batch
        );
        for l in &t.run.last_lines {
            let _ = writeln!(s, "    {l}");
        }
    }
}

/// The largest batch that ran, and the first that ran out of memory.
fn largest_batch(s: &mut String, rep: &BatchReport) {
    match rep.max_batch {
        Some(m) => {
            let _ = write!(s, "\nLargest batch that runs: {m}");
            if let Some(f) = rep.first_oom_batch {
                let kind = rep
                    .trials
                    .iter()
                    .find(|t| t.batch == f)
                    .and_then(|t| t.oom_kind.clone())
                    .unwrap_or_default();
                let _ = write!(s, " ({f} ran out of memory: {kind})");
            }
            let _ = writeln!(s);
        }
        None => {
            let _ = writeln!(s, "\nNo batch size ran.");
        }
    }
}

/// The batch to use and why, the fastest one when it is not the largest, the accumulation plan,
/// and why the search stopped early.
fn recommendation(s: &mut String, rep: &BatchReport) {
    if let (Some(b), Some(r)) = (rep.recommended_batch, &rep.recommendation) {
        use crate::tune::batch_plan::Basis;
        let why = match r.basis {
            Basis::MemoryFit => format!(
                "peak GPU memory, fitted against batch size, stays under {:.0}% of the total (predicted {})",
                rep.mem_target_pct,
                r.predicted_mem_bytes
                    .map(|b| format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64))
                    .unwrap_or_default()
            ),
            Basis::MemoryMeasured => format!(
                "the largest tried batch whose peak GPU memory stayed under {:.0}%",
                rep.mem_target_pct
            ),
            Basis::Margin => format!(
                "{:.0}% of the largest batch: no GPU memory figures, so the target is kept as a margin against later OOMs (evaluation, fragmentation)",
                rep.mem_target_pct
            ),
        };
        let _ = writeln!(s, "Recommended batch: {b} ({why})");
    }
    if let Some(f) = rep.fastest_batch {
        if Some(f) != rep.max_batch {
            let _ = writeln!(
                s,
                "Fastest tried batch: {f} (more samples/s than larger ones: bigger is not always faster)"
            );
        }
    }
    if let Some(a) = &rep.accumulation {
        let _ = writeln!(
            s,
            "Gradient accumulation for batch {}: {} × {} steps\n  {}",
            a.target_batch, a.micro_batch, a.steps, a.note
        );
    }
    if let Some(why) = &rep.stopped {
        let _ = writeln!(s, "Search stopped: {why}");
    }
}
