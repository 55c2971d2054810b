//! The end-of-recording summary, as text for people or one JSON line for programs.

use super::fmt::{bytes, opt};
use crate::record::summary::{GpuSummary, JobUsage, Summary};
use std::fmt::Write;

/// At most this many processes are listed in the text summary (all are in the JSON).
const MAX_PROCS_SHOWN: usize = 10;

/// The summary; with `util_mean_said` (a one-GPU recording whose verdict, printed next, gives
/// the busy share) the GPU line leaves its mean utilization out: each figure once.
pub(crate) fn text_with(s: &Summary, util_mean_said: bool) -> String {
    super::fmt::terminal_safe(s, false, |s| text_raw(s, util_mean_said))
}

fn text_raw(s: &Summary, util_mean_said: bool) -> String {
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
        gpu_text(&mut o, s, g, util_mean_said);
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
        job_text(&mut o, j);
    }
    o.push_str(&overrides_text(&s.overrides, &s.override_notes));
    o.push_str(&loader_text(&s.loader_notes));
    if let Some(n) = s.steps_dropped {
        let _ = writeln!(
            o,
            "  note   {n} step markers with a time outside the run were dropped (check the clock the job stamps them with: CLOCK_MONOTONIC)"
        );
    }
    o
}

/// A GPU's utilization (its mean unless the line above gave it) and its other figures.
fn gpu_text(o: &mut String, s: &Summary, g: &GpuSummary, util_mean_said: bool) {
    let mean = if util_mean_said && s.gpus.len() == 1 {
        String::new()
    } else {
        format!("mean {} ", opt(g.util_mean_pct, |v| format!("{v:.0}%")))
    };
    let _ = writeln!(
        o,
        "  GPU {:<2} {}: utilization {mean}(min {}, max {}) from {} driver samples{}",
        g.index,
        g.name.as_deref().unwrap_or("unknown GPU"),
        opt(g.util_min_pct, |v| format!("{v:.0}%")),
        opt(g.util_max_pct, |v| format!("{v:.0}%")),
        g.util_samples,
        opt(g.util_sample_period_s, |p| format!(" (one every {p:.2} s)")),
    );
    let _ = writeln!(
        o,
        "         memory peak {} of {}; power mean {}; temperature max {}; SM clock mean {}; PCIe RX mean {}; throttled {}",
        opt(g.mem_used_max_bytes, bytes),
        opt(g.mem_total_bytes, bytes),
        opt(g.power_mean_w, |w| format!("{w:.0} W")),
        opt(g.temperature_max_c, |c| format!("{c} °C")),
        opt(g.sm_clock_mean_mhz, |c| format!("{c:.0} MHz")),
        opt(g.pcie_rx_mean_bytes_per_s, super::fmt::gb_per_s),
        opt(g.throttled_pct, |p| format!("{p:.0}% of readings")),
    );
}

/// How the job ended, its totals, and its busiest processes.
fn job_text(o: &mut String, j: &JobUsage) {
    use crate::sample::event::EndReason;
    let how = match (j.exit_code, j.signal, j.end_reason) {
        (Some(c), _, _) => format!("exited with code {c}"),
        (None, Some(sig), _) => format!("killed by signal {sig}"),
        (_, _, Some(EndReason::AttachedExited)) => {
            "exited, which ended the recording (attached with --pid: its exit code cannot be read)"
                .to_string()
        }
        (_, _, Some(EndReason::Duration)) => {
            "still running when --duration ended the recording".into()
        }
        (_, _, Some(EndReason::Interrupted)) => {
            "still running when the recording was interrupted".into()
        }
        _ => "not seen to end (the recording has no end line)".to_string(),
    };
    let _ = writeln!(
        o,
        "  job    pid {} {how}; CPU mean {} of one core (max {}); RSS peak {}; {} (at most {} at once)",
        j.pid,
        opt(j.cpu_mean_pct, |v| format!("{v:.0}%")),
        opt(j.cpu_max_pct, |v| format!("{v:.0}%")),
        opt(j.rss_max_bytes, bytes),
        super::fmt::plural(j.processes.len(), "process", "processes"),
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

/// The `--dataloader` / `--torch` lines: what was overridden, then what could not be.
pub(crate) fn overrides_text(
    overrides: &[crate::sample::event::Override],
    notes: &[String],
) -> String {
    let mut o = String::new();
    if overrides.is_empty() && notes.is_empty() {
        return o;
    }
    let _ = writeln!(o, "  overridden (--dataloader/--torch):");
    if overrides.is_empty() {
        let _ = writeln!(o, "         nothing");
    }
    for ov in overrides {
        let _ = writeln!(o, "         {}", ov.describe());
    }
    for n in notes {
        let _ = writeln!(o, "         note: {n}");
    }
    o
}

/// What gpufeed's DataLoader hook saw (the loader it timed, loaders left out, loaders that read
/// samples twice or leave workers idle), one line each.
pub(crate) fn loader_text(notes: &[String]) -> String {
    let mut o = String::new();
    for n in notes {
        let _ = writeln!(o, "  loader  {n}");
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::summary::{GpuSummary, HostSummary, JobUsage, ProcessSummary, Summary};

    fn sample() -> Summary {
        Summary {
            schema_version: 1,
            recording: "gpufeed-20261202-120000.ndjson".into(),
            start_time: "2026-12-02T12:00:00.000Z".into(),
            duration_s: 6.02,
            command: Some(vec!["python".into(), "train.py".into()]),
            gpu_error: None,
            gpus: vec![GpuSummary {
                index: 0,
                name: Some("NVIDIA H100 80GB HBM3".into()),
                util_mean_pct: Some(32.4),
                util_min_pct: Some(10.0),
                util_max_pct: Some(85.0),
                util_samples: 36,
                util_sample_period_s: Some(0.1667),
                mem_used_max_bytes: Some(80_000_000_000),
                mem_total_bytes: Some(85_899_345_920),
                power_mean_w: Some(350.0),
                temperature_max_c: Some(65),
                sm_clock_mean_mhz: Some(1980.0),
                pcie_rx_mean_bytes_per_s: None,
                throttled_pct: Some(0.0),
            }],
            host: HostSummary {
                cpu_count: 16,
                cpu_mean_pct: Some(41.0),
                mem_total_bytes: Some(64 << 30),
                mem_available_min_bytes: Some(40 << 30),
            },
            job: Some(JobUsage {
                pid: 4242,
                exit_code: Some(0),
                signal: None,
                cpu_mean_pct: Some(180.5),
                cpu_max_pct: Some(260.0),
                rss_max_bytes: Some(3 << 30),
                processes_max: 3,
                end_reason: Some(crate::sample::event::EndReason::JobExited),
                processes: vec![
                    ProcessSummary {
                        pid: 4242,
                        ppid: 1,
                        cmd: Some("python train.py".into()),
                        cpu_mean_pct: Some(99.0),
                        rss_max_bytes: Some(2 << 30),
                        read_bytes: Some(0),
                        first_seen_s: 0.0,
                        last_seen_s: 6.0,
                    },
                    ProcessSummary {
                        pid: 4250,
                        ppid: 4242,
                        cmd: Some("python train.py".into()),
                        cpu_mean_pct: Some(81.5),
                        rss_max_bytes: Some(1 << 30),
                        read_bytes: Some(1 << 20),
                        first_seen_s: 0.5,
                        last_seen_s: 6.0,
                    },
                ],
            }),
            truncated: false,
            overrides: vec![],
            override_notes: vec![],
            loader_notes: vec![],
            steps_dropped: None,
        }
    }

    #[test]
    fn text_summary() {
        insta::assert_snapshot!(text_with(&sample(), false));
    }

    #[test]
    fn overrides_are_listed_with_their_site() {
        let mut s = sample();
        assert!(!text_with(&s, false).contains("overridden"));
        s.overrides.push(crate::sample::event::Override {
            target: "DataLoader".into(),
            key: "num_workers".into(),
            value: 8.into(),
            original: 0.into(),
            site: Some("train.py:42".into()),
            reason: None,
            count: 1,
        });
        s.override_notes.push("the job never imported torch".into());
        let t = text_with(&s, false);
        assert!(
            t.ends_with("  overridden (--dataloader/--torch):\n         DataLoader(num_workers=8) at train.py:42, was 0\n         note: the job never imported torch\n"),
            "{t}"
        );
        let j = serde_json::to_string(&s).unwrap();
        assert!(j.contains(r#""overrides":[{"target":"DataLoader","key":"num_workers","value":8,"original":0,"site":"train.py:42","count":1}]"#), "{j}");
        let back: Summary = serde_json::from_str(&j).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn json_summary_round_trips() {
        let s = sample();
        let back: Summary = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
        assert!(
            !serde_json::to_string(&s).unwrap().contains('\n'),
            "one line"
        );
    }

    #[test]
    fn attached_job_that_exited_says_so() {
        let mut s = sample();
        let j = s.job.as_mut().unwrap();
        j.exit_code = None;
        j.end_reason = Some(crate::sample::event::EndReason::AttachedExited);
        j.processes.truncate(1);
        let t = text_with(&s, false);
        assert!(t.contains("exited, which ended the recording"), "{t}");
        assert!(!t.contains("still running"), "{t}");
        assert!(t.contains("; 1 process (at most"), "{t}");
        s.job.as_mut().unwrap().end_reason = Some(crate::sample::event::EndReason::Duration);
        assert!(text_with(&s, false).contains("still running when --duration ended"));
    }

    #[test]
    fn missing_values_show_as_dashes_not_zeros() {
        let mut s = sample();
        s.gpus[0].power_mean_w = None;
        s.gpus[0].util_mean_pct = None;
        let t = text_with(&s, false);
        assert!(t.contains("power mean -"), "{t}");
        assert!(t.contains("utilization mean -"), "{t}");
    }
}
