//! W&B system metrics: `wandb-events.jsonl`, one JSON object every ~15–30 s with
//! `system.gpu.0.gpu`, `system.gpu.0.memoryAllocated`, … and `_timestamp` (epoch seconds).
//! Keys are looked up in the vocabulary ([`super::vocab`]); the host's own keys (`system.cpu`,
//! `system.disk`, …) are passed over.

use super::dcgmi::ProfilingMeans;
use super::table::{Table, When};
use super::vocab::{self, Metric};
use super::{LogError, LogInfo};
use crate::reading::{LogHeader, Reading};
use std::collections::BTreeMap;
use std::io::Read;

/// Reads `wandb-events.jsonl`.
pub fn read_events(
    r: impl Read,
    interval_s: Option<f64>,
    visit: impl FnMut(&Reading),
) -> Result<(LogHeader, LogInfo, BTreeMap<u32, ProfilingMeans>), LogError> {
    let mut t = Table::new();
    let mut any = false;
    // Some line was a JSON object (else the file is no W&B events file at all).
    let mut objects = false;
    t.each_line(r, |t, buf| {
        if buf.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        any = true;
        let obj: serde_json::Map<String, serde_json::Value> = match serde_json::from_slice(buf) {
            Ok(o) => {
                objects = true;
                o
            }
            Err(_) => {
                if buf.last() == Some(&b'\n') {
                    t.info.malformed += 1;
                } else {
                    t.info.truncated = true;
                }
                return Ok(());
            }
        };
        let mut time = None;
        let mut rel = None;
        let mut values = Vec::new();
        for (k, v) in &obj {
            let Some(f) = vocab::lookup(k) else {
                if !(k.starts_with('_') || k.starts_with("system.") && !k.contains("gpu")) {
                    t.unknown(k);
                }
                continue;
            };
            let Some(x) = v.as_f64() else { continue };
            match f.term.metric {
                Metric::Time | Metric::Date => time = Some(super::epoch_seconds(x)),
                Metric::RelativeS => rel = Some(x),
                Metric::Ignored | Metric::Gpu | Metric::Host | Metric::Name | Metric::Uuid => {}
                m => values.push((f.gpu.unwrap_or(0), m, x * f.scale)),
            }
        }
        let at = time.or(rel);
        let mut put = false;
        for (gpu, m, x) in values {
            let Some(e) = t.entity(None, &gpu.to_string()) else {
                continue;
            };
            let w = match at {
                Some(s) => When::At(s),
                None => t.next_nth_of(e, m),
            };
            t.put(e, w, m, x);
            put = true;
        }
        if put {
            t.info.rows += 1;
        }
        Ok(())
    })?;
    if !any {
        return Err(LogError::Empty);
    }
    if !objects {
        return Err(LogError::Format(
            "not W&B events: no line is a JSON object (wandb-events.jsonl has one a line); \
             without --input-format the format is detected"
                .into(),
        ));
    }
    if t.is_empty() && t.info.rows == 0 {
        return Err(LogError::Format(
            "W&B events with no system.gpu.* keys: the run logged no GPU (it ran on the CPU, or \
             wandb saw no NVIDIA/AMD driver)"
                .into(),
        ));
    }
    t.finish("W&B system metrics (wandb-events.jsonl)", interval_s, visit)
}

/// The telemetry file of a W&B run folder (`wandb/run-20240515_162424-n748obmj/`): its run file
/// (`run-ID.wandb`), else the events file of older wandb (`wandb-events.jsonl`, in the folder or
/// its `files/`).
pub fn run_folder_file(dir: &std::path::Path) -> Option<std::path::PathBuf> {
    let run = std::fs::read_dir(dir).ok()?.flatten().find_map(|e| {
        let name = e.file_name();
        let name = name.to_str()?;
        (name.starts_with("run-") && name.ends_with(".wandb") && e.path().is_file())
            .then(|| e.path())
    });
    run.or_else(|| {
        [
            dir.join("wandb-events.jsonl"),
            dir.join("files").join("wandb-events.jsonl"),
        ]
        .into_iter()
        .find(|p| p.is_file())
    })
}

/// A W&B run file's magic: `:W&B`, then 0xBEE1 and the format version (1).
pub const RUN_FILE_MAGIC: &[u8] = b":W&B";
/// The run file is a LevelDB-style log: 32 KiB blocks of chunks, each with a 7-byte header
/// (checksum, length, type) after the file's own 7-byte header.
const BLOCK: usize = 32 * 1024;
const CHUNK_HEADER: usize = 7;
/// The largest record kept whole (a run's records are a few KiB; a media file logged inline
/// can be larger and holds no system metrics).
const MAX_RECORD: usize = 16 << 20;

/// Reads a `.wandb` run file (what wandb writes since 2021 instead of wandb-events.jsonl):
/// records of the `Record` protobuf, of which the stats records (field 7: a timestamp and
/// `key`/`value_json` items such as `gpu.0.gpu` = `42.8`) are W&B's system metrics. They go
/// through the vocabulary as `system.<key>`, as in wandb-events.jsonl.
pub fn read_run(
    mut r: impl Read,
    interval_s: Option<f64>,
    mut visit: impl FnMut(&Reading),
) -> Result<(LogHeader, LogInfo, BTreeMap<u32, ProfilingMeans>), LogError> {
    let mut t = Table::new();
    let mut header = [0u8; CHUNK_HEADER];
    let got = read_full(&mut r, &mut header)?;
    if got == 0 {
        return Err(LogError::Empty);
    }
    if got < CHUNK_HEADER || !header.starts_with(RUN_FILE_MAGIC) {
        return Err(LogError::Format(
            "not a W&B run file (.wandb files start with `:W&B`)".into(),
        ));
    }
    let mut block = vec![0u8; BLOCK];
    // The first block is the one the file's header began.
    let mut first = true;
    let mut record: Vec<u8> = Vec::new();
    let mut dropping = false;
    // A record's first chunk came and its last has not.
    let mut open = false;
    let mut stats = 0u64;
    loop {
        let want = if first { BLOCK - CHUNK_HEADER } else { BLOCK };
        first = false;
        let n = read_full(&mut r, &mut block[..want])?;
        if n == 0 {
            break;
        }
        let mut b = &block[..n];
        while b.len() >= CHUNK_HEADER {
            let len = usize::from(u16::from_le_bytes([b[4], b[5]]));
            let kind = b[6];
            if kind == 0 && len == 0 {
                // Zero padding at a block's end.
                break;
            }
            if CHUNK_HEADER + len > b.len() {
                t.info.truncated = true;
                break;
            }
            let data = &b[CHUNK_HEADER..CHUNK_HEADER + len];
            b = &b[CHUNK_HEADER + len..];
            match kind {
                // A whole record, or its first chunk.
                1 | 2 => {
                    record.clear();
                    dropping = false;
                    open = kind == 2;
                    record.extend_from_slice(data);
                }
                3 | 4 if !dropping => {
                    if record.len() + data.len() > MAX_RECORD {
                        dropping = true;
                        record.clear();
                    } else {
                        record.extend_from_slice(data);
                    }
                }
                3 | 4 => {}
                _ => {
                    t.info.malformed += 1;
                    continue;
                }
            }
            if kind == 4 {
                open = false;
            }
            if matches!(kind, 1 | 4) && !dropping {
                match stats_of(&record) {
                    Ok(Some((at, items))) => {
                        stats += 1;
                        put_stats(&mut t, at, &items);
                    }
                    Ok(None) => {}
                    Err(()) => t.info.malformed += 1,
                }
            }
        }
        if n < want {
            break;
        }
    }
    if open {
        t.info.truncated = true;
    }
    if stats == 0 || t.is_empty() {
        return Err(LogError::Format(format!(
            "a W&B run file with {}: the run logged no GPU (it ran on the CPU, wandb saw no \
             NVIDIA/AMD driver, or system metrics were off)",
            if stats == 0 {
                "no system metrics".to_string()
            } else {
                "system metrics but no gpu.* keys".to_string()
            }
        )));
    }
    t.finish(
        "W&B system metrics (.wandb run file)",
        interval_s,
        &mut visit,
    )
}

/// Reads until `buf` is full or the input ends; the bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> Result<usize, LogError> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(LogError::Io(e)),
        }
    }
    Ok(n)
}

/// Puts one stats record's items (W&B's names without the `system.` prefix) into the table.
fn put_stats(t: &mut Table, at: Option<f64>, items: &[(String, f64)]) {
    let mut put = false;
    for (k, x) in items {
        // `gpu.process.N.*` repeat `gpu.N.*` for the GPU the run's own process uses.
        if k.starts_with("gpu.process.") {
            continue;
        }
        let name = format!("system.{k}");
        let Some(f) = vocab::lookup(&name) else {
            if k.contains("gpu") {
                t.unknown(&name);
            }
            continue;
        };
        let m = match f.term.metric {
            Metric::Time
            | Metric::Date
            | Metric::RelativeS
            | Metric::Ignored
            | Metric::Gpu
            | Metric::Host
            | Metric::Name
            | Metric::Uuid => continue,
            m => m,
        };
        let gpu = f.gpu.unwrap_or(0);
        let Some(e) = t.entity(None, &gpu.to_string()) else {
            continue;
        };
        let w = match at {
            Some(s) => When::At(s),
            None => t.next_nth_of(e, m),
        };
        t.put(e, w, m, x * f.scale);
        put = true;
    }
    if put {
        t.info.rows += 1;
    }
}

/// A stats record's time and numeric items, `None` for any other record; `Err` when the bytes
/// are no protobuf.
#[allow(clippy::type_complexity)]
fn stats_of(record: &[u8]) -> Result<Option<(Option<f64>, Vec<(String, f64)>)>, ()> {
    // Record: field 7 is `StatsRecord stats`.
    let Some(stats) = fields(record).find_map(|f| match f {
        Ok((7, Field::Bytes(b))) => Some(Ok(b)),
        Err(()) => Some(Err(())),
        _ => None,
    }) else {
        return Ok(None);
    };
    let stats = stats?;
    let mut at = None;
    let mut items = Vec::new();
    for f in fields(stats) {
        match f? {
            // google.protobuf.Timestamp: seconds (1), nanos (2).
            (2, Field::Bytes(ts)) => {
                let (mut s, mut ns) = (None, 0u64);
                for g in fields(ts) {
                    match g? {
                        (1, Field::Varint(v)) => s = Some(v),
                        (2, Field::Varint(v)) => ns = v,
                        _ => {}
                    }
                }
                at = s.map(|s| s as f64 + ns as f64 * 1e-9);
            }
            // StatsItem: key (1), value_json (16).
            (3, Field::Bytes(item)) => {
                let (mut key, mut value) = (None, None);
                for g in fields(item) {
                    match g? {
                        (1, Field::Bytes(k)) => key = std::str::from_utf8(k).ok(),
                        (16, Field::Bytes(v)) => {
                            value = std::str::from_utf8(v)
                                .ok()
                                .and_then(|v| v.trim().parse::<f64>().ok())
                        }
                        _ => {}
                    }
                }
                if let (Some(k), Some(v)) = (key, value.filter(|v| v.is_finite())) {
                    items.push((k.to_string(), v));
                }
            }
            _ => {}
        }
    }
    Ok(Some((at, items)))
}

/// A protobuf field's value, as far as this reader needs it.
enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// The fields of a protobuf message, in order: `(number, value)`, `Err` at bytes that are none.
fn fields(mut b: &[u8]) -> impl Iterator<Item = Result<(u64, Field<'_>), ()>> {
    std::iter::from_fn(move || {
        if b.is_empty() {
            return None;
        }
        let r = (|| {
            let key = varint(&mut b)?;
            let value = match key & 7 {
                0 => Field::Varint(varint(&mut b)?),
                1 | 5 => {
                    let n = if key & 7 == 1 { 8 } else { 4 };
                    b = b.get(n..).ok_or(())?;
                    Field::Fixed
                }
                2 => {
                    let n = usize::try_from(varint(&mut b)?).map_err(|_| ())?;
                    let (v, rest) = (b.get(..n).ok_or(())?, &b[n..]);
                    b = rest;
                    Field::Bytes(v)
                }
                _ => return Err(()),
            };
            Ok((key >> 3, value))
        })();
        if r.is_err() {
            b = &[];
        }
        Some(r)
    })
}

fn varint(b: &mut &[u8]) -> Result<u64, ()> {
    let mut x = 0u64;
    for shift in (0..64).step_by(7) {
        let (&c, rest) = b.split_first().ok_or(())?;
        *b = rest;
        x |= u64::from(c & 0x7f) << shift;
        if c < 0x80 {
            return Ok(x);
        }
    }
    Err(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_of_two_gpus() {
        let text = r#"{"system.gpu.0.gpu": 4.07, "system.gpu.0.memoryAllocated": 1.91, "system.gpu.1.gpu": 0, "system.cpu": 65.27, "_wandb": true, "_timestamp": 1582070941, "_runtime": 28}
{"system.gpu.0.gpu": 90, "system.gpu.1.gpu": 0, "_timestamp": 1582070971.5, "_runtime": 58, "new.key": 1}
{"system.gpu.0.gpu": 9"#;
        let mut out = Vec::new();
        let (h, info, _) = read_events(text.as_bytes(), None, |l| out.push(l.clone())).unwrap();
        assert_eq!(h.gpus.len(), 2);
        assert_eq!(out.len(), 4);
        assert_eq!(out[2].t_s, 30.5);
        assert_eq!(out[2].util_pct, Some(90.0));
        assert!(info.truncated);
        assert!(
            info.notes.iter().any(|n| n.contains("new.key")),
            "{:?}",
            info.notes
        );
        assert!(!info.notes.iter().any(|n| n.contains("system.cpu")));
    }

    fn pb_varint(mut x: u64, out: &mut Vec<u8>) {
        while x >= 0x80 {
            out.push((x as u8) | 0x80);
            x >>= 7;
        }
        out.push(x as u8);
    }

    fn pb_bytes(field: u64, b: &[u8], out: &mut Vec<u8>) {
        pb_varint(field << 3 | 2, out);
        pb_varint(b.len() as u64, out);
        out.extend_from_slice(b);
    }

    /// A `Record` holding a stats record at `secs` with `items`, as wandb writes it.
    fn stats_record(secs: u64, items: &[(&str, &str)]) -> Vec<u8> {
        let mut ts = Vec::new();
        pb_varint(1 << 3, &mut ts);
        pb_varint(secs, &mut ts);
        let mut stats = Vec::new();
        pb_varint(1 << 3, &mut stats);
        pb_varint(0, &mut stats);
        pb_bytes(2, &ts, &mut stats);
        for (k, v) in items {
            let mut item = Vec::new();
            pb_bytes(1, k.as_bytes(), &mut item);
            pb_bytes(16, v.as_bytes(), &mut item);
            pb_bytes(3, &item, &mut stats);
        }
        let mut rec = Vec::new();
        pb_varint(1 << 3, &mut rec);
        pb_varint(7, &mut rec);
        pb_bytes(7, &stats, &mut rec);
        rec
    }

    /// Frames records into a run file: the header, then 32 KiB blocks of chunks (a record that
    /// does not fit the block's rest is split into first, middle and last chunks).
    fn run_file(records: &[Vec<u8>]) -> Vec<u8> {
        let mut f = b":W&B\xe1\xbe\x01".to_vec();
        for r in records {
            let mut rest = &r[..];
            let mut begun = false;
            loop {
                let room = BLOCK - f.len() % BLOCK;
                if room < CHUNK_HEADER {
                    f.resize(f.len() + room, 0);
                    continue;
                }
                let n = rest.len().min(room - CHUNK_HEADER);
                let last = n == rest.len();
                let kind = match (begun, last) {
                    (false, true) => 1,
                    (false, false) => 2,
                    (true, false) => 3,
                    (true, true) => 4,
                };
                f.extend_from_slice(&[0, 0, 0, 0]);
                f.extend_from_slice(&(n as u16).to_le_bytes());
                f.push(kind);
                f.extend_from_slice(&rest[..n]);
                rest = &rest[n..];
                begun = true;
                if last {
                    break;
                }
            }
        }
        f
    }

    #[test]
    fn a_run_file_gives_its_system_metrics() {
        // 300 stats records of two GPUs (one busy, one idle) with a padding of CPU keys, so
        // records cross the 32 KiB blocks; other records (history) between them.
        let cpus: Vec<(String, String)> = (0..32)
            .map(|c| (format!("cpu.{c}.cpu_percent"), "12.5".to_string()))
            .collect();
        let mut records = Vec::new();
        for k in 0..300u64 {
            let mut items: Vec<(&str, &str)> =
                cpus.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
            let util = if k % 2 == 0 { "91.5" } else { "88" };
            items.extend([
                ("gpu.0.gpu", util),
                ("gpu.0.memoryAllocated", "40.2"),
                ("gpu.process.0.gpu", util),
                ("gpu.1.gpu", "0"),
                ("cpu", "8.3"),
            ]);
            records.push(stats_record(1_715_786_000 + 15 * k, &items));
            let mut history = Vec::new();
            pb_bytes(2, b"\x0a\x04loss", &mut history);
            records.push(history);
        }
        let file = run_file(&records);
        assert!(file.len() > 3 * BLOCK);
        let mut out = Vec::new();
        let (h, info, _) = read_run(&file[..], None, |r| out.push(r.clone())).unwrap();
        assert_eq!(h.gpus.len(), 2);
        assert_eq!(info.rows, 600);
        assert!(!info.truncated && info.malformed == 0, "{info:?}");
        let g0: Vec<&Reading> = out.iter().filter(|r| r.index == 0).collect();
        assert_eq!(g0.len(), 300);
        assert_eq!(g0[2].util_pct, Some(91.5));
        assert_eq!(g0[1].t_s, 15.0);
        // Cut mid-record: what came whole is read, and the cut is said.
        let cut = &file[..file.len() - 40];
        let (_, info, _) = read_run(cut, None, |_| {}).unwrap();
        assert!(info.truncated);
        // A run with no GPU, and bytes that are no run file.
        let cpu_only = run_file(&[stats_record(1, &[("cpu", "3")])]);
        let e = read_run(&cpu_only[..], None, |_| {})
            .unwrap_err()
            .to_string();
        assert!(e.contains("no gpu.* keys"), "{e}");
        let e = read_run(&b"timestamp,util\n"[..], None, |_| {})
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a W&B run file"), "{e}");
    }

    #[test]
    fn any_bytes_after_the_magic_never_panic() {
        // Random chunks (random lengths and kinds) and random protobuf inside valid chunks.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..300 {
            let mut f = b":W&B\xe1\xbe\x01".to_vec();
            let n = (next() % 70_000) as usize;
            if round % 2 == 0 {
                f.extend((0..n).map(|_| next() as u8));
            } else {
                let mut records = Vec::new();
                for _ in 0..(next() % 40) {
                    let len = (next() % 300) as usize;
                    let mut r: Vec<u8> = (0..len).map(|_| next() as u8).collect();
                    if next() % 2 == 0 {
                        r.insert(0, 7 << 3 | 2);
                    }
                    records.push(r);
                }
                f = run_file(&records);
                f.truncate(f.len().saturating_sub((next() % 50) as usize));
            }
            let _ = read_run(&f[..], None, |_| {});
        }
    }

    #[test]
    fn a_run_folder_gives_its_run_file_else_its_events() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(run_folder_file(d.path()), None);
        std::fs::create_dir(d.path().join("files")).unwrap();
        let events = d.path().join("files").join("wandb-events.jsonl");
        std::fs::write(&events, "{}\n").unwrap();
        assert_eq!(run_folder_file(d.path()), Some(events));
        let run = d.path().join("run-abc123.wandb");
        std::fs::write(&run, RUN_FILE_MAGIC).unwrap();
        assert_eq!(run_folder_file(d.path()), Some(run));
    }

    #[test]
    fn events_without_a_gpu_are_refused_plainly() {
        let e = read_events(
            &b"{\"system.cpu\": 5, \"_timestamp\": 1}\n"[..],
            None,
            |_| {},
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("no system.gpu"), "{e}");
        let e = read_events(
            &b"timestamp, utilization.gpu [%]\n0, 5 %\n"[..],
            None,
            |_| {},
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("not W&B events"), "{e}");
    }
}
