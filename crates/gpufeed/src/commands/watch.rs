//! `gpufeed watch [-- COMMAND]`: the full-screen live view.
//!
//! Collection runs on the sampler's threads; this loop only folds lines into the state, reads
//! keys and draws (at `--refresh`, 4 times a second by default), so a slow driver never freezes
//! the screen and drawing never delays a sample.

use crate::cli::{GlobalOpts, WatchArgs};
use crate::exit::{Exit, Failure};
use crate::live::sampler::{LiveSampler, SamplerConfig};
use crate::live::{LiveState, DEFAULT_WINDOW_S};
use crate::record::recorder::LiveRecording;
use crate::sample::event::Line;
use crate::tui::{self, Action, Ui};
use ratatui::crossterm::event::{self, Event, KeyEventKind};
use std::io::IsTerminal;
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) fn run(global: &GlobalOpts, args: &WatchArgs) -> anyhow::Result<u8> {
    if args.refresh > Duration::from_millis(500) || args.refresh < Duration::from_millis(20) {
        return Err(Failure::new(
            Exit::Usage,
            "--refresh must be between 20ms and 500ms (the view refreshes at least twice a second)",
        )
        .into());
    }
    if let Some(first) = args.command.first().filter(|c| c.starts_with('-')) {
        return Err(Failure::new(
            Exit::Usage,
            format!("unknown option '{first}' for watch: put gpufeed's options before `--`"),
        )
        .into());
    }
    if !std::io::stdout().is_terminal() {
        return Err(Failure::new(
            Exit::Usage,
            "watch needs a terminal; for a pipe or a file use `gpufeed serve --once` or `gpufeed record`",
        )
        .into());
    }
    if args.interval < Duration::from_millis(10) {
        return Err(Failure::new(Exit::Usage, "--interval must be at least 10ms").into());
    }
    if let Some(p) = args.pid.filter(|p| !crate::sample::host::pid_alive(*p)) {
        return Err(Failure::input(format!(
            "no process with pid {p}: check it with `ps -p {p}`"
        ))
        .into());
    }
    let inject = args.inject.spec().map_err(Failure::from)?;
    if !inject.is_empty() && args.command.is_empty() {
        return Err(Failure::new(
            Exit::Usage,
            "--dataloader/--torch need a command to start: gpufeed watch --dataloader num_workers=4 -- python train.py",
        )
        .into());
    }
    // Step markers from the DataLoader of a job started here (a `--pid` job cannot be reached).
    let inject = inject.with_auto_steps(!args.no_auto_steps && !args.command.is_empty());
    let injection = crate::inject::for_setting(&inject, &[]).map_err(Failure::from)?;
    let mut env: Vec<(String, String)> = injection.iter().map(|i| i.env_var(&[])).collect();
    // Step markers from a job started here (`--pid` jobs were started without the variable).
    let steps = if args.step_socket.is_none() && args.command.is_empty() {
        None
    } else {
        crate::sample::steps::for_job(args.step_socket.as_deref(), None)?
    };
    if let Some(s) = &steps {
        env.push((
            crate::sample::steps::ENV_VAR.into(),
            s.path().display().to_string(),
        ));
    }
    let mut job = if args.command.is_empty() {
        None
    } else {
        Some(crate::job::spawn_logged(
            &args.command,
            &env,
            &args.job_log,
        )?)
    };
    let root = job.as_ref().map(|c| c.id()).or(args.pid);
    // The UI thread owns the state; collection runs on the sampler's threads.
    let (tx, rx) = mpsc::channel();
    let sampler = match LiveSampler::start(
        SamplerConfig {
            interval: args.interval,
            nvml_lib: global.nvml_lib.clone(),
            no_gpu: false,
            root_pid: root,
            // No notes: the screen is in use (the view says when stacks cannot be read).
            py: args.py.config(false),
            steps,
        },
        tx,
    ) {
        Ok(s) => s,
        Err(e) => {
            if let Some(j) = job.as_mut() {
                let _ = j.kill();
                let _ = j.wait();
            }
            return Err(Failure::with(Exit::Failure, e).into());
        }
    };
    let mut header = sampler.header().clone();
    header.command = (!args.command.is_empty()).then(|| args.command.clone());
    let state = LiveState::new(header, DEFAULT_WINDOW_S);
    let code = ui_loop(args, sampler, state, rx, job.as_mut());
    // The screen is gone: say what --dataloader/--torch changed.
    if let Some(i) = &injection {
        let rep = i.read();
        let text = crate::present::end_summary::overrides_text(&rep.overrides, &rep.notes);
        if !text.is_empty() {
            eprint!("gpufeed: {}", text.trim_start());
        }
    }
    code
}

fn ui_loop(
    args: &WatchArgs,
    mut sampler: LiveSampler,
    mut state: LiveState,
    rx: Receiver<Line>,
    mut job: Option<&mut Child>,
) -> anyhow::Result<u8> {
    let mut ui = Ui {
        color: std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        ..Default::default()
    };
    let guard = tui::TermGuard::enter()
        .map_err(|e| Failure::new(Exit::Failure, format!("cannot set up the terminal: {e}")))?;
    let backend = ratatui::backend::CrosstermBackend::new(std::io::stdout());
    let mut term = ratatui::Terminal::new(backend)?;
    term.clear()?;
    // SIGTERM/SIGHUP (a closed terminal, `kill`) end the view like `q`: the terminal is restored,
    // a recording is finished and a started job is stopped rather than orphaned.
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let _signals = crate::job::SignalWatch::start(move |_| flag.store(true, Ordering::SeqCst))
        .map_err(Failure::from)?;
    let mut recording: Option<LiveRecording> = None;
    let mut job_code: Option<u8> = None;
    let mut next_draw = Instant::now();
    let mut dirty = true;
    let result: anyhow::Result<()> = (|| loop {
        if stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        take_lines(&rx, &mut recording, &mut ui, &mut state);
        if job_code.is_none() {
            if let Some(j) = job.as_mut() {
                if let Ok(Some(st)) = j.try_wait() {
                    let c = crate::job::shell_code(st);
                    job_code = Some(c);
                    ui.message = Some(format!("job exited ({c}); q quits"));
                    dirty = true;
                }
            }
        }
        let now = Instant::now();
        if now >= next_draw {
            if !ui.paused || dirty {
                term.draw(|f| tui::draw(f, &state, &ui))?;
                dirty = false;
            }
            next_draw = now + args.refresh;
        }
        let wait = next_draw.saturating_duration_since(Instant::now());
        if event::poll(wait)? {
            match event::read()? {
                Event::Key(k) if k.kind != KeyEventKind::Release => {
                    dirty = true;
                    next_draw = Instant::now();
                    match ui.key(tui::key_of(k.code, k.modifiers), &state) {
                        Action::Quit => return Ok(()),
                        Action::ToggleRecording => {
                            toggle_recording(&mut recording, &mut ui, &state)
                        }
                        Action::None => {}
                    }
                }
                Event::Resize(..) => {
                    dirty = true;
                    next_draw = Instant::now();
                }
                _ => {}
            }
        }
    })();
    drop(term);
    drop(guard);
    sampler.stop();
    if let Some(r) = recording.take() {
        match r.finish(state.t_s) {
            Ok(p) => eprintln!("gpufeed: recording saved to {}", p.display()),
            Err(e) => eprintln!("gpufeed: recording failed: {e}"),
        }
    }
    result?;
    if let Some(j) = job {
        if job_code.is_none() {
            let code = crate::job::stop_tree(j, state.procs.keys().copied().collect());
            eprintln!(
                "gpufeed: the job was stopped when watch quit; its output is in {}",
                args.job_log.display()
            );
            return Ok(code);
        }
        return Ok(job_code.unwrap_or(0));
    }
    Ok(Exit::Ok.code())
}

/// Takes the samples the sampler has sent into the view, and into the recording if one runs
/// (a recording that cannot be written stops, and the view says so).
fn take_lines(
    rx: &Receiver<Line>,
    recording: &mut Option<LiveRecording>,
    ui: &mut Ui,
    state: &mut LiveState,
) {
    while let Ok(line) = rx.try_recv() {
        if let Some(r) = recording.as_mut() {
            if let Err(e) = r.write(&line) {
                ui.message = Some(format!("recording stopped: {e}"));
                *recording = None;
                ui.recording = None;
            }
        }
        state.push(line);
    }
}

/// `r`: saves the running recording, or starts one.
fn toggle_recording(recording: &mut Option<LiveRecording>, ui: &mut Ui, state: &LiveState) {
    match recording.take() {
        Some(r) => {
            ui.recording = None;
            ui.message = Some(match r.finish(state.t_s) {
                Ok(p) => format!("saved {}", p.display()),
                Err(e) => format!("recording failed: {e}"),
            });
        }
        None => match LiveRecording::start(&state.header, state.py_defs()) {
            Ok(r) => {
                ui.recording = Some(r.path.display().to_string());
                ui.message = None;
                *recording = Some(r);
            }
            Err(e) => ui.message = Some(format!("cannot record: {e}")),
        },
    }
}
