//! `gpufeed sweep`'s trials: every combination of knob values, each checked before the first
//! trial starts, run (again while its throughput never settles, up to `--retries`), and the
//! report with its sweet spot brought up to date after every trial.

use super::params::{self, Setting};
use super::progress::RateRegex;
use super::runner::{file_safe, trial_line, Runner, TrialConfig};
use super::sweep_report::{self, SweepReport, TrialResult, SCHEMA_VERSION};
use super::trial::{TrialOutcome, TrialSpec};
use crate::exit::{Exit, Failure};
use crate::inject::InjectSpec;
use std::path::{Path, PathBuf};

/// What a sweep is asked to do, as the command line gave it.
pub(crate) struct Setup {
    pub command: Vec<String>,
    /// `-L name v1,v2` lists.
    pub lists: Vec<String>,
    /// `--env NAME=template`.
    pub env: Vec<String>,
    pub inject: InjectSpec,
    pub retries: u32,
    pub trial: TrialConfig,
}

/// What a sweep will try, all checked before the first trial starts.
pub(crate) struct Plan {
    knobs: Vec<params::Knob>,
    /// `--env NAME=template`, before substitution.
    env_t: Vec<(String, String)>,
    /// Whether every knob reaches the job only through `--dataloader`/`--torch` overrides.
    knobs_only_injected: bool,
    regex: Option<RateRegex>,
    settings: Vec<Setting>,
    /// Per setting: the resolved overrides (`None` without `--dataloader`/`--torch`).
    resolved: Vec<Option<crate::inject::Resolved>>,
    /// Per setting: the batch size from `--batch`.
    batches: Vec<Option<f64>>,
}

impl Plan {
    /// Trials the sweep will run.
    pub(crate) fn trials(&self) -> usize {
        self.settings.len()
    }
}

/// Parses and checks the knobs, the environment templates, the overrides and every setting's
/// values; nothing runs and nothing is written.
pub(crate) fn plan(args: &Setup) -> Result<Plan, Failure> {
    let knobs = params::parse_knobs(&args.lists)?;
    let env_t = params::parse_env(&args.env)?;
    let inject = &args.inject;
    // A knob that reaches the job only through --dataloader/--torch counts as used.
    let mut env_all = env_t.clone();
    env_all.extend(
        inject
            .templates()
            .map(|t| ("--dataloader/--torch".into(), t.into())),
    );
    params::check_used(&knobs, &args.command, &env_all)?;
    let knobs_only_injected = !inject.is_empty()
        && knobs.iter().all(|k| {
            let pat = format!("{{{}}}", k.name);
            !args.command.iter().any(|a| a.contains(&pat))
                && !env_t.iter().any(|(_, v)| v.contains(&pat))
        });
    let regex = args.trial.check(&args.command)?;
    let settings: Vec<Setting> = params::product(&knobs);
    // Every setting's values are checked before the first trial starts.
    let resolved: Vec<Option<crate::inject::Resolved>> = settings
        .iter()
        .map(|s| {
            (!inject.is_empty())
                .then(|| inject.resolve(&s.values))
                .transpose()
        })
        .collect::<Result<_, _>>()?;
    let batches: Vec<Option<f64>> = settings
        .iter()
        .map(|s| args.trial.batch_of(&s.values))
        .collect::<Result<_, _>>()?;
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
fn empty_report(args: &Setup, plan: &Plan) -> SweepReport {
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
fn trial_spec(args: &Setup, plan: &Plan, i: usize, dir: &Path) -> (TrialSpec, Vec<String>) {
    let setting = &plan.settings[i];
    let argv: Vec<String> = args
        .command
        .iter()
        .map(|a| crate::inject::substitute(a, &setting.values))
        .collect();
    let env: Vec<(String, String)> = plan
        .env_t
        .iter()
        .map(|(k, v)| (k.clone(), crate::inject::substitute(v, &setting.values)))
        .collect();
    let recording = dir.join(format!(
        "trial-{:02}-{}.ndjson",
        i + 1,
        file_safe(&setting.label().replace(' ', "_"))
    ));
    let mut spec = args.trial.spec(
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
    args: &Setup,
    spec: &TrialSpec,
    label: &str,
    runner: &Runner,
) -> anyhow::Result<(TrialOutcome, u32)> {
    let mut kept: Option<(TrialOutcome, u32)> = None;
    let mut attempt = 0u32;
    loop {
        let mut spec = spec.clone();
        if attempt > 0 {
            spec.recording = recording_for_retry(&spec.recording, attempt);
        }
        let outcome = runner.run(&spec, label).map_err(Failure::from)?;
        attempt += 1;
        let unsettled = outcome.run.exit.ok()
            && outcome
                .figures
                .throughput
                .as_ref()
                .is_some_and(|t| !t.steady);
        let (best, n) = match kept.take() {
            Some((old, n)) if !better_run(&outcome, &old) => (old, n + 1),
            Some((_, n)) => (outcome, n + 1),
            None => (outcome, 1),
        };
        if !unsettled || attempt > args.retries || runner.stopped() {
            return Ok((best, n));
        }
        kept = Some((best, n));
        runner.say(format!(
            "gpufeed: {label} never settled; re-running it ({attempt} of {} retries)",
            args.retries
        ));
    }
}

/// Adds a finished trial to the report and brings the sweet spot and the flags up to date.
fn add_result(rep: &mut SweepReport, r: TrialResult, knobs_only_injected: bool, interrupted: bool) {
    rep.results.push(r);
    let (sw, mixed) = sweep_report::sweet_spot(&rep.results, &rep.knobs);
    rep.sweet_spot = sw;
    rep.mixed_units = mixed;
    rep.check_overrides(knobs_only_injected);
    rep.interrupted = interrupted;
}

/// How a sweep ended.
pub(crate) struct Outcome {
    pub report: SweepReport,
    /// An error that ended the sweep early (the report still says what ran before it).
    pub fatal: Option<anyhow::Error>,
}

/// Runs every setting of `plan`, recorded in `dir`; `save` is called after every trial.
pub(crate) fn run(
    args: &Setup,
    plan: &Plan,
    dir: &Path,
    runner: &Runner,
    save: &mut dyn FnMut(&SweepReport) -> anyhow::Result<()>,
) -> anyhow::Result<Outcome> {
    let n = plan.settings.len();
    let mut rep = empty_report(args, plan);
    let mut fatal: Option<anyhow::Error> = None;
    for (i, setting) in plan.settings.iter().enumerate() {
        if runner.stopped() {
            break;
        }
        let (spec, argv) = trial_spec(args, plan, i, dir);
        let label = setting.label();
        let (outcome, attempts) = match run_setting(args, &spec, &label, runner) {
            Ok(kept) => kept,
            Err(e) => {
                fatal = Some(e);
                break;
            }
        };
        let mut r = TrialResult::new(setting, argv, outcome);
        r.attempts = attempts;
        runner.say(trial_line(i + 1, Some(n), &r));
        add_result(&mut rep, r, plan.knobs_only_injected, runner.stopped());
        save(&rep)?;
        runner.pb.inc(1);
    }
    runner.pb.finish_and_clear();
    rep.interrupted = runner.stopped();
    Ok(Outcome { report: rep, fatal })
}

/// The exit code of a finished sweep.
pub(crate) fn exit_code(rep: &SweepReport) -> u8 {
    if rep.interrupted {
        return Exit::signal(libc::SIGINT);
    }
    if !rep.results.iter().any(|r| r.run.exit.ok()) {
        eprintln!("gpufeed: no trial ran successfully");
        return Exit::Failure.code();
    }
    Exit::Ok.code()
}

/// `trial-03-workers=4.ndjson` → `trial-03-workers=4.retry1.ndjson`.
fn recording_for_retry(p: &Path, attempt: u32) -> PathBuf {
    let stem = p
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    p.with_file_name(format!("{stem}.retry{attempt}.ndjson"))
}

/// Of two runs of one setting, the better is the settled one, else the one with the narrower
/// relative interval.
fn better_run(new: &TrialOutcome, old: &TrialOutcome) -> bool {
    let key = |o: &TrialOutcome| match (&o.figures.throughput, o.run.exit.ok()) {
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
            recording_for_retry(Path::new("/d/trial-03-workers=4.ndjson"), 2),
            PathBuf::from("/d/trial-03-workers=4.retry2.ndjson")
        );
    }
}
