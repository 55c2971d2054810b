//! Presenters for `gpufeed analyze`: text (top fix first) and Markdown from a
//! [`Report`]; its JSON is serde's.

use std::fmt::Write;

use crate::finding::{Finding, FindingId, ItemKey};
use crate::trace::breakdown::{StepCategory, StepRow, TraceSummary};
use crate::trace::report::RankJob;
use crate::trace::report::Report;

/// VERDICT and TOP FIX, as `gpufeed diagnose` says them.
fn verdict_text(o: &mut String, r: &Report) {
    let v = &r.verdict;
    let _ = writeln!(
        o,
        "VERDICT  {}  (confidence {:.2})\n         {}",
        v.id, v.confidence, v.summary
    );
    match r.findings.first() {
        Some(f) => {
            let gain = f
                .expected_speedup
                .map(|x| format!(" (up to {x:.2}x faster)"))
                .unwrap_or_default();
            let _ = writeln!(
                o,
                "TOP FIX  {}{gain}\n  -> {}\n  because: {}\n",
                f.title,
                f.recommendation,
                evidence_list(f, false)
            );
        }
        None => {
            let _ = writeln!(o, "TOP FIX  none: no rule fired on this trace\n");
        }
    }
}

fn ms(us: f64) -> String {
    format!("{:.1}", us / 1000.0)
}

fn pct(part: f64, total: f64) -> f64 {
    if total > 0.0 {
        100.0 * part / total
    } else {
        0.0
    }
}

fn breakdown_line(b: &StepRow) -> String {
    let mut parts: Vec<(StepCategory, f64)> =
        b.by_category().into_iter().filter(|x| x.1 > 0.0).collect();
    parts.sort_by(|a, b| b.1.total_cmp(&a.1));
    parts
        .iter()
        .map(|(c, x)| format!("{} {:.0}%", c.as_str(), pct(*x, b.total_us)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The measured DataLoader share, with the plugin's figure beside it and why they differ.
pub(crate) fn dataloader_line(t: &TraceSummary) -> String {
    let b = &t.breakdown;
    let plugin = pct(b.dataloader_us, b.total_us);
    let measured = t.dataloader.share_pct;
    let why = if (measured - plugin).abs() < 1.0 {
        String::new()
    } else if plugin < 0.5 {
        "; the plugin breakdown books none of it to dataloader (its events are not cpu_op, or it overlaps GPU work)".into()
    } else {
        format!(
            "; the plugin breakdown books {plugin:.0}% to dataloader: the rest overlaps GPU work it books first"
        )
    };
    format!(
        "DataLoader: the training loop waits {} ms per step ({measured:.0}% of the step){why}; iterator {}",
        ms(t.dataloader.per_step_us),
        t.dataloader.iterator
    )
}

/// NCCL time not hidden behind compute, when the plugin's `communication` category misses it.
pub(crate) fn communication_line(t: &TraceSummary) -> Option<String> {
    let b = &t.breakdown;
    let exposed = t.communication.exposed_us_per_step;
    if t.communication.kernel_us <= 0.0 || exposed <= 0.0 {
        return None;
    }
    let plugin = pct(b.communication_us, b.total_us);
    let mine = pct(exposed, b.total_us);
    let why = if (mine - plugin).abs() < 1.0 {
        String::new()
    } else {
        format!(
            "; the plugin breakdown books {plugin:.0}% to communication (it counts collective kernels it cannot tie to a collective call as kernel)"
        )
    };
    Some(format!(
        "communication: {} ms per step of collective kernels not overlapped by compute ({mine:.0}% of the step, {:.0}% of collective time overlapped){why}",
        ms(exposed),
        t.communication.overlap_pct
    ))
}

pub(crate) fn steps_table(steps: &[StepRow], markdown: bool) -> String {
    let mut o = String::new();
    let head = [
        "step", "kernel", "memcpy", "memset", "comm", "runtime", "dataload", "cpu_op", "other",
        "total",
    ];
    if markdown {
        let _ = writeln!(o, "| {} |", head.join(" | "));
        let _ = writeln!(
            o,
            "|{}|",
            head.iter().map(|_| "---:").collect::<Vec<_>>().join("|")
        );
        for s in steps {
            let v: Vec<String> = s.values().iter().map(|x| ms(*x)).collect();
            let _ = writeln!(o, "| {} | {} |", s.step, v.join(" | "));
        }
    } else {
        let _ = writeln!(
            o,
            "  {:>8} {}   (ms)",
            head[0],
            head[1..]
                .iter()
                .map(|h| format!("{h:>9}"))
                .collect::<String>()
        );
        for s in steps {
            let v: String = s
                .values()
                .iter()
                .map(|x| format!("{:>9}", ms(*x)))
                .collect();
            let _ = writeln!(o, "  {:>8} {v}", s.step);
        }
    }
    o
}

/// The few evidence entries that decide each finding (all of them are in the JSON and with
/// `--verbose`).
pub(crate) fn deciding_keys(id: FindingId) -> &'static [ItemKey] {
    match id {
        FindingId::InputBound => &[
            ItemKey::DataloaderPct,
            ItemKey::DataloaderUsPerStep,
            ItemKey::StepUs,
            ItemKey::DataloaderIterator,
        ],
        FindingId::PageableMemcpy => &[
            ItemKey::Copies,
            ItemKey::Bytes,
            ItemKey::CopyPctOfStep,
            ItemKey::BandwidthGbps,
        ],
        FindingId::AmpUnused => &[ItemKey::TcEligiblePct, ItemKey::TensorCorePct, ItemKey::Gpu],
        FindingId::SyncBound => &[ItemKey::SyncPct, ItemKey::SyncCalls, ItemKey::TopCall],
        FindingId::LaunchBound => &[
            ItemKey::ShortKernelPct,
            ItemKey::HostWaitPct,
            ItemKey::LaunchIdlePctOfStep,
        ],
        FindingId::CommBound => &[
            ItemKey::CommunicationPct,
            ItemKey::CommOverlapPct,
            ItemKey::TbPluginCommunicationPct,
        ],
        FindingId::LowGpuUtil => &[ItemKey::GpuBusyPct],
        FindingId::Straggler => &[
            ItemKey::TraceStragglerRank,
            ItemKey::StepUs,
            ItemKey::MedianStepUs,
        ],
        _ => &[],
    }
}

/// `name=value, ...`: the deciding entries, or all of them when `all`.
pub(crate) fn evidence_list(f: &Finding, all: bool) -> String {
    let keys = deciding_keys(f.id);
    let shown: Vec<String> = f
        .evidence
        .iter()
        .filter(|i| all || keys.is_empty() || keys.contains(&i.key()))
        .map(|i| format!("{}={}", i.name(), i.json()))
        .collect();
    let hidden = f.evidence.len() - shown.len();
    if hidden > 0 {
        format!("{} (+{hidden} more with --verbose)", shown.join(", "))
    } else {
        shown.join(", ")
    }
}

pub fn text(r: &Report, show_steps: bool) -> String {
    text_with(r, show_steps, false)
}

/// The text report; `verbose` lists every evidence entry.
pub fn text_with(r: &Report, show_steps: bool, verbose: bool) -> String {
    super::fmt::terminal_safe(r, false, |r| text_raw(r, show_steps, verbose))
}

fn text_raw(r: &Report, show_steps: bool, verbose: bool) -> String {
    let mut o = String::new();
    for w in &r.warnings {
        let _ = writeln!(o, "warning: {w}");
    }
    if r.truncated {
        let _ = writeln!(
            o,
            "warning: truncated input: the figures cover only what was read"
        );
    }
    verdict_text(&mut o, r);
    for (i, t) in r.traces.iter().enumerate() {
        trace_text(&mut o, r, i, t, show_steps);
    }
    if r.ranks.len() > 1 {
        let _ = writeln!(o, "\nranks:");
        for l in &r.ranks {
            let _ = writeln!(
                o,
                "  rank {:>4}: {}, step {} ms, communication {:.0}%, GPU busy {}  ({})",
                l.rank.map(|x| x.to_string()).unwrap_or("?".into()),
                l.verdict.id,
                ms(l.step_us),
                l.communication_pct,
                l.gpu_busy_pct
                    .map(|x| format!("{x:.0}%"))
                    .unwrap_or("-".into()),
                std::path::Path::new(&l.path)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            );
        }
    }
    let _ = writeln!(o);
    findings_text(&mut o, r, verbose);
    o
}

/// One trace: its step breakdown, GPUs and streams, DataLoader, communication, copies, kernels
/// and syncs (and its steps with `show_steps`).
fn trace_text(o: &mut String, r: &Report, i: usize, t: &TraceSummary, show_steps: bool) {
    if r.traces.len() > 1 {
        let _ = writeln!(
            o,
            "\n== {} (rank {}) ==",
            t.path,
            t.rank.map(|x| x.to_string()).unwrap_or("?".into())
        );
    } else if i == 0 {
        let _ = writeln!(
            o,
            "{}: {} events, {} steps ({})",
            t.path,
            t.events,
            t.steps.len(),
            t.step_source
        );
    }
    let b = &t.breakdown;
    let _ = writeln!(
        o,
        "step time {} ms; TensorBoard-plugin breakdown (each moment booked once, GPU work first): {}",
        ms(b.total_us),
        breakdown_line(b)
    );
    devices_text(o, t);
    if t.dataloader.calls > 0 {
        let _ = writeln!(o, "{}", dataloader_line(t));
    }
    if let Some(l) = communication_line(t) {
        let _ = writeln!(o, "{l}");
    }
    for c in t.copies.iter().take(4) {
        let _ = writeln!(
            o,
            "copies {} {} -> {}: {} x, {}, {} ms, {:.1} GB/s",
            c.direction,
            c.src,
            c.dst,
            c.count,
            crate::present::fmt::bytes(c.bytes.max(0.0) as u64),
            ms(c.time_us),
            c.bandwidth_gbps
        );
    }
    if t.kernels.count > 0 {
        let f = &t.kernels.families;
        let _ = writeln!(
            o,
            "kernels: {} ({:.0}% under 10 µs), tensor cores {:.0}% of kernel time (tensor-core GEMM {} ms, attention {} ms), tensor-core-eligible ops {:.0}%",
            t.kernels.count,
            t.kernels.short_kernel_pct,
            t.kernels.tensor_core_pct,
            ms(f.tensor_core_gemm_us),
            ms(f.attention_us),
            t.kernels.tc_eligible_pct
        );
        let overlap = if f.communication_us > 0.0 {
            format!(
                " ({:.0}% overlapped by compute)",
                f.communication_overlap_pct
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            o,
            "communication kernels {:.0}% of kernel time{overlap}; TensorBoard plugin's tensor-core \
             figure (its kernel-name list only) {:.0}%",
            f.communication_pct, t.kernels.tb_plugin_tensor_core_pct
        );
    }
    if t.sync.calls > 0 || t.sync.cuda_sync_events > 0 {
        let _ = writeln!(
            o,
            "sync: {} blocking calls, {} ms ({:.1}% of the span)",
            t.sync.calls,
            ms(t.sync.time_us),
            t.sync.share_pct
        );
    }
    if show_steps {
        o.push_str(&steps_table(&t.steps, false));
    }
}

/// Each GPU's busy share and each stream's idle time by cause.
fn devices_text(o: &mut String, t: &TraceSummary) {
    for d in &t.devices {
        if d.kernels > 0 {
            let _ = writeln!(
                o,
                "GPU {}{}: busy {:.0}% of the steps, {} kernels",
                d.device,
                d.name
                    .as_ref()
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default(),
                d.busy_pct,
                d.kernels
            );
        }
        for s in &d.streams {
            let idle = s.host_wait_us + s.kernel_wait_us + s.other_us;
            if idle > 0.0 {
                let _ = writeln!(
                    o,
                    "  stream {}: idle {} ms (host wait {:.0}%, kernel wait {:.0}%, other {:.0}%)",
                    s.stream,
                    ms(idle),
                    pct(s.host_wait_us, idle),
                    pct(s.kernel_wait_us, idle),
                    pct(s.other_us, idle)
                );
            }
        }
    }
}

/// The findings after the top fix, which is only named again.
fn findings_text(o: &mut String, r: &Report, verbose: bool) {
    if !r.findings.is_empty() {
        let _ = writeln!(o, "findings (most important first):");
    }
    for (i, f) in r.findings.iter().enumerate() {
        if i == 0 {
            // Title, gain, fix and deciding numbers are said once, at the top.
            let _ = writeln!(
                o,
                "1. [{}] {}: the TOP FIX above",
                f.severity.as_str(),
                f.id
            );
            if verbose {
                let _ = writeln!(o, "   evidence: {}", evidence_list(f, true));
            }
            continue;
        }
        let gain = f
            .expected_speedup
            .map(|x| format!(" (up to {x:.2}x)"))
            .unwrap_or_default();
        let _ = writeln!(o, "{}. [{}] {}{gain}", i + 1, f.severity.as_str(), f.title);
        let _ = writeln!(o, "   evidence: {}", evidence_list(f, verbose));
        let _ = writeln!(o, "   fix: {}", f.recommendation);
    }
}

pub fn markdown(r: &Report, show_steps: bool) -> String {
    super::fmt::terminal_safe(r, false, |r| markdown_raw(r, show_steps))
}

fn markdown_raw(r: &Report, show_steps: bool) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "# gpufeed analyze\n");
    for w in &r.warnings {
        let _ = writeln!(o, "> **warning:** {w}");
    }
    if !r.warnings.is_empty() {
        let _ = writeln!(o);
    }
    let _ = writeln!(
        o,
        "**Verdict:** `{}` (confidence {:.2}) — {}\n",
        r.verdict.id, r.verdict.confidence, r.verdict.summary
    );
    let _ = writeln!(o, "## Findings\n");
    if r.findings.is_empty() {
        let _ = writeln!(o, "No rule fired.\n");
    }
    for f in &r.findings {
        let gain = f
            .expected_speedup
            .map(|x| format!(" — up to {x:.2}×"))
            .unwrap_or_default();
        let _ = writeln!(
            o,
            "### `{}` ({}){gain}\n\n{}\n",
            f.id,
            f.severity.as_str(),
            f.title
        );
        for i in &f.evidence {
            let _ = writeln!(o, "- `{}`: {}", i.name(), i.json());
        }
        let _ = writeln!(o, "\n**Fix:** {}\n", f.recommendation);
    }
    for t in &r.traces {
        let _ = writeln!(o, "## {}\n", t.path);
        let _ = writeln!(
            o,
            "Steps: {} ({}). Average step {} ms; TensorBoard-plugin breakdown: {}.\n",
            t.steps.len(),
            t.step_source,
            ms(t.breakdown.total_us),
            breakdown_line(&t.breakdown)
        );
        if t.dataloader.calls > 0 {
            let _ = writeln!(o, "{}.\n", dataloader_line(t));
        }
        if let Some(l) = communication_line(t) {
            let _ = writeln!(o, "{l}.\n");
        }
        if t.devices.is_empty() {
            let _ = writeln!(o, "No GPU events.");
        } else {
            let _ = writeln!(o, "| GPU | name | busy % | kernels |\n|---:|---|---:|---:|");
            for d in &t.devices {
                let _ = writeln!(
                    o,
                    "| {} | {} | {:.1} | {} |",
                    d.device,
                    d.name.clone().unwrap_or_default(),
                    d.busy_pct,
                    d.kernels
                );
            }
        }
        let _ = writeln!(o);
        if show_steps {
            o.push_str(&steps_table(&t.steps, true));
            let _ = writeln!(o);
        }
    }
    o
}

/// A few lines for the text report: the job, its stragglers and communication-bound ranks.
pub fn job_text(j: &RankJob) -> String {
    super::fmt::terminal_safe(j, false, job_text_raw)
}

fn job_text_raw(j: &RankJob) -> String {
    let none = |v: &[u64]| {
        if v.is_empty() {
            "none".to_string()
        } else {
            crate::trace::ranks::list(v)
        }
    };
    let mut s = format!(
        "job: {} of {} ranks{}, median step {}\n  straggler ranks: {}\n  communication-bound ranks: {}\n",
        j.ranks,
        j.world_size,
        if j.missing_ranks > 0 {
            format!(" ({} without a trace)", j.missing_ranks)
        } else {
            String::new()
        },
        j.median_step_us
            .map_or("-".into(), |u| format!("{:.1} ms", u / 1000.0)),
        none(&j.stragglers),
        none(&j.comm_bound),
    );
    s.push('\n');
    s
}
