//! Python stacks of the job's processes, read from outside with the `py-spy` library.
//!
//! py-spy reads the interpreter's memory with `process_vm_readv`: no code change, no restart.
//! One `PythonSpy` per Python process of the job's tree (main process, DataLoader workers);
//! idle threads are included, since a training thread blocked waiting for a batch is the very
//! thing measured. Reading needs ptrace-level access: a job started by gpufeed (its child) is
//! readable under Yama's default `ptrace_scope = 1`; an unrelated `--pid` needs CAP_SYS_PTRACE.
//!
//! Nothing here prints: statuses (ok, denied, not Python, unsupported version) are returned once
//! per process for the caller to record and, for refusals, to tell people once.

use super::ranks::{is_rank_start, rank_env_of, RankEnv};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// One frame, as read: its code object's serial, or (without py-spy's frame cache) its names.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct RawFrame {
    /// Empty when `code` is not 0.
    pub name: String,
    pub file: String,
    pub line: i32,
    /// The serial of the frame's code object (unique in gpufeed's life, never reused for other
    /// code): its names were given once, in the [`CodeNames`] of the reading that first met it
    /// or of an earlier one of the same process. 0: the names are in this frame.
    pub code: u64,
}

/// The names of a code object, given once with its serial ([`RawFrame::code`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CodeNames {
    pub code: u64,
    pub name: String,
    pub file: String,
}

/// One thread's stack at one instant.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ThreadStack {
    /// OS thread id (the Python thread id where the OS one is unknown).
    pub tid: u64,
    pub name: Option<String>,
    /// Running (on a CPU) rather than blocked in a system call.
    pub active: bool,
    /// Holding the GIL when read. A thread running without it is in native code that released
    /// it (a C extension's decode, a tokenizer's Rust, numpy, torch): what its innermost Python
    /// frame called, not that frame's own bytecode.
    pub owns_gil: bool,
    /// Outermost first.
    pub frames: Vec<RawFrame>,
    /// Not read: the thread did not run since the last reading, so its stack is where it was
    /// (the caller counts its last stack again, idle); `frames` is empty and `name` `None`.
    pub reused: bool,
}

/// One reading of one process.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum PyReading {
    /// Its stacks, as read, and the code objects met for the first time (their frames carry
    /// only the serial).
    Stacks {
        stacks: Vec<ThreadStack>,
        codes: Vec<CodeNames>,
    },
    /// It did not run since its last reading ([`PyOptions::idle_skip`]): its threads are where
    /// they were, so its last stacks count again, every thread idle. The caller keeps them.
    Unchanged,
}

/// What sampling one process came to.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[strum(serialize_all = "snake_case")]
#[serde(rename_all = "snake_case")]
pub enum PyStatus {
    Ok,
    /// The kernel refused to let gpufeed read the process (ptrace permission).
    Denied,
    NotPython,
    UnsupportedVersion,
}

impl PyStatus {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// A process's status, reported once when it is decided.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StatusEvent {
    pub pid: u32,
    pub status: PyStatus,
    /// The interpreter version (ok) or why not (the others).
    pub detail: Option<String>,
    /// The rank this process starts (a launcher's child with `RANK` / `LOCAL_RANK` in its
    /// environment, see [`super::ranks`]); `None` for everything else, its workers included.
    pub rank: Option<RankEnv>,
}

/// How to read stacks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PyOptions {
    /// Pause the process while its stack is read (consistent, costs the job a little) instead
    /// of reading it live (cheaper; a stack torn by a concurrent change is dropped).
    pub blocking: bool,
    /// A Python process whose parent is a sampled Python process (a DataLoader worker, a
    /// multiprocessing child) is read once every this many ticks (1: every tick). Their stacks
    /// rank the data stages, which needs shares over many seconds, not every 10 ms; the training
    /// process keeps the full rate. Readers weight each process by its own interval.
    pub child_every: u32,
    /// Keep what was read of each code object (names, line tables) and read only the Python
    /// threads' run state, in the vendored py-spy (vendor/py-spy/PATCHES.md): a known frame
    /// then costs one read of the process's memory. Off only to measure what it saves.
    pub cache: bool,
    /// Read a process's stacks only when one of its Python threads ran since the last reading
    /// (only a thread that ran can have moved its stack); until then its last stacks count
    /// again, as idle: a sleeping launcher or idle helper costs one `pread` of a small /proc
    /// file per Python thread instead of a py-spy reading. Off only to measure it.
    pub idle_skip: bool,
}

/// Default [`PyOptions::child_every`]: workers at a quarter of the rate (measured in
/// bench/pystacks_overhead.py).
pub(crate) const CHILD_EVERY: u32 = 4;

/// The children of one process (its DataLoader workers) share a budget: together they are read
/// at most once every this many ticks on average, so each is read every
/// `max(child_every, CHILD_SHARE_TICKS × children)` ticks (at 100 Hz: 25 Hz each for one or
/// two workers, 12.5 Hz for four, 6.25 Hz for eight). What the workers' stacks tell (the
/// shares of the data stages, their time per sample) comes from their pooled samples, 50 a
/// second per training process at 100 Hz however many workers it has; the cost stops growing
/// with `num_workers` (8 ranks × 8 workers at 25 Hz each would be 1,600 readings a second).
/// Not applied when `child_every` is 1 (every process at the full rate, to measure).
pub(crate) const CHILD_SHARE_TICKS: u32 = 2;

/// Every how many ticks a child with `siblings` (itself included) is read ([`CHILD_SHARE_TICKS`]).
fn shared_every(child_every: u32, siblings: u32) -> u32 {
    if child_every <= 1 {
        return 1;
    }
    child_every.max(CHILD_SHARE_TICKS.saturating_mul(siblings))
}

/// Retries of a process that looks like Python but whose interpreter is not ready yet (it has
/// just started or exec'd).
const MAX_ATTEMPTS: u32 = 12;
const RETRY_EVERY: Duration = Duration::from_millis(250);
/// Consecutive failed reads of a known interpreter after which it is opened afresh (an exec).
const REOPEN_AFTER: u32 = 25;
/// Readings in a row taken from an idle process's last stacks before it is read again anyway
/// (its CPU time is counted in clock ticks: a process that runs a little may not show it).
const IDLE_REREAD_EVERY: u32 = 100;

/// One thread's scheduler clock: /proc/PID/task/TID/schedstat (nanoseconds on a CPU,
/// nanoseconds runnable but waiting for one, time slices), kept open and read in place.
struct ThreadClock {
    tid: u64,
    file: File,
    /// (on a CPU, waiting for a core), cumulative nanoseconds, at the last check.
    last: Option<(u64, u64)>,
    /// Whether it ran since the reading before (checked, or taken as busy).
    moved: bool,
    /// Checks in a row that found it ran.
    busy: u32,
    /// Readings in a row that found it idle (read blocked, or passed over); see [`QUIET_AFTER`].
    /// Never counted for its process's main thread (tid = pid), where the training loop runs.
    quiet: u32,
}

/// Whether a process ran since the last check, cheaply: only a Python thread that ran can have
/// moved its stack, so the schedstat of each Python thread of its last reading is read (one
/// `pread` each, nanosecond resolution), and the threads that did not run are not read again
/// (py-spy passes over them, `PythonSpy::get_stack_traces_skipping`). Where the threads' OS ids are unknown, the whole
/// process's /proc/PID/stat utime + stime (clock ticks) and its main thread's schedstat are read
/// instead. The threads' clocks also give their run-queue wait for the `py_samples` lines.
struct CpuClock {
    pid: u32,
    threads: Vec<ThreadClock>,
    /// Set when a thread of the last reading has no schedstat of its own.
    whole: Option<WholeClock>,
    buf: Vec<u8>,
    /// Readings so far (every [`BUSY_CHECK_EVERY`]th checks the busy threads).
    readings: u32,
    /// Checks in a row that found no thread ran.
    idle: u32,
    /// Set when a long-idle process was found to have run ([`CpuClock::wake_check`]) or is
    /// due to be read again: its next reading reads every thread.
    woke: bool,
}

/// A thread found running at this many checks in a row is busy: it is taken to have run
/// without a check, and checked again only at every [`BUSY_CHECK_EVERY`]th reading (the check
/// would say "ran" anyway; once it goes idle, that is seen within as many readings).
const BUSY_AFTER: u32 = 8;
const BUSY_CHECK_EVERY: u32 = 8;
/// A helper thread (not its process's main thread) found idle at this many readings in a row
/// is quiet: a DataLoader queue's feeder thread, a relay or heartbeat thread, which wakes for
/// a moment many times a second (so it often "ran" since the last check) and is found blocked
/// at nearly every reading. It is checked (and read, when it ran) only at every
/// [`QUIET_CHECK_EVERY`]th reading; in between its last stack counts again, idle. It is no
/// longer quiet once a reading finds it running. The main thread, where the training loop
/// runs, is never quiet: a loop waiting for data most of the time keeps its full rate.
const QUIET_AFTER: u32 = 32;
const QUIET_CHECK_EVERY: u32 = 4;
/// A process none of whose threads ran at this many checks in a row (a launcher, an idle
/// helper; a training thread waiting for data wakes far more often) is long idle: its readings
/// count its last stacks without a check, and it is checked only every [`IDLE_CHECK_PERIOD`],
/// all long-idle processes at the same tick, so that a sampler with nothing else to do sleeps
/// in between ([`PySampler::quiet_ticks`]). Its readings resume within that period once it
/// runs again.
const IDLE_AFTER: u32 = 100;
pub(crate) const IDLE_CHECK_PERIOD: Duration = Duration::from_millis(160);

/// The fallback: /proc/PID/stat and /proc/PID/schedstat.
struct WholeClock {
    stat: File,
    sched: Option<File>,
    last: Option<(u64, u64)>,
}

/// (on a CPU, waiting for a core) of a schedstat text.
fn parse_schedstat(b: &[u8]) -> Option<(u64, u64)> {
    let s = std::str::from_utf8(b).ok()?;
    let mut f = s.split_ascii_whitespace();
    Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
}

fn pread_all<'a>(f: &File, buf: &'a mut [u8]) -> Option<&'a [u8]> {
    let n = f.read_at(buf, 0).ok()?;
    (n > 0).then(|| &buf[..n])
}

impl CpuClock {
    fn new(pid: u32) -> CpuClock {
        CpuClock {
            pid,
            threads: Vec::new(),
            whole: None,
            buf: vec![0; 1024],
            readings: 0,
            idle: 0,
            woke: false,
        }
    }

    /// Long idle: see [`IDLE_AFTER`].
    fn long_idle(&self) -> bool {
        self.idle >= IDLE_AFTER
    }

    /// Did it run since the last reading, as far as is worth asking: a busy thread is taken to
    /// have run, without a check, at all but every [`BUSY_CHECK_EVERY`]th reading; a long-idle
    /// process is taken not to have run (it is checked apart, [`CpuClock::wake_check`]).
    fn ran_maybe(&mut self) -> bool {
        self.readings = self.readings.wrapping_add(1);
        if std::mem::take(&mut self.woke) {
            for t in &mut self.threads {
                t.moved = true;
            }
            return true;
        }
        if self.long_idle() {
            return false;
        }
        let ran = self.check(Some(self.readings));
        self.idle = if ran { 0 } else { self.idle.saturating_add(1) };
        ran
    }

    /// A long-idle process's check: when it ran, its next reading reads it (and it is no
    /// longer long idle).
    fn wake_check(&mut self) {
        if self.check(None) {
            self.woke = true;
            self.idle = 0;
        }
    }

    /// The followed threads that did not run since the last reading (valid after a
    /// [`CpuClock::ran_maybe`] that said the process ran): their stacks have not moved. None
    /// where the whole-process fallback is on (the threads' ids are not the OS's).
    fn unmoved(&self, out: &mut Vec<u64>) {
        out.clear();
        if self.whole.is_none() {
            out.extend(self.threads.iter().filter(|t| !t.moved).map(|t| t.tid));
        }
    }

    /// Follows the threads of a reading (their stacks' thread ids); a thread whose schedstat
    /// cannot be opened (an id that is not the OS's) turns on the whole-process fallback.
    fn follow(&mut self, stacks: &[ThreadStack]) {
        let mut same = self.threads.len() == stacks.len();
        let main = u64::from(self.pid);
        for s in stacks {
            match self.threads.iter_mut().find(|t| t.tid == s.tid) {
                Some(t) if t.tid != main && (s.reused || !s.active) => {
                    t.quiet = t.quiet.saturating_add(1)
                }
                Some(t) => t.quiet = 0,
                None => same = false,
            }
        }
        if same && self.whole.is_none() {
            return;
        }
        let mut old = std::mem::take(&mut self.threads);
        let mut missing = false;
        for s in stacks {
            if let Some(i) = old.iter().position(|t| t.tid == s.tid) {
                self.threads.push(old.swap_remove(i));
                continue;
            }
            let file = u32::try_from(s.tid).ok().and_then(|tid| {
                File::open(format!("/proc/{}/task/{tid}/schedstat", self.pid)).ok()
            });
            match file {
                Some(file) => self.threads.push(ThreadClock {
                    tid: s.tid,
                    file,
                    last: None,
                    moved: true,
                    busy: 0,
                    quiet: 0,
                }),
                None => missing = true,
            }
        }
        if missing || self.threads.is_empty() {
            if self.whole.is_none() {
                self.whole = WholeClock::open(self.pid);
            }
        } else {
            self.whole = None;
        }
    }

    /// Did any followed thread run since the last check? Unknown (unreadable, nothing followed)
    /// counts as yes.
    fn ran(&mut self) -> bool {
        self.check(None)
    }

    /// [`CpuClock::ran`] at the `reading`th reading (`None`: every thread): a quiet thread is
    /// checked only at every [`QUIET_CHECK_EVERY`]th reading (taken not to have run in
    /// between), a busy one at every [`BUSY_CHECK_EVERY`]th (taken to have run).
    fn check(&mut self, reading: Option<u32>) -> bool {
        let mut ran = self.threads.is_empty() && self.whole.is_none();
        let check_quiet = reading.is_none_or(|r| r % QUIET_CHECK_EVERY == 0);
        let check_busy = reading.is_none_or(|r| r % BUSY_CHECK_EVERY == 0);
        for t in &mut self.threads {
            if t.quiet >= QUIET_AFTER && !check_quiet {
                t.moved = false;
                continue;
            }
            if t.busy >= BUSY_AFTER && !check_busy {
                t.moved = true;
                ran = true;
                continue;
            }
            let now = pread_all(&t.file, &mut self.buf).and_then(parse_schedstat);
            t.moved = now.is_none() || now != t.last;
            t.busy = if t.moved { t.busy.saturating_add(1) } else { 0 };
            ran |= t.moved;
            t.last = now;
        }
        if let Some(w) = &mut self.whole {
            ran |= w.ran(&mut self.buf);
        }
        ran
    }

    /// A followed thread's (on a CPU, waiting for a core) nanoseconds at the last check.
    /// Read now (once per interval, for its `py_samples` line), whenever it was last checked.
    fn sched(&self, tid: u64) -> Option<(u64, u64)> {
        let t = self.threads.iter().find(|t| t.tid == tid)?;
        let mut buf = [0u8; 128];
        pread_all(&t.file, &mut buf).and_then(parse_schedstat)
    }
}

impl WholeClock {
    fn open(pid: u32) -> Option<WholeClock> {
        Some(WholeClock {
            stat: File::open(format!("/proc/{pid}/stat")).ok()?,
            sched: File::open(format!("/proc/{pid}/schedstat")).ok(),
            last: None,
        })
    }

    fn ran(&mut self, buf: &mut [u8]) -> bool {
        let ticks = pread_all(&self.stat, buf).and_then(parse_cpu_ticks);
        let ns = match &self.sched {
            Some(f) => pread_all(f, buf).and_then(parse_schedstat).map(|s| s.0),
            None => Some(0),
        };
        let now = ticks.zip(ns);
        let ran = now.is_none() || now != self.last;
        self.last = now;
        ran
    }
}

/// utime + stime (fields 14 and 15) of a /proc/PID/stat text.
fn parse_cpu_ticks(stat: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(stat).ok()?;
    let mut f = s.rsplit_once(')')?.1.split_whitespace().skip(11);
    let u: u64 = f.next()?.parse().ok()?;
    let k: u64 = f.next()?.parse().ok()?;
    Some(u + k)
}

enum Entry {
    Spy {
        spy: Box<py_spy::PythonSpy>,
        fails: u32,
        /// Read once every `every` ticks; `skip` ticks to go before the next read.
        every: u32,
        skip: u32,
        /// Its parent process (none for a rank): while the parent is sampled too, it is read
        /// at the children's rate ([`CHILD_SHARE_TICKS`]), else at the full rate.
        parent: Option<u32>,
        /// The rank variables of its start-up environment (any process, workers too).
        env: Option<RankEnv>,
        /// Its Python threads' CPU clocks.
        clock: CpuClock,
        /// Readings in a row answered [`PyReading::Unchanged`] (the last read found a thread).
        reused: u32,
        has_last: bool,
    },
    Waiting {
        attempts: u32,
        next: Instant,
        exe: Option<PathBuf>,
    },
    /// Decided: not sampled. Re-examined only when the process execs (its exe changes),
    /// looked at once a second.
    Done {
        exe: Option<PathBuf>,
        checked: Instant,
    },
}

/// Samples the Python processes among a changing set of pids.
pub(crate) struct PySampler {
    config: py_spy::Config,
    child_every: u32,
    idle_skip: bool,
    entries: HashMap<u32, Entry>,
    /// Calls of [`PySampler::sample`] so far, and every how many of them the long-idle
    /// processes are checked ([`IDLE_CHECK_PERIOD`] in ticks).
    tick: u64,
    idle_check_ticks: u64,
    /// The interval between two calls ([`PySampler::set_interval`]).
    every: Duration,
    /// Frame vectors given back ([`PySampler::recycle`]), to convert the next stacks into:
    /// a new vector a stack cost an allocation over 1 KiB, and glibc consolidated its fast
    /// bins at each one (5% of the sampler's CPU).
    spare: Vec<Vec<RawFrame>>,
    /// A process was attached since the budget was last spread.
    children_changed: bool,
}

/// Most frame vectors kept for reuse.
const MAX_SPARE: usize = 64;

/// The parent pid of a process (field 4 of /proc/PID/stat).
fn ppid_of(pid: u32) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn exe_of(pid: u32) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/exe")).ok()
}

/// Does the process map a Python interpreter (the binary or libpython)?
fn maps_python(pid: u32) -> Option<bool> {
    let maps = std::fs::read(format!("/proc/{pid}/maps")).ok()?;
    Some(memchr::memmem::find(&maps, b"python").is_some())
}

fn permission_denied(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        if let Some(e) = cause.downcast_ref::<std::io::Error>() {
            e.kind() == std::io::ErrorKind::PermissionDenied || e.raw_os_error() == Some(1)
        } else {
            false
        }
    }) || {
        let s = format!("{err:#}");
        s.contains("Permission denied") || s.contains("Operation not permitted")
    }
}

fn unsupported(err: &anyhow::Error) -> bool {
    format!("{err:#}").contains("Unsupported version")
}

impl PySampler {
    pub(crate) fn new(opts: PyOptions) -> Self {
        let config = py_spy::Config {
            blocking: if opts.blocking {
                py_spy::config::LockingStrategy::Lock
            } else {
                py_spy::config::LockingStrategy::NonBlocking
            },
            include_idle: true,
            gil_only: false,
            native: false,
            collect_thread_names: true,
            frame_cache: opts.cache,
            scan_python_threads_only: opts.cache,
            // gpufeed never shows py-spy's short file names; with the patches off (to measure
            // what they save) py-spy does all its upstream work, these included.
            short_filenames: !opts.cache,
            // Frames carry their code object's serial; names come once per code object
            // (vendored py-spy patch 13: no two strings copied per frame per reading).
            frame_names: !opts.cache,
            ..Default::default()
        };
        PySampler {
            config,
            child_every: opts.child_every.max(1),
            idle_skip: opts.idle_skip,
            entries: HashMap::new(),
            tick: 0,
            idle_check_ticks: 1,
            every: IDLE_CHECK_PERIOD,
            spare: Vec::new(),
            children_changed: false,
        }
    }

    /// Sets every sampled process's interval from its parent (run once a process was attached
    /// or the tree changed): a child of a sampled process shares its parent's budget with its
    /// siblings ([`CHILD_SHARE_TICKS`]); any other process, or every process when
    /// `child_every` is 1, keeps the full rate it was attached with.
    fn share_children(&mut self) {
        if self.child_every <= 1 {
            return;
        }
        let mut children: HashMap<u32, u32> = HashMap::new();
        let sampled = |p: &u32| matches!(self.entries.get(p), Some(Entry::Spy { .. }));
        for e in self.entries.values() {
            if let Entry::Spy {
                parent: Some(p), ..
            } = e
            {
                if sampled(p) {
                    *children.entry(*p).or_default() += 1;
                }
            }
        }
        // Siblings' readings are spread over the ticks (not all at one), each child's next
        // reading at its place in that order.
        let mut placed: HashMap<u32, u32> = HashMap::new();
        for e in self.entries.values_mut() {
            if let Entry::Spy {
                parent: Some(p),
                every,
                skip,
                ..
            } = e
            {
                // A child whose parent is not (or no longer) sampled: the full rate.
                let now = match children.get(p) {
                    Some(&n) => shared_every(self.child_every, n),
                    None => 1,
                };
                let i = placed.entry(*p).or_default();
                // Placed again only when its interval changes (processes coming and going
                // elsewhere in the tree must not move it).
                if now != *every {
                    *every = now;
                    *skip = i.saturating_mul(CHILD_SHARE_TICKS) % now;
                }
                *i += 1;
            }
        }
    }

    /// Gives back the frame vectors of a reading once its frames were taken (emptied or not):
    /// the next readings convert their stacks into them.
    pub(crate) fn recycle(&mut self, stacks: Vec<ThreadStack>) {
        for t in stacks {
            if self.spare.len() < MAX_SPARE && t.frames.capacity() > 0 {
                let mut v = t.frames;
                v.clear();
                self.spare.push(v);
            }
        }
    }

    /// The interval between two calls of [`PySampler::sample`] (the sampling rate's): sets how
    /// many ticks apart the long-idle processes are checked.
    pub(crate) fn set_interval(&mut self, every: Duration) {
        let ticks = IDLE_CHECK_PERIOD.as_secs_f64() / every.as_secs_f64().max(1e-6);
        self.idle_check_ticks = (ticks.round() as u64).max(1);
        self.every = every;
    }

    /// How many of the coming calls of [`PySampler::sample`] (for these `pids`) will read
    /// nothing, at most `max`: every process is either not due or long idle, and no check of
    /// the long-idle ones is due. The caller may sleep through them and make the calls late,
    /// back to back (they count the idle processes' readings).
    pub(crate) fn quiet_ticks(&self, pids: &[u32], max: u32) -> u32 {
        if !self.idle_skip
            || pids.len() != self.entries.len()
            || pids.iter().any(|p| !self.entries.contains_key(p))
        {
            return 0;
        }
        let n = self.idle_check_ticks;
        // The coming calls are ticks self.tick + 1, + 2, ...; the first check tick is quiet no more.
        let to_check = n - 1 - (self.tick % n);
        let mut q = u64::from(max).min(to_check);
        let now = Instant::now();
        let ticks_until = |t: Instant| {
            let left = t.saturating_duration_since(now).as_secs_f64();
            (left / self.every.as_secs_f64().max(1e-6)).floor() as u64
        };
        for e in self.entries.values() {
            let left = match e {
                Entry::Spy {
                    skip,
                    clock,
                    has_last,
                    ..
                } => {
                    if clock.long_idle() && !clock.woke && *has_last {
                        continue;
                    }
                    u64::from(*skip)
                }
                Entry::Waiting { next, .. } => ticks_until(*next),
                Entry::Done { checked, .. } => ticks_until(*checked + RETRY_EVERY * 4),
            };
            q = q.min(left);
            if q == 0 {
                break;
            }
        }
        q as u32
    }

    /// Reads every Python process among `pids` once: stacks per process, and the statuses
    /// decided on this call. Processes that exited are forgotten without a word.
    pub(crate) fn sample(
        &mut self,
        pids: &[u32],
        out: &mut Vec<(u32, PyReading)>,
        events: &mut Vec<StatusEvent>,
    ) {
        let before = self.entries.len();
        self.entries.retain(|p, _| pids.contains(p));
        if self.entries.len() != before || std::mem::take(&mut self.children_changed) {
            self.share_children();
        }
        let now = Instant::now();
        self.tick += 1;
        let idle_check = self.tick % self.idle_check_ticks == 0;
        for &pid in pids {
            let entry = self.entries.entry(pid).or_insert(Entry::Waiting {
                attempts: 0,
                next: now,
                exe: None,
            });
            if let Entry::Spy { clock, reused, .. } = entry {
                if idle_check && clock.long_idle() {
                    if *reused + 1 >= IDLE_REREAD_EVERY {
                        // Read again anyway now and then (see IDLE_REREAD_EVERY).
                        clock.woke = true;
                    } else {
                        clock.wake_check();
                    }
                }
            }
            match entry {
                Entry::Spy { skip, .. } if *skip > 0 => *skip -= 1,
                Entry::Spy { .. } => {
                    read_spy(entry, pid, now, self.idle_skip, &mut self.spare, out)
                }
                Entry::Done { .. } => recheck_done(entry, pid, now),
                Entry::Waiting { .. } => {
                    if let Some(exe) = probe(entry, pid, now, events) {
                        self.attach(pid, exe, now, out, events);
                    }
                }
            }
        }
    }

    /// Of a process that just turned out to be Python: its parent (none for a rank, which is
    /// read at the full rate whatever its parent; a child of a sampled process shares its
    /// parent's budget, see [`PySampler::share_children`]), its rank variables, and the rank
    /// it starts (see [`super::ranks`]).
    fn role(&self, pid: u32) -> (Option<u32>, Option<RankEnv>, Option<RankEnv>) {
        let env = rank_env_of(pid);
        let ppid = ppid_of(pid);
        let parent = ppid.and_then(|pp| self.entries.get(&pp));
        let parent_env = match parent {
            Some(Entry::Spy { env, .. }) => *env,
            _ => ppid.and_then(rank_env_of),
        };
        if is_rank_start(env.as_ref(), parent_env.as_ref()) {
            return (None, env, env);
        }
        (ppid, env, None)
    }

    /// Opens py-spy on a process that maps a Python interpreter (or whose maps cannot be read)
    /// and takes its first sample; says why when that fails.
    fn attach(
        &mut self,
        pid: u32,
        exe: Option<PathBuf>,
        now: Instant,
        out: &mut Vec<(u32, PyReading)>,
        events: &mut Vec<StatusEvent>,
    ) {
        let (parent, env, rank) = self.role(pid);
        self.children_changed = true;
        match py_spy::PythonSpy::new(pid as py_spy::Pid, &self.config) {
            Ok(mut spy) => match spy.get_stack_traces() {
                Ok(traces) => {
                    events.push(StatusEvent {
                        pid,
                        status: PyStatus::Ok,
                        detail: Some(spy.version.to_string()),
                        rank,
                    });
                    let stacks: Vec<ThreadStack> = traces
                        .into_iter()
                        .map(|t| convert(t, &mut self.spare, &mut spy))
                        .collect();
                    let codes = new_codes(&mut spy);
                    let mut clock = CpuClock::new(pid);
                    clock.follow(&stacks);
                    clock.ran();
                    self.entries.insert(
                        pid,
                        Entry::Spy {
                            spy: Box::new(spy),
                            fails: 0,
                            // The full rate until the next sample spreads the budget
                            // (share_children).
                            every: 1,
                            skip: 0,
                            parent,
                            env,
                            clock,
                            reused: 0,
                            has_last: !stacks.is_empty(),
                        },
                    );
                    out.push((pid, PyReading::Stacks { stacks, codes }));
                }
                Err(e) if unsupported(&e) => {
                    events.push(StatusEvent {
                        pid,
                        status: PyStatus::UnsupportedVersion,
                        detail: Some(spy.version.to_string()),
                        rank,
                    });
                    self.entries.insert(pid, Entry::Done { exe, checked: now });
                }
                Err(e) => self.failed(pid, e, rank, events),
            },
            Err(e) => self.failed(pid, e, rank, events),
        }
    }

    fn failed(
        &mut self,
        pid: u32,
        e: anyhow::Error,
        rank: Option<RankEnv>,
        events: &mut Vec<StatusEvent>,
    ) {
        let now = Instant::now();
        let Some(entry) = self.entries.get_mut(&pid) else {
            return;
        };
        let exe = match entry {
            Entry::Waiting { exe, .. } => exe.clone(),
            _ => None,
        };
        let status = if permission_denied(&e) {
            Some(PyStatus::Denied)
        } else if unsupported(&e) {
            Some(PyStatus::UnsupportedVersion)
        } else {
            None
        };
        if let Some(status) = status {
            events.push(StatusEvent {
                pid,
                status,
                detail: Some(format!("{e:#}")),
                rank,
            });
            *entry = Entry::Done { exe, checked: now };
            return;
        }
        if let Entry::Waiting { attempts, next, .. } = entry {
            *attempts += 1;
            *next = now + RETRY_EVERY;
            if *attempts >= MAX_ATTEMPTS {
                let alive = crate::sample::host::pid_alive(pid);
                if alive {
                    events.push(StatusEvent {
                        pid,
                        status: PyStatus::NotPython,
                        detail: Some(format!("{e:#}")),
                        rank,
                    });
                }
                *entry = Entry::Done { exe, checked: now };
            }
        }
    }

    /// Reads `pid` at the full rate from now on, as a rank: a child process seen running
    /// backward passes or optimizer steps trains (a rank started by `mp.spawn` or
    /// `multiprocessing.Process`, which carries no rank variables), and a training loop
    /// needs every tick to be split into phases; at a worker's shared rate a short loop beside
    /// a long `import torch` leaves too few samples per rank. Its own children (its DataLoader
    /// workers) then share its budget. Returns whether the rate changed.
    pub(crate) fn promote(&mut self, pid: u32) -> bool {
        let Some(Entry::Spy {
            parent,
            every,
            skip,
            ..
        }) = self.entries.get_mut(&pid)
        else {
            return false;
        };
        if parent.is_none() {
            return false;
        }
        *parent = None;
        *every = 1;
        *skip = 0;
        self.children_changed = true;
        true
    }

    /// A sampled thread's scheduler clock, read now: nanoseconds on a CPU and nanoseconds
    /// runnable but waiting for a core, cumulative since it started.
    pub(crate) fn sched(&self, pid: u32, tid: u64) -> Option<(u64, u64)> {
        match self.entries.get(&pid)? {
            Entry::Spy { clock, .. } => clock.sched(tid),
            _ => None,
        }
    }
}

/// Reads a sampled process's stacks; after a failure, a process that is gone is done and one
/// that failed [`REOPEN_AFTER`] times in a row is opened again.
fn read_spy(
    entry: &mut Entry,
    pid: u32,
    now: Instant,
    idle_skip: bool,
    spare: &mut Vec<Vec<RawFrame>>,
    out: &mut Vec<(u32, PyReading)>,
) {
    let Entry::Spy {
        spy,
        fails,
        every,
        skip,
        clock,
        reused,
        has_last,
        ..
    } = entry
    else {
        return;
    };
    // Read whatever the setting: the threads' clocks also give their run-queue wait.
    let ran = clock.ran_maybe();
    // A long-idle process is read again now and then at its checks (PySampler::sample).
    if idle_skip && !ran && *has_last && (*reused + 1 < IDLE_REREAD_EVERY || clock.long_idle()) {
        // Did not run since the last reading: its threads are where they were, idle.
        *reused = reused.saturating_add(1);
        *skip = *every - 1;
        out.push((pid, PyReading::Unchanged));
        return;
    }
    // The threads that did not run are passed over (their last stacks count again, idle),
    // unless a re-read of everything is due.
    let mut unmoved = Vec::new();
    if idle_skip && *reused + 1 < IDLE_REREAD_EVERY && *has_last {
        clock.unmoved(&mut unmoved);
    }
    let read = if unmoved.is_empty() {
        spy.get_stack_traces()
    } else {
        spy.get_stack_traces_skipping(&unmoved)
    };
    match read {
        Ok(traces) => {
            *fails = 0;
            *skip = *every - 1;
            let mut stacks: Vec<ThreadStack> =
                traces.into_iter().map(|t| convert(t, spare, spy)).collect();
            let passed_over = spy.skipped();
            *reused = if passed_over.is_empty() {
                0
            } else {
                *reused + 1
            };
            stacks.extend(passed_over.iter().map(|&tid| ThreadStack {
                tid,
                name: None,
                active: false,
                owns_gil: false,
                frames: Vec::new(),
                reused: true,
            }));
            *has_last = !stacks.is_empty();
            clock.follow(&stacks);
            let codes = new_codes(spy);
            out.push((pid, PyReading::Stacks { stacks, codes }));
        }
        Err(_) => {
            *fails += 1;
            if !crate::sample::host::pid_alive(pid) {
                // Exited or a zombie: no noise, the tree will drop it.
                *entry = Entry::Done {
                    exe: None,
                    checked: now,
                };
            } else if *fails >= REOPEN_AFTER {
                *entry = Entry::Waiting {
                    attempts: 0,
                    next: now,
                    exe: None,
                };
            }
        }
    }
}

/// Re-examines a process found not to be Python once it execs (a shell that becomes python).
fn recheck_done(entry: &mut Entry, pid: u32, now: Instant) {
    let Entry::Done { exe, checked } = entry else {
        return;
    };
    if now.duration_since(*checked) < RETRY_EVERY * 4 {
        return;
    }
    *checked = now;
    let cur = exe_of(pid);
    if exe.is_some() && cur.is_some() && cur != *exe {
        *entry = Entry::Waiting {
            attempts: 0,
            next: now,
            exe: None,
        };
    }
}

/// Decides whether a waiting process is worth opening: gone or not Python (twice, to pass
/// fork-then-exec) ends it; a process that maps Python, or whose maps cannot be read though it
/// lives, gives its executable to open with.
fn probe(
    entry: &mut Entry,
    pid: u32,
    now: Instant,
    events: &mut Vec<StatusEvent>,
) -> Option<Option<PathBuf>> {
    let Entry::Waiting {
        attempts,
        next,
        exe,
    } = entry
    else {
        return None;
    };
    if now < *next {
        return None;
    }
    let cur_exe = exe_of(pid);
    if cur_exe.is_none() && !crate::sample::host::pid_alive(pid) {
        *entry = Entry::Done {
            exe: None,
            checked: now,
        };
        return None;
    }
    if cur_exe != *exe {
        *attempts = 0;
        *exe = cur_exe.clone();
    }
    match maps_python(pid) {
        Some(false) if *attempts >= 2 => {
            // Not Python (bash, ffmpeg, nvidia-smi): silent.
            events.push(StatusEvent {
                pid,
                status: PyStatus::NotPython,
                detail: cur_exe.as_ref().map(|e| e.display().to_string()),
                rank: rank_env_of(pid).filter(|env| {
                    is_rank_start(Some(env), ppid_of(pid).and_then(rank_env_of).as_ref())
                }),
            });
            *entry = Entry::Done {
                exe: cur_exe,
                checked: now,
            };
            return None;
        }
        Some(false) => {
            // Possibly between fork and exec: look again shortly.
            *attempts += 1;
            *next = now + RETRY_EVERY;
            return None;
        }
        None => {
            // Cannot read its maps: gone, or not ours to read.
            if !crate::sample::host::pid_alive(pid) {
                *entry = Entry::Done {
                    exe: None,
                    checked: now,
                };
                return None;
            }
        }
        Some(true) => {}
    }
    Some(cur_exe)
}

/// The code objects a spy met since it was last asked (nothing allocated when none).
fn new_codes(spy: &mut py_spy::PythonSpy) -> Vec<CodeNames> {
    let mut got = Vec::new();
    spy.take_new_codes(&mut got);
    got.into_iter()
        .map(|(code, name, file)| CodeNames { code, name, file })
        .collect()
}

/// One of py-spy's stacks as gpufeed's, in a vector from `spare` when there is one; py-spy's
/// vector goes back to it for its next stack (an allocation less each, on either side).
fn convert(
    mut t: py_spy::StackTrace,
    spare: &mut Vec<Vec<RawFrame>>,
    spy: &mut py_spy::PythonSpy,
) -> ThreadStack {
    let mut frames = spare.pop().unwrap_or_default();
    frames.clear();
    // py-spy gives the innermost frame first.
    frames.extend(t.frames.drain(..).rev().map(|f| RawFrame {
        name: f.name,
        file: f.filename,
        line: f.line,
        code: f.code,
    }));
    spy.recycle_frames(t.frames);
    ThreadStack {
        tid: t.os_thread_id.unwrap_or(t.thread_id),
        name: t.thread_name,
        active: t.active,
        owns_gil: t.owns_gil,
        frames,
        reused: false,
    }
}

/// Why reading another process's stacks may be refused, and what to do: for the one note.
pub(crate) fn denied_advice() -> String {
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok());
    let mut s = String::from("Python stacks could not be read (the kernel refused ptrace access");
    if let Some(v) = scope {
        s.push_str(&format!(", kernel.yama.ptrace_scope = {v}"));
    }
    s.push_str(
        "): start the job under gpufeed (`gpufeed run -- CMD`), or give gpufeed CAP_SYS_PTRACE \
         (`sudo`, or `--cap-add SYS_PTRACE` in a container)",
    );
    if scope == Some(3) {
        s.push_str("; ptrace_scope 3 forbids it for everyone until reboot");
    }
    s.push_str(". Recording continues without stacks.");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_utime_plus_stime() {
        let stat = b"42 (py thon) S 1 42 42 0 -1 4194304 100 0 0 0 250 17 0 0 20 0 3 0 5 0 0";
        assert_eq!(parse_cpu_ticks(stat), Some(267));
        assert_eq!(parse_cpu_ticks(b"42 (x) S 1"), None);
    }

    #[test]
    fn schedstat_is_run_time_and_run_queue_wait() {
        assert_eq!(parse_schedstat(b"123456 789 12\n"), Some((123456, 789)));
        assert_eq!(parse_schedstat(b"12"), None);
        assert_eq!(parse_schedstat(b""), None);
    }

    fn stack_of(tid: u64) -> ThreadStack {
        ThreadStack {
            tid,
            name: None,
            active: false,
            owns_gil: false,
            frames: vec![],
            reused: false,
        }
    }

    #[test]
    fn the_threads_that_did_not_run_are_the_ones_to_pass_over() {
        // This test's thread spins; a second thread of the process sleeps.
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let sleeper = std::thread::spawn(move || {
            tx.send(unsafe { libc::gettid() } as u64).unwrap();
            let _ = stop_rx.recv();
        });
        let sleeping = rx.recv().unwrap();
        let me = unsafe { libc::gettid() } as u64;
        let mut clock = CpuClock::new(std::process::id());
        clock.follow(&[stack_of(me), stack_of(sleeping)]);
        // The baseline once the sleeper is surely blocked (it still runs after sending its id).
        std::thread::sleep(Duration::from_millis(20));
        clock.ran();
        let t = Instant::now();
        let mut x = 0u64;
        while t.elapsed() < Duration::from_millis(30) {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        assert!(x > 0);
        assert!(clock.ran_maybe(), "one thread ran");
        let mut unmoved = Vec::new();
        clock.unmoved(&mut unmoved);
        assert_eq!(
            unmoved,
            vec![sleeping],
            "only the sleeping thread is passed over"
        );
        // Where the threads' ids are not the OS's, nothing is passed over.
        clock.follow(&[stack_of(me), stack_of(u64::MAX - 1)]);
        assert!(clock.whole.is_some());
        clock.unmoved(&mut unmoved);
        assert!(unmoved.is_empty());
        stop_tx.send(()).unwrap();
        sleeper.join().unwrap();
    }

    #[test]
    fn frame_vectors_given_back_are_kept_empty_for_the_next_stacks() {
        let mut sampler = PySampler::new(PyOptions {
            blocking: false,
            child_every: 1,
            cache: true,
            idle_skip: true,
        });
        let frame = RawFrame {
            name: "step".into(),
            file: "t.py".into(),
            line: 3,
            code: 0,
        };
        let stacks: Vec<ThreadStack> = (0..MAX_SPARE as u64 + 5)
            .map(|tid| ThreadStack {
                frames: vec![frame.clone(); 40],
                ..stack_of(tid)
            })
            .chain([stack_of(1000)]) // no frames, no room: not kept
            .collect();
        sampler.recycle(stacks);
        assert_eq!(sampler.spare.len(), MAX_SPARE);
        assert!(sampler
            .spare
            .iter()
            .all(|v| v.is_empty() && v.capacity() >= 40));
    }

    #[test]
    fn a_helper_thread_idle_at_every_reading_is_checked_only_now_and_then() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let helper = std::thread::spawn(move || {
            tx.send(unsafe { libc::gettid() } as u64).unwrap();
            let _ = stop_rx.recv();
        });
        let tid = rx.recv().unwrap();
        let pid = std::process::id();
        let main = u64::from(pid);
        let mut clock = CpuClock::new(pid);
        let idle = |t: u64| stack_of(t);
        let running = |t: u64| ThreadStack {
            active: true,
            ..stack_of(t)
        };
        clock.follow(&[idle(main), idle(tid)]);
        for _ in 0..QUIET_AFTER {
            clock.follow(&[idle(main), idle(tid)]);
        }
        let q = |c: &CpuClock, t: u64| c.threads.iter().find(|x| x.tid == t).unwrap().quiet;
        assert_eq!(q(&clock, tid), QUIET_AFTER, "the helper is quiet");
        assert_eq!(q(&clock, main), 0, "the main thread never is");
        // A check of the helper would now say it ran: it is checked only at every
        // QUIET_CHECK_EVERY-th reading, and passed over in between.
        fn forget(c: &mut CpuClock, tid: u64) {
            c.threads.iter_mut().find(|x| x.tid == tid).unwrap().last = None;
        }
        forget(&mut clock, tid);
        clock.readings = 0;
        let mut unmoved = Vec::new();
        for _ in 1..QUIET_CHECK_EVERY {
            clock.ran_maybe();
            clock.unmoved(&mut unmoved);
            assert!(unmoved.contains(&tid), "not checked: passed over");
            // Passed over, it stays quiet.
            let reused = ThreadStack {
                reused: true,
                ..stack_of(tid)
            };
            clock.follow(&[idle(main), reused]);
        }
        assert!(clock.ran_maybe(), "checked: it ran");
        clock.unmoved(&mut unmoved);
        assert!(!unmoved.contains(&tid), "read at this reading");
        // Read running: no longer quiet, checked at every reading again.
        clock.follow(&[idle(main), running(tid)]);
        assert_eq!(q(&clock, tid), 0);
        forget(&mut clock, tid);
        assert!(clock.ran_maybe(), "checked at once");
        stop_tx.send(()).unwrap();
        helper.join().unwrap();
    }

    #[test]
    fn the_workers_of_one_process_share_its_budget() {
        // At 100 Hz with the default quarter rate: 25 Hz each for one or two workers, then
        // the pair's 50 readings a second spread over all of them.
        let hz = |siblings| 100.0 / shared_every(CHILD_EVERY, siblings) as f64;
        assert_eq!([hz(1), hz(2), hz(4), hz(8)], [25.0, 25.0, 12.5, 6.25]);
        for n in 2..64 {
            assert!(n * 100 <= 50 * shared_every(CHILD_EVERY, n), "{n} workers");
        }
        // Workers at the full rate (to measure) stay there.
        assert_eq!(shared_every(1, 8), 1);
    }

    #[test]
    fn a_process_that_runs_is_told_from_one_that_sleeps() {
        // A sleeping child (no CPU time) against a busy thread of this test process.
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let mut idle = CpuClock::new(child.id());
        idle.follow(&[stack_of(child.id() as u64)]);
        assert!(idle.whole.is_none(), "its own thread's schedstat");
        assert!(idle.ran(), "nothing known yet counts as ran");
        let me = std::process::id();
        let tid = unsafe { libc::gettid() } as u64;
        let mut busy = CpuClock::new(me);
        busy.follow(&[stack_of(tid)]);
        busy.ran();
        // A thread id that is not the OS's (py-spy's pthread id): the whole process instead.
        let mut whole = CpuClock::new(me);
        whole.follow(&[stack_of(u64::MAX - 1)]);
        assert!(whole.whole.is_some());
        whole.ran();
        let t = Instant::now();
        let mut x = 0u64;
        while t.elapsed() < Duration::from_millis(30) {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        assert!(x > 0);
        assert!(busy.ran(), "30 ms of work shows");
        assert!(whole.ran(), "and in the whole process's clock");
        let (on_cpu, _) = busy.sched(tid).unwrap();
        assert!(on_cpu > 0, "{on_cpu} ns on a CPU");
        assert!(!idle.ran(), "a sleeping process did not run");
        assert!(!idle.ran());
        assert_eq!(idle.sched(1), None, "a thread not followed");
        assert!(idle.sched(child.id() as u64).is_some(), "read at any time");
        // A thread busy at its last checks is taken to have run without a check, but checked
        // again at every BUSY_CHECK_EVERY-th reading: a sleeping one is then seen idle.
        idle.threads[0].busy = BUSY_AFTER;
        idle.readings = 0;
        for _ in 1..BUSY_CHECK_EVERY {
            assert!(idle.ran_maybe(), "taken as busy, unchecked");
        }
        assert!(!idle.ran_maybe(), "checked: it did not run");
        assert_eq!(idle.threads[0].busy, 0);
        assert!(!idle.ran_maybe(), "idle: checked at every reading");
        // Idle at IDLE_AFTER checks in a row: its readings are not checked, its wake check is.
        idle.idle = IDLE_AFTER;
        idle.threads[0].last = None; // a check now would say "ran"
        for _ in 0..10 {
            assert!(!idle.ran_maybe(), "long idle: taken as not run, unchecked");
        }
        idle.wake_check();
        assert!(idle.woke && idle.idle == 0, "it ran: no longer long idle");
        assert!(idle.ran_maybe(), "its next reading reads it");
        assert!(!idle.woke);
        assert!(!idle.ran_maybe(), "then checked at every reading");
        idle.idle = IDLE_AFTER;
        idle.wake_check();
        assert!(
            !idle.woke && idle.long_idle(),
            "did not run: still long idle"
        );
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            idle.ran(),
            "a thread that is gone counts as ran (read again, then dropped)"
        );
    }
}
