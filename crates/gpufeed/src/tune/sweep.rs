//! Sweep results, the sweet spot, and the reports (table, JSON, CSV, Markdown).

use super::params::{json_value, Setting};
use super::trial::{Throughput, TrialExit, TrialOutcome};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;

pub const SCHEMA_VERSION: u32 = 1;

/// A setting is as good as the best when its throughput is within this fraction of it.
pub const WITHIN_OF_BEST: f64 = 0.05;

/// One trial, as reported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialResult {
    /// Knob name → value (a number when it reads as one).
    pub parameters: BTreeMap<String, serde_json::Value>,
    pub command: Vec<String>,
    pub throughput: Option<Throughput>,
    pub gpu_util_mean_pct: Option<f64>,
    pub gpu_mem_max_bytes: Option<u64>,
    pub data_wait_fraction: Option<f64>,
    /// `step_probe` (exact) or `python_stacks` (estimated from stack samples).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_wait_source: Option<super::trial::WaitSource>,
    pub job_cpu_mean_pct: Option<f64>,
    pub job_rss_max_bytes: Option<u64>,
    pub duration_s: f64,
    pub exit: TrialExit,
    /// The job's last output lines when the trial failed (empty otherwise).
    pub last_lines: Vec<String>,
    pub recording: String,
    /// What `--dataloader` / `--torch` put in place of the job's own values (`None` when nothing
    /// was to be injected; an empty list when nothing could be).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overrides: Option<Vec<crate::inject::Override>>,
    /// Why overrides could not apply in this trial.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub override_notes: Vec<String>,
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
    /// A usable throughput whose interval never met the tolerance.
    pub fn unsettled(&self) -> bool {
        self.exit.ok() && self.throughput.as_ref().is_some_and(|t| !t.steady)
    }

    pub fn new(setting: &Setting, command: Vec<String>, o: TrialOutcome) -> TrialResult {
        let failed = !o.exit.ok() && o.exit.status != super::trial::Status::Interrupted;
        TrialResult {
            parameters: setting
                .values
                .iter()
                .map(|(k, v)| (k.clone(), json_value(v)))
                .collect(),
            command,
            throughput: o.throughput,
            gpu_util_mean_pct: o.gpu_util_mean_pct,
            gpu_mem_max_bytes: o.gpu_mem_max_bytes,
            data_wait_fraction: o.data_wait_fraction,
            data_wait_source: o.data_wait_source,
            job_cpu_mean_pct: o.job_cpu_mean_pct,
            job_rss_max_bytes: o.job_rss_max_bytes,
            duration_s: o.duration_s,
            exit: o.exit,
            last_lines: if failed { o.last_lines } else { vec![] },
            recording: o.recording.display().to_string(),
            override_notes: o
                .overrides
                .as_ref()
                .map(|r| r.notes.clone())
                .unwrap_or_default(),
            overrides: o.overrides.map(|r| r.overrides),
            attempts: 1,
            cost: setting.cost(),
            label: setting.label(),
        }
    }

    /// Usable for the sweet spot: ran without failing and has a throughput.
    fn usable(&self) -> Option<f64> {
        if !self.exit.ok() {
            return None;
        }
        self.throughput
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
            .filter(|r| r.overrides.is_some() && r.exit.ok())
            .collect();
        let none = !ran.is_empty()
            && ran
                .iter()
                .all(|r| r.overrides.as_ref().is_some_and(|o| o.is_empty()));
        self.overrides_never_applied = (knobs_only_injected && none).then(|| {
            let why = ran
                .iter()
                .flat_map(|r| r.override_notes.iter())
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
        .filter_map(|(r, _)| r.throughput.as_ref().map(|t| t.unit.as_str()))
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
                fmt_num(v),
                WITHIN_OF_BEST * 100.0,
                r.label,
                fmt_num(*rv),
                rv / best_v * 100.0
            ),
            None => format!("{} is the only setting measured", pick.label),
        }
    } else {
        format!(
            "{} reaches {} {unit}, {:.1}% of the best ({} at {} {unit}): within {:.0}%, and larger settings cost more (RAM and /dev/shm for more workers) for at most {:.1}% more throughput",
            pick.label,
            fmt_num(v),
            frac * 100.0,
            best.label,
            fmt_num(best_v),
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
        r.throughput.as_ref().filter(|t| !t.steady).map(|t| {
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
        .filter(|r| r.exit.ok() && !std::ptr::eq(*r, pick))
        .min_by_key(|r| r.cost)
        .filter(|b| b.cost < pick.cost)
    else {
        return String::new();
    };
    let mut parts = Vec::new();
    if let (Some(a), Some(b)) = (base.data_wait_fraction, pick.data_wait_fraction) {
        parts.push(format!(
            "the training loop waits for data {:.0}% of the time at {}, {:.0}% at {}",
            a * 100.0,
            base.label,
            b * 100.0,
            pick.label
        ));
    }
    if let (Some(a), Some(b)) = (base.gpu_util_mean_pct, pick.gpu_util_mean_pct) {
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
    "To measure one, give the job a rate gpufeed can read: a tqdm progress bar \
(`for batch in tqdm(loader)`), --rate-regex 'REGEX' with one number group matched on its output \
(e.g. --rate-regex '([0-9.]+) it/s'), step markers from python/gpufeed_probe.py \
(`probe.step()` once per step; it reads GPUFEED_STEP_SOCKET), or Python stack sampling (where this \
gpufeed has it) to time the training loop.";

/// Three significant digits, no exponent for everyday magnitudes.
pub(crate) fn fmt_num(x: f64) -> String {
    let a = x.abs();
    if a >= 100.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else if a >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

fn opt(x: Option<f64>, f: impl Fn(f64) -> String) -> String {
    x.map(f).unwrap_or_else(|| "-".into())
}

fn status_word(r: &TrialResult) -> String {
    use super::trial::Status::*;
    match r.exit.status {
        Steady => "steady".into(),
        MaxTime => "max-time".into(),
        Exited => "exited".into(),
        Interrupted => "interrupted".into(),
        Failed => match (r.exit.code, r.exit.signal) {
            (Some(c), _) => format!("failed (exit {c})"),
            (_, Some(s)) => format!("failed (signal {s})"),
            _ => "failed".into(),
        },
    }
}

/// `DataLoader(num_workers=8) at train.py:42, was 0`, one per override, or why there is none.
pub(crate) fn overridden_cell(r: &TrialResult) -> String {
    match &r.overrides {
        None => "-".into(),
        Some(o) if o.is_empty() => "nothing (see notes)".into(),
        Some(o) => o
            .iter()
            .map(|x| x.describe())
            .collect::<Vec<_>>()
            .join("; "),
    }
}

/// What a page shows under the verdict: why overrides never applied, then every override note.
pub(crate) fn notes_for_page(rep: &SweepReport) -> Vec<String> {
    let mut v: Vec<String> = rep
        .overrides_never_applied
        .iter()
        .map(|w| format!("No sweet spot: {w}."))
        .collect();
    v.extend(
        override_notes(rep)
            .into_iter()
            .map(|n| format!("note: {n}")),
    );
    v
}

/// Notes of every trial, each once.
fn override_notes(rep: &SweepReport) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for n in rep.results.iter().flat_map(|r| &r.override_notes) {
        if !v.contains(n) {
            v.push(n.clone());
        }
    }
    v
}

/// Marks a data-wait cell estimated from Python stacks (explained by [`STACKS_NOTE`]).
const STACKS_MARK: &str = "*";
/// The footnote of `STACKS_MARK`.
pub const STACKS_NOTE: &str = "* data wait estimated from Python stack samples of the training \
thread (the job sent no step markers with waits; python/gpufeed_probe.py measures it exactly)";

fn stacks_footnote(rep: &SweepReport) -> Option<&'static str> {
    rep.results
        .iter()
        .any(|r| r.data_wait_source == Some(super::trial::WaitSource::PythonStacks))
        .then_some(STACKS_NOTE)
}

/// Rows of cells: header first.
fn rows(rep: &SweepReport) -> Vec<Vec<String>> {
    let unit = rep
        .results
        .iter()
        .find_map(|r| r.throughput.as_ref().map(|t| t.unit.clone()))
        .unwrap_or_else(|| "throughput".into());
    let mut head: Vec<String> = rep.knobs.iter().map(|(k, _)| k.clone()).collect();
    head.extend(
        [
            &format!("{unit} (mean ± 95% CI)"),
            "samples/s",
            "GPU util",
            "data wait",
            "job CPU",
            "time",
            "status",
        ]
        .map(|s| s.to_string()),
    );
    let injected = rep.results.iter().any(|r| r.overrides.is_some());
    if injected {
        head.push("overridden".into());
    }
    let mut out = vec![head];
    for r in &rep.results {
        let mut row: Vec<String> = rep
            .knobs
            .iter()
            .map(|(k, _)| match r.parameters.get(k) {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
                None => "-".into(),
            })
            .collect();
        let tp = match &r.throughput {
            Some(t) => {
                let hw = match (t.ci_low, t.ci_high) {
                    (Some(l), Some(h)) => format!(" ± {}", fmt_num((h - l) / 2.0)),
                    _ => String::new(),
                };
                let proxy = if t.source == super::trial::Source::GpuBusyProxy {
                    " (GPU busy proxy)"
                } else {
                    ""
                };
                format!("{}{hw}{proxy}", fmt_num(t.value))
            }
            None => "-".into(),
        };
        row.push(tp);
        row.push(opt(
            r.throughput.as_ref().and_then(|t| t.samples_per_s),
            fmt_num,
        ));
        row.push(opt(r.gpu_util_mean_pct, |x| format!("{x:.0}%")));
        let mark = if r.data_wait_source == Some(super::trial::WaitSource::PythonStacks) {
            STACKS_MARK
        } else {
            ""
        };
        row.push(opt(r.data_wait_fraction, |x| {
            format!("{:.0}%{mark}", x * 100.0)
        }));
        row.push(opt(r.job_cpu_mean_pct, |x| format!("{x:.0}%")));
        row.push(format!("{:.1}s", r.duration_s));
        row.push(status_word(r));
        if injected {
            row.push(overridden_cell(r));
        }
        out.push(row);
    }
    out
}

/// The tuning table and the sweet spot, for a terminal.
pub fn text(rep: &SweepReport) -> String {
    let rows = rows(rep);
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut s = String::new();
    for row in &rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        let _ = writeln!(s, "{}", line.join("  ").trim_end());
    }
    if let Some(n) = stacks_footnote(rep) {
        let _ = writeln!(s, "{n}");
    }
    if let Some(t) = rep.results.iter().find_map(|r| {
        r.throughput
            .as_ref()
            .filter(|t| t.source == super::trial::Source::GpuBusyProxy)
    }) {
        let _ = writeln!(
            s,
            "\nNote: no step markers, progress bar or --rate-regex matched; {} is mean GPU utilization, a proxy for throughput, not a measure of it. {NO_RATE_HELP}",
            t.unit
        );
    }
    let notes = override_notes(rep);
    if !notes.is_empty() {
        let _ = writeln!(s, "\nOverrides (--dataloader/--torch):");
        for n in &notes {
            let _ = writeln!(s, "  note: {n}");
        }
    }
    for r in rep.results.iter().filter(|r| !r.last_lines.is_empty()) {
        let _ = writeln!(s, "\nTrial {} {}; last output:", r.label, status_word(r));
        for l in &r.last_lines {
            let _ = writeln!(s, "    {l}");
        }
    }
    match &rep.sweet_spot {
        Some(sw) => {
            let _ = writeln!(
                s,
                "\nSweet spot: {}\n  why: {}",
                label_of(&sw.parameters, &rep.knobs),
                sw.reason
            );
        }
        None if rep.overrides_never_applied.is_some() => {
            let _ = writeln!(
                s,
                "\nNo sweet spot: {}.",
                rep.overrides_never_applied.as_deref().unwrap_or_default()
            );
        }
        None if rep.mixed_units => {
            let _ = writeln!(
                s,
                "\nNo sweet spot: trials measured throughput in different units (add step markers or --rate-regex so every trial reports the same one)."
            );
        }
        None if rep.results.iter().any(|r| r.exit.ok()) => {
            let _ = writeln!(
                s,
                "\nNo sweet spot: no trial reported a throughput. {NO_RATE_HELP}"
            );
        }
        None => {
            let _ = writeln!(
                s,
                "\nNo sweet spot: no trial both ran and reported a throughput."
            );
        }
    }
    if rep.interrupted {
        let _ = writeln!(
            s,
            "Interrupted after {} of {} trials.",
            rep.results.len(),
            rep.trials_planned
        );
    }
    s
}

fn label_of(p: &BTreeMap<String, serde_json::Value>, knobs: &[(String, Vec<String>)]) -> String {
    knobs
        .iter()
        .filter_map(|(k, _)| {
            p.get(k).map(|v| match v {
                serde_json::Value::String(s) => format!("{k}={s}"),
                v => format!("{k}={v}"),
            })
        })
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn markdown(rep: &SweepReport) -> String {
    let rows = rows(rep);
    let mut s = String::new();
    for (i, row) in rows.iter().enumerate() {
        let cells: Vec<String> = row.iter().map(|c| c.replace('|', "\\|")).collect();
        let _ = writeln!(s, "| {} |", cells.join(" | "));
        if i == 0 {
            let _ = writeln!(s, "|{}", "---|".repeat(row.len()));
        }
    }
    if let Some(n) = stacks_footnote(rep) {
        let _ = writeln!(s, "\n{}", n.replacen('*', "\\*", 1));
    }
    if let Some(sw) = &rep.sweet_spot {
        let _ = writeln!(
            s,
            "\n**Sweet spot:** `{}` — {}",
            label_of(&sw.parameters, &rep.knobs),
            sw.reason
        );
    }
    if let Some(why) = &rep.overrides_never_applied {
        let _ = writeln!(s, "\n**No sweet spot:** {why}.");
    }
    let notes = override_notes(rep);
    if !notes.is_empty() {
        s.push('\n');
    }
    for n in notes {
        let _ = writeln!(s, "- note: {n}");
    }
    s
}

fn csv_cell(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

pub fn csv(rep: &SweepReport) -> String {
    let mut head: Vec<String> = rep.knobs.iter().map(|(k, _)| k.clone()).collect();
    head.extend(
        [
            "throughput",
            "unit",
            "ci_low",
            "ci_high",
            "source",
            "samples_per_s",
            "gpu_util_mean_pct",
            "gpu_mem_max_bytes",
            "data_wait_fraction",
            "job_cpu_mean_pct",
            "job_rss_max_bytes",
            "duration_s",
            "status",
            "exit_code",
            "signal",
        ]
        .map(String::from),
    );
    let mut s = head.join(",");
    s.push('\n');
    let f = |x: Option<f64>| x.map(|v| v.to_string()).unwrap_or_default();
    let u = |x: Option<u64>| x.map(|v| v.to_string()).unwrap_or_default();
    for r in &rep.results {
        let mut row: Vec<String> = rep
            .knobs
            .iter()
            .map(|(k, _)| match r.parameters.get(k) {
                Some(serde_json::Value::String(s)) => csv_cell(s),
                Some(v) => v.to_string(),
                None => String::new(),
            })
            .collect();
        let t = r.throughput.as_ref();
        row.push(f(t.map(|t| t.value)));
        row.push(t.map(|t| csv_cell(&t.unit)).unwrap_or_default());
        row.push(f(t.and_then(|t| t.ci_low)));
        row.push(f(t.and_then(|t| t.ci_high)));
        row.push(
            t.map(|t| {
                serde_json::to_value(t.source)
                    .ok()
                    .and_then(|v| v.as_str().map(String::from))
                    .unwrap_or_default()
            })
            .unwrap_or_default(),
        );
        row.push(f(t.and_then(|t| t.samples_per_s)));
        row.push(f(r.gpu_util_mean_pct));
        row.push(u(r.gpu_mem_max_bytes));
        row.push(f(r.data_wait_fraction));
        row.push(f(r.job_cpu_mean_pct));
        row.push(u(r.job_rss_max_bytes));
        row.push(format!("{:.3}", r.duration_s));
        row.push(
            serde_json::to_value(r.exit.status)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default(),
        );
        row.push(r.exit.code.map(|c| c.to_string()).unwrap_or_default());
        row.push(r.exit.signal.map(|c| c.to_string()).unwrap_or_default());
        s.push_str(&row.join(","));
        s.push('\n');
    }
    s
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::tune::params::{parse_knobs, product};
    use crate::tune::trial::{Source, Status};

    pub(crate) fn result(setting: &Setting, v: Option<f64>, status: Status) -> TrialResult {
        TrialResult::new(
            setting,
            vec!["train".into()],
            TrialOutcome {
                throughput: v.map(|v| Throughput {
                    value: v,
                    unit: "steps/s".into(),
                    ci_low: Some(v * 0.98),
                    ci_high: Some(v * 1.02),
                    source: Source::StepSocket,
                    steady: true,
                    warmup_s: Some(0.5),
                    intervals: 50,
                    samples_per_s: Some(v * 32.0),
                }),
                exit: TrialExit {
                    status,
                    code: Some(if status == Status::Failed { 1 } else { 0 }),
                    signal: None,
                    stop_signal: Some(2),
                },
                duration_s: 3.0,
                last_lines: vec!["Traceback".into(), "ValueError: boom".into()],
                oom_line: None,
                gpu_util_mean_pct: None,
                gpu_mem_max_bytes: None,
                gpu_mem_total_bytes: None,
                data_wait_fraction: v.map(|v| 1.0 - v / 100.0),
                data_wait_source: v.map(|_| super::super::trial::WaitSource::StepProbe),
                job_cpu_mean_pct: Some(150.0),
                job_rss_max_bytes: None,
                recording: "r.ndjson".into(),
                gpu_error: None,
                overrides: None,
            },
        )
    }

    pub(crate) fn report(vals: &[(Option<f64>, Status)]) -> SweepReport {
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
    fn sweet_spot_is_the_cheapest_within_five_percent() {
        use Status::*;
        let rep = report(&[
            (Some(15.0), Steady),
            (Some(25.0), Steady),
            (Some(39.0), Steady),
            (Some(40.5), Steady),
            (None, Failed),
        ]);
        let sw = rep.sweet_spot.as_ref().unwrap();
        assert_eq!(sw.parameters["workers"], serde_json::json!(2));
        assert_eq!(sw.best_parameters["workers"], serde_json::json!(4));
        assert!(sw.reason.contains("within 5%"), "{}", sw.reason);
        assert!(
            sw.reason
                .contains("waits for data 85% of the time at workers=0, 61% at workers=2"),
            "{}",
            sw.reason
        );
        let t = text(&rep);
        assert!(t.contains("Sweet spot: workers=2"), "{t}");
        assert!(
            t.contains("failed (exit 1)") && t.contains("ValueError: boom"),
            "{t}"
        );
        assert!(t.contains("39.0 ± 0.78"), "{t}");
        let md = markdown(&rep);
        assert!(md.starts_with("| workers | steps/s"), "{md}");
        let c = csv(&rep);
        assert_eq!(c.lines().count(), 6);
        assert!(c.lines().nth(5).unwrap().starts_with("8,,"), "{c}");
        let svg = crate::tune::chart::svg(&rep).unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(
            svg.matches("<circle").count(),
            4 + 1,
            "4 points and the sweet spot"
        );
        assert!(svg.contains("sweet spot") && svg.contains("data wait %"));
        let json = serde_json::to_string(&rep).unwrap();
        let back: SweepReport = serde_json::from_str(&json).unwrap();
        assert_eq!(back.results.len(), 5);
    }

    #[test]
    fn overrides_in_the_table_and_a_sweep_they_never_reached() {
        use Status::*;
        let mut rep = report(&[(Some(10.0), Steady), (Some(10.2), Steady)]);
        for (r, w) in rep.results.iter_mut().zip([0, 1]) {
            r.overrides = Some(vec![crate::inject::Override {
                target: "DataLoader".into(),
                key: "num_workers".into(),
                value: w.into(),
                original: 0.into(),
                site: Some("train.py:42".into()),
                reason: None,
                count: 1,
            }]);
        }
        rep.check_overrides(true);
        assert!(rep.sweet_spot.is_some() && rep.overrides_never_applied.is_none());
        let t = text(&rep);
        assert!(t.lines().next().unwrap().ends_with("overridden"), "{t}");
        assert!(
            t.contains("DataLoader(num_workers=1) at train.py:42, was 0"),
            "{t}"
        );
        // Nothing reached the job: identical trials are not a result.
        for r in rep.results.iter_mut() {
            r.overrides = Some(vec![]);
            r.override_notes =
                vec!["--dataloader changed nothing: the job never imported torch".into()];
        }
        let mut kept = rep.clone();
        kept.check_overrides(false);
        assert!(
            kept.sweet_spot.is_some(),
            "a knob in the command still varies the trials"
        );
        rep.check_overrides(true);
        assert!(rep.sweet_spot.is_none());
        let t = text(&rep);
        assert!(t.contains("No sweet spot: the overrides never took effect (--dataloader changed nothing: the job never imported torch)"), "{t}");
        assert!(t.contains("nothing (see notes)"), "{t}");
        assert_eq!(
            t.matches("note: --dataloader changed nothing").count(),
            1,
            "once: {t}"
        );
        let md = markdown(&rep);
        assert!(
            md.contains("**No sweet spot:** the overrides never took effect"),
            "{md}"
        );
    }

    #[test]
    fn a_data_wait_from_the_stacks_is_marked_and_footnoted() {
        let mut rep = report(&[(Some(10.0), Status::Steady), (Some(30.0), Status::Steady)]);
        let plain = text(&rep);
        assert!(!plain.contains(STACKS_NOTE), "{plain}");
        assert!(plain.contains("90%") && !plain.contains("90%*"), "{plain}");
        rep.results[0].data_wait_source = Some(crate::tune::trial::WaitSource::PythonStacks);
        let t = text(&rep);
        assert!(t.contains("90%*"), "{t}");
        assert!(t.contains("70%") && !t.contains("70%*"), "{t}");
        assert!(t.contains(STACKS_NOTE), "{t}");
        let md = markdown(&rep);
        assert!(
            md.contains("90%*") && md.contains("\\* data wait estimated"),
            "{md}"
        );
        let j = serde_json::to_value(&rep.results[0]).unwrap();
        assert_eq!(j["data_wait_source"], "python_stacks");
    }

    #[test]
    fn last_value_with_data_wait_still_high_says_try_higher() {
        use Status::*;
        // data_wait = 1 - v/100: 40 steps/s at workers=8 still waits 60% of the time
        let rep = report(&[
            (Some(10.0), Steady),
            (Some(15.0), Steady),
            (Some(20.0), Steady),
            (Some(30.0), Steady),
            (Some(40.0), Steady),
        ]);
        let sw = rep.sweet_spot.as_ref().unwrap();
        assert_eq!(sw.parameters["workers"], serde_json::json!(8));
        assert_eq!(sw.caveats.len(), 1, "{:?}", sw.caveats);
        assert!(
            sw.caveats[0].contains("workers=8 is the last value tried")
                && sw.caveats[0].contains("60%")
                && sw.caveats[0].contains("try higher values of workers"),
            "{}",
            sw.caveats[0]
        );
        assert!(text(&rep).contains("try higher values"), "{}", text(&rep));
        // the same sweep with data wait gone: nothing to add
        let mut rep = report(&[(Some(10.0), Steady), (Some(97.0), Steady)]);
        rep.results[1].data_wait_fraction = Some(0.02);
        let knobs = vec![(
            "workers".to_string(),
            vec!["0".to_string(), "1".to_string()],
        )];
        let (sw, _) = sweet_spot(&rep.results, &knobs);
        assert!(sw.unwrap().caveats.is_empty());
    }

    #[test]
    fn unsettled_pick_is_flagged() {
        use Status::*;
        let mut rep = report(&[(Some(10.0), Steady), (Some(20.0), MaxTime)]);
        let t = rep.results[1].throughput.as_mut().unwrap();
        t.steady = false;
        rep.results[1].data_wait_fraction = Some(0.0);
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
        assert!(rep.results[1].unsettled() && !rep.results[0].unsettled());
    }

    #[test]
    fn no_rate_says_how_to_get_one() {
        use Status::*;
        let mut rep = report(&[(Some(10.0), Exited)]);
        rep.results[0].throughput = None;
        rep.sweet_spot = None;
        let t = text(&rep);
        assert!(
            t.contains("--rate-regex") && t.contains("tqdm") && t.contains("gpufeed_probe"),
            "{t}"
        );
    }

    #[test]
    fn fastest_alone_and_nothing_usable() {
        use Status::*;
        let rep = report(&[(Some(10.0), Steady), (Some(20.0), MaxTime)]);
        let sw = rep.sweet_spot.unwrap();
        assert_eq!(sw.parameters["workers"], serde_json::json!(1));
        assert!(sw.reason.contains("fastest"), "{}", sw.reason);
        let rep = report(&[(None, Failed), (Some(5.0), Failed)]);
        assert!(rep.sweet_spot.is_none());
        assert!(text(&rep).contains("No sweet spot"));
    }
}
