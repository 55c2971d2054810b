//! A step marker and a folded interval of them: the values the step socket (`steps`) and the
//! figures it answers (`figures`) both use, in a file beneath both so neither imports the other.

/// One step as reported by the job.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepMark {
    /// CLOCK_MONOTONIC nanoseconds at the end of the step.
    pub t_ns: u64,
    pub wait_ns: Option<u64>,
    pub items: Option<u64>,
    /// The sender's rank (`RANK`, else its pid), when it said.
    pub rank: Option<u32>,
}

/// How far a marker's time may lie outside the socket's life (clock reads of the job and of
/// gpufeed race by microseconds; a probe may batch a few markers into one datagram).
pub const MARK_SKEW_NS: u64 = 1_000_000_000;

/// Steps aggregated over one interval of a recording (the `steps` line).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepTotals {
    /// Steps whose start is known (the one before them was seen).
    pub steps: u64,
    /// Seconds those steps took, end to end.
    pub span_s: f64,
    /// Seconds of it spent waiting for input; `None` unless every step reported its wait.
    pub wait_s: Option<f64>,
    /// Samples in those steps; `None` unless every step reported its count.
    pub items: Option<u64>,
}
