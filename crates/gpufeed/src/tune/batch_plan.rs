//! `gpufeed batch-size`: the largest batch that runs (double to the first out-of-memory, then
//! bisect — Lightning's power/binsearch), the batch to recommend at a memory target, and a
//! gradient-accumulation plan for a target batch.

use super::trial::TrialExit;
use serde::{Deserialize, Serialize};

use super::oom::oom_marker;

/// How a trial of one batch size went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Ok,
    Oom,
    Failed,
}

/// OOM when a failed trial printed a known message, or was SIGKILLed (the host OOM killer: gpufeed
/// did not send that signal), or exited 137 (a shell reporting the same).
pub(crate) fn classify(exit: &TrialExit, oom_line: Option<&str>) -> (Verdict, Option<String>) {
    if exit.ok() {
        return (Verdict::Ok, None);
    }
    if let Some(l) = oom_line {
        return (
            Verdict::Oom,
            oom_marker(l)
                .map(|k| k.to_string())
                .or(Some("out_of_memory".into())),
        );
    }
    if exit.signal == Some(libc::SIGKILL) && exit.stop_signal != Some(libc::SIGKILL) {
        return (Verdict::Oom, Some("killed_sigkill".into()));
    }
    if exit.code == Some(137) {
        return (Verdict::Oom, Some("exit_137".into()));
    }
    (Verdict::Failed, None)
}

/// The search: which batch size to try next.
#[derive(Debug, Clone)]
pub struct Search {
    /// Largest size that ran.
    pub low_ok: Option<u64>,
    /// Smallest size that ran out of memory.
    pub high_oom: Option<u64>,
    max: Option<u64>,
    start: u64,
    tried: Vec<u64>,
}

/// Most trials a search may take.
pub const MAX_TRIALS: usize = 25;

impl Search {
    pub fn new(start: u64, max: Option<u64>) -> Search {
        Search {
            low_ok: None,
            high_oom: None,
            max,
            start: max.map_or(start, |m| start.min(m)).max(1),
            tried: vec![],
        }
    }

    /// The next size to try, or `None` when the search is over.
    pub fn next(&self) -> Option<u64> {
        if self.tried.len() >= MAX_TRIALS {
            return None;
        }
        let cand = match (self.low_ok, self.high_oom) {
            (None, None) => self.start,
            // Power phase: double, capped at --max.
            (Some(lo), None) => {
                let d = lo.saturating_mul(2);
                match self.max {
                    Some(m) if lo >= m => return None,
                    Some(m) => d.min(m),
                    None => d,
                }
            }
            // Even the start ran out of memory: halve.
            (None, Some(hi)) => {
                if hi <= 1 {
                    return None;
                }
                hi / 2
            }
            (Some(lo), Some(hi)) => {
                if hi <= lo + 1 {
                    return None;
                }
                lo + (hi - lo) / 2
            }
        };
        (!self.tried.contains(&cand)).then_some(cand)
    }

    /// Records a trial: `ran` is false for an out-of-memory.
    pub fn record(&mut self, size: u64, ran: bool) {
        self.tried.push(size);
        if ran {
            self.low_ok = Some(self.low_ok.map_or(size, |l| l.max(size)));
        } else {
            self.high_oom = Some(self.high_oom.map_or(size, |h| h.min(size)));
        }
    }
}

/// How the recommended batch was chosen.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Basis {
    /// Peak GPU memory, fitted linearly in the batch size, meets the target.
    MemoryFit,
    /// The largest tried size under the target (too few points to fit).
    MemoryMeasured,
    /// No GPU memory figures, so the target fraction is applied to the largest batch.
    Margin,
}

impl Basis {
    /// The wire name (the JSON's).
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// The recommended batch and how it was chosen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recommendation {
    pub batch: u64,
    pub basis: Basis,
    /// Predicted peak GPU memory at the recommended batch, in bytes.
    pub predicted_mem_bytes: Option<u64>,
}

/// Chooses the batch to use: at most `max_batch`, with peak GPU memory at most `target` (0–1) of
/// the total. `points` are successful trials `(batch, peak memory bytes)`.
pub(crate) fn recommend(
    max_batch: u64,
    points: &[(u64, u64)],
    mem_total_bytes: Option<u64>,
    target: f64,
) -> Recommendation {
    let Some(total) = mem_total_bytes.filter(|t| *t > 0) else {
        return Recommendation {
            batch: ((max_batch as f64 * target).floor() as u64).clamp(1, max_batch.max(1)),
            basis: Basis::Margin,
            predicted_mem_bytes: None,
        };
    };
    if points.is_empty() {
        return Recommendation {
            batch: ((max_batch as f64 * target).floor() as u64).clamp(1, max_batch.max(1)),
            basis: Basis::Margin,
            predicted_mem_bytes: None,
        };
    }
    let limit = total as f64 * target;
    // Least squares mem = a + b * batch.
    let n = points.len() as f64;
    let mx = points.iter().map(|p| p.0 as f64).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1 as f64).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 as f64 - mx).powi(2)).sum();
    let sxy: f64 = points
        .iter()
        .map(|p| (p.0 as f64 - mx) * (p.1 as f64 - my))
        .sum();
    if points.len() >= 2 && sxx > 0.0 && sxy > 0.0 {
        let b = sxy / sxx;
        let a = my - b * mx;
        let fit = ((limit - a) / b).floor();
        let batch = if fit.is_finite() && fit >= 1.0 {
            (fit as u64).min(max_batch)
        } else {
            1
        };
        return Recommendation {
            batch,
            basis: Basis::MemoryFit,
            predicted_mem_bytes: Some((a + b * batch as f64).max(0.0) as u64),
        };
    }
    let best = points
        .iter()
        .filter(|p| p.1 as f64 <= limit)
        .max_by_key(|p| p.0);
    match best {
        Some(p) => Recommendation {
            batch: p.0,
            basis: Basis::MemoryMeasured,
            predicted_mem_bytes: Some(p.1),
        },
        None => Recommendation {
            batch: points.iter().map(|p| p.0).min().unwrap_or(1),
            basis: Basis::MemoryMeasured,
            predicted_mem_bytes: points.iter().map(|p| p.1).min(),
        },
    }
}

/// A gradient-accumulation plan: `micro_batch × steps = target_batch`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Accumulation {
    pub target_batch: u64,
    pub micro_batch: u64,
    pub steps: u64,
    pub note: String,
}

/// The largest micro-batch ≤ `limit` that divides `target` exactly.
pub fn accumulation(target: u64, limit: u64) -> Option<Accumulation> {
    if target == 0 || limit == 0 {
        return None;
    }
    let micro = (1..=limit.min(target)).rev().find(|m| target % m == 0)?;
    let steps = target / micro;
    let note = if steps == 1 {
        format!("batch {target} fits as it is: no accumulation needed, keep your learning rate")
    } else {
        format!(
            "run micro-batches of {micro} and step the optimizer every {steps} of them (divide the \
             loss by {steps}): the effective batch stays {target}, so keep the learning rate tuned \
             for {target}; if you train with batch {micro} without accumulation instead, scale the \
             learning rate by {micro}/{target} (linear rule; square root for Adam-type optimizers) \
             and re-check warm-up. BatchNorm statistics still see {micro} samples."
        )
    };
    Some(Accumulation {
        target_batch: target,
        micro_batch: micro,
        steps,
        note,
    })
}

/// A throughput as samples/s, for comparing trials of different batch sizes: a per-step rate
/// (step markers, a tqdm `it/s` bar) times the samples per step (the markers' own counts when
/// they carry them, else `batch`), its interval scaled alike. A rate in other units (a
/// `--rate-regex` figure, the GPU-busy proxy) is returned as it is.
pub(crate) fn per_sample(t: &super::trial::Throughput, batch: u64) -> super::trial::Throughput {
    use super::trial::RateSource;
    let per_step =
        t.source == RateSource::StepSocket || (t.source == RateSource::Tqdm && t.unit == "it/s");
    if !per_step || t.value <= 0.0 {
        return t.clone();
    }
    let k = t.samples_per_s.map(|s| s / t.value).unwrap_or(batch as f64);
    super::trial::Throughput {
        value: t.value * k,
        unit: "samples/s".into(),
        ci_low: t.ci_low.map(|x| x * k),
        ci_high: t.ci_high.map(|x| x * k),
        samples_per_s: Some(t.value * k),
        ..t.clone()
    }
}

/// What changing the batch from `from` to `to` asks of the training: the learning-rate scaling
/// (linear, square root for Adam-type optimizers), warm-up, BatchNorm, and where the
/// gradient-accumulation plan comes from.
pub fn lr_plan(from: u64, to: u64) -> String {
    let k = to as f64 / from.max(1) as f64;
    format!(
        "batch_size {from} → {to} changes the optimisation: scale the learning rate by \
         {to}/{from} = {k:.3}× (linear rule; √ = {:.3}× for Adam-type optimizers) and re-check \
         warm-up; BatchNorm statistics see {to} samples. For an effective batch larger than fits, \
         `gpufeed batch-size --target-batch N` plans gradient accumulation.",
        k.sqrt()
    )
}

/// One tried batch size as the report keeps it (`gpufeed batch-size --format json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchTrial {
    pub batch: u64,
    pub verdict: Verdict,
    /// Which out-of-memory was recognised (`cuda_oom`, `host_oom`, `killed_sigkill`, ...).
    pub oom_kind: Option<String>,
    pub oom_line: Option<String>,
    pub throughput: Option<super::trial::Throughput>,
    pub gpu_mem_max_bytes: Option<u64>,
    pub gpu_util_mean_pct: Option<f64>,
    #[serde(flatten)]
    pub run: super::trial::TrialRun,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchReport {
    pub schema_version: u32,
    pub command: Vec<String>,
    pub param: String,
    pub mem_target_pct: f64,
    /// Largest batch that ran.
    pub max_batch: Option<u64>,
    /// Smallest batch that ran out of memory.
    pub first_oom_batch: Option<u64>,
    pub recommended_batch: Option<u64>,
    pub recommendation: Option<Recommendation>,
    /// The tried batch with the highest samples/s (bigger is not always faster).
    pub fastest_batch: Option<u64>,
    pub gpu_mem_total_bytes: Option<u64>,
    pub trials: Vec<BatchTrial>,
    pub accumulation: Option<Accumulation>,
    /// Why the search ended early, when it did.
    pub stopped: Option<String>,
}

/// The samples/s of a trial, when its rate had a batch size to multiply.
pub fn samples_per_s(t: &BatchTrial) -> Option<f64> {
    t.throughput.as_ref().and_then(|x| x.samples_per_s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tune::trial::TrialStatus;

    fn exit(status: TrialStatus, code: Option<i32>, signal: Option<i32>) -> TrialExit {
        TrialExit {
            status,
            code,
            signal,
            stop_signal: None,
        }
    }

    #[test]
    fn oom_messages() {
        let pytorch = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 GiB of which 1.19 GiB is free.";
        assert_eq!(oom_marker(pytorch), Some("cuda_oom"));
        assert_eq!(
            oom_marker("RuntimeError: CUDA error: out of memory."),
            Some("out_of_memory")
        );
        assert_eq!(
            oom_marker("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
            Some("cublas_alloc_failed")
        );
        assert_eq!(
            oom_marker("RuntimeError: DataLoader worker (pid 4242) is killed by signal: Killed. "),
            Some("dataloader_worker_killed")
        );
        assert_eq!(
            oom_marker("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate"),
            Some("jax_resource_exhausted")
        );
        assert_eq!(oom_marker("process is killed by signal 9"), None);
        assert_eq!(oom_marker("ValueError: bad shape"), None);
    }

    #[test]
    fn classification() {
        let failed = exit(TrialStatus::Failed, Some(1), None);
        assert_eq!(
            classify(&failed, Some("CUDA out of memory")).0,
            Verdict::Oom
        );
        assert_eq!(classify(&failed, None).0, Verdict::Failed);
        assert_eq!(
            classify(&exit(TrialStatus::Failed, None, Some(9)), None),
            (Verdict::Oom, Some("killed_sigkill".into()))
        );
        assert_eq!(
            classify(&exit(TrialStatus::Failed, Some(137), None), None).0,
            Verdict::Oom
        );
        assert_eq!(
            classify(&exit(TrialStatus::Steady, None, Some(2)), None).0,
            Verdict::Ok
        );
    }

    fn run(start: u64, max: Option<u64>, limit: u64) -> (Option<u64>, Vec<u64>) {
        let mut s = Search::new(start, max);
        let mut tried = vec![];
        while let Some(b) = s.next() {
            tried.push(b);
            s.record(b, b <= limit);
        }
        (s.low_ok, tried)
    }

    #[test]
    fn power_then_binary_search() {
        let (best, tried) = run(64, None, 300);
        assert_eq!(best, Some(300));
        assert_eq!(&tried[..4], &[64, 128, 256, 512]);
        assert!(tried.len() <= 4 + 9, "{tried:?}");
        // Even the start is too big: halve first.
        let (best, tried) = run(64, None, 20);
        assert_eq!(best, Some(20));
        assert_eq!(&tried[..3], &[64, 32, 16]);
        // The cap.
        let (best, tried) = run(64, Some(200), 10_000);
        assert_eq!(best, Some(200));
        assert_eq!(tried, vec![64, 128, 200]);
        // Nothing fits.
        assert_eq!(run(4, None, 0).0, None);
    }

    #[test]
    fn recommendation_at_memory_target() {
        const G: u64 = 1 << 30;
        // 10 GiB + 0.25 GiB per sample, 80 GiB card, 90% target = 72 GiB -> 248.
        let pts: Vec<(u64, u64)> = [64u64, 128, 256]
            .iter()
            .map(|&b| (b, 10 * G + b * G / 4))
            .collect();
        let r = recommend(280, &pts, Some(80 * G), 0.9);
        assert_eq!((r.batch, r.basis), (248, Basis::MemoryFit));
        let r = recommend(200, &pts, Some(80 * G), 0.9);
        assert_eq!(r.batch, 200, "never above the largest batch that ran");
        let r = recommend(300, &[], None, 0.9);
        assert_eq!((r.batch, r.basis), (270, Basis::Margin));
        let r = recommend(300, &pts[..1], Some(80 * G), 0.9);
        assert_eq!((r.batch, r.basis), (64, Basis::MemoryMeasured));
    }

    #[test]
    fn accumulation_plans() {
        let a = accumulation(1024, 300).unwrap();
        assert_eq!((a.micro_batch, a.steps), (256, 4));
        assert!(a.note.contains("learning rate"));
        assert_eq!(accumulation(96, 200).unwrap().steps, 1);
        assert_eq!(accumulation(97, 50).unwrap().micro_batch, 1);
        assert!(accumulation(0, 10).is_none());
    }

    #[test]
    fn per_step_rates_become_samples_per_second() {
        use crate::tune::trial::{RateSource, Throughput};
        let t = Throughput {
            value: 10.0,
            unit: "steps/s".into(),
            ci_low: Some(9.0),
            ci_high: Some(11.0),
            source: RateSource::StepSocket,
            steady: true,
            warmup_s: None,
            intervals: 40,
            samples_per_s: None,
        };
        let s = per_sample(&t, 32);
        assert_eq!((s.value, s.unit.as_str()), (320.0, "samples/s"));
        assert_eq!((s.ci_low, s.ci_high), (Some(288.0), Some(352.0)));
        // the markers' own sample counts win over the batch asked for
        let s = per_sample(
            &Throughput {
                samples_per_s: Some(160.0),
                ..t.clone()
            },
            32,
        );
        assert_eq!(s.value, 160.0);
        let r = Throughput {
            unit: "img/s".into(),
            source: RateSource::RateRegex,
            ..t
        };
        assert_eq!(per_sample(&r, 32), r);
        let n = lr_plan(8, 32);
        assert!(n.contains("32/8 = 4.000×") && n.contains("2.000×"), "{n}");
    }
}
