//! Host and job sampling from /proc (procfs crate).
//!
//! `HostSampler` reads the machine (per-core CPU, memory, swap, pressure stall information, disks);
//! `ProcTree` follows a job's process tree — the main process and every descendant, DataLoader
//! workers included — as processes come and go. Rates are computed from cumulative counters
//! between two readings, so the first reading of anything has no rate (`None`).

use super::{DiskRate, HostInfo, HostSample, ProcSample, ProcStart};
use procfs::prelude::*;
use procfs::process::Process;
use procfs::{CpuPressure, CpuTime, IoPressure, KernelStats, Meminfo, MemoryPressure};
use std::collections::{HashMap, HashSet};
use std::time::Instant;

/// True while `pid` exists and is not a zombie waiting to be reaped.
pub fn pid_alive(pid: u32) -> bool {
    match Process::new(pid as i32).and_then(|p| p.stat()) {
        Ok(st) => st.state != 'Z' && st.state != 'X',
        Err(_) => false,
    }
}

/// Static facts about this machine.
pub fn host_info() -> HostInfo {
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

fn read_psi() -> PsiTotals {
    let cpu = CpuPressure::current().ok();
    let io = IoPressure::current().ok();
    let mem = MemoryPressure::current().ok();
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
pub struct HostSampler {
    prev_cpu: Option<CpuCounters>,
    prev_disk: HashMap<String, (u64, u64)>,
    prev_psi: PsiTotals,
    prev_at: Option<Instant>,
}

impl Default for HostSampler {
    fn default() -> Self {
        Self::new()
    }
}

impl HostSampler {
    pub fn new() -> Self {
        HostSampler {
            prev_cpu: None,
            prev_disk: HashMap::new(),
            prev_psi: PsiTotals::default(),
            prev_at: None,
        }
    }

    pub fn sample(&mut self, t_s: f64) -> HostSample {
        let now = Instant::now();
        let dt_s = self
            .prev_at
            .map(|p| now.duration_since(p).as_secs_f64())
            .unwrap_or(0.0);
        let mut s = HostSample {
            t_s,
            ..Default::default()
        };

        if let Ok(ks) = KernelStats::current() {
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

        if let Ok(m) = Meminfo::current() {
            s.mem_total_bytes = Some(m.mem_total);
            s.mem_available_bytes = m.mem_available;
            s.mem_cached_bytes = Some(m.cached);
            s.swap_total_bytes = Some(m.swap_total);
            s.swap_free_bytes = Some(m.swap_free);
        }

        let psi = read_psi();
        s.psi_cpu_some_pct = stall_pct(psi.cpu_some, self.prev_psi.cpu_some, dt_s);
        s.psi_io_some_pct = stall_pct(psi.io_some, self.prev_psi.io_some, dt_s);
        s.psi_io_full_pct = stall_pct(psi.io_full, self.prev_psi.io_full, dt_s);
        s.psi_mem_some_pct = stall_pct(psi.mem_some, self.prev_psi.mem_some, dt_s);
        s.psi_mem_full_pct = stall_pct(psi.mem_full, self.prev_psi.mem_full, dt_s);
        self.prev_psi = psi;

        if let Ok(disks) = procfs::diskstats() {
            for d in disks {
                // Whole devices only: partitions would count the same bytes twice; skip loop/ram.
                if d.name.starts_with("loop") || d.name.starts_with("ram") || is_partition(&d.name)
                {
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

/// What changed in a job's process tree at one reading.
#[derive(Debug, Default)]
pub struct TreeReading {
    pub started: Vec<ProcStart>,
    pub exited: Vec<u32>,
    pub samples: Vec<ProcSample>,
}

struct Tracked {
    starttime: u64,
    prev_ticks: u64,
    prev_at: Instant,
}

/// Follows a root process and all its descendants.
///
/// Each reading lists /proc once; a pid not seen before has its stat read once to learn its
/// parent: descendants are adopted, others are remembered as unrelated (and forgotten when they
/// vanish) so steady-state cost is one directory listing plus one stat and one io read per
/// process of the job. Context switches (from /proc/PID/status, costly to generate) are read
/// only when `slow` is set.
pub struct ProcTree {
    root: u32,
    tracked: HashMap<u32, Tracked>,
    unrelated: HashMap<u32, u64>,
    ticks_per_s: f64,
    page_size: u64,
}

impl ProcTree {
    pub fn new(root: u32) -> Self {
        ProcTree {
            root,
            tracked: HashMap::new(),
            unrelated: HashMap::new(),
            ticks_per_s: procfs::ticks_per_second() as f64,
            page_size: procfs::page_size(),
        }
    }

    pub fn root(&self) -> u32 {
        self.root
    }

    /// Pids currently in the tree.
    pub fn pids(&self) -> Vec<u32> {
        self.tracked.keys().copied().collect()
    }

    /// True while the root process exists.
    pub fn root_alive(&self) -> bool {
        pid_alive(self.root)
    }

    pub fn sample(&mut self, t_s: f64, slow: bool) -> TreeReading {
        let mut reading = TreeReading::default();
        let mut present: HashSet<u32> = HashSet::new();
        let mut candidates: Vec<(u32, procfs::process::Stat)> = Vec::new();
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return reading;
        };
        for e in entries.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            present.insert(pid);
            if self.tracked.contains_key(&pid) || self.unrelated.contains_key(&pid) {
                continue;
            }
            if let Ok(st) = Process::new(pid as i32).and_then(|p| p.stat()) {
                candidates.push((pid, st));
            }
        }
        // Adopt descendants: repeat until no candidate's parent is in the tree (parents may be
        // listed after their children when pids wrap).
        let mut changed = true;
        while changed {
            changed = false;
            let mut rest = Vec::with_capacity(candidates.len());
            for (pid, st) in candidates.drain(..) {
                let ppid = st.ppid.max(0) as u32;
                if pid == self.root || self.tracked.contains_key(&ppid) {
                    let proc_ = Process::new(pid as i32).ok();
                    let cmd = proc_
                        .as_ref()
                        .and_then(|p| p.cmdline().ok())
                        .filter(|c| !c.is_empty())
                        .map(|c| c.join(" "));
                    reading.started.push(ProcStart {
                        t_s,
                        pid,
                        ppid,
                        cmd,
                        comm: Some(st.comm.clone()),
                    });
                    self.tracked.insert(
                        pid,
                        Tracked {
                            starttime: st.starttime,
                            prev_ticks: st.utime + st.stime,
                            prev_at: Instant::now(),
                        },
                    );
                    changed = true;
                } else {
                    rest.push((pid, st));
                }
            }
            candidates = rest;
        }
        for (pid, st) in candidates {
            self.unrelated.insert(pid, st.starttime);
        }
        self.unrelated.retain(|pid, _| present.contains(pid));

        // Read every tracked process; drop the ones that are gone (or whose pid was reused).
        let mut gone = Vec::new();
        let pids: Vec<u32> = self.tracked.keys().copied().collect();
        for pid in pids {
            let p = match Process::new(pid as i32) {
                Ok(p) => p,
                Err(_) => {
                    gone.push(pid);
                    continue;
                }
            };
            let st = match p.stat() {
                Ok(st) => st,
                Err(_) => {
                    gone.push(pid);
                    continue;
                }
            };
            let tr = self.tracked.get_mut(&pid).expect("pid is tracked");
            if st.starttime != tr.starttime || st.state == 'Z' || st.state == 'X' {
                gone.push(pid);
                continue;
            }
            let now = Instant::now();
            let ticks = st.utime + st.stime;
            let dt = now.duration_since(tr.prev_at).as_secs_f64();
            let cpu_pct = if dt > 0.0 && reading.started.iter().all(|s| s.pid != pid) {
                Some(ticks.saturating_sub(tr.prev_ticks) as f64 / self.ticks_per_s / dt * 100.0)
            } else {
                None
            };
            tr.prev_ticks = ticks;
            tr.prev_at = now;
            let io = p.io().ok();
            let (vol, invol) = if slow {
                match p.status() {
                    Ok(s) => (s.voluntary_ctxt_switches, s.nonvoluntary_ctxt_switches),
                    Err(_) => (None, None),
                }
            } else {
                (None, None)
            };
            reading.samples.push(ProcSample {
                pid,
                cpu_pct,
                rss_bytes: Some(st.rss * self.page_size),
                read_bytes: io.as_ref().map(|i| i.read_bytes),
                write_bytes: io.as_ref().map(|i| i.write_bytes),
                state: Some(st.state),
                threads: u32::try_from(st.num_threads).ok(),
                voluntary_ctxt_switches: vol,
                nonvoluntary_ctxt_switches: invol,
            });
        }
        for pid in gone {
            self.tracked.remove(&pid);
            reading.exited.push(pid);
        }
        reading.samples.sort_by_key(|s| s.pid);
        reading
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
