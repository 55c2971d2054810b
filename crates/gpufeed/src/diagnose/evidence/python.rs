//! What the job's Python stacks and step markers say ([`PythonEvidence`], [`StepEvidence`]):
//! the types the Python-loop accumulators ([`super::pyloop`]) fill.

use crate::sample::pyphase::{DataLibrary, Phase, StageKind};
use crate::sample::pystacks::PyStatus;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The phase split, percent of the training thread's samples (wall time: idle samples count).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PhasesPct {
    pub data_wait: f64,
    pub forward: f64,
    pub backward: f64,
    pub optimizer: f64,
    pub sync: f64,
    pub checkpoint_io: f64,
    /// An evaluation loop run from the training loop (absent in reports of older versions).
    #[serde(default)]
    pub evaluation: f64,
    pub other: f64,
}

impl PhasesPct {
    pub fn get(&self, p: Phase) -> f64 {
        match p {
            Phase::DataWait => self.data_wait,
            Phase::Forward => self.forward,
            Phase::Backward => self.backward,
            Phase::Optimizer => self.optimizer,
            Phase::Sync => self.sync,
            Phase::CheckpointIo => self.checkpoint_io,
            Phase::Evaluation => self.evaluation,
            Phase::Other => self.other,
        }
    }

    pub(super) fn from_counts(c: &[u64; Phase::ALL.len()]) -> Self {
        let n: u64 = c.iter().sum();
        let pct = |p: Phase| {
            if n == 0 {
                0.0
            } else {
                crate::units::r1(c[p.index()] as f64 * 100.0 / n as f64)
            }
        };
        PhasesPct {
            data_wait: pct(Phase::DataWait),
            forward: pct(Phase::Forward),
            backward: pct(Phase::Backward),
            optimizer: pct(Phase::Optimizer),
            sync: pct(Phase::Sync),
            checkpoint_io: pct(Phase::CheckpointIo),
            evaluation: pct(Phase::Evaluation),
            other: pct(Phase::Other),
        }
    }
}

/// The training thread.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PyMain {
    pub pid: u32,
    pub tid: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_name: Option<String>,
    pub samples: u64,
    pub phases_pct: PhasesPct,
}

/// One data-loading stage and its share of data-loading time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hotspot {
    pub function: String,
    pub file: String,
    /// The line of the function seen most often.
    pub line: i32,
    /// Share of all data-loading samples.
    pub pct: f64,
    /// Milliseconds of work per loaded sample (running, or blocked in I/O; time spent runnable
    /// but waiting for a core left out when the recording has the threads' scheduler clocks),
    /// when the number of samples loaded is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ms_per_sample: Option<f64>,
    /// Milliseconds per loaded sample the stage's threads were runnable but waiting for a core
    /// (their run-queue wait): the part of the stage's wall time that is the machine's, not the
    /// stage's. Given beside `ms_per_sample` when the recording has the threads' scheduler
    /// clocks (`cpu_ns` / `runq_ns` of `py_samples`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core_wait_ms_per_sample: Option<f64>,
    /// Percent of the stage's samples (idle ones included) that found it running without the
    /// GIL: native code (a C or Rust extension that released it) called from the stage's
    /// innermost Python frame. Given where the recording read the GIL (some sample of the
    /// process held it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native_pct: Option<f64>,
    /// The source line at `line`, for the user's own files (what calls the native code).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    pub kind: StageKind,
    /// The data-loading library the stage runs under (Hugging Face datasets, webdataset), whose
    /// terms the fix is said in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub library: Option<DataLibrary>,
    pub samples: u64,
    /// Seconds of work the samples stand for (each process weighted by its own reading
    /// interval: workers are read less often than the training process).
    #[serde(skip)]
    pub work_s: f64,
    /// Of `work_s`, the seconds its threads were waiting for a core; `None` without scheduler
    /// clocks in the recording.
    #[serde(skip)]
    pub runq_s: Option<f64>,
}

/// Share of a stage's time running without the GIL from which the stage is native code called
/// from the user's function rather than that function's own Python (or its waits).
const NATIVE_STAGE_PCT: f64 = 50.0;

/// How a report names a stage that is native code under the user's function (the verdict,
/// which has only the finding's evidence, says it the same way).
pub(crate) const NATIVE_UNDER: &str = "native code under ";

impl Hotspot {
    /// The user's own function (in the user's files, or one they hand a library) spends most of
    /// its time in native code it calls, with the GIL released: the slow part is that call. A
    /// library's stage (a torchvision transform, PyTorch's collate) keeps its library's advice.
    pub(crate) fn native_under_user_code(&self) -> bool {
        self.native_pct.is_some_and(|p| p >= NATIVE_STAGE_PCT)
            && !crate::sample::pyphase::is_library(&self.file)
            && matches!(
                self.kind,
                StageKind::Getitem
                    | StageKind::Collate
                    | StageKind::OnTheFly
                    | StageKind::Transform
                    | StageKind::Sampler
            )
    }

    /// The stage as a report names it: its function, or `native code under <function>` where
    /// [`Hotspot::native_under_user_code`].
    pub(crate) fn name(&self) -> String {
        if self.native_under_user_code() {
            format!("{NATIVE_UNDER}{}", self.function)
        } else {
            self.function.clone()
        }
    }

    /// Where the stage is, as a report says it: `file:line` with the file's name only.
    pub(crate) fn at(&self) -> String {
        short_at(&self.file, self.line)
    }
}

/// One rank of a multi-process job: its training thread's loop (`python.ranks[]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankLoop {
    /// `RANK` (else `LOCAL_RANK`) of its environment; `null` when it has none.
    pub rank: Option<u32>,
    pub pid: u32,
    pub tid: u64,
    /// Training-thread samples.
    pub samples: u64,
    pub phases_pct: PhasesPct,
    pub data_wait_pct: f64,
    /// From the rank's own step markers, when it sent some.
    pub steps_per_s: Option<f64>,
    /// The heaviest data stages of this rank and its DataLoader workers.
    pub data_hotspots: Vec<Hotspot>,
}

impl RankLoop {
    /// How the rank is named: `rank 3`, else `pid 1234`.
    pub fn label(&self) -> String {
        match self.rank {
            Some(r) => format!("rank {r}"),
            None => format!("pid {}", self.pid),
        }
    }
}

/// A rank whose data wait is far above the others': in synchronous training it holds them all
/// back (they wait for it in the collective).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlowRank {
    pub rank: Option<u32>,
    pub pid: u32,
    pub data_wait_pct: f64,
    /// The median data wait of the other ranks.
    pub others_data_wait_pct: f64,
}

/// Points of data wait above the other ranks' median that make a rank the one that starves
/// them, and the least data wait it must have itself.
pub const SLOW_RANK_GAP_PCT: f64 = 15.0;
pub const SLOW_RANK_MIN_PCT: f64 = 20.0;

/// A place where the training thread synchronises with the device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SyncSite {
    pub function: String,
    pub file: String,
    pub line: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Share of the training thread's samples.
    pub pct: f64,
}

/// The training thread starting DataLoader workers (creating the multi-process iterator) and
/// stopping them (`_shutdown_workers`): every epoch with `persistent_workers=False`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WorkerStartStop {
    /// Share of the training thread's loop samples.
    pub loop_pct: f64,
    /// Seconds of the loop's wall time they stand for (`loop_pct` of `loop_seconds`).
    pub seconds: f64,
    /// Wall time of the training loop, from the interval of its first loop sample to that of
    /// its last (the samples at their reading interval where the recording has no times).
    pub loop_seconds: f64,
}

/// One of the user's functions where a share of the training loop goes: the innermost frame in
/// the user's own files of the stacks it stands for, at its most frequent line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoopSite {
    /// The function (a comprehension or lambda is named with the function it runs in:
    /// `<listcomp> in compute_metrics`).
    pub function: String,
    pub file: String,
    pub line: i32,
    /// The source at `line`, when the recording has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Where the time is spent inside a library: the library function that line calls
    /// (`torch.serialization.save`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls: Option<String>,
    /// Share of the training loop's samples.
    pub pct: f64,
    /// Percent of its samples running without the GIL (native code under that line), where
    /// the recording read the GIL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native_pct: Option<f64>,
}

/// How a list of sites is headed: `in your code`, unless some of them are library code (a
/// thread or finalizer with no frame of the user's: `torch.library._del_library`, logging's
/// handler): then `by function`, and those rows end in `(library)` ([`LoopSite::name`]).
pub fn sites_heading(sites: &[LoopSite]) -> &'static str {
    if sites
        .iter()
        .any(|s| crate::sample::pyphase::is_library(&s.file))
    {
        "by function"
    } else {
        "in your code"
    }
}

impl LoopSite {
    /// Where it is, as a report says it: `file:line` with the file's name only.
    pub(crate) fn at(&self) -> String {
        short_at(&self.file, self.line)
    }

    /// The site as a report names it: `native code under f` where at least half of its samples
    /// ran without the GIL in code its line calls directly (no library's Python beneath it);
    /// `(library)` after a library's function.
    pub(crate) fn name(&self) -> String {
        let name = if self.calls.is_none() && self.native_pct.is_some_and(|p| p >= NATIVE_STAGE_PCT)
        {
            format!("{NATIVE_UNDER}{}", self.function)
        } else {
            self.function.clone()
        };
        if crate::sample::pyphase::is_library(&self.file) {
            name + " (library)"
        } else {
            name
        }
    }
}

/// `file:line` with the file's name only.
pub(crate) fn short_at(file: &str, line: i32) -> String {
    let name = std::path::Path::new(file)
        .file_name()
        .map_or_else(|| file.to_string(), |f| f.to_string_lossy().into_owned());
    format!("{name}:{line}")
}

/// A phase of the training loop that is not forward, backward or the optimizer, and the user's
/// functions its time goes to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseCode {
    pub phase: Phase,
    /// The phase's share of the loop.
    pub pct: f64,
    /// Its hottest functions in the user's files, heaviest first (at most five).
    pub sites: Vec<LoopSite>,
    /// The share of the loop in the phase's other functions, summed, and how many they are.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rest_pct: f64,
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub rest_functions: u32,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

fn is_zero_u32(x: &u32) -> bool {
    *x == 0
}

/// A call the training loop makes that keeps it on the host: what the loop's own code calls
/// (a function of the user's, or a library function called on the loop's line), the cause it
/// stands for and its share of the loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostCall {
    pub cause: crate::finding::HostCause,
    /// The user's function the loop calls (`load_batch`), or the library function the loop's
    /// line calls (`torch.serialization.save`).
    pub function: String,
    /// Whether `function` is library code (the fix is then said at the loop's line).
    pub library: bool,
    /// The loop's line that makes the call, and its source.
    pub at_file: String,
    pub at_line: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_code: Option<String>,
    /// Share of the training loop's samples.
    pub pct: f64,
    /// Seconds of the loop's wall time it stands for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
    /// What was seen under it that the fix names: `tqdm` (a progress bar), `logging`, `print`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub uses: Vec<String>,
}

impl PythonEvidence {
    /// The loop's share in each host-side cause, heaviest first, with its heaviest call.
    pub(crate) fn host_causes(&self) -> Vec<(crate::finding::HostCause, f64, &HostCall)> {
        let mut out: Vec<(crate::finding::HostCause, f64, &HostCall)> = Vec::new();
        for c in &self.host_calls {
            match out.iter_mut().find(|(k, _, _)| *k == c.cause) {
                Some(e) => e.1 += c.pct,
                None => out.push((c.cause, c.pct, c)),
            }
        }
        out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        out
    }
}

impl HostCall {
    /// Where the loop calls it: `file:line`.
    pub(crate) fn at(&self) -> String {
        short_at(&self.at_file, self.at_line)
    }
}

/// The checkpoints the training thread saved: runs of consecutive readings with checkpoint
/// samples (saves closer together than one reading count as one, so a lower bound).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CheckpointSaves {
    pub saves: u64,
    /// Seconds of the loop in checkpointing, over the saves.
    pub s_per_save: f64,
}

/// What the Python stacks say (the `python` object of run/diagnose JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PythonEvidence {
    /// `ok`, `denied`, `not_python` or `unsupported_version`.
    pub status: PyStatus,
    pub rate_hz: Option<f64>,
    /// Thread stacks read, over all processes.
    pub samples: u64,
    pub sampled_processes: u32,
    pub main: Option<PyMain>,
    pub data_hotspots: Vec<Hotspot>,
    /// Share of the training thread's samples waiting for (or fetching) the next batch.
    pub data_wait_pct: Option<f64>,
    /// Of those, the share spent loading in the training thread itself (`num_workers=0`).
    pub data_in_main_pct: Option<f64>,
    /// Processes other than the training one that loaded data (DataLoader workers).
    pub loader_processes: u32,
    /// Mean share of their samples those processes spent loading.
    pub loader_busy_pct: Option<f64>,
    /// Share of data-loading samples blocked in a system call or in a file read.
    pub data_io_pct: Option<f64>,
    /// Where the training thread synchronises, most frequent first.
    pub sync_sites: Vec<SyncSite>,
    /// Each phase of 10% or more of the loop other than forward, backward and the optimizer,
    /// with the user's functions its time goes to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub loop_code: Vec<PhaseCode>,
    /// What the training loop calls that keeps it on the host, heaviest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_calls: Vec<HostCall>,
    /// The checkpoints saved, when the loop was seen saving.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_saves: Option<CheckpointSaves>,
    /// The loop ran no training step (no backward pass or optimizer step was seen): the
    /// job's main thread's hottest functions in the user's files, when it has no loop.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub no_loop_sites: Vec<LoopSite>,
    /// The training thread's time starting and stopping DataLoader worker processes, when it
    /// was seen doing so (absent otherwise: a loop without workers, or none caught).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_start_stop: Option<WorkerStartStop>,
    /// Each rank of a multi-process job, by rank (empty for one training process); `main` is
    /// then the median rank's training thread (by data wait).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<RankLoop>,
    /// The rank that starves the others, when one does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slow_rank: Option<SlowRank>,
    /// `main` is the rank the others wait for in torch.distributed collectives, not the median
    /// rank by data wait (see the module `pyloop`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub main_waited_for: bool,
    /// Ranks found that are not in `ranks`: not Python, exited before the loop, too few
    /// samples, or an earlier process of a rank that was restarted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranks_unread: Vec<u32>,
    /// Why no stacks could be read, when none could.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// What the job's step markers (`GPUFEED_STEP_SOCKET`, the probe) say: the exact data wait.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepEvidence {
    /// Steps timed (each from the previous step's end to its own).
    pub steps: u64,
    pub steps_per_s: Option<f64>,
    /// Share of the steps' time spent waiting for the input batch, when every step reported it.
    pub data_wait_pct: Option<f64>,
    /// Samples in the timed steps, when every step reported its count.
    pub items: Option<u64>,
    pub samples_per_s: Option<f64>,
    /// The steady rate: warm-up cut (MSER-5) and the mean over the rest, as `sweep` measures a
    /// trial; `None` with too few step lines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steady_steps_per_s: Option<f64>,
    /// 95% interval of the steady rate (batch means, Student's t).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steady_ci95: Option<[f64; 2]>,
    /// Seconds of warm-up cut before the steady part (from the first step line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup_s: Option<f64>,
    /// Share of the steady part's time spent waiting for input, when every step reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steady_data_wait_pct: Option<f64>,
    /// Steps per second of each rank that sent markers with its rank (`RANK`, else its pid);
    /// the figures above are then per rank, averaged over the ranks.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub steps_per_s_by_rank: BTreeMap<u32, f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A list of sites with a library's function among them is not headed "in your code", and
    /// that row says it is a library's.
    #[test]
    fn library_sites_are_marked_and_the_heading_says_so() {
        let site = |function: &str, file: &str| LoopSite {
            function: function.into(),
            file: file.into(),
            line: 8,
            code: None,
            calls: None,
            pct: 10.0,
            native_pct: None,
        };
        let mine = site("log_step", "/home/u/train.py");
        let lib = site("_del_library", "/v/site-packages/torch/library.py");
        assert_eq!(sites_heading(std::slice::from_ref(&mine)), "in your code");
        assert_eq!(sites_heading(&[mine.clone(), lib.clone()]), "by function");
        assert_eq!(mine.name(), "log_step");
        assert_eq!(lib.name(), "_del_library (library)");
    }
}
