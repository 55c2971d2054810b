//! Diagnosis: evidence from samples, pure rules, findings and a verdict.
//!
//! `input` reads any supported file into one stream of recording lines; `evidence` turns the
//! stream into statistics; `rules` turn statistics into findings; `verdict` picks the primary
//! bottleneck; `render` presents the [`DiagnoseReport`] as text, JSON or Markdown.

pub mod evidence;
pub mod fast;
pub mod input;
pub mod job;
pub mod render;
pub mod rules;
pub mod stats;
pub mod verdict;

pub use input::InputFormat;
pub use render::{render, ReportFormat};

use crate::finding::Finding;
use evidence::{Evidence, GpuEvidence, HostEvidence, JobEvidence};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use verdict::Verdict;

/// Version of the JSON report; bumped when a field is removed or changes meaning.
pub const REPORT_SCHEMA_VERSION: u32 = 1;

/// Where the report's facts came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Source {
    pub path: String,
    /// `recording`, `smi_csv`, `smi_dmon` or `dcgmi`.
    pub format: String,
    /// Lines (recording) or rows (logs) read.
    pub lines: u64,
    /// Lines that could not be read and were skipped.
    pub malformed: u64,
    /// The last line was cut (a killed recorder or logger).
    pub truncated: bool,
    /// A recording without its `end` line (the recorder did not finish).
    pub unfinished: bool,
}

/// A diagnosis: the JSON contract of `gpufeed diagnose --format json` (see docs/diagnose.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiagnoseReport {
    pub schema_version: u32,
    pub source: Source,
    pub duration_s: f64,
    pub verdict: Verdict,
    /// Ranked: most severe and largest gain first.
    pub findings: Vec<Finding>,
    pub gpus: Vec<GpuEvidence>,
    pub host: HostEvidence,
    pub job: JobEvidence,
    /// Caveats for people (weak evidence, missing data).
    pub notes: Vec<String>,
}

/// Why a file could not be diagnosed; every variant is bad input (exit code 3).
#[derive(Debug, thiserror::Error)]
pub enum DiagnoseError {
    #[error("cannot open {path}: {reason}")]
    Open { path: PathBuf, reason: String },
    #[error("{path} is empty: nothing to diagnose")]
    Empty { path: PathBuf },
    #[error("{path}: unrecognized format (expected a gpufeed recording, an nvidia-smi --format=csv log, or nvidia-smi/dcgmi dmon output); force one with --input-format")]
    UnknownFormat { path: PathBuf },
    #[error("{path}: {detail}")]
    Bad { path: PathBuf, detail: String },
}

/// Diagnoses a gpufeed recording (what `gpufeed run` calls when the job ends).
pub fn report_for_recording(path: &Path) -> Result<DiagnoseReport, DiagnoseError> {
    diagnose_file(path, InputFormat::Recording, &input::LogOptions::default())
}

/// Diagnoses any supported file.
pub fn diagnose_file(
    path: &Path,
    format: InputFormat,
    opts: &input::LogOptions,
) -> Result<DiagnoseReport, DiagnoseError> {
    let read = input::read(path, format, opts)?;
    Ok(build_report(read))
}

/// One node of a job: the file is diagnosed and only its [`job::NodeSummary`] is kept.
pub fn diagnose_node(
    path: &Path,
    format: InputFormat,
    opts: &input::LogOptions,
) -> Result<job::NodeSummary, DiagnoseError> {
    let read = input::read(path, format, opts)?;
    let hostname = read.hostname.clone();
    let report = build_report(read);
    Ok(job::NodeSummary::new(
        &path.display().to_string(),
        hostname,
        &report,
    ))
}

/// Rules, verdict and notes over what was read.
pub fn build_report(read: input::ReadOutcome) -> DiagnoseReport {
    let e = read.evidence;
    let findings = rules::evaluate(&e);
    let verdict = verdict::decide(&e, &findings);
    let notes = notes(&e, &read.source);
    DiagnoseReport {
        schema_version: REPORT_SCHEMA_VERSION,
        source: read.source,
        duration_s: rules::r2(e.duration_s),
        verdict,
        findings,
        gpus: e.gpus,
        host: e.host,
        job: e.job,
        notes,
    }
}

/// Caveats worth telling people next to the findings.
pub fn notes(e: &Evidence, source: &Source) -> Vec<String> {
    let mut out = Vec::new();
    if let Some((i, f)) = e
        .gpus
        .iter()
        .filter_map(|g| g.mem_used_max_fraction.map(|f| (g.index, f)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
    {
        if f >= 0.8 {
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
        out.push("No GPU utilization in this input: the verdict cannot judge the GPU.".into());
    }
    if source.format != "recording" {
        out.push(
            "This log has no host or process data: the kind of input bottleneck (workers, CPU, \
             I/O) cannot be told. Record with `gpufeed run -- <command>` for the full diagnosis."
                .into(),
        );
    } else if e.host.samples == 0 && e.job.samples == 0 {
        out.push("No host or process samples were recorded.".into());
    }
    if let Some(g) = e.measured_gpus().find(|g| {
        g.util_samples > 0
            && g.periodicity.is_none()
            && e.duration_s > 0.0
            && (g.util_samples as f64 / e.duration_s) < 1.5
            && g.bimodal
    }) {
        out.push(format!(
            "GPU {} was sampled about once a second or less: utilization swings faster than that \
             alias away. gpufeed's recorder keeps every driver sample (about 6 per second).",
            g.index
        ));
    }
    if source.truncated {
        out.push(
            "The last line was cut (the recorder or logger was killed); it was skipped.".into(),
        );
    }
    if source.malformed > 0 {
        out.push(format!(
            "{} unreadable lines were skipped.",
            source.malformed
        ));
    }
    out
}
