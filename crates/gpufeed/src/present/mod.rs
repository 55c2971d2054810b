//! Presenters: turn summaries and findings into bytes. They never touch hardware.

pub mod chart;
pub mod compare;
pub mod html;
pub mod perfetto;
pub mod prometheus;
pub mod run;
pub mod summary;

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
pub fn gb_per_s(bytes_per_s: f64) -> String {
    let g = bytes_per_s.max(0.0) / 1e9;
    if g >= 10.0 {
        format!("{g:.1} GB/s")
    } else if g >= 0.01 || g == 0.0 {
        format!("{g:.2} GB/s")
    } else {
        format!("{:.1} MB/s", g * 1e3)
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

/// `-` for a missing value, else the formatted one.
pub fn opt<T>(v: Option<T>, f: impl FnOnce(T) -> String) -> String {
    v.map(f).unwrap_or_else(|| "-".to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn byte_units() {
        assert_eq!(super::bytes(17), "17 B");
        assert_eq!(super::bytes(1536), "1.5 KiB");
        assert_eq!(super::bytes(812 << 20), "812 MiB");
        assert_eq!(super::bytes(80 << 30), "80.0 GiB");
        assert_eq!(super::gb_per_s(31.5e9), "31.5 GB/s");
        assert_eq!(super::gb_per_s(1.5e9), "1.50 GB/s");
        assert_eq!(super::gb_per_s(2.0e6), "2.0 MB/s");
        assert_eq!(super::plural(1, "process", "processes"), "1 process");
        assert_eq!(super::plural(2, "process", "processes"), "2 processes");
    }
}
