//! One job over several nodes: each node's recording is diagnosed on its own and kept only as a
//! [`NodeSummary`] (a few numbers), so memory stays flat in the number of nodes; [`judge`] then
//! names the nodes that hold the job back.
//!
//! - **starving**: a node whose verdict is `input_bound` (its GPUs wait for data; in synchronous
//!   training every other node then waits for it at the next collective);
//! - **straggler**: a node that is not starving but whose GPUs are markedly less busy than the
//!   job's median node (at least [`STRAGGLER_GAP_PCT`] points below it), or whose verdict is
//!   `throttled` or `transfer_bound` while the median node's is not: its steps take longer.
//!
//! The job verdict ([`JobVerdict`]) is `input_bound` when a node starves, `straggler` when one
//! straggles, `balanced` when the nodes agree (then `node_verdict` is their common verdict), and
//! `unknown` when no node had GPU utilization.

use super::verdict::VerdictId;
use super::DiagnoseReport;
use crate::finding::FindingId;
use crate::units::plural;
use serde::{Deserialize, Serialize};

/// A node is a straggler when its GPU busy percentage is this many points below the median node.
pub const STRAGGLER_GAP_PCT: f64 = 15.0;

/// Version of the `--job` JSON document.
pub const JOB_SCHEMA_VERSION: u32 = 1;

/// What is kept of one node's diagnosis.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeSummary {
    /// The recording's path as given.
    pub recording: String,
    /// From the recording's header; `None` for logs without one.
    pub hostname: Option<String>,
    /// The node's verdict: the same `{id, confidence, summary}` object as `diagnose`'s.
    pub verdict: NodeVerdict,
    /// The bare verdict id, as `verdict` was before 0.2 (kept one release; use `verdict.id`).
    pub verdict_id: VerdictId,
    pub confidence: f64,
    /// Mean GPU busy percentage over the node's GPUs.
    pub gpu_busy_pct: Option<f64>,
    pub gpus: usize,
    pub duration_s: f64,
    /// The id of the node's most important finding.
    pub top_finding: Option<FindingId>,
}

/// A node's verdict, in the shape of [`super::verdict::Verdict`]'s first three fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeVerdict {
    pub id: VerdictId,
    pub confidence: f64,
    pub summary: String,
}

impl NodeSummary {
    pub fn new(recording: &str, hostname: Option<String>, r: &DiagnoseReport) -> NodeSummary {
        NodeSummary {
            recording: recording.to_string(),
            hostname,
            verdict: NodeVerdict {
                id: r.verdict.id,
                confidence: r.verdict.confidence,
                summary: r.verdict.summary.clone(),
            },
            verdict_id: r.verdict.id,
            confidence: r.verdict.confidence,
            gpu_busy_pct: r
                .verdict
                .gpu_busy_fraction
                .map(|b| (b * 1000.0).round() / 10.0),
            gpus: r.gpus.len(),
            duration_s: r.duration_s,
            top_finding: r.findings.first().map(|f| f.id),
        }
    }

    /// The hostname, else the recording's path.
    pub fn name(&self) -> &str {
        self.hostname.as_deref().unwrap_or(&self.recording)
    }
}

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
pub enum JobVerdict {
    /// At least one node starves for data.
    InputBound,
    /// No node starves, at least one is slower than the rest.
    Straggler,
    /// The nodes agree; see `node_verdict`.
    Balanced,
    /// No node had GPU utilization to judge.
    Unknown,
}

impl JobVerdict {
    /// The wire name (the JSON's).
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobSummary {
    pub verdict: JobVerdict,
    /// One line for people, naming the nodes.
    pub summary: String,
    /// Recording paths of the starving nodes.
    pub starving: Vec<String>,
    /// Recording paths of the straggling nodes.
    pub stragglers: Vec<String>,
    /// The most common node verdict.
    pub node_verdict: Option<VerdictId>,
    /// GPU busy percentage of the median node.
    pub median_gpu_busy_pct: Option<f64>,
}

/// The `--job` report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobReport {
    pub schema_version: u32,
    pub nodes: Vec<NodeSummary>,
    pub job: JobSummary,
}

fn names(nodes: &[&NodeSummary]) -> String {
    let v: Vec<&str> = nodes.iter().map(|n| n.name()).collect();
    match v.len() {
        0 => String::new(),
        1 => v[0].to_string(),
        _ => format!("{} and {}", v[..v.len() - 1].join(", "), v[v.len() - 1]),
    }
}

/// The job verdict over the nodes' summaries (pure).
pub fn judge(nodes: &[NodeSummary]) -> JobSummary {
    let med = crate::stats::median(
        &mut nodes
            .iter()
            .filter_map(|n| n.gpu_busy_pct)
            .collect::<Vec<_>>(),
    );
    let mut counts: Vec<(VerdictId, usize)> = Vec::new();
    for n in nodes {
        match counts.iter_mut().find(|c| c.0 == n.verdict.id) {
            Some(c) => c.1 += 1,
            None => counts.push((n.verdict.id, 1)),
        }
    }
    // Most common; ties go to the first seen.
    let common = counts
        .iter()
        .fold(None::<(VerdictId, usize)>, |best, c| match best {
            Some(b) if b.1 >= c.1 => Some(b),
            _ => Some(*c),
        })
        .map(|c| c.0);
    let starving: Vec<&NodeSummary> = nodes
        .iter()
        .filter(|n| n.verdict.id == VerdictId::InputBound)
        .collect();
    let slow_verdict = |v: VerdictId| matches!(v, VerdictId::Throttled | VerdictId::TransferBound);
    let stragglers: Vec<&NodeSummary> = nodes
        .iter()
        .filter(|n| n.verdict.id != VerdictId::InputBound)
        .filter(|n| {
            let gap = n
                .gpu_busy_pct
                .zip(med)
                .is_some_and(|(b, m)| m - b >= STRAGGLER_GAP_PCT);
            let slow = slow_verdict(n.verdict.id)
                && nodes.len() > 1
                && common.is_some_and(|c| !slow_verdict(c));
            gap || slow
        })
        .collect();
    let total = nodes.len();
    let med_txt = med.map_or(String::new(), |m| format!(" (median node {m:.0}% busy)"));
    let (verdict, summary) = if !starving.is_empty() {
        let mut s = format!(
            "{} of {} starve{} for data: {}{med_txt}",
            plural(starving.len(), "node", "nodes"),
            total,
            if starving.len() == 1 { "s" } else { "" },
            names(&starving),
        );
        if starving.len() < total {
            s.push_str("; in synchronous training the other nodes wait for them");
        }
        if !stragglers.is_empty() {
            s.push_str(&format!("; also straggling: {}", names(&stragglers)));
        }
        (JobVerdict::InputBound, s)
    } else if !stragglers.is_empty() {
        let detail = stragglers
            .iter()
            .map(|n| {
                let busy = n
                    .gpu_busy_pct
                    .map_or("-".into(), |b| format!("{b:.0}% busy"));
                format!("{} ({busy}, {})", n.name(), n.verdict.id)
            })
            .collect::<Vec<_>>()
            .join(", ");
        (
            JobVerdict::Straggler,
            format!(
                "{} of {} slower than the rest: {detail}{med_txt}",
                plural(stragglers.len(), "node is", "nodes are"),
                total
            ),
        )
    } else if med.is_none() {
        (
            JobVerdict::Unknown,
            "No node's recording has GPU utilization: nothing to compare the nodes by; record \
             with `gpufeed record` on each node"
                .to_string(),
        )
    } else {
        (
            JobVerdict::Balanced,
            format!(
                "The {total} nodes agree: {}{med_txt}",
                common.unwrap_or(VerdictId::Unknown)
            ),
        )
    };
    JobSummary {
        verdict,
        summary,
        starving: starving.iter().map(|n| n.recording.clone()).collect(),
        stragglers: stragglers.iter().map(|n| n.recording.clone()).collect(),
        node_verdict: common,
        median_gpu_busy_pct: med,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn node(path: &str, verdict: &str, busy: Option<f64>) -> NodeSummary {
        let verdict = *VerdictId::ALL
            .iter()
            .find(|v| v.as_str() == verdict)
            .unwrap();
        NodeSummary {
            recording: path.into(),
            hostname: Some(path.trim_end_matches(".ndjson").into()),
            verdict: NodeVerdict {
                id: verdict,
                confidence: 0.9,
                summary: String::new(),
            },
            verdict_id: verdict,
            confidence: 0.9,
            gpu_busy_pct: busy,
            gpus: 8,
            duration_s: 600.0,
            top_finding: None,
        }
    }

    #[test]
    fn a_starving_node_is_named_and_the_job_is_input_bound() {
        let nodes = vec![
            node("n1.ndjson", "compute_bound", Some(97.0)),
            node("n2.ndjson", "compute_bound", Some(96.0)),
            node("n3.ndjson", "input_bound", Some(30.0)),
            node("n4.ndjson", "compute_bound", Some(98.0)),
        ];
        let j = judge(&nodes);
        assert_eq!(j.verdict, JobVerdict::InputBound);
        assert_eq!(j.starving, vec!["n3.ndjson"]);
        assert!(j.stragglers.is_empty(), "{j:?}");
        assert!(
            j.summary.contains("1 node of 4 starves for data: n3"),
            "{}",
            j.summary
        );
        assert_eq!(j.node_verdict, Some(VerdictId::ComputeBound));
    }

    #[test]
    fn a_slow_node_without_starvation_is_a_straggler() {
        let nodes = vec![
            node("a", "compute_bound", Some(97.0)),
            node("b", "compute_bound", Some(70.0)),
            node("c", "throttled", Some(95.0)),
            node("d", "compute_bound", Some(96.0)),
        ];
        let j = judge(&nodes);
        assert_eq!(j.verdict, JobVerdict::Straggler);
        assert_eq!(j.stragglers, vec!["b", "c"]);
        assert!(j.summary.contains("2 nodes are"), "{}", j.summary);
    }

    #[test]
    fn alike_nodes_are_balanced_and_no_data_is_unknown() {
        let j = judge(&[
            node("a", "compute_bound", Some(97.0)),
            node("b", "compute_bound", Some(90.0)),
        ]);
        assert_eq!(j.verdict, JobVerdict::Balanced);
        assert!(j.starving.is_empty() && j.stragglers.is_empty());
        // A job where every node is throttled has no straggler: they are alike.
        let j = judge(&[
            node("a", "throttled", Some(97.0)),
            node("b", "throttled", Some(96.0)),
        ]);
        assert_eq!(j.verdict, JobVerdict::Balanced);
        let j = judge(&[node("a", "unknown", None), node("b", "unknown", None)]);
        assert_eq!(j.verdict, JobVerdict::Unknown);
    }
}
