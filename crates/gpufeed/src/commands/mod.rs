//! One module per subcommand: each turns parsed arguments into work and a process exit code;
//! `trials` holds what `sweep` and `batch-size` share.

pub mod analyze;
pub mod batch_size;
pub mod bench;
pub mod compare;
pub mod completions;
pub mod diagnose;
pub mod doctor;
pub mod export;
pub mod man;
pub mod record;
pub mod serve;
pub mod sweep;
pub mod trials;
pub mod watch;

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

/// Writes generated text to stdout; a closed pipe (`| head`) is not an error.
pub(crate) fn print_stdout(bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut so = std::io::stdout().lock();
    match so.write_all(bytes).and_then(|()| so.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r,
    }
}
