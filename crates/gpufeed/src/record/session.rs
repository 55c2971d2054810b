//! One recording session, the sequence `run`, `record` and every trial of `sweep`, `tune` and
//! `batch-size` share: check the output, prepare the recorder (the GPU opened, the file under a
//! temporary name), spawn the job or attach to a process, record, write what the overrides did,
//! finish. A fix to the sequence lands here once, for every command.

use super::recorder::{Prepared, RecordError, Recorder, RecorderConfig};
use crate::exit::{Exit, Failure};
use crate::inject::InjectReport;
use crate::job::{Job, JobError, SpawnOpts};
use crate::sample::event::{End, Line, OverridesLine};
use crate::sample::steps::StepSocket;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Checks a recording's output path before anything starts: a recording is a file, never a
/// folder, and never a device, FIFO or socket (`--force` would rename it over `/dev/null`).
/// Both are bad values (exit 2), as the README says.
pub(crate) fn check_output(flag: &str, output: &Path) -> Result<(), Failure> {
    if output.is_dir() {
        return Err(Failure::new(
            Exit::Usage,
            format!(
                "{flag} {} is a folder: a recording is a file; give a file name (e.g. {}/run.ndjson)",
                output.display(),
                output.display()
            ),
        ));
    }
    if crate::outfile::special(output) {
        return Err(Failure::new(
            Exit::Usage,
            format!(
                "{flag} {} is a device, FIFO or socket, not a file: a recording is written to a file; give a file name",
                output.display()
            ),
        ));
    }
    Ok(())
}

/// How the job is started.
pub(crate) enum Spawn<'a, S: AsRef<OsStr>> {
    /// `run`: with the terminal's stdin/stdout/stderr, in gpufeed's process group; its stdout
    /// to gpufeed's stderr when `stdout_to_stderr` (gpufeed's stdout is the report's).
    Terminal {
        argv: &'a [S],
        env: &'a [(String, String)],
        stdout_to_stderr: bool,
    },
    /// A trial: in a process group of its own, see [`Job::spawn_with`].
    Own {
        argv: &'a [String],
        opts: &'a SpawnOpts,
    },
}

/// A recording prepared and not yet started.
pub(crate) struct Session {
    prepared: Prepared,
}

impl Session {
    /// Opens the GPU side and creates the file under a temporary name.
    pub(crate) fn prepare(cfg: RecorderConfig) -> Result<Session, RecordError> {
        Ok(Session {
            prepared: Prepared::new(cfg)?,
        })
    }

    /// Why no GPU is recorded (`None`: one is).
    pub(crate) fn gpu_error(&self) -> Option<String> {
        let gpu = self.prepared.gpu();
        match &gpu.error {
            Some(e) => Some(e.clone()),
            None if gpu.gpus.is_empty() => Some("the NVIDIA driver reports no GPU".into()),
            None => None,
        }
    }

    /// The job's processes as the recorder sees them, for a signal handler installed before the
    /// job is spawned.
    pub(crate) fn tree_pids(&self) -> Arc<Mutex<Vec<u32>>> {
        self.prepared.tree_pids()
    }

    /// The step-marker socket whose steps are recorded, if any.
    pub(crate) fn steps(&self) -> Option<&Arc<StepSocket>> {
        self.prepared.steps()
    }

    /// Spawns the job and starts recording its process tree. A job that cannot start drops the
    /// recording, which has no name yet: nothing is left behind, and an existing file at the
    /// output (with `--force`) is untouched. A recording that cannot start does not stop the
    /// job: the caller gets the job and the recorder's error.
    pub(crate) fn spawn<S: AsRef<OsStr>>(
        self,
        how: Spawn<'_, S>,
    ) -> Result<(Job, Result<Recorder, RecordError>), JobError> {
        let (job, shown) = match how {
            Spawn::Terminal {
                argv,
                env,
                stdout_to_stderr,
            } => (
                Job::spawn_terminal(argv, env, stdout_to_stderr),
                shown(argv),
            ),
            Spawn::Own { argv, opts } => (Job::spawn_with(argv, opts), shown(argv)),
        };
        let job = job?;
        let pid = job.job_pid();
        if let Ok(mut p) = self.prepared.tree_pids().lock() {
            *p = vec![pid];
        }
        let recorder = self.prepared.start(Some(pid), Some(shown));
        Ok((job, recorder))
    }

    /// Starts recording the machine, following the process `pid` when given.
    pub(crate) fn attach(self, pid: Option<u32>) -> Result<Recorder, RecordError> {
        self.prepared.start(pid, None)
    }
}

/// The command as the recording shows it: text, bytes that are not UTF-8 as U+FFFD.
fn shown<S: AsRef<OsStr>>(argv: &[S]) -> Vec<String> {
    argv.iter()
        .map(|a| a.as_ref().to_string_lossy().into_owned())
        .collect()
}

/// Ends a recording: what the injected overrides did (when any were), then the `end` line.
/// Returns the recording's path.
pub(crate) fn finish(
    recorder: Recorder,
    overrides: Option<&InjectReport>,
    end: End,
) -> Result<PathBuf, RecordError> {
    if let Some(o) = overrides {
        recorder.write_line(Line::Overrides(OverridesLine {
            t_s: recorder.elapsed_s(),
            overrides: o.overrides.clone(),
            notes: o.notes.clone(),
            loader_notes: o.loader_notes.clone(),
        }));
    }
    recorder.finish(end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_or_a_device_is_no_recording() {
        let dir = tempfile::tempdir().unwrap();
        let e = check_output("--output", dir.path()).unwrap_err();
        assert!(e.to_string().contains("is a folder"), "{e}");
        let e = check_output("--output", Path::new("/dev/null")).unwrap_err();
        assert!(e.to_string().contains("device, FIFO or socket"), "{e}");
        check_output("--output", &dir.path().join("run.ndjson")).unwrap();
    }
}
