//! The step-marker socket: a Unix datagram socket whose path the job gets in
//! `GPUFEED_STEP_SOCKET`. Protocol (docs/step-protocol.md): one ASCII datagram per training step,
//! `step <t_ns> [<wait_ns> [<items> [<rank>]]]`, where `t_ns` is CLOCK_MONOTONIC in nanoseconds
//! when the step ended (`-` to let gpufeed stamp it on receipt), `wait_ns` the nanoseconds the
//! step spent waiting for its input batch, `items` the samples in the step (`-` for unknown) and
//! `rank` the sender's rank in a multi-process job (`RANK`, else its pid; absent: one). Several
//! lines may share a datagram; unknown words are ignored so the protocol can grow.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::figures::{parse_query, Board, Replier};

/// Name of the environment variable that carries the socket path.
pub(crate) const ENV_VAR: &str = "GPUFEED_STEP_SOCKET";

use super::stepmark::{MarkKind, MarkSource, StepMark, StepTotals, MARK_SKEW_NS};

/// CLOCK_MONOTONIC now, in nanoseconds (Python's `time.monotonic_ns()` reads the same clock).
pub(crate) fn monotonic_ns() -> u64 {
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

/// Parses one datagram; `now_ns` stamps markers sent with `-`. Lines: `step <t_ns> [<wait_ns>
/// [<items> [<rank> [auto]]]]` and `idle <t_ns> [<rank> [auto]]`; `auto` marks gpufeed's own
/// DataLoader hook as the sender.
pub(crate) fn parse_datagram(text: &str, now_ns: u64) -> Vec<StepMark> {
    text.lines()
        .filter_map(|line| {
            let mut w = line.split_ascii_whitespace();
            let kind = match w.next()? {
                "step" => MarkKind::Step,
                "idle" => MarkKind::Idle,
                _ => return None,
            };
            let t = w.next()?;
            let t_ns = if t == "-" { now_ns } else { t.parse().ok()? };
            let (wait_ns, items) = match kind {
                MarkKind::Step => (opt_u64(w.next()), opt_u64(w.next())),
                MarkKind::Idle => (None, None),
            };
            let rank = opt_u64(w.next()).and_then(|r| u32::try_from(r).ok());
            let source = match w.next() {
                Some("auto") => MarkSource::Loader,
                _ => MarkSource::Job,
            };
            Some(StepMark {
                t_ns,
                wait_ns,
                items,
                rank,
                kind,
                source,
            })
        })
        .collect()
}

/// A marker is plausible when it ended after the socket was bound (before the job could send
/// anything) and not after its receipt, each give or take [`MARK_SKEW_NS`]. Anything else (a
/// time 10^18 ns ahead, 2^64-1, a step from before the job) would stretch one step over the
/// whole run and freeze the accounting, so it is dropped and counted.
pub(crate) fn plausible(t_ns: u64, bound_ns: u64, now_ns: u64) -> bool {
    t_ns >= bound_ns.saturating_sub(MARK_SKEW_NS) && t_ns <= now_ns.saturating_add(MARK_SKEW_NS)
}

/// The most samples one step may report: no batch comes near a billion, and one marker claiming
/// 10^12 among steps of 32 made the job's rate 2.5e11 samples/s.
pub(crate) const MAX_STEP_ITEMS: u64 = 1_000_000_000;

/// A marker is kept when its time is [`plausible`] and its item count, if any, at most
/// [`MAX_STEP_ITEMS`]; anything else is dropped and counted.
pub(crate) fn plausible_mark(k: &StepMark, bound_ns: u64, now_ns: u64) -> bool {
    plausible(k.t_ns, bound_ns, now_ns) && k.items.is_none_or(|i| i <= MAX_STEP_ITEMS)
}

/// Why `--step-socket PATH` cannot be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GivenSocketError {
    #[error("--step-socket {}: a file that is not a socket is there; give a path where gpufeed may create the socket (the one the job got in GPUFEED_STEP_SOCKET)", .0.display())]
    NotASocket(PathBuf),
    #[error("--step-socket {}: another process is reading that socket; stop it or give another path", .0.display())]
    InUse(PathBuf),
    #[error("--step-socket {}: cannot bind the socket ({source}); check that its folder exists and is writable", .path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl crate::exit::HasExit for GivenSocketError {
    /// A path that cannot be used is a bad option value; an OS failure to bind is too (a
    /// missing or read-only folder), as the message says what to change.
    fn exit(&self) -> crate::exit::Exit {
        crate::exit::Exit::Usage
    }
}

/// The name of a step-socket folder starts with this and the pid of the gpufeed that made it.
const STALE_PREFIX: &str = "gpufeed-steps-";

/// The most markers kept at once (about 30 MB). A job flooding the socket (5.5 M markers in 20 s,
/// or datagrams of hundreds of lines) took `run` to 4.9 GB when every marker was kept; past this
/// the oldest half is let go. The recorder folds them into its `steps` lines every second, so
/// only markers it had not read yet are lost, and those are counted ([`StepSocket::flooded`]).
pub(crate) const MAX_KEPT_MARKS: usize = 500_000;

/// The most ranks followed apart (each its own step clock and `steps` lines). A job has
/// thousands at most and one node's gpufeed sees dozens; markers each naming a new rank took
/// `run` to 297 MB and its recording to 348 MB in 20 s. Markers of ranks beyond the first these
/// many are counted ([`StepSocket::unfollowed`]), not kept.
pub(crate) const MAX_RANKS: usize = 1024;

/// How many ranks beyond [`MAX_RANKS`] are counted one by one; past it, "at least" this many.
pub(crate) const MAX_RANKS_COUNTED: usize = 65_536;

/// The markers received, the oldest let go past [`MAX_KEPT_MARKS`]: `base` of them are gone.
#[derive(Debug, Default)]
pub(crate) struct Marks {
    /// Markers let go from the front.
    base: usize,
    kept: Vec<StepMark>,
    /// How far [`StepSocket::marks_since`] has read (an absolute position).
    read_upto: usize,
    /// Markers let go before anyone read them.
    flooded: u64,
    /// The ranks followed (at most [`MAX_RANKS`]).
    ranks: std::collections::BTreeSet<Option<u32>>,
    /// Ranks beyond them (at most [`MAX_RANKS_COUNTED`] told apart) and their markers.
    other_ranks: std::collections::HashSet<u32>,
    unfollowed: u64,
}

impl Marks {
    /// All markers received so far (absolute count).
    fn total(&self) -> usize {
        self.base + self.kept.len()
    }

    fn extend(&mut self, mut got: Vec<StepMark>) {
        got.retain(|k| self.follows(k.rank));
        self.kept.extend(got);
        if self.kept.len() > MAX_KEPT_MARKS {
            let gone = self.kept.len() - MAX_KEPT_MARKS / 2;
            let unread = (self.base + gone).saturating_sub(self.read_upto.max(self.base));
            self.flooded = self.flooded.saturating_add(unread as u64);
            self.kept.drain(..gone);
            self.base += gone;
        }
    }

    /// Whether markers of `rank` are kept: a rank seen before, or a new one while fewer than
    /// [`MAX_RANKS`] are followed; the others are counted.
    fn follows(&mut self, rank: Option<u32>) -> bool {
        if self.ranks.contains(&rank) {
            return true;
        }
        if self.ranks.len() < MAX_RANKS {
            self.ranks.insert(rank);
            return true;
        }
        if let Some(r) = rank.filter(|_| self.other_ranks.len() < MAX_RANKS_COUNTED) {
            self.other_ranks.insert(r);
        }
        self.unfollowed = self.unfollowed.saturating_add(1);
        false
    }

    /// The markers kept, oldest first.
    pub(crate) fn kept(&self) -> &[StepMark] {
        &self.kept
    }
}

/// A bound socket and the thread that collects its steps (and answers `figures` queries:
/// [`super::figures`]).
pub(crate) struct StepSocket {
    path: PathBuf,
    /// The (device, inode) of the socket this bound: at the end only that is removed, not a
    /// file the job (or anyone) put at the path meanwhile.
    made: Option<(u64, u64)>,
    /// The private folder the socket lives in ([`StepSocket::open`]), removed on drop.
    dir: Option<tempfile::TempDir>,
    marks: Arc<Mutex<Marks>>,
    /// GPU and phase readings for replies, fed by the recorder ([`StepSocket::board`]).
    board: Arc<Mutex<Board>>,
    /// Markers dropped for a time outside [`plausible`] or an absurd item count
    /// ([`plausible_mark`]).
    dropped: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    /// The last [`StepSocket::settle`] token the receiver has read.
    settled: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

/// The datagram [`StepSocket::settle`] sends itself: `settle <token>`.
const SETTLE: &str = "settle";

impl StepSocket {
    /// Binds a socket in a new private folder (mode 0700, unpredictable name, in the temporary
    /// directory) and starts collecting: the way to get a step socket. Hand the job
    /// [`StepSocket::path`] in [`ENV_VAR`]. The folder and the socket go when this is dropped.
    pub(crate) fn open() -> std::io::Result<StepSocket> {
        let dir = crate::outfile::owned_private_dir(STALE_PREFIX)?;
        let mut s = Self::bind(&dir.path().join("step.sock"))?;
        s.dir = Some(dir);
        Ok(s)
    }

    /// Binds the socket at a path the user chose (`--step-socket PATH`), for a job started
    /// earlier with `GPUFEED_STEP_SOCKET=PATH` (its probe drops markers while nobody listens).
    /// A stale socket left there (nobody bound to it) is replaced; anything else there is
    /// refused, as is a socket another process is reading. The socket is removed on drop.
    pub(crate) fn bind_given(path: &Path) -> Result<StepSocket, GivenSocketError> {
        use std::os::unix::fs::FileTypeExt;
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_socket() => {
                // A datagram connect succeeds only while some socket is bound there.
                if UnixDatagram::unbound()
                    .and_then(|u| u.connect(path))
                    .is_ok()
                {
                    return Err(GivenSocketError::InUse(path.to_path_buf()));
                }
                std::fs::remove_file(path).map_err(|source| GivenSocketError::Io {
                    path: path.to_path_buf(),
                    source,
                })?;
            }
            Ok(_) => return Err(GivenSocketError::NotASocket(path.to_path_buf())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(GivenSocketError::Io {
                    path: path.to_path_buf(),
                    source,
                })
            }
        }
        Self::bind_private(path).map_err(|source| GivenSocketError::Io {
            path: path.to_path_buf(),
            source,
        })
    }

    /// [`StepSocket::bind`] at `path` with mode 0600 whatever the umask (under umask 000 the
    /// socket was world-writable: anyone could send markers): bound in a new 0700 folder beside
    /// `path`, narrowed, then linked into place (`link(2)` never replaces what appeared there
    /// meanwhile), so no other user can ever connect to it.
    fn bind_private(path: &Path) -> std::io::Result<StepSocket> {
        use std::os::unix::fs::PermissionsExt;
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let staging = tempfile::Builder::new()
            .prefix(".gpufeed-step-socket-")
            .tempdir_in(parent)?;
        std::fs::set_permissions(staging.path(), std::fs::Permissions::from_mode(0o700))?;
        let staged = staging.path().join("s");
        let mut s = Self::bind(&staged)?;
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o600))?;
        match std::fs::hard_link(&staged, path) {
            Ok(()) => {
                let _ = std::fs::remove_file(&staged);
            }
            // a file system without hard links: renamed, if nothing appeared there meanwhile
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                if std::fs::symlink_metadata(path).is_ok() {
                    return Err(e);
                }
                std::fs::rename(&staged, path)?;
            }
            Err(e) => return Err(e),
        }
        s.path = path.to_path_buf();
        Ok(s)
    }

    /// Binds a socket at `path` (which must not exist: nothing there is removed) and starts
    /// collecting. Prefer [`StepSocket::open`], which makes the private folder for it.
    pub(crate) fn bind(path: &Path) -> std::io::Result<StepSocket> {
        let sock = UnixDatagram::bind(path)?;
        let made = identity(path);
        sock.set_read_timeout(Some(Duration::from_millis(100)))?;
        // A reply to a hook that stopped reading must not hold up the markers behind it.
        sock.set_write_timeout(Some(REPLY_TIMEOUT))?;
        // (Replies are sent without blocking at all: Receiver::reply.)
        let marks = Arc::new(Mutex::new(Marks::default()));
        let board = Arc::new(Mutex::new(Board::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let dropped = Arc::new(AtomicU64::new(0));
        let settled = Arc::new(AtomicU64::new(0));
        let rx = Receiver {
            sock,
            marks: Arc::clone(&marks),
            board: Arc::clone(&board),
            stop: Arc::clone(&stop),
            dropped: Arc::clone(&dropped),
            settled: Arc::clone(&settled),
        };
        let thread = std::thread::Builder::new()
            .name("gpufeed-steps".into())
            .spawn(move || rx.run())?;
        Ok(StepSocket {
            path: path.to_path_buf(),
            made,
            dir: None,
            marks,
            board,
            dropped,
            stop,
            settled,
            thread: Some(thread),
        })
    }

    /// Waits (at most `limit`) until every datagram sent to the socket before this call has
    /// been read: a job's last markers, sent just before it exits, are still in the socket's
    /// queue when gpufeed sees the exit. Datagrams of a socket arrive in order, so once a token
    /// sent now comes back through the receiver, everything before it has. False when it did
    /// not (the receiver is gone, or flooded beyond `limit`).
    pub(crate) fn settle(&self, limit: Duration) -> bool {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let token = NEXT.fetch_add(1, Ordering::Relaxed);
        let Ok(me) = UnixDatagram::unbound() else {
            return false;
        };
        if me
            .send_to(format!("{SETTLE} {token}").as_bytes(), &self.path)
            .is_err()
        {
            return false;
        }
        let until = std::time::Instant::now() + limit;
        while self.settled.load(Ordering::Acquire) < token {
            if std::time::Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }

    /// The readings replies are made of: a recorder feeds it every line it writes.
    pub(crate) fn board(&self) -> Arc<Mutex<Board>> {
        Arc::clone(&self.board)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The steps received so far and still kept ([`MAX_KEPT_MARKS`]), in the order they arrived.
    pub(crate) fn marks(&self) -> Vec<StepMark> {
        self.marks
            .lock()
            .map(|m| m.kept.clone())
            .unwrap_or_default()
    }

    /// Markers dropped so far for an implausible time (see [`plausible`]).
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Markers let go unread under a flood (more than [`MAX_KEPT_MARKS`] waiting at once).
    pub(crate) fn flooded(&self) -> u64 {
        self.marks.lock().map(|m| m.flooded).unwrap_or(0)
    }

    /// Markers of ranks beyond the first [`MAX_RANKS`], and how many such ranks (at most
    /// 65,536 told apart): `(0, 0)` when every rank was followed.
    pub(crate) fn unfollowed(&self) -> (u64, u64) {
        self.marks
            .lock()
            .map(|m| (m.unfollowed, m.other_ranks.len() as u64))
            .unwrap_or((0, 0))
    }

    /// The steps received from absolute position `from` on (those let go under a flood
    /// skipped), and the position to ask from next time: for a reader that keeps its place.
    pub(crate) fn marks_since(&self, from: usize) -> (Vec<StepMark>, usize) {
        let Ok(mut m) = self.marks.lock() else {
            return (Vec::new(), from);
        };
        let start = from.max(m.base) - m.base;
        let got = m
            .kept
            .get(start..)
            .map(<[StepMark]>::to_vec)
            .unwrap_or_default();
        let next = m.total();
        m.read_upto = m.read_upto.max(next);
        (got, next)
    }
}

impl std::fmt::Debug for StepSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepSocket")
            .field("path", &self.path)
            .finish()
    }
}

/// Longest a reply may wait for room in the asking hook's socket (then it is dropped).
pub(crate) const REPLY_TIMEOUT: Duration = Duration::from_millis(5);

/// The socket's thread: collects markers and answers queries until told to stop.
struct Receiver {
    sock: UnixDatagram,
    marks: Arc<Mutex<Marks>>,
    board: Arc<Mutex<Board>>,
    stop: Arc<AtomicBool>,
    dropped: Arc<AtomicU64>,
    settled: Arc<AtomicU64>,
}

impl Receiver {
    /// Sends a reply without ever waiting: an asker that does not read its replies (its buffer
    /// full) must not hold up the one thread that receives every rank's markers (one reply
    /// blocking 5 ms each lost 13,435 of 20,097 markers). Dropped when it cannot go.
    fn reply(&self, bytes: &[u8], to: &std::os::unix::net::SocketAddr) {
        if self.sock.set_nonblocking(true).is_ok() {
            let _ = self.sock.send_to_addr(bytes, to);
        }
        let _ = self.sock.set_nonblocking(false);
    }

    fn run(self) {
        let bound_ns = monotonic_ns();
        let mut replier = Replier::new(bound_ns);
        let mut buf = [0u8; 4096];
        // Once the job sends markers of its own, gpufeed's DataLoader markers are left out: the
        // job knows its steps best, and a step must not count twice.
        let mut own_seen = false;
        while !self.stop.load(Ordering::Relaxed) {
            match self.sock.recv_from(&mut buf) {
                Ok((n, from)) => {
                    let now = monotonic_ns();
                    let text = String::from_utf8_lossy(&buf[..n]);
                    if let Some(token) = text
                        .strip_prefix(SETTLE)
                        .and_then(|t| t.trim().parse::<u64>().ok())
                    {
                        self.settled.fetch_max(token, Ordering::Release);
                        continue;
                    }
                    let mut got = parse_datagram(&text, now);
                    let before = got.len();
                    got.retain(|k| plausible_mark(k, bound_ns, now));
                    self.dropped
                        .fetch_add((before - got.len()) as u64, Ordering::Relaxed);
                    own_seen |= got.iter().any(|k| k.source == MarkSource::Job);
                    if own_seen {
                        got.retain(|k| k.source == MarkSource::Job);
                    }
                    let Ok(mut marks) = self.marks.lock() else {
                        continue;
                    };
                    marks.extend(got);
                    // A query from a socket without an address cannot be answered.
                    let Some(q) = parse_query(&text).filter(|_| !from.is_unnamed()) else {
                        continue;
                    };
                    let reply = match self.board.lock() {
                        Ok(b) => replier.answer(&q, now, marks.kept(), &b),
                        Err(_) => None,
                    };
                    drop(marks);
                    if let Some(r) = reply {
                        self.reply(r.as_bytes(), &from);
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
    }
}

/// Folds step marks into interval totals. A step runs from the previous mark of the same rank
/// to its own, so the very first mark of each rank only starts its clock.
#[derive(Debug, Default)]
pub(crate) struct StepFolder {
    last_ns: std::collections::BTreeMap<Option<u32>, u64>,
}

impl StepFolder {
    /// The totals of `marks` per rank (`None`: marks that name none), ranks with no timed step
    /// left out.
    pub(crate) fn fold_by_rank(&mut self, marks: &[StepMark]) -> Vec<(Option<u32>, StepTotals)> {
        let mut m = marks.to_vec();
        m.sort_by_key(|k| (k.rank, k.t_ns));
        let mut out: Vec<(Option<u32>, StepTotals)> = Vec::new();
        for k in m {
            if out.last().is_none_or(|(r, _)| *r != k.rank) {
                out.push((k.rank, StepTotals::empty()));
            }
            let t = &mut out.last_mut().expect("pushed above").1;
            let last = self.last_ns.get(&k.rank).copied();
            if let Some(prev) = last.filter(|p| k.t_ns >= *p && k.is_step()) {
                t.add(prev, &k);
            }
            self.last_ns
                .insert(k.rank, last.map_or(k.t_ns, |p| p.max(k.t_ns)));
        }
        out.retain(|(_, t)| t.steps > 0);
        out
    }
}

/// The (device, inode) of the socket at `path`, not following a link; `None` for anything else.
fn identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    std::fs::symlink_metadata(path)
        .ok()
        .filter(|m| m.file_type().is_socket())
        .map(|m| (m.dev(), m.ino()))
}

impl Drop for StepSocket {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // Only the socket this bound is ours to remove: the job may have put a file of its own
        // at the path since (a hard link to it keeps its inode, so `bind_private` holds too).
        if self.made.is_some() && identity(&self.path) == self.made {
            let _ = std::fs::remove_file(&self.path);
        }
        if let Some(d) = self.dir.take() {
            let _ = d.close();
        }
    }
}

/// The step-marker socket: the path `--step-socket` names (a job already running was started
/// with it), else a private one for a job gpufeed starts. A `--step-socket` that cannot be bound
/// is an error; a private socket that cannot be opened is only a note (`note_unread`: what is
/// then missed; `None`: say nothing).
pub(crate) fn for_job(
    given: Option<&std::path::Path>,
    note_unread: Option<&str>,
) -> Result<Option<std::sync::Arc<crate::sample::steps::StepSocket>>, crate::exit::Failure> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The totals of `marks` (in arrival order; sorted here) over every rank, continuing from
    /// earlier calls (`StepFolder::fold_by_rank`, summed).
    fn fold(folder: &mut StepFolder, marks: &[StepMark]) -> StepTotals {
        let mut all = StepTotals::default();
        for (i, (_, t)) in folder.fold_by_rank(marks).into_iter().enumerate() {
            all.steps += t.steps;
            all.span_s += t.span_s;
            (all.wait_s, all.items) = if i == 0 {
                (t.wait_s, t.items)
            } else {
                (
                    all.wait_s.zip(t.wait_s).map(|(a, b)| a + b),
                    all.items.zip(t.items).map(|(a, b)| a.saturating_add(b)),
                )
            };
        }
        all
    }

    #[test]
    fn a_given_path_replaces_a_stale_socket_and_refuses_anything_else() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("steps.sock");
        // Nothing there: bound, and removed on drop.
        let s = StepSocket::bind_given(&path).unwrap();
        // Someone is reading it: refused, and it is left alone.
        assert!(matches!(
            StepSocket::bind_given(&path),
            Err(GivenSocketError::InUse(_))
        ));
        drop(s);
        assert!(!path.exists());
        // A stale socket (bound by a process that is gone without removing it): replaced.
        drop(UnixDatagram::bind(&path).unwrap());
        assert!(path.exists());
        let s = StepSocket::bind_given(&path).unwrap();
        let tx = UnixDatagram::unbound().unwrap();
        tx.send_to(b"step - 1 2", &path).unwrap();
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while s.marks().is_empty() && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(s.marks().len(), 1);
        drop(s);
        // A regular file: refused and kept.
        std::fs::write(&path, "data").unwrap();
        let e = StepSocket::bind_given(&path).unwrap_err();
        assert!(matches!(e, GivenSocketError::NotASocket(_)), "{e}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "data");
        // No folder: a clear error.
        let e = StepSocket::bind_given(&dir.path().join("nope/s.sock")).unwrap_err();
        assert!(e.to_string().contains("folder exists"), "{e}");
    }

    /// The socket at a given path is the user's alone, whatever the umask (a
    /// test cannot set the umask without racing the other tests' files: the mode is checked
    /// here, and under `umask 000` by `tests/it/record.rs`).
    #[test]
    fn a_given_path_is_bound_with_mode_0600_and_no_staging_folder_is_left() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("steps.sock");
        let s = StepSocket::bind_given(&path).unwrap();
        let m = std::fs::symlink_metadata(&path).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o600);
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "only the socket"
        );
        let tx = UnixDatagram::unbound().unwrap();
        tx.send_to(b"step - 1 2", &path).unwrap();
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while s.marks().is_empty() && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(s.marks().len(), 1, "markers reach it at its final path");
        drop(s);
        assert!(!path.exists());
    }

    #[test]
    fn the_plausible_window_is_the_sockets_life_give_or_take_the_skew() {
        let (bound, now) = (50 * MARK_SKEW_NS, 60 * MARK_SKEW_NS);
        assert!(plausible(bound, bound, now) && plausible(now, bound, now));
        assert!(plausible(bound - MARK_SKEW_NS, bound, now));
        assert!(plausible(now + MARK_SKEW_NS, bound, now));
        assert!(!plausible(bound - MARK_SKEW_NS - 1, bound, now));
        assert!(!plausible(now + MARK_SKEW_NS + 1, bound, now));
        assert!(plausible(0, 0, 0), "no underflow at boot");
        // u64::MAX items: saturates, never overflows.
        let mut f = StepFolder::default();
        let big = |t| StepMark {
            t_ns: t,
            wait_ns: None,
            items: Some(u64::MAX),
            rank: None,
            ..Default::default()
        };
        assert_eq!(
            fold(&mut f, &[big(1), big(2), big(3)]).items,
            Some(u64::MAX)
        );
    }

    #[test]
    fn protocol_lines() {
        assert_eq!(
            parse_datagram("step 100 20 32\nstep - - 32\nhello 1\nstep x\nstep 5", 7),
            vec![
                StepMark {
                    t_ns: 100,
                    wait_ns: Some(20),
                    items: Some(32),
                    rank: None,
                    ..Default::default()
                },
                StepMark {
                    t_ns: 7,
                    wait_ns: None,
                    items: Some(32),
                    rank: None,
                    ..Default::default()
                },
                StepMark {
                    t_ns: 5,
                    wait_ns: None,
                    items: None,
                    rank: None,
                    ..Default::default()
                },
            ]
        );
    }

    #[test]
    fn each_rank_times_its_own_steps() {
        let at = |t_ns: u64, rank: u32| StepMark {
            t_ns,
            wait_ns: Some(100_000_000),
            items: Some(8),
            rank: Some(rank),
            ..Default::default()
        };
        let got = parse_datagram("step 5 6 7 3\nstep 5 6 7", 0);
        assert_eq!((got[0].rank, got[1].rank), (Some(3), None));
        let mut f = StepFolder::default();
        // Two ranks interleave, each at 2 steps/s: no step is cut short by the other's mark.
        let marks = [at(0, 0), at(10, 1), at(500_000_000, 0), at(500_000_010, 1)];
        let by = f.fold_by_rank(&marks);
        assert_eq!(by.len(), 2);
        for (r, t) in &by {
            assert_eq!(t.steps, 1, "rank {r:?}");
            assert!((t.span_s - 0.5).abs() < 1e-9);
            assert_eq!(t.items, Some(8));
        }
        let all = fold(&mut f, &[at(1_000_000_000, 0), at(1_000_000_010, 1)]);
        assert_eq!(all.steps, 2);
        assert!((all.span_s - 1.0).abs() < 1e-9);
        assert!((all.wait_s.unwrap() - 0.2).abs() < 1e-9);
    }

    fn mark(t_ns: u64, wait_ns: Option<u64>, items: Option<u64>) -> StepMark {
        StepMark {
            t_ns,
            wait_ns,
            items,
            rank: None,
            ..Default::default()
        }
    }

    #[test]
    fn folding_counts_steps_from_the_second_mark_across_calls() {
        let mut f = StepFolder::default();
        // The first mark starts the clock; its own wait belongs to a step of unknown start.
        let a = fold(
            &mut f,
            &[
                mark(1_000_000_000, Some(900_000_000), Some(8)),
                mark(1_500_000_000, Some(200_000_000), Some(8)),
            ],
        );
        assert_eq!(a.steps, 1);
        assert!((a.span_s - 0.5).abs() < 1e-9);
        assert!((a.wait_s.unwrap() - 0.2).abs() < 1e-9);
        assert_eq!(a.items, Some(8));
        // Arrival order does not matter; one step without a wait makes the wait unknown.
        let b = fold(
            &mut f,
            &[
                mark(2_500_000_000, None, Some(8)),
                mark(2_000_000_000, Some(100_000_000), Some(8)),
            ],
        );
        assert_eq!(b.steps, 2);
        assert!((b.span_s - 1.0).abs() < 1e-9);
        assert_eq!(b.wait_s, None);
        assert_eq!(b.items, Some(16));
        assert_eq!(fold(&mut f, &[]), StepTotals::default());
    }

    #[test]
    fn a_figures_query_gets_one_json_line_back_and_is_no_marker() {
        use std::os::linux::net::SocketAddrExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.sock");
        let s = StepSocket::bind(&p).unwrap();
        let name = format!("gpufeed-test-{}-figures", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let hook = UnixDatagram::bind_addr(&addr).unwrap();
        hook.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        // Three markers 10 ms apart, after the socket was bound and before the query.
        std::thread::sleep(Duration::from_millis(40));
        let t0 = monotonic_ns() - 30_000_000;
        for i in 0..3u64 {
            let m = format!("step {} 5000000 8 2", t0 + i * 10_000_000);
            hook.send_to(m.as_bytes(), &p).unwrap();
        }
        hook.send_to(b"figures 2 4242 77\n", &p).unwrap();
        let mut buf = [0u8; 8192];
        let (n, from) = hook.recv_from(&mut buf).unwrap();
        assert_eq!(from.as_pathname(), Some(p.as_path()));
        let v: serde_json::Value = serde_json::from_slice(&buf[..n]).unwrap();
        assert_eq!(v["q"], 77);
        assert_eq!(v["rank"], 2);
        assert_eq!(v["steps"], 2, "{v}");
        assert!(
            (v["data_wait_pct"].as_f64().unwrap() - 50.0).abs() < 1e-6,
            "{v}"
        );
        // No recorder fed the board: no GPU figures rather than made-up ones.
        assert!(v.get("gpus").is_none(), "{v}");
        assert_eq!(s.marks().len(), 3);
        // An unbound sender cannot be answered; nothing breaks.
        UnixDatagram::unbound()
            .unwrap()
            .send_to(b"figures 2", &p)
            .unwrap();
        hook.send_to(b"step - 1 1 2", &p).unwrap();
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while s.marks().len() < 4 && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(s.marks().len(), 4);
    }

    /// The last markers a job sends before it exits are read before the final count: a
    /// settle token comes back only after every datagram sent before it.
    #[test]
    fn settle_waits_for_every_marker_already_sent() {
        let sock = StepSocket::open().unwrap();
        let job = UnixDatagram::unbound().unwrap();
        let t = monotonic_ns();
        for i in 0..200u64 {
            job.send_to(format!("step {} - 8", t + i).as_bytes(), sock.path())
                .unwrap();
        }
        assert!(sock.settle(Duration::from_secs(5)));
        assert_eq!(
            sock.marks().len(),
            200,
            "all read, none counted as a marker twice"
        );
        assert!(
            sock.settle(Duration::from_secs(5)),
            "again, with a new token"
        );
        assert_eq!(sock.marks().len(), 200, "the token is no marker");
    }

    #[test]
    fn socket_collects_steps() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.sock");
        let s = StepSocket::bind(&p).unwrap();
        let tx = UnixDatagram::unbound().unwrap();
        let t0 = monotonic_ns();
        for i in 0..5u64 {
            tx.send_to(format!("step {} 10", t0 + i).as_bytes(), &p)
                .unwrap();
        }
        // Implausible: from before the socket, far ahead, the largest u64; 10^12 and 2^64-1
        // samples in one step.
        let bad = format!(
            "step 5 10\nstep {} 1\nstep {}\nstep {} 0 1000000000000\nstep {} 0 {}",
            t0 + 10u64.pow(18),
            u64::MAX,
            t0 + 5,
            t0 + 6,
            u64::MAX
        );
        tx.send_to(bad.as_bytes(), &p).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while s.dropped() < 5 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let m = s.marks();
        assert_eq!(m.len(), 5);
        assert_eq!(m[4].t_ns, t0 + 4);
        assert_eq!(s.dropped(), 5);
        assert_eq!(s.marks_since(3).0.len(), 2);
        assert_eq!(s.marks_since(3).1, 5);
        assert!(s.marks_since(9).0.is_empty());
        drop(s);
        assert!(!p.exists());
    }

    #[test]
    fn idle_lines_and_the_loader_hooks_mark_are_read() {
        let got = parse_datagram(
            "idle 50 3 auto\nstep 90 10 8 3 auto\nidle 95\nstep 99 1 2 3 x",
            0,
        );
        assert_eq!(got.len(), 4);
        assert_eq!(
            (got[0].kind, got[0].source, got[0].rank, got[0].t_ns),
            (MarkKind::Idle, MarkSource::Loader, Some(3), 50)
        );
        assert_eq!((got[0].wait_ns, got[0].items), (None, None));
        assert_eq!(
            (got[1].kind, got[1].source, got[1].wait_ns, got[1].items),
            (MarkKind::Step, MarkSource::Loader, Some(10), Some(8))
        );
        assert_eq!(
            (got[2].kind, got[2].rank, got[2].source),
            (MarkKind::Idle, None, MarkSource::Job)
        );
        // An unknown trailing word is room to grow: the job's own marker.
        assert_eq!(got[3].source, MarkSource::Job);
    }

    #[test]
    fn an_idle_mark_restarts_the_step_clock() {
        const S: u64 = 1_000_000_000;
        let step = |t| StepMark {
            t_ns: t,
            wait_ns: Some(S / 10),
            items: Some(8),
            ..Default::default()
        };
        let idle = |t| StepMark {
            t_ns: t,
            kind: MarkKind::Idle,
            ..Default::default()
        };
        // Two steps of 1 s, a 10 s pause (validation) ended by an idle mark, one step of 1 s.
        let marks = [step(0), step(S), step(2 * S), idle(12 * S), step(13 * S)];
        let t = fold(&mut StepFolder::default(), &marks);
        assert_eq!(t.steps, 3);
        assert!((t.span_s - 3.0).abs() < 1e-9, "{t:?}");
        assert_eq!(t.items, Some(24));
        // Without the idle mark the pause would be one 11 s step.
        let t = fold(
            &mut StepFolder::default(),
            &[step(0), step(S), step(2 * S), step(13 * S)],
        );
        assert!((t.span_s - 13.0).abs() < 1e-9);
    }

    #[test]
    fn the_jobs_own_markers_win_over_the_loader_hooks() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.sock");
        let s = StepSocket::bind(&p).unwrap();
        let tx = UnixDatagram::unbound().unwrap();
        let t0 = monotonic_ns();
        // The hook marks two steps; then the job's own markers start: from then on the hook's
        // markers are left out, so no step is counted twice.
        for (i, line) in [
            "step {} 1 8 7 auto",
            "step {} 1 8 7 auto",
            "step {} 1 8 7",
            "step {} 1 8 7 auto",
            "idle {} 7 auto",
            "step {} 1 8 7",
        ]
        .iter()
        .enumerate()
        {
            let m = line.replace("{}", &(t0 + i as u64).to_string());
            tx.send_to(m.as_bytes(), &p).unwrap();
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while s.marks().len() < 4 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(50));
        let m = s.marks();
        let sources: Vec<MarkSource> = m.iter().map(|k| k.source).collect();
        assert_eq!(
            sources,
            [
                MarkSource::Loader,
                MarkSource::Loader,
                MarkSource::Job,
                MarkSource::Job
            ]
        );
        assert_eq!(s.dropped(), 0, "left out is not dropped as implausible");
    }

    #[test]
    fn a_flood_keeps_memory_bounded_and_counts_what_it_let_go() {
        let mut m = Marks::default();
        let mk = |t| StepMark {
            t_ns: t,
            ..Default::default()
        };
        m.extend((0..MAX_KEPT_MARKS as u64).map(mk).collect());
        m.read_upto = 100; // a reader took the first 100
        m.extend(vec![mk(1)]);
        assert_eq!(m.kept.len(), MAX_KEPT_MARKS / 2);
        assert_eq!(m.total(), MAX_KEPT_MARKS + 1);
        // Those let go unread are counted; those read before are not lost.
        assert_eq!(m.flooded, (MAX_KEPT_MARKS / 2 + 1 - 100) as u64);
        for _ in 0..4 {
            m.extend((0..MAX_KEPT_MARKS as u64).map(mk).collect());
            assert!(m.kept.len() <= MAX_KEPT_MARKS);
        }
    }

    #[test]
    fn an_asker_that_never_reads_its_replies_cannot_hold_up_the_markers() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.sock");
        let s = StepSocket::bind(&p).unwrap();
        let asker = UnixDatagram::bind(dir.path().join("ask.sock")).unwrap();
        let tx = UnixDatagram::unbound().unwrap();
        let t0 = monotonic_ns();
        // 300 queries never read: the asker's queue fills after a few replies. Before, each
        // further reply blocked the receiving thread for 5 ms (1.5 s in all).
        let start = std::time::Instant::now();
        for i in 0..300u64 {
            tx.send_to(format!("step {} 1 8", t0 + i).as_bytes(), &p)
                .unwrap();
            asker.send_to(b"figures 0 1 1", &p).unwrap();
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while s.marks().len() < 300 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(s.marks().len(), 300);
        asker.set_nonblocking(true).unwrap();
        let mut replies = 0;
        while asker.recv(&mut [0u8; 4096]).is_ok() {
            replies += 1;
        }
        assert!(
            replies < 300,
            "the asker's queue filled: {replies} replies kept"
        );
        assert!(
            start.elapsed() < Duration::from_millis(1000),
            "replies waited: {:?}",
            start.elapsed()
        );
    }
}
