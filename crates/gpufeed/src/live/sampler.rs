//! A live sampler for `watch` and `serve`: the recorder's threads without a file.
//!
//! GPUs are read through NVML on a thread of their own (NVML calls can block on the driver lock),
//! the host and the job's process tree on another; both send [`Line`]s over one channel. The
//! consumer (a terminal UI, an HTTP exporter) never touches hardware. The recorder is not reused
//! because it owns a file and an `end` line; here a recording is optional and started later
//! (`watch`'s `r` key writes the same lines with [`LiveSampler::header`]).

use crate::record::recorder::{host_thread, with_gpu_source, GpuReply};
use crate::record::ticker::Ticker;
use crate::sample::event::{Header, Line, SCHEMA_VERSION};
use crate::sample::host::host_info;
use crate::sample::steps::StepSocket;
use crate::sample::GpuSource;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[derive(Debug, thiserror::Error)]
pub(crate) enum SamplerError {
    #[error("cannot start the {what} sampling thread: {source}")]
    Thread {
        what: &'static str,
        source: std::io::Error,
    },
}

/// What to sample.
#[derive(Debug, Clone)]
pub(crate) struct SamplerConfig {
    /// Host and process interval; GPUs are polled at this interval too (at most every 500 ms).
    pub interval: Duration,
    pub nvml_lib: Option<PathBuf>,
    /// Leave GPUs out (no NVML calls).
    pub no_gpu: bool,
    /// Root of the job's process tree to follow.
    pub root_pid: Option<u32>,
    /// Sample the Python stacks of that tree (`py_*` lines; needs `root_pid`).
    pub py: Option<crate::record::pyrec::PyConfig>,
    /// The job's step-marker socket: its steps arrive as `steps` lines.
    pub steps: Option<Arc<StepSocket>>,
}

/// Running sampling threads; dropping it stops them.
pub(crate) struct LiveSampler {
    header: Header,
    stops: Vec<Sender<()>>,
    threads: Vec<JoinHandle<()>>,
}

impl LiveSampler {
    /// Opens NVML (blocking until it answered), then starts sampling into `lines`.
    pub(crate) fn start(
        cfg: SamplerConfig,
        lines: Sender<Line>,
    ) -> Result<LiveSampler, SamplerError> {
        let t0 = Instant::now();
        let t0_unix_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0);
        let lines = tee_to_board(cfg.steps.as_deref(), lines)?;
        let mut stops = Vec::new();
        let mut threads = Vec::new();
        let (mut driver, mut gpus, mut gpu_error) = (None, vec![], None);
        if cfg.no_gpu {
            gpu_error = Some("GPU sampling disabled".to_string());
        } else {
            let (reply_tx, reply_rx) = mpsc::sync_channel::<GpuReply>(1);
            let (stop_tx, stop_rx) = mpsc::channel();
            let lib = cfg.nvml_lib.clone();
            let interval = cfg.interval;
            let tx = lines.clone();
            let th = std::thread::Builder::new()
                .name("gpufeed-live-gpu".into())
                .spawn(move || gpu_thread(lib, interval, t0, t0_unix_us, reply_tx, tx, stop_rx))
                .map_err(|source| SamplerError::Thread {
                    what: "GPU",
                    source,
                })?;
            match reply_rx.recv() {
                Ok(Ok((d, g))) => {
                    driver = Some(d);
                    gpus = g;
                    stops.push(stop_tx);
                    threads.push(th);
                }
                Ok(Err(e)) => {
                    gpu_error = Some(e.to_string());
                    let _ = th.join();
                }
                Err(_) => {
                    gpu_error = Some("the NVML library crashed during initialisation".into());
                    let _ = th.join();
                }
            }
        }
        let header = Header {
            schema_version: SCHEMA_VERSION,
            gpufeed_version: Some(env!("CARGO_PKG_VERSION").to_string()),
            start_time: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            start_unix_us: t0_unix_us,
            interval_s: cfg.interval.as_secs_f64(),
            host: host_info(),
            driver,
            gpus,
            gpu_error,
            command: None,
            pid: cfg.root_pid,
            py_rate_hz: cfg.py.filter(|_| cfg.root_pid.is_some()).map(|p| p.rate_hz),
        };
        // The job's processes as the host thread last saw them, for the Python sampler.
        let tree: Arc<Mutex<Vec<u32>>> = Arc::new(Mutex::new(cfg.root_pid.into_iter().collect()));
        if let (Some(py), Some(_)) = (cfg.py, cfg.root_pid) {
            let (stop_tx, stop_rx) = mpsc::channel();
            let tx = lines.clone();
            let pids = Arc::clone(&tree);
            let th = std::thread::Builder::new()
                .name("gpufeed-live-py".into())
                .spawn(move || crate::record::pyrec::py_thread(t0, py, pids, tx, stop_rx))
                .map_err(|source| SamplerError::Thread {
                    what: "Python stack",
                    source,
                })?;
            stops.push(stop_tx);
            threads.push(th);
        }
        if let Some(sock) = cfg.steps.clone() {
            let (stop_tx, stop_rx) = mpsc::channel();
            let tx = lines.clone();
            let th = std::thread::Builder::new()
                .name("gpufeed-live-steps".into())
                .spawn(move || crate::record::recorder::steps_thread(t0, sock, tx, stop_rx))
                .map_err(|source| SamplerError::Thread {
                    what: "step marker",
                    source,
                })?;
            stops.push(stop_tx);
            threads.push(th);
        }
        let (stop_tx, stop_rx) = mpsc::channel();
        let interval = cfg.interval;
        let root = cfg.root_pid;
        let th = std::thread::Builder::new()
            .name("gpufeed-live-host".into())
            .spawn(move || host_thread(t0, interval, root, lines, stop_rx, Some(tree)))
            .map_err(|source| SamplerError::Thread {
                what: "host",
                source,
            })?;
        stops.push(stop_tx);
        threads.push(th);
        Ok(LiveSampler {
            header,
            stops,
            threads,
        })
    }

    /// The header a recording of these samples starts with (times are relative to its start).
    pub(crate) fn header(&self) -> &Header {
        &self.header
    }

    /// Stops the threads and waits for them.
    pub(crate) fn stop(&mut self) {
        for s in self.stops.drain(..) {
            let _ = s.send(());
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for LiveSampler {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Lines on their way to `out` also go to the step socket's board, so that the job's `figures`
/// queries get GPU busy and phases ([`crate::sample::figures`]). The thread ends with the senders.
/// Without a socket, `out` itself.
fn tee_to_board(
    sock: Option<&StepSocket>,
    out: Sender<Line>,
) -> Result<Sender<Line>, SamplerError> {
    let Some(sock) = sock else {
        return Ok(out);
    };
    let board = sock.board();
    if let Ok(mut b) = board.lock() {
        b.start(crate::sample::steps::monotonic_ns());
    }
    let (tx, rx) = mpsc::channel::<Line>();
    std::thread::Builder::new()
        .name("gpufeed-live-board".into())
        .spawn(move || {
            for line in rx {
                if let Ok(mut b) = board.lock() {
                    b.observe(&line);
                }
                if out.send(line).is_err() {
                    return;
                }
            }
        })
        .map_err(|source| SamplerError::Thread {
            what: "figures",
            source,
        })?;
    Ok(tx)
}

fn gpu_thread(
    lib: Option<PathBuf>,
    interval: Duration,
    t0: Instant,
    t0_unix_us: u64,
    reply: SyncSender<GpuReply>,
    lines: Sender<Line>,
    stop: Receiver<()>,
) {
    with_gpu_source(lib, reply, |source| {
        let mut ticker = Ticker::new(t0, interval.min(Duration::from_millis(500)));
        loop {
            let (t_s, slow) = ticker.now();
            for s in source.sample(t_s, t0_unix_us, slow) {
                if lines.send(Line::Gpu(s)).is_err() {
                    return;
                }
            }
            if ticker.wait(&stop) {
                return;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_the_host_without_gpu() {
        let (tx, rx) = mpsc::channel();
        let mut s = LiveSampler::start(
            SamplerConfig {
                interval: Duration::from_millis(20),
                nvml_lib: None,
                no_gpu: true,
                root_pid: Some(std::process::id()),
                py: None,
                steps: None,
            },
            tx,
        )
        .unwrap();
        assert!(s.header().gpus.is_empty());
        assert!(s.header().gpu_error.is_some());
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut host = 0;
        while host < 2 && Instant::now() < deadline {
            if let Ok(Line::Host(_)) = rx.recv_timeout(Duration::from_millis(200)) {
                host += 1;
            }
        }
        s.stop();
        assert_eq!(host, 2);
    }
}
