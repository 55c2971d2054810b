//! `gpufeed compare BEFORE AFTER`: two recordings (or nvidia-smi/dcgmi logs), two PyTorch
//! profiler traces, or two sweep JSON files, side by side with the speed-up and the change of
//! verdict. `compare::files` reads and compares, `present::compare` renders; this module
//! checks the options and writes.
//!
//! Exit codes: 0; 2 for a bad option; 3 for a missing or unreadable input, or two inputs of
//! different kinds.

use crate::cli::{CompareArgs, GlobalOpts};
use crate::exit::Exit;
use crate::present;
use crate::present::OutputFormat;
use std::io::Write;

pub(crate) fn run(_global: &GlobalOpts, args: &CompareArgs) -> anyhow::Result<u8> {
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
    crate::outfile::refuse_shared(
        &[
            ("--html", args.html.as_deref()),
            ("--export-json", args.export_json.as_deref()),
        ],
        None,
        &[],
    )?;
    let c = crate::compare::files::build(&args.before, &args.after)?;
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
