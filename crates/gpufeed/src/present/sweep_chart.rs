//! An SVG chart of a sweep: throughput (mean with its 95% CI) for each setting, and GPU
//! utilization (or, without a GPU, the data-wait fraction) on a second axis. Drawn with plotters'
//! SVG backend like the other charts (it escapes the text).

use super::fmt::num;
use crate::tune::sweep_report::{SweepReport, TrialResult};
use plotters::chart::DualCoordChartContext;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

const SIZE: (u32, u32) = (760, 420);
const FONT: &str = "sans-serif";
const BLUE: RGBColor = RGBColor(31, 119, 180);
const RED: RGBColor = RGBColor(214, 39, 40);
const GREEN: RGBColor = RGBColor(44, 160, 44);
const GREY: RGBColor = RGBColor(153, 153, 153);

/// A round tick step giving about `n` ticks up to `max`.
pub(crate) fn nice_step(max: f64, n: f64) -> f64 {
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

/// The chart, or `None` when no trial has a throughput (or drawing failed).
pub fn svg(rep: &SweepReport) -> Option<String> {
    let unit = rep
        .results
        .iter()
        .find_map(|r| r.figures.throughput.as_ref().map(|t| t.unit.clone()))?;
    draw(rep, &unit).ok()
}

/// A trial's label under the axis: the knob's value when there is one knob, else the label.
fn category(r: &TrialResult, one_knob: bool) -> String {
    if !one_knob {
        return r.label.clone();
    }
    r.parameters
        .values()
        .next()
        .map(|v| match v {
            serde_json::Value::String(s) => s.clone(),
            v => v.to_string(),
        })
        .unwrap_or_default()
}

/// GPU utilization per trial, or the data-wait percentage when no trial has utilization.
fn second_axis(rep: &SweepReport) -> (Vec<Option<f64>>, &'static str) {
    if rep
        .results
        .iter()
        .any(|r| r.figures.gpu_util_mean_pct.is_some())
    {
        (
            rep.results
                .iter()
                .map(|r| r.figures.gpu_util_mean_pct)
                .collect(),
            "GPU utilization %",
        )
    } else {
        (
            rep.results
                .iter()
                .map(|r| r.figures.data_wait_fraction.map(|f| f * 100.0))
                .collect(),
            "data wait %",
        )
    }
}

fn draw(rep: &SweepReport, unit: &str) -> Result<String, String> {
    let n = rep.results.len().max(1);
    let top_val = rep
        .results
        .iter()
        .filter_map(|r| {
            r.figures
                .throughput
                .as_ref()
                .map(|t| t.ci_high.unwrap_or(t.value).max(t.value))
        })
        .fold(0.0, f64::max);
    let step = nice_step(top_val, 5.0);
    let ymax = (top_val / step).ceil().max(1.0) * step;
    let (second, second_name) = second_axis(rep);
    let has_second = second.iter().any(Option::is_some);
    let knobs: Vec<&str> = rep.knobs.iter().map(|(k, _)| k.as_str()).collect();
    let labels: Vec<String> = rep
        .results
        .iter()
        .map(|r| category(r, knobs.len() == 1))
        .collect();
    let xs = -0.5f64..n as f64 - 0.5;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut chart = ChartBuilder::on(&root)
            .caption(format!("{unit} vs {}", knobs.join(", ")), (FONT, 15))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .right_y_label_area_size(if has_second { 60 } else { 10 })
            .build_cartesian_2d(xs.clone(), 0f64..ymax * 1.05)
            .map_err(|e| e.to_string())?
            .set_secondary_coord(xs, 0f64..100f64);
        let label_of = |x: &f64| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 {
                labels.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        };
        let y_fmt = |v: &f64| if *v == 0.0 { "0".into() } else { num(*v) };
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(2 * n + 1)
            .x_label_formatter(&label_of)
            .y_label_formatter(&y_fmt)
            .x_desc(knobs.join(", "))
            .y_desc(format!("{unit} (mean, 95% CI)"))
            .axis_desc_style((FONT, 12).into_font().color(&BLUE))
            .label_style((FONT, 12))
            .light_line_style(RGBColor(229, 229, 229))
            .draw()
            .map_err(|e| e.to_string())?;
        if has_second {
            chart
                .configure_secondary_axes()
                .y_labels(5)
                .y_label_formatter(&|v| format!("{v:.0}"))
                .y_desc(second_name)
                .axis_desc_style((FONT, 12).into_font().color(&RED))
                .label_style((FONT, 12).into_font().color(&RED))
                .draw()
                .map_err(|e| e.to_string())?;
        }
        throughput(&mut chart, rep, ymax)?;
        if has_second {
            second_series(&mut chart, &second)?;
        }
        sweet_spot(&mut chart, rep)?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

type Chart<'a, 'b> = DualCoordChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<RangedCoordf64, RangedCoordf64>,
    Cartesian2d<RangedCoordf64, RangedCoordf64>,
>;

/// Throughput line, CI whiskers and points; failed trials as a grey cross on the axis.
fn throughput(chart: &mut Chart, rep: &SweepReport, ymax: f64) -> Result<(), String> {
    let ok: Vec<(f64, f64)> = rep
        .results
        .iter()
        .enumerate()
        .filter(|(_, r)| r.run.exit.ok())
        .filter_map(|(i, r)| r.figures.throughput.as_ref().map(|t| (i as f64, t.value)))
        .collect();
    if ok.len() > 1 {
        chart
            .draw_series(LineSeries::new(ok.iter().copied(), BLUE.stroke_width(2)))
            .map_err(|e| e.to_string())?;
    }
    for (i, r) in rep.results.iter().enumerate() {
        let x = i as f64;
        match (&r.figures.throughput, r.run.exit.ok()) {
            (Some(t), true) => {
                if let (Some(lo), Some(hi)) = (t.ci_low, t.ci_high) {
                    let whisker = |y| PathElement::new(vec![(x - 0.06, y), (x + 0.06, y)], BLUE);
                    chart
                        .draw_series([
                            PathElement::new(vec![(x, lo), (x, hi)], BLUE),
                            whisker(lo),
                            whisker(hi),
                        ])
                        .map_err(|e| e.to_string())?;
                }
                chart
                    .draw_series([Circle::new((x, t.value), 4, BLUE.filled())])
                    .map_err(|e| e.to_string())?;
            }
            _ => {
                chart
                    .draw_series([Cross::new((x, ymax * 0.02), 5, GREY.stroke_width(2))])
                    .map_err(|e| e.to_string())?;
            }
        }
    }
    Ok(())
}

/// GPU utilization or data wait on the secondary axis: a dashed line with square markers.
fn second_series(chart: &mut Chart, second: &[Option<f64>]) -> Result<(), String> {
    let pts: Vec<(f64, f64)> = second
        .iter()
        .enumerate()
        .filter_map(|(i, v)| v.map(|v| (i as f64, v.clamp(0.0, 100.0))))
        .collect();
    chart
        .draw_secondary_series(DashedLineSeries::new(
            pts.clone(),
            5,
            4,
            RED.stroke_width(1),
        ))
        .map_err(|e| e.to_string())?;
    chart
        .draw_secondary_series(pts.iter().map(|&(x, y)| {
            EmptyElement::at((x, y)) + Rectangle::new([(-3, -3), (3, 3)], RED.filled())
        }))
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// The sweet spot, ringed and named.
fn sweet_spot(chart: &mut Chart, rep: &SweepReport) -> Result<(), String> {
    let Some(sw) = &rep.sweet_spot else {
        return Ok(());
    };
    let Some(i) = rep
        .results
        .iter()
        .position(|r| r.parameters == sw.parameters)
    else {
        return Ok(());
    };
    chart
        .draw_series([EmptyElement::at((i as f64, sw.throughput))
            + Circle::new((0, 0), 9, GREEN.stroke_width(2))
            + Text::new(
                "sweet spot",
                (-30, -26),
                (FONT, 12).into_font().color(&GREEN),
            )])
        .map_err(|e| e.to_string())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks() {
        assert_eq!(nice_step(38.0, 5.0), 10.0);
        assert_eq!(nice_step(0.9, 5.0), 0.2);
        assert_eq!(nice_step(0.0, 5.0), 1.0);
    }
}
