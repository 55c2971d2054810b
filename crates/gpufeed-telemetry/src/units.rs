//! Facts and formats shared by every layer: PCIe link bandwidth, byte counts, rates, plain
//! numbers, plurals and durations for people. One copy each, so `doctor`, `bench`, `diagnose`, the
//! live view and the presenters agree; `present::fmt` re-exports them beside the presenters' own.

/// Host-to-device bandwidth of one PCIe lane per direction, GB/s, by generation, after line
/// encoding: 8b/10b for Gen1–2, 128b/130b for Gen3–5, FLIT mode (242 B of 256) for Gen6's
/// 64 GT/s PAM4.
pub fn pcie_lane_gb_per_s(gen: u32) -> Option<f64> {
    Some(match gen {
        1 => 0.25,
        2 => 0.5,
        3 => 0.985,
        4 => 1.969,
        5 => 3.938,
        6 => 7.563,
        _ => return None,
    })
}

/// Theoretical one-direction capacity of a link in bytes/s at a generation and width.
pub fn pcie_link_bytes_per_s(gen: u32, width: u32) -> Option<f64> {
    Some(pcie_lane_gb_per_s(gen)? * 1e9 * width as f64)
}

/// `1.5 GiB`, `812 MiB`, `12 KiB`, `17 B`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else if v >= 100.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// A transfer rate in decimal GB/s, the unit of PCIe link capacities, used for every rate gpufeed
/// shows (text, HTML, the terminal view, Perfetto); memory sizes are binary (GiB).
/// Rates too small for GB/s step down to MB/s, KB/s and B/s, so that a small rate never reads as
/// zero (`0.0 MB/s` for 40 KB/s).
pub fn gb_per_s(bytes_per_s: f64) -> String {
    let b = bytes_per_s.max(0.0);
    let g = b / 1e9;
    if g >= 10.0 {
        format!("{g:.1} GB/s")
    } else if g >= 0.01 {
        format!("{g:.2} GB/s")
    } else if b >= 1e5 {
        format!("{:.1} MB/s", b / 1e6)
    } else if b >= 100.0 {
        format!("{:.1} KB/s", b / 1e3)
    } else {
        format!("{b:.0} B/s")
    }
}

/// `1 process`, `3 processes`.
pub fn plural(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// `x` rounded to `digits` decimals, never `-0.0` (the figures of a comparison).
pub fn round(x: f64, digits: i32) -> f64 {
    let m = 10f64.powi(digits);
    (x * m).round() / m + 0.0
}

/// Rounds for evidence maps (keeps reports readable and snapshots stable).
pub fn r1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}
pub fn r2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}
pub fn r3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// A duration given in milliseconds, at two decimals of the unit that shows it: `1.95 ms`,
/// `42.0 µs` below a hundredth of a millisecond (never `0.00 ms` for work that took time).
pub fn ms(ms: f64) -> String {
    if ms.abs() >= 0.01 || ms == 0.0 || !ms.is_finite() {
        format!("{ms:.2} ms")
    } else {
        format!("{:.1} µs", ms * 1000.0)
    }
}

/// A plain number to three significant digits, without an exponent for everyday magnitudes:
/// `1234`, `12.3`, `1.23`, `0.123`.
pub fn num(x: f64) -> String {
    let a = x.abs();
    if a >= 100.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else if a >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

/// Seconds as `1h 02m`, `3m 05s`, `12.5 s`: the one style of a duration gpufeed shows. Past
/// 1,000 hours in days (`52 days`), past a century not as a figure at all: a log with a garbled
/// timestamp spanned "2562047315792h 59m", a number no one can read or believe.
pub fn duration(s: f64) -> String {
    const DAY: f64 = 86400.0;
    if !s.is_finite() || s >= 36525.0 * DAY {
        "more than a century (the timestamps are wrong)".to_string()
    } else if s >= 1000.0 * 3600.0 {
        format!("{} days", (s / DAY) as u64)
    } else if s >= 3600.0 {
        format!(
            "{}h {:02}m",
            (s / 3600.0) as u64,
            ((s % 3600.0) / 60.0) as u64
        )
    } else if s >= 60.0 {
        format!("{}m {:02}s", (s / 60.0) as u64, (s % 60.0) as u64)
    } else {
        format!("{s:.1} s")
    }
}

/// `0-7, 9, 11-12` from sorted indices.
pub fn index_ranges(idx: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && idx[j + 1] == idx[j] + 1 {
            j += 1;
        }
        out.push(if j > i {
            format!("{}-{}", idx[i], idx[j])
        } else {
            idx[i].to_string()
        });
        i = j + 1;
    }
    out.join(", ")
}

/// Text from a file or a job as reports may show it (a hostname, a command line, a GPU's or a
/// process's name): control characters (an escape sequence, a bell, a carriage return or a line
/// feed that would let a forged line overwrite or follow the report in a terminal) are written
/// as `\x1b`-style escapes. The one escape every text presenter uses (`present::fmt` re-exports
/// it; `present::printable_report` applies it to every string of a report).
pub fn printable(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_string();
    }
    s.chars()
        .map(|c| {
            if c.is_control() {
                format!("\\x{:02x}", u32::from(c))
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milliseconds_under_a_hundredth_are_microseconds() {
        assert_eq!(ms(1.954), "1.95 ms");
        assert_eq!(ms(0.01), "0.01 ms");
        assert_eq!(ms(0.0042), "4.2 µs");
        assert_eq!(ms(0.0), "0.00 ms");
    }

    #[test]
    fn pcie_per_lane_and_per_link() {
        // Gen6: 64 GT/s, FLIT mode carries 242 of 256 bytes: 64 × 242/256 / 8 = 7.5625 GB/s.
        assert_eq!(pcie_lane_gb_per_s(6), Some(7.563));
        assert!((pcie_link_bytes_per_s(6, 16).unwrap() / 1e9 - 121.0).abs() < 0.01);
        assert_eq!(pcie_link_bytes_per_s(3, 16), Some(0.985e9 * 16.0));
        assert!((pcie_link_bytes_per_s(4, 16).unwrap() / 1e9 - 31.5).abs() < 0.1);
        assert!((pcie_link_bytes_per_s(5, 16).unwrap() / 1e9 - 63.0).abs() < 0.1);
        assert_eq!(pcie_lane_gb_per_s(0), None);
        assert_eq!(pcie_link_bytes_per_s(9, 16), None);
    }

    #[test]
    fn byte_and_rate_units() {
        assert_eq!(bytes(17), "17 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(64 << 20), "64.0 MiB");
        assert_eq!(bytes(812 << 20), "812 MiB");
        assert_eq!(bytes(80 << 30), "80.0 GiB");
        assert_eq!(bytes(200 << 30), "200 GiB");
        assert_eq!(gb_per_s(31.5e9), "31.5 GB/s");
        assert_eq!(gb_per_s(1.5e9), "1.50 GB/s");
        assert_eq!(gb_per_s(1.0e6), "1.0 MB/s");
        assert_eq!(gb_per_s(40e3), "40.0 KB/s");
        assert_eq!(gb_per_s(12.0), "12 B/s");
        assert_eq!(gb_per_s(0.0), "0 B/s");
        assert_eq!(gb_per_s(2.0e6), "2.0 MB/s");
    }
}
