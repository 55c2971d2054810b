//! `gpufeed export --perfetto OUT.json RECORDING [--merge TRACE.json.gz]`.

use crate::cli::{ExportArgs, GlobalOpts};
use crate::exit::{self, Failure};
use crate::present::perfetto;

pub fn run(_global: &GlobalOpts, args: &ExportArgs) -> anyhow::Result<u8> {
    crate::outfile::refuse_same_as_input(
        "--perfetto",
        &args.perfetto,
        std::iter::once(args.recording.as_path()).chain(args.merge.as_deref()),
    )?;
    let st = perfetto::export(&args.recording, args.merge.as_deref(), &args.perfetto)
        .map_err(|e| Failure::input(e.to_string()))?;
    eprintln!(
        "gpufeed: wrote {} ({} counter events{}); open it in ui.perfetto.dev",
        args.perfetto.display(),
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
    Ok(exit::OK)
}
