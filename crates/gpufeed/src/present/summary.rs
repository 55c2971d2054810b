//! The end-of-recording summary, as text for people or one JSON line for programs.

use super::{bytes, opt};
use crate::record::summary::Summary;
use std::fmt::Write;

/// At most this many processes are listed in the text summary (all are in the JSON).
const MAX_PROCS_SHOWN: usize = 10;

pub fn json(s: &Summary) -> String {
    serde_json::to_string(s).expect("summary serializes")
}

pub fn text(s: &Summary) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "gpufeed: recorded {:.1} s -> {}{}",
        s.duration_s,
        s.recording,
        if s.truncated {
            " (cut short: figures cover what was written)"
        } else {
            ""
        }
    );
    if s.gpus.is_empty() {
        let _ = writeln!(
            o,
            "  GPU    none recorded{}",
            opt(s.gpu_error.as_deref(), |e| format!(" ({e})"))
        );
    }
    for g in &s.gpus {
        let _ = writeln!(
            o,
            "  GPU {:<2} {}: utilization mean {} (min {}, max {}) from {} driver samples{}",
            g.index,
            g.name.as_deref().unwrap_or("unknown GPU"),
            opt(g.util_mean_pct, |v| format!("{v:.0}%")),
            opt(g.util_min_pct, |v| format!("{v:.0}")),
            opt(g.util_max_pct, |v| format!("{v:.0}")),
            g.util_samples,
            opt(g.util_sample_period_s, |p| format!(" (one every {p:.2} s)")),
        );
        let _ = writeln!(
            o,
            "         memory peak {} of {}; power mean {}; temperature max {}; SM clock mean {}; PCIe RX mean {}; throttled {}",
            opt(g.mem_used_max_bytes, bytes),
            opt(g.mem_total_bytes, bytes),
            opt(g.power_mean_w, |w| format!("{w:.0} W")),
            opt(g.temperature_max_c, |c| format!("{c} C")),
            opt(g.sm_clock_mean_mhz, |c| format!("{c:.0} MHz")),
            opt(g.pcie_rx_mean_bytes_per_s, |r| format!("{}/s", bytes(r as u64))),
            opt(g.throttled_pct, |p| format!("{p:.0}% of readings")),
        );
    }
    let _ = writeln!(
        o,
        "  host   {} CPUs, mean {} busy; memory available min {} of {}",
        s.host.cpu_count,
        opt(s.host.cpu_mean_pct, |v| format!("{v:.0}%")),
        opt(s.host.mem_available_min_bytes, bytes),
        opt(s.host.mem_total_bytes, bytes),
    );
    if let Some(j) = &s.job {
        let how = match (j.exit_code, j.signal) {
            (Some(c), _) => format!("exited with code {c}"),
            (None, Some(sig)) => format!("killed by signal {sig}"),
            _ => "still running or not seen to end".to_string(),
        };
        let _ = writeln!(
            o,
            "  job    pid {} {how}; CPU mean {} of one core (max {}); RSS peak {}; {} processes (at most {} at once)",
            j.pid,
            opt(j.cpu_mean_pct, |v| format!("{v:.0}%")),
            opt(j.cpu_max_pct, |v| format!("{v:.0}%")),
            opt(j.rss_max_bytes, bytes),
            j.processes.len(),
            j.processes_max,
        );
        let mut procs: Vec<_> = j.processes.iter().collect();
        procs.sort_by(|a, b| {
            b.cpu_mean_pct
                .unwrap_or(0.0)
                .total_cmp(&a.cpu_mean_pct.unwrap_or(0.0))
                .then(a.pid.cmp(&b.pid))
        });
        for p in procs.iter().take(MAX_PROCS_SHOWN) {
            let mut cmd = p.cmd.clone().unwrap_or_else(|| "?".into());
            if cmd.chars().count() > 60 {
                cmd = cmd.chars().take(57).collect::<String>() + "...";
            }
            let _ = writeln!(
                o,
                "         pid {:<8} CPU {:>5}  RSS {:>9}  {}{}",
                p.pid,
                opt(p.cpu_mean_pct, |v| format!("{v:.0}%")),
                opt(p.rss_max_bytes, bytes),
                if p.pid == j.pid { "" } else { "└ " },
                cmd
            );
        }
        if procs.len() > MAX_PROCS_SHOWN {
            let _ = writeln!(
                o,
                "         ... and {} more (see --format json)",
                procs.len() - MAX_PROCS_SHOWN
            );
        }
    }
    o
}
