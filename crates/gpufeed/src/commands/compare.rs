//! `gpufeed compare BEFORE AFTER`: two recordings (or nvidia-smi/dcgmi logs), two PyTorch
//! profiler traces, or two sweep JSON files, side by side with the speed-up and the change of
//! verdict. This module does the I/O; `compare` computes and `present::compare` renders.
//!
//! Exit codes: 0; 2 for a bad option; 3 for a missing or unreadable input, or two inputs of
//! different kinds.

use crate::cli::{CompareArgs, GlobalOpts};
use crate::compare::{self, Comparison, InputKind};
use crate::diagnose::input::InputFormat;
use crate::diagnose::{self, input::LogOptions};
use crate::exit::{Exit, Failure};
use crate::outfile::Output;
use crate::present;
use crate::present::OutputFormat;
use crate::trace;
use crate::tune::sweep::SweepReport;
use std::io::{Read, Write};
use std::path::Path;

fn input(msg: String) -> anyhow::Error {
    anyhow::Error::new(Failure::input(msg))
}

/// What kind of file this is, from its first 64 KiB (gunzipped).
pub(crate) fn detect(path: &Path) -> anyhow::Result<InputKind> {
    if path.as_os_str() == "-" {
        return Err(anyhow::Error::new(Failure::new(
            Exit::Usage,
            "compare reads two files; save the input to a file first",
        )));
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
pub(crate) fn classify(head: &str) -> InputKind {
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

fn read_sweep(path: &Path) -> anyhow::Result<SweepReport> {
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
) -> anyhow::Result<(trace::summary::TraceSummary, Vec<crate::finding::Finding>)> {
    let s = trace::analyze_path(path).map_err(|e| input(format!("{}: {e}", path.display())))?;
    let mut f = trace::rules::evaluate(&s);
    crate::finding::rank(&mut f);
    Ok((s, f))
}

pub fn build(before: &Path, after: &Path) -> anyhow::Result<Comparison> {
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
            compare::traces(&b, &bf, &a, &af)
        }
        InputKind::Sweep => {
            let b = read_sweep(before)?;
            let a = read_sweep(after)?;
            compare::sweeps(
                &before.display().to_string(),
                &b,
                &after.display().to_string(),
                &a,
            )
        }
        InputKind::Recording => {
            let d = |p: &Path| {
                diagnose::diagnose_file(p, InputFormat::Auto, &LogOptions::default())
                    .map_err(super::diagnose_failure)
            };
            compare::recordings(&d(before)?, &d(after)?)
        }
    })
}

pub fn run(_global: &GlobalOpts, args: &CompareArgs) -> anyhow::Result<u8> {
    crate::outfile::refuse_unseekable("the input", &args.before)?;
    crate::outfile::refuse_unseekable("the input", &args.after)?;
    for (flag, out) in [("--export-json", &args.export_json), ("--html", &args.html)] {
        if let Some(o) = out {
            crate::outfile::refuse_same_as_input(
                flag,
                o,
                [args.before.as_path(), args.after.as_path()],
            )?;
        }
    }
    let outputs: Vec<Output> = [("--html", &args.html), ("--export-json", &args.export_json)]
        .into_iter()
        .filter_map(|(o, p)| Some(Output::new(o, p.as_deref()?)))
        .collect();
    crate::outfile::refuse_shared_outputs(&outputs)?;
    let c = build(&args.before, &args.after)?;
    if let Some(p) = &args.export_json {
        crate::outfile::write_report(p, present::compare::json(&c))?;
        eprintln!("gpufeed: wrote {}", p.display());
    }
    if let Some(h) = &args.html {
        crate::outfile::write_report(h, present::compare::html(&c))?;
        eprintln!("gpufeed: wrote {}", h.display());
    }
    let out = match args.format {
        OutputFormat::Text => present::compare::text(&c),
        OutputFormat::Json => present::compare::json(&c),
        OutputFormat::Markdown => present::compare::markdown(&c),
        OutputFormat::Html => present::compare::html(&c),
    };
    let mut so = std::io::stdout().lock();
    if let Err(e) = so.write_all(out.as_bytes()) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            return Err(e.into());
        }
    }
    Ok(Exit::Ok.code())
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
