//! A step marker and a folded interval of them: the values the step socket (`steps`) and the
//! figures it answers (`figures`) both use, in a file beneath both so neither imports the other.

/// One step as reported by the job.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct StepMark {
    /// CLOCK_MONOTONIC nanoseconds at the end of the step (of an [`MarkKind::Idle`] mark: when
    /// the rank's step clock restarts).
    pub t_ns: u64,
    pub wait_ns: Option<u64>,
    pub items: Option<u64>,
    /// The sender's rank (`RANK`, else its pid), when it said.
    pub rank: Option<u32>,
    pub kind: MarkKind,
    pub source: MarkSource,
}

impl StepMark {
    /// A step that ended: not an idle mark.
    pub(crate) fn is_step(&self) -> bool {
        self.kind == MarkKind::Step
    }
}

/// What a marker says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum MarkKind {
    /// `step`: a training step ended at `t_ns`.
    #[default]
    Step,
    /// `idle`: the rank did no training step since its previous marker (an epoch ended,
    /// validation ran): its next step is timed from `t_ns`, not from that marker.
    Idle,
}

/// Who sent a marker.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum MarkSource {
    /// The job itself: `gpufeed_probe`, the framework hooks, its own sender.
    #[default]
    Job,
    /// gpufeed's own DataLoader hook (trailing word `auto`): dropped once the job sends markers
    /// of its own, so no step is counted twice.
    Loader,
}

/// How far a marker's time may lie outside the socket's life (clock reads of the job and of
/// gpufeed race by microseconds; a probe may batch a few markers into one datagram).
pub(crate) const MARK_SKEW_NS: u64 = 1_000_000_000;

/// Steps aggregated over one interval of a recording (the `steps` line).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct StepTotals {
    /// Steps whose start is known (the one before them was seen).
    pub steps: u64,
    /// Seconds those steps took, end to end.
    pub span_s: f64,
    /// Seconds of it spent waiting for input; `None` unless every step reported its wait.
    pub wait_s: Option<f64>,
    /// Samples in those steps; `None` unless every step reported its count.
    pub items: Option<u64>,
}

impl StepTotals {
    /// No step yet: the wait and the item count are known (zero) until a step lacks them.
    pub(crate) fn empty() -> Self {
        StepTotals {
            wait_s: Some(0.0),
            items: Some(0),
            ..Default::default()
        }
    }

    /// Counts the step that `k` ends, begun when the marker before it (at `prev_ns`) was sent.
    pub(crate) fn add(&mut self, prev_ns: u64, k: &StepMark) {
        let dur_s = (k.t_ns - prev_ns) as f64 / 1e9;
        self.steps += 1;
        self.span_s += dur_s;
        self.wait_s = self
            .wait_s
            .zip(k.wait_ns)
            .map(|(a, w)| a + (w as f64 / 1e9).min(dur_s));
        self.items = self.items.zip(k.items).map(|(a, b)| a.saturating_add(b));
    }
}
