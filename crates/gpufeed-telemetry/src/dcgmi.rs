//! `dcgmi dmon` and `nvidia-smi dmon` logs → recording lines.
//!
//! Both print a `#`-prefixed header line of column names and a unit line, repeated every so
//! often, then one row per GPU per poll. dcgmi rows begin with `GPU N` (other entities such as
//! `GPU-I` are skipped); nvidia-smi rows begin with the index (after `Date Time` with `-o DT`).
//! Missing values are `N/A` or `-`. Neither prints a time by default: polls are counted, one
//! interval apart (`-d`), unless a date/time column is present.

use super::smi_csv::{log_header, parse_timestamp, ImpossibleTime};
use super::vocab::Metric;
use super::{LogError, LogInfo, LogLine};
use crate::reading::{GpuStatic, LogHeader, Reading};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Read;

/// Which tool wrote the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavour {
    Dcgmi,
    SmiDmon,
}

/// Means of DCGM profiling fields, which a plain [`Reading`] does not carry.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProfilingMeans {
    /// SM active (SMACT), percent of time.
    pub sm_active_pct: Option<f64>,
    /// SM occupancy (SMOCC), percent.
    pub sm_occupancy_pct: Option<f64>,
    /// Tensor pipe active (TENSO), percent.
    pub tensor_active_pct: Option<f64>,
    /// DRAM active (DRAMA), percent.
    pub dram_active_pct: Option<f64>,
    /// Graphics engine active (GRACT), percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gr_active_pct: Option<f64>,
    /// Utilization (GPUTL, nvidia-smi's), percent: beside SM active, it tells a GPU running
    /// tiny kernels (utilization high, SM active low) from an unused one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub util_pct: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Col {
    Index,
    Date,
    Time,
    /// `nvidia-smi pmon`: the process a row is about.
    Pid,
    /// A metric and the factor that brings a value to its unit, both the vocabulary's.
    Value(Metric, f64),
    Other,
}

/// A column of the header, by the one vocabulary (`nvidia-smi dmon`'s own short names only in
/// its header). dcgmi's `#Entity` is the GPU column (see [`header_cols`]).
fn col_of(name: &str, flavour: Flavour) -> Col {
    let found = match flavour {
        Flavour::Dcgmi => super::vocab::lookup(name),
        Flavour::SmiDmon => super::vocab::lookup_dmon(name),
    };
    let Some(f) = found else {
        return Col::Other;
    };
    match (f.term.metric, flavour) {
        (Metric::Gpu, Flavour::SmiDmon) => Col::Index,
        (Metric::Pid, Flavour::SmiDmon) => Col::Pid,
        (Metric::Date, Flavour::SmiDmon) => Col::Date,
        (Metric::Time, Flavour::SmiDmon) => Col::Time,
        (
            m @ (Metric::UtilPct
            | Metric::GrActivePct
            | Metric::SmActivePct
            | Metric::SmOccupancyPct
            | Metric::TensorActivePct
            | Metric::DramActivePct
            | Metric::MemUtilPct
            | Metric::MemUsedBytes
            | Metric::PowerW
            | Metric::TemperatureC
            | Metric::SmClockMhz
            | Metric::PcieRxBytesPerS
            | Metric::PcieTxBytesPerS),
            _,
        ) => Col::Value(m, f.scale),
        _ => Col::Other,
    }
}

/// Whether the header names a column of this metric.
fn has(cols: &[Col], m: Metric) -> bool {
    cols.iter()
        .any(|c| matches!(c, Col::Value(x, _) if *x == m))
}

fn value(v: &str) -> Option<f64> {
    let v = v.trim();
    if v == "-" || v.eq_ignore_ascii_case("n/a") || v.is_empty() {
        return None;
    }
    v.parse().ok().filter(|x: &f64| x.is_finite())
}

impl Flavour {
    /// The tool's log, as messages name it.
    fn log_name(self) -> &'static str {
        match self {
            Flavour::Dcgmi => "dcgmi dmon",
            Flavour::SmiDmon => "nvidia-smi dmon",
        }
    }
}

/// The columns a `#` header line names; None for a unit line or an empty one.
fn header_cols(rest: &str, flavour: Flavour) -> Option<Vec<Col>> {
    let names: Vec<&str> = rest.split_whitespace().collect();
    let is_units = names
        .first()
        .is_some_and(|n| n.eq_ignore_ascii_case("idx") || n.starts_with("YYYY"));
    if names.is_empty() || is_units {
        return None;
    }
    let mut c: Vec<Col> = names.iter().map(|n| col_of(n, flavour)).collect();
    if flavour == Flavour::Dcgmi {
        // `#Entity` covers two tokens in each row: `GPU 0`.
        c[0] = Col::Index;
    }
    Some(c)
}

/// One row's values.
struct Row {
    sample: Reading,
    index: Option<u32>,
    ts: Option<f64>,
    /// The date and time name no moment (20240230): the row is malformed.
    impossible_time: bool,
    /// SMACT, SMOCC, TENSO, DRAMA, GRACT, GPUTL in percent.
    prof: [Option<f64>; 6],
}

impl Row {
    fn parse(cols: &[Col], vals: &[&str], index: Option<u32>) -> Self {
        let mut s = Reading::default();
        let mut index = index;
        let (mut date, mut time) = (None, None);
        let mut p = [None; 6];
        for (col, v) in cols.iter().zip(vals) {
            match col {
                Col::Index => index = v.trim().parse().ok(),
                Col::Date => date = Some(*v),
                Col::Time => time = Some(*v),
                Col::Pid | Col::Other => {}
                Col::Value(m, k) => {
                    let x = value(v).map(|x| x * k);
                    match m {
                        Metric::UtilPct => s.util_pct = x,
                        Metric::GrActivePct => p[4] = x,
                        Metric::MemUtilPct => s.mem_util_pct = x,
                        Metric::MemUsedBytes => s.mem_used_bytes = x.map(|b| b as u64),
                        Metric::PowerW => s.power_w = x,
                        Metric::TemperatureC => s.temperature_c = x.map(|c| c as u32),
                        Metric::SmClockMhz => s.sm_clock_mhz = x.map(|c| c as u32),
                        Metric::PcieRxBytesPerS => s.pcie_rx_bytes_per_s = x,
                        Metric::PcieTxBytesPerS => s.pcie_tx_bytes_per_s = x,
                        Metric::SmActivePct => p[0] = x,
                        Metric::SmOccupancyPct => p[1] = x,
                        Metric::TensorActivePct => p[2] = x,
                        Metric::DramActivePct => p[3] = x,
                        _ => {}
                    }
                }
            }
        }
        // The busy measure is the best column the header names (SM active, else graphics
        // engine active, else utilization), even where this row's value of it is N/A.
        if has(cols, Metric::UtilPct) {
            p[5] = s.util_pct;
        }
        if has(cols, Metric::SmActivePct) {
            s.util_pct = p[0];
        } else if has(cols, Metric::GrActivePct) {
            s.util_pct = p[4];
        }
        let (ts, impossible_time) = match (date, time) {
            (Some(d), Some(t)) if d.len() == 8 && d.is_ascii() => {
                match parse_timestamp(&format!("{}/{}/{} {}", &d[..4], &d[4..6], &d[6..], t)) {
                    Ok(ts) => (ts, false),
                    Err(ImpossibleTime) => (None, true),
                }
            }
            _ => (None, false),
        };
        Row {
            sample: s,
            index,
            ts,
            impossible_time,
            prof: p,
        }
    }
}

/// The GPUs seen, their profiling sums, and the poll count.
#[derive(Default)]
struct Acc {
    poll: u64,
    seen: std::collections::HashSet<u32>,
    t0: Option<f64>,
    gpus: std::collections::BTreeSet<u32>,
    /// Rows of GPUs past [`super::MAX_GPUS`], left out.
    over_cap: u64,
    prof: BTreeMap<u32, [super::Mean; 6]>,
    /// Rows with a utilization, memory or profiling value.
    with_values: u64,
}

impl Acc {
    /// The row's sample, placed in time (its timestamp, else its poll).
    fn take(&mut self, index: u32, row: Row, interval_s: f64) -> Option<Reading> {
        if !self.gpus.contains(&index) && self.gpus.len() >= super::MAX_GPUS {
            self.over_cap += 1;
            return None;
        }
        let mut s = row.sample;
        if self.seen.contains(&index) {
            self.poll += 1;
            self.seen.clear();
        }
        self.seen.insert(index);
        s.index = index;
        s.t_s = match row.ts {
            Some(t) => t - *self.t0.get_or_insert(t),
            None => self.poll as f64 * interval_s,
        };
        self.gpus.insert(index);
        let p = row.prof;
        if p[..5].iter().any(Option::is_some) {
            let e = self.prof.entry(index).or_default();
            for (acc, v) in e.iter_mut().zip(p) {
                acc.add(v);
            }
        }
        if s.util_pct.is_some() || s.mem_used_bytes.is_some() || p.iter().any(Option::is_some) {
            self.with_values += 1;
        }
        Some(s)
    }

    /// The header's GPUs and each one's profiling means.
    fn finish(self) -> (Vec<GpuStatic>, BTreeMap<u32, ProfilingMeans>) {
        let statics = self
            .gpus
            .into_iter()
            .map(|index| GpuStatic {
                index,
                ..Default::default()
            })
            .collect();
        let means = self
            .prof
            .into_iter()
            .map(|(i, s)| {
                (
                    i,
                    ProfilingMeans {
                        sm_active_pct: s[0].mean(),
                        sm_occupancy_pct: s[1].mean(),
                        tensor_active_pct: s[2].mean(),
                        dram_active_pct: s[3].mean(),
                        gr_active_pct: s[4].mean(),
                        util_pct: s[5].mean(),
                    },
                )
            })
            .collect();
        (statics, means)
    }
}

/// Reads a `dcgmi dmon` or `nvidia-smi dmon` log; returns the synthesized header, read
/// statistics, and per-GPU means of profiling fields (dcgmi).
pub fn read_dmon(
    r: impl Read,
    flavour: Flavour,
    interval_s: Option<f64>,
    mut visit: impl FnMut(&Reading),
) -> Result<(LogHeader, LogInfo, BTreeMap<u32, ProfilingMeans>), LogError> {
    let interval = interval_s.unwrap_or(1.0);
    let mut cols: Option<Vec<Col>> = None;
    let mut info = LogInfo::default();
    let mut any = false;
    let mut acc = Acc::default();
    let mut pending_bad = false;
    let mut busy: Option<Metric> = None;
    let mut pmon = Pmon::default();
    // Rows read, and those with a dash in every value column (dmon had nothing to report).
    let (mut rows_seen, mut dashes_only) = (0u64, 0u64);
    super::each_line(r, |line| {
        let LogLine::Text(buf) = line else {
            any = true;
            info.overlong_line();
            return Ok(());
        };
        if cols.is_none() && super::looks_binary(buf) {
            let article = if flavour == Flavour::Dcgmi { "a" } else { "an" };
            return Err(LogError::Format(super::smi_csv::not_a_log(&format!(
                "{article} {}",
                flavour.log_name()
            ))));
        }
        let complete = buf.last() == Some(&b'\n');
        let text = String::from_utf8_lossy(buf);
        let line = text.trim();
        if line.is_empty() {
            return Ok(());
        }
        any = true;
        if let Some(rest) = line.strip_prefix('#') {
            if let Some(c) = header_cols(rest, flavour) {
                busy = busy_of(&c).or(busy);
                cols = Some(c);
            }
            return Ok(());
        }
        let toks: Vec<&str> = line.split_whitespace().collect();
        if flavour == Flavour::Dcgmi && (toks == ["ID"] || toks[0] == "ID") {
            return Ok(());
        }
        let Some(c) = cols.as_ref() else {
            return Err(LogError::Format(
                "dmon log without a header line (`# gpu ...` / `#Entity ...`)".into(),
            ));
        };
        if pending_bad {
            info.malformed += 1;
            pending_bad = false;
        }
        // Entity tokens: dcgmi rows start `GPU 0`; other entities are skipped.
        let (idx, vals, c): (Option<u32>, &[&str], &[Col]) = match flavour {
            Flavour::Dcgmi => {
                if toks[0] != "GPU" {
                    return Ok(());
                }
                (
                    toks.get(1).and_then(|t| t.parse().ok()),
                    toks.get(2..).unwrap_or(&[]),
                    &c[1..],
                )
            }
            Flavour::SmiDmon => (None, &toks[..], &c[..]),
        };
        if vals.len() != c.len() {
            if complete {
                pending_bad = true;
            } else {
                info.truncated = true;
            }
            return Ok(());
        }
        rows_seen += 1;
        dashes_only += u64::from(all_dashes(c, vals));
        let row = Row::parse(c, vals, idx);
        let Some(index) = row.index.filter(|_| !row.impossible_time) else {
            pending_bad = complete;
            info.truncated |= !complete;
            return Ok(());
        };
        // pmon: a GPU's processes are summed into one reading of it.
        let pid = c.iter().position(|x| *x == Col::Pid).map(|i| vals[i]);
        if let Some(row) = pmon.push(index, pid, row) {
            info.rows += u64::from(acc.emit(row, interval, &mut visit));
        }
        Ok(())
    })?;
    if let Some(row) = pmon.flush() {
        info.rows += u64::from(acc.emit(row, interval, &mut visit));
    }
    if pending_bad {
        info.truncated = true;
    }
    refuse_empty(&info, any, acc.with_values, flavour)?;
    info.notes.extend(read_notes(acc.over_cap, busy));
    info.notes
        .extend(dashes_note(cols.as_deref(), dashes_only, rows_seen));
    let (statics, means) = acc.finish();
    Ok((log_header(statics, interval), info, means))
}

/// A row with a dash in every value column: dmon had nothing to report.
fn all_dashes(c: &[Col], vals: &[&str]) -> bool {
    let mut values = c
        .iter()
        .zip(vals)
        .filter(|(c, _)| matches!(c, Col::Value(..)));
    values.clone().next().is_some() && values.all(|(_, v)| *v == "-")
}

/// Says how many rows held only dashes (not in pmon, where a dash means no process).
fn dashes_note(c: Option<&[Col]>, dashes_only: u64, rows: u64) -> Option<String> {
    (dashes_only > 0 && !c.is_some_and(|c| c.contains(&Col::Pid))).then(|| {
        format!(
            "{dashes_only} of {rows} rows held a dash in every column (nothing measured: the GPU \
             was not reporting); they are no readings, and the figures rest on the other {}.",
            rows - dashes_only
        )
    })
}

/// The busy measure a header's columns give: SM active, else graphics engine active, else
/// utilization.
fn busy_of(c: &[Col]) -> Option<Metric> {
    if has(c, Metric::SmActivePct) {
        Some(Metric::SmActivePct)
    } else if has(c, Metric::GrActivePct) {
        Some(Metric::GrActivePct)
    } else {
        has(c, Metric::UtilPct).then_some(Metric::UtilPct)
    }
}

impl Acc {
    /// Takes a row and hands its sample on; false for a GPU past the cap.
    fn emit(
        &mut self,
        index_row: (u32, Row),
        interval_s: f64,
        visit: &mut impl FnMut(&Reading),
    ) -> bool {
        let (index, row) = index_row;
        match self.take(index, row, interval_s) {
            Some(s) => {
                visit(&s);
                true
            }
            None => false,
        }
    }
}

/// `nvidia-smi pmon` rows of one GPU in one poll (one per process, `-` for none), summed into
/// one reading: the GPU's SM and memory share taken by the processes it ran. Rows of dmon (no
/// pid column) pass straight through.
#[derive(Default)]
struct Pmon {
    group: Option<(u32, Row)>,
    pids: Vec<String>,
}

impl Pmon {
    /// The row ready to be read after this one (a dmon row itself; for pmon, a GPU's reading
    /// once its next one begins).
    fn push(&mut self, index: u32, pid: Option<&str>, row: Row) -> Option<(u32, Row)> {
        let Some(pid) = pid else {
            return Some((index, row));
        };
        // Same GPU, same time, a process not yet seen: one more process of this reading (a
        // `-` row, no process, is a reading of its own).
        let same = self.group.as_ref().is_some_and(|(i, g)| {
            *i == index
                && g.ts == row.ts
                && pid != "-"
                && !self.pids.iter().any(|p| p == pid || p == "-")
        });
        if same {
            if let Some((_, g)) = self.group.as_mut() {
                let add = |a: Option<f64>, b: Option<f64>| match (a, b) {
                    (Some(x), Some(y)) => Some(x + y),
                    (x, y) => x.or(y),
                };
                g.sample.util_pct = add(g.sample.util_pct, row.sample.util_pct);
                g.sample.mem_util_pct = add(g.sample.mem_util_pct, row.sample.mem_util_pct);
            }
            self.pids.push(pid.to_string());
            return None;
        }
        let done = self.flush();
        // A GPU with no process at all: nothing of it ran (`-` reads as 0 %).
        let mut row = row;
        if pid == "-" {
            row.sample.util_pct = Some(0.0);
            row.sample.mem_util_pct = Some(0.0);
        }
        self.group = Some((index, row));
        self.pids = vec![pid.to_string()];
        done
    }

    fn flush(&mut self) -> Option<(u32, Row)> {
        self.pids.clear();
        self.group.take()
    }
}

/// What a reader's notes say of a read dmon log: GPUs left out, the busy measure used.
fn read_notes(over_cap: u64, busy: Option<Metric>) -> Vec<String> {
    let mut notes = Vec::new();
    if over_cap > 0 {
        notes.push(super::gpus_over_cap_note(over_cap));
    }
    if let Some(m) = busy.filter(|m| *m != Metric::UtilPct) {
        notes.push(format!(
            "Busy is {}, the best measure this log holds (utilization, where logged, is kept \
             beside it).",
            m.busy_label()
        ));
    }
    notes
}

/// A log with no line, only overlong lines, no GPU row, or no value in any row is refused.
fn refuse_empty(
    info: &LogInfo,
    any: bool,
    with_values: u64,
    flavour: Flavour,
) -> Result<(), LogError> {
    if !any {
        return Err(LogError::Empty);
    }
    if info.rows == 0 && info.overlong > 0 {
        return Err(LogError::OnlyOverlong(info.overlong));
    }
    if info.rows == 0 {
        return Err(LogError::Format("no GPU rows in the dmon log".into()));
    }
    // The rule of the CSV reader: rows without a single utilization or memory value (all N/A)
    // are no log to judge.
    if with_values == 0 {
        return Err(LogError::NoValues {
            format: flavour.log_name(),
            rows: info.rows,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    type Parsed = (
        LogHeader,
        LogInfo,
        BTreeMap<u32, ProfilingMeans>,
        Vec<Reading>,
    );

    fn read(text: &str, f: Flavour) -> Result<Parsed, LogError> {
        let mut out = Vec::new();
        let (h, i, p) = read_dmon(text.as_bytes(), f, None, |l| out.push(l.clone()))?;
        Ok((h, i, p, out))
    }

    #[test]
    fn rows_of_dashes_are_no_readings_and_are_said() {
        let mut t = String::from("# gpu     sm    mem\n# Idx      %      %\n    0     12      3\n");
        for _ in 0..4 {
            t.push_str("    0      -      -\n");
        }
        let (_, info, _, rows) = read(&t, Flavour::SmiDmon).unwrap();
        assert_eq!(rows.iter().filter(|r| r.util_pct.is_some()).count(), 1);
        assert!(
            info.notes
                .iter()
                .any(|n| n.starts_with("4 of 5 rows held a dash")),
            "{:?}",
            info.notes
        );
    }

    #[test]
    fn all_na_rows_are_refused_as_the_csv_reader_refuses_them() {
        let text = "#Entity   GPUTL  FBUSD\nID\nGPU 0     N/A    N/A\nGPU 0     N/A    N/A\n";
        let e = read(text, Flavour::Dcgmi).unwrap_err();
        assert!(
            matches!(
                e,
                LogError::NoValues {
                    format: "dcgmi dmon",
                    rows: 2
                }
            ),
            "{e:?}"
        );
        let csv = crate::smi_csv::read_smi_csv(
            std::io::Cursor::new("timestamp, utilization.gpu [%], memory.used [MiB]\n2026/12/02 12:00:00, [N/A], [N/A]\n2026/12/02 12:00:01, [N/A], [N/A]\n"),
            &Default::default(),
            |_| {},
        )
        .unwrap_err();
        assert!(matches!(csv, LogError::NoValues { rows: 2, .. }), "{csv:?}");
    }

    #[test]
    fn long_lines_and_binary_are_not_held_or_read() {
        let mut text = "# gpu    sm   mem\n# Idx     %     %\n".to_string();
        text.push_str(&"9".repeat(200_000));
        text.push_str("\n    0    50    10\n");
        let (_, info, _, s) = read(&text, Flavour::SmiDmon).unwrap();
        assert_eq!((info.overlong, info.malformed, s.len()), (1, 1, 1));
        let only = format!("# gpu sm\n{}\n", "x".repeat(100_000));
        assert!(matches!(
            read(&only, Flavour::SmiDmon).unwrap_err(),
            LogError::OnlyOverlong(1)
        ));
        let e = read(
            "\u{1}\u{2}\u{3}\u{4}\u{5}\u{6}\u{7}\u{8}\u{e}\u{f}\u{10}\n",
            Flavour::Dcgmi,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("nor any format gpufeed reads"), "{e}");
    }

    const DCGMI: &str = "\
#Entity   GPUTL  FBUSD  SMACT  SMOCC  TENSO  PCITX      PCIRX
ID
GPU 0     85     40960  0.812  0.400  0.300  1000000    2000000000
GPU 1     10     40960  0.050  N/A    0.000  1000000    1000000
GPU 0     12     40960  0.100  0.100  0.000  1000000    100000000
GPU 1     11     40960  0.050  0.020  0.000  1000000    1000000
#Entity   GPUTL  FBUSD  SMACT  SMOCC  TENSO  PCITX      PCIRX
ID
GPU 0     80     40960  0.790  0.380  0.290  1000000    1900000000
GPU-I 0   5      100    0.1    0.1    0.0    0          0
GPU 1     9      409";

    #[test]
    fn dcgmi_rows_repeated_headers_and_a_cut_end() {
        let (h, info, prof, s) = read(DCGMI, Flavour::Dcgmi).unwrap();
        assert_eq!(info.rows, 5);
        assert!(info.truncated);
        assert_eq!(h.gpus.len(), 2);
        // SM active is the busy measure where the header names it; GPUTL is kept beside it.
        assert!((s[0].util_pct.unwrap() - 81.2).abs() < 1e-9);
        assert_eq!(s[0].mem_used_bytes, Some(40960 << 20));
        assert_eq!(s[0].pcie_rx_bytes_per_s, Some(2e9));
        let t: Vec<f64> = s.iter().filter(|x| x.index == 0).map(|x| x.t_s).collect();
        assert_eq!(t, [0.0, 1.0, 2.0]);
        let p0 = &prof[&0];
        assert!((p0.sm_active_pct.unwrap() - 56.73).abs() < 0.01, "{p0:?}");
        assert!((prof[&1].sm_occupancy_pct.unwrap() - 2.0).abs() < 1e-9);
        assert!((prof[&0].util_pct.unwrap() - 59.0).abs() < 1e-9, "{p0:?}");
    }

    #[test]
    fn the_best_busy_measure_is_taken() {
        let text = "#Entity GRACT SMACT\nID\nGPU 0 0.5 0.4\nGPU 0 0.5 N/A\n";
        let (_, _, p, s) = read(text, Flavour::Dcgmi).unwrap();
        assert_eq!(s[0].util_pct, Some(40.0));
        assert_eq!(s[1].util_pct, None, "no other measure stands in for an N/A");
        assert_eq!(p[&0].gr_active_pct, Some(50.0));
        let text = "#Entity GPUTL GRACT\nID\nGPU 0 90 0.5\n";
        let (_, _, _, s) = read(text, Flavour::Dcgmi).unwrap();
        assert_eq!(s[0].util_pct, Some(50.0));
    }

    const SMI_DMON: &str = "\
# gpu    pwr  gtemp  mtemp     sm    mem    enc    dec    jpg    ofa   mclk   pclk
# Idx      W      C      C      %      %      %      %      %      %    MHz    MHz
    0    310     62     70     97     45      0      0      -      -   2619   1980
    1     90     40     45      -      3      0      0      -      -   2619    345
    0    312     63     70     96     44      0      0      -      -   2619   1980
    1     91     40     45      2      3      0      0      -      -   2619    345
";

    #[test]
    fn smi_dmon_default_columns() {
        let (h, info, prof, s) = read(SMI_DMON, Flavour::SmiDmon).unwrap();
        assert_eq!(info.rows, 4);
        assert!(prof.is_empty());
        assert_eq!(h.gpus.len(), 2);
        assert_eq!(s[0].util_pct, Some(97.0));
        assert_eq!(s[1].util_pct, None);
        assert_eq!(s[0].sm_clock_mhz, Some(1980));
        assert_eq!(s[2].t_s, 1.0);
    }

    #[test]
    fn smi_pmon_sums_a_gpus_processes_per_reading() {
        let text = "\
# gpu         pid  type    sm    mem    enc    dec    command
# Idx           #   C/G     %      %      %      %    name
    0       12345     C    45     20      -      -    python
    0       12346     C    30     10      -      -    python
    1           -     -     -      -      -      -    -
    0       12345     C    40     20      -      -    python
    0       12346     C     -      5      -      -    python
    1           -     -     -      -      -      -    -
    1           -     -     -      -      -      -    -
";
        let (h, info, _, s) = read(text, Flavour::SmiDmon).unwrap();
        assert_eq!(h.gpus.len(), 2);
        assert_eq!(info.rows, 5, "{s:?}");
        let g0: Vec<Option<f64>> = s
            .iter()
            .filter(|x| x.index == 0)
            .map(|x| x.util_pct)
            .collect();
        assert_eq!(g0, [Some(75.0), Some(40.0)]);
        assert_eq!(s[0].mem_util_pct, Some(30.0));
        let g1: Vec<f64> = s.iter().filter(|x| x.index == 1).map(|x| x.t_s).collect();
        assert_eq!(g1, [0.0, 1.0, 2.0]);
        assert_eq!(s[1].util_pct, Some(0.0));
    }

    #[test]
    fn smi_dmon_with_date_time_and_pci() {
        let text = "\
#Date       Time        gpu     sm    mem  rxpci  txpci
#YYYYMMDD   HH:MM:SS    Idx      %      %   MB/s   MB/s
 20261202   12:00:00      0     80     30   9000    100
 20261202   12:00:05      0     10     30    100    100
";
        let (_, _, _, s) = read(text, Flavour::SmiDmon).unwrap();
        assert_eq!(s[1].t_s, 5.0);
        assert_eq!(s[0].pcie_rx_bytes_per_s, Some(9e9));
    }

    #[test]
    fn a_row_on_a_date_that_never_was_is_malformed() {
        let text = "\
#Date       Time        gpu     sm    mem
 20240228   12:00:00      0     80     30
 20240230   12:00:01      0     90     30
 20240228   12:00:02      0     10     30
";
        let (_, info, _, s) = read(text, Flavour::SmiDmon).unwrap();
        assert_eq!((s.len(), info.malformed), (2, 1));
        assert_eq!(s[1].t_s, 2.0);
    }

    #[test]
    fn a_date_of_eight_bytes_but_not_eight_digits_is_no_time() {
        // `é` straddles byte 4: the date is not sliced into year, month and day.
        let text = "#Date       Time        gpu     sm    mem\n 202\u{e9}xyz   12:00:00      0     80     30\n";
        let (_, _, _, s) = read(text, Flavour::SmiDmon).unwrap();
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn no_header_or_empty() {
        assert!(matches!(
            read("", Flavour::Dcgmi).unwrap_err(),
            LogError::Empty
        ));
        assert!(read("    0 1 2\n", Flavour::SmiDmon).is_err());
    }
}
