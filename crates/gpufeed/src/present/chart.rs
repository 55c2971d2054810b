//! Charts as inline SVG (plotters' SVG backend, no font files: text is SVG `<text>` that the
//! browser lays out with its own sans-serif font), plus the fixed-memory time buckets the charts
//! are fed from.

use plotters::prelude::*;

#[derive(Debug, thiserror::Error)]
#[error("drawing a chart failed: {0}")]
pub struct ChartError(String);

fn err<E: std::fmt::Display>(e: E) -> ChartError {
    ChartError(e.to_string())
}

/// Means of a value over time in at most [`Buckets::MAX`] buckets; the bucket width doubles (and
/// pairs merge) as time grows, so memory stays fixed however long the recording.
#[derive(Debug, Clone)]
pub(crate) struct Buckets {
    width_s: f64,
    sums: Vec<f64>,
    counts: Vec<u32>,
}

impl Default for Buckets {
    fn default() -> Self {
        Buckets {
            width_s: 0.25,
            sums: Vec::new(),
            counts: Vec::new(),
        }
    }
}

impl Buckets {
    pub(crate) const MAX: usize = 512;

    pub(crate) fn push(&mut self, t_s: f64, v: f64) {
        if !t_s.is_finite() || !v.is_finite() || t_s < 0.0 {
            return;
        }
        let mut i = (t_s / self.width_s) as usize;
        while i >= Self::MAX {
            let n = self.sums.len().div_ceil(2);
            for k in 0..n {
                let (a, b) = (2 * k, (2 * k + 1).min(self.sums.len() - 1));
                let (s, c) = if a == b {
                    (self.sums[a], self.counts[a])
                } else {
                    (self.sums[a] + self.sums[b], self.counts[a] + self.counts[b])
                };
                self.sums[k] = s;
                self.counts[k] = c;
            }
            self.sums.truncate(n);
            self.counts.truncate(n);
            self.width_s *= 2.0;
            i = (t_s / self.width_s) as usize;
        }
        if self.sums.len() <= i {
            self.sums.resize(i + 1, 0.0);
            self.counts.resize(i + 1, 0);
        }
        self.sums[i] += v;
        self.counts[i] += 1;
    }

    pub(crate) fn width_s(&self) -> f64 {
        self.width_s
    }

    /// `(bucket start s, mean)` for buckets that got a value.
    pub(crate) fn points(&self) -> Vec<(f64, f64)> {
        self.sums
            .iter()
            .zip(&self.counts)
            .enumerate()
            .filter(|(_, (_, c))| **c > 0)
            .map(|(i, (s, c))| (i as f64 * self.width_s, s / *c as f64))
            .collect()
    }

    pub(crate) fn end_s(&self) -> f64 {
        self.sums.len() as f64 * self.width_s
    }
}

/// Colours for series, readable on white and in grey scale order.
pub(crate) const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

const FONT: &str = "sans-serif";

/// A line chart of named series over time, on the time axis `0..x_max` (seconds, or the data's
/// own without one), so that charts of one recording line up.
pub(crate) fn lines_on(
    title: &str,
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
    y_max: Option<f64>,
    x_max: Option<f64>,
    size: (u32, u32),
) -> Result<String, ChartError> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let x_max = x_max.filter(|x| *x > 0.0).unwrap_or_else(|| {
            series
                .iter()
                .flat_map(|(_, p)| p.iter().map(|x| x.0))
                .fold(1.0f64, f64::max)
        });
        let y_top = y_max.unwrap_or_else(|| {
            series
                .iter()
                .flat_map(|(_, p)| p.iter().map(|x| x.1))
                .fold(1.0f64, f64::max)
                * 1.1
        });
        let mut chart = ChartBuilder::on(&root)
            .caption(title, (FONT, 16))
            .margin(8)
            .x_label_area_size(32)
            .y_label_area_size(64)
            .build_cartesian_2d(0f64..x_max, 0f64..y_top)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("seconds")
            .y_desc(y_desc)
            .label_style((FONT, 12))
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(err)?;
        for (i, (name, pts)) in series.iter().enumerate() {
            let c = PALETTE[i % PALETTE.len()];
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
                .map_err(err)?
                .label(name.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                });
        }
        if series.len() > 1 {
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .label_font((FONT, 12))
                .draw()
                .map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

fn heat(v: f64) -> RGBColor {
    // White (idle) through amber to dark red (saturated).
    let x = (v / 100.0).clamp(0.0, 1.0);
    let lerp = |a: f64, b: f64, t: f64| (a + (b - a) * t).round() as u8;
    if x < 0.5 {
        let t = x / 0.5;
        RGBColor(
            lerp(255.0, 253.0, t),
            lerp(255.0, 174.0, t),
            lerp(255.0, 97.0, t),
        )
    } else {
        let t = (x - 0.5) / 0.5;
        RGBColor(
            lerp(253.0, 165.0, t),
            lerp(174.0, 0.0, t),
            lerp(97.0, 38.0, t),
        )
    }
}

/// The heat colour of a busy percentage as CSS `rgb(...)`, for a colour scale beside the chart.
pub(crate) fn heat_css(v: f64) -> String {
    let c = heat(v);
    format!("rgb({},{},{})", c.0, c.1, c.2)
}

/// A heat strip: one row per core (labelled `cpu0`, `cpu1`, ...), time across (on the axis
/// `0..x_max`, as [`lines_on`]), colour = busy percent.
pub(crate) fn heat_strip_on(
    title: &str,
    rows: &[Buckets],
    x_max: Option<f64>,
    size: (u32, u32),
) -> Result<String, ChartError> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let x_max = x_max
            .filter(|x| *x > 0.0)
            .unwrap_or_else(|| rows.iter().map(Buckets::end_s).fold(1.0f64, f64::max));
        let n = rows.len().max(1) as f64;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, (FONT, 16))
            .margin(8)
            .x_label_area_size(32)
            .y_label_area_size(64)
            // rows centred on whole numbers, so each core's label sits beside its row
            .build_cartesian_2d(0f64..x_max, -0.5f64..n - 0.5)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc("seconds")
            .y_desc("core")
            // twice the rows: the whole numbers (row centres) are among the ticks
            .y_labels((rows.len() * 2 + 1).min(65))
            .y_label_formatter(&|y| {
                if y.fract().abs() < 1e-9 && *y >= 0.0 && (*y as usize) < rows.len() {
                    format!("cpu{}", *y as usize)
                } else {
                    String::new()
                }
            })
            .label_style((FONT, 12))
            .draw()
            .map_err(err)?;
        for (core, b) in rows.iter().enumerate() {
            let w = b.width_s();
            chart
                .draw_series(b.points().into_iter().map(|(t, v)| {
                    Rectangle::new(
                        [(t, core as f64 - 0.5), (t + w, core as f64 + 0.5)],
                        heat(v).filled(),
                    )
                }))
                .map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// Stacked bars: one bar per x label (steps), one colour per category.
pub(crate) fn stacked_bars(
    title: &str,
    y_desc: &str,
    categories: &[&str],
    bars: &[(String, Vec<f64>)],
    size: (u32, u32),
) -> Result<String, ChartError> {
    stacked_bars_x(title, "step", y_desc, categories, bars, size)
}

/// [`stacked_bars`] with the x axis named `x_desc` (a sweep's knob).
pub(crate) fn stacked_bars_x(
    title: &str,
    x_desc: &str,
    y_desc: &str,
    categories: &[&str],
    bars: &[(String, Vec<f64>)],
    size: (u32, u32),
) -> Result<String, ChartError> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        // Headroom for the legend in the upper right.
        let y_max = bars
            .iter()
            .map(|(_, v)| v.iter().sum::<f64>())
            .fold(1e-9f64, f64::max)
            * 1.6;
        let n = bars.len().max(1);
        let labels: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
        let mut chart = ChartBuilder::on(&root)
            .caption(title, (FONT, 16))
            .margin(8)
            .x_label_area_size(32)
            .y_label_area_size(64)
            .build_cartesian_2d(-0.5f64..n as f64 - 0.5, 0f64..y_max)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_desc(x_desc)
            .y_desc(y_desc)
            .x_labels(n.min(20))
            .x_label_formatter(&|x| {
                if (x - x.round()).abs() > 1e-6 || *x < 0.0 {
                    return String::new();
                }
                labels.get(x.round() as usize).cloned().unwrap_or_default()
            })
            .label_style((FONT, 12))
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(err)?;
        for (ci, cat) in categories.iter().enumerate() {
            if bars
                .iter()
                .all(|(_, v)| v.get(ci).copied().unwrap_or(0.0) <= 0.0)
            {
                continue;
            }
            let c = PALETTE[ci % PALETTE.len()];
            chart
                .draw_series(bars.iter().enumerate().map(|(i, (_, v))| {
                    let base: f64 = v[..ci].iter().sum();
                    let top = base + v.get(ci).copied().unwrap_or(0.0);
                    Rectangle::new([(i as f64 - 0.4, base), (i as f64 + 0.4, top)], c.filled())
                }))
                .map_err(err)?
                .label(cat.to_string())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .label_font((FONT, 12))
            .draw()
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_stay_bounded_and_keep_means() {
        let mut b = Buckets::default();
        for i in 0..100_000 {
            b.push(i as f64 * 0.1, if i % 2 == 0 { 0.0 } else { 100.0 });
        }
        let p = b.points();
        assert!(p.len() <= Buckets::MAX, "{}", p.len());
        assert!(p.iter().all(|(_, v)| (*v - 50.0).abs() < 1.0));
        assert!(b.end_s() >= 9_999.0);
    }

    #[test]
    fn charts_are_svg_without_external_references() {
        let s = lines_on(
            "GPU utilization",
            "%",
            &[("GPU 0".into(), vec![(0.0, 10.0), (1.0, 90.0)])],
            Some(100.0),
            None,
            (600, 200),
        )
        .unwrap();
        assert!(s.starts_with("<svg"));
        assert!(s.contains("GPU utilization"));
        assert!(!s.contains("http://") || !s.contains("href=\"http"));
        let mut b = Buckets::default();
        b.push(0.0, 50.0);
        assert!(heat_strip_on("cpu", &[b], None, (600, 100))
            .unwrap()
            .contains("<rect"));
        let sb = stacked_bars(
            "steps",
            "ms",
            &["a", "b"],
            &[("1".into(), vec![1.0, 2.0])],
            (600, 200),
        )
        .unwrap();
        assert!(sb.contains("<rect"));
    }
}
