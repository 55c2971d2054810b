//! The recorder: sampling threads (GPU through NVML on its own thread; host and the job's process
//! tree on another) feeding one writer thread that streams NDJSON to disk (plain, or one zstd
//! frame per flush: [`super::writer`]) and flushes at least every `FLUSH_EVERY`, so a killed
//! gpufeed or a crashed job loses at most the last second.

use super::ticker::Ticker;
use super::writer::{Compression, RecordingWriter};
use crate::outfile::{Clobber, OutputError, Pending};
use crate::sample::event::{End, EndReason, Header, Line, ProcsLine, SCHEMA_VERSION};
use crate::sample::host::{host_info, HostSampler, ProcTree};
use crate::sample::nvml::{self, NvmlOpenError, NvmlSource};
use crate::sample::steps::{StepFolder, StepSocket};
use crate::sample::{DriverInfo, GpuSource, GpuStatic};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Longest time a recorded sample may sit in memory before reaching the file.
pub(crate) const FLUSH_EVERY: Duration = Duration::from_millis(500);

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("cannot create recording {path}: {source} (choose another place with --output)")]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path} already exists: choose another name with --output, or add --force to replace it"
    )]
    Exists { path: PathBuf },
    #[error("cannot start the {what} thread: {source}")]
    Thread {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("writing {path} failed: {source}")]
    Write { path: PathBuf, source: WriteError },
}

/// Why the recording stopped being written: the writer's I/O error, or the writer thread's end.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("the writer thread panicked")]
    Panicked,
}

/// An existing output without `--force` is a bad command line; any other failure to record is
/// bad input or output (the path given).
impl crate::exit::HasExit for RecordError {
    fn exit(&self) -> crate::exit::Exit {
        match self {
            RecordError::Exists { .. } => crate::exit::Exit::Usage,
            _ => crate::exit::Exit::Input,
        }
    }
}

/// What to record.
#[derive(Debug, Clone)]
pub(crate) struct RecorderConfig {
    pub output: PathBuf,
    pub interval: Duration,
    /// NVML library to load; `None` = the system's.
    pub nvml_lib: Option<PathBuf>,
    /// Leave GPUs out entirely (no NVML calls).
    pub no_gpu: bool,
    /// What to do when `output` exists when the recording starts (`Refuse` unless `--force`;
    /// `Suffix` for default names).
    pub clobber: Clobber,
    /// Sample the Python stacks of the job's processes (needs a job: `root_pid`).
    pub py: Option<super::pyrec::PyConfig>,
    /// The job's step-marker socket: its steps are written as `steps` lines.
    pub steps: Option<Arc<StepSocket>>,
}

impl From<OutputError> for RecordError {
    fn from(e: OutputError) -> Self {
        match e {
            OutputError::Exists { path } => RecordError::Exists { path },
            OutputError::Io { path, source } => RecordError::Create { path, source },
        }
    }
}

/// GPUs found at start-up, or why there are none.
pub(crate) struct GpuSetup {
    pub driver: Option<DriverInfo>,
    pub gpus: Vec<GpuStatic>,
    pub error: Option<String>,
}

/// What the GPU thread answers once NVML is open: the driver and devices, or why there are none.
pub(crate) type GpuReply = Result<(DriverInfo, Vec<GpuStatic>), NvmlOpenError>;

/// A recorder whose GPU side is initialised and whose file is created, waiting for `start`.
pub(crate) struct Prepared {
    cfg: RecorderConfig,
    /// The recording under a temporary name until `start`, so that a job that fails to start
    /// leaves no file and replaces none.
    file: Pending,
    gpu: GpuSetup,
    gpu_go: Option<SyncSender<GpuGo>>,
    gpu_thread: Option<JoinHandle<()>>,
    tree_pids: Arc<Mutex<Vec<u32>>>,
}

/// Sent to the GPU thread to begin sampling.
struct GpuGo {
    t0: Instant,
    t0_unix_us: u64,
    lines: Sender<Line>,
    stop: Receiver<()>,
}

/// A running recording.
pub(crate) struct Recorder {
    path: PathBuf,
    t0: Instant,
    stop_txs: Vec<Sender<()>>,
    samplers: Vec<JoinHandle<()>>,
    lines: Option<Sender<Line>>,
    writer: Option<JoinHandle<Result<(), WriteError>>>,
    tree_pids: Arc<Mutex<Vec<u32>>>,
    /// The step-marker socket, for the count of markers it dropped (in the `end` line).
    steps: Option<Arc<StepSocket>>,
}

impl Prepared {
    /// Creates the recording under a temporary name beside `output` (refusing an existing
    /// `output` unless `clobber` says otherwise) and opens NVML on the GPU thread (blocking until
    /// it answered).
    pub(crate) fn new(cfg: RecorderConfig) -> Result<Prepared, RecordError> {
        let file = Pending::new(&cfg.output, cfg.clobber)?;
        if cfg.no_gpu {
            return Ok(Prepared {
                cfg,
                file,
                gpu: GpuSetup {
                    driver: None,
                    gpus: vec![],
                    error: Some("GPU recording disabled".into()),
                },
                gpu_go: None,
                gpu_thread: None,
                tree_pids: Arc::default(),
            });
        }
        let (reply_tx, reply_rx) = mpsc::sync_channel::<GpuReply>(1);
        let (go_tx, go_rx) = mpsc::sync_channel::<GpuGo>(1);
        let lib = cfg.nvml_lib.clone();
        let interval = cfg.interval;
        let thread = std::thread::Builder::new()
            .name("gpufeed-gpu".into())
            .spawn(move || gpu_thread(lib, interval, reply_tx, go_rx))
            .map_err(|source| RecordError::Thread {
                what: "GPU",
                source,
            })?;
        let gpu = match reply_rx.recv() {
            Ok(Ok((driver, gpus))) => GpuSetup {
                driver: Some(driver),
                gpus,
                error: None,
            },
            Ok(Err(e)) => GpuSetup {
                driver: None,
                gpus: vec![],
                error: Some(e.to_string()),
            },
            Err(_) => GpuSetup {
                driver: None,
                gpus: vec![],
                error: Some("the NVML library crashed during initialisation".into()),
            },
        };
        let (gpu_go, gpu_thread) = if gpu.error.is_none() {
            (Some(go_tx), Some(thread))
        } else {
            let _ = thread.join();
            (None, None)
        };
        Ok(Prepared {
            cfg,
            file,
            gpu,
            gpu_go,
            gpu_thread,
            tree_pids: Arc::default(),
        })
    }

    pub(crate) fn gpu(&self) -> &GpuSetup {
        &self.gpu
    }

    /// The job's processes as the recorder will see them (empty until `start`), for a signal
    /// handler installed before the job is spawned.
    pub(crate) fn tree_pids(&self) -> Arc<Mutex<Vec<u32>>> {
        Arc::clone(&self.tree_pids)
    }

    /// The step-marker socket whose steps are recorded, if any.
    pub(crate) fn steps(&self) -> Option<&Arc<StepSocket>> {
        self.cfg.steps.as_ref()
    }

    /// The recording's first line.
    fn header(
        &self,
        t0_unix_us: u64,
        root_pid: Option<u32>,
        command: Option<Vec<String>>,
    ) -> Header {
        Header {
            schema_version: SCHEMA_VERSION,
            gpufeed_version: Some(env!("CARGO_PKG_VERSION").to_string()),
            start_time: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            start_unix_us: t0_unix_us,
            interval_s: self.cfg.interval.as_secs_f64(),
            host: host_info(),
            driver: self.gpu.driver.clone(),
            gpus: self.gpu.gpus.clone(),
            gpu_error: self.gpu.error.clone(),
            command,
            pid: root_pid,
            py_rate_hz: self
                .cfg
                .py
                .filter(|_| root_pid.is_some())
                .map(|p| p.rate_hz),
        }
    }

    /// Writes the header, gives the recording its name and starts sampling. `root_pid` is the job
    /// whose process tree is followed.
    pub(crate) fn start(
        self,
        root_pid: Option<u32>,
        command: Option<Vec<String>>,
    ) -> Result<Recorder, RecordError> {
        let t0 = Instant::now();
        let t0_ns = crate::sample::steps::monotonic_ns();
        let t0_unix_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0);
        let header = self.header(t0_unix_us, root_pid, command);
        let compression = Compression::for_path(&self.cfg.output);
        let werr = |e: std::io::Error| RecordError::Write {
            path: self.cfg.output.clone(),
            source: e.into(),
        };
        let mut out = RecordingWriter::new(self.file.file(), compression).map_err(werr)?;
        out.header(&header);
        out.flush().map_err(werr)?;
        drop(out);
        let (file, path) = self.file.commit()?;
        let out = RecordingWriter::new(file, compression).map_err(werr)?;

        // The step socket answers the job's `figures` queries from what is recorded.
        let board = self.cfg.steps.as_ref().map(|s| s.board());
        if let Some(mut b) = board.as_ref().and_then(|b| b.lock().ok()) {
            b.start(t0_ns);
        }
        let (lines_tx, lines_rx) = mpsc::channel::<Line>();
        let writer = std::thread::Builder::new()
            .name("gpufeed-writer".into())
            .spawn(move || writer_thread(out, lines_rx, board))
            .map_err(|source| RecordError::Thread {
                what: "writer",
                source,
            })?;

        let mut stop_txs = Vec::new();
        let mut samplers = Vec::new();
        if let (Some(go), Some(th)) = (self.gpu_go, self.gpu_thread) {
            let (stop_tx, stop_rx) = mpsc::channel();
            let _ = go.send(GpuGo {
                t0,
                t0_unix_us,
                lines: lines_tx.clone(),
                stop: stop_rx,
            });
            stop_txs.push(stop_tx);
            samplers.push(th);
        }
        let tree_pids = self.tree_pids;
        if let Ok(mut p) = tree_pids.lock() {
            *p = root_pid.into_iter().collect();
        }
        let mut spawn = |name: &str, what, run: Box<dyn FnOnce(Receiver<()>) + Send>| {
            let (stop_tx, stop_rx) = mpsc::channel();
            let th = std::thread::Builder::new()
                .name(name.into())
                .spawn(move || run(stop_rx))
                .map_err(|source| RecordError::Thread { what, source })?;
            stop_txs.push(stop_tx);
            samplers.push(th);
            Ok::<_, RecordError>(())
        };
        {
            let lines = lines_tx.clone();
            let pids = Arc::clone(&tree_pids);
            let interval = self.cfg.interval;
            spawn(
                "gpufeed-host",
                "host",
                Box::new(move |stop| host_thread(t0, interval, root_pid, lines, stop, Some(pids))),
            )?;
        }
        if let Some(sock) = self.cfg.steps.clone() {
            let lines = lines_tx.clone();
            spawn(
                "gpufeed-steps-rec",
                "step marker",
                Box::new(move |stop| steps_thread(t0, sock, lines, stop)),
            )?;
        }
        if let (Some(py), Some(_)) = (self.cfg.py, root_pid) {
            let lines = lines_tx.clone();
            let pids = Arc::clone(&tree_pids);
            spawn(
                "gpufeed-py",
                "Python stack",
                Box::new(move |stop| super::pyrec::py_thread(t0, py, pids, lines, stop)),
            )?;
        }
        Ok(Recorder {
            path,
            t0,
            stop_txs,
            samplers,
            lines: Some(lines_tx),
            writer: Some(writer),
            tree_pids,
            steps: self.cfg.steps.clone(),
        })
    }
}

impl Recorder {
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Seconds since the recording started.
    pub(crate) fn elapsed_s(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    /// The job's processes as last seen (root first if alive), for forwarding signals.
    pub(crate) fn tree_pids(&self) -> Arc<Mutex<Vec<u32>>> {
        Arc::clone(&self.tree_pids)
    }

    /// Adds a line of gpufeed's own (e.g. `overrides`) to the recording.
    pub(crate) fn write_line(&self, line: Line) {
        if let Some(tx) = &self.lines {
            let _ = tx.send(line);
        }
    }

    /// Stops sampling, writes the `end` line and flushes; returns the recording's path.
    pub(crate) fn finish(mut self, mut end: End) -> Result<PathBuf, RecordError> {
        self.stop_samplers();
        end.t_s = self.elapsed_s();
        if let Some(n) = self.steps.as_ref().map(|s| s.dropped()).filter(|&n| n > 0) {
            end.steps_dropped = Some(n);
        }
        if let Some(n) = self.steps.as_ref().map(|s| s.flooded()).filter(|&n| n > 0) {
            end.steps_flooded = Some(n);
        }
        if let Some((n, ranks)) = self
            .steps
            .as_ref()
            .map(|s| s.unfollowed())
            .filter(|u| u.0 > 0)
        {
            end.steps_unfollowed = Some(n);
            end.ranks_unfollowed = Some(ranks);
        }
        if let Some(tx) = self.lines.take() {
            let _ = tx.send(Line::End(end));
        }
        self.join_writer()?;
        Ok(self.path.clone())
    }

    fn stop_samplers(&mut self) {
        for tx in self.stop_txs.drain(..) {
            let _ = tx.send(());
        }
        for th in self.samplers.drain(..) {
            let _ = th.join();
        }
    }

    fn join_writer(&mut self) -> Result<(), RecordError> {
        self.lines.take();
        if let Some(w) = self.writer.take() {
            match w.join() {
                Ok(Ok(())) => {}
                Ok(Err(source)) => {
                    return Err(RecordError::Write {
                        path: self.path.clone(),
                        source,
                    })
                }
                Err(_) => {
                    return Err(RecordError::Write {
                        path: self.path.clone(),
                        source: WriteError::Panicked,
                    })
                }
            }
        }
        Ok(())
    }
}

impl Drop for Recorder {
    /// A recorder dropped without `finish` (an error path) still flushes what it has.
    fn drop(&mut self) {
        self.stop_samplers();
        let _ = self.join_writer();
    }
}

/// Most bytes held before a flush whatever the time (a burst of lines).
const FLUSH_BYTES: usize = 4 << 20;

fn writer_thread(
    mut out: RecordingWriter<std::fs::File>,
    rx: Receiver<Line>,
    board: Option<Arc<Mutex<crate::sample::figures::Board>>>,
) -> Result<(), WriteError> {
    let mut last_flush = Instant::now();
    loop {
        let wait = FLUSH_EVERY.saturating_sub(last_flush.elapsed());
        match rx.recv_timeout(wait) {
            Ok(mut line) => {
                if let Some(mut b) = board.as_ref().and_then(|b| b.lock().ok()) {
                    b.observe(&line);
                }
                out.line(&mut line)?;
                if out.pending() >= FLUSH_BYTES {
                    out.flush()?;
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        if last_flush.elapsed() >= FLUSH_EVERY {
            out.flush()?;
            last_flush = Instant::now();
        }
    }
    out.flush()?;
    out.get_ref().sync_data().ok();
    Ok(())
}

/// How often step markers are aggregated into a `steps` line.
pub(crate) const STEPS_EVERY: Duration = Duration::from_secs(1);

/// Longest the recorder waits at its end for the markers still queued in the step socket.
const SETTLE_LIMIT: Duration = Duration::from_millis(500);

/// Writes the steps received on `sock` as one `steps` line per [`STEPS_EVERY`] in which any
/// ended, until told to stop (then once more, for the last ones).
pub(crate) fn steps_thread(
    t0: Instant,
    sock: Arc<StepSocket>,
    lines: Sender<Line>,
    stop: Receiver<()>,
) {
    let mut seen = 0usize;
    let mut folder = StepFolder::default();
    let mut last = t0;
    loop {
        let stopping = !matches!(
            stop.recv_timeout(STEPS_EVERY),
            Err(RecvTimeoutError::Timeout)
        );
        if stopping {
            // The job's last markers may still be queued in the socket when it has exited.
            sock.settle(SETTLE_LIMIT);
        }
        let (marks, next) = sock.marks_since(seen);
        seen = next;
        let now = Instant::now();
        for (rank, tot) in folder.fold_by_rank(&marks) {
            let line = Line::Steps(crate::sample::event::StepsLine {
                t_s: now.duration_since(t0).as_secs_f64(),
                dt_s: now.duration_since(last).as_secs_f64(),
                steps: tot.steps,
                span_s: tot.span_s,
                wait_s: tot.wait_s,
                items: tot.items,
                rank,
            });
            if lines.send(line).is_err() {
                return;
            }
        }
        last = now;
        if stopping {
            return;
        }
    }
}

/// Opens NVML on the calling thread (the sampler's own), answers `reply` with the devices or the
/// reason there are none, then hands the source to `then`. Both live on this thread's stack, since
/// the source borrows the library.
pub(crate) fn with_gpu_source(
    lib: Option<PathBuf>,
    reply: SyncSender<GpuReply>,
    then: impl FnOnce(&mut NvmlSource),
) {
    let nvml = match nvml::open(lib.as_deref()) {
        Ok(n) => n,
        Err(e) => {
            let _ = reply.send(Err(e));
            return;
        }
    };
    let mut source = match NvmlSource::new(&nvml) {
        Ok(s) => s,
        Err(e) => {
            let _ = reply.send(Err(e));
            return;
        }
    };
    if reply.send(Ok((source.driver(), source.devices()))).is_ok() {
        then(&mut source);
    }
}

fn gpu_thread(
    lib: Option<PathBuf>,
    interval: Duration,
    reply: SyncSender<GpuReply>,
    go: Receiver<GpuGo>,
) {
    with_gpu_source(lib, reply, |source| gpu_loop(source, interval, go));
}

fn gpu_loop(source: &mut NvmlSource, interval: Duration, go: Receiver<GpuGo>) {
    let Ok(go) = go.recv() else { return };
    // Driver utilization samples are buffered by the driver; polling at the host interval (at
    // most every 500 ms) collects every one of them.
    let mut ticker = Ticker::new(go.t0, interval.min(Duration::from_millis(500)));
    loop {
        let (t_s, slow) = ticker.now();
        for s in source.sample(t_s, go.t0_unix_us, slow) {
            if go.lines.send(Line::Gpu(s)).is_err() {
                return;
            }
        }
        if ticker.wait(&go.stop) {
            // One last reading so the final driver samples are kept.
            let t_s = go.t0.elapsed().as_secs_f64();
            for s in source.sample(t_s, go.t0_unix_us, false) {
                let _ = go.lines.send(Line::Gpu(s));
            }
            return;
        }
    }
}

/// Samples the host and the job's tree (when `root` is given) until told to stop; `pids`, when
/// given, is kept up to date with the tree (root first) for forwarding signals.
pub(crate) fn host_thread(
    t0: Instant,
    interval: Duration,
    root: Option<u32>,
    lines: Sender<Line>,
    stop: Receiver<()>,
    pids: Option<Arc<Mutex<Vec<u32>>>>,
) {
    let mut host = HostSampler::new();
    let mut tree = root.map(ProcTree::new);
    let mut ticker = Ticker::new(t0, interval);
    loop {
        let (t_s, slow) = ticker.now();
        let h = host.sample(t_s);
        let mut batch = Vec::with_capacity(4);
        if let Some(tree) = tree.as_mut() {
            let r = tree.sample(t_s, slow);
            batch.extend(r.started.into_iter().map(Line::ProcStart));
            if !r.samples.is_empty() {
                batch.push(Line::Procs(ProcsLine {
                    t_s,
                    procs: r.samples,
                }));
            }
            batch.extend(r.exited.into_iter().map(|pid| Line::ProcExit { t_s, pid }));
            let mut now_pids = tree.pids();
            now_pids.sort_unstable();
            if let Some(pos) = now_pids.iter().position(|&p| p == tree.root()) {
                now_pids.swap(0, pos);
            }
            if let Some(Ok(mut p)) = pids.as_ref().map(|p| p.lock()) {
                *p = now_pids;
            }
        }
        // The first host reading has no rates yet; skip it.
        if !h.cpu_pct.is_empty() {
            batch.push(Line::Host(h));
        }
        for l in batch {
            if lines.send(l).is_err() {
                return;
            }
        }
        if ticker.wait(&stop) {
            return;
        }
    }
}

/// `gpufeed-YYYYMMDD-HHMMSS-mmm.ndjson.zst` (UTC, milliseconds; zstd-compressed) in the working
/// directory; record to it with `Clobber::Suffix` so that two recordings started in the same
/// millisecond get two files.
pub(crate) fn default_output_name(now: SystemTime) -> PathBuf {
    PathBuf::from(format!("{}.ndjson.zst", default_stamp("gpufeed", now)))
}

/// `PREFIX-YYYYMMDD-HHMMSS-mmm` (UTC, milliseconds): the stem of default output names.
pub(crate) fn default_stamp(prefix: &str, now: SystemTime) -> String {
    let s = humantime::format_rfc3339_millis(now).to_string(); // 2026-12-02T12:00:00.123Z
    let digits: String = s.chars().filter(|c| c.is_ascii_digit()).collect();
    let (date, rest) = digits.split_at(8.min(digits.len()));
    let (time, ms) = rest.split_at(6.min(rest.len()));
    format!("{prefix}-{date}-{time}-{ms}")
}

/// How the job ended, for the recording's end line, and gpufeed's exit code (the shell's).
pub(crate) fn job_end(status: Result<crate::job::JobExit, crate::job::JobError>) -> (End, u8) {
    match status {
        Ok(st) => (
            End {
                exit_code: st.code(),
                signal: st.signal(),
                reason: Some(EndReason::JobExited),
                ..Default::default()
            },
            st.shell_code(),
        ),
        Err(e) => (
            End {
                reason: Some(EndReason::LostJob),
                ..Default::default()
            },
            {
                eprintln!("gpufeed: {e}");
                crate::exit::HasExit::exit(&e).code()
            },
        ),
    }
}

/// A recording started from a live view (`watch`'s `r`): a new file under a unique default
/// name, written as lines arrive.
pub(crate) struct LiveRecording {
    pub path: PathBuf,
    out: RecordingWriter<std::fs::File>,
}

/// Bytes held before they are written (one zstd frame each).
const WATCH_FLUSH_BYTES: usize = 128 * 1024;

impl LiveRecording {
    /// `defs`: the Python frame and stack definitions seen so far (each is sent once, so a
    /// recording started later needs them written first).
    pub(crate) fn start<'a>(
        header: &Header,
        defs: impl Iterator<Item = &'a Line>,
    ) -> std::io::Result<LiveRecording> {
        // A new file under a unique default name (suffixed when taken): nothing is overwritten.
        let pending = crate::outfile::Pending::new(
            &default_output_name(std::time::SystemTime::now()),
            crate::outfile::Clobber::Suffix,
        )
        .map_err(std::io::Error::other)?;
        let compression = Compression::for_path(pending.target());
        let mut first = RecordingWriter::new(pending.file(), compression)?;
        first.header(header);
        first.flush()?;
        let (file, path) = pending.commit().map_err(std::io::Error::other)?;
        let out = RecordingWriter::new(file, compression)?;
        let mut r = LiveRecording { path, out };
        for d in defs {
            r.write(d)?;
        }
        Ok(r)
    }
    pub(crate) fn write(&mut self, l: &Line) -> std::io::Result<()> {
        self.out.line(&mut l.clone())?;
        if self.out.pending() >= WATCH_FLUSH_BYTES {
            self.out.flush()?;
        }
        Ok(())
    }
    pub(crate) fn finish(mut self, t_s: f64) -> std::io::Result<PathBuf> {
        self.write(&Line::End(crate::sample::event::End {
            t_s,
            reason: Some(crate::sample::event::EndReason::WatchStopped),
            ..Default::default()
        }))?;
        self.out.flush()?;
        Ok(self.path)
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_write_keeps_the_io_error() {
        // Every write to /dev/full fails with "no space left on device".
        let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
            return;
        };
        let out = RecordingWriter::new(full, Compression::None).unwrap();
        let (tx, rx) = mpsc::channel();
        tx.send(Line::ProcExit { t_s: 0.0, pid: 1 }).unwrap();
        drop(tx);
        let err = writer_thread(out, rx, None).unwrap_err();
        let WriteError::Io(io) = &err else {
            panic!("{err:?}")
        };
        assert_eq!(io.raw_os_error(), Some(libc::ENOSPC));
        let e = RecordError::Write {
            path: "r.ndjson".into(),
            source: err,
        };
        assert!(
            e.to_string()
                .starts_with("writing r.ndjson failed: No space left"),
            "{e}"
        );
        assert!(std::error::Error::source(&e).is_some());
    }

    #[test]
    fn default_name_is_timestamped() {
        let t = UNIX_EPOCH + Duration::from_secs(1_764_676_800); // 2025-12-02T12:00:00Z
        assert_eq!(
            default_output_name(t),
            PathBuf::from("gpufeed-20251202-120000-000.ndjson.zst")
        );
    }

    #[test]
    fn records_host_and_a_job_tree_without_gpu() {
        let plain = record_a_job("r.ndjson");
        assert!(plain.starts_with(b"{\"type\":\"header\""));
        let zst = record_a_job("r.ndjson.zst");
        assert!(
            super::super::reader::is_zstd(&zst),
            "a .zst name is compressed"
        );
        // Several frames, each complete: what `zstd -d` reads.
        let text = zstd::stream::decode_all(&zst[..]).unwrap();
        assert!(text.starts_with(b"{\"type\":\"header\""));
    }

    /// A recording to `out` every 50 ms without GPUs, with the steps of `steps`.
    fn no_gpu(out: &Path, steps: Option<Arc<StepSocket>>) -> RecorderConfig {
        RecorderConfig {
            output: out.to_path_buf(),
            interval: Duration::from_millis(50),
            nvml_lib: None,
            no_gpu: true,
            clobber: Clobber::Refuse,
            py: None,
            steps,
        }
    }

    /// Records a short job to `name`; checks what the reader sees and returns the file's bytes.
    fn record_a_job(name: &str) -> Vec<u8> {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join(name);
        let prepared = Prepared::new(no_gpu(&out, None)).unwrap();
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 0.4"])
            .spawn()
            .unwrap();
        let rec = prepared
            .start(Some(child.id()), Some(vec!["sh".into()]))
            .unwrap();
        child.wait().unwrap();
        std::thread::sleep(Duration::from_millis(120));
        let path = rec.finish(End::default()).unwrap();
        let mut hosts = 0;
        let mut starts = 0;
        let mut ends = 0;
        let mut got = super::super::reader::Collect::default();
        let (h, st) = super::super::reader::read_path(&path, &mut got).unwrap();
        for l in got.0 {
            match l {
                Line::Host(_) => hosts += 1,
                Line::ProcStart(_) => starts += 1,
                Line::End(_) => ends += 1,
                _ => {}
            }
        }
        assert_eq!(h.pid, Some(child.id()));
        assert!(hosts >= 4, "{hosts} host samples");
        assert!(starts >= 1);
        assert_eq!(ends, 1);
        assert!(!st.truncated && !st.unfinished);
        std::fs::read(&path).unwrap()
    }

    #[test]
    fn step_markers_become_steps_lines() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("r.ndjson");
        let sock = Arc::new(StepSocket::open().unwrap());
        let prepared = Prepared::new(no_gpu(&out, Some(Arc::clone(&sock)))).unwrap();
        let rec = prepared.start(None, None).unwrap();
        let tx = std::os::unix::net::UnixDatagram::unbound().unwrap();
        // Steps of 100 ms, 30 of them waiting, 4 samples each (ended just now), and one marker
        // 10^18 ns ahead (broken or crafted) that must not stretch a step over the run.
        let t0 = crate::sample::steps::monotonic_ns() - 500_000_000;
        for i in 0..4u64 {
            let t = t0 + i * 100_000_000;
            tx.send_to(format!("step {t} 30000000 4").as_bytes(), sock.path())
                .unwrap();
        }
        let far = format!("step {} 0 4", t0 + 10u64.pow(18));
        tx.send_to(far.as_bytes(), sock.path()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(2);
        while sock.marks().len() + (sock.dropped() as usize) < 5 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let path = rec.finish(End::default()).unwrap();
        let mut all = super::super::reader::Collect::default();
        super::super::reader::read_path(&path, &mut all).unwrap();
        let got: Vec<_> = all
            .0
            .iter()
            .filter_map(|l| match l {
                Line::Steps(s) => Some(s.clone()),
                _ => None,
            })
            .collect();
        let steps: u64 = got.iter().map(|s| s.steps).sum();
        let span: f64 = got.iter().map(|s| s.span_s).sum();
        let wait: f64 = got.iter().filter_map(|s| s.wait_s).sum();
        let items: u64 = got.iter().filter_map(|s| s.items).sum();
        assert_eq!(steps, 3, "{got:?}");
        assert!((span - 0.3).abs() < 1e-6 && (wait - 0.09).abs() < 1e-6);
        assert_eq!(items, 12);
        let end = all.0.iter().find_map(|l| match l {
            Line::End(e) => Some(e.steps_dropped),
            _ => None,
        });
        assert_eq!(end, Some(Some(1)));
    }
}
