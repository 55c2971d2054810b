//! The one `Finding` type shared by every judgement in gpufeed (`diagnose`, `run`, `analyze`).
//!
//! Ids are snake_case and stable (they are a public contract: scripts match on them).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How much a finding matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }
}

/// One diagnosis: what is wrong, the numbers it rests on, and what to change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// Stable snake_case id, e.g. `input_bound`, `pageable_memcpy`.
    pub id: String,
    pub severity: Severity,
    /// One line for people.
    pub title: String,
    /// The numbers the finding rests on; units live in the names (`_pct`, `_us`, `_bytes`).
    pub evidence: BTreeMap<String, serde_json::Value>,
    /// Concrete code or configuration to change.
    pub recommendation: String,
    /// Upper bound on the speed-up if the finding is fixed (e.g. 2.5 = 2.5x), where computable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_speedup: Option<f64>,
}

impl Finding {
    pub fn new(id: &str, severity: Severity, title: impl Into<String>) -> Self {
        Finding {
            id: id.to_string(),
            severity,
            title: title.into(),
            evidence: BTreeMap::new(),
            recommendation: String::new(),
            expected_speedup: None,
        }
    }

    /// Adds one piece of evidence (builder style).
    pub fn with(mut self, name: &str, value: impl Into<serde_json::Value>) -> Self {
        self.evidence.insert(name.to_string(), value.into());
        self
    }

    pub fn recommend(mut self, text: impl Into<String>) -> Self {
        self.recommendation = text.into();
        self
    }

    pub fn speedup(mut self, x: Option<f64>) -> Self {
        self.expected_speedup = x;
        self
    }
}

/// Sorts findings most severe first, then by expected speed-up (largest first), then by id.
pub fn rank(findings: &mut [Finding]) {
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

    #[test]
    fn ranking_puts_critical_and_big_gains_first() {
        let mut v = vec![
            Finding::new("b", Severity::Warning, "b").speedup(Some(1.2)),
            Finding::new("a", Severity::Critical, "a"),
            Finding::new("c", Severity::Warning, "c").speedup(Some(3.0)),
            Finding::new("d", Severity::Info, "d"),
        ];
        rank(&mut v);
        let ids: Vec<_> = v.iter().map(|f| f.id.as_str()).collect();
        assert_eq!(ids, ["a", "c", "b", "d"]);
    }

    #[test]
    fn serializes_snake_case_severity_and_skips_missing_gain() {
        let f = Finding::new("input_bound", Severity::Critical, "t").with("x_pct", 12.5);
        let s = serde_json::to_string(&f).unwrap();
        assert!(s.contains("\"severity\":\"critical\""));
        assert!(!s.contains("expected_speedup"));
        assert!(s.contains("\"x_pct\":12.5"));
    }
}
