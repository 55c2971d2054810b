//! `compare` of two recordings (their diagnoses).

use super::{
    change, ratio_ci, verdict_change, Better, Change, Comparison, InputKind, Side, SideVerdict,
    Speedup, SCHEMA_VERSION,
};
use crate::diagnose::DiagnoseReport;
use crate::stats::SpeedupMetric;
use crate::units::round;

fn rec_side(r: &DiagnoseReport) -> Side {
    Side {
        path: r.source.path.clone(),
        verdict: Some(SideVerdict::Recording(r.verdict.id)),
        verdict_summary: Some(r.verdict.summary.clone()),
        top_fix: r.findings.first().map(|f| f.recommendation.clone()),
    }
}

fn mean_of(xs: impl Iterator<Item = f64>) -> Option<f64> {
    let v: Vec<f64> = xs.collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// Two recordings (or logs) diagnosed.
pub fn recordings(before: &DiagnoseReport, after: &DiagnoseReport) -> Comparison {
    let mut notes = Vec::new();
    let names = |r: &DiagnoseReport| -> Vec<String> {
        r.gpus.iter().filter_map(|g| g.name.clone()).collect()
    };
    if names(before) != names(after) && !names(before).is_empty() && !names(after).is_empty() {
        notes.push(format!(
            "The GPUs differ ({} before, {} after): the figures compare machines as well as settings.",
            names(before).join(", "),
            names(after).join(", ")
        ));
    }
    let speedup = recording_speedup(before, after);
    if speedup
        .as_ref()
        .is_none_or(|s| s.metric != SpeedupMetric::Throughput("steps/s".into()))
    {
        notes.extend(wall_time_note(before, after));
    }
    if speedup.is_none() {
        notes.push(
            "No speed-up: neither a step rate, the training loop's phases nor GPU utilization is \
             in both inputs."
                .into(),
        );
    }
    let (b, a) = (rec_side(before), rec_side(after));
    Comparison {
        schema_version: SCHEMA_VERSION,
        kind: InputKind::Recording,
        verdict: verdict_change(&b, &a, speedup.as_ref()),
        before: b,
        after: a,
        speedup,
        changes: recording_changes(before, after),
        notes,
    }
}

/// The pooled GPU busy share in percent, as the verdict measured it.
fn busy_pct(r: &DiagnoseReport) -> Option<f64> {
    r.verdict.gpu_busy_fraction.map(|f| f * 100.0)
}

/// Two diagnoses' figures side by side (those either side has).
#[allow(clippy::too_many_lines)] // a table: one change() per compared figure
fn recording_changes(before: &DiagnoseReport, after: &DiagnoseReport) -> Vec<Change> {
    let util = |r: &DiagnoseReport| mean_of(r.gpus.iter().filter_map(|g| g.util_mean_pct));
    let low = |r: &DiagnoseReport| {
        mean_of(r.gpus.iter().filter_map(|g| g.low_util_fraction)).map(|f| f * 100.0)
    };
    let pcie = |r: &DiagnoseReport| {
        let v: Vec<f64> = r
            .gpus
            .iter()
            .filter_map(|g| g.pcie.rx_mean_bytes_per_s)
            .collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / 1e9)
    };
    let mem = |r: &DiagnoseReport| {
        r.gpus
            .iter()
            .filter_map(|g| g.mem_used_max_bytes)
            .max()
            .map(|b| b as f64 / (1u64 << 30) as f64)
    };
    let workers = |r: &DiagnoseReport| (r.job.samples > 0).then_some(r.job.workers_max as f64);
    let mut changes = step_changes(before, after);
    changes.extend([
        change(
            "gpu_busy_pct",
            "GPU busy %",
            busy_pct(before),
            busy_pct(after),
            Better::Higher,
        ),
        change(
            "gpu_util_mean_pct",
            "GPU utilization (mean) %",
            util(before),
            util(after),
            Better::Higher,
        ),
        change(
            "gpu_low_util_time_pct",
            "time with GPU under 50 % (%)",
            low(before),
            low(after),
            Better::Lower,
        ),
        change(
            "pcie_rx_gb_per_s",
            "host→GPU copies (GB/s)",
            pcie(before),
            pcie(after),
            Better::Neutral,
        ),
        change(
            "gpu_mem_max_gib",
            "GPU memory peak (GiB)",
            mem(before),
            mem(after),
            Better::Neutral,
        ),
        change(
            "main_process_cpu_pct",
            "main process CPU (% of a core)",
            before.job.main_cpu_mean_pct,
            after.job.main_cpu_mean_pct,
            Better::Neutral,
        ),
        change(
            "workers",
            "DataLoader workers",
            workers(before),
            workers(after),
            Better::Neutral,
        ),
        change(
            "worker_cpu_mean_pct",
            "CPU per worker (% of a core)",
            before.job.worker_cpu_mean_pct,
            after.job.worker_cpu_mean_pct,
            Better::Neutral,
        ),
        change(
            "host_cpu_mean_pct",
            "machine CPU %",
            before.host.cpu_mean_pct,
            after.host.cpu_mean_pct,
            Better::Neutral,
        ),
        change(
            "iowait_mean_pct",
            "I/O wait %",
            before.host.iowait_mean_pct,
            after.host.iowait_mean_pct,
            Better::Lower,
        ),
        change(
            "duration_s",
            "recording length (s)",
            Some(before.duration_s),
            Some(after.duration_s),
            Better::Neutral,
        ),
    ]);
    changes.extend(phase_changes(before, after));
    changes.retain(|c| c.before.is_some() || c.after.is_some());
    changes
}

/// The step markers' figures: the steady step rate, samples/s and the data wait (the step
/// markers' exact one, else the Python stacks' estimate).
fn step_changes(before: &DiagnoseReport, after: &DiagnoseReport) -> Vec<Change> {
    let steps = |r: &DiagnoseReport| {
        r.steps
            .as_ref()
            .and_then(|s| s.steady_steps_per_s.or(s.steps_per_s))
    };
    let samples = |r: &DiagnoseReport| r.steps.as_ref().and_then(|s| s.samples_per_s);
    let wait = |r: &DiagnoseReport| {
        r.steps
            .as_ref()
            .and_then(|s| s.steady_data_wait_pct.or(s.data_wait_pct))
            .or_else(|| r.python.as_ref().and_then(|p| p.data_wait_pct))
    };
    vec![
        change(
            "steps_per_s",
            "steps/s (steady)",
            steps(before),
            steps(after),
            Better::Higher,
        ),
        change(
            "samples_per_s",
            "samples/s",
            samples(before),
            samples(after),
            Better::Higher,
        ),
        change(
            "data_wait_pct",
            "waiting for data %",
            wait(before),
            wait(after),
            Better::Lower,
        ),
    ]
}

/// The training loop's phases (Python stacks), as shares of its time.
fn phase_changes(before: &DiagnoseReport, after: &DiagnoseReport) -> Vec<Change> {
    let ph = |r: &DiagnoseReport| {
        r.python
            .as_ref()
            .and_then(|p| p.main.as_ref())
            .map(|m| m.phases_pct.clone())
    };
    let (b, a) = (ph(before), ph(after));
    if b.is_none() && a.is_none() {
        return vec![];
    }
    type Get = fn(&crate::diagnose::evidence::PhasesPct) -> f64;
    let rows: [(&str, &str, Get); 6] = [
        ("data_wait", "data wait", |p| p.data_wait),
        ("forward", "forward", |p| p.forward),
        ("backward", "backward", |p| p.backward),
        ("optimizer", "optimizer", |p| p.optimizer),
        ("sync", "sync", |p| p.sync),
        ("other", "other", |p| p.other + p.checkpoint_io),
    ];
    rows.iter()
        .map(|(id, label, get)| {
            change(
                &format!("loop_{id}_pct"),
                &format!("  loop: {label} %"),
                b.as_ref().map(get),
                a.as_ref().map(get),
                if *id == "data_wait" {
                    Better::Lower
                } else {
                    Better::Neutral
                },
            )
        })
        // a phase neither side spent time in is no figure
        .filter(|c| c.before.unwrap_or(0.0) > 0.0 || c.after.unwrap_or(0.0) > 0.0)
        .collect()
}

/// The steady step rates' ratio with its interval, when both recordings carry step markers.
fn step_rate_speedup(before: &DiagnoseReport, after: &DiagnoseReport) -> Option<Speedup> {
    let rate = |r: &DiagnoseReport| {
        let s = r.steps.as_ref()?;
        if let Some(v) = s.steady_steps_per_s.filter(|v| *v > 0.0) {
            // the interval is mean ± t·se with t ≥ 1.96: backing se out with 1.96 errs wide
            let se = s.steady_ci95.map(|[l, h]| (h - l) / 2.0 / 1.96);
            let warm = s
                .warmup_s
                .map(|w| format!(" ({w:.1} s of warm-up cut)"))
                .unwrap_or_default();
            return Some((v, se, format!("steady{warm}")));
        }
        let v = s.steps_per_s.filter(|v| *v > 0.0)?;
        Some((
            v,
            None,
            format!("over all {} steps (too few for a steady interval)", s.steps),
        ))
    };
    let ((b, seb, wb), (a, sea, wa)) = (rate(before)?, rate(after)?);
    let ci = seb.zip(sea).and_then(|(x, y)| ratio_ci(a, y, b, x, 1.96));
    Some(Speedup {
        value: round(a / b, 3),
        metric: SpeedupMetric::Throughput("steps/s".into()),
        ci95: ci,
        basis: format!(
            "step rate from the step markers: {} steps/s before, {wb}; {} steps/s after, {wa}",
            crate::units::num(b),
            crate::units::num(a),
        ),
    })
}

/// The steady step rates' ratio when both have step markers; else the training loop's own
/// estimate from its phases when both have them (Python stacks); else the GPU busy share's.
///
/// Never the jobs' wall times: without step markers nothing says that both runs did the same
/// work (a run of fixed length does more steps when it is faster: the same job before and after
/// `num_workers` 0 → 2, each running 20 s, read "1.40 times faster, by the job's wall time").
fn recording_speedup(before: &DiagnoseReport, after: &DiagnoseReport) -> Option<Speedup> {
    if let Some(s) = step_rate_speedup(before, after) {
        return Some(s);
    }
    if let Some(s) = loop_estimate(before, after) {
        return Some(s);
    }
    match (busy_pct(before), busy_pct(after)) {
        (Some(b), Some(a)) if b > 0.0 && a > 0.0 => Some(Speedup {
            value: round(a / b, 3),
            metric: SpeedupMetric::GpuBusyPct,
            ci95: None,
            basis: format!(
                "GPU busy {b:.1}% before, {a:.1}% after: a proxy for throughput (no step rate in the recordings); \
                 it holds when the GPU work per step is unchanged. {MEASURE}"
            ),
        }),
        _ => None,
    }
}

/// How to measure a step rate where the recordings have none.
const MEASURE: &str = "Measure it: send step markers in both runs (`for batch in \
    gpufeed.wrap(loader)`, docs/step-protocol.md), or let `gpufeed sweep` run each setting (it \
    reads a tqdm bar too).";

/// The step rate's ratio estimated from the training loop's phases (Python stacks): a loop that
/// waits `w` of its time for data and does the same work per step otherwise runs at a rate
/// proportional to `1 - w`, so AFTER's rate is `(1 - w_after) / (1 - w_before)` of BEFORE's.
fn loop_estimate(before: &DiagnoseReport, after: &DiagnoseReport) -> Option<Speedup> {
    let wait = |r: &DiagnoseReport| r.python.as_ref()?.data_wait_pct;
    let (b, a) = (wait(before)?, wait(after)?);
    // A loop never waits all of its time; 2% of work keeps the ratio finite.
    let (rb, ra) = ((100.0 - b).max(2.0), (100.0 - a).max(2.0));
    let value = round(ra / rb, 3);
    // Busy cores slow the loop's own work (more workers take cores from it on a small machine):
    // the estimate cannot see that.
    let busy = [("after", after), ("before", before)]
        .into_iter()
        .find_map(|(side, r)| {
            let c = r
                .host
                .cpu_mean_pct
                .filter(|c| *c >= LOOP_ESTIMATE_CPU_PCT)?;
            Some(format!(
                " The machine's CPU was {c:.0}% busy {side}: the loop's compute may have slowed \
                 (workers taking cores from it), which this estimate cannot see."
            ))
        })
        .unwrap_or_default();
    Some(Speedup {
        value,
        metric: SpeedupMetric::LoopEstimate,
        ci95: None,
        basis: format!(
            "an estimate from each training loop's phases (Python stacks), not a measured rate: \
             data wait {b:.1}% before, {a:.1}% after; with the same work per step outside the \
             wait, the step rate is (100 - {a:.1}) / (100 - {b:.1}) = {value:.2} times \
             BEFORE's.{busy} {MEASURE}"
        ),
    })
}

/// Machine CPU (mean, % of all cores) from which the loop estimate says that the loop's own
/// compute may have slowed.
const LOOP_ESTIMATE_CPU_PCT: f64 = 85.0;

/// The jobs' wall times, said and not compared, when the speed-up is no measured step rate.
fn wall_time_note(before: &DiagnoseReport, after: &DiagnoseReport) -> Option<String> {
    let whole = |r: &DiagnoseReport| r.job.exit_code == Some(0) && r.duration_s > 0.0;
    (whole(before) && whole(after)).then(|| {
        format!(
            "The jobs' wall times ({:.1} s before, {:.1} s after) are not compared: without step \
             markers gpufeed cannot tell that both runs did the same work (a run of fixed length \
             does more steps when it is faster).",
            before.duration_s, after.duration_s
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real PyTorch run without step markers (tests/fixtures/pystacks): `num_workers` 0 or 2.
    fn fixture(name: &str) -> DiagnoseReport {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/pystacks")
            .join(name);
        crate::diagnose::report_for_recording(&p).unwrap()
    }

    #[test]
    fn without_step_markers_the_loops_phases_give_an_estimate_never_the_wall_time() {
        let (mut b, mut a) = (fixture("plain0.ndjson"), fixture("plain2.ndjson"));
        let s = recording_speedup(&b, &a).unwrap();
        assert_eq!(s.metric, SpeedupMetric::LoopEstimate);
        let (wb, wa) = (
            b.python.as_ref().unwrap().data_wait_pct.unwrap(),
            a.python.as_ref().unwrap().data_wait_pct.unwrap(),
        );
        assert_eq!(s.value, round((100.0 - wa) / (100.0 - wb), 3));
        assert!(s.basis.contains("not a measured rate"), "{}", s.basis);
        assert!(!s.basis.contains("CPU was"), "{}", s.basis);
        // A busy machine: the loop's compute may have slowed, which the estimate cannot see.
        a.host.cpu_mean_pct = Some(96.1);
        let s = recording_speedup(&b, &a).unwrap();
        assert!(
            s.basis.contains(
                "The machine's CPU was 96% busy after: the loop's compute may have slowed"
            ),
            "{}",
            s.basis
        );
        // The wall times are said, not compared, when both jobs ran to completion.
        for r in [&mut b, &mut a] {
            r.job.exit_code = Some(0);
        }
        let c = recordings(&b, &a);
        assert!(
            c.notes
                .iter()
                .any(|n| n.starts_with("The jobs' wall times (")),
            "{:?}",
            c.notes
        );
        // Neither stacks nor a GPU: no speed-up at all, never the wall time.
        for r in [&mut b, &mut a] {
            r.python = None;
        }
        assert_eq!(recording_speedup(&b, &a), None);
        let c = recordings(&b, &a);
        assert!(
            c.notes.iter().any(|n| n.starts_with("No speed-up")),
            "{:?}",
            c.notes
        );
    }
}
