//! Presenter for `gpufeed bench`: the GPU and its link, the copy bandwidths against the link, the
//! GEMM throughputs and the mixed-precision speed-up, from a [`BenchReport`]; its JSON is serde's.

use crate::bench::{BenchReport, Direction, HostMemory};
use crate::units;
use crate::units::gb_per_s;
use std::fmt::Write as _;

/// The text report (`--format text`).
pub fn text(r: &BenchReport) -> String {
    let mut o = String::new();
    gpu_text(&mut o, r);
    copies_text(&mut o, r);
    gemm_text(&mut o, r);
    if let Some(p) = &r.saved_to {
        let _ = writeln!(
            o,
            "\nSaved the pinned bandwidth to {} (for scripts and later runs)",
            p.display()
        );
    }
    o
}

/// The GPU and its PCIe link.
fn gpu_text(o: &mut String, r: &BenchReport) {
    let _ = writeln!(
        o,
        "GPU {}: {}{}",
        r.gpu_index,
        r.gpu_name.as_deref().unwrap_or("unknown"),
        r.compute_capability
            .map(|c| format!(" (compute capability {}.{})", c[0], c[1]))
            .unwrap_or_default()
    );
    match (
        r.link.pcie_max_gen,
        r.link.pcie_max_width,
        r.link.theoretical_bytes_per_s,
    ) {
        (Some(g), Some(w), Some(t)) => {
            let _ = writeln!(
                o,
                "PCIe link: gen{} x{} now (max gen{g} x{w}: {} per direction)",
                r.link.pcie_cur_gen.map_or("?".into(), |v| v.to_string()),
                r.link.pcie_cur_width.map_or("?".into(), |v| v.to_string()),
                gb_per_s(t)
            );
        }
        _ => {
            let _ = writeln!(o, "PCIe link: unknown (NVML unavailable)");
        }
    }
}

/// The copy bandwidth table by size, direction and host memory, and what pinning gains.
fn copies_text(o: &mut String, r: &BenchReport) {
    let _ = writeln!(o, "\nCopy bandwidth");
    let _ = writeln!(
        o,
        "  {:>9}  {:>12} {:>12}  {:>12} {:>12}",
        "size", "H2D pinned", "H2D pageable", "D2H pinned", "D2H pageable"
    );
    let mut sizes: Vec<u64> = r.copies.iter().map(|c| c.size_bytes).collect();
    sizes.sort();
    sizes.dedup();
    for s in sizes {
        let cell = |d, m| {
            r.copies
                .iter()
                .find(|c| c.size_bytes == s && c.direction == d && c.memory == m)
                .map_or("-".to_string(), |c| gb_per_s(c.bytes_per_s))
        };
        let _ = writeln!(
            o,
            "  {:>9}  {:>12} {:>12}  {:>12} {:>12}",
            units::bytes(s),
            cell(Direction::H2d, HostMemory::Pinned),
            cell(Direction::H2d, HostMemory::Pageable),
            cell(Direction::D2h, HostMemory::Pinned),
            cell(Direction::D2h, HostMemory::Pageable)
        );
    }
    if let (Some(p), Some(t)) = (
        r.best.h2d_pinned_bytes_per_s,
        r.link.theoretical_bytes_per_s,
    ) {
        let _ = writeln!(
            o,
            "  best pinned H2D {} = {:.0}% of the link's theoretical {}",
            gb_per_s(p),
            100.0 * p / t,
            gb_per_s(t)
        );
    }
    match r.best.pinned_speedup_h2d {
        Some(x) if x >= 1.1 => {
            let _ = writeln!(
                o,
                "  pinned memory is {x:.1}x faster than pageable for H2D: DataLoader(pin_memory=True) and .to(device, non_blocking=True)"
            );
        }
        Some(x) => {
            let _ = writeln!(
                o,
                "  pinned memory is no faster than pageable for H2D here ({x:.2}x); non_blocking copies still overlap with compute"
            );
        }
        None => {}
    }
}

/// GEMM throughput by precision, and what mixed precision can gain.
fn gemm_text(o: &mut String, r: &BenchReport) {
    let _ = writeln!(o, "\nGEMM throughput");
    if let Some(why) = &r.gemm_skipped {
        let _ = writeln!(o, "  skipped: {why}");
    }
    for g in &r.gemm {
        let _ = writeln!(
            o,
            "  {:>5}  n={:<6} {:>8.1} TFLOP/s  {}",
            g.precision,
            g.n,
            g.flops_per_s / 1e12,
            g.speedup_vs_fp32
                .map(|x| format!("{x:.1}x fp32"))
                .unwrap_or_default()
        );
    }
    if let Some(x) = r.expected_amp_speedup {
        let _ = writeln!(
            o,
            "  mixed precision (bf16/fp16 autocast) can make matmul-bound work up to {x:.1}x faster than fp32"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::tests::copy;
    use crate::bench::{best_bandwidth, LinkInfo, SCHEMA_VERSION};
    use crate::units::pcie_link_bytes_per_s;

    #[test]
    fn renders_a_table() {
        let r = BenchReport {
            schema_version: SCHEMA_VERSION,
            gpu_index: 0,
            gpu_name: Some("NVIDIA H200".into()),
            gpu_uuid: None,
            compute_capability: Some([9, 0]),
            link: LinkInfo {
                pcie_cur_gen: Some(5),
                pcie_cur_width: Some(16),
                pcie_max_gen: Some(5),
                pcie_max_width: Some(16),
                theoretical_bytes_per_s: pcie_link_bytes_per_s(5, 16),
            },
            copies: vec![
                copy(Direction::H2d, HostMemory::Pinned, 50e9),
                copy(Direction::H2d, HostMemory::Pageable, 12e9),
            ],
            best: best_bandwidth(&[
                copy(Direction::H2d, HostMemory::Pinned, 50e9),
                copy(Direction::H2d, HostMemory::Pageable, 12e9),
            ]),
            gemm: vec![],
            gemm_skipped: Some("cuBLAS not found".into()),
            expected_amp_speedup: None,
            saved_to: None,
        };
        let t = text(&r);
        assert!(t.contains("50.0 GB/s"), "{t}");
        assert!(t.contains("skipped: cuBLAS not found"), "{t}");
        assert!(t.contains("4.2x faster"), "{t}");
        assert!(t.contains("79% of the link"), "{t}");
    }
}
