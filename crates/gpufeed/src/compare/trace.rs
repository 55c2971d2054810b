//! `compare` of two traces (their summaries and findings).

use super::{
    change, mean_se, ratio_ci, verdict_change, Better, Change, Comparison, InputKind, Side,
    SideVerdict, Speedup, SCHEMA_VERSION,
};
use crate::finding::Finding;
use crate::stats::t975;
use crate::stats::SpeedupMetric;
use crate::trace::breakdown::TraceSummary;
use crate::units::round;

fn trace_side(t: &TraceSummary, findings: &[Finding]) -> Side {
    Side {
        path: t.path.clone(),
        verdict: Some(SideVerdict::TopFinding(findings.first().map(|f| f.id))),
        verdict_summary: Some(
            findings
                .first()
                .map(|f| f.title.clone())
                .unwrap_or_else(|| "No problems found.".into()),
        ),
        top_fix: findings.first().map(|f| f.recommendation.clone()),
    }
}

/// Two traces, each with its ranked findings. The speed-up is the ratio of mean step times.
pub fn traces(
    before: &TraceSummary,
    before_findings: &[Finding],
    after: &TraceSummary,
    after_findings: &[Finding],
) -> Comparison {
    let speedup = step_speedup(before, after);
    let notes = trace_notes(before, after, speedup.as_ref());
    let (bs, as_) = (
        trace_side(before, before_findings),
        trace_side(after, after_findings),
    );
    Comparison {
        schema_version: SCHEMA_VERSION,
        kind: InputKind::Trace,
        verdict: verdict_change(&bs, &as_, speedup.as_ref()),
        before: bs,
        after: as_,
        speedup,
        changes: trace_changes(before, after),
        notes,
    }
}

/// Per-step figures of two traces side by side: step time, GPU busy, data wait, each time
/// category, copies, tensor cores.
#[allow(clippy::too_many_lines)] // a table: one change() per compared figure
fn trace_changes(before: &TraceSummary, after: &TraceSummary) -> Vec<Change> {
    let ms = |x: f64| x / 1000.0;
    let b = &before.breakdown;
    let a = &after.breakdown;
    let per_step_pageable = |t: &TraceSummary| {
        let steps = t.steps.len().max(1) as f64;
        t.copies
            .iter()
            .filter(|c| c.src == "Pageable" || c.dst == "Pageable")
            .map(|c| c.bytes)
            .sum::<f64>()
            / steps
            / 1e6
    };
    let per_step_copy_ms = |t: &TraceSummary| {
        let steps = t.steps.len().max(1) as f64;
        ms(t.copies
            .iter()
            .filter(|c| c.direction == "HtoD" || c.direction == "DtoH")
            .map(|c| c.time_us)
            .sum::<f64>()
            / steps)
    };
    let has_gpu = |t: &TraceSummary| !t.devices.is_empty();
    let mut changes = vec![
        change(
            "step_ms",
            "step time (ms)",
            Some(ms(b.total_us)),
            Some(ms(a.total_us)),
            Better::Lower,
        ),
        change(
            "steps_per_s",
            "steps/s",
            (b.total_us > 0.0).then(|| 1e6 / b.total_us),
            (a.total_us > 0.0).then(|| 1e6 / a.total_us),
            Better::Higher,
        ),
        change(
            "gpu_busy_pct",
            "GPU busy %",
            before.gpu_busy_pct,
            after.gpu_busy_pct,
            Better::Higher,
        ),
        change(
            "data_wait_pct",
            "waiting for the DataLoader %",
            Some(before.dataloader.share_pct),
            Some(after.dataloader.share_pct),
            Better::Lower,
        ),
    ];
    let cats = [
        ("kernel", "kernel", b.kernel_us, a.kernel_us),
        ("memcpy", "memcpy", b.memcpy_us, a.memcpy_us),
        ("memset", "memset", b.memset_us, a.memset_us),
        (
            "communication",
            "communication",
            b.communication_us,
            a.communication_us,
        ),
        ("runtime", "CUDA runtime", b.runtime_us, a.runtime_us),
        ("dataloader", "DataLoader", b.dataloader_us, a.dataloader_us),
        ("cpu_op", "CPU ops", b.cpu_op_us, a.cpu_op_us),
        ("other", "other", b.other_us, a.other_us),
    ];
    for (id, label, x, y) in cats {
        if x > 0.0 || y > 0.0 {
            changes.push(change(
                &format!("step_{id}_ms"),
                &format!("  {label} per step (ms)"),
                Some(ms(x)),
                Some(ms(y)),
                // time moves between categories when one shrinks: only the total is better or worse
                if id == "dataloader" {
                    Better::Lower
                } else {
                    Better::Neutral
                },
            ));
        }
    }
    changes.push(change(
        "copy_ms_per_step",
        "host↔GPU copies per step (ms)",
        Some(per_step_copy_ms(before)),
        Some(per_step_copy_ms(after)),
        Better::Lower,
    ));
    changes.push(change(
        "pageable_copy_mb_per_step",
        "pageable copies per step (MB)",
        Some(per_step_pageable(before)),
        Some(per_step_pageable(after)),
        Better::Lower,
    ));
    if has_gpu(before) || has_gpu(after) {
        changes.push(change(
            "tensor_core_pct",
            "kernel time on tensor cores %",
            Some(before.kernels.tensor_core_pct),
            Some(after.kernels.tensor_core_pct),
            Better::Higher,
        ));
    }
    changes
}

/// The ratio of mean step times with its 95% interval (Welch), when both traces have steps.
fn step_speedup(before: &TraceSummary, after: &TraceSummary) -> Option<Speedup> {
    let ms = |x: f64| x / 1000.0;
    let step_times = |t: &TraceSummary| -> Vec<f64> {
        t.steps
            .iter()
            .map(|s| s.total_us)
            .filter(|x| *x > 0.0)
            .collect()
    };
    let (sb, sa) = (step_times(before), step_times(after));
    match (mean_se(&sb), mean_se(&sa)) {
        (Some((mb, seb)), Some((ma, sea))) if mb > 0.0 && ma > 0.0 => {
            let ci = match (seb, sea) {
                (Some(x), Some(y)) => {
                    // Welch–Satterthwaite degrees of freedom for the t quantile.
                    let (vb, va) = (x * x, y * y);
                    let df = (vb + va).powi(2)
                        / (vb * vb / (sb.len() as f64 - 1.0) + va * va / (sa.len() as f64 - 1.0))
                            .max(1e-300);
                    let df = if df.is_finite() {
                        df.floor().max(1.0) as usize
                    } else {
                        sb.len() + sa.len() - 2
                    };
                    ratio_ci(mb, x, ma, y, t975(df))
                }
                _ => None,
            };
            Some(Speedup {
                value: round(mb / ma, 3),
                metric: SpeedupMetric::MeanStepTime,
                ci95: ci,
                basis: format!(
                    "mean step time {:.1} ms over {} steps before, {:.1} ms over {} steps after",
                    ms(mb),
                    sb.len(),
                    ms(ma),
                    sa.len()
                ),
            })
        }
        _ => None,
    }
}

/// What makes two traces less comparable: steps found differently, other GPUs, too few steps.
fn trace_notes(
    before: &TraceSummary,
    after: &TraceSummary,
    speedup: Option<&Speedup>,
) -> Vec<String> {
    let mut notes = Vec::new();
    if before.step_source != after.step_source {
        notes.push(format!(
            "Steps were found differently ({} before, {} after): step times may not measure the same work.",
            before.step_source, after.step_source
        ));
    }
    let gpu = |t: &TraceSummary| t.devices.iter().find_map(|d| d.name.clone());
    if let (Some(x), Some(y)) = (gpu(before), gpu(after)) {
        if x != y {
            notes.push(format!(
                "The GPUs differ ({x} before, {y} after): the figures compare machines as well as settings."
            ));
        }
    }
    if speedup.is_some_and(|s| s.ci95.is_none()) {
        notes.push(
            "Too few steps for an interval: profile more steps (schedule(active=N)) for one."
                .into(),
        );
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace_with_steps(step_us: &[f64]) -> TraceSummary {
        let mut t = TraceSummary {
            path: "t".into(),
            step_source: crate::trace::breakdown::StepSource::ProfilerStep,
            ..Default::default()
        };
        t.steps = step_us
            .iter()
            .map(|x| crate::trace::breakdown::StepRow {
                total_us: *x,
                kernel_us: x / 2.0,
                ..Default::default()
            })
            .collect();
        t.breakdown = crate::trace::breakdown::average(&t.steps);
        t
    }

    #[test]
    fn trace_speedup_is_the_ratio_of_mean_step_times_with_an_interval() {
        let b = trace_with_steps(&[180_000.0, 176_000.0, 178_000.0, 177_000.0]);
        let a = trace_with_steps(&[141_000.0, 140_000.0, 142_000.0, 141_500.0]);
        let c = traces(&b, &[], &a, &[]);
        let s = c.speedup.unwrap();
        assert_eq!(s.metric, SpeedupMetric::MeanStepTime);
        assert!(
            (s.value - 177_750.0 / 141_125.0).abs() < 1e-3,
            "{}",
            s.value
        );
        let ci = s.ci95.unwrap();
        assert!(
            ci[0] < s.value && s.value < ci[1] && ci[1] - ci[0] < 0.1,
            "{ci:?}"
        );
        assert_eq!(c.verdict.before, Some(SideVerdict::TopFinding(None)));
        assert!(!c.verdict.changed);
        let step = c.changes.iter().find(|c| c.metric == "step_ms").unwrap();
        assert!((step.delta_pct.unwrap() - (-20.6)).abs() < 0.1, "{step:?}");
    }

    #[test]
    fn one_step_traces_give_a_ratio_without_an_interval() {
        let b = trace_with_steps(&[200_000.0]);
        let a = trace_with_steps(&[100_000.0]);
        let c = traces(&b, &[], &a, &[]);
        assert_eq!(c.speedup.as_ref().unwrap().value, 2.0);
        assert!(c.speedup.unwrap().ci95.is_none());
        assert!(c.notes.iter().any(|n| n.contains("Too few steps")));
    }
}
