//! Self-contained HTML reports: inline SVG charts (see [`super::chart`]), inline CSS, no script,
//! no network, no font files. One page per `run`/`diagnose` (in the order it is read: verdict,
//! top fix with the code that applies it, key figures, then the training loop, GPU utilization
//! over time, CPU per core as a heat strip, PCIe, the other findings) or `analyze` (per-step
//! stacked breakdown, devices, findings).

use super::chart::{self, Buckets, ChartError};
use crate::diagnose::verdict::VerdictId;
use crate::diagnose::DiagnoseReport;
use crate::finding::{Finding, Severity};
use crate::record::reader::Sink;
use crate::sample::event::Line;
use crate::sample::{GpuSample, HostSample, ProcSample};
use crate::trace::breakdown::StepCategory;
use crate::trace::report;
use std::collections::BTreeMap;
use std::fmt::Write as _;

#[derive(Debug, thiserror::Error)]
pub enum HtmlError {
    #[error(transparent)]
    Chart(#[from] ChartError),
}

const WIDTH: u32 = 1100;

/// Escapes text for HTML.
pub(crate) fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// Escapes a sentence and sets its `backquoted` spans (commands, code) as code.
pub(crate) fn esc_code(s: &str) -> String {
    if s.matches('`').count() % 2 != 0 {
        return esc(s);
    }
    s.split('`')
        .enumerate()
        .map(|(i, part)| {
            if i % 2 == 1 {
                format!("<code>{}</code>", esc(part))
            } else {
                esc(part)
            }
        })
        .collect()
}

/// Fits a 900-pixel notebook frame with no horizontal scroll (charts scale down, long words
/// wrap), and follows the reader's light or dark theme (JupyterLab, VS Code): the charts keep a
/// light card of their own, as their colours are chosen for white.
const STYLE: &str = ":root{color-scheme:light dark}*{box-sizing:border-box}\
body{font-family:sans-serif;margin:0 auto;padding:16px;max-width:1140px;color:#222;background:#fff;overflow-wrap:anywhere}\
h1{font-size:20px;margin:0 0 2px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}\
.meta{color:#666;font-size:13px}.verdict{font-size:16px;padding:8px 12px;border-radius:6px;margin:10px 0;border-left:6px solid}\
.bad{background:#fdecea;border-color:#d62728}.ok{background:#eaf7ea;border-color:#2ca02c}.unk{background:#fff8e1;border-color:#f0ad4e}\
.topfix{border:2px solid #1f77b4;border-radius:6px;padding:8px 12px;margin:10px 0;background:#f4f8fb;font-size:15px;line-height:1.35}\
.topfix h2{margin:0 0 4px;border:0;padding:0}.topfix p{margin:4px 0}.gain{font-size:15px;margin-left:8px;color:#1f6e3a}\
summary{cursor:pointer}pre.apply::before{content:\"one click selects it\";float:right;margin-left:8px;font:11px sans-serif;color:#777}\
pre.apply{margin:6px 0;padding:8px 10px;background:#fff;border:1px solid #9bbad6;border-radius:4px;white-space:pre-wrap;user-select:all;-webkit-user-select:all;cursor:copy;font-size:14px}\
.figs{display:flex;flex-wrap:wrap;gap:8px;margin:12px 0;padding:0}.figs div{flex:1 1 180px;border:1px solid #ddd;border-radius:6px;padding:6px 10px}\
.figs dt{font-size:12px;color:#666}.figs dd{margin:2px 0 0;font-size:17px;font-weight:bold}.figs dd small{font-weight:normal;font-size:12px;color:#666}\
.finding{border:1px solid #ddd;border-radius:6px;padding:10px 14px;margin:10px 0}\
.sev{display:inline-block;font-size:12px;font-weight:bold;padding:2px 6px;border-radius:4px;color:#fff;margin-right:8px}\
.critical{background:#d62728}.warning{background:#e6890f}.info{background:#1f77b4}\
.fix{background:#f4f8fb;border-left:4px solid #1f77b4;padding:6px 10px;margin:8px 0;white-space:pre-wrap}\
table{border-collapse:collapse;font-size:13px;max-width:100%}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}\
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}.chart svg{max-width:100%;height:auto}\
ul.notes{color:#555;font-size:14px}.bar{display:flex;height:28px;width:100%;border:1px solid #ccc}\
@media (prefers-color-scheme:dark){body{color:#ddd;background:#1e1e1e}.meta,.figs dt,.figs dd small{color:#aaa}\
h2{border-color:#444}.bad{background:#3d2222}.ok{background:#1f3a24}.unk{background:#3d3520}\
.topfix,.fix{background:#1b2a38}pre.apply{background:#111;border-color:#3d6a92}.gain{color:#7fd19a}\
.finding,.figs div,td,th{border-color:#444}th{background:#2b2b2b}ul.notes{color:#bbb}\
.chart svg{background:#fff;border-radius:4px}}";

pub(crate) fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"generator\" content=\"gpufeed {}\"><title>{}</title><style>{STYLE}</style></head>\
<body>\n{body}\n<p class=\"meta\">Made by gpufeed {}. Self-contained: no scripts, no network.</p></body></html>\n",
        env!("CARGO_PKG_VERSION"),
        esc(title),
        env!("CARGO_PKG_VERSION"),
    )
}

fn findings_html(findings: &[Finding]) -> String {
    let mut s = String::new();
    if findings.is_empty() {
        s.push_str("<p>No findings: nothing to fix was seen.</p>");
    }
    for f in findings {
        let sev = match f.severity {
            Severity::Critical => "critical",
            Severity::Warning => "warning",
            Severity::Info => "info",
        };
        let _ = write!(
            s,
            "<div class=\"finding\"><span class=\"sev {sev}\">{sev}</span><b>{}</b> <code>{}</code>",
            esc(&f.title),
            esc(f.id.as_str())
        );
        if let Some(x) = f.expected_speedup {
            let _ = write!(
                s,
                " <span class=\"meta\">up to {x:.2}x faster if fixed</span>"
            );
        }
        if !f.recommendation.is_empty() {
            let _ = write!(
                s,
                "<div class=\"fix\"><b>Fix:</b> {}</div>",
                esc_code(&f.recommendation)
            );
        }
        s.push_str(&evidence_table(f));
        s.push_str("</div>\n");
    }
    s
}

/// Every evidence figure of a finding, in the text report's units (shares in %, rates in GB/s,
/// times in s).
fn evidence_table(f: &Finding) -> String {
    let mut s = String::new();
    if !f.evidence.is_empty() {
        s.push_str("<table><tr><th>evidence</th><th>value</th></tr>");
        for i in &f.evidence {
            let v = crate::present::diagnose::evidence_value(i);
            let _ = write!(s, "<tr><td>{}</td><td>{}</td></tr>", esc(i.name()), esc(&v));
        }
        s.push_str("</table>");
    }
    s
}

/// Time series read back from a recording for the charts.
#[derive(Debug, Default)]
pub(crate) struct RecordingSeries {
    pub gpu_util: BTreeMap<u32, Buckets>,
    pub pcie_rx: BTreeMap<u32, Buckets>,
    pub pcie_tx: BTreeMap<u32, Buckets>,
    /// GPU memory used, GiB.
    pub gpu_mem_gib: BTreeMap<u32, Buckets>,
    pub cpu_cores: Vec<Buckets>,
    /// What `--dataloader` / `--torch` changed in the job.
    pub overrides: Option<crate::sample::event::OverridesLine>,
    /// Busy cores: the whole machine, and the job's processes alone.
    pub host_cores_busy: Buckets,
    pub job_cores_busy: Buckets,
    /// Each GPU's previous PCIe counters `(t_s, rx, tx)`, for rates.
    prev_pcie: BTreeMap<u32, (f64, Option<u64>, Option<u64>)>,
}

/// The series are a consumer of the recording reader: the command that reads the recording for
/// the diagnosis feeds them in the same pass; this module never opens the file.
impl Sink for RecordingSeries {
    fn line(&mut self, l: &Line) {
        if let Line::Overrides(o) = l {
            self.overrides = Some(o.clone());
        }
    }

    fn gpu(&mut self, g: &GpuSample) {
        let prev = &mut self.prev_pcie;
        let u = self.gpu_util.entry(g.index).or_default();
        match &g.util_samples {
            Some(v) => v.iter().for_each(|&[t, x]| u.push(t, x)),
            None => {
                if let Some(x) = g.util_pct {
                    u.push(g.t_s, x)
                }
            }
        }
        let p = prev.get(&g.index).copied();
        if let Some((pt, prx, ptx)) = p {
            let dt = g.t_s - pt;
            if dt > 0.0 {
                if let (Some(a), Some(b)) = (prx, g.pcie_rx_bytes) {
                    self.pcie_rx
                        .entry(g.index)
                        .or_default()
                        .push(g.t_s, b.saturating_sub(a) as f64 / dt / 1e9);
                }
                if let (Some(a), Some(b)) = (ptx, g.pcie_tx_bytes) {
                    self.pcie_tx
                        .entry(g.index)
                        .or_default()
                        .push(g.t_s, b.saturating_sub(a) as f64 / dt / 1e9);
                }
            }
        }
        if g.pcie_rx_bytes.is_none() {
            if let Some(r) = g.pcie_rx_bytes_per_s {
                self.pcie_rx
                    .entry(g.index)
                    .or_default()
                    .push(g.t_s, r / 1e9);
            }
            if let Some(r) = g.pcie_tx_bytes_per_s {
                self.pcie_tx
                    .entry(g.index)
                    .or_default()
                    .push(g.t_s, r / 1e9);
            }
        }
        prev.insert(g.index, (g.t_s, g.pcie_rx_bytes, g.pcie_tx_bytes));
        if let Some(m) = g.mem_used_bytes {
            self.gpu_mem_gib
                .entry(g.index)
                .or_default()
                .push(g.t_s, m as f64 / (1u64 << 30) as f64);
        }
    }

    fn host(&mut self, h: &HostSample) {
        if self.cpu_cores.len() < h.cpu_pct.len() {
            self.cpu_cores.resize(h.cpu_pct.len(), Buckets::default());
        }
        for (i, v) in h.cpu_pct.iter().enumerate() {
            self.cpu_cores[i].push(h.t_s, *v);
        }
        if !h.cpu_pct.is_empty() {
            self.host_cores_busy
                .push(h.t_s, h.cpu_pct.iter().sum::<f64>() / 100.0);
        }
    }

    fn procs(&mut self, t_s: f64, procs: &[ProcSample]) {
        let mut n = 0;
        let mut sum = 0.0;
        for c in procs.iter().filter_map(|p| p.cpu_pct) {
            n += 1;
            sum += c;
        }
        if n > 0 {
            self.job_cores_busy.push(t_s, sum / 100.0);
        }
    }
}

/// The "training loop" panel: the training thread's phase split as a stacked bar, and the
/// slowest data-loading stages.
fn loop_html(
    r: &DiagnoseReport,
    p: &crate::diagnose::evidence::PythonEvidence,
    notes: &mut Vec<String>,
) -> String {
    use crate::sample::pyphase::Phase;
    use crate::sample::pystacks::PyStatus;
    let mut s = String::new();
    // Stacks that could not be read: the diagnosis's notes say why (no heading over nothing).
    if p.status != PyStatus::Ok {
        return s;
    }
    if p.main.is_none() && p.data_hotspots.is_empty() && p.no_loop_sites.is_empty() {
        notes.push("Too few Python stack samples of the training thread to split its time.".into());
        return s;
    }
    s.push_str("<h2>Training loop</h2>");
    if let Some(m) = &p.main {
        let (phases, from_markers) = crate::present::diagnose::loop_phases(r, &m.phases_pct);
        let _ = write!(
            s,
            "<p class=\"meta\">Where the training thread's time goes, from {} Python stack samples \
of pid {} (thread {}){}.</p><div class=\"bar\">",
            m.samples,
            m.pid,
            esc(m.thread_name.as_deref().unwrap_or("?")),
            if from_markers {
                format!("; {}", crate::present::diagnose::PHASES_FROM_MARKERS)
            } else {
                String::new()
            }
        );
        const COLORS: [&str; Phase::ALL.len()] = [
            "#d9534f", "#5b8def", "#8e6bd8", "#3fa06b", "#e6a23c", "#777", "#17a2b8", "#ddd",
        ];
        for (i, ph) in Phase::ALL.iter().enumerate() {
            let v = phases.get(*ph);
            if v <= 0.0 {
                continue;
            }
            let _ = write!(
                s,
                "<div title=\"{} {v:.1}%\" style=\"width:{v}%;background:{}\"></div>",
                ph.as_str(),
                COLORS[i]
            );
        }
        s.push_str("</div><table><tr><th>phase</th><th>share</th></tr>");
        for &ph in Phase::ALL {
            let _ = write!(
                s,
                "<tr><td>{}</td><td>{:.1}%</td></tr>",
                ph.as_str(),
                phases.get(ph)
            );
        }
        s.push_str("</table>");
        for c in crate::present::diagnose::shown_loop_code(p) {
            let _ = write!(
                s,
                "<h3>{} {:.1}% of the loop, {}</h3>",
                esc(c.phase.as_str()),
                c.pct,
                crate::diagnose::evidence::sites_heading(&c.sites)
            );
            s.push_str(&sites_html(&c.sites));
        }
    } else if !p.no_loop_sites.is_empty() {
        s.push_str(
            "<p>No training loop: the job ran no training step; its main thread's time goes \
             to:</p>",
        );
        s.push_str(&sites_html(&p.no_loop_sites));
    }
    if !p.data_hotspots.is_empty() {
        s.push_str("<h3>Slowest data-loading stages</h3><table><tr><th>share of loading</th><th>stage</th><th>where</th></tr>");
        for h in p
            .data_hotspots
            .iter()
            .take(crate::present::diagnose::HOTSPOTS_SHOWN)
        {
            let _ = write!(
                s,
                "<tr><td>{:.1}%</td><td><code>{}</code></td><td><code>{}</code></td></tr>",
                h.pct,
                esc(&h.name()),
                esc(&h.at())
            );
        }
        s.push_str("</table>");
    }
    s
}

/// The user's functions a phase's time goes to, as a table.
fn sites_html(sites: &[crate::diagnose::evidence::LoopSite]) -> String {
    let mut s = String::from(
        "<table><tr><th>share of the loop</th><th>function</th><th>where</th><th>line</th>\
         <th>in</th></tr>",
    );
    for x in sites {
        let _ = write!(
            s,
            "<tr><td>{:.1}%</td><td><code>{}</code></td><td><code>{}</code></td>\
             <td><code>{}</code></td><td>{}</td></tr>",
            x.pct,
            esc(&x.name()),
            esc(&x.at()),
            esc(x.code.as_deref().map(str::trim).unwrap_or("")),
            esc(x.calls.as_deref().unwrap_or(""))
        );
    }
    s.push_str("</table>");
    s
}

/// The job's processes: role, CPU, memory, time in D state, command.
fn process_table(r: &DiagnoseReport) -> String {
    let procs = &r.job.processes;
    if procs.is_empty() {
        return String::new();
    }
    let mut sorted: Vec<_> = procs.iter().collect();
    sorted.sort_by(|a, b| {
        b.cpu_mean_pct
            .unwrap_or(0.0)
            .total_cmp(&a.cpu_mean_pct.unwrap_or(0.0))
    });
    let mut s = format!(
        "<h2>The job's processes</h2><p class=\"meta\">{}, most CPU first; CPU in percent of one core.</p>\
<table><tr><th>pid</th><th>role</th><th>CPU mean</th><th>CPU max</th><th>RSS peak</th><th>in D state</th><th>command</th></tr>",
        super::fmt::plural(procs.len(), "process", "processes")
    );
    for p in sorted.iter().take(64) {
        let role = p.role.as_str();
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td style=\"text-align:left\">{}</td></tr>",
            p.pid,
            esc(role),
            super::fmt::opt(p.cpu_mean_pct, |v| format!("{v:.0}%")),
            super::fmt::opt(p.cpu_max_pct, |v| format!("{v:.0}%")),
            super::fmt::opt(p.rss_max_bytes, super::fmt::bytes),
            super::fmt::opt(p.d_state_fraction, |v| format!("{:.0}%", v * 100.0)),
            esc(p.cmd.as_deref().unwrap_or("?"))
        );
    }
    if sorted.len() > 64 {
        let _ = write!(
            s,
            "<tr><td colspan=\"7\">... and {} more (see --format json)</td></tr>",
            sorted.len() - 64
        );
    }
    s.push_str("</table>");
    s
}

fn verdict_class(id: VerdictId) -> &'static str {
    match id {
        VerdictId::ComputeBound => "ok",
        VerdictId::Unknown | VerdictId::Idle => "unk",
        _ => "bad",
    }
}

/// The page for a diagnosis (`run --html`, `diagnose --html`), in the order people read it:
/// the verdict, the top fix with the code that applies it, the key figures, then the charts and
/// tables. `series` comes from the recording when there is one; logs fall back to the
/// evidence's utilization timeline. A section with nothing to show is a line in the notes.
pub(crate) fn diagnose_section(
    r: &DiagnoseReport,
    series: Option<&RecordingSeries>,
) -> Result<String, HtmlError> {
    let mut s = String::new();
    let _ = write!(
        s,
        "<h1>{}</h1><p class=\"meta\">{} ({}), {:.0} s, {}</p>\
<div class=\"verdict {}\"><b>{}</b> ({:.0}% confidence): {}</div>",
        esc(&format!("gpufeed diagnosis: {}", r.verdict.id)),
        esc(&r.source.path),
        esc(r.source.format.as_str()),
        r.duration_s,
        super::fmt::plural(r.gpus.len(), "GPU", "GPUs"),
        verdict_class(r.verdict.id),
        esc(r.verdict.id.as_str()),
        r.verdict.confidence * 100.0,
        esc(&r.verdict.summary)
    );
    s.push_str(&top_fix_html(r));
    s.push_str(&key_figures_html(r));
    let mut notes: Vec<String> = Vec::new();
    // one time axis for every chart of the recording, so that they line up
    let t_end = {
        let mut t = r.duration_s;
        if let Some(se) = series {
            for b in se.gpu_util.values().chain(se.cpu_cores.iter()) {
                t = t.max(b.end_s());
            }
        }
        (t > 0.0).then_some(t)
    };
    util_chart(&mut s, &mut notes, r, series, t_end)?;
    if let Some(p) = &r.python {
        s.push_str(&loop_html(r, p, &mut notes));
    }
    if let Some(se) = series {
        if !se.gpu_mem_gib.is_empty() {
            memory_chart(&mut s, r, se, t_end)?;
        }
        if !se.cpu_cores.is_empty() {
            cpu_charts(&mut s, se, t_end)?;
        }
        pcie_chart(&mut s, r, se, t_end)?;
    }
    s.push_str(&process_table(r));
    let rest = r.findings.get(1..).unwrap_or(&[]);
    if r.findings.is_empty() {
        // An unknown verdict never claims nothing is wrong: its summary names the missing data.
        notes.push(crate::present::diagnose::no_findings(r).to_string());
    } else if !rest.is_empty() {
        s.push_str("<h2>Other findings and fixes</h2>");
        s.push_str(&findings_html(rest));
    }
    if let Some(o) = series.and_then(|se| se.overrides.as_ref()) {
        s.push_str(&overrides_html(&o.overrides, &o.notes));
        if !o.loader_notes.is_empty() {
            s.push_str("<h2>DataLoaders</h2><ul class=\"notes\">");
            for n in &o.loader_notes {
                s.push_str(&format!("<li>{}</li>", esc(n)));
            }
            s.push_str("</ul>");
        }
    }
    notes.splice(0..0, r.notes.iter().cloned());
    if !notes.is_empty() {
        s.push_str("<h2>Notes</h2><ul class=\"notes\">");
        for n in &notes {
            let _ = write!(s, "<li>{}</li>", esc_code(n));
        }
        s.push_str("</ul>");
    }
    Ok(s)
}

/// The first finding's fix: what to change, what it is worth, the code that applies it on a
/// line of its own (a click selects it whole, no script needed), and the figures it rests on.
fn top_fix_html(r: &DiagnoseReport) -> String {
    let Some(top) = r.findings.first() else {
        return String::new();
    };
    let mut s = String::from("<section class=\"topfix\" id=\"top-fix\"><h2>Top fix");
    if let Some(x) = top.expected_speedup {
        let _ = write!(
            s,
            " <span class=\"gain\">up to {x:.2}x faster if fixed</span>"
        );
    }
    s.push_str("</h2>");
    // The verdict's sentence already says what its own finding's title says.
    if r.verdict.finding != Some(top.id) {
        let _ = write!(s, "<p><b>{}</b></p>", esc(&top.title));
    }
    let _ = write!(s, "<p>{}</p>", esc_code(&top.recommendation));
    if let Some(code) = &top.apply {
        let _ = write!(
            s,
            "<pre class=\"apply\" title=\"one click selects it whole: then copy\"><code>{}</code></pre>",
            esc(code)
        );
    }
    if !top.evidence.is_empty() {
        let measured = crate::present::diagnose::top_fix_measured(top);
        let _ = write!(
            s,
            "<details><summary class=\"meta\">{}every figure of <code>{}</code></summary>{}</details>",
            if measured.is_empty() {
                String::new()
            } else {
                format!("Measured: {}; ", esc(&measured))
            },
            esc(top.id.as_str()),
            evidence_table(top)
        );
    }
    s.push_str("</section>");
    s
}

/// The few figures the verdict and the fix rest on: the data wait (the report's one figure,
/// with its source), the step rate, the slowest loading stage with its line, the GPU's busy
/// share. Nothing measured: nothing shown.
fn key_figures_html(r: &DiagnoseReport) -> String {
    use crate::finding::WaitSource;
    let mut figs: Vec<(&str, String, String)> = Vec::new();
    if let Some(w) = r.data_wait() {
        let from = match w.source {
            WaitSource::StepProbe => "from the step markers",
            WaitSource::PythonStacks => "Python stacks' estimate",
        };
        figs.push(("data wait", format!("{:.0}%", w.pct), from.into()));
    }
    if let Some(st) = &r.steps {
        if let Some(x) = st.steady_steps_per_s.or(st.steps_per_s) {
            let per = st
                .samples_per_s
                .map(|v| format!("{} samples/s", super::fmt::num(v)))
                .unwrap_or_else(|| format!("{} steps timed", st.steps));
            figs.push(("steps/s", super::fmt::num(x), per));
        }
    }
    if let Some(h) = r.python.as_ref().and_then(|p| p.data_hotspots.first()) {
        figs.push((
            "slowest loading stage",
            h.name(),
            format!("{} · {:.0}% of loading", h.at(), h.pct),
        ));
    }
    if let Some(b) = r.verdict.gpu_busy_fraction {
        figs.push((
            "GPU busy",
            format!("{:.0}%", b * 100.0),
            super::fmt::plural(r.gpus.len(), "GPU", "GPUs"),
        ));
    }
    if figs.is_empty() {
        return String::new();
    }
    let mut s = String::from("<dl class=\"figs\" id=\"key-figures\">");
    for (label, value, detail) in figs {
        let _ = write!(
            s,
            "<div><dt>{}</dt><dd>{} <small>{}</small></dd></div>",
            esc(label),
            esc(&value),
            esc(&detail)
        );
    }
    s.push_str("</dl>");
    s
}

/// GPU utilization over time: the recording's series, or a log's evidence timeline.
fn util_chart(
    s: &mut String,
    notes: &mut Vec<String>,
    r: &DiagnoseReport,
    series: Option<&RecordingSeries>,
    t_end: Option<f64>,
) -> Result<(), HtmlError> {
    let util: Vec<(String, Vec<(f64, f64)>)> = match series {
        Some(se) if !se.gpu_util.is_empty() => se
            .gpu_util
            .iter()
            .map(|(i, b)| (format!("GPU {i}"), b.points()))
            .collect(),
        _ => r
            .gpus
            .iter()
            .filter(|g| !g.timeline_pct.is_empty())
            .map(|g| {
                (
                    format!("GPU {}", g.index),
                    g.timeline_pct
                        .iter()
                        .enumerate()
                        .map(|(k, v)| (k as f64 * g.timeline_step_s, *v))
                        .collect(),
                )
            })
            .collect(),
    };
    if util.is_empty() {
        // The diagnosis's notes say so when no GPU was measured at all.
        if r.gpus.iter().any(|g| g.util_mean_pct.is_some()) {
            notes.push("No GPU utilization over time to chart: only its summary figures.".into());
        }
        return Ok(());
    }
    s.push_str("<h2>GPU utilization over time</h2><div class=\"chart\">");
    {
        s.push_str(&chart::lines_on(
            "GPU utilization (%)",
            "%",
            &util,
            Some(100.0),
            t_end,
            (WIDTH, 300),
        )?);
    }
    s.push_str("</div>");
    Ok(())
}

/// GPU memory used, against the largest GPU's total.
fn memory_chart(
    s: &mut String,
    r: &DiagnoseReport,
    se: &RecordingSeries,
    t_end: Option<f64>,
) -> Result<(), HtmlError> {
    let total = r
        .gpus
        .iter()
        .filter_map(|g| g.mem_total_bytes)
        .max()
        .map(|b| b as f64 / (1u64 << 30) as f64);
    s.push_str("<h2>GPU memory</h2><p class=\"meta\">A full memory bar is not a bottleneck by itself: PyTorch's caching allocator keeps freed blocks reserved. Utilization above says whether the GPU is busy.</p><div class=\"chart\">");
    let mem: Vec<(String, Vec<(f64, f64)>)> = se
        .gpu_mem_gib
        .iter()
        .map(|(i, b)| (format!("GPU {i} used"), b.points()))
        .collect();
    s.push_str(&chart::lines_on(
        &match total {
            Some(t) => format!("GPU memory used (GiB of {t:.1} GiB)"),
            None => "GPU memory used (GiB)".into(),
        },
        "GiB",
        &mem,
        total,
        t_end,
        (WIDTH, 220),
    )?);
    s.push_str("</div>");
    Ok(())
}

/// CPU busy per core as a heat strip, and busy cores of the job against the whole machine.
fn cpu_charts(s: &mut String, se: &RecordingSeries, t_end: Option<f64>) -> Result<(), HtmlError> {
    s.push_str("<h2>CPU per core</h2><p class=\"meta\">A few saturated rows with the rest idle is a CPU-bound input pipeline with too few workers.</p>");
    let _ = write!(
        s,
        "<div class=\"meta\" style=\"display:flex;align-items:center;gap:6px;margin:4px 0 4px 72px\">busy 0%<span style=\"display:inline-block;width:240px;height:12px;border:1px solid #ccc;background:linear-gradient(to right,{},{},{})\"></span>100%</div>",
        chart::heat_css(0.0),
        chart::heat_css(50.0),
        chart::heat_css(100.0)
    );
    s.push_str("<div class=\"chart\">");
    let h = (se.cpu_cores.len() as u32 * 12).clamp(120, 800) + 60;
    s.push_str(&chart::heat_strip_on(
        "CPU busy per core (%)",
        &se.cpu_cores,
        t_end,
        (WIDTH, h),
    )?);
    s.push_str("</div>");
    let mut busy = vec![("whole machine".to_string(), se.host_cores_busy.points())];
    if !se.job_cores_busy.points().is_empty() {
        busy.push((
            "the job's processes".to_string(),
            se.job_cores_busy.points(),
        ));
    }
    s.push_str("<div class=\"chart\">");
    s.push_str(&chart::lines_on(
        "Busy cores: the job and the whole machine",
        "cores",
        &busy,
        Some(se.cpu_cores.len() as f64),
        t_end,
        (WIDTH, 220),
    )?);
    s.push_str("</div>");
    Ok(())
}

/// PCIe traffic per GPU and direction, with each link's capacity.
fn pcie_chart(
    s: &mut String,
    r: &DiagnoseReport,
    se: &RecordingSeries,
    t_end: Option<f64>,
) -> Result<(), HtmlError> {
    let mut pcie: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for (i, b) in &se.pcie_rx {
        pcie.push((format!("GPU {i} host to device"), b.points()));
    }
    for (i, b) in &se.pcie_tx {
        pcie.push((format!("GPU {i} device to host"), b.points()));
    }
    if !pcie.is_empty() {
        let mut top: Option<f64> = None;
        for g in &r.gpus {
            if let Some(c) = g
                .pcie
                .capacity_current_bytes_per_s
                .or(g.pcie.capacity_max_bytes_per_s)
            {
                let gbps = c / 1e9;
                let end = t_end.unwrap_or(1.0);
                pcie.push((
                    format!(
                        "GPU {} link capacity ({gbps:.1} GB/s{})",
                        g.index,
                        match (g.pcie.gen_current, g.pcie.width_current) {
                            (Some(gen), Some(w)) => format!(", gen {gen} x{w}"),
                            _ => String::new(),
                        }
                    ),
                    vec![(0.0, gbps), (end, gbps)],
                ));
                top = Some(top.unwrap_or(0.0).max(gbps * 1.1));
            }
        }
        s.push_str("<h2>PCIe</h2><div class=\"chart\">");
        s.push_str(&chart::lines_on(
            "PCIe traffic (GB/s)",
            "GB/s",
            &pcie,
            top,
            t_end,
            (WIDTH, 260),
        )?);
        s.push_str("</div>");
    }
    Ok(())
}

/// What `--dataloader` / `--torch` overrode (and could not), as a list.
pub(crate) fn overrides_html(
    overrides: &[crate::sample::event::Override],
    notes: &[String],
) -> String {
    let mut s = String::from("<h2>Overridden with --dataloader / --torch</h2><ul class=\"notes\">");
    if overrides.is_empty() {
        s.push_str("<li>nothing</li>");
    }
    for o in overrides {
        let _ = write!(s, "<li><code>{}</code></li>", esc(&o.describe()));
    }
    for n in notes {
        let _ = write!(s, "<li>note: {}</li>", esc(n));
    }
    s.push_str("</ul>");
    s
}

/// A whole page for one or more diagnoses.
pub(crate) fn diagnose_page(sections: &[String]) -> String {
    page("gpufeed diagnosis", &sections.join("\n<hr>\n"))
}

/// The page for one or more diagnoses, each with its recording's series when it came from one.
pub(crate) fn diagnose_html(
    reports: &[(&DiagnoseReport, Option<&RecordingSeries>)],
) -> Result<String, HtmlError> {
    let mut sections = Vec::with_capacity(reports.len());
    for (r, series) in reports {
        sections.push(diagnose_section(r, *series)?);
    }
    Ok(diagnose_page(&sections))
}

/// The page for `analyze --html`: per-step stacked breakdown, devices and findings.
pub(crate) fn trace_page(rep: &report::Report) -> Result<String, HtmlError> {
    let mut s = String::new();
    let names: Vec<String> = rep.traces.iter().map(|t| t.path.clone()).collect();
    let _ = write!(
        s,
        "<h1>gpufeed trace analysis</h1><p class=\"meta\">{} ({} steps from {})</p>",
        esc(&names.join(", ")),
        rep.steps.len(),
        esc(rep.step_source.as_str())
    );
    let categories: Vec<&str> = StepCategory::ALL.iter().map(|c| c.as_str()).collect();
    let bars: Vec<(String, Vec<f64>)> = rep
        .steps
        .iter()
        .map(|r| {
            let ms = r.by_category().iter().map(|(_, us)| us / 1e3).collect();
            (r.step.clone(), ms)
        })
        .collect();
    s.push_str("<h2>Step time breakdown</h2>");
    if bars.is_empty() {
        s.push_str("<p>No steps were found in the trace.</p>");
    } else {
        s.push_str("<div class=\"chart\">");
        s.push_str(&chart::stacked_bars(
            "Time per step by category (ms)",
            "ms",
            &categories,
            &bars,
            (WIDTH, 380),
        )?);
        s.push_str("</div>");
        let b = &rep.breakdown;
        let total = b.total_us.max(1e-9);
        s.push_str("<table><tr><th>category (mean per step)</th><th>ms</th><th>share</th></tr>");
        for (category, v) in b.by_category() {
            let _ = write!(
                s,
                "<tr><td>{}</td><td>{:.2}</td><td>{:.1}%</td></tr>",
                category.as_str(),
                v / 1e3,
                100.0 * v / total
            );
        }
        s.push_str("</table>");
    }
    if !rep.devices.is_empty() {
        s.push_str("<h2>Devices</h2><table><tr><th>device</th><th>busy</th><th>kernels</th></tr>");
        for d in &rep.devices {
            let _ = write!(
                s,
                "<tr><td>{} {}</td><td>{:.1}%</td><td>{}</td></tr>",
                d.device,
                esc(d.name.as_deref().unwrap_or("")),
                d.busy_pct,
                d.kernels
            );
        }
        s.push_str("</table>");
    }
    s.push_str("<h2>Findings and fixes</h2>");
    s.push_str(&findings_html(&rep.findings));
    Ok(page("gpufeed trace analysis", &s))
}

/// One setting of a sweep, for [`sweep_page`] (kept free of the tuner's types so the page does
/// not depend on them).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SweepPoint {
    /// The setting, e.g. `num_workers=4 batch_size=64`.
    pub label: String,
    pub throughput: Option<f64>,
    pub gpu_util_mean_pct: Option<f64>,
    pub data_wait_fraction: Option<f64>,
    /// Failed or interrupted: no throughput.
    pub failed: bool,
    /// What `--dataloader` / `--torch` overrode in this trial (`None`: nothing injected).
    pub overridden: Option<String>,
}

/// The page for `sweep --html`: throughput and GPU utilization per setting (in the order tried),
/// the sweet spot and why.
pub(crate) fn sweep_page(
    command: &str,
    knob: &str,
    unit: &str,
    points: &[SweepPoint],
    sweet_spot: Option<(&str, &str)>,
    notes: &[String],
) -> Result<String, HtmlError> {
    let mut s = String::new();
    let _ = write!(
        s,
        "<h1>gpufeed sweep</h1><p class=\"meta\"><code>{}</code>: {} settings</p>",
        esc(command),
        points.len()
    );
    match sweet_spot {
        Some((label, why)) => {
            let _ = write!(
                s,
                "<div class=\"verdict ok\"><b>Sweet spot: {}</b>. {}</div>",
                esc(label),
                esc(why)
            );
        }
        None if !notes.is_empty() => s.push_str("<div class=\"verdict unk\">No sweet spot.</div>"),
        None => s.push_str(
            "<div class=\"verdict unk\">No sweet spot: no setting gave a throughput.</div>",
        ),
    }
    if !notes.is_empty() {
        s.push_str("<ul class=\"notes\">");
        for n in notes {
            let _ = write!(s, "<li>{}</li>", esc(n));
        }
        s.push_str("</ul>");
    }
    let mark = |p: &SweepPoint| {
        if sweet_spot.is_some_and(|(l, _)| l == p.label) {
            format!("*{}", p.label)
        } else {
            p.label.clone()
        }
    };
    let tp: Vec<(String, Vec<f64>)> = points
        .iter()
        .map(|p| (mark(p), vec![p.throughput.unwrap_or(0.0)]))
        .collect();
    s.push_str("<h2>Throughput per setting</h2><div class=\"chart\">");
    s.push_str(&chart::stacked_bars_x(
        &format!("Throughput ({unit}); * = sweet spot"),
        knob,
        unit,
        &["throughput"],
        &tp,
        (WIDTH, 320),
    )?);
    let util: Vec<(String, Vec<f64>)> = points
        .iter()
        .map(|p| (mark(p), vec![p.gpu_util_mean_pct.unwrap_or(0.0)]))
        .collect();
    s.push_str(&chart::stacked_bars_x(
        "GPU utilization (%)",
        knob,
        "%",
        &["GPU utilization"],
        &util,
        (WIDTH, 260),
    )?);
    s.push_str("</div><table><tr><th>setting</th><th>throughput</th><th>GPU util</th><th>data wait</th></tr>");
    for p in points {
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&mark(p)),
            if p.failed {
                "failed".to_string()
            } else {
                p.throughput
                    .map_or("-".into(), |v| format!("{v:.1} {}", esc(unit)))
            },
            p.gpu_util_mean_pct
                .map_or("-".into(), |v| format!("{v:.0}%")),
            p.data_wait_fraction
                .map_or("-".into(), |v| format!("{:.0}%", v * 100.0)),
        );
    }
    s.push_str("</table>");
    if points.iter().any(|p| p.overridden.is_some()) {
        s.push_str("<h2>Overridden with --dataloader / --torch</h2><table><tr><th>setting</th><th>overridden</th></tr>");
        for p in points {
            let _ = write!(
                s,
                "<tr><td>{}</td><td><code>{}</code></td></tr>",
                esc(&mark(p)),
                esc(p.overridden.as_deref().unwrap_or("-"))
            );
        }
        s.push_str("</table>");
    }
    Ok(page("gpufeed sweep", &s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes() {
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }

    #[test]
    fn findings_show_fix_and_evidence() {
        let f = Finding::new(
            crate::finding::FindingId::InputBound,
            Severity::Critical,
            "GPU <starving>",
        )
        .with(crate::finding::Item::GpuBusyPct(35.5))
        .recommend("num_workers=8");
        let h = findings_html(&[f]);
        assert!(h.contains("GPU &lt;starving&gt;"));
        assert!(h.contains("<b>Fix:</b> num_workers=8"));
        assert!(h.contains("<td>gpu_busy_pct</td><td>36%</td>"), "{h}");
    }

    #[test]
    fn sweep_page_marks_the_sweet_spot() {
        let pts: Vec<SweepPoint> = [0.0f64, 2.0, 4.0, 8.0]
            .iter()
            .map(|&w| SweepPoint {
                label: format!("num_workers={w}"),
                throughput: Some(100.0 + 50.0 * w.min(4.0)),
                gpu_util_mean_pct: Some(30.0 + 15.0 * w.min(4.0)),
                data_wait_fraction: Some(0.5 - 0.1 * w.min(4.0)),
                failed: false,
                overridden: Some(format!("DataLoader(num_workers={w}) at train.py:42, was 0")),
            })
            .collect();
        let h = sweep_page(
            "python train.py",
            "num_workers",
            "samples/s",
            &pts,
            Some(("num_workers=4", "within 5% of the best")),
            &[],
        )
        .unwrap();
        assert!(h.contains("Sweet spot: num_workers=4"));
        assert!(h.contains("*num_workers=4"));
        assert_eq!(h.matches("<svg").count(), 2);
        assert!(
            h.contains(">num_workers<") || h.contains("\nnum_workers\n"),
            "the knob names the x axis"
        );
        assert!(!h.contains("\nstep\n") && !h.contains(">step<"));
        assert!(h.contains("<code>DataLoader(num_workers=8) at train.py:42, was 0</code>"));
        let h = sweep_page(
            "python train.py",
            "num_workers",
            "samples/s",
            &pts,
            None,
            &["No sweet spot: the overrides never took effect".into()],
        )
        .unwrap();
        assert!(
            h.contains("<li>No sweet spot: the overrides never took effect</li>"),
            "{h}"
        );
    }

    #[test]
    fn pages_are_self_contained() {
        let p = page("t", "<p>x</p>");
        assert!(p.starts_with("<!DOCTYPE html>"));
        assert!(!p.contains("<script"));
        assert!(!p.contains("src=\"http"));
        assert!(!p.contains("@import"));
    }
}
