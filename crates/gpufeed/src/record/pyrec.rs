//! Python stacks into the recording: the sampling thread, and the aggregator that interns frames
//! and stacks (each written once, as `py_frame` / `py_stack` lines) and writes one `py_samples`
//! line per process per interval with its stack counts and the phase counts of each thread.

use crate::sample::event::{Line, PyFrameDef, PySamples, PyStackDef, PyStatusLine, PyThreadCounts};
use crate::sample::pyphase::{classify, is_library, is_worker_loop, FrameRef, Phase};
use crate::sample::pystacks::{
    CodeNames, PyOptions, PyReading, PySampler, PyStatus, RawFrame, StatusEvent, ThreadStack,
};
use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often aggregated counts are written.
pub(crate) const PY_INTERVAL: Duration = Duration::from_secs(1);
/// Most ticks the sampler sleeps through while every process is long idle (see
/// [`PySampler::quiet_ticks`]); also bounded by the long-idle check period.
const MAX_QUIET_TICKS: u32 = 32;
/// Distinct frames and stacks kept before new ones are folded into a catch-all (a bound on
/// memory and file size for pathological programs).
const MAX_FRAMES: usize = 200_000;
const MAX_STACKS: usize = 200_000;
/// Code objects whose names are kept, and (process, code object, line) triples kept with their
/// frame ids; past these, a new code object's frames are left out like frames past
/// `MAX_FRAMES`, and new triples are looked up by their names each time.
const MAX_CODES: usize = 200_000;
const MAX_BY_CODE: usize = 400_000;
/// Stacks deeper than this keep their outermost and innermost frames.
const MAX_DEPTH: usize = 128;

/// Python stack sampling settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PyConfig {
    pub rate_hz: f64,
    pub opts: PyOptions,
    /// Print one note to stderr when a process refuses to be read or its Python is not
    /// supported (off under a full-screen view).
    pub notes: bool,
}

/// Source lines of the user's files, read once per file.
#[derive(Default)]
struct Sources {
    files: HashMap<(u32, String), Option<Vec<String>>>,
}

impl Sources {
    fn line(&mut self, pid: u32, file: &str, line: i32) -> Option<String> {
        if is_library(file) || line <= 0 {
            return None;
        }
        let lines = self
            .files
            .entry((pid, file.to_string()))
            .or_insert_with(|| {
                let mut p = PathBuf::from(file);
                if p.is_relative() {
                    // Relative to the job's working directory.
                    p = PathBuf::from(format!("/proc/{pid}/cwd")).join(p);
                }
                let meta = std::fs::metadata(&p).ok()?;
                if !meta.is_file() || meta.len() > 4 << 20 {
                    return None;
                }
                let text = std::fs::read_to_string(&p).ok()?;
                Some(text.lines().map(|l| l.trim().to_string()).collect())
            })
            .as_ref()?;
        let s = lines.get(line as usize - 1)?;
        Some(s.chars().take(160).collect())
    }
}

#[derive(Default)]
struct ThreadAcc {
    name: Option<String>,
    /// Per stack: samples, of which idle, and of which running without the GIL.
    stacks: BTreeMap<u32, (u64, u64, u64)>,
    phases: BTreeMap<Phase, u64>,
    /// Running samples that held the GIL.
    gil_held: u64,
}

#[derive(Default)]
struct ProcAcc {
    ticks: u64,
    threads: BTreeMap<u64, ThreadAcc>,
}

/// One thread of a process's last reading, as interned: what an unchanged reading counts again.
struct LastThread {
    tid: u64,
    name: Option<String>,
    sid: u32,
    phase: Phase,
    empty: bool,
}

/// Counts one thread's stack in a process's interval: `active` (running), holding the GIL or
/// not (`gil`, read only for a running thread).
fn count(p: &mut ProcAcc, t: &LastThread, active: bool, gil: bool) {
    let th = p.threads.entry(t.tid).or_default();
    if t.name.is_some() && th.name != t.name {
        th.name.clone_from(&t.name);
    }
    let c = th.stacks.entry(t.sid).or_default();
    c.0 += 1;
    match (active, gil) {
        (false, _) => c.1 += 1,
        (true, false) => c.2 += 1,
        (true, true) => th.gil_held += 1,
    }
    // An empty stack (no Python running: start-up, teardown) is in no phase.
    if !t.empty {
        *th.phases.entry(t.phase).or_default() += 1;
    }
}

/// Is a stack of this phase a training loop's: a forward or backward pass, an optimizer step,
/// or fetching a batch outside a DataLoader worker's loop (a rank reading its batches in
/// process, or its pin-memory thread). A rank started by `mp.spawn` or `multiprocessing.Process`
/// carries no rank variables and is a child like a worker; these tell it apart at its first
/// reading in the loop, where a short backward pass may not be read for seconds at a worker's
/// rate.
fn runs_a_loop(phase: Phase, frames: &[FrameRef]) -> bool {
    match phase {
        Phase::Forward | Phase::Backward | Phase::Optimizer => true,
        Phase::DataWait => !frames.iter().any(is_worker_loop),
        _ => false,
    }
}

/// Interns frames and stacks and aggregates counts per process and thread.
///
/// Every frame and stack of every sample is looked up here, so the maps use a fast hash
/// (FxHash: the keys are the job's own names, not attacker-chosen input) and the stack's ids
/// are gathered in a reused buffer.
#[derive(Default)]
pub(crate) struct PyAggregator {
    frames: FxHashMap<(String, String, i32), u32>,
    /// Per (process, code object serial): its function and file names, given once
    /// ([`CodeNames`]); and per (process, code object, line), its frame id: most frames read
    /// are found here by three integers, with no string hashed or compared.
    code_names: FxHashMap<(u32, u64), (String, String)>,
    by_code: FxHashMap<(u32, u64, i32), u32>,
    /// Per frame id: the source line, for classification.
    frame_src: Vec<(String, String, Option<String>)>,
    /// Per stack: its id, its phase, and whether it is a training loop's (see
    /// [`runs_a_loop`]).
    stacks: FxHashMap<Vec<u32>, (u32, Phase, bool)>,
    procs: BTreeMap<u32, ProcAcc>,
    sources: Sources,
    /// The frame ids of the stack being added (reused).
    ids: Vec<u32>,
    /// Each process's last reading, for [`PyAggregator::add_unchanged`].
    last: FxHashMap<u32, Vec<LastThread>>,
    /// Each thread's scheduler clock (on a CPU, waiting for a core) at the last flush.
    sched_last: FxHashMap<(u32, u64), (u64, u64)>,
}

impl PyAggregator {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Learns the names of code objects met for the first time by a reading of `pid`.
    fn learn(&mut self, pid: u32, codes: Vec<CodeNames>) {
        for c in codes {
            if self.code_names.len() < MAX_CODES {
                self.code_names.insert((pid, c.code), (c.name, c.file));
            }
        }
    }

    fn frame_id(&mut self, pid: u32, f: RawFrame, out: &mut Vec<Line>) -> u32 {
        if f.code == 0 {
            return self.named_frame_id(pid, (f.name, f.file, f.line), out);
        }
        let key = (pid, f.code, f.line);
        if let Some(id) = self.by_code.get(&key) {
            return *id;
        }
        let Some((name, file)) = self.code_names.get(&(pid, f.code)) else {
            // Names not kept (past MAX_CODES): left out, as a frame past MAX_FRAMES.
            return u32::MAX;
        };
        let named = (name.clone(), file.clone(), f.line);
        let id = self.named_frame_id(pid, named, out);
        if id != u32::MAX && self.by_code.len() < MAX_BY_CODE {
            self.by_code.insert(key, id);
        }
        id
    }

    fn named_frame_id(&mut self, pid: u32, key: (String, String, i32), out: &mut Vec<Line>) -> u32 {
        if let Some(id) = self.frames.get(&key) {
            return *id;
        }
        if self.frames.len() >= MAX_FRAMES {
            return u32::MAX;
        }
        let id = self.frame_src.len() as u32;
        let src = self.sources.line(pid, &key.1, key.2);
        out.push(Line::PyFrame(PyFrameDef {
            id,
            name: key.0.clone(),
            file: key.1.clone(),
            line: key.2,
            src: src.clone(),
        }));
        self.frame_src.push((key.0.clone(), key.1.clone(), src));
        self.frames.insert(key, id);
        id
    }

    /// Adds one reading of one process; new frame and stack definitions go to `out` at once.
    /// A thread passed over ([`ThreadStack::reused`]) counts its last stack again, idle.
    /// The frames are taken out of `threads` (their vectors are left empty, to be used again:
    /// [`PySampler::recycle`]).
    /// `codes` names the code objects this reading met first (its frames carry their serials).
    /// Returns whether a thread was read in a training loop ([`runs_a_loop`]: the process
    /// trains, [`PySampler::promote`]).
    pub(crate) fn add(
        &mut self,
        pid: u32,
        threads: &mut [ThreadStack],
        codes: Vec<CodeNames>,
        out: &mut Vec<Line>,
    ) -> bool {
        let mut trains = false;
        self.learn(pid, codes);
        let mut acc_threads = Vec::with_capacity(threads.len());
        let mut before = self.last.remove(&pid).unwrap_or_default();
        for t in threads.iter_mut() {
            if t.reused {
                // Its last stack, unless it had none (then it is not counted).
                if let Some(i) = before.iter().position(|b| b.tid == t.tid) {
                    acc_threads.push((before.swap_remove(i), false, false));
                }
                continue;
            }
            let frames = &mut t.frames;
            if frames.len() > MAX_DEPTH {
                // The outermost and innermost halves.
                frames.drain(MAX_DEPTH / 2..frames.len() - MAX_DEPTH / 2);
            }
            let empty = frames.is_empty();
            let mut ids = std::mem::take(&mut self.ids);
            ids.clear();
            for f in frames.drain(..) {
                let id = self.frame_id(pid, f, out);
                if id != u32::MAX {
                    ids.push(id);
                }
            }
            let found = self.stacks.get(ids.as_slice()).copied();
            let (sid, phase, looping) = match found {
                Some(v) => {
                    self.ids = ids;
                    v
                }
                None if self.stacks.len() >= MAX_STACKS => {
                    self.ids = ids;
                    continue;
                }
                None => {
                    let refs: Vec<FrameRef> = ids
                        .iter()
                        .map(|i| {
                            let (n, f, s) = &self.frame_src[*i as usize];
                            FrameRef {
                                name: n,
                                file: f,
                                src: s.as_deref(),
                            }
                        })
                        .collect();
                    let phase = classify(&refs);
                    let looping = runs_a_loop(phase, &refs);
                    let sid = self.stacks.len() as u32;
                    out.push(Line::PyStack(PyStackDef {
                        id: sid,
                        frames: ids.clone(),
                    }));
                    self.stacks.insert(ids, (sid, phase, looping));
                    (sid, phase, looping)
                }
            };
            trains |= looping;
            acc_threads.push((
                LastThread {
                    tid: t.tid,
                    name: t.name.take(),
                    sid,
                    phase,
                    empty,
                },
                t.active,
                t.owns_gil,
            ));
        }
        let p = self.procs.entry(pid).or_default();
        p.ticks += 1;
        // The vector of the last reading is reused for this one.
        before.clear();
        let last = self.last.entry(pid).or_insert(before);
        for (t, active, gil) in acc_threads {
            count(p, &t, active, gil);
            last.push(t);
        }
        trains
    }

    /// Adds a reading of a process that did not run since its last one
    /// ([`crate::sample::pystacks::PyReading::Unchanged`]): its last stacks again, every
    /// thread idle. Nothing is interned or hashed again.
    pub(crate) fn add_unchanged(&mut self, pid: u32) {
        let Some(last) = self.last.get(&pid) else {
            return;
        };
        let p = self.procs.entry(pid).or_default();
        p.ticks += 1;
        for t in last {
            count(p, t, false, false);
        }
    }

    /// Forgets the last readings of processes not in `pids` (sorted).
    pub(crate) fn retain(&mut self, pids: &[u32]) {
        self.last.retain(|p, _| pids.binary_search(p).is_ok());
        self.code_names
            .retain(|(p, _), _| pids.binary_search(p).is_ok());
        self.by_code
            .retain(|(p, _, _), _| pids.binary_search(p).is_ok());
        self.sched_last
            .retain(|(p, _), _| pids.binary_search(p).is_ok());
    }

    /// A thread's (on a CPU, waiting for a core) nanoseconds since the last flush, from its
    /// cumulative clock `now`; `None` at its first flush, and when it neither ran nor waited.
    fn sched_delta(
        &mut self,
        pid: u32,
        tid: u64,
        now: Option<(u64, u64)>,
    ) -> (Option<u64>, Option<u64>) {
        let Some(now) = now else {
            return (None, None);
        };
        match self.sched_last.insert((pid, tid), now) {
            Some(prev) if now.0 >= prev.0 && now.1 >= prev.1 && now != prev => {
                (Some(now.0 - prev.0), Some(now.1 - prev.1))
            }
            _ => (None, None),
        }
    }

    /// Writes the interval's counts (one `py_samples` line per process read) and starts afresh;
    /// `sched` gives a thread's cumulative scheduler clock (on a CPU, waiting for a core).
    pub(crate) fn flush(
        &mut self,
        t_s: f64,
        dt_s: f64,
        out: &mut Vec<Line>,
        sched: impl Fn(u32, u64) -> Option<(u64, u64)>,
    ) {
        for (pid, p) in std::mem::take(&mut self.procs) {
            let threads = p
                .threads
                .into_iter()
                .map(|(tid, t)| {
                    let (cpu_ns, runq_ns) = self.sched_delta(pid, tid, sched(pid, tid));
                    PyThreadCounts {
                        tid,
                        name: t.name,
                        gil_free: t
                            .stacks
                            .iter()
                            .filter(|(_, c)| c.2 > 0)
                            .map(|(s, c)| [u64::from(*s), c.2])
                            .collect(),
                        gil_held: t.gil_held,
                        stacks: t
                            .stacks
                            .into_iter()
                            .map(|(s, (n, idle, _))| [s as u64, n, idle])
                            .collect(),
                        phases: t.phases,
                        cpu_ns,
                        runq_ns,
                    }
                })
                .collect();
            out.push(Line::PySamples(PySamples {
                t_s,
                dt_s,
                pid,
                ticks: p.ticks,
                threads,
            }));
        }
    }
}

/// Samples the Python stacks of the job's tree (`pids`, kept up to date by the host thread)
/// at `cfg.rate_hz` until told to stop. A refusal or an unsupported interpreter is told once
/// (when `cfg.notes`); processes that are not Python are passed over in silence.
pub(crate) fn py_thread(
    t0: Instant,
    cfg: PyConfig,
    pids: Arc<Mutex<Vec<u32>>>,
    lines: Sender<Line>,
    stop: Receiver<()>,
) {
    let mut told_denied = false;
    let mut told_version = false;
    let note = |ev: &StatusEvent, denied: &mut bool, version: &mut bool| match ev.status {
        PyStatus::Denied if !*denied => {
            *denied = true;
            eprintln!(
                "gpufeed: note: {}",
                crate::sample::pystacks::denied_advice()
            );
        }
        PyStatus::UnsupportedVersion if !*version => {
            *version = true;
            eprintln!(
                "gpufeed: note: the Python of pid {} ({}) is a version py-spy cannot read: \
                 recording continues without its stacks",
                ev.pid,
                ev.detail.as_deref().unwrap_or("unknown version")
            );
        }
        _ => {}
    };
    let mut sampler = PySampler::new(cfg.opts);
    let mut agg = PyAggregator::new();
    let every = Duration::from_secs_f64(1.0 / cfg.rate_hz.clamp(0.1, 1000.0));
    sampler.set_interval(every);
    // Ticks passed over while every process was long idle: their readings are made (without
    // reading anything) at the next wake-up.
    let mut quiet = 0u32;
    let mut ticker = super::ticker::Ticker::new(t0, every);
    let mut last_flush = t0;
    let mut out = Vec::new();
    let mut got = Vec::new();
    let mut events = Vec::new();
    loop {
        let (t_s, _) = ticker.now();
        let now_pids = pids.lock().map(|p| p.clone()).unwrap_or_default();
        got.clear();
        events.clear();
        for _ in 0..=quiet {
            sampler.sample(&now_pids, &mut got, &mut events);
        }
        for ev in events.drain(..) {
            if cfg.notes {
                note(&ev, &mut told_denied, &mut told_version);
            }
            if ev.status != PyStatus::NotPython || ev.detail.is_some() || ev.rank.is_some() {
                out.push(Line::PyStatus(PyStatusLine {
                    t_s,
                    pid: ev.pid,
                    status: ev.status,
                    detail: ev.detail,
                    rank: ev.rank,
                }));
            }
        }
        for (pid, reading) in got.drain(..) {
            match reading {
                PyReading::Stacks { mut stacks, codes } => {
                    if agg.add(pid, &mut stacks, codes, &mut out) {
                        sampler.promote(pid);
                    }
                    sampler.recycle(stacks);
                }
                PyReading::Unchanged => agg.add_unchanged(pid),
            }
        }
        let now = Instant::now();
        let since = now.duration_since(last_flush);
        if since >= PY_INTERVAL {
            agg.flush(
                t0.elapsed().as_secs_f64(),
                since.as_secs_f64(),
                &mut out,
                |p, t| sampler.sched(p, t),
            );
            let mut live = now_pids.clone();
            live.sort_unstable();
            agg.retain(&live);
            last_flush = now;
        }
        for l in out.drain(..) {
            if lines.send(l).is_err() {
                return;
            }
        }
        quiet = sampler.quiet_ticks(&now_pids, MAX_QUIET_TICKS);
        if ticker.wait_ticks(quiet + 1, &stop) {
            let since = Instant::now().duration_since(last_flush);
            agg.flush(
                t0.elapsed().as_secs_f64(),
                since.as_secs_f64(),
                &mut out,
                |p, t| sampler.sched(p, t),
            );
            for l in out.drain(..) {
                let _ = lines.send(l);
            }
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(tid: u64, active: bool, frames: &[(&str, &str)]) -> ThreadStack {
        ThreadStack {
            tid,
            name: None,
            active,
            owns_gil: active,
            reused: false,
            frames: frames
                .iter()
                .map(|(n, f)| RawFrame {
                    name: n.to_string(),
                    file: f.to_string(),
                    line: 1,
                    code: 0,
                })
                .collect(),
        }
    }

    /// A reading is told to train when one of its threads is in a training loop's phase (the
    /// sampler then reads the process at the full rate): a forward or backward pass, an
    /// optimizer step, fetching a batch in process; not a DataLoader worker's loop, not start-up
    /// work, not a thread passed over.
    #[test]
    fn a_reading_in_a_training_loop_trains() {
        let mut agg = PyAggregator::new();
        let mut out = Vec::new();
        let step = [
            ("train", "/job/train.py"),
            ("backward", "/site/torch/_tensor.py"),
        ];
        let opt = [
            ("train", "/job/train.py"),
            ("SGD.step", "/site/torch/optim/sgd.py"),
        ];
        let fwd = [("train", "/job/train.py"), ("Net.forward", "/job/train.py")];
        let fetch = [
            ("train", "/job/train.py"),
            (
                "_DataLoaderIter.__next__",
                "/site/torch/utils/data/dataloader.py",
            ),
            ("Blobs.__getitem__", "/job/train.py"),
        ];
        let worker = [
            ("_worker_loop", "/site/torch/utils/data/_utils/worker.py"),
            ("Blobs.__getitem__", "/job/train.py"),
        ];
        let setup = [("main", "/job/train.py"), ("build_vocab", "/job/train.py")];
        assert!(!agg.add(1, &mut [ts(1, true, &setup)], Vec::new(), &mut out));
        assert!(!agg.add(1, &mut [ts(1, true, &worker)], Vec::new(), &mut out));
        assert!(agg.add(1, &mut [ts(1, true, &fetch)], Vec::new(), &mut out));
        assert!(agg.add(1, &mut [ts(1, true, &fwd)], Vec::new(), &mut out));
        assert!(agg.add(1, &mut [ts(1, true, &step)], Vec::new(), &mut out));
        assert!(agg.add(
            2,
            &mut [ts(1, false, &fwd), ts(2, true, &opt)],
            Vec::new(),
            &mut out
        ));
        let passed_over = ThreadStack {
            reused: true,
            ..ts(1, true, &step)
        };
        assert!(!agg.add(3, &mut [passed_over], Vec::new(), &mut out));
    }

    /// A running thread without the GIL is counted per stack (native code under it); running
    /// with it, per thread (the proof the GIL was read); an idle one in neither.
    #[test]
    fn running_without_the_gil_is_counted_per_stack() {
        let mut agg = PyAggregator::new();
        let mut out = Vec::new();
        let getitem = [("Blobs.__getitem__", "/nonexistent/t.py")];
        for (active, gil) in [(true, false), (true, false), (true, true), (false, false)] {
            let t = ThreadStack {
                owns_gil: gil,
                ..ts(1, active, &getitem)
            };
            agg.add(1, &mut [t], Vec::new(), &mut out);
        }
        out.clear();
        agg.flush(1.0, 1.0, &mut out, |_, _| None);
        let Line::PySamples(s) = &out[0] else {
            panic!()
        };
        assert_eq!(s.threads[0].stacks, vec![[0, 4, 1]]);
        assert_eq!(s.threads[0].gil_free, vec![[0, 2]]);
        assert_eq!(s.threads[0].gil_held, 1);
        let json = serde_json::to_string(&out[0]).unwrap();
        assert!(
            json.contains(r#""gil_held":1,"gil_free":[[0,2]]"#),
            "{json}"
        );
        // Nothing without the GIL, nothing held: neither key is written.
        agg.add(1, &mut [ts(1, false, &getitem)], Vec::new(), &mut out);
        out.clear();
        agg.flush(2.0, 1.0, &mut out, |_, _| None);
        let json = serde_json::to_string(&out[0]).unwrap();
        assert!(!json.contains("gil"), "{json}");
    }

    #[test]
    fn frames_and_stacks_are_written_once_and_counts_per_interval() {
        let dl = "/v/site-packages/torch/utils/data/dataloader.py";
        let mut agg = PyAggregator::new();
        let mut out = Vec::new();
        for i in 0..10 {
            let main = if i < 7 {
                ts(
                    1,
                    false,
                    &[("<module>", "/nonexistent/t.py"), ("_next_data", dl)],
                )
            } else {
                ts(
                    1,
                    true,
                    &[
                        ("<module>", "/nonexistent/t.py"),
                        ("Net.forward", "/nonexistent/t.py"),
                    ],
                )
            };
            agg.add(1, &mut [main], Vec::new(), &mut out);
        }
        let frames = out.iter().filter(|l| matches!(l, Line::PyFrame(_))).count();
        let stacks = out.iter().filter(|l| matches!(l, Line::PyStack(_))).count();
        assert_eq!((frames, stacks), (3, 2));
        out.clear();
        agg.flush(1.0, 1.0, &mut out, |_, _| None);
        let Line::PySamples(s) = &out[0] else {
            panic!()
        };
        assert_eq!(s.ticks, 10);
        assert_eq!(s.threads[0].stacks, vec![[0, 7, 7], [1, 3, 0]]);
        assert_eq!(s.threads[0].phases[&Phase::DataWait], 7);
        assert_eq!(s.threads[0].phases[&Phase::Forward], 3);
        out.clear();
        agg.flush(2.0, 1.0, &mut out, |_, _| None);
        assert!(out.is_empty(), "nothing read, nothing written");
    }

    #[test]
    fn an_unchanged_reading_counts_the_last_stacks_again_as_idle() {
        let mut agg = PyAggregator::new();
        let mut out = Vec::new();
        let mut main = ts(
            1,
            true,
            &[("<module>", "/nonexistent/t.py"), ("run", "/x.py")],
        );
        main.name = Some("MainThread".into());
        agg.add(7, &mut [main, ts(2, false, &[])], Vec::new(), &mut out);
        let defs = out.len();
        agg.add_unchanged(7);
        agg.add_unchanged(7);
        agg.add_unchanged(8); // never read: nothing to count
        assert_eq!(out.len(), defs, "nothing interned again");
        out.clear();
        agg.flush(1.0, 1.0, &mut out, |_, _| None);
        assert_eq!(out.len(), 1, "{out:?}");
        let Line::PySamples(s) = &out[0] else {
            panic!()
        };
        assert_eq!((s.pid, s.ticks), (7, 3));
        assert_eq!(s.threads[0].name.as_deref(), Some("MainThread"));
        assert_eq!(
            s.threads[0].stacks,
            vec![[0, 3, 2]],
            "read active once, idle twice"
        );
        assert_eq!(s.threads[0].phases.values().sum::<u64>(), 3);
        assert_eq!(s.threads[1].stacks, vec![[1, 3, 3]]);
        assert!(
            s.threads[1].phases.is_empty(),
            "an empty stack is in no phase"
        );
        // Still counted in the next interval; forgotten once the process is gone.
        agg.add_unchanged(7);
        agg.retain(&[3, 9]);
        agg.add_unchanged(7);
        out.clear();
        agg.flush(2.0, 1.0, &mut out, |_, _| None);
        let Line::PySamples(s) = &out[0] else {
            panic!()
        };
        assert_eq!(s.ticks, 1);
    }

    #[test]
    fn a_thread_passed_over_counts_its_last_stack_again_as_idle() {
        let mut agg = PyAggregator::new();
        let mut out = Vec::new();
        let mut feeder = ts(2, false, &[("_feed", "/q.py"), ("wait", "/t.py")]);
        feeder.name = Some("QueueFeederThread".into());
        agg.add(
            7,
            &mut [ts(1, true, &[("step", "/nonexistent/t.py")]), feeder],
            Vec::new(),
            &mut out,
        );
        let passed = |tid| ThreadStack {
            tid,
            name: None,
            active: false,
            owns_gil: false,
            frames: vec![],
            reused: true,
        };
        // The loop moved on; the feeder (and a thread never read) were passed over.
        agg.add(
            7,
            &mut [
                ts(1, true, &[("fwd", "/nonexistent/t.py")]),
                passed(2),
                passed(3),
            ],
            Vec::new(),
            &mut out,
        );
        agg.add(
            7,
            &mut [ts(1, false, &[("fwd", "/nonexistent/t.py")]), passed(2)],
            Vec::new(),
            &mut out,
        );
        out.clear();
        agg.flush(1.0, 1.0, &mut out, |_, _| None);
        let Line::PySamples(s) = &out[0] else {
            panic!()
        };
        assert_eq!(s.ticks, 3);
        assert_eq!(s.threads.len(), 2, "no thread 3: it had no stack to count");
        assert_eq!(s.threads[0].stacks, vec![[0, 1, 0], [2, 2, 1]]);
        assert_eq!(s.threads[1].name.as_deref(), Some("QueueFeederThread"));
        assert_eq!(
            s.threads[1].stacks,
            vec![[1, 3, 3]],
            "its one stack, three times, idle"
        );
        // And an unchanged reading after it still has the feeder's stack.
        agg.add_unchanged(7);
        out.clear();
        agg.flush(2.0, 1.0, &mut out, |_, _| None);
        let Line::PySamples(s) = &out[0] else {
            panic!()
        };
        assert_eq!(s.threads[1].stacks, vec![[1, 1, 1]]);
    }

    /// A stack of frames that carry their code object's serial (py-spy patch 13).
    fn coded(tid: u64, frames: &[(u64, i32)]) -> ThreadStack {
        ThreadStack {
            tid,
            name: None,
            active: true,
            owns_gil: true,
            reused: false,
            frames: frames
                .iter()
                .map(|&(code, line)| RawFrame {
                    name: String::new(),
                    file: String::new(),
                    line,
                    code,
                })
                .collect(),
        }
    }

    fn names(code: u64, name: &str, file: &str) -> CodeNames {
        CodeNames {
            code,
            name: name.into(),
            file: file.into(),
        }
    }

    #[test]
    fn frames_carrying_code_serials_are_named_from_the_codes_given_once() {
        let dl = "/v/site-packages/torch/utils/data/dataloader.py";
        let mut agg = PyAggregator::new();
        let mut out = Vec::new();
        // Process 7 gives its code objects' names with its first reading only.
        agg.add(
            7,
            &mut [coded(1, &[(11, 4), (12, 9)])],
            vec![
                names(11, "<module>", "/nonexistent/t.py"),
                names(12, "_next_data", dl),
            ],
            &mut out,
        );
        agg.add(
            7,
            &mut [coded(1, &[(11, 4), (12, 9)])],
            Vec::new(),
            &mut out,
        );
        // Another line of a known code object is a new frame of the same names.
        agg.add(7, &mut [coded(1, &[(11, 5)])], Vec::new(), &mut out);
        // Process 8 (its own serials) reaches the same frame: one frame, one stack.
        agg.add(
            8,
            &mut [coded(1, &[(21, 4), (22, 9)])],
            vec![
                names(21, "<module>", "/nonexistent/t.py"),
                names(22, "_next_data", dl),
            ],
            &mut out,
        );
        // A frame whose names were never given is left out (never named wrongly).
        agg.add(
            8,
            &mut [coded(2, &[(21, 4), (99, 1)])],
            Vec::new(),
            &mut out,
        );
        let frames: Vec<(String, i32)> = out
            .iter()
            .filter_map(|l| match l {
                Line::PyFrame(f) => Some((f.name.clone(), f.line)),
                _ => None,
            })
            .collect();
        assert_eq!(
            frames,
            vec![
                ("<module>".to_string(), 4),
                ("_next_data".to_string(), 9),
                ("<module>".to_string(), 5)
            ]
        );
        let stacks: Vec<Vec<u32>> = out
            .iter()
            .filter_map(|l| match l {
                Line::PyStack(s) => Some(s.frames.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(stacks, vec![vec![0, 1], vec![2], vec![0]]);
        out.clear();
        agg.flush(1.0, 1.0, &mut out, |_, _| None);
        let counts: Vec<(u32, Vec<[u64; 3]>)> = out
            .iter()
            .filter_map(|l| match l {
                Line::PySamples(s) => Some((s.pid, s.threads[0].stacks.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(
            counts,
            vec![(7, vec![[0, 2, 0], [1, 1, 0]]), (8, vec![[0, 1, 0]])]
        );
        // A process gone takes its code objects' names along.
        agg.retain(&[8]);
        assert!(agg.code_names.keys().all(|(p, _)| *p == 8));
        assert!(agg.by_code.keys().all(|(p, _, _)| *p == 8));
        assert_eq!(agg.code_names.len(), 2);
    }

    #[test]
    fn source_lines_are_read_for_user_files_relative_to_the_job() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("t.py");
        std::fs::write(&f, "a = 1\n    x = loss.item()\n").unwrap();
        let mut s = Sources::default();
        let got = s.line(std::process::id(), f.to_str().unwrap(), 2);
        assert_eq!(got.as_deref(), Some("x = loss.item()"));
        assert_eq!(s.line(1, "/usr/lib/python3.11/queue.py", 2), None);
        assert_eq!(s.line(1, f.to_str().unwrap(), 9), None);
    }
}
