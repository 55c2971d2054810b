//! One module per subcommand: each turns parsed arguments into work and a process exit code;
//! the work itself lives in the layers below (the trial runner `sweep`, `batch-size` and `tune`
//! share is `tune::trials`).

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
pub mod tune;
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

/// A file `diagnose` could not read: bad input (exit 3). Shared by `diagnose` and `compare`.
pub(crate) fn diagnose_failure(e: crate::diagnose::DiagnoseError) -> anyhow::Error {
    anyhow::Error::new(crate::exit::Failure::from(e))
}

/// Refuses (exit 2) a `--tensorboard DIR` that is a symlink: no output follows one.
pub(crate) fn refuse_symlinked_tensorboard(
    dir: &std::path::Path,
) -> Result<(), crate::exit::Failure> {
    if std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(crate::exit::Failure::new(
            crate::exit::Exit::Usage,
            format!(
                "--tensorboard {} is a symlink: give the real folder it points to, or another folder",
                dir.display()
            ),
        ));
    }
    Ok(())
}

/// `run --tensorboard DIR`, before the job starts (issue 39 item 10: a file there or a folder
/// that cannot be written was found out only after the job ended): DIR is no symlink, is a
/// folder or can be made one, and a file can be created in it. Exit 2 otherwise.
pub(crate) fn check_tensorboard_dir(dir: &std::path::Path) -> Result<(), crate::exit::Failure> {
    refuse_symlinked_tensorboard(dir)?;
    let bad = |why: String| {
        crate::exit::Failure::new(
            crate::exit::Exit::Usage,
            format!(
                "--tensorboard {}: {why}; choose another folder",
                dir.display()
            ),
        )
    };
    if std::fs::symlink_metadata(dir).is_ok_and(|m| !m.is_dir()) {
        return Err(bad("it is a file, not a folder".into()));
    }
    std::fs::create_dir_all(dir).map_err(|e| bad(format!("cannot create the folder ({e})")))?;
    tempfile::Builder::new()
        .prefix(".gpufeed-write-check-")
        .tempfile_in(dir)
        .map(drop)
        .map_err(|e| bad(format!("cannot write in it ({e})")))
}

/// Writes the event file of `series` and `report` into `dir` (created if absent) and returns
/// its path (`export --tensorboard`, `run --tensorboard`). `replace`: the same recording's file
/// is replaced (`export` again); else a name taken meanwhile gets a suffix (`run`: never
/// another run's scalars).
pub(crate) fn write_tensorboard(
    dir: &std::path::Path,
    series: &crate::present::tensorboard::TbSeries,
    report: &crate::diagnose::DiagnoseReport,
    replace: bool,
) -> Result<std::path::PathBuf, crate::exit::Failure> {
    refuse_symlinked_tensorboard(dir)?;
    std::fs::create_dir_all(dir).map_err(|e| {
        crate::exit::Failure::input(format!(
            "cannot create the TensorBoard directory {}: {e}",
            dir.display()
        ))
    })?;
    let path = dir.join(crate::present::tensorboard::file_name(series));
    let bytes = crate::present::tensorboard::event_file(series, report);
    if replace {
        crate::outfile::write_report(&path, bytes)?;
        return Ok(path);
    }
    let cannot = |e: &dyn std::fmt::Display| {
        crate::exit::Failure::input(format!("cannot write {}: {e}", path.display()))
    };
    let pending = crate::outfile::Pending::new(&path, crate::outfile::Clobber::Suffix)
        .map_err(|e| cannot(&e))?;
    {
        use std::io::Write;
        let mut f = pending.file();
        f.write_all(&bytes).map_err(|e| cannot(&e))?;
    }
    let (_, name) = pending.commit().map_err(|e| cannot(&e))?;
    Ok(name)
}

/// The step-marker socket: the path `--step-socket` names (a job already running was started
/// with it), else a private one for a job gpufeed starts. A `--step-socket` that cannot be bound
/// is an error; a private socket that cannot be opened is only a note (`note_unread`: what is
/// then missed; `None`: say nothing).
pub(crate) fn step_socket(
    given: Option<&std::path::Path>,
    note_unread: Option<&str>,
) -> Result<Option<std::sync::Arc<crate::sample::steps::StepSocket>>, crate::exit::Failure> {
    use crate::sample::steps::StepSocket;
    if let Some(p) = given {
        return StepSocket::bind_given(p)
            .map(|s| Some(std::sync::Arc::new(s)))
            .map_err(crate::exit::Failure::from);
    }
    Ok(match StepSocket::open() {
        Ok(s) => Some(std::sync::Arc::new(s)),
        Err(e) => {
            if let Some(what) = note_unread {
                eprintln!(
                    "gpufeed: note: no step-marker socket ({e}): step markers are not {what}"
                );
            }
            None
        }
    })
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
