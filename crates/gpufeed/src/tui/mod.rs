//! `gpufeed watch`'s terminal UI: state + draw, never calls hardware.
//!
//! [`draw`] renders a [`LiveState`] and the UI's own [`Ui`] state into a ratatui frame; the event
//! loop in `commands::watch` feeds lines and keys. Layout from top to bottom: a title line, the
//! live verdict, one block per GPU (utilization sparkline of the sub-second driver samples,
//! memory bar, PCIe, power, clocks, throttle flags), per-core CPU bars, the job's process tree.
//! Small terminals drop the lower blocks first; `NO_COLOR` draws in monochrome.

use crate::diagnose::verdict::VerdictId;
use crate::live::{GpuLive, LiveState};
use crate::sample::throttle;
use crate::units::bytes;
use ratatui::crossterm::event::{KeyCode, KeyModifiers};
use ratatui::crossterm::{execute, terminal};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Sparkline, Wrap};
use ratatui::Frame;

/// Which block arrows act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Focus {
    #[default]
    Gpus,
    Cpus,
    Procs,
}

impl Focus {
    pub(crate) fn next(self) -> Focus {
        match self {
            Focus::Gpus => Focus::Cpus,
            Focus::Cpus => Focus::Procs,
            Focus::Procs => Focus::Gpus,
        }
    }
    pub(crate) fn prev(self) -> Focus {
        self.next().next()
    }
}

/// The UI's own state (what the keys change).
#[derive(Debug, Clone, Default)]
pub(crate) struct Ui {
    pub paused: bool,
    pub focus: Focus,
    /// First GPU / process shown (arrows scroll the focused block).
    pub gpu_offset: usize,
    pub proc_offset: usize,
    /// Path of the recording in progress (`r`).
    pub recording: Option<String>,
    /// One-line status message (recording saved, job exited, ...).
    pub message: Option<String>,
    pub color: bool,
}

/// A key, already decoded from the terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Key {
    Quit,
    Pause,
    Record,
    Tab,
    BackTab,
    Up,
    Down,
    Other,
}

/// What the event loop must do after a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    None,
    Quit,
    ToggleRecording,
}

impl Ui {
    pub(crate) fn key(&mut self, k: Key, st: &LiveState) -> Action {
        match k {
            Key::Quit => return Action::Quit,
            Key::Pause => self.paused = !self.paused,
            Key::Record => return Action::ToggleRecording,
            Key::Tab => self.focus = self.focus.next(),
            Key::BackTab => self.focus = self.focus.prev(),
            Key::Up => match self.focus {
                Focus::Gpus => self.gpu_offset = self.gpu_offset.saturating_sub(1),
                Focus::Procs => self.proc_offset = self.proc_offset.saturating_sub(1),
                Focus::Cpus => {}
            },
            Key::Down => match self.focus {
                Focus::Gpus => {
                    self.gpu_offset = (self.gpu_offset + 1).min(st.gpus.len().saturating_sub(1))
                }
                Focus::Procs => {
                    self.proc_offset = (self.proc_offset + 1).min(st.procs.len().saturating_sub(1))
                }
                Focus::Cpus => {}
            },
            Key::Other => {}
        }
        Action::None
    }

    fn style(&self, c: Color) -> Style {
        if self.color {
            Style::default().fg(c)
        } else {
            Style::default()
        }
    }

    fn block(&self, title: String, focus: Focus) -> Block<'static> {
        let mut b = Block::default().borders(Borders::ALL).title(title);
        if self.focus == focus {
            b = b.border_style(if self.color {
                Style::default().fg(Color::Cyan)
            } else {
                Style::default().add_modifier(Modifier::BOLD)
            });
        }
        b
    }
}

fn verdict_color(id: VerdictId) -> Color {
    match id {
        VerdictId::ComputeBound => Color::Green,
        VerdictId::Unknown | VerdictId::Idle => Color::Yellow,
        _ => Color::Red,
    }
}

fn pct_color(p: f64) -> Color {
    if p >= 80.0 {
        Color::Green
    } else if p >= 40.0 {
        Color::Yellow
    } else {
        Color::Red
    }
}

fn rate(b: Option<f64>) -> String {
    match b {
        Some(v) => crate::units::gb_per_s(v),
        None => "-".into(),
    }
}

/// Draws the whole screen.
pub(crate) fn draw(f: &mut Frame, st: &LiveState, ui: &Ui) {
    let area = f.area();
    if area.width < 20 || area.height < 5 {
        f.render_widget(
            Paragraph::new("gpufeed: terminal too small (q quits)"),
            area,
        );
        return;
    }
    let gpu_rows = if st.gpus.is_empty() { 1 } else { 3 };
    let gpu_n = st.gpus.len().max(1) as u16;
    let cores = st.host.as_ref().map_or(0, |h| h.cpu_pct.len()) as u16;
    let core_cols = (area.width.saturating_sub(2) / 22).max(1);
    let cpu_h = cores.div_ceil(core_cols).clamp(1, 8) + 2;
    // The verdict and its fix wrap: up to 5 lines on a tall terminal, 3 on a small one.
    let verdict = verdict_lines(st, ui);
    let width = area.width.max(1) as usize;
    let needed: usize = verdict
        .iter()
        .map(|l| l.width().div_ceil(width).max(1))
        .sum();
    let verdict_cap = match area.height {
        0..=9 => 1,
        10..=15 => 4,
        16..=19 => 5,
        20..=23 => 6,
        // 80x24: the fix, with the sweep that measures it, stays whole.
        _ => 8,
    };
    let verdict_h = (needed as u16).clamp(1, verdict_cap);
    // The training loop's phase split: one line, when its stacks (or step markers) are read.
    let loop_line = loop_line(st, ui, area.width as usize).filter(|_| area.height >= 12);
    // A multi-process job: one more line, each rank's data wait and step rate.
    let ranks_line = ranks_line(st, ui, area.width as usize).filter(|_| area.height >= 14);
    let loop_lines: Vec<Line<'static>> = loop_line.into_iter().chain(ranks_line).collect();
    let loop_h = loop_lines.len() as u16;
    // Small terminals: title + verdict + as many GPUs as fit; CPUs and processes only with room.
    let fixed = 1 + verdict_h + loop_h;
    let room = area.height.saturating_sub(fixed);
    let gpus_fit = (room.saturating_sub(2) / gpu_rows).clamp(1, gpu_n);
    let gpu_h = gpus_fit * gpu_rows + 2;
    let rest = room.saturating_sub(gpu_h);
    let (cpu_h, proc_h) = if rest >= cpu_h + 3 {
        (cpu_h, rest - cpu_h)
    } else if rest >= 3 {
        (rest, 0)
    } else {
        (0, 0)
    };
    let chunks = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(verdict_h),
        Constraint::Length(loop_h),
        Constraint::Length(gpu_h.min(room)),
        Constraint::Length(cpu_h),
        Constraint::Length(proc_h),
        Constraint::Min(0),
    ])
    .split(area);
    draw_title(f, chunks[0], st, ui);
    f.render_widget(Paragraph::new(verdict).wrap(Wrap { trim: true }), chunks[1]);
    if !loop_lines.is_empty() {
        f.render_widget(Paragraph::new(loop_lines), chunks[2]);
    }
    draw_gpus(f, chunks[3], st, ui, gpus_fit as usize);
    if cpu_h > 0 {
        draw_cpus(f, chunks[4], st, ui, core_cols as usize);
    }
    if proc_h > 0 {
        // the process list rarely fills the panel's width: the utilization history goes beside it
        if chunks[5].width >= 70 && !st.gpus.is_empty() && proc_h >= 4 {
            let [left, right] =
                Layout::horizontal([Constraint::Min(40), Constraint::Percentage(45)])
                    .areas(chunks[5]);
            draw_procs(f, left, st, ui);
            draw_history(f, right, st, ui);
        } else {
            draw_procs(f, chunks[5], st, ui);
        }
    }
}

/// `LOOP data_wait 50% forward 25% backward 15% optimizer 5% other 5% | probe 46%`: the
/// training thread's phase split over the window (sync and checkpoint_io only when present),
/// then the step markers' exact data wait when the job sends them. Short names where the long
/// ones would not fit in `width`.
fn loop_line(st: &LiveState, ui: &Ui, width: usize) -> Option<Line<'static>> {
    let long = loop_spans(st, ui, false)?;
    if Line::from(long.clone()).width() <= width {
        return Some(Line::from(long));
    }
    loop_spans(st, ui, true).map(Line::from)
}

/// `RANKS rank 0 wait 12% 10.0 st/s · rank 1 wait 55% 8.0 st/s slow`: each rank's data wait
/// and step rate (from its markers, `-` without them), the rank that starves the others
/// marked; `None` for a single-process job. Short (`r0 12% 10.0/s`) where the long one would
/// not fit in `width`.
fn ranks_line(st: &LiveState, ui: &Ui, width: usize) -> Option<Line<'static>> {
    let p = st.report.as_ref()?.python.as_ref()?;
    if p.ranks.len() < 2 {
        return None;
    }
    let slow = p.slow_rank.as_ref().map(|s| s.pid);
    let spans = |short: bool| {
        let mut v = vec![Span::styled(
            "RANKS ",
            Style::default().add_modifier(Modifier::BOLD),
        )];
        for (i, k) in p.ranks.iter().enumerate() {
            let rate = k.steps_per_s.map_or("-".to_string(), |r| format!("{r:.1}"));
            let who = match (short, k.rank) {
                (true, Some(n)) => format!("r{n}"),
                (true, None) => format!("p{}", k.pid),
                (false, _) => k.label(),
            };
            if i > 0 {
                v.push(Span::raw(if short { " " } else { " · " }));
            }
            let (wait, steps) = if short {
                (format!(" {:.0}%", k.data_wait_pct), format!(" {rate}/s"))
            } else {
                (
                    format!(" wait {:.0}%", k.data_wait_pct),
                    format!(" {rate} st/s"),
                )
            };
            v.push(Span::raw(who));
            v.push(Span::styled(wait, ui.style(pct_color(k.data_wait_pct))));
            v.push(Span::raw(steps));
            if slow == Some(k.pid) {
                v.push(Span::styled(
                    if short { "!" } else { " slow" },
                    ui.style(Color::Red),
                ));
            }
        }
        Line::from(v)
    };
    let long = spans(false);
    Some(if long.width() <= width {
        long
    } else {
        spans(true)
    })
}

fn loop_spans(st: &LiveState, ui: &Ui, short: bool) -> Option<Vec<Span<'static>>> {
    let r = st.report.as_ref()?;
    let phases = r
        .python
        .as_ref()
        .and_then(|p| p.main.as_ref())
        .map(|m| &m.phases_pct);
    let probe = r.steps.as_ref().and_then(|s| s.data_wait_pct);
    if phases.is_none() && probe.is_none() {
        return None;
    }
    let mut spans = vec![Span::styled(
        "LOOP ",
        Style::default().add_modifier(Modifier::BOLD),
    )];
    if let Some(p) = phases {
        let parts = [
            ("data_wait", "wait", p.data_wait, true),
            ("forward", "fwd", p.forward, true),
            ("backward", "bwd", p.backward, true),
            ("optimizer", "opt", p.optimizer, true),
            ("sync", "sync", p.sync, p.sync > 0.0),
            (
                "checkpoint_io",
                "ckpt",
                p.checkpoint_io,
                p.checkpoint_io > 0.0,
            ),
            ("other", "other", p.other, true),
        ];
        for (i, (name, abbr, v, show)) in parts.into_iter().enumerate() {
            if !show {
                continue;
            }
            let text = format!("{} {v:.0}% ", if short { abbr } else { name });
            spans.push(if i == 0 {
                Span::styled(text, ui.style(pct_color(v)))
            } else {
                Span::raw(text)
            });
        }
    } else {
        spans.push(Span::raw("(no Python stacks) "));
    }
    if let Some(w) = probe {
        spans.push(Span::styled(
            format!("| probe {w:.0}%"),
            ui.style(Color::Cyan),
        ));
    }
    Some(spans)
}

/// Mean utilization over all GPUs per second, for the last `n` seconds (oldest first).
fn history(st: &LiveState, n: usize) -> Vec<Option<f64>> {
    let mut sum = vec![0.0; n];
    let mut cnt = vec![0u32; n];
    let now = st.t_s;
    for g in &st.gpus {
        for &(t, u) in &g.util {
            let age = now - t;
            if age < 0.0 || age >= n as f64 {
                continue;
            }
            let i = n - 1 - age.floor() as usize;
            sum[i] += u;
            cnt[i] += 1;
        }
    }
    sum.iter()
        .zip(&cnt)
        .map(|(s, c)| (*c > 0).then(|| s / *c as f64))
        .collect()
}

/// A utilization series (0-100 %) as a sparkline, the same in every view.
fn util_sparkline<'a>(data: &'a [u64], ui: &Ui) -> Sparkline<'a> {
    Sparkline::default()
        .data(data)
        .max(100)
        .style(ui.style(Color::Green))
}

fn draw_history(f: &mut Frame, area: Rect, st: &LiveState, ui: &Ui) {
    let b = Block::default()
        .borders(Borders::ALL)
        .title(" GPU util history, 1 s/column ");
    let inner = b.inner(area);
    f.render_widget(b, area);
    if inner.height == 0 || inner.width == 0 {
        return;
    }
    let h = history(st, inner.width as usize);
    let data: Vec<u64> = h
        .iter()
        .map(|x| x.map_or(0, |v| v.round().clamp(0.0, 100.0) as u64))
        .collect();
    let seen: Vec<f64> = h.iter().flatten().copied().collect();
    let label_h = u16::from(inner.height > 2);
    let [spark, label] =
        Layout::vertical([Constraint::Min(1), Constraint::Length(label_h)]).areas(inner);
    f.render_widget(util_sparkline(&data, ui), spark);
    if label_h > 0 && !seen.is_empty() {
        let mean = seen.iter().sum::<f64>() / seen.len() as f64;
        f.render_widget(
            Paragraph::new(format!(
                "{} s: mean {mean:.0}% min {:.0}% max {:.0}%",
                seen.len(),
                seen.iter().copied().fold(f64::INFINITY, f64::min),
                seen.iter().copied().fold(f64::NEG_INFINITY, f64::max)
            )),
            label,
        );
    }
}

fn draw_title(f: &mut Frame, area: Rect, st: &LiveState, ui: &Ui) {
    let mut spans = vec![
        Span::styled(
            "gpufeed watch",
            Style::default().add_modifier(Modifier::BOLD),
        ),
        Span::raw(format!(" {} {:.0}s", st.hostname, st.t_s)),
    ];
    if ui.paused {
        spans.push(Span::styled(
            " PAUSED",
            ui.style(Color::Yellow).add_modifier(Modifier::BOLD),
        ));
    }
    if let Some(r) = &ui.recording {
        spans.push(Span::styled(
            format!(" REC {r}"),
            ui.style(Color::Red).add_modifier(Modifier::BOLD),
        ));
    }
    if let Some(m) = &ui.message {
        spans.push(Span::raw(format!(" | {m}")));
    }
    spans.push(Span::styled(
        "  q quit  p pause  r record  tab/arrows focus",
        ui.style(Color::DarkGray),
    ));
    f.render_widget(Paragraph::new(Line::from(spans)), area);
}

/// The verdict, then its fix on a line of its own (both wrap in the verdict area).
fn verdict_lines(st: &LiveState, ui: &Ui) -> Vec<Line<'static>> {
    match &st.report {
        Some(r) => {
            let mut out = vec![Line::from(vec![
                Span::styled(
                    format!("{} ", r.verdict.id),
                    ui.style(verdict_color(r.verdict.id))
                        .add_modifier(Modifier::BOLD),
                ),
                Span::raw(format!(
                    "({:.0}%, last {:.0}s): {}",
                    r.verdict.confidence * 100.0,
                    r.window_s,
                    r.verdict.summary
                )),
            ])];
            if let Some(fnd) = r.findings.first().filter(|x| !x.recommendation.is_empty()) {
                out.push(Line::from(Span::styled(
                    format!("Fix: {}", fnd.recommendation),
                    ui.style(Color::Cyan),
                )));
            }
            out
        }
        None => vec![Line::from("collecting samples for a verdict...")],
    }
}

fn draw_gpus(f: &mut Frame, area: Rect, st: &LiveState, ui: &Ui, fit: usize) {
    let title = format!(
        " GPUs ({}) ",
        if st.gpus.is_empty() {
            "none".to_string()
        } else {
            st.gpus.len().to_string()
        }
    );
    let block = ui.block(title, Focus::Gpus);
    let inner = block.inner(area);
    f.render_widget(block, area);
    if st.gpus.is_empty() {
        let why = st
            .header
            .gpu_error
            .clone()
            .unwrap_or_else(|| "the driver reports no GPU".into());
        f.render_widget(
            Paragraph::new(format!("No GPU: {why}. Host and job are still shown.")),
            inner,
        );
        return;
    }
    let start = ui.gpu_offset.min(st.gpus.len().saturating_sub(fit));
    let rows = Layout::vertical(vec![Constraint::Length(3); fit]).split(inner);
    for (row, g) in rows.iter().zip(st.gpus.iter().skip(start)) {
        draw_gpu(f, *row, st, g, ui);
    }
}

fn draw_gpu(f: &mut Frame, area: Rect, st: &LiveState, g: &GpuLive, ui: &Ui) {
    let area = area.intersection(f.area());
    if area.height == 0 || area.width == 0 {
        return;
    }
    let now = st.util_mean(g, 1.0);
    let label_w = 20u16.min(area.width / 3);
    let [label, spark] = Layout::horizontal([Constraint::Length(label_w), Constraint::Min(1)])
        .areas(Rect { height: 1, ..area });
    let name = g
        .name
        .as_deref()
        .map(|n| n.trim_start_matches("NVIDIA ").to_string())
        .unwrap_or_default();
    let busy = st
        .gpu_evidence(g.index)
        .and_then(|e| e.busy_fraction)
        .map_or("-".into(), |b| format!("{:.0}%", b * 100.0));
    f.render_widget(
        Paragraph::new(Line::from(vec![
            Span::styled(
                format!("GPU{} ", g.index),
                Style::default().add_modifier(Modifier::BOLD),
            ),
            Span::styled(
                now.map_or("  -%".into(), |u| format!("{u:>3.0}%")),
                ui.style(now.map_or(Color::Gray, pct_color)),
            ),
            Span::raw(format!(" busy {busy} ")),
        ])),
        label,
    );
    // Every driver sample, newest at the right: oscillation stays visible.
    let w = spark.width as usize;
    let data: Vec<u64> = g
        .util
        .iter()
        .skip(g.util.len().saturating_sub(w))
        .map(|(_, u)| u.clamp(0.0, 100.0).round() as u64)
        .collect();
    f.render_widget(util_sparkline(&data, ui), spark);
    let (line2, line3) = gpu_detail(g, &name, ui);
    f.render_widget(
        Paragraph::new(vec![line2, line3]),
        Rect {
            y: area.y + 1,
            height: area.height.saturating_sub(1),
            ..area
        },
    );
}

/// A GPU's second and third lines: memory and PCIe; power, clock, temperature and throttling.
fn gpu_detail<'a>(g: &GpuLive, name: &str, ui: &Ui) -> (Line<'a>, Line<'a>) {
    let last = g.last.as_ref();
    // Memory bar + numbers.
    let used = last.and_then(|s| s.mem_used_bytes);
    let frac = used
        .zip(g.mem_total_bytes)
        .map(|(u, t)| u as f64 / t.max(1) as f64);
    let bar_w = 20usize;
    let filled = frac.map_or(0, |x| (x.clamp(0.0, 1.0) * bar_w as f64).round() as usize);
    let mem = format!(
        "mem [{}{}] {} / {}",
        "#".repeat(filled),
        ".".repeat(bar_w - filled),
        used.map_or("-".into(), bytes),
        g.mem_total_bytes.map_or("-".into(), bytes),
    );
    let link = last
        .and_then(|s| s.pcie_gen.zip(s.pcie_width))
        .map_or(String::new(), |(gen, w)| format!(" gen{gen}x{w}"));
    let line2 = Line::from(vec![
        Span::raw(mem),
        Span::raw(format!(
            "  PCIe RX {} TX {}{link}",
            rate(g.pcie_rx_bytes_per_s),
            rate(g.pcie_tx_bytes_per_s)
        )),
    ]);
    let flags: Vec<&str> = last
        .and_then(|s| s.throttle_reasons)
        .map(|m| throttle::names(m & throttle::SLOWING))
        .unwrap_or_default();
    let line3 = Line::from(vec![
        Span::raw(format!(
            "{}  SM {}  {}  ",
            last.and_then(|s| s.power_w)
                .map_or("- W".into(), |p| format!("{p:.0} W")),
            last.and_then(|s| s.sm_clock_mhz)
                .map_or("- MHz".into(), |c| format!("{c} MHz")),
            last.and_then(|s| s.temperature_c)
                .map_or("- C".into(), |c| format!("{c} C")),
        )),
        if flags.is_empty() {
            Span::styled(format!("no throttling  {name}"), ui.style(Color::DarkGray))
        } else {
            Span::styled(
                format!("THROTTLED: {}", flags.join(",")),
                ui.style(Color::Red).add_modifier(Modifier::BOLD),
            )
        },
    ]);
    (line2, line3)
}

fn draw_cpus(f: &mut Frame, area: Rect, st: &LiveState, ui: &Ui, cols: usize) {
    let Some(h) = &st.host else {
        let b = ui.block(" CPU ".into(), Focus::Cpus);
        let inner = b.inner(area);
        f.render_widget(b, area);
        f.render_widget(Paragraph::new("waiting for the first reading..."), inner);
        return;
    };
    let title = format!(
        " CPU {}, {} ",
        crate::units::plural(h.cpu_pct.len(), "core", "cores"),
        h.cpu_total_pct
            .map_or("-".into(), |c| format!("{c:.0}% mean"))
    );
    let b = ui.block(title, Focus::Cpus);
    let inner = b.inner(area);
    f.render_widget(b, area);
    let rows = inner.height.max(1) as usize;
    let cell = (inner.width as usize / cols).max(8);
    let bar = cell.saturating_sub(11).max(1);
    let mut lines: Vec<Line> = vec![Line::default(); rows];
    for (i, &p) in h.cpu_pct.iter().enumerate() {
        let (r, c) = (i % rows, i / rows);
        if c >= cols {
            continue;
        }
        let n = ((p.clamp(0.0, 100.0) / 100.0) * bar as f64).round() as usize;
        let spans = &mut lines[r].spans;
        spans.push(Span::raw(format!("{i:>3}[")));
        spans.push(Span::styled("|".repeat(n), ui.style(pct_color(100.0 - p))));
        spans.push(Span::raw(format!("{}]{p:>4.0}% ", " ".repeat(bar - n))));
    }
    f.render_widget(Paragraph::new(lines), inner);
}

fn draw_procs(f: &mut Frame, area: Rect, st: &LiveState, ui: &Ui) {
    let tree = st.proc_tree();
    let title = if st.header.pid.is_some() {
        format!(
            " Job: {} ({} exited) ",
            crate::units::plural(tree.len(), "process", "processes"),
            st.procs_exited
        )
    } else {
        " Job: none followed (gpufeed watch -- COMMAND, or --pid PID) ".to_string()
    };
    let b = ui.block(title, Focus::Procs);
    let inner = b.inner(area);
    f.render_widget(b, area);
    let start = ui.proc_offset.min(tree.len().saturating_sub(1));
    let lines: Vec<Line> = tree
        .iter()
        .skip(start)
        .take(inner.height as usize)
        .map(|(depth, p)| {
            let cpu = p.cpu_pct;
            Line::from(vec![
                Span::styled(
                    cpu.map_or("    -%".into(), |c| format!("{c:>5.0}%")),
                    ui.style(cpu.map_or(Color::Gray, |c| {
                        if c >= 85.0 {
                            Color::Red
                        } else {
                            Color::Reset
                        }
                    })),
                ),
                Span::raw(format!(
                    " {:>7} {} {}{} {}",
                    p.pid,
                    p.state.unwrap_or('?'),
                    "  ".repeat(*depth),
                    p.comm.as_deref().unwrap_or("?"),
                    p.rss_bytes
                        .map_or(String::new(), |b| format!("rss {}", bytes(b))),
                )),
            ])
        })
        .collect();
    f.render_widget(Paragraph::new(lines), inner);
}

/// Puts the terminal back however `watch` ends (error, panic).
pub(crate) struct TermGuard;
impl TermGuard {
    pub(crate) fn enter() -> std::io::Result<TermGuard> {
        terminal::enable_raw_mode()?;
        let g = TermGuard;
        execute!(std::io::stdout(), terminal::EnterAlternateScreen)?;
        Ok(g)
    }
}
impl Drop for TermGuard {
    fn drop(&mut self) {
        let _ = execute!(std::io::stdout(), terminal::LeaveAlternateScreen);
        let _ = terminal::disable_raw_mode();
    }
}

/// The view's key for a terminal key press.
pub(crate) fn key_of(code: KeyCode, mods: KeyModifiers) -> Key {
    match code {
        KeyCode::Char('q') | KeyCode::Esc => Key::Quit,
        KeyCode::Char('c') if mods.contains(KeyModifiers::CONTROL) => Key::Quit,
        KeyCode::Char('p') | KeyCode::Char(' ') => Key::Pause,
        KeyCode::Char('r') => Key::Record,
        KeyCode::Tab | KeyCode::Right => Key::Tab,
        KeyCode::BackTab | KeyCode::Left => Key::BackTab,
        KeyCode::Up | KeyCode::Char('k') => Key::Up,
        KeyCode::Down | KeyCode::Char('j') => Key::Down,
        _ => Key::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::fixture;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    fn render(st: &LiveState, ui: &Ui, w: u16, h: u16) -> String {
        let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
        t.draw(|f| draw(f, st, ui)).unwrap();
        let buf = t.backend().buffer().clone();
        let mut out = String::new();
        for y in 0..h {
            for x in 0..w {
                out.push_str(buf[(x, y)].symbol());
            }
            out.push('\n');
        }
        out
    }

    #[test]
    fn full_screen_snapshot() {
        let st = fixture::state(2, 20);
        let ui = Ui::default();
        insta::assert_snapshot!("watch_120x36", render(&st, &ui, 120, 36));
    }

    #[test]
    fn standard_terminal_keeps_the_verdict_and_fix_visible() {
        let st = fixture::state(1, 20);
        let out = render(&st, &Ui::default(), 80, 24);
        let fix = &st.report.as_ref().unwrap().findings[0].recommendation;
        let flat: String = out.lines().map(str::trim_end).collect::<Vec<_>>().join(" ");
        // the first words and the last word of the fix are on screen
        let words: Vec<&str> = fix.split_whitespace().collect();
        assert!(flat.contains(&words[..4].join(" ")), "{out}");
        assert!(flat.contains("GPU util history"), "{out}");
        assert!(
            flat.contains("allows up to 3 workers."),
            "the whole fix: {out}"
        );
        assert!(
            flat.contains(words[words.len() - 1]),
            "the fix's last word: {out}"
        );
        insta::assert_snapshot!("watch_80x24", out);
    }

    #[test]
    fn the_live_phase_split_stays_within_an_80x24_frame() {
        let st = fixture::state_with_loop(1, 20);
        let out = render(&st, &Ui::default(), 80, 24);
        let line = out
            .lines()
            .find(|l| l.starts_with("LOOP "))
            .unwrap_or_else(|| panic!("no loop line: {out}"));
        for part in [
            "data_wait 50%",
            "forward 25%",
            "backward 15%",
            "optimizer 5%",
            "other 5%",
            "probe 46%",
        ] {
            assert!(line.contains(part), "{part}: {line}");
        }
        assert!(out.lines().all(|l| l.chars().count() == 80));
        assert_eq!(out.lines().count(), 24);
        insta::assert_snapshot!("watch_80x24_loop", out);
        // Narrower: short names, still whole.
        let narrow = render(&st, &Ui::default(), 60, 24);
        assert!(
            narrow.contains("LOOP wait 50% fwd 25% bwd 15% opt 5% other 5% | probe 46%"),
            "{narrow}"
        );
        // Small terminals drop it before the verdict.
        let small = render(&st, &Ui::default(), 60, 10);
        assert!(!small.contains("LOOP "), "{small}");
    }

    #[test]
    fn a_multi_process_job_gets_a_line_per_rank_under_the_loop() {
        let st = fixture::state_with_ranks(1, 20);
        let out = render(&st, &Ui::default(), 80, 24);
        let lines: Vec<&str> = out.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.starts_with("LOOP "))
            .unwrap_or_else(|| panic!("no loop line: {out}"));
        assert_eq!(
            lines[at + 1].trim_end(),
            "RANKS rank 0 wait 12% 10.0 st/s · rank 1 wait 55% 8.0 st/s slow",
            "{out}"
        );
        assert!(out.lines().all(|l| l.chars().count() == 80));
        insta::assert_snapshot!("watch_80x24_ranks", out);
        let narrow = render(&st, &Ui::default(), 40, 24);
        assert!(
            narrow.contains("RANKS r0 12% 10.0/s r1 55% 8.0/s!"),
            "{narrow}"
        );
        // A single-process job: no rank line.
        let one = render(&fixture::state_with_loop(1, 20), &Ui::default(), 80, 24);
        assert!(!one.contains("RANKS"), "{one}");
    }

    #[test]
    fn small_terminal_snapshot() {
        let st = fixture::state(2, 20);
        let ui = Ui {
            paused: true,
            ..Default::default()
        };
        insta::assert_snapshot!("watch_60x14_paused", render(&st, &ui, 60, 14));
    }

    #[test]
    fn no_gpu_snapshot() {
        let mut h = fixture::header(0);
        h.gpu_error = Some("no NVIDIA driver found".into());
        let st = LiveState::new(h, 30.0);
        insta::assert_snapshot!("watch_no_gpu", render(&st, &Ui::default(), 80, 16));
    }

    #[test]
    fn tiny_terminals_do_not_panic() {
        let st = fixture::state(2, 5);
        for (w, h) in [(1, 1), (10, 3), (20, 5), (200, 4), (30, 60)] {
            render(&st, &Ui::default(), w, h);
        }
    }

    #[test]
    fn keys_move_focus_and_scroll() {
        let st = fixture::state(2, 2);
        let mut ui = Ui::default();
        assert_eq!(ui.key(Key::Tab, &st), Action::None);
        assert_eq!(ui.focus, Focus::Cpus);
        ui.key(Key::BackTab, &st);
        ui.key(Key::Down, &st);
        ui.key(Key::Down, &st);
        assert_eq!(ui.gpu_offset, 1);
        assert_eq!(ui.key(Key::Record, &st), Action::ToggleRecording);
        ui.key(Key::Pause, &st);
        assert!(ui.paused);
        assert_eq!(ui.key(Key::Quit, &st), Action::Quit);
    }

    #[test]
    fn color_only_when_asked() {
        let st = fixture::state(1, 4);
        let mut t = Terminal::new(TestBackend::new(80, 20)).unwrap();
        t.draw(|f| draw(f, &st, &Ui::default())).unwrap();
        let buf = t.backend().buffer().clone();
        assert!(buf.content().iter().all(|c| c.fg == Color::Reset));
        let ui = Ui {
            color: true,
            ..Default::default()
        };
        t.draw(|f| draw(f, &st, &ui)).unwrap();
        let buf = t.backend().buffer().clone();
        assert!(buf.content().iter().any(|c| c.fg != Color::Reset));
    }
}
