//! `gpufeed tune`'s search: the baseline and its diagnosis, a coordinate ascent over the knobs
//! the diagnosis points at (through the `--dataloader` / `--torch` injection, no code change),
//! the batch-size search of `--allow-batch`, the interleaved re-run for the speed-up, `fix.patch`
//! and the equivalent `gpufeed run` line. Trials run through [`super::runner::Runner`].

use super::params::Setting;
use super::plan::{self, Knob};
use super::report::{self, BatchChange, BeforeAfter, Choice, Figures, Step, Stop, TuneReport};
use super::runner::{file_safe, trial_line, Runner, TrialConfig};
use super::sweep_report::TrialResult;
use crate::diagnose::verdict::VerdictId;
use crate::exit::{Exit, Failure};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What a tune run is asked to do.
pub(crate) struct Setup {
    /// The user's command.
    pub command: Vec<String>,
    /// How long the search may take.
    pub budget: Duration,
    /// Search the DataLoader's batch size too.
    pub allow_batch: bool,
    /// Cores per rank (`None`: this machine's).
    pub cores: Option<u32>,
    /// A/B pairs of the final re-run.
    pub final_pairs: u32,
    pub trial: TrialConfig,
    pub regex: Option<super::progress::RateRegex>,
    /// The output folder (recordings, tune.json, fix.patch).
    pub dir: PathBuf,
}

/// Writes the report as it stands (tune.json and the files asked for).
pub(crate) type Save<'a> = dyn FnMut(&TuneReport) -> anyhow::Result<()> + 'a;

/// The search's state and what it writes to.
struct Tuner<'a, 'b> {
    args: &'a Setup,
    runner: &'a Runner,
    save: &'a mut Save<'b>,
    rep: TuneReport,
    trials: usize,
    /// The last trial's out-of-memory line, if it printed one.
    last_oom: Option<String>,
}

fn inject_err(e: crate::inject::InjectError) -> anyhow::Error {
    Failure::from(e).into()
}

/// `x2` (the batch knob's first value): a multiple of the job's own value.
fn times(v: &str) -> Option<f64> {
    v.strip_prefix('x')?.parse().ok()
}

/// The injection for a setting (`None`: the job as it is).
fn resolved(set: &[(Knob, String)]) -> anyhow::Result<Option<crate::inject::Resolved>> {
    if set.is_empty() {
        return Ok(None);
    }
    let pairs = |dl: bool| -> Vec<String> {
        set.iter()
            .filter(|(k, v)| k.is_dataloader() == dl && times(v).is_none())
            .map(|(k, v)| format!("{}={v}", k.key()))
            .collect()
    };
    let spec = crate::inject::InjectSpec::parse(&pairs(true), &pairs(false)).map_err(inject_err)?;
    let mut r = spec.resolve(&[]).map_err(inject_err)?;
    // the sitecustomize scales the job's own value by `times` (and reports what it became)
    for (k, v) in set {
        if let Some(x) = times(v) {
            r.dataloader
                .insert(k.key().into(), serde_json::json!({ "times": x }));
        }
    }
    Ok(Some(r))
}

fn label(set: &[(Knob, String)]) -> String {
    if set.is_empty() {
        return "baseline".into();
    }
    set.iter()
        .map(|(k, v)| format!("{}={v}", k.key()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `set` with `knob` at `value` (replacing its earlier value).
fn with(set: &[(Knob, String)], knob: Knob, value: &str) -> Vec<(Knob, String)> {
    let mut s: Vec<(Knob, String)> = set.iter().filter(|(k, _)| *k != knob).cloned().collect();
    s.push((knob, value.to_string()));
    s
}

impl Tuner<'_, '_> {
    fn stopped(&self) -> bool {
        self.runner.stopped()
    }

    /// Runs the job with `set`; its result and its diagnosis' verdict.
    fn trial(
        &mut self,
        set: &[(Knob, String)],
    ) -> anyhow::Result<(TrialResult, Option<VerdictId>)> {
        self.trials += 1;
        let lbl = label(set);
        let file = format!(
            "trial-{:02}-{}.ndjson",
            self.trials,
            file_safe(&lbl.replace(' ', "_"))
        );
        let mut sp = self.args.trial.spec(
            self.args.regex.clone(),
            self.args.command.clone(),
            vec![],
            self.args.dir.join(file),
            None,
        );
        sp.inject = resolved(set)?;
        let outcome = self.runner.run(&sp, &lbl).map_err(Failure::from)?;
        self.last_oom = outcome.oom_line.clone();
        let setting = Setting {
            values: set
                .iter()
                .map(|(k, v)| (k.key().to_string(), v.clone()))
                .collect(),
            positions: vec![0; set.len()],
        };
        let mut r = TrialResult::new(&setting, self.args.command.clone(), outcome);
        r.label = lbl;
        let verdict = crate::diagnose::report_for_recording(Path::new(&r.run.recording))
            .ok()
            .map(|d| d.verdict.id);
        self.runner.say(trial_line(self.trials, None, &r));
        self.runner.pb.inc(1);
        Ok((r, verdict))
    }

    fn write(&mut self) -> anyhow::Result<()> {
        (self.save)(&self.rep)
    }
}

/// Is the job's input keeping up now: the verdict says compute-bound, or the data wait is low.
fn input_keeps_up(r: &TrialResult, verdict: Option<VerdictId>) -> bool {
    verdict == Some(VerdictId::ComputeBound)
        || r.figures
            .data_wait_fraction
            .is_some_and(|w| w < plan::INPUT_BOUND_WAIT)
}

/// Why a knob did not reach the job (no DataLoader, no torch), when it did not.
fn not_applied(r: &TrialResult, knob: Knob) -> Option<String> {
    if knob == Knob::BatchSize {
        // a failed trial may be an out-of-memory, which the batch search deals with
        let o = r.run.overrides.as_ref()?;
        if o.iter().any(|x| x.key == knob.key() && x.reason.is_none()) {
            return None;
        }
        let why = r.run.override_notes.first().cloned().or_else(|| {
            r.run
                .exit
                .ok()
                .then(|| "nothing was overridden".to_string())
        })?;
        return Some(format!(
            "batch_size skipped: it never reached the job ({why})"
        ));
    }
    let o = r.run.overrides.as_ref()?;
    if !r.run.exit.ok()
        || o.iter()
            .any(|x| x.key == knob.key() || x.key == "benchmark")
    {
        return None;
    }
    let why = r
        .run
        .override_notes
        .first()
        .cloned()
        .unwrap_or_else(|| "nothing was overridden".into());
    Some(format!(
        "{} skipped, with every other {} knob: it never reached the job ({why})",
        knob.key(),
        if knob.is_dataloader() {
            "DataLoader"
        } else {
            "torch"
        }
    ))
}

/// The coordinate ascent: one knob at a time, each value kept only when it clears the best.
fn search(
    t: &mut Tuner,
    base: &TrialResult,
    start: Instant,
) -> anyhow::Result<(Vec<(Knob, String)>, TrialResult)> {
    let mut best = base.clone();
    let mut set: Vec<(Knob, String)> = vec![];
    let plans = t.rep.plan.clone();
    let mut input_done = false;
    // kinds of knob (DataLoader or torch switch) the job turned out not to have
    let mut missing: Vec<bool> = vec![];
    for p in &plans {
        if (input_done && p.knob.is_input()) || missing.contains(&p.knob.is_dataloader()) {
            continue;
        }
        if p.knob == Knob::BatchSize {
            if let Some(stop) = batch_search(t, &mut set, &mut best, start)? {
                t.rep.stop = Some(stop);
                return Ok((set, best));
            }
            continue;
        }
        let mut values: std::collections::VecDeque<String> = p.values.iter().cloned().collect();
        while let Some(v) = values.pop_front() {
            if t.stopped() {
                t.rep.stop = Some(Stop::Interrupted);
                return Ok((set, best));
            }
            if start.elapsed() >= t.args.budget {
                t.rep.stop = Some(Stop::Budget);
                return Ok((set, best));
            }
            let cand = with(&set, p.knob, &v);
            let (r, verdict) = t.trial(&cand)?;
            if let Some(why) = not_applied(&r, p.knob) {
                t.rep.notes.push(why);
                missing.push(p.knob.is_dataloader());
                t.rep.steps.push(Step {
                    knob: Some(p.knob),
                    value: Some(v.clone()),
                    gain: None,
                    gain_ci95: None,
                    kept: false,
                    verdict,
                    result: r,
                });
                break;
            }
            let g = best
                .figures
                .throughput
                .as_ref()
                .zip(r.figures.throughput.as_ref())
                .and_then(|(b, c)| plan::gain(b, c));
            let kept = r.run.exit.ok()
                && best
                    .figures
                    .throughput
                    .as_ref()
                    .zip(r.figures.throughput.as_ref())
                    .is_some_and(|(b, c)| plan::clears(b, c));
            let choice = Choice {
                knob: p.knob,
                value: v.clone(),
                gain: g.map(|x| x.0),
                gain_ci95: g.map(|x| x.1),
            };
            t.rep.steps.push(Step {
                knob: Some(p.knob),
                value: Some(v.clone()),
                gain: choice.gain,
                gain_ci95: choice.gain_ci95,
                kept,
                verdict,
                result: r.clone(),
            });
            if kept {
                t.rep.chosen.retain(|c| c.knob != p.knob);
                t.rep.chosen.push(choice);
                set = cand;
                best = r;
                if p.knob.is_input() && input_keeps_up(&best, verdict) {
                    // the input keeps up: more workers or prefetching have nothing left to win
                    input_done = true;
                    values.clear();
                } else if p.extend && values.is_empty() {
                    values.extend(plan::extend_workers(&v));
                }
            } else {
                t.rep.rejected.push(choice);
                // values go up in cost: one that does not gain ends the knob's range
                values.clear();
            }
            t.write()?;
        }
    }
    if input_done && plans.iter().all(|q| q.knob.is_input()) {
        t.rep.stop = Some(Stop::ComputeBound);
        return Ok((set, best));
    }
    t.rep.stop = Some(Stop::PlanDone);
    Ok((set, best))
}

/// Trials of the batch search after its first out-of-memory (bisecting towards the limit).
const BATCH_BISECT_TRIALS: usize = 2;

/// What the batch search knows so far.
#[derive(Default)]
struct BatchState {
    /// The job's own batch size (from the first trial's injection report).
    from: Option<u64>,
    search: Option<super::batch_plan::Search>,
    /// The batch kept, if any.
    chosen: Option<u64>,
}

/// The batch-size search of `--allow-batch`, after the other knobs: the first trial doubles the
/// job's own batch (the injection reports what that was), then `batch-size`'s search goes on
/// from there, doubling while samples/s gains and bisecting below an out-of-memory. Trials are
/// compared in samples/s, a batch kept as any other knob's value. `Some(stop)` when the budget
/// or Ctrl-C ended it.
fn batch_search(
    t: &mut Tuner,
    set: &mut Vec<(Knob, String)>,
    best: &mut TrialResult,
    start: Instant,
) -> anyhow::Result<Option<Stop>> {
    let mut st = BatchState::default();
    let stop = batch_trials(t, set, best, start, &mut st)?;
    if let Some(b0) = st.from {
        let s = st.search.as_ref();
        t.rep.batch = Some(BatchChange {
            from: b0,
            to: st.chosen,
            largest_ran: s.and_then(|s| s.low_ok),
            first_oom: s.and_then(|s| s.high_oom),
            lr_plan: st.chosen.map(|to| super::batch_plan::lr_plan(b0, to)),
        });
        t.write()?;
    }
    Ok(stop)
}

/// The trials of [`batch_search`], until the search ends.
fn batch_trials(
    t: &mut Tuner,
    set: &mut Vec<(Knob, String)>,
    best: &mut TrialResult,
    start: Instant,
    st: &mut BatchState,
) -> anyhow::Result<Option<Stop>> {
    let mut next = plan::BATCH_DOUBLE.to_string();
    let mut after_oom = 0;
    loop {
        if t.stopped() {
            return Ok(Some(Stop::Interrupted));
        }
        if start.elapsed() >= t.args.budget {
            return Ok(Some(Stop::Budget));
        }
        let (r, verdict) = t.trial(&with(set, Knob::BatchSize, &next))?;
        let Some(n) = batch_ran_at(t, &r, &next, best, st) else {
            t.rep.steps.push(batch_step(r, next, verdict, None, false));
            return Ok(None);
        };
        if !judge_batch(t, set, best, st, n, (r, verdict))? {
            return Ok(None);
        }
        t.write()?;
        let s = st.search.as_mut().expect("known once a batch ran");
        if s.high_oom.is_some() {
            after_oom += 1;
            if after_oom > BATCH_BISECT_TRIALS {
                return Ok(None);
            }
        }
        match s.next() {
            Some(b) => next = b.to_string(),
            None => return Ok(None),
        }
    }
}

fn batch_step(
    r: TrialResult,
    value: String,
    verdict: Option<VerdictId>,
    gain: Option<(f64, [f64; 2])>,
    kept: bool,
) -> Step {
    Step {
        knob: Some(Knob::BatchSize),
        value: Some(value),
        gain: gain.map(|g| g.0),
        gain_ci95: gain.map(|g| g.1),
        kept,
        verdict,
        result: r,
    }
}

/// The batch a trial ran at, as the injection reported it; the first time, the job's own batch
/// too, which starts the search and turns the best so far into samples/s. `None` (with a note)
/// when the batch never reached the job.
fn batch_ran_at(
    t: &mut Tuner,
    r: &TrialResult,
    asked: &str,
    best: &mut TrialResult,
    st: &mut BatchState,
) -> Option<u64> {
    if let Some(why) = not_applied(r, Knob::BatchSize) {
        t.rep.notes.push(why);
        return None;
    }
    let ov = r
        .run
        .overrides
        .iter()
        .flatten()
        .find(|o| o.key == "batch_size" && o.target == "DataLoader" && o.reason.is_none())
        .map(|o| (o.value.as_u64(), o.original.as_u64()));
    let Some((Some(n), original)) = ov else {
        t.rep.notes.push(format!(
            "batch_size: the job's DataLoader did not say what batch {asked} came to: the batch search stopped"
        ));
        return None;
    };
    if st.from.is_none() {
        let Some(b0) = original else {
            t.rep.notes.push(
                "batch_size: the job's own batch size is not a whole number: the batch search stopped"
                    .into(),
            );
            return None;
        };
        st.from = Some(b0);
        // from here on trials are compared in samples/s (the best so far ran at b0)
        best.figures.throughput = best
            .figures
            .throughput
            .as_ref()
            .map(|tp| super::batch_plan::per_sample(tp, b0));
        let mut s = super::batch_plan::Search::new(n, None);
        s.record(b0, true);
        st.search = Some(s);
    }
    Some(n)
}

/// Records a batch trial that ran at `n`: an out-of-memory narrows the search, a batch that
/// gains is kept; false when the search ends here (a batch that does not gain, a failure).
fn judge_batch(
    t: &mut Tuner,
    set: &mut Vec<(Knob, String)>,
    best: &mut TrialResult,
    st: &mut BatchState,
    n: u64,
    (mut r, verdict): (TrialResult, Option<VerdictId>),
) -> anyhow::Result<bool> {
    use super::batch_plan::{classify, per_sample, Verdict};
    let s = st.search.as_mut().expect("known once a batch ran");
    let value = n.to_string();
    match classify(&r.run.exit, t.last_oom.as_deref()).0 {
        Verdict::Oom => {
            s.record(n, false);
            t.rep.steps.push(batch_step(r, value, verdict, None, false));
            Ok(true)
        }
        Verdict::Failed => {
            t.rep.notes.push(format!(
                "batch_size={n} failed for a reason other than memory: the batch search stopped"
            ));
            t.rep.steps.push(batch_step(r, value, verdict, None, false));
            Ok(false)
        }
        Verdict::Ok => {
            s.record(n, true);
            r.figures.throughput = r.figures.throughput.as_ref().map(|tp| per_sample(tp, n));
            let pair = best
                .figures
                .throughput
                .as_ref()
                .zip(r.figures.throughput.as_ref());
            let g = pair.and_then(|(b, c)| plan::gain(b, c));
            let kept = pair.is_some_and(|(b, c)| plan::clears(b, c));
            let choice = Choice {
                knob: Knob::BatchSize,
                value: value.clone(),
                gain: g.map(|x| x.0),
                gain_ci95: g.map(|x| x.1),
            };
            t.rep
                .steps
                .push(batch_step(r.clone(), value.clone(), verdict, g, kept));
            if !kept {
                // a larger batch that does not gain: bigger ones will not either
                t.rep.rejected.push(choice);
                t.write()?;
                return Ok(false);
            }
            t.rep.chosen.retain(|c| c.knob != Knob::BatchSize);
            t.rep.chosen.push(choice);
            *set = with(set, Knob::BatchSize, &value);
            *best = r;
            st.chosen = Some(n);
            Ok(true)
        }
    }
}

fn figures(rs: &[(TrialResult, Option<VerdictId>)]) -> Figures {
    let mean = |f: &dyn Fn(&TrialResult) -> Option<f64>| {
        let v: Vec<f64> = rs.iter().filter_map(|(r, _)| f(r)).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    Figures {
        throughput: mean(&|r| r.figures.throughput.as_ref().map(|t| t.value)),
        unit: rs
            .iter()
            .find_map(|(r, _)| r.figures.throughput.as_ref().map(|t| t.unit.clone())),
        gpu_util_mean_pct: mean(&|r| r.figures.gpu_util_mean_pct),
        data_wait_pct: mean(&|r| r.figures.data_wait_fraction.map(|f| f * 100.0)),
        verdict: rs.last().and_then(|(_, v)| *v),
    }
}

/// Baseline and tuned setting, interleaved: A/B/A/B.
fn final_rerun(t: &mut Tuner, set: &[(Knob, String)]) -> anyhow::Result<Option<BeforeAfter>> {
    let (mut a, mut b) = (vec![], vec![]);
    // a changed batch: both sides in samples/s
    let batches = t.rep.batch.as_ref().and_then(|b| Some((b.from, b.to?)));
    for _ in 0..t.args.final_pairs {
        for (side, s) in [(&mut a, &[][..]), (&mut b, set)] {
            if t.stopped() {
                return Ok(None);
            }
            let (mut r, v) = t.trial(s)?;
            if let Some((b0, b1)) = batches {
                let n = if s.is_empty() { b0 } else { b1 };
                r.figures.throughput = r
                    .figures
                    .throughput
                    .as_ref()
                    .map(|tp| super::batch_plan::per_sample(tp, n));
            }
            t.rep.steps.push(Step::run(r.clone(), v));
            side.push((r, v));
        }
    }
    let tp = |xs: &[(TrialResult, Option<VerdictId>)]| -> Vec<super::trial::Throughput> {
        xs.iter()
            .filter(|(r, _)| r.run.exit.ok())
            .filter_map(|(r, _)| r.figures.throughput.clone())
            .collect()
    };
    let (ta, tb) = (tp(&a), tp(&b));
    let speedup = plan::ab_speedup(
        &ta.iter().collect::<Vec<_>>(),
        &tb.iter().collect::<Vec<_>>(),
    );
    Ok(Some(BeforeAfter {
        speedup,
        before: figures(&a),
        after: figures(&b),
    }))
}

/// `gpufeed run --dataloader k=v ... -- CMD`.
fn run_line(set: &[(Knob, String)], cmd: &[String]) -> String {
    let quote = |s: &str| {
        if s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c))
            && !s.is_empty()
        {
            s.to_string()
        } else {
            format!("'{}'", s.replace('\'', "'\\''"))
        }
    };
    let mut l = String::from("gpufeed run");
    for (k, v) in set {
        l.push_str(&format!(" {} {}={v}", k.flag(), k.key()));
    }
    l.push_str(" --");
    for a in cmd {
        l.push(' ');
        l.push_str(&quote(a));
    }
    l
}

/// `fix.patch` from the DataLoader call sites the chosen trial's injection saw.
fn write_patch(t: &mut Tuner, set: &[(Knob, String)], best: &TrialResult) -> anyhow::Result<()> {
    use super::patch::{patch_sites, Edit};
    let mut sites: Vec<String> = best
        .run
        .overrides
        .iter()
        .flatten()
        .filter(|o| o.target == "DataLoader" && o.reason.is_none())
        .filter_map(|o| o.site.clone())
        .collect();
    sites.sort();
    sites.dedup();
    let edits: Vec<Edit> = set
        .iter()
        .filter(|(k, _)| k.is_dataloader())
        .map(|(k, v)| Edit {
            key: k.key().into(),
            value: k.python_value(v),
        })
        .collect();
    if let Some(p) = t.rep.batch.as_ref().and_then(|b| b.lr_plan.clone()) {
        t.rep.patch_notes.push(p);
    }
    for (k, v) in set.iter().filter(|(k, _)| !k.is_dataloader()) {
        let code = match k {
            Knob::MatmulPrecision => {
                format!("torch.set_float32_matmul_precision({})", k.python_value(v))
            }
            _ => format!("torch.backends.cudnn.benchmark = {}", k.python_value(v)),
        };
        t.rep.patch_notes.push(format!(
            "add `{code}` after `import torch` in your training script"
        ));
    }
    // the job's own Python checks the changed files (parsed; each call bound to torch's
    // DataLoader where torch imports), else python3 on the PATH, else the scanner's own check
    let python = t
        .args
        .command
        .first()
        .filter(|c| {
            Path::new(c)
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("python"))
        })
        .map_or_else(
            || std::path::PathBuf::from("python3"),
            std::path::PathBuf::from,
        );
    let (diff, notes) = patch_sites(Path::new("."), &sites, &edits, Some(&python));
    t.rep.patch_notes.extend(notes);
    if !diff.is_empty() {
        let p = t.args.dir.join("fix.patch");
        crate::outfile::write_report(&p, diff)?;
        t.rep.patch = Some(p.display().to_string());
    }
    Ok(())
}

/// Runs the whole search: the report and the exit code. `save` is called whenever the report
/// has changed enough to be worth keeping on disk.
pub(crate) fn tune(
    args: &Setup,
    runner: &Runner,
    save: &mut Save,
) -> anyhow::Result<(TuneReport, u8)> {
    let cores_per_rank = args.cores.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1)
    });
    let mut t = Tuner {
        args,
        runner,
        save,
        rep: TuneReport {
            schema_version: report::SCHEMA_VERSION,
            command: args.command.clone(),
            cores_per_rank,
            budget_s: args.budget.as_secs_f64(),
            plan: vec![],
            steps: vec![],
            chosen: vec![],
            rejected: vec![],
            before_after: None,
            stop: None,
            patch: None,
            patch_notes: vec![],
            run_line: None,
            batch: None,
            notes: vec![],
            output_dir: args.dir.display().to_string(),
        },
        trials: 0,
        last_oom: None,
    };
    let code = search_all(&mut t)?;
    Ok((t.rep, code))
}

fn search_all(t: &mut Tuner) -> anyhow::Result<u8> {
    let start = Instant::now();
    let (base, verdict) = t.trial(&[])?;
    t.rep.steps.push(Step::run(base.clone(), verdict));
    t.write()?;
    if t.stopped() {
        t.rep.stop = Some(Stop::Interrupted);
        return Ok(Exit::signal(libc::SIGINT));
    }
    if !base.run.exit.ok() || base.figures.throughput.is_none() {
        let why = if base.run.exit.ok() {
            format!(
                "the baseline gave no throughput. {}",
                super::sweep_report::NO_RATE_HELP
            )
        } else {
            format!(
                "the baseline run failed: {}",
                base.run.last_lines.join("\n")
            )
        };
        t.rep.notes.push(why);
        return Ok(Exit::Failure.code());
    }
    let diag = crate::diagnose::report_for_recording(Path::new(&base.run.recording))
        .map_err(Failure::from)?;
    // TF32 tensor cores: compute capability 8.0 (Ampere) or later
    let tf32 = diag
        .gpus
        .iter()
        .filter_map(|g| g.compute_capability)
        .filter(|cc| cc[0] >= 8)
        .max();
    let (plans, notes) = plan::plan(
        &diag.findings,
        base.figures.data_wait_fraction,
        t.rep.cores_per_rank,
        t.args.allow_batch,
        tf32,
    );
    let hot = diag.python.as_ref().and_then(|p| p.data_hotspots.first());
    t.rep.notes.extend(plan::code_edit_note(&plans, hot));
    t.rep.plan = plans;
    t.rep.notes.extend(notes);
    if t.rep.plan.is_empty() {
        t.rep.stop = Some(Stop::NothingToTune);
        return Ok(Exit::Ok.code());
    }
    let (set, best) = search(t, &base, start)?;
    if set.is_empty() {
        if t.rep.stop != Some(Stop::Interrupted) {
            t.rep
                .notes
                .push("no knob gained enough to keep: the job's own settings stay".into());
        }
    } else {
        t.rep.run_line = Some(run_line(&set, &t.args.command));
        write_patch(t, &set, &best)?;
        t.write()?;
        if t.rep.stop != Some(Stop::Interrupted) {
            t.rep.before_after = final_rerun(t, &set)?;
        }
    }
    if t.stopped() {
        t.rep.stop = Some(Stop::Interrupted);
        return Ok(Exit::signal(libc::SIGINT));
    }
    Ok(Exit::Ok.code())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_line_reproduces_the_setting() {
        let set = vec![
            (Knob::NumWorkers, "4".to_string()),
            (Knob::MatmulPrecision, "high".to_string()),
        ];
        assert_eq!(
            run_line(&set, &["python".into(), "train.py".into(), "--name".into(), "a b".into()]),
            "gpufeed run --dataloader num_workers=4 --torch matmul_precision=high -- python train.py --name 'a b'"
        );
        assert_eq!(label(&[]), "baseline");
        // the batch knob's first value asks the job's DataLoader for a multiple of its own
        let r = resolved(&[
            (Knob::NumWorkers, "4".to_string()),
            (Knob::BatchSize, plan::BATCH_DOUBLE.to_string()),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(r.dataloader["num_workers"], serde_json::json!(4));
        assert_eq!(
            r.dataloader["batch_size"],
            serde_json::json!({ "times": 2.0 })
        );
        assert_eq!(
            resolved(&[(Knob::BatchSize, "64".into())])
                .unwrap()
                .unwrap()
                .dataloader["batch_size"],
            serde_json::json!(64)
        );
        assert_eq!(
            with(&set, Knob::NumWorkers, "8")[1],
            (Knob::NumWorkers, "8".to_string())
        );
    }
}
