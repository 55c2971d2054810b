//! Readings by name → recording lines: what every vocabulary-driven reader ([`super::csv_table`],
//! [`super::wandb`], [`super::prom`], [`super::mlflow`]) hands its values to.
//!
//! A reader finds, for each value, its GPU (an entity: a host and an id as the file names it), its
//! time (or its place in the GPU's sequence when the file has no time) and its metric
//! ([`super::vocab`]). The table joins the values of one GPU at one moment into one sample,
//! judges the file by the best busy measure it holds (SM active, else graphics engine active,
//! else utilization), and writes the samples in time order.

use super::dcgmi::ProfilingMeans;
use super::smi_csv::log_header;
use super::vocab::Metric;
use super::{LogError, LogInfo};
use crate::reading::{GpuStatic, LogHeader, Reading};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The most GPUs (entities) one file is read as; more are counted and left out.
pub(crate) const MAX_ENTITIES: usize = super::MAX_GPUS;
/// The most GPU moments held (about 55 MB, beside a Prometheus answer's 64 MB): past it, each GPU keeps one moment in every bucket of
/// time, the buckets widened until the moments fit, across the whole file (and a note says so).
pub(crate) const MAX_POINTS: usize = 300_000;
/// Unknown names listed in the note.
const MAX_UNKNOWN_LISTED: usize = 12;
/// Unknown names remembered at all (a file with a million distinct names stays small).
const MAX_UNKNOWN_KEPT: usize = 256;

/// Where a value belongs in time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum When {
    /// Seconds, any origin (epoch or relative): differences matter.
    At(f64),
    /// The file has no time: the n-th reading of this GPU.
    Nth(u64),
}

/// The values of one GPU at one moment (the metrics a sample can carry): bit `i` of `set` says
/// slot `i` holds a reading (kept as a mask beside plain numbers: a point is 130 bytes, not 256).
#[derive(Debug, Clone, Default)]
struct Point {
    set: u16,
    v: [f64; SLOTS],
}

impl Point {
    fn get(&self, s: usize) -> Option<f64> {
        (self.set & (1 << s) != 0).then(|| self.v[s])
    }

    fn metric(&self, m: Metric) -> Option<f64> {
        slot(m).and_then(|s| self.get(s))
    }

    /// The sample of this point: busy from the file's busy measure, memory in bytes (from a
    /// percent of the total where the GPU's total is known).
    fn sample(
        &self,
        index: u32,
        t_s: f64,
        busy: Option<Metric>,
        totals: &mut HashMap<u32, u64>,
    ) -> Reading {
        let get = |m: Metric| self.metric(m);
        let total = get(Metric::MemTotalBytes)
            .or_else(|| Some(get(Metric::MemUsedBytes)? + get(Metric::MemFreeBytes)?))
            .map(|b| b as u64);
        if let Some(t) = total {
            totals.insert(index, t);
        }
        let used = get(Metric::MemUsedBytes).or_else(|| {
            let pct = get(Metric::MemUsedPctOfTotal)?;
            Some(pct / 100.0 * totals.get(&index).copied()? as f64)
        });
        Reading {
            index,
            t_s,
            util_pct: busy.and_then(get),
            mem_util_pct: get(Metric::MemUtilPct),
            mem_used_bytes: used.filter(|b| *b >= 0.0).map(|b| b as u64),
            power_w: get(Metric::PowerW),
            temperature_c: get(Metric::TemperatureC)
                .filter(|c| *c >= 0.0)
                .map(|c| c as u32),
            sm_clock_mhz: get(Metric::SmClockMhz)
                .filter(|c| *c >= 0.0)
                .map(|c| c as u32),
            pcie_rx_bytes_per_s: get(Metric::PcieRxBytesPerS),
            pcie_tx_bytes_per_s: get(Metric::PcieTxBytesPerS),
            ..Default::default()
        }
    }
}

/// Running means of one GPU's activity measures.
#[derive(Debug, Default)]
struct Means([super::Mean; 6]);

const MEANS_OF: [Metric; 6] = [
    Metric::SmActivePct,
    Metric::GrActivePct,
    Metric::UtilPct,
    Metric::SmOccupancyPct,
    Metric::TensorActivePct,
    Metric::DramActivePct,
];

impl Means {
    fn add(&mut self, p: &Point) {
        for (s, m) in self.0.iter_mut().zip(MEANS_OF) {
            s.add(p.metric(m));
        }
    }

    fn profiling(&self) -> ProfilingMeans {
        let s = &self.0;
        ProfilingMeans {
            sm_active_pct: s[0].mean(),
            gr_active_pct: s[1].mean(),
            util_pct: s[2].mean(),
            sm_occupancy_pct: s[3].mean(),
            tensor_active_pct: s[4].mean(),
            dram_active_pct: s[5].mean(),
        }
    }
}

const SLOTS: usize = 16;

fn slot(m: Metric) -> Option<usize> {
    Some(match m {
        Metric::SmActivePct => 0,
        Metric::GrActivePct => 1,
        Metric::UtilPct => 2,
        Metric::SmOccupancyPct => 3,
        Metric::TensorActivePct => 4,
        Metric::DramActivePct => 5,
        Metric::MemUtilPct => 6,
        Metric::MemUsedBytes => 7,
        Metric::MemTotalBytes => 8,
        Metric::MemFreeBytes => 9,
        Metric::MemUsedPctOfTotal => 10,
        Metric::PowerW => 11,
        Metric::TemperatureC => 12,
        Metric::SmClockMhz => 13,
        Metric::PcieRxBytesPerS => 14,
        Metric::PcieTxBytesPerS => 15,
        _ => return None,
    })
}

#[derive(Debug, Default)]
struct Entity {
    host: Option<String>,
    id: String,
    name: Option<String>,
    uuid: Option<String>,
    /// Readings of this GPU so far, for files without time.
    seq: u64,
}

/// Collects a file's values; [`Table::finish`] writes them as samples.
#[derive(Debug, Default)]
pub(crate) struct Table {
    entities: Vec<Entity>,
    by_key: HashMap<(Option<String>, String), u32>,
    /// Entities by their GPU uuid: one GPU named by index in one series and by uuid in
    /// another (dcgm-exporter's `gpu="0",UUID=…` beside nvidia_gpu_exporter's `uuid=…`) is one.
    by_uuid: HashMap<String, u32>,
    entities_left_out: u64,
    points: BTreeMap<(i64, u32), Point>,
    /// Values of moments left out (see [`MAX_POINTS`]).
    points_left_out: u64,
    /// The width of the buckets each GPU keeps one moment in (ms, or readings without time); 0
    /// while every moment is kept.
    bucket: i64,
    timed: bool,
    untimed: bool,
    /// Metrics seen with at least one value.
    present: BTreeSet<Metric>,
    unknown: BTreeMap<String, u64>,
    unknown_more: u64,
    /// Readings of each metric of each GPU so far, for series without time.
    nth_by_metric: HashMap<(u32, Metric), u64>,
    /// Values outside their metric's range, left out: per metric, how many above it (a percent
    /// above 100) and the highest, how many below it (negative) and the lowest.
    out_of_range: BTreeMap<Metric, OutOfRange>,
    pub info: LogInfo,
}

/// One metric's values left out for being outside its range.
#[derive(Debug)]
struct OutOfRange {
    above: u64,
    highest: f64,
    below: u64,
    lowest: f64,
}

impl Default for OutOfRange {
    fn default() -> Self {
        OutOfRange {
            above: 0,
            highest: f64::NEG_INFINITY,
            below: 0,
            lowest: f64::INFINITY,
        }
    }
}

impl Table {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The entity for a host and an id as the file writes them (`GPU 0`, `0`, `card1`, a uuid);
    /// `None` past [`MAX_ENTITIES`].
    pub(crate) fn entity(&mut self, host: Option<&str>, id: &str) -> Option<u32> {
        let key = (host.map(super::printable), super::printable(id.trim()));
        if let Some(&e) = self.by_key.get(&key) {
            return Some(e);
        }
        if self.entities.len() >= MAX_ENTITIES {
            self.entities_left_out += 1;
            return None;
        }
        let e = self.entities.len() as u32;
        self.entities.push(Entity {
            host: key.0.clone(),
            id: key.1.clone(),
            ..Default::default()
        });
        self.by_key.insert(key, e);
        Some(e)
    }

    /// As [`Table::entity`], the GPU's uuid first where the series gives one: the same uuid is
    /// the same GPU, whatever host label or id it comes under.
    pub(crate) fn entity_with_uuid(
        &mut self,
        host: Option<&str>,
        id: &str,
        uuid: Option<&str>,
    ) -> Option<u32> {
        let uuid = uuid.map(str::trim).filter(|u| u.len() > 8);
        if let Some(&e) = uuid.and_then(|u| self.by_uuid.get(u)) {
            return Some(e);
        }
        let e = self.entity(host, id)?;
        if let Some(u) = uuid {
            self.by_uuid.entry(u.to_string()).or_insert(e);
        }
        Some(e)
    }

    /// The next reading's place for an entity of a file without time.
    pub(crate) fn next_nth(&mut self, e: u32) -> When {
        let ent = &mut self.entities[e as usize];
        ent.seq += 1;
        When::Nth(ent.seq - 1)
    }

    /// For series without time: the n-th value of this metric on this GPU.
    pub(crate) fn next_nth_of(&mut self, e: u32, metric: Metric) -> When {
        self.untimed = true;
        let n = self.nth_by_metric.entry((e, metric)).or_insert(0);
        *n += 1;
        When::Nth(*n - 1)
    }

    /// The GPU's model name or uuid, where the file gives them.
    pub(crate) fn describe(&mut self, e: u32, name: Option<&str>, uuid: Option<&str>) {
        let ent = &mut self.entities[e as usize];
        if let Some(n) = name.filter(|n| !n.is_empty()) {
            ent.name.get_or_insert_with(|| super::printable(n));
        }
        if let Some(u) = uuid.filter(|u| !u.is_empty()) {
            ent.uuid.get_or_insert_with(|| super::printable(u));
        }
    }

    /// One value of `metric` (already in the metric's unit) for entity `e` at `when`.
    pub(crate) fn put(&mut self, e: u32, when: When, metric: Metric, value: f64) {
        let Some(s) = slot(metric) else { return };
        if !value.is_finite() {
            return;
        }
        let pct = matches!(
            metric,
            Metric::SmActivePct
                | Metric::GrActivePct
                | Metric::UtilPct
                | Metric::SmOccupancyPct
                | Metric::TensorActivePct
                | Metric::DramActivePct
                | Metric::MemUtilPct
                | Metric::MemUsedPctOfTotal
        );
        if value < 0.0 || (pct && value > 100.5) {
            let o = self.out_of_range.entry(metric).or_default();
            if value < 0.0 {
                o.below += 1;
                o.lowest = o.lowest.min(value);
            } else {
                o.above += 1;
                o.highest = o.highest.max(value);
            }
            return;
        }
        let key = match when {
            When::At(t) if t.is_finite() => {
                self.timed = true;
                (t * 1000.0).round() as i64
            }
            When::At(_) => return,
            When::Nth(n) => {
                self.untimed = true;
                n.min(i64::MAX as u64) as i64
            }
        };
        let k = (key, e);
        if !self.points.contains_key(&k) {
            if self.points.len() >= MAX_POINTS {
                self.thin();
            }
            if self.bucket > 0 && self.holds_bucket_of(key, e) {
                self.points_left_out += 1;
                return;
            }
        }
        self.present.insert(metric);
        let p = self.points.entry(k).or_default();
        p.set |= 1 << s;
        p.v[s] = value;
    }

    /// Whether GPU `e` holds a moment in the bucket `key` falls in.
    fn holds_bucket_of(&self, key: i64, e: u32) -> bool {
        let from = key.div_euclid(self.bucket).saturating_mul(self.bucket);
        let to = from.saturating_add(self.bucket);
        self.points
            .range((from, 0)..(to, 0))
            .any(|(&(_, pe), _)| pe == e)
    }

    /// Makes room: each GPU keeps its first moment in every bucket, the buckets wide enough
    /// that at most half of [`MAX_POINTS`] stay (a file's series one GPU after another keeps
    /// every GPU, over all its time, not the first GPUs only).
    fn thin(&mut self) {
        let (Some(&(first, _)), Some(&(last, _))) =
            (self.points.keys().next(), self.points.keys().next_back())
        else {
            return;
        };
        let gpus = self.entities.len().max(1) as i64;
        let span = last.saturating_sub(first).max(1);
        let fit = span.saturating_mul(2 * gpus) / MAX_POINTS as i64;
        let mut bucket = fit.max(self.bucket.saturating_mul(2)).max(1);
        loop {
            // Moments come in time order: a GPU's bucket only grows.
            let mut last = vec![None; self.entities.len()];
            let mut values = 0u64;
            self.points.retain(|&(t, e), p| {
                let b = Some(t.div_euclid(bucket));
                let keep = last.get(e as usize).is_none_or(|l| *l != b);
                if let Some(l) = last.get_mut(e as usize) {
                    *l = b;
                }
                if !keep {
                    values += u64::from(p.set.count_ones());
                }
                keep
            });
            self.points_left_out += values;
            self.bucket = bucket;
            if self.points.len() <= MAX_POINTS / 2 {
                return;
            }
            bucket = bucket.saturating_mul(2);
        }
    }

    /// A name the vocabulary does not know (listed in a note).
    pub(crate) fn unknown(&mut self, name: &str) {
        let name = name.trim();
        if name.is_empty() {
            return;
        }
        let key = super::printable(&name.chars().take(80).collect::<String>());
        if let Some(n) = self.unknown.get_mut(&key) {
            *n += 1;
        } else if self.unknown.len() < MAX_UNKNOWN_KEPT {
            self.unknown.insert(key, 1);
        } else {
            self.unknown_more += 1;
        }
    }

    /// Reads `r` line by line ([`super::each_line`]), handing each line to `f` with the table;
    /// a line too long to be a row is counted as such and passed over.
    pub(crate) fn each_line(
        &mut self,
        r: impl std::io::Read,
        f: impl FnMut(&mut Table, &[u8]) -> Result<(), LogError>,
    ) -> Result<(), LogError> {
        self.each_line_up_to(r, super::MAX_LOG_LINE_BYTES, f)
    }

    /// [`Table::each_line`], no line held longer than `max`.
    pub(crate) fn each_line_up_to(
        &mut self,
        r: impl std::io::Read,
        max: usize,
        mut f: impl FnMut(&mut Table, &[u8]) -> Result<(), LogError>,
    ) -> Result<(), LogError> {
        super::each_line_up_to(r, max, |line| match line {
            super::LogLine::Text(buf) => f(self, buf),
            super::LogLine::Overlong => {
                self.info.overlong_line();
                Ok(())
            }
        })
    }

    /// Has any value been put?
    pub(crate) fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// The best busy measure this file holds.
    pub(crate) fn busy_metric(&self) -> Option<Metric> {
        super::vocab::best_busy(|m| self.present.contains(&m))
    }

    /// GPU indices: the file's own numbers where every GPU has a distinct small one on one host,
    /// else 0, 1, … in the order of (host, number in the id, id).
    fn indices(&self) -> (Vec<u32>, Option<String>) {
        let one_host = self
            .entities
            .iter()
            .all(|e| e.host == self.entities.first().and_then(|f| f.host.clone()));
        let own: Vec<Option<u32>> = self
            .entities
            .iter()
            .map(|e| e.id.parse::<u32>().ok().filter(|&n| n < 4096))
            .collect();
        let distinct: BTreeSet<u32> = own.iter().flatten().copied().collect();
        if one_host && own.iter().all(Option::is_some) && distinct.len() == own.len() {
            return (own.into_iter().flatten().collect(), None);
        }
        let mut order: Vec<usize> = (0..self.entities.len()).collect();
        // `GPU 3`, `card3`, `nvidia3`, `GPU-I 3`: by that number; uuids and the like: in the
        // order the file first names them, after the numbered ones.
        let num = |s: &str| -> u64 {
            let digits = s.trim_start_matches(|c: char| !c.is_ascii_digit());
            let prefix_ok = s[..s.len() - digits.len()]
                .chars()
                .all(|c| c.is_ascii_alphabetic() || matches!(c, ' ' | '-' | '_'));
            if prefix_ok && !digits.is_empty() && digits.len() <= 9 {
                digits.parse().unwrap_or(u64::MAX)
            } else {
                u64::MAX
            }
        };
        order.sort_by(|&a, &b| {
            let (x, y) = (&self.entities[a], &self.entities[b]);
            (&x.host, num(&x.id), a).cmp(&(&y.host, num(&y.id), b))
        });
        let mut idx = vec![0u32; self.entities.len()];
        let mut shown = Vec::new();
        for (i, &e) in order.iter().enumerate() {
            idx[e] = i as u32;
            if shown.len() < 8 {
                let ent = &self.entities[e];
                shown.push(match &ent.host {
                    Some(h) => format!("GPU {i} = {h} {}", ent.id),
                    None => format!("GPU {i} = {}", ent.id),
                });
            }
        }
        if order.len() > 8 {
            shown.push(format!("… {} more", order.len() - 8));
        }
        (idx, Some(shown.join(", ")))
    }

    /// Writes the samples in time order to `visit`; returns the header, what was read and the
    /// GPUs' profiling means. `format` names the file's kind in notes and errors.
    pub(crate) fn finish(
        mut self,
        format: &'static str,
        interval_s: Option<f64>,
        mut visit: impl FnMut(&Reading),
    ) -> Result<(LogHeader, LogInfo, BTreeMap<u32, ProfilingMeans>), LogError> {
        let busy = self.busy_metric();
        let has_mem = [
            Metric::MemUsedBytes,
            Metric::MemUsedPctOfTotal,
            Metric::MemUtilPct,
        ]
        .iter()
        .any(|m| self.present.contains(m));
        if busy.is_none() && !has_mem {
            return Err(LogError::Format(self.nothing_known(format)));
        }
        let (idx, mapping) = self.indices();
        let interval = interval_s.unwrap_or(1.0);
        self.info.interval_unknown = !self.timed && interval_s.is_none();
        let t0 = self.points.keys().next().map_or(0, |k| k.0);
        let mut means: BTreeMap<u32, Means> = BTreeMap::new();
        let mut totals: HashMap<u32, u64> = HashMap::new();
        let mut rows = 0u64;
        for (&(key, e), p) in &self.points {
            let index = idx[e as usize];
            means.entry(index).or_default().add(p);
            let t_s = if self.timed {
                (key - t0) as f64 / 1000.0
            } else {
                key as f64 * interval
            };
            let s = p.sample(index, t_s, busy, &mut totals);
            rows += 1;
            visit(&s);
        }
        self.info.rows = rows;
        let mut statics: Vec<GpuStatic> = self
            .entities
            .iter()
            .enumerate()
            .map(|(e, ent)| GpuStatic {
                index: idx[e],
                name: ent.name.clone(),
                uuid: ent.uuid.clone(),
                memory_total_bytes: totals.get(&idx[e]).copied(),
                ..Default::default()
            })
            .collect();
        statics.sort_by_key(|g| g.index);
        let prof = means
            .into_iter()
            .map(|(i, m)| (i, m.profiling()))
            .filter(|(_, p)| p.sm_active_pct.is_some() || p.gr_active_pct.is_some())
            .collect();
        let mut notes = vec![self.how_read(format, busy, statics.len(), mapping)];
        notes.extend(self.left_out_note());
        self.info.notes.splice(0..0, notes);
        Ok((log_header(statics, interval), self.info, prof))
    }

    fn how_read(
        &self,
        format: &str,
        busy: Option<Metric>,
        gpus: usize,
        mapping: Option<String>,
    ) -> String {
        let busy = match busy {
            Some(m) => {
                let also: Vec<&str> = Metric::BUSY
                    .iter()
                    .filter(|&&o| o != m && self.present.contains(&o))
                    .map(|o| match o {
                        Metric::GrActivePct => "graphics engine active",
                        Metric::UtilPct => "utilization",
                        _ => "SM active",
                    })
                    .collect();
                let also = if also.is_empty() {
                    String::new()
                } else {
                    format!(" ({} also read, kept beside it)", also.join(", "))
                };
                format!(
                    "busy is {}, the best measure this file holds{also}",
                    m.busy_label()
                )
            }
            None => "no busy measure (memory only): the GPUs' load cannot be judged".into(),
        };
        let mapping = mapping.map(|m| format!(" ({m})")).unwrap_or_default();
        let count = if gpus == 1 {
            "1 GPU".to_string()
        } else {
            format!("{gpus} GPUs")
        };
        format!("Read as {format}: {count}{mapping}; {busy}.")
    }

    fn left_out_note(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if !self.unknown.is_empty() {
            let mut names: Vec<&str> = self.unknown.keys().map(String::as_str).collect();
            let more = names.len().saturating_sub(MAX_UNKNOWN_LISTED) as u64 + self.unknown_more;
            names.truncate(MAX_UNKNOWN_LISTED);
            let more = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            notes.push(format!(
                "Not read (names gpufeed does not know): {}{more}.",
                names.join(", ")
            ));
        }
        // Said as seen, with no guess at what the column holds: a temperature or a counter
        // under a percent's name, a sentinel like -1, all read the same here.
        for (m, o) in &self.out_of_range {
            if o.above > 0 {
                notes.push(format!(
                    "{} values of {} were above 100 % (up to {}) and left out: that column is not \
                     a percent.",
                    o.above,
                    m.as_str(),
                    crate::units::num(o.highest)
                ));
            }
            if o.below > 0 {
                notes.push(format!(
                    "{} negative values of {} (down to {}) were left out: not a reading of it.",
                    o.below,
                    m.as_str(),
                    crate::units::num(o.lowest)
                ));
            }
        }
        if self.entities_left_out > 0 {
            notes.push(format!(
                "More than {MAX_ENTITIES} GPUs named: {} values of the others were left out.",
                self.entities_left_out
            ));
        }
        if self.points_left_out > 0 {
            let every = if self.timed {
                format!("{} s", crate::units::num(self.bucket as f64 / 1000.0))
            } else {
                format!("{} readings", self.bucket)
            };
            notes.push(format!(
                "The file holds more than the {MAX_POINTS} GPU readings gpufeed keeps: each GPU's \
                 first reading in every {every} was judged, over the whole file; {} values of \
                 the others were left out.",
                self.points_left_out
            ));
        }
        notes
    }

    /// The error for a file none of whose names holds a busy or memory value.
    fn nothing_known(&self, format: &str) -> String {
        let seen: Vec<&str> = self
            .unknown
            .keys()
            .map(String::as_str)
            .take(MAX_UNKNOWN_LISTED)
            .collect();
        let seen = if seen.is_empty() {
            String::new()
        } else {
            format!(" (it has {})", seen.join(", "))
        };
        format!(
            "no column of {format} holds a GPU busy or memory value gpufeed knows{seen}; \
             it knows utilization.gpu, SMACT, GRACT, DCGM_FI_DEV_GPU_UTIL, \
             DCGM_FI_PROF_SM_ACTIVE, system.gpu.N.gpu, gpu_N_utilization_percentage, \
             GPU use (%), gfx_activity and more (docs/diagnose.md, \"What gpufeed reads\"); \
             name yours with --columns NAME=utilization.gpu"
        )
    }
}

/// A value as files write it: a number, with an optional unit after it (`87 %`, `1024 MiB`,
/// `250.3 W`); `None` for `N/A`, `[N/A]`, `-`, empty, text. A memory unit in the value gives
/// bytes (then `bytes` is true).
pub(crate) fn number(v: &str) -> Option<(f64, bool)> {
    let v = v.trim().trim_matches('"').trim();
    if v.is_empty() || v == "-" || v.starts_with('[') || v.eq_ignore_ascii_case("n/a") {
        return None;
    }
    let end = v
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '+' | '-' | 'e' | 'E')))
        .unwrap_or(v.len());
    let mut k = end;
    while k > 0 && v[..k].parse::<f64>().is_err() {
        k -= 1;
    }
    if k == 0 {
        return None;
    }
    let x: f64 = v[..k].parse().ok()?;
    let scale = match v[k..].trim() {
        "" | "%" | "W" | "C" | "°C" | "MHz" | "s" => return x.is_finite().then_some((x, false)),
        "MiB" => 1_048_576.0,
        "GiB" => 1_073_741_824.0,
        "KiB" => 1024.0,
        "MB" => 1e6,
        "GB" => 1e9,
        "KB" | "kB" => 1e3,
        "B" => 1.0,
        _ => return None,
    };
    let b = x * scale;
    b.is_finite().then_some((b, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(
        t: Table,
    ) -> (
        LogHeader,
        LogInfo,
        BTreeMap<u32, ProfilingMeans>,
        Vec<Reading>,
    ) {
        let mut out = Vec::new();
        let (h, i, p) = t
            .finish("a test log", None, |l| {
                out.push(l.clone());
            })
            .unwrap();
        (h, i, p, out)
    }

    /// A file of `gpus` series of `n` seconds each, two metrics each, one GPU after another
    /// (a Prometheus range answer) or poll by poll (a scrape log, a DCGM export).
    fn big_table(gpus: u32, n: u32, series_by_series: bool) -> Table {
        let mut t = Table::new();
        let es: Vec<u32> = (0..gpus)
            .map(|g| t.entity(None, &g.to_string()).unwrap())
            .collect();
        let put = |t: &mut Table, e: u32, i: u32, m: Metric| {
            t.put(e, When::At(1e9 + f64::from(i)), m, f64::from(i % 100));
        };
        if series_by_series {
            for m in [Metric::UtilPct, Metric::MemUsedBytes] {
                for &e in &es {
                    for i in 0..n {
                        put(&mut t, e, i, m);
                    }
                }
            }
        } else {
            for i in 0..n {
                for &e in &es {
                    put(&mut t, e, i, Metric::UtilPct);
                    put(&mut t, e, i, Metric::MemUsedBytes);
                }
            }
        }
        t
    }

    #[test]
    fn a_file_past_the_readings_kept_keeps_every_gpu_over_all_its_time() {
        for series_by_series in [true, false] {
            let (gpus, n) = (8, 200_000);
            let (h, info, _, s) = run(big_table(gpus, n, series_by_series));
            assert_eq!(h.gpus.len(), gpus as usize);
            assert!(s.len() <= MAX_POINTS, "{}", s.len());
            for g in 0..gpus {
                let mine: Vec<&Reading> = s.iter().filter(|r| r.index == g).collect();
                // Each GPU: readings across the whole file, both metrics of each moment.
                assert!(mine.len() > 10_000, "GPU {g}: {}", mine.len());
                assert!(mine.last().unwrap().t_s > f64::from(n) * 0.95, "GPU {g}");
                assert!(mine
                    .iter()
                    .all(|r| r.util_pct.is_some() && r.mem_used_bytes.is_some()));
            }
            let note = info
                .notes
                .iter()
                .find(|n| n.contains("readings gpufeed keeps"));
            assert!(
                note.is_some_and(|n| n.contains("first reading in every")),
                "{:?}",
                info.notes
            );
        }
        // Under the cap, every moment is kept and nothing is said.
        let (_, info, _, s) = run(big_table(2, 1000, true));
        assert_eq!(s.len(), 2000);
        assert!(!info
            .notes
            .iter()
            .any(|n| n.contains("readings gpufeed keeps")));
    }

    #[test]
    fn sm_active_is_the_busy_measure_when_present() {
        let mut t = Table::new();
        let (a, b) = (t.entity(None, "0").unwrap(), t.entity(None, "1").unwrap());
        for k in 0..4 {
            let w = When::At(100.0 + k as f64);
            t.put(a, w, Metric::UtilPct, 100.0);
            t.put(a, w, Metric::SmActivePct, 90.0);
            t.put(b, w, Metric::UtilPct, 100.0);
            t.put(b, w, Metric::SmActivePct, 0.6);
        }
        let (h, info, prof, s) = run(t);
        assert_eq!(h.gpus.len(), 2);
        assert_eq!(s.len(), 8);
        assert_eq!(s[1].util_pct.map(|u| u.round()), Some(1.0));
        assert_eq!(s[0].t_s, 0.0);
        assert_eq!(s[7].t_s, 3.0);
        assert_eq!(prof[&1].util_pct, Some(100.0));
        assert!(
            info.notes[0].contains("busy is SM active"),
            "{:?}",
            info.notes
        );
        assert!(
            info.notes[0].contains("utilization also read"),
            "{:?}",
            info.notes
        );
    }

    #[test]
    fn ids_that_are_not_small_numbers_are_numbered_in_order() {
        let mut t = Table::new();
        for id in ["GPU-I 2", "GPU 1", "GPU 0"] {
            let e = t.entity(Some("node-a"), id).unwrap();
            let w = t.next_nth(e);
            t.put(e, w, Metric::UtilPct, 50.0);
        }
        let (_, info, _, s) = run(t);
        assert!(info.interval_unknown);
        // Written in the file's order, numbered by the number in each id.
        let idx: Vec<u32> = s.iter().map(|g| g.index).collect();
        assert_eq!(idx, [2, 1, 0]);
        assert!(
            info.notes[0].contains("GPU 0 = node-a GPU 0"),
            "{:?}",
            info.notes
        );
    }

    #[test]
    fn memory_percent_becomes_bytes_with_a_total() {
        let mut t = Table::new();
        let e = t.entity(None, "0").unwrap();
        t.put(e, When::At(0.0), Metric::MemTotalBytes, 80e9);
        t.put(e, When::At(0.0), Metric::MemUsedPctOfTotal, 50.0);
        t.put(e, When::At(1.0), Metric::MemUsedPctOfTotal, 25.0);
        let (h, _, _, s) = run(t);
        assert_eq!(s[0].mem_used_bytes, Some(40_000_000_000));
        assert_eq!(s[1].mem_used_bytes, Some(20_000_000_000));
        assert_eq!(h.gpus[0].memory_total_bytes, Some(80_000_000_000));
    }

    #[test]
    fn a_file_with_no_known_value_says_what_is_known() {
        let mut t = Table::new();
        t.unknown("loss");
        t.unknown("lr");
        let e = t.finish("CSV", None, |_| {}).unwrap_err().to_string();
        assert!(e.contains("(it has loss, lr)"), "{e}");
        assert!(e.contains("--columns"), "{e}");
    }

    #[test]
    fn entities_and_points_are_bounded() {
        let mut t = Table::new();
        for i in 0..(MAX_ENTITIES + 10) {
            if let Some(e) = t.entity(None, &format!("GPU-{i}")) {
                t.put(e, When::At(0.0), Metric::UtilPct, 1.0);
            }
        }
        assert_eq!(t.entities_left_out, 10);
        let (_, info, _, _) = run(t);
        assert!(info.notes.iter().any(|n| n.contains("More than 1024 GPUs")));
    }

    #[test]
    fn numbers_with_units() {
        assert_eq!(number("87 %"), Some((87.0, false)));
        assert_eq!(number("1024 MiB"), Some((1_073_741_824.0, true)));
        assert_eq!(number(" 0.812 "), Some((0.812, false)));
        assert_eq!(number("N/A"), None);
        assert_eq!(number("[Not Supported]"), None);
        assert_eq!(number("abc"), None);
        assert_eq!(number("12abc"), None);
        assert_eq!(number("1e400"), None);
    }
}
