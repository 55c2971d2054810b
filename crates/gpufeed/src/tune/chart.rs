//! An SVG chart of a sweep: throughput (mean with its 95% CI) for each setting, and GPU
//! utilization (or, without a GPU, the data-wait fraction) on a second axis. Hand-written SVG: no
//! plotting dependency for one small chart.

use super::sweep::{fmt_num, SweepReport};
use std::fmt::Write as _;

const W: f64 = 760.0;
const H: f64 = 420.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 80.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 90.0;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A round tick step giving about `n` ticks up to `max`.
pub fn nice_step(max: f64, n: f64) -> f64 {
    if max.is_nan() || max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let raw = max / n;
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let m = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    m * mag
}

/// The chart, or `None` when no trial has a throughput.
pub fn svg(rep: &SweepReport) -> Option<String> {
    let n = rep.results.len();
    let unit = rep
        .results
        .iter()
        .find_map(|r| r.throughput.as_ref().map(|t| t.unit.clone()))?;
    let top_val = rep
        .results
        .iter()
        .filter_map(|r| {
            r.throughput
                .as_ref()
                .map(|t| t.ci_high.unwrap_or(t.value).max(t.value))
        })
        .fold(0.0, f64::max);
    let step = nice_step(top_val, 5.0);
    let ymax = (top_val / step).ceil().max(1.0) * step;
    let pw = W - LEFT - RIGHT;
    let ph = H - TOP - BOTTOM;
    let x = |i: usize| LEFT + pw * (i as f64 + 0.5) / n as f64;
    let y = |v: f64| TOP + ph * (1.0 - (v / ymax).clamp(0.0, 1.05));
    let yp = |pct: f64| TOP + ph * (1.0 - (pct / 100.0).clamp(0.0, 1.0));
    let has_util = rep.results.iter().any(|r| r.gpu_util_mean_pct.is_some());
    let (second, second_name): (Vec<Option<f64>>, &str) = if has_util {
        (
            rep.results.iter().map(|r| r.gpu_util_mean_pct).collect(),
            "GPU utilization %",
        )
    } else {
        (
            rep.results
                .iter()
                .map(|r| r.data_wait_fraction.map(|f| f * 100.0))
                .collect(),
            "data wait %",
        )
    };
    let has_second = second.iter().any(|v| v.is_some());
    let knob_names: Vec<&str> = rep.knobs.iter().map(|(k, _)| k.as_str()).collect();

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="24" text-anchor="middle" font-size="15">{} vs {}</text>"#,
        W / 2.0,
        esc(&unit),
        esc(&knob_names.join(", "))
    );
    // Axes and grid.
    let mut v = 0.0;
    while v <= ymax + step * 0.01 {
        let yy = y(v);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" x2="{}" y1="{yy:.1}" y2="{yy:.1}" stroke="#e5e5e5"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            W - RIGHT,
            LEFT - 6.0,
            yy + 4.0,
            if v == 0.0 {
                "0".to_string()
            } else {
                fmt_num(v)
            }
        );
        v += step;
    }
    let _ = writeln!(
        s,
        r##"<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{}" stroke="#333"/><line x1="{LEFT}" x2="{}" y1="{}" y2="{}" stroke="#333"/>"##,
        TOP + ph,
        W - RIGHT,
        TOP + ph,
        TOP + ph
    );
    let _ = writeln!(
        s,
        r##"<text transform="translate(18,{}) rotate(-90)" text-anchor="middle" fill="#1f77b4">{} (mean, 95% CI)</text>"##,
        TOP + ph / 2.0,
        esc(&unit)
    );
    if has_second {
        for pct in [0.0, 25.0, 50.0, 75.0, 100.0] {
            let _ = writeln!(
                s,
                r##"<text x="{}" y="{:.1}" fill="#d62728">{pct:.0}</text>"##,
                W - RIGHT + 6.0,
                yp(pct) + 4.0
            );
        }
        let _ = writeln!(
            s,
            r##"<text transform="translate({},{}) rotate(90)" text-anchor="middle" fill="#d62728">{second_name}</text>"##,
            W - 18.0,
            TOP + ph / 2.0
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        LEFT + pw / 2.0,
        H - 12.0,
        esc(&knob_names.join(", "))
    );
    // Category labels.
    for (i, r) in rep.results.iter().enumerate() {
        let label = if knob_names.len() == 1 {
            r.parameters
                .values()
                .next()
                .map(|v| match v {
                    serde_json::Value::String(s) => s.clone(),
                    v => v.to_string(),
                })
                .unwrap_or_default()
        } else {
            r.label.clone()
        };
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end" transform="rotate(-30 {:.1} {:.1})">{}</text>"#,
            x(i) + 4.0,
            TOP + ph + 18.0,
            x(i) + 4.0,
            TOP + ph + 18.0,
            esc(&label)
        );
    }
    // Throughput line, CI whiskers, points; failed trials as a cross on the axis.
    let pts: Vec<(usize, f64)> = rep
        .results
        .iter()
        .enumerate()
        .filter(|(_, r)| r.exit.ok())
        .filter_map(|(i, r)| r.throughput.as_ref().map(|t| (i, t.value)))
        .collect();
    if pts.len() > 1 {
        let path: Vec<String> = pts
            .iter()
            .map(|(i, v)| format!("{:.1},{:.1}", x(*i), y(*v)))
            .collect();
        let _ = writeln!(
            s,
            r##"<polyline points="{}" fill="none" stroke="#1f77b4" stroke-width="2"/>"##,
            path.join(" ")
        );
    }
    for (i, r) in rep.results.iter().enumerate() {
        match (&r.throughput, r.exit.ok()) {
            (Some(t), true) => {
                if let (Some(lo), Some(hi)) = (t.ci_low, t.ci_high) {
                    let _ = writeln!(
                        s,
                        r##"<line x1="{0:.1}" x2="{0:.1}" y1="{1:.1}" y2="{2:.1}" stroke="#1f77b4"/><line x1="{3:.1}" x2="{4:.1}" y1="{1:.1}" y2="{1:.1}" stroke="#1f77b4"/><line x1="{3:.1}" x2="{4:.1}" y1="{2:.1}" y2="{2:.1}" stroke="#1f77b4"/>"##,
                        x(i),
                        y(lo),
                        y(hi),
                        x(i) - 5.0,
                        x(i) + 5.0
                    );
                }
                let _ = writeln!(
                    s,
                    r##"<circle cx="{:.1}" cy="{:.1}" r="4" fill="#1f77b4"><title>{}: {} {}</title></circle>"##,
                    x(i),
                    y(t.value),
                    esc(&r.label),
                    fmt_num(t.value),
                    esc(&t.unit)
                );
            }
            _ => {
                let (cx, cy) = (x(i), TOP + ph - 8.0);
                let _ = writeln!(
                    s,
                    r##"<path d="M{} {} L{} {} M{} {} L{} {}" stroke="#999" stroke-width="2"><title>{}: no throughput</title></path>"##,
                    cx - 5.0,
                    cy - 5.0,
                    cx + 5.0,
                    cy + 5.0,
                    cx - 5.0,
                    cy + 5.0,
                    cx + 5.0,
                    cy - 5.0,
                    esc(&r.label)
                );
            }
        }
    }
    if has_second {
        let sp: Vec<String> = second
            .iter()
            .enumerate()
            .filter_map(|(i, v)| v.map(|v| format!("{:.1},{:.1}", x(i), yp(v))))
            .collect();
        let _ = writeln!(
            s,
            r##"<polyline points="{}" fill="none" stroke="#d62728" stroke-width="1.5" stroke-dasharray="5 4"/>"##,
            sp.join(" ")
        );
        for (i, v) in second.iter().enumerate() {
            if let Some(v) = v {
                let _ = writeln!(
                    s,
                    r##"<rect x="{:.1}" y="{:.1}" width="6" height="6" fill="#d62728"/>"##,
                    x(i) - 3.0,
                    yp(*v) - 3.0
                );
            }
        }
    }
    if let Some(sw) = &rep.sweet_spot {
        if let Some(i) = rep
            .results
            .iter()
            .position(|r| r.parameters == sw.parameters)
        {
            let _ = writeln!(
                s,
                r##"<circle cx="{:.1}" cy="{:.1}" r="9" fill="none" stroke="#2ca02c" stroke-width="2"/><text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#2ca02c">sweet spot</text>"##,
                x(i),
                y(sw.throughput),
                x(i),
                y(sw.throughput) - 14.0
            );
        }
    }
    s.push_str("</svg>\n");
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks() {
        assert_eq!(nice_step(38.0, 5.0), 10.0);
        assert_eq!(nice_step(0.9, 5.0), 0.2);
        assert_eq!(nice_step(0.0, 5.0), 1.0);
        assert_eq!(esc("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
    }
}
