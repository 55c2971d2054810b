//! `gpufeed run` and `gpufeed record`.

use crate::cli::{GlobalOpts, RecordArgs, RecordingOpts, RunArgs};
use crate::diagnose::input::InputFormat;
use crate::diagnose::input::LogOptions;
use crate::exit::{Exit, Failure};
use crate::inject::InjectReport;
use crate::job::SignalWatch;
use crate::outfile::{refuse_same_as_input, Clobber};
use crate::present;
use crate::present::html::RecordingSeries;
use crate::present::tensorboard::TbSeries;
use crate::present::OutputFormat;
use crate::record::recorder::{default_output_name, RecorderConfig};
use crate::record::session::{self, check_output, Session, Spawn};
use crate::record::summary::SummaryBuilder;
use crate::sample::event::End;
use crate::sample::event::EndReason;
use crate::sample::host::pid_alive;
use crate::sample::steps::{StepSocket, ENV_VAR};
use anyhow::Context;
use std::io::IsTerminal;
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

fn prepare(
    global: &GlobalOpts,
    opts: &RecordingOpts,
    steps: Option<Arc<StepSocket>>,
) -> anyhow::Result<Session> {
    let (output, clobber) = match &opts.output {
        Some(o) if opts.force => (o.clone(), Clobber::Replace),
        Some(o) => (o.clone(), Clobber::Refuse),
        None => (default_output_name(SystemTime::now()), Clobber::Suffix),
    };
    let session = Session::prepare(RecorderConfig {
        output,
        interval: opts.interval,
        nvml_lib: global.nvml_lib.clone(),
        no_gpu: false,
        clobber,
        py: opts.py.config(true),
        steps,
    })
    .map_err(Failure::from)?;
    if let Some(e) = session.gpu_error() {
        eprintln!("gpufeed: {e}: recording host metrics only");
    }
    Ok(session)
}

/// The checks of the recording options `run` and `record` share, made once before anything
/// starts (clap has already checked `--interval`).
fn check_recording(opts: &RecordingOpts) -> anyhow::Result<()> {
    if let (Some(j), Some(o)) = (&opts.export_json, &opts.output) {
        refuse_same_as_input("--export-json", j, [o.as_path()])?;
    }
    if let Some(o) = &opts.output {
        check_output("--output", o)?;
    }
    Ok(())
}

/// The JSON summary goes to stdout at the end (`--format json`, neither `--quiet` nor
/// `--export-json`).
fn json_on_stdout(opts: &RecordingOpts) -> bool {
    opts.format == OutputFormat::Json && !opts.quiet && opts.export_json.is_none()
}

/// After a recording: the summary, the diagnosis and (with `html`) the page, all from one read
/// of the recording.
fn print_summary(
    path: &Path,
    opts: &RecordingOpts,
    html: Option<&Path>,
    tensorboard: Option<&Path>,
) -> anyhow::Result<()> {
    if opts.quiet && opts.export_json.is_none() && html.is_none() && tensorboard.is_none() {
        return Ok(());
    }
    let mut summary = SummaryBuilder::default();
    let mut series = html.map(|_| RecordingSeries::default());
    let mut tb = tensorboard.map(|_| TbSeries::default());
    let diagnosis = crate::diagnose::diagnose_file_with(
        path,
        InputFormat::Recording,
        &LogOptions::default(),
        &mut (&mut summary, &mut series, &mut tb),
    )
    .with_context(|| format!("summarising {}", path.display()))?;
    let summary = summary.finish(path, diagnosis.source.truncated);
    if let (Some(dir), Some(tb)) = (tensorboard, &tb) {
        match super::write_tensorboard(dir, tb, &diagnosis, false) {
            Ok(p) => eprintln!("gpufeed: wrote {}", p.display()),
            Err(e) => eprintln!("gpufeed: TensorBoard: {e}"),
        }
    }
    if let Some(h) = html {
        match present::html::diagnose_html(&[(&diagnosis, series.as_ref())])
            .map_err(|e| e.to_string())
            .and_then(|page| crate::outfile::write_report(h, page).map_err(|e| e.to_string()))
        {
            Ok(()) => eprintln!("gpufeed: wrote {}", h.display()),
            Err(e) => eprintln!("gpufeed: HTML report: {e}"),
        }
    }
    if opts.quiet && opts.export_json.is_none() {
        return Ok(());
    }
    let diagnosis = Some(diagnosis);
    if let Some(p) = &opts.export_json {
        // The JSON goes to the file, never to stdout, which belongs to the job.
        let json = present::run::json(&summary, diagnosis.as_ref()) + "\n";
        match crate::outfile::write_atomic(p, json.as_bytes()) {
            Ok(()) => eprintln!("gpufeed: wrote {}", p.display()),
            Err(e) => eprintln!("gpufeed: cannot write {}: {e}", p.display()),
        }
    }
    if opts.quiet {
        return Ok(());
    }
    match opts.format {
        OutputFormat::Json if opts.export_json.is_some() => {}
        OutputFormat::Text | OutputFormat::Markdown | OutputFormat::Html => {
            let color = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            eprint!(
                "{}",
                present::run::text(&summary, diagnosis.as_ref(), color)
            )
        }
        OutputFormat::Json => println!("{}", present::run::json(&summary, diagnosis.as_ref())),
    }
    Ok(())
}

/// The checks `run` makes before anything starts: no gpufeed option after the command, the
/// overrides parse, and `--html` is not the recording. Returns the overrides to inject.
fn check_run_args(args: &RunArgs) -> anyhow::Result<Option<crate::inject::Injection>> {
    if let Some(first) = args
        .command
        .first()
        .map(|c| c.to_string_lossy())
        .filter(|c| c.starts_with('-'))
    {
        return Err(Failure::new(
            Exit::Usage,
            format!("unknown option '{first}' for run: put gpufeed's options before the command, e.g. gpufeed run -o rec.ndjson -- python train.py"),
        )
        .into());
    }
    let inject = args
        .inject
        .spec()
        .map(|s| s.with_auto_steps(!args.no_auto_steps))
        .and_then(|s| crate::inject::for_setting(&s, &[]))
        .map_err(Failure::from)?
        .map(|i| i.for_program(args.command.first().map(|c| c.as_os_str())));
    if let (Some(h), Some(o)) = (&args.html, &args.rec.output) {
        refuse_same_as_input("--html", h, [o.as_path()])?;
    }
    crate::outfile::refuse_shared(
        &[
            ("--output", args.rec.output.as_deref()),
            ("--export-json", args.rec.export_json.as_deref()),
            ("--html", args.html.as_deref()),
            ("--tensorboard", args.tensorboard.as_deref()),
        ],
        None,
        &[],
    )?;
    if let Some(dir) = &args.tensorboard {
        crate::outfile::check_tensorboard_dir(dir)?;
    }
    check_recording(&args.rec)?;
    Ok(inject)
}

/// What the overrides did, for an unrecorded job: on stderr.
fn print_overrides(rep: &InjectReport, quiet: bool) {
    if !quiet {
        eprint!(
            "{}",
            present::end_summary::overrides_text(&rep.overrides, &rep.notes)
        );
    }
}

/// `gpufeed run -- CMD...`: the job's exit code becomes gpufeed's.
pub(crate) fn run(global: &GlobalOpts, args: &RunArgs) -> anyhow::Result<u8> {
    let inject = check_run_args(args)?;
    let mut env: Vec<(String, String)> = inject.iter().map(|i| i.env_var(&[])).collect();
    let session = prepare(
        global,
        &args.rec,
        crate::sample::steps::for_job(None, Some("recorded"))?,
    )?;
    if let Some(s) = session.steps() {
        env.push((ENV_VAR.into(), s.path().display().to_string()));
    }
    let (watch, early_signal) = crate::job::forward_signals(session.tree_pids())?;
    let sig = early_signal.load(Ordering::SeqCst);
    if sig != 0 {
        // Interrupted before the job started: do not start it (dropping the session leaves
        // nothing behind).
        return Ok(Exit::signal(sig));
    }
    // The JSON report on stdout: the job's own stdout goes to stderr, so that stdout parses.
    let how = Spawn::Terminal {
        argv: &args.command,
        env: &env,
        stdout_to_stderr: json_on_stdout(&args.rec),
    };
    let (mut job, recorder) = session.spawn(how).map_err(Failure::from)?;
    // A recording that cannot start does not stop the job: it runs unrecorded.
    let recorder = recorder
        .map_err(|e| eprintln!("gpufeed: {e}: the job runs unrecorded"))
        .ok();
    let status = job.wait();
    drop(watch);
    let (end, code) = crate::record::recorder::job_end(status);
    let overrides = inject.as_ref().map(|i| i.read());
    // The job's exit code is gpufeed's even when the recording could not be completed.
    match recorder.map(|r| session::finish(r, overrides.as_ref(), end)) {
        Some(Ok(path)) => {
            if let Err(e) = print_summary(
                &path,
                &args.rec,
                args.html.as_deref(),
                args.tensorboard.as_deref(),
            ) {
                eprintln!("gpufeed: {e:#}");
            }
        }
        Some(Err(e)) => eprintln!("gpufeed: {e}"),
        None => {
            if let Some(o) = &overrides {
                print_overrides(o, args.rec.quiet);
            }
        }
    }
    Ok(code)
}

/// `gpufeed record [--duration D] [--pid PID]`.
pub(crate) fn record(global: &GlobalOpts, args: &RecordArgs) -> anyhow::Result<u8> {
    if let Some(pid) = args.pid {
        if !pid_alive(pid) {
            return Err(Failure::input(format!(
                "no process with pid {pid}: check it with `ps -p {pid}` (or use `gpufeed run -- CMD`)"
            ))
            .into());
        }
    }
    check_recording(&args.rec)?;
    let steps = crate::sample::steps::for_job(args.step_socket.as_deref(), Some("recorded"))?;
    let session = prepare(global, &args.rec, steps)?;
    let step_path = session.steps().map(|s| s.path().display().to_string());
    let recorder = session
        .attach(args.pid)
        .map_err(|e| Failure::with(Exit::Input, e))?;
    let got_signal = Arc::new(AtomicI32::new(0));
    let flag = Arc::clone(&got_signal);
    let watch = SignalWatch::start(move |r| flag.store(r.signal, Ordering::SeqCst))
        .map_err(Failure::from)?;
    if !args.rec.quiet {
        eprintln!(
            "gpufeed: recording to {}{}; Ctrl-C stops",
            recorder.path().display(),
            match (args.duration, args.pid) {
                (Some(d), _) => format!(" for {}", humantime::format_duration(d)),
                (None, Some(p)) => format!(" until pid {p} exits"),
                (None, None) => String::new(),
            }
        );
        if let Some(p) = &step_path {
            if args.step_socket.is_some() {
                eprintln!("gpufeed: step markers: reading {p} (the job's {ENV_VAR})");
            } else {
                // A job started now (not one already running) can send its steps here.
                eprintln!("gpufeed: step markers: start the job with {ENV_VAR}={p}");
            }
        }
    }
    let started = Instant::now();
    let watched = args.pid.map(crate::sample::host::PidWatch::new);
    let reason = loop {
        std::thread::sleep(Duration::from_millis(50));
        if got_signal.load(Ordering::SeqCst) != 0 {
            break EndReason::Interrupted;
        }
        if args.duration.is_some_and(|d| started.elapsed() >= d) {
            break EndReason::Duration;
        }
        if watched.as_ref().is_some_and(|w| !w.alive()) {
            break EndReason::AttachedExited;
        }
    };
    drop(watch);
    let end = End {
        reason: Some(reason),
        ..Default::default()
    };
    let path = session::finish(recorder, None, end).context("finishing the recording")?;
    print_summary(&path, &args.rec, None, None)?;
    Ok(Exit::Ok.code())
}
