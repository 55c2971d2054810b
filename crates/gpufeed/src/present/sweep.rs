//! Presenters for `gpufeed sweep`: the table of trials as text, Markdown and CSV, the sweet spot
//! and its notes, from a [`SweepReport`]; its JSON is serde's, its chart `present::sweep_chart`.

use super::fmt::{csv_cell, md_cell, num, opt};
use crate::tune::sweep_report::{SweepReport, TrialResult, NO_RATE_HELP};
use crate::tune::trial::TrialStatus;
use std::collections::BTreeMap;
use std::fmt::Write as _;

fn status_word(r: &TrialResult) -> String {
    match (r.run.exit.status, r.run.exit.code, r.run.exit.signal) {
        (TrialStatus::Failed, Some(c), _) => format!("failed (exit {c})"),
        (TrialStatus::Failed, _, Some(s)) => format!("failed (signal {s})"),
        (st, _, _) => st.as_str().into(),
    }
}

/// `DataLoader(num_workers=8) at train.py:42, was 0`, one per override, or why there is none.
pub(crate) fn overridden_cell(r: &TrialResult) -> String {
    match &r.run.overrides {
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
pub fn notes_for_page(rep: &SweepReport) -> Vec<String> {
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
    for n in rep.results.iter().flat_map(|r| &r.run.override_notes) {
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
        .any(|r| r.figures.data_wait_source == Some(crate::finding::WaitSource::PythonStacks))
        .then_some(STACKS_NOTE)
}

/// Rows of cells: header first.
fn rows(rep: &SweepReport) -> Vec<Vec<String>> {
    let unit = rep
        .results
        .iter()
        .find_map(|r| r.figures.throughput.as_ref().map(|t| t.unit.clone()))
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
    let injected = rep.results.iter().any(|r| r.run.overrides.is_some());
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
        let tp = match &r.figures.throughput {
            Some(t) => {
                let hw = match (t.ci_low, t.ci_high) {
                    (Some(l), Some(h)) => format!(" ± {}", num((h - l) / 2.0)),
                    _ => String::new(),
                };
                let proxy = if t.source == crate::tune::trial::RateSource::GpuBusyProxy {
                    " (GPU busy proxy)"
                } else {
                    ""
                };
                format!("{}{hw}{proxy}", num(t.value))
            }
            None => "-".into(),
        };
        row.push(tp);
        row.push(opt(
            r.figures.throughput.as_ref().and_then(|t| t.samples_per_s),
            num,
        ));
        row.push(opt(r.figures.gpu_util_mean_pct, |x| format!("{x:.0}%")));
        let mark = if r.figures.data_wait_source == Some(crate::finding::WaitSource::PythonStacks) {
            STACKS_MARK
        } else {
            ""
        };
        row.push(opt(r.figures.data_wait_fraction, |x| {
            format!("{:.0}%{mark}", x * 100.0)
        }));
        row.push(opt(r.figures.job_cpu_mean_pct, |x| format!("{x:.0}%")));
        row.push(format!("{:.1}s", r.run.duration_s));
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
    super::fmt::terminal_safe(rep, false, text_raw)
}

fn text_raw(rep: &SweepReport) -> String {
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
        r.figures
            .throughput
            .as_ref()
            .filter(|t| t.source == crate::tune::trial::RateSource::GpuBusyProxy)
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
    for r in rep.results.iter().filter(|r| !r.run.last_lines.is_empty()) {
        let _ = writeln!(s, "\nTrial {} {}; last output:", r.label, status_word(r));
        for l in &r.run.last_lines {
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
        None if rep.results.iter().any(|r| r.run.exit.ok()) => {
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
    super::fmt::terminal_safe(rep, false, markdown_raw)
}

fn markdown_raw(rep: &SweepReport) -> String {
    let rows = rows(rep);
    let mut s = String::new();
    for (i, row) in rows.iter().enumerate() {
        let cells: Vec<String> = row.iter().map(|c| md_cell(c)).collect();
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
        let t = r.figures.throughput.as_ref();
        row.push(f(t.map(|t| t.value)));
        row.push(t.map(|t| csv_cell(&t.unit)).unwrap_or_default());
        row.push(f(t.and_then(|t| t.ci_low)));
        row.push(f(t.and_then(|t| t.ci_high)));
        row.push(t.map(|t| t.source.as_str().to_string()).unwrap_or_default());
        row.push(f(t.and_then(|t| t.samples_per_s)));
        row.push(f(r.figures.gpu_util_mean_pct));
        row.push(u(r.figures.gpu_mem_max_bytes));
        row.push(f(r.figures.data_wait_fraction));
        row.push(f(r.figures.job_cpu_mean_pct));
        row.push(u(r.figures.job_rss_max_bytes));
        row.push(format!("{:.3}", r.run.duration_s));
        row.push(r.run.exit.status.as_str().to_string());
        row.push(r.run.exit.code.map(|c| c.to_string()).unwrap_or_default());
        row.push(r.run.exit.signal.map(|c| c.to_string()).unwrap_or_default());
        s.push_str(&row.join(","));
        s.push('\n');
    }
    s
}

/// The sweep as an HTML page: one point per trial, in the order tried.
pub fn html(rep: &SweepReport) -> Result<String, super::html::HtmlError> {
    let label = |p: &std::collections::BTreeMap<String, serde_json::Value>| {
        p.iter()
            .map(|(k, v)| match v {
                serde_json::Value::String(s) => format!("{k}={s}"),
                v => format!("{k}={v}"),
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    let points: Vec<super::html::SweepPoint> = rep
        .results
        .iter()
        .map(|r| super::html::SweepPoint {
            label: label(&r.parameters),
            throughput: r.figures.throughput.as_ref().map(|t| t.value),
            gpu_util_mean_pct: r.figures.gpu_util_mean_pct,
            data_wait_fraction: r.figures.data_wait_fraction,
            failed: r.figures.throughput.is_none(),
            overridden: r.run.overrides.is_some().then(|| overridden_cell(r)),
        })
        .collect();
    let unit = rep
        .results
        .iter()
        .find_map(|r| r.figures.throughput.as_ref().map(|t| t.unit.clone()))
        .unwrap_or_default();
    let spot = rep
        .sweet_spot
        .as_ref()
        .map(|s| (label(&s.parameters), s.reason.clone()));
    let knob = rep
        .knobs
        .iter()
        .map(|(k, _)| k.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    super::html::sweep_page(
        &rep.command.join(" "),
        &knob,
        &unit,
        &points,
        spot.as_ref().map(|(l, r)| (l.as_str(), r.as_str())),
        &notes_for_page(rep),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tune::sweep_report::sweet_spot;
    use crate::tune::sweep_report::tests::report;
    use crate::tune::trial::TrialStatus;

    #[test]
    fn sweet_spot_is_the_cheapest_within_five_percent() {
        use TrialStatus::*;
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
        let svg = crate::present::sweep_chart::svg(&rep).unwrap();
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
        use TrialStatus::*;
        let mut rep = report(&[(Some(10.0), Steady), (Some(10.2), Steady)]);
        for (r, w) in rep.results.iter_mut().zip([0, 1]) {
            r.run.overrides = Some(vec![crate::sample::event::Override {
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
            r.run.overrides = Some(vec![]);
            r.run.override_notes =
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
        let mut rep = report(&[
            (Some(10.0), TrialStatus::Steady),
            (Some(30.0), TrialStatus::Steady),
        ]);
        let plain = text(&rep);
        assert!(!plain.contains(STACKS_NOTE), "{plain}");
        assert!(plain.contains("90%") && !plain.contains("90%*"), "{plain}");
        rep.results[0].figures.data_wait_source = Some(crate::finding::WaitSource::PythonStacks);
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
        use TrialStatus::*;
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
        rep.results[1].figures.data_wait_fraction = Some(0.02);
        let knobs = vec![(
            "workers".to_string(),
            vec!["0".to_string(), "1".to_string()],
        )];
        let (sw, _) = sweet_spot(&rep.results, &knobs);
        assert!(sw.unwrap().caveats.is_empty());
    }

    #[test]
    fn no_rate_says_how_to_get_one() {
        use TrialStatus::*;
        let mut rep = report(&[(Some(10.0), Exited)]);
        rep.results[0].figures.throughput = None;
        rep.sweet_spot = None;
        let t = text(&rep);
        assert!(
            t.contains("--rate-regex") && t.contains("tqdm") && t.contains("gpufeed_probe"),
            "{t}"
        );
    }

    #[test]
    fn fastest_alone_and_nothing_usable() {
        use TrialStatus::*;
        let rep = report(&[(Some(10.0), Steady), (Some(20.0), MaxTime)]);
        let sw = rep.sweet_spot.unwrap();
        assert_eq!(sw.parameters["workers"], serde_json::json!(1));
        assert!(sw.reason.contains("fastest"), "{}", sw.reason);
        let rep = report(&[(None, Failed), (Some(5.0), Failed)]);
        assert!(rep.sweet_spot.is_none());
        assert!(text(&rep).contains("No sweet spot"));
    }
}
