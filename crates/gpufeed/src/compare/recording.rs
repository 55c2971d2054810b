//! `compare` of two recordings (their diagnoses).

use super::{
    change, ratio_ci, verdict_change, Better, Change, Comparison, InputKind, Side, SideVerdict,
    Speedup, SCHEMA_VERSION,
};
use crate::diagnose::DiagnoseReport;
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
    if speedup.is_none() {
        notes
            .push("No speed-up: neither a step rate nor GPU utilization is in both inputs.".into());
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
        metric: "steps/s".into(),
        ci95: ci,
        basis: format!(
            "step rate from the step markers: {} steps/s before, {wb}; {} steps/s after, {wa}",
            crate::units::num(b),
            crate::units::num(a),
        ),
    })
}

/// The steady step rates' ratio when both have step markers, else the whole job's wall time
/// ratio when both ran to completion, else the GPU busy share's.
fn recording_speedup(before: &DiagnoseReport, after: &DiagnoseReport) -> Option<Speedup> {
    if let Some(s) = step_rate_speedup(before, after) {
        return Some(s);
    }
    // A speed-up needs a rate of work. Without step markers the whole job's wall time stands in when both recordings are of jobs that ran to completion (same work assumed);
    // failing that, the GPU's busy share (a proxy, said so).
    let whole = |r: &DiagnoseReport| r.job.exit_code == Some(0) && r.duration_s > 0.0;
    if whole(before) && whole(after) {
        Some(Speedup {
            value: round(before.duration_s / after.duration_s, 3),
            metric: "job_duration".into(),
            ci95: None,
            basis: format!(
                "job wall time {:.1} s before, {:.1} s after; assumes both runs did the same work",
                before.duration_s, after.duration_s
            ),
        })
    } else {
        match (busy_pct(before), busy_pct(after)) {
            (Some(b), Some(a)) if b > 0.0 && a > 0.0 => Some(Speedup {
                value: round(a / b, 3),
                metric: "gpu_busy_pct".into(),
                ci95: None,
                basis: format!(
                    "GPU busy {b:.1}% before, {a:.1}% after: a proxy for throughput (no step rate in the recordings); \
                     it holds when the GPU work per step is unchanged"
                ),
            }),
            _ => None,
        }
    }
}
