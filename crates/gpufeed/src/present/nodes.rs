//! Presenter for `gpufeed diagnose --job`: the job verdict and a table of nodes, as text and
//! Markdown, from a [`JobReport`]; its JSON is serde's.

use super::fmt::duration;
use crate::diagnose::nodes::{JobReport, JobSummary, NodeSummary};

fn role(job: &JobSummary, n: &NodeSummary) -> &'static str {
    if job.starving.contains(&n.recording) {
        "starving"
    } else if job.stragglers.contains(&n.recording) {
        "straggler"
    } else {
        ""
    }
}

/// Rows of the per-node table: node, recording, verdict, busy, GPUs, duration, top finding, role.
fn rows(r: &JobReport) -> Vec<[String; 8]> {
    r.nodes
        .iter()
        .map(|n| {
            [
                n.hostname.clone().unwrap_or_else(|| "-".into()),
                n.recording.clone(),
                n.verdict.id.to_string(),
                n.gpu_busy_pct.map_or("-".into(), |b| format!("{b:.0}%")),
                n.gpus.to_string(),
                duration(n.duration_s),
                n.top_finding.map_or("-".into(), |f| f.to_string()),
                role(&r.job, n).to_string(),
            ]
        })
        .collect()
}

const HEADS: [&str; 8] = [
    "NODE",
    "RECORDING",
    "VERDICT",
    "GPU BUSY",
    "GPUS",
    "DURATION",
    "TOP FINDING",
    "",
];

/// The text report, safe for a terminal ([`super::fmt::terminal_safe`]).
pub fn text(r: &JobReport) -> String {
    super::fmt::terminal_safe(r, false, text_raw)
}

fn text_raw(r: &JobReport) -> String {
    let j = &r.job;
    let list = |v: &[String]| {
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join(", ")
        }
    };
    let mut out = format!(
        "JOB VERDICT  {}\n  {}\n  starving:   {}\n  stragglers: {}\n\n",
        j.verdict.as_str(),
        j.summary,
        list(&j.starving),
        list(&j.stragglers),
    );
    let rows = rows(r);
    let mut w: Vec<usize> = HEADS.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (i, c) in row.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            s.push_str(&format!("{c:<width$}  ", width = w[i]));
        }
        s.trim_end().to_string() + "\n"
    };
    out.push_str(&line(HEADS.to_vec()));
    for row in &rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

/// The Markdown report, safe for a terminal ([`super::fmt::terminal_safe`]).
pub fn markdown(r: &JobReport) -> String {
    super::fmt::terminal_safe(r, false, markdown_raw)
}

fn markdown_raw(r: &JobReport) -> String {
    let j = &r.job;
    let mut out = format!(
        "## Job verdict: `{}`\n\n{}\n\n| {} |\n|{}\n",
        j.verdict.as_str(),
        super::fmt::md_prose(&j.summary),
        HEADS[..7].join(" | ") + " | role",
        "---|".repeat(8)
    );
    for row in rows(r) {
        let cells: Vec<String> = row.iter().map(|c| super::fmt::md_cell(c)).collect();
        out.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::nodes::tests::node;
    use crate::diagnose::nodes::{judge, JOB_SCHEMA_VERSION};

    #[test]
    fn table_has_a_row_per_node_and_marks_roles() {
        let nodes = vec![
            node("n1.ndjson", "compute_bound", Some(97.0)),
            node("n2.ndjson", "input_bound", Some(30.0)),
        ];
        let r = JobReport {
            schema_version: JOB_SCHEMA_VERSION,
            job: judge(&nodes),
            nodes,
        };
        let t = text(&r);
        assert!(t.starts_with("JOB VERDICT  input_bound\n"), "{t}");
        let row = t.lines().find(|l| l.starts_with("n2 ")).unwrap();
        assert!(
            row.contains("input_bound") && row.ends_with("starving"),
            "{row}"
        );
        assert_eq!(markdown(&r).matches("\n| n").count(), 2);
    }
}
