//! Host-to-device transfers: a link running near capacity, and a link trained below its maximum.

use super::{r1, r2, r3};
use crate::diagnose::evidence::{Evidence, GpuEvidence};
use crate::finding::{Finding, FindingId, Item, Severity};

fn gb(x: f64) -> f64 {
    r2(x / 1e9)
}

/// The GPU whose link is busiest (highest mean RX / capacity).
fn busiest_link(e: &Evidence) -> Option<&GpuEvidence> {
    e.gpus
        .iter()
        .filter(|g| g.pcie.rx_capacity_mean_fraction.is_some())
        .max_by(|a, b| {
            a.pcie
                .rx_capacity_mean_fraction
                .unwrap_or(0.0)
                .total_cmp(&b.pcie.rx_capacity_mean_fraction.unwrap_or(0.0))
        })
}

/// `transfer_bound`: host-to-device traffic near the link's capacity for a good share of the run.
pub(crate) fn transfer_bound(e: &Evidence) -> Option<Finding> {
    let g = busiest_link(e)?;
    let p = &g.pcie;
    let near = p.rx_near_capacity_fraction?;
    let p90 = p.rx_capacity_p90_fraction.unwrap_or(0.0);
    if !(near >= 0.3 || (p90 >= 0.8 && p.rx_capacity_mean_fraction? >= 0.5)) {
        return None;
    }
    let mut f = Finding::new(
        FindingId::TransferBound,
        Severity::Critical,
        format!(
            "GPU {}: host-to-device copies run at the PCIe link's limit",
            g.index
        ),
    )
    .with(Item::GpuIndex(g.index))
    .with(Item::RxNearCapacityTimeFraction(r2(near)))
    .with(Item::RxCapacityP90Fraction(r3(p90)));
    if let Some(r) = p.rx_mean_bytes_per_s {
        f = f.with(Item::RxMeanGbPerS(gb(r)));
    }
    if let Some(c) = p.capacity_current_bytes_per_s {
        f = f.with(Item::LinkCapacityGbPerS(gb(c)));
    }
    if let (Some(gn), Some(w)) = (p.gen_current, p.width_current) {
        f = f.with(Item::PcieGen(gn)).with(Item::PcieWidth(w));
    }
    if let Some(b) = g.busy_fraction {
        f = f.with(Item::GpuBusyFraction(r3(b)));
    }
    let speedup = g
        .busy_fraction
        .filter(|b| *b > 0.02 && *b < 0.95)
        .map(|b| r2((1.0 / b).min(4.0)));
    Some(
        f.recommend(
            "Send less over PCIe: ship images as uint8 and convert/normalize on the GPU \
             (x = x.cuda(non_blocking=True).float().div_(255)), keep static data resident on the \
             GPU, use pin_memory=True with non_blocking=True copies so they overlap compute, and \
             avoid moving tensors back to the host every step.",
        )
        .speedup(speedup),
    )
}

/// `pcie_link_degraded`: under load, the link runs below its maximum generation or width.
pub(crate) fn pcie_link_degraded(e: &Evidence) -> Option<Finding> {
    let g = e
        .gpus
        .iter()
        .filter(|g| g.pcie.loaded_link_samples >= 3)
        .filter(|g| g.pcie.degraded_loaded_fraction.is_some_and(|f| f >= 0.5))
        .min_by(|a, b| {
            a.pcie
                .capacity_current_bytes_per_s
                .unwrap_or(0.0)
                .total_cmp(&b.pcie.capacity_current_bytes_per_s.unwrap_or(0.0))
        })?;
    let p = &g.pcie;
    let (gen, width) = (p.gen_current?, p.width_current?);
    let mut f = Finding::new(
        FindingId::PcieLinkDegraded,
        Severity::Warning,
        format!(
            "GPU {}: PCIe link runs at Gen{gen} x{width} under load, below its Gen{} x{}",
            g.index,
            p.gen_max.unwrap_or(gen),
            p.width_max.unwrap_or(width)
        ),
    )
    .with(Item::GpuIndex(g.index))
    .with(Item::PcieGen(gen))
    .with(Item::PcieWidth(width))
    .with(Item::DegradedLoadedFraction(r2(p
        .degraded_loaded_fraction
        .unwrap_or(0.0))));
    if let Some(m) = p.gen_max {
        f = f.with(Item::PcieGenMax(m));
    }
    if let Some(m) = p.width_max {
        f = f.with(Item::PcieWidthMax(m));
    }
    if let Some(c) = p.capacity_current_bytes_per_s {
        f = f.with(Item::LinkCapacityGbPerS(gb(c)));
    }
    if let Some(c) = p.capacity_max_bytes_per_s {
        f = f.with(Item::LinkCapacityMaxGbPerS(gb(c)));
    }
    let mut sev = Severity::Warning;
    let mut speedup = None;
    if let (Some(cur), Some(max)) = (p.capacity_current_bytes_per_s, p.capacity_max_bytes_per_s) {
        if cur > 0.0 {
            f = f.with(Item::CapacityLostFraction(r2(1.0 - cur / max)));
        }
        // Only a link that is also near its (reduced) capacity costs speed.
        if p.rx_near_capacity_fraction.is_some_and(|n| n >= 0.3) && cur > 0.0 {
            sev = Severity::Critical;
            speedup = Some(r1((max / cur).min(16.0)));
        }
    }
    f.severity = sev;
    Some(
        f.recommend(format!(
            "Check the link with `nvidia-smi -q -d PCIE` (and `lspci -vv` LnkSta vs LnkCap) while \
             the GPU is busy: reseat the card or move it to a full x{} slot wired to the CPU, check \
             risers/retimers and BIOS PCIe settings (link speed forced to a lower generation, \
             bifurcation), and update the firmware. Idle links step down on purpose; this one \
             stayed low under load.",
            p.width_max.unwrap_or(16)
        ))
        .speedup(speedup),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::rules::fixtures::*;
    use crate::units::pcie_link_bytes_per_s;

    fn link(e: &mut Evidence, gen: u32, width: u32, rx_frac: f64, near: f64) {
        let p = &mut e.gpus[0].pcie;
        let cap = pcie_link_bytes_per_s(gen, width).unwrap();
        p.rx_samples = 1000;
        p.rx_mean_bytes_per_s = Some(cap * rx_frac);
        p.rx_capacity_mean_fraction = Some(rx_frac);
        p.rx_capacity_p90_fraction = Some((rx_frac * 1.1).min(1.0));
        p.rx_near_capacity_fraction = Some(near);
        p.gen_current = Some(gen);
        p.width_current = Some(width);
        p.gen_max = Some(4);
        p.width_max = Some(16);
        p.capacity_current_bytes_per_s = Some(cap);
        p.capacity_max_bytes_per_s = pcie_link_bytes_per_s(4, 16);
        p.loaded_link_samples = 1000;
        p.degraded_loaded_fraction = Some(if (gen, width) == (4, 16) { 0.0 } else { 1.0 });
    }

    #[test]
    fn capacity_table() {
        assert_eq!(pcie_link_bytes_per_s(3, 16), Some(0.985e9 * 16.0));
        assert_eq!(pcie_link_bytes_per_s(5, 16), Some(3.938e9 * 16.0));
        assert_eq!(pcie_link_bytes_per_s(6, 1), Some(7.563e9));
        assert_eq!(pcie_link_bytes_per_s(9, 16), None);
    }

    #[test]
    fn quiet_link_is_fine() {
        let mut e = base(97.0);
        link(&mut e, 4, 16, 0.1, 0.0);
        assert!(transfer_bound(&e).is_none());
        assert!(pcie_link_degraded(&e).is_none());
    }

    #[test]
    fn saturated_link_is_transfer_bound() {
        let mut e = base(60.0);
        link(&mut e, 4, 16, 0.85, 0.8);
        let f = transfer_bound(&e).unwrap();
        assert_eq!(f.evidence.to_json()["link_capacity_gb_per_s"], 31.5);
        assert_eq!(f.evidence.to_json()["rx_near_capacity_time_fraction"], 0.8);
        assert!(f.recommendation.contains("uint8"));
        assert_eq!(f.expected_speedup, Some(1.67));
    }

    #[test]
    fn degraded_link_under_load() {
        let mut e = base(90.0);
        link(&mut e, 1, 4, 0.2, 0.0);
        let f = pcie_link_degraded(&e).unwrap();
        assert_eq!(f.severity, Severity::Warning);
        assert_eq!(f.evidence.to_json()["pcie_gen"], 1);
        assert_eq!(f.evidence.to_json()["pcie_width"], 4);
        assert_eq!(f.evidence.to_json()["capacity_lost_fraction"], 0.97);
        assert!(f.title.contains("Gen1 x4") && f.title.contains("Gen4 x16"));
        // Degraded and saturated: critical, with the capacity ratio as the bound.
        link(&mut e, 3, 8, 0.9, 0.9);
        let f = pcie_link_degraded(&e).unwrap();
        assert_eq!(f.severity, Severity::Critical);
        assert_eq!(f.expected_speedup, Some(4.0));
    }

    #[test]
    fn no_loaded_samples_no_judgement() {
        let mut e = base(5.0);
        link(&mut e, 1, 16, 0.0, 0.0);
        e.gpus[0].pcie.loaded_link_samples = 0;
        e.gpus[0].pcie.degraded_loaded_fraction = None;
        assert!(pcie_link_degraded(&e).is_none());
    }
}
