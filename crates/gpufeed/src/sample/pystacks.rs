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

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
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

/// What sampling one process came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
        match self {
            PyStatus::Ok => "ok",
            PyStatus::Denied => "denied",
            PyStatus::NotPython => "not_python",
            PyStatus::UnsupportedVersion => "unsupported_version",
        }
    }
}

/// A process's status, reported once when it is decided.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusEvent {
    pub pid: u32,
    pub status: PyStatus,
    /// The interpreter version (ok) or why not (the others).
    pub detail: Option<String>,
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

enum Entry {
    Spy {
        spy: Box<py_spy::PythonSpy>,
        fails: u32,
        /// Read once every `every` ticks; `skip` ticks to go before the next read.
        every: u32,
        skip: u32,
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
            entries: HashMap::new(),
        }
    }

    /// Reads every Python process among `pids` once: stacks per process, and the statuses
    /// decided on this call. Processes that exited are forgotten without a word.
    pub fn sample(
        &mut self,
        pids: &[u32],
        out: &mut Vec<(u32, Vec<ThreadStack>)>,
        events: &mut Vec<StatusEvent>,
    ) {
        self.entries.retain(|p, _| pids.contains(p));
        let now = Instant::now();
        for &pid in pids {
            // A child of a sampled Python process is read at a fraction of the rate.
            let is_child = !matches!(
                self.entries.get(&pid),
                Some(Entry::Spy { .. } | Entry::Done { .. })
            ) && self.child_every > 1
                && ppid_of(pid)
                    .is_some_and(|pp| matches!(self.entries.get(&pp), Some(Entry::Spy { .. })));
            let every = if is_child { self.child_every } else { 1 };
            let entry = self.entries.entry(pid).or_insert(Entry::Waiting {
                attempts: 0,
                next: now,
                exe: None,
            });
            match entry {
                Entry::Spy { skip, .. } if *skip > 0 => *skip -= 1,
                Entry::Spy { .. } => read_spy(entry, pid, now, out),
                Entry::Done { .. } => recheck_done(entry, pid, now),
                Entry::Waiting { .. } => {
                    if let Some(exe) = probe(entry, pid, now, events) {
                        self.attach(pid, every, exe, now, out, events);
                    }
                }
            }
        }
    }

    /// Opens py-spy on a process that maps a Python interpreter (or whose maps cannot be read)
    /// and takes its first sample; says why when that fails.
    fn attach(
        &mut self,
        pid: u32,
        every: u32,
        exe: Option<PathBuf>,
        now: Instant,
        out: &mut Vec<(u32, Vec<ThreadStack>)>,
        events: &mut Vec<StatusEvent>,
    ) {
        match py_spy::PythonSpy::new(pid as py_spy::Pid, &self.config) {
            Ok(mut spy) => match spy.get_stack_traces() {
                Ok(traces) => {
                    events.push(StatusEvent {
                        pid,
                        status: PyStatus::Ok,
                        detail: Some(spy.version.to_string()),
                    });
                    out.push((pid, traces.into_iter().map(convert).collect()));
                    self.entries.insert(
                        pid,
                        Entry::Spy {
                            spy: Box::new(spy),
                            fails: 0,
                            every,
                            skip: every - 1,
                        },
                    );
                }
                Err(e) if unsupported(&e) => {
                    events.push(StatusEvent {
                        pid,
                        status: PyStatus::UnsupportedVersion,
                        detail: Some(spy.version.to_string()),
                    });
                    self.entries.insert(pid, Entry::Done { exe, checked: now });
                }
                Err(e) => self.failed(pid, e, events),
            },
            Err(e) => self.failed(pid, e, events),
        }
    }

    fn failed(&mut self, pid: u32, e: anyhow::Error, events: &mut Vec<StatusEvent>) {
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
                    });
                }
                *entry = Entry::Done { exe, checked: now };
            }
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
fn read_spy(entry: &mut Entry, pid: u32, now: Instant, out: &mut Vec<(u32, Vec<ThreadStack>)>) {
    let Entry::Spy {
        spy,
        fails,
        every,
        skip,
    } = entry
    else {
        return;
    };
    match spy.get_stack_traces() {
        Ok(traces) => {
            *fails = 0;
            *skip = *every - 1;
            out.push((pid, traces.into_iter().map(convert).collect()));
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
pub fn denied_advice() -> String {
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
