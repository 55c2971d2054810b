//! The one `Finding` type shared by every judgement in gpufeed (`diagnose`, `run`, `analyze`).
//!
//! Ids are snake_case and stable (they are a public contract: scripts match on them).

use serde::{Deserialize, Serialize};

mod evidence;
pub(crate) use evidence::{Item, ItemKey, Items, Unit};

/// One evidence item's value, typed: `evidence_of!(f.evidence, DataWaitPct)` is the
/// `Option<&f64>` of that finding's `data_wait_pct`.
macro_rules! evidence_of {
    ($items:expr, $var:ident) => {
        $items.iter().find_map(|i| match i {
            $crate::finding::Item::$var(v) => Some(v),
            _ => None,
        })
    };
}
pub(crate) use evidence_of;

/// Every finding id, serialised to its stable snake_case string (`input_bound`, ...).
///
/// Declared in alphabetical order, so the derived order is the order of the strings.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[strum(serialize_all = "snake_case")]
#[serde(rename_all = "snake_case")]
pub enum FindingId {
    AmpUnused,
    BatchTooSmall,
    CommBound,
    ComputeBound,
    GpuIdle,
    GpuImbalance,
    GpuUnused,
    /// The training loop spends its time on the host in the user's own code (batches built by
    /// hand, per-step Python, checkpoints, evaluation), not waiting for a DataLoader.
    HostBound,
    InputBound,
    LaunchBound,
    LowGpuUtil,
    MainProcessBound,
    PageableMemcpy,
    PcieLinkDegraded,
    Straggler,
    SyncBound,
    Throttled,
    TransferBound,
}

impl FindingId {
    /// Every id, in the order of their strings.
    pub const ALL: &'static [FindingId] = <FindingId as strum::VariantArray>::VARIANTS;

    /// The stable string (the same as its JSON form).
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl std::fmt::Display for FindingId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// How much a finding matters.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[strum(serialize_all = "snake_case")]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// One diagnosis: what is wrong, the numbers it rests on, and what to change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// Stable snake_case id, e.g. `input_bound`, `pageable_memcpy`.
    pub id: FindingId,
    pub severity: Severity,
    /// One line for people.
    pub title: String,
    /// The figures the finding rests on, each typed with its wire name, label and unit
    /// (`finding/evidence.rs`); written as `{name: value, ...}`.
    pub evidence: Items,
    /// Concrete code or configuration to change.
    pub recommendation: String,
    /// Upper bound on the speed-up if the finding is fixed (e.g. 2.5 = 2.5x), where computable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_speedup: Option<f64>,
    /// What the verdict reads back beyond the evidence. Not serialised.
    #[serde(skip)]
    pub basis: Basis,
    /// What the finding is about beyond its id, typed, for the presenters (which match on
    /// `(FindingId, Kind)`). Not serialised: the evidence carries it as `kind` and `source`.
    #[serde(skip)]
    pub kind: Option<Kind>,
    /// The code or command that applies the fix (a `DataLoader(...)` call), for reports to show
    /// on a line of its own that people copy; the recommendation says it in its sentence too.
    /// Not serialised: the recommendation carries it.
    #[serde(skip)]
    pub apply: Option<String>,
}

/// What a finding is about beyond its id. Set with [`Finding::kind`], which also writes the
/// evidence strings scripts read (`kind`, `source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `input_bound` judged from the samples: which part of the input is short.
    Input(InputKind),
    /// `host_bound` (measured in the Python stacks): what keeps the loop on the host.
    Host(HostCause),
    /// Measured in the training loop's Python stacks (evidence `source: python_stacks`); for
    /// `input_bound`, which part of the loading is short.
    PythonStacks(Option<StackKind>),
}

/// The kind of input bottleneck `input_bound` names when judged from the samples (in
/// `diagnose::rules::input`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum InputKind {
    TooFewWorkers,
    CpuSaturated,
    IoBound,
    #[strum(serialize = "main_process_bound")]
    MainProcess,
    Unknown,
}

impl InputKind {
    /// Every kind, in declaration order.
    pub const ALL: &'static [InputKind] = <InputKind as strum::VariantArray>::VARIANTS;

    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// What keeps a training loop on the host, in the user's own code (the `cause` of a
/// `host_bound` verdict and the kind of its finding).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[strum(serialize_all = "snake_case")]
#[serde(rename_all = "snake_case")]
pub enum HostCause {
    /// The loop builds its batches itself, without a DataLoader (reads, decodes, stacks).
    BatchBuilding,
    /// Per-step Python work: metrics in pure Python, list conversions, logging, progress bars.
    StepPython,
    /// Saving checkpoints.
    Checkpointing,
    /// An evaluation loop run inside training.
    Evaluation,
    /// Host–device synchronisation (`.item()`, `.cpu()`, `.tolist()`, printing tensors).
    HostSync,
}

impl HostCause {
    /// Every cause, in declaration order.
    pub const ALL: &'static [HostCause] = <HostCause as strum::VariantArray>::VARIANTS;

    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// How a report says it, after "the training loop spends N% of its time ...".
    pub fn words(self) -> &'static str {
        match self {
            HostCause::BatchBuilding => "building its batches itself, without a DataLoader",
            HostCause::StepPython => "in per-step Python work",
            HostCause::Checkpointing => "saving checkpoints",
            HostCause::Evaluation => "evaluating inside training",
            HostCause::HostSync => "in host–device syncs",
        }
    }
}

/// The kind of input bottleneck the Python stacks show (`diagnose::rules::stacks::StackKind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum StackKind {
    /// One data-loading stage dominates.
    SlowStage,
    /// Workers are busy all the time and cores are idle.
    TooFewWorkers,
    /// `num_workers=0`: the training thread loads its own batches.
    MainProcessLoading,
    /// Loading waits for reads.
    IoBound,
    /// The DataLoader's worker processes are started anew every epoch
    /// (`persistent_workers=False`), and starting and stopping them is a large part of the loop.
    WorkersRestarted,
}

impl StackKind {
    /// Every kind, in declaration order.
    pub const ALL: &'static [StackKind] = <StackKind as strum::VariantArray>::VARIANTS;

    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Where a data-wait figure comes from: the diagnosis's judged wait and a trial's.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum WaitSource {
    /// The job's step markers (the probe, or steps timed at the DataLoader): each step's exact
    /// wait, over the steady steps.
    StepProbe,
    /// The share of the training thread's Python stack samples in `data_wait` (no markers with
    /// waits): an estimate.
    PythonStacks,
}

impl WaitSource {
    /// The wire name (the JSON's).
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// What a finding hands on to the verdict that its evidence does not carry. (Its figures the
/// verdict reads from the typed evidence itself: `evidence_of!`.)
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Basis {
    /// Nothing is read back.
    #[default]
    None,
    /// `input_bound` judged from the samples: whether a threshold named its kind (`false`: the
    /// kind is the nearest one, or unknown).
    Input { kind_is_clear: bool },
}

impl Finding {
    pub fn new(id: FindingId, severity: Severity, title: impl Into<String>) -> Self {
        Finding {
            id,
            severity,
            title: title.into(),
            evidence: Items::default(),
            recommendation: String::new(),
            expected_speedup: None,
            basis: Basis::None,
            kind: None,
            apply: None,
        }
    }

    /// Sets the finding's kind and the evidence strings that spell it (builder style).
    pub fn kind(mut self, kind: Kind) -> Self {
        match kind {
            Kind::Input(k) => self = self.with(Item::Kind(k.as_str().into())),
            Kind::Host(c) => {
                self = self
                    .with(Item::Kind(c.as_str().into()))
                    .with(Item::Source("python_stacks".into()));
            }
            Kind::PythonStacks(k) => {
                if let Some(k) = k {
                    self = self.with(Item::Kind(k.as_str().into()));
                }
                self = self.with(Item::Source("python_stacks".into()));
            }
        }
        self.kind = Some(kind);
        self
    }

    /// Sets the typed figures later stages read back (builder style).
    pub fn basis(mut self, basis: Basis) -> Self {
        self.basis = basis;
        self
    }

    /// Adds one piece of evidence (builder style), replacing one of the same wire name.
    pub fn with(mut self, item: Item) -> Self {
        self.evidence.insert(item);
        self
    }

    pub(crate) fn recommend(mut self, text: impl Into<String>) -> Self {
        self.recommendation = text.into();
        self
    }

    /// The code that applies the fix, as the recommendation writes it.
    pub(crate) fn apply(mut self, code: impl Into<String>) -> Self {
        self.apply = Some(code.into());
        self
    }

    pub fn speedup(mut self, x: Option<f64>) -> Self {
        self.expected_speedup = x;
        self
    }
}

/// Sorts findings most severe first, then by expected speed-up (largest first), then by id.
pub(crate) fn rank(findings: &mut [Finding]) {
    findings.sort_by(|a, b| {
        b.severity
            .cmp(&a.severity)
            .then_with(|| {
                let sa = a.expected_speedup.unwrap_or(1.0);
                let sb = b.expected_speedup.unwrap_or(1.0);
                sb.partial_cmp(&sa).unwrap_or(std::cmp::Ordering::Equal)
            })
            .then_with(|| a.id.cmp(&b.id))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `as_str` and `ALL` are derived (strum) and the JSON is serde's: both spell every variant
    /// alike, so deriving them changed no string of the JSON output or of a recording.
    fn same_as_json<T>()
    where
        T: Serialize + strum::VariantArray + Copy + Into<&'static str>,
    {
        for v in T::VARIANTS {
            let s: &'static str = (*v).into();
            assert_eq!(serde_json::to_value(v).unwrap(), s);
        }
    }

    #[test]
    fn derived_strings_are_the_wire_strings() {
        same_as_json::<FindingId>();
        same_as_json::<Severity>();
        same_as_json::<crate::diagnose::verdict::VerdictId>();
        same_as_json::<crate::diagnose::input::InputFormat>();
        same_as_json::<crate::diagnose::evidence::GpuState>();
        same_as_json::<crate::diagnose::evidence::Role>();
        same_as_json::<crate::diagnose::nodes::JobVerdict>();
        same_as_json::<crate::sample::event::EndReason>();
        same_as_json::<crate::tune::trial::TrialStatus>();
        same_as_json::<crate::tune::trial::RateSource>();
        same_as_json::<WaitSource>();
        same_as_json::<HostCause>();
        same_as_json::<crate::tune::batch_plan::Basis>();
        same_as_json::<crate::sample::pyphase::Phase>();
        same_as_json::<crate::sample::pyphase::StageKind>();
        same_as_json::<crate::sample::pystacks::PyStatus>();
        same_as_json::<crate::trace::verdict::TraceVerdictId>();
        same_as_json::<crate::trace::breakdown::LoaderIterator>();
        same_as_json::<crate::trace::breakdown::StepSource>();
        same_as_json::<crate::trace::families::KernelFamily>();
        same_as_json::<crate::doctor::Status>();
        same_as_json::<crate::compare::InputKind>();
        same_as_json::<crate::compare::Direction>();
        same_as_json::<crate::bench::Precision>();
        // Evidence strings (no serde of their own): as the evidence has always spelt them.
        let kinds: Vec<&str> = InputKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "too_few_workers",
                "cpu_saturated",
                "io_bound",
                "main_process_bound",
                "unknown"
            ]
        );
        let kinds: Vec<&str> = StackKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "slow_stage",
                "too_few_workers",
                "main_process_loading",
                "io_bound",
                "workers_restarted"
            ]
        );
        assert_eq!(WaitSource::PythonStacks.as_str(), "python_stacks");
        assert_eq!(WaitSource::StepProbe.as_str(), "step_probe");
        let cats: Vec<&str> = crate::trace::breakdown::StepCategory::ALL
            .iter()
            .map(|c| c.as_str())
            .collect();
        assert_eq!(
            cats,
            [
                "kernel",
                "memcpy",
                "memset",
                "communication",
                "runtime",
                "dataloader",
                "cpu_op",
                "other"
            ]
        );
        assert_eq!(FindingId::ALL.len(), 18);
        assert!(FindingId::ALL
            .windows(2)
            .all(|w| w[0].as_str() < w[1].as_str()));
    }

    #[test]
    fn ranking_puts_critical_and_big_gains_first() {
        let mut v = vec![
            Finding::new(FindingId::GpuIdle, Severity::Warning, "b").speedup(Some(1.2)),
            Finding::new(FindingId::CommBound, Severity::Critical, "a"),
            Finding::new(FindingId::InputBound, Severity::Warning, "c").speedup(Some(3.0)),
            Finding::new(FindingId::AmpUnused, Severity::Info, "d"),
            Finding::new(FindingId::BatchTooSmall, Severity::Warning, "e").speedup(Some(1.2)),
        ];
        rank(&mut v);
        let ids: Vec<_> = v.iter().map(|f| f.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "comm_bound",
                "input_bound",
                "batch_too_small",
                "gpu_idle",
                "amp_unused"
            ]
        );
    }

    #[test]
    fn ids_serialise_to_their_strings_in_string_order() {
        for id in FindingId::ALL {
            let json = serde_json::to_string(id).unwrap();
            assert_eq!(json, format!("\"{}\"", id.as_str()));
            let back: FindingId = serde_json::from_str(&json).unwrap();
            assert_eq!(back, *id);
        }
        for w in FindingId::ALL.windows(2) {
            assert!(w[0] < w[1] && w[0].as_str() < w[1].as_str(), "{w:?}");
        }
    }

    #[test]
    fn every_finding_id_is_documented() {
        let docs = [
            include_str!("../../../docs/diagnose.md"),
            include_str!("../../../docs/analyze.md"),
        ]
        .concat();
        for id in FindingId::ALL {
            assert!(
                docs.contains(&format!("`{id}`")),
                "{id} is not in docs/diagnose.md or docs/analyze.md"
            );
        }
    }

    #[test]
    fn serializes_snake_case_severity_and_skips_missing_gain() {
        let f = Finding::new(FindingId::InputBound, Severity::Critical, "t")
            .with(Item::DataWaitPct(12.5));
        let s = serde_json::to_string(&f).unwrap();
        assert!(s.contains("\"severity\":\"critical\""));
        assert!(!s.contains("expected_speedup"));
        assert!(s.contains("\"evidence\":{\"data_wait_pct\":12.5}"));
    }
}
