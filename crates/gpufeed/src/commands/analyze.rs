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
//!   `gpu_busy_pct`); `traces`: the full summary (copies, dataloader, sync, kernels, launch,
//!   communication, `tb_plugin_steps` when steps were inferred) of the trace, or of the lowest
//!   rank when several traces are ranks of one job;
//! - `job` (ranks of one job only): `world_size`, `ranks`, `missing_ranks`, `median_step_us`,
//!   `stragglers` and `comm_bound` (rank numbers).
//!
//! Several traces are ranks of one job only when their `distributedInfo` says so (same world
//! size, distinct ranks); they are then summarised in parallel and merged. Other sets of traces
//! are analyzed one by one (JSON: an array of the documents above), and `gpufeed compare` is
//! suggested on stderr.
//!
//! Exit codes: 0 (also for a truncated trace with usable events, with a warning), 3 for a missing,
//! empty, event-less or non-trace input.

use crate::cli::{AnalyzeArgs, GlobalOpts};
use crate::exit::{Exit, Failure};
use crate::present::OutputFormat;
use crate::trace::{self, ranks, report};

pub(crate) fn run(_global: &GlobalOpts, args: &AnalyzeArgs) -> anyhow::Result<u8> {
    let paths = trace::expand_paths(&args.paths).map_err(ranks::input_error)?;
    if let Some(h) = &args.html {
        crate::outfile::refuse_same_as_input("--html", h, paths.iter().map(|p| p.as_path()))?;
    }
    if let Some(j) = &args.export_json {
        crate::outfile::refuse_same_as_input(
            "--export-json",
            j,
            paths.iter().map(|p| p.as_path()),
        )?;
    }
    crate::outfile::refuse_shared(
        &[
            ("--html", args.html.as_deref()),
            ("--export-json", args.export_json.as_deref()),
        ],
        None,
        &[],
    )?;
    match ranks::group(&paths)? {
        ranks::Grouped::One(r) => emit(args, &[*r]),
        ranks::Grouped::Unrelated { reports, why, n } => {
            eprintln!(
                "gpufeed: these {n} traces are not ranks of one job ({why}): each is analyzed on its \
                 own; to measure a change between two of them, run `gpufeed compare BEFORE AFTER`"
            );
            if args.html.is_some() {
                return Err(anyhow::Error::new(Failure::new(
                    Exit::Usage,
                    "--html takes one trace or the ranks of one job; run analyze --html on each trace",
                )));
            }
            emit(args, &reports)
        }
    }
}

/// Writes one report (a single trace or ranks of one job), or several unrelated traces' reports
/// (JSON: an array).
fn emit(args: &AnalyzeArgs, reports: &[report::Report]) -> anyhow::Result<u8> {
    if let (Some(h), [rep]) = (&args.html, reports) {
        let page = crate::present::html::trace_page(rep)
            .map_err(|e| anyhow::Error::new(Failure::with(Exit::Input, e)))?;
        crate::outfile::write_report(h, page)?;
        eprintln!("gpufeed: wrote {}", h.display());
    }
    if let Some(p) = &args.export_json {
        let json = match reports {
            [rep] => serde_json::to_string_pretty(rep)?,
            _ => serde_json::to_string_pretty(reports)?,
        };
        crate::outfile::write_report(p, json + "\n")?;
        eprintln!("gpufeed: wrote {}", p.display());
    }
    let one = |rep: &report::Report| -> anyhow::Result<String> {
        let job = rep
            .job
            .as_ref()
            .map(crate::present::trace::job_text)
            .unwrap_or_default();
        Ok(match args.format {
            OutputFormat::Json => serde_json::to_string_pretty(rep)? + "\n",
            OutputFormat::Text | OutputFormat::Html => {
                job + &crate::present::trace::text_with(rep, args.steps, args.verbose)
            }
            OutputFormat::Markdown => crate::present::trace::markdown(rep, args.steps) + &job,
        })
    };
    let out = match (args.format, reports) {
        (_, [rep]) => one(rep)?,
        (OutputFormat::Json, _) => serde_json::to_string_pretty(reports)? + "\n",
        _ => {
            let mut s = String::new();
            for rep in reports {
                let path = rep.traces.first().map(|t| t.path.as_str()).unwrap_or("");
                s.push_str(&match args.format {
                    OutputFormat::Markdown => format!("\n## {path}\n\n"),
                    _ => format!("\n===== {path} =====\n"),
                });
                s.push_str(&one(rep)?);
            }
            s
        }
    };
    use std::io::Write;
    let mut so = std::io::stdout().lock();
    if let Err(e) = so.write_all(out.as_bytes()) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            return Err(e.into());
        }
    }
    if reports.iter().any(|r| r.truncated) && args.format != OutputFormat::Text {
        eprintln!("gpufeed: warning: truncated input: the figures cover only what was read");
    }
    Ok(Exit::Ok.code())
}
