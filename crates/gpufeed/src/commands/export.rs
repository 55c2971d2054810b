//! `gpufeed export --perfetto OUT.json RECORDING [--merge TRACE.json.gz]`.

use crate::cli::GlobalOpts;
use crate::exit::{self, Failure};
use crate::present::perfetto;
use crate::record::reader;
use clap::Args;
use serde_json::Value;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Args)]
pub struct ExportArgs {
    /// Write a Chrome trace JSON (open it in ui.perfetto.dev) with counter tracks: GPU
    /// utilization, memory, PCIe, CPU per core, CPU per job process
    #[arg(long, value_name = "OUT.json", required = true)]
    pub perfetto: PathBuf,
    /// Merge a PyTorch profiler (Kineto) trace, on one time base (Unix epoch microseconds)
    #[arg(long, value_name = "TRACE.json[.gz]")]
    pub merge: Option<PathBuf>,
    /// The gpufeed recording (.ndjson or .ndjson.zst)
    #[arg(value_name = "RECORDING")]
    pub recording: PathBuf,
}

/// Reads a Kineto trace to merge (it is held whole: traces are read whole by every viewer too).
fn read_kineto(t: &Path) -> Result<Value, String> {
    let terr = |detail: String| format!("cannot read the trace {}: {detail}", t.display());
    let r = crate::trace::open(t).map_err(|e| terr(e.to_string()))?;
    let v: Value = serde_json::from_reader(std::io::BufReader::new(r))
        .map_err(|e| terr(format!("not a JSON trace: {e}")))?;
    if !v.get("traceEvents").is_some_and(Value::is_array) {
        return Err(terr(
            "no traceEvents list: not a Chrome/Kineto trace".into(),
        ));
    }
    Ok(v)
}

pub fn run(_global: &GlobalOpts, args: &ExportArgs) -> anyhow::Result<u8> {
    crate::outfile::refuse_same_as_input(
        "--perfetto",
        &args.perfetto,
        std::iter::once(args.recording.as_path()).chain(args.merge.as_deref()),
    )?;
    let input = |e: String| anyhow::Error::new(Failure::input(e));
    // A file that is not a recording is refused from its first bytes, before anything is written.
    reader::read_header(&args.recording).map_err(|e| input(e.to_string()))?;
    let kineto = args
        .merge
        .as_deref()
        .map(read_kineto)
        .transpose()
        .map_err(input)?;
    // The recording streams through: its counters are written as they are read, so memory stays
    // flat whatever its length. Written beside the output under a temporary name, then renamed:
    // a failed export leaves the output as it was, and a symlink there is replaced, not followed.
    let mut read_err = None;
    let mut stats = None;
    crate::outfile::write_atomic_with(&args.perfetto, |w| {
        let (comma, st) = perfetto::write_head(w, kineto)?;
        let mut counters = perfetto::CounterWriter::new(&mut *w, comma, st);
        if let Err(e) = reader::read_path(&args.recording, &mut counters) {
            read_err = Some(e);
            return Err(std::io::Error::other("the recording could not be read"));
        }
        stats = Some(counters.finish()?.1);
        Ok(())
    })
    .map_err(|e| match read_err.take() {
        Some(r) => input(r.to_string()),
        None => input(format!("cannot write {}: {e}", args.perfetto.display())),
    })?;
    let st = stats.unwrap_or_default();
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
    if let Some(w) = st.overlap_warning() {
        eprintln!("gpufeed: warning: {w}");
    }
    Ok(exit::OK)
}
