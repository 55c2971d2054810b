//! Presenters for a [`DiagnoseReport`]: text for people (colour on a terminal, a sparkline of
//! utilization, the top fix first), JSON (the contract) and Markdown.

use super::fmt::{bytes, duration, gb_per_s, md_cell, md_code, md_prose, pct, plural};
use super::OutputFormat;
use crate::diagnose::evidence::{sites_heading, LoopSite, PhaseCode, PhasesPct, PythonEvidence};
use crate::diagnose::evidence::{GpuEvidence, JobEvidence, Role};
use crate::diagnose::verdict::VerdictId;
use crate::diagnose::DiagnoseReport;
use crate::finding::{Finding, FindingId, InputKind, Item, ItemKey, Kind, Severity, Unit};
use crate::sample::pyphase::Phase;
use crate::sample::pystacks::PyStatus;
use std::fmt::Write as _;

/// How the text report is laid out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TextOptions {
    /// ANSI colours.
    pub color: bool,
    /// Every finding with all of its evidence (the default shows the few deciding figures).
    pub verbose: bool,
    /// Printed after `gpufeed run`'s summary: no header line, and no GPU, host or job figure
    /// the summary above already gives.
    pub after_summary: bool,
}

/// Renders a report; `color` adds ANSI colours (text only). `diagnose --format` takes text,
/// JSON or Markdown (the HTML page is `--html`'s): HTML here gets the text.
pub fn render(report: &DiagnoseReport, format: OutputFormat, color: bool) -> String {
    render_with(
        report,
        format,
        TextOptions {
            color,
            ..Default::default()
        },
    )
}

/// Renders a report with the text layout's options.
pub fn render_with(report: &DiagnoseReport, format: OutputFormat, opts: TextOptions) -> String {
    match format {
        OutputFormat::Text | OutputFormat::Html => {
            super::fmt::terminal_safe(report, opts.color, |r| text(r, opts))
        }
        OutputFormat::Json => {
            let mut s = serde_json::to_string_pretty(report).expect("report serializes");
            s.push('\n');
            s
        }
        OutputFormat::Markdown => super::fmt::terminal_safe(report, false, markdown),
    }
}

const SPARKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// A Unicode sparkline of 0–100 % values, averaged down to at most `width` cells.
pub fn sparkline(values: &[f64], width: usize) -> String {
    if values.is_empty() || width == 0 {
        return String::new();
    }
    let cells = values.len().min(width);
    (0..cells)
        .map(|c| {
            let a = c * values.len() / cells;
            let b = ((c + 1) * values.len() / cells).max(a + 1);
            let m = values[a..b].iter().sum::<f64>() / (b - a) as f64;
            let i = ((m.clamp(0.0, 100.0) / 100.0) * 7.0).round() as usize;
            SPARKS[i.min(7)]
        })
        .collect()
}

fn paint(s: &str, code: &str, color: bool) -> String {
    if color {
        format!("\x1b[{code}m{s}\x1b[0m")
    } else {
        s.to_string()
    }
}

fn verdict_color(id: VerdictId) -> &'static str {
    match id {
        VerdictId::ComputeBound => "1;32",
        VerdictId::Unknown | VerdictId::Idle => "1;33",
        _ => "1;31",
    }
}

fn severity_color(s: Severity) -> &'static str {
    match s {
        Severity::Critical => "31",
        Severity::Warning => "33",
        Severity::Info => "36",
    }
}

/// Evidence a text report has already stated (beside a fix, in a verdict), with the value as
/// it was written: the lines of measured context leave those figures out, so that each number
/// is said once.
#[derive(Debug, Default)]
struct Said {
    keys: std::collections::BTreeMap<ItemKey, String>,
    /// The pooled GPU busy share as the verdict's sentence gives it (`33%`).
    busy: Option<String>,
}

impl Said {
    fn has(&self, key: ItemKey) -> bool {
        self.keys.contains_key(&key)
    }
    /// Whether `key` was said with this very value (a per-GPU figure equal to the pooled one).
    fn said_as(&self, key: ItemKey, value: &str) -> bool {
        self.keys.get(&key).is_some_and(|v| v == value)
    }
    fn add(&mut self, f: &Finding, keys: &[ItemKey]) {
        for k in keys {
            if let Some(i) = f.evidence.get(*k) {
                self.keys.insert(*k, evidence_value(i));
            }
        }
    }
}

/// The few evidence entries that decide a finding, shown beside its fix (every entry is in the
/// JSON and, in text, with `--verbose`). Figures the verdict's sentence or the fix's own text
/// already give are not among them (see `stated_by_fix`). Every id is named: a new one needs its
/// own line here.
pub(crate) fn deciding_keys(f: &Finding) -> &'static [ItemKey] {
    use FindingId as F;
    match (f.id, f.kind) {
        (F::SyncBound, Some(Kind::PythonStacks(_))) => &[ItemKey::SyncSitePct],
        // The title names the call and its share; beside the fix, what it costs.
        (F::HostBound, _) | (_, Some(Kind::Host(_))) => {
            &[ItemKey::HostCallS, ItemKey::CheckpointSPerSave]
        }
        // The verdict names the slowest stage and the training-loop block its share.
        (_, Some(Kind::PythonStacks(_))) => &[
            ItemKey::LoadingInMainPct,
            ItemKey::WorkerBusyPct,
            ItemKey::IdleCoresMean,
        ],
        (F::InputBound, Some(Kind::Input(InputKind::TooFewWorkers))) => &[
            ItemKey::WorkerCpuMeanPct,
            ItemKey::IdleCoresMean,
            ItemKey::UtilPeriodS,
        ],
        (F::InputBound, Some(Kind::Input(InputKind::CpuSaturated))) => &[
            ItemKey::HostCpuMeanPct,
            ItemKey::PsiCpuSomeMeanPct,
            ItemKey::WorkerCpuMeanPct,
            ItemKey::UtilPeriodS,
        ],
        (F::InputBound, Some(Kind::Input(InputKind::IoBound))) => &[
            ItemKey::DStateTimeFraction,
            ItemKey::PsiIoSomeMeanPct,
            ItemKey::JobReadMeanBytesPerS,
            ItemKey::UtilPeriodS,
        ],
        (F::InputBound, Some(Kind::Input(InputKind::MainProcess))) => &[
            ItemKey::MainCpuMeanPct,
            ItemKey::Workers,
            ItemKey::UtilPeriodS,
        ],
        (F::InputBound, Some(Kind::Input(InputKind::Unknown)) | None) => &[
            ItemKey::UtilPeriodS,
            ItemKey::UtilHighLevelPct,
            ItemKey::UtilLowLevelPct,
            ItemKey::UtilLowTimeFraction,
        ],
        (F::MainProcessBound, _) => &[
            ItemKey::MainCpuMeanPct,
            ItemKey::MainSaturatedFraction,
            ItemKey::Workers,
        ],
        (F::TransferBound, _) => &[
            ItemKey::RxMeanGbPerS,
            ItemKey::LinkCapacityGbPerS,
            ItemKey::RxNearCapacityTimeFraction,
        ],
        (F::PcieLinkDegraded, _) => &[
            ItemKey::LinkCapacityGbPerS,
            ItemKey::LinkCapacityMaxGbPerS,
            ItemKey::DegradedLoadedFraction,
        ],
        (F::Throttled, _) => &[ItemKey::TemperatureMeanC, ItemKey::PowerMeanW],
        (F::BatchTooSmall, _) => &[
            ItemKey::MemUsedMaxFraction,
            ItemKey::BatchScaleHeadroom,
            ItemKey::CandidateConfidence,
        ],
        (F::GpuImbalance, _) => &[ItemKey::UtilMaxPct, ItemKey::UtilMinPct],
        (F::GpuUnused, _) => &[ItemKey::GpusUsed, ItemKey::GpusTotal],
        (F::GpuIdle, _) => &[ItemKey::DurationS],
        // Beside the fix, the memory that makes room for a larger batch; not the compute
        // capability, mostly looked up from the GPU's name ("measured: compute capability 8"
        // for an 8.9 card).
        (F::ComputeBound, _) => &[ItemKey::MemUsedMaxFraction],
        // Trace findings (`analyze` has its own list) and those without deciding figures: the
        // first few entries are shown.
        (
            F::AmpUnused
            | F::CommBound
            | F::LaunchBound
            | F::LowGpuUtil
            | F::PageableMemcpy
            | F::Straggler
            | F::SyncBound,
            _,
        ) => &[],
    }
}

/// Evidence figures that the fix's own text states ("from 1 to 3 workers", "1.6 cores vs the
/// job's 0.4"): never repeated beside it or in the context lines.
fn stated_by_fix(f: &Finding) -> &'static [ItemKey] {
    match (f.id, f.kind) {
        (FindingId::InputBound, Some(Kind::Input(InputKind::TooFewWorkers))) => &[
            ItemKey::Workers,
            ItemKey::WorkersPerGpu,
            ItemKey::RecommendedNumWorkers,
            ItemKey::MaxUsefulWorkers,
        ],
        (FindingId::InputBound, Some(Kind::Input(InputKind::CpuSaturated))) => {
            &[ItemKey::OtherProcessesCores, ItemKey::JobCores]
        }
        _ => &[],
    }
}

/// An evidence value in the report's units: shares in %, rates in GB/s (decimal, as PCIe link
/// capacities are given), times in s; names and counts as they are.
pub(crate) fn evidence_value(i: &Item) -> String {
    let Some(x) = i.number() else {
        return match i.json() {
            serde_json::Value::String(s) => s,
            other => other.to_string(),
        };
    };
    match i.unit() {
        Unit::Fraction => pct(x * 100.0),
        Unit::Pct | Unit::PctOfCore => pct(x),
        Unit::GbPerS => gb_per_s(x * 1e9),
        Unit::BytesPerS => gb_per_s(x),
        Unit::Seconds => duration(x),
        Unit::Celsius => format!("{x:.0} °C"),
        Unit::Watts => format!("{x:.0} W"),
        Unit::Factor | Unit::Plain => i.json().to_string(),
    }
}

/// One evidence entry for people: `worker CPU 99% of a core`.
pub(crate) fn evidence_item(i: &Item) -> String {
    format!("{} {}{}", i.label(), evidence_value(i), i.unit().tail())
}

/// The deciding figures shown beside the top fix (those its own text says left out).
pub(crate) fn top_fix_measured(top: &Finding) -> String {
    evidence_list(top, false, stated_by_fix(top))
}

/// The deciding entries of a finding as a short named list, or all of them with `all`; keys in
/// `skip` (already said) are left out.
fn evidence_list(f: &Finding, all: bool, skip: &[ItemKey]) -> String {
    let keys = deciding_keys(f);
    let chosen: Vec<&Item> = if all {
        f.evidence.iter().collect()
    } else if keys.is_empty() {
        f.evidence.iter().take(4).collect()
    } else {
        keys.iter().filter_map(|k| f.evidence.get(*k)).collect()
    };
    chosen
        .into_iter()
        .filter(|i| all || !skip.contains(&i.key()))
        .map(|i| {
            if all {
                format!("{}={}", i.name(), evidence_value(i))
            } else {
                evidence_item(i)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn gpu_line(g: &GpuEvidence, mean_said: bool) -> String {
    let mut s = format!("GPU {}", g.index);
    if let Some(n) = &g.name {
        let _ = write!(s, "  {n}");
    }
    // Two clear levels say more than percentiles, which then only repeat them.
    let bimodal = g.util_split.is_some_and(|s| s.is_bimodal());
    match g.util_mean_pct {
        Some(_) if mean_said && bimodal => {}
        Some(m) => {
            let dist = match (g.util_p10_pct, g.util_p50_pct, g.util_p90_pct) {
                _ if bimodal => String::new(),
                (Some(a), Some(b), Some(c)) => {
                    format!("p10 {}, p50 {}, p90 {}", pct(a), pct(b), pct(c))
                }
                _ => String::new(),
            };
            match (mean_said, dist.is_empty()) {
                (true, false) => {
                    let _ = write!(s, "  utilization {dist}");
                }
                (false, false) => {
                    let _ = write!(s, "  utilization {} mean ({dist})", pct(m));
                }
                _ => {
                    let _ = write!(s, "  utilization {} mean", pct(m));
                }
            }
        }
        None => s.push_str("  no utilization samples"),
    }
    match (g.mem_used_max_bytes, g.mem_total_bytes) {
        (Some(u), Some(t)) => {
            let _ = write!(s, "  memory {} / {}", bytes(u), bytes(t));
        }
        (Some(u), None) => {
            let _ = write!(s, "  memory {} used", bytes(u));
        }
        _ => {}
    }
    s
}

fn gpu_pattern(g: &GpuEvidence, said: &Said) -> Option<String> {
    let mut parts = Vec::new();
    if let Some(p) = g.periodicity.filter(|p| p.is_strong()) {
        if said.said_as(ItemKey::UtilPeriodS, &duration(p.period_s)) {
            parts.push(format!("repeat strength {:.2}", p.strength));
        } else {
            parts.push(format!(
                "repeats every {} (strength {:.2})",
                duration(p.period_s),
                p.strength
            ));
        }
    }
    if let Some(sp) = g.util_split.filter(|s| s.is_bimodal()) {
        let levels_said = said.said_as(ItemKey::UtilHighLevelPct, &pct(sp.high_mean_pct))
            && said.said_as(ItemKey::UtilLowLevelPct, &pct(sp.low_mean_pct));
        let low = pct(sp.low_weight * 100.0);
        let low_said = said.said_as(ItemKey::UtilLowTimeFraction, &low);
        if levels_said && !low_said {
            parts.push(format!("starved {low} of the time"));
        } else if !levels_said {
            parts.push(format!(
                "two levels: {} and {} (low {} of the time)",
                pct(sp.high_mean_pct),
                pct(sp.low_mean_pct),
                pct(sp.low_weight * 100.0)
            ));
        }
    }
    if let Some(p) = &g.profiling {
        if let Some(a) = p.sm_active_pct {
            parts.push(format!("SM active {}", pct(a)));
        }
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

fn proc_name(cmd: &Option<String>) -> String {
    let c = cmd.as_deref().unwrap_or("?");
    if c.chars().count() > 60 {
        format!("{}…", c.chars().take(59).collect::<String>())
    } else {
        c.to_string()
    }
}

fn host_line(r: &DiagnoseReport, said: &Said, after_summary: bool) -> Option<String> {
    let h = &r.host;
    if h.samples == 0 {
        return None;
    }
    let mut parts = Vec::new();
    if !after_summary {
        if let Some(n) = h.cpu_count {
            parts.push(plural(n as usize, "CPU", "CPUs"));
        }
        if let Some(c) = h
            .cpu_mean_pct
            .filter(|_| !said.has(ItemKey::HostCpuMeanPct))
        {
            parts.push(format!("{} busy", pct(c)));
        }
    }
    if let Some(i) = h
        .idle_cores_mean
        .filter(|_| !said.has(ItemKey::IdleCoresMean))
    {
        parts.push(format!("{i:.1} cores idle on average"));
    }
    let mut s = parts.join(", ");
    let psi: Vec<String> = [
        (
            "cpu",
            h.psi_cpu_some_mean_pct,
            Some(ItemKey::PsiCpuSomeMeanPct),
        ),
        (
            "io",
            h.psi_io_some_mean_pct,
            Some(ItemKey::PsiIoSomeMeanPct),
        ),
        // No finding gives memory pressure.
        ("memory", h.psi_mem_some_mean_pct, None),
    ]
    .iter()
    .filter(|(_, _, k)| !k.is_some_and(|k| said.has(k)))
    .filter_map(|(n, v, _)| v.map(|v| format!("{n} {}", pct(v))))
    .collect();
    let mut more = Vec::new();
    if !psi.is_empty() {
        more.push(format!("pressure {}", psi.join(", ")));
    }
    if let Some(d) = h
        .disk_read_mean_bytes_per_s
        .filter(|_| !said.has(ItemKey::DiskReadMeanBytesPerS))
    {
        more.push(format!("disk reads {}", gb_per_s(d)));
    }
    if !more.is_empty() {
        if !s.is_empty() {
            s.push_str("; ");
        }
        s.push_str(&more.join("; "));
    }
    (!s.is_empty()).then_some(s)
}

fn job_line(r: &DiagnoseReport, said: &Said) -> Option<String> {
    let j = &r.job;
    if j.samples == 0 && j.processes.is_empty() {
        return None;
    }
    let mut s = String::new();
    if let Some(p) = j.main_pid {
        let _ = write!(s, "main pid {p} `{}`", proc_name(&j.main_cmd));
    }
    if let Some(c) = j
        .main_cpu_mean_pct
        .filter(|_| !said.has(ItemKey::MainCpuMeanPct))
    {
        let _ = write!(s, " at {} of a core", pct(c));
    }
    let count_said = said.has(ItemKey::Workers);
    let cpu_said = said.has(ItemKey::WorkerCpuMeanPct);
    if j.workers_max > 0 {
        match (count_said, j.worker_cpu_mean_pct.filter(|_| !cpu_said)) {
            (false, Some(w)) if j.workers_max == 1 => {
                let _ = write!(s, "; 1 worker at {} of a core", pct(w));
            }
            (false, Some(w)) => {
                let _ = write!(
                    s,
                    "; {} at {} of a core each",
                    plural(j.workers_max as usize, "worker", "workers"),
                    pct(w)
                );
            }
            (false, None) => {
                let _ = write!(
                    s,
                    "; {}",
                    plural(j.workers_max as usize, "worker", "workers")
                );
            }
            (true, Some(w)) => {
                let _ = write!(s, "; workers at {} of a core each", pct(w));
            }
            (true, None) => {}
        }
    } else if !count_said {
        s.push_str("; no worker processes");
    }
    if let Some(d) = j
        .d_state_time_fraction
        .filter(|d| *d > 0.0 && !said.has(ItemKey::DStateTimeFraction))
    {
        let _ = write!(s, "; D state {} of the time", pct(d * 100.0));
    }
    match (j.exit_code, j.signal) {
        (Some(c), _) => {
            let _ = write!(s, "; exit {c}");
        }
        (None, Some(sig)) => {
            let _ = write!(s, "; killed by signal {sig}");
        }
        _ => {}
    }
    Some(s.trim_start_matches("; ").to_string())
}

/// The pooled busy share as the verdict's sentence gives it, if it does.
fn busy_in_verdict(r: &DiagnoseReport) -> Option<String> {
    r.verdict
        .gpu_busy_fraction
        .map(|b| format!("{:.0}%", b * 100.0))
        .filter(|b| r.verdict.summary.contains(b.as_str()))
}

/// Whether the verdict's sentence gives the pooled busy share (then a GPU line with the same
/// mean does not).
pub(crate) fn verdict_states_busy(r: &DiagnoseReport) -> bool {
    busy_in_verdict(r).is_some()
}

fn text(r: &DiagnoseReport, opts: TextOptions) -> String {
    let mut o = String::new();
    if !opts.after_summary {
        source_text(&mut o, r, opts.color);
    }
    verdict_text(&mut o, r, opts.color);
    let mut said = Said {
        busy: busy_in_verdict(r),
        ..Default::default()
    };
    top_fix_text(&mut o, r, opts.color, &mut said);
    let rest: &[Finding] = if opts.verbose {
        &r.findings
    } else {
        r.findings.get(1..).unwrap_or(&[])
    };
    // What the top fix's line said is not said again under another finding.
    let said_by_top: Vec<ItemKey> = said.keys.keys().copied().collect();
    for f in rest {
        said.add(f, deciding_keys(f));
    }
    o.push('\n');
    for g in &r.gpus {
        gpu_text(&mut o, r, g, opts, &said);
    }
    if let Some(h) = host_line(r, &said, opts.after_summary) {
        let _ = writeln!(o, "{}  {h}", paint("HOST", "1", opts.color));
    }
    if !opts.after_summary {
        if let Some(j) = job_line(r, &said) {
            let _ = writeln!(o, "{}   {j}", paint("JOB", "1", opts.color));
        }
    }
    if let Some(p) = &r.python {
        let block = loop_text(r, p, &r.job, opts.color);
        if !block.is_empty() {
            o.push('\n');
            o.push_str(&block);
        }
    }
    if r.findings.is_empty() {
        o.push('\n');
        let _ = writeln!(o, "{}", no_findings(r));
    } else if !rest.is_empty() {
        findings_text(&mut o, r, rest, opts, &said_by_top);
    }
    notes_text(&mut o, r, opts);
    o
}

/// `gpufeed diagnose: PATH (format, duration, N GPUs)`, and a warning for an unfinished file.
fn source_text(o: &mut String, r: &DiagnoseReport, color: bool) {
    let gpus = r.gpus.iter().filter(|g| g.util_mean_pct.is_some()).count();
    let _ = writeln!(
        o,
        "{} {} ({}, {}, {})",
        paint("gpufeed diagnose:", "1", color),
        r.source.path,
        r.source.format.as_str().replace('_', " "),
        duration(r.duration_s),
        plural(gpus, "GPU", "GPUs"),
    );
    if r.source.unfinished {
        let _ = writeln!(
            o,
            "{} the recording is unfinished (no end line: the recorder was killed or is still running); the figures cover what was written",
            paint("warning:", "33", color),
        );
    }
    o.push('\n');
}

/// The verdict, its sentence, and every GPU's state when there are several.
fn verdict_text(o: &mut String, r: &DiagnoseReport, color: bool) {
    let _ = writeln!(
        o,
        "{}  {}  (confidence {:.2})",
        paint("VERDICT", "1", color),
        paint(r.verdict.id.as_str(), verdict_color(r.verdict.id), color),
        r.verdict.confidence
    );
    let _ = writeln!(o, "         {}", r.verdict.summary);
    // Every GPU judged: a pooled verdict never hides one GPU's state.
    let states = &r.verdict.gpus;
    let differ = states.windows(2).any(|w| w[0].state != w[1].state);
    if differ && states.len() <= 16 {
        // GPUs that differ get a verdict each, one row per GPU.
        for g in r.gpus.iter() {
            if let Some(v) = &g.verdict {
                let _ = writeln!(
                    o,
                    "         GPU {:<3} {:<13} {}",
                    g.index,
                    v.state.as_str(),
                    v.summary
                );
            }
        }
    } else if states.len() > 1 {
        let _ = writeln!(
            o,
            "         {}",
            crate::diagnose::verdict::states_line(states)
        );
    }
}

/// The first finding's fix with its gain and deciding figures; what it says goes into `said`.
fn top_fix_text(o: &mut String, r: &DiagnoseReport, color: bool, said: &mut Said) {
    let Some(top) = r.findings.first() else {
        return;
    };
    o.push('\n');
    // The verdict's sentence already says what its own finding's title says.
    if r.verdict.finding == Some(top.id) {
        let _ = writeln!(
            o,
            "{}  {}",
            paint("TOP FIX", "1", color),
            top.recommendation
        );
    } else {
        let _ = writeln!(o, "{}  {}", paint("TOP FIX", "1", color), top.title);
        let _ = writeln!(o, "         {}", top.recommendation);
    }
    let skip = stated_by_fix(top);
    let because = evidence_list(top, false, skip);
    let gain = top
        .expected_speedup
        .map(|x| format!("up to {x:.2}x faster"));
    let line: Vec<String> = gain
        .into_iter()
        .chain((!because.is_empty()).then(|| format!("measured: {because}")))
        .collect();
    if !line.is_empty() {
        let _ = writeln!(o, "         {}", line.join("; "));
    }
    said.add(top, deciding_keys(top));
    said.add(top, skip);
}

/// One GPU: its figures (unless `run`'s summary gave them), its timeline, a zoom on the last
/// stretch when it repeats, and its pattern.
fn gpu_text(o: &mut String, r: &DiagnoseReport, g: &GpuEvidence, opts: TextOptions, said: &Said) {
    let color = opts.color;
    let mean = g.util_mean_pct.map(|m| format!("{m:.0}%"));
    let mean_said = mean.is_some()
        && (said.busy == mean || said.keys.get(&ItemKey::GpuBusyFraction) == mean.as_ref());
    if !opts.after_summary {
        let _ = writeln!(o, "{}", gpu_line(g, mean_said));
    } else if !g.timeline_pct.is_empty() {
        let _ = writeln!(o, "GPU {} utilization", g.index);
    }
    if !g.timeline_pct.is_empty() {
        let line = sparkline(&g.timeline_pct, 60);
        let cells = line.chars().count().max(1);
        // The timeline spans what was judged: a log's start-up and idle stretches are cut out
        // of it (a 4-minute job in a 10-minute log read "10.0 s/cell" for 4 s cells).
        let span_s = if g.timeline_step_s > 0.0 {
            g.timeline_pct.len() as f64 * g.timeline_step_s
        } else {
            r.duration_s
        };
        let per = span_s / cells as f64;
        let _ = writeln!(
            o,
            "  {}  {}/cell",
            paint(&line, "36", color),
            duration(per.max(g.timeline_step_s.min(r.duration_s.max(0.1))))
        );
    }
    let pattern = gpu_pattern(g, said);
    let zoom = g.periodicity.is_some_and(|p| p.is_strong())
        || g.util_split.is_some_and(|s| s.is_bimodal());
    if zoom && g.recent_pct.len() >= 8 && g.recent_step_s > 0.0 {
        let _ = writeln!(
            o,
            "  {}  last {} at {}/cell",
            paint(&sparkline(&g.recent_pct, 60), "36", color),
            duration(g.recent_pct.len() as f64 * g.recent_step_s),
            duration(g.recent_step_s)
        );
    }
    if let Some(p) = pattern {
        let _ = writeln!(o, "  {p}");
    }
}

/// The findings after the top fix (all of them with `--verbose`), without the figures the top
/// fix's line gave (`skip`).
fn findings_text(
    o: &mut String,
    r: &DiagnoseReport,
    rest: &[Finding],
    opts: TextOptions,
    skip: &[ItemKey],
) {
    let color = opts.color;
    o.push('\n');
    let head = if opts.verbose {
        "FINDINGS"
    } else {
        "OTHER FINDINGS"
    };
    let _ = writeln!(o, "{}", paint(head, "1", color));
    for (i, f) in rest.iter().enumerate() {
        let is_top = opts.verbose && i == 0;
        // A finding the verdict rests on is named by the verdict's sentence.
        let title = if r.verdict.finding == Some(f.id) {
            String::new()
        } else {
            format!(": {}", f.title)
        };
        let _ = writeln!(
            o,
            "  [{}] {}{title}",
            paint(f.severity.as_str(), severity_color(f.severity), color),
            paint(f.id.as_str(), "1", color),
        );
        let ev = evidence_list(f, opts.verbose, if is_top { &[] } else { skip });
        if !ev.is_empty() {
            let _ = writeln!(o, "      evidence: {ev}");
        }
        if is_top {
            let _ = writeln!(o, "      fix: the TOP FIX above");
            continue;
        }
        let _ = writeln!(o, "      fix: {}", f.recommendation);
        if let Some(x) = f.expected_speedup {
            let _ = writeln!(o, "      up to {x:.2}x faster");
        }
    }
}

/// The notes no fix already says, and where every figure is.
fn notes_text(o: &mut String, r: &DiagnoseReport, opts: TextOptions) {
    // A note whose opening clause a fix already says ("gpufeed reads no host or process data")
    // is not said again (it stays in the JSON).
    let fixes: Vec<&str> = r
        .findings
        .iter()
        .map(|f| f.recommendation.as_str())
        .collect();
    let notes: Vec<&String> = r
        .notes
        .iter()
        .filter(|n| {
            let head = n.split(':').next().unwrap_or(n);
            opts.verbose || head.len() < 20 || !fixes.iter().any(|f| f.contains(head))
        })
        .collect();
    if !notes.is_empty() {
        o.push('\n');
        for n in notes {
            let _ = writeln!(o, "{}  {n}", paint("NOTE", "2", opts.color));
        }
    }
    if !opts.verbose
        && r.findings
            .iter()
            .any(|f| f.evidence.len() > deciding_keys(f).len())
    {
        let _ = writeln!(
            o,
            "\n{}",
            if opts.after_summary {
                "(every figure: gpufeed diagnose --verbose on the recording)"
            } else {
                "(every figure: --verbose, or --format json)"
            }
        );
    }
}

/// The training loop's phases as a report shows them, and whether the data wait is the step
/// markers' rather than the stacks' own share. Every place that prints a data wait prints the
/// report's one figure ([`DiagnoseReport::data_wait`]): where the markers measured it and the
/// stacks' share differs, the phases give the markers' wait and split the rest of the loop's
/// time as the stack samples split theirs (the diagnosis's note says why the two differ).
pub(crate) fn loop_phases(r: &DiagnoseReport, stacks: &PhasesPct) -> (PhasesPct, bool) {
    let Some(w) = r
        .data_wait()
        .filter(|w| w.source == crate::finding::WaitSource::StepProbe)
        .map(|w| w.pct.clamp(0.0, 100.0))
        .filter(|w| (w - stacks.data_wait).abs() >= 0.05)
    else {
        return (stacks.clone(), false);
    };
    let rest = 100.0 - stacks.data_wait;
    let mut p = if rest > 0.0 {
        let k = (100.0 - w) / rest;
        PhasesPct {
            data_wait: w,
            forward: stacks.forward * k,
            backward: stacks.backward * k,
            optimizer: stacks.optimizer * k,
            sync: stacks.sync * k,
            checkpoint_io: stacks.checkpoint_io * k,
            evaluation: stacks.evaluation * k,
            other: stacks.other * k,
        }
    } else {
        // The stacks saw nothing but the wait: the rest is not placed.
        PhasesPct {
            data_wait: w,
            other: 100.0 - w,
            ..Default::default()
        }
    };
    p.data_wait = w;
    (p, true)
}

/// The caption of a phase split whose data wait is the step markers'.
pub(crate) const PHASES_FROM_MARKERS: &str =
    "data wait from the step markers, the rest of the loop's time split as the stack samples \
     split theirs; a note says why the stacks' own share differs";

/// Hot stages shown in reports.
pub const HOTSPOTS_SHOWN: usize = 5;

/// The phases in report order with their share, largest first for the bar.
fn phase_list(p: &PhasesPct) -> Vec<(&'static str, f64)> {
    Phase::ALL
        .iter()
        .map(|ph| (ph.as_str(), p.get(*ph)))
        .collect()
}

/// `forward 31%`; a share that rounds to 0 is still there, so it reads `<1%`, not `0%`.
fn phase_share(name: &str, pct: f64) -> String {
    match format!("{pct:.0}") {
        z if z == "0" => format!("{name} <1%"),
        p => format!("{name} {p}%"),
    }
}

/// A 40-cell bar of the phase split, one letter per phase.
fn phase_bar(p: &PhasesPct) -> String {
    const LETTERS: [char; Phase::ALL.len()] = ['D', 'F', 'B', 'O', 'S', 'C', 'E', '.'];
    let mut s = String::new();
    let mut acc = 0.0;
    let mut drawn = 0usize;
    for (i, (_, v)) in phase_list(p).iter().enumerate() {
        acc += v;
        let upto = ((acc / 100.0) * 40.0).round() as usize;
        while drawn < upto.min(40) {
            s.push(LETTERS[i]);
            drawn += 1;
        }
    }
    s
}

/// The phases whose code reports list: all but a data wait whose loading stages are listed
/// already (the stage list names the same code, per sample).
pub(crate) fn shown_loop_code(p: &PythonEvidence) -> impl Iterator<Item = &PhaseCode> {
    p.loop_code
        .iter()
        .filter(|c| c.phase != Phase::DataWait || p.data_hotspots.is_empty())
}

/// The user's functions a phase's time goes to, one line each: share of the loop, function,
/// `file:line`, the line's source and, where the time is inside a library, what it calls.
fn sites_text(sites: &[LoopSite], rest_pct: f64, rest_functions: u32) -> String {
    let mut o = String::new();
    for s in sites {
        let _ = writeln!(
            o,
            "    {:>5.1}%  {:<36} {}{}{}",
            s.pct,
            s.name(),
            s.at(),
            s.code
                .as_deref()
                .map(|c| format!("  `{}`", c.trim()))
                .unwrap_or_default(),
            s.calls
                .as_deref()
                .map(|c| format!("  (in {c})"))
                .unwrap_or_default()
        );
    }
    if rest_functions > 0 {
        let _ = writeln!(
            o,
            "    {rest_pct:>5.1}%  {} more",
            plural(rest_functions as usize, "function", "functions")
        );
    }
    o
}

/// The user's functions of a phase as Markdown rows.
fn sites_markdown(o: &mut String, sites: &[LoopSite]) {
    let _ = writeln!(
        o,
        "| share of the loop | function | where | line | in |\n|---|---|---|---|---|"
    );
    for s in sites {
        let _ = writeln!(
            o,
            "| {:.1}% | {} | {} | {} | {} |",
            s.pct,
            md_code(&s.name()),
            md_code(&s.at()),
            s.code
                .as_deref()
                .map(|c| md_code(c.trim()))
                .unwrap_or_default(),
            s.calls.as_deref().map(md_code).unwrap_or_default()
        );
    }
}

/// The ranks of a multi-process job, one line each, and the one that starves the others.
fn ranks_text(p: &PythonEvidence) -> String {
    let mut o = String::new();
    if p.ranks.is_empty() && p.ranks_unread.is_empty() {
        return o;
    }
    let main = p.main.as_ref().map(|m| m.pid);
    let which = match p.ranks.iter().find(|r| Some(r.pid) == main) {
        Some(r) if p.main_waited_for => format!(
            "the loop above is {}'s, the rank the others wait for in collectives",
            r.label()
        ),
        _ => "the loop above is the median rank by data wait".to_string(),
    };
    let _ = writeln!(
        o,
        "  {} ranks ({which}):",
        p.ranks.len() + p.ranks_unread.len()
    );
    for r in &p.ranks {
        let ph = &r.phases_pct;
        let _ = writeln!(
            o,
            "    {:<8} pid {:<7} data_wait {:>5.1}%  forward {:>5.1}%  backward {:>5.1}%  \
             sync {:>5.1}%{}{}",
            r.rank.map_or_else(String::new, |n| format!("rank {n}")),
            r.pid,
            r.data_wait_pct,
            ph.forward,
            ph.backward,
            ph.sync,
            r.steps_per_s
                .map(|s| format!("  {s:.2} steps/s"))
                .unwrap_or_default(),
            r.data_hotspots
                .first()
                .map(|h| format!("  slowest stage {}", h.name()))
                .unwrap_or_default()
        );
    }
    for pid in &p.ranks_unread {
        let _ = writeln!(
            o,
            "    pid {pid}: no loop to split (not Python, exited early or restarted, or too few samples)"
        );
    }
    if let Some(s) = &p.slow_rank {
        let who = s
            .rank
            .map_or(format!("pid {}", s.pid), |r| format!("rank {r}"));
        let _ = writeln!(
            o,
            "  {who} starves the others: it waits {:.1}% of its time for data, the others \
             {:.1}% (they wait for it in the collective)",
            s.data_wait_pct, s.others_data_wait_pct
        );
    }
    o
}

/// The loop's phase shares (with the report's one data wait) and their bar.
fn phases_text(r: &DiagnoseReport, stacks: &PhasesPct, color: bool) -> String {
    let mut o = String::new();
    let (phases, from_markers) = loop_phases(r, stacks);
    let parts: Vec<String> = phase_list(&phases)
        .into_iter()
        .filter(|(_, v)| *v > 0.0)
        .map(|(n, v)| phase_share(n, v))
        .collect();
    let _ = writeln!(o, "  {}", parts.join("  "));
    if from_markers {
        let _ = writeln!(o, "  ({PHASES_FROM_MARKERS})");
    }
    let _ = writeln!(
        o,
        "  {}  D data_wait F forward B backward O optimizer S sync C checkpoint E evaluation",
        paint(&phase_bar(&phases), "36", color)
    );
    o
}

/// The "training loop" block of the text report.
fn loop_text(r: &DiagnoseReport, p: &PythonEvidence, job: &JobEvidence, color: bool) -> String {
    let mut o = String::new();
    match p.status {
        PyStatus::Ok => {}
        PyStatus::NotPython => return o,
        other => {
            let _ = writeln!(
                o,
                "{}  Python stacks not read ({}){}",
                paint("TRAINING LOOP", "1", color),
                other.as_str(),
                p.detail
                    .as_ref()
                    .map(|d| format!(": {d}"))
                    .unwrap_or_default()
            );
            return o;
        }
    }
    let Some(m) = &p.main else {
        if p.no_loop_sites.is_empty() {
            let _ = writeln!(
                o,
                "{}  too few Python stack samples of the training thread to split it",
                paint("TRAINING LOOP", "1", color)
            );
        } else {
            let _ = writeln!(
                o,
                "{}  none: the job ran no training step (no forward or backward pass, no \
                 optimizer step, no batch fetched in its Python stacks); its main thread's time \
                 goes to:",
                paint("TRAINING LOOP", "1", color)
            );
            o.push_str(&sites_text(&p.no_loop_sites, 0.0, 0));
        }
        return o;
    };
    let _ = writeln!(
        o,
        "{}  (Python stacks: pid {} thread {}, {} samples{})",
        paint("TRAINING LOOP", "1", color),
        m.pid,
        m.thread_name.as_deref().unwrap_or("?"),
        m.samples,
        p.rate_hz
            .map(|r| format!(" at {r:.0} Hz"))
            .unwrap_or_default()
    );
    o.push_str(&phases_text(r, &m.phases_pct, color));
    for c in shown_loop_code(p) {
        let _ = writeln!(
            o,
            "  {} of the loop, {}:",
            phase_share(c.phase.as_str(), c.pct),
            sites_heading(&c.sites)
        );
        o.push_str(&sites_text(&c.sites, c.rest_pct, c.rest_functions));
    }
    o.push_str(&ranks_text(p));
    if !p.data_hotspots.is_empty() {
        // Workers that come and go (started anew every epoch) are many processes over the run,
        // few at once.
        let at_once = if job.workers_max > 0 && p.loader_processes > job.workers_max {
            format!(" over the run, at most {} at once;", job.workers_max)
        } else {
            ",".into()
        };
        let _ = writeln!(
            o,
            "  slowest data-loading stages ({} process{}{at_once} share of loading time):",
            p.loader_processes.max(1),
            if p.loader_processes > 1 { "es" } else { "" }
        );
        for h in p.data_hotspots.iter().take(HOTSPOTS_SHOWN) {
            let _ = writeln!(
                o,
                "    {:>5.1}%  {:<36} {}{}",
                h.pct,
                h.name(),
                h.at(),
                h.ms_per_sample
                    .map(
                        |x| match h.core_wait_ms_per_sample.filter(|w| *w >= 0.005) {
                            Some(w) => format!(
                                "  {}/sample (+{} waiting for a core)",
                                crate::units::ms(x),
                                crate::units::ms(w)
                            ),
                            None => format!("  {}/sample", crate::units::ms(x)),
                        }
                    )
                    .unwrap_or_default()
            );
        }
    }
    o
}

/// The "training loop" section of the Markdown report.
fn loop_markdown(r: &DiagnoseReport, p: &PythonEvidence) -> String {
    let mut o = String::new();
    if p.status == PyStatus::NotPython {
        return o;
    }
    let _ = writeln!(o, "## Training loop\n");
    if p.status != PyStatus::Ok {
        let _ = writeln!(
            o,
            "Python stacks not read (`{}`){}\n",
            p.status.as_str(),
            p.detail
                .as_ref()
                .map(|d| format!(": {}", md_cell(d)))
                .unwrap_or_default()
        );
        return o;
    }
    if let Some(m) = &p.main {
        let _ = writeln!(
            o,
            "From Python stack samples of pid {} (thread {}), {} samples.\n",
            m.pid,
            md_cell(m.thread_name.as_deref().unwrap_or("?")),
            m.samples
        );
        let (phases, from_markers) = loop_phases(r, &m.phases_pct);
        let _ = writeln!(o, "| phase | share |\n|---|---|");
        for (n, v) in phase_list(&phases) {
            let _ = writeln!(o, "| {n} | {v:.1}% |");
        }
        o.push('\n');
        if from_markers {
            let _ = writeln!(o, "({PHASES_FROM_MARKERS}.)\n");
        }
        for c in shown_loop_code(p) {
            let _ = writeln!(
                o,
                "{} of the loop, {}:\n",
                phase_share(c.phase.as_str(), c.pct),
                sites_heading(&c.sites)
            );
            sites_markdown(&mut o, &c.sites);
            o.push('\n');
        }
    } else if !p.no_loop_sites.is_empty() {
        let _ = writeln!(
            o,
            "No training loop: the job ran no training step; its main thread's time goes to:\n"
        );
        sites_markdown(&mut o, &p.no_loop_sites);
        o.push('\n');
    }
    if !p.data_hotspots.is_empty() {
        let _ = writeln!(
            o,
            "Slowest data-loading stages:\n\n| share of loading | stage | where |\n|---|---|---|"
        );
        for h in p.data_hotspots.iter().take(HOTSPOTS_SHOWN) {
            let _ = writeln!(
                o,
                "| {:.1}% | {} | {} |",
                h.pct,
                md_code(&h.name()),
                md_code(&h.at())
            );
        }
        o.push('\n');
    }
    o
}

/// The line shown when there are no findings: an unknown verdict never claims that nothing
/// holds the GPU back (its summary says which data is missing).
pub(crate) fn no_findings(r: &DiagnoseReport) -> &'static str {
    if r.verdict.id == VerdictId::Unknown {
        "No findings: this input cannot name a cause (the verdict says what data would)."
    } else if r.verdict.gpu_busy_fraction.is_none() {
        // A verdict from the training loop alone (no GPU measured).
        "No findings: the training loop does not wait for its input (the verdict says where its time goes)."
    } else {
        "No findings: nothing is holding the GPU back in this recording."
    }
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map(|x| format!("{x:.digits$}"))
        .unwrap_or_else(|| "–".into())
}

fn markdown(r: &DiagnoseReport) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "# gpufeed diagnosis: {}\n", md_code(&r.source.path));
    let _ = writeln!(
        o,
        "Input: {} · duration {} · {}\n",
        r.source.format.as_str().replace('_', " "),
        duration(r.duration_s),
        plural(r.gpus.len(), "GPU", "GPUs")
    );
    if r.source.unfinished {
        let _ = writeln!(
            o,
            "**Unfinished recording** (no end line: the recorder was killed or is still running); the figures cover what was written.\n"
        );
    }
    let _ = writeln!(
        o,
        "**Verdict: `{}`** (confidence {:.2}): {}\n",
        r.verdict.id,
        r.verdict.confidence,
        md_prose(&r.verdict.summary)
    );
    if let Some(top) = r.findings.first() {
        let _ = writeln!(o, "## Top fix\n\n{}\n", md_prose(&top.recommendation));
        if let Some(code) = &top.apply {
            let _ = writeln!(o, "```python\n{code}\n```\n");
        }
        if let Some(x) = top.expected_speedup {
            let _ = writeln!(o, "Expected speed-up: up to **{x:.2}x**.\n");
        }
    }
    findings_markdown(&mut o, r);
    if let Some(p) = &r.python {
        o.push_str(&loop_markdown(r, p));
    }
    gpus_markdown(&mut o, r);
    if let Some(h) = host_line(r, &Said::default(), false) {
        let _ = writeln!(o, "## Host\n\n{}\n", md_prose(&h));
    }
    job_markdown(&mut o, r);
    if !r.notes.is_empty() {
        let _ = writeln!(o, "## Notes\n");
        for n in &r.notes {
            let _ = writeln!(o, "- {}", md_prose(n));
        }
        o.push('\n');
    }
    o
}

/// The findings' table, then each one's evidence and fix.
fn findings_markdown(o: &mut String, r: &DiagnoseReport) {
    let _ = writeln!(o, "## Findings\n");
    if r.findings.is_empty() {
        let _ = writeln!(o, "{}\n", no_findings(r));
    } else {
        let _ = writeln!(
            o,
            "| severity | id | finding | speed-up |\n|---|---|---|---|"
        );
        for f in &r.findings {
            let _ = writeln!(
                o,
                "| {} | `{}` | {} | {} |",
                f.severity.as_str(),
                f.id,
                md_cell(&f.title),
                f.expected_speedup
                    .map(|x| format!("{x:.2}x"))
                    .unwrap_or_else(|| "–".into())
            );
        }
        o.push('\n');
        for (i, f) in r.findings.iter().enumerate() {
            // The title is in the table above.
            let _ = writeln!(o, "### `{}`\n", f.id);
            let _ = writeln!(o, "| evidence | value |\n|---|---|");
            for i in &f.evidence {
                let _ = writeln!(o, "| {} | {} |", i.name(), md_cell(&evidence_value(i)));
            }
            if i == 0 {
                // Said once, under "Top fix".
                let _ = writeln!(o, "\n**Fix:** the top fix above.\n");
            } else {
                let _ = writeln!(o, "\n**Fix:** {}\n", md_prose(&f.recommendation));
            }
        }
    }
}

/// One row per GPU: utilization, its spread and period, memory, and a sparkline.
fn gpus_markdown(o: &mut String, r: &DiagnoseReport) {
    let _ = writeln!(o, "## GPUs\n");
    let _ = writeln!(
        o,
        "| GPU | name | util mean % | p10 / p50 / p90 | period s (strength) | memory used / total | utilization |\n|---|---|---|---|---|---|---|"
    );
    for g in &r.gpus {
        let period = g
            .periodicity
            .map(|p| format!("{:.1} ({:.2})", p.period_s, p.strength))
            .unwrap_or_else(|| "–".into());
        let mem = match (g.mem_used_max_bytes, g.mem_total_bytes) {
            (Some(u), Some(t)) => format!("{} / {}", bytes(u), bytes(t)),
            (Some(u), None) => bytes(u),
            _ => "–".into(),
        };
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} / {} / {} | {} | {} | {} |",
            g.index,
            md_cell(g.name.as_deref().unwrap_or("–")),
            opt(g.util_mean_pct, 1),
            opt(g.util_p10_pct, 0),
            opt(g.util_p50_pct, 0),
            opt(g.util_p90_pct, 0),
            period,
            mem,
            sparkline(&g.timeline_pct, 40)
        );
    }
    o.push('\n');
}

/// The job's line and its processes (at most 20, idle others left out).
fn job_markdown(o: &mut String, r: &DiagnoseReport) {
    if let Some(j) = job_line(r, &Said::default()) {
        let _ = writeln!(o, "## Job\n\n{}\n", md_prose(&j));
        let procs: Vec<_> = r
            .job
            .processes
            .iter()
            .filter(|p| p.role != Role::Other || p.cpu_mean_pct.unwrap_or(0.0) >= 1.0)
            .take(20)
            .collect();
        if !procs.is_empty() {
            let _ = writeln!(
                o,
                "| pid | role | CPU % of a core | RSS max | command |\n|---|---|---|---|---|"
            );
            for p in procs {
                let _ = writeln!(
                    o,
                    "| {} | {:?} | {} | {} | {} |",
                    p.pid,
                    p.role,
                    opt(p.cpu_mean_pct, 0),
                    p.rss_max_bytes.map(bytes).unwrap_or_else(|| "–".into()),
                    md_code(&proc_name(&p.cmd))
                );
            }
            o.push('\n');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparkline_levels_and_width() {
        assert_eq!(sparkline(&[0.0, 50.0, 100.0], 10), "▁▅█");
        let many: Vec<f64> = (0..600)
            .map(|i| if i < 300 { 0.0 } else { 100.0 })
            .collect();
        let s = sparkline(&many, 60);
        assert_eq!(s.chars().count(), 60);
        assert!(s.starts_with('▁') && s.ends_with('█'));
        assert_eq!(sparkline(&[], 10), "");
    }

    #[test]
    fn evidence_in_the_users_units() {
        assert_eq!(evidence_item(&Item::GpuBusyFraction(0.333)), "GPU busy 33%");
        assert_eq!(
            evidence_item(&Item::WorkerCpuMeanPct(99.0)),
            "worker CPU 99% of a core"
        );
        assert_eq!(
            evidence_item(&Item::UtilPeriodS(2.0)),
            "utilization repeats every 2.0 s"
        );
        assert_eq!(
            evidence_item(&Item::PsiIoSomeMeanPct(0.5)),
            "I/O pressure 0.5%"
        );
        assert_eq!(
            evidence_item(&Item::JobReadMeanBytesPerS(2.0e6)),
            "job reads 2.0 MB/s"
        );
        assert_eq!(
            evidence_item(&Item::LinkCapacityGbPerS(31.5)),
            "link capacity 31.5 GB/s"
        );
        assert_eq!(
            evidence_item(&Item::TemperatureMeanC(70.0)),
            "temperature 70 °C"
        );
        assert_eq!(
            evidence_item(&Item::BatchScaleHeadroom(4.0)),
            "batch could grow 4.0x"
        );
        assert_eq!(
            evidence_item(&Item::PsiIoFullMeanPct(1.0)),
            "I/O pressure (full) 1%"
        );
        assert_eq!(
            evidence_item(&Item::Kind("io_bound".into())),
            "kind io_bound"
        );
        assert_eq!(
            evidence_item(&Item::UnusedGpus(vec![1, 2])),
            "unused gpus [1,2]"
        );
    }

    #[test]
    fn deciding_figures_leave_out_what_the_fix_says() {
        let f = Finding::new(FindingId::InputBound, Severity::Critical, "t")
            .kind(Kind::Input(InputKind::TooFewWorkers))
            .with(Item::Workers(1))
            .with(Item::RecommendedNumWorkers(3))
            .with(Item::WorkerCpuMeanPct(99.0))
            .with(Item::IdleCoresMean(6.0))
            .with(Item::UtilPeriodS(2.0))
            .with(Item::GpuBusyFraction(0.33));
        let short = evidence_list(&f, false, stated_by_fix(&f));
        assert_eq!(
            short,
            "worker CPU 99% of a core, idle cores 6.0, utilization repeats every 2.0 s"
        );
        let all = evidence_list(&f, true, &[]);
        assert_eq!(all.matches('=').count(), f.evidence.len(), "{all}");
        // An id without a deciding list shows its first entries, not nothing.
        let other =
            Finding::new(FindingId::Straggler, Severity::Info, "t").with(Item::DataWaitPct(5.0));
        assert_eq!(evidence_list(&other, false, &[]), "data wait 5%");
    }

    #[test]
    fn a_phase_share_that_rounds_to_zero_reads_below_one() {
        assert_eq!(phase_share("optimizer", 0.3), "optimizer <1%");
        assert_eq!(phase_share("sync", 0.5), "sync <1%");
        assert_eq!(phase_share("forward", 0.6), "forward 1%");
        assert_eq!(phase_share("data_wait", 61.6), "data_wait 62%");
    }

    #[test]
    fn human_units() {
        assert_eq!(bytes(80u64 << 30), "80.0 GiB");
        assert_eq!(bytes(512u64 << 20), "512 MiB");
        assert_eq!(bytes(64u64 << 20), "64.0 MiB");
        assert_eq!(duration(3725.0), "1h 02m");
        assert_eq!(duration(185.0), "3m 05s");
        assert_eq!(duration(12.5), "12.5 s");
    }
}
