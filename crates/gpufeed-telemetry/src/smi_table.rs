//! What people paste: the plain `nvidia-smi` table (and `nvitop -1`, which draws the same boxes
//! with other lines), and `gpustat`'s one line per GPU. Once, or many times over (looped by
//! `watch -n`, or by a shell loop with `date` banners between), with or without the process
//! table. Each snapshot is one reading of every GPU, at the time of the date line before it
//! (nvidia-smi prints one, `watch` and `date` banners too) or, without one, the n-th reading.
//!
//! The table's two rows of a GPU:
//!
//! ```text
//! |   0  NVIDIA A100-SXM4-80GB          On  | 00000000:01:00.0 Off |                    0 |
//! | N/A   33C    P0              62W / 400W |  40536MiB / 81920MiB |     30%      Default |
//! ```
//!
//! and a process row, in the old layout (`GPU PID Type Name Usage`) or the new one (`GPU GI CI
//! PID Type Name Usage`), are read by what their cells hold, not by column offsets (drivers pad
//! them differently, nvitop draws `│`).

use super::dcgmi::ProfilingMeans;
use super::table::{Table, When};
use super::vocab::Metric;
use super::{LogError, LogInfo};
use crate::reading::{LogHeader, Reading};
use std::collections::BTreeMap;
use std::io::Read;

/// Does this start of a file hold an `nvidia-smi` (or nvitop) table with at least one GPU row?
pub fn holds_table(head: &str) -> bool {
    let mut cells_seen = false;
    for l in head.lines() {
        let l = normalise(l);
        if first_row(&l).is_some() {
            return true;
        }
        cells_seen |= l.contains("NVIDIA-SMI ") || l.contains("NVITOP ");
    }
    cells_seen && head.contains("MiB /")
}

/// Does this start of a file hold `gpustat` lines (`[0] NVIDIA A100 | 45°C,  30 % | 40536 /
/// 81920 MB | …`)?
pub fn holds_gpustat(head: &str) -> bool {
    head.lines().any(|l| gpustat_row(l).is_some())
}

/// nvitop's box characters as nvidia-smi's.
fn normalise(l: &str) -> String {
    l.trim()
        .chars()
        .map(|c| match c {
            '│' | '┃' => '|',
            c => c,
        })
        .collect()
}

/// The cells between `|`s of a table line (none for other lines).
fn cells(l: &str) -> Vec<&str> {
    let Some(inner) = l.strip_prefix('|') else {
        return Vec::new();
    };
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    inner.split('|').map(str::trim).collect()
}

/// A GPU's first row: its index and name (the bus id in the second cell tells it from a MIG
/// or process row).
fn first_row(l: &str) -> Option<(String, String)> {
    first_row_with_bus(l).map(|(idx, name, _)| (idx, name))
}

/// [`first_row`] with the GPU's bus id.
fn first_row_with_bus(l: &str) -> Option<(String, String, String)> {
    let c = cells(l);
    let bus = c.get(1)?.split_whitespace().next()?;
    if c.len() < 3 || !is_bus_id(bus) {
        return None;
    }
    let mut t = c[0].split_whitespace();
    let idx = t.next().filter(|i| i.parse::<u32>().is_ok())?;
    let mut name: Vec<&str> = t.collect();
    // Persistence mode (Linux) or driver model (Windows) ends the cell.
    if name
        .last()
        .is_some_and(|x| ["On", "Off", "WDDM", "TCC", "N/A"].contains(x))
    {
        name.pop();
    }
    Some((idx.to_string(), name.join(" "), bus.to_string()))
}

fn is_bus_id(t: &str) -> bool {
    let p: Vec<&str> = t.split(':').collect();
    p.len() == 3
        && p[0].len() >= 4
        && p[0].chars().all(|c| c.is_ascii_hexdigit())
        && p[2].contains('.')
}

/// A memory figure in bytes: `40536MiB`, `40536 MiB`, `11.32GiB`, `40536 MB`.
fn mem_bytes(v: &str, default_unit: Option<&str>) -> Option<f64> {
    let v = v.trim();
    let split = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(v.len());
    let x: f64 = v[..split].parse().ok()?;
    let unit = v[split..].trim();
    let unit = if unit.is_empty() { default_unit? } else { unit };
    let scale = match unit {
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        // gpustat's "MB" are nvidia-smi's MiB.
        "MB" | "M" => 1024.0 * 1024.0,
        "GB" | "G" => 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    Some(x * scale)
}

/// `30%` → 30.
fn pct(t: &str) -> Option<f64> {
    t.trim().strip_suffix('%')?.trim().parse().ok()
}

fn second_row(l: &str) -> Option<Readings> {
    let c = cells(l);
    if c.len() < 3 {
        return None;
    }
    let (used, total) = c[1].split_once('/')?;
    let mut r = Readings {
        used: mem_bytes(used, None),
        total: mem_bytes(total, None),
        ..Readings::default()
    };
    if r.used.is_none() && r.total.is_none() && !c[1].contains("N/A") {
        return None;
    }
    // `30%  Default`; nvitop's wide view writes `UTL: ▏ 30%`: the last percent before the
    // compute mode.
    r.util = c[2].split_whitespace().find_map(pct);
    let t: Vec<&str> = c[0].split_whitespace().collect();
    r.temp_c = t
        .iter()
        .find_map(|x| x.strip_suffix('C')?.parse::<f64>().ok());
    r.power_w = t
        .iter()
        .position(|x| *x == "/")
        .and_then(|i| i.checked_sub(1))
        .or_else(|| t.iter().position(|x| x.ends_with('W') && x.contains('/')))
        .and_then(|i| t[i].split('/').next()?.strip_suffix('W')?.parse().ok());
    Some(r)
}

/// A process row: GPU, PID, name, memory in bytes (`None` where the driver does not say, as on
/// Windows).
fn process_row(l: &str) -> Option<Proc> {
    let c = cells(l);
    if c.len() != 1 {
        return None;
    }
    let t: Vec<&str> = c[0].split_whitespace().collect();
    let gpu = t.first().filter(|g| g.parse::<u32>().is_ok())?;
    let types = ["C", "G", "C+G", "M", "M+C", "M+G", "M+C+G"];
    let k = (1..t.len().saturating_sub(1))
        .find(|&k| t[k].parse::<u32>().is_ok() && types.contains(&t[k + 1]))?;
    let last = t.last()?;
    let mem = mem_bytes(last, None);
    // nvitop's own columns: `GPU PID TYPE USER GPU-MEM %SM %CPU %MEM TIME COMMAND`, the memory
    // after the user and the command last (its TIME may be `12.8 days`, two words).
    if mem.is_none() && *last != "N/A" {
        if let Some(m) = t.get(k + 3).and_then(|v| mem_bytes(v, None)) {
            let mut cmd = k + 8;
            if t.get(cmd).is_some_and(|w| w.starts_with("day")) {
                cmd += 1;
            }
            return Some(Proc {
                gpu: gpu.to_string(),
                pid: t[k].parse().ok()?,
                name: format!("{} ({})", t.get(cmd..)?.join(" "), t[k + 2]),
                mem_bytes: Some(m),
            });
        }
    }
    let end = if mem.is_some() || *last == "N/A" {
        t.len() - 1
    } else {
        t.len()
    };
    Some(Proc {
        gpu: gpu.to_string(),
        pid: t[k].parse().ok()?,
        name: t[k + 2..end.max(k + 2)].join(" "),
        mem_bytes: mem,
    })
}

/// One process on a GPU at a snapshot.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Proc {
    pub(crate) gpu: String,
    pub(crate) pid: u32,
    pub(crate) name: String,
    pub(crate) mem_bytes: Option<f64>,
}

/// A date line before a snapshot: nvidia-smi's own (`Thu Dec  9 11:19:15 2021`), `date`'s
/// (`Thu Dec  9 11:19:15 UTC 2021`), `watch`'s header (`Every 1.0s: nvidia-smi  host: Thu Dec
/// 9 11:19:15 2021`), ISO 8601 (`date -Is`, `2021-12-09 11:19:15`). Seconds since the epoch;
/// a zone name is passed over (only differences matter).
pub(crate) fn banner_time(l: &str) -> Option<f64> {
    const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
    let toks: Vec<&str> = l.split_whitespace().collect();
    if let Some(i) = toks
        .iter()
        .position(|t| DAYS.contains(&t.trim_end_matches(',')))
    {
        let kept: Vec<&str> = toks[i..]
            .iter()
            .map(|t| t.trim_end_matches(','))
            .filter(|t| !(t.len() >= 2 && t.chars().all(|c| c.is_ascii_uppercase())))
            .filter(|t| !t.starts_with(['+', '-']))
            .take(5)
            .collect();
        let s = kept.join(" ");
        for f in [
            "%a %b %e %H:%M:%S %Y",
            "%a %e %b %H:%M:%S %Y",
            "%a %e %b %Y %H:%M:%S",
        ] {
            if let Ok(t) = chrono::NaiveDateTime::parse_from_str(&s, f) {
                return Some(t.and_utc().timestamp() as f64);
            }
        }
        return None;
    }
    let t = l.trim();
    if t.len() < 19 || !t.as_bytes()[0].is_ascii_digit() {
        return None;
    }
    let first = t.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
    super::smi_csv::parse_timestamp(&first)
        .ok()
        .flatten()
        .or_else(|| {
            super::smi_csv::parse_timestamp(t.split_whitespace().next()?)
                .ok()
                .flatten()
        })
}

/// Snapshots as they are read: the table of readings, the time of the one being read, the
/// processes of the last.
pub(crate) struct Snapshots {
    pub(crate) t: Table,
    pending_time: Option<f64>,
    time: Option<f64>,
    count: u64,
    /// GPUs seen in the snapshot being read (a GPU seen again starts the next one).
    seen: Vec<String>,
    procs: Vec<Proc>,
    last_procs: Vec<Proc>,
}

impl Snapshots {
    pub(crate) fn new() -> Self {
        Snapshots {
            t: Table::new(),
            pending_time: None,
            time: None,
            count: 0,
            seen: Vec::new(),
            procs: Vec::new(),
            last_procs: Vec::new(),
        }
    }

    /// Reads `r` line by line ([`super::each_line`]), handing each line to `f`.
    pub(crate) fn each_line(
        &mut self,
        r: impl Read,
        mut f: impl FnMut(&mut Snapshots, &[u8]) -> Result<(), LogError>,
    ) -> Result<(), LogError> {
        super::each_line(r, |line| match line {
            super::LogLine::Text(buf) => f(self, buf),
            super::LogLine::Overlong => {
                self.t.info.overlong_line();
                Ok(())
            }
        })
    }

    /// A line that may date the next snapshot.
    pub(crate) fn maybe_time(&mut self, l: &str) {
        if let Some(t) = banner_time(l) {
            self.pending_time = Some(t);
        }
    }

    /// A snapshot starts (its header, or a GPU seen again).
    pub(crate) fn start(&mut self) {
        self.count += 1;
        self.time = self.pending_time.take();
        self.seen.clear();
        if !self.procs.is_empty() {
            self.last_procs = std::mem::take(&mut self.procs);
        }
    }

    /// Where the readings of GPU `id` go; `None` past the table's GPU cap.
    pub(crate) fn gpu(&mut self, id: &str, name: Option<&str>) -> Option<(u32, When)> {
        if self.count == 0 || self.seen.iter().any(|s| s == id) {
            self.start();
        }
        self.seen.push(id.to_string());
        let e = self.t.entity(None, id)?;
        self.t.describe(e, name, None);
        let when = match self.time {
            Some(t) => When::At(t),
            None => When::Nth(self.count - 1),
        };
        Some((e, when))
    }

    pub(crate) fn put(&mut self, e: u32, when: When, r: &Readings) {
        for (m, v) in [
            (Metric::UtilPct, r.util),
            (Metric::MemUsedBytes, r.used),
            (Metric::MemTotalBytes, r.total),
            (Metric::TemperatureC, r.temp_c),
            (Metric::PowerW, r.power_w),
            (Metric::MemUtilPct, r.mem_util),
        ] {
            if let Some(v) = v {
                self.t.put(e, when, m, v);
            }
        }
        self.t.info.rows += 1;
    }

    pub(crate) fn process(&mut self, p: Proc) {
        if self.procs.len() < 256 {
            self.procs.push(p);
        }
    }

    /// The readings as samples, with notes on the processes and, for a single snapshot, what
    /// it suggests.
    pub(crate) fn finish(
        mut self,
        format: &'static str,
        interval_s: Option<f64>,
        mut visit: impl FnMut(&Reading),
    ) -> Result<(LogHeader, LogInfo, BTreeMap<u32, ProfilingMeans>), LogError> {
        if self.t.is_empty() {
            return Err(LogError::Format(format!("no GPU rows in {format}")));
        }
        if !self.procs.is_empty() {
            self.last_procs = std::mem::take(&mut self.procs);
        }
        let mut last: BTreeMap<u32, Reading> = BTreeMap::new();
        let (h, mut info, prof) = self.t.finish(format, interval_s, |l| {
            last.insert(l.index, l.clone());
            visit(l)
        })?;
        if let Some(n) = procs_note(&self.last_procs, self.count) {
            info.notes.push(n);
        }
        if self.count == 1 {
            info.notes.push(snapshot_reading(&h, &last));
        }
        Ok((h, info, prof))
    }
}

/// What a reader found for one GPU in one snapshot.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Readings {
    pub(crate) used: Option<f64>,
    pub(crate) total: Option<f64>,
    pub(crate) util: Option<f64>,
    pub(crate) mem_util: Option<f64>,
    pub(crate) temp_c: Option<f64>,
    pub(crate) power_w: Option<f64>,
}

/// The processes of the last snapshot, biggest first.
fn procs_note(procs: &[Proc], snapshots: u64) -> Option<String> {
    if procs.is_empty() {
        return None;
    }
    let mut p: Vec<&Proc> = procs.iter().collect();
    // A report may list a process twice (nvidia-smi -q on Windows does).
    p.sort_by(|a, b| (&a.gpu, a.pid).cmp(&(&b.gpu, b.pid)));
    p.dedup_by(|a, b| a.gpu == b.gpu && a.pid == b.pid);
    p.sort_by(|a, b| {
        b.mem_bytes
            .unwrap_or(0.0)
            .total_cmp(&a.mem_bytes.unwrap_or(0.0))
    });
    let shown: Vec<String> = p
        .iter()
        .take(8)
        .map(|p| {
            let mem = p
                .mem_bytes
                .map(|b| format!(" {}", crate::units::bytes(b as u64)))
                .unwrap_or_default();
            // gpustat shows the user, not the PID (read as 0): no PID is made up.
            let pid = if p.pid == 0 {
                String::new()
            } else {
                format!("PID {} ", p.pid)
            };
            format!(
                "GPU {} {pid}{}{mem}",
                p.gpu,
                crate::units::printable(&p.name)
            )
        })
        .collect();
    let more = if p.len() > 8 {
        format!(" and {} more", p.len() - 8)
    } else {
        String::new()
    };
    let when = if snapshots > 1 {
        "at the last snapshot"
    } else {
        "at the snapshot"
    };
    Some(format!(
        "Processes on the GPUs {when}: {}{more}.",
        shown.join("; ")
    ))
}

/// A single snapshot's reading: memory held against utilization at that instant, what it
/// suggests, and the command that would tell. GPUs that read alike are named together (a node
/// of eight makes one sentence, not eight).
fn snapshot_reading(h: &LogHeader, last: &BTreeMap<u32, Reading>) -> String {
    // What each reading suggests, in the order the sentence gives them.
    const READS: [&str; 5] = [
        "memory held with compute low — a job is loaded and the GPU was waiting at that instant \
         (input, host work, communication) or between steps",
        "busy",
        "partly busy",
        "idle, no job holding it",
        "no busy figure",
    ];
    let mut groups: Vec<Vec<String>> = vec![Vec::new(); READS.len()];
    for (i, g) in last {
        let total = h
            .gpus
            .iter()
            .find(|s| s.index == *i)
            .and_then(|s| s.memory_total_bytes);
        let share = match (g.mem_used_bytes, total) {
            (Some(u), Some(t)) if t > 0 => Some(u as f64 / t as f64),
            _ => None,
        };
        // A quarter of the memory is a job's (a desktop's display holds a few percent).
        let held = share.map_or(g.mem_used_bytes.is_some_and(|u| u > 4 << 30), |s| s > 0.25);
        let k = match g.util_pct {
            Some(u) if u >= 80.0 => 1,
            Some(u) if held && u < 50.0 => 0,
            Some(u) if u < 5.0 => 3,
            Some(_) => 2,
            None => 4,
        };
        let mem = match (g.mem_used_bytes, share) {
            (Some(u), Some(s)) => format!("{} held ({:.0}%)", crate::units::bytes(u), s * 100.0),
            (Some(u), None) => format!("{} held", crate::units::bytes(u)),
            _ => "memory not given".into(),
        };
        let util = g
            .util_pct
            .map_or(String::new(), |u| format!(", {u:.0}% utilization"));
        groups[k].push(format!("GPU {i} ({mem}{util})"));
    }
    let said: Vec<String> = groups
        .iter()
        .zip(READS)
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, r)| format!("{}: {r}", g.join(", ")))
        .collect();
    let advice = if groups[0].is_empty() {
        "One instant is no run"
    } else {
        "One instant cannot tell a starving job from a pause"
    };
    format!(
        "A single snapshot, not a log: {}. {advice}; to judge the run, record it \
         (`gpufeed run -- <your command>`) or log it while it runs (`nvidia-smi \
         --query-gpu=timestamp,index,utilization.gpu,memory.used,memory.total --format=csv -l 1 \
         > gpu.csv`) and diagnose that.",
        said.join("; ")
    )
}

/// Reads every `nvidia-smi` / nvitop table in the log.
pub fn read(
    r: impl Read,
    interval_s: Option<f64>,
    visit: impl FnMut(&Reading),
) -> Result<(LogHeader, LogInfo, BTreeMap<u32, ProfilingMeans>), LogError> {
    #[derive(PartialEq)]
    enum Section {
        Other,
        Gpus,
        Mig,
        Procs,
    }
    let mut s = Snapshots::new();
    let mut section = Section::Other;
    // The GPU whose first row was read, waiting for its second.
    let mut pending: Option<(u32, When)> = None;
    // Each index's bus id as first seen. Tables of several machines pasted one after another
    // (`Node 1`, `Node 2`, each a container seeing its one GPU as 0) repeat an index on another
    // bus: that is another GPU, not the same one read again.
    let mut buses: BTreeMap<String, String> = BTreeMap::new();
    s.each_line(r, |s, buf| {
        let text = String::from_utf8_lossy(buf);
        let l = normalise(&text);
        if l.contains("NVIDIA-SMI ") || l.contains("NVITOP ") {
            s.start();
            section = Section::Gpus;
            pending = None;
            return Ok(());
        }
        if !l.starts_with('|') {
            if !l.starts_with(['+', '╒', '╘', '├', '╞', '╤', '╧', '╪']) {
                s.maybe_time(&l);
            }
            return Ok(());
        }
        if l.contains("MIG devices:") {
            section = Section::Mig;
            return Ok(());
        }
        if l.contains("Processes:") {
            section = Section::Procs;
            return Ok(());
        }
        if let Some((idx, name, bus)) = first_row_with_bus(&l) {
            section = Section::Gpus;
            let first = buses.entry(idx.clone()).or_insert_with(|| bus.clone());
            let id = if *first == bus {
                idx
            } else {
                format!("{idx} (bus {bus})")
            };
            pending = s.gpu(&id, Some(&name));
            return Ok(());
        }
        match section {
            Section::Gpus => {
                if let Some((e, when)) = pending.take() {
                    match second_row(&l) {
                        Some(r) => s.put(e, when, &r),
                        None => s.t.info.malformed += 1,
                    }
                }
            }
            Section::Procs => {
                if let Some(p) = process_row(&l) {
                    s.process(p);
                }
            }
            Section::Mig | Section::Other => {}
        }
        Ok(())
    })?;
    s.finish("nvidia-smi's table", interval_s, visit)
}

/// One `gpustat` line.
struct GpustatRow {
    index: String,
    name: String,
    readings: Readings,
    /// PID (0 where gpustat shows only the user), name, memory in bytes.
    procs: Vec<(u32, String, f64)>,
}

fn gpustat_row(l: &str) -> Option<GpustatRow> {
    let l = l.trim();
    let rest = l.strip_prefix('[')?;
    let (idx, rest) = rest.split_once(']')?;
    idx.parse::<u32>().ok()?;
    let parts: Vec<&str> = rest.split('|').map(str::trim).collect();
    if parts.len() < 3 {
        return None;
    }
    let (used, total) = parts[2].split_once('/')?;
    let unit = parts[2].split_whitespace().last();
    let mut r = Readings {
        used: mem_bytes(used, unit),
        total: mem_bytes(total.split_whitespace().next()?, unit),
        ..Readings::default()
    };
    r.total?;
    // `45°C,  30 %` or with the fan `45°C,  50 %,  30 %`, the power after: `, 250 / 350 W`;
    // the encoder and decoder (`E: 0 %  D: 0 %`) are not the GPU's load.
    let fields: Vec<&str> = parts[1].split(',').map(str::trim).collect();
    let pcts: Vec<f64> = fields
        .iter()
        .filter(|f| !f.starts_with("E:") && !f.starts_with("D:"))
        .filter_map(|f| pct(f.split('(').next().unwrap_or(f)))
        .collect();
    r.util = pcts.last().copied();
    r.temp_c = fields.first().and_then(|f| {
        f.trim_end_matches('C')
            .trim_end_matches(['°', '\''])
            .parse()
            .ok()
    });
    r.power_w = fields
        .iter()
        .find_map(|f| f.strip_suffix('W')?.split('/').next()?.trim().parse().ok());
    // `alice(10000M)` or with `-cp` `alice:python/1234(10000M)`.
    let mut procs = Vec::new();
    if let Some(p) = parts.get(3) {
        for tok in p.split_whitespace() {
            let Some((who, mem)) = tok.strip_suffix(')').and_then(|t| t.split_once('(')) else {
                continue;
            };
            let pid = who
                .rsplit('/')
                .next()
                .and_then(|x| x.parse::<u32>().ok())
                .unwrap_or(0);
            let name = who.rsplit_once('/').map_or(who, |(n, _)| n).to_string();
            if let Some(b) = mem_bytes(mem, Some("M")) {
                procs.push((pid, name, b));
            }
        }
    }
    Some(GpustatRow {
        index: idx.to_string(),
        name: parts[0].to_string(),
        readings: r,
        procs,
    })
}

/// Reads `gpustat` text output, once or looped (`gpustat -i`, `watch gpustat`).
pub fn read_gpustat(
    r: impl Read,
    interval_s: Option<f64>,
    visit: impl FnMut(&Reading),
) -> Result<(LogHeader, LogInfo, BTreeMap<u32, ProfilingMeans>), LogError> {
    let mut s = Snapshots::new();
    s.each_line(r, |s, buf| {
        let text = String::from_utf8_lossy(buf);
        match gpustat_row(&text) {
            Some(row) => {
                if let Some((e, when)) = s.gpu(&row.index, Some(&row.name)) {
                    s.put(e, when, &row.readings);
                }
                for (pid, name, b) in row.procs {
                    s.process(Proc {
                        gpu: row.index.clone(),
                        pid,
                        name,
                        mem_bytes: Some(b),
                    });
                }
            }
            // The banner: host, date, driver.
            None => s.maybe_time(&text),
        }
        Ok(())
    })?;
    s.finish("gpustat's output", interval_s, visit)
}

/// Does this start of a file hold `gpustat --json` output?
pub fn holds_gpustat_json(head: &str) -> bool {
    let t = head.trim_start();
    t.starts_with('{') && t.contains("\"query_time\"") && t.contains("\"gpus\"")
}

/// Reads `gpustat --json` output: one object, or many written one after another by a loop.
/// Its GPU keys are nvidia-smi's query names, looked up in the vocabulary.
pub fn read_gpustat_json(
    r: impl Read,
    interval_s: Option<f64>,
    visit: impl FnMut(&Reading),
) -> Result<(LogHeader, LogInfo, BTreeMap<u32, ProfilingMeans>), LogError> {
    use serde_json::Value;
    let mut s = Snapshots::new();
    let r = std::io::BufReader::new(r);
    for v in serde_json::Deserializer::from_reader(r).into_iter::<Value>() {
        let v = match v {
            Ok(v) => v,
            Err(e) if e.is_eof() => {
                s.t.info.truncated = true;
                break;
            }
            Err(e) if e.is_io() => return Err(LogError::Io(e.into())),
            Err(e) => {
                if s.t.is_empty() {
                    return Err(LogError::Format(format!("not gpustat --json output: {e}")));
                }
                s.t.info.malformed += 1;
                break;
            }
        };
        if let Some(t) = v["query_time"].as_str() {
            s.maybe_time(&t.replace('T', " "));
        }
        for g in v["gpus"].as_array().into_iter().flatten() {
            let Some(idx) = g["index"].as_u64() else {
                s.t.info.malformed += 1;
                continue;
            };
            let idx = idx.to_string();
            let Some((e, when)) = s.gpu(&idx, g["name"].as_str()) else {
                continue;
            };
            s.t.describe(e, None, g["uuid"].as_str());
            for (k, val) in g.as_object().into_iter().flatten() {
                let Some(x) = val.as_f64() else { continue };
                let Some(f) = super::vocab::lookup(k)
                    .filter(|f| f.term.family == super::vocab::Family::SmiQuery)
                else {
                    continue;
                };
                s.t.put(e, when, f.term.metric, x * f.scale);
            }
            s.t.info.rows += 1;
            for p in g["processes"].as_array().into_iter().flatten() {
                let Some(pid) = p["pid"].as_u64().and_then(|p| u32::try_from(p).ok()) else {
                    continue;
                };
                s.process(Proc {
                    gpu: idx.clone(),
                    pid,
                    name: p["command"].as_str().unwrap_or_default().to_string(),
                    mem_bytes: p["gpu_memory_usage"].as_f64().map(|m| m * 1_048_576.0),
                });
            }
        }
    }
    s.finish("gpustat --json", interval_s, visit)
}

/// Does this start of a file hold `nvidia-smi --query-compute-apps=… --format=csv` output?
pub fn holds_compute_apps(head: &str) -> bool {
    head.lines().take(20).any(|l| {
        let l = l.to_ascii_lowercase();
        l.contains(',') && l.contains("pid") && l.contains("used_")
    })
}

/// Reads `nvidia-smi --query-compute-apps=[timestamp,]gpu_uuid|gpu_bus_id,pid,process_name,
/// used_gpu_memory --format=csv`, once or looped (`-l`, or a loop writing the header each
/// time): each GPU's memory is the sum of its processes' at each reading; it has no
/// utilization, so the GPUs' load is not judged, and the processes are listed.
pub fn read_compute_apps(
    r: impl Read,
    interval_s: Option<f64>,
    visit: impl FnMut(&Reading),
) -> Result<(LogHeader, LogInfo, BTreeMap<u32, ProfilingMeans>), LogError> {
    #[derive(Default)]
    struct Cols {
        time: Option<usize>,
        gpu: Option<usize>,
        pid: Option<usize>,
        name: Option<usize>,
        mem: Option<usize>,
    }
    let mut s = Snapshots::new();
    let mut cols: Option<Cols> = None;
    // Memory per (reading, GPU), and the processes of each reading.
    let mut sums: BTreeMap<(i64, String), f64> = BTreeMap::new();
    let mut procs: BTreeMap<i64, Vec<Proc>> = BTreeMap::new();
    let mut timed = false;
    let mut reading = 0i64;
    s.each_line(r, |s, buf| {
        let text = String::from_utf8_lossy(buf);
        let f: Vec<&str> = text.trim().split(',').map(str::trim).collect();
        if f.len() < 2 {
            return Ok(());
        }
        if f.iter().any(|x| x.to_ascii_lowercase().starts_with("pid")) {
            let pos = |names: &[&str]| {
                f.iter().position(|x| {
                    let x = x.to_ascii_lowercase();
                    names.iter().any(|n| x.starts_with(n))
                })
            };
            cols = Some(Cols {
                time: pos(&["timestamp"]),
                gpu: pos(&["gpu_uuid", "gpu_bus_id", "gpu_serial", "gpu_name"]),
                pid: pos(&["pid"]),
                name: pos(&["process_name", "name"]),
                mem: pos(&["used_gpu_memory", "used_memory"]),
            });
            reading += 1;
            return Ok(());
        }
        let Some(c) = &cols else { return Ok(()) };
        let get = |i: Option<usize>| i.and_then(|i| f.get(i).copied());
        let (Some(pid), Some(mem)) = (get(c.pid).and_then(|p| p.parse::<u32>().ok()), get(c.mem))
        else {
            s.t.info.malformed += 1;
            return Ok(());
        };
        let when = match get(c.time).and_then(|t| super::smi_csv::parse_timestamp(t).ok().flatten())
        {
            Some(t) => {
                timed = true;
                (t * 1000.0).round() as i64
            }
            None => reading,
        };
        let gpu = get(c.gpu).unwrap_or("0").to_string();
        let bytes = super::table::number(mem).map(|(x, b)| if b { x } else { x * 1_048_576.0 });
        *sums.entry((when, gpu.clone())).or_default() += bytes.unwrap_or(0.0);
        let list = procs.entry(when).or_default();
        if list.len() < 256 {
            list.push(Proc {
                gpu,
                pid,
                name: get(c.name).unwrap_or_default().to_string(),
                mem_bytes: bytes,
            });
        }
        s.t.info.rows += 1;
        Ok(())
    })?;
    if sums.is_empty() {
        return Err(LogError::Format(
            "no process rows in this --query-compute-apps output (no process held a GPU)".into(),
        ));
    }
    for ((when, gpu), bytes) in &sums {
        let Some(e) = s.t.entity(None, gpu) else {
            continue;
        };
        let w = if timed {
            When::At(*when as f64 / 1000.0)
        } else {
            When::Nth(*when as u64)
        };
        s.t.put(e, w, Metric::MemUsedBytes, *bytes);
    }
    s.count = procs.len() as u64;
    s.procs = procs.into_values().next_back().unwrap_or_default();
    let (h, mut info, prof) = s.finish("nvidia-smi --query-compute-apps", interval_s, visit)?;
    info.notes.push(
        "--query-compute-apps gives each process's memory, not the GPUs' utilization: to judge \
         the load, log `nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used \
         --format=csv -l 1` beside it."
            .into(),
    );
    Ok((h, info, prof))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// What a reader gives from `text`: its header, its log info and its GPU samples (the
    /// `nvidia-smi -q` reader's tests use it too).
    pub(crate) fn samples(
        f: impl Fn(
            &[u8],
            &mut dyn FnMut(&Reading),
        ) -> Result<(LogHeader, LogInfo, BTreeMap<u32, ProfilingMeans>), LogError>,
        text: &str,
    ) -> (LogHeader, LogInfo, Vec<Reading>) {
        let mut out = Vec::new();
        let (h, info, _) = f(text.as_bytes(), &mut |l| out.push(l.clone())).unwrap();
        (h, info, out)
    }

    const SNAPSHOT: &str = "\
Thu Dec  9 11:19:15 2021
+---------------------------------------------------------------------------------------+
| NVIDIA-SMI 535.54.03              Driver Version: 535.54.03    CUDA Version: 12.2     |
|-----------------------------------------+----------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |         Memory-Usage | GPU-Util  Compute M. |
|                                         |                      |               MIG M. |
|=========================================+======================+======================|
|   0  NVIDIA A100-SXM4-80GB          On  | 00000000:01:00.0 Off |                    0 |
| N/A   33C    P0              62W / 400W |  40536MiB / 81920MiB |     30%      Default |
|                                         |                      |             Disabled |
+-----------------------------------------+----------------------+----------------------+
|   1  NVIDIA A100-SXM4-80GB          On  | 00000000:41:00.0 Off |                    0 |
| N/A   29C    P0              58W / 400W |      4MiB / 81920MiB |      0%      Default |
|                                         |                      |             Disabled |
+-----------------------------------------+----------------------+----------------------+

+---------------------------------------------------------------------------------------+
| Processes:                                                                            |
|  GPU   GI   CI        PID   Type   Process name                            GPU Memory |
|        ID   ID                                                             Usage      |
|=======================================================================================|
|    0   N/A  N/A     28690      C   python train.py                          40520MiB |
+---------------------------------------------------------------------------------------+
";

    #[test]
    fn one_snapshot_gets_a_reading() {
        assert!(holds_table(SNAPSHOT));
        let (h, info, g) = samples(|b, v| read(b, None, v), SNAPSHOT);
        assert_eq!(h.gpus.len(), 2);
        assert_eq!(g.len(), 2);
        assert_eq!(g[0].util_pct, Some(30.0));
        let notes = info.notes.join("\n");
        assert!(notes.contains("GPU 0 PID 28690 python train.py"), "{notes}");
        assert!(notes.contains("A single snapshot"), "{notes}");
        assert!(
            notes.contains(
                "GPU 0 (39.6 GiB held (49%), 30% utilization): memory held with compute low"
            ),
            "{notes}"
        );
        assert!(
            notes.contains("GPU 1 (4.0 MiB held (0%), 0% utilization): idle"),
            "{notes}"
        );
        assert!(notes.contains("gpufeed run --"), "{notes}");
    }

    #[test]
    fn looped_snapshots_are_a_time_series() {
        let looped = format!(
            "{SNAPSHOT}{}",
            SNAPSHOT
                .replace("11:19:15", "11:19:17")
                .replace("30%  ", "90%  ")
        );
        let (_, info, g) = samples(|b, v| read(b, None, v), &looped);
        assert_eq!(g.len(), 4);
        assert_eq!(g[2].t_s, 2.0);
        assert_eq!(g[2].util_pct, Some(90.0));
        assert!(!info.notes.join(" ").contains("single snapshot"));
        assert!(info.notes.join(" ").contains("at the last snapshot"));
    }

    #[test]
    fn nvitop_process_rows_give_memory_and_command() {
        let row = |l: &str| process_row(&normalise(l)).unwrap();
        let p =
            row("│   0  706318 C  tuccio  5184MiB   0 116.9   1.2  12.8 days  /home/tuccio/x.. │");
        assert_eq!(p.pid, 706318);
        assert_eq!(p.mem_bytes, Some(5184.0 * 1048576.0));
        assert_eq!(p.name, "/home/tuccio/x.. (tuccio)");
        let p =
            row("│   2 2290695 C  renard  7318MiB  98   0.0   1.7      17:55  python3 main.py  │");
        assert_eq!(
            (p.gpu.as_str(), p.name.as_str()),
            ("2", "python3 main.py (renard)")
        );
        let p =
            row("│   0 4051231 G     gdm 86.71MiB   0   0.0   0.0   94:19:37  /usr/lib/xorg/.. │");
        assert_eq!(p.mem_bytes, Some(86.71 * 1048576.0));
        // nvidia-smi's own row, a one-word name before the memory, is not nvitop's.
        let p = row("|    0   N/A  N/A            5997      C   python                                  794MiB |");
        assert_eq!(
            (p.name.as_str(), p.mem_bytes),
            ("python", Some(794.0 * 1048576.0))
        );
    }

    #[test]
    fn one_index_on_several_buses_is_several_gpus() {
        let node = |bus: &str, used: u32, util: u32| {
            format!(
                "======================\nNode\n\nTue Jul 25 06:41:17 2023\n\
                 | NVIDIA-SMI 515.86.01    Driver Version: 515.86.01    CUDA Version: 11.7     |\n\
                 |   0  NVIDIA GeForce ...  Off  | 00000000:{bus}:00.0 Off |                  N/A |\n\
                 | 77%   73C    P2   272W / 350W |  {used}MiB / 24576MiB |     {util}%      Default |\n"
            )
        };
        let pasted = format!(
            "{}{}{}",
            node("1A", 3855, 70),
            node("1B", 24211, 13),
            node("1A", 3900, 72)
        );
        let (h, info, g) = samples(|b, v| read(b, None, v), &pasted);
        assert_eq!(h.gpus.len(), 2, "{g:?}");
        assert!(
            info.notes.join(" ").contains("0 (bus 00000000:1B:00.0)"),
            "{:?}",
            info.notes
        );
        let util: Vec<_> = g.iter().map(|r| (r.index, r.util_pct)).collect();
        assert!(
            util.contains(&(0, Some(72.0))) && util.contains(&(1, Some(13.0))),
            "{util:?}"
        );
    }

    #[test]
    fn rows_are_read_by_their_cells() {
        assert_eq!(
            first_row("|   0  NVIDIA A100-SXM4-80GB          On  | 00000000:01:00.0 Off |                    0 |"),
            Some(("0".into(), "NVIDIA A100-SXM4-80GB".into()))
        );
        let r = second_row(
            "| N/A   33C    P0              62W / 400W |  40536MiB / 81920MiB |     30%      Default |",
        )
        .unwrap();
        assert_eq!(r.util, Some(30.0));
        assert_eq!(r.temp_c, Some(33.0));
        assert_eq!(r.power_w, Some(62.0));
        assert_eq!(r.used, Some(40536.0 * 1048576.0));
        let old = second_row(
            "| 30%   36C    P8    16W / 350W |    169MiB / 24259MiB |      5%      Default |",
        )
        .unwrap();
        assert_eq!((old.util, old.power_w), (Some(5.0), Some(16.0)));
        let mig = second_row(
            "| N/A   23C    P0              65W / 500W |     87MiB / 81920MiB |     N/A      Default |",
        )
        .unwrap();
        assert_eq!(mig.util, None);
        assert_eq!(
            process_row(
                "|    0   N/A  N/A     28690      C   ...abcdef/venv/bin/python3.7     3069MiB |"
            ),
            Some(Proc {
                gpu: "0".into(),
                pid: 28690,
                name: "...abcdef/venv/bin/python3.7".into(),
                mem_bytes: Some(3069.0 * 1048576.0)
            })
        );
        assert_eq!(
            process_row("|    1      4242    C   python     10240MiB |").map(|p| p.pid),
            Some(4242)
        );
        assert_eq!(process_row("|  No running processes found     |"), None);
    }

    #[test]
    fn banners_give_the_time() {
        let a = banner_time("Thu Dec  9 11:19:15 2021").unwrap();
        assert_eq!(banner_time("Thu Dec  9 11:19:16 UTC 2021"), Some(a + 1.0));
        assert_eq!(
            banner_time("Every 1.0s: nvidia-smi      node7: Thu Dec  9 11:19:17 2021"),
            Some(a + 2.0)
        );
        assert_eq!(banner_time("2021-12-09T11:19:18+00:00"), Some(a + 3.0));
        assert_eq!(banner_time("2021-12-09 11:19:19"), Some(a + 4.0));
        assert_eq!(banner_time("Thursday is a day"), None);
        assert_eq!(banner_time("0, 30 %"), None);
    }

    #[test]
    fn gpustat_lines() {
        let row = gpustat_row(
            "[1] NVIDIA GeForce RTX 3090 | 45°C,  30 % | 10240 / 24268 MB | alice:python/1234(10000M)",
        )
        .unwrap();
        let (idx, name, r, p) = (row.index, row.name, row.readings, row.procs);
        assert_eq!(
            (idx.as_str(), name.as_str()),
            ("1", "NVIDIA GeForce RTX 3090")
        );
        assert_eq!((r.util, r.temp_c), (Some(30.0), Some(45.0)));
        assert_eq!(r.total, Some(24268.0 * 1048576.0));
        assert_eq!(p, vec![(1234, "alice:python".into(), 10000.0 * 1048576.0)]);
        let r = gpustat_row(
            "[0] Tesla V100-SXM2-32GB | 38'C,  50 %,  97 %,  250 / 300 W |  30000 / 32510 MB |",
        )
        .unwrap()
        .readings;
        assert_eq!((r.util, r.power_w), (Some(97.0), Some(250.0)));
        assert!(gpustat_row("[INFO] starting | a | b").is_none());
        // gpustat's own test output: `--show-all` (fan, codec, power), and `??` for no value.
        let full = gpustat_row(
            "[0] GeForce GTX TITAN 0 | 80°C,  16 %,  76 % (E:  88 %  D:  67 %),  125 / 250 W |  8000 / 12287 MB | user1(4000M) user2(4000M)",
        )
        .unwrap();
        assert_eq!(
            (full.readings.util, full.readings.power_w),
            (Some(76.0), Some(125.0))
        );
        assert_eq!(full.procs.len(), 2);
        let unknown = gpustat_row(
            "[2] GeForce RTX 2       | 71°C,  ?? % |     0 / 12189 MB | (Not Supported)",
        )
        .unwrap();
        assert_eq!(unknown.readings.util, None);
    }

    #[test]
    fn gpustat_json_goes_through_the_vocabulary() {
        let one = r#"{"hostname": "node1", "driver_version": "535.54.03",
            "query_time": "2024-01-10T12:00:00.123456",
            "gpus": [{"index": 0, "uuid": "GPU-1", "name": "NVIDIA A100", "temperature.gpu": 33,
              "fan.speed": null, "utilization.gpu": 30, "power.draw": 62,
              "enforced.power.limit": 400, "memory.used": 40536, "memory.total": 81920,
              "processes": [{"username": "alice", "command": "python", "gpu_memory_usage": 40520,
                "pid": 28690}]}]}"#;
        let looped = format!("{one}\n{}", one.replace("12:00:00", "12:00:02"));
        assert!(holds_gpustat_json(&looped));
        let (h, info, g) = samples(|b, v| read_gpustat_json(b, None, v), &looped);
        assert_eq!(h.gpus[0].uuid.as_deref(), Some("GPU-1"));
        assert_eq!(g.len(), 2);
        assert_eq!(g[1].t_s, 2.0);
        assert_eq!(g[0].mem_used_bytes, Some(40536 * 1_048_576));
        assert!(info.notes.join(" ").contains("PID 28690 python"));
    }

    #[test]
    fn compute_apps_give_memory_per_gpu_and_the_processes() {
        let csv = "\
timestamp, gpu_uuid, pid, process_name, used_gpu_memory [MiB]
2024/01/10 12:00:00.000, GPU-a, 4242, python, 30000 MiB
2024/01/10 12:00:00.000, GPU-a, 4243, python, 10000 MiB
2024/01/10 12:00:00.000, GPU-b, 4244, python, 500 MiB
2024/01/10 12:00:01.000, GPU-a, 4242, python, 30000 MiB
";
        assert!(holds_compute_apps(csv));
        let (h, info, g) = samples(|b, v| read_compute_apps(b, None, v), csv);
        assert_eq!(h.gpus.len(), 2);
        assert_eq!(g[0].mem_used_bytes, Some(40000 * 1_048_576));
        assert_eq!(g[0].util_pct, None);
        let notes = info.notes.join(" ");
        assert!(notes.contains("GPU GPU-a PID 4242 python"), "{notes}");
        assert!(notes.contains("not the GPUs' utilization"), "{notes}");
    }
}
