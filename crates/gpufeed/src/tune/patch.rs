//! `fix.patch`: the settings `tune` chose, written into the DataLoader calls the injection saw.
//!
//! Written by hand (a small scanner, not a Python parser): it finds the call that spans the
//! reported line, its top-level keyword arguments and their values, and changes only literal
//! values (numbers, True/False/None); a value given as a variable or an expression is left alone
//! with a note saying the exact line and what to set. The diff itself is `similar`'s.

/// One argument to set at one call site.
#[derive(Debug, Clone, PartialEq)]
pub struct Edit {
    pub key: String,
    /// Python source of the value (`4`, `True`).
    pub value: String,
}

/// The changed file text and notes for what could not be changed; `None` text when nothing was.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SiteChange {
    pub new_text: Option<String>,
    pub notes: Vec<String>,
}

/// Byte ranges of a call's parentheses: the `(` on or before `line` (1-based) that opens a call
/// of `callee`, and its matching `)`.
fn call_span(text: &str, line: usize, callee: &str) -> Option<(usize, usize)> {
    let line_start: usize = text
        .split_inclusive('\n')
        .take(line.saturating_sub(1))
        .map(str::len)
        .sum();
    let line_end = text[line_start..]
        .find('\n')
        .map(|i| line_start + i)
        .unwrap_or(text.len());
    // the nearest `callee(` starting at or before the reported line (multi-line calls report a
    // line inside the call on some Pythons)
    let open = text[..line_end]
        .rmatch_indices(&format!("{callee}("))
        .next()?
        .0
        + callee.len();
    let close = matching(text, open)?;
    (close >= line_start).then_some((open, close))
}

/// The `)` matching the `(` at `open`, skipping strings and comments.
fn matching(text: &str, open: usize) -> Option<usize> {
    let b = text.as_bytes();
    let mut depth = 0i32;
    let mut i = open;
    while i < b.len() {
        match b[i] {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            q @ (b'"' | b'\'') => {
                i += 1;
                while i < b.len() && b[i] != q {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'#' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// Top-level arguments of the call between `open` and `close`: byte ranges of each.
fn arguments(text: &str, open: usize, close: usize) -> Vec<(usize, usize)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = open + 1;
    let mut i = open + 1;
    while i < close {
        match b[i] {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth -= 1,
            q @ (b'"' | b'\'') => {
                i += 1;
                while i < close && b[i] != q {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            b',' if depth == 0 => {
                out.push((start, i));
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    if !text[start..close].trim().is_empty() {
        out.push((start, close));
    }
    out
}

fn is_literal(v: &str) -> bool {
    matches!(v, "True" | "False" | "None") || v.parse::<f64>().is_ok()
}

/// Applies `edits` to the call of `callee` that spans `line` of `text` (`path` for the notes).
pub(crate) fn edit_call(
    text: &str,
    path: &str,
    line: usize,
    callee: &str,
    edits: &[Edit],
) -> SiteChange {
    let mut out = SiteChange::default();
    let Some((open, close)) = call_span(text, line, callee) else {
        out.notes.push(format!(
            "{path}:{line}: no {callee}(...) call found there: set {} in it by hand",
            edits
                .iter()
                .map(|e| format!("{}={}", e.key, e.value))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        return out;
    };
    let args = arguments(text, open, close);
    let mut replace: Vec<(usize, usize, String)> = Vec::new();
    let mut missing: Vec<&Edit> = Vec::new();
    for e in edits {
        let found = args.iter().find_map(|&(s, t)| {
            let a = &text[s..t];
            let (k, v) = a.split_once('=')?;
            (k.trim() == e.key).then(|| (s + k.len() + 1, t, v.trim().to_string()))
        });
        match found {
            Some((vs, ve, v)) if is_literal(&v) => {
                if v != e.value {
                    let lead = text[vs..ve].len() - text[vs..ve].trim_start().len();
                    let trail = text[vs..ve].len() - text[vs..ve].trim_end().len();
                    replace.push((vs + lead, ve - trail, e.value.clone()));
                }
            }
            Some((vs, _, v)) => {
                let at = text[..vs].matches('\n').count() + 1;
                out.notes.push(format!(
                    "{path}:{at}: {}={v} is not a literal: set it to {} there (or where {v} comes from)",
                    e.key, e.value
                ));
            }
            None => missing.push(e),
        }
    }
    if !missing.is_empty() {
        let add: Vec<String> = missing
            .iter()
            .map(|e| format!("{}={}", e.key, e.value))
            .collect();
        let before_close = &text[open + 1..close];
        let multiline = before_close.contains('\n')
            && text[..close].trim_end_matches([' ', '\t']).ends_with('\n');
        let (at, ins) = if multiline {
            // `)` on its own line: one argument per line, indented like the last one
            let last_line = before_close.trim_end().rsplit('\n').next().unwrap_or("");
            let indent: String = last_line
                .chars()
                .take_while(|c| c.is_whitespace())
                .collect();
            let comma = if before_close.trim_end().ends_with(',') {
                ""
            } else {
                ","
            };
            let end = open + 1 + before_close.trim_end().len();
            (
                end,
                format!(
                    "{comma}\n{}",
                    add.iter()
                        .map(|a| format!("{indent}{a},"))
                        .collect::<Vec<_>>()
                        .join("\n")
                ),
            )
        } else {
            let body = before_close.trim_end();
            let end = open + 1 + body.len();
            let sep = if body.is_empty() || body.ends_with(',') {
                if body.is_empty() {
                    ""
                } else {
                    " "
                }
            } else {
                ", "
            };
            (end, format!("{sep}{}", add.join(", ")))
        };
        replace.push((at, at, ins));
    }
    if replace.is_empty() {
        return out;
    }
    replace.sort_by_key(|r| std::cmp::Reverse(r.0));
    let mut t = text.to_string();
    for (s, e, v) in replace {
        t.replace_range(s..e, &v);
    }
    out.new_text = Some(t);
    out
}

/// A unified diff (`a/PATH`, `b/PATH`) that `git apply` and `patch -p1` take.
pub(crate) fn unified(path: &str, old: &str, new: &str) -> String {
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{path}"), &format!("b/{path}"))
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(k: &str, v: &str) -> Edit {
        Edit {
            key: k.into(),
            value: v.into(),
        }
    }

    #[test]
    fn a_literal_is_replaced_and_a_missing_argument_added() {
        let src = "import torch\nloader = DataLoader(ds, batch_size=32, num_workers=0)\nfor x in loader:\n    pass\n";
        let c = edit_call(
            src,
            "train.py",
            2,
            "DataLoader",
            &[e("num_workers", "4"), e("persistent_workers", "True")],
        );
        let t = c.new_text.unwrap();
        assert_eq!(
            t.lines().nth(1).unwrap(),
            "loader = DataLoader(ds, batch_size=32, num_workers=4, persistent_workers=True)"
        );
        assert!(c.notes.is_empty());
        let d = unified("train.py", src, &t);
        assert!(d.starts_with("--- a/train.py\n+++ b/train.py\n@@"), "{d}");
        assert_eq!(
            d.lines()
                .filter(|l| l.starts_with('-') && !l.starts_with("---"))
                .count(),
            1,
            "{d}"
        );
    }

    #[test]
    fn a_multi_line_call_gets_one_argument_per_line() {
        let src =
            "dl = torch.utils.data.DataLoader(\n    ds,\n    batch_size=8,\n    shuffle=True,\n)\n";
        let c = edit_call(src, "t.py", 1, "DataLoader", &[e("num_workers", "4")]);
        assert_eq!(
            c.new_text.unwrap(),
            "dl = torch.utils.data.DataLoader(\n    ds,\n    batch_size=8,\n    shuffle=True,\n    num_workers=4,\n)\n"
        );
        // the line Python reported may be inside the call
        let src2 = "dl = DataLoader(\n    ds,\n    num_workers=args.workers,\n    batch_size=8)\n";
        let c = edit_call(src2, "t.py", 3, "DataLoader", &[e("num_workers", "4")]);
        assert!(c.new_text.is_none());
        assert_eq!(c.notes, ["t.py:3: num_workers=args.workers is not a literal: set it to 4 there (or where args.workers comes from)"]);
    }

    #[test]
    fn strings_and_nested_calls_do_not_confuse_it() {
        let src = "dl = DataLoader(f(a, b), collate_fn=lambda x: (x, ')'), num_workers=0)\n";
        let c = edit_call(src, "t.py", 1, "DataLoader", &[e("num_workers", "2")]);
        assert_eq!(
            c.new_text.unwrap(),
            "dl = DataLoader(f(a, b), collate_fn=lambda x: (x, ')'), num_workers=2)\n"
        );
        let c = edit_call("x = 1\n", "t.py", 1, "DataLoader", &[e("num_workers", "2")]);
        assert!(c.new_text.is_none() && c.notes[0].contains("no DataLoader(...) call"));
    }
}
