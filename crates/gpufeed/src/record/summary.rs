//! The summary of measured figures printed when a recording ends (`--format text|json`),
//! computed by streaming the recording file: memory grows with the number of GPUs and
//! processes, never with the recording's length.

use super::reader::{read_path, Sink};
use crate::record::format::{ReadError, ReadStats};
use crate::sample::event::{End, Header, Line, OverridesLine};
use crate::sample::{throttle, GpuSample, HostSample, ProcSample};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub schema_version: u32,
    /// The recording file.
    pub recording: String,
    pub start_time: String,
    pub duration_s: f64,
    /// The command that was run, when there was one.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// Why GPUs are missing, when they are.
    #[serde(default)]
    pub gpu_error: Option<String>,
    pub gpus: Vec<GpuSummary>,
    pub host: HostSummary,
    /// The job (run, or attached with --pid); `None` for a machine-only recording.
    #[serde(default)]
    pub job: Option<JobUsage>,
    /// The recording was cut (gpufeed was killed): figures cover what was written.
    #[serde(default)]
    pub truncated: bool,
    /// Values `--dataloader` / `--torch` put in place of the job's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overrides: Vec<crate::sample::event::Override>,
    /// Overrides that could not apply, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub override_notes: Vec<String>,
    /// What gpufeed's DataLoader step hook timed: the training loader, loaders left out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub loader_notes: Vec<String>,
    /// Step markers dropped for a time outside the job's run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps_dropped: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuSummary {
    pub index: u32,
    pub name: Option<String>,
    pub util_mean_pct: Option<f64>,
    pub util_min_pct: Option<f64>,
    pub util_max_pct: Option<f64>,
    /// Number of utilization samples recorded (every driver sample).
    pub util_samples: u64,
    /// Mean interval between utilization samples.
    pub util_sample_period_s: Option<f64>,
    pub mem_used_max_bytes: Option<u64>,
    pub mem_total_bytes: Option<u64>,
    pub power_mean_w: Option<f64>,
    pub temperature_max_c: Option<u32>,
    pub sm_clock_mean_mhz: Option<f64>,
    /// Host-to-device PCIe rate averaged over the recording.
    pub pcie_rx_mean_bytes_per_s: Option<f64>,
    /// Share of readings with a slowing clock-event reason (power cap, thermal, HW slowdown; not GpuIdle).
    pub throttled_pct: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostSummary {
    pub cpu_count: u32,
    pub cpu_mean_pct: Option<f64>,
    pub mem_total_bytes: Option<u64>,
    pub mem_available_min_bytes: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobUsage {
    pub pid: u32,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// Sum over the job's processes, averaged over time, in percent of one core.
    pub cpu_mean_pct: Option<f64>,
    pub cpu_max_pct: Option<f64>,
    /// Peak of the summed RSS of the job's processes.
    pub rss_max_bytes: Option<u64>,
    /// Most processes alive at once.
    pub processes_max: u32,
    pub processes: Vec<ProcessSummary>,
    /// Why the recording ended, from its `end` line; `None` for a recording without one.
    #[serde(default)]
    pub end_reason: Option<crate::sample::event::EndReason>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessSummary {
    pub pid: u32,
    pub ppid: u32,
    pub cmd: Option<String>,
    pub cpu_mean_pct: Option<f64>,
    pub rss_max_bytes: Option<u64>,
    /// Bytes read from storage while recorded.
    pub read_bytes: Option<u64>,
    pub first_seen_s: f64,
    pub last_seen_s: f64,
}

#[derive(Default)]
struct Mean {
    sum: f64,
    n: u64,
}
impl Mean {
    fn add(&mut self, x: f64) {
        self.sum += x;
        self.n += 1;
    }
    fn get(&self) -> Option<f64> {
        (self.n > 0).then(|| self.sum / self.n as f64)
    }
}

fn max_opt<T: PartialOrd + Copy>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(x), Some(y)) => Some(if y > x { y } else { x }),
        (x, None) => x,
        (None, y) => y,
    }
}

#[derive(Default)]
struct GpuAcc {
    util: Mean,
    util_min: Option<f64>,
    util_max: Option<f64>,
    util_first_t: Option<f64>,
    util_last_t: Option<f64>,
    mem_max: Option<u64>,
    power: Mean,
    temp_max: Option<u32>,
    clock: Mean,
    rx_first: Option<(f64, u64)>,
    rx_last: Option<(f64, u64)>,
    rx_rate: Mean,
    throttle_n: u64,
    throttled_n: u64,
}

#[derive(Default)]
struct ProcAcc {
    ppid: u32,
    cmd: Option<String>,
    cpu: Mean,
    rss_max: Option<u64>,
    read_first: Option<u64>,
    read_last: Option<u64>,
    first: f64,
    last: f64,
}

/// The summary as a consumer of the recording reader: figures kept per GPU and per process.
#[derive(Default)]
pub(crate) struct SummaryBuilder {
    gpus: BTreeMap<u32, GpuAcc>,
    procs: BTreeMap<u32, ProcAcc>,
    host_cpu: Mean,
    mem_avail_min: Option<u64>,
    job_cpu: Mean,
    job_cpu_max: Option<f64>,
    job_rss_max: Option<u64>,
    procs_max: u32,
    last_t: f64,
    end: Option<End>,
    overrides: Option<OverridesLine>,
    header: Option<Header>,
}

/// Reads `path` and summarises it.
pub fn summarize(path: &Path) -> Result<(Summary, ReadStats), ReadError> {
    let mut b = SummaryBuilder::default();
    let (_, stats) = read_path(path, &mut b)?;
    let summary = b.finish(path, stats.truncated);
    Ok((summary, stats))
}

impl Sink for SummaryBuilder {
    fn header(&mut self, h: &Header) {
        self.header = Some(h.clone());
    }

    fn gpu(&mut self, s: &GpuSample) {
        self.last_t = self.last_t.max(s.t_s);
        let g = self.gpus.entry(s.index).or_default();
        // Every driver sample when the driver gives them; else the per-reading fallback.
        let one;
        let util_vals: &[[f64; 2]] = match &s.util_samples {
            Some(v) => v,
            None => {
                one = s.util_pct.map(|u| [s.t_s, u]);
                one.as_slice()
            }
        };
        for &[t, u] in util_vals {
            g.util.add(u);
            g.util_min = Some(g.util_min.map_or(u, |m: f64| m.min(u)));
            g.util_max = Some(g.util_max.map_or(u, |m: f64| m.max(u)));
            g.util_first_t.get_or_insert(t);
            g.util_last_t = Some(t);
        }
        g.mem_max = max_opt(g.mem_max, s.mem_used_bytes);
        if let Some(p) = s.power_w {
            g.power.add(p);
        }
        g.temp_max = max_opt(g.temp_max, s.temperature_c);
        if let Some(c) = s.sm_clock_mhz {
            g.clock.add(c as f64);
        }
        if let Some(rx) = s.pcie_rx_bytes {
            g.rx_first.get_or_insert((s.t_s, rx));
            g.rx_last = Some((s.t_s, rx));
        }
        if let Some(r) = s.pcie_rx_bytes_per_s {
            g.rx_rate.add(r);
        }
        if let Some(bits) = s.throttle_reasons {
            g.throttle_n += 1;
            if bits & throttle::SLOWING != 0 {
                g.throttled_n += 1;
            }
        }
    }

    fn host(&mut self, h: &HostSample) {
        self.last_t = self.last_t.max(h.t_s);
        if let Some(c) = h.cpu_total_pct {
            self.host_cpu.add(c);
        }
        self.mem_avail_min = match (self.mem_avail_min, h.mem_available_bytes) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    fn procs(&mut self, t_s: f64, ps: &[ProcSample]) {
        self.last_t = self.last_t.max(t_s);
        let mut cpu_sum = None::<f64>;
        let mut rss_sum = None::<u64>;
        self.procs_max = self.procs_max.max(ps.len() as u32);
        for p in ps {
            let acc = self.procs.entry(p.pid).or_default();
            acc.last = t_s;
            if let Some(c) = p.cpu_pct {
                acc.cpu.add(c);
                cpu_sum = Some(cpu_sum.unwrap_or(0.0) + c);
            }
            if let Some(r) = p.rss_bytes {
                acc.rss_max = max_opt(acc.rss_max, Some(r));
                rss_sum = Some(rss_sum.unwrap_or(0) + r);
            }
            if let Some(rb) = p.read_bytes {
                acc.read_first.get_or_insert(rb);
                acc.read_last = Some(rb);
            }
        }
        if let Some(c) = cpu_sum {
            self.job_cpu.add(c);
            self.job_cpu_max = max_opt(self.job_cpu_max, Some(c));
        }
        self.job_rss_max = max_opt(self.job_rss_max, rss_sum);
    }

    fn line(&mut self, line: &Line) {
        match line {
            Line::ProcStart(p) => {
                // A second `proc_start` for a pid means it called exec: keep when it was first
                // seen, take the new command.
                let seen = self.procs.contains_key(&p.pid);
                let acc = self.procs.entry(p.pid).or_default();
                acc.ppid = p.ppid;
                acc.cmd = p.cmd.clone().or_else(|| p.comm.clone());
                if !seen {
                    acc.first = p.t_s;
                }
                acc.last = acc.last.max(p.t_s);
            }
            Line::ProcExit { t_s, pid } => {
                if let Some(acc) = self.procs.get_mut(pid) {
                    acc.last = *t_s;
                }
            }
            Line::End(e) => {
                self.last_t = self.last_t.max(e.t_s);
                self.end = Some(e.clone());
            }
            Line::Overrides(o) => self.overrides = Some(o.clone()),
            Line::PySamples(p) => self.last_t = self.last_t.max(p.t_s),
            Line::Steps(s) => self.last_t = self.last_t.max(s.t_s),
            _ => {}
        }
    }
}

impl SummaryBuilder {
    /// The summary of what was read from `path` (named in it); `truncated`: the recording was
    /// cut ([`ReadStats::truncated`]).
    pub(crate) fn finish(self, path: &Path, truncated: bool) -> Summary {
        let SummaryBuilder {
            mut gpus,
            procs,
            host_cpu,
            mem_avail_min,
            job_cpu,
            job_cpu_max,
            job_rss_max,
            procs_max,
            last_t,
            end,
            overrides,
            header,
        } = self;
        let header = header.unwrap_or_else(|| Header {
            schema_version: 0,
            gpufeed_version: None,
            start_time: String::new(),
            start_unix_us: 0,
            interval_s: 0.0,
            host: Default::default(),
            driver: None,
            gpus: Vec::new(),
            gpu_error: None,
            command: None,
            pid: None,
            py_rate_hz: None,
        });
        let overrides = overrides.unwrap_or_default();

        let statics: BTreeMap<u32, _> = header.gpus.iter().map(|g| (g.index, g)).collect();
        let mut indices: Vec<u32> = statics
            .keys()
            .copied()
            .chain(gpus.keys().copied())
            .collect();
        indices.sort_unstable();
        indices.dedup();
        let gpu_summaries = indices
            .into_iter()
            .map(|i| {
                gpu_summary(
                    i,
                    statics.get(&i).copied(),
                    gpus.remove(&i).unwrap_or_default(),
                )
            })
            .collect();

        let job = header.pid.map(|pid| JobUsage {
            pid,
            exit_code: end.as_ref().and_then(|e| e.exit_code),
            signal: end.as_ref().and_then(|e| e.signal),
            end_reason: end.as_ref().and_then(|e| e.reason),
            cpu_mean_pct: job_cpu.get(),
            cpu_max_pct: job_cpu_max,
            rss_max_bytes: job_rss_max,
            processes_max: procs_max,
            processes: procs
                .into_iter()
                .map(|(pid, a)| ProcessSummary {
                    pid,
                    ppid: a.ppid,
                    cmd: a.cmd,
                    cpu_mean_pct: a.cpu.get(),
                    rss_max_bytes: a.rss_max,
                    read_bytes: match (a.read_first, a.read_last) {
                        (Some(f), Some(l)) => Some(l.saturating_sub(f)),
                        _ => None,
                    },
                    first_seen_s: a.first,
                    last_seen_s: a.last,
                })
                .collect(),
        });

        Summary {
            steps_dropped: end.as_ref().and_then(|e| e.steps_dropped),
            schema_version: header.schema_version,
            recording: path.display().to_string(),
            start_time: header.start_time.clone(),
            duration_s: end.as_ref().map(|e| e.t_s).unwrap_or(last_t),
            command: header.command.clone(),
            gpu_error: header.gpu_error.clone(),
            gpus: gpu_summaries,
            host: HostSummary {
                cpu_count: header.host.cpu_count,
                cpu_mean_pct: host_cpu.get(),
                mem_total_bytes: header.host.mem_total_bytes,
                mem_available_min_bytes: mem_avail_min,
            },
            job,
            truncated,
            overrides: overrides.overrides,
            override_notes: overrides.notes,
            loader_notes: overrides.loader_notes,
        }
    }
}

/// One GPU's summary from its accumulator and the header's static facts.
fn gpu_summary(i: u32, st: Option<&crate::sample::GpuStatic>, acc: GpuAcc) -> GpuSummary {
    let period = match (acc.util_first_t, acc.util_last_t) {
        (Some(a), Some(b)) if acc.util.n > 1 => Some((b - a) / (acc.util.n - 1) as f64),
        _ => None,
    };
    let rx = match (acc.rx_first, acc.rx_last) {
        (Some((t0, b0)), Some((t1, b1))) if t1 > t0 && b1 >= b0 => {
            Some((b1 - b0) as f64 / (t1 - t0))
        }
        _ => acc.rx_rate.get(),
    };
    GpuSummary {
        index: i,
        name: st.and_then(|s| s.name.clone()),
        util_mean_pct: acc.util.get(),
        util_min_pct: acc.util_min,
        util_max_pct: acc.util_max,
        util_samples: acc.util.n,
        util_sample_period_s: period,
        mem_used_max_bytes: acc.mem_max,
        mem_total_bytes: st.and_then(|s| s.memory_total_bytes),
        power_mean_w: acc.power.get(),
        temperature_max_c: acc.temp_max,
        sm_clock_mean_mhz: acc.clock.get(),
        pcie_rx_mean_bytes_per_s: rx,
        throttled_pct: (acc.throttle_n > 0)
            .then(|| acc.throttled_n as f64 * 100.0 / acc.throttle_n as f64),
    }
}
