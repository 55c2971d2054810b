//! The reply direction of the step socket (docs/step-protocol.md, "Asking gpufeed for its
//! figures"): a job's hook sends `figures <rank> [<pid> [<nonce>]]` from a socket with an address
//! (on Linux an autobound abstract one), and gpufeed answers with one JSON line of its figures for
//! that rank since the rank's previous query: steps/s, data wait and samples/s from the rank's own
//! step markers, each GPU's busy % from the driver, and the training loop's phases from the
//! process's Python stacks (`pid`), where gpufeed has them.
//!
//! [`Board`] keeps the last [`MAX_WINDOW_S`] of GPU and Python-phase readings; the recorder's
//! writer thread feeds it every line it writes. [`Replier`] answers queries on the socket's own
//! thread, at most [`MAX_REPLIES_PER_S`] a second, one per datagram, each reply under
//! [`MAX_REPLY_BYTES`]. Old hooks never ask, so nothing changes for them; a hook under an old
//! gpufeed gets no answer and keeps its own timing.

use super::event::Line;
use super::pyphase::Phase;
use super::stepmark::{StepMark, StepTotals, MARK_SKEW_NS};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, VecDeque};

/// The longest window a reply covers (a rank that asks rarely gets the last minute).
pub(crate) const MAX_WINDOW_S: f64 = 60.0;
/// GPU and phase readings are averaged over at least this long (they come every interval).
pub(crate) const MIN_BOARD_WINDOW_S: f64 = 1.0;
/// Replies sent at most this many times a second, all ranks together (abuse bound).
pub(crate) const MAX_REPLIES_PER_S: u32 = 64;
/// Ranks remembered for their previous query; past this the memory is cleared.
pub(crate) const MAX_RANKS: usize = 1024;
/// Readings kept per kind on the board, whatever the window (a bound on memory).
pub(crate) const MAX_READINGS: usize = 100_000;
/// Markers scanned back from the newest for one reply.
pub(crate) const MAX_SCAN: usize = 200_000;
/// GPUs named in one reply.
pub(crate) const MAX_GPUS: usize = 64;
/// A reply never exceeds this (it fits the hook's receive buffer).
pub(crate) const MAX_REPLY_BYTES: usize = 4096;

/// One `figures` query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Query {
    /// The rank whose markers are meant (as in the `step` lines; `-`: markers without one).
    pub rank: Option<u32>,
    /// The asking process, whose Python stacks give the phases.
    pub pid: Option<u32>,
    /// Echoed back as `q`, so a hook can tell a late answer from the one it waits for.
    pub nonce: Option<u64>,
}

/// The first `figures` line of a datagram, if any (one reply per datagram). A line whose rank
/// is missing or neither `-` nor a rank (`figures x`, `figures -1`, `figures 4294967296`) is no
/// query: it gets no answer (it was answered with the figures of the markers without a rank).
pub(crate) fn parse_query(text: &str) -> Option<Query> {
    text.lines().find_map(|line| {
        let mut w = line.split_ascii_whitespace();
        if w.next()? != "figures" {
            return None;
        }
        let rank = match w.next()? {
            "-" => None,
            r => Some(r.parse::<u32>().ok()?),
        };
        let num = |w: Option<&str>| w.filter(|w| *w != "-").and_then(|w| w.parse::<u64>().ok());
        Some(Query {
            rank,
            pid: num(w.next()).and_then(|p| u32::try_from(p).ok()),
            nonce: num(w.next()),
        })
    })
}

/// The steps of `rank` that ended in `(from_ns, to_ns]`, each timed from the rank's previous
/// marker (which may lie before the window). `marks` are in arrival order; only the newest
/// [`MAX_SCAN`] are looked at, back to a little before the window.
pub(crate) fn window_totals(
    marks: &[StepMark],
    rank: Option<u32>,
    from_ns: u64,
    to_ns: u64,
) -> StepTotals {
    let stop_before = from_ns.saturating_sub(2 * MARK_SKEW_NS);
    let mut inside: Vec<&StepMark> = Vec::new();
    let mut before: Option<u64> = None;
    for k in marks.iter().rev().take(MAX_SCAN) {
        if before.is_some() && k.t_ns < stop_before {
            break;
        }
        if k.rank != rank || k.t_ns > to_ns {
            continue;
        }
        if k.t_ns > from_ns {
            inside.push(k);
        } else {
            // An idle mark before the window restarts the clock as a step would.
            before = Some(before.map_or(k.t_ns, |b| b.max(k.t_ns)));
        }
    }
    inside.sort_by_key(|k| k.t_ns);
    let mut t = StepTotals::empty();
    let mut prev = before;
    for k in inside {
        if let Some(p) = prev.filter(|_| k.is_step()) {
            t.add(p, k);
        }
        prev = Some(k.t_ns);
    }
    t
}

/// One thread's phase samples in one interval of the Python sampler.
#[derive(Debug, Clone, Copy)]
struct PhaseReading {
    t_s: f64,
    pid: u32,
    tid: u64,
    counts: [u64; Phase::ALL.len()],
}

/// The recent GPU and Python-phase readings, for replies.
#[derive(Debug, Default)]
pub(crate) struct Board {
    /// CLOCK_MONOTONIC nanoseconds at the recording's `t_s` = 0; `None` until a recorder started.
    t0_ns: Option<u64>,
    /// `(t_s, gpu index, busy %)`, oldest first.
    gpu: VecDeque<(f64, u32, f64)>,
    phases: VecDeque<PhaseReading>,
}

impl Board {
    /// The recording started at `t0_ns` (CLOCK_MONOTONIC): its lines' `t_s` count from there.
    pub(crate) fn start(&mut self, t0_ns: u64) {
        self.t0_ns = Some(t0_ns);
        self.gpu.clear();
        self.phases.clear();
    }

    /// Takes what a reply may need from a line the recorder writes.
    pub(crate) fn observe(&mut self, line: &Line) {
        match line {
            Line::Gpu(g) => {
                match &g.util_samples {
                    Some(v) if !v.is_empty() => {
                        for &[t, x] in v {
                            self.gpu.push_back((t, g.index, x));
                        }
                    }
                    _ => {
                        if let Some(x) = g.util_pct {
                            self.gpu.push_back((g.t_s, g.index, x));
                        }
                    }
                }
                Self::prune(&mut self.gpu, g.t_s, |r| r.0);
            }
            Line::PySamples(p) => {
                for th in &p.threads {
                    // Threads in the training loop only (the sampler's own, the workers' idle
                    // threads have nothing but `other`).
                    if !th.phases.keys().any(|ph| *ph != Phase::Other) {
                        continue;
                    }
                    let mut counts = [0u64; Phase::ALL.len()];
                    for (ph, n) in &th.phases {
                        counts[ph.index()] = counts[ph.index()].saturating_add(*n);
                    }
                    self.phases.push_back(PhaseReading {
                        t_s: p.t_s,
                        pid: p.pid,
                        tid: th.tid,
                        counts,
                    });
                }
                Self::prune(&mut self.phases, p.t_s, |r| r.t_s);
            }
            _ => {}
        }
    }

    fn prune<T>(q: &mut VecDeque<T>, now_t_s: f64, t: impl Fn(&T) -> f64) {
        while q
            .front()
            .is_some_and(|r| t(r) < now_t_s - MAX_WINDOW_S - MIN_BOARD_WINDOW_S)
            || q.len() > MAX_READINGS
        {
            q.pop_front();
        }
    }

    /// `t_s` of a CLOCK_MONOTONIC time, when the recording started.
    fn t_s(&self, ns: u64) -> Option<f64> {
        self.t0_ns.map(|t0| (ns as f64 - t0 as f64) / 1e9)
    }

    /// Each GPU's mean busy % over `(from, to]` (`t_s`).
    fn gpu_busy(&self, from: f64, to: f64) -> BTreeMap<u32, f64> {
        let mut sums: BTreeMap<u32, (f64, u32)> = BTreeMap::new();
        for &(t, i, x) in &self.gpu {
            if t > from && t <= to && x.is_finite() {
                let s = sums.entry(i).or_default();
                s.0 += x;
                s.1 += 1;
            }
        }
        sums.into_iter()
            .take(MAX_GPUS)
            .map(|(i, (s, n))| (i, s / f64::from(n)))
            .collect()
    }

    /// The phases of `pid`'s training thread (its thread with the most training-loop samples) over
    /// `(from, to]`, as % of that thread's samples.
    fn phases_of(&self, pid: u32, from: f64, to: f64) -> Option<BTreeMap<&'static str, f64>> {
        let mut by_tid: BTreeMap<u64, [u64; Phase::ALL.len()]> = BTreeMap::new();
        for r in self
            .phases
            .iter()
            .filter(|r| r.pid == pid && r.t_s > from && r.t_s <= to)
        {
            let c = by_tid.entry(r.tid).or_default();
            for (a, b) in c.iter_mut().zip(r.counts) {
                *a = a.saturating_add(b);
            }
        }
        let other = Phase::Other.index();
        let loop_samples = |c: &[u64; Phase::ALL.len()]| -> u64 {
            c.iter()
                .enumerate()
                .filter(|(i, _)| *i != other)
                .map(|(_, n)| n)
                .sum()
        };
        let (_, c) = by_tid.into_iter().max_by_key(|(_, c)| loop_samples(c))?;
        let total: u64 = c.iter().sum();
        (total > 0).then(|| {
            Phase::ALL
                .iter()
                .filter(|p| c[p.index()] > 0)
                .map(|p| (p.as_str(), 100.0 * c[p.index()] as f64 / total as f64))
                .collect()
        })
    }
}

/// Answers queries: remembers each rank's previous query and keeps to the reply rate.
#[derive(Debug)]
pub(crate) struct Replier {
    /// When the socket was bound: the first window of a rank starts there.
    bound_ns: u64,
    last: BTreeMap<Option<u32>, u64>,
    /// The second (`ns / 1e9`) the replies are counted in, and how many went in it.
    second: u64,
    sent: u32,
}

impl Replier {
    pub(crate) fn new(bound_ns: u64) -> Replier {
        Replier {
            bound_ns,
            last: BTreeMap::new(),
            second: 0,
            sent: 0,
        }
    }

    /// The reply to `q` received at `now_ns`, or `None` when the rate is spent.
    pub(crate) fn answer(
        &mut self,
        q: &Query,
        now_ns: u64,
        marks: &[StepMark],
        board: &Board,
    ) -> Option<String> {
        let second = now_ns / 1_000_000_000;
        if second != self.second {
            (self.second, self.sent) = (second, 0);
        }
        if self.sent >= MAX_REPLIES_PER_S {
            return None;
        }
        self.sent += 1;
        let max_ns = (MAX_WINDOW_S * 1e9) as u64;
        let from_ns = self
            .last
            .get(&q.rank)
            .copied()
            .unwrap_or(self.bound_ns)
            .max(now_ns.saturating_sub(max_ns))
            .min(now_ns);
        if self.last.len() >= MAX_RANKS && !self.last.contains_key(&q.rank) {
            self.last.clear();
        }
        self.last.insert(q.rank, now_ns);
        let mut out = Map::new();
        out.insert("gpufeed".into(), json!(env!("CARGO_PKG_VERSION")));
        if let Some(n) = q.nonce {
            out.insert("q".into(), json!(n));
        }
        out.insert("rank".into(), json!(q.rank));
        out.insert("window_s".into(), json!((now_ns - from_ns) as f64 / 1e9));
        steps_figures(&mut out, &window_totals(marks, q.rank, from_ns, now_ns));
        board_figures(&mut out, board, q.pid, from_ns, now_ns);
        let text = Value::Object(out).to_string() + "\n";
        (text.len() <= MAX_REPLY_BYTES).then_some(text)
    }
}

fn steps_figures(out: &mut Map<String, Value>, t: &StepTotals) {
    out.insert("steps".into(), json!(t.steps));
    if t.steps == 0 || t.span_s <= 0.0 {
        return;
    }
    out.insert("steps_per_s".into(), json!(t.steps as f64 / t.span_s));
    if let Some(w) = t.wait_s {
        out.insert("data_wait_pct".into(), json!(100.0 * w / t.span_s));
    }
    if let Some(n) = t.items {
        out.insert("samples_per_s".into(), json!(n as f64 / t.span_s));
    }
}

fn board_figures(
    out: &mut Map<String, Value>,
    board: &Board,
    pid: Option<u32>,
    from_ns: u64,
    to_ns: u64,
) {
    let (Some(from), Some(to)) = (board.t_s(from_ns), board.t_s(to_ns)) else {
        return;
    };
    let from = from.min(to - MIN_BOARD_WINDOW_S);
    let gpus = board.gpu_busy(from, to);
    if !gpus.is_empty() {
        let mean = gpus.values().sum::<f64>() / gpus.len() as f64;
        out.insert("gpu_busy_pct".into(), json!(mean));
        let m: Map<String, Value> = gpus
            .into_iter()
            .map(|(i, x)| (i.to_string(), json!(x)))
            .collect();
        out.insert("gpus".into(), Value::Object(m));
    }
    if let Some(ph) = pid.and_then(|p| board.phases_of(p, from, to)) {
        let m: Map<String, Value> = ph
            .into_iter()
            .map(|(k, x)| (k.to_string(), json!(x)))
            .collect();
        out.insert("phases".into(), Value::Object(m));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::event::{PySamples, PyThreadCounts};
    use crate::sample::GpuSample;

    const S: u64 = 1_000_000_000;

    fn mark(t_ns: u64, rank: Option<u32>) -> StepMark {
        StepMark {
            t_ns,
            wait_ns: Some(S / 4),
            items: Some(8),
            rank,
            ..Default::default()
        }
    }

    #[test]
    fn queries_are_parsed_and_anything_else_is_not_one() {
        assert_eq!(
            parse_query("step 1 2\nfigures 3 4242 7\nfigures 5"),
            Some(Query {
                rank: Some(3),
                pid: Some(4242),
                nonce: Some(7)
            })
        );
        assert_eq!(
            parse_query("figures - x"),
            Some(Query {
                rank: None,
                pid: None,
                nonce: None
            })
        );
        assert_eq!(parse_query("step 1\nfigure 3"), None);
        // a rank that is no rank is no query (it was answered as the markers without one)
        for bad in [
            "figures x",
            "figures -1",
            "figures 4294967296",
            "figures",
            "figures 1.5 7",
        ] {
            assert_eq!(parse_query(bad), None, "{bad}");
        }
        assert_eq!(parse_query("figures bad\nfigures 4").unwrap().rank, Some(4));
    }

    #[test]
    fn a_window_counts_the_ranks_steps_that_ended_in_it() {
        // Rank 0 steps every 0.5 s from 10 s, rank 1 every 0.25 s; a query at 12 s for rank 0
        // since 11 s: the steps ending at 11.5 and 12 (the one at 11 starts the first).
        let mut marks = Vec::new();
        for k in 0..=8u64 {
            marks.push(mark(10 * S + k * S / 4, Some(1)));
            if k % 2 == 0 {
                marks.push(mark(10 * S + k * S / 4, Some(0)));
            }
        }
        let t = window_totals(&marks, Some(0), 11 * S, 12 * S);
        assert_eq!(t.steps, 2);
        assert!((t.span_s - 1.0).abs() < 1e-9);
        assert!((t.wait_s.unwrap() - 0.5).abs() < 1e-9);
        assert_eq!(t.items, Some(16));
        assert_eq!(window_totals(&marks, Some(1), 11 * S, 12 * S).steps, 4);
        assert_eq!(window_totals(&marks, Some(2), 11 * S, 12 * S).steps, 0);
        // Without a marker before the window, its first marker only starts the clock.
        assert_eq!(window_totals(&marks, Some(0), 0, 12 * S).steps, 4);
    }

    fn board() -> Board {
        let mut b = Board::default();
        b.start(100 * S);
        for k in 1..=30u32 {
            let t = f64::from(k) * 0.1;
            for (i, x) in [(0, 30.0), (1, 50.0)] {
                b.observe(&Line::Gpu(GpuSample {
                    index: i,
                    t_s: t,
                    util_pct: Some(x),
                    ..Default::default()
                }));
            }
        }
        let th = PyThreadCounts::with_phases;
        b.observe(&Line::PySamples(PySamples {
            t_s: 2.5,
            dt_s: 0.5,
            pid: 42,
            ticks: 50,
            threads: vec![
                th(
                    1,
                    &[
                        (Phase::DataWait, 30),
                        (Phase::Forward, 10),
                        (Phase::Other, 10),
                    ],
                ),
                th(2, &[(Phase::Other, 50)]),
                th(3, &[(Phase::Sync, 5)]),
            ],
        }));
        b
    }

    #[test]
    fn a_reply_has_the_gpus_and_the_askers_phases() {
        let b = board();
        let mut r = Replier::new(100 * S);
        let marks: Vec<StepMark> = (0..=10)
            .map(|k| mark(101 * S + k * S / 5, Some(0)))
            .collect();
        let q = Query {
            rank: Some(0),
            pid: Some(42),
            nonce: Some(9),
        };
        let text = r.answer(&q, 103 * S, &marks, &b).unwrap();
        assert!(text.ends_with('\n') && !text[..text.len() - 1].contains('\n'));
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["q"], 9);
        assert_eq!(v["rank"], 0);
        assert_eq!(v["steps"], 10);
        assert!(
            (v["steps_per_s"].as_f64().unwrap() - 5.0).abs() < 1e-9,
            "{v}"
        );
        assert!(
            (v["data_wait_pct"].as_f64().unwrap() - 100.0).abs() < 1e-9,
            "{v}"
        );
        assert!(
            (v["gpus"]["0"].as_f64().unwrap() - 30.0).abs() < 1e-9,
            "{v}"
        );
        assert!(
            (v["gpu_busy_pct"].as_f64().unwrap() - 40.0).abs() < 1e-9,
            "{v}"
        );
        // Thread 1 is the training thread: 30 of its 50 samples wait for data.
        assert!(
            (v["phases"]["data_wait"].as_f64().unwrap() - 60.0).abs() < 1e-9,
            "{v}"
        );
        assert!(
            (v["phases"]["other"].as_f64().unwrap() - 20.0).abs() < 1e-9,
            "{v}"
        );
        assert!(v["phases"].get("sync").is_none(), "{v}");
        // The next query of the rank covers only what came since; another pid has no phases.
        let q2 = Query { pid: Some(7), ..q };
        let v: Value =
            serde_json::from_str(&r.answer(&q2, 103 * S + S / 2, &marks, &b).unwrap()).unwrap();
        assert_eq!(v["steps"], 0);
        assert!(
            v.get("steps_per_s").is_none() && v.get("phases").is_none(),
            "{v}"
        );
        assert!((v["window_s"].as_f64().unwrap() - 0.5).abs() < 1e-9);
    }

    #[test]
    fn replies_are_rate_limited_and_memory_is_bounded() {
        let b = Board::default(); // no recorder: steps only
        let mut r = Replier::new(0);
        let q = |rank| Query {
            rank: Some(rank),
            pid: None,
            nonce: None,
        };
        let sent = (0..1000)
            .filter(|k| r.answer(&q(*k), 5 * S + 1, &[], &b).is_some())
            .count();
        assert_eq!(sent, MAX_REPLIES_PER_S as usize);
        let v: Value = serde_json::from_str(&r.answer(&q(1), 6 * S, &[], &b).unwrap()).unwrap();
        assert!(v.get("gpus").is_none() && v.get("phases").is_none(), "{v}");
        for k in 0..(3 * MAX_RANKS as u32) {
            r.answer(&q(k), u64::from(k) * S, &[], &b);
        }
        assert!(r.last.len() <= MAX_RANKS);
        // The board keeps a minute (and at most MAX_READINGS) whatever it is fed.
        let mut b = Board::default();
        b.start(0);
        for k in 0..200_000u32 {
            b.observe(&Line::Gpu(GpuSample {
                index: 0,
                t_s: f64::from(k) * 0.01,
                util_pct: Some(1.0),
                ..Default::default()
            }));
        }
        assert!(b.gpu.len() <= ((MAX_WINDOW_S + MIN_BOARD_WINDOW_S) * 100.0) as usize + 1);
    }
}
