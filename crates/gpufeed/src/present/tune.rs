//! `gpufeed tune --html FILE`: the tune report as one self-contained page (the text report's
//! figures in tables; the patch text is handed in by the command, which read it).

use super::fmt::num as fmt_num;
use super::html::{esc, page};
use crate::tune::report::{faster_words, TuneReport};
use std::fmt::Write as _;

fn gain(g: Option<f64>, ci: Option<[f64; 2]>) -> String {
    match (g, ci) {
        (Some(g), Some([l, h])) => format!("{g:.2}× ({l:.2}–{h:.2})"),
        (Some(g), None) => format!("{g:.2}×"),
        _ => "-".into(),
    }
}

fn opt(x: Option<f64>, f: impl Fn(f64) -> String) -> String {
    x.map(f).unwrap_or_else(|| "-".into())
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
                opt(ba.before.throughput, fmt_num),
                opt(ba.after.throughput, fmt_num),
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
                ba.before.verdict.clone().unwrap_or_default(),
                ba.after.verdict.clone().unwrap_or_default(),
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
            .throughput
            .as_ref()
            .map(|t| format!("{} {}", fmt_num(t.value), t.unit))
            .unwrap_or_else(|| "-".into());
        let _ = write!(
            b,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&s.result.label),
            esc(&tp),
            opt(s.result.data_wait_fraction, |f| format!(
                "{:.0}%",
                f * 100.0
            )),
            esc(s.verdict.as_deref().unwrap_or("-")),
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
