//! `gpufeed sweep`: checks the arguments, runs [`crate::tune::sweep_search`] over every combination
//! of knob values and writes its report (sweep.json, sweep.svg, the `--export-*` files, stdout).

use crate::cli::{GlobalOpts, SweepArgs};
use crate::exit::Failure;
use crate::present::OutputFormat;
use crate::tune::runner::Runner;
use crate::tune::sweep_report::SweepReport;
use crate::tune::sweep_search::{self, Setup};
use std::path::{Path, PathBuf};

/// Refuses (exit 2) two outputs at one path, the folder's sweep.json and sweep.svg included
/// (each may share its path with the option that writes the same bytes).
fn check_outputs(args: &SweepArgs) -> Result<(), Failure> {
    crate::outfile::refuse_shared(
        &[
            ("--export-json", args.export_json.as_deref()),
            ("--export-csv", args.export_csv.as_deref()),
            ("--export-markdown", args.export_markdown.as_deref()),
            ("--export-svg", args.export_svg.as_deref()),
            ("--html", args.html.as_deref()),
        ],
        args.trial.output_dir.as_deref(),
        &[
            ("sweep.json", "--export-json"),
            ("sweep.svg", "--export-svg"),
        ],
    )
}

fn write_reports(args: &SweepArgs, dir: &Path, rep: &SweepReport) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(rep)?;
    let mut writes: Vec<(PathBuf, String)> = vec![(dir.join("sweep.json"), json.clone())];
    if let Some(p) = &args.export_json {
        writes.push((p.clone(), json));
    }
    if let Some(p) = &args.export_csv {
        writes.push((p.clone(), crate::present::sweep::csv(rep)));
    }
    if let Some(p) = &args.export_markdown {
        writes.push((p.clone(), crate::present::sweep::markdown(rep)));
    }
    if let Some(svg) = crate::present::sweep_chart::svg(rep) {
        writes.push((dir.join("sweep.svg"), svg.clone()));
        if let Some(p) = &args.export_svg {
            writes.push((p.clone(), svg));
        }
    }
    if let Some(p) = &args.html {
        let page = crate::present::sweep::html(rep)
            .map_err(|e| Failure::input(format!("cannot build the HTML page: {e}")))?;
        writes.push((p.clone(), page));
    }
    for (p, text) in writes {
        crate::outfile::write_report(&p, text)?;
    }
    Ok(())
}

/// The report on stdout in the chosen format, and where the files are.
fn present(args: &SweepArgs, rep: &SweepReport, dir: &Path) -> anyhow::Result<()> {
    match args.trial.format {
        OutputFormat::Text | OutputFormat::Html => print!("{}", crate::present::sweep::text(rep)),
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(rep)?),
        OutputFormat::Markdown => print!("{}", crate::present::sweep::markdown(rep)),
    }
    if !args.trial.quiet {
        eprintln!("gpufeed: recordings and sweep.json in {}", dir.display());
    }
    Ok(())
}

pub(crate) fn run(global: &GlobalOpts, args: &SweepArgs) -> anyhow::Result<u8> {
    let setup = Setup {
        command: args.command.clone(),
        lists: args.lists.clone(),
        env: args.env.clone(),
        inject: args.inject.spec().map_err(Failure::from)?,
        retries: args.retries,
        trial: args.trial.config(global),
    };
    let plan = sweep_search::plan(&setup)?;
    check_outputs(args)?;
    let dir = setup.trial.output_dir("gpufeed-sweep")?;
    let runner = Runner::start(plan.trials() as u64, args.trial.quiet)?;
    let out = sweep_search::run(&setup, &plan, &dir, &runner, &mut |rep| {
        write_reports(args, &dir, rep)
    })?;
    write_reports(args, &dir, &out.report)?;
    present(args, &out.report, &dir)?;
    match out.fatal {
        Some(e) => Err(e),
        None => Ok(sweep_search::exit_code(&out.report)),
    }
}
