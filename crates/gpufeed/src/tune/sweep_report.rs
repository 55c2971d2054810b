//! Sweep results, the sweet spot, and the reports (table, JSON, CSV, Markdown).

use super::params::{json_value, Setting};
use super::trial::{TrialFigures, TrialOutcome, TrialRun};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const SCHEMA_VERSION: u32 = 1;

/// A setting is as good as the best when its throughput is within this fraction of it.
pub const WITHIN_OF_BEST: f64 = 0.05;

/// One trial, as reported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialResult {
    /// Knob name → value (a number when it reads as one).
    pub parameters: BTreeMap<String, serde_json::Value>,
    pub command: Vec<String>,
    #[serde(flatten)]
    pub figures: TrialFigures,
    #[serde(flatten)]
    pub run: TrialRun,
    /// Runs of this setting: more than 1 when `--retries` re-ran a trial that never settled.
    #[serde(default = "one")]
    pub attempts: u32,
    /// Position of each value in its list: the setting's cost order.
    #[serde(skip)]
    pub cost: usize,
    #[serde(skip)]
    pub label: String,
}

fn one() -> u32 {
    1
}

impl TrialResult {
    pub fn new(setting: &Setting, command: Vec<String>, o: TrialOutcome) -> TrialResult {
        let exit = &o.run.exit;
        let failed = !exit.ok() && exit.status != super::trial::TrialStatus::Interrupted;
        TrialResult {
            parameters: setting
                .values
                .iter()
                .map(|(k, v)| (k.clone(), json_value(v)))
                .collect(),
            command,
            run: o.run.reported(failed),
            figures: o.figures,
            attempts: 1,
            cost: setting.cost(),
            label: setting.label(),
        }
    }

    /// Usable for the sweet spot: ran without failing and has a throughput.
    fn usable(&self) -> Option<f64> {
        if !self.run.exit.ok() {
            return None;
        }
        self.figures
            .throughput
            .as_ref()
            .map(|t| t.value)
            .filter(|v| *v > 0.0)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweetSpot {
    pub parameters: BTreeMap<String, serde_json::Value>,
    pub throughput: f64,
    pub unit: String,
    /// Its throughput over the best one's.
    pub fraction_of_best: f64,
    pub best_parameters: BTreeMap<String, serde_json::Value>,
    pub best_throughput: f64,
    pub reason: String,
    /// What could make the pick wrong: the last value tried with data wait still high, a trial
    /// that never settled. Also appended to `reason`.
    #[serde(default)]
    pub caveats: Vec<String>,
}

/// Data wait at the pick above which the range may have stopped too early.
pub const STILL_WAITING_FRACTION: f64 = 0.10;

/// The whole report, rewritten after every trial.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepReport {
    pub schema_version: u32,
    pub command: Vec<String>,
    /// Knobs in the order given: name and values.
    pub knobs: Vec<(String, Vec<String>)>,
    pub results: Vec<TrialResult>,
    pub sweet_spot: Option<SweetSpot>,
    /// Trials planned in all.
    pub trials_planned: usize,
    /// Ctrl-C stopped the sweep early.
    pub interrupted: bool,
    /// Throughputs are in different units (sources differ between trials): no sweet spot.
    #[serde(default)]
    pub mixed_units: bool,
    /// The knobs only reach the job through `--dataloader` / `--torch`, and no trial's override
    /// took effect: the trials ran the same settings, so there is no sweet spot. Says why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overrides_never_applied: Option<String>,
}

impl SweepReport {
    /// Sets [`SweepReport::overrides_never_applied`] (and clears the sweet spot) when every
    /// trial that ran reported no override. `knobs_only_injected`: the knobs appear nowhere but in
    /// `--dataloader` / `--torch` values.
    pub(crate) fn check_overrides(&mut self, knobs_only_injected: bool) {
        let ran: Vec<&TrialResult> = self
            .results
            .iter()
            .filter(|r| r.run.overrides.is_some() && r.run.exit.ok())
            .collect();
        let none = !ran.is_empty()
            && ran
                .iter()
                .all(|r| r.run.overrides.as_ref().is_some_and(|o| o.is_empty()));
        self.overrides_never_applied = (knobs_only_injected && none).then(|| {
            let why = ran
                .iter()
                .flat_map(|r| r.run.override_notes.iter())
                .next()
                .cloned()
                .unwrap_or_else(|| "nothing was overridden".into());
            format!(
                "the overrides never took effect ({why}): every trial ran the job's own settings, \
                 so differences between them are noise, not a result"
            )
        });
        if self.overrides_never_applied.is_some() {
            self.sweet_spot = None;
        }
    }
}

/// The cheapest setting within 5% of the best: cheapest = lowest sum of list positions (values
/// are taken to be listed in order of cost, as `0,2,4,8` workers are), ties to the faster one.
pub fn sweet_spot(
    results: &[TrialResult],
    knobs: &[(String, Vec<String>)],
) -> (Option<SweetSpot>, bool) {
    let usable: Vec<(&TrialResult, f64)> = results
        .iter()
        .filter_map(|r| r.usable().map(|v| (r, v)))
        .collect();
    let units: std::collections::BTreeSet<&str> = usable
        .iter()
        .filter_map(|(r, _)| r.figures.throughput.as_ref().map(|t| t.unit.as_str()))
        .collect();
    if units.len() > 1 {
        return (None, true);
    }
    let Some(&(best, best_v)) = usable.iter().max_by(|a, b| a.1.total_cmp(&b.1)) else {
        return (None, false);
    };
    let Some(&(pick, v)) = usable
        .iter()
        .filter(|(_, v)| *v >= best_v * (1.0 - WITHIN_OF_BEST))
        .min_by(|a, b| a.0.cost.cmp(&b.0.cost).then(b.1.total_cmp(&a.1)))
    else {
        return (None, false);
    };
    let unit = pick
        .figures
        .throughput
        .as_ref()
        .map(|t| t.unit.clone())
        .unwrap_or_default();
    let frac = v / best_v;
    let reason = if std::ptr::eq(pick, best) {
        let runner = usable
            .iter()
            .filter(|(r, _)| !std::ptr::eq(*r, best))
            .max_by(|a, b| a.1.total_cmp(&b.1));
        match runner {
            Some((r, rv)) => format!(
                "{} is the fastest ({} {unit}) and no cheaper setting comes within {:.0}% of it (next best: {} at {} {unit}, {:.0}% of it)",
                pick.label,
                crate::units::num(v),
                WITHIN_OF_BEST * 100.0,
                r.label,
                crate::units::num(*rv),
                rv / best_v * 100.0
            ),
            None => format!("{} is the only setting measured", pick.label),
        }
    } else {
        format!(
            "{} reaches {} {unit}, {:.1}% of the best ({} at {} {unit}): within {:.0}%, and larger settings cost more (RAM and /dev/shm for more workers) for at most {:.1}% more throughput",
            pick.label,
            crate::units::num(v),
            frac * 100.0,
            best.label,
            crate::units::num(best_v),
            WITHIN_OF_BEST * 100.0,
            (best_v / v - 1.0) * 100.0
        )
    };
    let caveats = caveats(pick, best, knobs);
    let mut reason = reason + &evidence(results, pick);
    for c in &caveats {
        reason.push_str(". ");
        reason.push_str(c);
    }
    (
        Some(SweetSpot {
            parameters: pick.parameters.clone(),
            throughput: v,
            unit,
            fraction_of_best: frac,
            best_parameters: best.parameters.clone(),
            best_throughput: best_v,
            reason,
            caveats,
        }),
        false,
    )
}

/// What could make the pick wrong (see [`SweetSpot::caveats`]).
fn caveats(pick: &TrialResult, best: &TrialResult, knobs: &[(String, Vec<String>)]) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(w) = pick
        .figures
        .data_wait_fraction
        .filter(|w| *w >= STILL_WAITING_FRACTION)
    {
        for (k, values) in knobs {
            let numeric = values.len() >= 2 && values.iter().all(|v| v.parse::<f64>().is_ok());
            let last = values.last().map(|v| json_value(v));
            if numeric && last.is_some() && pick.parameters.get(k) == last.as_ref() {
                out.push(format!(
                    "{k}={} is the last value tried and the training loop still waits for data {:.0}% of the time: try higher values of {k}",
                    values.last().map(String::as_str).unwrap_or_default(),
                    w * 100.0
                ));
            }
        }
    }
    let unsettled = |r: &TrialResult, who: &str| {
        r.figures.throughput.as_ref().filter(|t| !t.steady).map(|t| {
            format!(
                "{who} {} never settled{}{}: its throughput may be off; re-run with a longer --max-time or --retries N",
                r.label,
                if r.attempts > 1 {
                    format!(" in {} runs", r.attempts)
                } else {
                    String::new()
                },
                t.rel_half_width()
                    .map(|h| format!(" (±{:.1}% at the end)", h * 100.0))
                    .unwrap_or_default()
            )
        })
    };
    out.extend(unsettled(pick, "The sweet spot"));
    if !std::ptr::eq(pick, best) {
        out.extend(unsettled(best, "The fastest setting"));
    }
    out
}

/// What changed from the cheapest setting to the pick: data wait and GPU utilization.
fn evidence(results: &[TrialResult], pick: &TrialResult) -> String {
    let Some(base) = results
        .iter()
        .filter(|r| r.run.exit.ok() && !std::ptr::eq(*r, pick))
        .min_by_key(|r| r.cost)
        .filter(|b| b.cost < pick.cost)
    else {
        return String::new();
    };
    let mut parts = Vec::new();
    if let (Some(a), Some(b)) = (
        base.figures.data_wait_fraction,
        pick.figures.data_wait_fraction,
    ) {
        parts.push(format!(
            "the training loop waits for data {:.0}% of the time at {}, {:.0}% at {}",
            a * 100.0,
            base.label,
            b * 100.0,
            pick.label
        ));
    }
    if let (Some(a), Some(b)) = (
        base.figures.gpu_util_mean_pct,
        pick.figures.gpu_util_mean_pct,
    ) {
        parts.push(format!(
            "GPU utilization {a:.0}% at {}, {b:.0}% at {}",
            base.label, pick.label
        ));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("; {}", parts.join("; "))
    }
}

/// How to give sweep a rate to measure, when it found none.
pub const NO_RATE_HELP: &str =
    "A PyTorch job is timed at its torch DataLoader or optimizer with no code change; this one \
sent no step (it iterates no torch DataLoader and steps no torch optimizer, or ran with \
--no-auto-steps, or python -E/-I/-S or a replaced PYTHONPATH kept gpufeed's hook out). Give it a rate gpufeed can read: \
--rate-regex 'REGEX' with one number group matched on its output (e.g. --rate-regex \
'([0-9.]+) it/s'), step markers from python/gpufeed_probe.py (`probe.step()` once per step, or \
`for batch in probe.wrap(loader)`), or a tqdm progress bar.";

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::tune::params::{parse_knobs, product};
    use crate::tune::trial::{RateSource, Throughput, TrialExit, TrialStatus};

    /// A usable throughput whose interval never met the tolerance.
    fn unsettled(r: &TrialResult) -> bool {
        r.run.exit.ok() && r.figures.throughput.as_ref().is_some_and(|t| !t.steady)
    }

    pub(crate) fn result(setting: &Setting, v: Option<f64>, status: TrialStatus) -> TrialResult {
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
                        steady: true,
                        warmup_s: Some(0.5),
                        intervals: 50,
                        samples_per_s: Some(v * 32.0),
                    }),
                    gpu_util_mean_pct: None,
                    gpu_mem_max_bytes: None,
                    data_wait_fraction: v.map(|v| 1.0 - v / 100.0),
                    data_wait_source: v.map(|_| crate::finding::WaitSource::StepProbe),
                    job_cpu_mean_pct: Some(150.0),
                    job_rss_max_bytes: None,
                },
                run: TrialRun {
                    exit: TrialExit {
                        status,
                        code: Some(if status == TrialStatus::Failed { 1 } else { 0 }),
                        signal: None,
                        stop_signal: Some(2),
                    },
                    duration_s: 3.0,
                    last_lines: vec!["Traceback".into(), "ValueError: boom".into()],
                    recording: "r.ndjson".into(),
                    overrides: None,
                    override_notes: vec![],
                },
                oom_line: None,
                gpu_mem_total_bytes: None,
                gpu_error: None,
            },
        )
    }

    /// The top-level keys of `json` are `keys`, in this order (what the reports wrote before a
    /// trial's run was one struct flattened into both).
    fn keys_in_order(json: &str, keys: &[&str]) {
        let at: Vec<usize> = keys
            .iter()
            .map(|k| {
                json.find(&format!("\"{k}\":"))
                    .unwrap_or_else(|| panic!("{k} not in {json}"))
            })
            .collect();
        assert!(
            at.windows(2).all(|w| w[0] < w[1]),
            "{keys:?} out of order in {json}"
        );
    }

    #[test]
    fn a_trial_run_flattened_keeps_each_report_s_json() {
        let setting = &product(&parse_knobs(&["workers".into(), "0,1".into()]).unwrap())[0];
        let r = result(setting, Some(10.0), TrialStatus::Failed);
        let json = serde_json::to_string(&r).unwrap();
        keys_in_order(
            &json,
            &[
                "parameters",
                "command",
                "throughput",
                "gpu_util_mean_pct",
                "gpu_mem_max_bytes",
                "data_wait_fraction",
                "job_cpu_mean_pct",
                "job_rss_max_bytes",
                "duration_s",
                "exit",
                "last_lines",
                "recording",
                "attempts",
            ],
        );
        assert!(!json.contains("\"run\""), "{json}");
        let back: TrialResult = serde_json::from_str(&json).unwrap();
        assert_eq!(back.run, r.run);
        let b = crate::tune::batch_plan::BatchTrial {
            batch: 8,
            verdict: crate::tune::batch_plan::Verdict::Ok,
            oom_kind: None,
            oom_line: None,
            throughput: None,
            gpu_mem_max_bytes: Some(1),
            gpu_util_mean_pct: Some(2.0),
            run: r.run.clone(),
        };
        let json = serde_json::to_string(&b).unwrap();
        keys_in_order(
            &json,
            &[
                "batch",
                "verdict",
                "oom_kind",
                "oom_line",
                "throughput",
                "gpu_mem_max_bytes",
                "gpu_util_mean_pct",
                "duration_s",
                "exit",
                "last_lines",
                "recording",
            ],
        );
        let back: crate::tune::batch_plan::BatchTrial = serde_json::from_str(&json).unwrap();
        assert_eq!(back, b);
    }

    pub(crate) fn report(vals: &[(Option<f64>, TrialStatus)]) -> SweepReport {
        let knobs = parse_knobs(&["workers".into(), "0,1,2,4,8".into()]).unwrap();
        let settings = product(&knobs);
        let results: Vec<TrialResult> = vals
            .iter()
            .zip(&settings)
            .map(|((v, st), s)| result(s, *v, *st))
            .collect();
        let knob_list = vec![("workers".to_string(), knobs[0].values.clone())];
        let (sweet_spot, mixed_units) = sweet_spot(&results, &knob_list);
        SweepReport {
            schema_version: SCHEMA_VERSION,
            command: vec!["train".into()],
            knobs: vec![("workers".into(), knobs[0].values.clone())],
            results,
            sweet_spot,
            trials_planned: 5,
            interrupted: false,
            mixed_units,
            overrides_never_applied: None,
        }
    }

    #[test]
    fn unsettled_pick_is_flagged() {
        use TrialStatus::*;
        let mut rep = report(&[(Some(10.0), Steady), (Some(20.0), MaxTime)]);
        let t = rep.results[1].figures.throughput.as_mut().unwrap();
        t.steady = false;
        rep.results[1].figures.data_wait_fraction = Some(0.0);
        rep.results[1].attempts = 3;
        let knobs = vec![(
            "workers".to_string(),
            vec!["0".to_string(), "1".to_string(), "2".to_string()],
        )];
        let (sw, _) = sweet_spot(&rep.results, &knobs);
        let sw = sw.unwrap();
        assert!(
            sw.reason
                .contains("The sweet spot workers=1 never settled in 3 runs (±2.0% at the end)")
                && sw.reason.contains("--retries N"),
            "{}",
            sw.reason
        );
        assert!(unsettled(&rep.results[1]) && !unsettled(&rep.results[0]));
    }
}
