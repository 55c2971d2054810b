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

/// The message for a `.wandb` run file (W&B's binary log of a run, system metrics included).
pub fn binary_run_file_message(shown: &str) -> String {
    format!(
        "a W&B run file (.wandb, binary): gpufeed reads W&B's system metrics from \
         wandb-events.jsonl or a CSV export; for this run, export the system panel's CSV from the \
         W&B UI, or run `wandb sync {shown}` and export it from there"
    )
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
