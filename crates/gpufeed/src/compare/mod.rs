//! `gpufeed compare BEFORE AFTER`: the figures that matter side by side, their changes, the
//! speed-up (with a 95% interval where the inputs allow one) and the change of verdict.
//!
//! Pure functions over what the existing readers produce: a recording's diagnosis
//! ([`crate::diagnose::DiagnoseReport`]), a trace's [`crate::trace::breakdown::TraceSummary`] (with its findings), or a sweep's
//! [`crate::tune::sweep_report::SweepReport`], each in its own file ([`recording`], [`trace`], [`sweep`]). The command
//! (`commands::compare`) reads the files; `present::compare` renders.

pub(crate) mod files;
mod recording;
mod sweep;
mod trace;

use crate::stats::ratio_ci;
use crate::stats::Speedup;
pub use recording::recordings;
pub use sweep::sweeps;
pub use trace::traces;

use crate::diagnose::verdict::VerdictId;
use crate::finding::FindingId;
use crate::units::round;
use serde::{Deserialize, Serialize};

pub const SCHEMA_VERSION: u32 = 1;

/// What both inputs are.
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
#[strum(serialize_all = "snake_case")]
#[serde(rename_all = "snake_case")]
pub enum InputKind {
    Recording,
    Trace,
    Sweep,
}

impl InputKind {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Which way a metric should move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Better {
    Higher,
    Lower,
    /// Neither direction is good in itself (memory used, a count).
    Neutral,
}

/// One side of the comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Side {
    pub path: String,
    /// Verdict id (recordings), top finding id (traces; `none` without findings) or the sweet
    /// spot's setting (sweeps).
    pub verdict: Option<SideVerdict>,
    /// One line for people: the verdict's summary or the top finding's title.
    pub verdict_summary: Option<String>,
    /// The top fix of this side, when there is one.
    pub top_fix: Option<String>,
}

/// One row of the table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// Stable id with its unit in the name (`gpu_busy_pct`, `step_ms`, ...).
    pub metric: String,
    /// The row's label for people.
    pub label: String,
    pub before: Option<f64>,
    pub after: Option<f64>,
    /// `100 × (after − before) / before`; `None` when either side is missing or before is 0.
    pub delta_pct: Option<f64>,
    pub better: Better,
}

/// Whether AFTER is better than BEFORE, in one word.
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
#[strum(serialize_all = "snake_case")]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    Better,
    Worse,
    Same,
}

impl Direction {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerdictChange {
    pub before: Option<SideVerdict>,
    pub after: Option<SideVerdict>,
    pub changed: bool,
    /// Better / worse / same: from the speed-up's 95% interval (it must clear 1), else from the
    /// speed-up itself (more than 5% either way), else from the verdicts' order of severity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<Direction>,
}

/// A speed-up counts as a change when its interval clears 1, or, without an interval, when it
/// is more than this far from 1.
pub const SAME_WITHIN: f64 = 0.05;

/// Better / worse / same from a speed-up (see [`VerdictChange::direction`]).
pub(crate) fn direction_of(s: &Speedup) -> Direction {
    match s.ci95 {
        Some([lo, _]) if lo > 1.0 => Direction::Better,
        Some([_, hi]) if hi < 1.0 => Direction::Worse,
        Some(_) => Direction::Same,
        None if s.value > 1.0 + SAME_WITHIN => Direction::Better,
        None if s.value < 1.0 / (1.0 + SAME_WITHIN) => Direction::Worse,
        None => Direction::Same,
    }
}

/// What a side's verdict names, typed: a recording's verdict, a trace's top finding (`None`
/// when no rule fired) or a sweep's chosen setting. The JSON writes it as one string
/// (`input_bound`, `amp_unused`, `none`, `workers=4`), as before it was typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SideVerdict {
    Recording(VerdictId),
    TopFinding(Option<FindingId>),
    Setting(String),
}

impl SideVerdict {
    pub fn as_str(&self) -> &str {
        match self {
            SideVerdict::Recording(v) => v.as_str(),
            SideVerdict::TopFinding(Some(f)) => f.as_str(),
            SideVerdict::TopFinding(None) => "none",
            SideVerdict::Setting(s) => s,
        }
    }
}

impl std::fmt::Display for SideVerdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

impl Serialize for SideVerdict {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// The string alone does not say which input it came from (the comparison's `kind` does): a
/// verdict id reads as a recording's, else a finding id or `none` as a trace's, else a setting.
impl<'de> Deserialize<'de> for SideVerdict {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(
            if let Some(v) = VerdictId::ALL.iter().find(|v| v.as_str() == s) {
                SideVerdict::Recording(*v)
            } else if let Some(f) = FindingId::ALL.iter().find(|f| f.as_str() == s) {
                SideVerdict::TopFinding(Some(*f))
            } else if s == "none" {
                SideVerdict::TopFinding(None)
            } else {
                SideVerdict::Setting(s)
            },
        )
    }
}

/// Recording verdicts from worst to best (a bound job is worse than a balanced one).
pub(super) fn verdict_rank(v: &SideVerdict) -> Option<u8> {
    match v {
        SideVerdict::Recording(id) => match id {
            VerdictId::InputBound
            | VerdictId::HostBound
            | VerdictId::TransferBound
            | VerdictId::Throttled
            | VerdictId::LaunchBound
            | VerdictId::Idle => Some(0),
            VerdictId::ComputeBound => Some(1),
            VerdictId::Unknown => None,
        },
        SideVerdict::TopFinding(_) | SideVerdict::Setting(_) => None,
    }
}

/// The `--format json` document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub schema_version: u32,
    pub kind: InputKind,
    pub before: Side,
    pub after: Side,
    pub speedup: Option<Speedup>,
    pub changes: Vec<Change>,
    pub verdict: VerdictChange,
    /// Caveats (different GPUs, a proxy metric, an unsettled trial ...).
    pub notes: Vec<String>,
}

pub(super) fn change(
    metric: &str,
    label: &str,
    b: Option<f64>,
    a: Option<f64>,
    better: Better,
) -> Change {
    let delta_pct = match (b, a) {
        (Some(b), Some(a)) if b.abs() > 1e-12 => Some(round(100.0 * (a - b) / b.abs(), 1)),
        _ => None,
    };
    Change {
        metric: metric.into(),
        label: label.into(),
        before: b.map(|x| round(x, 3)),
        after: a.map(|x| round(x, 3)),
        delta_pct,
        better,
    }
}

/// Mean and standard error of the mean (`None` for the error with fewer than two values).
pub(super) fn mean_se(xs: &[f64]) -> Option<(f64, Option<f64>)> {
    if xs.is_empty() {
        return None;
    }
    let n = xs.len() as f64;
    let m = xs.iter().sum::<f64>() / n;
    if xs.len() < 2 {
        return Some((m, None));
    }
    let var = xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0);
    Some((m, Some((var / n).sqrt())))
}

pub(super) fn verdict_change(b: &Side, a: &Side, speedup: Option<&Speedup>) -> VerdictChange {
    let by_rank = || {
        let rb = b.verdict.as_ref().and_then(verdict_rank)?;
        let ra = a.verdict.as_ref().and_then(verdict_rank)?;
        Some(match ra.cmp(&rb) {
            std::cmp::Ordering::Greater => Direction::Better,
            std::cmp::Ordering::Less => Direction::Worse,
            std::cmp::Ordering::Equal => Direction::Same,
        })
    };
    VerdictChange {
        before: b.verdict.clone(),
        after: a.verdict.clone(),
        changed: b.verdict != a.verdict,
        direction: speedup.map(direction_of).or_else(by_rank),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn side_verdicts_are_one_string_in_the_json() {
        let cases = [
            (SideVerdict::Recording(VerdictId::InputBound), "input_bound"),
            (
                SideVerdict::TopFinding(Some(FindingId::AmpUnused)),
                "amp_unused",
            ),
            (SideVerdict::TopFinding(None), "none"),
            (
                SideVerdict::Setting("workers=4 pin=true".into()),
                "workers=4 pin=true",
            ),
        ];
        for (v, s) in cases {
            assert_eq!(serde_json::to_value(&v).unwrap(), s);
            assert_eq!(serde_json::from_value::<SideVerdict>(s.into()).unwrap(), v);
        }
    }

    #[test]
    fn deltas() {
        let c = change("x", "x", Some(50.0), Some(75.0), Better::Higher);
        assert_eq!(c.delta_pct, Some(50.0));
        let c = change("x", "x", Some(0.0), Some(75.0), Better::Higher);
        assert_eq!(c.delta_pct, None);
        let c = change("x", "x", None, Some(75.0), Better::Higher);
        assert_eq!(c.delta_pct, None);
    }
}
