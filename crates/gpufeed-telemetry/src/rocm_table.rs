//! `rocm-smi`'s own table (its "Concise Info": `Device  Node  IDs  Temp  Power … VRAM%  GPU%`),
//! as job scripts print it into their logs, once or in a loop. Each table is one reading of every
//! GPU; lines around the tables (a shell's trace, other tools' output) are passed over.
//!
//! The columns are padded to line up and some hold spaces (`0x75a3,   42583`, `NPS1, SPX, 0`),
//! so a row is read by what its tokens look like: the device first, `GPU%` and `VRAM%` last,
//! the temperature the token in `°C`, the power the first in `W`.

use super::dcgmi::ProfilingMeans;
use super::table::Table;
use super::vocab::Metric;
use super::{LogError, LogInfo};
use crate::reading::{LogHeader, Reading};
use std::collections::BTreeMap;
use std::io::Read;

/// Does this text hold a rocm-smi concise table?
pub fn holds_table(head: &str) -> bool {
    head.lines().any(is_header)
}

fn is_header(l: &str) -> bool {
    let t: Vec<&str> = l.split_whitespace().collect();
    t.first() == Some(&"Device") && t.contains(&"GPU%")
}

fn pct(tok: &str) -> Option<f64> {
    tok.strip_suffix('%')?.parse().ok()
}

/// Reads every concise table in the log.
pub fn read(
    r: impl Read,
    interval_s: Option<f64>,
    visit: impl FnMut(&Reading),
) -> Result<(LogHeader, LogInfo, BTreeMap<u32, ProfilingMeans>), LogError> {
    let mut t = Table::new();
    let mut in_table = false;
    let mut vram_last = false;
    // `====` rules seen since the header: the first opens the rows, the second closes them.
    let mut rules = 0;
    t.each_line(r, |t, buf| {
        let text = String::from_utf8_lossy(buf);
        let l = text.trim();
        if is_header(l) {
            in_table = true;
            rules = 0;
            let t: Vec<&str> = l.split_whitespace().collect();
            vram_last = t.iter().position(|x| *x == "VRAM%") == Some(t.len() - 2);
            return Ok(());
        }
        if !in_table {
            return Ok(());
        }
        let tok: Vec<&str> = l.split_whitespace().collect();
        let Some(dev) = tok.first().filter(|d| d.parse::<u32>().is_ok()) else {
            // The second `====` rule closes the table; anything else inside it is passed over.
            if l.starts_with("==") {
                rules += 1;
                in_table = rules < 2;
            }
            return Ok(());
        };
        let n = tok.len();
        let (Some(gpu), vram) = (
            tok.last().and_then(|x| pct(x)),
            if vram_last && n >= 2 {
                pct(tok[n - 2])
            } else {
                None
            },
        ) else {
            t.info.malformed += 1;
            return Ok(());
        };
        let Some(e) = t.entity(None, dev) else {
            return Ok(());
        };
        let when = t.next_nth(e);
        t.put(e, when, Metric::UtilPct, gpu);
        if let Some(v) = vram {
            t.put(e, when, Metric::MemUsedPctOfTotal, v);
        }
        if let Some(c) = tok
            .iter()
            .find_map(|x| x.strip_suffix("°C")?.parse::<f64>().ok())
        {
            t.put(e, when, Metric::TemperatureC, c);
        }
        if let Some(w) = tok
            .iter()
            .skip(1)
            .find_map(|x| x.strip_suffix('W')?.parse::<f64>().ok())
        {
            t.put(e, when, Metric::PowerW, w);
        }
        t.info.rows += 1;
        Ok(())
    })?;
    if t.is_empty() {
        return Err(LogError::Format(
            "no rocm-smi table rows (a `Device … GPU%` header and rows under it)".into(),
        ));
    }
    t.finish("rocm-smi's table", interval_s, visit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_inside_a_shell_trace() {
        let log = "\
+ rocm-smi
=========== ROCm System Management Interface ===========
===================== Concise Info =====================
Device  Node  IDs              Temp        Power     Partitions          SCLK    MCLK     Fan  Perf  PwrCap   VRAM%  GPU%
        (DID,     GUID)        (Junction)  (Socket)  (Mem, Compute, ID)
========================================================
0       3     0x75a3,   42583  49.0°C      224.0W    NPS1, SPX, 0        104Mhz  1900Mhz  0%   auto  1400.0W  3%     97%
1       5     0x75a3,   27226  47.0°C      219.0W    NPS1, SPX, 0        94Mhz   1900Mhz  0%   auto  1400.0W  0%     0%
========================================================
+ amd-smi
";
        assert!(holds_table(log));
        let mut out = Vec::new();
        let (h, _, _) = read(log.as_bytes(), None, |l| out.push(l.clone())).unwrap();
        assert_eq!(h.gpus.len(), 2);
        assert_eq!(out[0].util_pct, Some(97.0));
        assert_eq!(out[0].power_w, Some(224.0));
        assert_eq!(out[0].temperature_c, Some(49));
        assert_eq!(out[1].util_pct, Some(0.0));
        assert!(!holds_table("Device busy GPU\n"));
    }
}
