//! One module per subcommand: each turns parsed arguments into work and a process exit code;
//! the work itself lives in the layers below (the trial runner `sweep`, `batch-size` and `tune`
//! share is `tune::runner`).

pub(crate) mod analyze;
pub(crate) mod batch_size;
pub(crate) mod bench;
pub(crate) mod compare;
pub(crate) mod completions;
pub(crate) mod diagnose;
pub(crate) mod doctor;
pub(crate) mod export;
pub(crate) mod man;
pub(crate) mod record;
pub(crate) mod serve;
pub(crate) mod sweep;
pub(crate) mod tune;
pub(crate) mod watch;

use crate::cli::{Cli, Command};

/// Runs the parsed command line; returns the process exit code.
pub fn dispatch(cli: Cli) -> anyhow::Result<u8> {
    match cli.command {
        Command::Run(args) => record::run(&cli.global, &args),
        Command::Record(args) => record::record(&cli.global, &args),
        Command::Analyze(args) => analyze::run(&cli.global, &args),
        Command::Diagnose(args) => diagnose::run(&cli.global, &args),
        Command::Compare(args) => compare::run(&cli.global, &args),
        Command::Sweep(args) => sweep::run(&cli.global, &args),
        Command::Tune(args) => tune::run(&cli.global, &args),
        Command::BatchSize(args) => batch_size::run(&cli.global, &args),
        Command::Serve(args) => serve::run(&cli.global, &args),
        Command::Export(args) => export::run(&cli.global, &args),
        Command::Watch(args) => watch::run(&cli.global, &args),
        Command::Doctor(args) => doctor::run(&cli.global, &args),
        Command::Bench(args) => bench::run(&cli.global, &args),
        Command::Completions(args) => completions::run(&cli.global, &args),
        Command::Man(args) => man::run(&cli.global, &args),
    }
}

/// A file `diagnose` could not read: bad input (exit 3).
pub(crate) fn diagnose_failure(e: crate::diagnose::DiagnoseError) -> anyhow::Error {
    anyhow::Error::new(crate::exit::Failure::from(e))
}

/// Writes the event file of `series` and `report` into the `--tensorboard` folder `dir`.
pub(crate) fn write_tensorboard(
    dir: &std::path::Path,
    series: &crate::present::tensorboard::TbSeries,
    report: &crate::diagnose::DiagnoseReport,
    replace: bool,
) -> Result<std::path::PathBuf, crate::exit::Failure> {
    crate::outfile::write_into_tensorboard_dir(
        dir,
        &crate::present::tensorboard::file_name(series),
        &crate::present::tensorboard::event_file(series, report),
        replace,
    )
}
