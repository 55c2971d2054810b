//! `gpufeed analyze`: PyTorch profiler (Kineto) traces.
//!
//! `--format json` document (`schema_version` 1; see `trace::report::Report`):
//! - `truncated` (bool), `warnings` (strings), `step_source` (`profiler_step`, `optimizer_step`,
//!   `dataloader` or `whole_trace`), `tb_plugin_compatible` (bool: `steps` follow the TensorBoard
//!   plugin 0.4.3 exactly);
//! - `steps`: `[{step, start_us, kernel_us, memcpy_us, memset_us, communication_us, runtime_us,
//!   dataloader_us, cpu_op_us, other_us, total_us}]` of the first trace; `breakdown`: their average;
//! - `devices`: `[{device, name, compute_capability, busy_pct, kernel_us, kernels, streams: [{stream,
//!   ops, busy_us, host_wait_us, kernel_wait_us, other_us}]}]`;
//! - `findings`: the shared `Finding` objects, most important first;
//! - `ranks`: one line per trace (`rank`, `path`, `steps`, `step_us`, `communication_pct`,
//!   `gpu_busy_pct`); `traces`: every trace's full summary (copies, dataloader, sync, kernels,
//!   launch, communication, `tb_plugin_steps` when steps were inferred).
//!
//! Exit codes: 0 (also for a truncated trace with usable events, with a warning), 3 for a missing,
//! empty, event-less or non-trace input.

use crate::cli::GlobalOpts;
use crate::exit::Failure;
use crate::trace::{self, report, TraceError};
use clap::{Args, ValueEnum};
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum AnalyzeFormat {
    #[default]
    Text,
    Json,
    Markdown,
}

#[derive(Debug, Clone, Args)]
pub struct AnalyzeArgs {
    /// Trace files (.json or .json.gz), directories of per-rank traces, or - for stdin
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Output format
    #[arg(long, value_enum, default_value_t = AnalyzeFormat::Text)]
    pub format: AnalyzeFormat,
    /// Print the per-step breakdown table (text and markdown)
    #[arg(long)]
    pub steps: bool,
    /// List every evidence entry of each finding (text), not only the deciding ones
    #[arg(short, long)]
    pub verbose: bool,
    /// Also write a self-contained HTML report (per-step breakdown chart, findings) to FILE
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Also write the JSON report (as --format json prints it) to FILE
    #[arg(long, value_name = "FILE")]
    pub export_json: Option<PathBuf>,
}

fn input_error(e: TraceError) -> anyhow::Error {
    let hint = match &e {
        TraceError::Io { .. } => "check the path",
        TraceError::Empty | TraceError::NoEvents => {
            "export one with torch.profiler ... on_trace_ready=tensorboard_trace_handler(dir)"
        }
        TraceError::NotATrace(_) => "pass a .json or .json.gz file written by the PyTorch profiler",
        TraceError::EmptyDir(_) => "pass the directory tensorboard_trace_handler wrote to",
    };
    anyhow::Error::new(Failure::input(format!("{e}; {hint}")))
}

pub fn run(_global: &GlobalOpts, args: &AnalyzeArgs) -> anyhow::Result<u8> {
    let paths = trace::expand_paths(&args.paths).map_err(input_error)?;
    if let Some(h) = &args.html {
        crate::outfile::refuse_same_as_input("--html", h, paths.iter().map(|p| p.as_path()))?;
    }
    let mut traces = Vec::new();
    for (p, r) in paths.iter().zip(trace::analyze_many(&paths)) {
        match r {
            Ok(s) => traces.push(s),
            Err(e) => {
                if paths.len() == 1 {
                    return Err(input_error(e));
                }
                eprintln!("gpufeed: warning: skipping {}: {e}", p.display());
            }
        }
    }
    if traces.is_empty() {
        return Err(anyhow::Error::new(Failure::input(
            "none of the traces could be read; see the warnings above",
        )));
    }
    let rep = report::Report::new(traces);
    if let Some(h) = &args.html {
        crate::present::html::trace_page(&rep)
            .and_then(|page| crate::present::html::write(h, &page))
            .map_err(|e| anyhow::Error::new(Failure::input(e.to_string())))?;
        eprintln!("gpufeed: wrote {}", h.display());
    }
    if let Some(p) = &args.export_json {
        std::fs::write(p, serde_json::to_string_pretty(&rep)? + "\n").map_err(|e| {
            anyhow::Error::new(Failure::input(format!("cannot write {}: {e}", p.display())))
        })?;
        eprintln!("gpufeed: wrote {}", p.display());
    }
    let out = match args.format {
        AnalyzeFormat::Json => serde_json::to_string_pretty(&rep)? + "\n",
        AnalyzeFormat::Text => report::text_with(&rep, args.steps, args.verbose),
        AnalyzeFormat::Markdown => report::markdown(&rep, args.steps),
    };
    use std::io::Write;
    let mut so = std::io::stdout().lock();
    if let Err(e) = so.write_all(out.as_bytes()) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            return Err(e.into());
        }
    }
    if rep.truncated && args.format != AnalyzeFormat::Text {
        eprintln!("gpufeed: warning: truncated input: the figures cover only what was read");
    }
    Ok(crate::exit::OK)
}
