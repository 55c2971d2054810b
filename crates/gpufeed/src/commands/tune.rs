//! `gpufeed tune -- CMD`: checks the arguments, runs [`crate::tune::knob_search`] and writes its
//! report (tune.json, `--export-json`, `--html`, stdout).

use crate::cli::{GlobalOpts, TuneArgs};
use crate::outfile::write_report;
use crate::present::OutputFormat;
use crate::tune::knob_search::{self, Setup};
use crate::tune::report::TuneReport;
use crate::tune::runner::Runner;
use std::path::Path;

/// tune.json in the output folder, and the files asked for.
fn write(args: &TuneArgs, dir: &Path, rep: &TuneReport) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(rep)?;
    write_report(&dir.join("tune.json"), json.clone())?;
    if let Some(p) = &args.export_json {
        write_report(p, json)?;
    }
    if let Some(p) = &args.html {
        write_report(p, html(rep))?;
    }
    Ok(())
}

fn html(rep: &TuneReport) -> String {
    let patch = rep
        .patch
        .as_ref()
        .and_then(|p| std::fs::read_to_string(p).ok());
    crate::present::tune::html(rep, patch.as_deref())
}

fn present(args: &TuneArgs, rep: &TuneReport, dir: &Path) -> anyhow::Result<()> {
    match args.trial.format {
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(rep)?),
        OutputFormat::Html => print!("{}", html(rep)),
        _ => print!("{}", crate::present::tune::text(rep)),
    }
    if !args.trial.quiet {
        eprintln!("gpufeed: recordings and tune.json in {}", dir.display());
    }
    Ok(())
}

/// Refuses (exit 2) two outputs at one path, the folder's tune.json and fix.patch included
/// (`--export-json` may be the folder's tune.json: the same bytes).
fn check_outputs(args: &TuneArgs) -> Result<(), crate::exit::Failure> {
    crate::outfile::refuse_shared(
        &[
            ("--export-json", args.export_json.as_deref()),
            ("--html", args.html.as_deref()),
        ],
        args.trial.output_dir.as_deref(),
        &[("tune.json", "--export-json"), ("fix.patch", "fix.patch")],
    )
}

pub(crate) fn run(global: &GlobalOpts, args: &TuneArgs) -> anyhow::Result<u8> {
    let trial = args.trial.config(global);
    let regex = trial.check(&args.command)?;
    check_outputs(args)?;
    let dir = trial.output_dir("gpufeed-tune")?;
    let runner = Runner::start(0, args.trial.quiet)?;
    let setup = Setup {
        command: args.command.clone(),
        budget: args.budget,
        allow_batch: args.allow_batch,
        cores: args.cores,
        final_pairs: args.final_pairs,
        trial,
        regex,
        dir: dir.clone(),
    };
    let (rep, code) = knob_search::tune(&setup, &runner, &mut |rep| write(args, &dir, rep))?;
    runner.pb.finish_and_clear();
    write(args, &dir, &rep)?;
    present(args, &rep, &dir)?;
    Ok(code)
}
