//! Presenters for `gpufeed compare`: text, JSON, Markdown and HTML from a [`Comparison`].

use super::fmt::md_cell;
use crate::compare::{Better, Change, Comparison, SideVerdict};
use crate::stats::Speedup;
use crate::stats::SpeedupMetric;
use std::fmt::Write as _;

/// `1.84 ± 0.05 times faster`, `1.26 times slower`, `no change` (hyperfine's wording).
pub(crate) fn speedup_words(s: &Speedup) -> String {
    let pm = |half: f64| {
        if half > 0.0 {
            format!(" ± {half:.2}")
        } else {
            String::new()
        }
    };
    let half = s.ci95.map(|c| (c[1] - c[0]) / 2.0).unwrap_or(0.0);
    if (s.value - 1.0).abs() < 0.005 {
        return format!("about as fast as BEFORE (1.00{} times)", pm(half));
    }
    if s.value >= 1.0 {
        format!("{:.2}{} times faster than BEFORE", s.value, pm(half))
    } else {
        // slower: report the inverse ratio, its interval scaled the same way
        let inv = 1.0 / s.value;
        let half_inv = s
            .ci95
            .map(|c| (1.0 / c[0].max(1e-9) - 1.0 / c[1].max(1e-9)).abs() / 2.0)
            .unwrap_or(0.0);
        format!("{inv:.2}{} times slower than BEFORE", pm(half_inv))
    }
}

/// Whether the interval excludes 1 (the change is more than noise).
fn significant(s: &Speedup) -> Option<bool> {
    s.ci95.map(|c| c[0] > 1.0 || c[1] < 1.0)
}

fn num(x: Option<f64>) -> String {
    match x {
        None => "-".into(),
        Some(v) if v.fract() == 0.0 && v.abs() < 1e9 => format!("{v:.0}"),
        Some(v) => crate::units::num(v),
    }
}

fn delta(c: &Change) -> String {
    match c.delta_pct {
        None => "".into(),
        Some(d) => {
            let mark = match c.better {
                Better::Higher if d > 0.5 => " better",
                Better::Higher if d < -0.5 => " worse",
                Better::Lower if d < -0.5 => " better",
                Better::Lower if d > 0.5 => " worse",
                _ => "",
            };
            format!("{d:+.1}%{mark}")
        }
    }
}

fn headline(c: &Comparison) -> String {
    match &c.speedup {
        Some(s) if s.metric == SpeedupMetric::LoopEstimate => format!(
            "AFTER runs about {}, estimated from the training loop's phases (no step markers)",
            speedup_words(s)
        ),
        Some(s) => {
            let mut o = format!("AFTER ran {}", speedup_words(s));
            let _ = write!(o, ", {}", metric_words(&s.metric));
            if significant(s) == Some(false) {
                o.push_str(": within the noise (the 95% interval includes 1)");
            }
            o
        }
        None => "No speed-up could be computed (see the notes).".into(),
    }
}

fn metric_words(m: &SpeedupMetric) -> String {
    match m {
        SpeedupMetric::MeanStepTime => "by mean step time".into(),
        SpeedupMetric::JobDuration => "by the job's wall time".into(),
        SpeedupMetric::GpuBusyPct => "by GPU busy time, a proxy".into(),
        SpeedupMetric::LoopEstimate => "estimated from the training loop's phases".into(),
        SpeedupMetric::Throughput(u) if u == "steps/s" => {
            "by the step markers' rate (steps/s)".into()
        }
        SpeedupMetric::Throughput(u) => format!("by {u}"),
    }
}

fn verdict_line(c: &Comparison) -> String {
    let v = |x: &Option<SideVerdict>| x.as_ref().map_or("-", SideVerdict::as_str).to_string();
    let how = c.verdict.direction.map(|d| d.as_str().to_string());
    match (c.verdict.changed, how) {
        (true, Some(d)) => format!("{d}: {} -> {}", v(&c.verdict.before), v(&c.verdict.after)),
        (true, None) => format!("{} -> {}", v(&c.verdict.before), v(&c.verdict.after)),
        (false, Some(d)) => format!("{d}: {} (unchanged)", v(&c.verdict.before)),
        (false, None) => format!("{} (unchanged)", v(&c.verdict.before)),
    }
}

fn file_name(p: &str) -> String {
    std::path::Path::new(p)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| p.to_string())
}

/// Column names for the two inputs: their file names, with the folder when those are the same
/// (`sweep-a/sweep.json`, `sweep-b/sweep.json`).
fn column_names(c: &Comparison) -> (String, String) {
    let (b, a) = (file_name(&c.before.path), file_name(&c.after.path));
    if b != a {
        return (b, a);
    }
    let with_dir = |p: &str| {
        let path = std::path::Path::new(p);
        match path.parent().and_then(|d| d.file_name()) {
            Some(d) => format!("{}/{}", d.to_string_lossy(), file_name(p)),
            None => file_name(p),
        }
    };
    (with_dir(&c.before.path), with_dir(&c.after.path))
}

/// The terminal report.
pub fn text(c: &Comparison) -> String {
    super::fmt::terminal_safe(c, false, text_raw)
}

fn text_raw(c: &Comparison) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{}", headline(c));
    if let Some(s) = &c.speedup {
        let _ = writeln!(o, "  {}", s.basis);
    }
    let _ = writeln!(o, "verdict: {}", verdict_line(c));
    let _ = writeln!(o);
    let w0 = c
        .changes
        .iter()
        .map(|x| x.label.chars().count())
        .max()
        .unwrap_or(6)
        .max(6);
    let (bn, an) = column_names(c);
    let w1 = bn.chars().count().clamp(8, 24);
    let w2 = an.chars().count().clamp(8, 24);
    let clip = |s: &str, w: usize| -> String {
        if s.chars().count() > w {
            let t: String = s.chars().take(w - 1).collect();
            format!("{t}…")
        } else {
            s.to_string()
        }
    };
    let _ = writeln!(
        o,
        "{:<w0$}  {:>w1$}  {:>w2$}  change",
        c.kind.as_str(),
        clip(&bn, w1),
        clip(&an, w2)
    );
    for x in &c.changes {
        let _ = writeln!(
            o,
            "{:<w0$}  {:>w1$}  {:>w2$}  {}",
            x.label,
            num(x.before),
            num(x.after),
            delta(x)
        );
    }
    if let (Some(b), Some(a)) = (&c.before.verdict_summary, &c.after.verdict_summary) {
        let _ = writeln!(o, "\nbefore: {b}\nafter:  {a}");
    }
    if let Some(f) = &c.after.top_fix {
        let _ = writeln!(o, "next fix: {f}");
    }
    for n in &c.notes {
        let _ = writeln!(o, "note: {n}");
    }
    o
}

pub fn json(c: &Comparison) -> String {
    serde_json::to_string_pretty(c).unwrap_or_else(|_| "{}".into()) + "\n"
}

pub fn markdown(c: &Comparison) -> String {
    super::fmt::terminal_safe(c, false, markdown_raw)
}

fn markdown_raw(c: &Comparison) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "# gpufeed compare\n");
    let _ = writeln!(o, "**{}**\n", md_cell(&headline(c)));
    if let Some(s) = &c.speedup {
        let _ = writeln!(o, "{}\n", md_cell(&s.basis));
    }
    let _ = writeln!(o, "Verdict: `{}`\n", verdict_line(c));
    let _ = writeln!(
        o,
        "| {} | before (`{}`) | after (`{}`) | change |\n|---|---:|---:|---:|",
        c.kind.as_str(),
        md_cell(&column_names(c).0),
        md_cell(&column_names(c).1)
    );
    for x in &c.changes {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} |",
            md_cell(x.label.trim()),
            num(x.before),
            num(x.after),
            delta(x)
        );
    }
    let _ = writeln!(o);
    for n in &c.notes {
        let _ = writeln!(o, "> {}", md_cell(n));
    }
    o
}

pub fn html(c: &Comparison) -> String {
    use super::html::esc;
    let mut b = String::new();
    let _ = writeln!(b, "<h1>gpufeed compare</h1>");
    let _ = writeln!(
        b,
        "<p class=\"meta\">before: {} &middot; after: {}</p>",
        esc(&c.before.path),
        esc(&c.after.path)
    );
    let class = match c.speedup.as_ref().map(|s| s.value) {
        Some(v) if v >= 1.005 => "ok",
        Some(v) if v <= 0.995 => "bad",
        _ => "unk",
    };
    let _ = writeln!(
        b,
        "<div class=\"verdict {class}\">{}<br><span class=\"meta\">{}</span></div>",
        esc(&headline(c)),
        esc(&c
            .speedup
            .as_ref()
            .map(|s| s.basis.clone())
            .unwrap_or_default())
    );
    let _ = writeln!(b, "<p>Verdict: <b>{}</b></p>", esc(&verdict_line(c)));
    let _ = writeln!(
        b,
        "<h2>Side by side</h2><table><tr><th>{}</th><th>before</th><th>after</th><th>change</th></tr>",
        esc(c.kind.as_str())
    );
    for x in &c.changes {
        let _ = writeln!(
            b,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(x.label.trim()),
            num(x.before),
            num(x.after),
            esc(&delta(x))
        );
    }
    let _ = writeln!(b, "</table>");
    if let (Some(x), Some(y)) = (&c.before.verdict_summary, &c.after.verdict_summary) {
        let _ = writeln!(
            b,
            "<h2>Diagnosis</h2><p><b>before:</b> {}</p><p><b>after:</b> {}</p>",
            esc(x),
            esc(y)
        );
    }
    if let Some(f) = &c.after.top_fix {
        let _ = writeln!(b, "<div class=\"fix\">next fix: {}</div>", esc(f));
    }
    if !c.notes.is_empty() {
        let _ = writeln!(b, "<ul class=\"notes\">");
        for n in &c.notes {
            let _ = writeln!(b, "<li>{}</li>", esc(n));
        }
        let _ = writeln!(b, "</ul>");
    }
    super::html::page("gpufeed compare", &b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(value: f64, ci: Option<[f64; 2]>) -> Speedup {
        Speedup {
            value,
            metric: SpeedupMetric::MeanStepTime,
            ci95: ci,
            basis: String::new(),
        }
    }

    #[test]
    fn hyperfine_wording() {
        assert_eq!(
            speedup_words(&s(1.84, Some([1.79, 1.89]))),
            "1.84 ± 0.05 times faster than BEFORE"
        );
        assert_eq!(
            speedup_words(&s(1.26, None)),
            "1.26 times faster than BEFORE"
        );
        assert_eq!(
            speedup_words(&s(0.5, None)),
            "2.00 times slower than BEFORE"
        );
        assert!(speedup_words(&s(1.001, None)).starts_with("about as fast"));
    }

    #[test]
    fn noise_is_called_noise() {
        let c = Comparison {
            schema_version: 1,
            kind: crate::compare::InputKind::Trace,
            before: crate::compare::Side {
                path: "/a/before.json".into(),
                verdict: Some(SideVerdict::TopFinding(Some(
                    crate::finding::FindingId::InputBound,
                ))),
                verdict_summary: None,
                top_fix: None,
            },
            after: crate::compare::Side {
                path: "after.json".into(),
                verdict: Some(SideVerdict::TopFinding(None)),
                verdict_summary: None,
                top_fix: None,
            },
            speedup: Some(s(1.02, Some([0.97, 1.07]))),
            changes: vec![],
            verdict: crate::compare::VerdictChange {
                before: Some(SideVerdict::TopFinding(Some(
                    crate::finding::FindingId::InputBound,
                ))),
                after: Some(SideVerdict::TopFinding(None)),
                changed: true,
                direction: Some(crate::compare::Direction::Same),
            },
            notes: vec![],
        };
        let t = text(&c);
        assert!(t.contains("within the noise"), "{t}");
        assert!(t.contains("verdict: same: input_bound -> none"), "{t}");
        assert!(t.contains("before.json"), "{t}");
        assert!(html(&c).contains("<table>"));
        assert!(markdown(&c).contains("| trace | before (`before.json`)"));
    }
}
