//! Clock slowdowns: power cap, thermal, hardware slowdown, power brake (never the GpuIdle bit).

use super::{r2, r3};
use crate::diagnose::evidence::Evidence;
use crate::finding::{Finding, FindingId, Item, Severity};

/// Share of observed time with slowing reasons from which a finding is raised.
pub(crate) const THROTTLED_FRACTION: f64 = 0.05;

/// `throttled`: a GPU spent a noticeable share of the run with its clocks held down.
pub(crate) fn throttled(e: &Evidence) -> Option<Finding> {
    let g = e
        .gpus
        .iter()
        .filter(|g| {
            g.throttle
                .slowing_fraction
                .is_some_and(|f| f >= THROTTLED_FRACTION)
        })
        .max_by(|a, b| {
            a.throttle
                .slowing_fraction
                .unwrap_or(0.0)
                .total_cmp(&b.throttle.slowing_fraction.unwrap_or(0.0))
        })?;
    let frac = g.throttle.slowing_fraction?;
    let slowing = [
        "sw_power_cap",
        "hw_slowdown",
        "sw_thermal",
        "hw_thermal",
        "hw_power_brake",
    ];
    let mut reasons: Vec<(&String, &f64)> = g
        .throttle
        .by_reason
        .iter()
        .filter(|(k, _)| slowing.contains(&k.as_str()))
        .collect();
    reasons.sort_by(|a, b| b.1.total_cmp(a.1).then(a.0.cmp(b.0)));
    let top = reasons.first().map(|r| r.0.as_str()).unwrap_or("unknown");
    let thermal = reasons
        .iter()
        .any(|(k, v)| k.contains("thermal") && **v >= THROTTLED_FRACTION);
    let power = reasons
        .iter()
        .any(|(k, v)| (k.contains("power")) && **v >= THROTTLED_FRACTION);
    let sev = if frac >= 0.2 {
        Severity::Critical
    } else {
        Severity::Warning
    };
    let mut f = Finding::new(
        FindingId::Throttled,
        sev,
        format!(
            "GPU {} clocks held down {:.0}% of the time (mostly {})",
            g.index,
            frac * 100.0,
            top.replace('_', " ")
        ),
    )
    .with(Item::GpuIndex(g.index))
    .with(Item::ThrottledTimeFraction(r3(frac)))
    .with(Item::ObservedS(r2(g.throttle.observed_s)));
    for (k, v) in &reasons {
        let share = r3(**v);
        f = f.with(match k.as_str() {
            "sw_power_cap" => Item::SwPowerCapTimeFraction(share),
            "hw_slowdown" => Item::HwSlowdownTimeFraction(share),
            "sw_thermal" => Item::SwThermalTimeFraction(share),
            "hw_thermal" => Item::HwThermalTimeFraction(share),
            _ => Item::HwPowerBrakeTimeFraction(share),
        });
    }
    if let Some(t) = g.temperature_mean_c {
        f = f.with(Item::TemperatureMeanC(r2(t)));
    }
    if let Some(p) = g.power_mean_w {
        f = f.with(Item::PowerMeanW(r2(p)));
    }
    let mut rec = Vec::new();
    if thermal {
        rec.push(
            "Cool the GPU: check airflow, fan curves, blanking panels and inlet temperature \
             (`nvidia-smi -q -d TEMPERATURE,PERFORMANCE`); in a chassis, spread hot cards apart.",
        );
    }
    if power {
        rec.push(
            "Check the power limit (`nvidia-smi -q -d POWER`): restore the default with \
             `nvidia-smi -pl <default W>` if it was lowered, and check PSU capacity (power brake).",
        );
    }
    if reasons.iter().any(|(k, _)| k.as_str() == "hw_slowdown") && !thermal {
        rec.push(
            "HW slowdown without thermal cause points at power delivery or an external signal: \
             check PSU cables and `nvidia-smi -q -d PERFORMANCE` for the exact reason.",
        );
    }
    if rec.is_empty() {
        rec.push("Inspect `nvidia-smi -q -d PERFORMANCE` while the job runs.");
    }
    // Held-down clocks cost roughly the time share × the clock loss; bound it loosely.
    let speedup = (g.busy_fraction.unwrap_or(0.0) >= 0.8).then(|| r2(1.0 + 0.3 * frac));
    Some(f.recommend(rec.join(" ")).speedup(speedup))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::rules::fixtures::*;

    #[test]
    fn thermal_throttling_is_found_with_its_reason() {
        let mut e = base(97.0);
        let t = &mut e.gpus[0].throttle;
        t.observed_s = 600.0;
        t.slowing_fraction = Some(0.4);
        t.by_reason.insert("hw_thermal".into(), 0.3);
        t.by_reason.insert("sw_thermal".into(), 0.4);
        t.by_reason.insert("sync_boost".into(), 0.9);
        let f = throttled(&e).unwrap();
        assert_eq!(f.severity, Severity::Critical);
        assert!(f.title.contains("sw thermal"), "{}", f.title);
        assert_eq!(f.evidence.to_json()["hw_thermal_time_fraction"], 0.3);
        assert!(!f
            .evidence
            .to_json()
            .contains_key("sync_boost_time_fraction"));
        assert!(f.recommendation.contains("airflow"));
        assert_eq!(f.expected_speedup, Some(1.12));
    }

    #[test]
    fn idle_bit_alone_is_not_throttling() {
        let mut e = base(30.0);
        let t = &mut e.gpus[0].throttle;
        t.observed_s = 600.0;
        // The evidence never counts gpu_idle as slowing.
        t.slowing_fraction = Some(0.0);
        assert!(throttled(&e).is_none());
    }

    #[test]
    fn power_cap() {
        let mut e = base(95.0);
        let t = &mut e.gpus[0].throttle;
        t.observed_s = 100.0;
        t.slowing_fraction = Some(0.1);
        t.by_reason.insert("sw_power_cap".into(), 0.1);
        let f = throttled(&e).unwrap();
        assert_eq!(f.severity, Severity::Warning);
        assert!(f.recommendation.contains("power limit"));
    }
}
