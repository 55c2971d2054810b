//! The verdict: one primary bottleneck, with a confidence, chosen from the evidence and findings.

use super::evidence::Evidence;
use super::rules::{input, r2};
use crate::finding::Finding;
use serde::{Deserialize, Serialize};

/// Verdict ids (a public contract, like finding ids).
pub const VERDICT_IDS: &[&str] = &[
    "input_bound",
    "compute_bound",
    "transfer_bound",
    "throttled",
    "idle",
    "unknown",
];

/// The one primary bottleneck.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// One of `input_bound`, `compute_bound` (healthy), `transfer_bound`, `throttled`, `idle`,
    /// `unknown`.
    pub id: String,
    /// 0–1: how sure the evidence makes us.
    pub confidence: f64,
    /// One line for people.
    pub summary: String,
    /// Id of the finding the verdict rests on, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finding: Option<String>,
    /// Mean GPU busy fraction (mean utilization / 100) over the measured GPUs.
    #[serde(default)]
    pub gpu_busy_fraction: Option<f64>,
}

fn has<'a>(findings: &'a [Finding], id: &str) -> Option<&'a Finding> {
    findings.iter().find(|f| f.id == id)
}

pub fn decide(e: &Evidence, findings: &[Finding]) -> Verdict {
    let busy = e.busy_fraction();
    let mk = |id: &str, confidence: f64, summary: String, finding: Option<&str>| Verdict {
        id: id.to_string(),
        confidence: r2(confidence.clamp(0.0, 1.0)),
        summary,
        finding: finding.map(str::to_string),
        gpu_busy_fraction: busy.map(super::rules::r3),
    };
    // The training loop's measured data wait: a verdict with or without GPU data.
    if let Some(f) = has(findings, "input_bound")
        .filter(|f| f.evidence.get("source").and_then(|v| v.as_str()) == Some("python_stacks"))
    {
        let wait = f
            .evidence
            .get("data_wait_pct")
            .and_then(|v| v.as_f64())
            .unwrap_or(0.0);
        let stage = f
            .evidence
            .get("hot_stage")
            .and_then(|v| v.as_str())
            .map(|s| format!("; the slowest data stage is {s}"))
            .unwrap_or_default();
        let gpu = busy
            .map(|b| format!(" (the GPU is busy {:.0}% of the time)", b * 100.0))
            .unwrap_or_default();
        return mk(
            "input_bound",
            (0.6 + wait / 200.0).min(0.95),
            format!(
                "Input-bound: the training loop waits for data {wait:.0}% of its time{gpu}{stage}."
            ),
            Some("input_bound"),
        );
    }
    let Some(b) = busy else {
        return mk(
            "unknown",
            0.0,
            "No GPU utilization was recorded: nothing to judge the GPU by.".into(),
            None,
        );
    };
    let pct = b * 100.0;
    if has(findings, "gpu_idle").is_some() {
        return mk(
            "idle",
            0.9,
            format!("The GPU was idle ({pct:.1}% busy)."),
            Some("gpu_idle"),
        );
    }
    let transfer = has(findings, "transfer_bound");
    if let Some(kind) = input::classify(e) {
        if !(transfer.is_some() && kind == input::Kind::Unknown) {
            let mut c: f64 = 0.5;
            if e.strongest_period().is_some_and(|p| p.is_strong()) {
                c += 0.2;
            }
            if e.any_bimodal() {
                c += 0.1;
            }
            if kind != input::Kind::Unknown {
                c += 0.15;
            }
            let what = match kind {
                input::Kind::TooFewWorkers => "there are too few DataLoader workers",
                input::Kind::CpuSaturated => "the CPU is saturated",
                input::Kind::IoBound => "reading data is too slow",
                input::Kind::MainProcess => "the training loop's process is pinned at a core",
                input::Kind::Unknown => "the data supply cannot keep up",
            };
            return mk(
                "input_bound",
                c.min(0.95),
                format!("Input-bound: the GPU is busy only {pct:.0}% of the time because {what}."),
                Some("input_bound"),
            );
        }
    }
    if transfer.is_some() {
        return mk(
            "transfer_bound",
            0.75,
            format!(
                "Transfer-bound: host-to-device copies saturate the PCIe link ({pct:.0}% busy)."
            ),
            Some("transfer_bound"),
        );
    }
    let throttled = has(findings, "throttled");
    let thr_frac = throttled
        .and_then(|f| f.evidence.get("throttled_time_fraction"))
        .and_then(|v| v.as_f64())
        .unwrap_or(0.0);
    if throttled.is_some() && thr_frac >= 0.2 {
        return mk(
            "throttled",
            (0.6 + thr_frac * 0.4).min(0.95),
            format!(
                "Throttled: clocks were held down {:.0}% of the time.",
                thr_frac * 100.0
            ),
            Some("throttled"),
        );
    }
    if b >= 0.85 {
        let c = 0.6 + (b - 0.85) * 2.5;
        return mk(
            "compute_bound",
            c.min(0.95),
            format!("Compute-bound: the GPU is busy {pct:.0}% of the time; the input keeps up."),
            None,
        );
    }
    if throttled.is_some() {
        return mk(
            "throttled",
            0.5,
            format!(
                "Throttled: clocks were held down {:.0}% of the time.",
                thr_frac * 100.0
            ),
            Some("throttled"),
        );
    }
    let hint = if has(findings, "batch_too_small").is_some() {
        " Memory is mostly free: the batch may be too small."
    } else {
        ""
    };
    mk(
        "unknown",
        0.3,
        format!(
            "The GPU is busy {pct:.0}% of the time without a clear cause in this recording.{hint}"
        ),
        has(findings, "batch_too_small").map(|_| "batch_too_small"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::rules::{evaluate, fixtures::*};

    fn verdict(e: &Evidence) -> Verdict {
        decide(e, &evaluate(e))
    }

    #[test]
    fn healthy_is_compute_bound_with_no_starvation_finding() {
        let e = base(97.0);
        let v = verdict(&e);
        assert_eq!(v.id, "compute_bound");
        assert!(v.confidence >= 0.8, "{v:?}");
        let ids: Vec<String> = evaluate(&e).into_iter().map(|f| f.id).collect();
        assert!(ids.is_empty(), "{ids:?}");
    }

    #[test]
    fn starving_with_one_pinned_worker_is_input_bound_and_confident() {
        let v = verdict(&too_few_workers(starving(base(30.0))));
        assert_eq!(v.id, "input_bound");
        assert_eq!(v.finding.as_deref(), Some("input_bound"));
        assert!(v.confidence >= 0.9, "{v:?}");
        assert!(
            v.summary.contains("too few DataLoader workers"),
            "{}",
            v.summary
        );
    }

    #[test]
    fn no_gpu_is_unknown_idle_is_idle() {
        let mut e = base(97.0);
        e.gpus.clear();
        assert_eq!(verdict(&e).id, "unknown");
        assert_eq!(verdict(&base(0.5)).id, "idle");
    }

    #[test]
    fn throttled_busy_gpu() {
        let mut e = base(96.0);
        e.gpus[0].throttle.observed_s = 100.0;
        e.gpus[0].throttle.slowing_fraction = Some(0.5);
        e.gpus[0]
            .throttle
            .by_reason
            .insert("hw_thermal".into(), 0.5);
        let v = verdict(&e);
        assert_eq!(v.id, "throttled");
        assert!(v.confidence >= 0.75);
    }

    #[test]
    fn unexplained_low_utilization_is_unknown() {
        let mut e = base(45.0);
        e.gpus[0].mem_used_max_fraction = Some(0.2);
        let v = verdict(&e);
        assert_eq!(v.id, "unknown");
        assert_eq!(v.finding.as_deref(), Some("batch_too_small"));
    }

    #[test]
    fn every_verdict_id_is_documented() {
        for e in [base(97.0), base(0.5), too_few_workers(starving(base(30.0)))] {
            assert!(VERDICT_IDS.contains(&verdict(&e).id.as_str()));
        }
    }
}
