//! Evidence: derived statistics computed by streaming over a recording's lines.
//!
//! [`EvidenceBuilder`] ([`builder`]) takes one line at a time and keeps only running sums, fixed
//! histograms and fixed-size buffers ([`acc`], and [`pyloop`] for the Python stacks and step
//! markers), so memory does not grow with the recording's length (per-process state grows with
//! the number of processes, not with time). [`EvidenceBuilder::finish`] turns them into an
//! [`Evidence`] (its types in `types.rs` and `python.rs`) that the rules read. Every type is
//! reached by one path: `diagnose::evidence::X` (the files are private modules).

pub(crate) mod acc;
mod builder;
pub(crate) mod pyloop;
mod python;
mod types;

pub use builder::EvidenceBuilder;
pub(crate) use python::NATIVE_UNDER;
pub use python::{
    sites_heading, CheckpointSaves, HostCall, Hotspot, LoopSite, PhaseCode, PhasesPct, PyMain,
    PythonEvidence, RankLoop, SlowRank, StepEvidence, SyncSite, WorkerStartStop, SLOW_RANK_GAP_PCT,
    SLOW_RANK_MIN_PCT,
};
pub use types::{
    Evidence, GpuEvidence, GpuState, GpuVerdict, HostEvidence, JobEvidence, NoGpu, Origin,
    PcieEvidence, ProcEvidence, Role, ThrottleEvidence, BOUND_PREFIX, BUSY_CORE_PCT, IDLE_CORE_PCT,
    LOADED_PCT, MAX_PLAUSIBLE_MEM_BYTES, MAX_PLAUSIBLE_POWER_W, MAX_PLAUSIBLE_SPAN_S,
    MAX_PROCESSES, MIN_SHAPE_SAMPLES, QUEUED_PCT, SATURATED_PROC_PCT, TINY_SM_ACTIVE_PCT,
    UNUSED_MEM_BYTES, UNUSED_PCT,
};
