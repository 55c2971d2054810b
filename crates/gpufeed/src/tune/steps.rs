//! The step-marker socket: a Unix datagram socket whose path the job gets in
//! `GPUFEED_STEP_SOCKET`. Protocol (docs/step-protocol.md): one ASCII datagram per training step,
//! `step <t_ns> [<wait_ns> [<items>]]`, where `t_ns` is CLOCK_MONOTONIC in nanoseconds when the
//! step ended (`-` to let gpufeed stamp it on receipt), `wait_ns` the nanoseconds the step spent
//! waiting for its input batch and `items` the samples in the step (`-` for unknown). Several
//! lines may share a datagram; unknown words are ignored so the protocol can grow.

use super::TuneError;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Name of the environment variable that carries the socket path.
pub const ENV_VAR: &str = "GPUFEED_STEP_SOCKET";

/// One step as reported by the job.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepMark {
    /// CLOCK_MONOTONIC nanoseconds at the end of the step.
    pub t_ns: u64,
    pub wait_ns: Option<u64>,
    pub items: Option<u64>,
}

/// CLOCK_MONOTONIC now, in nanoseconds (Python's `time.monotonic_ns()` reads the same clock).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn opt_u64(w: Option<&str>) -> Option<u64> {
    w.filter(|w| *w != "-").and_then(|w| w.parse().ok())
}

/// Parses one datagram; `now_ns` stamps steps sent with `-`.
pub fn parse_datagram(text: &str, now_ns: u64) -> Vec<StepMark> {
    text.lines()
        .filter_map(|line| {
            let mut w = line.split_ascii_whitespace();
            if w.next()? != "step" {
                return None;
            }
            let t = w.next()?;
            let t_ns = if t == "-" { now_ns } else { t.parse().ok()? };
            Some(StepMark {
                t_ns,
                wait_ns: opt_u64(w.next()),
                items: opt_u64(w.next()),
            })
        })
        .collect()
}

/// A bound socket and the thread that collects its steps.
pub struct StepSocket {
    path: PathBuf,
    /// The private folder the socket lives in ([`StepSocket::open`]), removed on drop.
    dir: Option<tempfile::TempDir>,
    marks: Arc<Mutex<Vec<StepMark>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl StepSocket {
    /// Binds a socket in a new private folder (mode 0700, unpredictable name, in the temporary
    /// directory) and starts collecting: the way to get a step socket. Hand the job
    /// [`StepSocket::path`] in [`ENV_VAR`]. The folder and the socket go when this is dropped.
    pub fn open() -> Result<StepSocket, TuneError> {
        let dir = crate::outfile::private_dir("gpufeed-steps-").map_err(TuneError::Socket)?;
        let mut s = Self::bind(&dir.path().join("step.sock"))?;
        s.dir = Some(dir);
        Ok(s)
    }

    /// Binds a socket at `path` (which must not exist: nothing there is removed) and starts
    /// collecting. Prefer [`StepSocket::open`], which makes the private folder for it.
    pub fn bind(path: &Path) -> Result<StepSocket, TuneError> {
        let sock = UnixDatagram::bind(path).map_err(TuneError::Socket)?;
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .map_err(TuneError::Socket)?;
        let marks = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (m, s) = (Arc::clone(&marks), Arc::clone(&stop));
        let thread = std::thread::Builder::new()
            .name("gpufeed-steps".into())
            .spawn(move || {
                let mut buf = [0u8; 4096];
                while !s.load(Ordering::Relaxed) {
                    match sock.recv(&mut buf) {
                        Ok(n) => {
                            let got =
                                parse_datagram(&String::from_utf8_lossy(&buf[..n]), monotonic_ns());
                            if let Ok(mut v) = m.lock() {
                                v.extend(got);
                            }
                        }
                        Err(e)
                            if matches!(
                                e.kind(),
                                std::io::ErrorKind::WouldBlock
                                    | std::io::ErrorKind::TimedOut
                                    | std::io::ErrorKind::Interrupted
                            ) => {}
                        Err(_) => break,
                    }
                }
            })
            .map_err(TuneError::Thread)?;
        Ok(StepSocket {
            path: path.to_path_buf(),
            dir: None,
            marks,
            stop,
            thread: Some(thread),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The steps received so far, in the order they arrived.
    pub fn marks(&self) -> Vec<StepMark> {
        self.marks.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

impl Drop for StepSocket {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // The socket was bound (created) by this StepSocket: it is ours to remove.
        let _ = std::fs::remove_file(&self.path);
        if let Some(d) = self.dir.take() {
            let _ = d.close();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_lines() {
        assert_eq!(
            parse_datagram("step 100 20 32\nstep - - 32\nhello 1\nstep x\nstep 5", 7),
            vec![
                StepMark {
                    t_ns: 100,
                    wait_ns: Some(20),
                    items: Some(32)
                },
                StepMark {
                    t_ns: 7,
                    wait_ns: None,
                    items: Some(32)
                },
                StepMark {
                    t_ns: 5,
                    wait_ns: None,
                    items: None
                },
            ]
        );
    }

    #[test]
    fn socket_collects_steps() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.sock");
        let s = StepSocket::bind(&p).unwrap();
        let tx = UnixDatagram::unbound().unwrap();
        for i in 0..5u64 {
            tx.send_to(format!("step {} 10", 1000 + i).as_bytes(), &p)
                .unwrap();
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while s.marks().len() < 5 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let m = s.marks();
        assert_eq!(m.len(), 5);
        assert_eq!(m[4].t_ns, 1004);
        drop(s);
        assert!(!p.exists());
    }
}
