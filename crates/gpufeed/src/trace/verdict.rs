//! The verdict of `gpufeed analyze`: what holds one trace (or a set of ranks) back, in the same
//! `{id, confidence, summary}` shape as `gpufeed diagnose`'s verdict. A pure function of the
//! ranked findings and the GPU busy share.

use crate::finding::{Finding, FindingId, Severity};
use serde::{Deserialize, Serialize};

/// What holds a traced job back (closed set; the JSON strings are stable).
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
pub enum TraceVerdictId {
    /// The GPU is busy; the levers are on the GPU side.
    ComputeBound,
    /// The training loop waits for the DataLoader.
    InputBound,
    /// Host-device copies (pageable memory) hold the steps back.
    CopyBound,
    /// The GPU waits for the host to launch work (launch overhead, blocking syncs, idle gaps).
    LaunchBound,
    /// Collectives not overlapped by compute, or a straggling rank.
    CommBound,
    /// The trace cannot tell (no GPU events, too little).
    Unknown,
}

impl TraceVerdictId {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl std::fmt::Display for TraceVerdictId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `verdict` in `analyze --format json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceVerdict {
    pub id: TraceVerdictId,
    /// 0-1: how sure the evidence makes us.
    pub confidence: f64,
    /// One line for people.
    pub summary: String,
    /// Id of the finding the verdict rests on, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finding: Option<FindingId>,
}

/// GPU busy share of the steps from which a trace without findings is compute-bound.
pub(crate) const COMPUTE_BUSY_PCT: f64 = 50.0;

/// The bound a finding names, if any (`amp_unused` is a lever on a busy GPU, not a bound).
fn bound_of(id: FindingId) -> Option<TraceVerdictId> {
    Some(match id {
        FindingId::InputBound => TraceVerdictId::InputBound,
        FindingId::CommBound | FindingId::Straggler => TraceVerdictId::CommBound,
        FindingId::PageableMemcpy => TraceVerdictId::CopyBound,
        FindingId::LaunchBound | FindingId::SyncBound | FindingId::LowGpuUtil => {
            TraceVerdictId::LaunchBound
        }
        _ => return None,
    })
}

/// The verdict from the findings (ranked, most important first) and the GPU busy share.
pub(crate) fn decide(findings: &[Finding], gpu_busy_pct: Option<f64>) -> TraceVerdict {
    if let Some((f, id)) = findings
        .iter()
        .find_map(|f| bound_of(f.id).map(|id| (f, id)))
    {
        let confidence = match (f.severity, f.id) {
            // Idle GPU with no named cause: the host does not feed it, but how is not known.
            (_, FindingId::LowGpuUtil) => 0.5,
            (Severity::Critical, _) => 0.9,
            (Severity::Warning, _) => 0.75,
            (Severity::Info, _) => 0.6,
        };
        let why = match id {
            TraceVerdictId::InputBound => "the training loop waits for data",
            TraceVerdictId::CommBound => "communication holds the steps back",
            TraceVerdictId::CopyBound => "host-device copies hold the steps back",
            TraceVerdictId::LaunchBound if f.id == FindingId::LowGpuUtil => {
                "the GPU waits for the host to give it work (no one cause in the trace)"
            }
            _ => "the GPU waits for the host to launch work",
        };
        return TraceVerdict {
            id,
            confidence,
            summary: format!("{}: {why} (see {})", id.as_str(), f.id),
            finding: Some(f.id),
        };
    }
    match gpu_busy_pct {
        Some(b) if b >= COMPUTE_BUSY_PCT => TraceVerdict {
            id: TraceVerdictId::ComputeBound,
            confidence: (b / 100.0).clamp(0.5, 0.95),
            summary: format!(
                "compute_bound: the GPU runs kernels {b:.0}% of the steps and nothing else holds \
                 them back{}",
                if findings.iter().any(|f| f.id == FindingId::AmpUnused) {
                    "; the next lever is mixed precision (see amp_unused)"
                } else {
                    ""
                }
            ),
            finding: findings
                .iter()
                .find(|f| f.id == FindingId::AmpUnused)
                .map(|f| f.id),
        },
        Some(b) => TraceVerdict {
            id: TraceVerdictId::Unknown,
            confidence: 0.0,
            summary: format!(
                "unknown: the GPU runs kernels {b:.0}% of the steps and no rule names why"
            ),
            finding: None,
        },
        None => TraceVerdict {
            id: TraceVerdictId::Unknown,
            confidence: 0.0,
            summary: "unknown: no GPU kernels in this trace, so what holds the GPU back cannot \
                      be told"
                .into(),
            finding: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(id: FindingId, sev: Severity) -> Finding {
        Finding::new(id, sev, format!("{id} title"))
    }

    #[test]
    fn the_first_bound_finding_decides() {
        let v = decide(
            &[
                f(FindingId::AmpUnused, Severity::Warning),
                f(FindingId::InputBound, Severity::Critical),
            ],
            Some(40.0),
        );
        assert_eq!(v.id, TraceVerdictId::InputBound);
        assert_eq!(v.confidence, 0.9);
        assert_eq!(v.finding, Some(FindingId::InputBound));
        assert!(v.summary.contains("(see input_bound)"), "{}", v.summary);
        for (id, want) in [
            (FindingId::CommBound, TraceVerdictId::CommBound),
            (FindingId::Straggler, TraceVerdictId::CommBound),
            (FindingId::PageableMemcpy, TraceVerdictId::CopyBound),
            (FindingId::SyncBound, TraceVerdictId::LaunchBound),
            (FindingId::LaunchBound, TraceVerdictId::LaunchBound),
            (FindingId::LowGpuUtil, TraceVerdictId::LaunchBound),
        ] {
            assert_eq!(decide(&[f(id, Severity::Warning)], Some(30.0)).id, want);
        }
        assert_eq!(
            decide(&[f(FindingId::LowGpuUtil, Severity::Warning)], Some(7.0)).confidence,
            0.5
        );
    }

    #[test]
    fn no_bound_is_compute_bound_when_busy_else_unknown() {
        let v = decide(&[f(FindingId::AmpUnused, Severity::Warning)], Some(83.0));
        assert_eq!(v.id, TraceVerdictId::ComputeBound);
        assert!((v.confidence - 0.83).abs() < 1e-9);
        assert!(v.summary.contains("mixed precision"));
        assert_eq!(decide(&[], Some(20.0)).id, TraceVerdictId::Unknown);
        let v = decide(&[], None);
        assert_eq!((v.id, v.confidence), (TraceVerdictId::Unknown, 0.0));
        assert_eq!(
            serde_json::to_value(TraceVerdictId::CopyBound).unwrap(),
            "copy_bound"
        );
    }
}
