//! The evidence builder: derived statistics computed by streaming over a recording's lines.
//!
//! [`EvidenceBuilder`] takes one [`Line`] at a time and keeps only running sums, fixed histograms
//! and fixed-size buffers, so memory does not grow with the recording's length (per-process state
//! grows with the number of processes, not with time). [`EvidenceBuilder::finish`] turns them into
//! an [`Evidence`] that the rules read.

use crate::diagnose::streaming::Moments;
use crate::import::dcgmi::ProfilingMeans;
use crate::import::reading::Reading;
use crate::import::MAX_GPUS;
use crate::sample::event::{Header, Line, ProcsLine};
use crate::sample::{throttle, GpuSample, HostSample, ProcSample, ProcStart};
use crate::units::pcie_link_bytes_per_s;
use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, HashMap};

use super::acc::*;
use super::types::*;

/// Streams lines into running statistics.
#[derive(Debug, Default)]
pub struct EvidenceBuilder {
    t_first: Option<f64>,
    t_last: Option<f64>,
    gpus: Vec<GpuAcc>,
    /// Where each GPU index sits in `gpus`: looked up for every GPU sample, by a plain table for
    /// the small indices every node uses (one load, where a hash took a tenth of a reading's
    /// time), by the map past them.
    gpu_pos_small: [u16; SMALL_GPU_INDICES],
    gpu_pos: FxHashMap<u32, usize>,
    host_n: u64,
    cpu_count_seen: Option<u32>,
    cpu_total: Moments,
    idle_cores: Moments,
    busy_cores: Moments,
    iowait: Moments,
    psi: [Moments; 5],
    disk_read: Moments,
    mem_total: Option<u64>,
    mem_avail_min: Option<u64>,
    /// Keyed by pid: looked up for every process of every sample, hence a cheap hash (the
    /// results never depend on the maps' order).
    procs: FxHashMap<u32, ProcAcc>,
    /// Most children alive at once, per parent pid.
    max_children: FxHashMap<u32, u32>,
    children_now: FxHashMap<u32, u32>,
    job_cpu: Moments,
    proc_samples: u64,
    proc_d: u64,
    instants: u64,
    instants_d: u64,
    end: Option<(Option<i32>, Option<i32>)>,
    profiling: BTreeMap<u32, ProfilingMeans>,
    py: super::pyloop::PyAcc,
    impossible: Impossible,
    steps: super::pyloop::StepAcc,
}

/// GPU indices below this find their place in [`EvidenceBuilder::gpus`] by table.
const SMALL_GPU_INDICES: usize = 32;
const _: () = assert!(
    MAX_GPUS < u16::MAX as usize,
    "a table slot holds a position + 1 in a u16"
);

/// The evidence is one consumer of the recording reader's single pass.
impl crate::record::reader::Sink for EvidenceBuilder {
    fn gpu(&mut self, g: &GpuSample) {
        self.push_gpu(g)
    }
    fn host(&mut self, h: &HostSample) {
        self.push_host(h)
    }
    fn procs(&mut self, t_s: f64, procs: &[ProcSample]) {
        self.push_procs(t_s, procs)
    }
    fn line(&mut self, l: &Line) {
        self.push(l)
    }
}

impl EvidenceBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    fn seen(&mut self, t: f64) {
        if !t.is_finite() {
            return;
        }
        self.t_first = Some(self.t_first.map_or(t, |f| f.min(t)));
        self.t_last = Some(self.t_last.map_or(t, |l| l.max(t)));
    }

    pub fn push(&mut self, line: &Line) {
        match line {
            Line::Gpu(g) => self.push_gpu(g),
            Line::Host(h) => self.push_host(h),
            Line::ProcStart(p) => self.push_proc_start(p),
            Line::Procs(ProcsLine { t_s, procs }) => self.push_procs(*t_s, procs),
            Line::ProcExit { t_s, .. } => self.seen(*t_s),
            Line::End(e) => {
                self.end = Some((e.exit_code, e.signal));
                self.impossible.steps_dropped =
                    (self.impossible.steps_dropped).saturating_add(e.steps_dropped.unwrap_or(0));
                self.impossible.steps_flooded =
                    (self.impossible.steps_flooded).saturating_add(e.steps_flooded.unwrap_or(0));
                self.impossible.steps_unfollowed = (self.impossible.steps_unfollowed)
                    .saturating_add(e.steps_unfollowed.unwrap_or(0));
                self.impossible.ranks_unfollowed = (self.impossible.ranks_unfollowed)
                    .saturating_add(e.ranks_unfollowed.unwrap_or(0));
            }
            Line::PyStatus(_) | Line::PyFrame(_) | Line::PyStack(_) => self.py.push(line),
            Line::PySamples(s) => {
                self.seen(s.t_s);
                self.py.push(line);
            }
            Line::Steps(st) => {
                self.seen(st.t_s);
                self.steps.push(line);
            }
            Line::Overrides(_) | Line::Unknown => {}
        }
    }

    /// Profiling means from a `dcgmi dmon` log, for one GPU.
    pub fn set_profiling(&mut self, index: u32, p: ProfilingMeans) {
        self.profiling.insert(index, p);
    }

    /// Where GPU `index` sits in `gpus`, if it was seen.
    #[inline]
    fn slot(&self, index: u32) -> Option<usize> {
        match self.gpu_pos_small.get(index as usize) {
            Some(&p) => (p != 0).then(|| p as usize - 1),
            None => self.gpu_pos.get(&index).copied(),
        }
    }

    fn gpu(&mut self, index: u32) -> &mut GpuAcc {
        let pos = match self.slot(index) {
            Some(p) => p,
            None => self.add_gpu(index),
        };
        &mut self.gpus[pos]
    }

    fn add_gpu(&mut self, index: u32) -> usize {
        let pos = self.gpus.len();
        self.gpus.push(GpuAcc {
            index,
            ..Default::default()
        });
        match self.gpu_pos_small.get_mut(index as usize) {
            // Past MAX_GPUS only a header's GPUs are added (at the end): a position past the
            // table's range goes to the map.
            Some(p) if pos < u16::MAX as usize => *p = (pos + 1) as u16,
            _ => {
                self.gpu_pos.insert(index, pos);
            }
        }
        pos
    }

    /// Takes one GPU sample; impossible values in it are dropped and counted (see
    /// [`Evidence::warnings`]), never averaged in.
    pub(crate) fn push_gpu(&mut self, s: &GpuSample) {
        let r = Reading {
            index: s.index,
            t_s: s.t_s,
            util_pct: s.util_pct,
            mem_util_pct: s.mem_util_pct,
            mem_used_bytes: s.mem_used_bytes,
            sm_clock_mhz: s.sm_clock_mhz,
            power_w: s.power_w,
            temperature_c: s.temperature_c,
            pcie_rx_bytes: s.pcie_rx_bytes,
            pcie_tx_bytes: s.pcie_tx_bytes,
            pcie_rx_bytes_per_s: s.pcie_rx_bytes_per_s,
            pcie_tx_bytes_per_s: s.pcie_tx_bytes_per_s,
            pcie_gen: s.pcie_gen,
            pcie_width: s.pcie_width,
            throttle_reasons: s.throttle_reasons,
        };
        self.push_reading_with(&r, s.util_samples.as_deref())
    }

    /// Takes one reading of a log, as [`Self::push_gpu`] takes a sample: a log's readings come
    /// by the million, and a sample built for each cost more than all the figures took.
    #[inline]
    pub(crate) fn push_reading(&mut self, r: &Reading) {
        self.push_reading_with(r, None)
    }

    /// A GPU's reading and the utilization samples the driver gave since the one before
    /// (`None`: it gives none; then `util_pct` counts). Inlined into both callers, so that a
    /// log's reading, which has no samples, takes no branch for them and no call.
    #[inline(always)]
    fn push_reading_with(&mut self, s: &Reading, samples: Option<&[[f64; 2]]>) {
        let pos = self.slot(s.index);
        // A node holds a few dozen GPUs: past MAX_GPUS a new one is counted, not followed.
        if pos.is_none() && self.gpus.len() >= MAX_GPUS {
            self.impossible.gpus_over_cap += 1;
            return;
        }
        if !s.t_s.is_finite() {
            self.impossible.time_not_finite += 1;
            return;
        }
        let bad_util = s.util_pct.is_some_and(|v| !pct_ok(v))
            || s.mem_util_pct.is_some_and(|v| !pct_ok(v))
            || samples.is_some_and(|v| v.iter().any(|&[t, u]| !pct_ok(u) || !t.is_finite()));
        let bad_mem = s
            .mem_used_bytes
            .is_some_and(|m| m > MAX_PLAUSIBLE_MEM_BYTES);
        let bad_power = s
            .power_w
            .is_some_and(|p| !(0.0..=MAX_PLAUSIBLE_POWER_W).contains(&p));
        let cleaned;
        let (s, samples) = if bad_util || bad_mem || bad_power {
            let mut c = s.clone();
            if s.util_pct.is_some_and(|v| !pct_ok(v)) {
                c.util_pct = None;
                self.impossible.util += 1;
            }
            if s.mem_util_pct.is_some_and(|v| !pct_ok(v)) {
                c.mem_util_pct = None;
                self.impossible.util += 1;
            }
            let kept: Option<Vec<[f64; 2]>> = samples.map(|v| {
                let kept: Vec<_> = v
                    .iter()
                    .copied()
                    .filter(|&[t, u]| pct_ok(u) && t.is_finite())
                    .collect();
                self.impossible.util += (v.len() - kept.len()) as u64;
                kept
            });
            if bad_mem {
                c.mem_used_bytes = None;
                self.impossible.mem += 1;
            }
            if bad_power {
                c.power_w = None;
                self.impossible.power += 1;
            }
            cleaned = (c, kept);
            (&cleaned.0, cleaned.1.as_deref())
        } else {
            (s, samples)
        };
        self.push_gpu_checked(s, samples, pos)
    }

    /// `pos`: where the GPU sits in `gpus` (`None`: new).
    #[inline(always)]
    fn push_gpu_checked(&mut self, s: &Reading, samples: Option<&[[f64; 2]]>, pos: Option<usize>) {
        if pos
            .and_then(|p| self.gpus[p].last_t)
            .is_some_and(|l| s.t_s < l - 1e-6)
        {
            self.impossible.backwards += 1;
        }
        self.seen(s.t_s);
        let pos = match pos {
            Some(p) => p,
            None => self.add_gpu(s.index),
        };
        let g = &mut self.gpus[pos];
        let dt = g
            .last_t
            .map(|l| (s.t_s - l).clamp(0.0, 10.0))
            .unwrap_or(0.0);
        g.last_t = Some(s.t_s);

        let mut util_now = None;
        match samples {
            Some(samples) => {
                for &[t, v] in samples {
                    g.util_sample(t, v);
                    util_now = Some(v);
                }
            }
            None => {
                if let Some(v) = s.util_pct {
                    g.util_sample(s.t_s, v);
                    util_now = Some(v);
                }
            }
        }
        if util_now.is_none() {
            util_now = s.util_pct.or(g.last_util);
        }
        g.last_util = util_now;

        if let Some(m) = s.mem_used_bytes {
            g.mem_used.push(m as f64);
        }

        // PCIe receive rate: cumulative counters first (they may wrap: skip a negative delta).
        let mut rate = None;
        if let Some(rx) = s.pcie_rx_bytes {
            if let Some((lt, lrx)) = g.last_rx {
                if s.t_s > lt && rx >= lrx {
                    rate = Some((rx - lrx) as f64 / (s.t_s - lt));
                }
            }
            g.last_rx = Some((s.t_s, rx));
        }
        if rate.is_none() {
            rate = s.pcie_rx_bytes_per_s;
        }
        if let (Some(gen), Some(width)) = (s.pcie_gen, s.pcie_width) {
            g.last_link = Some((gen, width));
            g.gen_max_seen = Some(g.gen_max_seen.map_or(gen, |m| m.max(gen)));
            g.width_max_seen = Some(g.width_max_seen.map_or(width, |m| m.max(width)));
            let loaded = util_now.is_some_and(|u| u >= LOADED_PCT);
            if loaded {
                *g.link_counts.entry((gen, width)).or_default() += 1;
            }
        }
        if let Some(r) = rate {
            g.rx_rate.push(r);
            if let Some(cap) = s
                .pcie_gen
                .zip(s.pcie_width)
                .or(g.last_link)
                .and_then(|(gn, w)| pcie_link_bytes_per_s(gn, w))
            {
                let f = r / cap;
                g.rx_frac.push(f);
                g.rx_frac_hist.push(f * 100.0);
            }
        }

        if let Some(mask) = s.throttle_reasons {
            g.throttle_observed += dt;
            if mask & throttle::SLOWING != 0 {
                g.throttle_slowing += dt;
            }
            for (bit, acc) in g.throttle_by_bit.iter_mut().enumerate() {
                if mask & (1 << bit) != 0 {
                    *acc += dt;
                }
            }
        }
        if let Some(v) = s.temperature_c {
            g.temp.push(v as f64);
        }
        if let Some(v) = s.power_w {
            g.power.push(v);
        }
        if let Some(v) = s.sm_clock_mhz {
            g.clock.push(v as f64);
        }
    }

    pub(crate) fn push_host(&mut self, h: &HostSample) {
        self.seen(h.t_s);
        self.host_n += 1;
        if !h.cpu_pct.is_empty() {
            self.cpu_count_seen = Some(h.cpu_pct.len() as u32);
            let idle = h.cpu_pct.iter().filter(|c| **c < IDLE_CORE_PCT).count();
            let busy = h.cpu_pct.iter().filter(|c| **c >= BUSY_CORE_PCT).count();
            self.idle_cores.push(idle as f64);
            self.busy_cores.push(busy as f64);
        }
        let total = h.cpu_total_pct.or_else(|| {
            (!h.cpu_pct.is_empty()).then(|| h.cpu_pct.iter().sum::<f64>() / h.cpu_pct.len() as f64)
        });
        if let Some(t) = total {
            self.cpu_total.push(t);
        }
        if let Some(v) = h.iowait_pct {
            self.iowait.push(v);
        }
        for (acc, v) in self.psi.iter_mut().zip([
            h.psi_cpu_some_pct,
            h.psi_io_some_pct,
            h.psi_io_full_pct,
            h.psi_mem_some_pct,
            h.psi_mem_full_pct,
        ]) {
            if let Some(v) = v {
                acc.push(v);
            }
        }
        if !h.disks.is_empty() {
            self.disk_read
                .push(h.disks.iter().map(|d| d.read_bytes_per_s).sum());
        }
        if h.mem_total_bytes.is_some() {
            self.mem_total = h.mem_total_bytes;
        }
        if let Some(a) = h.mem_available_bytes {
            self.mem_avail_min = Some(self.mem_avail_min.map_or(a, |m| m.min(a)));
        }
    }

    pub(crate) fn push_proc_start(&mut self, p: &ProcStart) {
        self.seen(p.t_s);
        if !self.procs.contains_key(&p.pid) && self.procs.len() >= MAX_PROCESSES {
            self.impossible.procs_over_cap += 1;
            return;
        }
        let cmd = p.cmd.clone().or_else(|| p.comm.clone());
        self.procs
            .entry(p.pid)
            .and_modify(|a| {
                // Announced again: the process called exec; its new command is the one to show.
                a.ppid = p.ppid;
                if cmd.is_some() {
                    a.cmd = cmd.clone();
                }
            })
            .or_insert_with(|| ProcAcc::new(p.ppid, cmd, p.t_s));
    }

    pub(crate) fn push_procs(&mut self, t: f64, procs: &[ProcSample]) {
        self.seen(t);
        self.instants += 1;
        self.children_now.clear();
        let mut total = 0.0;
        let mut any_cpu = false;
        let mut any_d = false;
        for p in procs {
            if !self.procs.contains_key(&p.pid) && self.procs.len() >= MAX_PROCESSES {
                self.impossible.procs_over_cap += 1;
                if let Some(c) = p.cpu_pct {
                    total += c;
                    any_cpu = true;
                }
                continue;
            }
            let a = self
                .procs
                .entry(p.pid)
                .or_insert_with(|| ProcAcc::new(0, None, t));
            a.last_t = t;
            if let Some(c) = p.cpu_pct {
                a.cpu.push(c);
                if c >= BUSY_CORE_PCT {
                    a.saturated += 1;
                }
                total += c;
                any_cpu = true;
            }
            if let Some(r) = p.rss_bytes {
                a.rss_max = Some(a.rss_max.map_or(r, |m| m.max(r)));
            }
            if let Some(st) = p.state {
                a.states += 1;
                self.proc_samples += 1;
                if st == 'D' {
                    a.d_states += 1;
                    self.proc_d += 1;
                    any_d = true;
                }
            }
            if let Some(rb) = p.read_bytes {
                if a.read_first.is_none() {
                    a.read_first = Some(rb);
                }
                a.read_last = Some(rb);
            }
            *self.children_now.entry(a.ppid).or_default() += 1;
        }
        for (ppid, n) in &self.children_now {
            let m = self.max_children.entry(*ppid).or_default();
            *m = (*m).max(*n);
        }
        if any_cpu {
            self.job_cpu.push(total);
        }
        if any_d {
            self.instants_d += 1;
        }
    }

    /// Turns the running statistics into evidence; `header` gives the static facts.
    pub fn finish(mut self, header: &Header) -> Evidence {
        let duration_s = match (self.t_first, self.t_last) {
            (Some(a), Some(b)) => (b - a).max(0.0),
            _ => 0.0,
        };
        // GPUs known from the header but never sampled still appear.
        for s in &header.gpus {
            self.gpu(s.index);
        }
        let mut gpus: Vec<GpuEvidence> = std::mem::take(&mut self.gpus)
            .into_iter()
            .map(|g| {
                let st = header.gpus.iter().find(|s| s.index == g.index);
                let prof = self.profiling.remove(&g.index);
                finish_gpu(g, st, prof)
            })
            .collect();
        gpus.sort_by_key(|g| g.index);

        let host = HostEvidence {
            cpu_count: (header.host.cpu_count > 0)
                .then_some(header.host.cpu_count)
                .or(self.cpu_count_seen),
            cpus_allowed: header.host.cpus_allowed,
            samples: self.host_n,
            cpu_mean_pct: self.cpu_total.mean(),
            idle_cores_mean: self.idle_cores.mean(),
            busy_cores_mean: self.busy_cores.mean(),
            iowait_mean_pct: self.iowait.mean(),
            psi_cpu_some_mean_pct: self.psi[0].mean(),
            psi_io_some_mean_pct: self.psi[1].mean(),
            psi_io_full_mean_pct: self.psi[2].mean(),
            psi_mem_some_mean_pct: self.psi[3].mean(),
            psi_mem_full_mean_pct: self.psi[4].mean(),
            disk_read_mean_bytes_per_s: self.disk_read.mean(),
            disk_read_max_bytes_per_s: self.disk_read.max(),
            mem_total_bytes: header.host.mem_total_bytes.or(self.mem_total),
            mem_available_min_bytes: self.mem_avail_min,
        };

        let job = self.finish_job(header, duration_s);
        self.impossible.rank_lines_over_cap = self.steps.rank_lines_over_cap();
        let mut warnings = self.impossible.warnings(duration_s);
        warnings.extend(self.py.bound_warning());
        let mut python = std::mem::take(&mut self.py).finish(header, &job);
        let steps = std::mem::take(&mut self.steps).finish();
        if let Some(p) = python.as_mut() {
            super::pyloop::fill_ms_per_sample(p, steps.as_ref().and_then(|s| s.items));
            super::pyloop::fill_rank_steps(p, steps.as_ref());
        }
        Evidence {
            duration_s,
            gpus,
            host,
            job,
            python,
            steps,
            origin: Origin::Recording,
            no_gpu: NoGpu::of(header),
            warnings,
        }
    }

    fn finish_job(&mut self, header: &Header, duration_s: f64) -> JobEvidence {
        let ranks = self.rank_pids();
        let (root, mut main) = self.root_and_main(header);
        if let Some(first) = ranks.first() {
            main = Some(*first);
        }
        let roles = self.roles(main, &ranks);
        let processes = self.process_evidence(&roles);
        let workers: Vec<&ProcEvidence> = processes
            .iter()
            .filter(|p| p.role == Role::Worker)
            .collect();
        let worker_means: Vec<f64> = workers.iter().filter_map(|w| w.cpu_mean_pct).collect();
        let main_acc = main.and_then(|m| self.procs.get(&m));
        let workers_max = if ranks.is_empty() {
            self.workers_max(main, workers.len() as u32)
        } else {
            let n: u32 = ranks
                .iter()
                .map(|r| self.workers_max(Some(*r), u32::MAX))
                .sum();
            n.min(workers.len() as u32)
        };
        let read_total: u64 = processes.iter().filter_map(|p| p.read_bytes).sum();
        let any_read = processes.iter().any(|p| p.read_bytes.is_some());
        JobEvidence {
            pid: root,
            main_pid: main,
            main_cmd: main_acc.and_then(|a| a.cmd.clone()),
            main_cpu_mean_pct: main_acc.and_then(|a| a.cpu.mean()),
            main_saturated_fraction: main_acc
                .filter(|a| a.cpu.n > 0)
                .map(|a| a.saturated as f64 / a.cpu.n as f64),
            workers_max,
            workers_seen: workers.len() as u32,
            worker_cpu_mean_pct: (!worker_means.is_empty())
                .then(|| worker_means.iter().sum::<f64>() / worker_means.len() as f64),
            workers_cpu_total_mean_pct: (!worker_means.is_empty()).then(|| {
                // Sum of per-worker means, weighted by how long each lived.
                let span = duration_s.max(1e-9);
                workers
                    .iter()
                    .filter_map(|w| {
                        let life = (w.last_t_s - w.first_t_s).max(0.0);
                        w.cpu_mean_pct.map(|c| c * (life / span).min(1.0))
                    })
                    .sum::<f64>()
            }),
            saturated_workers: worker_means
                .iter()
                .filter(|c| **c >= SATURATED_PROC_PCT)
                .count() as u32,
            cpu_mean_pct: self.job_cpu.mean(),
            samples: self.instants,
            d_state_fraction: (self.proc_samples > 0)
                .then(|| self.proc_d as f64 / self.proc_samples as f64),
            d_state_time_fraction: (self.instants > 0 && self.proc_samples > 0)
                .then(|| self.instants_d as f64 / self.instants as f64),
            read_mean_bytes_per_s: (any_read && duration_s > 0.0)
                .then(|| read_total as f64 / duration_s),
            exit_code: self.end.and_then(|e| e.0),
            signal: self.end.and_then(|e| e.1),
            processes,
            rank_pids: ranks,
        }
    }

    /// The ranks of a multi-process job, rank 0 (else the lowest pid) first: the processes
    /// whose environment starts a rank (recorded with their Python status), the process that
    /// started such a rank running the same command (Lightning's rank 0 re-launches its own
    /// script), else two or more children of a launcher (matched on its command line). Empty
    /// for a single training process.
    fn rank_pids(&self) -> Vec<u32> {
        use crate::sample::ranks::is_launcher_cmd;
        let launcher = |p: u32| {
            self.procs
                .get(&p)
                .and_then(|a| a.cmd.as_deref())
                .is_some_and(is_launcher_cmd)
        };
        let env = self.py.rank_envs();
        let mut ranks: Vec<(u32, u32)> = env
            .iter()
            .filter(|(p, _)| self.procs.contains_key(p) && !launcher(**p))
            .map(|(p, e)| (e.shown().unwrap_or(u32::MAX), *p))
            .collect();
        for (_, r) in ranks.clone() {
            let a = &self.procs[&r];
            let parent = a.ppid;
            let same_cmd = self.procs.get(&parent).is_some_and(|pa| {
                crate::sample::ranks::same_script(pa.cmd.as_deref(), a.cmd.as_deref())
            });
            // A rank other than 0 whose parent is in the job, not a launcher and shows no rank
            // of its own: the parent is rank 0 (Lightning), even when the child's command line
            // was caught between fork and exec (recorded as its bare `comm`).
            let started_by_rank0 = env.get(&r).and_then(|e| e.shown()).is_some_and(|n| n > 0)
                && self.procs.contains_key(&parent)
                && !env.contains_key(&parent);
            if (same_cmd || started_by_rank0)
                && !launcher(parent)
                && !ranks.iter().any(|x| x.1 == parent)
            {
                let taken = ranks.iter().any(|x| x.0 == 0);
                ranks.push((if taken { u32::MAX } else { 0 }, parent));
            }
        }
        if ranks.is_empty() {
            for (p, _) in self.procs.iter().filter(|(p, _)| launcher(**p)) {
                let c: Vec<u32> = self
                    .children(*p)
                    .into_iter()
                    .filter(|c| !launcher(*c))
                    .collect();
                if c.len() >= 2 {
                    ranks.extend(c.into_iter().map(|c| (u32::MAX, c)));
                }
            }
        }
        if ranks.is_empty() {
            // Ranks with no rank variables and no launcher (`mp.spawn`, `multiprocessing`):
            // two or more processes that each run the training loop.
            let training = self.py.training_pids();
            if training.len() >= 2 {
                ranks.extend(
                    training
                        .into_iter()
                        .filter(|p| self.procs.contains_key(p))
                        .map(|p| (u32::MAX, p)),
                );
            }
        }
        ranks.sort_unstable();
        ranks.dedup_by_key(|r| r.1);
        if ranks.len() < 2 && env.is_empty() {
            return Vec::new();
        }
        ranks.into_iter().map(|r| r.1).collect()
    }

    /// The pids whose parent is `pid`, in order.
    fn children(&self, pid: u32) -> Vec<u32> {
        let mut c: Vec<u32> = self
            .procs
            .iter()
            .filter(|(p, a)| a.ppid == pid && **p != pid)
            .map(|(p, _)| *p)
            .collect();
        c.sort_unstable();
        c
    }

    /// The job's root (recorded, else the earliest process without a parent in the tree) and
    /// its main process: down from the root through quiet launchers with one child.
    fn root_and_main(&self, header: &Header) -> (Option<u32>, Option<u32>) {
        let root = header.pid.or_else(|| {
            // Without a recorded root: the process whose parent is not in the tree, earliest first.
            self.procs
                .iter()
                .filter(|(_, a)| !self.procs.contains_key(&a.ppid))
                .min_by(|a, b| a.1.first_t.total_cmp(&b.1.first_t).then(a.0.cmp(b.0)))
                .map(|(p, _)| *p)
        });
        // Walk down launchers: a quiet process with exactly one child hands "main" to the child.
        let mut main = root;
        if let Some(mut m) = root {
            for _ in 0..8 {
                let quiet = self.procs.get(&m).and_then(|a| a.cpu.mean()).unwrap_or(0.0) < 5.0;
                let c = self.children(m);
                // A forked child with the same command line is a worker, not the training loop.
                let same_cmd = c.len() == 1
                    && self.procs.get(&m).and_then(|a| a.cmd.as_ref())
                        == self.procs.get(&c[0]).and_then(|a| a.cmd.as_ref());
                if quiet && c.len() == 1 && !same_cmd {
                    m = c[0];
                } else {
                    break;
                }
            }
            main = Some(m);
        }
        (root, main)
    }

    /// Roles: descendants of main are workers, except idle helpers with a command of their
    /// own (a `sleep`, an `nvidia-smi` call): DataLoader workers share main's command line.
    /// Every rank of a multi-process job is a main process, with its own workers.
    fn roles(&self, main: Option<u32>, ranks: &[u32]) -> HashMap<u32, Role> {
        let mut roles: HashMap<u32, Role> = HashMap::new();
        if let Some(m) = main {
            roles.insert(m, Role::Main);
            for r in ranks {
                roles.insert(*r, Role::Main);
            }
            let main_cmd = self.procs.get(&m).and_then(|a| a.cmd.clone());
            let mut stack = vec![m];
            stack.extend(ranks.iter().filter(|r| **r != m));
            while let Some(p) = stack.pop() {
                for c in self.children(p) {
                    if let std::collections::hash_map::Entry::Vacant(e) = roles.entry(c) {
                        let a = self.procs.get(&c);
                        let same = a.and_then(|a| a.cmd.as_ref()) == main_cmd.as_ref();
                        let cpu = a.and_then(|a| a.cpu.mean()).unwrap_or(0.0);
                        let waited = a.is_some_and(|a| a.d_states > 0);
                        // A command line read between fork and exec still shows main's: a
                        // same-command child that never ran nor waited on I/O is a helper too.
                        let worker = cpu >= 5.0 || (same && (cpu >= 0.5 || waited));
                        e.insert(if worker { Role::Worker } else { Role::Other });
                        stack.push(c);
                    }
                }
            }
        }
        roles
    }

    /// Every process's figures, by pid.
    fn process_evidence(&self, roles: &HashMap<u32, Role>) -> Vec<ProcEvidence> {
        let mut processes: Vec<ProcEvidence> = self
            .procs
            .iter()
            .map(|(pid, a)| ProcEvidence {
                pid: *pid,
                ppid: a.ppid,
                cmd: a.cmd.clone(),
                role: roles.get(pid).copied().unwrap_or(Role::Other),
                samples: a.cpu.n,
                cpu_mean_pct: a.cpu.mean(),
                cpu_max_pct: a.cpu.max(),
                rss_max_bytes: a.rss_max,
                d_state_fraction: (a.states > 0).then(|| a.d_states as f64 / a.states as f64),
                read_bytes: a
                    .read_first
                    .zip(a.read_last)
                    .map(|(f, l)| l.saturating_sub(f)),
                first_t_s: a.first_t,
                last_t_s: a.last_t,
            })
            .collect();
        processes.sort_by_key(|p| p.pid);

        processes
    }

    /// Most workers alive at once (at most `workers`): counted from the per-parent maxima
    /// under main.
    fn workers_max(&self, main: Option<u32>, workers: u32) -> u32 {
        match main {
            Some(m) => {
                let mut n = 0u32;
                let mut stack = vec![m];
                let mut seen = 0;
                while let Some(p) = stack.pop() {
                    seen += 1;
                    if seen > 10_000 {
                        break;
                    }
                    n += self.max_children.get(&p).copied().unwrap_or(0);
                    stack.extend(self.children(p));
                }
                n.min(workers)
            }
            None => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::event::End;
    use crate::sample::{DiskRate, GpuStatic, HostInfo};

    fn header(cpus: u32, pid: Option<u32>) -> Header {
        Header {
            schema_version: 1,
            gpufeed_version: None,
            start_time: String::new(),
            start_unix_us: 0,
            interval_s: 0.1,
            host: HostInfo {
                cpu_count: cpus,
                ..Default::default()
            },
            driver: None,
            gpus: vec![GpuStatic {
                index: 0,
                name: Some("Fake".into()),
                memory_total_bytes: Some(80 << 30),
                pcie_max_gen: Some(4),
                pcie_max_width: Some(16),
                ..Default::default()
            }],
            gpu_error: None,
            command: None,
            pid,
            py_rate_hz: None,
        }
    }

    #[test]
    fn a_recording_knows_there_is_no_gpu_only_when_the_driver_said_so() {
        let mut h = header(4, None);
        assert_eq!(NoGpu::of(&h), None, "GPUs recorded");
        h.gpus.clear();
        assert_eq!(NoGpu::of(&h), None, "nothing said: not known");
        // The recorder writes the NVML open error as it displays.
        let e = crate::sample::nvml::NvmlOpenError::NoDriver {
            detail: "libnvidia-ml.so.1 could not be loaded".into(),
        };
        h.gpu_error = Some(e.to_string());
        assert_eq!(NoGpu::of(&h), Some(NoGpu::NoDriver));
        h.gpu_error = Some("GPU recording disabled".into());
        assert_eq!(NoGpu::of(&h), None, "disabled: the machine may have one");
        h.gpu_error = Some("NVML initialisation failed: Unknown".into());
        assert_eq!(NoGpu::of(&h), None);
        h.gpu_error = None;
        h.driver = Some(Default::default());
        assert_eq!(NoGpu::of(&h), Some(NoGpu::NoDevice));
    }

    fn gpu(t: f64, util: f64) -> GpuSample {
        GpuSample {
            index: 0,
            t_s: t,
            util_samples: Some(vec![[t, util]]),
            ..Default::default()
        }
    }

    fn square(t: f64) -> f64 {
        if (t / 2.0).fract() < 0.3 {
            85.0
        } else {
            10.0
        }
    }

    #[test]
    fn busy_fraction_distribution_and_periodicity() {
        let mut b = EvidenceBuilder::new();
        for i in 0..3600 {
            let t = i as f64 / 6.0;
            b.push(&Line::Gpu(gpu(t, square(t))));
        }
        let e = b.finish(&header(8, None));
        let g = &e.gpus[0];
        assert_eq!(g.util_samples, 3600);
        // 12 samples per period, 4 of them high (t/2 fract < 0.3): a third of the time busy.
        assert!((g.busy_fraction.unwrap() - 0.35).abs() < 1e-9, "{g:?}");
        assert!(g.bimodal);
        assert!((g.low_util_fraction.unwrap() - 2.0 / 3.0).abs() < 1e-9);
        let p = g.periodicity.unwrap();
        assert!((p.period_s - 2.0).abs() < 0.15 && p.is_strong(), "{p:?}");
        assert!(g.util_p90_pct.unwrap() >= 80.0 && g.util_p10_pct.unwrap() <= 15.0);
        assert!((e.duration_s - 3599.0 / 6.0).abs() < 1e-6);
        assert!(!g.timeline_pct.is_empty() && g.timeline_pct.len() <= 128);
        assert_eq!(g.name.as_deref(), Some("Fake"));
    }

    #[test]
    fn impossible_values_are_dropped_and_said() {
        let mut b = EvidenceBuilder::new();
        for i in 0..10 {
            b.push(&Line::Gpu(GpuSample {
                util_samples: None,
                util_pct: Some(if i % 2 == 0 { -14.0 } else { 60.0 }),
                mem_used_bytes: Some(if i == 3 { u64::MAX } else { 1 << 30 }),
                power_w: Some(if i == 4 { -5.0 } else { 300.0 }),
                ..gpu(10.0 - i as f64, 0.0)
            }));
        }
        b.push(&Line::Gpu(gpu(f64::NAN, 50.0)));
        b.push(&Line::Gpu(gpu(20.0, 150.0)));
        b.push(&Line::End(End {
            t_s: 20.0,
            steps_dropped: Some(2),
            ..Default::default()
        }));
        let e = b.finish(&header(8, None));
        let g = &e.gpus[0];
        assert_eq!(
            g.util_mean_pct,
            Some(60.0),
            "only the possible values count"
        );
        assert_eq!(g.mem_used_max_bytes, Some(1 << 30));
        let w = e.warnings.join(" | ");
        assert!(w.contains("6 utilization values outside 0-100 %"), "{w}");
        assert!(w.contains("1 memory values above 1 PiB"), "{w}");
        assert!(w.contains("1 power values"), "{w}");
        assert!(w.contains("1 samples without a usable time"), "{w}");
        assert!(w.contains("time goes backwards 9 times"), "{w}");
        assert!(w.contains("2 step markers with a time outside"), "{w}");
        let mut b = EvidenceBuilder::new();
        b.push(&Line::Gpu(gpu(0.0, 50.0)));
        b.push(&Line::Gpu(gpu(400.0 * 86400.0, 50.0)));
        let e = b.finish(&header(8, None));
        assert!(
            e.warnings.iter().any(|w| w.contains("spans 400 days")),
            "{:?}",
            e.warnings
        );
        let mut b = EvidenceBuilder::new();
        b.push(&Line::Gpu(gpu(0.0, 50.0)));
        b.push(&Line::Gpu(gpu(1.0, 50.0)));
        assert!(b.finish(&header(8, None)).warnings.is_empty());
    }

    #[test]
    fn util_pct_is_the_fallback_and_empty_driver_batches_add_nothing() {
        let mut b = EvidenceBuilder::new();
        b.push(&Line::Gpu(GpuSample {
            util_samples: None,
            util_pct: Some(40.0),
            ..gpu(0.0, 0.0)
        }));
        b.push(&Line::Gpu(GpuSample {
            util_samples: Some(vec![]),
            util_pct: Some(99.0),
            ..gpu(0.1, 0.0)
        }));
        let e = b.finish(&header(8, None));
        assert_eq!(e.gpus[0].util_samples, 1);
        assert_eq!(e.gpus[0].util_mean_pct, Some(40.0));
    }

    #[test]
    fn memory_used_against_total() {
        let mut b = EvidenceBuilder::new();
        for (i, m) in [10u64, 70, 40].iter().enumerate() {
            b.push(&Line::Gpu(GpuSample {
                mem_used_bytes: Some(m << 30),
                ..gpu(i as f64, 50.0)
            }));
        }
        let e = b.finish(&header(8, None));
        let g = &e.gpus[0];
        assert_eq!(g.mem_used_max_bytes, Some(70 << 30));
        assert_eq!(g.mem_total_bytes, Some(80 << 30));
        assert!((g.mem_used_max_fraction.unwrap() - 0.875).abs() < 1e-9);
        assert!((g.mem_used_mean_bytes.unwrap() - (40u64 << 30) as f64).abs() < 1.0);
    }

    #[test]
    fn pcie_rate_from_counters_against_capacity_and_degraded_link() {
        let mut b = EvidenceBuilder::new();
        let cap = pcie_link_bytes_per_s(3, 8).unwrap(); // a Gen4 x16 card stuck at Gen3 x8
        let mut rx = u64::MAX - 1000; // counters wrap: the first delta is skipped
        for i in 0..100 {
            let t = i as f64 * 0.1;
            b.push(&Line::Gpu(GpuSample {
                pcie_rx_bytes: Some(rx),
                // Like the recorder: the link state only on slow ticks.
                pcie_gen: (i % 10 == 0).then_some(3),
                pcie_width: (i % 10 == 0).then_some(8),
                ..gpu(t, 90.0)
            }));
            rx = rx.wrapping_add((cap * 0.8 * 0.1) as u64);
        }
        let e = b.finish(&header(8, None));
        let p = &e.gpus[0].pcie;
        assert_eq!(p.rx_samples, 98, "the wrapped delta is skipped");
        assert!(
            (p.rx_capacity_mean_fraction.unwrap() - 0.8).abs() < 0.01,
            "{p:?}"
        );
        assert!((p.rx_near_capacity_fraction.unwrap() - 1.0).abs() < 1e-9);
        assert_eq!((p.gen_current, p.width_current), (Some(3), Some(8)));
        assert_eq!((p.gen_max, p.width_max), (Some(4), Some(16)));
        assert_eq!(p.degraded_loaded_fraction, Some(1.0));
        assert_eq!(p.capacity_current_bytes_per_s, Some(cap));
    }

    #[test]
    fn idle_links_are_not_judged() {
        let mut b = EvidenceBuilder::new();
        for i in 0..50 {
            b.push(&Line::Gpu(GpuSample {
                pcie_gen: Some(1),
                pcie_width: Some(16),
                ..gpu(i as f64, 0.0)
            }));
        }
        let e = b.finish(&header(8, None));
        assert_eq!(e.gpus[0].pcie.loaded_link_samples, 0);
        assert_eq!(e.gpus[0].pcie.degraded_loaded_fraction, None);
    }

    #[test]
    fn throttle_time_by_reason_never_counts_gpu_idle() {
        let mut b = EvidenceBuilder::new();
        for i in 0..=100 {
            let mask = match i % 4 {
                0 => throttle::GPU_IDLE,
                1 => throttle::HW_THERMAL | throttle::SW_THERMAL,
                _ => 0,
            };
            b.push(&Line::Gpu(GpuSample {
                throttle_reasons: Some(mask),
                ..gpu(i as f64, 50.0)
            }));
        }
        let e = b.finish(&header(8, None));
        let t = &e.gpus[0].throttle;
        assert!((t.observed_s - 100.0).abs() < 1e-9);
        assert!((t.slowing_fraction.unwrap() - 0.25).abs() < 0.01, "{t:?}");
        assert!(!t.by_reason.contains_key("gpu_idle"));
        assert!((t.by_reason["hw_thermal"] - 0.25).abs() < 0.01);
    }

    fn host(t: f64, cores: &[f64]) -> HostSample {
        HostSample {
            t_s: t,
            cpu_pct: cores.to_vec(),
            psi_io_some_pct: Some(30.0),
            psi_cpu_some_pct: Some(2.0),
            iowait_pct: Some(5.0),
            disks: vec![
                DiskRate {
                    device: "nvme0n1".into(),
                    read_bytes_per_s: 100e6,
                    write_bytes_per_s: 0.0,
                },
                DiskRate {
                    device: "sda".into(),
                    read_bytes_per_s: 50e6,
                    write_bytes_per_s: 1e6,
                },
            ],
            ..Default::default()
        }
    }

    #[test]
    fn host_cores_pressure_and_disk() {
        let mut b = EvidenceBuilder::new();
        b.push(&Line::Host(host(0.0, &[100.0, 95.0, 5.0, 0.0])));
        b.push(&Line::Host(host(1.0, &[100.0, 50.0, 10.0, 92.0])));
        let e = b.finish(&header(4, None));
        let h = &e.host;
        assert_eq!(h.samples, 2);
        assert_eq!(h.cpu_count, Some(4));
        assert_eq!(h.idle_cores_mean, Some(1.5));
        assert_eq!(h.busy_cores_mean, Some(2.0));
        assert!((h.cpu_mean_pct.unwrap() - 56.5).abs() < 1e-9);
        assert_eq!(h.psi_io_some_mean_pct, Some(30.0));
        assert_eq!(h.disk_read_mean_bytes_per_s, Some(150e6));
        assert_eq!(
            e.cores_per_gpu(),
            Some(4.0),
            "no GPU measured: all CPUs for one"
        );
    }

    fn start(pid: u32, ppid: u32, cmd: &str) -> Line {
        Line::ProcStart(ProcStart {
            t_s: 0.0,
            pid,
            ppid,
            cmd: Some(cmd.into()),
            comm: None,
        })
    }

    fn ps(pid: u32, cpu: f64, state: char, read: u64) -> ProcSample {
        ProcSample {
            pid,
            cpu_pct: Some(cpu),
            rss_bytes: Some(1 << 30),
            read_bytes: Some(read),
            state: Some(state),
            ..Default::default()
        }
    }

    #[test]
    fn job_split_into_main_and_workers_through_a_launcher() {
        let mut b = EvidenceBuilder::new();
        // bash (10) → python (11) → two DataLoader workers (12, 13) sharing its cmdline.
        b.push(&start(10, 1, "bash -c python train.py"));
        b.push(&start(11, 10, "python train.py"));
        b.push(&start(12, 11, "python train.py"));
        b.push(&start(13, 11, "python train.py"));
        for i in 0..10 {
            let t = i as f64;
            let d = if i % 2 == 0 { 'D' } else { 'S' };
            b.push(&Line::Procs(ProcsLine {
                t_s: t,
                procs: vec![
                    ps(10, 0.0, 'S', 0),
                    ps(11, 40.0, 'R', 0),
                    ps(12, 99.0, 'R', i * 1_000_000),
                    ps(13, 60.0, d, i * 1_000_000),
                ],
            }));
        }
        b.push(&Line::End(End {
            t_s: 9.0,
            exit_code: Some(0),
            ..Default::default()
        }));
        let e = b.finish(&header(8, Some(10)));
        let j = &e.job;
        assert_eq!(j.pid, Some(10));
        assert_eq!(
            j.main_pid,
            Some(11),
            "the quiet launcher hands over to python"
        );
        assert_eq!(j.main_cpu_mean_pct, Some(40.0));
        assert_eq!(j.workers_max, 2);
        assert_eq!(j.workers_seen, 2);
        assert_eq!(j.saturated_workers, 1);
        assert!((j.worker_cpu_mean_pct.unwrap() - 79.5).abs() < 1e-9);
        assert!((j.workers_cpu_total_mean_pct.unwrap() - 159.0).abs() < 1e-9);
        assert_eq!(j.cpu_mean_pct, Some(199.0));
        assert!((j.d_state_fraction.unwrap() - 5.0 / 40.0).abs() < 1e-9);
        assert!((j.d_state_time_fraction.unwrap() - 0.5).abs() < 1e-9);
        assert!((j.read_mean_bytes_per_s.unwrap() - 2e6).abs() < 1.0);
        assert_eq!(j.exit_code, Some(0));
        let roles: Vec<Role> = j.processes.iter().map(|p| p.role).collect();
        assert_eq!(roles, [Role::Other, Role::Main, Role::Worker, Role::Worker]);
    }

    /// torchrun with three ranks, one of them C++, and rank 1 waiting for its data.
    fn torchrun_job() -> EvidenceBuilder {
        use crate::sample::event::{PyFrameDef, PySamples, PyStackDef, PyStatusLine};
        use crate::sample::pystacks::PyStatus;
        use crate::sample::ranks::RankEnv;
        let mut b = EvidenceBuilder::new();
        // torchrun (10) starts ranks 0, 1 (Python, 11 and 12) and 2 (a C++ program, 13); rank 1
        // has a DataLoader worker (14), forked with its environment.
        let tr = "/v/bin/python3 /v/bin/torchrun --nproc_per_node 3 train.py";
        b.push(&start(10, 1, tr));
        for p in [11, 12] {
            b.push(&start(p, 10, "/v/bin/python3 -u train.py"));
        }
        b.push(&start(13, 10, "./train_cpp"));
        b.push(&start(14, 12, "/v/bin/python3 -u train.py"));
        let status = |pid: u32, status: PyStatus, rank: Option<u32>| {
            Line::PyStatus(PyStatusLine {
                t_s: 0.5,
                pid,
                status,
                detail: None,
                rank: rank.map(|r| RankEnv {
                    rank: Some(r),
                    local_rank: Some(r),
                    world_size: Some(3),
                }),
            })
        };
        b.push(&status(10, PyStatus::Ok, None));
        b.push(&status(11, PyStatus::Ok, Some(0)));
        b.push(&status(12, PyStatus::Ok, Some(1)));
        b.push(&status(13, PyStatus::NotPython, Some(2)));
        let dl = "/v/site-packages/torch/utils/data/dataloader.py";
        for (id, name, file) in [
            (0, "<module>", "/u/train.py"),
            (1, "_next_data", dl),
            (2, "Tensor.backward", "/v/site-packages/torch/_tensor.py"),
            (
                3,
                "sleep",
                "/v/site-packages/torch/distributed/elastic/agent.py",
            ),
            (4, "Jpegs.__getitem__", "/u/train.py"),
        ] {
            b.push(&Line::PyFrame(PyFrameDef {
                id,
                name: name.into(),
                file: file.into(),
                line: 1,
                src: None,
            }));
        }
        for (id, frames) in [
            (0, vec![0, 1]),
            (1, vec![0, 2]),
            (2, vec![0, 3]),
            (3, vec![0, 1, 4]),
        ] {
            b.push(&Line::PyStack(PyStackDef { id, frames }));
        }
        for i in 1..=10 {
            let t = i as f64;
            b.push(&Line::Procs(ProcsLine {
                t_s: t,
                procs: vec![
                    ps(10, 1.0, 'S', 0),
                    ps(11, 90.0, 'R', 0),
                    ps(12, 90.0, 'R', 0),
                    ps(13, 90.0, 'R', 0),
                    ps(14, 90.0, 'R', 0),
                ],
            }));
            let py = |pid: u32, stacks: Vec<[u64; 3]>| {
                Line::PySamples(PySamples {
                    t_s: t,
                    dt_s: 1.0,
                    pid,
                    ticks: 100,
                    threads: vec![crate::sample::event::PyThreadCounts {
                        tid: pid as u64,
                        name: None,
                        stacks,
                        phases: Default::default(),
                        cpu_ns: None,
                        runq_ns: None,
                        gil_held: 0,
                        gil_free: Vec::new(),
                    }],
                })
            };
            // The launcher sleeps; rank 0 mostly waits in backward (the collective), rank 1
            // waits for its batches; its worker loads them.
            b.push(&py(10, vec![[2, 100, 100]]));
            b.push(&py(11, vec![[0, 15, 15], [1, 85, 0]]));
            b.push(&py(12, vec![[3, 70, 0], [1, 30, 0]]));
            b.push(&py(14, vec![[3, 100, 0]]));
        }
        b
    }

    #[test]
    fn every_rank_under_a_launcher_is_a_training_loop_and_the_launcher_never_is() {
        let e = torchrun_job().finish(&header(64, Some(10)));
        let j = &e.job;
        assert_eq!(j.rank_pids, [11, 12, 13]);
        assert_eq!(j.main_pid, Some(11), "rank 0, never the launcher");
        let roles: Vec<Role> = j.processes.iter().map(|p| p.role).collect();
        assert_eq!(
            roles,
            [
                Role::Other,
                Role::Main,
                Role::Main,
                Role::Main,
                Role::Worker
            ]
        );
        assert_eq!(j.workers_max, 1);
        assert_eq!(
            e.cores_per_gpu(),
            Some(64.0 / 3.0),
            "3 ranks share the node"
        );
        let p = e.python.unwrap();
        let ranks: Vec<(Option<u32>, u32, f64)> = p
            .ranks
            .iter()
            .map(|r| (r.rank, r.pid, r.data_wait_pct))
            .collect();
        assert_eq!(ranks, [(Some(0), 11, 15.0), (Some(1), 12, 70.0)]);
        assert_eq!(p.ranks_unread, [13], "the C++ rank is named, not split");
        assert_eq!(p.ranks[1].data_hotspots[0].function, "Jpegs.__getitem__");
        assert!(p.ranks[0].data_hotspots.is_empty(), "rank 0 loads nothing");
        // Two ranks read: the median is the lower one.
        assert_eq!(p.main.as_ref().map(|m| m.pid), Some(11));
        let slow = p.slow_rank.unwrap();
        assert_eq!(
            (slow.rank, slow.pid, slow.others_data_wait_pct),
            (Some(1), 12, 15.0)
        );
        assert_eq!(p.loader_processes, 1, "the worker, not the other rank");
    }

    #[test]
    fn a_restarted_rank_is_one_rank_and_its_first_process_is_reported() {
        use crate::sample::event::{PySamples, PyStatusLine, PyThreadCounts};
        let mut b = torchrun_job();
        // torchrun restarted rank 1 early on: pid 15 lived 2 s, before pid 12 took over.
        b.push(&start(15, 10, "/v/bin/python3 -u train.py"));
        b.push(&Line::PyStatus(PyStatusLine {
            t_s: 0.5,
            pid: 15,
            status: crate::sample::pystacks::PyStatus::Ok,
            detail: None,
            rank: Some(crate::sample::ranks::RankEnv {
                rank: Some(1),
                local_rank: Some(1),
                world_size: Some(3),
            }),
        }));
        for t in [1.0, 2.0] {
            b.push(&Line::PySamples(PySamples {
                t_s: t,
                dt_s: 1.0,
                pid: 15,
                ticks: 100,
                threads: vec![PyThreadCounts {
                    tid: 15,
                    name: None,
                    stacks: vec![[1, 100, 0]],
                    phases: Default::default(),
                    cpu_ns: None,
                    runq_ns: None,
                    gil_held: 0,
                    gil_free: Vec::new(),
                }],
            }));
        }
        let e = b.finish(&header(64, Some(10)));
        let p = e.python.unwrap();
        let ranks: Vec<(Option<u32>, u32)> = p.ranks.iter().map(|r| (r.rank, r.pid)).collect();
        assert_eq!(ranks, [(Some(0), 11), (Some(1), 12)]);
        assert_eq!(p.ranks_unread, [13, 15]);
        assert_eq!(p.slow_rank.map(|s| s.pid), Some(12));
    }

    #[test]
    fn a_quiet_main_with_one_forked_worker_stays_main() {
        let mut b = EvidenceBuilder::new();
        b.push(&start(1, 0, "python train.py"));
        b.push(&start(2, 1, "python train.py"));
        b.push(&Line::Procs(ProcsLine {
            t_s: 0.0,
            procs: vec![ps(1, 2.0, 'S', 0), ps(2, 100.0, 'R', 0)],
        }));
        let e = b.finish(&header(8, Some(1)));
        assert_eq!(e.job.main_pid, Some(1));
        assert_eq!(e.job.workers_max, 1);
        assert_eq!(e.job.saturated_workers, 1);
    }

    #[test]
    fn an_idle_helper_with_its_own_command_is_not_a_worker() {
        let mut b = EvidenceBuilder::new();
        b.push(&start(1, 0, "python train.py"));
        b.push(&start(2, 1, "python train.py"));
        b.push(&start(3, 1, "sleep 6"));
        b.push(&Line::Procs(ProcsLine {
            t_s: 0.0,
            procs: vec![
                ps(1, 20.0, 'S', 0),
                ps(2, 100.0, 'R', 0),
                ps(3, 0.0, 'S', 0),
            ],
        }));
        let e = b.finish(&header(8, Some(1)));
        assert_eq!(e.job.workers_seen, 1);
        assert_eq!(e.job.workers_max, 1);
        assert_eq!(e.job.worker_cpu_mean_pct, Some(100.0));
        assert_eq!(e.job.processes[2].role, Role::Other);
    }

    #[test]
    fn workers_that_come_and_go_count_by_concurrency() {
        let mut b = EvidenceBuilder::new();
        b.push(&start(1, 0, "python train.py"));
        // Each epoch starts two fresh workers (persistent_workers=False).
        for epoch in 0..3u32 {
            let (a, c) = (100 + 2 * epoch, 101 + 2 * epoch);
            b.push(&start(a, 1, "python train.py"));
            b.push(&start(c, 1, "python train.py"));
            b.push(&Line::Procs(ProcsLine {
                t_s: epoch as f64,
                procs: vec![
                    ps(1, 50.0, 'R', 0),
                    ps(a, 90.0, 'R', 0),
                    ps(c, 90.0, 'R', 0),
                ],
            }));
        }
        let e = b.finish(&header(8, Some(1)));
        assert_eq!(e.job.workers_max, 2);
        assert_eq!(e.job.workers_seen, 6);
    }

    #[test]
    fn imbalance_inputs_and_cores_per_gpu() {
        let mut b = EvidenceBuilder::new();
        for i in 0..100 {
            let t = i as f64;
            b.push(&Line::Gpu(gpu(t, 90.0)));
            b.push(&Line::Gpu(GpuSample {
                index: 1,
                ..gpu(t, 30.0)
            }));
        }
        let e = b.finish(&header(16, None));
        assert_eq!(e.gpus.len(), 2);
        assert_eq!(e.gpus[1].util_mean_pct, Some(30.0));
        assert_eq!(e.cores_per_gpu(), Some(8.0));
        assert!((e.busy_fraction().unwrap() - 0.6).abs() < 1e-9);
    }

    #[test]
    fn each_gpu_is_found_by_its_index_small_or_large_and_those_past_the_cap_are_counted() {
        let mut b = EvidenceBuilder::new();
        let indices = [31u32, 0, 32, 5000, u32::MAX, 7];
        for i in 0..50 {
            for (k, &index) in indices.iter().enumerate() {
                b.push_reading(&Reading {
                    index,
                    t_s: i as f64,
                    util_pct: Some(10.0 * k as f64),
                    ..Default::default()
                });
            }
        }
        for index in 100..100 + (MAX_GPUS - indices.len()) as u32 + 3 {
            b.push_reading(&Reading {
                index,
                t_s: 50.0,
                util_pct: Some(1.0),
                ..Default::default()
            });
        }
        // A GPU already followed is still followed at the cap.
        b.push_reading(&Reading {
            index: 5000,
            t_s: 51.0,
            util_pct: Some(30.0),
            ..Default::default()
        });
        assert_eq!(b.impossible.gpus_over_cap, 3);
        let e = b.finish(&header(8, None));
        assert_eq!(
            e.gpus.len(),
            MAX_GPUS,
            "the header names GPU 0, one of those sampled"
        );
        for (k, &index) in indices.iter().enumerate() {
            let g = e.gpus.iter().find(|g| g.index == index).unwrap();
            assert_eq!(g.util_mean_pct, Some(10.0 * k as f64), "GPU {index}");
        }
    }

    #[test]
    fn a_reading_counts_as_the_sample_made_of_it() {
        let readings: Vec<Reading> = (0..400)
            .map(|i| Reading {
                index: [0, 3, 40][i % 3],
                t_s: (i / 3) as f64 * 0.5 - if i % 17 == 0 { 3.0 } else { 0.0 },
                util_pct: (i % 5 != 0).then_some([50.0, 120.0, -1.0, 99.5][i % 4]),
                mem_util_pct: (i % 7 == 0).then_some(30.0),
                mem_used_bytes: Some(if i % 11 == 0 { u64::MAX } else { 1 << 30 }),
                power_w: (i % 2 == 0).then_some(if i % 13 == 0 { -5.0 } else { 250.0 }),
                pcie_rx_bytes: Some(i as u64 * 1000),
                pcie_gen: Some(4),
                pcie_width: Some(16),
                throttle_reasons: Some(i as u64 % 8),
                temperature_c: Some(60),
                sm_clock_mhz: Some(1400),
                ..Default::default()
            })
            .collect();
        let (mut a, mut b) = (EvidenceBuilder::new(), EvidenceBuilder::new());
        for r in &readings {
            a.push_reading(r);
            b.push_gpu(&GpuSample::from(r));
        }
        let h = header(8, None);
        assert_eq!(format!("{:?}", a.finish(&h)), format!("{:?}", b.finish(&h)));
    }

    #[test]
    fn memory_stays_fixed_as_the_recording_grows() {
        let mut b = EvidenceBuilder::new();
        for i in 0..200_000 {
            let t = i as f64 / 6.0;
            b.push(&Line::Gpu(gpu(t, square(t))));
        }
        let g = &b.gpus[0];
        assert!(g.timeline.points().1.len() <= 128);
        assert!(g.link_counts.is_empty());
        let e = b.finish(&header(8, None));
        assert!(e.gpus[0].periodicity.unwrap().windows < 200);
    }
}
