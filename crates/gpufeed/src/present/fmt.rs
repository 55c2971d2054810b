//! The one place each kind of figure is written for people: plurals, durations, percents, byte
//! counts and rates, plain numbers, and Markdown and CSV escaping. Every presenter uses these, so a
//! duration or a share reads the same in every report.
//!
//! Those the layers beneath `present/` need too (the live view, `doctor`, the diagnosis's notes)
//! are defined in [`crate::units`] and re-exported here; the rest are the presenters' own.

pub(crate) use crate::units::{bytes, duration, gb_per_s, num, plural, printable};

/// A share in percent: `33%`, `0.5%` (one decimal only below 10% and when it shows).
pub(crate) fn pct(v: f64) -> String {
    if v != 0.0 && v.abs() < 10.0 && (v - v.round()).abs() >= 0.05 {
        format!("{v:.1}%")
    } else {
        format!("{v:.0}%")
    }
}

/// `-` for a missing value, else the formatted one.
pub(crate) fn opt<T>(v: Option<T>, f: impl FnOnce(T) -> String) -> String {
    v.map(f).unwrap_or_else(|| "-".to_string())
}

/// A Markdown table cell: `|` escaped.
pub(crate) fn md_cell(s: &str) -> String {
    s.replace('|', "\\|")
}

/// A CSV field (RFC 4180): quoted when it holds a comma, a quote or a newline.
pub(crate) fn csv_cell(s: &str) -> String {
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

/// Escapes control characters in every string (and map key) of a JSON value; true when one
/// changed.
fn escape_strings(v: &mut serde_json::Value) -> bool {
    use serde_json::Value;
    match v {
        Value::String(s) if s.chars().any(char::is_control) => {
            *s = printable(s);
            true
        }
        Value::Array(a) => a.iter_mut().fold(false, |c, x| escape_strings(x) | c),
        Value::Object(m) => {
            let mut changed = false;
            if m.keys().any(|k| k.chars().any(char::is_control)) {
                *m = std::mem::take(m)
                    .into_iter()
                    .map(|(k, v)| (printable(&k), v))
                    .collect();
                changed = true;
            }
            m.values_mut().fold(changed, |c, x| escape_strings(x) | c)
        }
        _ => false,
    }
}

/// `out` with every control character but the line feeds written as an escape, and, with
/// `color`, the presenters' own colour codes (`ESC [ digits ; m`) kept.
fn printable_lines(out: &str, color: bool) -> String {
    if !out.chars().any(|c| c.is_control() && c != '\n') {
        return out.to_string();
    }
    let mut o = String::with_capacity(out.len());
    let mut rest = out;
    while let Some(c) = rest.chars().next() {
        if let Some(body) = rest.strip_prefix("\u{1b}[").filter(|_| color) {
            let n = body
                .find(|c: char| !(c.is_ascii_digit() || c == ';'))
                .unwrap_or(body.len());
            if body[n..].starts_with('m') {
                let len = 2 + n + 1;
                o.push_str(&rest[..len]);
                rest = &rest[len..];
                continue;
            }
        }
        if c.is_control() && c != '\n' {
            o.push_str(&printable(c.encode_utf8(&mut [0; 4])));
        } else {
            o.push(c);
        }
        rest = &rest[c.len_utf8()..];
    }
    o
}

/// A text presenter's output for `report`, safe for a terminal: `render` draws a copy whose every
/// string is [`printable`] (a hostname, command line, GPU or process name from a recording or a
/// log, with ESC/OSC sequences, a bell or CR-LF, can neither forge a line nor retitle the window),
/// and what it returns keeps no control character but its line feeds (and, with `color`, its
/// own colour codes). Every text and Markdown presenter goes through it.
pub(crate) fn terminal_safe<T, F>(report: &T, color: bool, render: F) -> String
where
    T: serde::Serialize + serde::de::DeserializeOwned,
    F: FnOnce(&T) -> String,
{
    let mut v = match serde_json::to_value(report) {
        Ok(v) => v,
        // cannot happen for the reports (plain data); never raw bytes on the terminal anyway
        Err(_) => return printable(&render(report)) + "\n",
    };
    if !escape_strings(&mut v) {
        return printable_lines(&render(report), color);
    }
    match serde_json::from_value::<T>(v) {
        Ok(clean) => printable_lines(&render(&clean), color),
        // A report that does not come back from JSON (a NaN where a number must be): its text,
        // line feeds included, is escaped whole. One long line, but no forged one.
        Err(_) => printable(&render(report)) + "\n",
    }
}

#[cfg(test)]
mod printable_tests {
    use super::*;

    #[derive(serde::Serialize, serde::Deserialize)]
    struct R {
        host: String,
        n: f64,
        tags: std::collections::BTreeMap<String, Vec<String>>,
    }

    #[test]
    fn no_control_character_from_a_report_reaches_the_terminal() {
        let r = R {
            host: "node\r\nVERDICT  compute_bound\u{1b}]0;pwned\u{7}".into(),
            n: 0.25,
            tags: [("k\u{9b}".to_string(), vec!["\u{1b}[2J".to_string()])].into(),
        };
        let out = terminal_safe(&r, true, |r| {
            format!(
                "\u{1b}[1mHOST\u{1b}[0m {} {} {:?} {:?}\n",
                r.host,
                r.n,
                r.tags.keys().collect::<Vec<_>>(),
                r.tags.values().collect::<Vec<_>>()
            )
        });
        assert_eq!(out.lines().count(), 1, "{out}");
        assert!(
            out.starts_with("\u{1b}[1mHOST\u{1b}[0m node\\x0d\\x0aVERDICT"),
            "{out}"
        );
        assert!(
            out.contains("\\x1b]0;pwned\\x07") && out.contains("0.25"),
            "{out}"
        );
        assert!(
            !out.contains("\u{9b}") && !out.contains("\u{1b}[2J"),
            "{out}"
        );
        // what a presenter writes itself is held too; without colour, no escape is kept
        assert_eq!(
            printable_lines("a\u{1b}[1mb\tc\n", false),
            "a\\x1b[1mb\\x09c\n"
        );
        assert_eq!(
            printable_lines("\u{1b}[1;31mx\u{1b}[0m\n", true),
            "\u{1b}[1;31mx\u{1b}[0m\n"
        );
        assert_eq!(printable_lines("\u{1b}", true), "\\x1b");
        // a report JSON cannot carry back (NaN): escaped whole, no line can be forged
        let nan = R { n: f64::NAN, ..r };
        let out = terminal_safe(&nan, false, |r| format!("HOST {}\nok\n", r.host));
        assert_eq!(out.lines().count(), 1, "{out}");
        assert!(out.starts_with("HOST node\\x0d\\x0aVERDICT"), "{out}");
        assert_eq!(printable_lines("\u{1b}[é\u{1b}[", true), "\\x1b[é\\x1b[");
    }
}
