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
    /// Read a process's stacks only when its CPU time advanced since the last reading; until
    /// then its last stacks count again, as idle (a sleeping launcher, idle helpers cost one
    /// read of two small /proc files instead of a py-spy reading). Off only to measure it.
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

/// A process's CPU time, to tell whether it ran since the last reading: /proc/PID/stat's
/// utime + stime (all threads, clock ticks) and /proc/PID/schedstat's run time of its main
/// thread (nanoseconds), files kept open and read again in place.
struct CpuClock {
    stat: File,
    sched: Option<File>,
    last: Option<(u64, u64)>,
    buf: Vec<u8>,
}

impl CpuClock {
    fn open(pid: u32) -> Option<CpuClock> {
        Some(CpuClock {
            stat: File::open(format!("/proc/{pid}/stat")).ok()?,
            sched: File::open(format!("/proc/{pid}/schedstat")).ok(),
            last: None,
            buf: vec![0; 1024],
        })
    }

    fn read(&mut self) -> Option<(u64, u64)> {
        let n = self.stat.read_at(&mut self.buf, 0).ok()?;
        let ticks = parse_cpu_ticks(&self.buf[..n])?;
        let ns = match &self.sched {
            Some(f) => {
                let n = f.read_at(&mut self.buf, 0).ok()?;
                std::str::from_utf8(&self.buf[..n])
                    .ok()?
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()?
            }
            None => 0,
        };
        Some((ticks, ns))
    }

    /// Did the process run since the last call? Unknown (unreadable) counts as yes.
    fn ran(&mut self) -> bool {
        let now = self.read();
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
        /// Its CPU time, when [`PyOptions::idle_skip`] is on.
        clock: Option<CpuClock>,
        /// The last stacks read, and readings taken from them since.
        last: Vec<ThreadStack>,
        reused: u32,
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
        out: &mut Vec<(u32, Vec<ThreadStack>)>,
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
                Entry::Spy { .. } => read_spy(entry, pid, now, out),
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
        out: &mut Vec<(u32, Vec<ThreadStack>)>,
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
                    let clock = if self.idle_skip {
                        CpuClock::open(pid).map(|mut c| {
                            c.ran();
                            c
                        })
                    } else {
                        None
                    };
                    self.entries.insert(
                        pid,
                        Entry::Spy {
                            spy: Box::new(spy),
                            fails: 0,
                            every,
                            skip: every - 1,
                            env,
                            clock,
                            last: stacks.clone(),
                            reused: 0,
                        },
                    );
                    out.push((pid, stacks));
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
        clock,
        last,
        reused,
        ..
    } = entry
    else {
        return;
    };
    let ran = clock.as_mut().is_none_or(CpuClock::ran);
    if !ran && *reused + 1 < IDLE_REREAD_EVERY && !last.is_empty() {
        // Did not run since the last reading: its threads are where they were, idle.
        *reused += 1;
        *skip = *every - 1;
        let mut idle = last.clone();
        for t in &mut idle {
            t.active = false;
        }
        out.push((pid, idle));
        return;
    }
    match spy.get_stack_traces() {
        Ok(traces) => {
            *fails = 0;
            *skip = *every - 1;
            *reused = 0;
            let stacks: Vec<ThreadStack> = traces.into_iter().map(convert).collect();
            last.clone_from(&stacks);
            out.push((pid, stacks));
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
    fn a_process_that_runs_is_told_from_one_that_sleeps() {
        // A sleeping child (no CPU time) against this busy test process.
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let mut idle = CpuClock::open(child.id()).unwrap();
        idle.ran();
        let mut me = CpuClock::open(std::process::id()).unwrap();
        me.ran();
        let t = Instant::now();
        let mut x = 0u64;
        while t.elapsed() < Duration::from_millis(30) {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        assert!(x > 0);
        assert!(me.ran(), "30 ms of work shows");
        assert!(!idle.ran(), "a sleeping process did not run");
        let _ = child.kill();
        let _ = child.wait();
    }
}
