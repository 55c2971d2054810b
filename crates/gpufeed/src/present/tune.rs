//! Presenter for `gpufeed tune`: the terminal report ([`text`]) and, for `--html FILE`, the same
//! figures as one self-contained page ([`html`]; the patch text is handed in by the command,
//! which read it); its JSON is serde's.

use super::fmt::opt;
use super::html::{esc, page};
use crate::diagnose::verdict::VerdictId;
use crate::stats::Speedup;
use crate::tune::oom::oom_marker;
use crate::tune::report::{BatchChange, BeforeAfter, Stop, TuneReport};
use std::fmt::Write as _;

/// A whole percent, `-` when unknown.
fn pct(x: Option<f64>) -> String {
    opt(x, |v| format!("{v:.0}%"))
}

/// A gain with its interval: "2.44× (2.20–2.68)".
fn gain(g: Option<f64>, ci: Option<[f64; 2]>) -> String {
    match (g, ci) {
        (Some(g), Some([l, h])) => format!("{g:.2}× ({l:.2}–{h:.2})"),
        (Some(g), None) => format!("{g:.2}×"),
        _ => "-".into(),
    }
}

/// "2.9× faster (2.6–3.2)".
fn faster_words(s: &Speedup) -> String {
    let ci = s
        .ci95
        .map(|[l, h]| format!(" ({l:.2}–{h:.2})"))
        .unwrap_or_default();
    if s.value >= 1.0 {
        format!("{:.2}× faster{ci}", s.value)
    } else {
        format!("{:.2}× slower{ci}", 1.0 / s.value)
    }
}

fn stop_words(s: Stop) -> &'static str {
    match s {
        Stop::NothingToTune => "nothing to tune: the baseline shows no input stall, pageable copies or fp32 matmuls that a knob could fix",
        Stop::ComputeBound => "the job became compute-bound: the input keeps up",
        Stop::PlanDone => "every planned knob was tried",
        Stop::Budget => "the --budget was spent (best so far below)",
        Stop::Interrupted => "interrupted (best so far below)",
    }
}

fn before_after_text(o: &mut String, ba: &BeforeAfter) {
    let (b, a) = (&ba.before, &ba.after);
    let unit = b
        .unit
        .clone()
        .or_else(|| a.unit.clone())
        .unwrap_or_default();
    let _ = writeln!(o, "\nBefore → after (interleaved re-run):");
    let num = |x: Option<f64>| opt(x, super::fmt::num);
    let _ = writeln!(
        o,
        "  throughput   {} → {} {unit}",
        num(b.throughput),
        num(a.throughput)
    );
    let _ = writeln!(
        o,
        "  GPU busy     {} → {}",
        pct(b.gpu_util_mean_pct),
        pct(a.gpu_util_mean_pct)
    );
    let _ = writeln!(
        o,
        "  data wait    {} → {}",
        pct(b.data_wait_pct),
        pct(a.data_wait_pct)
    );
    let v = |x: &Option<VerdictId>| x.map_or("-", VerdictId::as_str);
    let _ = writeln!(o, "  verdict      {} → {}", v(&b.verdict), v(&a.verdict));
    if let Some(s) = &ba.speedup {
        let _ = writeln!(o, "  {}  ({})", faster_words(s), s.basis);
    }
}

fn batch_text(o: &mut String, b: &BatchChange) {
    let mem = match (b.largest_ran, b.first_oom) {
        (Some(l), Some(f)) => format!(" (largest that ran: {l}; {f} ran out of memory)"),
        (Some(l), None) => format!(" (largest tried: {l}, it ran)"),
        (None, Some(f)) => format!(" ({f} ran out of memory)"),
        (None, None) => String::new(),
    };
    match b.to {
        Some(t) => {
            let _ = writeln!(o, "\nBatch size: {} → {t}{mem}", b.from);
        }
        None => {
            let _ = writeln!(
                o,
                "\nBatch size: {} kept: no larger batch gained enough{mem}",
                b.from
            );
        }
    }
    if b.lr_plan.is_some() {
        let _ = writeln!(
            o,
            "  the learning rate changes with it: see the by-hand note under the patch"
        );
    }
}

/// The terminal report.
pub fn text(r: &TuneReport) -> String {
    super::fmt::terminal_safe(r, false, text_raw)
}

fn text_raw(r: &TuneReport) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "gpufeed tune: {}", r.command.join(" "));
    for s in &r.steps {
        let what = match (&s.knob, &s.value) {
            (Some(k), Some(v)) => format!("{}={v}", k.key()),
            _ => s.result.label.clone(),
        };
        let tp = s
            .result
            .figures
            .throughput
            .as_ref()
            .map(|t| format!("{} {}", super::fmt::num(t.value), t.unit))
            .unwrap_or_else(|| "no throughput".into());
        let mark = match (s.knob.is_some(), s.kept) {
            (false, _) => "",
            (true, true) => "  kept",
            (true, false)
                if s.result
                    .run
                    .last_lines
                    .iter()
                    .any(|l| oom_marker(l).is_some()) =>
            {
                "  out of memory"
            }
            (true, false) if !s.result.run.exit.ok() => "  failed",
            (true, false) if s.gain.is_none() => "  not compared",
            (true, false) => "  rejected",
        };
        let _ = writeln!(
            o,
            "  {what:<24} {tp:>16}  data wait {:>4}  {}{mark}",
            pct(s.result.figures.data_wait_fraction.map(|f| f * 100.0)),
            if s.knob.is_some() {
                gain(s.gain, s.gain_ci95)
            } else {
                String::new()
            }
        );
    }
    if let Some(stop) = r.stop {
        let _ = writeln!(o, "\nStopped: {}.", stop_words(stop));
    }
    for (title, list) in [
        ("\nSettings chosen:", &r.chosen),
        (
            "Tried and rejected (no gain whose interval clears the best):",
            &r.rejected,
        ),
    ] {
        if !list.is_empty() {
            let _ = writeln!(o, "{title}");
        }
        for c in list {
            let _ = writeln!(
                o,
                "  {}={}  {}",
                c.knob.key(),
                c.value,
                gain(c.gain, c.gain_ci95)
            );
        }
    }
    if let Some(b) = &r.batch {
        batch_text(&mut o, b);
    }
    if let Some(ba) = &r.before_after {
        before_after_text(&mut o, ba);
    }
    if let Some(p) = &r.patch {
        let _ = writeln!(
            o,
            "\nPatch: {p}  (git apply {p}; your files were not changed)"
        );
    }
    for n in &r.patch_notes {
        let _ = writeln!(o, "  by hand: {n}");
    }
    if let Some(l) = &r.run_line {
        let _ = writeln!(o, "Without the patch: {l}");
    }
    for n in &r.notes {
        let _ = writeln!(o, "note: {n}");
    }
    o
}

fn before_after(b: &mut String, r: &TuneReport) {
    if let Some(ba) = &r.before_after {
        let _ = write!(
            b,
            "<h2>Before → after</h2><table><tr><th></th><th>before</th><th>after</th></tr>"
        );
        let rows = [
            (
                "throughput",
                opt(ba.before.throughput, super::fmt::num),
                opt(ba.after.throughput, super::fmt::num),
            ),
            (
                "GPU busy %",
                opt(ba.before.gpu_util_mean_pct, |v| format!("{v:.0}")),
                opt(ba.after.gpu_util_mean_pct, |v| format!("{v:.0}")),
            ),
            (
                "data wait %",
                opt(ba.before.data_wait_pct, |v| format!("{v:.0}")),
                opt(ba.after.data_wait_pct, |v| format!("{v:.0}")),
            ),
            (
                "verdict",
                ba.before.verdict.map_or("", VerdictId::as_str).to_string(),
                ba.after.verdict.map_or("", VerdictId::as_str).to_string(),
            ),
        ];
        for (k, x, y) in rows {
            let _ = write!(
                b,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(k),
                esc(&x),
                esc(&y)
            );
        }
        b.push_str("</table>");
    }
}

fn trials(b: &mut String, r: &TuneReport) {
    b.push_str("<h2>Trials</h2><table><tr><th>setting</th><th>throughput</th><th>data wait</th><th>verdict</th><th>gain over the best</th><th></th></tr>");
    for s in &r.steps {
        let tp = s
            .result
            .figures
            .throughput
            .as_ref()
            .map(|t| format!("{} {}", super::fmt::num(t.value), t.unit))
            .unwrap_or_else(|| "-".into());
        let _ = write!(
            b,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&s.result.label),
            esc(&tp),
            opt(s.result.figures.data_wait_fraction, |f| format!(
                "{:.0}%",
                f * 100.0
            )),
            esc(s.verdict.map_or("-", VerdictId::as_str)),
            if s.knob.is_some() {
                esc(&gain(s.gain, s.gain_ci95))
            } else {
                String::new()
            },
            if s.knob.is_none() {
                ""
            } else if s.kept {
                "kept"
            } else {
                "rejected"
            }
        );
    }
    b.push_str("</table>");
}

/// The page: headline, before → after, every trial, the settings, the patch and the run line.
pub fn html(r: &TuneReport, patch: Option<&str>) -> String {
    let mut b = String::new();
    let _ = write!(
        b,
        "<h1>gpufeed tune</h1><p class=\"meta\"><code>{}</code></p>",
        esc(&r.command.join(" "))
    );
    let head = match r.before_after.as_ref().and_then(|x| x.speedup.as_ref()) {
        Some(s) => format!(
            "<div class=\"verdict ok\"><b>{}</b><br><span class=\"meta\">{}</span></div>",
            esc(&faster_words(s)),
            esc(&s.basis)
        ),
        None => "<div class=\"verdict unk\">No measured speed-up (see below).</div>".into(),
    };
    b.push_str(&head);
    before_after(&mut b, r);
    trials(&mut b, r);
    for (title, list) in [
        ("Settings chosen", &r.chosen),
        ("Tried and rejected", &r.rejected),
    ] {
        if !list.is_empty() {
            let _ = write!(b, "<h2>{title}</h2><ul>");
            for c in list {
                let _ = write!(
                    b,
                    "<li><code>{}={}</code> {}</li>",
                    c.knob.key(),
                    esc(&c.value),
                    esc(&gain(c.gain, c.gain_ci95))
                );
            }
            b.push_str("</ul>");
        }
    }
    if let Some(p) = patch {
        let _ = write!(b, "<h2>fix.patch</h2><div class=\"fix\">{}</div>", esc(p));
    }
    if let Some(l) = &r.run_line {
        let _ = write!(b, "<p>Without the patch: <code>{}</code></p>", esc(l));
    }
    let notes: Vec<&String> = r.patch_notes.iter().chain(&r.notes).collect();
    if !notes.is_empty() {
        b.push_str("<ul class=\"notes\">");
        for n in notes {
            let _ = write!(b, "<li>{}</li>", esc(n));
        }
        b.push_str("</ul>");
    }
    page("gpufeed tune", &b)
}
