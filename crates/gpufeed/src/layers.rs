//! The layering of the crate (see the crate's doc), as tests: which top-level module may import
//! which ([`LAYERS`]), and no cycle between the files of a folder. Imports are read from the
//! sources (`crate::a::…` and `super::…` paths outside comments and test modules).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each top-level module with the top-level modules it may import, from the bottom up: a module
/// imports only modules listed above it, so the table itself has no cycle.
const LAYERS: &[(&str, &[&str])] = &[
    // The telemetry engine's crate (`crates/gpufeed-telemetry`, named here through lib.rs's `use`
    // lines): beneath every layer, and the compiler keeps it from importing any of them.
    ("units", &[]),
    ("import", &[]),
    // Beneath every layer.
    ("exit", &[]),
    ("finding", &[]),
    ("stats", &["units"]),
    ("outfile", &["exit"]),
    ("job", &["exit", "outfile"]),
    // Sources and what they produce.
    ("sample", &["exit", "outfile", "stats", "units"]),
    ("inject", &["exit", "outfile", "sample"]),
    (
        "record",
        &["exit", "inject", "job", "outfile", "sample", "units"],
    ),
    ("trace", &["exit", "finding", "stats", "units"]),
    // Evidence, rules, findings.
    (
        "diagnose",
        &[
            "exit", "finding", "import", "record", "sample", "stats", "units",
        ],
    ),
    ("live", &["diagnose", "exit", "finding", "record", "sample"]),
    (
        "tune",
        &[
            "diagnose", "exit", "finding", "inject", "job", "outfile", "record", "sample", "stats",
            "units",
        ],
    ),
    (
        "compare",
        &[
            "diagnose", "exit", "finding", "stats", "trace", "tune", "units",
        ],
    ),
    ("bench", &["exit", "outfile", "sample", "units"]),
    ("doctor", &["bench", "exit", "outfile", "sample", "units"]),
    // Presenters.
    (
        "present",
        &[
            "bench", "compare", "diagnose", "doctor", "finding", "inject", "live", "record",
            "sample", "stats", "trace", "tune", "units",
        ],
    ),
    ("tui", &["diagnose", "live", "present", "sample", "units"]),
    // The command line and the commands.
    (
        "cli",
        &[
            "bench", "diagnose", "doctor", "exit", "inject", "present", "record", "sample", "tune",
        ],
    ),
    (
        "commands",
        &[
            "bench", "cli", "compare", "diagnose", "doctor", "exit", "finding", "import", "inject",
            "job", "live", "outfile", "present", "record", "sample", "stats", "trace", "tui",
            "tune", "units",
        ],
    ),
];

/// The modules of the telemetry engine's crate lib.rs names as gpufeed's own (`use
/// gpufeed_telemetry as import;`, `use gpufeed_telemetry::units;`): in the table, with no file here.
const FROM_THE_ENGINE: [&str; 2] = ["import", "units"];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir`, with its module path (`["diagnose", "rules", "input"]`).
fn files(dir: &Path, prefix: &[String], out: &mut Vec<(Vec<String>, String)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        let path = e.path();
        if path.is_dir() {
            let mut p = prefix.to_vec();
            p.push(name);
            files(&path, &p, out);
        } else if let Some(stem) = name.strip_suffix(".rs") {
            let mut p = prefix.to_vec();
            if stem != "mod" {
                p.push(stem.to_string());
            }
            if p.is_empty() || (prefix.is_empty() && ["lib", "main", "layers"].contains(&stem)) {
                continue; // the crate root, the binary, this file
            }
            out.push((p, std::fs::read_to_string(&path).unwrap()));
        }
    }
}

/// The code of a file without its comments and its test module (by convention its last item).
fn code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]") {
            let next = lines.peek().map(|l| l.trim_start()).unwrap_or("");
            if next.starts_with("mod ") || next.starts_with("pub(crate) mod ") {
                break;
            }
        }
        if t.starts_with("//") {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The module paths `src` names (`crate::a::b`, `super::c`), resolved from the module `at`.
fn references(at: &[String], src: &str) -> Vec<Vec<String>> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = Vec::new();
    let bytes = src.as_bytes();
    for start in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(i) = src[from..].find(start).map(|i| i + from) {
            from = i + start.len();
            if i > 0 && (ident(bytes[i - 1] as char) || bytes[i - 1] == b':') {
                continue; // `$crate::`, `a::super::`
            }
            // The whole path: `super::super::a::b`.
            let rest = &src[i..];
            let end = rest
                .find(|c: char| !(ident(c) || c == ':'))
                .unwrap_or(rest.len());
            let segs: Vec<&str> = rest[..end].split("::").filter(|s| !s.is_empty()).collect();
            let mut path: Vec<String> = Vec::new();
            let mut segs = segs.into_iter().peekable();
            if start == "crate::" {
                segs.next();
            } else {
                // `super` is the module above this file's (a `mod.rs` is its folder's module).
                path = at.to_vec();
                while segs.peek() == Some(&"super") {
                    segs.next();
                    path.pop();
                }
            }
            path.extend(segs.map(str::to_string));
            if rest[end..].starts_with('{') {
                // A group, `super::{a::B, c}`: each of its paths, from where the group opens.
                group(&path, &rest[end + 1..], &mut out);
            } else if !path.is_empty() {
                out.push(path);
            }
        }
    }
    out
}

/// The paths of a `use` group whose text starts after its `{` (`a::B, c::{d, e}, self}`),
/// each under `base`.
fn group(base: &[String], text: &str, out: &mut Vec<Vec<String>>) {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut depth = 0usize;
    let mut item_start = 0;
    let mut items = Vec::new();
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&text[item_start..i]);
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&text[item_start..i]);
                item_start = i + 1;
            }
            _ => {}
        }
    }
    for item in items {
        let item = item.trim();
        let end = item
            .find(|c: char| !(ident(c) || c == ':'))
            .unwrap_or(item.len());
        let mut path = base.to_vec();
        path.extend(
            item[..end]
                .split("::")
                .filter(|s| !s.is_empty() && *s != "self")
                .map(str::to_string),
        );
        if item[end..].starts_with('{') {
            group(&path, &item[end + 1..], out);
        } else if !path.is_empty() {
            out.push(path);
        }
    }
}

fn all_files() -> Vec<(Vec<String>, String)> {
    let mut out = Vec::new();
    files(&src(), &[], &mut out);
    out.into_iter().map(|(p, text)| (p, code(&text))).collect()
}

#[test]
fn references_read_use_groups() {
    let at: Vec<String> = ["diagnose", "rules", "gpus"].map(String::from).to_vec();
    let got = references(
        &at,
        "use super::{capacity::IDLE_PCT, input, x::{a, b::C}};\nuse crate::{units::bytes, stats};",
    );
    let got: Vec<String> = got.iter().map(|p| p.join("::")).collect();
    for want in [
        "diagnose::rules::capacity::IDLE_PCT",
        "diagnose::rules::input",
        "diagnose::rules::x::a",
        "diagnose::rules::x::b::C",
        "units::bytes",
        "stats",
    ] {
        assert!(got.iter().any(|g| g == want), "{want} not in {got:?}");
    }
}

#[test]
fn top_level_modules_import_only_the_layers_beneath() {
    let order: BTreeMap<&str, usize> = LAYERS.iter().enumerate().map(|(i, l)| (l.0, i)).collect();
    // The table is a DAG: each module's imports are listed above it.
    for (i, (m, deps)) in LAYERS.iter().enumerate() {
        for d in *deps {
            let j = order
                .get(d)
                .unwrap_or_else(|| panic!("{m} may import {d}, not in the table"));
            assert!(
                *j < i,
                "{m} may import {d}, listed after it: the table has a cycle"
            );
        }
    }
    let files = all_files();
    let tops: BTreeSet<&str> = files
        .iter()
        .map(|(p, _)| p[0].as_str())
        .chain(FROM_THE_ENGINE)
        .collect();
    let listed: BTreeSet<&str> = order.keys().copied().collect();
    assert_eq!(
        tops, listed,
        "every top-level module is in LAYERS, and only those"
    );
    let mut broken = BTreeSet::new();
    for (p, code) in &files {
        let me = p[0].as_str();
        let allowed = LAYERS[order[me]].1;
        for r in references(p, code) {
            let to = r[0].as_str();
            if to == me || !listed.contains(to) {
                continue;
            }
            if !allowed.contains(&to) {
                broken.insert(format!("{} imports {}", p.join("/"), r.join("::")));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "imports against the layering (lib.rs's doc, LAYERS in layers.rs): move what both \
         need beneath both\n{}",
        broken.into_iter().collect::<Vec<_>>().join("\n")
    );
}

/// What each folder's `mod.rs` re-exports from its own files (`pub(crate) use acc::{Acc, X};`):
/// folder -> (name -> the file that defines it).
fn re_exports(files: &[(Vec<String>, String)]) -> BTreeMap<Vec<String>, BTreeMap<String, String>> {
    let mut out: BTreeMap<Vec<String>, BTreeMap<String, String>> = BTreeMap::new();
    for (p, code) in files {
        for line in code.lines() {
            let t = line.trim_start();
            let Some(rest) = ["pub(crate) use ", "pub use ", "use "]
                .iter()
                .find_map(|k| t.strip_prefix(k))
            else {
                continue;
            };
            let rest = rest.strip_prefix("self::").unwrap_or(rest);
            if ["crate::", "super::", "std::"]
                .iter()
                .any(|k| rest.starts_with(k))
            {
                continue;
            }
            let mut paths = Vec::new();
            group(
                &[],
                &format!("{}}}", rest.trim_end_matches(';')),
                &mut paths,
            );
            for path in paths {
                if path.len() >= 2 {
                    out.entry(p.clone())
                        .or_default()
                        .insert(path[path.len() - 1].clone(), path[0].clone());
                }
            }
        }
    }
    out
}

/// The cycles between the files of one folder, each said with one import of each edge. An
/// edge is a file's `crate::`/`super::` path into a sibling file, or to a name the folder's
/// `mod.rs` re-exports from a sibling file (`super::Acc` is `acc.rs`'s).
fn folder_cycles(files: &[(Vec<String>, String)]) -> Vec<String> {
    let re = re_exports(files);
    // folder -> (child -> children it imports), and one import per edge for the message.
    let mut graphs: BTreeMap<String, BTreeMap<String, BTreeMap<String, String>>> = BTreeMap::new();
    for (p, code) in files {
        for r in references(p, code) {
            let k = p.iter().zip(&r).take_while(|(a, b)| a == b).count();
            // Between top-level modules it is the table's business (`k == 0`).
            if k >= 1 && k < p.len() && k < r.len() && p[k] != r[k] {
                let to = re
                    .get(&p[..k])
                    .and_then(|m| m.get(&r[k]))
                    .cloned()
                    .unwrap_or_else(|| r[k].clone());
                if to == p[k] {
                    continue;
                }
                graphs
                    .entry(p[..k].join("/"))
                    .or_default()
                    .entry(p[k].clone())
                    .or_default()
                    .entry(to)
                    .or_insert_with(|| format!("{} imports {}", p.join("/"), r.join("::")));
            }
        }
    }
    let mut cycles = Vec::new();
    for (folder, g) in &graphs {
        let reaches = |from: &str, to: &str| {
            let mut seen = BTreeSet::new();
            let mut stack = vec![from.to_string()];
            while let Some(n) = stack.pop() {
                for next in g.get(&n).into_iter().flat_map(|m| m.keys()) {
                    if next == to {
                        return true;
                    }
                    if seen.insert(next.clone()) {
                        stack.push(next.clone());
                    }
                }
            }
            false
        };
        for (a, outs) in g {
            for (b, why) in outs {
                if reaches(b, a) {
                    cycles.push(format!("{folder}/: {a} -> {b} ({why}), and {b} leads back"));
                }
            }
        }
    }
    cycles
}

#[test]
fn folder_cycles_are_found_through_super_paths_and_re_exports() {
    let file = |p: &str, code: &str| (p.split('/').map(String::from).collect(), code.to_string());
    // `a/b.rs` -> `a/c.rs` directly, `a/c.rs` -> `a/b.rs` through the name `a/mod.rs` re-exports.
    let files = vec![
        file("a", "pub(crate) use b::{Acc, Other};\nmod b;\nmod c;\n"),
        file("a/b", "use super::c::Y;\npub(crate) struct Acc;\n"),
        file("a/c", "use super::Acc;\npub(crate) struct Y;\n"),
    ];
    let cycles = folder_cycles(&files);
    assert!(
        cycles
            .iter()
            .any(|c| c.contains("c -> b (a/c imports a::Acc)")),
        "{cycles:?}"
    );
    // The same with `c` using a name `mod.rs` defines itself: no cycle.
    let files = vec![
        files[0].clone(),
        files[1].clone(),
        file("a/c", "use super::Own;\n"),
    ];
    assert_eq!(folder_cycles(&files), Vec::<String>::new());
}

#[test]
fn no_folder_has_a_cycle_between_its_files() {
    let cycles = folder_cycles(&all_files());
    assert!(
        cycles.is_empty(),
        "files of a folder import each other: move what they share into a file beneath both\n{}",
        cycles.join("\n")
    );
}

fn sources(dir: &str) -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(dir);
    let mut out: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "rs"))
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(e.path()).unwrap())
        })
        .collect();
    out.sort();
    out
}

/// Layering: `cli` declares arguments and imports nothing from `commands`; a command uses
/// only the helpers of `commands/mod.rs` beneath it, never another command.
#[test]
fn cli_and_commands_import_one_way() {
    let cli = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cli.rs");
    let mut cli_sources = sources("cli");
    cli_sources.push(("cli.rs".into(), std::fs::read_to_string(cli).unwrap()));
    for (name, src) in cli_sources {
        assert!(
            !src.contains("crate::commands"),
            "cli/{name} imports commands"
        );
    }
    let commands = sources("commands");
    let names: Vec<String> = commands
        .iter()
        .map(|(n, _)| n.trim_end_matches(".rs").to_string())
        .filter(|n| n != "mod")
        .collect();
    for (file, src) in &commands {
        for other in &names {
            for path in [format!("super::{other}::"), format!("commands::{other}::")] {
                assert!(
                    !src.contains(&path) || file == "mod.rs",
                    "commands/{file} takes from commands/{other}.rs: move what they share \
                         beneath both"
                );
            }
        }
    }
}

/// The most lines of code (no blank lines, comments or test modules) `commands/` may hold: it only
/// parses arguments, calls the layers beneath and exits. A command that grows past it has logic
/// that belongs beneath (the searches in `tune`, the trace grouping in `trace::ranks`, ...).
const COMMANDS_MAX_LINES: usize = 1500;

#[test]
fn commands_stay_thin() {
    let lines: usize = all_files()
        .iter()
        .filter(|(p, _)| p.first().is_some_and(|m| m == "commands"))
        .map(|(_, code)| code.lines().filter(|l| !l.trim().is_empty()).count())
        .sum();
    assert!(
        lines <= COMMANDS_MAX_LINES,
        "commands/ holds {lines} lines of code, more than {COMMANDS_MAX_LINES}: move the logic \
         into the layer it belongs to"
    );
}

/// At most this many `pub mod` in the crate: a module is public only where the binary, the
/// integration tests or the fuzz targets name it (the list in `lib.rs`); the rest are
/// `pub(crate)` or private, so moving a file inside the crate breaks nothing outside it.
const PUB_MOD_MAX: usize = 40;

#[test]
fn public_modules_stay_few() {
    fn walk(dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let path = e.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                out.extend(
                    text.lines()
                        .map(str::trim)
                        .filter(|l| l.starts_with("pub mod "))
                        .map(|l| format!("{}: {l}", path.display())),
                );
            }
        }
    }
    let mut public = Vec::new();
    walk(&src(), &mut public);
    public.sort();
    assert!(
        public.len() <= PUB_MOD_MAX,
        "{} `pub mod`s, more than {PUB_MOD_MAX}: make a module `pub(crate)` unless something \
         outside the crate names it (and then list it in lib.rs)\n{}",
        public.len(),
        public.join("\n")
    );
}

/// Comments say why, not which issue asked: a newcomer cannot open an issue number (the word
/// followed by a number, or a hash followed by one), and the reason outlives the tracker. Tests
/// under `tests/` may cite them.
#[test]
fn comments_give_reasons_not_issue_numbers() {
    /// True when `s` starts with a number (a digit, then no letter right after the number).
    fn number(s: &str) -> bool {
        let rest = s.trim_start_matches(|c: char| c.is_ascii_digit());
        rest.len() < s.len() && !rest.starts_with(|c: char| c.is_ascii_alphabetic())
    }
    fn walk(dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let path = e.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|x| x == "rs" || x == "py") {
                let text = std::fs::read_to_string(&path).unwrap();
                for (i, line) in text.lines().enumerate() {
                    let Some(at) = line.find("//").or_else(|| line.find("# ")) else {
                        continue;
                    };
                    let comment = line[at..].to_lowercase();
                    let cites = comment.match_indices("issue").any(|(j, _)| {
                        let after = comment[j + 5..].trim_start_matches('s');
                        number(after.trim_start())
                    }) || comment
                        .match_indices('#')
                        .any(|(j, _)| number(&comment[j + 1..]));
                    if cites {
                        out.push(format!("{}:{}: {}", path.display(), i + 1, line.trim()));
                    }
                }
            }
        }
    }
    let mut found = Vec::new();
    walk(&src(), &mut found);
    // The telemetry engine's crate keeps the same rule.
    walk(&src().join("../../gpufeed-telemetry/src"), &mut found);
    assert!(
        found.is_empty(),
        "comments that cite an issue number: give the reason instead\n{}",
        found.join("\n")
    );
}

/// One path per item: no glob re-export (`pub use a::*`) and no re-export under another name
/// (`pub use a::B as C`), so a type is named where it is defined or through one explicit list.
#[test]
fn no_glob_or_renaming_re_exports() {
    for (path, code) in all_files() {
        for line in code.lines().map(str::trim) {
            let re_export = line.starts_with("pub use ") || line.starts_with("pub(crate) use ");
            assert!(
                !(re_export && (line.ends_with("::*;") || line.contains(" as "))),
                "{}: `{line}`: re-export each item once, under its own name",
                path.join("::")
            );
        }
    }
}

/// A finding's evidence is typed where a rule makes it (`finding/evidence.rs`: each item's wire
/// name, label and unit in one table), not a map of names to JSON values; and what reads it
/// (the presenters, the verdict, the live view) names items by type, never by a key string, so
/// renaming a key cannot silently change a report.
#[test]
fn evidence_is_typed_and_read_by_type() {
    let files = all_files();
    let text = |m: &[&str]| {
        let (_, t) = files
            .iter()
            .find(|(p, _)| p.iter().map(String::as_str).eq(m.iter().copied()))
            .unwrap_or_else(|| panic!("no {m:?}"));
        code(t).split_whitespace().collect::<Vec<_>>().join(" ")
    };
    let finding = text(&["finding"]);
    let items = text(&["finding", "evidence"]);
    assert!(
        finding.contains("pub evidence: Items,"),
        "Finding.evidence is `Items`"
    );
    assert!(items.contains("pub struct Items(Vec<Item>);"));
    for (name, t) in [("finding.rs", &finding), ("finding/evidence.rs", &items)] {
        for untyped in [
            "BTreeMap<String, serde_json::Value>",
            "BTreeMap<String, Value>",
            "HashMap<String, serde_json::Value>",
        ] {
            assert!(!t.contains(untyped), "{name} holds evidence as `{untyped}`");
        }
    }
    // The readers: every presenter, the verdict, the live view and its terminal UI that handles
    // findings or their evidence (a file that never sees one, such as the sweep table that only
    // borrows `finding::WaitSource`, may name its own columns as it likes).
    let readers: Vec<&(Vec<String>, String)> = files
        .iter()
        .filter(|(p, t)| {
            (matches!(p[0].as_str(), "present" | "live" | "tui")
                || p.iter().map(String::as_str).eq(["diagnose", "verdict"]))
                && (t.contains("Finding") || t.contains("evidence") || t.contains("findings"))
        })
        .collect();
    assert!(readers.len() >= 8, "{}", readers.len());
    // Names so common that a reader uses them for other things (a JSON field, a label).
    let common = [
        "gpu", "gpus", "kind", "source", "trace", "rank", "ranks", "bytes", "workers",
    ];
    let mut found = Vec::new();
    for (path, t) in &readers {
        let c = code(t);
        for pat in ["evidence.get(\"", "evidence[\"", "evidence.contains_key(\""] {
            if c.contains(pat) {
                found.push(format!("{}: `{pat}`", path.join("::")));
            }
        }
        for k in crate::finding::ItemKey::ALL {
            let name = k.as_str();
            if !common.contains(&name) && c.contains(&format!("\"{name}\"")) {
                found.push(format!("{}: \"{name}\"", path.join("::")));
            }
        }
    }
    assert!(
        found.is_empty(),
        "read evidence by its type (`ItemKey`, `evidence_of!`), not by key string: {found:#?}"
    );
}

/// Closed sets travel as enums: outside the file that defines one, its wire names are never
/// written as string literals (matched, compared or built by hand), so that renaming a variant
/// cannot leave a stale string that silently stops matching. Names so short or common that other
/// text uses them (`ok`, `none`, ...) are not checked.
#[test]
fn closed_sets_are_not_matched_as_strings() {
    fn names<T: strum::VariantArray + Copy + Into<&'static str>>() -> Vec<&'static str> {
        T::VARIANTS.iter().map(|v| (*v).into()).collect()
    }
    let sets: [(&str, &[&str], Vec<&'static str>); 4] = [
        (
            "EndReason",
            &["sample", "event"],
            names::<crate::sample::event::EndReason>(),
        ),
        (
            "StageKind",
            &["sample", "pyphase"],
            names::<crate::sample::pyphase::StageKind>(),
        ),
        (
            "InputFormat",
            &["diagnose", "input"],
            names::<crate::diagnose::input::InputFormat>(),
        ),
        (
            "VerdictId",
            &["diagnose", "verdict"],
            names::<crate::diagnose::verdict::VerdictId>(),
        ),
    ];
    let mut found = Vec::new();
    for (path, text) in all_files() {
        let code = code(&text);
        for (set, home, wire) in &sets {
            if path.iter().map(String::as_str).eq(home.iter().copied()) {
                continue;
            }
            // `pin_memory` is also the DataLoader argument's name.
            for name in wire
                .iter()
                .filter(|n| n.len() > 4 && n.contains('_') && **n != "pin_memory")
            {
                if code.contains(&format!("\"{name}\"")) {
                    found.push(format!("{}: \"{name}\" ({set})", path.join("::")));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "closed-set names written as strings: use the enum\n{}",
        found.join("\n")
    );
}

/// A job is recorded one way: only `record/session.rs` prepares and starts the recorder
/// (`Prepared`) or spawns a job to record, so that `run`, `record` and every trial of the tuner
/// share one sequence, and a fix to it reaches them all.
#[test]
fn one_recording_session() {
    let mut found = Vec::new();
    for (path, code) in all_files() {
        let here = path.join("/");
        if here == "record/session" || here == "record/recorder" || path[0] == "job" {
            continue;
        }
        for pat in ["Prepared", "Job::spawn_terminal", "Job::spawn_with"] {
            if code.contains(pat) {
                found.push(format!("{here}: `{pat}`"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the recorder is prepared, and a recorded job spawned, only in record/session.rs: \
         go through `Session`\n{}",
        found.join("\n")
    );
}

#[test]
fn names_say_their_room() {
    let files = all_files();
    // Type names defined in two rooms were read as the same thing: each is defined once.
    let mut defined: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (p, code) in &files {
        for line in code.lines() {
            let t = line.trim_start();
            let t = t
                .strip_prefix("pub(crate) ")
                .or(t.strip_prefix("pub "))
                .unwrap_or(t);
            for name in ["JobSummary", "Figures", "Status", "Source", "Summary"] {
                for kind in ["struct ", "enum ", "type "] {
                    let rest = t.strip_prefix(kind).and_then(|r| r.strip_prefix(name));
                    if rest.is_some_and(|r| r.starts_with([' ', '{', '<', '(', ';', '='])) {
                        defined.entry(name).or_default().push(p.join("/"));
                    }
                }
            }
        }
    }
    let twice: Vec<String> = defined
        .iter()
        .filter(|(_, at)| at.len() > 1)
        .map(|(n, at)| format!("{n}: {at:?}"))
        .collect();
    assert!(twice.is_empty(), "defined in two rooms: {twice:?}");
    // Module names that stood for different things in different folders: one place each.
    let mut at: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for (p, _) in &files {
        for (i, seg) in p.iter().enumerate() {
            for name in ["summary", "stats", "job"] {
                if seg == name {
                    at.entry(name).or_default().insert(p[..=i].join("/"));
                }
            }
        }
    }
    let clash: Vec<String> = at
        .iter()
        .filter(|(_, w)| w.len() > 1)
        .map(|(n, w)| format!("{n}: {w:?}"))
        .collect();
    assert!(clash.is_empty(), "one module name, two rooms: {clash:?}");
    // No file beside another of its name with a suffix (`trial.rs` and `trials.rs`,
    // `sweep.rs` and `sweep_run.rs`): the name says which is which.
    let names: BTreeSet<Vec<String>> = files.iter().map(|(p, _)| p.clone()).collect();
    let mut alike = Vec::new();
    for p in &names {
        let (last, folder) = p.split_last().expect("a module path");
        for suffix in ["s", "_run"] {
            let mut q = folder.to_vec();
            q.push(format!("{last}{suffix}"));
            if names.contains(&q) {
                alike.push(format!("{} and {}", p.join("/"), q.join("/")));
            }
        }
    }
    assert!(alike.is_empty(), "files named alike: {alike:?}");
}
