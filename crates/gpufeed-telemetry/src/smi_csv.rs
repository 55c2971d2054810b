//! `nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits] -l N` logs → recording lines.
//!
//! Accepts any subset and order of fields, units in the header (`utilization.gpu [%]`) and/or in
//! the values (`87 %`, `1024 MiB`), `[N/A]` / `[Not Supported]`, padding, several GPUs interleaved
//! (told apart by `index`, `uuid` or `pci.bus_id`, else by rows of the same poll), repeated header
//! lines and a truncated last line. Without a header, fields come from `columns` or are guessed
//! from the units in the values.

use super::smi_layout::{Layout, PollCursor, Probe};
use super::{LogError, LogInfo, LogLine, Piece};
use crate::reading::{GpuStatic, LogHeader, Reading};
use rustc_hash::FxHashMap;
use std::io::{Read, Seek, SeekFrom};

/// Options for logs that do not describe themselves.
#[derive(Debug, Clone, Default)]
pub struct CsvOptions {
    /// Field names for a log written with `noheader` (the `--query-gpu` list).
    pub columns: Option<Vec<String>>,
    /// Seconds between polls when the log has no timestamp column (`-l N`); default 1.
    pub interval_s: Option<f64>,
}

/// Fields gpufeed understands (canonical names; aliases map onto them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Timestamp,
    Index,
    Uuid,
    BusId,
    Name,
    UtilGpu,
    UtilMem,
    MemUsed,
    MemTotal,
    MemFree,
    PcieGen,
    PcieGenMax,
    PcieWidth,
    PcieWidthMax,
    Throttle,
    ThrottleBit(u64),
    Temperature,
    Power,
    PowerLimit,
    SmClock,
    Other,
}

impl Field {
    /// A number read with [`number`] (in the column's unit): not the time, an index, a name,
    /// an id nor throttle reasons.
    fn is_measure(self) -> bool {
        !matches!(
            self,
            Field::Timestamp
                | Field::Index
                | Field::Uuid
                | Field::BusId
                | Field::Name
                | Field::Throttle
                | Field::ThrottleBit(_)
                | Field::Other
        )
    }
}

/// A column's field, by the one vocabulary ([`super::vocab`]): nvidia-smi's `--query-gpu` names
/// and a logging script's own (`gpu_index`, `utilization_gpu_percent`, `mem_used_mib`); the
/// other tools' names are not this reader's, but for a GPU column (`device`).
fn field_of(name: &str) -> Field {
    use super::vocab::{Family, Metric};
    let Some(f) = super::vocab::lookup(name) else {
        return Field::Other;
    };
    if !matches!(f.term.family, Family::SmiQuery | Family::Common) && f.term.metric != Metric::Gpu {
        return Field::Other;
    }
    match f.term.metric {
        // Seconds since the logger started (`elapsed_sec`): a time of any origin is all the
        // reader needs.
        Metric::Time | Metric::RelativeS => Field::Timestamp,
        Metric::Gpu => Field::Index,
        Metric::Uuid => Field::Uuid,
        Metric::BusId => Field::BusId,
        Metric::Name => Field::Name,
        Metric::UtilPct => Field::UtilGpu,
        Metric::MemUtilPct => Field::UtilMem,
        Metric::MemUsedBytes => Field::MemUsed,
        Metric::MemTotalBytes => Field::MemTotal,
        Metric::MemFreeBytes => Field::MemFree,
        Metric::PcieGen => Field::PcieGen,
        Metric::PcieGenMax => Field::PcieGenMax,
        Metric::PcieWidth => Field::PcieWidth,
        Metric::PcieWidthMax => Field::PcieWidthMax,
        Metric::ThrottleReasons => Field::Throttle,
        Metric::ThrottleReason => {
            super::vocab::throttle_bit(name).map_or(Field::Other, Field::ThrottleBit)
        }
        Metric::TemperatureC => Field::Temperature,
        Metric::PowerW => Field::Power,
        Metric::PowerLimitW => Field::PowerLimit,
        Metric::SmClockMhz => Field::SmClock,
        _ => Field::Other,
    }
}

/// The unit a column's values are in when neither the header nor the values say it: the one
/// the vocabulary gives its name (nvidia-smi's memory in MiB, a script's `_mib`, `_ms`).
fn vocab_unit(name: &str) -> Option<String> {
    let f = super::vocab::lookup(name)?;
    super::vocab::unit_scale(f.unit)?;
    Some(f.unit.to_string())
}

/// Is this line a header (names only, none of them a value, one of them a known field)?
fn is_header(fields: &[&str]) -> bool {
    let names_only = fields.iter().all(|f| {
        let n = f.split('[').next().unwrap_or("").trim();
        !n.is_empty()
            && n.chars().all(|c| {
                c.is_ascii_alphanumeric()
                    || matches!(c, '.' | '_' | '-' | ' ' | '(' | ')' | '%' | '/')
            })
            && n.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            && !(n.starts_with("GPU-") || n.eq_ignore_ascii_case("n/a"))
            && n.parse::<f64>().is_err()
    });
    names_only && fields.iter().any(|f| field_of(f) != Field::Other)
}

/// A line that reads as an nvidia-smi CSV header, standard or a logging script's own (one
/// field when it is an nvidia-smi name: `utilization.gpu [%]` from a loop that queries it alone).
pub fn looks_like_header(line: &str) -> bool {
    let fields = split(line);
    let lone_smi_name = fields.len() == 1
        && fields[0].contains('.')
        && !matches!(
            field_of(fields[0]),
            Field::Other | Field::Index | Field::Timestamp
        );
    (fields.len() >= 2 || lone_smi_name) && is_header(&fields)
}

/// A value without padding and unit; `None` for `[N/A]`, `[Not Supported]`, `N/A`, empty.
fn clean(v: &str) -> Option<&str> {
    let v = super::fast::trim(v);
    if v.is_empty() || v.starts_with('[') || (v.len() == 3 && v.eq_ignore_ascii_case("n/a")) {
        return None;
    }
    Some(v)
}

/// Units a value may carry after its number.
const VALUE_UNITS: [&str; 15] = [
    "%", "W", "MiB", "GiB", "KiB", "MB", "GB", "KB", "kB", "B", "C", "°C", "MHz", "s", "ms",
];

/// What a number with each of [`VALUE_UNITS`] after it is multiplied by.
static VALUE_UNIT_SCALES: std::sync::LazyLock<[f64; VALUE_UNITS.len()]> =
    std::sync::LazyLock::new(|| VALUE_UNITS.map(unit_scale));

/// A number with an optional unit; MiB/GiB/KiB/MB/GB values become bytes.
fn number(v: &str, unit_from_header: Option<&str>) -> Option<f64> {
    let v = clean(v)?;
    if let Some((x, k)) = super::fast::decimal_prefix(v.as_bytes()) {
        let unit = match super::fast::trim(&v[k..]) {
            "" => unit_from_header.unwrap_or(""),
            u if VALUE_UNITS.contains(&u) => u,
            _ => return None,
        };
        return Some(x * unit_scale(unit));
    }
    number_careful(v, unit_from_header)
}

/// [`number`] of a cleaned value the fast path does not take (a sign, an exponent).
fn number_careful(v: &str, unit_from_header: Option<&str>) -> Option<f64> {
    // The longest number at the start (an exponent is part of it: `1e20 MiB` is not 1 byte).
    let mut k = v
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '+' | '-' | 'e' | 'E')))
        .unwrap_or(v.len());
    while k > 0 && v[..k].parse::<f64>().is_err() {
        k -= 1;
    }
    let (num, unit) = match v[k..].trim() {
        "" => (&v[..k], unit_from_header.unwrap_or("")),
        // Only a unit after the number: `0x50 %` or `12abc` is not a reading of 0 or 12.
        u if VALUE_UNITS.contains(&u) => (&v[..k], u),
        _ => return None,
    };
    let x: f64 = num.parse().ok()?;
    Some(x * unit_scale(unit))
}

/// What a value in `unit` is multiplied by: sizes become bytes. Only sizes are converted
/// here: a time's unit is `parse_time_value`'s.
fn unit_scale(unit: &str) -> f64 {
    let unit = unit.trim_matches(|c| c == '[' || c == ']');
    match unit {
        "MiB" | "GiB" | "KiB" | "MB" | "GB" | "KB" | "kB" => {
            super::vocab::unit_scale(unit).unwrap_or(1.0)
        }
        _ => 1.0,
    }
}

fn header_unit(name: &str) -> Option<String> {
    let open = name.find('[')?;
    let close = name[open..].find(']')? + open;
    Some(name[open + 1..close].trim().to_string())
}

/// A timestamp of the shape of a date and time that names no moment (`2024/02/30 12:00:00`,
/// `25:00:00`): the line it is on is malformed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ImpossibleTime;

/// The date-and-time layouts a timestamp may have: nvidia-smi's `2026/12/02 12:00:00.123`, and
/// ISO 8601 with `-` and `T` (or either separator with the other); fractional seconds optional.
/// Then what scripts write: `2026-12-02_12:00:00` and `20261202-120000` (file-name safe), and C's
/// `ctime` (`Wed Dec  2 12:00:00 2026`, Python's `time.ctime()`). A date with the year last is
/// not read: `03-11-2026` is the 3rd of November or the 11th of March by country (a Jetson
/// script's log of March 11-12 read day first spans a month), and a guess made row by row would
/// jump months between rows.
const TIME_FORMATS: [&str; 7] = [
    "%Y/%m/%d %H:%M:%S%.f",
    "%Y-%m-%dT%H:%M:%S%.f",
    "%Y-%m-%d %H:%M:%S%.f",
    "%Y/%m/%dT%H:%M:%S%.f",
    "%Y-%m-%d_%H:%M:%S%.f",
    "%Y%m%d-%H%M%S%.f",
    "%a %b %e %H:%M:%S %Y",
];

/// The first formats of [`TIME_FORMATS`], the year first and `/` or `-` after it (a value of
/// digits alone out of range in the compact layout is no date, not an impossible one).
const YEAR_FIRST_FORMATS: usize = 5;

/// `2026/12/02 12:00:00.123`, `2026-12-02T12:00:00.123456+01:00` or `…Z` → seconds since the
/// Unix epoch (a zone offset `Z`, `±HH:MM`, `±HHMM` or `±HH` right after the seconds is applied;
/// without one only differences matter). `Ok(None)` for what is not a date and time (`[N/A]`, a
/// number); [`ImpossibleTime`] for one that names no moment.
pub(crate) fn parse_timestamp(v: &str) -> Result<Option<f64>, ImpossibleTime> {
    let Some(v) = clean(v) else {
        return Ok(None);
    };
    if let Some(t) = super::fast::timestamp(v) {
        return Ok(Some(t));
    }
    if !super::fast::may_be_date(v) {
        return Ok(None);
    }
    parse_timestamp_careful(v)
}

/// [`parse_timestamp`] of a cleaned value, by `chrono` in each layout in turn.
fn parse_timestamp_careful(v: &str) -> Result<Option<f64>, ImpossibleTime> {
    use chrono::format::{ParseErrorKind, Parsed, StrftimeItems};
    let mut impossible = false;
    for (i, f) in TIME_FORMATS.iter().enumerate() {
        let (t, zone) = match chrono::NaiveDateTime::parse_and_remainder(v, f) {
            Ok(x) => x,
            Err(e) => {
                // Only a year-first layout says a value names no moment: `40` is out of range
                // as a day first, and no date at all.
                impossible |= i < YEAR_FIRST_FORMATS && e.kind() == ParseErrorKind::OutOfRange;
                continue;
            }
        };
        let offset_s = if zone.is_empty() {
            0
        } else if zone.starts_with(['+', '-', 'Z']) {
            let mut p = Parsed::new();
            let zone_ok = chrono::format::parse(&mut p, zone, StrftimeItems::new("%#z")).is_ok();
            match p.offset.filter(|_| zone_ok) {
                Some(o) => o,
                None => return Ok(None),
            }
        } else {
            return Ok(None);
        };
        let t = t.and_utc();
        let s = t.timestamp() - i64::from(offset_s);
        return Ok(Some(s as f64 + f64::from(t.timestamp_subsec_nanos()) / 1e9));
    }
    if impossible {
        Err(ImpossibleTime)
    } else {
        Ok(None)
    }
}

/// A timestamp column's value: a date and time, or Unix-epoch seconds (milliseconds when the
/// header says `ms` or the number is too large for seconds).
pub(crate) fn parse_time_value(v: &str, unit: Option<&str>) -> Result<Option<f64>, ImpossibleTime> {
    // A plain decimal (epoch seconds, the common case of a script's log) is never a date and
    // time: it skips the date layouts.
    let plain = clean(v).and_then(super::fast::decimal);
    if plain.is_none() {
        if let Some(t) = parse_timestamp(v)? {
            return Ok(Some(t));
        }
        if let Some(t) = clean(v).and_then(time_of_day) {
            return Ok(Some(t));
        }
    }
    let x = plain.or_else(|| clean(v).and_then(|v| v.parse::<f64>().ok()));
    Ok(x.and_then(|x| time_of_decimal(x, unit == Some("ms"))))
}

/// A timestamp column's number as seconds: epoch seconds, or milliseconds when the header says
/// so (`in_ms`) or the number is too large for seconds; `None` for one below zero or not finite.
fn time_of_decimal(x: f64, in_ms: bool) -> Option<f64> {
    if !x.is_finite() || x < 0.0 {
        return None;
    }
    Some(if in_ms {
        x / 1000.0
    } else {
        super::epoch_seconds(x)
    })
}

/// A time of day without a date (`21:54:35.000`, as xpu-smi dump writes it): seconds since
/// midnight ([`Polls`] carries a log across midnight).
fn time_of_day(v: &str) -> Option<f64> {
    let mut parts = v.splitn(3, ':');
    let (h, m, s) = (parts.next()?, parts.next()?, parts.next()?);
    let digits = |x: &str, n: usize| x.len() == n && x.bytes().all(|b| b.is_ascii_digit());
    if !(digits(h, 2) || digits(h, 1)) || !digits(m, 2) || !s.get(..2).is_some_and(|x| digits(x, 2))
    {
        return None;
    }
    let (h, m): (u32, u32) = (h.parse().ok()?, m.parse().ok()?);
    let s: f64 = s.parse().ok()?;
    (h < 24 && m < 60 && (0.0..61.0).contains(&s)).then(|| f64::from(h * 3600 + m * 60) + s)
}

/// Seconds in a day: a time of day that falls back by more than half of one crossed midnight.
const DAY_S: f64 = 86_400.0;

fn split(line: &str) -> Vec<&str> {
    // A spreadsheet quotes every field ("timestamp","utilization.gpu [%]"): the quotes go.
    line.split(',')
        .map(|f| {
            let f = f.trim();
            f.strip_prefix('"')
                .and_then(|q| q.strip_suffix('"'))
                .map_or(f, str::trim)
        })
        .collect()
}

/// Guesses the fields of a header-less row from units in its values.
fn guess_columns(values: &[&str]) -> Option<Vec<String>> {
    let mut out = vec![String::from("other"); values.len()];
    let mut pct = Vec::new();
    let mut mib = Vec::new();
    for (i, v) in values.iter().enumerate() {
        let v = v.trim();
        if parse_timestamp(v) != Ok(None) {
            out[i] = "timestamp".into();
        } else if v.ends_with('%') {
            pct.push(i);
        } else if v.ends_with("MiB") {
            mib.push(i);
        } else if v.ends_with(" W") {
            out[i] = "power.draw".into();
        } else if v.ends_with("MHz") && !out.iter().any(|o| o == "clocks.sm") {
            out[i] = "clocks.sm".into();
        } else if v.starts_with("GPU-") {
            out[i] = "uuid".into();
        } else if v.len() >= 12 && v.matches(':').count() == 2 && v.contains('.') {
            out[i] = "pci.bus_id".into();
        }
    }
    if pct.is_empty() {
        return None;
    }
    out[pct[0]] = "utilization.gpu".into();
    if let Some(&i) = pct.get(1) {
        out[i] = "utilization.memory".into();
    }
    let m: Vec<f64> = mib
        .iter()
        .filter_map(|&i| number(values[i], None))
        .collect();
    match mib.len() {
        1 => out[mib[0]] = "memory.used".into(),
        2 if m.len() == 2 => {
            let (used, total) = if m[0] <= m[1] { (0, 1) } else { (1, 0) };
            out[mib[used]] = "memory.used".into();
            out[mib[total]] = "memory.total".into();
        }
        3 if m.len() == 3 => {
            // The one equal to the sum of the other two is the total; the order after it is
            // the documented free, used unless the values say otherwise.
            let t = (0..3).find(|&k| {
                let others: f64 = (0..3).filter(|&j| j != k).map(|j| m[j]).sum();
                (others - m[k]).abs() <= m[k] * 0.02 + 2.0 * 1048576.0
            })?;
            let rest: Vec<usize> = (0..3).filter(|&j| j != t).collect();
            out[mib[t]] = "memory.total".into();
            out[mib[rest[0]]] = "memory.free".into();
            out[mib[rest[1]]] = "memory.used".into();
        }
        _ => {}
    }
    Some(out)
}

struct Columns {
    fields: Vec<Field>,
    units: Vec<Option<String>>,
    /// What a plain number in each column is multiplied by: its header unit's scale.
    scales: Vec<f64>,
    /// The timestamp column's header says `ms`.
    time_in_ms: bool,
    /// Names of columns whose field an earlier column already holds (not read).
    duplicates: Vec<String>,
}

impl Columns {
    fn new(names: &[String]) -> Self {
        let mut fields: Vec<Field> = names.iter().map(|n| field_of(n)).collect();
        // Two columns of one field (`gpu` and `index` in one script's header, a field queried
        // twice): the first is read, the others are not, and a note says so.
        let mut duplicates = Vec::new();
        for i in 0..fields.len() {
            if fields[i] != Field::Other && fields[..i].contains(&fields[i]) {
                fields[i] = Field::Other;
                duplicates.push(names[i].trim().to_string());
            }
        }
        let units = names
            .iter()
            .zip(&fields)
            .map(|(n, f)| {
                // nvidia-smi writes memory in MiB: a header without a unit (nounits, or a
                // script's own names) means what the vocabulary says, MiB for memory.
                header_unit(n).or_else(|| (*f != Field::Other).then(|| vocab_unit(n)).flatten())
            })
            .collect::<Vec<_>>();
        let scales = units
            .iter()
            .map(|u| unit_scale(u.as_deref().unwrap_or("")))
            .collect();
        let time_in_ms = fields
            .iter()
            .zip(&units)
            .any(|(f, u)| *f == Field::Timestamp && u.as_deref() == Some("ms"));
        Columns {
            fields,
            units,
            scales,
            time_in_ms,
            duplicates,
        }
    }
}

/// What a row's columns give only together: free memory (used is total less free) and the
/// per-reason throttle columns' bits.
#[derive(Default)]
struct Partial {
    mem_free: Option<u64>,
    bits: Option<u64>,
}

/// One data row's values, by column.
#[derive(Default)]
struct Row {
    sample: Reading,
    ts: Option<f64>,
    /// The timestamp names no moment (2024/02/30): the row is malformed.
    impossible_time: bool,
    /// UUID or PCI bus id, when there is no index column.
    id_key: Option<String>,
    index: Option<u32>,
    name: Option<String>,
    mem_total: Option<u64>,
    gen_max: Option<u32>,
    width_max: Option<u32>,
    power_limit: Option<f64>,
}

impl Row {
    /// Parses `fields` into `r`, whatever it held before (one row reused from line to line:
    /// a row is over 300 bytes, and moving a new one from function to function was a fifth
    /// of the time spent on a long log).
    fn parse_into(c: &Columns, fields: &[&str], r: &mut Row) {
        *r = Row::default();
        let mut p = Partial::default();
        for (k, v) in fields.iter().enumerate().take(c.fields.len()) {
            r.field(c, k, v, &mut p);
        }
        r.finish(p);
    }

    /// Reads column `k`'s value `v` (trimmed, unquoted).
    fn field(&mut self, c: &Columns, k: usize, v: &str, p: &mut Partial) {
        let (f, u) = (c.fields[k], c.units[k].as_deref());
        let r = self;
        match f {
            Field::Timestamp => match parse_time_value(v, u) {
                Ok(t) => r.ts = t,
                Err(ImpossibleTime) => r.impossible_time = true,
            },
            Field::Index => r.index = clean(v).and_then(|v| v.parse().ok()),
            Field::Uuid | Field::BusId => {
                if r.id_key.is_none() {
                    r.id_key = clean(v).map(str::to_string);
                }
            }
            Field::Name => r.name = clean(v).map(str::to_string),
            Field::Throttle => {
                r.sample.throttle_reasons = clean(v).and_then(|v| {
                    let h = v.trim_start_matches("0x").trim_start_matches("0X");
                    u64::from_str_radix(h, 16).ok()
                })
            }
            Field::ThrottleBit(bit) => {
                if let Some(v) = clean(v) {
                    let b = p.bits.get_or_insert(0);
                    if v.eq_ignore_ascii_case("active") {
                        *b |= bit;
                    }
                }
            }
            Field::Other => {}
            // A plain decimal (most values of a long log) is its number in the header's unit,
            // as `number` reads it, without looking for a unit after it.
            _ => {
                let x = match super::fast::decimal_prefix(v.as_bytes()) {
                    Some((x, n)) if n == v.len() => Some(x * c.scales[k]),
                    _ => number(v, u),
                };
                r.measure(f, x, p);
            }
        }
    }

    /// Reads column `k`'s value `v` (trimmed ASCII) as [`Row::field`] reads it when it is a
    /// measure's plain decimal and unit (`45 %`, `40000 MiB`) or an index's digits, without
    /// making it text first; false for any other value (left to `field`).
    fn plain_value(&mut self, c: &Columns, k: usize, v: &[u8], p: &mut Partial) -> bool {
        let f = c.fields[k];
        if f == Field::Index {
            if !(1..=9).contains(&v.len()) || !v.iter().all(u8::is_ascii_digit) {
                return false;
            }
            let i = v.iter().fold(0u32, |i, d| i * 10 + u32::from(d - b'0'));
            self.index = Some(i);
            return true;
        }
        if !f.is_measure() {
            return false;
        }
        let Some((x, n)) = super::fast::decimal_prefix(v) else {
            return false;
        };
        // As `number`: no unit is the header's, a unit it knows is its own, another is no value.
        let unit = v[n..].trim_ascii();
        let scale = if unit.is_empty() {
            Some(c.scales[k])
        } else {
            VALUE_UNITS
                .iter()
                .position(|u| u.as_bytes() == unit)
                .map(|at| VALUE_UNIT_SCALES[at])
        };
        self.measure(f, scale.map(|s| x * s), p);
        true
    }

    /// The value `x` of a measure field `f` (one [`Field::is_measure`] says is), in its place.
    fn measure(&mut self, f: Field, x: Option<f64>, p: &mut Partial) {
        let s = &mut self.sample;
        match f {
            Field::UtilGpu => s.util_pct = x,
            Field::UtilMem => s.mem_util_pct = x,
            Field::MemUsed => s.mem_used_bytes = x.map(|x| x as u64),
            Field::MemTotal => self.mem_total = x.map(|x| x as u64),
            Field::MemFree => p.mem_free = x.map(|x| x as u64),
            Field::PcieGen => s.pcie_gen = x.map(|x| x as u32),
            Field::PcieGenMax => self.gen_max = x.map(|x| x as u32),
            Field::PcieWidth => s.pcie_width = x.map(|x| x as u32),
            Field::PcieWidthMax => self.width_max = x.map(|x| x as u32),
            Field::Temperature => s.temperature_c = x.map(|x| x as u32),
            Field::Power => s.power_w = x,
            Field::PowerLimit => self.power_limit = x,
            Field::SmClock => s.sm_clock_mhz = x.map(|x| x as u32),
            _ => debug_assert!(!f.is_measure(), "{f:?} is a measure with no place"),
        }
    }

    /// What is known once every column is read: throttle reasons from per-reason columns,
    /// memory used from total and free.
    fn finish(&mut self, p: Partial) {
        let s = &mut self.sample;
        if s.throttle_reasons.is_none() {
            s.throttle_reasons = p.bits;
        }
        if s.mem_used_bytes.is_none() {
            if let (Some(t), Some(f)) = (self.mem_total, p.mem_free) {
                s.mem_used_bytes = Some(t.saturating_sub(f));
            }
        }
    }

    /// What layout detection looks at.
    fn probe(&self) -> Probe {
        let s = &self.sample;
        Probe {
            ts: self.ts,
            mem_mib: s.mem_used_bytes.map(|b| b as f64 / 1048576.0),
            power_w: s.power_w,
            temperature_c: s.temperature_c.map(f64::from),
            name: self.name.as_deref().map(|n| {
                use std::hash::{Hash, Hasher};
                let mut h = std::collections::hash_map::DefaultHasher::new();
                n.hash(&mut h);
                h.finish()
            }),
        }
    }

    /// A row with none of utilization, memory or throttle reasons carries nothing to diagnose.
    fn has_values(&self) -> bool {
        let s = &self.sample;
        s.util_pct.is_some() || s.mem_used_bytes.is_some() || s.throttle_reasons.is_some()
    }
}

/// What each byte is in a plain row ([`plain_row`]): part of a field (printable ASCII but the
/// quote, and the tab), the end of one (comma, CR, LF), or what no plain row holds.
const PLAIN_BYTE: [u8; 256] = {
    let mut t = [OTHER; 256];
    let mut b = b' ';
    while b <= b'~' {
        t[b as usize] = FIELD;
        b += 1;
    }
    t[b'\t' as usize] = FIELD;
    t[b'"' as usize] = OTHER;
    t[b',' as usize] = END;
    t[b'\r' as usize] = END;
    t[b'\n' as usize] = END;
    t
};
const FIELD: u8 = 0;
const END: u8 = 1;
const OTHER: u8 = 2;

/// One whole row at the start of `b` read into `r`, as [`CsvRead::line`] reads a row, when it
/// is a plain one: a digit first; printable ASCII (and tabs), no quote; as many fields as `c`
/// has columns; ended by `\n` or `\r\n` within [`super::MAX_LOG_LINE_BYTES`]; a time that names
/// a moment and a value to diagnose. Its length with the line break; `None` for any other line
/// (read line by line instead, which reads a plain row the same: a test holds it). Each
/// field's value is read by the very code `line` reads it with: what is saved is decoding,
/// trimming and splitting the line first, and finding its end apart.
fn plain_row(c: &Columns, b: &[u8], r: &mut Row) -> Option<usize> {
    if !b.first()?.is_ascii_digit() {
        return None;
    }
    let last = c.fields.len().checked_sub(1)?;
    *r = Row::default();
    let mut p = Partial::default();
    let mut i = 0;
    for (k, &f) in c.fields.iter().enumerate() {
        let start = i;
        // A number column's plain decimal right up to the field's end (most values of a long
        // log) is read as `field` reads it, in the same pass that finds the end.
        let mut x = None;
        if f == Field::Timestamp || f.is_measure() {
            if let Some((v, n)) = super::fast::decimal_prefix(&b[i..]) {
                if b.get(i + n)
                    .is_some_and(|&e| PLAIN_BYTE[usize::from(e)] == END)
                {
                    (x, i) = (Some(v), i + n);
                }
            }
        }
        if x.is_none() {
            while PLAIN_BYTE[usize::from(*b.get(i)?)] == FIELD {
                i += 1;
            }
        }
        // A comma ends every field but the last; the line's end, only the last.
        match (b[i], k == last) {
            (b',', false) | (b'\r' | b'\n', true) => {}
            _ => return None,
        }
        match x {
            _ if f == Field::Other => {}
            Some(x) if f == Field::Timestamp => r.ts = time_of_decimal(x, c.time_in_ms),
            Some(x) => r.measure(f, Some(x * c.scales[k]), &mut p),
            None => {
                let v = b[start..i].trim_ascii();
                if !r.plain_value(c, k, v, &mut p) {
                    r.field(c, k, std::str::from_utf8(v).ok()?, &mut p);
                }
            }
        }
        if k < last {
            i += 1;
        }
    }
    r.finish(p);
    let n = match (b[i], b.get(i + 1)) {
        (b'\n', _) => i + 1,
        (b'\r', Some(b'\n')) => i + 2,
        _ => return None,
    };
    (n <= super::MAX_LOG_LINE_BYTES && !r.impossible_time && r.has_values()).then_some(n)
}

/// Which GPU a row is, and when: from its index or id column, else from its place in the
/// [`Layout`]; time from the timestamps, else the poll count times the interval.
struct Polls {
    layout: Layout,
    ids: FxHashMap<String, u32>,
    t0: Option<f64>,
    rows: u64,
    poll: u64,
    cursor: PollCursor,
    seen_in_poll: Vec<u32>,
    /// Days added to times of day (a log without dates that ran past midnight), and the last
    /// such time.
    days_s: f64,
    last_tod: Option<f64>,
}

impl Default for Polls {
    fn default() -> Self {
        Polls {
            layout: Layout::Column,
            ids: FxHashMap::default(),
            t0: None,
            rows: 0,
            poll: 0,
            cursor: PollCursor::default(),
            seen_in_poll: Vec::new(),
            days_s: 0.0,
            last_tod: None,
        }
    }
}

impl Polls {
    /// The row's GPU index and time since the first row, in seconds.
    #[inline]
    fn place(&mut self, row: &Row, interval_s: f64) -> (u32, f64) {
        let mut ts = row.ts;
        // Times under a day are times of day (or seconds since a logger started, which never
        // fall back by hours): one that falls back by over half a day crossed midnight.
        if let Some(t) = ts.filter(|&t| t < DAY_S) {
            if self.last_tod.is_some_and(|last| t < last - DAY_S / 2.0) {
                self.days_s += DAY_S;
            }
            self.last_tod = Some(t);
            ts = Some(t + self.days_s);
        }
        let idx = match (row.index, &row.id_key, &self.layout) {
            (Some(i), _, _) => i,
            (None, Some(k), _) => match self.ids.get(k) {
                Some(&i) => i,
                None => {
                    let next = self.ids.len() as u32;
                    self.ids.insert(k.clone(), next);
                    next
                }
            },
            // One GPU: every row is it (the cursor's state answers nothing else).
            (None, None, Layout::Bursts { n: 0 | 1, .. }) => 0,
            (None, None, Layout::Bursts { n, gap_s }) => {
                self.cursor.place(*n, *gap_s, &row.probe()).0
            }
            (None, None, Layout::Cycle { n }) => (self.rows % u64::from(*n.max(&1))) as u32,
            (None, None, Layout::Pooled | Layout::Column) => 0,
        };
        self.rows += 1;
        // Polls are counted only where there is no time to place a row by (held for every
        // timed row, the GPUs seen grew by one number per row: 40 MB over 10M rows).
        if ts.is_none() {
            if self.seen_in_poll.contains(&idx) {
                self.poll += 1;
                self.seen_in_poll.clear();
            }
            self.seen_in_poll.push(idx);
        }
        let t_s = match ts {
            Some(t) => t - *self.t0.get_or_insert(t),
            None => self.poll as f64 * interval_s,
        };
        (idx, t_s)
    }
}

/// Keeps the first name and id and the latest totals and limits the log showed for a GPU.
fn merge_static(st: &mut GpuStatic, row: &mut Row) {
    if st.name.is_none() {
        st.name = row.name.take();
    }
    st.memory_total_bytes = row.mem_total.or(st.memory_total_bytes);
    st.pcie_max_gen = row.gen_max.or(st.pcie_max_gen);
    st.pcie_max_width = row.width_max.or(st.pcie_max_width);
    st.power_limit_w = row.power_limit.or(st.power_limit_w);
    if st.uuid.is_none() {
        st.uuid = row.id_key.take();
    }
}

/// The columns of a file without a header: guessed from the first data row's units.
fn guessed_columns(buf: &[u8], line: &str, fields: &[&str]) -> Result<Columns, LogError> {
    if super::looks_binary(buf) {
        return Err(LogError::Format(not_a_log("an nvidia-smi CSV")));
    }
    let guessed = guess_columns(fields).ok_or_else(|| {
        if !line.contains(',') {
            return LogError::Format(not_a_log("an nvidia-smi CSV"));
        }
        LogError::Format(
            "nvidia-smi CSV without a header and without units in the values: pass the \
             --query-gpu field list with --columns (or log without `noheader`)"
                .into(),
        )
    })?;
    Ok(Columns::new(&guessed))
}

/// Why a log gave no rows at all, as the error to show.
fn no_rows_error(
    info: &LogInfo,
    cols: Option<&Columns>,
    any_data_line: bool,
    na_rows: u64,
) -> LogError {
    if info.overlong > 0 && !any_data_line {
        return LogError::OnlyOverlong(info.overlong);
    }
    if na_rows > 0 && na_rows * 2 >= info.malformed {
        return LogError::NoValues {
            format: "nvidia-smi CSV",
            rows: info.malformed.max(na_rows),
        };
    }
    let named = cols.is_some_and(|c| {
        c.fields.iter().any(|f| {
            matches!(
                f,
                Field::UtilGpu | Field::MemUsed | Field::MemFree | Field::Throttle
            )
        })
    });
    LogError::Format(if named || !any_data_line {
        "no nvidia-smi CSV rows with utilization or memory values".into()
    } else {
        "no column of this CSV is known to hold utilization or memory: pass the field list \
         with --columns (the --query-gpu names, e.g. --columns \
         timestamp,index,utilization.gpu,memory.used)"
            .into()
    })
}

/// Rows read before the GPU layout of a log without an index column is decided.
const LAYOUT_WINDOW: usize = 4096;

/// Reads an nvidia-smi CSV log, handing each GPU reading to `visit` as a [`Reading`]; returns a
/// synthesized header (GPUs with the names and totals the log showed) and read statistics.
///
/// A header repeated after data rows starts a new run (runs appended to one file): only the last
/// run is read, and a note says so. Without an index, uuid or pci.bus_id column the number of
/// GPUs is found from the first rows (see [`super::smi_layout`]).
pub fn read_smi_csv<R: Read + Seek>(
    mut r: R,
    opts: &CsvOptions,
    mut visit: impl FnMut(&Reading),
) -> Result<(LogHeader, LogInfo), LogError> {
    let (runs, per_reading) = scan_runs(&mut r)?;
    let judged = runs.iter().rposition(|run| run.rows > 0).unwrap_or(0);
    r.seek(SeekFrom::Start(runs[judged].offset))?;
    let mut st = CsvRead::new(opts);
    st.per_reading = per_reading;
    if let Some(note) = runs_note(&runs, judged) {
        st.info.notes.push(note);
    }
    let mut row = Row::default();
    super::each_piece(r, super::MAX_LOG_LINE_BYTES, true, |piece| match piece {
        Piece::Rows(unread) => {
            let n = st.plain_rows(unread, &mut row, &mut visit);
            st.any_line |= n > 0;
            Ok(n)
        }
        Piece::Line(line) => {
            st.any_line = true;
            match line {
                LogLine::Overlong => st.info.overlong_line(),
                LogLine::Text(buf) => st.line(buf, &mut row, &mut visit)?,
            }
            Ok(0)
        }
    })?;
    st.finish(&mut visit)
}

/// One stretch of a log under one header.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Run {
    /// Byte offset of its header (0 for the first run).
    offset: u64,
    /// 1-based line number of its header.
    line: u64,
    /// Data rows in it.
    rows: u64,
}

/// Finds the runs of a log and rewinds it. A header after data rows starts a new run unless the
/// timestamps carry on across it (0-60 s later: the same logger writing its header again).
/// Also gives the rows of one reading when the header comes before every reading.
#[allow(clippy::too_many_lines)] // one pass of a state machine whose states are its locals
fn scan_runs<R: Read + Seek>(r: &mut R) -> std::io::Result<(Vec<Run>, Option<u32>)> {
    let mut runs = vec![Run {
        offset: 0,
        line: 1,
        rows: 0,
    }];
    let mut lines = super::Lines::new(&mut *r);
    let mut last_data = Vec::new();
    let (mut offset, mut line_no) = (0u64, 0u64);
    let mut ts_col: Option<usize> = None;
    // The time of the last row before a repeated header, to compare with the first after it.
    let mut before: Option<Option<f64>> = None;
    let (mut header, mut same_header): (Option<String>, bool) = (None, true);
    // The GPUs each run names (its index, uuid or bus id column), and a run whose times carry
    // on from the one before: the same logger writing its header again if it names the same
    // GPUs, another run if not (8 GPUs, then the header and 2 GPUs: both were blended).
    let mut ids: Vec<std::collections::BTreeSet<String>> = vec![Default::default()];
    let mut id_col: Option<usize> = None;
    let mut carried_on: Option<usize> = None;
    let mut fields_buf: Vec<&str> = Vec::new();
    let mut last_header = String::new();
    loop {
        // The common rows (see `plain` below) are counted in bulk, straight from the buffer.
        if header.is_some() && id_col.is_none() && before.is_none() {
            count_plain_rows(
                &mut lines,
                &mut runs,
                &mut last_data,
                (&mut line_no, &mut offset),
            );
        }
        let Some((buf, n, overlong)) = lines.next_line(super::MAX_LOG_LINE_BYTES)? else {
            break;
        };
        line_no += 1;
        let start = offset;
        offset += n;
        // A row of values under a header, with no id to note and no time awaited from it (the
        // common line of a long log): counted, not decoded nor split. A header or comment
        // starts with a letter or `#`, never with a digit.
        let plain = header.is_some() && id_col.is_none() && before.is_none() && !overlong;
        if plain && buf.first().is_some_and(u8::is_ascii_digit) {
            count_row(&mut runs, &mut last_data, buf);
            continue;
        }
        let text = super::fast::utf8(buf);
        let line = text.trim();
        if overlong || line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut fields = super::fast::recycle(std::mem::take(&mut fields_buf));
        // A data row is split only as far as the columns read here: its id and, after a
        // header, its time.
        // The header met last, again (a logger calling nvidia-smi once per reading): known,
        // not split and looked up again.
        let repeated = !last_header.is_empty() && line == last_header;
        let wanted = if repeated {
            0
        } else if line.as_bytes()[0].is_ascii_alphabetic() {
            usize::MAX
        } else {
            let time = before.is_some().then_some(ts_col).flatten();
            id_col.max(time).map_or(0, |c| c + 1)
        };
        super::fast::split_first(line, wanted, &mut fields);
        if repeated || (line.as_bytes()[0].is_ascii_alphabetic() && is_header(&fields)) {
            match &header {
                None => {
                    header = Some(line.to_string());
                    // Text before it was no rows: the log starts here.
                    if runs[0].rows == 0 {
                        runs[0].offset = start;
                        runs[0].line = line_no;
                    }
                }
                Some(h) => same_header &= h == line,
            }
            if runs[runs.len() - 1].rows > 0 {
                merge_carried_on(&mut runs, &mut ids, &mut carried_on);
                before = Some(ts_at(&last_data, ts_col));
                runs.push(Run {
                    offset: start,
                    line: line_no,
                    rows: 0,
                });
                ids.push(Default::default());
            }
            if !repeated {
                ts_col = fields.iter().position(|f| field_of(f) == Field::Timestamp);
                id_col = fields
                    .iter()
                    .position(|f| matches!(field_of(f), Field::Index | Field::Uuid | Field::BusId));
                last_header = line.to_string();
            }
            fields_buf = super::fast::recycle(fields);
            continue;
        }
        if let Some(prev) = before.take() {
            let after = fields.get(ts_col.unwrap_or(usize::MAX));
            let after = after.and_then(|v| parse_time_value(v, None).ok().flatten());
            if let (Some(a), Some(b)) = (prev, after) {
                if (0.0..=60.0).contains(&(b - a)) {
                    carried_on = Some(runs.len() - 1);
                }
            }
        }
        if let Some(id) = id_col.and_then(|c| fields.get(c)) {
            let set = ids.last_mut().expect("one set per run");
            if set.len() < super::MAX_GPUS && !set.contains(*id) {
                set.insert(id.to_string());
            }
        }
        fields_buf = super::fast::recycle(fields);
        // Text before the first header without a comma (a date, nvidia-smi's table printed by
        // the job script) is no row of a headerless log.
        if header.is_none() && !line.contains(',') {
            continue;
        }
        count_row(&mut runs, &mut last_data, buf);
    }
    merge_carried_on(&mut runs, &mut ids, &mut carried_on);
    drop(lines);
    r.seek(SeekFrom::Start(0))?;
    Ok(one_run_per_reading(runs, same_header))
}

/// Counts the rows at the start of the unread bytes that are plain (a digit first) in the last
/// run, keeps the last of them, and moves `at` (line number, byte offset) past them.
fn count_plain_rows<R: Read>(
    lines: &mut super::Lines<R>,
    runs: &mut [Run],
    last_data: &mut Vec<u8>,
    at: (&mut u64, &mut u64),
) {
    let (n, bytes, last) =
        lines.take_plain_lines(super::MAX_LOG_LINE_BYTES, |l| l[0].is_ascii_digit());
    if let Some(last) = last {
        let run = runs.len() - 1;
        runs[run].rows += n;
        last_data.clear();
        last_data.extend_from_slice(last);
    }
    *at.0 += n;
    *at.1 += bytes as u64;
}

/// One more row in the last run; `line` is kept as the last data line.
fn count_row(runs: &mut [Run], last_data: &mut Vec<u8>, line: &[u8]) {
    let last = runs.len() - 1;
    runs[last].rows += 1;
    last_data.clear();
    last_data.extend_from_slice(line);
}

/// The header before every reading (a loop calling nvidia-smi once per reading, `>>` to one
/// file): runs of one poll each, all alike, are one log, and the rows of one reading are given.
fn one_run_per_reading(runs: Vec<Run>, same_header: bool) -> (Vec<Run>, Option<u32>) {
    let sizes: Vec<u64> = runs.iter().map(|r| r.rows).collect();
    if let [first, .., _] = sizes[..] {
        let per_reading = sizes.len() >= 3
            && (1..=u64::from(super::smi_layout::MAX_GPUS)).contains(&first)
            && sizes[..sizes.len() - 1].iter().all(|&s| s == first)
            && (1..=first).contains(&sizes[sizes.len() - 1])
            && same_header;
        if per_reading {
            let run = Run {
                offset: 0,
                line: 1,
                rows: sizes.iter().sum(),
            };
            return (vec![run], Some(first as u32));
        }
    }
    (runs, None)
}

/// The run `carried_on` (its times carry on from the run before) is the same logger writing
/// its header again when it names the same GPUs: merged into the run before.
fn merge_carried_on(
    runs: &mut Vec<Run>,
    ids: &mut Vec<std::collections::BTreeSet<String>>,
    carried_on: &mut Option<usize>,
) {
    if let Some(k) = carried_on.take() {
        if k > 0 && k + 1 == runs.len() && ids[k] == ids[k - 1] {
            let run = runs.pop().expect("k is the last run");
            runs[k - 1].rows += run.rows;
            ids.pop();
        }
    }
}

/// The time in a data line's timestamp column.
fn ts_at(line: &[u8], col: Option<usize>) -> Option<f64> {
    let text = String::from_utf8_lossy(line);
    let v = *split(text.trim()).get(col?)?;
    parse_time_value(v, None).ok().flatten()
}

/// What people are told when a log holds several runs: which one was judged.
fn runs_note(runs: &[Run], judged: usize) -> Option<String> {
    let with_rows = runs.iter().filter(|r| r.rows > 0).count();
    if with_rows < 2 {
        return None;
    }
    let skipped: u64 = runs[..judged].iter().map(|r| r.rows).sum();
    let j = runs[judged];
    Some(format!(
        "The header repeats in this log ({with_rows} runs appended to one file): the last run \
         (from line {}, {} rows) was judged; the {skipped} rows of the earlier runs were skipped \
         (split the file to judge them).",
        j.line, j.rows
    ))
}

/// The state of one read of a log.
struct CsvRead<'a> {
    opts: &'a CsvOptions,
    info: LogInfo,
    cols: Option<Columns>,
    gpus: Vec<GpuStatic>,
    /// Where each GPU index sits in `gpus`.
    gpu_pos: FxHashMap<u32, usize>,
    /// The last row's GPU index and slot.
    last_gpu: Option<(u32, usize)>,
    /// Rows of GPUs past [`super::MAX_GPUS`], left out.
    over_cap: u64,
    polls: Polls,
    interval: f64,
    any_line: bool,
    any_data_line: bool,
    /// A bad row not yet known to be the last.
    pending_bad: bool,
    na_rows: u64,
    /// Rows held until the layout is decided (`None` once it is).
    held: Option<Vec<Row>>,
    /// Rows of one reading, when the header comes before every reading.
    per_reading: Option<u32>,
    /// Epoch seconds past the year 2200 were met (and said).
    absurd_noted: bool,
    /// The vector each line is split into, kept empty between lines.
    fields_buf: Vec<&'static str>,
    /// The last header line read (empty before the first).
    last_header: String,
}

impl<'a> CsvRead<'a> {
    fn new(opts: &'a CsvOptions) -> Self {
        CsvRead {
            opts,
            info: LogInfo::default(),
            cols: opts.columns.as_ref().map(|c| Columns::new(c)),
            gpus: Vec::new(),
            gpu_pos: FxHashMap::default(),
            last_gpu: None,
            over_cap: 0,
            polls: Polls::default(),
            interval: opts.interval_s.unwrap_or(1.0),
            any_line: false,
            any_data_line: false,
            pending_bad: false,
            na_rows: 0,
            held: Some(Vec::new()),
            per_reading: None,
            absurd_noted: false,
            fields_buf: Vec::new(),
            last_header: String::new(),
        }
    }

    /// One line that is not over-long.
    fn line(
        &mut self,
        buf: &[u8],
        row: &mut Row,
        visit: &mut impl FnMut(&Reading),
    ) -> Result<(), LogError> {
        let text = super::fast::utf8(buf);
        let line = super::fast::trim(super::fast::chomp(&text));
        if line.is_empty() || line.starts_with('#') || line == self.last_header {
            // The header met last, again: nothing changes (a logger calling nvidia-smi once
            // per reading writes it before every reading).
            return Ok(());
        }
        // The fields borrow this line; their vector is kept from line to line.
        let mut fields = super::fast::recycle(std::mem::take(&mut self.fields_buf));
        super::fast::split_into(line, &mut fields);
        let r = self.fields(buf, line, &fields, row, visit);
        self.fields_buf = super::fast::recycle(fields);
        r
    }

    /// Takes the plain rows at the start of `unread` ([`plain_row`]), each as [`CsvRead::line`]
    /// would take it, and answers the bytes taken; stops at the first other line, which is
    /// left to `line`. Only once the columns and the layout of the GPUs are known.
    fn plain_rows(
        &mut self,
        unread: &[u8],
        row: &mut Row,
        visit: &mut impl FnMut(&Reading),
    ) -> usize {
        if self.held.is_some() {
            return 0;
        }
        let Some(cols) = self.cols.take() else {
            return 0;
        };
        let mut at = 0;
        while let Some(n) = plain_row(&cols, &unread[at..], row) {
            at += n;
            self.any_data_line = true;
            if std::mem::take(&mut self.pending_bad) {
                self.info.malformed += 1;
            }
            self.note_absurd(row);
            self.emit(row, visit);
        }
        self.cols = Some(cols);
        at
    }

    /// Says once that the log's epoch seconds lie past the year 2200.
    fn note_absurd(&mut self, row: &Row) {
        if let Some(t) = row
            .ts
            .filter(|&t| t > super::ABSURD_EPOCH_S && !self.absurd_noted)
        {
            self.absurd_noted = true;
            self.info.notes.push(super::absurd_epoch_note(t));
        }
    }

    /// A line that is not blank nor a comment, split into `fields`.
    fn fields(
        &mut self,
        buf: &[u8],
        line: &str,
        fields: &[&str],
        row: &mut Row,
        visit: &mut impl FnMut(&Reading),
    ) -> Result<(), LogError> {
        let complete = buf.last() == Some(&b'\n');
        // A header's first name starts with a letter (or the quote of a spreadsheet's): a row
        // of values is not looked at as one.
        let may_be_header = line
            .as_bytes()
            .first()
            .is_some_and(|&b| b.is_ascii_alphabetic() || b == b'"');
        if may_be_header && is_header(fields) {
            self.last_header = line.to_string();
            // Fields given with --columns win over the file's own header.
            if self.opts.columns.is_none() {
                let names: Vec<String> = fields.iter().map(|s| s.to_string()).collect();
                let cols = Columns::new(&names);
                if !cols.duplicates.is_empty() {
                    let note = format!(
                        "Columns of a field already read were not read (the first of each is): \
                         {}.",
                        super::printable(&cols.duplicates.join(", "))
                    );
                    if !self.info.notes.contains(&note) {
                        self.info.notes.push(note);
                    }
                }
                self.cols = Some(cols);
            }
            return Ok(());
        }
        self.any_data_line = true;
        if std::mem::take(&mut self.pending_bad) {
            self.info.malformed += 1;
        }
        if self.cols.is_none() {
            self.cols = Some(guessed_columns(buf, line, fields)?);
        }
        let c = self.cols.as_ref().expect("columns set above");
        // A last line without its newline that ends on the delimiter was cut by a killed logger
        // right after a field (`…, 95830 MiB,`): its empty last field is the value never
        // written, not a reading of N/A.
        if !complete && fields.len() > 1 && line.ends_with(',') {
            self.info.truncated = true;
            return Ok(());
        }
        let fits = fields.len() == c.fields.len();
        if fits {
            Row::parse_into(c, fields, row);
        }
        let parsed = fits && !row.impossible_time;
        if !(parsed && row.has_values()) {
            if parsed && fields.iter().skip(1).any(|v| clean(v).is_none()) {
                self.na_rows += 1;
            }
            if !complete {
                self.info.truncated = true;
            } else if self.info.malformed == 0
                && fields.len() < c.fields.len()
                && !line.contains([';', '\t', '|'])
            {
                // Maybe a row cut by a killed logger, if nothing follows it.
                self.pending_bad = true;
            } else {
                // Another bad row among others, or one written with other delimiters (a
                // hand-edited or merged file): malformed, never "cut".
                self.info.malformed += 1;
            }
            return Ok(());
        }
        self.note_absurd(row);
        match &mut self.held {
            Some(held) if held.len() + 1 < LAYOUT_WINDOW => held.push(std::mem::take(row)),
            Some(held) => {
                held.push(std::mem::take(row));
                self.decide(visit);
            }
            None => self.emit(row, visit),
        }
        Ok(())
    }

    /// Decides how rows map to GPUs from the rows held, then hands those on.
    fn decide(&mut self, visit: &mut impl FnMut(&Reading)) {
        let held = self.held.take().unwrap_or_default();
        let has = |f: Field| self.cols.as_ref().is_some_and(|c| c.fields.contains(&f));
        let (layout, note) = if held.iter().any(|r| r.index.is_some()) {
            (Layout::Column, None)
        } else if held.iter().any(|r| r.id_key.is_some()) {
            let by = if has(Field::Uuid) {
                "uuid"
            } else {
                "pci.bus_id"
            };
            let note = format!(
                "This log has no index column: GPUs were told apart by their {by} column, \
                 numbered in the order they first appear."
            );
            (Layout::Column, Some(note))
        } else {
            let probes: Vec<Probe> = held.iter().map(Row::probe).collect();
            if let Some(n) = self.per_reading {
                let note = if n == 1 {
                    "This log has no index column: the header comes before every row (one \
                     nvidia-smi call per reading), so it holds 1 GPU."
                        .to_string()
                } else {
                    format!(
                        "This log has no index column: the header comes before every {n} rows \
                         (one nvidia-smi call per reading), so it holds {n} GPUs; row k of a \
                         reading is GPU k."
                    )
                };
                (Layout::Cycle { n }, Some(note))
            } else {
                let (l, n) = super::smi_layout::detect(&probes);
                (l, Some(n))
            }
        };
        self.info.notes.extend(note);
        if !has(Field::Timestamp) && self.opts.interval_s.is_none() && !held.is_empty() {
            self.info.interval_unknown = true;
            self.info.notes.push(
                "This log has no timestamp column: the time between readings is unknown \
                 (give it with --sample-interval SECONDS). Times are counted in readings, one \
                 second each; what needs real time (the sampling interval, durations) is not \
                 judged."
                    .into(),
            );
        }
        self.polls.layout = layout;
        for mut row in held {
            self.emit(&mut row, visit);
        }
    }

    fn emit(&mut self, row: &mut Row, visit: &mut impl FnMut(&Reading)) {
        let (idx, t_s) = self.polls.place(row, self.interval);
        // A log of one GPU (the longest logs are) finds its slot without a lookup.
        let cached = self.last_gpu.filter(|&(i, _)| i == idx).map(|(_, p)| p);
        let p = match cached.or_else(|| self.gpu_pos.get(&idx).copied()) {
            Some(p) => p,
            None if self.gpus.len() >= super::MAX_GPUS => {
                self.over_cap += 1;
                return;
            }
            None => {
                self.gpus.push(GpuStatic {
                    index: idx,
                    ..Default::default()
                });
                self.gpu_pos.insert(idx, self.gpus.len() - 1);
                self.gpus.len() - 1
            }
        };
        self.last_gpu = Some((idx, p));
        row.sample.index = idx;
        row.sample.t_s = t_s;
        merge_static(&mut self.gpus[p], row);
        self.info.rows += 1;
        visit(&row.sample);
    }

    fn finish(
        mut self,
        visit: &mut impl FnMut(&Reading),
    ) -> Result<(LogHeader, LogInfo), LogError> {
        if self.held.is_some() {
            self.decide(visit);
        }
        if self.pending_bad {
            self.info.truncated = true;
        }
        if !self.any_line {
            return Err(LogError::Empty);
        }
        if self.info.rows == 0 {
            self.info.notes.clear();
            return Err(no_rows_error(
                &self.info,
                self.cols.as_ref(),
                self.any_data_line,
                self.na_rows,
            ));
        }
        if self.over_cap > 0 {
            self.info
                .notes
                .push(super::gpus_over_cap_note(self.over_cap));
        }
        self.gpus.sort_by_key(|g| g.index);
        Ok((log_header(self.gpus, self.interval), self.info))
    }
}

/// The message for a file that is not a log of the expected kind at all (random bytes, binary
/// data, prose): says which formats gpufeed reads, not how to fix a log it is not.
pub(crate) fn not_a_log(expected: &str) -> String {
    format!(
        "not {expected} log, nor any format gpufeed reads (a gpufeed recording, an nvidia-smi \
         --query-gpu --format=csv log, nvidia-smi dmon or dcgmi dmon output, another tool's GPU \
         CSV, W&B events, a Prometheus scrape, an MLflow run; a PyTorch profiler trace goes to \
         gpufeed analyze)"
    )
}

/// What a log that has no header of its own says: the GPUs it showed, its interval.
pub(crate) fn log_header(gpus: Vec<GpuStatic>, interval_s: f64) -> LogHeader {
    LogHeader { gpus, interval_s }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str, opts: &CsvOptions) -> Result<(LogHeader, LogInfo, Vec<Reading>), LogError> {
        let mut out = Vec::new();
        let (h, i) = read_smi_csv(std::io::Cursor::new(text), opts, |l| out.push(l.clone()))?;
        Ok((h, i, out))
    }

    #[test]
    fn numbers_with_exponents_and_units() {
        assert_eq!(number("1e20 MiB", None), Some(1e20 * 1048576.0));
        assert_eq!(number("87 %", None), Some(87.0));
        assert_eq!(number("1024MiB", None), Some(1024.0 * 1048576.0));
        assert_eq!(number("350.25 W", None), Some(350.25));
        assert_eq!(number("-14", Some("%")), Some(-14.0));
        assert_eq!(number("12", Some("MiB")), Some(12.0 * 1048576.0));
        assert_eq!(number("NaN", None), None);
        assert_eq!(number("e5 MiB", None), None);
        assert_eq!(number("[N/A]", None), None);
    }

    #[test]
    fn units_in_header_and_values_and_na() {
        let text = "timestamp, index, name, utilization.gpu [%], memory.used [MiB], memory.total [MiB], pcie.link.gen.current, power.draw [W]\n\
                    2026/12/02 12:00:00.000, 0, NVIDIA H100 80GB HBM3, 87 %, 1024 MiB, 81559 MiB, 5, [N/A]\n\
                    2026/12/02 12:00:01.000, 0, NVIDIA H100 80GB HBM3, 12 %, 1024 MiB, 81559 MiB, 5, 350.25 W\n";
        let (h, info, s) = read(text, &CsvOptions::default()).unwrap();
        assert_eq!(info.rows, 2);
        assert_eq!(s[0].util_pct, Some(87.0));
        assert_eq!(s[0].mem_used_bytes, Some(1024 << 20));
        assert_eq!(s[0].power_w, None);
        assert_eq!(s[1].power_w, Some(350.25));
        assert!((s[1].t_s - 1.0).abs() < 1e-9);
        assert_eq!(h.gpus[0].memory_total_bytes, Some(81559 << 20));
        assert_eq!(h.gpus[0].name.as_deref(), Some("NVIDIA H100 80GB HBM3"));
    }

    #[test]
    fn nounits_padded_and_reordered() {
        let text = "memory.used [MiB],utilization.gpu [%],   index\n   2000 ,  55  ,1\n";
        let (_, _, s) = read(text, &CsvOptions::default()).unwrap();
        assert_eq!(s[0].index, 1);
        assert_eq!(s[0].util_pct, Some(55.0));
        assert_eq!(s[0].mem_used_bytes, Some(2000 << 20));
    }

    #[test]
    fn interleaved_gpus_by_bus_id_and_repeated_headers() {
        let text = "pci.bus_id, utilization.gpu [%]\n\
                    00000000:07:00.0, 10 %\n00000000:0A:00.0, 90 %\n\
                    00000000:07:00.0, 12 %\n00000000:0A:00.0, 92 %\n\
                    pci.bus_id, utilization.gpu [%]\n\
                    00000000:07:00.0, 11 %\n00000000:0A:00.0, 91 %\n";
        let (h, info, s) = read(text, &CsvOptions::default()).unwrap();
        // Two runs appended: the last one is judged, and the note says so.
        assert_eq!(info.rows, 2);
        assert_eq!(h.gpus.len(), 2);
        assert_eq!(s[1].index, 1);
        assert_eq!(s[1].util_pct, Some(91.0));
        assert!(
            info.notes.iter().any(|n| n.contains("2 runs appended")
                && n.contains("from line 6, 2 rows")
                && n.contains("the 4 rows of the earlier runs were skipped")),
            "{:?}",
            info.notes
        );
        assert!(info.notes.iter().any(|n| n.contains("pci.bus_id column")));
        assert!(info.interval_unknown);
        // A header repeated with the timestamps carrying on is the same run.
        let text = "timestamp, index, utilization.gpu [%]\n2026/12/02 12:00:00.000, 0, 10 %\n\
                    timestamp, index, utilization.gpu [%]\n2026/12/02 12:00:01.000, 0, 11 %\n";
        let (_, info, _) = read(text, &CsvOptions::default()).unwrap();
        assert_eq!(info.rows, 2);
        assert!(info.notes.is_empty(), "{:?}", info.notes);
        // Time going back across it: two runs.
        let text = text.replace("12:00:01", "11:00:01");
        let (_, info, s) = read(&text, &CsvOptions::default()).unwrap();
        assert_eq!((info.rows, s[0].util_pct), (1, Some(11.0)));
        // A header repeated before any data is not a new run.
        let text = "pci.bus_id, utilization.gpu [%]\npci.bus_id, utilization.gpu [%]\n\
                    00000000:07:00.0, 10 %\n00000000:07:00.0, 11 %\n";
        let (_, info, _) = read(text, &CsvOptions::default()).unwrap();
        assert_eq!(info.rows, 2);
        assert!(!info.notes.iter().any(|n| n.contains("runs")));
        // No timestamps: each repeat of a GPU starts a new poll, one interval later.
        let opts = CsvOptions {
            interval_s: Some(2.0),
            ..Default::default()
        };
        let (_, info, s) = read(text, &opts).unwrap();
        assert_eq!(s[1].t_s, 2.0);
        assert!(!info.interval_unknown);
    }

    /// A log as `nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used,power.draw
    /// --format=csv -lms EVERY` writes it on `n` GPUs: one row per GPU per reading, 2-4 ms
    /// apart. GPUs in `busy` run at 80-99% with 30 GiB; the others idle at 4 MiB.
    fn burst_log(n: u32, readings: u32, every_ms: u64, busy: &[u32], stamps: bool) -> String {
        let mut out = String::from(if stamps {
            "timestamp, utilization.gpu [%], memory.used [MiB], power.draw [W]\n"
        } else {
            "utilization.gpu [%], memory.used [MiB], power.draw [W]\n"
        });
        for k in 0..readings {
            for g in 0..n {
                let ms = 1000 + k as u64 * every_ms + g as u64 * (2 + (k as u64 + g as u64) % 3);
                let (util, mem, w) = if busy.contains(&g) {
                    (
                        80 + (k * 7 + g) % 20,
                        30000 + g * 100,
                        250.0 + (k % 9) as f64,
                    )
                } else {
                    (0, 4, 61.5)
                };
                if stamps {
                    out.push_str(&format!(
                        "2026/12/02 12:{:02}:{:02}.{:03}, ",
                        ms / 60000,
                        ms / 1000 % 60,
                        ms % 1000
                    ));
                }
                out.push_str(&format!("{util} %, {mem} MiB, {w:.2} W\n"));
            }
        }
        out
    }

    fn gpus_of(s: &[Reading]) -> Vec<u32> {
        let mut v: Vec<u32> = s.iter().map(|x| x.index).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    #[test]
    fn burst_logs_without_index_find_their_gpu_count() {
        for (n, busy) in [(2u32, vec![0u32]), (8, (0..8).collect()), (4, vec![1, 2])] {
            let text = burst_log(n, 300, 100, &busy, true);
            let (h, info, s) = read(&text, &CsvOptions::default()).unwrap();
            assert_eq!(h.gpus.len(), n as usize, "{:?}", info.notes);
            assert_eq!(gpus_of(&s), (0..n).collect::<Vec<_>>());
            for g in &busy {
                let u: Vec<_> = s.iter().filter(|x| x.index == *g).collect();
                assert!(u.iter().all(|x| x.util_pct.unwrap() >= 80.0), "GPU {g}");
                assert_eq!(u.len(), 300);
            }
            let note = info.notes.join(" ");
            if n > 1 {
                assert!(note.contains(&format!("{n} GPUs were found")), "{note}");
            }
            assert!(!info.interval_unknown);
            // Readings 100 ms apart, rows a few ms apart: time is the reading's.
            let last = s.last().unwrap();
            assert!((last.t_s - 29.9).abs() < 0.05, "{}", last.t_s);
        }
    }

    /// A log with the timing of real `nvidia-smi -lms 100` logs (see
    /// [`super::super::smi_layout::jitter`]): 3 % of in-poll gaps 5-90 ms, 2 % of waits
    /// 200-1,500 ms; GPU 0 busy at 30 GB, the others idle at 4 MiB.
    fn jittered_log(n: u32, polls: u32, seed: u64) -> String {
        use super::super::smi_layout::jitter;
        let ms = jitter::stamps_ms(n, polls, 100.0, 0.03, seed);
        let mut rng = jitter::Rng::new(seed);
        let mut out =
            String::from("timestamp, utilization.gpu [%], memory.used [MiB], power.draw [W]\n");
        for (i, t) in ms.iter().enumerate() {
            let (k, g) = (i as u32 / n, i as u32 % n);
            let mem = jitter::mem_mib(g, k, &[0], &mut rng);
            let (util, w) = if g == 0 { (90, 250.0) } else { (0, 61.5) };
            out.push_str(&format!(
                "2026/12/02 12:{:02}:{:02}.{:03}, {util} %, {mem:.0} MiB, {w:.2} W\n",
                t / 60000 % 60,
                t / 1000 % 60,
                t % 1000
            ));
        }
        out
    }

    #[test]
    fn jittered_logs_without_index_keep_each_gpu_apart() {
        for (n, seed) in [(2u32, 1u64), (2, 2), (8, 3)] {
            // More rows than the layout window: the rows after it are placed the same way.
            let text = jittered_log(n, 6000 / n, seed);
            let (h, info, s) = read(&text, &CsvOptions::default()).unwrap();
            assert_eq!(h.gpus.len(), n as usize, "{:?}", info.notes);
            let note = info.notes.join(" ");
            assert!(note.contains(&format!("{n} GPUs were found")), "{note}");
            // No busy row lands on an idle GPU nor the reverse, late rows included.
            for x in &s {
                assert_eq!(x.util_pct == Some(90.0), x.index == 0, "{x:?}");
            }
            let per: Vec<usize> = (0..n)
                .map(|g| s.iter().filter(|x| x.index == g).count())
                .collect();
            assert!(per.iter().all(|&c| c == per[0]), "{per:?}");
        }
    }

    #[test]
    fn a_table_before_the_log_and_a_hole_of_nuls_in_it() {
        // An LSF job script prints nvidia-smi's table, then appends `--query-gpu ... -l 10` to
        // the same file; another job truncating the file left a hole of NULs mid-line.
        let mut text = "Thu Dec  9 11:19:15 2021\n+------+\n| NVIDIA-SMI 495.44 |\n+------+\n\
                        index, name, utilization.gpu [%]\n0, Tesla V100, 0 %\n0, Tesla V100, 0 %\n"
            .to_string();
        text.push_str(&"\0".repeat(500));
        text.push_str("la V100, 92 %\n");
        text.push_str(&"0, Tesla V100, 95 %\n".repeat(5));
        let (h, info, s) = read(&text, &CsvOptions::default()).unwrap();
        assert_eq!((info.rows, h.gpus.len()), (7, 1), "{:?}", info.notes);
        assert_eq!(info.malformed, 1);
        assert_eq!(s[6].util_pct, Some(95.0));
        assert!(
            !info.notes.iter().any(|n| n.contains("runs")),
            "{:?}",
            info.notes
        );
    }

    #[test]
    fn a_header_before_every_reading_is_one_log() {
        // `while true; do nvidia-smi --query-gpu=utilization.gpu --format=csv >> f; done`.
        let text = "utilization.gpu [%]\n85 %\n".repeat(3) + "utilization.gpu [%]\n100 %\n";
        let (h, info, s) = read(&text, &CsvOptions::default()).unwrap();
        assert_eq!(info.rows, 4, "{:?}", info.notes);
        assert_eq!((h.gpus.len(), s[3].util_pct), (1, Some(100.0)));
        assert!(
            !info.notes.iter().any(|n| n.contains("runs")),
            "{:?}",
            info.notes
        );
        assert!(
            info.notes[0].contains("so it holds 1 GPU."),
            "{:?}",
            info.notes
        );
        // Two GPUs per call: rows alternate.
        let text = "utilization.gpu [%]\n85 %\n3 %\n".repeat(4);
        let (h, info, s) = read(&text, &CsvOptions::default()).unwrap();
        assert_eq!(h.gpus.len(), 2, "{:?}", info.notes);
        assert!(s
            .iter()
            .all(|x| (x.index == 1) == (x.util_pct == Some(3.0))));
        // Runs of many rows are runs still.
        let run = "utilization.gpu [%]\n".to_string() + &"85 %\n".repeat(100);
        let (_, info, _) = read(&run.repeat(3), &CsvOptions::default()).unwrap();
        assert_eq!(info.rows, 100);
    }

    #[test]
    fn logs_without_timestamps_use_the_repeating_pattern() {
        let text = burst_log(2, 100, 1000, &[0], false);
        let (h, info, s) = read(&text, &CsvOptions::default()).unwrap();
        assert_eq!(h.gpus.len(), 2, "{:?}", info.notes);
        assert!(s
            .iter()
            .filter(|x| x.index == 1)
            .all(|x| x.util_pct == Some(0.0)));
        assert!(info.interval_unknown);
        let note = info.notes.join(" ");
        assert!(note.contains("2 GPUs were found from the repeating pattern of memory.used"));
        assert!(note.contains("no timestamp column"), "{note}");
        // Every GPU alike (all idle at the same memory): one series, said so.
        let text = burst_log(2, 100, 1000, &[], false);
        let (h, info, _) = read(&text, &CsvOptions::default()).unwrap();
        assert_eq!(h.gpus.len(), 1);
        assert!(info
            .notes
            .join(" ")
            .contains("cannot be told apart without an index"));
    }

    #[test]
    fn a_dgx_station_without_index_or_timestamps_reads_five_devices() {
        // Four A100s and the DGX Display, 7 polls: the first A100 runs a kernel at 91% from the
        // third poll, the other four rest at an equal 3 MiB.
        let mut text = "name, utilization.gpu [%], utilization.memory [%], memory.total [MiB], \
                        memory.used [MiB]\n"
            .to_string();
        for poll in 0..7 {
            for place in 0..5 {
                let (name, total) = if place == 3 {
                    ("NVIDIA DGX Display", 4096)
                } else {
                    ("NVIDIA A100-SXM4-40GB", 40960)
                };
                let (util, mem) = match (poll, place) {
                    (0, 3) => (0, 1),
                    (0, _) => (0, 0),
                    (1, 0) => (0, 15),
                    (_, 0) => (91, 419),
                    _ => (0, 3),
                };
                text += &format!("{name}, {util} %, 0 %, {total} MiB, {mem} MiB\n");
            }
        }
        let (h, info, s) = read(&text, &CsvOptions::default()).unwrap();
        assert_eq!(h.gpus.len(), 5, "{:?}", info.notes);
        assert_eq!(h.gpus[3].name.as_deref(), Some("NVIDIA DGX Display"));
        let busy: Vec<u32> = s
            .iter()
            .filter(|x| x.util_pct == Some(91.0))
            .map(|x| x.index)
            .collect();
        assert_eq!(busy, [0; 5]);
    }

    #[test]
    fn seconds_since_the_logger_started_are_the_time() {
        // A training script's logger: nvidia-smi's values behind its own `elapsed_sec`, every
        // 0.25 s; on a two-GPU box the second GPU's line ran into the quoted power field.
        let mut text =
            "elapsed_sec,gpu_util_pct,mem_used_mb,mem_total_mb,temp_c,power_w\n".to_string();
        for k in 0..40 {
            text += &format!(
                "{:.2},{},2676,49140,32,\"76.18\n0\"\n",
                0.08 + k as f64 * 0.25,
                20 + k % 2
            );
        }
        let (h, info, s) = read(&text, &CsvOptions::default()).unwrap();
        assert_eq!(h.gpus.len(), 1);
        assert!(!info.interval_unknown, "{:?}", info.notes);
        assert!((s.last().unwrap().t_s - 9.75).abs() < 0.01);
        assert_eq!(s[0].util_pct, Some(20.0));
    }

    #[test]
    fn an_xpu_smi_dump_across_midnight() {
        // Intel's xpu-smi dump: times of day only, a padded DeviceId, names with units.
        let mut text = "Timestamp, DeviceId, GPU Utilization (%), GPU Power (W), GPU Frequency \
                        (MHz), GPU Core Temperature (Celsius Degree), GPU Memory Used (MiB)\n"
            .to_string();
        for k in 0..20u32 {
            let s = 86_390 + k;
            for d in 0..2 {
                text += &format!(
                    "{:02}:{:02}:{:02}.000,    {d}, {}, 296.5, 1600.00, 41, 8160.0\n",
                    (s / 3600) % 24,
                    (s / 60) % 60,
                    s % 60,
                    if d == 0 { "97.10" } else { "N/A" }
                );
            }
        }
        let (h, info, s) = read(&text, &CsvOptions::default()).unwrap();
        assert_eq!(h.gpus.len(), 2, "{:?}", info.notes);
        assert!(!info.interval_unknown, "{:?}", info.notes);
        let g0: Vec<&Reading> = s.iter().filter(|r| r.index == 0).collect();
        assert_eq!(g0.len(), 20);
        // 23:59:50 to 00:00:09: 19 s, not minus a day.
        assert_eq!(g0.last().unwrap().t_s, 19.0);
        assert_eq!(g0[0].util_pct, Some(97.1));
        assert_eq!(g0[0].sm_clock_mhz, Some(1600));
        assert_eq!(g0[0].temperature_c, Some(41));
        assert_eq!(g0[0].mem_used_bytes, Some(8160 * 1048576));
        assert_eq!(time_of_day("7:05:01"), Some(25501.0));
        assert_eq!(time_of_day("24:00:00"), None);
        assert_eq!(time_of_day("12:3é:00"), None);
    }

    #[test]
    fn values_that_are_not_numbers_are_none() {
        assert_eq!(number("0x50 %", None), None);
        assert_eq!(number("12abc", None), None);
        assert_eq!(number("[Not Supported]", None), None);
        assert_eq!(number("69.32 W", None), Some(69.32));
        let text = "index, utilization.gpu [%], memory.used [MiB], power.draw [W]\n\
                    0, 0x50 %, 3109 MiB, [Not Supported]\n0, 83 %, 3109 MiB, 69.32 W\n";
        let (_, _, s) = read(text, &CsvOptions::default()).unwrap();
        assert_eq!(s[0].util_pct, None);
        assert_eq!(s[0].mem_used_bytes, Some(3109 << 20));
        assert_eq!(s[0].power_w, None);
        assert_eq!(s[1].util_pct, Some(83.0));
    }

    /// A reader that hands out at most `1` bytes a read: every row then reaches the reader
    /// line by line, none as a plain row taken from the buffer.
    struct Trickle(std::io::Cursor<Vec<u8>>, usize);

    impl Read for Trickle {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            let n = self.1.min(out.len());
            self.0.read(&mut out[..n])
        }
    }

    impl Seek for Trickle {
        fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
            self.0.seek(to)
        }
    }

    /// A row's values, to compare.
    fn row_view(r: &Row) -> String {
        format!(
            "{:?}",
            (
                &r.sample,
                r.ts.map(f64::to_bits),
                r.impossible_time,
                &r.id_key,
                r.index,
                &r.name,
                (
                    r.mem_total,
                    r.gen_max,
                    r.width_max,
                    r.power_limit.map(f64::to_bits)
                ),
            )
        )
    }

    /// The careful way: a row as `CsvRead::line` reads it, whole, if it is taken.
    fn row_by_line(c: &Columns, line: &[u8]) -> Option<String> {
        let text = super::super::fast::utf8(line);
        let l = super::super::fast::trim(super::super::fast::chomp(&text));
        let mut fields = Vec::new();
        super::super::fast::split_into(l, &mut fields);
        let complete = line.last() == Some(&b'\n');
        let mut r = Row::default();
        if !complete || fields.len() != c.fields.len() {
            return None;
        }
        Row::parse_into(c, &fields, &mut r);
        (!r.impossible_time && r.has_values()).then(|| row_view(&r))
    }

    const PLAIN_HEADERS: [&str; 4] = [
        "timestamp,utilization.gpu",
        "timestamp, index, name, utilization.gpu [%], memory.used [MiB], power.draw [W], \
         temperature.gpu, pcie.link.gen.current, clocks_throttle_reasons.active, mem_free",
        "time_ms,gpu_util,memory.total [GiB],memory.free [MiB],clocks.sm [MHz],extra",
        "uuid,utilization.gpu,memory.used",
    ];

    #[test]
    fn a_log_reads_the_same_from_its_buffer_as_line_by_line() {
        let mut logs = Vec::new();
        // Plain rows, with every kind of line that is not one among them.
        let mut log = String::from("timestamp,index,utilization.gpu [%],memory.used [MiB]\n");
        for i in 0..6000u32 {
            let t = 1_706_659_200 + i;
            let line = match i % 997 {
                5 => format!("{t}, {}, 45 %, 1024 MiB\r\n", i % 2),
                6 => format!("{t},{},N/A,[N/A]\n", i % 2),
                7 => format!("\"{t}\",{},3,7\n", i % 2),
                8 => "garbage\n".to_string(),
                9 => format!("{t},{},7\n", i % 2),
                10 => format!("{t},{},7,8,9\n", i % 2),
                11 => format!("{t}.5,{},.5,1e3\n", i % 2),
                12 => format!("{t}\0,{},5,5\n", i % 2),
                13 => format!("{t},{},\t7\t,8 \n", i % 2),
                14 => format!("2024/02/30 12:00:00,{},7,8\n", i % 2),
                _ => format!("{t},{},{},{}\n", i % 2, i % 101, i * 3),
            };
            log.push_str(&line);
        }
        log.push_str("1706670000,1,5,");
        logs.push(log);
        // Rows without an index (the layout found first), and without timestamps.
        let mut log = String::from("utilization.gpu,memory.used\n");
        for i in 0..9000u32 {
            log.push_str(&format!("{},{}\n", i % 100, 1000 + i % 7));
        }
        logs.push(log);
        for log in &logs {
            let opts = CsvOptions::default();
            let read_by = |step: usize| {
                let mut out = Vec::new();
                let r = Trickle(std::io::Cursor::new(log.as_bytes().to_vec()), step);
                let (h, i) = read_smi_csv(r, &opts, |l| out.push(format!("{l:?}"))).unwrap();
                (format!("{h:?}"), format!("{i:?}"), out)
            };
            let whole = read_by(usize::MAX);
            assert!(whole.2.len() > 5000, "{}", whole.1);
            assert_eq!(whole, read_by(1));
        }
    }

    #[test]
    fn plain_rows_are_taken_from_the_buffer() {
        let mut r = Row::default();
        let names = |h: &str| h.split(',').map(str::to_string).collect::<Vec<_>>();
        let c = Columns::new(&names(PLAIN_HEADERS[0]));
        assert_eq!(plain_row(&c, b"1706659200,7\n1", &mut r), Some(13));
        assert_eq!(r.ts, Some(1_706_659_200.0));
        assert_eq!(r.sample.util_pct, Some(7.0));
        assert_eq!(plain_row(&c, b"1706659200, 7 \r\n", &mut r), Some(16));
        for not_plain in [
            &b"1706659200,7"[..],
            b"1706659200,7,\n",
            b" 1,7\n",
            b"1,\"7\"\n",
            b"1,N/A\n",
        ] {
            assert_eq!(plain_row(&c, not_plain, &mut r), None);
        }
        let c = Columns::new(&names(PLAIN_HEADERS[1]));
        let row = b"2024/01/31 12:00:00.5, 3, A100, 45 %, 1024 MiB, 250.5 W, 61, 4, 0x4, 7\n";
        assert_eq!(plain_row(&c, row, &mut r), Some(row.len()));
        assert_eq!(r.index, Some(3));
        assert_eq!(r.sample.mem_used_bytes, Some(1 << 30));
        assert_eq!(r.sample.throttle_reasons, Some(4));
    }

    proptest::proptest! {
        #[test]
        fn a_plain_row_reads_as_the_line_reader_reads_it(
            header in 0..PLAIN_HEADERS.len(),
            fields in proptest::collection::vec(
                "([0-9]{1,12}|[0-9]{0,6}[.][0-9]{0,4}|[0-9]{1,3} ?(%|MiB|W)|N/A|\\[N/A\\]|0x[0-9a-f]{1,3}|A100|Active|2024/01/31 12:00:0[0-9]|1e3|-5|)",
                12,
            ),
            pads in proptest::collection::vec("(||| |\t)", 12),
            bad in 0usize..36,
            bad_byte in "(\"|\r|\0|\u{e9})",
            off in 0i32..6,
            end in "(\n|\n|\n|\r\n|\r|)",
        ) {
            let names: Vec<String> = PLAIN_HEADERS[header].split(',').map(str::to_string).collect();
            let c = Columns::new(&names);
            // As many fields as columns mostly, one more or fewer else.
            let n = (names.len() as i32 + [0, 0, 0, 0, -1, 1][off as usize]).clamp(0, 12) as usize;
            let mut line = String::new();
            for (k, f) in fields.iter().take(n).enumerate() {
                if k > 0 {
                    line.push(',');
                }
                line.push_str(if k == 0 { "" } else { &pads[k] });
                if k == 0 && !f.starts_with(|c: char| c.is_ascii_digit()) {
                    // A row of any other start is no plain row: not worth a case.
                    line.push('1');
                }
                line.push_str(f);
                if bad == k {
                    line.push_str(&bad_byte);
                }
            }
            line.push_str(&end);
            let mut r = Row::default();
            if let Some(n) = plain_row(&c, line.as_bytes(), &mut r) {
                proptest::prop_assert_eq!(n, line.len());
                proptest::prop_assert_eq!(Some(row_view(&r)), row_by_line(&c, line.as_bytes()));
            }
        }

        #[test]
        fn burst_logs_of_any_size_read_back(n in 1u32..=8, readings in 12u32..40,
                                            every_ms in 100u64..3000, busy in 0u32..8) {
            let text = burst_log(n, readings, every_ms, &[busy % n], true);
            let (h, _, s) = read(&text, &CsvOptions::default()).unwrap();
            proptest::prop_assert_eq!(h.gpus.len(), n as usize);
            proptest::prop_assert_eq!(s.len(), (n * readings) as usize);
        }

        #[test]
        fn fast_numbers_read_as_the_careful_path(
            v in "[ ]?[0-9]{0,17}([.][0-9]{0,8})?[.eE]?[-+]?[0-9]{0,3}[ ]?(%|W|MiB|GiB|KB|MB|x|ms|)",
            any in "\\PC{0,12}",
            unit in proptest::option::of("(MiB|%|GB)"),
        ) {
            for v in [&v, &any] {
                let careful = clean(v).and_then(|c| number_careful(c, unit.as_deref()));
                proptest::prop_assert_eq!(
                    number(v, unit.as_deref()).map(f64::to_bits),
                    careful.map(f64::to_bits),
                    "{:?}", v
                );
                if let Some(x) = super::super::fast::decimal(v) {
                    proptest::prop_assert_eq!(Ok(x.to_bits()), v.parse::<f64>().map(f64::to_bits));
                }
            }
        }

        #[test]
        fn fast_timestamps_read_as_the_careful_path(
            y in 0u32..10000, mo in 0u32..14, d in 0u32..33, h in 0u32..26, mi in 0u32..62,
            sec in 0u32..62, slash in proptest::bool::ANY, t in proptest::bool::ANY,
            frac in "([.][0-9]{0,11})?", zone in "(|Z|[+-][0-9]{2}(:?[0-9]{2})?| |x)",
            any in "[0-9/: .TZ+-]{0,30}",
        ) {
            let sep = if slash { '/' } else { '-' };
            let v = format!("{y:04}{sep}{mo:02}{sep}{d:02}{}{h:02}:{mi:02}:{sec:02}{frac}{zone}",
                            if t { 'T' } else { ' ' });
            for v in [&v, &any] {
                let careful = match clean(v) {
                    Some(c) => parse_timestamp_careful(c),
                    None => Ok(None),
                };
                proptest::prop_assert_eq!(
                    parse_timestamp(v).map(|t| t.map(f64::to_bits)),
                    careful.map(|t| t.map(f64::to_bits)),
                    "{:?}", v
                );
            }
        }

        #[test]
        fn any_value_text_never_panics(v in "\\PC{0,12}") {
            let _ = number(&v, None);
            let _ = number(&v, Some("MiB"));
            let _ = parse_time_value(&v, None);
        }
    }

    #[test]
    fn gpus_without_ids_are_told_apart_by_poll() {
        let text = "timestamp, utilization.gpu [%]\n\
                    2026/12/02 12:00:00.000, 10 %\n2026/12/02 12:00:00.020, 90 %\n\
                    2026/12/02 12:00:01.000, 11 %\n2026/12/02 12:00:01.021, 91 %\n";
        let (h, _, s) = read(text, &CsvOptions::default()).unwrap();
        assert_eq!(h.gpus.len(), 2);
        assert_eq!(s.iter().map(|x| x.index).collect::<Vec<_>>(), [0, 1, 0, 1]);
    }

    #[test]
    fn truncated_last_line_is_dropped() {
        let text = "index, utilization.gpu [%], memory.used [MiB]\n0, 50 %, 10 MiB\n0, 6";
        let (_, info, s) = read(text, &CsvOptions::default()).unwrap();
        assert_eq!(s.len(), 1);
        assert!(info.truncated);
        assert_eq!(info.malformed, 0);
    }

    #[test]
    fn a_last_line_cut_after_a_delimiter_is_dropped() {
        // The field count still fits (the empty field after the comma): the row was cut.
        let text = "index, utilization.gpu [%], memory.used [MiB]\n0, 50 %, 10 MiB\n0, 99 %,";
        let (_, info, s) = read(text, &CsvOptions::default()).unwrap();
        assert_eq!(s.len(), 1);
        assert!(info.truncated);
        // Written whole, the same row is a row with memory not measured.
        let (_, info, s) = read(&format!("{text}\n"), &CsvOptions::default()).unwrap();
        assert_eq!((s.len(), info.truncated), (2, false));
    }

    #[test]
    fn a_row_on_a_date_that_never_was_is_malformed() {
        let text = "timestamp, index, utilization.gpu [%]\n\
                    2024/02/28 12:00:00.000, 0, 10 %\n\
                    2024/02/30 12:00:01.000, 0, 50 %\n\
                    2024/02/28 12:00:02.000, 0, 11 %\n";
        let (_, info, s) = read(text, &CsvOptions::default()).unwrap();
        assert_eq!((s.len(), info.malformed), (2, 1));
        assert_eq!(s[1].t_s, 2.0);
    }

    #[test]
    fn garbage_in_the_middle_is_counted() {
        let text = "index, utilization.gpu [%]\n0, 50 %\n0, 1, 2\n0, 60 %\n";
        let (_, info, s) = read(text, &CsvOptions::default()).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(info.malformed, 1);
        assert!(!info.truncated);
    }

    #[test]
    fn noheader_with_units_is_guessed() {
        let text =
            "2026/12/02 12:00:00.000, NVIDIA A100, 87 %, 34 %, 81920 MiB, 1024 MiB, 80896 MiB\n";
        let (h, _, s) = read(text, &CsvOptions::default()).unwrap();
        assert_eq!(s[0].util_pct, Some(87.0));
        assert_eq!(s[0].mem_util_pct, Some(34.0));
        assert_eq!(s[0].mem_used_bytes, Some(80896 << 20));
        assert_eq!(h.gpus[0].memory_total_bytes, Some(81920 << 20));
    }

    #[test]
    fn noheader_nounits_needs_columns() {
        let text = "0, 87, 1024\n0, 12, 1024\n";
        let e = read(text, &CsvOptions::default()).unwrap_err();
        assert!(e.to_string().contains("--columns"), "{e}");
        let opts = CsvOptions {
            columns: Some(vec![
                "index".into(),
                "utilization.gpu".into(),
                "memory.used [MiB]".into(),
            ]),
            interval_s: Some(2.0),
        };
        let (_, _, s) = read(text, &opts).unwrap();
        assert_eq!(s[1].util_pct, Some(12.0));
        assert_eq!(s[1].t_s, 2.0);
        assert_eq!(s[1].mem_used_bytes, Some(1024 << 20));
    }

    #[test]
    fn throttle_reasons_hex_and_per_reason_columns() {
        let text = "index, clocks_throttle_reasons.active, utilization.gpu [%]\n0, 0x0000000000000040, 99 %\n";
        let (_, _, s) = read(text, &CsvOptions::default()).unwrap();
        assert_eq!(s[0].throttle_reasons, Some(0x40));
        let text = "index, clocks_throttle_reasons.hw_thermal_slowdown, clocks_throttle_reasons.gpu_idle, utilization.gpu [%]\n0, Active, Not Active, 99 %\n";
        let (_, _, s) = read(text, &CsvOptions::default()).unwrap();
        assert_eq!(s[0].throttle_reasons, Some(0x40));
    }

    #[test]
    fn empty_and_headers_only() {
        assert!(matches!(
            read("", &CsvOptions::default()).unwrap_err(),
            LogError::Empty
        ));
        assert!(matches!(
            read("index, utilization.gpu [%]\n", &CsvOptions::default()).unwrap_err(),
            LogError::Format(_)
        ));
    }

    #[test]
    fn a_scripts_own_header_with_iso_timestamps() {
        let text = "timestamp,gpu_index,temperature_C,utilization_gpu_percent,power_W\n\
                    2026-12-02T12:00:00.000000+00:00,0,61,91,301.5\n\
                    2026-12-02T12:00:00.001000+00:00,1,35,0,60.1\n\
                    2026-12-02T12:00:10.000000+00:00,0,62,89,299.0\n\
                    2026-12-02T12:00:10.001000+00:00,1,35,0,60.0\n";
        let (h, info, s) = read(text, &CsvOptions::default()).unwrap();
        assert_eq!(info.rows, 4);
        assert_eq!(h.gpus.len(), 2);
        assert_eq!(s[0].util_pct, Some(91.0));
        assert_eq!(s[0].temperature_c, Some(61));
        assert_eq!(s[0].power_w, Some(301.5));
        assert_eq!(s[3].index, 1);
        assert!((s[2].t_s - 10.0).abs() < 1e-6, "{}", s[2].t_s);
    }

    #[test]
    fn a_scripts_header_with_epoch_seconds_and_nounits_memory() {
        let text = "timestamp,memory.used,memory.total,utilization.gpu\n\
                    1764676800.25,472,32768,25\n1764676810.25,472,32768,27\n";
        let (h, _, s) = read(text, &CsvOptions::default()).unwrap();
        assert_eq!(
            s[0].mem_used_bytes,
            Some(472 << 20),
            "nvidia-smi memory is MiB"
        );
        assert_eq!(h.gpus[0].memory_total_bytes, Some(32768 << 20));
        assert!((s[1].t_s - 10.0).abs() < 1e-6);
        // Epoch milliseconds too.
        let text = "time_ms,gpu_util\n1764676800250,25\n1764676801250,27\n";
        let (_, _, s) = read(text, &CsvOptions::default()).unwrap();
        assert!((s[1].t_s - 1.0).abs() < 1e-6);
    }

    #[test]
    fn a_field_in_two_columns_is_read_from_the_first_with_a_note() {
        let text = "timestamp, utilization.gpu [%], utilization.gpu [%], memory.used [MiB]\n\
                    2026/12/02 12:00:00.000, 90 %, 10 %, 1000 MiB\n\
                    2026/12/02 12:00:01.000, 80 %, 20 %, 1000 MiB\n";
        let (_, info, s) = read(text, &CsvOptions::default()).unwrap();
        assert_eq!(s[0].util_pct, Some(90.0));
        assert_eq!(s[1].util_pct, Some(80.0));
        assert!(
            info.notes
                .iter()
                .any(|n| n.contains("not read") && n.contains("utilization.gpu [%]")),
            "{:?}",
            info.notes
        );
    }

    #[test]
    fn custom_names_map_only_when_clear() {
        let f = |n: &str| (field_of(n), vocab_unit(n));
        assert_eq!(
            f("utilization_gpu_percent"),
            (Field::UtilGpu, Some("%".into()))
        );
        assert_eq!(f("temperature_C"), (Field::Temperature, Some("C".into())));
        assert_eq!(f("power_W"), (Field::Power, Some("W".into())));
        assert_eq!(f("gpu_index"), (Field::Index, None));
        assert_eq!(f("Mem Used (MiB)"), (Field::MemUsed, Some("MiB".into())));
        assert_eq!(
            f("memory_percent").0,
            Field::Other,
            "% of memory is not bytes"
        );
        assert_eq!(f("loss").0, Field::Other);
        // Other tools' names are not this reader's.
        assert_eq!(f("SMACT").0, Field::Other);
        assert_eq!(
            f("clocks_event_reasons.sw_power_cap"),
            (
                Field::ThrottleBit(crate::reading::throttle::SW_POWER_CAP),
                None
            )
        );
        assert!(looks_like_header("timestamp,gpu_index,temperature_C"));
        assert!(!looks_like_header("2026-12-02T12:00:00Z,0,61"));
        assert!(!looks_like_header("alpha,beta"));
    }

    #[test]
    fn unknown_columns_still_ask_for_columns() {
        let text = "a,b,c\n0,87,1024\n";
        let e = read(text, &CsvOptions::default()).unwrap_err();
        assert!(e.to_string().contains("--columns"), "{e}");
        // A header with a time but nothing known to hold utilization or memory.
        let text = "time,loss,lr\n1796083200,2.5,0.1\n1796083201,2.4,0.1\n";
        let e = read(text, &CsvOptions::default()).unwrap_err();
        assert!(e.to_string().contains("--columns"), "{e}");
        // --columns wins over such a header.
        let opts = CsvOptions {
            columns: Some(vec![
                "timestamp".into(),
                "utilization.gpu".into(),
                "x".into(),
            ]),
            interval_s: None,
        };
        let (_, _, s) = read(text, &opts).unwrap();
        assert_eq!(s[0].util_pct, Some(2.5));
    }

    #[test]
    fn timestamps() {
        assert_eq!(
            parse_timestamp("1970-01-01T01:00:10+01:00"),
            Ok(Some(10.0)),
            "the zone offset is applied"
        );
        assert_eq!(parse_timestamp("1970-01-01T00:00:10Z"), Ok(Some(10.0)));
        assert_eq!(parse_timestamp("1970-01-01T01:00:10+0100"), Ok(Some(10.0)));
        assert_eq!(parse_timestamp("1970-01-01T00:00:10-01"), Ok(Some(3610.0)));
        assert_eq!(
            parse_time_value("1764676800.5", None),
            Ok(Some(1764676800.5))
        );
        // Seconds in the year 9999 stay seconds (read as milliseconds they were 1978, and
        // a 10-minute log 0.6 s long); milliseconds of 2023 are milliseconds.
        assert_eq!(
            parse_time_value("253402300799", None),
            Ok(Some(253402300799.0))
        );
        assert_eq!(
            parse_time_value("1700000000000", None),
            Ok(Some(1700000000.0))
        );
        let a = parse_timestamp("2026/12/02 12:00:00.500").unwrap().unwrap();
        let b = parse_timestamp("2026/12/03 12:00:01.000").unwrap().unwrap();
        assert!((b - a - 86400.5).abs() < 1e-6);
        assert_eq!(parse_timestamp("1970/01/01 00:00:10"), Ok(Some(10.0)));
        assert_eq!(parse_timestamp("1970/1/1 0:0:10.25"), Ok(Some(10.25)));
        assert_eq!(parse_timestamp("[N/A]"), Ok(None));
        // Scripts' own layouts, and C's ctime.
        for v in [
            "1970-01-01_00:00:10",
            "19700101-000010",
            "Thu Jan  1 00:00:10 1970",
            "Thu Jan 1 00:00:10 1970",
        ] {
            assert_eq!(parse_timestamp(v), Ok(Some(10.0)), "{v}");
        }
        // The year last: the day or the month first, by country; not guessed.
        assert!(!matches!(
            parse_timestamp("03-11-2026 15:13:16"),
            Ok(Some(_))
        ));
        // What is no date and time, or whose zone is not right after the seconds.
        for v in [
            "1764676800",
            "12:00:00",
            "2026/12/02",
            "2026/12/02 12:00:00 +01:00",
        ] {
            assert_eq!(parse_timestamp(v), Ok(None), "{v}");
        }
        // Dates and times that name no moment.
        for v in [
            "2024/02/30 12:00:00",
            "2026-13-01T00:00:00Z",
            "2026/12/02 25:00:00",
        ] {
            assert_eq!(parse_timestamp(v), Err(ImpossibleTime), "{v}");
        }
        assert_eq!(
            parse_timestamp("2024/02/29 12:00:00").map(|t| t.is_some()),
            Ok(true)
        );
    }
}
