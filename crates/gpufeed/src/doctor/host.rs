//! Host checks: /dev/shm against what DataLoader workers keep there, CPU cores per GPU (affinity
//! and cgroup quota) → a num_workers ceiling, each GPU's NUMA node against the CPUs in use, RAM,
//! and the open-files limit.

use super::gpu::{GpuProbeError, GpuSystem};
use super::{Check, Group, Status, Workload};
use crate::units;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::path::{Path, PathBuf};

/// Facts about the host; `None` where unreadable.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct HostFacts {
    pub shm_path: PathBuf,
    pub shm_total_bytes: Option<u64>,
    pub shm_available_bytes: Option<u64>,
    pub online_cpus: Option<u32>,
    /// CPUs this process may run on (sched_getaffinity).
    pub allowed_cpus: Option<Vec<u32>>,
    /// cgroup CPU quota in CPUs (`cpu.max` or `cfs_quota_us / cfs_period_us`); `None`: no quota.
    pub cgroup_cpu_quota: Option<f64>,
    pub mem_total_bytes: Option<u64>,
    pub mem_available_bytes: Option<u64>,
    pub nofile_soft: Option<u64>,
    pub nofile_hard: Option<u64>,
    /// NUMA node → its CPUs (/sys/devices/system/node).
    pub numa_nodes: BTreeMap<u32, Vec<u32>>,
}

pub(crate) fn probe(shm_path: &Path) -> HostFacts {
    let (shm_total_bytes, shm_available_bytes) = match statvfs(shm_path) {
        Some((t, a)) => (Some(t), Some(a)),
        None => (None, None),
    };
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let (nofile_soft, nofile_hard) = nofile();
    HostFacts {
        shm_path: shm_path.to_path_buf(),
        shm_total_bytes,
        shm_available_bytes,
        online_cpus: std::fs::read_to_string("/sys/devices/system/cpu/online")
            .ok()
            .and_then(|s| parse_cpu_list(&s))
            .map(|v| v.len() as u32),
        allowed_cpus: allowed_cpus(),
        cgroup_cpu_quota: cgroup_cpu_quota(),
        mem_total_bytes: meminfo_kib(&meminfo, "MemTotal").map(|k| k * 1024),
        mem_available_bytes: meminfo_kib(&meminfo, "MemAvailable").map(|k| k * 1024),
        nofile_soft,
        nofile_hard,
        numa_nodes: numa_nodes(),
    }
}

/// (total, available to unprivileged users) bytes of the filesystem at `path`.
pub(crate) fn statvfs(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: `c` is a valid NUL-terminated path; `st` is plain data filled by the call.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(c.as_ptr(), &mut st) != 0 {
            return None;
        }
        let frsize = st.f_frsize as u64;
        Some((st.f_blocks as u64 * frsize, st.f_bavail as u64 * frsize))
    }
}

fn nofile() -> (Option<u64>, Option<u64>) {
    // SAFETY: getrlimit fills a plain struct.
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return (None, None);
        }
        let f = |v: libc::rlim_t| (v != libc::RLIM_INFINITY).then_some(v);
        (f(r.rlim_cur), f(r.rlim_max))
    }
}

fn allowed_cpus() -> Option<Vec<u32>> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills it for this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        Some(
            (0..libc::CPU_SETSIZE as usize)
                .filter(|&i| libc::CPU_ISSET(i, &set))
                .map(|i| i as u32)
                .collect(),
        )
    }
}

pub(crate) fn meminfo_kib(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(key)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// "0-3,8,10-11" → `[0,1,2,3,8,10,11]`.
pub(crate) fn parse_cpu_list(s: &str) -> Option<Vec<u32>> {
    let mut v = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if b < a || b - a > 1 << 16 {
                    return None;
                }
                v.extend(a..=b);
            }
            None => v.push(part.trim().parse().ok()?),
        }
    }
    Some(v)
}

fn numa_nodes() -> BTreeMap<u32, Vec<u32>> {
    let mut m = BTreeMap::new();
    if let Ok(rd) = std::fs::read_dir("/sys/devices/system/node") {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(n) = name
                .strip_prefix("node")
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            if let Some(cpus) = std::fs::read_to_string(e.path().join("cpulist"))
                .ok()
                .and_then(|s| parse_cpu_list(&s))
            {
                m.insert(n, cpus);
            }
        }
    }
    m
}

/// cgroup v2 `cpu.max` ("max 100000" or "200000 100000") → CPUs.
pub(crate) fn parse_cpu_max(s: &str) -> Option<f64> {
    let mut it = s.split_whitespace();
    let quota = it.next()?;
    let period: f64 = it.next().unwrap_or("100000").parse().ok()?;
    if quota == "max" || period <= 0.0 {
        return None;
    }
    let q: f64 = quota.parse().ok()?;
    (q > 0.0).then_some(q / period)
}

/// cgroup v1 `cfs_quota_us` / `cfs_period_us` → CPUs (quota −1: none).
pub(crate) fn parse_cfs(quota: &str, period: &str) -> Option<f64> {
    let q: i64 = quota.trim().parse().ok()?;
    let p: i64 = period.trim().parse().ok()?;
    (q > 0 && p > 0).then(|| q as f64 / p as f64)
}

/// The tightest CPU quota over this process's cgroup and its ancestors (v2), or the v1 cpu
/// controller's quota.
fn cgroup_cpu_quota() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mut best: Option<f64> = None;
    let mut take = |v: Option<f64>| {
        if let Some(v) = v {
            best = Some(best.map_or(v, |b: f64| b.min(v)));
        }
    };
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
        if ctrls.is_empty() {
            // v2: walk from the cgroup up to the root.
            let mut p = PathBuf::from("/sys/fs/cgroup").join(path.trim_start_matches('/'));
            loop {
                take(
                    std::fs::read_to_string(p.join("cpu.max"))
                        .ok()
                        .and_then(|s| parse_cpu_max(&s)),
                );
                if p == Path::new("/sys/fs/cgroup") || !p.pop() {
                    break;
                }
            }
        } else if ctrls.split(',').any(|c| c == "cpu") {
            for mount in ["/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu"] {
                for dir in [
                    PathBuf::from(mount).join(path.trim_start_matches('/')),
                    PathBuf::from(mount),
                ] {
                    let q = std::fs::read_to_string(dir.join("cpu.cfs_quota_us"));
                    let p = std::fs::read_to_string(dir.join("cpu.cfs_period_us"));
                    if let (Ok(q), Ok(p)) = (q, p) {
                        take(parse_cfs(&q, &p));
                    }
                }
            }
        }
    }
    best
}

pub(crate) fn checks(
    h: &HostFacts,
    gpus: &Result<GpuSystem, GpuProbeError>,
    w: &Workload,
) -> Vec<Check> {
    let gpu_count = gpus.as_ref().map(|g| g.devices.len() as u32).unwrap_or(0);
    let gpu_mem: Option<u64> = gpus
        .as_ref()
        .ok()
        .and_then(|g| g.devices.iter().map(|d| d.memory_total_bytes).sum());
    let mut out = vec![judge_shm(h, w, gpu_count), judge_cores(h, gpu_count)];
    match gpus {
        Ok(g) if !g.devices.is_empty() => {
            for d in &g.devices {
                out.push(
                    judge_numa(d.numa_node, &h.numa_nodes, h.allowed_cpus.as_deref()).gpu(d.index),
                );
            }
        }
        _ => out.push(Check::skip("numa", Group::Host, "no GPU")),
    }
    out.push(judge_ram(h.mem_total_bytes, h.mem_available_bytes, gpu_mem));
    out.push(judge_nofile(h.nofile_soft, h.nofile_hard));
    out
}

/// Shared memory needed by DataLoader workers: workers × prefetch × batch, per GPU (each rank
/// has its own workers).
pub(crate) fn shm_needed_bytes(w: &Workload, gpu_count: u32) -> u64 {
    (w.num_workers as u64)
        .saturating_mul(w.prefetch_factor as u64)
        .saturating_mul(w.batch_bytes)
        .saturating_mul(gpu_count.max(1) as u64)
}

pub(crate) fn judge_shm(h: &HostFacts, w: &Workload, gpu_count: u32) -> Check {
    let id = "dev_shm";
    let need = shm_needed_bytes(w, gpu_count);
    let shm = h.shm_path.display().to_string();
    let fix = "give the container more shared memory: `docker run --shm-size=16g` (or `--ipc=host`), in Kubernetes mount an `emptyDir: {medium: Memory, sizeLimit: 16Gi}` at /dev/shm, on a host `sudo mount -o remount,size=16G /dev/shm`; or lower num_workers / prefetch_factor";
    let Some(total) = h.shm_total_bytes else {
        return Check::new(
            id,
            Group::Host,
            Status::Fail,
            format!(
                "{shm} is missing: DataLoader workers cannot pass batches through shared memory"
            ),
        )
        .with("needed_bytes", need)
        .fix(fix);
    };
    let avail = h.shm_available_bytes;
    let c = |st, s: String| {
        Check::new(id, Group::Host, st, s)
            .with("shm_total_bytes", total)
            .with("shm_available_bytes", avail)
            .with("needed_bytes", need)
            .with("num_workers", w.num_workers)
            .with("prefetch_factor", w.prefetch_factor)
            .with("batch_bytes", w.batch_bytes)
            .with("gpu_count", gpu_count)
    };
    let workload = format!(
        "{} workers × prefetch {} × {} batches{}",
        w.num_workers,
        w.prefetch_factor,
        units::bytes(w.batch_bytes),
        if gpu_count > 1 {
            format!(" × {gpu_count} GPUs")
        } else {
            String::new()
        }
    );
    if total < need {
        let small = if total <= 64 << 20 {
            " (the container default of 64 MiB)"
        } else {
            ""
        };
        return c(
            Status::Fail,
            format!(
                "{shm} is {}{small}, but {workload} need {}: workers die with \"bus error\"",
                units::bytes(total),
                units::bytes(need)
            ),
        )
        .fix(fix);
    }
    if let Some(a) = avail.filter(|a| *a < need) {
        return c(
            Status::Warn,
            format!(
                "{shm} is {} but only {} is free; {workload} need {}",
                units::bytes(total),
                units::bytes(a),
                units::bytes(need)
            ),
        )
        .fix(format!(
            "remove stale files in {shm} (left by killed jobs), or enlarge it"
        ));
    }
    c(
        Status::Pass,
        format!(
            "{shm} is {} ({} free): enough for {workload} ({})",
            units::bytes(total),
            avail.map_or("?".into(), units::bytes),
            units::bytes(need)
        ),
    )
}

/// CPUs usable: the affinity set, capped by the cgroup quota.
pub(crate) fn usable_cpus(h: &HostFacts) -> Option<f64> {
    let aff = h
        .allowed_cpus
        .as_ref()
        .map(|v| v.len() as f64)
        .or(h.online_cpus.map(f64::from))?;
    Some(match h.cgroup_cpu_quota {
        Some(q) => aff.min(q),
        None => aff,
    })
}

pub(crate) fn judge_cores(h: &HostFacts, gpu_count: u32) -> Check {
    let id = "cpu_cores";
    let Some(cpus) = usable_cpus(h) else {
        return Check::skip(id, Group::Host, "could not read the CPUs available");
    };
    let g = gpu_count.max(1);
    let per_gpu = cpus / g as f64;
    // One core for the training process itself; the rest can feed it.
    let ceiling = (per_gpu.floor() as i64 - 1).max(0) as u64;
    let quota = h
        .cgroup_cpu_quota
        .map(|q| format!(", cgroup quota {q:.1}"))
        .unwrap_or_default();
    let c = |st, s: String| {
        Check::new(id, Group::Host, st, s)
            .with("usable_cpus", cpus)
            .with(
                "affinity_cpus",
                h.allowed_cpus.as_ref().map(|v| v.len() as u64),
            )
            .with("online_cpus", h.online_cpus)
            .with("cgroup_cpu_quota", h.cgroup_cpu_quota)
            .with("gpu_count", gpu_count)
            .with("cpus_per_gpu", per_gpu)
            .with("num_workers_ceiling", ceiling)
    };
    let gpus = if gpu_count == 0 {
        "no GPU found, counted as one".to_string()
    } else {
        crate::units::plural(gpu_count as usize, "GPU", "GPUs")
    };
    let summary = format!(
        "{cpus:.1} usable CPUs (affinity {}{quota}) for {gpus}: {per_gpu:.1} per GPU → num_workers ≤ {ceiling} per GPU",
        h.allowed_cpus.as_ref().map_or("?".into(), |v| v.len().to_string())
    );
    if per_gpu < 1.0 {
        c(Status::Fail, format!("{summary}; fewer CPUs than GPUs: input will starve the GPUs"))
            .fix("give the job more CPUs (container --cpus / cgroup quota, taskset/affinity), or use fewer GPUs per job")
    } else if per_gpu < 4.0 {
        c(Status::Warn, format!("{summary}; CPU-side decoding and augmentation will likely starve the GPU"))
            .fix("move augmentation to the GPU (NVIDIA DALI, torchvision.transforms.v2 on CUDA tensors), pre-process the dataset offline, or get more CPUs per GPU")
    } else {
        c(Status::Pass, summary).fix(format!(
            "start with num_workers={} and raise it while `gpufeed run` shows the GPU waiting on input",
            ceiling.min(8)
        ))
    }
}

pub(crate) fn judge_numa(
    node: Option<u32>,
    nodes: &BTreeMap<u32, Vec<u32>>,
    allowed: Option<&[u32]>,
) -> Check {
    let id = "numa";
    if nodes.len() <= 1 {
        return Check::new(
            id,
            Group::Host,
            Status::Pass,
            "a single NUMA node: nothing to pin",
        )
        .with("numa_nodes", nodes.len() as u64)
        .with("gpu_numa_node", node);
    }
    let Some(node) = node else {
        return Check::skip(id, Group::Host, "the GPU's NUMA node is unknown");
    };
    let Some(node_cpus) = nodes.get(&node) else {
        return Check::skip(id, Group::Host, format!("NUMA node {node} has no CPU list"));
    };
    let Some(allowed) = allowed else {
        return Check::skip(id, Group::Host, "the CPUs in use are unknown");
    };
    let near = allowed.iter().filter(|c| node_cpus.contains(c)).count();
    let c = |st, s: String| {
        Check::new(id, Group::Host, st, s)
            .with("gpu_numa_node", node)
            .with("numa_nodes", nodes.len() as u64)
            .with("allowed_cpus", allowed.len() as u64)
            .with("allowed_cpus_on_gpu_node", near as u64)
    };
    let pin = format!("run this GPU's rank with `numactl --cpunodebind={node} --membind={node}` (or set its DataLoader workers' affinity to node {node}'s CPUs)");
    if near == 0 {
        c(
            Status::Warn,
            format!("the GPU is on NUMA node {node}, but this process may run only on CPUs of other nodes: every copy crosses the socket link"),
        )
        .fix(pin)
    } else if near == allowed.len() {
        c(
            Status::Pass,
            format!("the CPUs in use are all on the GPU's NUMA node {node}"),
        )
    } else {
        c(
            Status::Pass,
            format!("the GPU is on NUMA node {node}; {near} of the {} CPUs in use are on it (not pinned)", allowed.len()),
        )
        .fix(pin)
    }
}

pub(crate) fn judge_ram(total: Option<u64>, available: Option<u64>, gpu_mem: Option<u64>) -> Check {
    let id = "ram";
    let Some(total) = total else {
        return Check::skip(id, Group::Host, "could not read /proc/meminfo");
    };
    let c = |st, s: String| {
        Check::new(id, Group::Host, st, s)
            .with("mem_total_bytes", total)
            .with("mem_available_bytes", available)
            .with("gpu_memory_total_bytes", gpu_mem)
    };
    match gpu_mem {
        Some(g) if total < g => c(
            Status::Warn,
            format!("{} of RAM for {} of GPU memory: pinned buffers, dataset caching and checkpoint loading will press on host memory", units::bytes(total), units::bytes(g)),
        )
        .fix("at least as much RAM as GPU memory (twice is comfortable); meanwhile keep pin_memory buffers and prefetch_factor small"),
        _ => c(
            Status::Pass,
            format!("{} of RAM ({} available)", units::bytes(total), available.map_or("?".into(), units::bytes)),
        ),
    }
}

/// Below this many open files, DataLoader workers sharing tensors through file descriptors run out.
pub(crate) const NOFILE_MIN: u64 = 4096;

pub(crate) fn judge_nofile(soft: Option<u64>, hard: Option<u64>) -> Check {
    let id = "open_files";
    let c = |st, s: String| {
        Check::new(id, Group::Host, st, s)
            .with("nofile_soft", soft)
            .with("nofile_hard", hard)
    };
    match soft {
        // None here means unlimited (RLIM_INFINITY) when getrlimit succeeded.
        None if hard.is_none() => c(Status::Pass, "no limit on open files".into()),
        Some(s) if s < NOFILE_MIN => c(
            Status::Warn,
            format!("`ulimit -n` is {s}: DataLoader workers passing tensors by file descriptor fail with \"Too many open files\" or \"received 0 items of ancdata\""),
        )
        .fix(format!(
            "`ulimit -n {}` before training (hard limit {}), or `torch.multiprocessing.set_sharing_strategy('file_system')`",
            hard.map_or(65536, |h| h.min(65536)),
            hard.map_or("unlimited".to_string(), |h| h.to_string())
        )),
        Some(s) => c(Status::Pass, format!("`ulimit -n` is {s}")),
        None => c(Status::Pass, "no limit on open files".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w() -> Workload {
        Workload {
            num_workers: 8,
            prefetch_factor: 2,
            batch_bytes: 64 << 20,
        }
    }

    fn shm(total: Option<u64>, avail: Option<u64>) -> HostFacts {
        HostFacts {
            shm_path: "/dev/shm".into(),
            shm_total_bytes: total,
            shm_available_bytes: avail,
            ..Default::default()
        }
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list("5"), Some(vec![5]));
        assert_eq!(parse_cpu_list(""), Some(vec![]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("a"), None);
    }

    #[test]
    fn quotas() {
        assert_eq!(parse_cpu_max("max 100000\n"), None);
        assert_eq!(parse_cpu_max("200000 100000\n"), Some(2.0));
        assert_eq!(parse_cpu_max("50000 100000"), Some(0.5));
        assert_eq!(parse_cfs("-1", "100000"), None);
        assert_eq!(parse_cfs("400000\n", "100000\n"), Some(4.0));
    }

    #[test]
    fn meminfo() {
        let t = "MemTotal:       65536000 kB\nMemFree: 1 kB\nMemAvailable:   32000000 kB\n";
        assert_eq!(meminfo_kib(t, "MemTotal"), Some(65_536_000));
        assert_eq!(meminfo_kib(t, "MemAvailable"), Some(32_000_000));
        assert_eq!(meminfo_kib(t, "Mem"), None);
    }

    #[test]
    fn shm_judgement() {
        assert_eq!(shm_needed_bytes(&w(), 0), 1 << 30);
        assert_eq!(shm_needed_bytes(&w(), 4), 4 << 30);
        let docker = judge_shm(&shm(Some(64 << 20), Some(64 << 20)), &w(), 1);
        assert_eq!(docker.status, Status::Fail);
        assert!(docker.summary.contains("bus error"));
        assert!(docker.summary.contains("64 MiB"));
        assert!(docker.fix.unwrap().contains("--shm-size"));
        assert_eq!(
            judge_shm(&shm(Some(32 << 30), Some(32 << 30)), &w(), 1).status,
            Status::Pass
        );
        assert_eq!(
            judge_shm(&shm(Some(32 << 30), Some(100 << 20)), &w(), 1).status,
            Status::Warn
        );
        assert_eq!(judge_shm(&shm(None, None), &w(), 1).status, Status::Fail);
        // Per GPU: 4 GPUs need 4 GiB.
        assert_eq!(
            judge_shm(&shm(Some(2 << 30), Some(2 << 30)), &w(), 4).status,
            Status::Fail
        );
    }

    #[test]
    fn cores_judgement() {
        let h = |n: u32, quota| HostFacts {
            allowed_cpus: Some((0..n).collect()),
            cgroup_cpu_quota: quota,
            ..Default::default()
        };
        let c = judge_cores(&h(64, None), 8);
        assert_eq!(c.status, Status::Pass);
        assert_eq!(c.evidence["num_workers_ceiling"], 7);
        let c = judge_cores(&h(64, Some(8.0)), 8);
        assert_eq!(c.status, Status::Warn, "the quota caps the affinity set");
        assert_eq!(c.evidence["num_workers_ceiling"], 0);
        assert_eq!(judge_cores(&h(4, None), 8).status, Status::Fail);
        assert_eq!(judge_cores(&h(16, None), 0).status, Status::Pass);
        assert_eq!(judge_cores(&HostFacts::default(), 1).status, Status::Skip);
    }

    #[test]
    fn numa_judgement() {
        let mut nodes = BTreeMap::new();
        nodes.insert(0, (0..8).collect::<Vec<u32>>());
        nodes.insert(1, (8..16).collect::<Vec<u32>>());
        let all: Vec<u32> = (0..16).collect();
        let far: Vec<u32> = (0..8).collect();
        let near: Vec<u32> = (8..16).collect();
        assert_eq!(judge_numa(Some(1), &nodes, Some(&far)).status, Status::Warn);
        assert_eq!(
            judge_numa(Some(1), &nodes, Some(&near)).status,
            Status::Pass
        );
        let spread = judge_numa(Some(1), &nodes, Some(&all));
        assert_eq!(spread.status, Status::Pass);
        assert!(spread.fix.unwrap().contains("--cpunodebind=1"));
        assert_eq!(judge_numa(None, &nodes, Some(&all)).status, Status::Skip);
        let mut single = BTreeMap::new();
        single.insert(0, all.clone());
        assert_eq!(judge_numa(None, &single, Some(&all)).status, Status::Pass);
    }

    #[test]
    fn ram_judgement() {
        assert_eq!(
            judge_ram(Some(64 << 30), None, Some(80 << 30)).status,
            Status::Warn
        );
        assert_eq!(
            judge_ram(Some(512 << 30), None, Some(80 << 30)).status,
            Status::Pass
        );
        assert_eq!(judge_ram(Some(8 << 30), None, None).status, Status::Pass);
        assert_eq!(judge_ram(None, None, None).status, Status::Skip);
    }

    #[test]
    fn nofile_judgement() {
        let c = judge_nofile(Some(1024), Some(1_048_576));
        assert_eq!(c.status, Status::Warn);
        assert!(c.fix.unwrap().contains("ulimit -n 65536"));
        assert_eq!(judge_nofile(Some(65536), Some(65536)).status, Status::Pass);
        assert_eq!(judge_nofile(None, None).status, Status::Pass);
    }

    #[test]
    fn probes_this_machine_without_panicking() {
        let h = probe(Path::new("/dev/shm"));
        assert!(h.mem_total_bytes.is_some());
        assert!(h.allowed_cpus.as_ref().is_some_and(|v| !v.is_empty()));
    }
}
