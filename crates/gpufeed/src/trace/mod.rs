//! PyTorch profiler (Kineto) traces: a streaming reader, the TensorBoard plugin's step breakdown,
//! HTA-style idle time, copies, kernels, synchronisation, several ranks, and the rules that turn
//! those numbers into findings.

pub mod breakdown;
pub(crate) mod collect;
pub mod families;
pub(crate) mod merge;
pub(crate) mod ranges;
pub mod ranks;
pub mod report;
pub mod rules;
pub(crate) mod verdict;

use breakdown::{StepSource, TraceSummary};
use gpufeed_kineto::{event, reader};

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

/// What can go wrong reading a trace.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("the input is empty")]
    Empty,
    #[error("not a Kineto/Chrome trace ({0})")]
    NotATrace(String),
    #[error("no trace events (the file has no usable `traceEvents`)")]
    NoEvents,
    /// A trace whose events could not be used (all oversized or undecodable): says why.
    #[error("no usable trace events ({0})")]
    NoUsableEvents(String),
    #[error("{0} is a directory without .json or .json.gz trace files")]
    EmptyDir(String),
}

impl From<gpufeed_kineto::ReadError> for TraceError {
    fn from(e: gpufeed_kineto::ReadError) -> TraceError {
        match e {
            gpufeed_kineto::ReadError::Empty => TraceError::Empty,
            gpufeed_kineto::ReadError::NotATrace(why) => TraceError::NotATrace(why),
        }
    }
}

/// Opens a file or `-` (stdin), transparently gunzipping (detected by the gzip magic bytes).
pub fn open(path: &Path) -> Result<Box<dyn Read + Send>, TraceError> {
    let raw: Box<dyn Read + Send> = if path.as_os_str() == "-" {
        Box::new(std::io::stdin())
    } else {
        let f = std::fs::File::open(path).map_err(|e| TraceError::Io {
            path: path.display().to_string(),
            source: e,
        })?;
        Box::new(f)
    };
    let mut br = BufReader::with_capacity(1 << 16, raw);
    let head = br.fill_buf().map_err(|e| TraceError::Io {
        path: path.display().to_string(),
        source: e,
    })?;
    if head.starts_with(&[0x1f, 0x8b]) {
        Ok(Box::new(flate2::bufread::MultiGzDecoder::new(br)))
    } else {
        Ok(Box::new(br))
    }
}

/// Reads and analyzes one trace.
pub fn analyze_reader(r: impl Read, name: &str) -> Result<TraceSummary, TraceError> {
    let mut c = collect::Collected::new();
    let st = reader::read_trace(r, &mut c)?;
    if let Some(e) = mostly_unreadable(&st) {
        return Err(e);
    }
    if c.x_events == 0 {
        return Err(no_events(&st));
    }
    let mut s = breakdown::summarize(&c);
    s.path = name.to_string();
    s.bytes = st.bytes;
    s.events = st.events;
    s.truncated = st.truncated;
    s.warnings = st.warnings;
    let k = c.capped;
    if k.kernel_names + k.devices + k.streams > 0 {
        s.warnings.push(format!(
            "more distinct kernel names, devices or streams than a real trace has: {} kernels past the first {} names, {} events past the first {} devices and {} past the first {} streams were booked together as \"other\"",
            k.kernel_names,
            collect::MAX_KERNEL_NAMES,
            k.devices,
            collect::MAX_DEVICES,
            k.streams,
            collect::MAX_STREAMS
        ));
    }
    if c.kernels.is_empty() && c.memcpys.is_empty() {
        s.warnings.push(
            "no GPU events: a CPU-only trace (or the profiler ran without CUDA activities)".into(),
        );
    }
    let gpu_steps = c.steps.iter().filter(|x| x.on_gpu).count();
    if gpu_steps > 0 && s.step_source == StepSource::ProfilerStep {
        s.warnings.push(format!(
            "{gpu_steps} ProfilerStep annotations on GPU streams (gpu_user_annotation) count as extra steps, as the TensorBoard plugin counts them"
        ));
    }
    match s.step_source {
        StepSource::OptimizerStep | StepSource::Dataloader => s.warnings.push(format!(
            "no ProfilerStep#N annotations: {} iterations inferred from {} (the TensorBoard plugin would book the whole trace as one step, see tb_plugin_steps)",
            s.steps.len(),
            if s.step_source == StepSource::OptimizerStep { "Optimizer.step# calls" } else { "DataLoader __next__ calls" }
        )),
        StepSource::WholeTrace => s
            .warnings
            .push("no ProfilerStep#N annotations and no iterations to infer: the whole trace is one step".into()),
        _ => {}
    }
    Ok(s)
}

/// More events undecodable than decoded (and at least 10): not a trace to judge, as a mostly
/// unreadable GPU log is not (one rule for `analyze` and `export --merge`).
pub(crate) fn mostly_unreadable(st: &event::ScanStats) -> Option<TraceError> {
    (st.bad_events >= 10 && st.bad_events > st.events).then(|| {
        TraceError::NotATrace(format!(
            "mostly unreadable: {} of {} events could not be decoded",
            st.bad_events,
            st.bad_events + st.events
        ))
    })
}

/// Why a trace without a complete (`ph: X`) event cannot be used: one rule for `analyze` and
/// `export --merge`.
pub(crate) fn no_events(st: &event::ScanStats) -> TraceError {
    if st.truncated {
        return TraceError::NotATrace(format!(
            "it ends before any complete event: {}",
            st.warnings.join("; ")
        ));
    }
    if !st.warnings.is_empty() {
        return TraceError::NoUsableEvents(st.warnings.join("; "));
    }
    TraceError::NoEvents
}

pub(crate) fn analyze_path(path: &Path) -> Result<TraceSummary, TraceError> {
    let r = open(path)?;
    analyze_reader(r, &path.display().to_string())
}

/// Expands directories into their trace files (sorted); keeps files and `-` as given.
pub(crate) fn expand_paths(paths: &[PathBuf]) -> Result<Vec<PathBuf>, TraceError> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let rd = std::fs::read_dir(p).map_err(|e| TraceError::Io {
                path: p.display().to_string(),
                source: e,
            })?;
            let mut files: Vec<PathBuf> = rd
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| {
                    let n = f
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    f.is_file() && (n.ends_with(".json") || n.ends_with(".json.gz"))
                })
                .collect();
            if files.is_empty() {
                return Err(TraceError::EmptyDir(p.display().to_string()));
            }
            files.sort();
            out.extend(files);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

/// Analyzes several traces in parallel (one thread per core at most), keeping input order.
pub fn analyze_many(paths: &[PathBuf]) -> Vec<Result<TraceSummary, TraceError>> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(paths.len())
        .max(1);
    if threads == 1 {
        return paths.iter().map(|p| analyze_path(p)).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<Result<TraceSummary, TraceError>>>> =
        paths.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|sc| {
        for _ in 0..threads {
            sc.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= paths.len() {
                    break;
                }
                let r = analyze_path(&paths[i]);
                *results[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
            });
        }
    });
    results
        .into_iter()
        .map(|m| {
            m.into_inner()
                .unwrap_or_else(|e| e.into_inner())
                .unwrap_or(Err(TraceError::NoEvents))
        })
        .collect()
}
