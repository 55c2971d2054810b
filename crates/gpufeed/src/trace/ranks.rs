//! Several traces: ranks of one job, or unrelated runs.
//!
//! Traces are ranks of one job only when each trace's `distributedInfo` says so: every trace has
//! a `rank` and a `world_size`, the world sizes agree, and the ranks are distinct and below the
//! world size ([`one_job`]). Anything else (two runs before and after a change, traces of
//! different jobs) is analyzed trace by trace, and `gpufeed compare` is suggested.
//!
//! Ranks are summarised in parallel, one trace per worker thread at a time; a trace's events are
//! dropped as soon as its [`RankDigest`] (a few numbers and its findings) is made, so memory
//! holds at most one trace per thread plus a digest per rank, whatever the number of ranks.
//! The merge then names the straggler ranks (steps ≥ [`STRAGGLER_RATIO`] × the median rank's)
//! and the communication-bound ranks, and folds each finding seen on several ranks into one.

use super::report::{RankJob, RankLine, Report, SCHEMA_VERSION};
use super::rules::{self, STRAGGLER_RATIO};
use super::{analyze_path, TraceError, TraceSummary};
use crate::exit::{Exit, Failure};
use crate::finding::{self, Finding, FindingId, Item, Severity};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// What is kept of one trace once it is summarised.
#[derive(Debug, Clone)]
pub struct RankDigest {
    pub line: RankLine,
    pub world_size: Option<u64>,
    /// The single-trace findings of this trace.
    pub findings: Vec<Finding>,
    pub warnings: Vec<String>,
    pub truncated: bool,
}

impl RankDigest {
    pub fn of(s: &TraceSummary) -> RankDigest {
        let mut findings = rules::evaluate(s);
        crate::finding::rank(&mut findings);
        RankDigest {
            line: RankLine {
                rank: s.rank,
                path: s.path.clone(),
                steps: s.steps.len(),
                step_us: s.breakdown.total_us,
                communication_pct: s.communication.share_pct,
                gpu_busy_pct: s.gpu_busy_pct,
                verdict: super::verdict::decide(&findings, s.gpu_busy_pct),
            },
            world_size: s.world_size,
            findings,
            warnings: s.warnings.clone(),
            truncated: s.truncated,
        }
    }
}

/// `Ok(world_size)` when the traces are distinct ranks of one world, else why not.
pub(crate) fn one_job(ids: &[(Option<u64>, Option<u64>)]) -> Result<u64, String> {
    let mut world = None;
    let mut seen = std::collections::BTreeSet::new();
    for (i, (rank, ws)) in ids.iter().enumerate() {
        let (Some(r), Some(w)) = (rank, ws) else {
            return Err(format!(
                "trace {} has no rank and world size in its distributedInfo",
                i + 1
            ));
        };
        match world {
            None => world = Some(*w),
            Some(w0) if w0 != *w => {
                return Err(format!("their world sizes differ ({w0} and {w})"));
            }
            _ => {}
        }
        if r >= w {
            return Err(format!("rank {r} is outside a world of {w}"));
        }
        if !seen.insert(*r) {
            return Err(format!("rank {r} appears twice"));
        }
    }
    world.ok_or_else(|| "no trace".to_string())
}

/// What [`analyze_all`] returns, in input order.
pub struct Analyzed {
    pub digests: Vec<Result<RankDigest, TraceError>>,
    /// Every trace's full summary when `keep_full` was asked, else empty.
    pub full: Vec<Option<TraceSummary>>,
    /// The full summary of the lowest rank (or the first trace without one).
    pub lowest: Option<TraceSummary>,
}

/// Summarises every trace on up to `threads` threads (the cores by default), keeping a digest
/// per trace, the lowest rank's full summary and, with `keep_full`, every full summary.
pub(crate) fn analyze_all(paths: &[PathBuf], keep_full: bool, threads: Option<usize>) -> Analyzed {
    let threads = threads
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        })
        .min(paths.len())
        .max(1);
    let next = AtomicUsize::new(0);
    let digests: Vec<Mutex<Option<Result<RankDigest, TraceError>>>> =
        paths.iter().map(|_| Mutex::new(None)).collect();
    let full: Vec<Mutex<Option<TraceSummary>>> = paths.iter().map(|_| Mutex::new(None)).collect();
    // (rank or u64::MAX, input index, summary)
    let lowest: Mutex<Option<(u64, usize, TraceSummary)>> = Mutex::new(None);
    let work = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= paths.len() {
            break;
        }
        let r = analyze_path(&paths[i]).map(|s| {
            let d = RankDigest::of(&s);
            let key = (s.rank.unwrap_or(u64::MAX), i);
            let mut keep = Some(s);
            {
                let mut low = lowest.lock().unwrap_or_else(|e| e.into_inner());
                if low.as_ref().is_none_or(|l| key < (l.0, l.1)) {
                    let s = if keep_full { keep.clone() } else { keep.take() };
                    *low = s.map(|s| (key.0, key.1, s));
                }
            }
            if keep_full {
                *full[i].lock().unwrap_or_else(|e| e.into_inner()) = keep;
            }
            d
        });
        *digests[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
    };
    if threads == 1 {
        work();
    } else {
        std::thread::scope(|sc| {
            for _ in 0..threads {
                sc.spawn(work);
            }
        });
    }
    Analyzed {
        digests: digests
            .into_iter()
            .map(|m| {
                m.into_inner()
                    .unwrap_or_else(|e| e.into_inner())
                    .unwrap_or(Err(TraceError::NoEvents))
            })
            .collect(),
        full: full
            .into_iter()
            .map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()))
            .collect(),
        lowest: lowest
            .into_inner()
            .unwrap_or_else(|e| e.into_inner())
            .map(|l| l.2),
    }
}

fn r1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0 + 0.0
}

/// Rank numbers for people: the first few, then how many more.
pub(crate) fn list(ranks: &[u64]) -> String {
    const SHOW: usize = 8;
    let mut s = ranks
        .iter()
        .take(SHOW)
        .map(|r| r.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    if ranks.len() > SHOW {
        s.push_str(&format!(" and {} more", ranks.len() - SHOW));
    }
    s
}

/// Straggler ranks over (rank, step µs): every rank ≥ [`STRAGGLER_RATIO`] × the median step,
/// slowest first, with the finding that names them.
pub fn stragglers(times: &[(u64, f64)]) -> (Option<f64>, Vec<u64>, Option<Finding>) {
    let valid: Vec<(u64, f64)> = times.iter().copied().filter(|t| t.1 > 0.0).collect();
    if valid.len() < 2 {
        return (None, Vec::new(), None);
    }
    let med = crate::stats::median(&mut valid.iter().map(|t| t.1).collect::<Vec<_>>());
    let Some(m) = med else {
        return (None, Vec::new(), None);
    };
    let mut slow: Vec<(u64, f64)> = valid
        .iter()
        .copied()
        .filter(|t| t.1 >= m * STRAGGLER_RATIO)
        .collect();
    slow.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let Some(&(worst, worst_us)) = slow.first() else {
        return (med, Vec::new(), None);
    };
    let ranks: Vec<u64> = slow.iter().map(|t| t.0).collect();
    let pct = 100.0 * (worst_us / m - 1.0);
    let title = if ranks.len() == 1 {
        format!(
            "Rank {worst} is a straggler: its steps take {pct:.0}% longer than the median rank's"
        )
    } else {
        format!(
            "{} ranks are stragglers ({}): steps up to {pct:.0}% longer than the median rank's",
            ranks.len(),
            list(&ranks)
        )
    };
    let saved = worst_us - m;
    let f = Finding::new(FindingId::Straggler, Severity::Warning, title)
        .with(Item::TraceStragglerRank(worst.to_string()))
        .with(Item::StragglerRanks(ranks.clone()))
        .with(Item::StepUs(r1(worst_us)))
        .with(Item::MedianStepUs(r1(m)))
        .recommend(
            "Find what differs on those ranks: their findings (input pipeline, throttling, a noisy neighbour), \
             uneven data shards (use DistributedSampler with drop_last=True), or uneven work per rank; the other \
             ranks wait for them in every all-reduce.",
        )
        .speedup((worst_us > saved && saved > 0.0).then(|| {
            ((worst_us / (worst_us - saved)) * 100.0).round() / 100.0
        }));
    (med, ranks, Some(f))
}

/// Folds the per-rank findings: one finding per id, the worst rank's, titled with how many
/// ranks share it and listing them in `ranks`.
pub(crate) fn merge_findings(per_rank: Vec<(u64, Vec<Finding>)>) -> Vec<Finding> {
    let mut by_id: std::collections::BTreeMap<FindingId, (Finding, u64, Vec<u64>)> =
        std::collections::BTreeMap::new();
    let worse = |a: &Finding, b: &Finding| {
        (a.severity, a.expected_speedup.unwrap_or(1.0))
            .partial_cmp(&(b.severity, b.expected_speedup.unwrap_or(1.0)))
            == Some(std::cmp::Ordering::Greater)
    };
    for (rank, fs) in per_rank {
        for f in fs {
            match by_id.get_mut(&f.id) {
                Some(e) => {
                    e.2.push(rank);
                    if worse(&f, &e.0) {
                        e.0 = f;
                        e.1 = rank;
                    }
                }
                None => {
                    by_id.insert(f.id, (f, rank, vec![rank]));
                }
            }
        }
    }
    by_id
        .into_values()
        .map(|(mut f, worst, mut ranks)| {
            ranks.sort_unstable();
            f.title = if ranks.len() == 1 {
                format!("[rank {worst}] {}", f.title)
            } else {
                format!(
                    "[{} ranks: {}; worst rank {worst}] {}",
                    ranks.len(),
                    list(&ranks),
                    f.title
                )
            };
            f.with(Item::Rank(worst)).with(Item::Ranks(ranks))
        })
        .collect()
}

/// The report over ranks of one job, from their digests and the lowest rank's full summary
/// (whose steps, breakdown and devices the report shows).
pub fn job_report(digests: Vec<RankDigest>, lowest: TraceSummary, world_size: u64) -> Report {
    let times: Vec<(u64, f64)> = digests
        .iter()
        .filter_map(|d| Some((d.line.rank?, d.line.step_us)))
        .collect();
    let (median_step_us, straggler_ranks, straggler) = stragglers(&times);
    let mut comm_bound: Vec<u64> = digests
        .iter()
        .filter(|d| d.findings.iter().any(|f| f.id == FindingId::CommBound))
        .filter_map(|d| d.line.rank)
        .collect();
    comm_bound.sort_unstable();
    let mut lines: Vec<RankLine> = Vec::with_capacity(digests.len());
    let mut warnings = Vec::new();
    let mut truncated = false;
    let mut per_rank = Vec::with_capacity(digests.len());
    for d in digests {
        truncated |= d.truncated;
        warnings.extend(d.warnings.iter().map(|w| format!("{}: {w}", d.line.path)));
        per_rank.push((d.line.rank.unwrap_or(0), d.findings));
        lines.push(d.line);
    }
    lines.sort_by_key(|l| l.rank);
    let mut findings = merge_findings(per_rank);
    findings.extend(straggler);
    finding::rank(&mut findings);
    let verdict = super::verdict::decide(&findings, super::report::mean_busy(&lines));
    let job = RankJob {
        world_size,
        ranks: lines.len(),
        missing_ranks: world_size.saturating_sub(lines.len() as u64),
        median_step_us: median_step_us.map(r1),
        stragglers: straggler_ranks,
        comm_bound,
    };
    Report {
        schema_version: SCHEMA_VERSION,
        truncated,
        warnings,
        step_source: lowest.step_source,
        tb_plugin_compatible: lowest.tb_plugin_compatible,
        steps: lowest.steps.clone(),
        breakdown: lowest.breakdown.clone(),
        devices: lowest.devices.clone(),
        verdict,
        findings,
        ranks: lines,
        traces: vec![lowest],
        job: Some(job),
    }
}

/// What `analyze` was given, read: one report (a single trace, or the ranks of one job), or
/// unrelated traces' reports each on its own.
pub enum Grouped {
    One(Box<Report>),
    Unrelated {
        reports: Vec<Report>,
        /// Why they are not ranks of one job.
        why: String,
        /// How many traces could be read.
        n: usize,
    },
}

/// A trace that cannot be read, with what to do about it (bad input, exit 3).
pub(crate) fn input_error(e: TraceError) -> Failure {
    let hint = match &e {
        TraceError::Io { .. } => "check the path",
        TraceError::Empty | TraceError::NoEvents | TraceError::NoUsableEvents(_) => {
            "export one with torch.profiler ... on_trace_ready=tensorboard_trace_handler(dir)"
        }
        TraceError::NotATrace(_) => "pass a .json or .json.gz file written by the PyTorch profiler",
        TraceError::EmptyDir(_) => "pass the directory tensorboard_trace_handler wrote to",
    };
    Failure::input(format!("{e}; {hint}"))
}

/// Up to this many traces keep their full summaries while they are classified (ranks of one job
/// or not); more are re-read one at a time when they turn out to be unrelated traces.
const KEEP_FULL: usize = 16;

/// Reads `paths` (expanded) as `analyze` does: ranks of one job become one report.
pub fn group(paths: &[std::path::PathBuf]) -> Result<Grouped, Failure> {
    if paths.len() == 1 {
        let t = super::analyze_path(&paths[0]).map_err(input_error)?;
        return Ok(Grouped::One(Box::new(Report::new(vec![t]))));
    }
    if paths.iter().any(|p| p.as_os_str() == "-") {
        return Err(Failure::new(
            Exit::Usage,
            "- (stdin) is one trace: pass it alone, or pass files",
        ));
    }
    let keep_full = paths.len() <= KEEP_FULL;
    let a = analyze_all(paths, keep_full, None);
    let mut digests = Vec::new();
    let mut ok = Vec::new();
    for (i, (p, r)) in paths.iter().zip(a.digests).enumerate() {
        match r {
            Ok(d) => {
                digests.push(d);
                ok.push(i);
            }
            Err(e) => eprintln!("gpufeed: warning: skipping {}: {e}", p.display()),
        }
    }
    if digests.is_empty() {
        return Err(Failure::input(
            "none of the traces could be read; see the warnings above",
        ));
    }
    let ids: Vec<(Option<u64>, Option<u64>)> = digests
        .iter()
        .map(|d| (d.line.rank, d.world_size))
        .collect();
    match one_job(&ids) {
        Ok(world) if digests.len() > 1 => {
            let lowest = a.lowest.unwrap_or_default();
            Ok(Grouped::One(Box::new(job_report(digests, lowest, world))))
        }
        Ok(_) => {
            // One readable trace left: analyzed alone.
            let t = match a.full.into_iter().nth(ok[0]).flatten() {
                Some(t) => t,
                None => super::analyze_path(&paths[ok[0]]).map_err(input_error)?,
            };
            Ok(Grouped::One(Box::new(Report::new(vec![t]))))
        }
        Err(why) => {
            let n = digests.len();
            let mut full = a.full;
            let mut reports = Vec::with_capacity(ok.len());
            for i in ok {
                let t = match full.get_mut(i).and_then(Option::take) {
                    Some(t) => t,
                    None => super::analyze_path(&paths[i]).map_err(input_error)?,
                };
                reports.push(Report::new(vec![t]));
            }
            Ok(Grouped::Unrelated { reports, why, n })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_only_when_distributed_info_says_so() {
        assert_eq!(one_job(&[(Some(0), Some(2)), (Some(1), Some(2))]), Ok(2));
        assert_eq!(one_job(&[(Some(3), Some(8)), (Some(5), Some(8))]), Ok(8));
        assert!(one_job(&[(Some(0), Some(2)), (Some(0), Some(2))])
            .unwrap_err()
            .contains("twice"));
        assert!(one_job(&[(Some(3), Some(8)), (Some(1), Some(2))])
            .unwrap_err()
            .contains("differ"));
        assert!(one_job(&[(None, None), (None, None)])
            .unwrap_err()
            .contains("no rank"));
        assert!(one_job(&[(Some(0), None), (Some(1), Some(2))]).is_err());
        assert!(one_job(&[(Some(2), Some(2)), (Some(1), Some(2))])
            .unwrap_err()
            .contains("outside"));
    }

    #[test]
    fn every_slow_rank_is_named_slowest_first() {
        let mut t: Vec<(u64, f64)> = (0..16).map(|r| (r, 1000.0 + r as f64)).collect();
        t[3].1 = 1500.0;
        t[9].1 = 1200.0;
        let (m, ranks, f) = stragglers(&t);
        assert_eq!(ranks, vec![3, 9]);
        // 16 ranks: the median is the mean of the 8th and 9th step times (1008 and 1010 µs).
        assert!((m.unwrap() - 1009.0).abs() < 1.0, "{m:?}");
        let f = f.unwrap();
        assert!(
            f.title.starts_with("2 ranks are stragglers (3, 9)"),
            "{}",
            f.title
        );
        assert_eq!(f.evidence.to_json()["straggler_rank"], "3");
        let even: Vec<(u64, f64)> = (0..4).map(|r| (r, 1000.0)).collect();
        assert!(stragglers(&even).1.is_empty());
    }

    #[test]
    fn a_finding_on_many_ranks_is_one_finding_naming_them() {
        let f = |sev, x| {
            Finding::new(FindingId::CommBound, sev, "Communication takes").speedup(Some(x))
        };
        let merged = merge_findings(vec![
            (0, vec![f(Severity::Warning, 1.1)]),
            (1, vec![f(Severity::Critical, 1.4)]),
            (2, vec![]),
            (
                3,
                vec![
                    f(Severity::Warning, 1.2),
                    Finding::new(FindingId::AmpUnused, Severity::Info, "AMP"),
                ],
            ),
        ]);
        assert_eq!(merged.len(), 2);
        let c = merged
            .iter()
            .find(|f| f.id == FindingId::CommBound)
            .unwrap();
        assert_eq!(c.severity, Severity::Critical);
        assert_eq!(c.evidence.to_json()["ranks"], serde_json::json!([0, 1, 3]));
        assert!(
            c.title.starts_with("[3 ranks: 0, 1, 3; worst rank 1]"),
            "{}",
            c.title
        );
        let a = merged
            .iter()
            .find(|f| f.id == FindingId::AmpUnused)
            .unwrap();
        assert!(a.title.starts_with("[rank 3] "));
    }
}
