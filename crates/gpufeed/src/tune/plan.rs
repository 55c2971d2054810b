//! `gpufeed tune`'s plan and search rules, pure functions: which knobs to try from a diagnosis,
//! the values of each, when a trial's throughput counts as a gain over the best so far, and the
//! speed-up of the final interleaved re-run.

use super::trial::Throughput;
use crate::diagnose::evidence::Hotspot;
use crate::finding::{Finding, FindingId};
use crate::sample::pyphase::StageKind;
use crate::stats::{ratio_ci, Speedup};
use serde::{Deserialize, Serialize};

/// A knob `tune` can turn with no code change (through `--dataloader` / `--torch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Knob {
    NumWorkers,
    PersistentWorkers,
    PrefetchFactor,
    PinMemory,
    MatmulPrecision,
    CudnnBenchmark,
    /// The DataLoader's `batch_size` (only with `--allow-batch`: it changes the optimisation).
    BatchSize,
}

impl Knob {
    /// The `--dataloader` / `--torch` key.
    pub fn key(self) -> &'static str {
        match self {
            Knob::NumWorkers => "num_workers",
            Knob::PersistentWorkers => "persistent_workers",
            Knob::PrefetchFactor => "prefetch_factor",
            Knob::PinMemory => "pin_memory",
            Knob::MatmulPrecision => "matmul_precision",
            Knob::CudnnBenchmark => "cudnn_benchmark",
            Knob::BatchSize => "batch_size",
        }
    }

    /// A DataLoader argument (else a global torch switch).
    pub(crate) fn is_dataloader(self) -> bool {
        !matches!(self, Knob::MatmulPrecision | Knob::CudnnBenchmark)
    }

    /// A knob for an input-bound job (the loader's parallelism and prefetching).
    pub(crate) fn is_input(self) -> bool {
        matches!(
            self,
            Knob::NumWorkers | Knob::PersistentWorkers | Knob::PrefetchFactor
        )
    }

    /// The flag that sets it: `--dataloader` or `--torch`.
    pub fn flag(self) -> &'static str {
        if self.is_dataloader() {
            "--dataloader"
        } else {
            "--torch"
        }
    }

    /// The value as Python source, for the patch.
    pub(crate) fn python_value(self, v: &str) -> String {
        match (self, v) {
            (Knob::MatmulPrecision, v) => format!("\"{v}\""),
            (Knob::PersistentWorkers | Knob::PinMemory | Knob::CudnnBenchmark, "1") => {
                "True".into()
            }
            (Knob::PersistentWorkers | Knob::PinMemory | Knob::CudnnBenchmark, "0") => {
                "False".into()
            }
            (_, v) => v.into(),
        }
    }
}

/// One knob to try, with its values in the order tried.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KnobPlan {
    pub knob: Knob,
    pub values: Vec<String>,
    /// Why it is in the plan (the finding, or the data wait).
    pub why: String,
    /// Whether a range whose best is its last value may be extended (doubled) while it gains.
    pub extend: bool,
}

/// The batch-size knob's first value: twice the job's own batch (which the injection reports);
/// the search goes on from the size it turned out to be.
pub const BATCH_DOUBLE: &str = "x2";

/// Data wait share at or above which the job is taken as input-bound.
pub const INPUT_BOUND_WAIT: f64 = 0.10;

/// A gain smaller than this is no gain: the search stops when no knob gains it.
pub const MIN_GAIN: f64 = 0.05;

/// Most DataLoader workers the range is extended to.
pub const MAX_WORKERS: u32 = 64;

/// `num_workers` values to try: powers of two from 2 up to the cores per rank.
pub(crate) fn worker_values(cores_per_rank: u32) -> Vec<String> {
    let mut v = vec![];
    let mut w = 2u32;
    while w <= cores_per_rank.max(2) {
        v.push(w.to_string());
        w *= 2;
    }
    v
}

/// The next value of an extended `num_workers` range (`None` at the cap).
pub(crate) fn extend_workers(last: &str) -> Option<String> {
    let w: u32 = last.parse().ok()?;
    (w < MAX_WORKERS).then(|| (w * 2).max(2).to_string())
}

/// Whether a finding of the diagnosis is there.
fn has(findings: &[Finding], ids: &[FindingId]) -> Option<String> {
    findings
        .iter()
        .find(|f| ids.contains(&f.id))
        .map(|f| format!("{}: {}", f.id.as_str(), f.title))
}

/// Share of loading (%) from which the slowest stage is said to need a code edit.
const CODE_STAGE_PCT: f64 = 25.0;

/// What the knobs cannot change: where the plan turns the loader's knobs and the input's
/// slowest stage (`hot`, the diagnosis's first data hotspot) is code (a collate function, a
/// transform, a dataset library's per-read transform), `tune` can spread it over worker
/// processes but not make it cheaper; the note points at its line. `None` when no stage stands
/// out or the stage is one a knob sets (`pin_memory`).
pub(crate) fn code_edit_note(plans: &[KnobPlan], hot: Option<&Hotspot>) -> Option<String> {
    let h = hot?;
    if !plans.iter().any(|p| p.knob.is_input()) || h.pct < CODE_STAGE_PCT {
        return None;
    }
    let (what, knobs) = match h.kind {
        StageKind::PinMemory => return None,
        StageKind::Sampler => (
            "the sampler runs in the training process",
            "no DataLoader knob moves it off the training loop",
        ),
        StageKind::Collate => (
            "the collate function runs once per batch",
            "num_workers spreads it over worker processes but cannot make it cheaper",
        ),
        StageKind::OnTheFly => (
            "Hugging Face datasets runs it on every read (set_transform / with_transform)",
            "num_workers spreads it over worker processes but cannot make it cheaper or run it once",
        ),
        _ => (
            "it runs for every sample",
            "num_workers spreads it over worker processes but cannot make it cheaper",
        ),
    };
    let at = h.at();
    Some(format!(
        "the slowest loading stage is {} ({at}, {:.0}% of loading): {what}; {knobs}. Making it \
         cheaper takes a code edit at {at}, which tune does not make (the diagnosis's fix says \
         how)",
        h.function, h.pct
    ))
}

/// A loop whose time goes to host-side work in the user's code (batches built by hand,
/// per-step Python, checkpoints, evaluation) and that does not wait for a DataLoader has nothing
/// a DataLoader knob can win: its fix is a code change, said instead of sweeping workers.
fn host_note(findings: &[Finding]) -> Option<String> {
    let h = findings.iter().find(|f| f.id == FindingId::HostBound)?;
    if has(findings, &[FindingId::InputBound]).is_some() {
        return None;
    }
    Some(format!(
        "DataLoader knobs not tried: {}; the fix is a code change, which tune does not make: {}",
        h.title, h.recommendation
    ))
}

/// The knobs to try, from the baseline's diagnosis and measured data wait, most promising first
/// (the findings' order), and notes on what is left out.
pub fn plan(
    findings: &[Finding],
    data_wait: Option<f64>,
    cores_per_rank: u32,
    allow_batch: bool,
    tf32_gpu: Option<[u32; 2]>,
) -> (Vec<KnobPlan>, Vec<String>) {
    let mut plans: Vec<(usize, KnobPlan)> = Vec::new();
    let mut notes = Vec::new();
    let rank = |ids: &[FindingId]| {
        findings
            .iter()
            .position(|f| ids.contains(&f.id))
            .unwrap_or(0)
    };
    let input_ids = [FindingId::InputBound, FindingId::MainProcessBound];
    let waits = data_wait.filter(|w| *w >= INPUT_BOUND_WAIT);
    let host = host_note(findings);
    notes.extend(host.clone());
    let input_why = has(findings, &input_ids)
        .or_else(|| {
            waits.map(|w| {
                format!(
                    "the training loop waits for data {:.0}% of the time",
                    w * 100.0
                )
            })
        })
        .filter(|_| host.is_none());
    if let Some(why) = input_why {
        let at = rank(&input_ids);
        for (knob, values, extend) in [
            (Knob::NumWorkers, worker_values(cores_per_rank), true),
            (Knob::PersistentWorkers, vec!["1".into()], false),
            (Knob::PrefetchFactor, vec!["4".into()], false),
        ] {
            plans.push((
                at,
                KnobPlan {
                    knob,
                    values,
                    why: why.clone(),
                    extend,
                },
            ));
        }
    }
    if let Some(why) = has(
        findings,
        &[FindingId::PageableMemcpy, FindingId::TransferBound],
    ) {
        let at = rank(&[FindingId::PageableMemcpy, FindingId::TransferBound]);
        plans.push((
            at,
            KnobPlan {
                knob: Knob::PinMemory,
                values: vec!["1".into()],
                why,
                extend: false,
            },
        ));
    }
    // fp32 matmuls: the trace's finding, or (a recording cannot see the precision) a job whose
    // input keeps up on a GPU with TF32 tensor cores: the trial shows whether it had fp32 work
    let tf32 = tf32_gpu.filter(|_| waits.is_none() && has(findings, &input_ids).is_none());
    let amp_why = has(findings, &[FindingId::AmpUnused]).or_else(|| {
        tf32.map(|[ma, mi]| {
            format!("the input keeps up and the GPU has TF32 tensor cores (compute capability {ma}.{mi}): fp32 matmuls, if the job has them, run faster in TF32")
        })
    });
    if let Some(why) = amp_why {
        let at = rank(&[FindingId::AmpUnused]);
        for (knob, v) in [(Knob::MatmulPrecision, "high"), (Knob::CudnnBenchmark, "1")] {
            plans.push((
                at,
                KnobPlan {
                    knob,
                    values: vec![v.into()],
                    why: why.clone(),
                    extend: false,
                },
            ));
        }
    }
    if let Some(why) = has(findings, &[FindingId::BatchTooSmall]) {
        if allow_batch {
            // last, whatever the findings' order: it changes the optimisation, and its trials
            // are compared in samples/s, with the other knobs already in place
            plans.push((
                usize::MAX,
                KnobPlan {
                    knob: Knob::BatchSize,
                    values: vec![BATCH_DOUBLE.into()],
                    why,
                    extend: true,
                },
            ));
        } else {
            notes.push(format!("{why}: the batch size changes the optimisation, so it is left alone (give --allow-batch to search it with a learning-rate plan, or run `gpufeed batch-size`)"));
        }
    }
    plans.sort_by_key(|(at, _)| *at);
    (plans.into_iter().map(|(_, p)| p).collect(), notes)
}

/// The standard error behind a throughput's 95% interval (taken as ±1.96 se: errs wide).
fn se(t: &Throughput) -> Option<f64> {
    t.ci_low.zip(t.ci_high).map(|(l, h)| (h - l) / 2.0 / 1.96)
}

/// `cand / best` with its 95% interval, when both have one.
pub fn gain(best: &Throughput, cand: &Throughput) -> Option<(f64, [f64; 2])> {
    if best.unit != cand.unit || best.value <= 0.0 || cand.value <= 0.0 {
        return None;
    }
    let ci = ratio_ci(cand.value, se(cand)?, best.value, se(best)?, 1.96)?;
    Some((cand.value / best.value, ci))
}

/// A candidate is kept when the interval of its ratio to the best lies above 1 and it gains at
/// least [`MIN_GAIN`].
pub(crate) fn clears(best: &Throughput, cand: &Throughput) -> bool {
    gain(best, cand).is_some_and(|(r, [lo, _])| lo > 1.0 && r >= 1.0 + MIN_GAIN)
}

/// The speed-up of the interleaved re-run: the mean of the AFTER runs over the mean of the
/// BEFORE runs, each run's interval pooled into the mean's.
pub(crate) fn ab_speedup(before: &[&Throughput], after: &[&Throughput]) -> Option<Speedup> {
    let pooled = |xs: &[&Throughput]| {
        let n = xs.len() as f64;
        if xs.is_empty() || xs.iter().any(|t| t.unit != xs[0].unit) {
            return None;
        }
        let m = xs.iter().map(|t| t.value).sum::<f64>() / n;
        let var: f64 = xs
            .iter()
            .map(|t| se(t).map(|s| s * s))
            .sum::<Option<f64>>()?;
        // the runs' own spread as well, when they disagree more than their intervals say
        let spread = if xs.len() >= 2 {
            xs.iter().map(|t| (t.value - m).powi(2)).sum::<f64>() / (n - 1.0) / n
        } else {
            0.0
        };
        Some((m, (var / (n * n)).max(spread).sqrt(), xs[0].unit.clone()))
    };
    let (b, seb, unit) = pooled(before)?;
    let (a, sea, unit_a) = pooled(after)?;
    if unit != unit_a || b <= 0.0 {
        return None;
    }
    Some(Speedup {
        value: (a / b * 1000.0).round() / 1000.0,
        metric: crate::stats::SpeedupMetric::Throughput(unit.clone()),
        ci95: ratio_ci(a, sea, b, seb, 1.96),
        basis: format!(
            "interleaved re-run (baseline, tuned, baseline, tuned): {} {unit} before, {} {unit} after",
            crate::units::num(b),
            crate::units::num(a)
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tune::trial::RateSource;

    fn tp(v: f64, rel: f64) -> Throughput {
        Throughput {
            value: v,
            unit: "steps/s".into(),
            ci_low: Some(v * (1.0 - rel)),
            ci_high: Some(v * (1.0 + rel)),
            source: RateSource::StepSocket,
            steady: true,
            warmup_s: None,
            intervals: 40,
            samples_per_s: None,
        }
    }

    #[test]
    fn a_value_is_kept_only_when_its_interval_clears_the_best() {
        assert!(clears(&tp(10.0, 0.03), &tp(12.0, 0.03)));
        // 3% better but wide intervals: noise
        assert!(!clears(&tp(10.0, 0.05), &tp(10.3, 0.05)));
        // clearly better but under 5%: not worth a knob
        assert!(!clears(&tp(10.0, 0.005), &tp(10.3, 0.005)));
        assert!(!clears(&tp(10.0, 0.03), &tp(8.0, 0.03)));
    }

    #[test]
    fn worker_range_follows_the_cores_and_extends() {
        assert_eq!(worker_values(8), ["2", "4", "8"]);
        assert_eq!(worker_values(2), ["2"]);
        assert_eq!(worker_values(1), ["2"]);
        assert_eq!(extend_workers("8").as_deref(), Some("16"));
        assert_eq!(extend_workers("64"), None);
    }

    #[test]
    fn ab_speedup_pools_the_runs() {
        let s = ab_speedup(
            &[&tp(10.0, 0.02), &tp(10.4, 0.02)],
            &[&tp(30.0, 0.02), &tp(31.0, 0.02)],
        )
        .unwrap();
        assert!((s.value - 2.99).abs() < 0.01, "{s:?}");
        let [lo, hi] = s.ci95.unwrap();
        assert!(
            lo > 2.7 && hi < 3.3 && lo < s.value && s.value < hi,
            "{s:?}"
        );
        assert!(ab_speedup(&[], &[&tp(1.0, 0.1)]).is_none());
    }

    fn finding(id: FindingId) -> Finding {
        Finding {
            id,
            severity: crate::finding::Severity::Warning,
            title: format!("{} title", id.as_str()),
            evidence: Default::default(),
            recommendation: String::new(),
            expected_speedup: None,
            basis: Default::default(),
            kind: None,
            apply: None,
        }
    }

    /// A collate function (or any code stage) that dominates loading is named
    /// with its line as what only a code edit changes, where the plan turns the loader's knobs.
    #[test]
    fn a_host_bound_loop_gets_no_dataloader_knobs_but_its_fix() {
        let mut host = finding(FindingId::HostBound);
        host.title = "The training loop spends 60% of its time saving checkpoints".into();
        host.recommendation = "Save 29x less often".into();
        let main = finding(FindingId::MainProcessBound);
        let (plans, notes) = plan(&[host.clone(), main.clone()], Some(0.3), 8, false, None);
        assert!(plans.iter().all(|p| !p.knob.is_input()), "{plans:?}");
        assert!(
            notes
                .iter()
                .any(|n| n.contains("DataLoader knobs not tried") && n.contains("29x less often")),
            "{notes:?}"
        );
        // A loop that also waits for its data still gets them.
        let (plans, _) = plan(
            &[finding(FindingId::InputBound), host],
            Some(0.3),
            8,
            false,
            None,
        );
        assert!(plans.iter().any(|p| p.knob == Knob::NumWorkers));
        let (plans, _) = plan(&[main], Some(0.3), 8, false, None);
        assert!(plans.iter().any(|p| p.knob == Knob::NumWorkers));
    }

    #[test]
    fn a_code_stage_is_said_as_what_only_an_edit_changes() {
        let (plans, _) = plan(&[finding(FindingId::InputBound)], Some(0.8), 8, false, None);
        let hot = |kind, pct| Hotspot {
            function: "pad_collate".into(),
            file: "/home/u/train.py".into(),
            line: 22,
            pct,
            ms_per_sample: None,
            core_wait_ms_per_sample: None,
            native_pct: None,
            code: None,
            kind,
            library: None,
            samples: 100,
            work_s: 1.0,
            runq_s: None,
        };
        let note = code_edit_note(&plans, Some(&hot(StageKind::Collate, 97.4))).unwrap();
        assert!(
            note.starts_with("the slowest loading stage is pad_collate (train.py:22, 97% of loading): the collate function runs once per batch;")
                && note.contains("code edit at train.py:22"),
            "{note}"
        );
        let sampler = code_edit_note(&plans, Some(&hot(StageKind::Sampler, 60.0))).unwrap();
        assert!(sampler.contains("no DataLoader knob"), "{sampler}");
        assert!(code_edit_note(&plans, Some(&hot(StageKind::Collate, 10.0))).is_none());
        assert!(code_edit_note(&plans, Some(&hot(StageKind::PinMemory, 90.0))).is_none());
        assert!(code_edit_note(&plans, None).is_none());
        // No loader knob in the plan (pinned memory only): nothing to say.
        let (pin, _) = plan(&[finding(FindingId::PageableMemcpy)], None, 8, false, None);
        assert!(code_edit_note(&pin, Some(&hot(StageKind::Collate, 97.4))).is_none());
    }

    #[test]
    fn the_plan_follows_the_findings_in_their_order() {
        let keys = |f: &[Finding], wait: Option<f64>| {
            plan(f, wait, 8, false, None)
                .0
                .iter()
                .map(|p| p.knob.key())
                .collect::<Vec<_>>()
        };
        let f = [
            finding(FindingId::PageableMemcpy),
            finding(FindingId::InputBound),
            finding(FindingId::AmpUnused),
        ];
        assert_eq!(
            keys(&f, None),
            [
                "pin_memory",
                "num_workers",
                "persistent_workers",
                "prefetch_factor",
                "matmul_precision",
                "cudnn_benchmark"
            ]
        );
        let (p, _) = plan(&f, None, 8, false, None);
        assert_eq!(p[1].values, ["2", "4", "8"]);
        assert!(p[1].extend && !p[0].extend);
        // copies at the PCIe link's limit (a recording's sign of pageable copies): pinning
        assert_eq!(
            keys(&[finding(FindingId::TransferBound)], Some(0.02)),
            ["pin_memory"]
        );
        // no finding but the loop waits for data: the input knobs
        assert_eq!(keys(&[], Some(0.3))[0], "num_workers");
        // a compute-bound job: nothing to tune
        assert!(keys(&[finding(FindingId::ComputeBound)], Some(0.02)).is_empty());
        // compute-bound on an Ampere or later GPU: TF32 and cuDNN autotuning are worth a trial
        let (p, _) = plan(
            &[finding(FindingId::ComputeBound)],
            Some(0.02),
            8,
            false,
            Some([9, 0]),
        );
        let k: Vec<&str> = p.iter().map(|p| p.knob.key()).collect();
        assert_eq!(k, ["matmul_precision", "cudnn_benchmark"]);
        assert!(p[0].why.contains("compute capability 9.0"), "{}", p[0].why);
        // but not while the input is the bottleneck: workers first
        let (p, _) = plan(
            &[finding(FindingId::InputBound)],
            Some(0.5),
            8,
            false,
            Some([9, 0]),
        );
        assert!(p.iter().all(|p| p.knob.is_input()));
        // the batch size: a note suggesting --allow-batch without it ...
        let (p, notes) = plan(&[finding(FindingId::BatchTooSmall)], None, 8, false, None);
        assert!(
            p.is_empty() && notes[0].contains("--allow-batch"),
            "{notes:?}"
        );
        // ... and with it the last knob, from twice the job's own batch, extended
        let f = [
            finding(FindingId::BatchTooSmall),
            finding(FindingId::AmpUnused),
        ];
        let (p, notes) = plan(&f, None, 8, true, None);
        let k: Vec<&str> = p.iter().map(|p| p.knob.key()).collect();
        assert_eq!(k, ["matmul_precision", "cudnn_benchmark", "batch_size"]);
        assert_eq!(p[2].values, [BATCH_DOUBLE]);
        assert!(p[2].extend && p[2].knob.is_dataloader() && !p[2].knob.is_input());
        assert!(notes.is_empty(), "{notes:?}");
    }

    #[test]
    fn python_values_for_the_patch() {
        assert_eq!(Knob::PinMemory.python_value("1"), "True");
        assert_eq!(Knob::MatmulPrecision.python_value("high"), "\"high\"");
        assert_eq!(Knob::NumWorkers.python_value("4"), "4");
    }
}
