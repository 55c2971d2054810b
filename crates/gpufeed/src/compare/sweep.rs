//! `compare` of two sweeps (their sweet spots).

use super::{
    change, ratio_ci, verdict_change, Better, Change, Comparison, InputKind, Side, SideVerdict,
    Speedup, SCHEMA_VERSION,
};
use crate::stats::SpeedupMetric;
use crate::tune::sweep_report::SweepReport;
use crate::units::round;

fn label(p: &std::collections::BTreeMap<String, serde_json::Value>) -> String {
    p.iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => format!("{k}={s}"),
            v => format!("{k}={v}"),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The trial a sweep stands for: its sweet spot, else its fastest trial.
fn sweep_pick(r: &SweepReport) -> Option<&crate::tune::sweep_report::TrialResult> {
    if let Some(s) = &r.sweet_spot {
        if let Some(t) = r.results.iter().find(|t| t.parameters == s.parameters) {
            return Some(t);
        }
    }
    r.results
        .iter()
        .filter(|t| t.run.exit.ok() && t.figures.throughput.is_some())
        .max_by(|a, b| {
            let v = |t: &crate::tune::sweep_report::TrialResult| {
                t.figures
                    .throughput
                    .as_ref()
                    .map(|x| x.value)
                    .unwrap_or(0.0)
            };
            v(a).total_cmp(&v(b))
        })
}

fn sweep_side(path: &str, r: &SweepReport) -> Side {
    let pick = sweep_pick(r);
    Side {
        path: path.into(),
        verdict: pick.map(|t| SideVerdict::Setting(label(&t.parameters))),
        verdict_summary: r.sweet_spot.as_ref().map(|s| s.reason.clone()),
        top_fix: None,
    }
}

/// Two sweeps: each one's sweet spot (else its fastest trial) side by side.
pub fn sweeps(
    before_path: &str,
    before: &SweepReport,
    after_path: &str,
    after: &SweepReport,
) -> Comparison {
    let (pb, pa) = (sweep_pick(before), sweep_pick(after));
    let mut notes = Vec::new();
    let speedup = sweep_speedup(pb, pa, &mut notes);
    let (bs, as_) = (
        sweep_side(before_path, before),
        sweep_side(after_path, after),
    );
    Comparison {
        schema_version: SCHEMA_VERSION,
        kind: InputKind::Sweep,
        verdict: verdict_change(&bs, &as_, speedup.as_ref()),
        before: bs,
        after: as_,
        speedup,
        changes: sweep_changes(before, after, pb, pa),
        notes,
    }
}

type Trial = crate::tune::sweep_report::TrialResult;

/// The picks' figures side by side, then the throughput of every setting both sweeps tried.
fn sweep_changes(
    before: &SweepReport,
    after: &SweepReport,
    pb: Option<&Trial>,
    pa: Option<&Trial>,
) -> Vec<Change> {
    let get =
        |t: Option<&crate::tune::sweep_report::TrialResult>,
         f: &dyn Fn(&crate::tune::sweep_report::TrialResult) -> Option<f64>| t.and_then(f);
    let unit_of = |t: Option<&crate::tune::sweep_report::TrialResult>| {
        t.and_then(|t| t.figures.throughput.as_ref().map(|x| x.unit.clone()))
    };
    let unit = unit_of(pb)
        .or_else(|| unit_of(pa))
        .unwrap_or_else(|| "throughput".into());
    let tp =
        |t: &crate::tune::sweep_report::TrialResult| t.figures.throughput.as_ref().map(|x| x.value);
    let mut changes = vec![
        change(
            "throughput",
            &unit,
            get(pb, &tp),
            get(pa, &tp),
            Better::Higher,
        ),
        change(
            "samples_per_s",
            "samples/s",
            get(pb, &|t| {
                t.figures.throughput.as_ref().and_then(|x| x.samples_per_s)
            }),
            get(pa, &|t| {
                t.figures.throughput.as_ref().and_then(|x| x.samples_per_s)
            }),
            Better::Higher,
        ),
        change(
            "gpu_util_mean_pct",
            "GPU utilization (mean) %",
            get(pb, &|t| t.figures.gpu_util_mean_pct),
            get(pa, &|t| t.figures.gpu_util_mean_pct),
            Better::Higher,
        ),
        change(
            "data_wait_pct",
            "waiting for data %",
            get(pb, &|t| t.figures.data_wait_fraction.map(|f| f * 100.0)),
            get(pa, &|t| t.figures.data_wait_fraction.map(|f| f * 100.0)),
            Better::Lower,
        ),
        change(
            "job_cpu_mean_pct",
            "job CPU (% of a core)",
            get(pb, &|t| t.figures.job_cpu_mean_pct),
            get(pa, &|t| t.figures.job_cpu_mean_pct),
            Better::Neutral,
        ),
        change(
            "gpu_mem_max_gib",
            "GPU memory peak (GiB)",
            get(pb, &|t| {
                t.figures
                    .gpu_mem_max_bytes
                    .map(|b| b as f64 / (1u64 << 30) as f64)
            }),
            get(pa, &|t| {
                t.figures
                    .gpu_mem_max_bytes
                    .map(|b| b as f64 / (1u64 << 30) as f64)
            }),
            Better::Neutral,
        ),
    ];
    changes.retain(|c| c.before.is_some() || c.after.is_some());
    // The same settings in both sweeps, throughput by throughput.
    for t in &before.results {
        if Some(t) == pb {
            continue;
        }
        if let Some(u) = after.results.iter().find(|u| u.parameters == t.parameters) {
            if tp(t).is_some() || tp(u).is_some() {
                changes.push(change(
                    &format!("throughput[{}]", label(&t.parameters)),
                    &format!("{unit} at {}", label(&t.parameters)),
                    tp(t),
                    tp(u),
                    Better::Higher,
                ));
            }
        }
    }
    changes
}

/// The ratio of the picks' throughputs with its interval; what stands in the way goes to `notes`.
fn sweep_speedup(
    pb: Option<&Trial>,
    pa: Option<&Trial>,
    notes: &mut Vec<String>,
) -> Option<Speedup> {
    match (
        pb.and_then(|t| t.figures.throughput.as_ref()),
        pa.and_then(|t| t.figures.throughput.as_ref()),
    ) {
        (Some(x), Some(y)) if x.unit == y.unit && x.value > 0.0 && y.value > 0.0 => {
            // each trial's interval is mean ± t·se: back out se with the normal quantile
            let se = |t: &crate::tune::trial::Throughput| {
                t.ci_low.zip(t.ci_high).map(|(l, h)| (h - l) / 2.0 / 1.96)
            };
            let ci = match (se(x), se(y)) {
                (Some(a), Some(b)) => ratio_ci(y.value, b, x.value, a, 1.96),
                _ => None,
            };
            if x.source == crate::tune::trial::RateSource::GpuBusyProxy {
                notes.push("The throughput is the GPU-busy proxy (no step rate was found): it holds when the GPU work per step is unchanged.".into());
            }
            for (side, t) in [("before", pb), ("after", pa)] {
                if let Some(t) = t {
                    if t.figures.throughput.as_ref().is_some_and(|x| !x.steady) {
                        notes.push(format!(
                            "The {side} pick ({}) never settled: its interval stayed wider than the tolerance.",
                            label(&t.parameters)
                        ));
                    }
                }
            }
            Some(Speedup {
                value: round(y.value / x.value, 3),
                metric: SpeedupMetric::Throughput(x.unit.clone()),
                ci95: ci,
                basis: format!(
                    "{} {} at {} before, {} {} at {} after",
                    crate::units::num(x.value),
                    x.unit,
                    pb.map(|t| label(&t.parameters)).unwrap_or_default(),
                    crate::units::num(y.value),
                    y.unit,
                    pa.map(|t| label(&t.parameters)).unwrap_or_default()
                ),
            })
        }
        (Some(x), Some(y)) if x.unit != y.unit => {
            notes.push(format!(
                "The throughputs are in different units ({} before, {} after): no speed-up.",
                x.unit, y.unit
            ));
            None
        }
        _ => {
            notes.push("One of the sweeps has no trial with a throughput: no speed-up.".into());
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweeps_compare_their_sweet_spots_with_an_interval() {
        use crate::tune::sweep_report::tests::report;
        use crate::tune::trial::TrialStatus::*;
        let b = report(&[
            (Some(15.0), Steady),
            (Some(25.0), Steady),
            (Some(26.0), Steady),
        ]);
        let a = report(&[
            (Some(30.0), Steady),
            (Some(45.0), Steady),
            (Some(46.0), MaxTime),
        ]);
        let c = sweeps("b.json", &b, "a.json", &a);
        assert_eq!(c.kind, InputKind::Sweep);
        let s = c.speedup.as_ref().unwrap();
        // sweet spots: workers=1 at 25 before, workers=1 at 45 after
        assert_eq!(
            c.verdict.before,
            Some(SideVerdict::Setting("workers=1".into()))
        );
        assert_eq!(s.metric.as_str(), "steps/s");
        assert!((s.value - 1.8).abs() < 1e-9, "{s:?}");
        let ci = s.ci95.unwrap();
        assert!(ci[0] < 1.8 && 1.8 < ci[1] && ci[1] - ci[0] < 0.15, "{ci:?}");
        let row = c
            .changes
            .iter()
            .find(|x| x.metric == "throughput[workers=0]")
            .unwrap();
        assert_eq!(
            (row.before, row.after, row.delta_pct),
            (Some(15.0), Some(30.0), Some(100.0))
        );
        // `1.80 ± 0.05 times faster` (present::compare's words; the golden files show them)
        assert_eq!(format!("{:.2}", (ci[1] - ci[0]) / 2.0), "0.05");
    }
}
