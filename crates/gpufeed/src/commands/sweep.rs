//! `gpufeed sweep`: try every combination of knob values on the user's own command and find the
//! sweet spot (what it shares with `gpufeed batch-size` is in [`super::trials`]).

use super::trials::{
    batch_of, check_trial_opts, file_safe, interrupt_flag, live_msg, output_dir, progress_bar, say,
    spec, trial_line,
};
use crate::cli::{GlobalOpts, SweepArgs};
use crate::exit::{Exit, Failure};
use crate::present::sweep as report;
use crate::present::OutputFormat;
use crate::tune::params::{self, Setting};
use crate::tune::sweep::{self, SweepReport, TrialResult, SCHEMA_VERSION};
use crate::tune::trial::{run_trial, TrialOutcome, TrialSpec};
use crate::tune::TuneError;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

fn inject_err(e: crate::inject::InjectError) -> anyhow::Error {
    Failure::from(e).into()
}

fn tune_err(e: TuneError) -> anyhow::Error {
    Failure::from(e).into()
}

/// Refuses (exit 2) two outputs at one path, the folder's sweep.json and sweep.svg included
/// (each may share its path with the option that writes the same bytes).
fn check_outputs(args: &SweepArgs) -> Result<(), Failure> {
    use crate::outfile::Output;
    let dir = args.trial.output_dir.as_deref();
    let (json, svg) = (
        dir.map(|d| d.join("sweep.json")),
        dir.map(|d| d.join("sweep.svg")),
    );
    let mut outputs: Vec<Output> = [
        ("--export-json", &args.export_json),
        ("--export-csv", &args.export_csv),
        ("--export-markdown", &args.export_markdown),
        ("--export-svg", &args.export_svg),
        ("--html", &args.html),
    ]
    .into_iter()
    .filter_map(|(o, p)| Some(Output::new(o, p.as_deref()?)))
    .collect();
    for (what, p, content) in [
        ("the output folder's sweep.json", &json, "--export-json"),
        ("the output folder's sweep.svg", &svg, "--export-svg"),
    ] {
        if let Some(path) = p {
            outputs.push(Output {
                option: what,
                path,
                content,
            });
        }
    }
    crate::outfile::refuse_shared_outputs(&outputs)
}

fn write_reports(args: &SweepArgs, dir: &Path, rep: &SweepReport) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(rep)?;
    let mut writes: Vec<(PathBuf, String)> = vec![(dir.join("sweep.json"), json.clone())];
    if let Some(p) = &args.export_json {
        writes.push((p.clone(), json));
    }
    if let Some(p) = &args.export_csv {
        writes.push((p.clone(), report::csv(rep)));
    }
    if let Some(p) = &args.export_markdown {
        writes.push((p.clone(), report::markdown(rep)));
    }
    if let Some(svg) = crate::present::sweep_chart::svg(rep) {
        writes.push((dir.join("sweep.svg"), svg.clone()));
        if let Some(p) = &args.export_svg {
            writes.push((p.clone(), svg));
        }
    }
    if let Some(p) = &args.html {
        writes.push((p.clone(), sweep_html(rep)?));
    }
    for (p, text) in writes {
        super::write_report(&p, text)?;
    }
    Ok(())
}

/// The sweep as an HTML page: one point per trial, in the order tried.
fn sweep_html(rep: &SweepReport) -> anyhow::Result<String> {
    let label = |p: &std::collections::BTreeMap<String, serde_json::Value>| {
        p.iter()
            .map(|(k, v)| match v {
                serde_json::Value::String(s) => format!("{k}={s}"),
                v => format!("{k}={v}"),
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    let points: Vec<crate::present::html::SweepPoint> = rep
        .results
        .iter()
        .map(|r| crate::present::html::SweepPoint {
            label: label(&r.parameters),
            throughput: r.throughput.as_ref().map(|t| t.value),
            gpu_util_mean_pct: r.gpu_util_mean_pct,
            data_wait_fraction: r.data_wait_fraction,
            failed: r.throughput.is_none(),
            overridden: r.overrides.is_some().then(|| report::overridden_cell(r)),
        })
        .collect();
    let unit = rep
        .results
        .iter()
        .find_map(|r| r.throughput.as_ref().map(|t| t.unit.clone()))
        .unwrap_or_default();
    let spot = rep
        .sweet_spot
        .as_ref()
        .map(|s| (label(&s.parameters), s.reason.clone()));
    let knob = rep
        .knobs
        .iter()
        .map(|(k, _)| k.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    crate::present::html::sweep_page(
        &rep.command.join(" "),
        &knob,
        &unit,
        &points,
        spot.as_ref().map(|(l, r)| (l.as_str(), r.as_str())),
        &report::notes_for_page(rep),
    )
    .map_err(|e| Failure::input(format!("cannot build the HTML page: {e}")).into())
}

/// What a sweep will try, all checked before the first trial starts.
struct Plan {
    knobs: Vec<params::Knob>,
    /// `--env NAME=template`, before substitution.
    env_t: Vec<(String, String)>,
    /// Whether every knob reaches the job only through `--dataloader`/`--torch` overrides.
    knobs_only_injected: bool,
    regex: Option<crate::tune::progress::RateRegex>,
    settings: Vec<Setting>,
    /// Per setting: the resolved overrides (`None` without `--dataloader`/`--torch`).
    resolved: Vec<Option<crate::inject::Resolved>>,
    /// Per setting: the batch size from `--batch`.
    batches: Vec<Option<f64>>,
}

/// Parses and checks the knobs, the environment templates, the overrides and every setting's
/// values; nothing runs and nothing is written.
fn plan(args: &SweepArgs) -> anyhow::Result<Plan> {
    let knobs = params::parse_knobs(&args.lists).map_err(tune_err)?;
    let env_t = params::parse_env(&args.env).map_err(tune_err)?;
    let inject = args.inject.spec().map_err(inject_err)?;
    // A knob that reaches the job only through --dataloader/--torch counts as used.
    let mut env_all = env_t.clone();
    env_all.extend(
        inject
            .templates()
            .map(|t| ("--dataloader/--torch".into(), t.into())),
    );
    params::check_used(&knobs, &args.command, &env_all).map_err(tune_err)?;
    let knobs_only_injected = !inject.is_empty()
        && knobs.iter().all(|k| {
            let pat = format!("{{{}}}", k.name);
            !args.command.iter().any(|a| a.contains(&pat))
                && !env_t.iter().any(|(_, v)| v.contains(&pat))
        });
    let regex = check_trial_opts(&args.trial, &args.command)?;
    let settings: Vec<Setting> = params::product(&knobs);
    // Every setting's values are checked before the first trial starts.
    let resolved: Vec<Option<crate::inject::Resolved>> = settings
        .iter()
        .map(|s| {
            (!inject.is_empty())
                .then(|| inject.resolve(&s.values))
                .transpose()
        })
        .collect::<Result<_, _>>()
        .map_err(inject_err)?;
    let batches: Vec<Option<f64>> = settings
        .iter()
        .map(|s| batch_of(&args.trial, &s.values))
        .collect::<anyhow::Result<_>>()?;
    Ok(Plan {
        knobs,
        env_t,
        knobs_only_injected,
        regex,
        settings,
        resolved,
        batches,
    })
}

/// The report before any trial has run.
fn empty_report(args: &SweepArgs, plan: &Plan) -> SweepReport {
    SweepReport {
        schema_version: SCHEMA_VERSION,
        command: args.command.clone(),
        knobs: plan
            .knobs
            .iter()
            .map(|k| (k.name.clone(), k.values.clone()))
            .collect(),
        results: vec![],
        sweet_spot: None,
        trials_planned: plan.settings.len(),
        interrupted: false,
        mixed_units: false,
        overrides_never_applied: None,
    }
}

/// The trial of setting `i`: its command and environment with the values put in, and its
/// recording in `dir`. Returns the spec and the command as run.
fn trial_spec(
    global: &GlobalOpts,
    args: &SweepArgs,
    plan: &Plan,
    i: usize,
    dir: &Path,
) -> (TrialSpec, Vec<String>) {
    let setting = &plan.settings[i];
    let argv: Vec<String> = args
        .command
        .iter()
        .map(|a| params::substitute(a, &setting.values))
        .collect();
    let env: Vec<(String, String)> = plan
        .env_t
        .iter()
        .map(|(k, v)| (k.clone(), params::substitute(v, &setting.values)))
        .collect();
    let recording = dir.join(format!(
        "trial-{:02}-{}.ndjson",
        i + 1,
        file_safe(&setting.label().replace(' ', "_"))
    ));
    let mut spec = spec(
        global,
        &args.trial,
        plan.regex.clone(),
        argv.clone(),
        env,
        recording,
        plan.batches[i],
    );
    spec.inject = plan.resolved[i].clone();
    (spec, argv)
}

/// Runs one setting, again (up to `--retries` times) while its throughput never settles, and
/// keeps the better run with the number of runs. An error is one that ends the whole sweep.
fn run_setting(
    args: &SweepArgs,
    spec: &TrialSpec,
    label: &str,
    interrupt: &AtomicBool,
    pb: &indicatif::ProgressBar,
) -> anyhow::Result<(TrialOutcome, u32)> {
    let mut kept: Option<(TrialOutcome, u32)> = None;
    let mut attempt = 0u32;
    loop {
        let mut spec = spec.clone();
        if attempt > 0 {
            spec.recording = recording_for_retry(&spec.recording, attempt);
        }
        let outcome = run_trial(&spec, interrupt, |l| pb.set_message(live_msg(label, l)))
            .map_err(tune_err)?;
        attempt += 1;
        let unsettled = outcome.exit.ok() && outcome.throughput.as_ref().is_some_and(|t| !t.steady);
        let (best, n) = match kept.take() {
            Some((old, n)) if !better_run(&outcome, &old) => (old, n + 1),
            Some((_, n)) => (outcome, n + 1),
            None => (outcome, 1),
        };
        if !unsettled || attempt > args.retries || interrupt.load(Ordering::SeqCst) {
            return Ok((best, n));
        }
        kept = Some((best, n));
        say(
            pb,
            args.trial.quiet,
            format!(
                "gpufeed: {label} never settled; re-running it ({attempt} of {} retries)",
                args.retries
            ),
        );
    }
}

/// Adds a finished trial to the report and brings the sweet spot and the flags up to date.
fn add_result(rep: &mut SweepReport, r: TrialResult, knobs_only_injected: bool, interrupted: bool) {
    rep.results.push(r);
    let (sw, mixed) = sweep::sweet_spot(&rep.results, &rep.knobs);
    rep.sweet_spot = sw;
    rep.mixed_units = mixed;
    rep.check_overrides(knobs_only_injected);
    rep.interrupted = interrupted;
}

/// The report on stdout in the chosen format, and where the files are.
fn present(args: &SweepArgs, rep: &SweepReport, dir: &Path) -> anyhow::Result<()> {
    match args.trial.format {
        OutputFormat::Text | OutputFormat::Html => print!("{}", report::text(rep)),
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(rep)?),
        OutputFormat::Markdown => print!("{}", report::markdown(rep)),
    }
    if !args.trial.quiet {
        eprintln!("gpufeed: recordings and sweep.json in {}", dir.display());
    }
    Ok(())
}

/// The exit code of a finished sweep.
fn exit_code(rep: &SweepReport) -> u8 {
    if rep.interrupted {
        return Exit::signal(libc::SIGINT);
    }
    if !rep.results.iter().any(|r| r.exit.ok()) {
        eprintln!("gpufeed: no trial ran successfully");
        return Exit::Failure.code();
    }
    Exit::Ok.code()
}

pub fn run(global: &GlobalOpts, args: &SweepArgs) -> anyhow::Result<u8> {
    let plan = plan(args)?;
    check_outputs(args)?;
    let dir = output_dir(&args.trial, "gpufeed-sweep")?;
    let (interrupt, _watch) = interrupt_flag()?;
    let quiet = args.trial.quiet;
    let n = plan.settings.len();
    let mut rep = empty_report(args, &plan);
    let pb = progress_bar(n as u64, quiet);
    let mut gpu_note_said = false;
    let mut fatal: Option<anyhow::Error> = None;
    for (i, setting) in plan.settings.iter().enumerate() {
        if interrupt.load(Ordering::SeqCst) {
            break;
        }
        let (spec, argv) = trial_spec(global, args, &plan, i, &dir);
        let label = setting.label();
        pb.set_message(format!("{label}: starting"));
        let (outcome, attempts) = match run_setting(args, &spec, &label, &interrupt, &pb) {
            Ok(kept) => kept,
            Err(e) => {
                fatal = Some(e);
                break;
            }
        };
        if let (Some(e), false) = (&outcome.gpu_error, gpu_note_said) {
            say(
                &pb,
                quiet,
                format!("gpufeed: {e}: recording host metrics only"),
            );
            gpu_note_said = true;
        }
        let mut r = TrialResult::new(setting, argv, outcome);
        r.attempts = attempts;
        say(&pb, quiet, trial_line(i + 1, n, &r));
        let interrupted = interrupt.load(Ordering::SeqCst);
        add_result(&mut rep, r, plan.knobs_only_injected, interrupted);
        write_reports(args, &dir, &rep)?;
        pb.inc(1);
    }
    pb.finish_and_clear();
    rep.interrupted = interrupt.load(Ordering::SeqCst);
    write_reports(args, &dir, &rep)?;
    present(args, &rep, &dir)?;
    match fatal {
        Some(e) => Err(e),
        None => Ok(exit_code(&rep)),
    }
}

/// `trial-03-workers=4.ndjson` → `trial-03-workers=4.retry1.ndjson`.
fn recording_for_retry(p: &std::path::Path, attempt: u32) -> PathBuf {
    let stem = p
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    p.with_file_name(format!("{stem}.retry{attempt}.ndjson"))
}

/// Of two runs of one setting, the better is the settled one, else the one with the narrower
/// relative interval.
fn better_run(
    new: &crate::tune::trial::TrialOutcome,
    old: &crate::tune::trial::TrialOutcome,
) -> bool {
    let key = |o: &crate::tune::trial::TrialOutcome| match (&o.throughput, o.exit.ok()) {
        (Some(t), true) => (
            if t.steady { 2 } else { 1 },
            -t.rel_half_width().unwrap_or(f64::INFINITY),
        ),
        _ => (0, f64::NEG_INFINITY),
    };
    let (a, b) = (key(new), key(old));
    a.0 > b.0 || (a.0 == b.0 && a.1 > b.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_recordings_get_their_own_names() {
        assert_eq!(
            recording_for_retry(std::path::Path::new("/d/trial-03-workers=4.ndjson"), 2),
            PathBuf::from("/d/trial-03-workers=4.retry2.ndjson")
        );
    }
}
