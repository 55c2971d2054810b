//! Running a probe command with a timeout.
//!
//! The child gets its own process group, so a timeout kills everything it started (a shell
//! script's `sleep` included): otherwise a grandchild could keep the output pipe open and the
//! reader would wait for it.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub(crate) enum RunError {
    #[error("{program} not found")]
    NotFound { program: String },
    #[error("{program} could not be started: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("{program} did not finish within {timeout_s:.0} s and was killed")]
    Timeout { program: String, timeout_s: f64 },
}

/// What a finished command printed.
#[derive(Debug, Clone)]
pub(crate) struct Output {
    pub status_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `program args…` with stdin closed; kills its process group after `timeout`.
pub(crate) fn run(program: &Path, args: &[&str], timeout: Duration) -> Result<Output, RunError> {
    let name = program.display().to_string();
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => RunError::NotFound {
                program: name.clone(),
            },
            _ => RunError::Spawn {
                program: name.clone(),
                source: e,
            },
        })?;
    let (tx, rx) = mpsc::channel();
    for (which, pipe) in [
        (
            0,
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        ),
        (
            1,
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        ),
    ] {
        if let Some(mut p) = pipe {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                // Cap what is kept: a probe never needs more than a few KB.
                let _ = p.by_ref().take(1 << 20).read_to_end(&mut buf);
                let _ = std::io::copy(&mut p, &mut std::io::sink());
                let _ = tx.send((which, buf));
            });
        }
    }
    drop(tx);
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) if Instant::now() >= deadline => break None,
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(_) => break None,
        }
    };
    let Some(status) = status else {
        // SAFETY: kill(2) on the child's own process group (its pid, as set by process_group(0)).
        unsafe {
            libc::kill(-(child.id() as i32), libc::SIGKILL);
        }
        let _ = child.kill();
        let _ = child.wait();
        return Err(RunError::Timeout {
            program: name,
            timeout_s: timeout.as_secs_f64(),
        });
    };
    // The child has exited; a grandchild may still hold the pipes: wait briefly, then give up.
    let mut out = (Vec::new(), Vec::new());
    let grace = Instant::now() + Duration::from_millis(500);
    for _ in 0..2 {
        let left = grace.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((0, b)) => out.0 = b,
            Ok((_, b)) => out.1 = b,
            Err(_) => break,
        }
    }
    Ok(Output {
        status_code: status.code(),
        stdout: String::from_utf8_lossy(&out.0).into_owned(),
        stderr: String::from_utf8_lossy(&out.1).into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captures_output_and_code() {
        let o = run(
            Path::new("sh"),
            &["-c", "echo out; echo err >&2; exit 3"],
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(o.stdout, "out\n");
        assert_eq!(o.stderr, "err\n");
        assert_eq!(o.status_code, Some(3));
    }

    #[test]
    fn kills_a_hanging_command_and_its_children() {
        let t = Instant::now();
        let e = run(
            Path::new("sh"),
            &["-c", "sleep 30; echo never"],
            Duration::from_millis(300),
        )
        .unwrap_err();
        assert!(matches!(e, RunError::Timeout { .. }), "{e}");
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn missing_program() {
        let e = run(
            Path::new("/nonexistent/gpufeed-no-such"),
            &[],
            Duration::from_secs(1),
        )
        .unwrap_err();
        assert!(matches!(e, RunError::NotFound { .. }), "{e}");
    }
}
