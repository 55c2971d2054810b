//! `tegrastats`, the Jetson (Tegra) board's own monitor: one line per interval (1 s by default),
//! with a `MM-DD-YYYY HH:MM:SS` stamp in front since JetPack 5 and none before.
//!
//! ```text
//! 07-21-2025 16:33:42 RAM 17953/62841MB (lfb 9x4MB) SWAP 0/31420MB (cached 0MB) CPU [7%@1728,…]
//!     EMC_FREQ 12%@204 GR3D_FREQ 39%@[305,0] … gpu@40.093C … VDD_GPU_SOC 2798mW/2798mW …
//! ```
//!
//! The board has one integrated GPU. `GR3D_FREQ N%` is its busy percent (the share of the
//! interval the 3D/compute engine was active, what nvidia-smi's utilization is on a discrete
//! GPU), its `@MHz` the GPU clock (the first of `@[a,b]`, one per GPC); `RAM used/total` is the
//! board's memory, which CPU and GPU share, so "memory used" counts the whole system, not the
//! job's tensors alone (a note says so). Older boards write `GR3D` without `_FREQ`; Thor writes a
//! clock and no percent (`GR3D_FREQ @[314,314,314]`): no busy figure, as a line without the key.
//! Power is read only from a rail that is the GPU's alone (`VDD_GPU`, `POM_5V_GPU`, in mW; the
//! current value before the `/` average), not from the shared `VDD_GPU_SOC`/`VDD_CPU_GPU_CV`.

use super::dcgmi::ProfilingMeans;
use super::table::{Table, When};
use super::vocab::Metric;
use super::{LogError, LogInfo};
use crate::reading::{LogHeader, Reading};
use std::collections::BTreeMap;
use std::io::Read;

const MIB: f64 = 1024.0 * 1024.0;

/// Does this text hold tegrastats lines (`RAM used/totalMB` beside `CPU [` or a `GR3D` key)?
pub fn holds(head: &str) -> bool {
    head.lines().take(20).any(|l| {
        let l = strip_stamp(l.trim()).0;
        l.starts_with("RAM ") && ram(l).is_some() && (l.contains(" CPU [") || l.contains(" GR3D"))
    })
}

/// The line without its leading `MM-DD-YYYY HH:MM:SS` stamp, and the stamp as epoch seconds.
fn strip_stamp(l: &str) -> (&str, Option<f64>) {
    if l.len() > 20 && l.as_bytes()[2] == b'-' && l.as_bytes()[5] == b'-' {
        if let Some(s) = l.get(..19) {
            if let Ok(t) = chrono::NaiveDateTime::parse_from_str(s, "%m-%d-%Y %H:%M:%S") {
                return (l[19..].trim_start(), Some(t.and_utc().timestamp() as f64));
            }
        }
    }
    (l, None)
}

/// `RAM used/totalMB` in MiB (tegrastats' MB are MiB).
fn ram(l: &str) -> Option<(f64, f64)> {
    let rest = l.split_once("RAM ")?.1;
    let tok = rest.split_whitespace().next()?;
    let (used, total) = tok.strip_suffix("MB")?.split_once('/')?;
    Some((used.parse().ok()?, total.parse().ok()?))
}

/// The token after `key` (a whole word of the line).
fn after<'a>(toks: &[&'a str], key: &str) -> Option<&'a str> {
    toks.iter()
        .position(|t| *t == key)
        .and_then(|i| toks.get(i + 1).copied())
}

/// `39%@[305,0]`, `99%@921`, `22%`, `@[314,314]`: the busy percent and the clock, each where
/// given.
fn gr3d(v: &str) -> (Option<f64>, Option<f64>) {
    let (pct, clock) = match v.split_once('@') {
        Some((p, c)) => (p, Some(c)),
        None => (v, None),
    };
    let pct = pct.strip_suffix('%').and_then(|p| p.parse::<f64>().ok());
    let clock = clock.and_then(|c| {
        c.trim_matches(|ch| ch == '[' || ch == ']')
            .split(',')
            .next()?
            .parse::<f64>()
            .ok()
    });
    (pct, clock)
}

/// The GPU temperature: `GPU@38C` (older boards) or `gpu@40.093C`.
fn gpu_temp(toks: &[&str]) -> Option<f64> {
    toks.iter().find_map(|t| {
        let (k, v) = t.split_once('@')?;
        if !k.eq_ignore_ascii_case("gpu") {
            return None;
        }
        v.strip_suffix('C')?.parse().ok()
    })
}

/// The GPU's own power rail in watts: `VDD_GPU 371/370` or `POM_5V_GPU 393/679` (mW, with or
/// without the unit; the current value, not the average after the `/`).
fn gpu_power(toks: &[&str]) -> Option<f64> {
    ["VDD_GPU", "POM_5V_GPU"].iter().find_map(|k| {
        let v = after(toks, k)?;
        let now = v.split('/').next()?.trim_end_matches("mW");
        now.parse::<f64>().ok().map(|mw| mw / 1000.0)
    })
}

/// Reads every tegrastats line of the log as one reading of the board's GPU.
pub fn read(
    r: impl Read,
    interval_s: Option<f64>,
    visit: impl FnMut(&Reading),
) -> Result<(LogHeader, LogInfo, BTreeMap<u32, ProfilingMeans>), LogError> {
    let mut t = Table::new();
    let mut lines = 0u64;
    let mut busy = 0u64;
    let mut stamped = 0u64;
    t.each_line(r, |t, buf| {
        let text = String::from_utf8_lossy(buf);
        let (l, when) = strip_stamp(text.trim());
        let Some((used, total)) = ram(l).filter(|_| l.starts_with("RAM ")) else {
            if !l.is_empty() {
                t.info.malformed += 1;
            }
            return Ok(());
        };
        lines += 1;
        let Some(e) = t.entity(None, "0") else {
            return Ok(());
        };
        let when = match when {
            Some(s) => {
                stamped += 1;
                When::At(s)
            }
            None => t.next_nth(e),
        };
        let toks: Vec<&str> = l.split_whitespace().collect();
        let (pct, clock) = after(&toks, "GR3D_FREQ")
            .or_else(|| after(&toks, "GR3D"))
            .map_or((None, None), gr3d);
        if let Some(p) = pct {
            busy += 1;
            t.put(e, when, Metric::UtilPct, p);
        }
        if let Some(c) = clock {
            t.put(e, when, Metric::SmClockMhz, c);
        }
        t.put(e, when, Metric::MemUsedBytes, used * MIB);
        t.put(e, when, Metric::MemTotalBytes, total * MIB);
        if let Some(c) = gpu_temp(&toks) {
            t.put(e, when, Metric::TemperatureC, c);
        }
        if let Some(w) = gpu_power(&toks) {
            t.put(e, when, Metric::PowerW, w);
        }
        t.info.rows += 1;
        Ok(())
    })?;
    if lines == 0 {
        return Err(LogError::Format(
            "no tegrastats lines (`RAM used/totalMB … GR3D_FREQ N%`)".into(),
        ));
    }
    if busy == 0 {
        // RAM alone is the whole board's memory: it says nothing of the GPU's load.
        return Err(LogError::Format(format!(
            "tegrastats without the GPU's busy percent: no `GR3D_FREQ N%` in {} (run \
             tegrastats as root on a board that reports it)",
            super::units::plural(lines as usize, "line", "lines")
        )));
    }
    t.describe(0, Some("Jetson integrated GPU"), None);
    let mut out = t.finish("tegrastats", interval_s, visit)?;
    out.1.notes.push(
        "On a Jetson busy is GR3D_FREQ, the integrated GPU's busy percent, and memory is the \
         board's RAM, shared by CPU and GPU: memory used counts the whole system, not the job \
         alone."
            .into(),
    );
    if stamped == 0 && interval_s.is_none() {
        out.1.notes.push(
            "tegrastats lines without a time stamp: read 1 s apart (its default --interval); \
             give --interval if it was run with another"
                .into(),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(log: &str) -> Result<(LogHeader, LogInfo, Vec<Reading>), LogError> {
        let mut out = Vec::new();
        let (h, i, _) = read(log.as_bytes(), None, |r| out.push(r.clone()))?;
        Ok((h, i, out))
    }

    #[test]
    fn an_orin_log_with_stamps() {
        let log = "\
07-21-2025 16:33:42 RAM 17953/62841MB (lfb 9x4MB) SWAP 0/31420MB (cached 0MB) CPU [7%@1728,31%@1036,off] EMC_FREQ 12%@204 GR3D_FREQ 39%@[305,0] NVENC off APE 174 cpu@43.906C gpu@40.093C VDD_GPU_SOC 2798mW/2798mW VDD_CPU_CV 799mW/799mW
07-21-2025 16:33:44 RAM 17956/62841MB (lfb 9x4MB) SWAP 0/31420MB (cached 0MB) CPU [9%@960,66%@960,off] EMC_FREQ 12%@204 GR3D_FREQ 0%@[305,0] NVENC off APE 174 cpu@43.468C gpu@39.781C VDD_GPU_SOC 2399mW/2765mW VDD_CPU_CV 399mW/732mW
";
        assert!(holds(log));
        let (h, info, r) = read_all(log).unwrap();
        assert_eq!(h.gpus.len(), 1);
        assert_eq!(h.gpus[0].memory_total_bytes, Some(62841 * 1024 * 1024));
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].util_pct, Some(39.0));
        assert_eq!(r[0].sm_clock_mhz, Some(305));
        assert_eq!(r[0].temperature_c, Some(40));
        assert_eq!(r[0].mem_used_bytes, Some(17953 * 1024 * 1024));
        // VDD_GPU_SOC is the GPU and the SoC together: not the GPU's power.
        assert_eq!(r[0].power_w, None);
        assert_eq!(r[1].t_s, 2.0);
        assert_eq!(r[1].util_pct, Some(0.0));
        assert!(info
            .notes
            .iter()
            .any(|n| n.contains("shared by CPU and GPU")));
    }

    #[test]
    fn an_older_board_without_stamps_and_a_gpu_rail() {
        let log = "\
RAM 2633/7850MB (lfb 3x4MB) CPU [0%@2035,0%@2035] EMC_FREQ 3%@1866 GR3D_FREQ 99%@1300 BCPU@35C GPU@41C VDD_IN 3624/3624 VDD_GPU 4371/3701
RAM 2631/7850MB (lfb 3x4MB) CPU [18%@2035,0%@2035] EMC_FREQ 3%@1866 GR3D_FREQ 12.5%@1300 BCPU@35C GPU@40.5C VDD_IN 3642/3633 VDD_GPU 370/370
";
        assert!(holds(log));
        let (_, info, r) = read_all(log).unwrap();
        assert_eq!(r[0].util_pct, Some(99.0));
        assert_eq!(r[0].power_w, Some(4.371));
        assert_eq!(r[0].temperature_c, Some(41));
        assert_eq!(r[1].util_pct, Some(12.5));
        assert_eq!(r[1].t_s, 1.0);
        assert!(info.notes.iter().any(|n| n.contains("1 s apart")));
    }

    #[test]
    fn a_percent_without_a_clock_and_a_clock_without_a_percent() {
        assert_eq!(gr3d("22%"), (Some(22.0), None));
        assert_eq!(gr3d("@[314,314,314]"), (None, Some(314.0)));
        assert_eq!(gr3d("99%@[1098,1098]"), (Some(99.0), Some(1098.0)));
    }

    #[test]
    fn lines_without_the_gpu_busy_percent_are_refused_in_one_line() {
        let log = "RAM 2633/7850MB (lfb 3x4MB) CPU [0%@2035,0%@2035] GPU@41C VDD_GPU 371/371\n";
        assert!(holds(log));
        let e = read_all(log).unwrap_err().to_string();
        assert!(e.contains("no `GR3D_FREQ N%` in 1 line "), "{e}");
        assert_eq!(e.lines().count(), 1);
    }

    #[test]
    fn other_logs_are_not_tegrastats() {
        assert!(!holds("RAM usage: 1234/5678MB\n"));
        assert!(!holds(
            "timestamp, utilization.gpu [%]\n2024/01/01 00:00:00.000, 5 %\n"
        ));
    }
}
