//! Any CSV whose header names columns the vocabulary ([`super::vocab`]) knows, other than an
//! nvidia-smi `--query-gpu` log ([`super::smi_csv`] reads those): DCGM CSVs that scripts write
//! (`EntityId,GRACT,FBUSD,TimeStamp`), W&B and MLflow exports (`system/gpu.0.gpu`,
//! `system/gpu_0_utilization_percentage`, one column per GPU), Grafana panel exports (a column per
//! series `DCGM_FI_DEV_GPU_UTIL{gpu="0",…}`, or `Series,Time,Value` rows), `rocm-smi --csv`
//! and `amd-smi metric --csv` logs and the scripts around them.
//!
//! Lines are read through [`super::each_line_up_to`] (none held past 16 MiB: exports are wide) and split with the `csv`
//! crate (quoted fields, doubled quotes). A line equal to the header is skipped; a different
//! header line starts a new column set (runs appended to one file).

use super::dcgmi::ProfilingMeans;
use super::table::{Table, When};
use super::vocab::{self, Family, Metric};
use super::{LogError, LogInfo};
use crate::reading::{LogHeader, Reading};
use std::collections::{BTreeMap, HashMap};
use std::io::Read;

/// How one column is read.
#[derive(Debug, Clone, PartialEq)]
enum Col {
    /// Known and not judged (a step count, `__MIN`/`__MAX` of a W&B export, NVLink).
    Skip,
    Unknown,
    /// Date and time, or epoch seconds (times `scale`: 1e-3 for a name ending `_ms`).
    Time {
        scale: f64,
    },
    Relative,
    Gpu,
    Host,
    Name,
    Uuid,
    Value {
        metric: Metric,
        scale: f64,
        /// The GPU the column's own name gives (`system/gpu.3.gpu`, a series' labels).
        entity: Option<(Option<String>, String)>,
    },
    /// Grafana's long export: each row names its series.
    Series,
    SeriesValue,
}

/// How a column name reads (after `--columns NAME=KNOWN` renames).
fn column(raw: &str, renames: &HashMap<String, String>) -> Col {
    let raw = raw.trim().trim_matches('"');
    let name = renames.get(raw).map_or(raw, String::as_str);
    // A W&B export names a column `<run> - system/gpu.0.gpu`, with `__MIN` / `__MAX` beside.
    let name = name.rsplit(" - ").next().unwrap_or(name).trim();
    if name.ends_with("__MIN") || name.ends_with("__MAX") || name.eq_ignore_ascii_case("step") {
        return Col::Skip;
    }
    match name.to_ascii_lowercase().as_str() {
        "series" | "metric" | "metric_name" | "__name__" | "field" | "field_name" => {
            return Col::Series
        }
        "value" | "values" => return Col::SeriesValue,
        _ => {}
    }
    if name.contains('{') {
        let (n, labels) = super::prom::parse_series(name);
        let Some(f) = vocab::lookup(&n) else {
            return Col::Unknown;
        };
        let g = super::prom::series_gpu(&labels);
        return value_col(f, Some((g.host.map(str::to_string), g.id)));
    }
    let Some(f) = vocab::lookup(name) else {
        return Col::Unknown;
    };
    let entity = f.gpu.map(|g| (None, g.to_string()));
    value_col(f, entity)
}

fn value_col(f: vocab::Found, entity: Option<(Option<String>, String)>) -> Col {
    match f.term.metric {
        Metric::Time | Metric::Date => Col::Time { scale: f.scale },
        Metric::RelativeS => Col::Relative,
        Metric::Gpu => Col::Gpu,
        Metric::Host => Col::Host,
        Metric::Name => Col::Name,
        Metric::Uuid | Metric::BusId => Col::Uuid,
        Metric::Ignored => Col::Skip,
        metric => Col::Value {
            metric,
            scale: f.scale,
            entity,
        },
    }
}

/// A line's fields: comma-separated (quotes as CSV has them), or, in a table whose header has no
/// comma, separated by white space.
fn split_line(line: &[u8], spaced: bool) -> Vec<String> {
    if spaced {
        return String::from_utf8_lossy(line)
            .split_whitespace()
            .map(str::to_string)
            .collect();
    }
    fields(line)
}

fn fields(line: &[u8]) -> Vec<String> {
    // Most lines quote nothing: split them directly.
    if !line.contains(&b'"') {
        return String::from_utf8_lossy(line)
            .trim_end_matches(['\n', '\r'])
            .split(',')
            .map(|f| f.trim().to_string())
            .collect();
    }
    // Quoted fields (doubled quotes inside) through csv-core, one reader kept per thread: a
    // reader built per line cost its DFA each time (75 ms for a 100 KB W&B export).
    thread_local! {
        static READER: std::cell::RefCell<csv_core::Reader> =
            std::cell::RefCell::new(csv_core::Reader::new());
    }
    READER.with(|r| {
        let mut r = r.borrow_mut();
        r.reset();
        let mut out = vec![0u8; line.len() + 1];
        let mut ends = vec![0usize; line.len() + 1];
        let (mut input, mut o, mut n) = (line, 0usize, 0usize);
        // A line without its newline ends the record only when told the input is over (empty
        // input): hence a loop, bounded by progress.
        loop {
            let (res, read, wrote, nends) = r.read_record(input, &mut out[o..], &mut ends[n..]);
            input = &input[read..];
            // Ends count from the record's start, across calls.
            o += wrote;
            n += nends;
            let progress = read + wrote + nends > 0;
            if !matches!(res, csv_core::ReadRecordResult::InputEmpty) || !progress {
                break;
            }
        }
        let mut start = 0;
        ends[..n]
            .iter()
            .map(|&end| {
                let f = String::from_utf8_lossy(&out[start..end]).trim().to_string();
                start = end;
                f
            })
            .collect()
    })
}

/// Is this row a header: every field a name (none a number), one a value column gpufeed knows?
fn header_cols(f: &[String], renames: &HashMap<String, String>) -> Option<Vec<Col>> {
    if f.len() < 2 || f.iter().any(|v| super::table::number(v).is_some()) {
        return None;
    }
    let cols: Vec<Col> = f.iter().map(|n| column(n, renames)).collect();
    let values = cols.iter().any(|c| matches!(c, Col::Value { .. }))
        || (cols.contains(&Col::Series) && cols.contains(&Col::SeriesValue));
    values.then_some(cols)
}

/// Does this line read as the header of a CSV this reader is for (rather than an nvidia-smi
/// `--query-gpu` log)? One column of another tool's vocabulary, or a Grafana series, decides.
pub fn is_other_tools_header(line: &str) -> bool {
    let f = split_line(line.as_bytes(), !line.contains(','));
    if f.len() < 2 || f.iter().any(|v| super::table::number(v).is_some()) {
        return false;
    }
    let cols: Vec<Col> = f.iter().map(|n| column(n, &HashMap::new())).collect();
    let values = cols.iter().any(|c| matches!(c, Col::Value { .. }));
    let other = values
        && f.iter().any(|n| {
            let n = n.rsplit(" - ").next().unwrap_or(n);
            let base = super::prom::parse_series(n).0;
            n.contains('{') && vocab::lookup(&base).is_some()
                || vocab::lookup(n).is_some_and(|v| {
                    !matches!(v.term.family, Family::SmiQuery | Family::Common)
                        || v.gpu.is_some()
                        || n.eq_ignore_ascii_case("entityid")
                })
        });
    // A table separated by spaces (an nvidia-smi CSV always has commas) is another tool's when
    // most of its names, two at least, are known, one of them a value.
    let known = cols.iter().filter(|c| **c != Col::Unknown).count();
    let spaced = !line.contains(',')
        && values
        && known >= 2
        && known * 2 >= cols.len()
        && !f
            .iter()
            .any(|n| n.starts_with('[') || n.contains('|') || n.starts_with('+'));
    let long = cols.contains(&Col::Series) && cols.contains(&Col::SeriesValue);
    other || long || spaced
}

/// Marks a value column of a metric (of one GPU) an earlier column already holds as skipped, and
/// returns the skipped columns' names: the first is read, not silently the last.
fn skip_duplicates(cols: &mut [Col], names: &[String]) -> Vec<String> {
    let mut dups = Vec::new();
    for i in 0..cols.len() {
        let Col::Value { metric, entity, .. } = &cols[i] else {
            continue;
        };
        let seen = cols[..i].iter().any(
            |c| matches!(c, Col::Value { metric: m, entity: e, .. } if m == metric && e == entity),
        );
        if seen {
            cols[i] = Col::Skip;
            dups.push(names[i].clone());
        }
    }
    dups
}

/// Reads the CSV; `columns` are `NAME=KNOWN` renames (`gpu_busy=utilization.gpu`).
pub fn read_csv(
    r: impl Read,
    columns: &[String],
    interval_s: Option<f64>,
    visit: impl FnMut(&Reading),
) -> Result<(LogHeader, LogInfo, BTreeMap<u32, ProfilingMeans>), LogError> {
    let renames: HashMap<String, String> = columns
        .iter()
        .filter_map(|c| {
            let (a, b) = c.split_once('=')?;
            Some((a.trim().to_string(), b.trim().to_string()))
        })
        .collect();
    let mut t = Table::new();
    let mut header: Option<(Vec<String>, Vec<Col>)> = None;
    let mut any = false;
    let mut first_names: Option<Vec<String>> = None;
    let mut spaced = false;
    t.each_line_up_to(r, super::MAX_WIDE_LINE_BYTES, |t, buf| {
        if header.is_none() && super::looks_binary(buf) {
            return Err(LogError::Format(super::smi_csv::not_a_log("a CSV")));
        }
        let complete = buf.last() == Some(&b'\n');
        if header.is_none() {
            spaced = !buf.contains(&b',');
        }
        let f = split_line(buf, spaced);
        if f.iter().all(String::is_empty) {
            return Ok(());
        }
        any = true;
        if header.as_ref().is_some_and(|(h, _)| *h == f) {
            return Ok(());
        }
        if let Some(mut cols) = header_cols(&f, &renames) {
            for (name, c) in f.iter().zip(&cols) {
                if *c == Col::Unknown {
                    t.unknown(name);
                }
            }
            let dups = skip_duplicates(&mut cols, &f);
            if !dups.is_empty() {
                let note = format!(
                    "Columns of a metric already read were not read (the first of each is): {}.",
                    super::printable(&dups.join(", "))
                );
                if !t.info.notes.contains(&note) {
                    t.info.notes.push(note);
                }
            }
            header = Some((f, cols));
            return Ok(());
        }
        let Some((_, cols)) = header.as_ref() else {
            first_names.get_or_insert(f);
            return Ok(());
        };
        if f.len() != cols.len() {
            if complete {
                t.info.malformed += 1;
            } else {
                t.info.truncated = true;
            }
            return Ok(());
        }
        match row(t, cols, &f) {
            Put::Values => t.info.rows += 1,
            // A GPU past the most one file is read as: counted in the table's note.
            Put::LeftOut => {}
            Put::Nothing => t.info.malformed += 1,
        }
        Ok(())
    })?;
    if !any {
        return Err(LogError::Empty);
    }
    if header.is_none() {
        let names = super::printable(
            &first_names
                .map(|n| n.join(", "))
                .unwrap_or_default()
                .chars()
                .take(200)
                .collect::<String>(),
        );
        return Err(LogError::Format(format!(
            "no header line naming a GPU column gpufeed knows (the first line has: {names}); \
             name yours with --columns NAME=utilization.gpu (docs/diagnose.md, \"What gpufeed \
             reads\")"
        )));
    }
    t.finish("a CSV", interval_s, visit)
}

/// A time column's value in seconds: a date and time, or an epoch number (its name's unit, else
/// its size, [`super::epoch_seconds`]).
fn time_value(v: &str, scale: f64) -> Option<f64> {
    if let Ok(Some(t)) = super::smi_csv::parse_timestamp(v) {
        return Some(t);
    }
    let x: f64 = v.trim().trim_matches('"').parse().ok()?;
    if !x.is_finite() || x < 0.0 {
        return None;
    }
    if scale != 1.0 {
        return Some(x * scale);
    }
    Some(super::epoch_seconds(x))
}

/// What one data row gave.
enum Put {
    Values,
    /// Its GPU is one past [`super::table::MAX_ENTITIES`].
    LeftOut,
    Nothing,
}

/// Puts one data row's values.
fn row(t: &mut Table, cols: &[Col], f: &[String]) -> Put {
    let mut time: Option<f64> = None;
    let mut rel: Option<f64> = None;
    let (mut gpu, mut host, mut name, mut uuid) = (None, None, None, None);
    let mut series: Option<&str> = None;
    let mut series_value: Option<&str> = None;
    for (c, v) in cols.iter().zip(f) {
        match c {
            Col::Time { scale } => time = time_value(v, *scale),
            Col::Relative => rel = super::table::number(v).map(|x| x.0),
            Col::Gpu => gpu = gpu.or(Some(v.as_str()).filter(|v| !v.is_empty())),
            Col::Host => host = Some(v.as_str()).filter(|v| !v.is_empty()),
            Col::Name => name = Some(v.as_str()),
            Col::Uuid => uuid = Some(v.as_str()),
            Col::Series => series = Some(v.as_str()),
            Col::SeriesValue => series_value = Some(v.as_str()),
            _ => {}
        }
    }
    let at = time.or(rel);
    if let (Some(s), Some(v)) = (series, series_value) {
        let row_gpu = gpu.map(|g| (host, g, name, uuid));
        return if super::prom::put_series(t, s, at, v, row_gpu) {
            Put::Values
        } else {
            Put::Nothing
        };
    }
    // A row that names a GPU column but leaves it empty holds no reading (rocm-smi's blank
    // line under a script's timestamp).
    if cols.contains(&Col::Gpu) && gpu.is_none() {
        return Put::Nothing;
    }
    let mut whens: Vec<(u32, When)> = Vec::new();
    let mut any = false;
    let mut left_out = false;
    for (c, v) in cols.iter().zip(f) {
        let Col::Value {
            metric,
            scale,
            entity,
        } = c
        else {
            continue;
        };
        let Some((x, bytes)) = super::table::number(v) else {
            continue;
        };
        let e = match entity {
            Some((h, id)) => t.entity(h.as_deref().or(host), id),
            None => t.entity(host, gpu.or(uuid).unwrap_or("0")),
        };
        let Some(e) = e else {
            left_out = true;
            continue;
        };
        if entity.is_none() {
            t.describe(e, name, uuid);
        }
        let when = match whens.iter().find(|(x, _)| *x == e) {
            Some(&(_, w)) => w,
            None => {
                let w = at.map_or_else(|| t.next_nth(e), When::At);
                whens.push((e, w));
                w
            }
        };
        let is_bytes = matches!(
            metric,
            Metric::MemUsedBytes | Metric::MemTotalBytes | Metric::MemFreeBytes
        );
        t.put(
            e,
            when,
            *metric,
            if bytes && is_bytes { x } else { x * scale },
        );
        any = true;
    }
    match (any, left_out) {
        (true, _) => Put::Values,
        (false, true) => Put::LeftOut,
        (false, false) => Put::Nothing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str, columns: &[&str]) -> Result<(LogHeader, LogInfo, Vec<Reading>), LogError> {
        let mut out = Vec::new();
        let cols: Vec<String> = columns.iter().map(|s| s.to_string()).collect();
        let (h, i, _) = read_csv(text.as_bytes(), &cols, None, |l| out.push(l.clone()))?;
        Ok((h, i, out))
    }

    #[test]
    fn a_dcgm_csv_with_runs_appended() {
        let text = "EntityId,GRACT,FBUSD,TimeStamp\n0,0.000,9,1657283672\n0,0.741,2687,1657283673\n\
                    EntityId,GRACT,FBUSD,TimeStamp\n0,0.8,2687,1657283700\n1,0.1,2687,1657283700\n0,0.79";
        let (h, info, s) = read(text, &[]).unwrap();
        assert_eq!(h.gpus.len(), 2);
        assert_eq!(s.len(), 4);
        assert!((s[1].util_pct.unwrap() - 74.1).abs() < 1e-3);
        assert_eq!(s[1].mem_used_bytes, Some(2687 << 20));
        assert_eq!(s[2].t_s, 28.0);
        assert!(info.truncated);
        assert!(
            info.notes[0].contains("graphics engine active"),
            "{:?}",
            info.notes
        );
    }

    #[test]
    fn a_metric_in_two_columns_is_read_from_the_first() {
        let text = "EntityId,GRACT,GRACT,TimeStamp\n0,0.9,0.1,1700000000\n";
        let (_, info, s) = read(text, &[]).unwrap();
        assert!((s[0].util_pct.unwrap() - 90.0).abs() < 1e-9);
        assert!(
            info.notes
                .iter()
                .any(|n| n.contains("were not read") && n.ends_with(": GRACT.")),
            "{:?}",
            info.notes
        );
    }

    #[test]
    fn a_wandb_export_one_column_per_gpu() {
        let text = "\"Relative Time (Process)\",\"run-a - system/gpu.0.gpu\",\"run-a - system/gpu.0.gpu__MIN\",\"run-a - system/gpu.1.gpu\"\n\
                    30,95,90,0\n60,97,91,0\n";
        let (h, _, s) = read(text, &[]).unwrap();
        assert_eq!(h.gpus.len(), 2);
        assert_eq!(s.len(), 4);
        assert_eq!(s[2].t_s, 30.0);
        assert_eq!(s[2].util_pct, Some(97.0));
    }

    #[test]
    fn grafana_series_columns_and_rows() {
        let text = "\"Time\",\"DCGM_FI_DEV_GPU_UTIL{gpu=\"\"0\"\", Hostname=\"\"n1\"\"}\",\"DCGM_FI_DEV_GPU_UTIL{gpu=\"\"1\"\", Hostname=\"\"n1\"\"}\"\n\
                    2024-05-01 10:00:00,90,1\n2024-05-01 10:00:15,91,2\n";
        let (h, _, s) = read(text, &[]).unwrap();
        assert_eq!(h.gpus.len(), 2);
        assert_eq!(s[3].t_s, 15.0);
        let prom = "timestamp,metric_name,gpu_id,Hostname,value\n\
                    2025-07-18T20:42:34Z,DCGM_FI_DEV_GPU_UTIL,0,h1,0\n\
                    2025-07-18T20:42:34Z,DCGM_FI_DEV_GPU_UTIL,1,h1,100\n";
        let (h, _, s) = read(prom, &[]).unwrap();
        assert_eq!((h.gpus.len(), s.len()), (2, 2));
        assert_eq!(s[1].util_pct, Some(100.0));
        let long = "Series,Time,Value\n\"DCGM_FI_DEV_GPU_UTIL{gpu=\"\"0\"\"}\",1700000000000,50\n\"DCGM_FI_DEV_GPU_UTIL{gpu=\"\"1\"\"}\",1700000000000,5\n";
        let (h, _, s) = read(long, &[]).unwrap();
        assert_eq!((h.gpus.len(), s.len()), (2, 2));
    }

    #[test]
    fn a_rocm_script_log_with_blank_rows_and_a_counter() {
        let text =
            "timestamp,device,gpu_use_percent,gfx_activity,vram_total_bytes,vram_used_bytes\n\
                    1754586812,card0,0,110778690,206141652992,297771008\n\
                    1754586812,card1,0,62280730,206141652992,297771008\n1754586812,\n\
                    1754586817,card0,88,110778699,206141652992,297771008\n";
        let (h, info, s) = read(text, &[]).unwrap();
        assert_eq!(h.gpus.len(), 2);
        assert_eq!(s[2].util_pct, Some(88.0));
        assert_eq!(s[2].t_s, 5.0);
        assert_eq!(info.malformed, 1);
        // gfx_activity (a counter here) is a second utilization column: not read.
        assert!(
            info.notes.iter().any(|n| n.ends_with(": gfx_activity.")),
            "{:?}",
            info.notes
        );
        // Alone, the counter under a percent's name is left out value by value, with a note.
        let alone = "timestamp,device,gfx_activity\n1754586812,card0,110778690\n\
                     1754586817,card0,55\n";
        let (_, info, s) = read(alone, &[]).unwrap();
        assert_eq!(
            s.iter().filter_map(|x| x.util_pct).collect::<Vec<_>>(),
            [55.0]
        );
        assert!(
            info.notes
                .iter()
                .any(|n| n.contains("above 100 % (up to 110778690)")),
            "{:?}",
            info.notes
        );
    }

    #[test]
    fn columns_rename_unknown_names() {
        let text = "when,busy,vram\n1700000000,50,10\n";
        let e = read(text, &[]).unwrap_err().to_string();
        assert!(e.contains("--columns"), "{e}");
        let (_, _, s) = read(text, &["busy=utilization.gpu", "when=timestamp"]).unwrap();
        assert_eq!(s[0].util_pct, Some(50.0));
    }

    #[test]
    fn quoted_fields_split_as_csv_says() {
        assert_eq!(
            fields(b"\"a, b\",\"x{gpu=\"\"0\"\"}\", 7 \n"),
            ["a, b", "x{gpu=\"0\"}", "7"]
        );
        assert_eq!(fields(b"\"last\",\"no newline\""), ["last", "no newline"]);
        assert_eq!(fields(b"plain, 1,2\r\n"), ["plain", "1", "2"]);
    }

    /// A W&B export of many runs: each run's columns (value, `__MIN`, `__MAX`) make a header
    /// far over 64 KiB, refused as "no header line" when every line was held to 64 KiB.
    #[test]
    fn a_wide_export_header_over_64_kib_is_read() {
        let mut cols = vec!["Step".to_string()];
        for i in 0..900 {
            for tail in ["", "__MIN", "__MAX"] {
                cols.push(format!(
                    "\"run-{i:04}-abcdefghij - system/gpu.0.gpu{tail}\""
                ));
            }
        }
        let header = cols.join(",");
        assert!(header.len() > 64 << 10);
        let mut text = header + "\n";
        for step in 0..5 {
            text += &format!("{step}{}\n", ",37.5".repeat(cols.len() - 1));
        }
        let (h, _, s) = read(&text, &[]).unwrap();
        assert!(!h.gpus.is_empty());
        assert_eq!(s[0].util_pct, Some(37.5));
    }

    #[test]
    fn a_table_separated_by_spaces() {
        let text = "timestamp dev_uuid dev_util_pc dev_mem_used_mb\n\
                    2023-10-03T16:22:09Z  GPU-3416c700 0 4\n2023-10-03T16:22:09Z  GPU-b44b346d 4 4\n\
                    2023-10-03T16:22:10Z  GPU-3416c700 99 440\n";
        let (h, _, s) = read(text, &[]).unwrap();
        assert_eq!(h.gpus.len(), 2);
        assert_eq!(s[2].util_pct, Some(99.0));
        // gpuutiliz's `_mb` is MiB (it divides by 1024²).
        assert_eq!(s[2].mem_used_bytes, Some(440 << 20));
        assert_eq!(h.gpus[0].uuid.as_deref(), Some("GPU-3416c700"));
    }

    /// A script's `mem_used_mb` reads the same as nvidia-smi's CSV (`smi_csv`) and as another
    /// tool's table (here): MiB, as the scripts that write it divide by 1024² (gpuutiliz:
    /// `Used / (1024 * 1024)`). It read 41.9 GB on one path and 40.0 GB on the other.
    #[test]
    fn a_script_mb_column_reads_the_same_on_every_path() {
        let text = "timestamp, gpu_index, utilization_gpu_percent, mem_used_mb\n\
                    2026/12/02 12:00:00, 0, 87, 40000\n2026/12/02 12:00:01, 0, 88, 40000\n";
        let (_, _, table) = read(text, &[]).unwrap();
        let mut smi = Vec::new();
        crate::smi_csv::read_smi_csv(std::io::Cursor::new(text), &Default::default(), |r| {
            smi.push(r.clone())
        })
        .unwrap();
        assert_eq!(smi[0].mem_used_bytes, Some(40_000 << 20));
        assert_eq!(table[0].mem_used_bytes, smi[0].mem_used_bytes);
    }

    #[test]
    fn detection_of_other_tools_headers() {
        assert!(is_other_tools_header("EntityId,GRACT,FBUSD,TimeStamp"));
        assert!(is_other_tools_header("Step,system/gpu.0.gpu"));
        assert!(is_other_tools_header(
            "device,GPU use (%),GPU memory use (%)"
        ));
        assert!(!is_other_tools_header(
            "timestamp, utilization.gpu [%], memory.used [MiB]"
        ));
        assert!(!is_other_tools_header("0, 87 %, 1024 MiB"));
        assert!(is_other_tools_header(
            "timestamp dev_uuid dev_util_pc dev_mem_used_mb"
        ));
        assert!(!is_other_tools_header("the gpu device was busy"));
        assert!(!is_other_tools_header(
            "| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |"
        ));
        assert!(is_other_tools_header("GPUId,TimeStampUs,Field,Values"));
    }
}
