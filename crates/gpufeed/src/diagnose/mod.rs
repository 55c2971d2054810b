//! Diagnosis: evidence from samples, pure rules, findings and a verdict.
//!
//! `input` reads any supported file into one stream of recording lines; `evidence` turns the
//! stream into statistics; `rules` turn statistics into findings; `verdict` picks the primary
//! bottleneck; `present::diagnose` presents the [`DiagnoseReport`] as text, JSON or Markdown.

pub mod evidence;
pub mod input;
pub mod nodes;
pub mod phases;
pub mod rules;
pub(crate) mod streaming;
pub mod verdict;

use input::InputFormat;

use crate::finding::Finding;
use evidence::{Evidence, GpuEvidence, HostEvidence, JobEvidence, Origin};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use verdict::{Verdict, VerdictId};

/// Version of the JSON report; bumped when a field is removed or changes meaning.
pub const REPORT_SCHEMA_VERSION: u32 = 1;

/// Where the report's facts came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputSource {
    pub path: String,
    /// `recording`, `smi_csv`, `smi_dmon` or `dcgmi`.
    pub format: InputFormat,
    /// Lines (recording) or rows (logs) read.
    pub lines: u64,
    /// Lines that could not be read and were skipped.
    pub malformed: u64,
    /// The last line was cut (a killed recorder or logger).
    pub truncated: bool,
    /// A recording without its `end` line (the recorder did not finish).
    pub unfinished: bool,
    /// Lines dropped for a time outside the recording's bounds (0 s to a year); absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bad_time: Option<u64>,
    /// Lines with a string cut to `record::reader::MAX_STRING_BYTES`; absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub long_strings: Option<u64>,
}

/// A diagnosis: the JSON contract of `gpufeed diagnose --format json` (see docs/diagnose.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiagnoseReport {
    pub schema_version: u32,
    pub source: InputSource,
    pub duration_s: f64,
    pub verdict: Verdict,
    /// Ranked: most severe and largest gain first.
    pub findings: Vec<Finding>,
    pub gpus: Vec<GpuEvidence>,
    pub host: HostEvidence,
    pub job: JobEvidence,
    /// The training loop seen through its Python stacks (`gpufeed run` samples them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<evidence::PythonEvidence>,
    /// The job's step markers (`GPUFEED_STEP_SOCKET`): exact step times and data wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<evidence::StepEvidence>,
    /// Caveats for people (weak evidence, missing data).
    pub notes: Vec<String>,
    /// Phases a log was split into (start-up, active, eval-like, idle, idle tail); only the
    /// active ones were judged. Empty when the input was judged as one block.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub phases: Vec<phases::Phase>,
}

/// The training loop's data wait as every report gives it, and where it comes from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DataWait {
    /// Share of the loop's time waiting for its next batch, in percent.
    pub pct: f64,
    pub source: crate::finding::WaitSource,
}

impl DiagnoseReport {
    /// The one data wait a report prints (verdict, key figures, the loop's phases): the job's
    /// step markers' when they sent waits (every step timed, as the verdict takes it), else the
    /// Python stacks' estimate; `None` when neither measured it.
    pub fn data_wait(&self) -> Option<DataWait> {
        use crate::finding::WaitSource;
        match self.steps.as_ref().and_then(|s| s.data_wait_pct) {
            Some(pct) => Some(DataWait {
                pct,
                source: WaitSource::StepProbe,
            }),
            None => self.python.as_ref()?.data_wait_pct.map(|pct| DataWait {
                pct,
                source: WaitSource::PythonStacks,
            }),
        }
    }
}

/// Why a file could not be diagnosed; every variant is bad input (exit code 3).
#[derive(Debug, thiserror::Error)]
pub enum DiagnoseError {
    #[error("cannot open {path}: {reason}")]
    Open { path: PathBuf, reason: String },
    #[error("{path} is empty: nothing to diagnose")]
    Empty { path: PathBuf },
    #[error("{path}: unrecognized format ({}); force one with --input-format, or name a CSV's columns with --columns NAME=utilization.gpu", input::FORMATS)]
    UnknownFormat { path: PathBuf },
    #[error("{path}: {detail}")]
    Bad { path: PathBuf, detail: String },
    /// A GPU log its reader refused or could not read: the reader's error is the cause.
    #[error("{path}: {source}")]
    Log {
        path: PathBuf,
        source: crate::import::LogError,
    },
}

/// A file that cannot be diagnosed is bad input, whatever is wrong with it.
impl crate::exit::HasExit for DiagnoseError {
    fn exit(&self) -> crate::exit::Exit {
        crate::exit::Exit::Input
    }
}

/// Diagnoses a gpufeed recording (what `gpufeed run` calls when the job ends).
pub(crate) fn report_for_recording(path: &Path) -> Result<DiagnoseReport, DiagnoseError> {
    diagnose_file(path, InputFormat::Recording, &input::LogOptions::default())
}

/// The evidence of a gpufeed recording, without the rules and verdict a diagnosis adds (a tune
/// trial needs one figure of it: the Python stacks' data wait).
pub(crate) fn evidence_for_recording(path: &Path) -> Result<Evidence, DiagnoseError> {
    input::read(path, InputFormat::Recording, &input::LogOptions::default()).map(|r| r.evidence)
}

/// Diagnoses any supported file.
pub fn diagnose_file(
    path: &Path,
    format: InputFormat,
    opts: &input::LogOptions,
) -> Result<DiagnoseReport, DiagnoseError> {
    diagnose_file_with(path, format, opts, &mut ())
}

/// As [`diagnose_file`], feeding a recording's lines to `extra` in the same single pass (the
/// HTML report's series, the run summary).
pub(crate) fn diagnose_file_with(
    path: &Path,
    format: InputFormat,
    opts: &input::LogOptions,
    extra: &mut dyn crate::record::reader::Sink,
) -> Result<DiagnoseReport, DiagnoseError> {
    let read = input::read_with(path, format, opts, extra)?;
    Ok(build_report(read))
}

/// One node of a job: the file is diagnosed and only its [`nodes::NodeSummary`] is kept.
pub fn diagnose_node(
    path: &Path,
    format: InputFormat,
    opts: &input::LogOptions,
) -> Result<nodes::NodeSummary, DiagnoseError> {
    let read = input::read(path, format, opts)?;
    let hostname = read.hostname.clone();
    let report = build_report(read);
    Ok(nodes::NodeSummary::new(
        &path.display().to_string(),
        hostname,
        &report,
    ))
}

/// Rules, verdict and notes over what was read.
pub(crate) fn build_report(read: input::ReadOutcome) -> DiagnoseReport {
    let mut e = read.evidence;
    let mut findings = rules::evaluate(&e);
    let mut verdict = verdict::decide(&e, &findings);
    // A GPU holding more than a CUDA context's memory has a job on it, whatever one instant's
    // utilization says.
    let held = e.gpus.iter().any(|g| {
        g.mem_used_max_bytes
            .is_some_and(|b| b > evidence::UNUSED_MEM_BYTES)
    });
    let snapshot = is_one_snapshot(&e, read.total_s);
    let judged = judged_readings(&e);
    if snapshot && (verdict.id != VerdictId::Idle || held) {
        // One instant of each GPU (a pasted nvidia-smi table) is no run: a fix and a speed-up
        // weighed from it were guesses ("up to 2x faster" from one table of a shared server).
        // Its reading is the log's note; the GPUs keep their states at that instant. Every GPU
        // idle at that instant, none holding memory, stays `idle`: that much one table does
        // say (a job holding 14 GiB at 0% was called idle, "check that the job uses the GPU").
        findings.clear();
        verdict = unjudged(
            verdict,
            "A single snapshot of the GPUs, not a run: what it suggests is in the NOTE below; \
             record the run to judge it (`gpufeed run -- <your command>`)."
                .into(),
        );
    } else if !snapshot && judged.is_some_and(|n| too_few(n, e.duration_s)) {
        // A handful of readings is no run either: two polls at 100% after a start-up left out
        // got `compute_bound` at 0.95, one reading among empty rows `idle` at 0.9.
        findings.clear();
        verdict = if verdict.id == VerdictId::Idle && !held {
            Verdict {
                confidence: verdict.confidence.min(0.3),
                ..verdict
            }
        } else {
            let summary = format!(
                "Too few readings to judge: {} in the judged part of the log, over {} (at least 3 \
                 over half a minute, or 5, are needed); log the run for longer, or record it \
                 (`gpufeed run -- <your command>`).",
                judged.unwrap_or(0),
                crate::units::duration(e.duration_s)
            );
            unjudged(verdict, summary)
        };
    }
    for j in &verdict.gpus {
        if let Some(g) = e.gpus.iter_mut().find(|g| g.index == j.index) {
            g.verdict = Some(rules::gpus::gpu_verdict(g, j.state));
        }
    }
    let mut notes = notes(&e, &read.source, &verdict);
    if let Some(line) = phases::describe(&read.phases) {
        notes.insert(0, line);
    }
    notes.splice(0..0, read.log_notes);
    DiagnoseReport {
        schema_version: REPORT_SCHEMA_VERSION,
        source: read.source,
        duration_s: rules::r2(read.total_s.max(e.duration_s)),
        verdict,
        findings,
        gpus: e.gpus,
        host: e.host,
        job: e.job,
        python: e.python,
        steps: e.steps,
        notes,
        phases: read.phases,
    }
}

/// `v` as no verdict (`unknown`, no finding or candidate) for input that cannot support one,
/// `summary` saying why; its per-GPU states stay.
fn unjudged(v: Verdict, summary: String) -> Verdict {
    Verdict {
        id: VerdictId::Unknown,
        confidence: 0.2,
        summary,
        finding: None,
        candidates: Vec::new(),
        ..v
    }
}

/// Too few readings for a verdict: under 3, or under 5 within half a minute (two polls at 100%
/// after a start-up; three one-minute tables at 95% are a run).
fn too_few(readings: u64, judged_s: f64) -> bool {
    readings < 3 || (readings < 5 && judged_s < 30.0)
}

/// The most utilization readings any GPU of a log has in its judged part (`None` for a
/// recording, and for a log without GPUs).
fn judged_readings(e: &Evidence) -> Option<u64> {
    (e.origin == Origin::GpuLog)
        .then(|| e.gpus.iter().map(|g| g.util_samples).max())
        .flatten()
}

/// A log holding one reading of each GPU and no time between them.
fn is_one_snapshot(e: &Evidence, total_s: f64) -> bool {
    e.origin == Origin::GpuLog
        && total_s == 0.0
        && !e.gpus.is_empty()
        && e.gpus.iter().all(|g| g.util_samples <= 1)
}

/// Peak memory share from which memory counts as almost full.
pub const MEMORY_FULL: f64 = 0.8;

/// What the verdict says is holding the GPU back, for the memory line.
fn what_holds(v: &Verdict) -> String {
    match v.id {
        VerdictId::InputBound => "the input pipeline is (see input_bound)".into(),
        VerdictId::HostBound => "host-side work in the training loop is (see host_bound)".into(),
        VerdictId::TransferBound => "host-to-device copies are (see transfer_bound)".into(),
        VerdictId::Throttled => "clock throttling is (see throttled)".into(),
        VerdictId::Idle => "the GPU sat idle".into(),
        VerdictId::LaunchBound => "kernels too small to fill the GPU are (see launch_bound)".into(),
        VerdictId::ComputeBound | VerdictId::Unknown => {
            "utilization is what to follow (see the verdict)".into()
        }
    }
}

/// What the Python stacks add: which source is trusted when they and the GPU disagree, and why
/// stacks are missing.
fn stack_notes(e: &Evidence) -> Vec<String> {
    use crate::sample::pystacks::PyStatus;
    let mut out = Vec::new();
    let Some(p) = &e.python else { return out };
    match p.status {
        PyStatus::Denied => out.push(format!(
            "Python stacks could not be read: {} — start the job under gpufeed (`gpufeed run -- \
             CMD`) or give gpufeed CAP_SYS_PTRACE (`--cap-add SYS_PTRACE` in a container).",
            p.detail.as_deref().unwrap_or("permission denied")
        )),
        PyStatus::UnsupportedVersion => out.push(format!(
            "This Python is a version py-spy cannot read ({}): no training-loop phases.",
            p.detail.as_deref().unwrap_or("unknown")
        )),
        _ => {}
    }
    let Some((wait, source, _)) = rules::stacks::data_wait_from(e) else {
        return out;
    };
    if source == crate::finding::WaitSource::StepProbe {
        out.push(wait_source_note(e, wait, p));
    }
    if let Some(b) = rules::stacks::gpu_overlaps_wait(e) {
        if wait >= rules::stacks::DATA_WAIT_PCT {
            out.push(format!(
                "The training loop waits for data {wait:.0}% of its time, yet the GPU is busy \
                 {:.0}%: the wait overlaps GPU work (the loop runs ahead of the device), so \
                 gpufeed trusts the GPU utilization and does not call this input-bound.",
                b * 100.0
            ));
        }
    } else if wait < rules::stacks::NOT_WAITING_PCT && rules::input::starving_signature(e) {
        out.push(format!(
            "The GPU looks starved, but the Python stacks show the training loop waiting for data \
             only {wait:.0}% of its time: the GPU idles for another reason (host syncs, Python \
             overhead per step, small kernels). gpufeed trusts the stacks on the cause."
        ));
    }
    out
}

/// Which data wait the reports give when the step markers measured one, and, when the stacks'
/// estimate is another figure, why: said once, so that the report's one figure is not read
/// against a second one.
fn wait_source_note(e: &Evidence, wait: f64, p: &evidence::PythonEvidence) -> String {
    use crate::units::{duration, plural};
    let head = format!("Data wait {wait:.0}% is from the job's step markers (every step timed)");
    let Some(stacks) = p.data_wait_pct.filter(|s| (s - wait).abs() >= 1.0) else {
        return format!("{head}; the Python stacks agree.");
    };
    // The stacks sample the training thread for as long as it is recorded; the markers time
    // only the steps. A loop that is a part of the recording (start-up, a notebook cell's other
    // code) dilutes the stacks' share: a loop waiting 99% of its steps read 47% in the stacks.
    let steps = e.steps.as_ref();
    let span = steps.and_then(|s| {
        let rate = s.steps_per_s.filter(|r| *r > 0.0)?;
        Some((s.steps, s.steps as f64 / rate))
    });
    let sampled = p
        .main
        .as_ref()
        .zip(p.rate_hz.filter(|r| *r > 0.0))
        .map(|(m, r)| m.samples as f64 / r);
    let why = match (span, sampled) {
        (Some((n, span)), Some(sampled)) if stacks < wait && span < 0.9 * sampled => format!(
            "they sample the training thread for all {} it was recorded, time outside the {} \
             ({}) included",
            duration(sampled),
            plural(n as usize, "timed step", "timed steps"),
            duration(span)
        ),
        _ => {
            return format!(
                "{head}; the Python stacks' {stacks:.0}% is an estimate from {} of the training \
                 thread, where the markers time every step.",
                plural(
                    p.main.as_ref().map_or(0, |m| m.samples) as usize,
                    "sample",
                    "samples"
                )
            )
        }
    };
    format!("{head}; the Python stacks' {stacks:.0}% is lower because {why}.")
}

/// Caveats worth telling people next to the findings.
pub fn notes(e: &Evidence, source: &InputSource, v: &Verdict) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(c) = e.job.exit_code.filter(|c| *c != 0) {
        // Said first: a job that failed early is read on what ran before it stopped.
        out.push(format!(
            "The job failed (exit code {c}): everything here covers only what ran before it \
             stopped. Fix the error and record it again before acting on the verdict."
        ));
    }
    if let Some((i, f, busy)) = e
        .used_gpus()
        .filter_map(|g| {
            g.mem_used_max_fraction
                .map(|f| (g.index, f, g.busy_fraction))
        })
        .max_by(|a, b| a.1.total_cmp(&b.1))
    {
        let low = busy.is_some_and(|b| b < 0.6);
        if f >= MEMORY_FULL && low {
            // The user's first symptom: memory full, utilization low.
            out.push(format!(
                "GPU {i} memory is {:.0}% full while its utilization is low: \
                 PyTorch's caching allocator keeps freed memory reserved, so a full memory bar \
                 is not the bottleneck; {}.",
                f * 100.0,
                what_holds(v)
            ));
        } else if f >= MEMORY_FULL {
            out.push(format!(
                "GPU {i} memory peaked at {:.0}% of total. That is weak evidence of anything: \
                 PyTorch's caching allocator keeps freed blocks reserved, and TensorFlow/JAX \
                 pre-allocate most of the card by default; utilization, not memory, shows whether \
                 the GPU is busy.",
                f * 100.0
            ));
        }
    }
    if e.measured_gpus().count() == 0 {
        let why = e
            .no_gpu
            .map(|n| format!(" ({})", n.as_words()))
            .unwrap_or_default();
        out.push(if v.id == VerdictId::Unknown {
            format!("No GPU utilization in this input{why}: the verdict cannot judge the GPU.")
        } else {
            format!(
                "No GPU utilization in this input{why}: GPU figures (utilization, memory, PCIe, \
                 clocks) are not measured; the verdict comes from the training loop's own phases."
            )
        });
    }
    out.extend(stack_notes(e));
    if e.origin == Origin::GpuLog {
        out.push(
            "gpufeed reads no host or process data from a log: the kind of input bottleneck \
             (workers, CPU, I/O) cannot be told. Record with `gpufeed run -- <command>` for the \
             full diagnosis."
                .into(),
        );
    } else if e.host.samples == 0 && e.job.samples == 0 {
        out.push("No host or process samples were recorded.".into());
    }
    let jetson = source.format == InputFormat::Log(crate::import::formats::Format::Tegrastats);
    if let Some(n) = sampling_note(e, jetson) {
        out.push(n);
    }
    if source.truncated {
        out.push(
            "The last line was cut (the recorder or logger was killed); it was skipped.".into(),
        );
    }
    if let Some(n) = source.bad_time {
        out.push(format!(
            "{n} lines with a time outside 0 s to 366 days (or not a number) were dropped before \
             anything was summed or charted: the file was edited or damaged."
        ));
    }
    if source.malformed > 0 {
        out.push(match source.malformed {
            1 => "1 unreadable line was skipped.".to_string(),
            n => format!("{n} unreadable lines were skipped."),
        });
    }
    out.extend(
        e.warnings
            .iter()
            .map(|w| match w.strip_prefix(evidence::BOUND_PREFIX) {
                Some(b) => format!("{b}."),
                None => format!("Impossible values: {w}."),
            }),
    );
    if let Some(n) = source.long_strings {
        out.push(format!(
            "{n} lines had a string longer than {} KiB (a command line, a frame name): it was cut.",
            crate::record::reader::MAX_STRING_BYTES >> 10
        ));
    }
    out
}

/// What a log's sampling interval hides, and how to sample finely enough (logs polled every
/// second or slower; a recording keeps every driver sample).
pub(crate) fn sampling_note(e: &Evidence, jetson: bool) -> Option<String> {
    if e.origin != Origin::GpuLog {
        return None;
    }
    let i = e.sample_interval_s()?;
    if i < 0.99 {
        return None;
    }
    let every = verdict::interval_words(i);
    let hides = if i >= 5.0 {
        format!(
            "each reading averages or picks one moment of {every}, so the sub-second busy/starved \
             swings of a starving input pipeline, per-step stalls and anything shorter than \
             about {} do not show: a starving GPU and a steadily half-busy one look alike",
            verdict::interval_words(2.0 * i)
        )
    } else {
        "sub-second busy/starved swings (a starving input pipeline, per-step stalls) alias away or \
         blur into a middle level"
            .to_string()
    };
    // A Jetson board has no nvidia-smi: tegrastats itself samples finer.
    let how = if jetson {
        "Log finely enough with `tegrastats --interval 200 --logfile tegrastats.log`"
    } else {
        "Log finely enough with `nvidia-smi \
         --query-gpu=timestamp,index,utilization.gpu,memory.used,memory.total --format=csv -lms \
         200 -f gpu.csv`, or record with `gpufeed record` (every driver sample, about 6 a second, \
         plus host and processes)"
    };
    Some(format!(
        "Utilization was sampled every {every}: {hides}. Confidence is scaled down to match \
         ({:.2} of full). {how}.",
        rules::sampling_factor(Some(i))
    ))
}

/// The JSON printed by `run --format json`: the summary's fields plus `verdict`, `findings` and
/// `notes` from the diagnosis (absent when the recording could not be diagnosed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    #[serde(flatten)]
    pub summary: crate::record::summary::Summary,
    #[serde(default)]
    pub verdict: Option<Verdict>,
    #[serde(default)]
    pub findings: Vec<Finding>,
    #[serde(default)]
    pub notes: Vec<String>,
    /// The training loop seen through its Python stacks, when they were sampled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<evidence::PythonEvidence>,
    /// The job's step markers (`GPUFEED_STEP_SOCKET`), when it sent any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<evidence::StepEvidence>,
}

impl RunReport {
    pub fn new(
        summary: crate::record::summary::Summary,
        diagnosis: Option<&DiagnoseReport>,
    ) -> Self {
        RunReport {
            summary,
            verdict: diagnosis.map(|d| d.verdict.clone()),
            findings: diagnosis.map(|d| d.findings.clone()).unwrap_or_default(),
            notes: diagnosis.map(|d| d.notes.clone()).unwrap_or_default(),
            python: diagnosis.and_then(|d| d.python.clone()),
            steps: diagnosis.and_then(|d| d.steps.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_evidence_alone_holds_the_data_wait_a_diagnosis_shows() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pystacks");
        for name in ["plain0.ndjson", "hf_trainer.ndjson", "lightning.ndjson"] {
            let p = dir.join(name);
            let wait = evidence_for_recording(&p)
                .unwrap()
                .python
                .map(|p| p.data_wait_pct);
            let report = report_for_recording(&p).unwrap();
            assert_eq!(wait, report.python.map(|p| p.data_wait_pct), "{name}");
            assert!(wait.is_some_and(|w| w.is_some()), "{name}: no data wait");
        }
    }
}
