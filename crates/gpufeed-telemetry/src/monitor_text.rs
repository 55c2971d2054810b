//! A monitoring script's text log: a banner with the time (`=== 2024-10-31 18:47:06 ===`), then
//! one `Name: value` line a metric (`GPU Load: 45.0%`, `GPU Memory: 812.0MB / 6144.0MB (13.2%)`,
//! `GPU Temperature: 48.0°C`), as the scripts around GPUtil or pynvml print them. Names go
//! through the vocabulary (`GPU 1 Load` is GPU 1's); what it does not know (CPU, RAM, PyTorch's
//! allocator) is passed over.

use super::dcgmi::ProfilingMeans;
use super::table::{Table, When};
use super::vocab::{self, Metric};
use super::{LogError, LogInfo};
use crate::reading::{LogHeader, Reading};
use std::collections::BTreeMap;
use std::io::Read;

/// Does this text hold such a log: a time banner, and a `Name: value` line of a GPU's
/// utilization or memory?
pub fn holds(head: &str) -> bool {
    let lines: Vec<&str> = head.lines().take(60).map(str::trim).collect();
    lines.iter().any(|l| banner(l).is_some())
        && lines.iter().any(|l| {
            metric_line(l)
                .is_some_and(|(_, m, _)| matches!(m, Metric::UtilPct | Metric::MemUsedBytes))
        })
}

/// The time a banner line gives (`=== 2024-10-31 18:47:06 ===`, `--- … ---`, `[…]`).
fn banner(l: &str) -> Option<f64> {
    let inner = l.trim_matches(|c: char| {
        matches!(c, '=' | '-' | '#' | '[' | ']' | '*') || c.is_whitespace()
    });
    if inner.len() == l.len() || inner.is_empty() {
        return None;
    }
    super::smi_csv::parse_timestamp(inner).ok().flatten()
}

/// A `Name: value` line's GPU, metric and value in the metric's unit (memory in bytes), and the
/// total memory where the value is `used / total`.
fn metric_line(l: &str) -> Option<(u32, Metric, (f64, Option<f64>))> {
    let (name, value) = l.split_once(':')?;
    let words: Vec<&str> = name.split_whitespace().collect();
    // `GPU 1 Load`, `GPU1 Load`: the number is the GPU's.
    let is_gpu = |w: &str| w.eq_ignore_ascii_case("gpu");
    let (gpu, name) = match words.as_slice() {
        [g, n, rest @ ..] if is_gpu(g) && n.parse::<u32>().is_ok() => {
            (n.parse().ok()?, format!("gpu {}", rest.join(" ")))
        }
        [g, rest @ ..]
            if g.get(..3).is_some_and(is_gpu)
                && g.get(3..).is_some_and(|n| n.parse::<u32>().is_ok()) =>
        {
            (g.get(3..)?.parse().ok()?, format!("gpu {}", rest.join(" ")))
        }
        _ => (0, words.join(" ")),
    };
    let f = vocab::lookup(&name)?;
    let m = f.term.metric;
    if !matches!(
        m,
        Metric::UtilPct
            | Metric::MemUtilPct
            | Metric::MemUsedBytes
            | Metric::MemTotalBytes
            | Metric::TemperatureC
            | Metric::PowerW
            | Metric::SmClockMhz
    ) {
        return None;
    }
    let gpu = f.gpu.unwrap_or(gpu);
    let mut parts = value.split('/');
    let x = quantity(parts.next()?, f.scale)?;
    let total = parts.next().and_then(|t| quantity(t, f.scale));
    Some((gpu, m, (x, total.filter(|_| m == Metric::MemUsedBytes))))
}

/// The first number of a value, scaled by its unit where it names one (`812.0MB`, `5.9 GB`,
/// `48.0°C`, `45%`): a script's MB are MiB, as nvidia-smi's are.
fn quantity(v: &str, scale: f64) -> Option<f64> {
    let v = v.trim();
    let end = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-'))
        .unwrap_or(v.len());
    let x: f64 = v[..end].parse().ok().filter(|x: &f64| x.is_finite())?;
    let unit = v[end..].trim_start().to_ascii_lowercase();
    let k = if unit.starts_with("gb") || unit.starts_with("gib") {
        1024.0
    } else if unit.starts_with("kb") || unit.starts_with("kib") {
        1.0 / 1024.0
    } else {
        1.0
    };
    Some(x * k * scale)
}

/// Reads every block of the log.
pub fn read(
    r: impl Read,
    interval_s: Option<f64>,
    visit: impl FnMut(&Reading),
) -> Result<(LogHeader, LogInfo, BTreeMap<u32, ProfilingMeans>), LogError> {
    let mut t = Table::new();
    let mut at: Option<f64> = None;
    t.each_line(r, |t, buf| {
        let text = String::from_utf8_lossy(buf);
        let l = text.trim();
        if let Some(ts) = banner(l) {
            at = Some(ts);
            return Ok(());
        }
        let Some((gpu, m, (x, total))) = metric_line(l) else {
            return Ok(());
        };
        let Some(e) = t.entity(None, &gpu.to_string()) else {
            return Ok(());
        };
        let w = match at {
            Some(s) => When::At(s),
            None => t.next_nth_of(e, m),
        };
        t.put(e, w, m, x);
        if let Some(total) = total {
            t.put(e, w, Metric::MemTotalBytes, total);
        }
        Ok(())
    })?;
    if t.is_empty() {
        return Err(LogError::Format(
            "no `GPU …: value` lines under time banners (`=== 2024-10-31 18:47:06 ===`)".into(),
        ));
    }
    t.finish("a monitoring script's text log", interval_s, visit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gputil_blocks_under_time_banners() {
        let log = "
=== 2024-10-31 18:47:06 ===
GPU Load: 0.0%
GPU Memory: 0.0MB / 6144.0MB (0.0%)
GPU Temperature: 48.0°C
PyTorch GPU Memory - Allocated: 0.0MB, Reserved: 0.0MB
CPU Usage: 12.0%

=== 2024-10-31 18:47:37 ===
GPU Load: 45.5%
GPU Memory: 1.5 GB / 6144.0MB (25.0%)
GPU Temperature: 55.0°C
GPU 1 Load: 3%
";
        assert!(holds(log));
        let mut out = Vec::new();
        let (h, _, _) = read(log.as_bytes(), None, |r| out.push(r.clone())).unwrap();
        assert_eq!(h.gpus.len(), 2);
        let g0: Vec<&Reading> = out.iter().filter(|r| r.index == 0).collect();
        assert_eq!(g0.len(), 2);
        assert_eq!(g0[1].t_s, 31.0);
        assert_eq!(g0[1].util_pct, Some(45.5));
        assert_eq!(g0[1].mem_used_bytes, Some(1536 * 1_048_576));
        assert_eq!(g0[1].temperature_c, Some(55));
        assert_eq!(h.gpus[0].memory_total_bytes, Some(6144 * 1_048_576));
        // A training log with a loss, no GPU lines; lines with a time but no banner.
        assert!(!holds(
            "=== 2024-10-31 18:47:06 ===\nLoss: 0.5\nAccuracy: 91%\n"
        ));
        assert!(!holds("2024-10-31 18:47:06 GPU Load: 45%\n"));
    }
}
