//! `gpufeed batch-size`: the largest batch that runs, the one to use at a memory target, and a
//! gradient-accumulation plan.

use super::trials::{
    check_trial_opts, file_safe, interrupt_flag, live_msg, output_dir, progress_bar, say, spec,
};
use crate::cli::{BatchSizeArgs, GlobalOpts};
use crate::exit::{Exit, Failure};
use crate::inject::InjectSpec;
use crate::present::batch::text;
use crate::present::OutputFormat;
use crate::tune::batch::{
    accumulation, classify, recommend, samples_per_s, BatchReport, BatchTrial, Search, Verdict,
};
use crate::tune::params;
use crate::tune::trial::{run_trial, TrialExit, TrialOutcome, TrialSpec};
use std::sync::atomic::Ordering;

fn finish(rep: &mut BatchReport, target_batch: Option<u64>) {
    let ok: Vec<&BatchTrial> = rep
        .trials
        .iter()
        .filter(|t| t.verdict == Verdict::Ok)
        .collect();
    rep.max_batch = ok.iter().map(|t| t.batch).max();
    rep.first_oom_batch = rep
        .trials
        .iter()
        .filter(|t| t.verdict == Verdict::Oom && rep.max_batch.is_none_or(|m| t.batch > m))
        .map(|t| t.batch)
        .min();
    rep.fastest_batch = ok
        .iter()
        .filter_map(|t| samples_per_s(t).map(|v| (t.batch, v)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(b, _)| b);
    rep.recommendation = rep.max_batch.map(|m| {
        let pts: Vec<(u64, u64)> = ok
            .iter()
            .filter_map(|t| t.gpu_mem_max_bytes.map(|b| (t.batch, b)))
            .collect();
        recommend(m, &pts, rep.gpu_mem_total_bytes, rep.mem_target_pct / 100.0)
    });
    rep.recommended_batch = rep.recommendation.as_ref().map(|r| r.batch);
    rep.accumulation = match (target_batch, rep.recommended_batch) {
        (Some(t), Some(r)) => accumulation(t, r),
        _ => None,
    };
}

/// Checks the arguments before anything runs: the parameter is used, the trial options make
/// sense, and the batch bounds are positive. Returns the overrides and the rate regex.
fn check_args(
    args: &BatchSizeArgs,
) -> anyhow::Result<(InjectSpec, Option<crate::tune::progress::RateRegex>)> {
    let knob = params::parse_knobs(&[args.param.clone(), "1".into()])
        .map_err(|e| Failure::with(Exit::Usage, e))?;
    let inject = args.inject.spec().map_err(Failure::from)?;
    let templates: Vec<(String, String)> = inject
        .templates()
        .map(|t| ("--dataloader/--torch".to_string(), t.to_string()))
        .collect();
    params::check_used(&knob, &args.command, &templates)
        .map_err(|e| Failure::with(Exit::Usage, e))?;
    let regex = check_trial_opts(&args.trial, &args.command)?;
    if args.start == 0 {
        return Err(Failure::new(Exit::Usage, "--start must be at least 1").into());
    }
    if args.max == Some(0) {
        return Err(Failure::new(Exit::Usage, "--max must be at least 1").into());
    }
    if args.target_batch == Some(0) {
        return Err(Failure::new(Exit::Usage, "--target-batch must be at least 1").into());
    }
    Ok((inject, regex))
}

/// The report before any trial has run.
fn empty_report(args: &BatchSizeArgs) -> BatchReport {
    BatchReport {
        schema_version: 1,
        command: args.command.clone(),
        param: args.param.clone(),
        mem_target_pct: args.mem_target * 100.0,
        max_batch: None,
        first_oom_batch: None,
        recommended_batch: None,
        recommendation: None,
        fastest_batch: None,
        gpu_mem_total_bytes: None,
        trials: vec![],
        accumulation: None,
        stopped: None,
    }
}

/// The trial of batch size `bs`, the `n`th of the search, recorded in `dir`; returns its spec
/// and label (`batch=64`).
fn trial_spec(
    global: &GlobalOpts,
    args: &BatchSizeArgs,
    (inject, regex): &(InjectSpec, Option<crate::tune::progress::RateRegex>),
    bs: u64,
    n: usize,
    dir: &std::path::Path,
) -> anyhow::Result<(TrialSpec, String)> {
    let values = vec![(args.param.clone(), bs.to_string())];
    let resolved = (!inject.is_empty())
        .then(|| inject.resolve(&values))
        .transpose()
        .map_err(Failure::from)?;
    let argv: Vec<String> = args
        .command
        .iter()
        .map(|a| params::substitute(a, &values))
        .collect();
    let label = format!("{}={bs}", args.param);
    let recording = dir.join(format!("trial-{n:02}-{}.ndjson", file_safe(&label)));
    let batch = match &args.trial.batch {
        Some(_) => super::trials::batch_of(&args.trial, &values)?,
        None => Some(bs as f64),
    };
    let mut spec = spec(
        global,
        &args.trial,
        regex.clone(),
        argv,
        vec![],
        recording,
        batch,
    );
    spec.inject = resolved;
    Ok((spec, label))
}

/// `exit 1` or `signal 9` (empty when neither is known).
fn exit_words(exit: &TrialExit, code: impl Fn(i32) -> String) -> String {
    exit.code
        .map(code)
        .or(exit.signal.map(|s| format!("signal {s}")))
        .unwrap_or_default()
}

/// The progress line of a finished trial.
fn trial_line(bs: u64, verdict: Verdict, oom_kind: Option<&str>, o: &TrialOutcome) -> String {
    format!(
        "batch {bs}: {}{}",
        match verdict {
            Verdict::Ok => "ran".to_string(),
            Verdict::Oom => format!("out of memory ({})", oom_kind.unwrap_or_default()),
            Verdict::Failed => format!("failed ({})", exit_words(&o.exit, |c| format!("exit {c}"))),
        },
        o.throughput
            .as_ref()
            .map(|t| format!(", {} {}", crate::present::fmt::num(t.value), t.unit))
            .unwrap_or_default()
    )
}

/// A finished trial as the report keeps it (the job's last lines only when it did not run).
fn batch_trial(
    bs: u64,
    verdict: Verdict,
    oom_kind: Option<String>,
    o: &TrialOutcome,
) -> BatchTrial {
    BatchTrial {
        batch: bs,
        verdict,
        oom_kind,
        oom_line: o.oom_line.clone(),
        throughput: o.throughput.clone(),
        gpu_mem_max_bytes: o.gpu_mem_max_bytes,
        gpu_util_mean_pct: o.gpu_util_mean_pct,
        duration_s: o.duration_s,
        exit: o.exit.clone(),
        last_lines: if verdict == Verdict::Ok {
            vec![]
        } else {
            o.last_lines.clone()
        },
        recording: o.recording.display().to_string(),
        overrides: o.overrides.as_ref().map(|r| r.overrides.clone()),
        override_notes: o
            .overrides
            .as_ref()
            .map(|r| r.notes.clone())
            .unwrap_or_default(),
    }
}

/// The report on stdout in the chosen format.
fn present(args: &BatchSizeArgs, rep: &BatchReport) -> anyhow::Result<()> {
    match args.trial.format {
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(rep)?),
        _ => print!("{}", text(rep)),
    }
    Ok(())
}

/// The exit code of a finished search.
fn exit_code(rep: &BatchReport, interrupted: bool) -> u8 {
    if interrupted {
        Exit::signal(libc::SIGINT)
    } else if rep.max_batch.is_some() && rep.stopped.is_none() {
        Exit::Ok.code()
    } else {
        Exit::Failure.code()
    }
}

pub fn run(global: &GlobalOpts, args: &BatchSizeArgs) -> anyhow::Result<u8> {
    let checked = check_args(args)?;
    let dir = output_dir(&args.trial, "gpufeed-batch-size")?;
    let (interrupt, _watch) = interrupt_flag()?;
    let quiet = args.trial.quiet;
    let mut rep = empty_report(args);
    let mut search = Search::new(args.start, args.max);
    let pb = progress_bar(0, quiet);
    let mut fatal = None;
    let mut gpu_note_said = false;
    while let Some(bs) = search.next() {
        if interrupt.load(Ordering::SeqCst) {
            break;
        }
        pb.inc_length(1);
        let (spec, label) = trial_spec(global, args, &checked, bs, rep.trials.len() + 1, &dir)?;
        pb.set_message(format!("{label}: starting"));
        let o = match run_trial(&spec, &interrupt, |l| pb.set_message(live_msg(&label, l))) {
            Ok(o) => o,
            Err(e) => {
                fatal = Some(anyhow::Error::from(Failure::from(e)));
                break;
            }
        };
        if let (Some(e), false) = (&o.gpu_error, gpu_note_said) {
            say(
                &pb,
                quiet,
                format!("gpufeed: {e}: recording host metrics only"),
            );
            gpu_note_said = true;
        }
        if o.exit.status == crate::tune::trial::Status::Interrupted {
            break;
        }
        let (verdict, oom_kind) = classify(&o.exit, o.oom_line.as_deref());
        rep.gpu_mem_total_bytes = rep.gpu_mem_total_bytes.or(o.gpu_mem_total_bytes);
        say(&pb, quiet, trial_line(bs, verdict, oom_kind.as_deref(), &o));
        rep.trials.push(batch_trial(bs, verdict, oom_kind, &o));
        pb.inc(1);
        if verdict == Verdict::Failed {
            rep.stopped = Some(format!(
                "batch {bs} failed for a reason other than memory (exit {}); fix that first",
                exit_words(&o.exit, |c| c.to_string())
            ));
            break;
        }
        search.record(bs, verdict == Verdict::Ok);
        finish(&mut rep, args.target_batch);
        write_json(args, &dir, &rep)?;
    }
    pb.finish_and_clear();
    if interrupt.load(Ordering::SeqCst) {
        rep.stopped = Some("interrupted".into());
    }
    finish(&mut rep, args.target_batch);
    write_json(args, &dir, &rep)?;
    present(args, &rep)?;
    match fatal {
        Some(e) => Err(e),
        None => Ok(exit_code(&rep, interrupt.load(Ordering::SeqCst))),
    }
}

fn write_json(
    args: &BatchSizeArgs,
    dir: &std::path::Path,
    rep: &BatchReport,
) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(rep)?;
    let mut paths = vec![dir.join("batch-size.json")];
    paths.extend(args.export_json.clone());
    for p in paths {
        super::write_report(&p, &json)?;
    }
    Ok(())
}
