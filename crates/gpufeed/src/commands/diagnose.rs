//! `gpufeed diagnose`: a verdict with evidence and a fix, from recordings and existing logs.

use crate::cli::GlobalOpts;
use crate::diagnose::input::LogOptions;
use crate::diagnose::{self, DiagnoseError, InputFormat, ReportFormat};
use crate::exit::{self, Failure};
use crate::present::html::RecordingSeries;
use clap::Args;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

#[derive(Debug, Clone, Args)]
pub struct DiagnoseArgs {
    /// gpufeed recordings (.ndjson or .ndjson.zst), nvidia-smi CSV logs, or nvidia-smi/dcgmi dmon logs
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Report format (json: one object per file; several files give a JSON array)
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,
    /// Input format; auto detects it from the first lines
    #[arg(long, value_enum, default_value_t = InputFormat::Auto)]
    pub input_format: InputFormat,
    /// Field names of a header-less nvidia-smi CSV log, as given to --query-gpu
    #[arg(long, value_name = "FIELDS", value_delimiter = ',')]
    pub columns: Option<Vec<String>>,
    /// Seconds between polls, for logs without timestamps (nvidia-smi -l N, dmon -d N) [default: 1]
    #[arg(long, value_name = "SECONDS")]
    pub sample_interval: Option<f64>,
    /// Colour in text output: auto (when stdout is a terminal and NO_COLOR is unset), always, never
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
    /// Also write a self-contained HTML report (charts, findings and fixes) to FILE
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Also write the JSON report (as --format json prints it) to FILE
    #[arg(long, value_name = "FILE")]
    pub export_json: Option<PathBuf>,
    /// FILEs are one job's recordings from several nodes: a job verdict naming the starving and
    /// straggling nodes, and a per-node table (files are read one at a time)
    #[arg(long, conflicts_with = "html")]
    pub job: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

/// Turns a diagnose error into the input-error exit code with its one clear line.
pub fn input_failure(e: DiagnoseError) -> anyhow::Error {
    anyhow::Error::new(Failure::input(e.to_string()))
}

pub fn run(_global: &GlobalOpts, args: &DiagnoseArgs) -> anyhow::Result<u8> {
    if let Some(h) = &args.html {
        crate::outfile::refuse_same_as_input("--html", h, args.files.iter().map(|p| p.as_path()))?;
    }
    if let Some(i) = args.sample_interval {
        if !(i.is_finite() && i > 0.0 && i <= 86_400.0) {
            return Err(anyhow::Error::new(Failure::new(
                exit::USAGE,
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
            .map_err(input_failure)?;
        series.push(s.filter(|_| r.source.format == InputFormat::Recording.as_str()));
        reports.push(r);
    }
    if let Some(h) = &args.html {
        let pages: Vec<_> = reports
            .iter()
            .zip(series.iter().map(Option::as_ref))
            .collect();
        crate::present::html::diagnose_html(&pages)
            .and_then(|page| crate::present::html::write(h, &page))
            .map_err(|e| anyhow::Error::new(Failure::input(e.to_string())))?;
        eprintln!("gpufeed: wrote {}", h.display());
    }
    if let Some(p) = &args.export_json {
        let json = if reports.len() == 1 {
            serde_json::to_string_pretty(&reports[0])?
        } else {
            serde_json::to_string_pretty(&reports)?
        } + "\n";
        std::fs::write(p, json).map_err(|e| {
            anyhow::Error::new(Failure::input(format!("cannot write {}: {e}", p.display())))
        })?;
        eprintln!("gpufeed: wrote {}", p.display());
    }
    let out = match args.format {
        ReportFormat::Json if reports.len() > 1 => {
            let mut s = serde_json::to_string_pretty(&reports)?;
            s.push('\n');
            s
        }
        fmt => reports
            .iter()
            .map(|r| diagnose::render(r, fmt, color))
            .collect::<Vec<_>>()
            .join("\n"),
    };
    let mut stdout = std::io::stdout().lock();
    // A closed pipe (`| head`) is not an error worth a message.
    let _ = stdout.write_all(out.as_bytes());
    let _ = stdout.flush();
    Ok(exit::OK)
}

/// `--job`: each file is diagnosed on its own and only its summary kept, so memory does not grow
/// with the number of nodes beyond a few numbers per node.
fn run_job(args: &DiagnoseArgs, opts: &LogOptions) -> anyhow::Result<u8> {
    use crate::diagnose::job;
    let mut nodes = Vec::with_capacity(args.files.len());
    for f in &args.files {
        nodes.push(diagnose::diagnose_node(f, args.input_format, opts).map_err(input_failure)?);
    }
    let report = job::JobReport {
        schema_version: job::JOB_SCHEMA_VERSION,
        job: job::judge(&nodes),
        nodes,
    };
    let out = match args.format {
        ReportFormat::Json => serde_json::to_string_pretty(&report)? + "\n",
        ReportFormat::Markdown => job::markdown(&report),
        ReportFormat::Text => job::text(&report),
    };
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(out.as_bytes());
    let _ = stdout.flush();
    Ok(exit::OK)
}
