//! `fix.patch`: the settings `tune` chose, written into the DataLoader calls the injection saw.
//!
//! Written by hand (a small scanner, not a Python parser): it blanks out strings and comments,
//! finds every `DataLoader(...)` call that spans the reported line, reads each call's top-level
//! arguments (positional, `*args`, keyword, `**kwargs`) and changes only literal values (numbers,
//! True/False/None), where they are: a keyword argument's value, or the positional argument in
//! the knob's place. A knob that `*args` or `**kwargs` may carry, a value given as a variable or
//! an expression, nested calls, and a file reached through a symlink are left alone with a note
//! saying the exact line and what to set. Each changed file is parsed again (and, with a Python at
//! hand, by Python's own `ast`; with torch importable, each changed call is bound to
//! `DataLoader`'s signature) before it goes into the patch: a patch never breaks the code. The
//! diff itself is `similar`'s.

use std::path::Path;

/// One argument to set at one call site.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Edit {
    pub key: String,
    /// Python source of the value (`4`, `True`).
    pub value: String,
}

/// The changed file text and notes for what could not be changed; `None` text when nothing was.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct SiteChange {
    pub new_text: Option<String>,
    pub notes: Vec<String>,
    /// Byte offsets (in `new_text`) of the `(` of each changed call.
    pub calls: Vec<usize>,
}

/// `DataLoader`'s parameters that may be given by position, in order (torch 1.x and 2.x alike;
/// everything after `generator` is keyword-only).
const DATALOADER_POSITIONAL: [&str; 13] = [
    "dataset",
    "batch_size",
    "shuffle",
    "sampler",
    "batch_sampler",
    "num_workers",
    "collate_fn",
    "pin_memory",
    "drop_last",
    "timeout",
    "worker_init_fn",
    "multiprocessing_context",
    "generator",
];

fn positional_params(callee: &str) -> &'static [&'static str] {
    if callee == "DataLoader" {
        &DATALOADER_POSITIONAL
    } else {
        &[]
    }
}

/// `text` as bytes with the insides of strings and comments blanked to spaces (line feeds kept):
/// the same offsets, and only code left to search for calls, brackets, commas and `=`.
fn code_only(text: &str) -> Vec<u8> {
    let mut b = text.as_bytes().to_vec();
    let blank = |b: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut b[from..to] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'#' => {
                let end = b[i..]
                    .iter()
                    .position(|&c| c == b'\n')
                    .map_or(b.len(), |n| i + n);
                blank(&mut b, i, end);
                i = end;
            }
            q @ (b'"' | b'\'') => {
                let triple = b[i..].starts_with(&[q, q, q]);
                let open = if triple { 3 } else { 1 };
                let mut j = i + open;
                // (end of the inside, end of the string)
                let (inner, end) = loop {
                    if j >= b.len() {
                        break (b.len(), b.len());
                    }
                    match b[j] {
                        b'\\' => j += 2,
                        b'\n' if !triple => break (j, j),
                        c if c == q && (!triple || b[j..].starts_with(&[q, q, q])) => {
                            break (j, j + open);
                        }
                        _ => j += 1,
                    }
                };
                let inner = inner.min(b.len());
                blank(&mut b, (i + open).min(inner), inner);
                i = end.min(b.len()).max(i + 1);
            }
            _ => i += 1,
        }
    }
    b
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80
}

/// The `)` matching the `(` at `open` in code bytes.
fn matching(code: &[u8], open: usize) -> Option<usize> {
    let mut depth = 0i32;
    for (i, &c) in code.iter().enumerate().skip(open) {
        match c {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// Every call of `callee` in the code: (start of the name, `(`, matching `)`).
fn calls(code: &[u8], callee: &str) -> Vec<(usize, usize, usize)> {
    let name = callee.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = memchr::memmem::find(&code[from..], name).map(|n| from + n) {
        from = at + name.len();
        if at > 0 && is_ident(code[at - 1]) {
            continue;
        }
        let mut open = at + name.len();
        while open < code.len() && matches!(code[open], b' ' | b'\t') {
            open += 1;
        }
        if code.get(open) != Some(&b'(') {
            continue;
        }
        if let Some(close) = matching(code, open) {
            out.push((at, open, close));
        }
    }
    out
}

/// One top-level argument of a call.
#[derive(Debug, Clone, PartialEq)]
enum Arg {
    Positional,
    Star,
    DoubleStar,
    Keyword(String),
}

/// Top-level arguments of the call between `open` and `close`: each one's kind and the byte
/// range of its value (trimmed; after `name=`, `*` or `**`).
fn arguments(code: &[u8], open: usize, close: usize) -> Vec<(Arg, usize, usize)> {
    let mut spans = Vec::new();
    let mut depth = 0i32;
    let mut start = open + 1;
    // in a lambda's parameters (`lambda a, b: ...`), whose commas separate no arguments
    let mut lambda = false;
    for (i, &c) in code.iter().enumerate().take(close).skip(open + 1) {
        match c {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth -= 1,
            b'l' if depth == 0
                && code[i..].starts_with(b"lambda")
                && !is_ident(code[i - 1])
                && !code.get(i + 6).copied().is_some_and(is_ident) =>
            {
                lambda = true;
            }
            b':' if depth == 0 => lambda = false,
            b',' if depth == 0 && !lambda => {
                spans.push((start, i));
                start = i + 1;
            }
            _ => {}
        }
    }
    spans.push((start, close));
    let trim = |mut s: usize, mut e: usize| {
        while s < e && code[s].is_ascii_whitespace() {
            s += 1;
        }
        while e > s && code[e - 1].is_ascii_whitespace() {
            e -= 1;
        }
        (s, e)
    };
    spans
        .into_iter()
        .map(|(s, e)| trim(s, e))
        .filter(|(s, e)| s < e)
        .map(|(s, e)| {
            if code[s..e].starts_with(b"**") {
                let (vs, ve) = trim(s + 2, e);
                return (Arg::DoubleStar, vs, ve);
            }
            if code[s] == b'*' {
                let (vs, ve) = trim(s + 1, e);
                return (Arg::Star, vs, ve);
            }
            let name_end = s + code[s..e].iter().take_while(|&&c| is_ident(c)).count();
            let mut eq = name_end;
            while eq < e && matches!(code[eq], b' ' | b'\t' | b'\n' | b'\r' | b'\\') {
                eq += 1;
            }
            let keyword = name_end > s
                && !code[s].is_ascii_digit()
                && code.get(eq) == Some(&b'=')
                && code.get(eq + 1) != Some(&b'=');
            if keyword {
                let name = String::from_utf8_lossy(&code[s..name_end]).into_owned();
                let (vs, ve) = trim(eq + 1, e);
                (Arg::Keyword(name), vs, ve)
            } else {
                (Arg::Positional, s, e)
            }
        })
        .collect()
}

fn is_literal(v: &str) -> bool {
    matches!(v, "True" | "False" | "None")
        || (v.starts_with(|c: char| c.is_ascii_digit() || "+-.".contains(c))
            && v.parse::<f64>().is_ok())
}

fn line_of(text: &str, at: usize) -> usize {
    text[..at].matches('\n').count() + 1
}

fn settings(edits: &[&Edit]) -> String {
    edits
        .iter()
        .map(|e| format!("{}={}", e.key, e.value))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The replacements that set `edits` in one call, or notes for those it cannot set.
fn edit_one(
    text: &str,
    code: &[u8],
    (open, close): (usize, usize),
    path: &str,
    callee: &str,
    edits: &[Edit],
    out: &mut SiteChange,
) -> Vec<(usize, usize, String)> {
    let args = arguments(code, open, close);
    let at = line_of(text, open);
    let positional = positional_params(callee);
    let first_star = args.iter().position(|a| a.0 == Arg::Star);
    let n_pos = args[..first_star.unwrap_or(args.len())]
        .iter()
        .filter(|a| a.0 == Arg::Positional)
        .count();
    let mut replace: Vec<(usize, usize, String)> = Vec::new();
    let mut missing: Vec<&Edit> = Vec::new();
    for e in edits {
        let index = positional.iter().position(|p| *p == e.key);
        let keyword = args
            .iter()
            .find(|a| a.0 == Arg::Keyword(e.key.clone()))
            .map(|a| (a.1, a.2, "", "="));
        let by_place = index.filter(|&i| i < n_pos).and_then(|i| {
            args.iter()
                .filter(|a| a.0 == Arg::Positional)
                .nth(i)
                .map(|a| (a.1, a.2, " (given by position)", " "))
        });
        if let Some((vs, ve, how, _)) = keyword.or(by_place) {
            let v = &text[vs..ve];
            if is_literal(v) {
                if v != e.value {
                    replace.push((vs, ve, e.value.clone()));
                }
            } else {
                let vat = line_of(text, vs);
                out.notes.push(format!(
                    "{path}:{vat}: {}={v}{how} is not a literal: set it to {} there (or where {v} comes from)",
                    e.key, e.value
                ));
            }
            continue;
        }
        if index.is_some() && first_star.is_some() {
            out.notes.push(format!(
                "{path}:{at}: the {callee}(...) call takes *{} which may give {} by position: set {}={} by hand",
                &text[args[first_star.unwrap_or(0)].1..args[first_star.unwrap_or(0)].2],
                e.key, e.key, e.value
            ));
            continue;
        }
        if let Some(kw) = args.iter().find(|a| a.0 == Arg::DoubleStar) {
            let kw = &text[kw.1..kw.2];
            out.notes.push(format!(
                "{path}:{at}: the {callee}(...) call takes **{kw}, which may hold {}: set {}={} in {kw} where it is made (or in the call, if {kw} never holds it)",
                e.key, e.key, e.value
            ));
            continue;
        }
        missing.push(e);
    }
    if !missing.is_empty() {
        replace.push(insertion(text, code, (open, close), &missing));
    }
    replace
}

/// Where and what to insert to add the `missing` keyword arguments before `close`.
fn insertion(
    text: &str,
    code: &[u8],
    (open, close): (usize, usize),
    missing: &[&Edit],
) -> (usize, usize, String) {
    let add: Vec<String> = missing
        .iter()
        .map(|e| format!("{}={}", e.key, e.value))
        .collect();
    let before_close = &text[open + 1..close];
    let multiline =
        before_close.contains('\n') && text[..close].trim_end_matches([' ', '\t']).ends_with('\n');
    // the arguments end at the last byte of code: a comment after them stays after them
    let end = open
        + 1
        + code[open + 1..close]
            .iter()
            .rposition(|c| !c.is_ascii_whitespace())
            .map_or(0, |i| i + 1);
    let body = &text[open + 1..end];
    if multiline {
        // `)` on its own line: one argument per line, indented like the last one
        let last_line = body.rsplit('\n').next().unwrap_or("");
        let indent: String = last_line
            .chars()
            .take_while(|c| c.is_whitespace())
            .collect();
        let comma = if body.ends_with(',') { "" } else { "," };
        let lines: Vec<String> = add.iter().map(|a| format!("{indent}{a},")).collect();
        (end, end, format!("{comma}\n{}", lines.join("\n")))
    } else {
        let sep = match (body.is_empty(), body.ends_with(',')) {
            (true, _) => "",
            (false, true) => " ",
            (false, false) => ", ",
        };
        (end, end, format!("{sep}{}", add.join(", ")))
    }
}

/// Applies `edits` to every call of `callee` that spans `line` of `text` (`path` for the notes):
/// two calls on one line are both changed (the injection changed both); nested calls are not.
#[cfg(test)]
pub(crate) fn edit_call(
    text: &str,
    path: &str,
    line: usize,
    callee: &str,
    edits: &[Edit],
) -> SiteChange {
    edit_calls(text, path, &[line], callee, edits)
}

/// `edit_call` for several reported lines of one file at once (each line of `text` as it is:
/// no change moves another's line); a call two lines reach is changed once.
pub(crate) fn edit_calls(
    text: &str,
    path: &str,
    lines: &[usize],
    callee: &str,
    edits: &[Edit],
) -> SiteChange {
    let mut out = SiteChange::default();
    let all: Vec<&Edit> = edits.iter().collect();
    let code = code_only(text);
    let every = calls(&code, callee);
    let mut chosen: Vec<(usize, usize, usize)> = Vec::new();
    for &line in lines {
        let line_start: usize = text
            .split_inclusive('\n')
            .take(line.saturating_sub(1))
            .map(str::len)
            .sum();
        let line_end = text[line_start.min(text.len())..]
            .find('\n')
            .map_or(text.len(), |i| line_start + i);
        let here: Vec<(usize, usize, usize)> = every
            .iter()
            .copied()
            .filter(|&(name, _, close)| name <= line_end && close >= line_start)
            .collect();
        if here.is_empty() {
            out.notes.push(format!(
                "{path}:{line}: no {callee}(...) call found there: set {} in it by hand",
                settings(&all)
            ));
            continue;
        }
        let nested = here
            .iter()
            .any(|a| here.iter().any(|b| a != b && b.1 > a.1 && b.2 < a.2));
        if nested {
            out.notes.push(format!(
                "{path}:{line}: {callee}(...) calls nested in one another: set {} in the one that made the loader by hand",
                settings(&all)
            ));
            continue;
        }
        for c in here {
            if !chosen.contains(&c) {
                chosen.push(c);
            }
        }
    }
    chosen.sort_unstable();
    let mut replace = Vec::new();
    for &(_, open, close) in &chosen {
        replace.extend(edit_one(
            text,
            &code,
            (open, close),
            path,
            callee,
            edits,
            &mut out,
        ));
    }
    if replace.is_empty() {
        return out;
    }
    replace.sort_by_key(|r| std::cmp::Reverse(r.0));
    let mut t = text.to_string();
    for (s, e, v) in &replace {
        t.replace_range(*s..*e, v);
    }
    // where each changed call's `(` moved to: shifted by every change before it
    out.calls = chosen
        .iter()
        .map(|&(_, open, _)| {
            replace
                .iter()
                .filter(|r| r.1 <= open)
                .fold(open, |o, r| o + r.2.len() - (r.1 - r.0))
        })
        .collect();
    out.new_text = Some(t);
    out
}

/// What is wrong with the changed calls of `text` (the `(` of each at `calls`), by this module's
/// own reading: an unbalanced call, a keyword given twice, a positional argument after a keyword,
/// or a knob in `edits` not set exactly once. `None` when nothing is.
pub(crate) fn check_calls(
    text: &str,
    calls: &[usize],
    callee: &str,
    edits: &[Edit],
) -> Option<String> {
    let code = code_only(text);
    let positional = positional_params(callee);
    for &open in calls {
        let at = line_of(text, open);
        let Some(close) = (code.get(open) == Some(&b'('))
            .then(|| matching(&code, open))
            .flatten()
        else {
            return Some(format!("line {at}: the call's parentheses do not match"));
        };
        let args = arguments(&code, open, close);
        let mut seen_keyword = false;
        let mut names: Vec<&str> = Vec::new();
        let mut n_pos = 0;
        for (a, _, _) in &args {
            match a {
                Arg::Positional if seen_keyword => {
                    return Some(format!(
                        "line {at}: a positional argument follows a keyword argument"
                    ));
                }
                Arg::Positional => n_pos += 1,
                Arg::Keyword(k) => {
                    if names.contains(&k.as_str()) {
                        return Some(format!("line {at}: keyword argument repeated: {k}"));
                    }
                    names.push(k);
                    seen_keyword = true;
                }
                Arg::DoubleStar => seen_keyword = true,
                Arg::Star => {}
            }
        }
        for e in edits {
            let by_place = positional
                .iter()
                .position(|p| *p == e.key)
                .is_some_and(|i| i < n_pos);
            if by_place && names.contains(&e.key.as_str()) {
                return Some(format!(
                    "line {at}: {} given both by position and by keyword",
                    e.key
                ));
            }
        }
    }
    None
}

/// The script Python runs to check a changed file (on stdin): it parses, and, where torch is
/// importable, each changed `DataLoader` call (by the lines of its `(`, `argv[1]`) binds to
/// `DataLoader`'s signature. Prints the one reason and exits 1 when not.
const PY_CHECK: &str = r#"
import sys
# the job's folder is not searched: a file of its own (inspect.py, torch.py) shadows nothing
sys.path[:] = [p for p in sys.path if p not in ("", ".")]
import ast
src = sys.stdin.read()
lines = [int(x) for x in sys.argv[1].split(",") if x]
try:
    tree = ast.parse(src)
except SyntaxError as e:
    print("line %s: %s" % (e.lineno, e.msg))
    sys.exit(1)
try:
    import inspect
    from torch.utils.data import DataLoader
    sig = inspect.signature(DataLoader)
except Exception:
    sys.exit(0)
for n in ast.walk(tree):
    if not isinstance(n, ast.Call):
        continue
    f = n.func
    name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
    end = getattr(n, "end_lineno", n.lineno)
    if name != "DataLoader" or not any(n.lineno <= l <= end for l in lines):
        continue
    args = [None for a in n.args if not isinstance(a, ast.Starred)]
    kws = dict((k.arg, None) for k in n.keywords if k.arg)
    try:
        sig.bind_partial(*args, **kws)
    except TypeError as e:
        print("line %d: %s" % (n.lineno, e))
        sys.exit(1)
"#;

/// Runs [`PY_CHECK`] with `python` on `text`: `Some(reason)` when Python finds the changed file
/// broken; `None` when it is fine or no Python could be run (the scanner's own check stands).
pub(crate) fn python_check(python: &Path, text: &str, lines: &[usize]) -> Option<String> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let arg = lines
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let mut child = Command::new(python)
        .args(["-c", PY_CHECK, &arg])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut stdin = child.stdin.take()?;
    let bytes = text.as_bytes().to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&bytes);
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let _ = writer.join();
    let status = status?;
    if status.success() {
        return None;
    }
    let mut said = String::new();
    if let Some(mut o) = child.stdout.take() {
        use std::io::Read;
        let _ = o.read_to_string(&mut said);
    }
    // exit 1 with a reason is the check's answer; anything else (no such Python, a crash) is not
    (status.code() == Some(1) && !said.trim().is_empty())
        .then(|| said.trim().lines().next().unwrap_or("").to_string())
}

/// A symlink on the way from `root` to `rel` (the first found), if any.
fn symlink_on_the_way(root: &Path, rel: &Path) -> Option<std::path::PathBuf> {
    let mut p = root.to_path_buf();
    let mut shown = std::path::PathBuf::new();
    for c in rel.components() {
        p.push(c);
        shown.push(c);
        if std::fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink()) {
            return Some(shown);
        }
    }
    None
}

/// `fix.patch`'s text for `sites` (`PATH:LINE`, relative to `root`, the folder the job ran in),
/// and notes for what must be set by hand. `python`, when given, checks each changed file.
pub(crate) fn patch_sites(
    root: &Path,
    sites: &[String],
    edits: &[Edit],
    python: Option<&Path>,
) -> (String, Vec<String>) {
    let all: Vec<&Edit> = edits.iter().collect();
    let mut notes = Vec::new();
    // each file's reported lines, in the order first seen
    let mut lines: std::collections::BTreeMap<String, Vec<usize>> = Default::default();
    for site in sites {
        let Some((path, line)) = site
            .rsplit_once(':')
            .and_then(|(p, l)| Some((p.to_string(), l.parse::<usize>().ok()?)))
        else {
            continue;
        };
        if Path::new(&path).is_absolute() || path.starts_with("..") {
            notes.push(format!(
                "{site} is outside this folder (a library?): set {} where its DataLoader's arguments come from",
                settings(&all)
            ));
            continue;
        }
        if let Some(link) = symlink_on_the_way(root, Path::new(&path)) {
            notes.push(format!(
                "{site}: {} is a symlink (git apply refuses a patch through one): set {} in that DataLoader(...) call by hand",
                link.display(),
                settings(&all)
            ));
            continue;
        }
        lines.entry(path).or_default().push(line);
    }
    let mut files: Vec<(String, String, String, Vec<usize>)> = Vec::new();
    for (path, at) in lines {
        let old = match std::fs::read_to_string(root.join(&path)) {
            Ok(s) => s,
            Err(e) => {
                notes.push(format!(
                    "{path}: cannot read it ({e}): set {} in its DataLoader(...) call by hand",
                    settings(&all)
                ));
                continue;
            }
        };
        let c = edit_calls(&old, &path, &at, "DataLoader", edits);
        notes.extend(c.notes);
        if let Some(new) = c.new_text {
            files.push((path, old, new, c.calls));
        }
    }
    let mut diff = String::new();
    for (path, old, new, calls) in &files {
        let lines: Vec<usize> = calls.iter().map(|&o| line_of(new, o)).collect();
        let broken = check_calls(new, calls, "DataLoader", edits)
            .or_else(|| python.and_then(|py| python_check(py, new, &lines)));
        if let Some(why) = broken {
            notes.push(format!(
                "{path}: the change would break the code ({why}), so it is not in the patch: set {} in its DataLoader(...) call by hand",
                settings(&all)
            ));
            continue;
        }
        diff.push_str(&unified(path, old, new));
    }
    (diff, notes)
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

    fn one(src: &str, edits: &[Edit]) -> SiteChange {
        edit_call(src, "t.py", 1, "DataLoader", edits)
    }

    #[test]
    fn a_loader_built_with_double_star_kwargs_gets_a_note_not_a_duplicate_keyword() {
        let c = one("dl = DataLoader(ds, **kw)\n", &[e("num_workers", "32")]);
        assert!(c.new_text.is_none(), "{c:?}");
        assert_eq!(c.notes, ["t.py:1: the DataLoader(...) call takes **kw, which may hold num_workers: set num_workers=32 in kw where it is made (or in the call, if kw never holds it)"]);
        // given explicitly beside **kw, it is the one to change (Python refuses it twice)
        let c = one(
            "dl = DataLoader(ds, num_workers=0, **kw)\n",
            &[e("num_workers", "32")],
        );
        assert_eq!(
            c.new_text.unwrap(),
            "dl = DataLoader(ds, num_workers=32, **kw)\n"
        );
        // *args may carry it by position; a keyword-only knob is still added
        let c = one(
            "dl = DataLoader(*a)\n",
            &[e("num_workers", "4"), e("persistent_workers", "True")],
        );
        assert_eq!(
            c.new_text.as_deref(),
            Some("dl = DataLoader(*a, persistent_workers=True)\n")
        );
        assert!(
            c.notes[0].contains("*a which may give num_workers by position"),
            "{c:?}"
        );
    }

    #[test]
    fn a_knob_given_by_position_is_changed_in_its_place() {
        let src = "dl = DataLoader(ds, 64, True, None, None, 0, pin_memory=False)\n";
        let c = one(src, &[e("num_workers", "32"), e("pin_memory", "True")]);
        assert_eq!(
            c.new_text.unwrap(),
            "dl = DataLoader(ds, 64, True, None, None, 32, pin_memory=True)\n"
        );
        let c = one(
            "dl = DataLoader(ds, 64, True, None, None, n)\n",
            &[e("num_workers", "32")],
        );
        assert!(c.new_text.is_none());
        assert_eq!(c.notes, ["t.py:1: num_workers=n (given by position) is not a literal: set it to 32 there (or where n comes from)"]);
        // fewer positional arguments: added as a keyword
        let c = one("dl = DataLoader(ds, 64)\n", &[e("num_workers", "32")]);
        assert_eq!(
            c.new_text.unwrap(),
            "dl = DataLoader(ds, 64, num_workers=32)\n"
        );
    }

    #[test]
    fn comments_and_strings_naming_a_call_are_never_edited() {
        let src = "dl = DataLoader(ds, num_workers=0)  # was DataLoader(ds)\n";
        let c = one(src, &[e("num_workers", "8")]);
        assert_eq!(
            c.new_text.unwrap(),
            "dl = DataLoader(ds, num_workers=8)  # was DataLoader(ds)\n"
        );
        let src = "print('DataLoader(x)'); dl = DataLoader(ds, num_workers=0) # DataLoader(, \"\n";
        let c = one(src, &[e("num_workers", "8")]);
        assert_eq!(
            c.new_text.unwrap(),
            "print('DataLoader(x)'); dl = DataLoader(ds, num_workers=8) # DataLoader(, \"\n"
        );
        let src = "\"\"\"Use DataLoader(ds) here.\n\"\"\"\ndl = DataLoader(\n    ds,  # the data, DataLoader(\n    num_workers=0,\n)\n";
        let c = edit_call(src, "t.py", 3, "DataLoader", &[e("num_workers", "8")]);
        assert_eq!(
            c.new_text.unwrap(),
            src.replace("num_workers=0", "num_workers=8")
        );
        // a name that only ends in DataLoader is another callee
        let c = one("dl = MyDataLoader(ds)\n", &[e("num_workers", "8")]);
        assert!(c.new_text.is_none() && c.notes[0].contains("no DataLoader(...) call"));
    }

    #[test]
    fn two_calls_on_one_line_are_both_changed_and_nested_calls_get_a_note() {
        let src = "a, b = DataLoader(x, num_workers=0), DataLoader(y)\n";
        let c = one(src, &[e("num_workers", "4")]);
        assert_eq!(
            c.new_text.as_deref(),
            Some("a, b = DataLoader(x, num_workers=4), DataLoader(y, num_workers=4)\n")
        );
        assert!(c.notes.is_empty());
        let t = c.new_text.unwrap();
        assert_eq!(c.calls.len(), 2);
        assert!(c.calls.iter().all(|&o| &t[o..=o] == "("), "{:?}", c.calls);
        assert_eq!(
            check_calls(&t, &c.calls, "DataLoader", &[e("num_workers", "4")]),
            None
        );
        let c = one(
            "dl = DataLoader(DataLoader(ds))\n",
            &[e("num_workers", "4")],
        );
        assert!(
            c.new_text.is_none() && c.notes[0].contains("nested"),
            "{c:?}"
        );
    }

    #[test]
    fn the_scanner_finds_a_broken_call() {
        let k = [e("num_workers", "4")];
        let t = "dl = DataLoader(ds, num_workers=1, num_workers=4)\n";
        assert!(check_calls(t, &[15], "DataLoader", &k)
            .unwrap()
            .contains("repeated"));
        let t = "dl = DataLoader(ds, 1, 2, 3, 4, 4, num_workers=4)\n";
        assert!(check_calls(t, &[15], "DataLoader", &k)
            .unwrap()
            .contains("both by position"));
        let t = "dl = DataLoader(num_workers=4, ds)\n";
        assert!(check_calls(t, &[15], "DataLoader", &k)
            .unwrap()
            .contains("positional argument follows"));
        let t = "dl = DataLoader(ds, num_workers=4\n";
        assert!(check_calls(t, &[15], "DataLoader", &k)
            .unwrap()
            .contains("do not match"));
    }

    /// The Python the tests run (`GPUFEED_TEST_PYTHON`, else python3), if it imports `module`.
    fn python_with(module: &str) -> Option<std::path::PathBuf> {
        let p = std::env::var("GPUFEED_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
        let ok = std::process::Command::new(&p)
            .args(["-c", &format!("import {module}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: no Python with {module} (set GPUFEED_TEST_PYTHON=/path/to/python): fix.patch's Python check did not run"
            );
        }
        ok.then(|| p.into())
    }

    #[test]
    fn python_parses_the_changed_file_and_torch_binds_the_call() {
        let Some(py) = python_with("ast") else { return };
        assert_eq!(
            python_check(&py, "dl = DataLoader(ds, num_workers=4)\n", &[1]),
            None
        );
        let why = python_check(&py, "dl = DataLoader(ds, num_workers=4\n", &[1]).unwrap();
        assert!(why.starts_with("line 1: "), "{why}");
        // no such Python: no answer (the scanner's check stands)
        assert_eq!(
            python_check(Path::new("/nonexistent/python"), "(", &[1]),
            None
        );
        let Some(py) = python_with("torch") else {
            return;
        };
        let why = python_check(
            &py,
            "import torch\ndl = torch.utils.data.DataLoader(\n  ds, 1, False, None, None, 0, num_workers=3)\n",
            &[2],
        )
        .unwrap();
        assert!(
            why.contains("multiple values") && why.contains("num_workers"),
            "{why}"
        );
        assert_eq!(
            python_check(
                &py,
                "dl = DataLoader(ds, 1, False, num_workers=3, **kw)\n",
                &[1]
            ),
            None
        );
    }

    #[test]
    fn a_script_through_a_symlink_gets_a_note_and_sites_of_one_file_are_changed_together() {
        use std::os::unix::fs::symlink;
        let d = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let src = "dl = DataLoader(ds, num_workers=0)\n";
        std::fs::write(elsewhere.path().join("real.py"), src).unwrap();
        symlink(elsewhere.path().join("real.py"), d.path().join("train.py")).unwrap();
        std::fs::create_dir(elsewhere.path().join("pkg")).unwrap();
        std::fs::write(elsewhere.path().join("pkg/data.py"), src).unwrap();
        symlink(elsewhere.path().join("pkg"), d.path().join("pkg")).unwrap();
        let k = [e("num_workers", "4")];
        let (diff, notes) = patch_sites(
            d.path(),
            &["train.py:1".into(), "pkg/data.py:1".into()],
            &k,
            None,
        );
        assert!(diff.is_empty(), "{diff}");
        assert_eq!(notes, [
            "train.py:1: train.py is a symlink (git apply refuses a patch through one): set num_workers=4 in that DataLoader(...) call by hand",
            "pkg/data.py:1: pkg is a symlink (git apply refuses a patch through one): set num_workers=4 in that DataLoader(...) call by hand",
        ]);
        // two sites of one file, the first a multi-line call that grows: both lines still found
        let two = "a = DataLoader(\n    x,\n)\nb = DataLoader(y, num_workers=0)\n";
        std::fs::write(d.path().join("two.py"), two).unwrap();
        let (diff, notes) = patch_sites(
            d.path(),
            &["two.py:4".into(), "two.py:1".into()],
            &k,
            Some(Path::new("/nonexistent/python")),
        );
        assert!(notes.is_empty(), "{notes:?}");
        assert!(
            diff.contains("+    num_workers=4,\n")
                && diff.contains("+b = DataLoader(y, num_workers=4)\n"),
            "{diff}"
        );
    }

    #[test]
    fn a_change_that_would_break_the_file_is_left_out_with_a_note() {
        let d = tempfile::tempdir().unwrap();
        // an unterminated string the scanner reads as closed on its line: the call it finds is
        // fine, but Python cannot parse the file
        std::fs::write(d.path().join("t.py"), "dl = DataLoader(ds)\nx = (\n").unwrap();
        let Some(py) = python_with("ast") else { return };
        let (diff, notes) = patch_sites(
            d.path(),
            &["t.py:1".into()],
            &[e("num_workers", "4")],
            Some(&py),
        );
        assert!(diff.is_empty(), "{diff}");
        assert!(
            notes[0].starts_with("t.py: the change would break the code (line "),
            "{notes:?}"
        );
    }

    #[test]
    fn a_comment_after_the_last_argument_and_a_lambda_with_two_parameters() {
        let src = "dl = DataLoader(\n    ds,\n    batch_size=8  # the batch, for now\n)\n";
        let c = one(src, &[e("num_workers", "4")]);
        let t = c.new_text.unwrap();
        assert_eq!(
            t,
            "dl = DataLoader(\n    ds,\n    batch_size=8,\n    num_workers=4,  # the batch, for now\n)\n"
        );
        assert_eq!(
            check_calls(&t, &c.calls, "DataLoader", &[e("num_workers", "4")]),
            None
        );
        let src = "dl = DataLoader(ds, 8, False, None, None, 0, lambda b, n=0: b)\n";
        let c = one(src, &[e("num_workers", "4"), e("pin_memory", "True")]);
        assert_eq!(
            c.new_text.unwrap(),
            "dl = DataLoader(ds, 8, False, None, None, 4, lambda b, n=0: b, pin_memory=True)\n"
        );
        let src = "dl = DataLoader(ds, collate_fn=lambda b, n=0: b, num_workers=0)\n";
        let c = one(src, &[e("num_workers", "4")]);
        assert_eq!(
            c.new_text.unwrap(),
            "dl = DataLoader(ds, collate_fn=lambda b, n=0: b, num_workers=4)\n"
        );
    }
}
