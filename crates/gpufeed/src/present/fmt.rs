//! The one place each kind of figure is written for people: plurals, durations, percents, byte
//! counts and rates, plain numbers, and Markdown and CSV escaping. Every presenter uses these, so a
//! duration or a share reads the same in every report.
//!
//! Those the layers beneath `present/` need too (the live view, `doctor`, the diagnosis's notes)
//! are defined in [`crate::units`] and re-exported here; the rest are the presenters' own.

pub use crate::units::{bytes, duration, gb_per_s, num, plural};

/// A share in percent: `33%`, `0.5%` (one decimal only below 10% and when it shows).
pub fn pct(v: f64) -> String {
    if v != 0.0 && v.abs() < 10.0 && (v - v.round()).abs() >= 0.05 {
        format!("{v:.1}%")
    } else {
        format!("{v:.0}%")
    }
}

/// `-` for a missing value, else the formatted one.
pub fn opt<T>(v: Option<T>, f: impl FnOnce(T) -> String) -> String {
    v.map(f).unwrap_or_else(|| "-".to_string())
}

/// A Markdown table cell: `|` escaped.
pub fn md_cell(s: &str) -> String {
    s.replace('|', "\\|")
}

/// A CSV field (RFC 4180): quoted when it holds a comma, a quote or a newline.
pub fn csv_cell(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_for_people() {
        assert_eq!(plural(1, "process", "processes"), "1 process");
        assert_eq!(plural(2, "process", "processes"), "2 processes");
        assert_eq!(duration(3725.0), "1h 02m");
        assert_eq!(duration(185.0), "3m 05s");
        assert_eq!(duration(12.5), "12.5 s");
        assert_eq!(duration(59.94), "59.9 s");
        assert_eq!(duration(61.0), "1m 01s");
        assert_eq!(pct(33.3), "33%");
        assert_eq!(pct(0.5), "0.5%");
        assert_eq!(pct(0.0), "0%");
        assert_eq!(num(1234.4), "1234");
        assert_eq!(num(12.34), "12.3");
        assert_eq!(num(1.234), "1.23");
        assert_eq!(num(0.1234), "0.123");
        assert_eq!(opt(None::<f64>, num), "-");
    }

    #[test]
    fn escapes() {
        assert_eq!(md_cell("a|b"), "a\\|b");
        assert_eq!(csv_cell("plain"), "plain");
        assert_eq!(csv_cell("a,b"), "\"a,b\"");
        assert_eq!(csv_cell("say \"hi\""), "\"say \"\"hi\"\"\"");
    }
}
