//! Presenters for a [`DiagnoseReport`]: text for people (colour on a terminal, a sparkline of
//! utilization, the top fix first), JSON (the contract) and Markdown.

use super::evidence::{GpuEvidence, Role};
use super::pyloop::{PhasesPct, PythonEvidence};
use super::verdict::VerdictId;
use super::DiagnoseReport;
use crate::finding::{Finding, Severity};
use crate::present::OutputFormat;
use crate::sample::pyphase::Phase;
use crate::sample::pystacks::PyStatus;
use std::fmt::Write as _;

/// Renders a report; `color` adds ANSI colours (text only). `diagnose --format` takes text,
/// JSON or Markdown (the HTML page is `--html`'s): HTML here gets the text.
pub fn render(report: &DiagnoseReport, format: OutputFormat, color: bool) -> String {
    match format {
        OutputFormat::Text | OutputFormat::Html => text(report, color),
        OutputFormat::Json => {
            let mut s = serde_json::to_string_pretty(report).expect("report serializes");
            s.push('\n');
            s
        }
        OutputFormat::Markdown => markdown(report),
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

/// Bytes as GiB / MiB for people.
pub fn bytes(b: f64) -> String {
    if b >= 1024.0 * 1024.0 * 1024.0 {
        format!("{:.1} GiB", b / (1024.0 * 1024.0 * 1024.0))
    } else {
        format!("{:.0} MiB", b / (1024.0 * 1024.0))
    }
}

/// Seconds as `1h 02m`, `3m 05s`, `12.5s`.
pub fn duration(s: f64) -> String {
    if s >= 3600.0 {
        format!(
            "{}h {:02}m",
            (s / 3600.0) as u64,
            ((s % 3600.0) / 60.0) as u64
        )
    } else if s >= 60.0 {
        format!("{}m {:02}s", (s / 60.0) as u64, (s % 60.0) as u64)
    } else {
        format!("{s:.1}s")
    }
}

fn evidence_line(f: &Finding) -> String {
    f.evidence
        .iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => format!("{k}={s}"),
            other => format!("{k}={other}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn gpu_line(g: &GpuEvidence) -> String {
    let mut s = format!("GPU {}", g.index);
    if let Some(n) = &g.name {
        let _ = write!(s, "  {n}");
    }
    match g.util_mean_pct {
        Some(m) => {
            let _ = write!(s, "  util {m:.0}% mean");
            if let (Some(a), Some(b), Some(c)) = (g.util_p10_pct, g.util_p50_pct, g.util_p90_pct) {
                let _ = write!(s, " (p10 {a:.0}, p50 {b:.0}, p90 {c:.0})");
            }
        }
        None => s.push_str("  no utilization samples"),
    }
    match (g.mem_used_max_bytes, g.mem_total_bytes) {
        (Some(u), Some(t)) => {
            let _ = write!(s, "  mem {} / {}", bytes(u as f64), bytes(t as f64));
        }
        (Some(u), None) => {
            let _ = write!(s, "  mem {} used", bytes(u as f64));
        }
        _ => {}
    }
    s
}

fn gpu_pattern(g: &GpuEvidence) -> Option<String> {
    let mut parts = Vec::new();
    if let Some(p) = g.periodicity.filter(|p| p.is_strong()) {
        parts.push(format!(
            "repeats every {:.1}s (strength {:.2})",
            p.period_s, p.strength
        ));
    }
    if let Some(sp) = g.util_split.filter(|s| s.is_bimodal()) {
        parts.push(format!(
            "two levels: {:.0}% and {:.0}% ({:.0}% of the time low)",
            sp.high_mean_pct,
            sp.low_mean_pct,
            sp.low_weight * 100.0
        ));
    }
    if let Some(p) = &g.profiling {
        if let Some(a) = p.sm_active_pct {
            parts.push(format!("SM active {a:.0}%"));
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

fn host_line(r: &DiagnoseReport) -> Option<String> {
    let h = &r.host;
    if h.samples == 0 {
        return None;
    }
    let mut s = String::new();
    if let Some(n) = h.cpu_count {
        let _ = write!(s, "{n} CPUs");
    }
    if let Some(c) = h.cpu_mean_pct {
        let _ = write!(s, ", {c:.0}% busy");
    }
    if let Some(i) = h.idle_cores_mean {
        let _ = write!(s, ", {i:.1} cores idle on average");
    }
    let psi: Vec<String> = [
        ("cpu", h.psi_cpu_some_mean_pct),
        ("io", h.psi_io_some_mean_pct),
        ("mem", h.psi_mem_some_mean_pct),
    ]
    .iter()
    .filter_map(|(n, v)| v.map(|v| format!("{n} {v:.1}%")))
    .collect();
    if !psi.is_empty() {
        let _ = write!(s, "; pressure {}", psi.join(", "));
    }
    if let Some(d) = h.disk_read_mean_bytes_per_s {
        let _ = write!(s, "; disk reads {}/s", bytes(d));
    }
    Some(s)
}

fn job_line(r: &DiagnoseReport) -> Option<String> {
    let j = &r.job;
    if j.samples == 0 && j.processes.is_empty() {
        return None;
    }
    let mut s = String::new();
    if let Some(p) = j.main_pid {
        let _ = write!(s, "main pid {p} `{}`", proc_name(&j.main_cmd));
    }
    if let Some(c) = j.main_cpu_mean_pct {
        let _ = write!(s, " at {c:.0}% of a core");
    }
    if j.workers_max > 0 {
        let _ = write!(
            s,
            "; {} worker{}",
            j.workers_max,
            if j.workers_max == 1 { "" } else { "s" }
        );
        if let Some(w) = j.worker_cpu_mean_pct {
            let _ = write!(s, " at {w:.0}% each");
        }
    } else {
        s.push_str("; no worker processes");
    }
    if let Some(d) = j.d_state_time_fraction.filter(|d| *d > 0.0) {
        let _ = write!(s, "; D state {:.0}% of the time", d * 100.0);
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
    Some(s)
}

fn text(r: &DiagnoseReport, color: bool) -> String {
    let mut o = String::new();
    let gpus = r.gpus.iter().filter(|g| g.util_mean_pct.is_some()).count();
    let _ = writeln!(
        o,
        "{} {} ({}, {}, {} GPU{})",
        paint("gpufeed diagnose:", "1", color),
        r.source.path,
        r.source.format.as_str().replace('_', " "),
        duration(r.duration_s),
        gpus,
        if gpus == 1 { "" } else { "s" }
    );
    if r.source.unfinished {
        let _ = writeln!(
            o,
            "{} the recording is unfinished (no end line: the recorder was killed or is still running); the figures cover what was written",
            paint("warning:", "33", color),
        );
    }
    o.push('\n');
    let _ = writeln!(
        o,
        "{}  {}  (confidence {:.2})",
        paint("VERDICT", "1", color),
        paint(r.verdict.id.as_str(), verdict_color(r.verdict.id), color),
        r.verdict.confidence
    );
    let _ = writeln!(o, "         {}", r.verdict.summary);
    // Every GPU judged: a pooled verdict never hides one GPU's state.
    if r.verdict.gpus.len() > 1 {
        let states: Vec<String> = r
            .verdict
            .gpus
            .iter()
            .map(|g| format!("GPU {} {}", g.index, g.state.as_str()))
            .collect();
        let _ = writeln!(o, "         {}", states.join(", "));
    }
    if let Some(top) = r.findings.first() {
        o.push('\n');
        let _ = writeln!(
            o,
            "{}  {}",
            paint("TOP FIX", "1", color),
            top.recommendation
        );
        if let Some(x) = top.expected_speedup {
            let _ = writeln!(o, "         expected speed-up: up to {x:.2}x");
        }
    }
    o.push('\n');
    for g in &r.gpus {
        let _ = writeln!(o, "{}", gpu_line(g));
        if !g.timeline_pct.is_empty() {
            let line = sparkline(&g.timeline_pct, 60);
            let cells = line.chars().count().max(1);
            let per = r.duration_s / cells as f64;
            let _ = writeln!(
                o,
                "  {}  {}/cell",
                paint(&line, "36", color),
                duration(per.max(g.timeline_step_s.min(r.duration_s.max(0.1))))
            );
        }
        if let Some(p) = gpu_pattern(g) {
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
            let _ = writeln!(o, "  {p}");
        }
    }
    if let Some(h) = host_line(r) {
        let _ = writeln!(o, "{}  {h}", paint("HOST", "1", color));
    }
    if let Some(j) = job_line(r) {
        let _ = writeln!(o, "{}   {j}", paint("JOB", "1", color));
    }
    if let Some(p) = &r.python {
        let block = loop_text(p, color);
        if !block.is_empty() {
            o.push('\n');
            o.push_str(&block);
        }
    }
    if !r.findings.is_empty() {
        o.push('\n');
        let _ = writeln!(o, "{}", paint("FINDINGS", "1", color));
        for f in &r.findings {
            let _ = writeln!(
                o,
                "  [{}] {}: {}",
                paint(f.severity.as_str(), severity_color(f.severity), color),
                paint(f.id.as_str(), "1", color),
                f.title
            );
            let _ = writeln!(o, "      evidence: {}", evidence_line(f));
            let _ = writeln!(o, "      fix: {}", f.recommendation);
            if let Some(x) = f.expected_speedup {
                let _ = writeln!(o, "      gain: up to {x:.2}x");
            }
        }
    } else {
        o.push('\n');
        let _ = writeln!(o, "{}", no_findings(r));
    }
    if !r.notes.is_empty() {
        o.push('\n');
        for n in &r.notes {
            let _ = writeln!(o, "{}  {n}", paint("NOTE", "2", color));
        }
    }
    o
}

/// File name and line of a frame, for people.
pub fn short_at(file: &str, line: i32) -> String {
    let name = std::path::Path::new(file)
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_else(|| file.to_string());
    format!("{name}:{line}")
}

/// Hot stages shown in reports.
pub const HOTSPOTS_SHOWN: usize = 5;

/// The phases in report order with their share, largest first for the bar.
fn phase_list(p: &PhasesPct) -> Vec<(&'static str, f64)> {
    Phase::ALL
        .iter()
        .map(|ph| (ph.as_str(), p.get(*ph)))
        .collect()
}

/// A 40-cell bar of the phase split, one letter per phase.
fn phase_bar(p: &PhasesPct) -> String {
    const LETTERS: [char; 7] = ['D', 'F', 'B', 'O', 'S', 'C', '.'];
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

/// The "training loop" block of the text report.
fn loop_text(p: &PythonEvidence, color: bool) -> String {
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
        let _ = writeln!(
            o,
            "{}  too few Python stack samples of the training thread to split it",
            paint("TRAINING LOOP", "1", color)
        );
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
    let parts: Vec<String> = phase_list(&m.phases_pct)
        .into_iter()
        .filter(|(_, v)| *v > 0.0)
        .map(|(n, v)| format!("{n} {v:.0}%"))
        .collect();
    let _ = writeln!(o, "  {}", parts.join("  "));
    let _ = writeln!(
        o,
        "  {}  D data_wait F forward B backward O optimizer S sync C checkpoint",
        paint(&phase_bar(&m.phases_pct), "36", color)
    );
    if !p.data_hotspots.is_empty() {
        let _ = writeln!(
            o,
            "  slowest data-loading stages ({} process{}, share of loading time):",
            p.loader_processes.max(1),
            if p.loader_processes > 1 { "es" } else { "" }
        );
        for h in p.data_hotspots.iter().take(HOTSPOTS_SHOWN) {
            let _ = writeln!(
                o,
                "    {:>5.1}%  {:<36} {}{}",
                h.pct,
                h.function,
                short_at(&h.file, h.line),
                h.ms_per_sample
                    .map(|x| format!("  {x:.2} ms/sample"))
                    .unwrap_or_default()
            );
        }
    }
    o
}

/// The "training loop" section of the Markdown report.
fn loop_markdown(p: &PythonEvidence) -> String {
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
                .map(|d| format!(": {}", md_escape(d)))
                .unwrap_or_default()
        );
        return o;
    }
    if let Some(m) = &p.main {
        let _ = writeln!(
            o,
            "From Python stack samples of pid {} (thread {}), {} samples.\n",
            m.pid,
            m.thread_name.as_deref().unwrap_or("?"),
            m.samples
        );
        let _ = writeln!(o, "| phase | share |\n|---|---|");
        for (n, v) in phase_list(&m.phases_pct) {
            let _ = writeln!(o, "| {n} | {v:.1}% |");
        }
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
                "| {:.1}% | `{}` | `{}` |",
                h.pct,
                md_escape(&h.function),
                md_escape(&short_at(&h.file, h.line))
            );
        }
        o.push('\n');
    }
    o
}

/// The line shown when there are no findings: an unknown verdict never claims that nothing
/// holds the GPU back (its summary says which data is missing).
fn no_findings(r: &DiagnoseReport) -> &'static str {
    if r.verdict.id == VerdictId::Unknown {
        "No findings: this input cannot name a cause (the verdict says what data would)."
    } else {
        "No findings: nothing is holding the GPU back in this recording."
    }
}

fn md_escape(s: &str) -> String {
    s.replace('|', "\\|")
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map(|x| format!("{x:.digits$}"))
        .unwrap_or_else(|| "–".into())
}

fn markdown(r: &DiagnoseReport) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "# gpufeed diagnosis: `{}`\n", r.source.path);
    let _ = writeln!(
        o,
        "Input: {} · duration {} · {} GPU(s)\n",
        r.source.format.as_str().replace('_', " "),
        duration(r.duration_s),
        r.gpus.len()
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
        r.verdict.id, r.verdict.confidence, r.verdict.summary
    );
    if let Some(top) = r.findings.first() {
        let _ = writeln!(o, "## Top fix\n\n{}\n", top.recommendation);
        if let Some(x) = top.expected_speedup {
            let _ = writeln!(o, "Expected speed-up: up to **{x:.2}x**.\n");
        }
    }
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
                md_escape(&f.title),
                f.expected_speedup
                    .map(|x| format!("{x:.2}x"))
                    .unwrap_or_else(|| "–".into())
            );
        }
        o.push('\n');
        for f in &r.findings {
            let _ = writeln!(o, "### `{}`: {}\n", f.id, f.title);
            let _ = writeln!(o, "| evidence | value |\n|---|---|");
            for (k, v) in &f.evidence {
                let v = match v {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                let _ = writeln!(o, "| {k} | {} |", md_escape(&v));
            }
            let _ = writeln!(o, "\n**Fix:** {}\n", f.recommendation);
        }
    }
    if let Some(p) = &r.python {
        o.push_str(&loop_markdown(p));
    }
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
            (Some(u), Some(t)) => format!("{} / {}", bytes(u as f64), bytes(t as f64)),
            (Some(u), None) => bytes(u as f64),
            _ => "–".into(),
        };
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} / {} / {} | {} | {} | {} |",
            g.index,
            md_escape(g.name.as_deref().unwrap_or("–")),
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
    if let Some(h) = host_line(r) {
        let _ = writeln!(o, "## Host\n\n{h}\n");
    }
    if let Some(j) = job_line(r) {
        let _ = writeln!(o, "## Job\n\n{j}\n");
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
                    "| {} | {:?} | {} | {} | `{}` |",
                    p.pid,
                    p.role,
                    opt(p.cpu_mean_pct, 0),
                    p.rss_max_bytes
                        .map(|b| bytes(b as f64))
                        .unwrap_or_else(|| "–".into()),
                    md_escape(&proc_name(&p.cmd))
                );
            }
            o.push('\n');
        }
    }
    if !r.notes.is_empty() {
        let _ = writeln!(o, "## Notes\n");
        for n in &r.notes {
            let _ = writeln!(o, "- {n}");
        }
        o.push('\n');
    }
    o
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
    fn human_units() {
        assert_eq!(bytes(80.0 * 1024.0 * 1024.0 * 1024.0), "80.0 GiB");
        assert_eq!(bytes(512.0 * 1024.0 * 1024.0), "512 MiB");
        assert_eq!(duration(3725.0), "1h 02m");
        assert_eq!(duration(185.0), "3m 05s");
        assert_eq!(duration(12.5), "12.5s");
    }
}
