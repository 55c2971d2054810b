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

/// Markdown prose: `<`, `>` and `&` written as entities outside code spans, so a name taken
/// from the machine or the job (a GPU, a thread, a process) cannot put raw HTML into a report
/// pasted into an issue or a wiki. Code spans are left as they are (a renderer shows their text
/// literally, `<lambda>` included); they are found as CommonMark finds them: a run of backticks
/// closed by a run of the same length, a backslash-escaped backtick opening none.
pub(crate) fn md_prose(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(c) = rest.chars().next() {
        match c {
            '\\' => {
                let n = rest[1..].chars().next().map_or(1, |e| 1 + e.len_utf8());
                // An escaped `<` is literal text already; an escaped `&` too.
                out.push_str(&rest[..n]);
                rest = &rest[n..];
            }
            '`' => {
                let run = rest.len() - rest.trim_start_matches('`').len();
                match closing_run(&rest[run..], run) {
                    Some(end) => {
                        out.push_str(&rest[..run + end + run]);
                        rest = &rest[run + end + run..];
                    }
                    None => {
                        out.push_str(&rest[..run]);
                        rest = &rest[run..];
                    }
                }
            }
            '<' | '>' | '&' => {
                out.push_str(match c {
                    '<' => "&lt;",
                    '>' => "&gt;",
                    _ => "&amp;",
                });
                rest = &rest[1..];
            }
            c => {
                out.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
    }
    out
}

/// Where in `s` a run of exactly `n` backticks starts (the end of a code span opened by `n`).
fn closing_run(s: &str, n: usize) -> Option<usize> {
    let mut i = 0;
    while let Some(off) = s[i..].find('`') {
        let at = i + off;
        let len = s[at..].len() - s[at..].trim_start_matches('`').len();
        if len == n {
            return Some(at);
        }
        i = at + len;
    }
    None
}

/// A Markdown table cell: `|` escaped, a line break made a space (either would end the cell or
/// the row), and its prose as [`md_prose`] writes it.
pub(crate) fn md_cell(s: &str) -> String {
    md_prose(&s.replace('|', "\\|").replace(['\r', '\n'], " "))
}

/// `s` as a Markdown code span, delimiters included: fenced by one backtick more than its
/// longest run of them, so no name can close the span early and write outside it.
pub(crate) fn md_code(s: &str) -> String {
    let s = s.replace('|', "\\|").replace(['\r', '\n'], " ");
    let longest = s.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest + 1);
    let pad = if s.starts_with('`') || s.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{s}{pad}{fence}")
}

/// A Prometheus/OpenMetrics label value: backslash, double quote and line feed escaped, as the
/// exposition format requires. prometheus-client writes values as given, so a process that names
/// itself `a"} 1\nx{a="` would otherwise forge a series, and one holding `\n# EOF\n` would end the
/// scrape early.
pub(crate) fn prom_label(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
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
        assert_eq!(duration(999.0 * 3600.0 + 61.0), "999h 01m");
        assert_eq!(duration(1000.0 * 3600.0), "41 days");
        assert_eq!(
            duration(9.223372036854776e15),
            "more than a century (the timestamps are wrong)"
        );
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
        assert_eq!(
            md_cell("<script>x</script>\nq"),
            "&lt;script&gt;x&lt;/script&gt; q"
        );
        assert_eq!(
            md_prose("move `<lambda>` out & on"),
            "move `<lambda>` out &amp; on"
        );
        assert_eq!(
            md_prose("a ``x`<b>`` c `d <e>"),
            "a ``x`<b>`` c `d &lt;e&gt;"
        );
        assert_eq!(md_prose("\\`<i>`"), "\\`&lt;i&gt;`");
        assert_eq!(md_code("<lambda>"), "`<lambda>`");
        assert_eq!(md_code("a`<b>"), "``a`<b>``");
        assert_eq!(md_code("`x"), "`` `x ``");
        assert_eq!(csv_cell("plain"), "plain");
        assert_eq!(csv_cell("a,b"), "\"a,b\"");
        assert_eq!(csv_cell("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(prom_label("a\"} 1\nx\\"), "a\\\"} 1\\nx\\\\");
        assert_eq!(prom_label("plain"), "plain");
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
