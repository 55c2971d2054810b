//! Host and job sampling from /proc (procfs crate).
//!
//! `HostSampler` reads the machine (per-core CPU, memory, swap, pressure stall information, disks);
//! `ProcTree` follows a job's process tree — the main process and every descendant, DataLoader
//! workers included — as processes come and go. Rates are computed from cumulative counters
//! between two readings, so the first reading of anything has no rate (`None`).

use super::{DiskRate, HostInfo, HostSample, ProcSample, ProcStart};
use procfs::prelude::*;
use procfs::process::Process;
use procfs::{CpuPressure, CpuTime, DiskStats, IoPressure, KernelStats, Meminfo, MemoryPressure};
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::Instant;

/// A /proc file kept open and re-read from offset 0 at each reading: /proc regenerates the
/// content on every read, and keeping the descriptor saves an open and a close per reading —
/// the main cost of sampling a job tree ten times a second. (procfs parses paths it opens itself,
/// hence this small helper; procfs still parses the bytes.)
struct ProcFile {
    file: File,
    buf: Vec<u8>,
}

impl ProcFile {
    fn open(path: &str) -> Option<ProcFile> {
        File::open(path).ok().map(|file| ProcFile {
            file,
            buf: Vec::with_capacity(4096),
        })
    }

    /// Reads the whole file again; `None` once it can no longer be read (process gone).
    ///
    /// These files are seq_files, which fill a read as far as they can: a read that returns
    /// less than asked is the end, and no second read (which would generate the whole text
    /// again to find its end, doubling the cost) is made.
    fn read(&mut self) -> Option<&[u8]> {
        self.buf.clear();
        if self.buf.capacity() < 4096 {
            self.buf.reserve(4096);
        }
        loop {
            let len = self.buf.len();
            let room = self.buf.capacity() - len;
            self.buf.resize(len + room, 0);
            match self.file.read_at(&mut self.buf[len..], len as u64) {
                Ok(n) => {
                    self.buf.truncate(len + n);
                    if n < room {
                        break;
                    }
                    self.buf.reserve(self.buf.len());
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => self.buf.truncate(len),
                Err(_) => return None,
            }
        }
        (!self.buf.is_empty()).then_some(&self.buf[..])
    }
}

/// Command line of `pid`, arguments joined by spaces; `None` when unreadable or empty (kernel
/// threads, zombies).
fn read_cmdline(pid: u32) -> Option<String> {
    Process::new(pid as i32)
        .and_then(|p| p.cmdline())
        .ok()
        .filter(|c| !c.is_empty())
        .map(|c| c.join(" "))
}

/// The fields of /proc/PID/stat that gpufeed uses.
#[derive(Debug, Clone, PartialEq)]
struct StatLite {
    comm: String,
    state: char,
    ppid: u32,
    /// utime + stime, in clock ticks.
    ticks: u64,
    threads: u32,
    starttime: u64,
    rss_pages: u64,
}

/// Parses /proc/PID/stat. The command name may hold spaces and parentheses, so the fields are
/// counted from the last `)`.
fn parse_stat(b: &[u8]) -> Option<StatLite> {
    let s = std::str::from_utf8(b).ok()?;
    let open = s.find('(')?;
    let close = s.rfind(')')?;
    let comm = s.get(open + 1..close)?.to_string();
    let f: Vec<&str> = s.get(close + 1..)?.split_ascii_whitespace().collect();
    // f[0] is field 3 (state) of proc(5).
    let num = |i: usize| f.get(i)?.parse::<u64>().ok();
    Some(StatLite {
        comm,
        state: f.first()?.chars().next()?,
        ppid: num(1)? as u32,
        ticks: num(11)? + num(12)?,
        threads: num(17)? as u32,
        starttime: num(19)?,
        rss_pages: num(21)?,
    })
}

/// True while `pid` exists and is not a zombie waiting to be reaped.
pub(crate) fn pid_alive(pid: u32) -> bool {
    match Process::new(pid as i32).and_then(|p| p.stat()) {
        Ok(st) => st.state != 'Z' && st.state != 'X',
        Err(_) => false,
    }
}

/// Tells whether one process still runs, looked at many times (`record --pid` waits for it):
/// by a pidfd, where the kernel has them (Linux 5.3+), which becomes readable when the process
/// exits; one `poll` per look, where [`pid_alive`] opens and parses /proc/PID/stat each time
/// (5 % of the recorder's CPU at 20 looks a second). Bound to the process itself, so a pid
/// reused after it is gone is not mistaken for it. Falls back to [`pid_alive`].
pub(crate) struct PidWatch {
    pid: u32,
    fd: Option<std::os::fd::OwnedFd>,
}

impl PidWatch {
    pub(crate) fn new(pid: u32) -> PidWatch {
        use std::os::fd::FromRawFd;
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        let fd = (fd >= 0 && fd <= i64::from(i32::MAX)).then(|| {
            // SAFETY: a descriptor just returned by the kernel, owned by no one else.
            unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) }
        });
        PidWatch { pid, fd }
    }

    /// True while the process exists and has not exited (a zombie has exited).
    pub(crate) fn alive(&self) -> bool {
        use std::os::fd::AsRawFd;
        let Some(fd) = &self.fd else {
            return pid_alive(self.pid);
        };
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no wait.
        match unsafe { libc::poll(&mut p, 1, 0) } {
            0 => true,
            n if n > 0 => p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) == 0,
            _ => pid_alive(self.pid),
        }
    }
}

/// Static facts about this machine.
pub(crate) fn host_info() -> HostInfo {
    let cpu_count = std::thread::available_parallelism()
        .map(|_| ())
        .ok()
        .and_then(|_| KernelStats::current().ok().map(|k| k.cpu_time.len() as u32))
        .unwrap_or(0);
    HostInfo {
        hostname: std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|s| s.trim().to_string()),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .ok()
            .map(|s| s.trim().to_string()),
        cpu_count,
        cpus_allowed: cpus_allowed(),
        mem_total_bytes: Meminfo::current().ok().map(|m| m.mem_total),
        clock_ticks_per_s: Some(procfs::ticks_per_second()),
    }
}

/// Number of CPUs this process may run on (sched_getaffinity).
fn cpus_allowed() -> Option<u32> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills it for pid 0 (this thread).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0 {
            Some(libc::CPU_COUNT(&set) as u32)
        } else {
            None
        }
    }
}

fn busy_idle(c: &CpuTime) -> (u64, u64) {
    let busy = c.user
        + c.nice
        + c.system
        + c.irq.unwrap_or(0)
        + c.softirq.unwrap_or(0)
        + c.steal.unwrap_or(0);
    let idle = c.idle + c.iowait.unwrap_or(0);
    (busy, idle)
}

#[derive(Default)]
struct PsiTotals {
    cpu_some: Option<u64>,
    io_some: Option<u64>,
    io_full: Option<u64>,
    mem_some: Option<u64>,
    mem_full: Option<u64>,
}

impl HostSampler {
    fn read_psi(&mut self) -> PsiTotals {
        let [c, i, m] = &mut self.psi;
        let cpu = c
            .as_mut()
            .and_then(|f| f.read())
            .and_then(|b| CpuPressure::from_buf_read(b).ok());
        let io = i
            .as_mut()
            .and_then(|f| f.read())
            .and_then(|b| IoPressure::from_buf_read(b).ok());
        let mem = m
            .as_mut()
            .and_then(|f| f.read())
            .and_then(|b| MemoryPressure::from_buf_read(b).ok());
        psi_totals(cpu, io, mem)
    }
}

fn psi_totals(
    cpu: Option<CpuPressure>,
    io: Option<IoPressure>,
    mem: Option<MemoryPressure>,
) -> PsiTotals {
    PsiTotals {
        cpu_some: cpu.as_ref().map(|p| p.some.total),
        io_some: io.as_ref().map(|p| p.some.total),
        io_full: io.as_ref().map(|p| p.full.total),
        mem_some: mem.as_ref().map(|p| p.some.total),
        mem_full: mem.as_ref().map(|p| p.full.total),
    }
}

/// Percent of `dt_s` covered by the growth of a cumulative stall counter in microseconds.
fn stall_pct(now: Option<u64>, prev: Option<u64>, dt_s: f64) -> Option<f64> {
    let (n, p) = (now?, prev?);
    if dt_s <= 0.0 || n < p {
        return None;
    }
    Some(((n - p) as f64 / 1e6 / dt_s * 100.0).clamp(0.0, 100.0))
}

/// Percent busy between two cumulative (busy, idle) readings.
fn busy_pct(now: (u64, u64), prev: (u64, u64)) -> Option<f64> {
    let db = now.0.checked_sub(prev.0)?;
    let di = now.1.checked_sub(prev.1)?;
    let total = db + di;
    if total == 0 {
        return None;
    }
    Some(db as f64 * 100.0 / total as f64)
}

/// Cumulative CPU counters at one reading: per-core (busy, idle), total (busy, idle), iowait.
type CpuCounters = (Vec<(u64, u64)>, (u64, u64), u64);

/// Reads the whole machine; keeps the previous cumulative counters to compute rates.
pub(crate) struct HostSampler {
    prev_cpu: Option<CpuCounters>,
    prev_disk: HashMap<String, (u64, u64)>,
    prev_psi: PsiTotals,
    prev_at: Option<Instant>,
    stat: Option<ProcFile>,
    meminfo: Option<ProcFile>,
    diskstats: Option<ProcFile>,
    psi: [Option<ProcFile>; 3],
    whole_disk: HashMap<String, bool>,
}

impl Default for HostSampler {
    fn default() -> Self {
        Self::new()
    }
}

impl HostSampler {
    pub(crate) fn new() -> Self {
        HostSampler {
            prev_cpu: None,
            prev_disk: HashMap::new(),
            prev_psi: PsiTotals::default(),
            prev_at: None,
            stat: ProcFile::open("/proc/stat"),
            meminfo: ProcFile::open("/proc/meminfo"),
            diskstats: ProcFile::open("/proc/diskstats"),
            psi: [
                ProcFile::open("/proc/pressure/cpu"),
                ProcFile::open("/proc/pressure/io"),
                ProcFile::open("/proc/pressure/memory"),
            ],
            whole_disk: HashMap::new(),
        }
    }

    pub(crate) fn sample(&mut self, t_s: f64) -> HostSample {
        let now = Instant::now();
        let dt_s = self
            .prev_at
            .map(|p| now.duration_since(p).as_secs_f64())
            .unwrap_or(0.0);
        let mut s = HostSample {
            t_s,
            ..Default::default()
        };

        let ks = self
            .stat
            .as_mut()
            .and_then(|f| f.read())
            .and_then(|b| KernelStats::from_buf_read(b, procfs::current_system_info()).ok());
        if let Some(ks) = ks {
            let per: Vec<(u64, u64)> = ks.cpu_time.iter().map(busy_idle).collect();
            let total = busy_idle(&ks.total);
            let iowait = ks.total.iowait.unwrap_or(0);
            if let Some((pper, ptotal, piowait)) = &self.prev_cpu {
                if pper.len() == per.len() {
                    s.cpu_pct = per
                        .iter()
                        .zip(pper)
                        .map(|(n, p)| busy_pct(*n, *p).unwrap_or(0.0))
                        .collect();
                }
                s.cpu_total_pct = busy_pct(total, *ptotal);
                let all = (total.0 + total.1).saturating_sub(ptotal.0 + ptotal.1);
                if all > 0 {
                    s.iowait_pct =
                        Some(iowait.saturating_sub(*piowait) as f64 * 100.0 / all as f64);
                }
            }
            self.prev_cpu = Some((per, total, iowait));
        }

        let mem = self
            .meminfo
            .as_mut()
            .and_then(|f| f.read())
            .and_then(|b| Meminfo::from_buf_read(b).ok());
        if let Some(m) = mem {
            s.mem_total_bytes = Some(m.mem_total);
            s.mem_available_bytes = m.mem_available;
            s.mem_cached_bytes = Some(m.cached);
            s.swap_total_bytes = Some(m.swap_total);
            s.swap_free_bytes = Some(m.swap_free);
        }

        let psi = self.read_psi();
        s.psi_cpu_some_pct = stall_pct(psi.cpu_some, self.prev_psi.cpu_some, dt_s);
        s.psi_io_some_pct = stall_pct(psi.io_some, self.prev_psi.io_some, dt_s);
        s.psi_io_full_pct = stall_pct(psi.io_full, self.prev_psi.io_full, dt_s);
        s.psi_mem_some_pct = stall_pct(psi.mem_some, self.prev_psi.mem_some, dt_s);
        s.psi_mem_full_pct = stall_pct(psi.mem_full, self.prev_psi.mem_full, dt_s);
        self.prev_psi = psi;

        let disks = self
            .diskstats
            .as_mut()
            .and_then(|f| f.read())
            .and_then(|b| DiskStats::from_buf_read(b).ok());
        if let Some(DiskStats(disks)) = disks {
            for d in disks {
                // Whole devices only: partitions would count the same bytes twice; skip loop/ram.
                let whole = *self.whole_disk.entry(d.name.clone()).or_insert_with(|| {
                    !(d.name.starts_with("loop")
                        || d.name.starts_with("ram")
                        || is_partition(&d.name))
                });
                if !whole {
                    continue;
                }
                let now_b = (d.sectors_read * 512, d.sectors_written * 512);
                if let Some(prev) = self.prev_disk.get(&d.name) {
                    if dt_s > 0.0 {
                        s.disks.push(DiskRate {
                            device: d.name.clone(),
                            read_bytes_per_s: now_b.0.saturating_sub(prev.0) as f64 / dt_s,
                            write_bytes_per_s: now_b.1.saturating_sub(prev.1) as f64 / dt_s,
                        });
                    }
                }
                self.prev_disk.insert(d.name, now_b);
            }
        }
        self.prev_at = Some(now);
        s
    }
}

/// Partitions have a `partition` file in their sysfs block directory.
fn is_partition(name: &str) -> bool {
    let sys = format!("/sys/class/block/{name}/partition");
    std::path::Path::new(&sys).exists()
}

/// Reads /proc/PID/`name` through the file kept in `slot` (opened now if need be, and kept
/// when `keep`) and parses it.
fn read_kept<T>(
    slot: &mut Option<ProcFile>,
    keep: bool,
    pid: u32,
    name: &str,
    parse: impl FnOnce(&[u8]) -> T,
) -> Option<T> {
    if slot.is_none() {
        *slot = ProcFile::open(&format!("/proc/{pid}/{name}"));
    }
    let got = slot.as_mut()?.read().map(parse);
    if got.is_none() || !keep {
        *slot = None;
    }
    got
}

/// The value of a `key: value` line of a /proc text (`key` with its colon).
fn proc_field(text: &[u8], key: &[u8]) -> Option<u64> {
    let at = memchr::memmem::find_iter(text, key).find(|&i| i == 0 || text[i - 1] == b'\n')?;
    let rest = &text[at + key.len()..];
    let end = memchr::memchr(b'\n', rest).unwrap_or(rest.len());
    std::str::from_utf8(&rest[..end]).ok()?.trim().parse().ok()
}

/// `read_bytes` and `write_bytes` of /proc/PID/io.
fn parse_io(text: &[u8]) -> Option<(u64, u64)> {
    Some((
        proc_field(text, b"read_bytes:")?,
        proc_field(text, b"write_bytes:")?,
    ))
}

/// Voluntary and involuntary context switches of /proc/PID/status.
fn parse_ctxt_switches(text: &[u8]) -> (Option<u64>, Option<u64>) {
    (
        proc_field(text, b"voluntary_ctxt_switches:"),
        proc_field(text, b"nonvoluntary_ctxt_switches:"),
    )
}

/// What changed in a job's process tree at one reading.
#[derive(Debug, Default)]
pub(crate) struct TreeReading {
    pub started: Vec<ProcStart>,
    pub exited: Vec<u32>,
    pub samples: Vec<ProcSample>,
}

struct Tracked {
    /// /proc/PID/stat kept open (while fewer than `MAX_OPEN` processes are tracked).
    stat: Option<ProcFile>,
    /// /proc/PID/task/PID/children (the main thread's children), kept open likewise.
    children: Option<ProcFile>,
    /// /proc/PID/io and /proc/PID/status, opened at the first slow reading and kept open
    /// likewise (`None` beyond `MAX_OPEN`: opened at each slow reading).
    io: Option<ProcFile>,
    status: Option<ProcFile>,
    keep: bool,
    /// Short name as last seen: it changes when the process calls exec.
    comm: String,
    /// Command line as last announced. exec replaces the command line before the short name,
    /// so a process read in between is announced with its new command line and its old name;
    /// when the name catches up, the command line is the same and it is not announced again.
    cmd: Option<String>,
    starttime: u64,
    prev_ticks: u64,
    prev_at: Instant,
}

/// Most /proc/PID/stat files kept open at once; beyond that they are opened at each reading.
const MAX_OPEN: usize = 256;
/// /proc is listed at most this often; in between, new processes are looked for in the
/// tracked processes' main threads' children files.
const LIST_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Follows a root process and all its descendants.
///
/// New processes are looked for only when /proc/loadavg shows a pid was created since the last
/// reading, so steady-state cost is one read of /proc/loadavg plus one read of an already open
/// /proc/PID/stat per process of the job. Then the children of each tracked process's main
/// thread are read (`/proc/PID/task/PID/children`, kept open: DataLoader workers, subprocesses),
/// and /proc is listed at most once per `LIST_EVERY` (a child started by another thread; on a
/// busy machine pids are created all the time, and listing /proc at every reading was the
/// recorder's largest cost). A pid not seen before has its stat read once to learn its parent:
/// descendants are adopted, others are remembered as unrelated (and forgotten when they vanish). I/O bytes and context switches (from /proc/PID/io and
/// /proc/PID/status, the latter costly to generate) are read only when `slow` is set.
pub(crate) struct ProcTree {
    root: u32,
    tracked: HashMap<u32, Tracked>,
    unrelated: HashMap<u32, u64>,
    ticks_per_s: f64,
    page_size: u64,
    last_io: HashMap<u32, (u64, u64)>,
    /// /proc/loadavg, whose last field is the most recently created pid: while it does not
    /// change, no process was created and listing /proc can be skipped.
    loadavg: Option<ProcFile>,
    last_pid_seen: Option<u64>,
    /// When /proc was last listed, and whether a pid was created since.
    listed_at: Option<Instant>,
    list_pending: bool,
}

impl ProcTree {
    pub(crate) fn new(root: u32) -> Self {
        ProcTree {
            root,
            tracked: HashMap::new(),
            unrelated: HashMap::new(),
            ticks_per_s: procfs::ticks_per_second() as f64,
            page_size: procfs::page_size(),
            last_io: HashMap::new(),
            loadavg: ProcFile::open("/proc/loadavg"),
            last_pid_seen: None,
            listed_at: None,
            list_pending: true,
        }
    }

    pub(crate) fn root(&self) -> u32 {
        self.root
    }

    /// Pids currently in the tree.
    pub(crate) fn pids(&self) -> Vec<u32> {
        self.tracked.keys().copied().collect()
    }

    /// True when a process may have been created since the previous call.
    fn maybe_new_processes(&mut self) -> bool {
        let last = self.loadavg.as_mut().and_then(|f| f.read()).and_then(|b| {
            std::str::from_utf8(b)
                .ok()?
                .split_ascii_whitespace()
                .nth(4)?
                .parse::<u64>()
                .ok()
        });
        match last {
            Some(l) if Some(l) == self.last_pid_seen => false,
            _ => {
                self.last_pid_seen = last;
                true
            }
        }
    }

    pub(crate) fn sample(&mut self, t_s: f64, slow: bool) -> TreeReading {
        let mut reading = TreeReading::default();
        let created = self.maybe_new_processes();
        self.list_pending |= created;
        let now = Instant::now();
        if self.list_pending
            && self
                .listed_at
                .is_none_or(|t| now.duration_since(t) >= LIST_EVERY)
        {
            self.list_pending = false;
            self.listed_at = Some(now);
            self.discover(t_s, &mut reading);
        } else if created {
            self.discover_children(t_s, &mut reading);
        }
        self.read_tracked(t_s, slow, &mut reading);
        reading.samples.sort_by_key(|s| s.pid);
        reading
    }

    /// Lists /proc and adopts the root and every new descendant.
    fn discover(&mut self, t_s: f64, reading: &mut TreeReading) {
        let mut present: HashSet<u32> = HashSet::new();
        let mut candidates: Vec<(u32, ProcFile, StatLite)> = Vec::new();
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return;
        };
        for e in entries.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            present.insert(pid);
            if self.tracked.contains_key(&pid) || self.unrelated.contains_key(&pid) {
                continue;
            }
            if let Some(mut f) = ProcFile::open(&format!("/proc/{pid}/stat")) {
                if let Some(st) = f.read().and_then(parse_stat) {
                    candidates.push((pid, f, st));
                }
            }
        }
        let candidates = self.adopt(t_s, candidates, reading);
        for (pid, _, st) in candidates {
            self.unrelated.insert(pid, st.starttime);
        }
        self.unrelated.retain(|pid, _| present.contains(pid));
    }

    /// Adopts the root and every candidate whose parent is in the tree (repeated until none
    /// is: parents may be listed after their children when pids wrap); returns the others.
    fn adopt(
        &mut self,
        t_s: f64,
        mut candidates: Vec<(u32, ProcFile, StatLite)>,
        reading: &mut TreeReading,
    ) -> Vec<(u32, ProcFile, StatLite)> {
        // gpufeed itself is never the job's: `record --pid` of the process that started it (a
        // notebook kernel's `gpufeed.profile()`) would count the recorder as a worker.
        let me = std::process::id();
        let mut changed = true;
        while changed {
            changed = false;
            let mut rest = Vec::with_capacity(candidates.len());
            for (pid, f, st) in candidates.drain(..) {
                if pid != me && (pid == self.root || self.tracked.contains_key(&st.ppid)) {
                    let cmd = read_cmdline(pid);
                    reading.started.push(ProcStart {
                        t_s,
                        pid,
                        ppid: st.ppid,
                        cmd: cmd.clone(),
                        comm: Some(st.comm.clone()),
                    });
                    let keep = self.tracked.len() < MAX_OPEN;
                    self.tracked.insert(
                        pid,
                        Tracked {
                            stat: keep.then_some(f),
                            children: keep
                                .then(|| {
                                    ProcFile::open(&format!("/proc/{pid}/task/{pid}/children"))
                                })
                                .flatten(),
                            io: None,
                            status: None,
                            keep,
                            comm: st.comm.clone(),
                            cmd,
                            starttime: st.starttime,
                            prev_ticks: st.ticks,
                            prev_at: Instant::now(),
                        },
                    );
                    changed = true;
                } else {
                    rest.push((pid, f, st));
                }
            }
            candidates = rest;
        }
        candidates
    }

    /// Looks for new processes among the children of the tracked processes' main threads.
    fn discover_children(&mut self, t_s: f64, reading: &mut TreeReading) {
        let mut new = Vec::new();
        for tr in self.tracked.values_mut() {
            let Some(b) = tr.children.as_mut().and_then(|f| f.read()) else {
                continue;
            };
            let Ok(text) = std::str::from_utf8(b) else {
                continue;
            };
            new.extend(
                text.split_ascii_whitespace()
                    .filter_map(|w| w.parse::<u32>().ok()),
            );
        }
        new.retain(|p| !self.tracked.contains_key(p) && !self.unrelated.contains_key(p));
        if new.is_empty() {
            return;
        }
        new.sort_unstable();
        new.dedup();
        let candidates: Vec<(u32, ProcFile, StatLite)> = new
            .into_iter()
            .filter_map(|pid| {
                let mut f = ProcFile::open(&format!("/proc/{pid}/stat"))?;
                let st = f.read().and_then(parse_stat)?;
                Some((pid, f, st))
            })
            .collect();
        // A child whose parent is not tracked (reparented meanwhile) is left to the next listing.
        self.adopt(t_s, candidates, reading);
    }

    /// Reads every tracked process; drops the ones that are gone (or whose pid was reused).
    fn read_tracked(&mut self, t_s: f64, slow: bool, reading: &mut TreeReading) {
        let mut gone = Vec::new();
        for (&pid, tr) in self.tracked.iter_mut() {
            let st = match tr.stat.as_mut() {
                Some(f) => f.read().and_then(parse_stat),
                None => ProcFile::open(&format!("/proc/{pid}/stat"))
                    .and_then(|mut f| f.read().and_then(parse_stat)),
            };
            let Some(st) = st.filter(|st| st.starttime == tr.starttime) else {
                gone.push(pid);
                continue;
            };
            if st.state == 'Z' || st.state == 'X' {
                // Exited, not yet reaped: its /proc entry stays until then. Remembered as
                // not ours, or the next listing of /proc would announce it as a new process
                // (and again as gone) at every reading.
                self.unrelated.insert(pid, tr.starttime);
                gone.push(pid);
                continue;
            }
            let now = Instant::now();
            let dt = now.duration_since(tr.prev_at).as_secs_f64();
            let just_started = reading.started.iter().any(|s| s.pid == pid);
            if st.comm != tr.comm {
                // The process called exec after it was first seen (its command line may have
                // been read between fork and exec): announce it again with the new command,
                // unless that command line was already announced (read between the two steps
                // of one exec, see `Tracked::cmd`).
                let cmd = read_cmdline(pid);
                if cmd != tr.cmd {
                    reading.started.push(ProcStart {
                        t_s,
                        pid,
                        ppid: st.ppid,
                        cmd: cmd.clone(),
                        comm: Some(st.comm.clone()),
                    });
                    tr.cmd = cmd;
                }
                tr.comm = st.comm.clone();
            }
            let cpu_pct = (dt > 0.0 && !just_started).then(|| {
                st.ticks.saturating_sub(tr.prev_ticks) as f64 / self.ticks_per_s / dt * 100.0
            });
            tr.prev_ticks = st.ticks;
            tr.prev_at = now;
            let mut sample = ProcSample {
                pid,
                cpu_pct,
                rss_bytes: Some(st.rss_pages * self.page_size),
                state: Some(st.state),
                threads: Some(st.threads),
                ..Default::default()
            };
            if slow || just_started {
                if let Some(io) = read_kept(&mut tr.io, tr.keep, pid, "io", parse_io).flatten() {
                    self.last_io.insert(pid, io);
                }
                if let Some((v, n)) =
                    read_kept(&mut tr.status, tr.keep, pid, "status", parse_ctxt_switches)
                {
                    sample.voluntary_ctxt_switches = v;
                    sample.nonvoluntary_ctxt_switches = n;
                }
            }
            // Cumulative I/O counters: the last value read (at most a second old).
            if let Some(&(r, w)) = self.last_io.get(&pid) {
                sample.read_bytes = Some(r);
                sample.write_bytes = Some(w);
            }
            reading.samples.push(sample);
        }
        for pid in gone {
            self.tracked.remove(&pid);
            self.last_io.remove(&pid);
            reading.exited.push(pid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watched_process_is_alive_until_it_exits_and_stays_gone() {
        let mut child = std::process::Command::new("sleep")
            .arg("0.3")
            .spawn()
            .unwrap();
        let w = PidWatch::new(child.id());
        assert!(w.fd.is_some(), "pidfd_open works on this kernel");
        assert!(w.alive());
        let t = std::time::Instant::now();
        while w.alive() && t.elapsed() < std::time::Duration::from_secs(5) {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        // Exited (a zombie until reaped): gone, as pid_alive says.
        assert!(!w.alive());
        assert!(!pid_alive(child.id()));
        child.wait().unwrap();
        assert!(!w.alive(), "reaped: still gone");
        assert!(!PidWatch::new(u32::MAX - 1).alive(), "no such process");
    }

    #[test]
    fn stat_parsing_survives_odd_command_names() {
        let line = b"4242 (py (worker) 1) S 4200 4242 4200 0 -1 4194560 100 0 0 0 150 50 0 0 20 0 7 0 12345 1000000 2500 18446744073709551615";
        let st = parse_stat(line).unwrap();
        assert_eq!(st.comm, "py (worker) 1");
        assert_eq!(st.state, 'S');
        assert_eq!(st.ppid, 4200);
        assert_eq!(st.ticks, 200);
        assert_eq!(st.threads, 7);
        assert_eq!(st.starttime, 12345);
        assert_eq!(st.rss_pages, 2500);
        assert!(parse_stat(b"garbage").is_none());
        assert!(parse_stat(b"1 (x) S 1").is_none());
        let own = std::fs::read(format!("/proc/{}/stat", std::process::id())).unwrap();
        assert!(parse_stat(&own).unwrap().threads >= 1);
    }

    #[test]
    fn a_process_that_execs_is_announced_again_with_its_new_command() {
        // The child is seen as a shell first, then it execs sleep.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "read x; exec sleep 0.5"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut tree = ProcTree::new(child.id());
        let first = tree.sample(0.0, false);
        assert_eq!(first.started.len(), 1);
        assert!(first.started[0]
            .cmd
            .as_deref()
            .unwrap()
            .starts_with("sh -c"));
        use std::io::Write;
        child.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
        let mut again = None;
        for i in 0..50 {
            std::thread::sleep(std::time::Duration::from_millis(10));
            let r = tree.sample(0.01 * i as f64, false);
            if let Some(s) = r.started.into_iter().next() {
                again = Some(s);
                break;
            }
        }
        let again = again.expect("announced again after exec");
        assert_eq!(again.pid, child.id());
        assert_eq!(again.cmd.as_deref(), Some("sleep 0.5"));
        child.wait().unwrap();
    }

    #[test]
    fn a_new_name_with_the_command_line_already_announced_is_not_announced_again() {
        // exec writes the new command line before the new name: a process read in between is
        // announced with its new command line, and must not be announced again when the name
        // follows. prctl(PR_SET_NAME) makes the same change (the name alone) at a known time.
        if std::process::Command::new("python3")
            .arg("-V")
            .output()
            .is_err()
        {
            eprintln!("SKIPPED: no python3 to rename itself");
            return;
        }
        use std::io::{BufRead, Write};
        let script = "import ctypes, sys\n\
                      print('ready', flush=True); sys.stdin.readline()\n\
                      ctypes.CDLL(None).prctl(15, b'renamed', 0, 0, 0)\n\
                      print('renamed', flush=True); sys.stdin.readline()\n";
        let mut child = std::process::Command::new("python3")
            .args(["-c", script])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line, "ready\n");
        let pid = child.id();
        let mut tree = ProcTree::new(pid);
        let first = tree.sample(0.0, false);
        assert_eq!(first.started.len(), 1, "{:?}", first.started);
        let cmd = first.started[0].cmd.clone();
        assert!(cmd.as_deref().unwrap().contains("prctl"), "{cmd:?}");
        child.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
        line.clear();
        out.read_line(&mut line).unwrap();
        assert_eq!(line, "renamed\n");
        let r = tree.sample(0.1, false);
        assert_eq!(tree.tracked[&pid].comm, "renamed", "the new name was read");
        assert!(r.started.is_empty(), "announced again: {:?}", r.started);
        child.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn io_and_context_switches_are_read_from_their_lines() {
        let io = b"rchar: 10\nwchar: 20\nsyscr: 1\nread_bytes: 4096\nwrite_bytes: 8192\ncancelled_write_bytes: 0\n";
        assert_eq!(parse_io(io), Some((4096, 8192)));
        assert_eq!(parse_io(b"rchar: 10\n"), None);
        let status =
            b"Name:\tpython\nvoluntary_ctxt_switches:\t150\nnonvoluntary_ctxt_switches:\t7\n";
        assert_eq!(parse_ctxt_switches(status), (Some(150), Some(7)));
        assert_eq!(parse_ctxt_switches(b"Name:\tx\n"), (None, None));
        // This process's own files, through the kept-open reader (twice: read in place).
        let me = std::process::id();
        let mut slot = None;
        for _ in 0..2 {
            let (v, _) = read_kept(&mut slot, true, me, "status", parse_ctxt_switches).unwrap();
            assert!(v.is_some());
            assert!(slot.is_some(), "kept open");
        }
        let mut slot = None;
        assert!(read_kept(&mut slot, false, me, "status", |b| b.len()).unwrap() > 0);
        assert!(slot.is_none(), "closed when not kept");
        let mut f = ProcFile::open(&format!("/proc/{me}/status")).unwrap();
        let first = f.read().unwrap().len();
        assert!(first > 100 && f.read().unwrap().starts_with(b"Name:"));
    }

    #[test]
    fn a_new_child_is_found_without_listing_proc_again() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "read x; sleep 0.7 & wait"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut tree = ProcTree::new(child.id());
        assert_eq!(tree.sample(0.0, false).started.len(), 1);
        let listed = tree.listed_at.unwrap();
        use std::io::Write;
        child.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
        // Seen as the shell between fork and exec, or at once as sleep: either way announced
        // as sleep within the second in which /proc is not listed again.
        let mut found = false;
        while !found && listed.elapsed() < std::time::Duration::from_millis(900) {
            std::thread::sleep(std::time::Duration::from_millis(10));
            let r = tree.sample(listed.elapsed().as_secs_f64(), false);
            found = r
                .started
                .iter()
                .any(|s| s.ppid == child.id() && s.cmd.as_deref() == Some("sleep 0.7"));
        }
        assert!(found, "the shell's child, from its children file");
        assert_eq!(
            tree.listed_at,
            Some(listed),
            "/proc not listed again within a second"
        );
        child.wait().unwrap();
    }

    #[test]
    fn stall_and_busy_math() {
        assert_eq!(stall_pct(Some(1_500_000), Some(1_000_000), 1.0), Some(50.0));
        assert_eq!(stall_pct(Some(1), None, 1.0), None);
        assert_eq!(stall_pct(Some(1), Some(2), 1.0), None);
        assert_eq!(busy_pct((30, 70), (0, 0)), Some(30.0));
        assert_eq!(busy_pct((0, 0), (0, 0)), None);
    }

    #[test]
    fn host_sampler_gives_rates_on_second_reading() {
        let mut h = HostSampler::new();
        let first = h.sample(0.0);
        assert!(
            first.cpu_pct.is_empty(),
            "no rate without a previous reading"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
        let second = h.sample(0.05);
        assert_eq!(second.cpu_pct.len(), host_info().cpu_count as usize);
        assert!(second.mem_total_bytes.unwrap() > 0);
    }

    #[test]
    fn tree_follows_children_that_come_and_go() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 0.3 & sleep 0.3 & wait"])
            .spawn()
            .unwrap();
        let mut tree = ProcTree::new(child.id());
        std::thread::sleep(std::time::Duration::from_millis(100));
        let r = tree.sample(0.1, true);
        assert_eq!(r.started.len(), 3, "{:?}", r.started);
        assert!(r
            .started
            .iter()
            .any(|s| s.cmd.as_deref() == Some("sleep 0.3")));
        child.wait().unwrap();
        let r = tree.sample(0.5, false);
        assert_eq!(r.exited.len(), 3);
        assert!(tree.pids().is_empty());
    }
}
