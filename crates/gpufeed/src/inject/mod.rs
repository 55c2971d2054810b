//! `--dataloader KEY=VALUE` and `--torch KEY=VALUE`: knobs the training script does not expose,
//! changed with no code change.
//!
//! gpufeed writes a `sitecustomize.py`, the package it starts ([`HOOK_FILES`]) and its settings
//! into a private temporary directory (0700) put first on the job's `PYTHONPATH`. In every Python process of the
//! job it installs an import hook and hands over to the `sitecustomize` that was there before; it
//! never imports torch itself. When the job imports torch it sets the global switches, and wraps
//! `DataLoader.__init__` so that every loader gets the given values (within PyTorch's rules). Each
//! override, with the file:line that created the DataLoader, is written as an NDJSON line to
//! `report.ndjson` in the same directory: a side channel that needs nothing from the job. After the
//! job, [`Injection::read`] turns those lines into [`InjectReport`]: what was overridden, and notes
//! for what could not be.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The Python side, written into the job's private folder: `sitecustomize.py`, which the job's
/// Python runs at start-up, and the package it starts, `_gpufeed_hook/` (one module a job:
/// the import hook, the overrides, the step markers, the pipeline checks, the start-up). The
/// wheel ships the same files as `gpufeed/_hook/`, whose step timing `gpufeed.profile()`
/// installs in the notebook kernel (`sitecustomize.py` does nothing under another name).
pub(crate) const HOOK_FILES: [(&str, &str); 7] = [
    (
        "sitecustomize.py",
        include_str!("../../../../python/gpufeed/_hook/sitecustomize.py"),
    ),
    (
        "_gpufeed_hook/__init__.py",
        include_str!("../../../../python/gpufeed/_hook/__init__.py"),
    ),
    (
        "_gpufeed_hook/imports.py",
        include_str!("../../../../python/gpufeed/_hook/imports.py"),
    ),
    (
        "_gpufeed_hook/overrides.py",
        include_str!("../../../../python/gpufeed/_hook/overrides.py"),
    ),
    (
        "_gpufeed_hook/pipeline.py",
        include_str!("../../../../python/gpufeed/_hook/pipeline.py"),
    ),
    (
        "_gpufeed_hook/site.py",
        include_str!("../../../../python/gpufeed/_hook/site.py"),
    ),
    (
        "_gpufeed_hook/steps.py",
        include_str!("../../../../python/gpufeed/_hook/steps.py"),
    ),
];

/// Writes [`HOOK_FILES`] under `dir`.
fn write_hook(dir: &std::path::Path) -> std::io::Result<()> {
    std::fs::create_dir(dir.join("_gpufeed_hook"))?;
    for (name, text) in HOOK_FILES {
        std::fs::write(dir.join(name), text)?;
    }
    Ok(())
}

#[derive(Debug, thiserror::Error)]
pub enum InjectError {
    #[error("{0}")]
    Usage(String),
    #[error("cannot prepare the DataLoader/torch overrides in a temporary directory: {0}")]
    Io(#[from] std::io::Error),
}

impl crate::exit::HasExit for InjectError {
    fn exit(&self) -> crate::exit::Exit {
        match self {
            InjectError::Usage(_) => crate::exit::Exit::Usage,
            InjectError::Io(_) => crate::exit::Exit::Failure,
        }
    }
}

/// Replaces every `{name}` of the setting in `text` (a `--dataloader`/`--torch` value here, a
/// command or an environment template in the tuner).
pub(crate) fn substitute(text: &str, setting: &[(String, String)]) -> String {
    // One pass over the template: a value is copied as it is, never searched for `{name}` again
    // (`-L a '{b}' -L b X` gives `a={b}`, not `a=X`).
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let hit = after.find('}').and_then(|close| {
            let name = &after[..close];
            setting
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| (v, close))
        });
        match hit {
            Some((v, close)) => {
                out.push_str(v);
                rest = &after[close + 1..];
            }
            None => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// What kind of value a key takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ValueKind {
    /// 0, 1, 2, ...
    Count,
    /// 1, 2, ...
    Positive,
    /// 0/1, true/false, yes/no.
    Flag,
    /// high, medium, highest.
    Precision,
}

/// `--dataloader` keys: arguments of `torch.utils.data.DataLoader`.
pub(crate) const DATALOADER_KEYS: [&str; 5] = [
    "num_workers",
    "pin_memory",
    "prefetch_factor",
    "persistent_workers",
    "batch_size",
];

/// `--torch` keys: global switches.
pub(crate) const TORCH_KEYS: [&str; 3] = ["matmul_precision", "cudnn_benchmark", "allow_tf32"];

fn kind_of(flag: Flag, key: &str) -> Option<ValueKind> {
    Some(match (flag, key) {
        (Flag::DataLoader, "num_workers") => ValueKind::Count,
        (Flag::DataLoader, "prefetch_factor" | "batch_size") => ValueKind::Positive,
        (Flag::DataLoader, "pin_memory" | "persistent_workers") => ValueKind::Flag,
        (Flag::Torch, "matmul_precision") => ValueKind::Precision,
        (Flag::Torch, "cudnn_benchmark" | "allow_tf32") => ValueKind::Flag,
        _ => return None,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flag {
    DataLoader,
    Torch,
}

impl Flag {
    fn name(self) -> &'static str {
        match self {
            Flag::DataLoader => "--dataloader",
            Flag::Torch => "--torch",
        }
    }
    fn keys(self) -> &'static [&'static str] {
        match self {
            Flag::DataLoader => &DATALOADER_KEYS,
            Flag::Torch => &TORCH_KEYS,
        }
    }
}

/// The overrides as given on the command line: values may hold `{knob}` placeholders.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InjectSpec {
    dataloader: Vec<(String, String)>,
    torch: Vec<(String, String)>,
    /// Step markers from every torch DataLoader (on unless `--no-auto-steps`).
    auto_steps: bool,
}

fn parse_pairs(flag: Flag, specs: &[String]) -> Result<Vec<(String, String)>, InjectError> {
    let mut out: Vec<(String, String)> = Vec::new();
    for s in specs {
        let (k, v) = s.split_once('=').ok_or_else(|| {
            InjectError::Usage(format!(
                "{} '{s}': expected KEY=VALUE, e.g. {} {}=...",
                flag.name(),
                flag.name(),
                flag.keys()[0]
            ))
        })?;
        let k = k.trim();
        if kind_of(flag, k).is_none() {
            return Err(InjectError::Usage(format!(
                "{} '{s}': unknown key '{k}' (known: {})",
                flag.name(),
                flag.keys().join(", ")
            )));
        }
        if out.iter().any(|(o, _)| o == k) {
            return Err(InjectError::Usage(format!(
                "{} {k} is given twice: give it once",
                flag.name()
            )));
        }
        let v = v.trim();
        if !v.contains('{') {
            value_of(flag, k, v)?;
        }
        out.push((k.to_string(), v.to_string()));
    }
    Ok(out)
}

/// Checks a (substituted) value and turns it into the JSON value the Python side uses.
fn value_of(flag: Flag, key: &str, v: &str) -> Result<serde_json::Value, InjectError> {
    let bad = |want: &str| {
        InjectError::Usage(format!(
            "{} {key}={v}: {want}, e.g. {} {key}={}",
            flag.name(),
            flag.name(),
            match kind_of(flag, key) {
                Some(ValueKind::Flag) => "1",
                Some(ValueKind::Precision) => "high",
                _ => "4",
            }
        ))
    };
    match kind_of(flag, key) {
        Some(ValueKind::Count) => v
            .parse::<u32>()
            .map(serde_json::Value::from)
            .map_err(|_| bad("expected a whole number 0 or above")),
        Some(ValueKind::Positive) => match v.parse::<u32>() {
            Ok(n) if n >= 1 => Ok(n.into()),
            _ => Err(bad("expected a whole number 1 or above")),
        },
        Some(ValueKind::Flag) => match v.to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(true.into()),
            "0" | "false" | "no" | "off" => Ok(false.into()),
            _ => Err(bad("expected 0 or 1")),
        },
        Some(ValueKind::Precision) => match v {
            "high" | "medium" | "highest" => Ok(v.into()),
            _ => Err(bad("expected high, medium or highest")),
        },
        None => Err(InjectError::Usage(format!(
            "{}: unknown key '{key}'",
            flag.name()
        ))),
    }
}

impl InjectSpec {
    /// Parses `--dataloader` and `--torch` values; values without placeholders are checked now.
    pub fn parse(dataloader: &[String], torch: &[String]) -> Result<InjectSpec, InjectError> {
        Ok(InjectSpec {
            dataloader: parse_pairs(Flag::DataLoader, dataloader)?,
            torch: parse_pairs(Flag::Torch, torch)?,
            auto_steps: false,
        })
    }

    /// Also time every torch DataLoader's batches as step markers (see [`Resolved::auto_steps`]).
    pub(crate) fn with_auto_steps(mut self, on: bool) -> InjectSpec {
        self.auto_steps = on;
        self
    }

    /// No override asked for (the DataLoader step markers aside).
    pub fn is_empty(&self) -> bool {
        self.dataloader.is_empty() && self.torch.is_empty()
    }

    /// The value templates, for checking that every knob is used somewhere.
    pub(crate) fn templates(&self) -> impl Iterator<Item = &str> {
        self.dataloader
            .iter()
            .chain(&self.torch)
            .map(|(_, v)| v.as_str())
    }

    /// The values for one setting (`{knob}` replaced), checked.
    pub(crate) fn resolve(&self, setting: &[(String, String)]) -> Result<Resolved, InjectError> {
        let one = |flag: Flag, pairs: &[(String, String)]| {
            pairs
                .iter()
                .map(|(k, t)| {
                    let v = substitute(t, setting);
                    if v.contains('{') && v.contains('}') {
                        return Err(InjectError::Usage(format!(
                            "{} {k}={t}: '{v}' names no knob given with -L",
                            flag.name()
                        )));
                    }
                    Ok((k.clone(), value_of(flag, k, &v)?))
                })
                .collect::<Result<BTreeMap<_, _>, _>>()
        };
        Ok(Resolved {
            dataloader: one(Flag::DataLoader, &self.dataloader)?,
            torch: one(Flag::Torch, &self.torch)?,
            auto_steps: self.auto_steps,
            python_job: false,
        })
    }
}

/// The overrides of one job, values checked.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Resolved {
    pub dataloader: BTreeMap<String, serde_json::Value>,
    pub torch: BTreeMap<String, serde_json::Value>,
    /// Every `next()` on a torch DataLoader iterator sends a step marker (with its wait and batch
    /// size) to the job's step socket, marked as gpufeed's own so the job's markers win.
    #[serde(rename = "steps")]
    pub auto_steps: bool,
    /// The job's program is a Python interpreter (`run -- python ...`): when none of its
    /// processes loaded the hook (`python -I`/`-E`/`-S` ignore PYTHONPATH), its steps were not
    /// timed and that is said. Not sent to the job.
    #[serde(skip)]
    pub(crate) python_job: bool,
}

impl Resolved {
    /// Step markers from the DataLoader and nothing else.
    pub(crate) fn auto_steps_only() -> Resolved {
        Resolved {
            auto_steps: true,
            ..Default::default()
        }
    }

    /// No override (the DataLoader step markers aside).
    pub fn is_empty(&self) -> bool {
        self.dataloader.is_empty() && self.torch.is_empty()
    }
}

use crate::sample::event::py;
use crate::sample::event::Override;

/// What the job's Python processes reported.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct InjectReport {
    pub overrides: Vec<Override>,
    /// Overrides that could not apply, and why (never a crash of the job).
    pub notes: Vec<String>,
    /// What the DataLoader step hook timed: the training loader, loaders left out, and why it
    /// could not tell them apart.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub loader_notes: Vec<String>,
}

/// One line of `report.ndjson`.
#[derive(Debug, Clone, Default, Deserialize)]
struct Event {
    event: String,
    #[serde(default)]
    target: Option<String>,
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    value: serde_json::Value,
    #[serde(default)]
    original: serde_json::Value,
    #[serde(default)]
    now: serde_json::Value,
    #[serde(default)]
    site: Option<String>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    detail: Option<String>,
    /// `loader` events: `train`, `other` or `unknown`.
    #[serde(default)]
    role: Option<String>,
    /// `loader` events: batches taken from it so far.
    #[serde(default)]
    batches: Option<u64>,
    #[serde(default)]
    rank: Option<u64>,
}

/// Most lines read from the side channel (a job creating a DataLoader per step writes many).
const MAX_EVENTS: usize = 200_000;

/// Most bytes read from the side channel: the job writes it, so it may be any size (a job that
/// wrote 1.5 GB there drove gpufeed to 3 GB when it was read whole).
const MAX_REPORT_BYTES: u64 = 64 << 20;

/// Longest line of the side channel kept; longer ones (no event of ours is) are skipped.
const MAX_LINE_BYTES: u64 = 64 << 10;

/// Turns the side channel's lines into the report; `wanted` is what was asked for.
pub(crate) fn aggregate(text: &str, wanted: &Resolved) -> InjectReport {
    aggregate_from(text.as_bytes(), wanted)
}

/// [`aggregate`], streaming: reads at most `MAX_REPORT_BYTES` (64 MiB) of `input`, one line of at most
/// `MAX_LINE_BYTES` (64 KiB) at a time, so memory stays bounded whatever the job wrote.
pub(crate) fn aggregate_from(input: impl std::io::BufRead, wanted: &Resolved) -> InjectReport {
    use std::io::{BufRead, Read};
    let mut rep = InjectReport::default();
    let mut seen = Seen::default();
    let mut input = input.take(MAX_REPORT_BYTES);
    let mut line = Vec::new();
    for _ in 0..MAX_EVENTS {
        line.clear();
        match (&mut input)
            .take(MAX_LINE_BYTES)
            .read_until(b'\n', &mut line)
        {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if line.last() != Some(&b'\n') && line.len() as u64 == MAX_LINE_BYTES {
            // Too long: skip the rest of it.
            if input.skip_until(b'\n').is_err() {
                break;
            }
            continue;
        }
        if let Ok(e) = serde_json::from_slice::<Event>(&line) {
            rep.event(e, &mut seen);
        }
    }
    if input.limit() == 0 && input.into_inner().fill_buf().is_ok_and(|b| !b.is_empty()) {
        rep.note(format!(
            "the job wrote more than {} MiB of override events: only the first {} MiB were read",
            MAX_REPORT_BYTES >> 20,
            MAX_REPORT_BYTES >> 20
        ));
    }
    rep.nothing_changed(wanted, &seen);
    rep.loader_notes(&seen);
    rep
}

/// What the job's events showed happened at all.
#[derive(Default)]
struct Seen {
    python: bool,
    torch: bool,
    loader: bool,
    /// The DataLoader step hook's loaders: (role, site) → batches per rank (the latest count).
    loaders: BTreeMap<(String, String), BTreeMap<u64, u64>>,
}

impl InjectReport {
    /// Adds a note once.
    fn note(&mut self, n: String) {
        if !self.notes.contains(&n) {
            self.notes.push(n);
        }
    }

    /// One event of the job's sitecustomize: an override (counted when repeated) or a note.
    fn event(&mut self, e: Event, seen: &mut Seen) {
        let target = e.target.clone().unwrap_or_default();
        let key = e.key.clone().unwrap_or_default();
        let at = e
            .site
            .as_ref()
            .map(|s| format!(" at {s}"))
            .unwrap_or_default();
        match e.event.as_str() {
            "python" => seen.python = true,
            "torch" => seen.torch = true,
            "override" => {
                seen.loader |= target == "DataLoader";
                let o = Override {
                    target,
                    key,
                    value: e.value,
                    original: e.original,
                    site: e.site,
                    reason: e.reason,
                    count: 1,
                };
                match self.overrides.iter_mut().find(|x| {
                    (&x.target, &x.key, &x.value, &x.original, &x.site, &x.reason)
                        == (&o.target, &o.key, &o.value, &o.original, &o.site, &o.reason)
                }) {
                    Some(x) => x.count = x.count.saturating_add(1),
                    None => self.overrides.push(o),
                }
            }
            "skip" => {
                seen.loader |= target == "DataLoader";
                let what = if target == "DataLoader" {
                    format!("DataLoader{at}")
                } else {
                    target
                };
                self.note(format!(
                    "{what}: {key}={} not applied: {}",
                    py(&e.value),
                    e.reason.unwrap_or_default()
                ));
            }
            "note" if key == "steps" => {
                let n = match &e.site {
                    Some(s) => format!(
                        "{} (first seen at the DataLoader created at {s})",
                        e.detail.unwrap_or_default()
                    ),
                    None => e.detail.unwrap_or_default(),
                };
                if !self.loader_notes.contains(&n) {
                    self.loader_notes.push(n);
                }
            }
            "note" if key == "shards" || key == "worker-split" => {
                // A loader that reads samples twice or leaves workers idle: said beside what
                // the step hook timed, where the user reads about their DataLoaders.
                let n = match &e.site {
                    Some(s) => format!(
                        "the DataLoader created at {s}: {}",
                        e.detail.unwrap_or_default()
                    ),
                    None => e.detail.unwrap_or_default(),
                };
                if !self.loader_notes.contains(&n) {
                    self.loader_notes.push(n);
                }
            }
            "note" => {
                seen.loader |= target == "DataLoader";
                self.note(format!(
                    "{target}{at}: {key}: {}",
                    e.detail.unwrap_or_default()
                ));
            }
            "loader" => {
                if let (Some(role), Some(n)) = (e.role, e.batches) {
                    let site = e.site.unwrap_or_else(|| "an unknown line".into());
                    let per_rank = seen.loaders.entry((role, site)).or_default();
                    let c = per_rank.entry(e.rank.unwrap_or(0)).or_default();
                    *c = (*c).max(n);
                }
            }
            "reverted" => self.note(format!(
                "{target}.{key}={} was set back to {} by the job's own code after gpufeed set it",
                py(&e.value),
                py(&e.now)
            )),
            "error" => self.note(format!(
                "gpufeed's sitecustomize{at}: {}",
                e.detail.unwrap_or_default()
            )),
            _ => {}
        }
    }

    /// Which DataLoader the step markers timed, and which loaders were left out of the step rate
    /// (the training loader first).
    fn loader_notes(&mut self, seen: &Seen) {
        let mut loaders: Vec<_> = seen.loaders.iter().collect();
        loaders.sort_by_key(|((role, _), _)| role.as_str() != "train");
        for ((role, site), per_rank) in loaders {
            let batches: u64 = per_rank.values().sum();
            let ranks = if per_rank.len() > 1 {
                format!(" over {} ranks", per_rank.len())
            } else {
                String::new()
            };
            let n = match role.as_str() {
                "train" => format!(
                    "timed at each batch of the training loader, the DataLoader created at \
                     {site} ({batches} batches{ranks}), unless the job sent step markers of its own"
                ),
                "other" => format!(
                    "the DataLoader created at {site} gave {batches} batches{ranks} with no \
                     optimizer step (validation or evaluation): left out of the step rate"
                ),
                _ => continue,
            };
            self.loader_notes.push(n);
        }
    }

    /// Says why the flags changed nothing (no Python, no torch, or no DataLoader), and, for a
    /// Python job no process of which loaded the hook, that its steps could not be timed.
    fn nothing_changed(&mut self, wanted: &Resolved, seen: &Seen) {
        let flags = match (wanted.dataloader.is_empty(), wanted.torch.is_empty()) {
            (true, true) => None,
            (false, false) => Some("--dataloader and --torch"),
            (false, true) => Some("--dataloader"),
            _ => Some("--torch"),
        };
        let steps_lost = wanted.auto_steps && wanted.python_job;
        if !seen.python {
            let what = match (flags, steps_lost) {
                (None, false) => return,
                (None, true) => "step markers could not be injected (no DataLoader batch was \
                                 timed as a step)"
                    .to_string(),
                (Some(f), false) => format!("{f} changed nothing"),
                (Some(f), true) => {
                    format!("{f} changed nothing and step markers could not be injected")
                }
            };
            self.note(format!(
                "{what}: no Python process of the job loaded gpufeed's sitecustomize (not a \
                 Python job, python -E/-I/-S, or PYTHONPATH replaced)"
            ));
            return;
        }
        let Some(flags) = flags else {
            return; // only step markers were asked for: nothing to change
        };
        if !seen.torch {
            self.note(format!(
                "{flags} changed nothing: the job never imported torch"
            ));
        } else if !wanted.dataloader.is_empty() && !seen.loader {
            self.note(
                "--dataloader changed nothing: the job created no torch.utils.data.DataLoader"
                    .into(),
            );
        }
    }
}

/// The prepared directory of one job; removed when dropped.
pub(crate) struct Injection {
    dir: tempfile::TempDir,
    wanted: Resolved,
}

/// The injection for one job with `setting`'s knob values, or `None` when nothing is overridden
/// and no step markers are wanted from the DataLoader.
pub(crate) fn for_setting(
    spec: &InjectSpec,
    setting: &[(String, String)],
) -> Result<Option<Injection>, InjectError> {
    if spec.is_empty() && !spec.auto_steps {
        return Ok(None);
    }
    Injection::prepare(&spec.resolve(setting)?).map(Some)
}

impl Injection {
    /// Writes the hook ([`HOOK_FILES`]) and the settings into a new private temporary directory.
    pub(crate) fn prepare(wanted: &Resolved) -> Result<Injection, InjectError> {
        // A folder left by a gpufeed that was killed (SIGKILL) is removed by the next one.
        let dir = crate::outfile::owned_private_dir("gpufeed-inject-")?;
        write_hook(dir.path())?;
        let cfg = serde_json::to_string(wanted).map_err(std::io::Error::other)?;
        std::fs::write(dir.path().join("config.json"), cfg)?;
        Ok(Injection {
            dir,
            wanted: wanted.clone(),
        })
    }

    /// Notes that the job's program is `program` (its `argv[0]`): a Python interpreter
    /// (`python`, `python3.11`, a venv's `python`) is expected to load the hook.
    pub(crate) fn for_program(mut self, program: Option<&std::ffi::OsStr>) -> Injection {
        self.wanted.python_job = program
            .and_then(|p| std::path::Path::new(p).file_name())
            .is_some_and(|n| n.to_string_lossy().starts_with("python"));
        self
    }

    /// The job's `PYTHONPATH`: this directory first, then `current` (the job's own, if any).
    pub(crate) fn pythonpath(&self, current: Option<&str>) -> String {
        let me = self.dir.path().display().to_string();
        match current.filter(|c| !c.is_empty()) {
            Some(c) => format!("{me}:{c}"),
            None => me,
        }
    }

    /// The variable to give the job, with `env` (variables already set for it) taken into account.
    pub(crate) fn env_var(&self, env: &[(String, String)]) -> (String, String) {
        let current = env
            .iter()
            .rev()
            .find(|(k, _)| k == "PYTHONPATH")
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var("PYTHONPATH").ok());
        ("PYTHONPATH".into(), self.pythonpath(current.as_deref()))
    }

    /// What the job reported so far (call after it ended). The job can write into this folder:
    /// the side channel is opened without blocking and without following a link, and anything
    /// but a regular file (a FIFO would block `run` forever) is ignored with a note.
    pub(crate) fn read(&self) -> InjectReport {
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.dir.path().join("report.ndjson");
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
            .open(&path);
        match opened {
            Ok(f) if f.metadata().is_ok_and(|m| m.is_file()) => {
                aggregate_from(std::io::BufReader::new(f), &self.wanted)
            }
            Ok(_) => {
                let mut rep = aggregate("", &self.wanted);
                rep.note(
                    "the job replaced gpufeed's override report with something that is not a \
                     file: what the overrides did is unknown"
                        .into(),
                );
                rep
            }
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                let mut rep = aggregate("", &self.wanted);
                rep.note(
                    "the job replaced gpufeed's override report with a link: it was not \
                     followed, and what the overrides did is unknown"
                        .into(),
                );
                rep
            }
            Err(_) => aggregate("", &self.wanted),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_module_of_the_job_side_hook_is_written_into_the_job() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/gpufeed/_hook");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.ends_with(".py"))
            .collect();
        on_disk.sort();
        let mut written: Vec<String> = HOOK_FILES
            .iter()
            .map(|(n, _)| n.rsplit('/').next().unwrap_or(n).to_string())
            .collect();
        written.sort();
        assert_eq!(written, on_disk, "HOOK_FILES lists every module of {dir:?}");
        let tmp = tempfile::tempdir().unwrap();
        write_hook(tmp.path()).unwrap();
        for (name, text) in HOOK_FILES {
            assert_eq!(
                std::fs::read_to_string(tmp.path().join(name)).unwrap(),
                text
            );
        }
    }
    use crate::exit::HasExit;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn keys_and_values_are_checked() {
        let spec = InjectSpec::parse(
            &s(&["num_workers={w}", "pin_memory=1"]),
            &s(&["matmul_precision=high"]),
        )
        .unwrap();
        assert!(!spec.is_empty());
        assert_eq!(spec.templates().collect::<Vec<_>>(), ["{w}", "1", "high"]);
        let r = spec.resolve(&[("w".into(), "8".into())]).unwrap();
        assert_eq!(r.dataloader["num_workers"], serde_json::json!(8));
        assert_eq!(r.dataloader["pin_memory"], serde_json::json!(true));
        assert_eq!(r.torch["matmul_precision"], serde_json::json!("high"));
        let e = spec.resolve(&[("w".into(), "many".into())]).unwrap_err();
        assert!(e.to_string().contains("whole number"), "{e}");
        let e = spec.resolve(&[]).unwrap_err();
        assert!(e.to_string().contains("names no knob"), "{e}");

        for (dl, t) in [
            (vec!["workers=4"], vec![]),
            (vec!["num_workers"], vec![]),
            (vec!["num_workers=-1"], vec![]),
            (vec!["batch_size=0"], vec![]),
            (vec!["pin_memory=maybe"], vec![]),
            (vec!["num_workers=1", "num_workers=2"], vec![]),
            (vec![], vec!["matmul_precision=low"]),
            (vec![], vec!["benchmark=1"]),
        ] {
            let e = InjectSpec::parse(&s(&dl), &s(&t)).unwrap_err();
            assert_eq!(e.exit(), crate::exit::Exit::Usage, "{e}");
        }
        assert!(InjectSpec::parse(&[], &[]).unwrap().is_empty());
    }

    #[test]
    fn a_huge_side_channel_is_read_streaming_up_to_the_cap() {
        use std::io::Read;
        /// Counts what is pulled from the reader under it.
        struct Counted<R>(R, std::rc::Rc<std::cell::Cell<u64>>);
        impl<R: Read> Read for Counted<R> {
            fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
                let n = self.0.read(b)?;
                self.1.set(self.1.get() + n as u64);
                Ok(n)
            }
        }
        let wanted = InjectSpec::parse(&s(&["num_workers=8"]), &[])
            .unwrap()
            .resolve(&[])
            .unwrap();
        let ev = "{\"event\":\"override\",\"target\":\"DataLoader\",\"key\":\"num_workers\",\"value\":8,\"original\":0}\n";
        // A 1 MiB line, one event, then a 1.5 GB line, generated as read.
        let event = format!("\n{ev}");
        let input = std::io::repeat(b'x')
            .take(1 << 20)
            .chain(event.as_bytes())
            .chain(std::io::repeat(b'y').take(1_500_000_000));
        let pulled = std::rc::Rc::new(std::cell::Cell::new(0));
        let r = aggregate_from(
            std::io::BufReader::new(Counted(input, pulled.clone())),
            &wanted,
        );
        assert_eq!(r.overrides.len(), 1, "{r:?}");
        assert!(
            pulled.get() <= MAX_REPORT_BYTES + (1 << 16),
            "{}",
            pulled.get()
        );
        assert!(
            r.notes.iter().any(|n| n.contains("only the first 64 MiB")),
            "{:?}",
            r.notes
        );
    }

    #[test]
    fn report_lines_become_overrides_and_notes() {
        let wanted = InjectSpec::parse(&s(&["num_workers=8", "batch_size=64"]), &[])
            .unwrap()
            .resolve(&[])
            .unwrap();
        let text = r#"{"event":"python","pid":1}
{"event":"torch","pid":1,"version":"2.5.0"}
{"event":"override","target":"DataLoader","key":"num_workers","value":8,"original":0,"site":"train.py:42","pid":1}
{"event":"override","target":"DataLoader","key":"num_workers","value":8,"original":0,"site":"train.py:42","pid":1}
{"event":"skip","target":"DataLoader","key":"batch_size","value":64,"reason":"left alone: it has a batch_sampler, which rules out batch_size","site":"train.py:42"}
{"event":"override","target":"torch.backends.cudnn","key":"benchmark","value":true,"original":false,"site":null}
{"event":"reverted","target":"torch.backends.cudnn","key":"benchmark","value":true,"now":false}
not json
{"event":"override","target":"DataL"#;
        let r = aggregate(text, &wanted);
        assert_eq!(r.overrides.len(), 2, "{r:?}");
        assert_eq!(r.overrides[0].count, 2);
        assert_eq!(
            r.overrides[0].describe(),
            "DataLoader(num_workers=8) at train.py:42 (2 loaders), was 0"
        );
        assert_eq!(
            r.overrides[1].describe(),
            "torch.backends.cudnn.benchmark=True, was False"
        );
        assert!(
            !r.overrides.is_empty(),
            "a value was put in place of the job's own"
        );
        assert_eq!(r.notes.len(), 2, "{:?}", r.notes);
        assert!(r.notes[0].contains("DataLoader at train.py:42: batch_size=64 not applied: left alone: it has a batch_sampler"));
        assert!(r.notes[1].contains("set back to False"));
    }

    #[test]
    fn nothing_reported_says_why() {
        let wanted = InjectSpec::parse(&s(&["num_workers=2"]), &s(&["cudnn_benchmark=1"]))
            .unwrap()
            .resolve(&[])
            .unwrap();
        let r = aggregate("", &wanted);
        assert!(r.overrides.is_empty());
        assert!(r.notes[0].contains("no Python process"), "{:?}", r.notes);
        assert!(r.notes[0].starts_with("--dataloader and --torch"));
        let r = aggregate(r#"{"event":"python"}"#, &wanted);
        assert!(r.notes[0].contains("never imported torch"), "{:?}", r.notes);
        let r = aggregate("{\"event\":\"python\"}\n{\"event\":\"torch\"}", &wanted);
        assert!(
            r.notes[0].contains("no torch.utils.data.DataLoader"),
            "{:?}",
            r.notes
        );
    }

    #[test]
    fn the_directory_is_private_and_first_on_the_path() {
        use std::os::unix::fs::PermissionsExt;
        let inj = Injection::prepare(&Resolved::default()).unwrap();
        let mode = std::fs::metadata(inj.dir.path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        assert!(inj.dir.path().join("sitecustomize.py").is_file());
        let p = inj.pythonpath(Some("/a:/b"));
        assert!(p.ends_with(":/a:/b") && p.starts_with(&inj.dir.path().display().to_string()));
        assert_eq!(
            inj.pythonpath(Some("")),
            inj.dir.path().display().to_string()
        );
        let (k, v) = inj.env_var(&[("PYTHONPATH".into(), "/user".into())]);
        assert_eq!(k, "PYTHONPATH");
        assert!(v.ends_with(":/user"));
        let dir = inj.dir.path().to_path_buf();
        drop(inj);
        assert!(!dir.exists());
    }

    /// Loaders that waste their workers (the hook's `PipelineCheck`) are said once each,
    /// with their site, beside what the step hook timed; not as override notes.
    #[test]
    fn pipeline_notes_become_loader_notes_once() {
        let text = r#"{"event":"note","target":"DataLoader","key":"shards","site":"train.py:41","detail":"the webdataset has 2 shards for 4 workers"}
{"event":"note","target":"DataLoader","key":"worker-split","site":"train.py:21","detail":"each of the 2 workers iterates Lines's whole stream"}
{"event":"note","target":"DataLoader","key":"worker-split","site":"train.py:21","detail":"each of the 2 workers iterates Lines's whole stream"}
"#;
        let rep = aggregate(text, &Resolved::auto_steps_only());
        assert!(rep.notes.is_empty(), "{:?}", rep.notes);
        assert_eq!(
            rep.loader_notes,
            [
                "the DataLoader created at train.py:41: the webdataset has 2 shards for 4 workers",
                "the DataLoader created at train.py:21: each of the 2 workers iterates Lines's whole stream"
            ]
        );
    }

    #[test]
    fn the_step_hooks_loader_events_become_loader_notes() {
        let text = r#"{"event":"python","pid":1}
{"event":"torch","pid":1}
{"event":"loader","target":"DataLoader","site":"train.py:9","role":"train","batches":12,"rank":0}
{"event":"loader","target":"DataLoader","site":"train.py:9","role":"train","batches":40,"rank":0}
{"event":"loader","target":"DataLoader","site":"train.py:9","role":"train","batches":38,"rank":1}
{"event":"loader","target":"DataLoader","site":"train.py:12","role":"other","batches":6,"rank":0}
{"event":"loader","target":"DataLoader","site":"train.py:14","role":"unknown","batches":3,"rank":0}
{"event":"note","target":"DataLoader","key":"steps","site":"train.py:12","detail":"DataLoaders are iterated from more than one thread"}
"#;
        let rep = aggregate(text, &Resolved::auto_steps_only());
        assert!(
            rep.notes.is_empty(),
            "no override was asked for: {:?}",
            rep.notes
        );
        assert!(rep.overrides.is_empty());
        assert_eq!(rep.loader_notes.len(), 3, "{:?}", rep.loader_notes);
        assert!(rep.loader_notes[0].starts_with("DataLoaders are iterated from more than one thread (first seen at the DataLoader created at train.py:12)"), "{:?}", rep.loader_notes);
        // The training loader first: its latest count per rank, summed over the ranks.
        assert!(
            rep.loader_notes[1].contains(
                "training loader, the DataLoader created at train.py:9 (78 batches over 2 ranks)"
            ),
            "{:?}",
            rep.loader_notes
        );
        assert!(
            rep.loader_notes[2].contains("train.py:12 gave 6 batches"),
            "{:?}",
            rep.loader_notes
        );
    }

    #[test]
    fn a_fifo_or_a_link_in_place_of_the_report_never_blocks_the_read() {
        let inj = Injection::prepare(&Resolved::auto_steps_only()).unwrap();
        let report = inj.dir.path().join("report.ndjson");
        let c = std::ffi::CString::new(report.to_str().unwrap()).unwrap();
        // SAFETY: a valid C string; mkfifo only creates the node.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let t = std::time::Instant::now();
        let rep = inj.read();
        assert!(t.elapsed() < std::time::Duration::from_secs(2));
        assert!(rep.notes[0].contains("not a file"), "{:?}", rep.notes);
        std::fs::remove_file(&report).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &report).unwrap();
        let rep = inj.read();
        assert!(rep.notes[0].contains("a link"), "{:?}", rep.notes);
        // The folder is marked as gpufeed's own, and named for this gpufeed's pid.
        assert!(inj.dir.path().join(".gpufeed-owned").is_file());
        let name = inj
            .dir
            .path()
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        assert!(
            name.starts_with(&format!("gpufeed-inject-{}-", std::process::id())),
            "{name}"
        );
    }
}
