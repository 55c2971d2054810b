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

/// One frame, as read.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RawFrame {
    pub name: String,
    pub file: String,
    pub line: i32,
}

/// One thread's stack at one instant.
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadStack {
    /// OS thread id (the Python thread id where the OS one is unknown).
    pub tid: u64,
    pub name: Option<String>,
    /// Running (on a CPU) rather than blocked in a system call.
    pub active: bool,
    /// Outermost first.
    pub frames: Vec<RawFrame>,
}

/// One reading of one process.
#[derive(Debug, Clone, PartialEq)]
pub enum PyReading {
    /// Its stacks, as read.
    Stacks(Vec<ThreadStack>),
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
pub struct StatusEvent {
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
pub const CHILD_EVERY: u32 = 4;

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
}

/// Whether a process ran since the last check, cheaply: only a Python thread that ran can have
/// moved its stack, so the schedstat of each Python thread of its last reading is read (one
/// `pread` each, nanosecond resolution). Where the threads' OS ids are unknown, the whole
/// process's /proc/PID/stat utime + stime (clock ticks) and its main thread's schedstat are read
/// instead. The threads' clocks also give their run-queue wait for the `py_samples` lines.
struct CpuClock {
    pid: u32,
    threads: Vec<ThreadClock>,
    /// Set when a thread of the last reading has no schedstat of its own.
    whole: Option<WholeClock>,
    buf: Vec<u8>,
    /// Checks in a row that found it ran, and readings since the last check.
    busy: u32,
    unchecked: u32,
}

/// A process found running at this many checks in a row is busy: it is read without a check,
/// checked again only every [`BUSY_CHECK_EVERY`]th reading (the check would say "ran" anyway;
/// once it goes idle, that is seen within as many readings).
const BUSY_AFTER: u32 = 8;
const BUSY_CHECK_EVERY: u32 = 8;

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
            busy: 0,
            unchecked: 0,
        }
    }

    /// Did it run since the last check, as far as is worth asking: a busy process is taken to
    /// have run, without a check, at all but every [`BUSY_CHECK_EVERY`]th reading.
    fn ran_maybe(&mut self) -> bool {
        if self.busy >= BUSY_AFTER && self.unchecked + 1 < BUSY_CHECK_EVERY {
            self.unchecked += 1;
            return true;
        }
        self.unchecked = 0;
        let ran = self.ran();
        self.busy = if ran { self.busy.saturating_add(1) } else { 0 };
        ran
    }

    /// Follows the threads of a reading (their stacks' thread ids); a thread whose schedstat
    /// cannot be opened (an id that is not the OS's) turns on the whole-process fallback.
    fn follow(&mut self, stacks: &[ThreadStack]) {
        let same = self.threads.len() == stacks.len()
            && stacks
                .iter()
                .all(|s| self.threads.iter().any(|t| t.tid == s.tid));
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
        let mut ran = self.threads.is_empty() && self.whole.is_none();
        for t in &mut self.threads {
            let now = pread_all(&t.file, &mut self.buf).and_then(parse_schedstat);
            ran |= now.is_none() || now != t.last;
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
pub struct PySampler {
    config: py_spy::Config,
    child_every: u32,
    idle_skip: bool,
    entries: HashMap<u32, Entry>,
}

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
    pub fn new(opts: PyOptions) -> Self {
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
            ..Default::default()
        };
        PySampler {
            config,
            child_every: opts.child_every.max(1),
            idle_skip: opts.idle_skip,
            entries: HashMap::new(),
        }
    }

    /// Reads every Python process among `pids` once: stacks per process, and the statuses
    /// decided on this call. Processes that exited are forgotten without a word.
    pub fn sample(
        &mut self,
        pids: &[u32],
        out: &mut Vec<(u32, PyReading)>,
        events: &mut Vec<StatusEvent>,
    ) {
        self.entries.retain(|p, _| pids.contains(p));
        let now = Instant::now();
        for &pid in pids {
            let entry = self.entries.entry(pid).or_insert(Entry::Waiting {
                attempts: 0,
                next: now,
                exe: None,
            });
            match entry {
                Entry::Spy { skip, .. } if *skip > 0 => *skip -= 1,
                Entry::Spy { .. } => read_spy(entry, pid, now, self.idle_skip, out),
                Entry::Done { .. } => recheck_done(entry, pid, now),
                Entry::Waiting { .. } => {
                    if let Some(exe) = probe(entry, pid, now, events) {
                        self.attach(pid, exe, now, out, events);
                    }
                }
            }
        }
    }

    /// How often to read a process that just turned out to be Python, and the rank it starts:
    /// a rank (see [`super::ranks`]) at the full rate, a child of a sampled Python process (a
    /// DataLoader worker) at [`PyOptions::child_every`], anything else at the full rate.
    fn role(&self, pid: u32) -> (u32, Option<RankEnv>, Option<RankEnv>) {
        let env = rank_env_of(pid);
        let ppid = ppid_of(pid);
        let parent = ppid.and_then(|pp| self.entries.get(&pp));
        let parent_env = match parent {
            Some(Entry::Spy { env, .. }) => *env,
            _ => ppid.and_then(rank_env_of),
        };
        if is_rank_start(env.as_ref(), parent_env.as_ref()) {
            return (1, env, env);
        }
        let every = if matches!(parent, Some(Entry::Spy { .. })) {
            self.child_every
        } else {
            1
        };
        (every, env, None)
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
        let (every, env, rank) = self.role(pid);
        match py_spy::PythonSpy::new(pid as py_spy::Pid, &self.config) {
            Ok(mut spy) => match spy.get_stack_traces() {
                Ok(traces) => {
                    events.push(StatusEvent {
                        pid,
                        status: PyStatus::Ok,
                        detail: Some(spy.version.to_string()),
                        rank,
                    });
                    let stacks: Vec<ThreadStack> = traces.into_iter().map(convert).collect();
                    let mut clock = CpuClock::new(pid);
                    clock.follow(&stacks);
                    clock.ran();
                    self.entries.insert(
                        pid,
                        Entry::Spy {
                            spy: Box::new(spy),
                            fails: 0,
                            every,
                            skip: every - 1,
                            env,
                            clock,
                            reused: 0,
                            has_last: !stacks.is_empty(),
                        },
                    );
                    out.push((pid, PyReading::Stacks(stacks)));
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

    /// A sampled thread's scheduler clock, read now: nanoseconds on a CPU and nanoseconds
    /// runnable but waiting for a core, cumulative since it started.
    pub fn sched(&self, pid: u32, tid: u64) -> Option<(u64, u64)> {
        match self.entries.get(&pid)? {
            Entry::Spy { clock, .. } => clock.sched(tid),
            _ => None,
        }
    }

    /// Processes currently being sampled.
    pub fn sampling(&self) -> usize {
        self.entries
            .values()
            .filter(|e| matches!(e, Entry::Spy { .. }))
            .count()
    }
}

/// Reads a sampled process's stacks; after a failure, a process that is gone is done and one
/// that failed [`REOPEN_AFTER`] times in a row is opened again.
fn read_spy(
    entry: &mut Entry,
    pid: u32,
    now: Instant,
    idle_skip: bool,
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
    if idle_skip && !ran && *reused + 1 < IDLE_REREAD_EVERY && *has_last {
        // Did not run since the last reading: its threads are where they were, idle.
        *reused += 1;
        *skip = *every - 1;
        out.push((pid, PyReading::Unchanged));
        return;
    }
    match spy.get_stack_traces() {
        Ok(traces) => {
            *fails = 0;
            *skip = *every - 1;
            *reused = 0;
            let stacks: Vec<ThreadStack> = traces.into_iter().map(convert).collect();
            *has_last = !stacks.is_empty();
            clock.follow(&stacks);
            out.push((pid, PyReading::Stacks(stacks)));
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

fn convert(t: py_spy::StackTrace) -> ThreadStack {
    let mut frames: Vec<RawFrame> = t
        .frames
        .into_iter()
        .map(|f| RawFrame {
            name: f.name,
            file: f.filename,
            line: f.line,
        })
        .collect();
    // py-spy gives the innermost frame first.
    frames.reverse();
    ThreadStack {
        tid: t.os_thread_id.unwrap_or(t.thread_id),
        name: t.thread_name,
        active: t.active,
        frames,
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
            frames: vec![],
        }
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
        // A process busy at its last checks is read without a check, but checked again at
        // every BUSY_CHECK_EVERY-th reading: a sleeping one is then seen idle.
        idle.busy = BUSY_AFTER;
        for _ in 1..BUSY_CHECK_EVERY {
            assert!(idle.ran_maybe(), "taken as busy, unchecked");
        }
        assert!(!idle.ran_maybe(), "checked: it did not run");
        assert_eq!(idle.busy, 0);
        assert!(!idle.ran_maybe(), "idle: checked at every reading");
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            idle.ran(),
            "a thread that is gone counts as ran (read again, then dropped)"
        );
    }
}
