//! How many GPUs an nvidia-smi CSV log without an `index`, `uuid` or `pci.bus_id` column holds,
//! found from the readings themselves.
//!
//! `nvidia-smi --query-gpu=timestamp,utilization.gpu,... --format=csv -lms 100` on a machine with
//! N GPUs writes N rows per poll, one per GPU in order, mostly a few milliseconds apart, then
//! waits for the interval. Real logs are jittery: a few percent of the gaps inside a poll reach
//! tens of milliseconds and some waits between polls stretch to seconds, so no single jump in the
//! sorted gaps separates the two. With timestamps, the wait between polls is the modal gap of the
//! upper of the two clusters the gaps form on a log scale; rows are grouped into polls by it, N is
//! the modal poll size, and the count is checked against the values: memory.used (else power,
//! temperature) of one position should stay alike from poll to poll and repeat with a period that
//! divides N. Without timestamps, N is the period of that pattern alone, unless the `name` column
//! repeats with a period of its own (a DGX Station's four A100s and its 'DGX Display', or a mixed
//! box): nvidia-smi writes every poll in the same order, so that run of names is a poll, N is a
//! multiple of it, and row k is GPU k mod N by its place in the poll, whatever its memory reads.
//! When neither tells, the reader refuses to guess and keeps one pooled series.

/// How rows map to GPUs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Layout {
    /// Each row names its GPU (an index, uuid or pci.bus_id column).
    Column,
    /// Rows come in polls of `n`, one per GPU in order (see `PollCursor`): a gap of at most
    /// `gap_s` (half the modal wait between polls) keeps a row in the poll while it holds fewer
    /// than `n` rows; a full poll starts the next; after a longer gap the row's values, else
    /// the gap against the modal wait, say which.
    Bursts { n: u32, gap_s: f64 },
    /// No timestamps: row k is GPU k mod `n`.
    Cycle { n: u32 },
    /// Cannot be told: every row is read as one pooled series.
    Pooled,
}

/// What detection looks at in one row.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Probe {
    /// Seconds (any origin).
    pub ts: Option<f64>,
    pub mem_mib: Option<f64>,
    pub power_w: Option<f64>,
    pub temperature_c: Option<f64>,
    /// A hash of the GPU's name (the `name` column), when the log has one.
    pub name: Option<u64>,
}

/// The most GPUs one log row set is read as (a node has at most a few dozen).
pub(crate) const MAX_GPUS: u32 = 64;
/// Share of row pairs one period apart whose names must match for the names to give the poll
/// (a row lost mid-log breaks only the pairs across it).
const NAMES_AGREE: f64 = 0.98;
/// Two timestamps closer than this are the same instant (nvidia-smi writes milliseconds).
const TS_EPS_S: f64 = 0.0015;
/// Share of polls (or of row pairs) that must agree before a count is believed.
const AGREE: f64 = 0.8;
/// Bins per decade of the histogram of row gaps (a bin is 26 % wide).
const BINS_PER_DECADE: f64 = 10.0;
/// Bins two clusters of gaps must lie apart to be the rows of a poll and the wait between polls
/// (6 bins: 4×).
const CLUSTERS_APART: i32 = 6;
/// The largest modal gap between the rows of one poll: nvidia-smi writes them within
/// milliseconds (0-4 ms in real logs, a few percent of gaps up to 90 ms).
const MAX_IN_POLL_S: f64 = 0.1;
/// A gap up to this many `gap_s` (90 % of the modal wait between polls) may still be inside a
/// poll that has room left.
const LATE: f64 = 1.8;

/// A value that tells rows apart: which field, and how near two rows' must be to be alike.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Key {
    Mem,
    Power,
    Temperature,
}

impl Key {
    /// The field most rows have, memory first (it is the steadiest from poll to poll).
    fn of(rows: &[Probe]) -> Option<Key> {
        [Key::Mem, Key::Power, Key::Temperature]
            .into_iter()
            .find(|k| rows.iter().any(|r| k.value(r).is_some()))
    }

    fn name(self) -> &'static str {
        match self {
            Key::Mem => "memory.used",
            Key::Power => "power.draw",
            Key::Temperature => "temperature.gpu",
        }
    }

    /// The row's value and how far another row's may be from it and still be alike.
    fn value(self, r: &Probe) -> Option<(f64, f64)> {
        match self {
            Key::Mem => r.mem_mib.map(|m| (m, m * 0.005 + 2.0)),
            Key::Power => r.power_w.map(|w| (w, w * 0.1 + 5.0)),
            Key::Temperature => r.temperature_c.map(|c| (c, 1.5)),
        }
    }

    /// Whether two rows are alike by this field; `None` when either lacks it.
    fn alike(self, a: &Probe, b: &Probe) -> Option<bool> {
        let ((x, tx), (y, ty)) = (self.value(a)?, self.value(b)?);
        Some((x - y).abs() <= tx.max(ty))
    }
}

/// Whether two rows are alike by the first field both have (memory, power, temperature).
fn alike_any(a: &Probe, b: &Probe) -> Option<bool> {
    [Key::Mem, Key::Power, Key::Temperature]
        .into_iter()
        .find_map(|k| k.alike(a, b))
}

/// Share of row pairs `lag` rows apart that are alike by `key` (0 when there are none).
fn alike_at_lag(rows: &[Probe], key: Key, lag: usize) -> f64 {
    let (mut same, mut all) = (0u64, 0u64);
    for w in 0..rows.len().saturating_sub(lag) {
        if let Some(a) = key.alike(&rows[w], &rows[w + lag]) {
            all += 1;
            same += u64::from(a);
        }
    }
    if all == 0 {
        0.0
    } else {
        same as f64 / all as f64
    }
}

/// The period the values repeat with: the smallest lag up to `max_lag` at which at least 80 % of
/// row pairs are alike and that is clearly (25 points) more alike than every shorter lag; with
/// that share and the best share below it.
fn value_period(rows: &[Probe], key: Key, max_lag: usize) -> Option<(usize, f64, f64)> {
    let mut best_below = 0.0f64;
    for lag in 1..=max_lag {
        let m = alike_at_lag(rows, key, lag);
        if m >= AGREE && m >= best_below + 0.25 {
            return Some((lag, m, best_below));
        }
        best_below = best_below.max(m);
    }
    None
}

/// The period the names repeat with, when it is over 1: the smallest lag up to `max_lag` at
/// which the names of nearly every row pair agree, over at least two whole runs. `None` when
/// the rows have no names or all name one model (nothing to tell places apart by).
fn name_period(rows: &[Probe], max_lag: usize) -> Option<usize> {
    let named = rows.iter().filter(|r| r.name.is_some()).count();
    if named * 10 < rows.len() * 9 {
        return None;
    }
    let lag = (1..=max_lag.min(rows.len() / 2)).find(|&lag| {
        let (mut same, mut all) = (0u64, 0u64);
        for w in 0..rows.len() - lag {
            if let (Some(a), Some(b)) = (rows[w].name, rows[w + lag].name) {
                all += 1;
                same += u64::from(a == b);
            }
        }
        all > 0 && same as f64 >= NAMES_AGREE * all as f64
    })?;
    (lag > 1).then_some(lag)
}

/// Follows a [`Layout::Bursts`] log row by row: which poll each row is in and its place there.
///
/// A row within `gap_s` (half the modal wait between polls) of the one before joins the poll
/// while it holds fewer than `n` rows; a full poll starts the next (so polls never merge). After
/// a longer gap with room left, the row is either a late row of this poll (nvidia-smi stalled
/// mid-poll) or the first of the next (a row went missing): its values decide when they are
/// alike the last row at its place and not the last of the poll's first GPU (it stays), or the
/// other way round (it starts the next poll); else it stays when the gap is under 90 % of the
/// modal wait.
#[derive(Debug, Clone, Default)]
pub(crate) struct PollCursor {
    started: bool,
    /// Rows in the current poll.
    pos: u32,
    last_ts: Option<f64>,
    /// The latest row seen at each place in a poll.
    latest: Vec<Probe>,
    /// Rows that found their poll full though they came within `gap_s` of the row before.
    overfull: u64,
}

impl PollCursor {
    /// The place of row `p` in its poll (its GPU), and whether it starts a poll.
    pub(crate) fn place(&mut self, n: u32, gap_s: f64, p: &Probe) -> (u32, bool) {
        let n = n.max(1);
        let near = match (p.ts, self.last_ts) {
            (Some(a), Some(b)) => (a - b).abs() <= gap_s,
            _ => false,
        };
        let new = if !self.started {
            true
        } else if self.pos >= n {
            self.overfull += u64::from(near);
            true
        } else if near {
            false
        } else {
            let here = self
                .latest
                .get(self.pos as usize)
                .and_then(|q| alike_any(p, q));
            let first = self.latest.first().and_then(|q| alike_any(p, q));
            match (here, first) {
                (Some(true), Some(false)) => false,
                (Some(false), Some(true)) => true,
                // Values alike or missing: a gap under 90 % of the modal wait stays.
                _ => {
                    !matches!((p.ts, self.last_ts), (Some(a), Some(b)) if (a - b).abs() < LATE * gap_s)
                }
            }
        };
        if new {
            self.pos = 0;
        }
        let i = self.pos;
        self.pos += 1;
        if self.latest.len() <= i as usize {
            self.latest.resize(i as usize + 1, Probe::default());
        }
        self.latest[i as usize] = *p;
        self.last_ts = p.ts.or(self.last_ts);
        self.started = true;
        (i, new)
    }
}

/// The layout of rows without a GPU column, and a sentence for people on how it was found.
pub(crate) fn detect(rows: &[Probe]) -> (Layout, String) {
    let with_ts = rows.iter().filter(|r| r.ts.is_some()).count();
    let r = if !rows.is_empty() && with_ts * 10 >= rows.len() * 9 {
        bursts(rows)
    } else {
        cycle(rows)
    };
    match r {
        Ok(found) => found,
        Err(why) => (
            Layout::Pooled,
            format!(
                "This log has no index, uuid or pci.bus_id column and how many GPUs it holds \
                 cannot be told ({why}): every row is read as one pooled series. Log with \
                 `index` in --query-gpu to have each GPU judged."
            ),
        ),
    }
}

/// The histogram bin of a row gap (log scale; gaps under 1.5 ms share the lowest bins).
fn bin(g: f64) -> i32 {
    let b = ((g.abs() + TS_EPS_S).log10() * BINS_PER_DECADE).floor();
    if b.is_finite() {
        b.clamp(-40.0, 200.0) as i32
    } else {
        200
    }
}

/// The clusters the row gaps form on a log scale.
struct Clusters {
    /// The modal gap (median of the gaps around the highest peak).
    main_s: f64,
    /// Share of the gaps within 2× of the modal one.
    main_share: f64,
    /// The two peaks at least 4× apart, lower first, as their modal gaps: the gap between rows
    /// of a poll and the wait between polls.
    pair: Option<(f64, f64)>,
}

fn clusters(gaps: &[f64]) -> Clusters {
    let bins: Vec<i32> = gaps.iter().map(|&g| bin(g)).collect();
    let lo = bins.iter().copied().min().unwrap_or(0);
    let hi = bins.iter().copied().max().unwrap_or(0);
    let mut count = vec![0usize; (hi - lo + 1) as usize];
    for &b in &bins {
        count[(b - lo) as usize] += 1;
    }
    // Counts over three neighbouring bins (±26 %), so a peak split across a bin edge is whole.
    let smooth = |b: i32| -> usize {
        (b - 1..=b + 1)
            .filter(|x| (lo..=hi).contains(x))
            .map(|x| count[(x - lo) as usize])
            .sum()
    };
    let peak = |range: &mut dyn Iterator<Item = i32>| -> Option<i32> {
        range
            .map(|b| (smooth(b), b))
            .filter(|&(c, _)| c > 0)
            .max_by_key(|&(c, b)| (c, std::cmp::Reverse(b)))
            .map(|(_, b)| b)
    };
    let modal = |b: i32| -> f64 {
        let mut v: Vec<f64> = gaps
            .iter()
            .zip(&bins)
            .filter(|(_, &x)| (x - b).abs() <= 1)
            .map(|(g, _)| g.abs())
            .collect();
        crate::stats::upper_median(&mut v).unwrap_or(0.0)
    };
    let b1 = peak(&mut (lo..=hi)).unwrap_or(lo);
    let near = bins.iter().filter(|&&b| (b - b1).abs() <= 3).count();
    let b2 = peak(&mut (lo..=hi).filter(|b| (b - b1).abs() >= CLUSTERS_APART));
    // A second peak counts when a valley at most half its height lies between the two, and the
    // lower could be rows of one poll (a single GPU's readings with pauses every so many are
    // not).
    let pair = b2
        .filter(|&b2| {
            let (l, h) = (b1.min(b2), b1.max(b2));
            let valley = (l + 1..h).map(smooth).min().unwrap_or(0);
            valley * 2 <= smooth(b2)
        })
        .map(|b2| (modal(b1.min(b2)), modal(b1.max(b2))))
        .filter(|&(within, _)| within <= MAX_IN_POLL_S);
    Clusters {
        main_s: modal(b1),
        main_share: near as f64 / gaps.len() as f64,
        pair,
    }
}

/// N from the polls the timestamps group rows into, checked against the values.
fn bursts(rows: &[Probe]) -> Result<(Layout, String), String> {
    let rows: Vec<Probe> = rows
        .iter()
        .filter(|r| r.ts.is_some_and(f64::is_finite))
        .copied()
        .collect();
    let gaps: Vec<f64> = rows
        .windows(2)
        .filter_map(|w| Some((w[1].ts? - w[0].ts?).abs()))
        .collect();
    if gaps.is_empty() {
        return Ok((
            Layout::Bursts { n: 1, gap_s: 0.0 },
            one_gpu_note("a single row"),
        ));
    }
    if gaps.iter().all(|g| *g < TS_EPS_S) {
        return Err("every row has the same timestamp".into());
    }
    let key = Key::of(&rows);
    let c = clusters(&gaps);
    if let Some((_, between_s)) = c.pair {
        // Rows in bursts of no one size are not one GPU either, unless the bursts are cut by the
        // few long waits of an evenly spaced log (then bursts must also come more than twice).
        let evenly = c.main_share >= AGREE;
        match polls(&rows, key, between_s) {
            Ok((found, polls)) if polls >= 3 || !evenly => return Ok(found),
            Err(why) if !evenly => return Err(why),
            _ => {}
        }
    }
    // Evenly spaced rows: each row is a reading of its own, unless the values repeat with a
    // longer period (GPUs whose rows the timing does not tell apart).
    if let Some(key) = key {
        let max_lag = (rows.len() / 3).min(MAX_GPUS as usize);
        if let Some((lag, m, _)) = value_period(&rows, key, max_lag).filter(|p| p.0 > 1) {
            return Err(format!(
                "rows come about {} apart as from one GPU, yet {} repeats every {lag} rows \
                 ({:.0}% of rows alike the {lag}th next)",
                seconds(c.main_s),
                key.name(),
                m * 100.0
            ));
        }
    }
    let min = gaps.iter().fold(f64::INFINITY, |a, g| a.min(*g));
    Ok((
        Layout::Bursts {
            n: 1,
            gap_s: min / 2.0,
        },
        one_gpu_note(&format!(
            "rows evenly spaced, {} apart in {:.0}% of gaps",
            seconds(c.main_s),
            c.main_share * 100.0
        )),
    ))
}

/// Rows grouped into polls by the wait between them (`between_s`, the modal one): N, the modal
/// poll size, when polls of that size dominate and the values agree.
/// Also gives how many polls (but the first and last) the count rests on.
fn polls(
    rows: &[Probe],
    key: Option<Key>,
    between_s: f64,
) -> Result<((Layout, String), usize), String> {
    // Half the modal wait: above every usual in-poll gap, below nearly every wait.
    let gap_s = between_s / 2.0;
    let mut sizes = vec![1u32];
    for w in rows.windows(2) {
        let g = match (w[0].ts, w[1].ts) {
            (Some(a), Some(b)) => (b - a).abs(),
            _ => f64::INFINITY,
        };
        if g > gap_s {
            sizes.push(1);
        } else if let Some(last) = sizes.last_mut() {
            *last += 1;
        }
    }
    let (n, _) = mode(inner(&sizes));
    if n > MAX_GPUS {
        return Err(format!(
            "bursts of {n} rows within {} of each other, more than {MAX_GPUS} GPUs",
            seconds(gap_s)
        ));
    }
    // The same rows placed as the reader will place them: polls of at most n.
    let mut cur = PollCursor::default();
    let mut groups: Vec<Vec<Probe>> = Vec::new();
    for r in rows {
        let (_, new) = cur.place(n, gap_s, r);
        if new {
            groups.push(Vec::new());
        }
        if let Some(g) = groups.last_mut() {
            g.push(*r);
        }
    }
    let placed: Vec<u32> = groups.iter().map(|g| g.len() as u32).collect();
    let polls = inner(&placed);
    let full = polls.iter().filter(|&&s| s == n).count();
    let share = full as f64 / polls.len().max(1) as f64;
    let overfull = cur.overfull as f64 / polls.len().max(1) as f64;
    if share < AGREE || overfull > 1.0 - AGREE {
        let raw = inner(&sizes);
        let (lo, hi) = (raw.iter().min(), raw.iter().max());
        return Err(format!(
            "bursts of {}-{} rows within {} of each other, {} between bursts, no one size in \
             {:.0}% of them",
            lo.unwrap_or(&0),
            hi.unwrap_or(&0),
            seconds(gap_s),
            seconds(between_s),
            AGREE * 100.0
        ));
    }
    let check = key.map(|k| values_check(rows, &groups, k, n));
    if let Some(Err(why)) = &check {
        return Err(why.clone());
    }
    let count = format!(
        "{:.0}% of {} polls hold {n} row{}",
        share * 100.0,
        thousands(polls.len()),
        if n == 1 { "" } else { "s" }
    );
    let note = if n == 1 {
        one_gpu_note(&format!(
            "one row per poll, {} apart; {count}",
            seconds(between_s)
        ))
    } else {
        let mut spans: Vec<f64> = groups
            .iter()
            .filter(|g| g.len() as u32 == n)
            .filter_map(|g| Some((g.last()?.ts? - g.first()?.ts?).abs()))
            .collect();
        let span = crate::stats::upper_median(&mut spans).unwrap_or(0.0);
        let values = match check {
            Some(Ok(s)) => format!(" {s}."),
            _ => " No memory, power or temperature column to check the count by.".into(),
        };
        format!(
            "This log has no index column: {n} GPUs were found from the readings (rows come in \
             polls of {n} within {} of each other, one row per GPU in order, the modal wait \
             between polls {}; {count}).{values} GPU k is the k-th row of a poll.",
            seconds(span),
            seconds(between_s),
        )
    };
    Ok(((Layout::Bursts { n, gap_s }, note), polls.len()))
}

/// Checks a count of `n` GPUs against the values: they must not repeat with a period that does
/// not divide `n` (rows of different GPUs read as one). Says how far the values bear the count
/// out: how often the two most different places in a poll stay apart, and how often each place
/// stays alike from one poll to the next.
fn values_check(rows: &[Probe], polls: &[Vec<Probe>], key: Key, n: u32) -> Result<String, String> {
    let n = n as usize;
    let max_lag = (2 * n).max(8).min(rows.len() / 3).min(MAX_GPUS as usize);
    if let Some((lag, m, _)) = value_period(rows, key, max_lag) {
        if n % lag != 0 {
            return Err(format!(
                "the timing gives polls of {n} rows, yet {} repeats every {lag} rows ({:.0}% of \
                 rows alike the {lag}th next)",
                key.name(),
                m * 100.0
            ));
        }
    }
    let full: Vec<&Vec<Probe>> = polls.iter().filter(|g| g.len() == n).collect();
    // Each place from one full poll to the next.
    let (mut same, mut pairs) = (0usize, 0usize);
    for w in full.windows(2) {
        for (x, y) in w[0].iter().zip(w[1].iter()) {
            if let Some(a) = key.alike(x, y) {
                pairs += 1;
                same += usize::from(a);
            }
        }
    }
    // The two places whose values stay apart in most polls.
    let mut best: Option<(usize, usize, f64)> = None;
    for p in 0..n {
        for q in p + 1..n {
            let (mut apart, mut all) = (0usize, 0usize);
            for g in &full {
                if let Some(a) = key.alike(&g[p], &g[q]) {
                    all += 1;
                    apart += usize::from(!a);
                }
            }
            if all > 0 {
                let s = apart as f64 / all as f64;
                if best.is_none_or(|b| s > b.2) {
                    best = Some((p, q, s));
                }
            }
        }
    }
    let steady = same as f64 / pairs.max(1) as f64;
    let what = key.name();
    Ok(match best {
        Some((p, q, s)) if s >= 0.5 => format!(
            "{what} at places {p} and {q} in a poll stays apart in {:.0}% of polls, and each \
             place's stays alike from one poll to the next in {:.0}%",
            s * 100.0,
            steady * 100.0
        ),
        _ if pairs > 0 && n > 1 => format!(
            "The GPUs' {what} is alike ({:.0}% of successive polls alike at each place), so the \
             count rests on the timing alone",
            steady * 100.0
        ),
        _ => format!("{what} does not tell the GPUs apart; the count rests on the timing alone"),
    })
}

/// The polls but the first and last, which the start and end of the log may cut.
fn inner(sizes: &[u32]) -> &[u32] {
    if sizes.len() >= 3 {
        &sizes[1..sizes.len() - 1]
    } else {
        sizes
    }
}

fn one_gpu_note(how: &str) -> String {
    format!("This log has no index column: it was read as one GPU ({how}).")
}

/// N from the period the values repeat with, for rows without timestamps.
fn cycle(rows: &[Probe]) -> Result<(Layout, String), String> {
    let max_lag = (rows.len() / 3).min(MAX_GPUS as usize);
    if let Some(p) = name_period(rows, max_lag) {
        return Ok(by_names(rows, p, max_lag));
    }
    let Some(key) = Key::of(rows) else {
        return Err("no timestamps, and no memory, power or temperature to tell rows apart".into());
    };
    let what = key.name();
    let Some((lag, m, best_below)) = value_period(rows, key, max_lag) else {
        return Err(format!(
            "no timestamps, and {what} repeats with no clear period over {} rows",
            rows.len()
        ));
    };
    let note = if lag == 1 {
        format!(
            "This log has no index or timestamp column: it was read as one GPU (consecutive \
             rows have the same {what} in {:.0}% of rows; GPUs that log the same values cannot \
             be told apart without an index).",
            m * 100.0
        )
    } else {
        format!(
            "This log has no index or timestamp column: {lag} GPUs were found from the \
             repeating pattern of {what} (every {lag}th row alike in {:.0}% of rows, nearer rows \
             at most {:.0}%). Row k is GPU k mod {lag}.",
            m * 100.0,
            best_below * 100.0
        )
    };
    Ok((Layout::Cycle { n: lag as u32 }, note))
}

/// The layout of rows without timestamps whose names repeat every `p` rows: a poll holds a
/// multiple of `p` GPUs, `p` unless the values repeat with a longer multiple of it (two A100s
/// and two V100s polled A, V, A, V).
fn by_names(rows: &[Probe], p: usize, max_lag: usize) -> (Layout, String) {
    let longer = Key::of(rows)
        .and_then(|key| value_period(rows, key, max_lag).map(|v| (key, v)))
        .filter(|&(_, (q, _, _))| q > p && q % p == 0);
    let note = match longer {
        Some((key, (q, m, _))) => format!(
            "This log has no index or timestamp column: the GPU names repeat every {p} rows and \
             {} every {q} (alike in {:.0}% of rows), so a poll holds {q} GPUs; row k is GPU k \
             mod {q}.",
            key.name(),
            m * 100.0
        ),
        None => format!(
            "This log has no index or timestamp column: the GPU names repeat every {p} rows, so \
             a poll holds {p} GPUs, told apart by their place in it; row k is GPU k mod {p}."
        ),
    };
    let n = longer.map_or(p, |(_, (q, _, _))| q);
    (Layout::Cycle { n: n as u32 }, note)
}

fn mode(v: &[u32]) -> (u32, usize) {
    let mut counts: std::collections::BTreeMap<u32, usize> = Default::default();
    for &x in v {
        *counts.entry(x).or_default() += 1;
    }
    counts
        .into_iter()
        .max_by_key(|&(k, c)| (c, std::cmp::Reverse(k)))
        .unwrap_or((1, 0))
}

/// A count with thousands separated by commas (3,000).
fn thousands(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

fn seconds(s: f64) -> String {
    if s < 1.0 {
        format!("{:.0} ms", (s * 1000.0).max(1.0))
    } else {
        format!("{s:.1} s")
    }
}

/// Timing modelled on real `nvidia-smi -lms 100` logs, for tests here and in the reader.
#[cfg(test)]
pub(crate) mod jitter {
    /// A small deterministic generator (xorshift), so the logs are the same on every run.
    pub(crate) struct Rng(u64);

    impl Rng {
        pub(crate) fn new(seed: u64) -> Self {
            Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
        }

        /// Uniform in [0, 1).
        pub(crate) fn unit(&mut self) -> f64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 >> 11) as f64 / (1u64 << 53) as f64
        }

        pub(crate) fn range(&mut self, lo: f64, hi: f64) -> f64 {
            lo + (hi - lo) * self.unit()
        }
    }

    /// The millisecond timestamps of `polls` polls of `n` GPUs `every_ms` apart, as real logs
    /// have them: rows of a poll 0-4 ms apart, but `late` of the in-poll gaps (1-3 % in real
    /// logs) 5-90 ms; waits between polls `every_ms`, 2 % of them 2-15 times that (200-1,500 ms
    /// at 100 ms).
    pub(crate) fn stamps_ms(n: u32, polls: u32, every_ms: f64, late: f64, seed: u64) -> Vec<u64> {
        let mut rng = Rng::new(seed);
        let mut t = 1000.0f64;
        let mut out = Vec::new();
        for _ in 0..polls {
            for g in 0..n {
                if g > 0 {
                    t += if rng.unit() < late {
                        rng.range(5.0, 90.0)
                    } else {
                        rng.range(0.0, 4.0)
                    };
                }
                out.push(t.round() as u64);
            }
            t += if rng.unit() < 0.02 {
                every_ms * rng.range(2.0, 15.0)
            } else {
                every_ms + rng.range(-2.0, 3.0)
            };
        }
        out
    }

    /// memory.used of GPU `g` at poll `k`: busy GPUs hold about 30 GB (a little apart, and
    /// moving now and then), idle ones 4 MiB.
    pub(crate) fn mem_mib(g: u32, k: u32, busy: &[u32], rng: &mut Rng) -> f64 {
        if busy.contains(&g) {
            30000.0
                + 400.0 * g as f64
                + if rng.unit() < 0.05 { 200.0 } else { 0.0 }
                + (k % 3) as f64
        } else {
            4.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Rows of a burst log: `n` GPUs, readings `every_s` apart, rows 3 ms apart in a burst.
    fn burst_rows(n: u32, readings: u32, every_s: f64) -> Vec<Probe> {
        (0..readings)
            .flat_map(|k| {
                (0..n).map(move |g| Probe {
                    ts: Some(k as f64 * every_s + g as f64 * 0.003),
                    mem_mib: Some(4.0 + 1000.0 * g as f64),
                    ..Default::default()
                })
            })
            .collect()
    }

    #[test]
    fn bursts_of_two_and_eight_at_100_ms() {
        assert!(matches!(
            detect(&burst_rows(2, 100, 0.1)).0,
            Layout::Bursts { n: 2, .. }
        ));
        let (l, note) = detect(&burst_rows(8, 100, 0.1));
        assert!(matches!(l, Layout::Bursts { n: 8, .. }), "{l:?}");
        assert!(note.contains("8 GPUs were found"), "{note}");
        assert!(matches!(
            detect(&burst_rows(1, 100, 0.1)).0,
            Layout::Bursts { n: 1, .. }
        ));
    }

    #[test]
    fn same_millisecond_rows_and_whole_second_stamps() {
        // Timestamps with whole seconds: the rows of a reading share one.
        let rows: Vec<Probe> = (0..60)
            .map(|k| Probe {
                ts: Some((k / 4) as f64),
                ..Default::default()
            })
            .collect();
        assert!(matches!(detect(&rows).0, Layout::Bursts { n: 4, .. }));
        let same: Vec<Probe> = (0..10)
            .map(|_| Probe {
                ts: Some(5.0),
                ..Default::default()
            })
            .collect();
        assert_eq!(detect(&same).0, Layout::Pooled);
    }

    #[test]
    fn ragged_bursts_are_pooled() {
        let mut ts = Vec::new();
        let mut t = 0.0;
        for k in 0..50u32 {
            for j in 0..(1 + k % 5) {
                ts.push(Probe {
                    ts: Some(t + j as f64 * 0.002),
                    ..Default::default()
                });
            }
            t += 1.0;
        }
        let (l, note) = detect(&ts);
        assert_eq!(l, Layout::Pooled);
        assert!(note.contains("cannot be told"), "{note}");
    }

    #[test]
    fn cycle_from_memory_without_timestamps() {
        let rows: Vec<Probe> = (0..80)
            .map(|k| Probe {
                mem_mib: Some(if k % 2 == 0 {
                    30000.0 + (k % 3) as f64
                } else {
                    4.0
                }),
                ..Default::default()
            })
            .collect();
        let (l, note) = detect(&rows);
        assert_eq!(l, Layout::Cycle { n: 2 }, "{note}");
        // 8 GPUs, 6 of them idle alike.
        let rows: Vec<Probe> = (0..400)
            .map(|k| Probe {
                mem_mib: Some(match k % 8 {
                    0 => 20000.0,
                    1 => 21000.0,
                    _ => 4.0,
                }),
                ..Default::default()
            })
            .collect();
        assert_eq!(detect(&rows).0, Layout::Cycle { n: 8 });
        // Nothing to tell rows apart by.
        let rows = vec![Probe::default(); 20];
        assert_eq!(detect(&rows).0, Layout::Pooled);
    }

    /// The rows of a DGX Station A100 polled 7 times without timestamps or index (four A100s and
    /// the 'DGX Display' fourth in each poll): one A100 runs a kernel from the third poll, the
    /// others hold an equal 3 MiB, so memory alone repeats with no clear period.
    fn dgx_station_rows() -> Vec<Probe> {
        let mut rows = Vec::new();
        for poll in 0..7 {
            for place in 0..5u32 {
                let mem = match (poll, place) {
                    (0, 3) => 1.0,
                    (0, _) => 0.0,
                    (1, 0) => 15.0,
                    (_, 0) => 419.0,
                    _ => 3.0,
                };
                rows.push(Probe {
                    mem_mib: Some(mem),
                    name: Some(if place == 3 { 2 } else { 1 }),
                    ..Default::default()
                });
            }
        }
        rows
    }

    #[test]
    fn the_repeating_run_of_names_is_a_poll() {
        let (l, note) = detect(&dgx_station_rows());
        assert_eq!(l, Layout::Cycle { n: 5 }, "{note}");
        assert!(note.contains("names repeat every 5 rows"), "{note}");
        // One model everywhere: names say nothing, memory decides as before.
        let mut rows: Vec<Probe> = dgx_station_rows();
        rows.iter_mut().for_each(|r| r.name = Some(1));
        assert_ne!(detect(&rows).0, Layout::Cycle { n: 5 });
        // Names A, B, A, B on four GPUs whose memory repeats every 4: a poll of 4.
        let rows: Vec<Probe> = (0..80)
            .map(|k| Probe {
                mem_mib: Some([20000.0, 4.0, 9000.0, 4.0][k % 4]),
                name: Some((k % 2) as u64),
                ..Default::default()
            })
            .collect();
        assert_eq!(detect(&rows).0, Layout::Cycle { n: 4 });
    }

    /// Rows of a jittered log: `n` GPUs polled every 100 ms, `busy` at 30 GB, the rest idle.
    fn jittered_rows(n: u32, polls: u32, busy: &[u32], late: f64, seed: u64) -> Vec<Probe> {
        let ms = jitter::stamps_ms(n, polls, 100.0, late, seed);
        let mut rng = jitter::Rng::new(seed + 1);
        ms.iter()
            .enumerate()
            .map(|(i, &t)| {
                let (k, g) = (i as u32 / n, i as u32 % n);
                Probe {
                    ts: Some(t as f64 / 1000.0),
                    mem_mib: Some(jitter::mem_mib(g, k, busy, &mut rng)),
                    ..Default::default()
                }
            })
            .collect()
    }

    #[test]
    fn jittered_logs_of_two_and_eight_gpus() {
        for seed in 0..5 {
            // Two GPUs, one idle at 4 MiB: the case that was read as one GPU 64 ms apart.
            let rows = jittered_rows(2, 2000, &[0], 0.03, seed);
            let (l, note) = detect(&rows);
            assert!(matches!(l, Layout::Bursts { n: 2, .. }), "{l:?} {note}");
            assert!(note.contains("2 GPUs were found"), "{note}");
            assert!(note.contains("polls hold 2 rows"), "{note}");
            assert!(note.contains("memory.used at places 0 and 1"), "{note}");
            // Eight GPUs, seven busy: 7 in-poll gaps per poll, so 1 poll in 5 has a late row.
            let rows = jittered_rows(8, 500, &[0, 1, 2, 3, 4, 5, 6], 0.03, seed);
            let (l, note) = detect(&rows);
            assert!(matches!(l, Layout::Bursts { n: 8, .. }), "{l:?} {note}");
            // One GPU, waits jittered the same way: one GPU.
            let rows = jittered_rows(1, 2000, &[0], 0.03, seed);
            let (l, note) = detect(&rows);
            assert!(matches!(l, Layout::Bursts { n: 1, .. }), "{l:?} {note}");
        }
    }

    #[test]
    fn the_reader_places_late_rows_of_a_poll_by_their_values() {
        let rows = jittered_rows(2, 2000, &[0], 0.03, 7);
        let Layout::Bursts { n, gap_s } = detect(&rows).0 else {
            panic!("not bursts")
        };
        let mut cur = PollCursor::default();
        for (i, r) in rows.iter().enumerate() {
            let (g, _) = cur.place(n, gap_s, r);
            assert_eq!(g, i as u32 % 2, "row {i}");
        }
    }

    #[test]
    fn eight_idle_gpus_alike_rest_on_timing() {
        let rows = jittered_rows(8, 300, &[], 0.01, 3);
        let (l, note) = detect(&rows);
        assert!(matches!(l, Layout::Bursts { n: 8, .. }), "{l:?} {note}");
        assert!(note.contains("rests on the timing alone"), "{note}");
    }

    #[test]
    fn whole_second_stamps_with_polls_across_a_second() {
        // `-l 1` with whole-second stamps: a poll's rows share a second, but a poll starting
        // late in a second spills into the next (rows 999 ms and 1,002 ms read 0 and 1).
        let mut rng = jitter::Rng::new(11);
        let mut rows = Vec::new();
        let mut t = 0.0f64;
        for k in 0..600u32 {
            for g in 0..2u32 {
                rows.push(Probe {
                    ts: Some(t.floor()),
                    mem_mib: Some(jitter::mem_mib(g, k, &[1], &mut rng)),
                    ..Default::default()
                });
                t += 0.003;
            }
            t += 1.0 - 0.006 + rng.range(0.0, 0.05);
        }
        let (l, note) = detect(&rows);
        let Layout::Bursts { n: 2, gap_s } = l else {
            panic!("{l:?} {note}")
        };
        let mut cur = PollCursor::default();
        for (i, r) in rows.iter().enumerate() {
            assert_eq!(cur.place(2, gap_s, r).0, i as u32 % 2, "row {i}");
        }
    }

    #[test]
    fn one_gpu_with_a_pause_every_32_readings_is_one_gpu() {
        // A real 1 s log of one RTX 4090: every 32nd gap is ~4 s (an evaluation between
        // batches), memory moving by hundreds of MiB. Not 32 GPUs polled every 4 s.
        let mut rng = jitter::Rng::new(5);
        let mut t = 0.0;
        let rows: Vec<Probe> = (0..2600)
            .map(|k| {
                t += if k % 32 == 31 { 3.93 } else { 1.003 };
                Probe {
                    ts: Some(t),
                    mem_mib: Some(17400.0 + rng.range(0.0, 700.0)),
                    ..Default::default()
                }
            })
            .collect();
        let (l, note) = detect(&rows);
        assert!(matches!(l, Layout::Bursts { n: 1, .. }), "{l:?} {note}");
    }

    #[test]
    fn evenly_spaced_rows_whose_values_alternate_are_not_one_gpu() {
        // Timing that cannot tell (rows 50 ms apart) with memory that alternates: not one GPU.
        let rows: Vec<Probe> = (0..400)
            .map(|k| Probe {
                ts: Some(k as f64 * 0.05),
                mem_mib: Some(if k % 2 == 0 { 30000.0 } else { 4.0 }),
                ..Default::default()
            })
            .collect();
        let (l, note) = detect(&rows);
        assert_eq!(l, Layout::Pooled, "{note}");
        assert!(note.contains("repeats every 2 rows"), "{note}");
    }

    proptest! {
        #[test]
        fn burst_count_is_found(n in 1u32..=16, readings in 8u32..60, every in 0.1f64..5.0,
                                jitter in 0.0f64..0.002) {
            let rows: Vec<Probe> = (0..readings).flat_map(|k| (0..n).map(move |g| Probe {
                ts: Some(k as f64 * every + g as f64 * (0.001 + jitter)),
                ..Default::default()
            })).collect();
            let (l, _) = detect(&rows);
            prop_assert!(matches!(l, Layout::Bursts { n: m, .. } if m == n), "{:?}", l);
        }

        #[test]
        fn burst_count_is_found_through_late_rows(n in 1u32..=16, polls in 40u32..300,
                                                  every_ms in 100f64..3000.0, late in 0.0f64..0.03,
                                                  busy in proptest::collection::vec(0u32..16, 0..16),
                                                  seed in 0u64..1000) {
            let ms = jitter::stamps_ms(n, polls, every_ms, late, seed);
            let mut rng = jitter::Rng::new(seed);
            let rows: Vec<Probe> = ms.iter().enumerate().map(|(i, &t)| Probe {
                ts: Some(t as f64 / 1000.0),
                mem_mib: Some(jitter::mem_mib(i as u32 % n, i as u32 / n, &busy, &mut rng)),
                ..Default::default()
            }).collect();
            let (l, note) = detect(&rows);
            prop_assert!(matches!(l, Layout::Bursts { n: m, .. } if m == n), "{:?} {}", l, note);
        }

        #[test]
        fn detection_never_panics_and_stays_in_bounds(
            rows in proptest::collection::vec(
                (proptest::option::of(0.0f64..1e4), proptest::option::of(0.0f64..1e5)), 0..300)
        ) {
            let rows: Vec<Probe> = rows.into_iter().map(|(ts, mem)| Probe {
                ts, mem_mib: mem, ..Default::default()
            }).collect();
            match detect(&rows).0 {
                Layout::Bursts { n, .. } | Layout::Cycle { n } => prop_assert!((1..=MAX_GPUS).contains(&n)),
                Layout::Pooled | Layout::Column => {}
            }
        }
    }
}
