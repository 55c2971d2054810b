//! Reading any supported input into evidence: format detection, recordings through the
//! recording reader ([`crate::record::reader`]), logs through their importers.

use super::evidence::{EvidenceBuilder, Origin};
use super::phases::{self, Phase};
use super::{DiagnoseError, Evidence, InputSource};
use crate::import::dcgmi::{self, Flavour};
use crate::import::smi_csv::{self, CsvOptions};
use crate::import::stream::{Compression, Encoding, Input, Passes, HEAD_BYTES};
use crate::import::{LogError, LogInfo};
use crate::record::format::ReadError;
use crate::record::reader::{self, Sink};
use crate::sample::event::{Header, Line};
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::path::Path;

/// Input formats (`--input-format`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    clap::ValueEnum,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[strum(serialize_all = "snake_case")]
#[serde(rename_all = "snake_case")]
pub enum InputFormat {
    /// Detect from the first lines
    #[default]
    Auto,
    /// gpufeed NDJSON recording
    Recording,
    /// nvidia-smi --query-gpu=... --format=csv log
    SmiCsv,
    /// nvidia-smi dmon output
    SmiDmon,
    /// dcgmi dmon output
    Dcgmi,
    /// Another tool's CSV: DCGM (EntityId,GRACT,…), W&B or MLflow export, Grafana, rocm-smi, amd-smi
    Csv,
    /// W&B system metrics (wandb-events.jsonl)
    Wandb,
    /// Prometheus text scrapes (dcgm-exporter, nvidia_gpu_exporter)
    Prometheus,
    /// Prometheus HTTP API query result (/api/v1/query_range JSON)
    PrometheusJson,
    /// MLflow run folder (metrics/system/gpu_0_utilization_percentage)
    Mlflow,
    /// rocm-smi's concise table (Device … VRAM% GPU%), as job logs hold it
    RocmSmi,
    /// The plain nvidia-smi table (or nvitop -1), once or looped (watch, date banners)
    SmiTable,
    /// gpustat's text output, once or looped
    Gpustat,
    /// gpustat --json output, once or looped
    GpustatJson,
    /// nvidia-smi -q text reports, once or looped
    SmiQ,
    /// nvidia-smi -q -x XML reports, once or looped
    SmiQXml,
    /// nvidia-smi --query-compute-apps=... --format=csv (memory per process)
    ComputeApps,
}

impl InputFormat {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Options for logs that do not describe themselves.
#[derive(Debug, Clone, Default)]
pub struct LogOptions {
    /// nvidia-smi CSV field names, for logs written with `noheader`.
    pub columns: Option<Vec<String>>,
    /// Seconds between polls in logs without timestamps.
    pub interval_s: Option<f64>,
}

/// What reading a file produced.
#[derive(Debug)]
pub struct ReadOutcome {
    pub source: InputSource,
    pub evidence: Evidence,
    /// Phases of a log (empty when it was judged as one block, and for recordings).
    pub phases: Vec<Phase>,
    /// First to last sample of the whole file (the evidence covers the judged phases only).
    pub total_s: f64,
    /// The recording header's hostname (logs have none).
    pub hostname: Option<String>,
    /// How a log was read (runs judged, how many GPUs and how that was found), first notes.
    pub log_notes: Vec<String>,
}

/// Guesses the format from the first bytes of a file.
pub(crate) fn detect(head: &str) -> Option<InputFormat> {
    // A UTF-8 byte-order mark says nothing of the format (a recording starting with one was
    // taken for an nvidia-smi CSV).
    let head = head.strip_prefix('\u{feff}').unwrap_or(head);
    use crate::import::{smi_q, smi_table};
    // gpustat's lines hold commas and units, the reports keys that CSVs or W&B's JSON hold:
    // told apart before them.
    if smi_table::holds_gpustat(head) {
        return Some(InputFormat::Gpustat);
    }
    if smi_table::holds_gpustat_json(head) {
        return Some(InputFormat::GpustatJson);
    }
    if smi_q::holds_xml(head) {
        return Some(InputFormat::SmiQXml);
    }
    if smi_q::holds_text(head) {
        return Some(InputFormat::SmiQ);
    }
    if smi_table::holds_compute_apps(head) {
        return Some(InputFormat::ComputeApps);
    }
    // A table before another log says nothing of the log's format; a table alone is the log.
    detect_log(head).or_else(|| smi_table::holds_table(head).then_some(InputFormat::SmiTable))
}

/// [`detect`] for the logs that are not pasted views.
fn detect_log(head: &str) -> Option<InputFormat> {
    // A plain `nvidia-smi` table dumped before a log (job scripts often do) says nothing of the
    // log's format: its box lines are passed over.
    let lines: Vec<&str> = head
        .lines()
        .map(|l| l.trim_matches(|c: char| c.is_whitespace() || c == '\0'))
        .filter(|l| !l.is_empty() && !is_smi_table_line(l))
        .take(20)
        .collect();
    let first = lines.first()?;
    if crate::import::rocm_table::holds_table(head) {
        return Some(InputFormat::RocmSmi);
    }
    if first.starts_with('{') || first.starts_with('[') {
        if head.contains("\"resultType\"") || head.contains("\"__name__\"") {
            return Some(InputFormat::PrometheusJson);
        }
        if first.contains("\"system.") || first.contains("\"_wandb\"") {
            return Some(InputFormat::Wandb);
        }
        return first.starts_with('{').then_some(InputFormat::Recording);
    }
    let prom_sample = |l: &str| {
        let name_end = l.find('{').unwrap_or(0);
        name_end > 0
            && l[..name_end]
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
            && l.contains('}')
    };
    if lines
        .iter()
        .any(|l| l.starts_with("# TYPE ") || l.starts_with("# HELP "))
        || lines.iter().filter(|l| prom_sample(l)).count() * 2 > lines.len()
    {
        return Some(InputFormat::Prometheus);
    }
    for l in &lines {
        if let Some(rest) = l.strip_prefix('#') {
            let toks: Vec<String> = rest
                .split_whitespace()
                .map(|t| t.to_ascii_lowercase())
                .collect();
            if toks.first().is_some_and(|t| t == "entity") {
                return Some(InputFormat::Dcgmi);
            }
            if toks.iter().any(|t| t == "gpu")
                && toks
                    .iter()
                    .any(|t| ["sm", "pwr", "mem", "fb", "rxpci", "gtemp"].contains(&t.as_str()))
            {
                return Some(InputFormat::SmiDmon);
            }
        }
        if l.starts_with("GPU ")
            && l.split_whitespace()
                .nth(1)
                .is_some_and(|t| t.parse::<u32>().is_ok())
        {
            return Some(InputFormat::Dcgmi);
        }
    }
    let csv_like = lines.iter().filter(|l| l.contains(',')).count();
    if lines
        .iter()
        .any(|l| crate::import::csv_table::is_other_tools_header(l))
    {
        return Some(InputFormat::Csv);
    }
    if csv_like == 0 && one_field_query(&lines) {
        return Some(InputFormat::SmiCsv);
    }
    if csv_like * 2 >= lines.len() {
        let known = [
            "utilization.gpu",
            "memory.used",
            "memory.total",
            "timestamp",
            "pci.bus_id",
            "index",
        ];
        let has_header = lines.iter().any(|l| {
            let lower = l.to_ascii_lowercase();
            known.iter().any(|k| lower.contains(k)) || smi_csv::looks_like_header(l)
        });
        let has_units = lines.iter().any(|l| l.contains(" %") || l.contains("MiB"));
        // `noheader,nounits`: rows of numbers; the CSV reader asks for --columns.
        let numeric = lines.iter().all(|l| {
            l.split(',').all(|v| {
                let v = v.trim();
                v.parse::<f64>().is_ok() || v.starts_with('[')
            })
        });
        if has_header || has_units || (numeric && lines.iter().any(|l| l.contains(','))) {
            return Some(InputFormat::SmiCsv);
        }
    }
    None
}

/// A line of `nvidia-smi`'s own table (`+---…`, `| GPU  Name …|`, `|===…`).
pub(crate) fn is_smi_table_line(l: &str) -> bool {
    l.starts_with('|') || l.starts_with("+-") || l.starts_with("+=")
}

/// A query of one field (`--query-gpu=utilization.gpu --format=csv`, often in a loop that writes
/// the header before every reading): no commas, only the field's header and values with its unit.
fn one_field_query(lines: &[&str]) -> bool {
    // `utilization.gpu [%]`: a field name and at most its unit.
    let header = |l: &str| {
        let l = l.to_ascii_lowercase();
        let mut t = l.split_whitespace();
        t.next().is_some_and(|f| {
            ["utilization.", "memory.", "power.draw", "temperature.gpu"]
                .iter()
                .any(|k| f.starts_with(k))
        }) && t
            .next()
            .is_none_or(|u| u.starts_with('[') && u.ends_with(']'))
            && t.next().is_none()
    };
    let value = |l: &str| {
        let mut t = l.split_whitespace();
        t.next().is_some_and(|v| v.parse::<f64>().is_ok())
            && t.next()
                .is_some_and(|u| ["%", "MiB", "W", "C"].contains(&u))
            && t.next().is_none()
    };
    lines.iter().any(|l| header(l))
        && lines.iter().any(|l| value(l))
        && lines.iter().all(|l| header(l) || value(l))
}

fn bad(path: &Path, e: LogError) -> DiagnoseError {
    match e {
        LogError::Empty => DiagnoseError::Empty {
            path: path.to_path_buf(),
        },
        source => DiagnoseError::Log {
            path: path.to_path_buf(),
            source,
        },
    }
}

/// Files that another gpufeed command reads: a PyTorch profiler trace (`analyze`), a sweep
/// report (`compare`). The message says which command to use.
pub(crate) fn other_command(head: &[u8], path: &Path) -> Option<String> {
    let shown = path.display();
    if head.starts_with(&[0x1f, 0x8b]) {
        return Some(format!(
            "a gzip file: a PyTorch profiler trace (.json.gz)? use gpufeed analyze {shown}"
        ));
    }
    let text = String::from_utf8_lossy(head);
    let t = text.trim_start();
    if t.starts_with('{') || t.starts_with('[') {
        if [
            "\"traceEvents\"",
            "\"schemaVersion\"",
            "\"deviceProperties\"",
        ]
        .iter()
        .any(|k| t.contains(k))
        {
            return Some(format!(
                "a PyTorch profiler (Kineto) trace, not a recording or GPU log: use gpufeed analyze {shown}"
            ));
        }
        if t.contains("\"knobs\"") && t.contains("\"schema_version\"") && !t.contains("\"type\"") {
            return Some(format!(
                "a sweep report (sweep.json): its trials' recordings are in the same folder (gpufeed diagnose trial-NN-*.ndjson); to compare two sweeps, use gpufeed compare BEFORE.json {shown}"
            ));
        }
    }
    None
}

/// What diagnose reads, for messages about a file it cannot.
const FORMATS: &str = "gpufeed diagnose reads gpufeed recordings, nvidia-smi --query-gpu --format=csv logs, nvidia-smi's table, -q and -q -x reports (once or looped), gpustat (text, --json) and nvitop output, nvidia-smi --query-compute-apps CSVs, nvidia-smi dmon and dcgmi dmon output, DCGM, Grafana, W&B, MLflow, rocm-smi and amd-smi CSVs, wandb-events.jsonl, MLflow run folders and Prometheus scrapes or query results (PyTorch profiler traces: gpufeed analyze)";

/// Reads `path` in `format` (detecting it for `Auto`) into evidence.
pub fn read(
    path: &Path,
    format: InputFormat,
    opts: &LogOptions,
) -> Result<ReadOutcome, DiagnoseError> {
    read_with(path, format, opts, &mut ())
}

/// As [`read`], feeding a recording's lines to `extra` as well, in the same pass (the HTML
/// report's series, the run summary). `extra` sees nothing when the input is a log.
pub(crate) fn read_with(
    path: &Path,
    format: InputFormat,
    opts: &LogOptions,
    extra: &mut dyn Sink,
) -> Result<ReadOutcome, DiagnoseError> {
    if path.is_dir() {
        if let Some(dir) = crate::import::mlflow::system_dir(path) {
            let source = InputSource {
                path: path.display().to_string(),
                format: InputFormat::Mlflow,
                lines: 0,
                malformed: 0,
                truncated: false,
                unfinished: false,
                bad_time: None,
                long_strings: None,
            };
            return read_log_evidence(&dir, InputFormat::Mlflow, opts, source, None);
        }
    }
    // The first bytes decide, whatever the format: a trace or a sweep report goes to another
    // command, and binary data or blank space is no log, even with --columns or --input-format.
    // The input is opened once and decoded (gzip, zstd, a byte-order mark, UTF-16) before
    // anything looks at it: a pipe or FIFO cannot be opened twice.
    let input = Input::open(path).map_err(|e| DiagnoseError::Open {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    check_head(path, &input.head)?;
    let format = match format {
        InputFormat::Auto
            if opts
                .columns
                .as_ref()
                .is_some_and(|c| c.iter().all(|n| !n.contains('='))) =>
        {
            InputFormat::SmiCsv
        }
        InputFormat::Auto => detect(&String::from_utf8_lossy(&input.head)).ok_or_else(|| {
            DiagnoseError::UnknownFormat {
                path: path.to_path_buf(),
            }
        })?,
        f => f,
    };
    let source = InputSource {
        path: path.display().to_string(),
        format,
        lines: 0,
        malformed: 0,
        truncated: false,
        unfinished: false,
        bad_time: None,
        long_strings: None,
    };
    let open_err = |e: std::io::Error| DiagnoseError::Open {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    if matches!(format, InputFormat::Recording | InputFormat::Auto) {
        // The recording reader decodes zstd and skips a byte-order mark itself (and tells a
        // recording cut mid-frame from a broken one): it gets the raw bytes unless they need
        // more than that.
        let file = if input.compression == Compression::Gzip
            || !matches!(input.encoding, Encoding::Utf8 | Encoding::Utf8Bom)
        {
            input.text().map_err(open_err)?
        } else {
            input.raw()
        };
        return read_recording(path, file, source, extra);
    }
    let decoded = input.how_decoded();
    let mut passes = input.into_passes().map_err(open_err)?;
    let mut read = read_log_evidence(path, format, opts, source, Some(&mut passes))?;
    read.log_notes.extend(decoded);
    Ok(read)
}

/// Refuses a text input's first bytes when they are blank, another command's input, or binary.
fn check_head(path: &Path, head: &[u8]) -> Result<(), DiagnoseError> {
    if head.iter().all(|b| b.is_ascii_whitespace()) {
        if head.len() < HEAD_BYTES {
            return Err(DiagnoseError::Empty {
                path: path.to_path_buf(),
            });
        }
        return Err(DiagnoseError::Bad {
            path: path.to_path_buf(),
            detail: format!(
                "its first {} KiB are blank (spaces, newlines): not a format gpufeed reads; {FORMATS}",
                HEAD_BYTES >> 10
            ),
        });
    }
    if head.starts_with(b":W&B") || path.extension().is_some_and(|e| e == "wandb") {
        return Err(DiagnoseError::Bad {
            path: path.to_path_buf(),
            detail: crate::import::wandb::binary_run_file_message(&path.display().to_string()),
        });
    }
    if let Some(detail) = other_command(head, path) {
        return Err(DiagnoseError::Bad {
            path: path.to_path_buf(),
            detail,
        });
    }
    if crate::import::looks_binary(head) {
        return Err(DiagnoseError::Bad {
            path: path.to_path_buf(),
            detail: format!("binary data, not a format gpufeed reads; {FORMATS}"),
        });
    }
    Ok(())
}

/// A recording's evidence in one pass, `extra` fed the same lines.
fn read_recording(
    path: &Path,
    file: impl Read + Send,
    mut source: InputSource,
    extra: &mut dyn Sink,
) -> Result<ReadOutcome, DiagnoseError> {
    let mut b = EvidenceBuilder::new();
    let (h, st) = reader::read_from(path, file, (&mut b, extra)).map_err(|e| match e {
        ReadError::Empty { .. } => DiagnoseError::Empty {
            path: path.to_path_buf(),
        },
        ReadError::Open { source, .. } => DiagnoseError::Open {
            path: path.to_path_buf(),
            reason: source.to_string(),
        },
        other => DiagnoseError::Bad {
            path: path.to_path_buf(),
            detail: other
                .to_string()
                .replace(&format!("{} ", path.display()), ""),
        },
    })?;
    source.lines = st.lines;
    source.malformed = st.malformed;
    source.truncated = st.truncated;
    source.unfinished = st.unfinished;
    source.bad_time = Some(st.bad_time).filter(|&n| n > 0);
    source.long_strings = Some(st.long_strings).filter(|&n| n > 0);
    let evidence = b.finish(&h);
    Ok(ReadOutcome {
        source,
        hostname: h.host.hostname.clone(),
        total_s: evidence.duration_s,
        evidence,
        phases: Vec::new(),
        log_notes: Vec::new(),
    })
}

/// A log's evidence: a first pass finds the phases from the utilization alone, a second feeds
/// the evidence with the active phases only, on a timeline with the other stretches cut out.
fn read_log_evidence(
    path: &Path,
    format: InputFormat,
    opts: &LogOptions,
    mut source: InputSource,
    mut passes: Option<&mut Passes>,
) -> Result<ReadOutcome, DiagnoseError> {
    let mut pooler = phases::Pooler::default();
    let mut t_range: Option<(f64, f64)> = None;
    let mut fraction = FractionCheck::default();
    read_log(path, format, opts, passes.as_deref_mut(), |l| {
        if let Line::Gpu(g) = l {
            t_range = Some(t_range.map_or((g.t_s, g.t_s), |(a, z)| (a.min(g.t_s), z.max(g.t_s))));
            if let Some(u) = g.util_pct {
                fraction.add(u);
                pooler.push_with_memory(g.t_s, u, g.mem_used_bytes);
            }
        }
    })?;
    let total_s = t_range.map_or(0.0, |(a, z)| z - a);
    let (mut series, released) = pooler.finish_with_released();
    let scale = fraction.scale();
    for p in &mut series {
        p.1 *= scale;
    }
    let phases = phases::segment(&series, &released);
    let mut b = EvidenceBuilder::new();
    let (header, mut info, prof) = read_log(path, format, opts, passes, |l| match l {
        Line::Gpu(g) => {
            let t = if phases.is_empty() {
                Some(g.t_s)
            } else {
                phases::judged_time(&phases, g.t_s)
            };
            if let Some(t) = t {
                let mut g = g.clone();
                g.t_s = t;
                g.util_pct = g.util_pct.map(|u| u * scale);
                b.push_gpu(&g);
            }
        }
        other => b.push(other),
    })?;
    info.notes.extend(fraction.note());
    for (i, p) in prof {
        b.set_profiling(i, p);
    }
    source.lines = info.rows;
    source.malformed = info.malformed;
    source.truncated = info.truncated;
    // Mostly unreadable is bad input, not a verdict with a note (random bytes read as a log
    // with --columns gave hundreds of thousands of skipped lines and a verdict on a few rows).
    if is_mostly_unreadable(source.lines, source.malformed) {
        return Err(DiagnoseError::Bad {
            path: path.to_path_buf(),
            detail: format!(
                "mostly unreadable: {} of {} lines could not be read as {}; check the file and --input-format",
                source.malformed,
                source.lines + source.malformed,
                source.format.as_str().replace('_', " ")
            ),
        });
    }
    let mut evidence = b.finish(&header);
    evidence.origin = Origin::GpuLog;
    if info.interval_unknown {
        // Readings were spaced one "second" apart by count only: no sampling interval to judge.
        for g in &mut evidence.gpus {
            g.util_sample_interval_s = None;
        }
    }
    Ok(ReadOutcome {
        source,
        hostname: header.host.hostname.clone(),
        evidence,
        phases,
        total_s,
        log_notes: info.notes,
    })
}

/// Reads a log once, handing each line to `visit`.
#[allow(clippy::type_complexity)]
fn read_log(
    path: &Path,
    format: InputFormat,
    opts: &LogOptions,
    passes: Option<&mut Passes>,
    visit: impl FnMut(&Line),
) -> Result<(Header, LogInfo, Vec<(u32, dcgmi::ProfilingMeans)>), DiagnoseError> {
    use crate::import::{csv_table, mlflow, prom, rocm_table, smi_q, smi_table, wandb};
    let collect = |r: Result<_, LogError>| {
        r.map(
            |(h, i, p): (Header, LogInfo, std::collections::BTreeMap<u32, _>)| {
                (h, i, p.into_iter().collect())
            },
        )
        .map_err(|e| bad(path, e))
    };
    let Some(passes) = passes.filter(|_| format != InputFormat::Mlflow) else {
        return collect(mlflow::read_run(path, opts.interval_s, visit));
    };
    let file = passes.pass().map_err(|e| DiagnoseError::Open {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    match format {
        InputFormat::Csv => {
            let cols = opts.columns.clone().unwrap_or_default();
            collect(csv_table::read_csv(file, &cols, opts.interval_s, visit))
        }
        InputFormat::Wandb => collect(wandb::read_events(file, opts.interval_s, visit)),
        InputFormat::RocmSmi => collect(rocm_table::read(file, opts.interval_s, visit)),
        InputFormat::SmiTable => collect(smi_table::read(file, opts.interval_s, visit)),
        InputFormat::Gpustat => collect(smi_table::read_gpustat(file, opts.interval_s, visit)),
        InputFormat::GpustatJson => {
            collect(smi_table::read_gpustat_json(file, opts.interval_s, visit))
        }
        InputFormat::SmiQ => collect(smi_q::read_text(file, opts.interval_s, visit)),
        InputFormat::SmiQXml => collect(smi_q::read_xml(file, opts.interval_s, visit)),
        InputFormat::ComputeApps => {
            collect(smi_table::read_compute_apps(file, opts.interval_s, visit))
        }
        InputFormat::Prometheus => collect(prom::read_text(file, opts.interval_s, visit)),
        InputFormat::PrometheusJson => collect(prom::read_json(file, opts.interval_s, visit)),
        InputFormat::SmiCsv => {
            let o = CsvOptions {
                columns: opts.columns.clone(),
                interval_s: opts.interval_s,
            };
            let (h, info) = smi_csv::read_smi_csv(file, &o, visit).map_err(|e| bad(path, e))?;
            Ok((h, info, Vec::new()))
        }
        _ => {
            let flavour = if format == InputFormat::Dcgmi {
                Flavour::Dcgmi
            } else {
                Flavour::SmiDmon
            };
            let (h, info, prof) = dcgmi::read_dmon(file, flavour, opts.interval_s, visit)
                .map_err(|e| bad(path, e))?;
            Ok((h, info, prof.into_iter().collect()))
        }
    }
}

/// Utilization logged as a 0–1 fraction under a percent's name (a script writing
/// `torch.cuda.utilization() / 100`, an export of a ratio): every value at most 1, some of them
/// fractional, the highest above 0.5. Read as percent, such a log is an idle GPU.
#[derive(Debug, Default)]
struct FractionCheck {
    n: u64,
    max: f64,
    fractional: u64,
}

impl FractionCheck {
    fn add(&mut self, u: f64) {
        self.n += 1;
        self.max = self.max.max(u);
        if u.fract() != 0.0 {
            self.fractional += 1;
        }
    }

    fn is_fraction(&self) -> bool {
        self.n >= 10 && self.max <= 1.0 && self.max > 0.5 && self.fractional * 10 >= self.n
    }

    /// What to multiply utilization by.
    fn scale(&self) -> f64 {
        if self.is_fraction() {
            100.0
        } else {
            1.0
        }
    }

    fn note(&self) -> Option<String> {
        self.is_fraction().then(|| {
            format!(
                "Utilization is a 0-1 fraction here, not a percent (every one of its {} values \
                 is at most 1, the highest {:.2}): read as percent ×100.",
                self.n, self.max
            )
        })
    }
}

/// More lines unreadable than read (and at least 10): the input is not what it claims to be.
pub(crate) fn is_mostly_unreadable(read: u64, malformed: u64) -> bool {
    malformed >= 10 && malformed > read
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_commands_are_named() {
        let p = Path::new("t.json");
        let m = other_command(br#"{"schemaVersion": 1, "deviceProperties": []}"#, p).unwrap();
        assert!(m.contains("use gpufeed analyze t.json"), "{m}");
        assert!(other_command(&[0x1f, 0x8b, 8, 0], p)
            .unwrap()
            .contains("gpufeed analyze"));
        let m = other_command(
            b"{\n  \"schema_version\": 1,\n  \"command\": [],\n  \"knobs\": []",
            p,
        )
        .unwrap();
        assert!(m.contains("gpufeed compare"), "{m}");
        assert!(other_command(br#"{"type":"header","schema_version":1}"#, p).is_none());
    }

    #[test]
    fn detection() {
        assert_eq!(
            detect("{\"type\":\"header\"}\n"),
            Some(InputFormat::Recording)
        );
        assert_eq!(
            detect("timestamp, index, utilization.gpu [%]\n2026/12/02 12:00:00.000, 0, 5 %\n"),
            Some(InputFormat::SmiCsv)
        );
        assert_eq!(detect("0, 87 %, 1024 MiB\n"), Some(InputFormat::SmiCsv));
        assert_eq!(
            detect("# gpu    pwr  gtemp     sm\n# Idx      W      C      %\n    0  50 40 3\n"),
            Some(InputFormat::SmiDmon)
        );
        assert_eq!(
            detect("#Entity  GPUTL\nID\nGPU 0  5\n"),
            Some(InputFormat::Dcgmi)
        );
        assert_eq!(detect("hello world\n"), None);
        assert_eq!(detect("a,b\nx,y\n"), None);
        assert_eq!(detect("97, 40211, 81920\n"), Some(InputFormat::SmiCsv));
        // One field, its header written before every reading by a loop.
        assert_eq!(
            detect("utilization.gpu [%]\n85 %\nutilization.gpu [%]\n100 %\n"),
            Some(InputFormat::SmiCsv)
        );
        assert_eq!(detect("utilization.gpu is high\n85 %\n"), None);
        // nvidia-smi's table before the log (an LSF job script printing both to one file).
        let table = "+---+\n| NVIDIA-SMI 495.44  Driver Version: 495.44 |\n|---+\n".repeat(7);
        assert_eq!(
            detect(&format!(
                "Thu Dec  9 11:19:15 2021\n{table}index, name, utilization.gpu [%]\n0, V100, 0 %\n"
            )),
            Some(InputFormat::SmiCsv)
        );
        assert_eq!(
            detect("time,gpu_util,mem_used_mib\n2026-12-02T12:00:00Z,50,1024\n"),
            Some(InputFormat::SmiCsv),
            "a logging script's own header"
        );
        assert_eq!(detect(""), None);
        assert_eq!(
            detect("utilization.gpu [%]\n95 %\nutilization.gpu [%]\n97 %\n"),
            Some(InputFormat::SmiCsv)
        );
        assert_eq!(
            detect("EntityId,GRACT,FBUSD,TimeStamp\n0,0.5,9,1657283672\n"),
            Some(InputFormat::Csv)
        );
        assert_eq!(
            detect("{\"system.gpu.0.gpu\": 4.07, \"_timestamp\": 1582070941}\n"),
            Some(InputFormat::Wandb)
        );
        assert_eq!(
            detect("# TYPE DCGM_FI_DEV_GPU_UTIL gauge\nDCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 5\n"),
            Some(InputFormat::Prometheus)
        );
        assert_eq!(
            detect("{\"status\":\"success\",\"data\":{\"resultType\":\"matrix\"}}"),
            Some(InputFormat::PrometheusJson)
        );
    }

    #[test]
    fn what_people_paste_is_detected() {
        let table = "Wed May  6 15:30:55 2020\n\
            +------+\n\
            | NVIDIA-SMI 418.87.01    Driver Version: 418.87.01    CUDA Version: 10.1     |\n\
            |   0  GeForce RTX 208...  On   | 00000000:01:00.0 Off |                  N/A |\n\
            |  0%   80C    P2    74W / 250W |   6762MiB / 10989MiB |      0%      Default |\n";
        assert_eq!(detect(table), Some(InputFormat::SmiTable));
        // The table before a CSV log is not the log.
        assert_eq!(
            detect(&format!("{table}index, utilization.gpu [%]\n0, 5 %\n")),
            Some(InputFormat::SmiCsv)
        );
        assert_eq!(
            detect(&table.replace('|', "│")),
            Some(InputFormat::SmiTable),
            "nvitop"
        );
        assert_eq!(
            detect("node1  Wed Sep  7 23:57:26 2025  580.82.07\n[0] NVIDIA H200 | 60°C, 100 % | 80161 / 143771 MB | root(80154M)\n"),
            Some(InputFormat::Gpustat)
        );
        assert_eq!(
            detect("{\"hostname\": \"n\", \"query_time\": \"2024-01-10T12:00:00\", \"gpus\": []}"),
            Some(InputFormat::GpustatJson)
        );
        assert_eq!(
            detect(
                "\n==============NVSMI LOG==============\n\nTimestamp : Wed Aug 30 12:18:12 2023\n"
            ),
            Some(InputFormat::SmiQ)
        );
        assert_eq!(
            detect("<?xml version=\"1.0\" ?>\n<nvidia_smi_log>\n<timestamp>x</timestamp>\n"),
            Some(InputFormat::SmiQXml)
        );
        assert_eq!(
            detect("pid, process_name, used_gpu_memory [MiB]\n4242, python, 3000 MiB\n"),
            Some(InputFormat::ComputeApps)
        );
    }
}
