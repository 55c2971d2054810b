//! `gpufeed run` and `gpufeed record`.

use crate::cli::{GlobalOpts, RecordArgs, RecordingOpts, RunArgs};
use crate::diagnose::input::InputFormat;
use crate::diagnose::input::LogOptions;
use crate::exit::{Exit, Failure};
use crate::job::{Job, SignalWatch};
use crate::outfile::{refuse_same_as_input, Clobber};
use crate::present;
use crate::present::html::RecordingSeries;
use crate::present::tensorboard::TbSeries;
use crate::present::OutputFormat;
use crate::record::recorder::{default_output_name, Prepared, Recorder, RecorderConfig};
use crate::record::summary::SummaryBuilder;
use crate::sample::event::EndReason;
use crate::sample::event::{End, Line, OverridesLine};
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
) -> anyhow::Result<Prepared> {
    if let (Some(j), Some(o)) = (&opts.export_json, &opts.output) {
        refuse_same_as_input("--export-json", j, [o.as_path()])?;
    }
    if opts.interval < Duration::from_millis(10) {
        return Err(Failure::new(
            Exit::Usage,
            "--interval must be at least 10ms (the default, 100ms, is right for most jobs)",
        )
        .into());
    }
    if let Some(o) = opts.output.as_ref().filter(|o| o.is_dir()) {
        return Err(Failure::new(
            Exit::Usage,
            format!(
                "--output {} is a folder: a recording is a file; give a file name (e.g. {}/run.ndjson)",
                o.display(),
                o.display()
            ),
        )
        .into());
    }
    // `--force` never renames a recording over a device, FIFO or socket (`/dev/null`): a bad
    // value, exit 2 before the job starts, as the README says (it was exit 3).
    if let Some(o) = opts.output.as_ref().filter(|o| crate::outfile::special(o)) {
        return Err(Failure::new(
            Exit::Usage,
            format!(
                "--output {} is a device, FIFO or socket, not a file: a recording is written to a file; give a file name",
                o.display()
            ),
        )
        .into());
    }
    let (output, clobber) = match &opts.output {
        Some(o) if opts.force => (o.clone(), Clobber::Replace),
        Some(o) => (o.clone(), Clobber::Refuse),
        None => (default_output_name(SystemTime::now()), Clobber::Suffix),
    };
    let prepared = Prepared::new(RecorderConfig {
        output,
        interval: opts.interval,
        nvml_lib: global.nvml_lib.clone(),
        no_gpu: false,
        clobber,
        py: opts.py.config(true),
        steps,
    })
    .map_err(Failure::from)?;
    if let Some(e) = &prepared.gpu().error {
        eprintln!("gpufeed: {e}: recording host metrics only");
    } else if prepared.gpu().gpus.is_empty() {
        eprintln!("gpufeed: the NVIDIA driver reports no GPU: recording host metrics only");
    }
    Ok(prepared)
}

/// The step-marker socket for the job (`GPUFEED_STEP_SOCKET`); without one the job is recorded
/// all the same.
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
    Ok(inject)
}

/// What the overrides did: into the recording, or (unrecorded job) on stderr.
fn report_overrides(i: &crate::inject::Injection, recorder: Option<&Recorder>, quiet: bool) {
    let rep = i.read();
    match recorder {
        Some(r) => r.write_line(Line::Overrides(OverridesLine {
            t_s: r.elapsed_s(),
            overrides: rep.overrides,
            notes: rep.notes,
            loader_notes: rep.loader_notes,
        })),
        None if !quiet => eprint!(
            "{}",
            present::summary::overrides_text(&rep.overrides, &rep.notes)
        ),
        None => {}
    }
}

/// `gpufeed run -- CMD...`: the job's exit code becomes gpufeed's.
pub(crate) fn run(global: &GlobalOpts, args: &RunArgs) -> anyhow::Result<u8> {
    let inject = check_run_args(args)?;
    let mut env: Vec<(String, String)> = inject.iter().map(|i| i.env_var(&[])).collect();
    let prepared = prepare(
        global,
        &args.rec,
        crate::sample::steps::for_job(None, Some("recorded"))?,
    )?;
    if let Some(s) = prepared.steps() {
        env.push((ENV_VAR.into(), s.path().display().to_string()));
    }
    let (watch, early_signal) = crate::job::forward_signals(prepared.tree_pids())?;
    // The recording has no name until it starts: dropping it leaves nothing behind, and an
    // existing file at --output (with --force) is untouched.
    let cleanup = drop::<Prepared>;
    let sig = early_signal.load(Ordering::SeqCst);
    if sig != 0 {
        // Interrupted before the job started: do not start it.
        cleanup(prepared);
        return Ok(Exit::signal(sig));
    }
    let tree = prepared.tree_pids();
    let mut job = match Job::spawn_env(&args.command, &env) {
        Ok(j) => j,
        Err(e) => {
            // Nothing was recorded: leave no empty file behind.
            cleanup(prepared);
            return Err(Failure::from(e).into());
        }
    };
    if let Ok(mut p) = tree.lock() {
        *p = vec![job.pid()];
    }
    // A recording that cannot start does not stop the job: it runs unrecorded.
    // The recording shows the command as text (bytes that are not UTF-8 as U+FFFD).
    let shown: Vec<String> = args
        .command
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let recorder = match prepared.start(Some(job.pid()), Some(shown)) {
        Ok(r) => Some(r),
        Err(e) => {
            eprintln!("gpufeed: {e}: the job runs unrecorded");
            None
        }
    };

    let status = job.wait();
    drop(watch);
    let (end, code) = crate::record::recorder::job_end(status);
    if let Some(i) = &inject {
        report_overrides(i, recorder.as_ref(), args.rec.quiet);
    }
    // The job's exit code is gpufeed's even when the recording could not be completed.
    match recorder.map(|r| r.finish(end)) {
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
        None => {}
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
    let steps = crate::sample::steps::for_job(args.step_socket.as_deref(), Some("recorded"))?;
    let prepared = prepare(global, &args.rec, steps)?;
    let step_path = prepared.steps().map(|s| s.path().display().to_string());
    let recorder = prepared
        .start(args.pid, None)
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
    let path = recorder
        .finish(End {
            reason: Some(reason),
            ..Default::default()
        })
        .context("finishing the recording")?;
    print_summary(&path, &args.rec, None, None)?;
    Ok(Exit::Ok.code())
}
