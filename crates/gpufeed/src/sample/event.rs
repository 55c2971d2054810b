//! The events every source produces, and a recording stores one per line: the header and the
//! line types (`gpu`, `host`, `procs`, ..., `end`). They belong to the samples layer, so that the
//! recorder and the importers of nvidia-smi and dcgmi logs build them without importing anything
//! above; `record::format` re-exports them and owns how they are stored and read back.

use super::pyphase::Phase;
use super::pystacks::PyStatus;
use super::{DriverInfo, GpuSample, GpuStatic, HostInfo, HostSample, ProcSample, ProcStart};
use gpufeed_json::json_fields;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Bump when a field is added; keep reading the old ones.
/// Version 2 added the Python stack lines and the header's `py_rate_hz`.
pub(crate) const SCHEMA_VERSION: u32 = 2;

/// First line of a recording.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub schema_version: u32,
    #[serde(default)]
    pub gpufeed_version: Option<String>,
    /// RFC 3339 UTC time the recording started.
    pub start_time: String,
    /// The same instant in microseconds since the Unix epoch; every `t_s` is relative to it.
    pub start_unix_us: u64,
    /// Host and process sampling interval.
    pub interval_s: f64,
    pub host: HostInfo,
    #[serde(default)]
    pub driver: Option<DriverInfo>,
    #[serde(default)]
    pub gpus: Vec<GpuStatic>,
    /// Why GPUs are absent, when they are (e.g. "no NVIDIA driver found").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_error: Option<String>,
    /// The command `gpufeed run` started, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// The job's root process (started by `run`, or attached with `record --pid`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Python stack sampling rate, when stacks were sampled (schema 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub py_rate_hz: Option<f64>,
}

/// A Python frame, written once the first time a stack uses it (schema 2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PyFrameDef {
    pub id: u32,
    /// Function name (qualified with its class on CPython 3.11+).
    pub name: String,
    pub file: String,
    pub line: i32,
    /// The source line being executed, for the user's own files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src: Option<String>,
}

/// A recorded frame definition as the classifier sees it.
impl<'a> From<&'a PyFrameDef> for super::pyphase::FrameRef<'a> {
    fn from(f: &'a PyFrameDef) -> Self {
        super::pyphase::FrameRef {
            name: &f.name,
            file: &f.file,
            src: f.src.as_deref(),
        }
    }
}

/// A stack, written once the first time it is seen: frame ids, outermost first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PyStackDef {
    pub id: u32,
    pub frames: Vec<u32>,
}

/// One thread's samples over an interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PyThreadCounts {
    pub tid: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `[stack id, samples, of which idle]`.
    pub stacks: Vec<[u64; 3]>,
    /// Samples per training-loop phase (phases with none left out).
    #[serde(default)]
    pub phases: BTreeMap<Phase, u64>,
    /// Nanoseconds the thread ran on a CPU over the interval (its
    /// /proc/PID/task/TID/schedstat); absent when unknown, or when it neither ran nor waited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_ns: Option<u64>,
    /// Nanoseconds the thread was runnable but waiting for a core (the run queue) over the
    /// interval: samples that find it there look like work, but it was not running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runq_ns: Option<u64>,
    /// Running samples that held the GIL: more than 0 somewhere in a process shows its GIL
    /// could be read, so that `gil_free` means native code (absent when 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gil_held: u64,
    /// `[stack id, running samples without the GIL]`, stacks with none left out: the thread ran
    /// native code that released the GIL under that stack's innermost Python frame.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gil_free: Vec<[u64; 2]>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[cfg(test)]
impl PyThreadCounts {
    /// A thread of these phase counts and nothing else (for tests of what reads the phases).
    pub(crate) fn with_phases(tid: u64, phases: &[(Phase, u64)]) -> Self {
        PyThreadCounts {
            tid,
            name: None,
            stacks: Vec::new(),
            phases: phases.iter().copied().collect(),
            cpu_ns: None,
            runq_ns: None,
            gil_held: 0,
            gil_free: Vec::new(),
        }
    }
}

/// One process's Python samples over one interval, aggregated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PySamples {
    /// End of the interval.
    pub t_s: f64,
    pub dt_s: f64,
    pub pid: u32,
    /// Sampling instants at which this process was read.
    pub ticks: u64,
    pub threads: Vec<PyThreadCounts>,
}

/// What sampling a process's Python stacks came to (written once per process).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PyStatusLine {
    pub t_s: f64,
    pub pid: u32,
    pub status: PyStatus,
    /// Interpreter version when ok, the reason otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The rank the process starts (`RANK`, `LOCAL_RANK`, `WORLD_SIZE` of its environment), for
    /// a rank of a multi-process job; absent for anything else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<super::ranks::RankEnv>,
}

/// Step markers from the job (`GPUFEED_STEP_SOCKET`), aggregated per interval: the steps that
/// ended in it, the seconds they took, and what they reported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepsLine {
    /// End of the interval.
    pub t_s: f64,
    pub dt_s: f64,
    pub steps: u64,
    /// Seconds the steps took, each from the previous step's end to its own.
    pub span_s: f64,
    /// Seconds of it spent waiting for the input batch; absent unless every step reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_s: Option<f64>,
    /// Samples in those steps; absent unless every step reported its count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items: Option<u64>,
    /// The rank whose steps these are (one line per rank per interval), when the markers said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
}

/// Why a recording stopped (its `end` line's `reason`).
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
pub enum EndReason {
    /// The job gpufeed started exited.
    JobExited,
    /// `--duration` ran out.
    Duration,
    /// gpufeed was interrupted (Ctrl-C, SIGTERM).
    Interrupted,
    /// The job attached with `--pid` exited.
    AttachedExited,
    /// gpufeed lost track of the job it started (waiting for it failed).
    LostJob,
    /// A trial: its throughput became steady and gpufeed stopped the job.
    Steady,
    /// A trial: `--max-time` was reached.
    MaxTime,
    /// `watch --record` stopped (the view was closed or interrupted).
    WatchStopped,
    /// A reason this version does not know (a newer or foreign recording).
    #[serde(other)]
    Unknown,
}

impl EndReason {
    /// The wire name (the recording's).
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// How a recording ended.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct End {
    pub t_s: f64,
    /// The job's exit code, when it exited normally.
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// The signal that killed the job, when one did.
    #[serde(default)]
    pub signal: Option<i32>,
    /// Why the recording stopped.
    #[serde(default)]
    pub reason: Option<EndReason>,
    /// Step markers dropped for a time outside the job's run (see `sample::steps::plausible`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps_dropped: Option<u64>,
    /// Step markers let go unread under a flood (more than `sample::steps::MAX_KEPT_MARKS`
    /// waiting at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps_flooded: Option<u64>,
    /// Step markers of ranks beyond the first `sample::steps::MAX_RANKS`, not followed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps_unfollowed: Option<u64>,
    /// How many ranks those were (at most 65,536 told apart).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranks_unfollowed: Option<u64>,
}

/// The `overrides` line: values gpufeed put in place of the job's own, and why others could not be.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OverridesLine {
    pub t_s: f64,
    #[serde(default)]
    pub overrides: Vec<Override>,
    #[serde(default)]
    pub notes: Vec<String>,
    /// What gpufeed's DataLoader step hook timed (`InjectReport::loader_notes`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub loader_notes: Vec<String>,
}

/// Every line after the header.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Line {
    Gpu(GpuSample),
    Host(HostSample),
    ProcStart(ProcStart),
    Procs(ProcsLine),
    ProcExit {
        t_s: f64,
        pid: u32,
    },
    End(End),
    /// What `--dataloader` / `--torch` changed in the job (written once, before `end`).
    Overrides(OverridesLine),
    PyStatus(PyStatusLine),
    PyFrame(PyFrameDef),
    PyStack(PyStackDef),
    PySamples(PySamples),
    Steps(StepsLine),
    /// A line type from a newer gpufeed: ignored.
    #[serde(other)]
    Unknown,
}

json_fields! {
    /// One reading of every process of the job's tree (the most frequent line of a recording).
    #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
    pub struct ProcsLine {
        pub t_s: f64,
        pub procs: Vec<ProcSample>,
    }
}

/// One value gpufeed put in place of the job's own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Override {
    /// `DataLoader`, `torch`, `torch.backends.cudnn`, `torch.backends.cuda.matmul`.
    pub target: String,
    pub key: String,
    pub value: serde_json::Value,
    /// The job's own value (its argument or the default); `null` when it could not be read.
    pub original: serde_json::Value,
    /// `train.py:42`: where the DataLoader was created (`null` for global switches).
    pub site: Option<String>,
    /// Why gpufeed changed a value that was not asked for (PyTorch's rules).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// How many times (DataLoaders created at this site, processes that imported torch).
    #[serde(default = "one")]
    pub count: u32,
}

fn one() -> u32 {
    1
}

/// The header of a recording read from a GPU log: no host facts, the GPUs the log showed.
impl From<gpufeed_telemetry::reading::LogHeader> for Header {
    fn from(h: gpufeed_telemetry::reading::LogHeader) -> Self {
        Header {
            schema_version: SCHEMA_VERSION,
            gpufeed_version: None,
            start_time: String::new(),
            start_unix_us: 0,
            interval_s: h.interval_s,
            host: HostInfo::default(),
            driver: None,
            gpus: h.gpus,
            gpu_error: None,
            command: None,
            pid: None,
            py_rate_hz: None,
        }
    }
}

/// A value as Python would write it (`True`, `8`, `'high'`).
pub(crate) fn py(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Bool(true) => "True".into(),
        serde_json::Value::Bool(false) => "False".into(),
        serde_json::Value::Null => "None".into(),
        serde_json::Value::String(s) => format!("'{s}'"),
        v => v.to_string(),
    }
}

impl Override {
    /// `DataLoader(num_workers=8) at train.py:42, was 0`; `torch.backends.cudnn.benchmark=True,
    /// was False`.
    pub(crate) fn describe(&self) -> String {
        let head = if self.target == "DataLoader" {
            format!("DataLoader({}={})", self.key, py(&self.value))
        } else if self.target == "torch" && self.key == "matmul_precision" {
            format!("torch.set_float32_matmul_precision({})", py(&self.value))
        } else {
            format!("{}.{}={}", self.target, self.key, py(&self.value))
        };
        let at = self
            .site
            .as_ref()
            .map(|s| format!(" at {s}"))
            .unwrap_or_default();
        let times = if self.count > 1 && self.site.is_some() {
            format!(" ({} loaders)", self.count)
        } else {
            String::new()
        };
        let why = self
            .reason
            .as_ref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default();
        format!("{head}{at}{times}, was {}{why}", py(&self.original))
    }
}
