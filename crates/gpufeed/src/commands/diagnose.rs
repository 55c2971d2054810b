//! `gpufeed diagnose`: a verdict with evidence and a fix, from recordings and existing logs.

use crate::cli::{ColorChoice, DiagnoseArgs, GlobalOpts};
use crate::diagnose;
use crate::diagnose::input::LogOptions;
use crate::exit::{Exit, Failure};
use crate::present::html::RecordingSeries;
use crate::present::OutputFormat;
use std::io::{IsTerminal, Write};

/// Refuses (exit 2) an output that is an input, and `--html` and `--export-json` naming one file
/// (one would silently overwrite the other).
fn check_outputs(args: &DiagnoseArgs) -> Result<(), Failure> {
    let inputs = || args.files.iter().map(|p| p.as_path());
    if let Some(h) = &args.html {
        crate::outfile::refuse_same_as_input("--html", h, inputs())?;
    }
    if let Some(j) = &args.export_json {
        crate::outfile::refuse_same_as_input("--export-json", j, inputs())?;
    }
    crate::outfile::refuse_shared(
        &[
            ("--html", args.html.as_deref()),
            ("--export-json", args.export_json.as_deref()),
        ],
        None,
        &[],
    )
}

/// Turns a diagnose error into the input-error exit code with its one clear line.
pub(crate) fn run(_global: &GlobalOpts, args: &DiagnoseArgs) -> anyhow::Result<u8> {
    check_outputs(args)?;
    if let Some(i) = args.sample_interval {
        if !(i.is_finite() && i > 0.0 && i <= 86_400.0) {
            return Err(anyhow::Error::new(Failure::new(
                Exit::Usage,
                format!("--sample-interval must be a number of seconds above 0 and at most 86400, not {i}"),
            )));
        }
    }
    let opts = LogOptions {
        columns: args.columns.clone(),
        interval_s: args.sample_interval,
    };
    let color = match args.color {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => {
            std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none()
        }
    };
    if args.job {
        return run_job(args, &opts);
    }
    let mut reports = Vec::with_capacity(args.files.len());
    let mut series = Vec::with_capacity(args.files.len());
    for f in &args.files {
        // With --html, the chart series are read in the same pass as the diagnosis.
        let mut s = args.html.as_ref().map(|_| RecordingSeries::default());
        let r = diagnose::diagnose_file_with(f, args.input_format, &opts, &mut s)
            .map_err(super::diagnose_failure)?;
        series.push(s.filter(|_| r.source.format == diagnose::input::InputFormat::Recording));
        reports.push(r);
    }
    if let Some(h) = &args.html {
        let pages: Vec<_> = reports
            .iter()
            .zip(series.iter().map(Option::as_ref))
            .collect();
        let page = crate::present::html::diagnose_html(&pages)
            .map_err(|e| anyhow::Error::new(Failure::with(Exit::Input, e)))?;
        crate::outfile::write_report(h, page)?;
        eprintln!("gpufeed: wrote {}", h.display());
    }
    if let Some(p) = &args.export_json {
        let json = if reports.len() == 1 {
            serde_json::to_string_pretty(&reports[0])?
        } else {
            serde_json::to_string_pretty(&reports)?
        } + "\n";
        crate::outfile::write_report(p, json)?;
        eprintln!("gpufeed: wrote {}", p.display());
    }
    let out = match args.format {
        OutputFormat::Json if reports.len() > 1 => {
            let mut s = serde_json::to_string_pretty(&reports)?;
            s.push('\n');
            s
        }
        fmt => reports
            .iter()
            .map(|r| {
                crate::present::diagnose::render_with(
                    r,
                    fmt,
                    crate::present::diagnose::TextOptions {
                        color,
                        verbose: args.verbose,
                        after_summary: false,
                    },
                )
            })
            .collect::<Vec<_>>()
            .join("\n"),
    };
    let mut stdout = std::io::stdout().lock();
    // A closed pipe (`| head`) is not an error worth a message.
    let _ = stdout.write_all(out.as_bytes());
    let _ = stdout.flush();
    Ok(Exit::Ok.code())
}

/// `--job`: each file is diagnosed on its own and only its summary kept, so memory does not grow
/// with the number of nodes beyond a few numbers per node.
fn run_job(args: &DiagnoseArgs, opts: &LogOptions) -> anyhow::Result<u8> {
    use crate::diagnose::nodes;
    let mut nodes = Vec::with_capacity(args.files.len());
    for f in &args.files {
        nodes.push(
            diagnose::diagnose_node(f, args.input_format, opts).map_err(super::diagnose_failure)?,
        );
    }
    let report = nodes::JobReport {
        schema_version: nodes::JOB_SCHEMA_VERSION,
        job: nodes::judge(&nodes),
        nodes,
    };
    let out = match args.format {
        OutputFormat::Json => serde_json::to_string_pretty(&report)? + "\n",
        OutputFormat::Markdown => crate::present::nodes::markdown(&report),
        OutputFormat::Text | OutputFormat::Html => crate::present::nodes::text(&report),
    };
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(out.as_bytes());
    let _ = stdout.flush();
    Ok(Exit::Ok.code())
}
