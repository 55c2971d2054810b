//! Reading the two files `gpufeed compare` is given: what kind each is (from its first bytes),
//! and the comparison of two of a kind. Errors are bad input (exit 3), or a bad option (exit 2)
//! for stdin.

use super::{Comparison, InputKind};
use crate::diagnose::input::{InputFormat, LogOptions};
use crate::exit::{Exit, Failure};
use crate::trace;
use crate::tune::sweep_report::SweepReport;
use std::io::Read;
use std::path::Path;

fn input(msg: String) -> Failure {
    Failure::input(msg)
}

/// What kind of file this is, from its first 64 KiB (gunzipped).
fn detect(path: &Path) -> Result<InputKind, Failure> {
    if path.as_os_str() == "-" {
        return Err(Failure::new(
            Exit::Usage,
            "compare reads two files; save the input to a file first",
        ));
    }
    let r = trace::open(path).map_err(|e| input(format!("{e}; check the path")))?;
    let mut head = Vec::with_capacity(1 << 16);
    r.take(1 << 16)
        .read_to_end(&mut head)
        .map_err(|e| input(format!("cannot read {}: {e}", path.display())))?;
    if head.iter().all(|b| b.is_ascii_whitespace()) {
        return Err(input(format!(
            "{} is empty: nothing to compare",
            path.display()
        )));
    }
    Ok(classify(&String::from_utf8_lossy(&head)))
}

/// Classifies the beginning of a file: a Kineto trace, a sweep report, else something
/// `diagnose` reads (a recording or a GPU log).
fn classify(head: &str) -> InputKind {
    let t = head.trim_start();
    let has = |k: &str| t.contains(k);
    if t.starts_with('{') {
        if has("\"traceEvents\"") || has("\"schemaVersion\"") || has("\"deviceProperties\"") {
            return InputKind::Trace;
        }
        if has("\"knobs\"") && !has("\"type\"") {
            return InputKind::Sweep;
        }
    } else if t.starts_with('[') && has("\"ph\"") {
        return InputKind::Trace;
    }
    InputKind::Recording
}

fn read_sweep(path: &Path) -> Result<SweepReport, Failure> {
    let f = std::fs::File::open(path)
        .map_err(|e| input(format!("cannot open {}: {e}", path.display())))?;
    serde_json::from_reader(std::io::BufReader::new(f)).map_err(|e| {
        input(format!(
            "{} is not a sweep report ({e}); pass the sweep.json that gpufeed sweep wrote",
            path.display()
        ))
    })
}

fn read_trace(
    path: &Path,
) -> Result<(trace::breakdown::TraceSummary, Vec<crate::finding::Finding>), Failure> {
    let s = trace::analyze_path(path).map_err(|e| input(format!("{}: {e}", path.display())))?;
    let mut f = trace::rules::evaluate(&s);
    crate::finding::rank(&mut f);
    Ok((s, f))
}

/// The comparison of two files of one kind.
pub(crate) fn build(before: &Path, after: &Path) -> Result<Comparison, Failure> {
    let (kb, ka) = (detect(before)?, detect(after)?);
    if kb != ka {
        return Err(input(format!(
            "{} is a {} and {} a {}: compare two of a kind (two recordings, two traces or two sweep.json files)",
            before.display(),
            kb.as_str(),
            after.display(),
            ka.as_str()
        )));
    }
    Ok(match kb {
        InputKind::Trace => {
            let (b, bf) = read_trace(before)?;
            let (a, af) = read_trace(after)?;
            super::traces(&b, &bf, &a, &af)
        }
        InputKind::Sweep => {
            let b = read_sweep(before)?;
            let a = read_sweep(after)?;
            super::sweeps(
                &before.display().to_string(),
                &b,
                &after.display().to_string(),
                &a,
            )
        }
        InputKind::Recording => {
            let d = |p: &Path| {
                crate::diagnose::diagnose_file(p, InputFormat::Auto, &LogOptions::default())
                    .map_err(Failure::from)
            };
            super::recordings(&d(before)?, &d(after)?)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_from_the_first_bytes() {
        assert_eq!(
            classify("{\"schemaVersion\": 1, \"traceEvents\": ["),
            InputKind::Trace
        );
        assert_eq!(
            classify("  {\"deviceProperties\": [], \"traceEvents\": []}"),
            InputKind::Trace
        );
        assert_eq!(
            classify("[{\"ph\":\"X\",\"name\":\"a\"}]"),
            InputKind::Trace
        );
        assert_eq!(
            classify("{\n  \"schema_version\": 1,\n  \"command\": [\"python\"],\n  \"knobs\": ["),
            InputKind::Sweep
        );
        assert_eq!(
            classify("{\"type\":\"header\",\"schema_version\":1}\n{\"type\":\"gpu\"}"),
            InputKind::Recording
        );
        assert_eq!(
            classify("timestamp, index, utilization.gpu [%]\n"),
            InputKind::Recording
        );
    }
}
