//! Presenter for `gpufeed doctor`: the checks grouped under their headings, a status tag per
//! check and the fix (or tip) underneath, from a [`Report`]; its JSON is serde's.

use crate::doctor::{Group, Report, Status};
use std::fmt::Write as _;

/// The tag printed before a check.
fn tag(s: Status) -> &'static str {
    match s {
        Status::Pass => "[ ok ]",
        Status::Warn => "[warn]",
        Status::Fail => "[FAIL]",
        Status::Skip => "[skip]",
    }
}

/// The heading a group of checks is printed under.
fn title(g: Group) -> &'static str {
    match g {
        Group::Driver => "Driver and CUDA",
        Group::Python => "Python and PyTorch",
        Group::Gpu => "GPU",
        Group::Host => "Host",
        Group::Data => "Data",
    }
}

/// The text report (`--format text`): grouped, a status tag per check, the fix underneath.
pub fn text(r: &Report) -> String {
    super::fmt::terminal_safe(r, false, text_raw)
}

fn text_raw(r: &Report) -> String {
    let mut out = String::new();
    let width = r.checks.iter().map(|c| c.id.len()).max().unwrap_or(0);
    let mut groups: Vec<Group> = r.checks.iter().map(|c| c.group).collect();
    groups.sort();
    groups.dedup();
    for g in groups {
        let _ = writeln!(out, "{}", title(g));
        for c in r.checks.iter().filter(|c| c.group == g) {
            let id = match c.gpu {
                Some(i) => format!("{} (GPU {i})", c.id),
                None => c.id.clone(),
            };
            let _ = writeln!(
                out,
                "  {} {:<w$}  {}",
                tag(c.status),
                id,
                c.summary,
                w = width + 8
            );
            if let Some(fix) = &c.fix {
                let label = if c.status == Status::Pass {
                    "tip"
                } else {
                    "fix"
                };
                let _ = writeln!(out, "         {label}: {fix}");
            }
        }
        out.push('\n');
    }
    let n = &r.counts;
    let _ = writeln!(
        out,
        "{} passed, {} warnings, {} failed, {} skipped",
        n.pass, n.warn, n.fail, n.skip
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::Check;

    #[test]
    fn groups_in_order_with_the_fix_underneath() {
        let r = Report::new(vec![
            Check::new("a", Group::Host, Status::Pass, "ok"),
            Check::new("b", Group::Host, Status::Fail, "bad").fix("do x"),
            Check::skip("c", Group::Gpu, "no GPU"),
        ]);
        let text = text(&r);
        assert!(text.contains("[FAIL] b"), "{text}");
        assert!(text.contains("fix: do x"), "{text}");
        assert!(text.find("GPU\n").unwrap() < text.find("Host\n").unwrap());
    }
}
