//! How many GPUs an nvidia-smi CSV log without an `index`, `uuid` or `pci.bus_id` column holds,
//! found from the readings themselves.
//!
//! `nvidia-smi --query-gpu=timestamp,utilization.gpu,... --format=csv -lms 100` on a machine with
//! N GPUs writes N rows per reading, one per GPU in order, a few milliseconds apart, then waits
//! for the interval. With timestamps, N is the size of those bursts; without, it is the period
//! of the pattern memory.used (else power, temperature) repeats with. When neither tells, the
//! reader refuses to guess and keeps one pooled series.

/// How rows map to GPUs.
#[derive(Debug, Clone, PartialEq)]
pub enum Layout {
    /// Each row names its GPU (an index, uuid or pci.bus_id column).
    Column,
    /// Rows come in bursts of `n`, one per GPU in order; a gap above `gap_s` starts the next.
    Bursts { n: u32, gap_s: f64 },
    /// No timestamps: row k is GPU k mod `n`.
    Cycle { n: u32 },
    /// Cannot be told: every row is read as one pooled series.
    Pooled,
}

/// What detection looks at in one row.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Probe {
    /// Seconds (any origin).
    pub ts: Option<f64>,
    pub mem_mib: Option<f64>,
    pub power_w: Option<f64>,
    pub temperature_c: Option<f64>,
}

/// The most GPUs one log row set is read as (a node has at most a few dozen).
pub const MAX_GPUS: u32 = 64;
/// Two timestamps closer than this are the same instant (nvidia-smi writes milliseconds).
const TS_EPS_S: f64 = 0.0015;
/// Share of bursts (or of row pairs) that must agree before a count is believed.
const AGREE: f64 = 0.8;

/// The layout of rows without a GPU column, and a sentence for people on how it was found.
pub(crate) fn detect(rows: &[Probe]) -> (Layout, String) {
    let ts: Vec<f64> = rows.iter().filter_map(|r| r.ts).collect();
    let r = if !rows.is_empty() && ts.len() * 10 >= rows.len() * 9 {
        bursts(&ts)
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

/// The gap between the row gaps inside a poll and the gaps between polls: the geometric middle
/// of the largest jump in the sorted gaps, when that jump is at least 4×.
fn split_gap(gaps: &[f64]) -> Option<f64> {
    let mut g: Vec<f64> = gaps.iter().map(|x| x.abs() + TS_EPS_S).collect();
    g.sort_by(f64::total_cmp);
    let (ratio, at) = g
        .windows(2)
        .map(|w| (w[1] / w[0], (w[0] * w[1]).sqrt()))
        .fold((1.0, 0.0), |a, b| if b.0 > a.0 { b } else { a });
    (ratio >= 4.0).then_some(at - TS_EPS_S)
}

/// N from the rows per timestamp burst.
fn bursts(ts: &[f64]) -> Result<(Layout, String), String> {
    let gaps: Vec<f64> = ts.windows(2).map(|w| w[1] - w[0]).collect();
    if gaps.is_empty() {
        return Ok((
            Layout::Bursts { n: 1, gap_s: 0.0 },
            one_gpu_note("a single row"),
        ));
    }
    let Some(gap_s) = split_gap(&gaps) else {
        if gaps.iter().all(|g| g.abs() < TS_EPS_S) {
            return Err("every row has the same timestamp".into());
        }
        // Evenly spaced rows: each row is a reading of its own.
        let min = gaps.iter().fold(f64::INFINITY, |a, g| a.min(g.abs()));
        let note = one_gpu_note(&format!(
            "rows evenly spaced, {} apart",
            seconds(abs_upper_median(&gaps))
        ));
        return Ok((
            Layout::Bursts {
                n: 1,
                gap_s: min / 2.0,
            },
            note,
        ));
    };
    let mut sizes = vec![1u32];
    for g in &gaps {
        if g.abs() > gap_s {
            sizes.push(1);
        } else if let Some(last) = sizes.last_mut() {
            *last += 1;
        }
    }
    // The first and last bursts may be cut by the start and end of the log.
    let inner = if sizes.len() >= 3 {
        &sizes[1..sizes.len() - 1]
    } else {
        &sizes[..]
    };
    let (n, count) = mode(inner);
    let share = count as f64 / inner.len() as f64;
    if share < AGREE || n > MAX_GPUS {
        let (lo, hi) = (inner.iter().min(), inner.iter().max());
        return Err(format!(
            "bursts of {}-{} rows a few ms apart, no one size in {:.0}% of them",
            lo.unwrap_or(&0),
            hi.unwrap_or(&0),
            AGREE * 100.0
        ));
    }
    let between: Vec<f64> = gaps.iter().copied().filter(|g| g.abs() > gap_s).collect();
    let within = gaps
        .iter()
        .map(|g| g.abs())
        .filter(|g| *g <= gap_s)
        .fold(0.0, f64::max);
    let note = if n == 1 {
        one_gpu_note(&format!(
            "one row per reading, {} apart",
            seconds(abs_upper_median(&between))
        ))
    } else {
        format!(
            "This log has no index column: {n} GPUs were found from the readings (rows come in \
             bursts of {n} within {} of each other, one row per GPU in order, {} between \
             bursts; {:.0}% of {} bursts hold {n} rows). GPU k is the k-th row of a burst.",
            seconds(within * (n - 1) as f64),
            seconds(abs_upper_median(&between)),
            share * 100.0,
            inner.len()
        )
    };
    Ok((Layout::Bursts { n, gap_s }, note))
}

fn one_gpu_note(how: &str) -> String {
    format!("This log has no index column: it was read as one GPU ({how}).")
}

/// A row's value and how far another row's may be from it and still be alike.
type KeyFn = fn(&Probe) -> Option<(f64, f64)>;

/// N from the period the values repeat with, for rows without timestamps.
fn cycle(rows: &[Probe]) -> Result<(Layout, String), String> {
    let (what, key): (&str, KeyFn) = if rows.iter().any(|r| r.mem_mib.is_some()) {
        ("memory.used", |r| r.mem_mib.map(|m| (m, m * 0.005 + 2.0)))
    } else if rows.iter().any(|r| r.power_w.is_some()) {
        ("power.draw", |r| r.power_w.map(|w| (w, w * 0.1 + 5.0)))
    } else if rows.iter().any(|r| r.temperature_c.is_some()) {
        ("temperature.gpu", |r| r.temperature_c.map(|c| (c, 1.5)))
    } else {
        return Err("no timestamps, and no memory, power or temperature to tell rows apart".into());
    };
    let alike = |lag: usize| -> f64 {
        let (mut same, mut all) = (0u64, 0u64);
        for w in 0..rows.len().saturating_sub(lag) {
            if let (Some((a, ta)), Some((b, tb))) = (key(&rows[w]), key(&rows[w + lag])) {
                all += 1;
                same += u64::from((a - b).abs() <= ta.max(tb));
            }
        }
        if all == 0 {
            0.0
        } else {
            same as f64 / all as f64
        }
    };
    let max_lag = (rows.len() / 3).min(MAX_GPUS as usize);
    let mut best_below = 0.0f64;
    for lag in 1..=max_lag {
        let m = alike(lag);
        if m >= AGREE && m >= best_below + 0.25 {
            let note = if lag == 1 {
                format!(
                    "This log has no index or timestamp column: it was read as one GPU \
                     (consecutive rows have the same {what} in {:.0}% of rows; GPUs that log the \
                     same values cannot be told apart without an index).",
                    m * 100.0
                )
            } else {
                format!(
                    "This log has no index or timestamp column: {lag} GPUs were found from the \
                     repeating pattern of {what} (every {lag}th row alike in {:.0}% of rows, \
                     nearer rows at most {:.0}%). Row k is GPU k mod {lag}.",
                    m * 100.0,
                    best_below * 100.0
                )
            };
            return Ok((Layout::Cycle { n: lag as u32 }, note));
        }
        best_below = best_below.max(m);
    }
    Err(format!(
        "no timestamps, and {what} repeats with no clear period over {} rows",
        rows.len()
    ))
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

/// The upper median of the sizes of `v` (0 when empty): a gap the log holds, shown to people.
fn abs_upper_median(v: &[f64]) -> f64 {
    let mut v: Vec<f64> = v.iter().map(|x| x.abs()).collect();
    crate::stats::upper_median(&mut v).unwrap_or(0.0)
}

fn seconds(s: f64) -> String {
    if s < 1.0 {
        format!("{:.0} ms", (s * 1000.0).max(1.0))
    } else {
        format!("{s:.1} s")
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
