//! `gpufeed export --perfetto OUT.json RECORDING [--merge TRACE.json.gz]` and
//! `gpufeed export --tensorboard DIR RECORDING`.

use crate::cli::{ExportArgs, GlobalOpts};
use crate::diagnose::input::InputFormat;
use crate::diagnose::input::LogOptions;
use crate::exit::{Exit, Failure};
use crate::present::perfetto;
use crate::present::tensorboard::TbSeries;
use crate::record::reader;
use crate::trace::merge::MergeTrace;
use std::path::Path;

pub(crate) fn run(_global: &GlobalOpts, args: &ExportArgs) -> anyhow::Result<u8> {
    crate::outfile::refuse_unseekable("the recording", &args.recording)?;
    if let Some(t) = &args.merge {
        crate::outfile::refuse_unseekable("--merge", t)?;
    }
    if let Some(out) = &args.perfetto {
        crate::outfile::refuse_same_as_input(
            "--perfetto",
            out,
            std::iter::once(args.recording.as_path()).chain(args.merge.as_deref()),
        )?;
    }
    if let Some(dir) = &args.tensorboard {
        crate::outfile::refuse_symlinked_tensorboard(dir)?;
    }
    crate::outfile::refuse_shared(
        &[
            ("--perfetto", args.perfetto.as_deref()),
            ("--tensorboard", args.tensorboard.as_deref()),
        ],
        None,
        &[],
    )?;
    // A file that is not a recording is refused from its first bytes, before anything is written.
    reader::read_header(&args.recording).map_err(|e| Failure::with(Exit::Input, e))?;
    if let Some(out) = &args.perfetto {
        perfetto(args, out)?;
    }
    if let Some(dir) = &args.tensorboard {
        let mut series = TbSeries::default();
        let report = crate::diagnose::diagnose_file_with(
            &args.recording,
            InputFormat::Recording,
            &LogOptions::default(),
            &mut series,
        )
        .map_err(super::diagnose_failure)?;
        let path = super::write_tensorboard(dir, &series, &report, true)?;
        eprintln!(
            "gpufeed: wrote {}; view it with tensorboard --logdir {}",
            path.display(),
            dir.display()
        );
    }
    Ok(Exit::Ok.code())
}

/// The Perfetto/Chrome trace, streamed from the recording (and the merged trace) to `out`.
fn perfetto(args: &ExportArgs, out: &Path) -> anyhow::Result<()> {
    let input = |e: String| anyhow::Error::new(Failure::input(e));
    // The trace goes through analyze's reader (gzip, a cut .gz, a BOM, non-UTF-8 names; a trace
    // without events refused as analyze refuses it), streamed in two passes: never held whole.
    let terr = |t: &std::path::Path, e: crate::trace::TraceError| {
        input(format!("cannot read the trace {}: {e}", t.display()))
    };
    let kineto = match args.merge.as_deref() {
        Some(t) => {
            let trace = MergeTrace::open(t).map_err(|e| terr(t, e))?;
            let head = trace.head().map_err(|e| terr(t, e))?;
            Some((trace, head))
        }
        None => None,
    };
    let mut trace_err = None;
    // The recording streams through: its counters are written as they are read, so memory stays
    // flat whatever its length. Written beside the output under a temporary name, then renamed:
    // a failed export leaves the output as it was, and a symlink there is replaced, not followed.
    let mut read_err = None;
    let mut stats = None;
    crate::outfile::write_atomic_with(out, |w| {
        let (comma, st) = match perfetto::write_head(w, kineto.as_ref().map(|(t, h)| (t, h)))? {
            Ok(x) => x,
            Err(e) => {
                trace_err = Some(e);
                return Err(std::io::Error::other("the trace could not be read again"));
            }
        };
        let mut counters = perfetto::CounterWriter::new(&mut *w, comma, st);
        if let Err(e) = reader::read_path(&args.recording, &mut counters) {
            read_err = Some(e);
            return Err(std::io::Error::other("the recording could not be read"));
        }
        stats = Some(counters.finish()?.1);
        Ok(())
    })
    .map_err(|e| match (read_err.take(), trace_err.take()) {
        (Some(r), _) => input(r.to_string()),
        (None, Some(t)) => terr(args.merge.as_deref().unwrap_or(std::path::Path::new("")), t),
        (None, None) => input(format!("cannot write {}: {e}", out.display())),
    })?;
    let st = stats.unwrap_or_default();
    eprintln!(
        "gpufeed: wrote {} ({} counter events{}); open it in ui.perfetto.dev",
        out.display(),
        st.counter_events,
        if args.merge.is_some() {
            format!(", {} trace events", st.trace_events)
        } else {
            String::new()
        }
    );
    for w in &st.trace_warnings {
        eprintln!("gpufeed: warning: the merged trace: {w}");
    }
    if let Some(w) = st.overlap_warning() {
        eprintln!("gpufeed: warning: {w}");
    }
    Ok(())
}
