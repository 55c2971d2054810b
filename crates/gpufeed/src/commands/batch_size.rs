//! `gpufeed batch-size`: checks the arguments, runs [`crate::tune::batch_search`] and writes its
//! report (batch-size.json, `--export-json`, stdout).

use crate::cli::{BatchSizeArgs, GlobalOpts};
use crate::exit::Failure;
use crate::present::OutputFormat;
use crate::tune::batch_plan::BatchReport;
use crate::tune::batch_search::{self, Setup};
use crate::tune::runner::Runner;

fn write_json(
    args: &BatchSizeArgs,
    dir: &std::path::Path,
    rep: &BatchReport,
) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(rep)?;
    let mut paths = vec![dir.join("batch-size.json")];
    paths.extend(args.export_json.clone());
    for p in paths {
        crate::outfile::write_report(&p, &json)?;
    }
    Ok(())
}

pub(crate) fn run(global: &GlobalOpts, args: &BatchSizeArgs) -> anyhow::Result<u8> {
    let setup = Setup {
        command: args.command.clone(),
        param: args.param.clone(),
        inject: args.inject.spec().map_err(Failure::from)?,
        start: args.start,
        max: args.max,
        mem_target: args.mem_target,
        target_batch: args.target_batch,
        trial: args.trial.config(global),
    };
    let regex = setup.check()?;
    let dir = setup.trial.output_dir("gpufeed-batch-size")?;
    let runner = Runner::start(0, args.trial.quiet)?;
    let out = batch_search::run(&setup, &regex, &dir, &runner, &mut |rep| {
        write_json(args, &dir, rep)
    })?;
    write_json(args, &dir, &out.report)?;
    match args.trial.format {
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&out.report)?),
        _ => print!("{}", crate::present::batch::text(&out.report)),
    }
    match out.fatal {
        Some(e) => Err(e),
        None => Ok(out.exit_code),
    }
}
