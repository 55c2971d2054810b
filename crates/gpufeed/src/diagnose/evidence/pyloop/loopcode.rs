//! The training loop's time in the user's code: for each phase that is not forward, backward or
//! the optimizer, the user's functions it goes to ([`PhaseCode`]); and what the loop's own code
//! calls that keeps it on the host ([`HostCall`]), each with the cause it stands for.
//!
//! **The loop's own frames** are the frames the training steps share: the longest run of
//! functions, from the outermost, that at least 80% of the backward-pass and optimizer-step
//! samples pass through (forward passes too when those are too few), up to the frame that
//! starts a phase. The innermost of them is the loop; what it calls beside the training step is
//! named as it is called there: the user's function (`load_batch`), or the library function the
//! loop's line calls (`torch.serialization.save` at `train.py:80`).

use super::{PyAcc, ThreadTotals, MAX_STACK_DEPTH};
use crate::diagnose::evidence::python::{CheckpointSaves, HostCall, LoopSite, PhaseCode};
use crate::finding::HostCause;
use crate::sample::event::PyFrameDef;
use crate::sample::pyphase::{
    is_batch_name, is_library, loads_data, method, starts_a_phase, FrameRef, Phase,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// A phase's share of the loop from which its code is listed.
pub(crate) const PHASE_CODE_PCT: f64 = 10.0;
/// Functions listed per phase; the rest are summed.
const SITES_KEPT: usize = 5;
/// Calls of the loop kept in the evidence.
const HOST_CALLS_KEPT: usize = 8;
/// Share of the training steps' samples that must pass through a frame for it to be the loop's.
const PREFIX_SHARE: f64 = 0.8;
/// Backward and optimizer samples under which forward passes also say where the loop is.
const MIN_PREFIX_SAMPLES: u64 = 5;

/// A function as the reports name it: its name and file.
type FnKey<'a> = (&'a str, &'a str);

/// What [`PyAcc::loop_code`] finds.
pub(super) struct LoopCode {
    pub(super) phases: Vec<PhaseCode>,
    pub(super) host_calls: Vec<HostCall>,
    pub(super) checkpoint_saves: Option<CheckpointSaves>,
}

/// A site's samples while they are summed: per line, its count, source and the library
/// function it calls.
#[derive(Default)]
struct SiteAcc {
    samples: u64,
    gil_free: u64,
    lines: HashMap<(i32, Option<String>), (u64, Option<String>)>,
}

/// A host call's samples while they are summed.
#[derive(Default)]
struct CallAcc {
    samples: u64,
    by_cause: BTreeMap<HostCause, u64>,
    uses: BTreeSet<&'static str>,
    /// Samples per frame (with its line) the call is made from.
    at: HashMap<u32, u64>,
    batch_named: bool,
}

/// A library function named by its module and name: `torch/serialization.py` and `save` →
/// `torch.serialization.save`.
fn library_name(f: &PyFrameDef) -> String {
    let path = f.file.replace('\\', "/");
    let module = ["site-packages/", "dist-packages/", "/lib/python3"]
        .iter()
        .find_map(|m| path.rfind(m).map(|i| &path[i + m.len()..]))
        .map(|rest| {
            // `/lib/python3.11/json/encoder.py` leaves `.11/json/encoder.py`.
            let rest = rest.trim_start_matches(|c: char| c == '.' || c.is_ascii_digit());
            let rest = rest.trim_start_matches('/');
            rest.trim_end_matches(".py")
                .trim_end_matches("/__init__")
                .replace('/', ".")
        })
        .filter(|m| !m.is_empty());
    let name = method(&f.name);
    match module {
        Some(m) => format!("{m}.{name}"),
        None => f.name.clone(),
    }
}

/// A decorator's wrapper frame, between a call and the function it calls: `@torch.no_grad()`
/// and `inference_mode` (torch/utils/_contextlib.py), `functools.wraps`/`contextlib`
/// wrappers, torch's `_disable_dynamo` (`torch._compile.inner`, around `zero_grad`).
fn is_wrapper(f: &PyFrameDef) -> bool {
    let file = f.file.replace('\\', "/");
    [
        "torch/utils/_contextlib.py",
        "torch/_compile.py",
        "torch/_dynamo/eval_frame.py",
    ]
    .iter()
    .any(|w| file.ends_with(w))
        || file.ends_with("/functools.py")
        || file.ends_with("/contextlib.py")
}

/// A name the interpreter made up rather than the user (`<listcomp>`, `<genexpr>`, `<lambda>`).
fn generated(name: &str) -> bool {
    let m = method(name);
    m.starts_with('<') && m != "<module>"
}

/// A frame that writes an image file: PIL's `Image.save` and its encoders, torchvision's
/// `save_image`, matplotlib's `savefig`, imageio's writers, OpenCV's `imwrite` wrappers.
fn saves_images(f: &PyFrameDef) -> bool {
    let m = method(&f.name);
    f.file.contains("/PIL/") && (m == "save" || f.file.contains("ImagePlugin"))
        || f.file.contains("torchvision/utils.py") && m == "save_image"
        || f.file.contains("/matplotlib/") && m == "savefig"
        || f.file.contains("/imageio/") && (m.starts_with("imwrite") || m == "write")
}

/// What was seen in a stack that the fix for per-step work names.
fn uses_of<'a>(frames: &'a [&'a PyFrameDef]) -> impl Iterator<Item = &'static str> + 'a {
    frames.iter().filter_map(|f| {
        if f.file.contains("/tqdm/") {
            Some("tqdm")
        } else if f.file.contains("/logging/") {
            Some("logging")
        } else if f.file.contains("/wandb/") {
            Some("wandb")
        } else if method(&f.name).contains("histogram")
            && ["torch/utils/tensorboard/", "/tensorboardX/", "/wandb/"]
                .iter()
                .any(|d| f.file.contains(d))
        {
            Some("histograms")
        } else if f.file.contains("torch/utils/tensorboard/") || f.file.contains("/tensorboardX/") {
            Some("tensorboard")
        } else if saves_images(f) {
            Some("saving images")
        } else if f.file.contains("torch/_tensor_str.py") {
            Some("printing tensors")
        } else {
            None
        }
    })
}

/// A call of the loop: whether the callee is library code, its name, and where (its file, or
/// the loop's line for a library call or work on the loop's own line).
type CallKey = (bool, String, String);

/// The call a stack of a host-side phase stands for: the index of the frame it is made from,
/// its key, and whether the callee is named for batches. Under the loop's frames (`prefix`):
/// the user's function the loop reaches (through a library's wrappers: `@torch.no_grad()`,
/// `functools.wraps`, a framework's hook caller), else the library function the loop's line
/// calls, else the loop's line itself. Elsewhere (a hook a library calls, code beside the
/// loop): the innermost user function.
fn call_of(frames: &[&PyFrameDef], prefix: &[FnKey]) -> (usize, CallKey, bool) {
    let p = prefix.len();
    let in_loop = p > 0
        && frames.len() >= p
        && frames
            .iter()
            .zip(prefix)
            .all(|(f, k)| (f.name.as_str(), f.file.as_str()) == *k);
    if !in_loop {
        return match frames.iter().rposition(|f| !is_library(&f.file)) {
            Some(i) => (
                i,
                (false, frames[i].name.clone(), frames[i].file.clone()),
                is_batch_name(&frames[i].name),
            ),
            // Library code alone (a finalizer, a thread of a library's): named as the library's.
            None => {
                let i = frames.len().saturating_sub(1);
                (
                    i,
                    (true, library_name(frames[i]), frames[i].file.clone()),
                    false,
                )
            }
        };
    }
    let at = p - 1;
    let user = frames[p..]
        .iter()
        .find(|f| !is_library(&f.file))
        .filter(|f| !generated(&f.name));
    match (user, frames.get(p)) {
        (Some(callee), _) => (
            at,
            (false, callee.name.clone(), callee.file.clone()),
            is_batch_name(&callee.name),
        ),
        (None, Some(callee)) if is_library(&callee.file) => {
            // The function the line calls, not the decorator around it (`save_image` is
            // wrapped by `@torch.no_grad()`).
            let callee = frames[p..]
                .iter()
                .find(|f| !is_wrapper(f))
                .unwrap_or(callee);
            (
                at,
                (true, library_name(callee), frames[at].line.to_string()),
                false,
            )
        }
        _ => (
            at,
            (false, String::new(), frames[at].line.to_string()),
            false,
        ),
    }
}

/// The work under the frame `at` gets data ready (or, with nothing under it, that frame's own
/// line does): per-step work that builds batches. `ids` are the frames' ids: what each frame
/// says is kept in `memo` (frames recur across stacks, and `loads_data` matches many names).
fn builds(frames: &[&PyFrameDef], ids: &[u32], at: usize, memo: &mut HashMap<u32, bool>) -> bool {
    let mut loads = |i: usize| {
        let f = frames[i];
        *memo
            .entry(ids[i])
            .or_insert_with(|| loads_data(&FrameRef::from(f)))
    };
    let n = frames.len().min(ids.len());
    if at + 1 >= n {
        return at < n && loads(at);
    }
    (at + 1..n).any(loads)
}

impl PyAcc {
    fn frame_defs(&self, sid: u32) -> Option<Vec<&PyFrameDef>> {
        self.stacks
            .get(&sid)?
            .iter()
            .map(|id| self.frames.get(id))
            .collect()
    }

    /// The loop's own frames (see the module's documentation), outermost first.
    fn loop_prefix<'a>(&'a self, stacks: &[(u32, u64, Phase)]) -> Vec<FnKey<'a>> {
        let pick = |ps: &[Phase]| -> Vec<(Vec<&'a PyFrameDef>, u64)> {
            stacks
                .iter()
                .filter(|s| ps.contains(&s.2))
                .filter_map(|s| Some((self.frame_defs(s.0)?, s.1)))
                .collect()
        };
        let mut set = pick(&[Phase::Backward, Phase::Optimizer]);
        if set.iter().map(|s| s.1).sum::<u64>() < MIN_PREFIX_SAMPLES {
            set = pick(&[Phase::Backward, Phase::Optimizer, Phase::Forward]);
        }
        let total: u64 = set.iter().map(|s| s.1).sum();
        let mut prefix: Vec<FnKey<'a>> = Vec::new();
        if total == 0 {
            return prefix;
        }
        for d in 0..MAX_STACK_DEPTH {
            let mut counts: HashMap<FnKey<'a>, u64> = HashMap::new();
            for (frames, c) in &set {
                if let Some(f) = frames.get(d) {
                    *counts
                        .entry((f.name.as_str(), f.file.as_str()))
                        .or_default() += c;
                }
            }
            let Some((key, c)) = counts.into_iter().max_by_key(|(k, c)| (*c, *k)) else {
                break;
            };
            let fr = FrameRef {
                name: key.0,
                file: key.1,
                src: None,
            };
            if (c as f64) < PREFIX_SHARE * total as f64 || starts_a_phase(&fr) {
                break;
            }
            prefix.push(key);
            set.retain(|(frames, _)| {
                frames
                    .get(d)
                    .is_some_and(|f| (f.name.as_str(), f.file.as_str()) == key)
            });
        }
        // The loop is the innermost of the user's frames: a library's frames beneath them
        // (Lightning's loops) stay, as the path to the user's hooks.
        prefix
    }

    /// The user's hottest functions among `stacks` (`(stack, samples)`), each as a share of
    /// `n`: the innermost frame in the user's files (the innermost frame when the stack has
    /// none), at its most frequent line. At most [`SITES_KEPT`], the rest summed.
    pub(super) fn hot_sites(
        &self,
        pid: u32,
        t: &ThreadTotals,
        stacks: impl Iterator<Item = (u32, u64)>,
        n: u64,
    ) -> (Vec<LoopSite>, f64, u32) {
        let mut by_fn: HashMap<(String, &str), SiteAcc> = HashMap::new();
        for (sid, c) in stacks {
            let Some(frames) = self.frame_defs(sid) else {
                continue;
            };
            let Some(i) = frames
                .iter()
                .rposition(|f| !is_library(&f.file))
                .or(frames.len().checked_sub(1))
            else {
                continue;
            };
            let f = frames[i];
            let name = if generated(&f.name) {
                let outer = frames[..i]
                    .iter()
                    .rev()
                    .find(|o| !is_library(&o.file) && !generated(&o.name))
                    .map(|o| o.name.as_str())
                    .or_else(|| f.name.split_once(".<locals>.").map(|(o, _)| o));
                match outer {
                    Some(o) => format!("{} in {o}", method(&f.name)),
                    None => f.name.clone(),
                }
            } else {
                f.name.clone()
            };
            let calls = frames
                .get(i + 1)
                .filter(|_| !is_library(&f.file))
                .map(|c| library_name(c));
            let e = by_fn.entry((name, f.file.as_str())).or_default();
            e.samples += c;
            if self.gil_read.contains(&pid) {
                e.gil_free += t.gil_free.get(&sid).copied().unwrap_or(0).min(c);
            }
            let l = e.lines.entry((f.line, calls)).or_insert((0, f.src.clone()));
            l.0 += c;
        }
        let mut all: Vec<((String, &str), SiteAcc)> = by_fn.into_iter().collect();
        all.sort_by(|a, b| {
            b.1.samples
                .cmp(&a.1.samples)
                .then_with(|| a.0 .0.cmp(&b.0 .0))
                .then_with(|| a.0 .1.cmp(b.0 .1))
        });
        let pct = |c: u64| crate::units::r1(c as f64 * 100.0 / n.max(1) as f64);
        let rest: u64 = all.iter().skip(SITES_KEPT).map(|s| s.1.samples).sum();
        let rest_n = all.len().saturating_sub(SITES_KEPT) as u32;
        let gil_read = self.gil_read.contains(&pid);
        let sites = all
            .into_iter()
            .take(SITES_KEPT)
            .map(|((function, file), acc)| {
                let ((line, calls), (_, code)) = acc
                    .lines
                    .into_iter()
                    .max_by(|(a, (ca, _)), (b, (cb, _))| ca.cmp(cb).then_with(|| b.cmp(a)))
                    .unwrap_or(((0, None), (0, None)));
                LoopSite {
                    function,
                    file: file.to_string(),
                    line,
                    code,
                    calls,
                    pct: pct(acc.samples),
                    native_pct: (gil_read && acc.samples > 0).then(|| {
                        crate::units::r1(acc.gil_free as f64 * 100.0 / acc.samples as f64)
                    }),
                }
            })
            .collect();
        (sites, pct(rest), rest_n)
    }

    /// The training thread's loop in the user's code (see the module's documentation); `n` its
    /// loop samples, `loop_s` the loop's wall time.
    pub(super) fn loop_code(&self, pid: u32, t: &ThreadTotals, n: u64, loop_s: f64) -> LoopCode {
        let mut stacks: Vec<(u32, u64, Phase)> = t
            .stacks
            .iter()
            .filter(|(_, c)| c.win > 0)
            .filter_map(|(sid, c)| Some((*sid, c.win, (*self.phase_of.get(sid)?)?)))
            .collect();
        stacks.sort_unstable_by_key(|s| s.0);
        let share = |c: u64| c as f64 * 100.0 / n.max(1) as f64;
        // Each phase but the training step's own, from PHASE_CODE_PCT of the loop.
        let mut phases = Vec::new();
        for &ph in Phase::ALL {
            if matches!(ph, Phase::Forward | Phase::Backward | Phase::Optimizer) {
                continue;
            }
            let of_phase = stacks.iter().filter(|s| s.2 == ph).map(|s| (s.0, s.1));
            let c: u64 = of_phase.clone().map(|s| s.1).sum();
            if share(c) < PHASE_CODE_PCT {
                continue;
            }
            let (sites, rest_pct, rest_functions) = self.hot_sites(pid, t, of_phase, n);
            phases.push(PhaseCode {
                phase: ph,
                pct: crate::units::r1(share(c)),
                sites,
                rest_pct,
                rest_functions,
            });
        }
        phases.sort_by(|a, b| b.pct.total_cmp(&a.pct));
        let prefix = self.loop_prefix(&stacks);
        let host_calls = if prefix.is_empty() {
            Vec::new()
        } else {
            self.host_calls(&stacks, &prefix, n, loop_s)
        };
        let ckpt: u64 = stacks
            .iter()
            .filter(|s| s.2 == Phase::CheckpointIo)
            .map(|s| s.1)
            .sum();
        // Saves are counted as runs of readings with checkpoint samples. A save's run is mixed
        // with other phases only at its two ends: readings mixed beyond that mean saves come
        // more often than readings, merged into few runs, and no count is given.
        let apart = t.ckpt_mixed <= 2 * t.ckpt_runs;
        let checkpoint_saves =
            (apart && t.ckpt_runs > 0 && ckpt > 0 && loop_s > 0.0).then(|| CheckpointSaves {
                saves: t.ckpt_runs,
                s_per_save: crate::units::r2(share(ckpt) / 100.0 * loop_s / t.ckpt_runs as f64),
            });
        LoopCode {
            phases,
            host_calls,
            checkpoint_saves,
        }
    }

    /// What the loop's own code calls in its host-side phases, grouped by the call.
    fn host_calls(
        &self,
        stacks: &[(u32, u64, Phase)],
        prefix: &[FnKey],
        n: u64,
        loop_s: f64,
    ) -> Vec<HostCall> {
        // Keyed by the callee (a user function) or by the loop's line (a library call, or
        // work on the loop's line itself).
        let mut calls: HashMap<CallKey, CallAcc> = HashMap::new();
        let mut loads_memo: HashMap<u32, bool> = HashMap::new();
        for &(sid, c, ph) in stacks {
            let cause = match ph {
                Phase::CheckpointIo => HostCause::Checkpointing,
                Phase::Evaluation => HostCause::Evaluation,
                Phase::Sync => HostCause::HostSync,
                Phase::Other => HostCause::StepPython,
                _ => continue,
            };
            let Some(frames) = self.frame_defs(sid) else {
                continue;
            };
            // Waiting in a collective for the other ranks is no work of this rank's.
            if frames
                .iter()
                .any(|f| crate::sample::pyphase::is_collective(&FrameRef::from(*f)))
            {
                continue;
            }
            // Converting a whole tensor to a list is one sync, then Python building one object
            // per value: read for seconds, that is the conversion's time, per-step Python work
            // (`.item()` is one value per sync: its time is the syncs').
            let cause = if cause == HostCause::HostSync
                && frames
                    .last()
                    .and_then(|f| f.src.as_deref())
                    .is_some_and(crate::sample::pyphase::converts_in_bulk)
            {
                HostCause::StepPython
            } else {
                cause
            };
            let (at, key, batch_named) = call_of(&frames, prefix);
            let cause = if cause == HostCause::StepPython
                && (batch_named || builds(&frames, &self.stacks[&sid], at, &mut loads_memo))
            {
                HostCause::BatchBuilding
            } else {
                cause
            };
            let e = calls.entry(key).or_default();
            e.samples += c;
            *e.by_cause.entry(cause).or_default() += c;
            e.uses.extend(uses_of(&frames[at..]));
            e.batch_named |= batch_named;
            *e.at.entry(self.stacks[&sid][at]).or_default() += c;
        }
        let mut out: Vec<HostCall> = calls
            .into_iter()
            .filter_map(|((library, function, _), acc)| {
                let (at, _) = acc
                    .at
                    .iter()
                    .max_by_key(|(id, c)| (**c, std::cmp::Reverse(**id)))?;
                let at = self.frames.get(at)?;
                let cause = acc
                    .by_cause
                    .iter()
                    .max_by_key(|(c, n)| (**n, std::cmp::Reverse(**c)))
                    .map(|(c, _)| *c)?;
                // A user function named for batches, mostly per-step Python or list
                // conversions (`.tolist()` reads as a sync): it builds them.
                let cause = if matches!(cause, HostCause::StepPython | HostCause::HostSync)
                    && acc.batch_named
                {
                    HostCause::BatchBuilding
                } else {
                    cause
                };
                let pct = acc.samples as f64 * 100.0 / n.max(1) as f64;
                Some(HostCall {
                    cause,
                    function: if function.is_empty() {
                        at.name.clone()
                    } else {
                        function
                    },
                    library,
                    at_file: at.file.clone(),
                    at_line: at.line,
                    at_code: at.src.clone(),
                    pct: crate::units::r1(pct),
                    seconds: (loop_s > 0.0).then(|| crate::units::r1(pct / 100.0 * loop_s)),
                    uses: acc.uses.iter().map(|u| u.to_string()).collect(),
                })
            })
            .collect();
        out.sort_by(|a, b| {
            b.pct
                .total_cmp(&a.pct)
                .then_with(|| a.function.cmp(&b.function))
                .then_with(|| a.at_line.cmp(&b.at_line))
        });
        out.truncate(HOST_CALLS_KEPT);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::PyAcc;
    use crate::diagnose::evidence::JobEvidence;
    use crate::finding::HostCause;
    use crate::sample::event::{Header, Line, PyFrameDef, PySamples, PyStackDef, PyThreadCounts};
    use crate::sample::pyphase::Phase;
    use std::collections::BTreeMap;

    const TORCH: &str = "/v/site-packages/torch";

    fn header() -> Header {
        serde_json::from_str(
            r#"{"schema_version":2,"start_time":"x","start_unix_us":0,"interval_s":0.1,"host":{"cpu_count":2},"pid":10,"py_rate_hz":100.0}"#,
        )
        .unwrap()
    }

    /// A recording of pid 10's main thread: frames by (name, file, line, src), stacks by
    /// frame ids, and intervals of `(stack, samples)`.
    struct Rec {
        lines: Vec<Line>,
        t: f64,
    }

    impl Rec {
        fn new(frames: &[(&str, &str, i32, Option<&str>)], stacks: &[&[u32]]) -> Rec {
            let mut lines = Vec::new();
            for (i, (name, file, line, src)) in frames.iter().enumerate() {
                lines.push(Line::PyFrame(PyFrameDef {
                    id: i as u32,
                    name: name.to_string(),
                    file: file.to_string(),
                    line: *line,
                    src: src.map(str::to_string),
                }));
            }
            for (i, s) in stacks.iter().enumerate() {
                lines.push(Line::PyStack(PyStackDef {
                    id: i as u32,
                    frames: s.to_vec(),
                }));
            }
            Rec { lines, t: 0.0 }
        }

        fn interval(&mut self, stacks: &[(u64, u64)]) -> &mut Self {
            self.t += 1.0;
            self.lines.push(Line::PySamples(PySamples {
                t_s: self.t,
                dt_s: 1.0,
                pid: 10,
                ticks: 100,
                threads: vec![PyThreadCounts {
                    tid: 10,
                    name: Some("MainThread".into()),
                    stacks: stacks.iter().map(|(s, n)| [*s, *n, 0]).collect(),
                    phases: BTreeMap::new(),
                    cpu_ns: None,
                    runq_ns: None,
                    gil_held: 0,
                    gil_free: Vec::new(),
                }],
            }));
            self
        }

        /// An interval of another process's main thread.
        fn interval_of(&mut self, pid: u32, stacks: &[(u64, u64)]) -> &mut Self {
            self.lines.push(Line::PySamples(PySamples {
                t_s: self.t,
                dt_s: 1.0,
                pid,
                ticks: 100,
                threads: vec![PyThreadCounts {
                    tid: u64::from(pid),
                    name: Some("MainThread".into()),
                    stacks: stacks.iter().map(|(s, n)| [*s, *n, 0]).collect(),
                    phases: BTreeMap::new(),
                    cpu_ns: None,
                    runq_ns: None,
                    gil_held: 0,
                    gil_free: Vec::new(),
                }],
            }));
            self
        }

        fn finish(&self) -> crate::diagnose::evidence::PythonEvidence {
            let mut acc = PyAcc::default();
            for l in &self.lines {
                acc.push(l);
            }
            let job = JobEvidence {
                main_pid: Some(10),
                ..Default::default()
            };
            acc.finish(&header(), &job).unwrap()
        }
    }

    /// A hand-written loop at module level: `load_batch` (reading files with PIL) at line 30,
    /// the model at 31, backward at 33, the optimizer at 34, a metrics helper at 35.
    fn hand_loop() -> Rec {
        Rec::new(
            &[
                ("<module>", "/w/train.py", 30, Some("x = load_batch(paths)")), // 0
                (
                    "load_batch",
                    "/w/train.py",
                    12,
                    Some("xs = [decode(p) for p in ps]"),
                ), // 1
                (
                    "<listcomp>",
                    "/w/train.py",
                    12,
                    Some("xs = [decode(p) for p in ps]"),
                ), // 2
                ("decode", "/w/train.py", 8, Some("im = Image.open(p)")),       // 3
                ("open", "/v/site-packages/PIL/Image.py", 3200, None),          // 4
                ("<module>", "/w/train.py", 31, Some("loss = model(x).sum()")), // 5
                (
                    "Module._wrapped_call_impl",
                    &format!("{TORCH}/nn/modules/module.py"),
                    1,
                    None,
                ), // 6
                ("<module>", "/w/train.py", 33, Some("loss.backward()")),       // 7
                ("Tensor.backward", &format!("{TORCH}/_tensor.py"), 1, None),   // 8
                ("<module>", "/w/train.py", 34, Some("opt.step()")),            // 9
                ("SGD.step", &format!("{TORCH}/optim/sgd.py"), 1, None),        // 10
                ("<module>", "/w/train.py", 35, Some("acc = metrics(out, y)")), // 11
                (
                    "metrics",
                    "/w/train.py",
                    20,
                    Some("for p, t in zip(ps, ts):"),
                ), // 12
                ("<module>", "/w/train.py", 5, Some("import torch")),           // 13
            ],
            &[
                &[0, 1, 2, 3, 4], // 0: batch building, in PIL
                &[0, 1],          // 1: batch building, load_batch's own line
                &[5, 6],          // 2: forward
                &[7, 8],          // 3: backward
                &[9, 10],         // 4: optimizer
                &[11, 12],        // 5: per-step Python
                &[13],            // 6: start-up, before the loop
            ],
        )
    }

    #[test]
    fn a_loop_that_builds_its_batches_names_the_function_it_calls() {
        let mut r = hand_loop();
        r.interval(&[(6, 100)]);
        // The loop starts in this interval: its start-up samples are not the loop's.
        r.interval(&[(6, 40), (0, 20), (3, 20), (4, 20)]);
        for _ in 0..5 {
            r.interval(&[(0, 40), (1, 10), (2, 15), (3, 15), (4, 5), (5, 15)]);
        }
        let p = r.finish();
        let m = p.main.as_ref().unwrap();
        // 40 + 5x100 loop samples (the first interval's other samples are start-up); other =
        // 250 batch building + 75 metrics.
        assert_eq!(m.samples, 540);
        let other = p
            .loop_code
            .iter()
            .find(|c| c.phase == Phase::Other)
            .unwrap();
        assert_eq!(other.pct, 60.2);
        let top = &other.sites[0];
        assert_eq!(
            (top.function.as_str(), top.line, top.calls.as_deref()),
            ("decode", 8, Some("PIL.Image.open"))
        );
        assert_eq!(top.at(), "train.py:8");
        let calls: Vec<(HostCause, &str, &str, f64)> = p
            .host_calls
            .iter()
            .map(|c| (c.cause, c.function.as_str(), c.at_file.as_str(), c.pct))
            .collect();
        assert_eq!(
            calls,
            [
                (HostCause::BatchBuilding, "load_batch", "/w/train.py", 46.3),
                (HostCause::StepPython, "metrics", "/w/train.py", 13.9)
            ]
        );
        assert_eq!(p.host_calls[0].at_line, 30);
        assert_eq!(
            p.host_calls[0].at_code.as_deref(),
            Some("x = load_batch(paths)")
        );
    }

    /// A library call made through a decorator (`save_image` under `@torch.no_grad()`) is named
    /// by the function called, and what it does (saving images, TensorBoard histograms) is
    /// seen for the fix.
    #[test]
    fn a_decorated_library_call_is_named_by_the_function_and_its_use_seen() {
        let tv = "/v/site-packages/torchvision/utils.py";
        let pil = "/v/site-packages/PIL/Image.py";
        let tb = format!("{TORCH}/utils/tensorboard/summary.py");
        let mut r = Rec::new(
            &[
                ("main", "/w/gan.py", 30, Some("loss.backward()")), // 0
                ("Tensor.backward", &format!("{TORCH}/_tensor.py"), 1, None), // 1
                ("main", "/w/gan.py", 31, Some("opt.step()")),      // 2
                ("Adam.step", &format!("{TORCH}/optim/adam.py"), 1, None), // 3
                ("main", "/w/gan.py", 36, Some("vutils.save_image(fake, p)")), // 4
                (
                    "no_grad",
                    &format!("{TORCH}/utils/_contextlib.py"),
                    115,
                    None,
                ), // 5
                ("save_image", tv, 150, None),                      // 6
                ("Image.save", pil, 2400, None),                    // 7
                ("main", "/w/gan.py", 37, Some("log_histograms(w, model)")), // 8
                (
                    "log_histograms",
                    "/w/gan.py",
                    12,
                    Some("w.add_histogram(n, p)"),
                ), // 9
                ("histogram", &tb, 400, None),                      // 10
            ],
            &[&[0, 1], &[2, 3], &[4, 5, 6, 7], &[8, 9, 10]],
        );
        for _ in 0..5 {
            r.interval(&[(0, 15), (1, 15), (2, 45), (3, 25)]);
        }
        let p = r.finish();
        let calls: Vec<(&str, bool, Vec<String>)> = p
            .host_calls
            .iter()
            .map(|c| (c.function.as_str(), c.library, c.uses.clone()))
            .collect();
        assert_eq!(
            calls,
            [
                (
                    "torchvision.utils.save_image",
                    true,
                    vec!["saving images".to_string()]
                ),
                ("log_histograms", false, vec!["histograms".to_string()]),
            ]
        );
    }

    /// Two ranks: rank 0 (pid 10) writes histograms after each step while rank 1 (pid 9) waits
    /// for it in Lightning's per-step broadcast. The job's loop is rank 0's, the callback its
    /// cause; the wait in the collective is no cause of rank 1's (nor its data wait).
    #[test]
    fn the_loop_is_read_on_the_rank_the_others_wait_for_in_a_collective() {
        let c10d = format!("{TORCH}/distributed/distributed_c10d.py");
        let mut r = Rec::new(
            &[
                ("fit", "/w/train.py", 40, Some("trainer.fit(model)")), // 0
                ("Tensor.backward", &format!("{TORCH}/_tensor.py"), 1, None), // 1
                ("SGD.step", &format!("{TORCH}/optim/sgd.py"), 1, None), // 2
                (
                    "Inspect.on_train_batch_end",
                    "/w/callbacks.py",
                    8,
                    Some("writer.add_histogram(name, p, step)"),
                ), // 3
                (
                    "SummaryWriter.add_histogram",
                    &format!("{TORCH}/utils/tensorboard/writer.py"),
                    1,
                    None,
                ), // 4
                ("broadcast", &c10d, 4055, None),                       // 5
            ],
            &[&[0, 1], &[0, 2], &[0, 3, 4], &[0, 5]],
        );
        for _ in 0..5 {
            r.t += 1.0;
            r.interval_of(10, &[(0, 25), (1, 10), (2, 60), (3, 5)]);
            r.interval_of(9, &[(0, 25), (1, 10), (3, 65)]);
        }
        let mut acc = PyAcc::default();
        for l in &r.lines {
            acc.push(l);
        }
        let job = JobEvidence {
            main_pid: Some(10),
            rank_pids: vec![10, 9],
            ..Default::default()
        };
        let p = acc.finish(&header(), &job).unwrap();
        assert_eq!(p.ranks.len(), 2);
        assert_eq!(p.main.as_ref().unwrap().pid, 10, "{:?}", p.main);
        assert!(p.main_waited_for);
        let calls: Vec<(HostCause, &str)> = p
            .host_calls
            .iter()
            .map(|c| (c.cause, c.function.as_str()))
            .collect();
        assert_eq!(
            calls[0],
            (HostCause::StepPython, "Inspect.on_train_batch_end")
        );
        assert!(
            calls.iter().all(|c| !c.1.contains("broadcast")),
            "{calls:?}"
        );
    }

    /// A logging helper whose time is split between `.tolist()` lines (read as syncs) and the
    /// Python formatting the values is per-step Python, however the split falls; a helper
    /// whose sync lines read one value each (`.item()`) is host syncs.
    #[test]
    fn bulk_list_conversions_are_per_step_python_and_item_reads_are_syncs() {
        let rec = |sync_src: &'static str| {
            let mut r = Rec::new(
                &[
                    ("train", "/w/train.py", 40, Some("loss.backward()")), // 0
                    ("Tensor.backward", &format!("{TORCH}/_tensor.py"), 1, None), // 1
                    ("train", "/w/train.py", 41, Some("opt.step()")),      // 2
                    ("SGD.step", &format!("{TORCH}/optim/sgd.py"), 1, None), // 3
                    ("train", "/w/train.py", 42, Some("log_step(model)")), // 4
                    ("log_step", "/w/train.py", 10, Some(sync_src)),       // 5
                    ("log_step", "/w/train.py", 12, Some("out[k] = f'{v:.5f}'")), // 6
                ],
                &[&[0, 1], &[2, 3], &[4, 5], &[4, 6]],
            );
            for _ in 0..5 {
                r.interval(&[(0, 20), (1, 20), (2, 35), (3, 25)]);
            }
            r.finish()
        };
        let p = rec("values = p.grad.flatten().tolist()");
        let m = p.main.as_ref().unwrap();
        assert_eq!(m.phases_pct.sync, 35.0, "{m:?}");
        let top = &p.host_calls[0];
        assert_eq!(
            (top.cause, top.function.as_str(), top.pct),
            (HostCause::StepPython, "log_step", 60.0)
        );
        let p = rec("norms.append(p.grad.norm().item())");
        let top = &p.host_calls[0];
        assert_eq!(
            (top.cause, top.function.as_str()),
            (HostCause::HostSync, "log_step")
        );
    }

    #[test]
    fn checkpoints_are_counted_per_save_and_named_at_the_loops_line() {
        let mut r = Rec::new(
            &[
                ("train", "/w/train.py", 40, Some("loss.backward()")), // 0
                ("Tensor.backward", &format!("{TORCH}/_tensor.py"), 1, None), // 1
                ("train", "/w/train.py", 41, Some("opt.step()")),      // 2
                ("Adam.step", &format!("{TORCH}/optim/adam.py"), 1, None), // 3
                ("train", "/w/train.py", 44, Some("torch.save(state, path)")), // 4
                ("save", &format!("{TORCH}/serialization.py"), 1, None), // 5
                ("<module>", "/w/train.py", 60, Some("train()")),      // 6
            ],
            &[&[6, 0, 1], &[6, 2, 3], &[6, 4, 5]],
        );
        // Two saves (separated by an interval without one), 60% of the loop in all.
        r.interval(&[(0, 20), (1, 20), (2, 60)])
            .interval(&[(0, 20), (1, 20), (2, 60)])
            .interval(&[(0, 50), (1, 50)])
            .interval(&[(0, 20), (1, 20), (2, 60)]);
        let p = r.finish();
        let c = &p.host_calls[0];
        assert_eq!(c.cause, HostCause::Checkpointing);
        assert_eq!(c.function, "torch.serialization.save");
        assert!(c.library);
        assert_eq!(c.at(), "train.py:44");
        assert_eq!(c.pct, 45.0);
        let s = p.checkpoint_saves.unwrap();
        assert_eq!(s.saves, 2);
        // 180 of 400 samples over a 4 s loop: 1.8 s over two saves.
        assert_eq!(s.s_per_save, 0.9);
        // Saves in every reading (every other step): one long run of mixed readings, whose
        // saves cannot be counted; the share still is.
        for _ in 0..6 {
            r.interval(&[(0, 40), (1, 20), (2, 40)]);
        }
        let p = r.finish();
        assert_eq!(p.checkpoint_saves, None);
        assert_eq!(p.host_calls[0].cause, HostCause::Checkpointing);
    }

    #[test]
    fn a_script_without_a_training_loop_lists_where_its_time_goes() {
        let mut r = Rec::new(
            &[
                ("<module>", "/w/prep.py", 9, Some("resize_all(files)")),
                ("resize_all", "/w/prep.py", 4, Some("im.resize((64, 64))")),
                ("resize", "/v/site-packages/PIL/Image.py", 1, None),
            ],
            &[&[0, 1, 2], &[0, 1]],
        );
        r.interval(&[(0, 80), (1, 20)])
            .interval(&[(0, 90), (1, 10)]);
        let p = r.finish();
        assert!(p.main.is_none());
        let s = &p.no_loop_sites[0];
        assert_eq!(
            (s.function.as_str(), s.pct, s.calls.as_deref()),
            ("resize_all", 100.0, Some("PIL.Image.resize"))
        );
    }

    #[test]
    fn thousands_of_hot_functions_are_listed_five_and_the_rest_summed() {
        // (Under the frame cap of the accumulator: beyond it, frames count as other stacks.)
        let mut frames: Vec<(String, String, i32)> = vec![
            ("<module>".into(), "/w/t.py".into(), 1),
            ("Tensor.backward".into(), format!("{TORCH}/_tensor.py"), 1),
        ];
        let mut stacks: Vec<Vec<u32>> = vec![vec![0, 1]];
        for i in 0..5_000u32 {
            frames.push((format!("gen_{i}"), "/w/t.py".into(), 2));
            stacks.push(vec![0, i + 2]);
        }
        let fr: Vec<(&str, &str, i32, Option<&str>)> = frames
            .iter()
            .map(|(n, f, l)| (n.as_str(), f.as_str(), *l, None))
            .collect();
        let st: Vec<&[u32]> = stacks.iter().map(|s| s.as_slice()).collect();
        let mut r = Rec::new(&fr, &st);
        let mut iv: Vec<(u64, u64)> = vec![(0, 5_000)];
        iv.extend((1..=5_000).map(|s| (s, 1)));
        r.interval(&iv).interval(&iv);
        let p = r.finish();
        let other = &p.loop_code[0];
        assert_eq!(other.sites.len(), 5);
        assert_eq!(other.rest_functions, 4_995);
        assert!((other.rest_pct - 49.95).abs() < 0.1, "{}", other.rest_pct);
    }
}
