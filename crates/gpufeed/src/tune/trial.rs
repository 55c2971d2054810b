//! One trial: run the command with one setting under the recorder, watch its throughput, stop the
//! whole process tree once the throughput is steady (or at `max_time`), and summarise.

use super::progress::{parse_tqdm, LineSplitter, RateRegex};
use super::TuneError;
use crate::finding::WaitSource;
use crate::job::{Job, JobExit, SpawnOpts};
use crate::record::reader::{read_path, Sink};
use crate::record::recorder::RecorderConfig;
use crate::record::session::{self, Session, Spawn};
use crate::record::summary::{Summary, SummaryBuilder};
use crate::sample::event::End;
use crate::sample::event::EndReason;
use crate::sample::stepmark::{MarkSource, StepMark};
use crate::sample::steps::{monotonic_ns, StepSocket, ENV_VAR};
use crate::sample::GpuSample;
use crate::stats::steady::{estimate, from_counts, from_rates, Estimate, Interval};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Output lines kept for the report of a failed trial.
pub const LAST_LINES: usize = 20;

/// What to run and how long to measure it.
#[derive(Debug, Clone)]
pub struct TrialSpec {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub recording: PathBuf,
    pub min_time: Duration,
    pub max_time: Duration,
    /// CI half-width over the median that counts as steady (0.03).
    pub rel_tol: f64,
    pub rate_regex: Option<RateRegex>,
    /// Unit of the `--rate-regex` rate, e.g. `samples/s`.
    pub rate_unit: String,
    /// Samples per step, when known: turns steps/s into samples/s.
    pub batch: Option<f64>,
    pub show_output: bool,
    pub interval: Duration,
    pub nvml_lib: Option<PathBuf>,
    pub no_gpu: bool,
    /// Python stack sampling of each trial's job.
    pub py: Option<crate::record::pyrec::PyConfig>,
    /// How long each of SIGINT and SIGTERM is given before the next signal.
    pub grace: Duration,
    /// `--dataloader` / `--torch` values for this trial (`None`: nothing overridden).
    pub inject: Option<crate::inject::Resolved>,
    /// Time the job's torch DataLoader batches as step markers (`--no-auto-steps` turns it off).
    pub auto_steps: bool,
}

/// Where a throughput figure came from.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum RateSource {
    /// Step markers on `GPUFEED_STEP_SOCKET`.
    StepSocket,
    /// `--rate-regex` on the job's output.
    RateRegex,
    /// A tqdm-style progress bar on the job's output.
    Tqdm,
    /// Mean GPU utilization: a proxy, not a throughput.
    GpuBusyProxy,
}

impl RateSource {
    /// The wire name (the JSON's).
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// A measured throughput.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Throughput {
    pub value: f64,
    /// `steps/s`, `it/s`, `samples/s`, ... or `gpu_busy_pct` for the proxy.
    pub unit: String,
    /// 95% confidence interval of the mean over the steady part (`None` with too little data).
    pub ci_low: Option<f64>,
    pub ci_high: Option<f64>,
    pub source: RateSource,
    /// The CI met the tolerance.
    pub steady: bool,
    /// Seconds of warm-up cut from the start.
    pub warmup_s: Option<f64>,
    /// Intervals (steps, progress updates or samples) in the steady part.
    pub intervals: usize,
    /// Samples per second, when the batch size is known.
    pub samples_per_s: Option<f64>,
}

impl Throughput {
    /// CI half-width relative to the value.
    pub(crate) fn rel_half_width(&self) -> Option<f64> {
        match (self.ci_low, self.ci_high) {
            (Some(l), Some(h)) if self.value > 0.0 => Some((h - l) / 2.0 / self.value),
            _ => None,
        }
    }
}

/// How a trial ended.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum TrialStatus {
    /// Throughput became steady; gpufeed stopped the job.
    Steady,
    /// `--max-time` was reached before the throughput was steady; gpufeed stopped the job.
    MaxTime,
    /// The job ended by itself with exit code 0.
    Exited,
    /// The job ended by itself with a non-zero code or a signal.
    Failed,
    /// gpufeed was interrupted (Ctrl-C) during the trial.
    Interrupted,
}

impl TrialStatus {
    /// The wire name (the JSON's).
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialExit {
    pub status: TrialStatus,
    /// The job's exit code, when it exited normally.
    pub code: Option<i32>,
    /// The signal that ended the job, when one did.
    pub signal: Option<i32>,
    /// The last signal gpufeed had to send to stop the process tree (2 = SIGINT was enough).
    pub stop_signal: Option<i32>,
}

impl TrialExit {
    /// The job ran without failing (stopped by gpufeed or exited 0).
    pub fn ok(&self) -> bool {
        matches!(
            self.status,
            TrialStatus::Steady | TrialStatus::MaxTime | TrialStatus::Exited
        )
    }
}

/// What a trial measured, as every report of trials keeps it (`sweep`'s and `tune`'s results
/// flatten it, so its keys stay where they were in the JSON).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TrialFigures {
    pub throughput: Option<Throughput>,
    pub gpu_util_mean_pct: Option<f64>,
    pub gpu_mem_max_bytes: Option<u64>,
    /// Share of steady-state step time spent waiting for input (step markers with wait times;
    /// else the Python stacks' estimate).
    pub data_wait_fraction: Option<f64>,
    /// `step_probe` (exact) or `python_stacks` (estimated from stack samples).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_wait_source: Option<WaitSource>,
    pub job_cpu_mean_pct: Option<f64>,
    pub job_rss_max_bytes: Option<u64>,
}

/// Everything measured in one trial: its figures and how it ran, as the reports keep them,
/// and what only the searches read.
#[derive(Debug, Clone)]
pub struct TrialOutcome {
    pub figures: TrialFigures,
    /// How it ran, with every last output line (a report keeps them only for a failed trial).
    pub run: TrialRun,
    /// The first output line that reads as out-of-memory.
    pub oom_line: Option<String>,
    pub gpu_mem_total_bytes: Option<u64>,
    /// Why GPUs were not recorded, when they were not.
    pub gpu_error: Option<String>,
}

/// How a trial ran, as both reports keep it (`sweep`'s and `tune`'s results, `batch-size`'s
/// trials): one struct, flattened into each, so the fields are written once and the JSON stays
/// as it was.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialRun {
    pub duration_s: f64,
    pub exit: TrialExit,
    /// The job's last output lines when the trial failed (empty otherwise).
    pub last_lines: Vec<String>,
    pub recording: String,
    /// What `--dataloader` / `--torch` put in place of the job's own values (`None` when nothing
    /// was to be injected; an empty list when nothing could be).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overrides: Option<Vec<crate::sample::event::Override>>,
    /// Why overrides could not apply in this trial.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub override_notes: Vec<String>,
}

impl TrialRun {
    /// The run as a report keeps it: its last output lines only when it `failed`.
    pub fn reported(&self, failed: bool) -> TrialRun {
        TrialRun {
            last_lines: if failed {
                self.last_lines.clone()
            } else {
                vec![]
            },
            ..self.clone()
        }
    }
}

/// What the trial loop reports while it runs.
#[derive(Debug, Clone)]
pub struct Live {
    pub elapsed_s: f64,
    pub value: Option<f64>,
    pub unit: Option<String>,
    pub rel_half_width: Option<f64>,
}

/// One progress bar's readings: `(t_s, count)` points, `(t_s, rate)` points, and its unit.
type BarReadings = (Vec<(f64, f64)>, Vec<(f64, f64)>, String);

#[derive(Default)]
struct Obs {
    /// tqdm readings per bar (unit + total): `(t_s, count)` and `(t_s, rate)`.
    tqdm: BTreeMap<String, BarReadings>,
    regex: Vec<(f64, f64)>,
    last: VecDeque<(String, bool)>,
    oom: Option<String>,
}

impl Obs {
    fn line(&mut self, t_s: f64, line: &str, regex: Option<&RateRegex>) {
        let tq = parse_tqdm(line);
        if let Some(r) = &tq {
            let key = format!("{}|{}", r.unit, r.total.as_deref().unwrap_or(""));
            let e = self
                .tqdm
                .entry(key)
                .or_insert_with(|| (vec![], vec![], r.unit.clone()));
            if let Some(c) = r.count {
                e.0.push((t_s, c as f64));
            }
            if let Some(x) = r.rate_per_s {
                e.1.push((t_s, x));
            }
        }
        if let Some(x) = regex.and_then(|re| re.rate(line)) {
            self.regex.push((t_s, x));
        }
        if self.oom.is_none() && super::oom::oom_marker(line).is_some() {
            self.oom = Some(line.trim().to_string());
        }
        // A redrawn progress bar replaces its previous drawing.
        if tq.is_some() && self.last.back().is_some_and(|(_, was)| *was) {
            self.last.pop_back();
        }
        self.last.push_back((line.to_string(), tq.is_some()));
        while self.last.len() > LAST_LINES {
            self.last.pop_front();
        }
    }
}

/// Points no later than `t_stop`.
fn until(v: &[(f64, f64)], t_stop: f64) -> Vec<(f64, f64)> {
    v.iter().copied().filter(|p| p.0 <= t_stop).collect()
}

/// The series from the best source available; `None` when no source has enough data yet.
struct Series {
    source: RateSource,
    unit: String,
    intervals: Vec<Interval>,
    /// For step markers: the marks behind the intervals (interval i ends at mark i + 1).
    marks: Vec<StepMark>,
}

fn pick_series(
    spec: &TrialSpec,
    marks: &[StepMark],
    start_ns: u64,
    obs: &Obs,
    gpu: &[(f64, f64)],
    t_stop: f64,
) -> Option<Series> {
    let to_s = |ns: u64| (ns as f64 - start_ns as f64) / 1e9;
    let mut m: Vec<StepMark> = marks
        .iter()
        .copied()
        .filter(|m| m.is_step() && to_s(m.t_ns) <= t_stop)
        .collect();
    m.sort_by_key(|m| m.t_ns);
    // `--rate-regex` is the user's explicit choice: it beats the markers gpufeed takes from the
    // DataLoader by itself (not the job's own), so every trial of a sweep has the same source.
    let auto_only = m.iter().all(|k| k.source == MarkSource::Loader);
    let regex_first =
        auto_only && spec.rate_regex.is_some() && until(&obs.regex, t_stop).len() >= 3;
    if m.len() >= 3 && !regex_first {
        let pts: Vec<(f64, f64)> = m
            .iter()
            .enumerate()
            .map(|(i, k)| (to_s(k.t_ns), i as f64))
            .collect();
        return Some(Series {
            source: RateSource::StepSocket,
            unit: "steps/s".into(),
            intervals: from_counts(&pts),
            marks: m,
        });
    }
    if spec.rate_regex.is_some() {
        let r = until(&obs.regex, t_stop);
        if r.len() >= 3 {
            return Some(Series {
                source: RateSource::RateRegex,
                unit: spec.rate_unit.clone(),
                intervals: from_rates(&r),
                marks: vec![],
            });
        }
    }
    // The bar with the most readings (an inner per-batch bar beats an outer per-epoch one).
    if let Some((counts, rates, unit)) = obs
        .tqdm
        .values()
        .max_by_key(|(c, r, _)| c.len().max(r.len()))
    {
        let c = until(counts, t_stop);
        let r = until(rates, t_stop);
        let unit = format!("{unit}/s");
        if c.len() >= 3 && c.len() >= r.len() / 2 {
            return Some(Series {
                source: RateSource::Tqdm,
                unit,
                intervals: from_counts(&c),
                marks: vec![],
            });
        }
        if r.len() >= 3 {
            return Some(Series {
                source: RateSource::Tqdm,
                unit,
                intervals: from_rates(&r),
                marks: vec![],
            });
        }
    }
    let g = until(gpu, t_stop);
    (g.len() >= 3).then(|| Series {
        source: RateSource::GpuBusyProxy,
        unit: "gpu_busy_pct".into(),
        intervals: from_rates(&g),
        marks: vec![],
    })
}

/// GPU utilization samples `(t_s, pct)` from a recording (all GPUs pooled), a consumer of the
/// recording reader; [`UtilSeries::finish`] puts them in time order.
#[derive(Default)]
struct UtilSeries(Vec<(f64, f64)>);

impl Sink for UtilSeries {
    fn gpu(&mut self, g: &GpuSample) {
        match &g.util_samples {
            Some(s) => self.0.extend(s.iter().map(|[t, u]| (*t, *u))),
            None => self.0.extend(g.util_pct.map(|u| (g.t_s, u))),
        }
    }
}

impl UtilSeries {
    fn finish(mut self) -> Vec<(f64, f64)> {
        self.0.sort_by(|a, b| a.0.total_cmp(&b.0));
        self.0
    }
}

/// GPU utilization samples of a recording being written (read again while the trial runs).
fn gpu_util_series(path: &std::path::Path) -> Vec<(f64, f64)> {
    let mut util = UtilSeries::default();
    let _ = read_path(path, &mut util);
    util.finish()
}

/// The trial's summary and (with a GPU) its utilization series, from one read of its recording.
fn trial_figures(path: &std::path::Path, has_gpu: bool) -> (Option<Summary>, Vec<(f64, f64)>) {
    let mut summary = SummaryBuilder::default();
    let mut util = has_gpu.then(UtilSeries::default);
    match read_path(path, (&mut summary, &mut util)) {
        Ok((_, st)) => (
            Some(summary.finish(path, st.truncated)),
            util.map(UtilSeries::finish).unwrap_or_default(),
        ),
        Err(_) => (None, Vec::new()),
    }
}

fn throughput_of(series: &Series, est: &Estimate, batch: Option<f64>) -> Throughput {
    let per_step = matches!(series.source, RateSource::StepSocket)
        || (series.source == RateSource::Tqdm && series.unit == "it/s");
    let samples_per_s = if series.source == RateSource::StepSocket {
        let steady = &series.marks[series.marks.len() - est.intervals..];
        let items: Option<Vec<u64>> = steady.iter().map(|m| m.items).collect();
        match items {
            Some(it) if !it.is_empty() => {
                Some(est.value * it.iter().sum::<u64>() as f64 / it.len() as f64)
            }
            _ => batch.map(|b| est.value * b),
        }
    } else if per_step {
        batch.map(|b| est.value * b)
    } else {
        None
    };
    let ci = est.ci_high.is_finite();
    Throughput {
        value: est.value,
        unit: series.unit.clone(),
        ci_low: ci.then_some(est.ci_low),
        ci_high: ci.then_some(est.ci_high),
        source: series.source,
        steady: est.steady,
        warmup_s: Some(est.warmup_end_s.max(0.0)),
        intervals: est.intervals,
        samples_per_s,
    }
}

/// Share of the steady steps' time spent waiting for data; `None` unless every steady step
/// reported its wait.
fn data_wait(series: &Series, est: &Estimate) -> Option<f64> {
    if series.source != RateSource::StepSocket || est.intervals == 0 {
        return None;
    }
    let steady_iv = &series.intervals[series.intervals.len() - est.intervals..];
    let steady_marks = &series.marks[series.marks.len() - est.intervals..];
    let wait: Option<u64> = steady_marks.iter().map(|m| m.wait_ns).sum();
    let dur: f64 = steady_iv.iter().map(|i| i.dur_s).sum();
    wait.filter(|_| dur > 0.0)
        .map(|w| (w as f64 / 1e9 / dur).clamp(0.0, 1.0))
}

fn reader(
    mut stream: impl Read + Send + 'static,
    obs: Arc<Mutex<Obs>>,
    t0: Instant,
    regex: Option<RateRegex>,
    echo: bool,
) -> Result<JoinHandle<()>, TuneError> {
    std::thread::Builder::new()
        .name("gpufeed-output".into())
        .spawn(move || {
            let mut split = LineSplitter::default();
            let mut buf = [0u8; 8192];
            let mut handle = |line: &str| {
                let t = t0.elapsed().as_secs_f64();
                if let Ok(mut o) = obs.lock() {
                    o.line(t, line, regex.as_ref());
                }
            };
            loop {
                match stream.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        if echo {
                            let mut e = std::io::stderr().lock();
                            let _ = e.write_all(&buf[..n]);
                            let _ = e.flush();
                        }
                        split.feed(&buf[..n], &mut handle);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            split.finish(&mut handle);
        })
        .map_err(TuneError::Thread)
}

/// The job's environment: the spec's, the overrides to inject, the step-marker socket, and
/// unbuffered Python output.
fn job_env(
    spec: &TrialSpec,
    injection: Option<&crate::inject::Injection>,
    socket: &StepSocket,
) -> Vec<(String, String)> {
    let mut env = spec.env.clone();
    if let Some(i) = injection {
        let var = i.env_var(&env);
        env.push(var);
    }
    env.push((ENV_VAR.into(), socket.path().display().to_string()));
    if std::env::var_os("PYTHONUNBUFFERED").is_none()
        && !env.iter().any(|(k, _)| k == "PYTHONUNBUFFERED")
    {
        // Python block-buffers a piped stdout: progress printed with print() would arrive in
        // 8 KiB lumps and read as bursts.
        env.push(("PYTHONUNBUFFERED".into(), "1".into()));
    }
    env
}

/// Waits for the output readers: they end when the last holder of the pipes exits; a stray one
/// is not waited for beyond 2 s.
fn join_readers(readers: Vec<std::thread::JoinHandle<()>>) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while readers.iter().any(|r| !r.is_finished()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    for r in readers {
        if r.is_finished() {
            let _ = r.join();
        }
    }
}

/// The recording's end reason for how the trial stopped.
fn end_reason(status: TrialStatus) -> EndReason {
    match status {
        TrialStatus::Exited | TrialStatus::Failed => EndReason::JobExited,
        TrialStatus::Interrupted => EndReason::Interrupted,
        TrialStatus::Steady => EndReason::Steady,
        TrialStatus::MaxTime => EndReason::MaxTime,
    }
}

/// Mean GPU utilization (over the GPUs that have one), peak GPU memory used, GPU memory total,
/// and the job's mean CPU and peak RSS, from the trial's recording summary.
type RecordedFigures = (
    Option<f64>,
    Option<u64>,
    Option<u64>,
    Option<f64>,
    Option<u64>,
);

fn figures(s: &Summary) -> RecordedFigures {
    let utils: Vec<f64> = s.gpus.iter().filter_map(|g| g.util_mean_pct).collect();
    (
        (!utils.is_empty()).then(|| utils.iter().sum::<f64>() / utils.len() as f64),
        s.gpus.iter().filter_map(|g| g.mem_used_max_bytes).max(),
        s.gpus.iter().filter_map(|g| g.mem_total_bytes).max(),
        s.job.as_ref().and_then(|j| j.cpu_mean_pct),
        s.job.as_ref().and_then(|j| j.rss_max_bytes),
    )
}

/// A trial's job while it runs: the job, its recording, and what its output said.
struct Running {
    job: Job,
    recorder: crate::record::recorder::Recorder,
    obs: Arc<Mutex<Obs>>,
    readers: Vec<JoinHandle<()>>,
    socket: Arc<StepSocket>,
    t0: Instant,
    start_ns: u64,
    has_gpu: bool,
}

/// Runs one trial. `interrupt` (set by a Ctrl-C handler) stops it early; `on_tick` is called about
/// four times a second with the live estimate.
pub(crate) fn run_trial(
    spec: &TrialSpec,
    interrupt: &AtomicBool,
    on_tick: impl FnMut(&Live),
) -> Result<TrialOutcome, TuneError> {
    let socket = Arc::new(StepSocket::open().map_err(TuneError::Socket)?);
    let session = Session::prepare(RecorderConfig {
        output: spec.recording.clone(),
        interval: spec.interval,
        nvml_lib: spec.nvml_lib.clone(),
        no_gpu: spec.no_gpu,
        clobber: crate::outfile::Clobber::Refuse,
        py: spec.py,
        steps: Some(Arc::clone(&socket)),
    })?;
    let gpu_error = session.gpu_error();
    let wanted = match &spec.inject {
        Some(r) => Some(crate::inject::Resolved {
            auto_steps: spec.auto_steps,
            ..r.clone()
        }),
        None => spec
            .auto_steps
            .then(crate::inject::Resolved::auto_steps_only),
    };
    let injection = match &wanted {
        Some(r) => Some(crate::inject::Injection::prepare(r).map_err(TuneError::Inject)?),
        None => None,
    };
    let mut run = start(
        spec,
        session,
        socket,
        injection.as_ref(),
        gpu_error.is_none(),
    )?;
    let tree = run.recorder.tree_pids();
    let (status, ended) = watch(spec, &mut run, interrupt, on_tick)?;
    let t_stop = run.t0.elapsed().as_secs_f64();
    let extra = tree.lock().map(|p| p.clone()).unwrap_or_default();
    let (exit, stop_signal) = run.job.stop_tree(&extra, spec.grace)?;
    let exit = ended.unwrap_or(exit);
    join_readers(std::mem::take(&mut run.readers));
    let duration_s = run.t0.elapsed().as_secs_f64();
    let overrides = injection.as_ref().map(|i| i.read());
    let end = End {
        exit_code: exit.code(),
        signal: exit.signal(),
        reason: Some(end_reason(status)),
        ..Default::default()
    };
    let path = session::finish(run.recorder, overrides.as_ref(), end)?;
    let (summary, gpu) = trial_figures(&path, run.has_gpu);
    let marks = run.socket.marks();
    let obs = run
        .obs
        .lock()
        .map(|mut o| std::mem::take(&mut *o))
        .unwrap_or_default();
    let series = pick_series(spec, &marks, run.start_ns, &obs, &gpu, t_stop);
    let (throughput, data_wait_fraction, data_wait_source) =
        throughput_and_wait(spec, series.as_ref(), &path);
    let (util, mem_max, mem_total, cpu, rss) = summary.as_ref().map(figures).unwrap_or_default();
    Ok(TrialOutcome {
        figures: TrialFigures {
            throughput,
            gpu_util_mean_pct: util,
            gpu_mem_max_bytes: mem_max,
            data_wait_fraction,
            data_wait_source,
            job_cpu_mean_pct: cpu,
            job_rss_max_bytes: rss,
        },
        run: TrialRun {
            duration_s,
            exit: TrialExit {
                status,
                code: exit.code(),
                signal: exit.signal(),
                stop_signal,
            },
            last_lines: obs.last.into_iter().map(|(l, _)| l).collect(),
            recording: path.display().to_string(),
            overrides: overrides.as_ref().map(|r| r.overrides.clone()),
            override_notes: overrides.map(|r| r.notes).unwrap_or_default(),
        },
        oom_line: obs.oom,
        gpu_mem_total_bytes: mem_total,
        gpu_error,
    })
}
/// Starts the job with its recorder and output readers; on an error after the job started,
/// the job is stopped.
fn start(
    spec: &TrialSpec,
    session: Session,
    socket: Arc<StepSocket>,
    injection: Option<&crate::inject::Injection>,
    has_gpu: bool,
) -> Result<Running, TuneError> {
    let env = job_env(spec, injection, &socket);
    let t0 = Instant::now();
    let start_ns = monotonic_ns();
    let opts = SpawnOpts {
        env,
        capture: true,
        // run_trial runs on gpufeed's main thread, which lives as long as the trial.
        die_with_parent: true,
    };
    let how: Spawn<'_, String> = Spawn::Own {
        argv: &spec.argv,
        opts: &opts,
    };
    let (mut job, recorder) = session.spawn(how)?;
    // From here on the job runs: an error must not leave it behind.
    let started = (|| {
        let recorder = recorder?;
        let obs = Arc::new(Mutex::new(Obs::default()));
        let (out, err) = job.take_output();
        let mut readers = Vec::new();
        for stream in [
            out.map(|o| Box::new(o) as Box<dyn Read + Send>),
            err.map(|e| Box::new(e) as Box<dyn Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            readers.push(reader(
                stream,
                Arc::clone(&obs),
                t0,
                spec.rate_regex.clone(),
                spec.show_output,
            )?);
        }
        Ok::<_, TuneError>((recorder, obs, readers))
    })();
    match started {
        Ok((recorder, obs, readers)) => Ok(Running {
            job,
            recorder,
            obs,
            readers,
            socket,
            t0,
            start_ns,
            has_gpu,
        }),
        Err(e) => {
            let _ = job.stop_tree(&[], spec.grace);
            Err(e)
        }
    }
}

/// Waits for the trial to end: interrupted, the job exited, `--max-time`, or steady after
/// `--min-time`; re-estimates four times a second and tells `on_tick`.
fn watch(
    spec: &TrialSpec,
    run: &mut Running,
    interrupt: &AtomicBool,
    mut on_tick: impl FnMut(&Live),
) -> Result<(TrialStatus, Option<JobExit>), TuneError> {
    let mut gpu: Vec<(f64, f64)> = Vec::new();
    let mut last_gpu_read = Instant::now();
    let mut last_eval = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(50));
        if interrupt.load(Ordering::SeqCst) {
            return Ok((TrialStatus::Interrupted, None));
        }
        if let Some(x) = run.job.try_wait()? {
            let st = match x {
                JobExit::Code(0) => TrialStatus::Exited,
                _ => TrialStatus::Failed,
            };
            return Ok((st, Some(x)));
        }
        let elapsed = run.t0.elapsed();
        if elapsed >= spec.max_time {
            return Ok((TrialStatus::MaxTime, None));
        }
        if last_eval.elapsed() < Duration::from_millis(250) {
            continue;
        }
        last_eval = Instant::now();
        let el = elapsed.as_secs_f64();
        let marks = run.socket.marks();
        let need_gpu =
            run.has_gpu && marks.len() < 3 && last_gpu_read.elapsed() >= Duration::from_secs(1);
        if need_gpu {
            gpu = gpu_util_series(&spec.recording);
            last_gpu_read = Instant::now();
        }
        let series = {
            let o = run.obs.lock().unwrap_or_else(|e| e.into_inner());
            pick_series(spec, &marks, run.start_ns, &o, &gpu, el)
        };
        let est = series
            .as_ref()
            .and_then(|s| estimate(&s.intervals, spec.rel_tol).map(|e| (s, e)));
        on_tick(&Live {
            elapsed_s: el,
            value: est.as_ref().map(|(_, e)| e.value),
            unit: est.as_ref().map(|(s, _)| s.unit.clone()),
            rel_half_width: est
                .as_ref()
                .map(|(_, e)| e.rel_half_width)
                .filter(|r| r.is_finite()),
        });
        if elapsed >= spec.min_time && est.as_ref().is_some_and(|(_, e)| e.steady) {
            return Ok((TrialStatus::Steady, None));
        }
    }
}

/// The trial's throughput from its series, and its data wait: the step markers' when they
/// timed it, else the Python stacks' estimate from the recording when they were sampled.
fn throughput_and_wait(
    spec: &TrialSpec,
    series: Option<&Series>,
    recording: &std::path::Path,
) -> (Option<Throughput>, Option<f64>, Option<WaitSource>) {
    let est = series.and_then(|s| estimate(&s.intervals, spec.rel_tol).map(|e| (s, e)));
    let throughput = est.as_ref().map(|(s, e)| throughput_of(s, e, spec.batch));
    let probe_wait = est.as_ref().and_then(|(s, e)| data_wait(s, e));
    let (wait, source) = match probe_wait {
        Some(w) => (Some(w), Some(WaitSource::StepProbe)),
        None if spec.py.is_some() => {
            let w = crate::diagnose::evidence_for_recording(recording)
                .ok()
                .and_then(|e| e.python?.data_wait_pct)
                .map(|p| (p / 100.0).clamp(0.0, 1.0));
            (w, w.map(|_| WaitSource::PythonStacks))
        }
        None => (None, None),
    };
    (throughput, wait, source)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(dir: &std::path::Path, script: &str) -> TrialSpec {
        TrialSpec {
            argv: vec!["sh".into(), "-c".into(), script.into()],
            env: vec![],
            recording: dir.join("t.ndjson"),
            min_time: Duration::from_millis(500),
            max_time: Duration::from_secs(5),
            rel_tol: 0.03,
            rate_regex: None,
            rate_unit: "it/s".into(),
            batch: Some(8.0),
            show_output: false,
            interval: Duration::from_millis(100),
            nvml_lib: None,
            no_gpu: true,
            py: None,
            grace: Duration::from_millis(500),
            inject: None,
            auto_steps: false,
        }
    }

    #[test]
    fn sources_in_order_and_the_busiest_bar() {
        let dir = tempfile::tempdir().unwrap();
        let mut sp = spec(dir.path(), "true");
        let mut o = Obs::default();
        for i in 0..40 {
            let t = i as f64 * 0.1;
            // An inner per-batch bar (20 it/s) and an outer per-epoch bar updated rarely.
            o.line(t, &format!("{}/1000 [00:01<00:10, 20.00it/s]", 2 * i), None);
            if i % 10 == 0 {
                o.line(t, &format!("{}/5 [00:01<00:10, 0.10it/s]", i / 10), None);
            }
            o.line(
                t,
                &format!("throughput: {} samples/s", 640 + i % 3),
                sp.rate_regex.as_ref(),
            );
        }
        let s = pick_series(&sp, &[], 0, &o, &[], 10.0).unwrap();
        assert_eq!((s.source, s.unit.as_str()), (RateSource::Tqdm, "it/s"));
        let e = estimate(&s.intervals, 0.03).unwrap();
        assert!((e.value - 20.0).abs() < 0.5, "{e:?}");
        // A regex, when given, is the user's explicit choice and wins over tqdm.
        sp.rate_regex = Some(RateRegex::new(r"throughput: ([0-9.]+) samples/s").unwrap());
        let mut o2 = Obs::default();
        for i in 0..40 {
            let t = i as f64 * 0.1;
            o2.line(
                t,
                &format!("{}/1000 [00:01<00:10, 20.00it/s]", 2 * i),
                sp.rate_regex.as_ref(),
            );
            o2.line(
                t,
                &format!("throughput: {} samples/s", 640 + i % 3),
                sp.rate_regex.as_ref(),
            );
        }
        let s = pick_series(&sp, &[], 0, &o2, &[], 10.0).unwrap();
        assert_eq!((s.source, s.unit.as_str()), (RateSource::RateRegex, "it/s"));
        // Step markers beat everything; observations after the stop are left out.
        let marks: Vec<StepMark> = (0..30u64)
            .map(|i| StepMark {
                t_ns: i * 50_000_000,
                wait_ns: Some(10_000_000),
                items: Some(4),
                rank: None,
                ..Default::default()
            })
            .collect();
        let s = pick_series(&sp, &marks, 0, &o2, &[], 1.0).unwrap();
        assert_eq!(s.source, RateSource::StepSocket);
        assert_eq!(s.marks.len(), 21);
        let e = estimate(&s.intervals, 0.03).unwrap();
        assert!((e.value - 20.0).abs() < 1e-6);
        assert!((data_wait(&s, &e).unwrap() - 0.2).abs() < 1e-9);
        let sps = throughput_of(&s, &e, None).samples_per_s.unwrap();
        assert!((sps - 80.0).abs() < 1e-6, "{sps}");
        // Nothing: the GPU proxy, or no series at all.
        let gpu: Vec<(f64, f64)> = (0..10).map(|i| (i as f64 * 0.17, 55.0)).collect();
        let s = pick_series(
            &spec(dir.path(), "true"),
            &[],
            0,
            &Obs::default(),
            &gpu,
            5.0,
        );
        assert_eq!(s.unwrap().source, RateSource::GpuBusyProxy);
        assert!(pick_series(&sp, &[], 0, &Obs::default(), &[], 5.0).is_none());
    }

    #[test]
    fn a_tqdm_job_is_measured_and_stopped() {
        let dir = tempfile::tempdir().unwrap();
        // 50 it/s, printed like tqdm with \r redraws, forever.
        let s = spec(
            dir.path(),
            r#"i=0; while true; do i=$((i+1)); printf '%d/1000 [00:01<00:10, 50.00it/s]\r' $i >&2; sleep 0.02; done"#,
        );
        let out = run_trial(&s, &AtomicBool::new(false), |_| {}).unwrap();
        let t = out.figures.throughput.unwrap();
        assert_eq!(t.source, RateSource::Tqdm);
        assert_eq!(t.unit, "it/s");
        // sh's sleep adds its own start-up time to each 20 ms: somewhat under 50/s.
        assert!(t.value > 15.0 && t.value < 55.0, "{t:?}");
        assert!(t.samples_per_s.is_some());
        assert!(
            matches!(
                out.run.exit.status,
                TrialStatus::Steady | TrialStatus::MaxTime
            ),
            "{:?}",
            out.run.exit
        );
        assert!(out.figures.data_wait_fraction.is_none());
    }

    #[test]
    fn a_failing_job_keeps_its_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let s = spec(
            dir.path(),
            "echo starting; echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB' >&2; exit 1",
        );
        let out = run_trial(&s, &AtomicBool::new(false), |_| {}).unwrap();
        assert_eq!(out.run.exit.status, TrialStatus::Failed);
        assert_eq!(out.run.exit.code, Some(1));
        assert!(out.oom_line.is_some());
        assert_eq!(out.run.last_lines.len(), 2, "{:?}", out.run.last_lines);
        assert!(out.figures.throughput.is_none());
    }
}
