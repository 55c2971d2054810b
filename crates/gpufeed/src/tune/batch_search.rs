//! `gpufeed batch-size`'s trials: doubling the batch until an out-of-memory, bisecting below it,
//! and the report (largest batch, first out-of-memory, the batch for the memory target, the
//! accumulation plan) brought up to date after every trial.

use super::batch_plan::{
    accumulation, classify, recommend, samples_per_s, BatchReport, BatchTrial, Search, Verdict,
};
use super::params;
use super::progress::RateRegex;
use super::runner::{file_safe, Runner, TrialConfig};
use super::trial::{TrialExit, TrialOutcome, TrialSpec, TrialStatus};
use crate::exit::{Exit, Failure};
use crate::inject::InjectSpec;
use std::path::Path;

/// What a batch-size search is asked to do.
pub(crate) struct Setup {
    pub command: Vec<String>,
    /// The `{name}` the batch size goes into.
    pub param: String,
    /// `--dataloader` / `--torch` overrides (may use `{param}`).
    pub inject: InjectSpec,
    pub start: u64,
    pub max: Option<u64>,
    /// Share of GPU memory the recommended batch may use (0.9).
    pub mem_target: f64,
    /// The batch the user wants to train at (gradient accumulation makes up the rest).
    pub target_batch: Option<u64>,
    pub trial: TrialConfig,
}

impl Setup {
    /// Checks the arguments before anything runs: the parameter is used, the trial options make
    /// sense, and the batch bounds are positive. Returns the rate regex.
    pub(crate) fn check(&self) -> Result<Option<RateRegex>, Failure> {
        let knob = params::parse_knobs(&[self.param.clone(), "1".into()])
            .map_err(|e| Failure::with(Exit::Usage, e))?;
        let templates: Vec<(String, String)> = self
            .inject
            .templates()
            .map(|t| ("--dataloader/--torch".to_string(), t.to_string()))
            .collect();
        params::check_used(&knob, &self.command, &templates)
            .map_err(|e| Failure::with(Exit::Usage, e))?;
        let regex = self.trial.check(&self.command)?;
        for (bad, what) in [
            (self.start == 0, "--start"),
            (self.max == Some(0), "--max"),
            (self.target_batch == Some(0), "--target-batch"),
        ] {
            if bad {
                return Err(Failure::new(
                    Exit::Usage,
                    format!("{what} must be at least 1"),
                ));
            }
        }
        Ok(regex)
    }

    /// The report before any trial has run.
    fn empty_report(&self) -> BatchReport {
        BatchReport {
            schema_version: 1,
            command: self.command.clone(),
            param: self.param.clone(),
            mem_target_pct: self.mem_target * 100.0,
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

    /// The trial of batch size `bs`, the `n`th of the search, recorded in `dir`; returns its
    /// spec and label (`batch=64`).
    fn trial_spec(
        &self,
        regex: &Option<RateRegex>,
        bs: u64,
        n: usize,
        dir: &Path,
    ) -> Result<(TrialSpec, String), Failure> {
        let values = vec![(self.param.clone(), bs.to_string())];
        let resolved = (!self.inject.is_empty())
            .then(|| self.inject.resolve(&values))
            .transpose()?;
        let argv: Vec<String> = self
            .command
            .iter()
            .map(|a| crate::inject::substitute(a, &values))
            .collect();
        let label = format!("{}={bs}", self.param);
        let recording = dir.join(format!("trial-{n:02}-{}.ndjson", file_safe(&label)));
        let batch = match &self.trial.batch {
            Some(_) => self.trial.batch_of(&values)?,
            None => Some(bs as f64),
        };
        let mut spec = self
            .trial
            .spec(regex.clone(), argv, vec![], recording, batch);
        spec.inject = resolved;
        Ok((spec, label))
    }
}

/// The figures that follow from the trials so far.
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
            Verdict::Failed => format!(
                "failed ({})",
                exit_words(&o.run.exit, |c| format!("exit {c}"))
            ),
        },
        o.figures
            .throughput
            .as_ref()
            .map(|t| format!(", {} {}", crate::units::num(t.value), t.unit))
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
        throughput: o.figures.throughput.clone(),
        gpu_mem_max_bytes: o.figures.gpu_mem_max_bytes,
        gpu_util_mean_pct: o.figures.gpu_util_mean_pct,
        run: o.run.reported(verdict != Verdict::Ok),
    }
}

/// How a batch-size search ended.
pub(crate) struct Outcome {
    pub report: BatchReport,
    /// An error that ended the search early (the report still says what ran before it).
    pub fatal: Option<anyhow::Error>,
    pub exit_code: u8,
}

/// Runs the search, trial by trial, recorded in `dir`; `save` is called after every trial.
pub(crate) fn run(
    setup: &Setup,
    regex: &Option<RateRegex>,
    dir: &Path,
    runner: &Runner,
    save: &mut dyn FnMut(&BatchReport) -> anyhow::Result<()>,
) -> anyhow::Result<Outcome> {
    let mut rep = setup.empty_report();
    let mut search = Search::new(setup.start, setup.max);
    let mut fatal = None;
    while let Some(bs) = search.next() {
        if runner.stopped() {
            break;
        }
        runner.pb.inc_length(1);
        let (spec, label) = setup.trial_spec(regex, bs, rep.trials.len() + 1, dir)?;
        let o = match runner.run(&spec, &label) {
            Ok(o) => o,
            Err(e) => {
                fatal = Some(anyhow::Error::from(Failure::from(e)));
                break;
            }
        };
        if o.run.exit.status == TrialStatus::Interrupted {
            break;
        }
        let (verdict, oom_kind) = classify(&o.run.exit, o.oom_line.as_deref());
        rep.gpu_mem_total_bytes = rep.gpu_mem_total_bytes.or(o.gpu_mem_total_bytes);
        runner.say(trial_line(bs, verdict, oom_kind.as_deref(), &o));
        rep.trials.push(batch_trial(bs, verdict, oom_kind, &o));
        runner.pb.inc(1);
        if verdict == Verdict::Failed {
            rep.stopped = Some(format!(
                "batch {bs} failed for a reason other than memory (exit {}); fix that first",
                exit_words(&o.run.exit, |c| c.to_string())
            ));
            break;
        }
        search.record(bs, verdict == Verdict::Ok);
        finish(&mut rep, setup.target_batch);
        save(&rep)?;
    }
    runner.pb.finish_and_clear();
    let interrupted = runner.stopped();
    if interrupted {
        rep.stopped = Some("interrupted".into());
    }
    finish(&mut rep, setup.target_batch);
    let exit_code = if interrupted {
        Exit::signal(libc::SIGINT)
    } else if rep.max_batch.is_some() && rep.stopped.is_none() {
        Exit::Ok.code()
    } else {
        Exit::Failure.code()
    };
    Ok(Outcome {
        report: rep,
        fatal,
        exit_code,
    })
}
