//! Reading any supported input into evidence: format detection, recordings through the
//! recording reader ([`crate::record::reader`]), logs through their importers.

use super::evidence::{EvidenceBuilder, Origin};
use super::phases::{self, Phase};
use super::{DiagnoseError, Evidence, InputSource};
use crate::import::dcgmi::ProfilingMeans;
use crate::import::formats::{self, Format};
use crate::import::reading::{LogHeader, Reading};
use crate::import::stream::{Compression, Encoding, Input, Passes, HEAD_BYTES};
use crate::import::tape::{Chunk, Decoder, Encoder, Tape};
use crate::import::{LogError, LogInfo};
use crate::record::format::ReadError;
use crate::record::reader::{self, Sink};
use crate::sample::event::Header;
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::path::Path;
use strum::VariantArray;

/// Input formats (`--input-format`): detection, gpufeed's own recording, or one of the
/// telemetry engine's formats ([`Format`], named and described in its one table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InputFormat {
    /// Detect from the first lines
    #[default]
    Auto,
    /// gpufeed NDJSON recording
    Recording,
    Log(Format),
}

/// Every input format, in `--help`'s order.
const ALL_FORMATS: [InputFormat; 2 + Format::VARIANTS.len()] = {
    let mut all = [InputFormat::Auto; 2 + Format::VARIANTS.len()];
    all[1] = InputFormat::Recording;
    let mut i = 0;
    while i < Format::VARIANTS.len() {
        all[2 + i] = InputFormat::Log(Format::VARIANTS[i]);
        i += 1;
    }
    all
};

impl InputFormat {
    /// The name `--input-format` takes and a JSON report's `source.format` holds.
    pub fn as_str(self) -> &'static str {
        match self {
            InputFormat::Auto => "auto",
            InputFormat::Recording => "recording",
            InputFormat::Log(f) => f.as_str(),
        }
    }

    fn about(self) -> &'static str {
        match self {
            InputFormat::Auto => "Detect from the first lines",
            InputFormat::Recording => "gpufeed NDJSON recording",
            InputFormat::Log(f) => f.about(),
        }
    }
}

impl VariantArray for InputFormat {
    const VARIANTS: &'static [Self] = &ALL_FORMATS;
}

impl From<InputFormat> for &'static str {
    fn from(f: InputFormat) -> Self {
        f.as_str()
    }
}

/// `--input-format`'s spelling of each format, in [`ALL_FORMATS`]' order: the name with dashes
/// (`smi-csv`), as clap spells a value (JSON keeps the underscores).
static CLI_NAMES: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
    ALL_FORMATS
        .iter()
        .map(|f| f.as_str().replace('_', "-"))
        .collect()
});

impl clap::ValueEnum for InputFormat {
    fn value_variants<'a>() -> &'a [Self] {
        &ALL_FORMATS
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        let names: &'static [String] = &CLI_NAMES;
        let i = ALL_FORMATS.iter().position(|f| f == self)?;
        Some(clap::builder::PossibleValue::new(names[i].as_str()).help(self.about()))
    }
}

impl Serialize for InputFormat {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for InputFormat {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        ALL_FORMATS
            .into_iter()
            .find(|f| f.as_str() == name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown input format `{name}`")))
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

/// Guesses the format from the first bytes of a file: one of the engine's, else gpufeed's own
/// recording (NDJSON: a `{` first, the engine's JSON formats told apart before).
pub(crate) fn detect(head: &str) -> Option<InputFormat> {
    if let Some(f) = formats::detect(head) {
        return Some(InputFormat::Log(f));
    }
    formats::Head::new(head)
        .first_line()
        .is_some_and(|l| l.starts_with('{'))
        .then_some(InputFormat::Recording)
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
pub(crate) const FORMATS: &str = "gpufeed diagnose reads gpufeed recordings, nvidia-smi --query-gpu --format=csv logs, nvidia-smi's table, -q and -q -x reports (once or looped), gpustat (text, --json) and nvitop output, nvidia-smi --query-compute-apps CSVs, nvidia-smi dmon and dcgmi dmon output, DCGM, Grafana, W&B, MLflow, rocm-smi, amd-smi and xpu-smi CSVs, monitoring scripts' text logs (GPU Load: 45%), Jetson tegrastats logs, wandb-events.jsonl and W&B run files (.wandb), MLflow run folders and Prometheus scrapes or query results (PyTorch profiler traces: gpufeed analyze)";

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
        // A W&B run folder: its run file (or events file) is the log.
        if let Some(file) = crate::import::wandb::run_folder_file(path) {
            return read_with(&file, format, opts, extra);
        }
        if let Some(dir) = crate::import::mlflow::system_dir(path) {
            let source = InputSource {
                path: path.display().to_string(),
                format: InputFormat::Log(Format::Mlflow),
                lines: 0,
                malformed: 0,
                truncated: false,
                unfinished: false,
                bad_time: None,
                long_strings: None,
            };
            return read_log_evidence(&dir, Format::Mlflow, opts, source, None, Look::Auto);
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
            InputFormat::Log(Format::SmiCsv)
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
    let InputFormat::Log(format) = format else {
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
    };
    let decoded = input.how_decoded();
    let cut = input.cut_flag();
    let mut passes = input.into_passes().map_err(open_err)?;
    let mut read = read_log_evidence(path, format, opts, source, Some(&mut passes), Look::Auto)?;
    read.log_notes.extend(decoded);
    if cut.load(std::sync::atomic::Ordering::Relaxed) {
        read.log_notes.push(
            "The compressed file stops short (cut while it was written or copied): it was read \
             up to the cut."
                .into(),
        );
    }
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
    // A W&B run file is binary and read as such (its system metrics).
    if head.starts_with(crate::import::wandb::RUN_FILE_MAGIC) {
        return Ok(());
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

/// The most memory the first pass's readings are kept in for the second look (a few bytes a
/// reading: about 10M readings of one GPU, or a week of 8 GPUs at 1 Hz).
const TAPE_BUDGET_BYTES: usize = 64 << 20;

/// What the first pass over a log gathered.
struct FirstLook {
    read: (LogHeader, LogInfo, Vec<(u32, ProfilingMeans)>),
    /// The first and last reading's times.
    t_range: Option<(f64, f64)>,
    /// A reading's time was NaN or infinite (judged apart from the phases).
    odd_time: bool,
    pooler: phases::Pooler,
    fraction: FractionCheck,
    tape: Tape,
    /// The evidence of every reading as read: the evidence itself when nothing is cut out (no
    /// idle stretch, utilization in percent).
    uncut: EvidenceBuilder,
}

/// The first pass: the file is read and parsed on a thread of its own, which hands its readings
/// on encoded (a tape's chunks); this thread pools them for the phases, keeps them for the
/// second look and builds the evidence of the whole log meanwhile (the common case needs no
/// second look).
fn first_look(
    path: &Path,
    format: Format,
    opts: &LogOptions,
    passes: Option<&mut Passes>,
) -> Result<FirstLook, DiagnoseError> {
    let mut look = FirstLook {
        read: Default::default(),
        t_range: None,
        odd_time: false,
        pooler: phases::Pooler::default(),
        fraction: FractionCheck::default(),
        tape: Tape::with_budget(TAPE_BUDGET_BYTES),
        uncut: EvidenceBuilder::new(),
    };
    look.read = std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Chunk>(4);
        let reader = scope.spawn(move || {
            let mut enc = Encoder::default();
            let read = read_log(path, format, opts, passes, |g| {
                if let Some(c) = enc.push(g) {
                    // The receiver only goes away when this thread's result is not wanted.
                    let _ = tx.send(c);
                }
            });
            if let Some(c) = enc.finish() {
                let _ = tx.send(c);
            }
            read
        });
        let mut dec = Decoder::default();
        for c in rx {
            let l = &mut look;
            dec.read(&c, |g| {
                l.odd_time |= !g.t_s.is_finite();
                l.t_range = Some(
                    l.t_range
                        .map_or((g.t_s, g.t_s), |(a, z)| (a.min(g.t_s), z.max(g.t_s))),
                );
                if let Some(u) = g.util_pct {
                    l.fraction.add(u);
                    l.pooler.push_with_memory(g.t_s, u, g.mem_used_bytes);
                }
                l.uncut.push_reading(g);
            });
            look.tape.keep(c);
        }
        reader
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })?;
    Ok(look)
}

/// How the second look at a log's readings is taken: the shortest way (`Auto`), or, for tests
/// that hold the ways to the same evidence, by replaying the tape or reading the file again.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(not(test), allow(dead_code))]
enum Look {
    Auto,
    Replay,
    Reread,
}

/// Every reading between `t_range`'s ends is judged at its own time: no phase other than the
/// job's (or none at all).
fn nothing_cut(phases: &[Phase], t_range: Option<(f64, f64)>) -> bool {
    let (Some(first), Some(last), Some((a, z))) = (phases.first(), phases.last(), t_range) else {
        return true;
    };
    phases.iter().all(|p| p.kind == phases::PhaseKind::Active)
        && phases.windows(2).all(|w| w[0].end_s >= w[1].start_s)
        && first.start_s <= a
        && last.end_s >= z
}

/// A log's evidence: a first pass finds the phases from the utilization alone, a second look at
/// the readings (replayed from a [`Tape`], else read again) feeds the evidence with the active
/// phases only, on a timeline with the other stretches cut out. When nothing is cut out, the
/// evidence the first pass built is it.
fn read_log_evidence(
    path: &Path,
    format: Format,
    opts: &LogOptions,
    mut source: InputSource,
    mut passes: Option<&mut Passes>,
    look: Look,
) -> Result<ReadOutcome, DiagnoseError> {
    let FirstLook {
        read: first,
        t_range,
        odd_time,
        pooler,
        fraction,
        tape,
        uncut,
    } = first_look(path, format, opts, passes.as_deref_mut())?;
    let total_s = t_range.map_or(0.0, |(a, z)| z - a);
    let pooled_s = pooler.width_s();
    let (mut series, released) = pooler.finish_with_released();
    let scale = fraction.scale();
    for p in &mut series {
        p.1 *= scale;
    }
    let phases = phases::segment(&series, &released);
    let uncut_is_it = scale == 1.0 && !odd_time && nothing_cut(&phases, t_range);
    let (mut b, (header, mut info, prof)) = if look == Look::Auto && uncut_is_it {
        (uncut, first)
    } else {
        drop(uncut);
        let mut b = EvidenceBuilder::new();
        let clock = phases::JudgedClock::new(&phases);
        let judge = |g: &Reading| {
            let t = if phases.is_empty() {
                Some(g.t_s)
            } else {
                clock.at(g.t_s)
            };
            if let Some(t) = t {
                let mut g = g.clone();
                g.t_s = t;
                g.util_pct = g.util_pct.map(|u| u * scale);
                b.push_reading(&g);
            }
        };
        // The second look replays the first pass's readings from memory; a log too large for
        // the tape is read again.
        let replay = tape.is_complete() && look != Look::Reread;
        let read = if replay {
            tape.replay(judge);
            first
        } else {
            drop(tape);
            read_log(path, format, opts, passes, judge)?
        };
        (b, read)
    };
    let header = Header::from(header);
    info.notes.extend(fraction.note());
    if pooled_s > phases::POOL_S {
        // Said, so that a phase's edges a few seconds off are not taken for a fault.
        info.notes.push(format!(
            "This log is long: to keep memory bounded, its phases (start-up, idle stretches, \
             the job) were found on the busiest reading of every {} instead of every reading; \
             every reading still counts in the figures.",
            crate::units::duration(pooled_s)
        ));
    }
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

/// Reads a log once, handing each reading to `visit`: a file through `passes` (the input opened
/// once), an MLflow run folder by its path.
#[allow(clippy::type_complexity)]
fn read_log(
    path: &Path,
    format: Format,
    opts: &LogOptions,
    passes: Option<&mut Passes>,
    mut visit: impl FnMut(&Reading),
) -> Result<(LogHeader, LogInfo, Vec<(u32, ProfilingMeans)>), DiagnoseError> {
    let src = match passes.filter(|_| format != Format::Mlflow) {
        None => formats::Source::Dir(path),
        Some(passes) => formats::Source::File(passes.pass().map_err(|e| DiagnoseError::Open {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?),
    };
    let o = formats::Options {
        columns: opts.columns.clone(),
        interval_s: opts.interval_s,
    };
    let (h, info, prof) = formats::read(format, src, &o, &mut visit).map_err(|e| bad(path, e))?;
    Ok((h, info, prof.into_iter().collect()))
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

/// `u.fract() == 0.0` without `trunc`, a library call on every reading in the baseline x86-64
/// build: below 2^52 a number is whole when it survives the round trip through an integer; at
/// and above it every finite number is whole.
fn is_whole(u: f64) -> bool {
    if u.abs() < 4_503_599_627_370_496.0 {
        (u as i64) as f64 == u
    } else {
        u.is_finite()
    }
}

impl FractionCheck {
    fn add(&mut self, u: f64) {
        self.n += 1;
        self.max = self.max.max(u);
        // Past 1 no log is a fraction, and what is whole no longer matters: not asked again.
        if self.max <= 1.0 && !is_whole(u) {
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
    use proptest::prelude::*;

    #[test]
    fn a_fraction_log_is_told_by_its_values_at_most_1() {
        let check = |values: &[f64]| {
            let mut f = FractionCheck::default();
            values.iter().for_each(|&u| f.add(u));
            f.scale()
        };
        let fractions: Vec<f64> = (0..20).map(|i| [0.25, 0.75, 1.0, 0.0][i % 4]).collect();
        assert_eq!(check(&fractions), 100.0);
        // A value past 1 anywhere: percent, whatever came before or after it.
        for at in [0, 10, 20] {
            let mut v = fractions.clone();
            v.insert(at, 37.5);
            assert_eq!(check(&v), 1.0, "37.5 at {at}");
        }
        assert_eq!(check(&[1.0; 20]), 1.0, "whole numbers are no fractions");
    }

    proptest! {
        #[test]
        fn is_whole_is_no_fraction(u in prop_oneof![
            any::<f64>(),
            (-200i64..200).prop_map(|v| v as f64),
            (-200.0f64..200.0),
            Just(4_503_599_627_370_496.0f64),
            Just(4_503_599_627_370_495.5f64),
            Just(-4_503_599_627_370_495.5f64),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            Just(f64::NAN),
            Just(-0.0f64),
        ]) {
            prop_assert_eq!(is_whole(u), u.fract() == 0.0, "{}", u);
        }
    }

    /// The evidence of `text` read as a log, its second look taken as `look`.
    fn log_outcome(text: &str, look: Look) -> ReadOutcome {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gpu.csv");
        std::fs::write(&path, text).unwrap();
        let mut passes = Input::open(&path).unwrap().into_passes().unwrap();
        let source = InputSource {
            path: path.display().to_string(),
            format: InputFormat::Log(Format::SmiCsv),
            lines: 0,
            malformed: 0,
            truncated: false,
            unfinished: false,
            bad_time: None,
            long_strings: None,
        };
        let opts = LogOptions::default();
        read_log_evidence(
            &path,
            Format::SmiCsv,
            &opts,
            source,
            Some(&mut passes),
            look,
        )
        .unwrap()
    }

    #[test]
    fn every_way_of_the_second_look_gives_the_same_evidence() {
        let log = |util: &dyn Fn(u32) -> String| {
            let mut t = String::from("timestamp, index, utilization.gpu [%], memory.used [MiB]\n");
            for s in 0..1500u32 {
                for g in 0..2 {
                    t.push_str(&format!(
                        "{}, {g}, {}, 30000 MiB\n",
                        1_700_000_000 + s,
                        util(s + g)
                    ));
                }
            }
            t
        };
        let busy = log(&|s| format!("{} %", 80 + s % 17));
        // Idle before and after the job: the phases cut them out.
        let job_inside = log(&|s| {
            let u = if (500..900).contains(&s) {
                60 + s % 30
            } else {
                0
            };
            format!("{u} %")
        });
        // Utilization as a 0-1 fraction under a percent name: scaled on the second look.
        let fraction = log(&|s| format!("0.{:02}", 40 + s % 50));
        for (i, text) in [busy, job_inside, fraction].iter().enumerate() {
            let auto = log_outcome(text, Look::Auto);
            assert_eq!(auto.phases.is_empty(), i != 1, "{:?}", auto.phases);
            let scaled = auto.log_notes.iter().any(|n| n.contains("fraction"));
            assert_eq!(scaled, i == 2, "{:?}", auto.log_notes);
            for look in [Look::Replay, Look::Reread] {
                let other = log_outcome(text, look);
                assert_eq!(auto.evidence, other.evidence, "{look:?}");
                assert_eq!(auto.phases, other.phases, "{look:?}");
                assert_eq!(auto.log_notes, other.log_notes, "{look:?}");
                assert_eq!(auto.total_s.to_bits(), other.total_s.to_bits());
                assert_eq!(auto.source.lines, other.source.lines);
            }
        }
    }

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
            detect("{\"system.gpu.0.gpu\": 4.07, \"_timestamp\": 1582070941}\n"),
            Some(InputFormat::Log(Format::Wandb))
        );
        assert_eq!(
            detect("0, 87 %, 1024 MiB\n"),
            Some(InputFormat::Log(Format::SmiCsv))
        );
        assert_eq!(detect("hello world\n"), None);
    }

    #[test]
    fn format_names_are_the_wire_names() {
        use clap::ValueEnum;
        let names: Vec<&str> = InputFormat::value_variants()
            .iter()
            .map(|f| f.as_str())
            .collect();
        assert_eq!(&names[..4], ["auto", "recording", "smi_csv", "smi_dmon"]);
        assert!(names.contains(&"prometheus_json") && names.contains(&"smi_q_xml"));
        // The command line spells them with dashes, as clap's derive did.
        let cli = InputFormat::from_str("smi-q-xml", false).unwrap();
        assert_eq!(cli, InputFormat::Log(Format::SmiQXml));
        assert_eq!(
            InputFormat::Log(Format::SmiCsv)
                .to_possible_value()
                .map(|v| v.get_name().to_string()),
            Some("smi-csv".into())
        );
        let f = InputFormat::Log(Format::GpustatJson);
        let json = serde_json::to_string(&f).unwrap();
        assert_eq!(json, "\"gpustat_json\"");
        assert_eq!(serde_json::from_str::<InputFormat>(&json).unwrap(), f);
    }
}
