//! The verdict: one primary bottleneck, with a confidence, chosen from the evidence and findings.

use super::evidence::GpuState;
use super::evidence::{Evidence, Origin};
use super::rules::gpus;
use super::rules::r2;
use super::rules::sampling_factor;
use crate::finding::{evidence_of, Basis, Finding, FindingId, HostCause, InputKind, Kind};
use serde::{Deserialize, Serialize};

/// Verdict ids (a public contract, like finding ids), serialised to their snake_case strings.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[strum(serialize_all = "snake_case")]
#[serde(rename_all = "snake_case")]
pub enum VerdictId {
    InputBound,
    /// The training loop's time goes to host-side work in the user's code (its `cause`:
    /// batches built by hand, per-step Python, checkpoints, evaluation, host–device syncs).
    HostBound,
    /// Healthy: the GPU is busy and the input keeps up.
    ComputeBound,
    TransferBound,
    Throttled,
    Idle,
    /// A GPU always has a kernel running but its SMs stay almost empty (DCGM SM activity):
    /// kernels too small to fill it.
    LaunchBound,
    Unknown,
}

impl VerdictId {
    /// Every verdict id, in the order the docs list them.
    pub const ALL: &'static [VerdictId] = <VerdictId as strum::VariantArray>::VARIANTS;

    /// The stable string (the same as its JSON form).
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl std::fmt::Display for VerdictId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// The one primary bottleneck.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// One of `input_bound`, `compute_bound` (healthy), `transfer_bound`, `throttled`, `idle`,
    /// `unknown`.
    pub id: VerdictId,
    /// 0–1: how sure the evidence makes us.
    pub confidence: f64,
    /// One line for people.
    pub summary: String,
    /// Id of the finding the verdict rests on, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finding: Option<FindingId>,
    /// For `host_bound`: what keeps the loop on the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<HostCause>,
    /// Mean GPU busy fraction (mean utilization / 100) over the GPUs the job used.
    #[serde(default)]
    pub gpu_busy_fraction: Option<f64>,
    /// Causes the data could not decide between, each with its confidence (most likely first);
    /// empty when the cause is clear.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub candidates: Vec<Candidate>,
    /// Each measured GPU judged on its own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<GpuJudgement>,
}

/// A cause the data leave open.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// A finding id (`input_bound`, `batch_too_small`).
    pub id: FindingId,
    pub confidence: f64,
}

/// One GPU's state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuJudgement {
    pub index: u32,
    pub state: GpuState,
    pub busy_fraction: Option<f64>,
}

/// Each GPU's state in words: `GPU 0 busy, GPU 1 unused`, or past 8 GPUs grouped by state
/// (`busy: GPUs 0-7, 9 (9); unused: GPUs 8, 10-31 (23)`), so a fleet's export stays readable.
pub(crate) fn states_line(gpus: &[GpuJudgement]) -> String {
    if gpus.len() <= 8 {
        return gpus
            .iter()
            .map(|g| format!("GPU {} {}", g.index, g.state.as_str()))
            .collect::<Vec<_>>()
            .join(", ");
    }
    let mut order: Vec<GpuState> = Vec::new();
    for g in gpus {
        if !order.contains(&g.state) {
            order.push(g.state);
        }
    }
    order
        .iter()
        .map(|&st| {
            let idx: Vec<u32> = gpus
                .iter()
                .filter(|g| g.state == st)
                .map(|g| g.index)
                .collect();
            format!(
                "{}: GPUs {} ({})",
                st.as_str(),
                crate::units::index_ranges(&idx),
                idx.len()
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn has(findings: &[Finding], id: FindingId) -> Option<&Finding> {
    findings.iter().find(|f| f.id == id)
}

/// What is missing to name a cause, and how to get it.
fn missing_data(e: &Evidence) -> &'static str {
    match e.origin {
        Origin::GpuLog => {
            "This log has only GPU figures: record the job with `gpufeed run -- <your command>` \
             (or attach with `gpufeed record --pid PID`) to add the host and the job's processes."
        }
        Origin::Recording if !e.has_host() && !e.has_job() => {
            "This recording has no host or process samples (/proc was not readable where it \
             ran): record where /proc is readable to see the workers, cores and I/O."
        }
        Origin::Recording => {
            "Host and process data show no saturated worker, core or I/O wait: what is missing \
             is the training step itself; a PyTorch profiler trace (`gpufeed analyze TRACE`) \
             shows where each step waits."
        }
    }
}

/// The verdict names the GPU it is about rather than pooling several: `GPU 2 is` when the job
/// used one GPU of several, `the GPUs are` for several, `the GPU is` for one.
fn subject(e: &Evidence) -> String {
    let used: Vec<u32> = e.used_gpus().map(|g| g.index).collect();
    match (used.as_slice(), e.measured_gpus().count()) {
        ([one], n) if n > 1 => format!("GPU {one} is"),
        (u, _) if u.len() > 1 => "the GPUs are".into(),
        _ => "the GPU is".into(),
    }
}

fn input_confidence(e: &Evidence, kind_is_clear: bool) -> f64 {
    let mut c: f64 = 0.5;
    if e.strongest_period().is_some_and(|p| p.is_strong()) {
        c += 0.2;
    }
    if e.any_bimodal() {
        c += 0.1;
    }
    if e.has_host() || e.has_job() {
        c += if kind_is_clear { 0.15 } else { 0.05 };
    }
    (c * sampling_factor(e.sample_interval_s())).min(0.95)
}

/// What every verdict of one decision shares: the pooled busy fraction and each GPU's state.
struct Maker {
    busy: Option<f64>,
    gpus: Vec<GpuJudgement>,
    /// What the summary says is busy: `the GPU is`, `GPU 2 is` (the one GPU the job used of
    /// several), `the GPUs are` (pooled over the ones it used).
    subject: String,
}

impl Maker {
    fn mk(
        &self,
        id: VerdictId,
        confidence: f64,
        summary: String,
        finding: Option<FindingId>,
    ) -> Verdict {
        Verdict {
            id,
            confidence: r2(confidence.clamp(0.0, 1.0)),
            summary,
            finding,
            cause: None,
            gpu_busy_fraction: self.busy.map(super::rules::r3),
            candidates: Vec::new(),
            gpus: self.gpus.clone(),
        }
    }
}

pub fn decide(e: &Evidence, findings: &[Finding]) -> Verdict {
    let m = Maker {
        busy: e.busy_fraction(),
        gpus: e
            .measured_gpus()
            .filter_map(|g| {
                gpus::gpu_state(e, g).map(|state| GpuJudgement {
                    index: g.index,
                    state,
                    busy_fraction: g.busy_fraction.map(super::rules::r3),
                })
            })
            .collect(),
        subject: subject(e),
    };
    // The training loop's measured data wait: a verdict with or without GPU data. A rank that
    // starves the others sets the pace of the whole job, whatever the median rank shows.
    if let Some(v) = from_straggler(&m, findings)
        .or_else(|| from_host(&m, findings))
        .or_else(|| from_stacks(&m, findings))
    {
        return v;
    }
    let Some(b) = m.busy else {
        return from_loop(&m, e, findings).unwrap_or_else(|| no_utilization(&m, e));
    };
    let pct = b * 100.0;
    if let Some(f) = has(findings, FindingId::LaunchBound) {
        let busy_others: Vec<String> = m
            .gpus
            .iter()
            .filter(|g| g.state != GpuState::TinyKernels)
            .filter_map(|g| {
                Some(format!(
                    "GPU {} {} ({:.0}% busy)",
                    g.index,
                    g.state.as_str(),
                    g.busy_fraction? * 100.0
                ))
            })
            .collect();
        let others = if busy_others.is_empty() {
            String::new()
        } else {
            format!(" Beside it: {}.", busy_others.join(", "))
        };
        return m.mk(
            VerdictId::LaunchBound,
            0.7,
            format!("{}.{others}", f.title),
            Some(FindingId::LaunchBound),
        );
    }
    if has(findings, FindingId::GpuIdle).is_some() {
        return m.mk(
            VerdictId::Idle,
            0.9,
            format!("The GPU was idle ({pct:.1}% busy)."),
            Some(FindingId::GpuIdle),
        );
    }
    let transfer = has(findings, FindingId::TransferBound);
    let batch_c = has(findings, FindingId::BatchTooSmall)
        .and_then(|f| evidence_of!(f.evidence, CandidateConfidence).copied());
    // The samples' input_bound, with its kind as the rule named it.
    let input = has(findings, FindingId::InputBound).and_then(|f| match (f.kind, &f.basis) {
        (Some(Kind::Input(k)), Basis::Input { kind_is_clear }) => Some((k, *kind_is_clear)),
        _ => None,
    });
    if let Some((kind, clear)) = input {
        if !(transfer.is_some() && kind == InputKind::Unknown) {
            return from_input(&m, e, (kind, clear), pct, batch_c);
        }
    }
    if transfer.is_some() {
        return m.mk(
            VerdictId::TransferBound,
            0.75,
            format!(
                "Transfer-bound: host-to-device copies saturate the PCIe link ({pct:.0}% busy)."
            ),
            Some(FindingId::TransferBound),
        );
    }
    from_gpu_side(&m, e, findings, b, batch_c)
}

/// `host_bound`: a host-side cause in the user's code takes more of the training loop than its
/// data wait, on a GPU that is not kept busy: the `host_bound` finding's cause, or host–device
/// syncs (`sync_bound`) of at least the same share.
fn from_host(m: &Maker, findings: &[Finding]) -> Option<Verdict> {
    let host = has(findings, FindingId::HostBound).and_then(|f| match f.kind {
        Some(Kind::Host(c)) => Some((f, c, *evidence_of!(f.evidence, HostPct)?)),
        _ => None,
    });
    let sync = has(findings, FindingId::SyncBound).and_then(|f| {
        let pct = *evidence_of!(f.evidence, SyncPct)?;
        (pct >= super::rules::stacks::HOST_PCT).then_some((f, HostCause::HostSync, pct))
    });
    // The finding that names the call wins; syncs alone (no call named) otherwise.
    let (f, cause, pct) = host.or(sync)?;
    let wait = has(findings, FindingId::InputBound)
        .and_then(|i| evidence_of!(i.evidence, DataWaitPct).copied())
        .unwrap_or(0.0);
    if wait >= pct || m.busy.is_some_and(|b| b >= super::rules::STARVED_BUSY) {
        return None;
    }
    let gpu = m
        .busy
        .map(|b| format!(" (the GPU is busy {:.0}% of the time)", b * 100.0))
        .unwrap_or_default();
    let most = match cause {
        HostCause::HostSync => evidence_of!(f.evidence, SyncAt)
            .filter(|at| at.as_str() != "unknown")
            .map(|at| format!("most at {at}")),
        _ => evidence_of!(f.evidence, HostCall).map(|c| {
            let at = evidence_of!(f.evidence, HostCallAt)
                .map(|a| format!(" ({a})"))
                .unwrap_or_default();
            format!("most in {c}{at}")
        }),
    }
    .map(|s| format!("; {s}"))
    .unwrap_or_default();
    let mut v = m.mk(
        VerdictId::HostBound,
        (0.55 + pct / 200.0).min(0.9),
        format!(
            "Host-bound: the training loop spends {pct:.0}% of its time {}{gpu}{most}.",
            cause.words()
        ),
        Some(f.id),
    );
    v.cause = Some(cause);
    Some(v)
}

/// `input_bound` measured in the Python stacks, when a finding says so.
fn from_stacks(m: &Maker, findings: &[Finding]) -> Option<Verdict> {
    let f = has(findings, FindingId::InputBound)?;
    if !matches!(f.kind, Some(Kind::PythonStacks(_))) {
        return None;
    }
    let wait = *evidence_of!(f.evidence, DataWaitPct)?;
    let hot_stage = evidence_of!(f.evidence, HotStage);
    let restarted = (f.kind
        == Some(crate::finding::Kind::PythonStacks(Some(
            crate::finding::StackKind::WorkersRestarted,
        ))))
    .then(|| {
        evidence_of!(f.evidence, WorkerStartStopPct)
            .copied()
            .filter(|x| x.is_finite())
    })
    .flatten()
    .map(|p| {
        format!(
            "; its DataLoader workers are started anew every epoch ({p:.0}% of the loop starts \
             and stops them)"
        )
    })
    .unwrap_or_default();
    let native = if evidence_of!(f.evidence, HotStageNativePct).is_some() {
        crate::diagnose::evidence::NATIVE_UNDER
    } else {
        ""
    };
    let stage = hot_stage
        .map(|s| format!("{restarted}; the slowest data stage is {native}{s}"))
        .unwrap_or(restarted);
    let gpu = m
        .busy
        .map(|b| format!(" (the GPU is busy {:.0}% of the time)", b * 100.0))
        .unwrap_or_default();
    Some(m.mk(
        VerdictId::InputBound,
        (0.6 + wait / 200.0).min(0.95),
        format!(
            "Input-bound: the training loop waits for data {wait:.0}% of its time{gpu}{stage}."
        ),
        Some(FindingId::InputBound),
    ))
}

/// `input_bound` from a multi-process job's straggler: one rank waits for its data and, in
/// synchronous training, the others wait for it in the collective (where their time looks like
/// backward or sync, not data wait): the job runs at the pace of that rank's input pipeline.
fn from_straggler(m: &Maker, findings: &[Finding]) -> Option<Verdict> {
    let f = has(findings, FindingId::Straggler)?;
    // A share that is not a number is no evidence (it reads `null` in the JSON).
    let wait = evidence_of!(f.evidence, DataWaitPct)
        .copied()
        .filter(|x| x.is_finite())?;
    let others = evidence_of!(f.evidence, OthersDataWaitPct)
        .copied()
        .filter(|x| x.is_finite())?;
    let who = match evidence_of!(f.evidence, StragglerRank) {
        Some(r) => format!("rank {r}"),
        None => format!("pid {}", evidence_of!(f.evidence, StragglerPid)?),
    };
    let stage = evidence_of!(f.evidence, SlowestStage)
        .map(|s| format!("; its slowest data stage is {s}"))
        .unwrap_or_default();
    Some(m.mk(
        VerdictId::InputBound,
        (0.6 + wait / 200.0).min(0.95),
        format!(
            "Input-bound: {who} starves the others: it waits for data {wait:.0}% of its time, \
             the other ranks {others:.0}%, and they wait for it in the collective{stage}."
        ),
        Some(FindingId::Straggler),
    ))
}

/// Share of the training thread's time in forward, backward and the optimizer from which a loop
/// that does not wait for its input is called busy computing (`compute_bound`).
pub const LOOP_COMPUTE_PCT: f64 = 50.0;
/// The most confidence a verdict from the loop alone gets: the GPU itself was not measured.
pub const LOOP_CONFIDENCE_MAX: f64 = 0.75;

/// No GPU utilization, but the training loop's own phases: a loop that does not wait for its
/// input (an input-bound one is [`from_stacks`]') and spends most of its time in forward,
/// backward and the optimizer is `compute_bound`; otherwise `unknown`, saying where its time
/// goes. `None` without a phase split.
fn from_loop(m: &Maker, e: &Evidence, findings: &[Finding]) -> Option<Verdict> {
    let (wait, _, p) = super::rules::stacks::data_wait_from(e)?;
    if wait >= super::rules::stacks::DATA_WAIT_PCT {
        return None;
    }
    let ph = &p.main.as_ref()?.phases_pct;
    let compute = ph.forward + ph.backward + ph.optimizer;
    let gpu = match e.no_gpu {
        Some(n) => format!("GPU not measured: {}", n.as_words()),
        None => "GPU utilization not measured".to_string(),
    };
    let not_waiting = format!("the training loop waits for data only {wait:.0}% of its time");
    if compute >= LOOP_COMPUTE_PCT {
        return Some(m.mk(
            VerdictId::ComputeBound,
            (0.4 + 0.4 * compute / 100.0).min(LOOP_CONFIDENCE_MAX),
            format!(
                "Not input-bound: {not_waiting} and spends {compute:.0}% in forward, backward \
                 and the optimizer: it is busy computing (from the loop's own phases; {gpu})."
            ),
            None,
        ));
    }
    // Where the rest goes: the largest phase other than the data wait.
    let (name, pct) = [
        ("host-device syncs", ph.sync),
        ("checkpoint I/O", ph.checkpoint_io),
        ("code outside the loop's phases", ph.other),
        ("forward, backward and the optimizer", compute),
    ]
    .into_iter()
    .fold(("", f64::MIN), |a, b| if b.1 > a.1 { b } else { a });
    let finding = has(findings, FindingId::SyncBound).map(|f| f.id);
    Some(m.mk(
        VerdictId::Unknown,
        0.3,
        format!(
            "Not input-bound: {not_waiting}; its largest share is {name} ({pct:.0}%) (from the \
             loop's own phases; {gpu})."
        ),
        finding,
    ))
}

/// No utilization at all: say how to get it.
use crate::diagnose::evidence::UNUSED_MEM_BYTES;

fn no_utilization(m: &Maker, e: &Evidence) -> Verdict {
    // Memory alone can still say nothing ran: no GPU held more than a CUDA context's worth.
    let mems: Vec<u64> = e.gpus.iter().filter_map(|g| g.mem_used_max_bytes).collect();
    if !mems.is_empty() && mems.len() == e.gpus.len() && mems.iter().all(|&b| b <= UNUSED_MEM_BYTES)
    {
        let most = mems.iter().max().copied().unwrap_or(0);
        return m.mk(
            VerdictId::Idle,
            0.6,
            format!(
                "No utilization in this input, but no GPU held more than {} of memory: nothing \
                 ran on {}.",
                crate::units::bytes(most),
                if mems.len() == 1 { "it" } else { "them" }
            ),
            None,
        );
    }
    let how = match e.origin {
        Origin::GpuLog => {
            "log utilization.gpu too (nvidia-smi --query-gpu=timestamp,index,utilization.gpu,\
             memory.used,memory.total --format=csv -lms 200)"
        }
        Origin::Recording => {
            "record on a machine where the NVIDIA driver loads (`gpufeed doctor` says why it \
             does not)"
        }
    };
    m.mk(
        VerdictId::Unknown,
        0.0,
        format!("No GPU utilization was recorded: nothing to judge the GPU by; {how}."),
        None,
    )
}

/// Starvation of a known kind: `input_bound`, or undecided beside a batch too small.
fn from_input(
    m: &Maker,
    e: &Evidence,
    (kind, kind_is_clear): (InputKind, bool),
    pct: f64,
    batch_c: Option<f64>,
) -> Verdict {
    let c = input_confidence(e, kind_is_clear);
    let what = match kind {
        InputKind::TooFewWorkers => "there are too few DataLoader workers",
        InputKind::CpuSaturated => "the CPU is saturated",
        InputKind::IoBound => "reading data is too slow",
        InputKind::MainProcess => "the training loop's process is pinned at a core",
        InputKind::Unknown => "the data supply cannot keep up",
    };
    let mut candidates = Vec::new();
    if let Some(bc) = batch_c {
        candidates = ranked(vec![
            (FindingId::InputBound, c),
            (FindingId::BatchTooSmall, bc),
        ]);
    }
    // Without host data a batch too small for the GPU may explain it as well: when
    // neither is clearly ahead, the verdict says so instead of picking one.
    if batch_c.is_some_and(|bc| !(c >= 0.5 && c >= 2.0 * bc)) {
        let bc = batch_c.unwrap_or(0.0);
        let mut v = m.mk(
            VerdictId::Unknown,
            c.max(bc),
            format!(
                "Undecided: {} busy only {pct:.0}% of the time, either because \
                 the input cannot keep up (input_bound, confidence {c:.2}) or because \
                 the batch or model is far too small for it (batch_too_small, {bc:.2}). \
                 {}",
                m.subject,
                missing_data(e)
            ),
            None,
        );
        v.candidates = candidates;
        return v;
    }
    let mut v = m.mk(
        VerdictId::InputBound,
        c,
        format!(
            "Input-bound: {} busy only {pct:.0}% of the time because {what}.",
            m.subject
        ),
        Some(FindingId::InputBound),
    );
    v.candidates = candidates;
    v
}

/// The input keeps up (or cannot be judged): throttling, a busy GPU, a small batch, or no
/// cause this input can name.
fn from_gpu_side(
    m: &Maker,
    e: &Evidence,
    findings: &[Finding],
    b: f64,
    batch_c: Option<f64>,
) -> Verdict {
    let pct = b * 100.0;
    let throttled = has(findings, FindingId::Throttled);
    let thr_frac = throttled
        .and_then(|f| evidence_of!(f.evidence, ThrottledTimeFraction).copied())
        .unwrap_or(0.0);
    if throttled.is_some() && thr_frac >= 0.2 {
        return m.mk(
            VerdictId::Throttled,
            (0.6 + thr_frac * 0.4).min(0.95),
            format!(
                "Throttled: clocks were held down {:.0}% of the time.",
                thr_frac * 100.0
            ),
            Some(FindingId::Throttled),
        );
    }
    if has(findings, FindingId::ComputeBound).is_some() {
        let c = 0.6 + (b - gpus::BUSY) * 2.5;
        return m.mk(
            VerdictId::ComputeBound,
            c.min(0.95),
            format!(
                "Compute-bound: {} busy {pct:.0}% of the time; the input keeps up.",
                m.subject
            ),
            Some(FindingId::ComputeBound),
        );
    }
    if throttled.is_some() {
        return m.mk(
            VerdictId::Throttled,
            0.5,
            format!(
                "Throttled: clocks were held down {:.0}% of the time.",
                thr_frac * 100.0
            ),
            Some(FindingId::Throttled),
        );
    }
    if let Some(bc) = batch_c {
        let mut v = m.mk(
            VerdictId::Unknown,
            bc,
            format!(
                "The GPU is busy {pct:.0}% of the time and its memory is mostly free: most likely \
                 the batch or model is too small for it (batch_too_small, confidence {bc:.2}). {}",
                missing_data(e)
            ),
            Some(FindingId::BatchTooSmall),
        );
        v.candidates = vec![Candidate {
            id: FindingId::BatchTooSmall,
            confidence: bc,
        }];
        return v;
    }
    unexplained(m, e, pct)
}

/// Low utilization with no cause this input can name: what is missing to name one.
fn unexplained(m: &Maker, e: &Evidence, pct: f64) -> Verdict {
    let hidden = match e.sample_interval_s() {
        Some(i) if i >= 1.0 && e.origin == Origin::GpuLog => format!(
            " Sampled every {}, this log cannot show sub-second stalls.",
            interval_words(i)
        ),
        _ => String::new(),
    };
    // Several GPUs in different states: say so rather than one pooled figure.
    let gpus = &m.gpus;
    let who = if gpus.len() > 1 && gpus.windows(2).any(|w| w[0].state != w[1].state) {
        format!(
            "The GPUs are busy {pct:.0}% of the time on average ({})",
            states_line(gpus)
        )
    } else {
        format!("The GPU is busy {pct:.0}% of the time")
    };
    m.mk(
        VerdictId::Unknown,
        0.3,
        format!(
            "{who} without a cause this input can name.{hidden} {}",
            missing_data(e)
        ),
        None,
    )
}

/// `10 s`, `1 min`, `200 ms` for a sampling interval.
pub(crate) fn interval_words(s: f64) -> String {
    if s >= 60.0 && (s % 60.0).abs() < 1e-6 {
        format!("{:.0} min", s / 60.0)
    } else if s >= 1.0 {
        format!("{} s", r1_trim(s))
    } else {
        format!("{:.0} ms", s * 1000.0)
    }
}

fn r1_trim(s: f64) -> String {
    let r = (s * 10.0).round() / 10.0;
    if (r - r.round()).abs() < 1e-9 {
        format!("{:.0}", r)
    } else {
        format!("{r:.1}")
    }
}

fn ranked(v: Vec<(FindingId, f64)>) -> Vec<Candidate> {
    let mut c: Vec<Candidate> = v
        .into_iter()
        .map(|(id, confidence)| Candidate {
            id,
            confidence: r2(confidence),
        })
        .collect();
    c.sort_by(|a, b| b.confidence.total_cmp(&a.confidence));
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::rules::{evaluate, fixtures::*};

    fn verdict(e: &Evidence) -> Verdict {
        decide(e, &evaluate(e))
    }

    #[test]
    fn healthy_is_compute_bound_with_no_starvation_finding() {
        let e = base(97.0);
        let v = verdict(&e);
        assert_eq!(v.id, VerdictId::ComputeBound);
        assert!(v.confidence >= 0.8, "{v:?}");
        let ids: Vec<&str> = evaluate(&e).iter().map(|f| f.id.as_str()).collect();
        assert_eq!(
            ids,
            ["compute_bound"],
            "only the levers, no starvation finding"
        );
        assert_eq!(v.finding, Some(FindingId::ComputeBound));
    }

    #[test]
    fn a_steadily_busy_log_is_compute_bound_not_unknown() {
        // Mean 83%, p50 91%, sampled every 10 s, no host data.
        let mut e = as_log(base(83.0), 10.0);
        e.gpus[0].util_p50_pct = Some(91.0);
        let v = verdict(&e);
        assert_eq!(v.id, VerdictId::ComputeBound, "{v:?}");
        assert!(v.confidence >= 0.6);
        assert_eq!(v.gpus[0].state, GpuState::Busy);
    }

    #[test]
    fn many_gpus_are_grouped_by_state() {
        let g = |index, state| GpuJudgement {
            index,
            state,
            busy_fraction: None,
        };
        let two = [g(0, GpuState::Busy), g(1, GpuState::Unused)];
        assert_eq!(states_line(&two), "GPU 0 busy, GPU 1 unused");
        let many: Vec<GpuJudgement> = (0..32)
            .map(|i| {
                g(
                    i,
                    if i < 8 || i == 9 {
                        GpuState::Busy
                    } else {
                        GpuState::Unused
                    },
                )
            })
            .collect();
        assert_eq!(
            states_line(&many),
            "busy: GPUs 0-7, 9 (9); unused: GPUs 8, 10-31 (23)"
        );
    }

    #[test]
    fn an_unused_gpu_does_not_pool_into_the_verdict() {
        let mut e = as_log(base(91.0), 1.0);
        e.gpus.push(gpu(1, 0.0));
        e.gpus[1].mem_used_max_bytes = Some(15 << 20);
        e.gpus[1].util_p90_pct = Some(0.0);
        e.gpus[1].util_sample_interval_s = Some(1.0);
        let v = verdict(&e);
        assert_eq!(v.id, VerdictId::ComputeBound, "{v:?}");
        assert_eq!(v.gpu_busy_fraction, Some(0.91));
        assert_eq!(v.gpus[1].state, GpuState::Unused);
        let ids: Vec<&str> = evaluate(&e).iter().map(|f| f.id.as_str()).collect();
        assert_eq!(ids[0], "gpu_unused", "{ids:?}");
    }

    #[test]
    fn undecidable_causes_are_named_as_candidates() {
        // A weakly repeating 25% on a 32 GB card with 472 MiB used, no host data.
        let mut e = as_log(base(25.0), 1.0);
        e.gpus[0].mem_used_max_fraction = Some(472.0 / 32768.0);
        e.gpus[0].periodicity = Some(crate::diagnose::streaming::PeriodicityResult {
            period_s: 30.0,
            strength: 0.4,
            step_s: 1.0,
            windows: 3,
        });
        let v = verdict(&e);
        assert_eq!(v.id, VerdictId::Unknown, "{v:?}");
        let ids: Vec<&str> = v.candidates.iter().map(|c| c.id.as_str()).collect();
        assert!(ids.contains(&"input_bound") && ids.contains(&"batch_too_small"));
        assert!(v.summary.contains("gpufeed run"), "{}", v.summary);
        for f in evaluate(&e) {
            assert_eq!(f.expected_speedup, None, "{} has a bound", f.id);
        }
        // A clean square wave at 0.2 s is starvation even with free memory.
        let mut s = as_log(starving(base(30.0)), 0.2);
        s.gpus[0].mem_used_max_fraction = Some(0.02);
        let v = verdict(&s);
        assert_eq!(v.id, VerdictId::InputBound, "{v:?}");
        assert_eq!(v.candidates.len(), 2);
    }

    #[test]
    fn coarse_sampling_lowers_the_confidence() {
        let fine = verdict(&as_log(starving(base(30.0)), 0.2)).confidence;
        let one = verdict(&as_log(starving(base(30.0)), 1.0)).confidence;
        let ten = verdict(&as_log(starving(base(30.0)), 10.0)).confidence;
        assert!(fine > one && one > ten, "{fine} {one} {ten}");
        assert!((sampling_factor(Some(60.0)) - 0.5).abs() < 0.01);
        assert_eq!(sampling_factor(Some(0.1)), 1.0);
    }

    #[test]
    fn gpus_in_different_states_are_named_not_pooled() {
        let mut e = base(97.0);
        e.gpus.push(gpu(1, 72.0));
        let v = verdict(&e);
        assert_eq!(v.id, VerdictId::Unknown, "one GPU is not busy: {v:?}");
        assert!(
            v.summary.contains("GPU 0 busy, GPU 1 underused"),
            "{}",
            v.summary
        );
    }

    #[test]
    fn unknown_says_what_data_is_missing() {
        let mut e = as_log(base(45.0), 1.0);
        e.gpus[0].mem_used_max_fraction = Some(0.9);
        let v = verdict(&e);
        assert_eq!(v.id, VerdictId::Unknown);
        assert!(v.summary.contains("gpufeed run --"), "{}", v.summary);
        // A recording with host data that names nothing points at the step itself.
        let mut r = base(45.0);
        r.gpus[0].mem_used_max_fraction = Some(0.9);
        let v = verdict(&r);
        assert_eq!(v.id, VerdictId::Unknown);
        assert!(v.summary.contains("gpufeed analyze"), "{}", v.summary);
        assert!(!v.summary.contains("gpufeed run"));
    }

    #[test]
    fn starving_with_one_pinned_worker_is_input_bound_and_confident() {
        let v = verdict(&too_few_workers(starving(base(30.0))));
        assert_eq!(v.id, VerdictId::InputBound);
        assert_eq!(v.finding, Some(FindingId::InputBound));
        assert!(v.confidence >= 0.9, "{v:?}");
        assert!(
            v.summary.contains("too few DataLoader workers"),
            "{}",
            v.summary
        );
    }

    #[test]
    fn no_gpu_is_unknown_idle_is_idle() {
        let mut e = base(97.0);
        e.gpus.clear();
        let v = verdict(&e);
        assert_eq!(v.id, VerdictId::Unknown);
        assert!(v.summary.contains("gpufeed doctor"), "{}", v.summary);
        assert_eq!(verdict(&base(0.5)).id, VerdictId::Idle);
    }

    /// No GPU recorded (no driver), the training loop's phases from its stacks.
    fn loop_only(wait: f64, fwd: f64, bwd: f64, sync: f64) -> Evidence {
        use crate::diagnose::evidence::{PhasesPct, PyMain, PythonEvidence};
        let mut e = base(97.0);
        e.gpus.clear();
        e.no_gpu = Some(crate::diagnose::evidence::NoGpu::NoDriver);
        e.python = Some(PythonEvidence {
            status: crate::sample::pystacks::PyStatus::Ok,
            rate_hz: Some(100.0),
            samples: 5000,
            sampled_processes: 3,
            main: Some(PyMain {
                pid: 100,
                tid: 100,
                thread_name: None,
                samples: 4000,
                phases_pct: PhasesPct {
                    data_wait: wait,
                    forward: fwd,
                    backward: bwd,
                    sync,
                    other: 100.0 - wait - fwd - bwd - sync,
                    ..Default::default()
                },
            }),
            data_hotspots: vec![],
            data_wait_pct: Some(wait),
            data_in_main_pct: Some(0.0),
            loader_processes: 2,
            loader_busy_pct: Some(20.0),
            data_io_pct: Some(1.0),
            sync_sites: vec![],
            loop_code: vec![],
            host_calls: vec![],
            checkpoint_saves: None,
            no_loop_sites: vec![],
            worker_start_stop: None,
            detail: None,
            ranks: vec![],
            slow_rank: None,
            main_waited_for: false,
            ranks_unread: vec![],
        });
        e
    }

    /// The verdict says the workers are started anew every epoch when that is
    /// the finding's kind.
    #[test]
    fn workers_started_every_epoch_are_said_in_the_verdict() {
        let mut e = loop_only(88.0, 5.0, 5.0, 0.0);
        e.job.workers_max = 2;
        e.job.workers_seen = 80;
        e.python.as_mut().unwrap().worker_start_stop =
            Some(crate::diagnose::evidence::WorkerStartStop {
                loop_pct: 50.0,
                seconds: 8.2,
                loop_seconds: 16.5,
            });
        let v = verdict(&e);
        assert_eq!(v.id, VerdictId::InputBound, "{v:?}");
        assert!(
            v.summary.starts_with(
                "Input-bound: the training loop waits for data 88% of its time; its DataLoader \
                 workers are started anew every epoch (50% of the loop starts and stops them)"
            ),
            "{}",
            v.summary
        );
        e.job.workers_seen = 2;
        let v = verdict(&e);
        assert!(!v.summary.contains("anew"), "{}", v.summary);
    }

    #[test]
    fn without_a_gpu_a_rank_that_starves_the_others_makes_the_job_input_bound() {
        use crate::diagnose::evidence::{RankLoop, SlowRank};
        // Lightning DDP on CPU: rank 0 (the median) waits 18% and sits in backward (gloo's
        // all-reduce) while rank 1 waits for data 66%.
        let mut e = loop_only(18.0, 12.0, 58.0, 0.0);
        let p = e.python.as_mut().unwrap();
        for (rank, pid, wait) in [(0, 100, 18.0), (1, 101, 66.0)] {
            p.ranks.push(RankLoop {
                rank: Some(rank),
                pid,
                tid: pid as u64,
                samples: 1000,
                phases_pct: Default::default(),
                data_wait_pct: wait,
                steps_per_s: None,
                data_hotspots: vec![],
            });
        }
        p.slow_rank = Some(SlowRank {
            rank: Some(1),
            pid: 101,
            data_wait_pct: 66.0,
            others_data_wait_pct: 18.0,
        });
        let v = verdict(&e);
        assert_eq!(v.id, VerdictId::InputBound, "{v:?}");
        assert_eq!(v.finding, Some(FindingId::Straggler));
        assert!(
            v.summary
                .contains("rank 1 starves the others: it waits for data 66%"),
            "{}",
            v.summary
        );
        // Without the slow rank, the same median loop is busy computing.
        e.python.as_mut().unwrap().slow_rank = None;
        assert_eq!(verdict(&e).id, VerdictId::ComputeBound);
    }

    #[test]
    fn without_a_gpu_the_loops_own_phases_give_the_verdict() {
        // The Lightning job after the fix: 13% data wait, 81% forward and backward.
        let e = loop_only(13.0, 30.0, 51.0, 0.0);
        assert!(evaluate(&e).is_empty());
        let v = verdict(&e);
        assert_eq!(v.id, VerdictId::ComputeBound, "{v:?}");
        // 0.4 + 0.4 x 0.81, and never above what a loop alone can say.
        assert_eq!(v.confidence, 0.72);
        assert!(v.confidence <= LOOP_CONFIDENCE_MAX);
        assert_eq!(v.gpu_busy_fraction, None);
        assert_eq!(v.finding, None);
        for s in [
            "waits for data only 13%",
            "81% in forward",
            "GPU not measured: no NVIDIA driver",
        ] {
            assert!(v.summary.contains(s), "{s}: {}", v.summary);
        }
        assert!(verdict(&loop_only(2.0, 40.0, 57.0, 0.0)).confidence <= LOOP_CONFIDENCE_MAX);
        // A loop that neither waits nor computes but syncs: host-bound, and its cause.
        let e = loop_only(5.0, 10.0, 15.0, 60.0);
        let v = verdict(&e);
        assert_eq!(v.id, VerdictId::HostBound, "{v:?}");
        assert_eq!(v.cause, Some(HostCause::HostSync));
        assert_eq!(v.finding, Some(FindingId::SyncBound));
        assert!(
            v.summary
                .contains("spends 60% of its time in host–device syncs."),
            "{}",
            v.summary
        );
        assert!(v.confidence > 0.0);
        // One that does not compute and has no host-side cause named: where its time goes.
        let mut e = loop_only(5.0, 10.0, 15.0, 0.0);
        e.python
            .as_mut()
            .unwrap()
            .main
            .as_mut()
            .unwrap()
            .phases_pct
            .checkpoint_io = 0.0;
        let v = verdict(&e);
        assert_eq!(v.id, VerdictId::Unknown, "{v:?}");
        assert!(
            v.summary.contains("code outside the loop's phases (70%)"),
            "{}",
            v.summary
        );
        // A loop that waits is input-bound, from its finding.
        assert_eq!(
            verdict(&loop_only(45.0, 20.0, 35.0, 0.0)).id,
            VerdictId::InputBound
        );
        // Without the absence known, the summary says only what is not measured.
        let mut e = loop_only(13.0, 30.0, 51.0, 0.0);
        e.no_gpu = None;
        assert!(verdict(&e).summary.contains("GPU utilization not measured"));
    }

    #[test]
    fn a_rank_that_starves_the_others_makes_the_job_input_bound() {
        use crate::diagnose::evidence::{RankLoop, SlowRank};
        // The torchrun job: the median rank waits 18% (the rest of its time is backward,
        // where it waits for rank 1 in the all-reduce); rank 1 waits 60% for its data.
        let mut e = loop_only(18.0, 16.0, 56.0, 0.0);
        assert_eq!(verdict(&e).id, VerdictId::ComputeBound, "without the ranks");
        let p = e.python.as_mut().unwrap();
        let main = p.main.clone().unwrap();
        p.ranks = [(0, 100, 18.0), (1, 101, 60.0)]
            .map(|(rank, pid, wait)| RankLoop {
                rank: Some(rank),
                pid,
                tid: u64::from(pid),
                samples: 600,
                phases_pct: main.phases_pct.clone(),
                data_wait_pct: wait,
                steps_per_s: None,
                data_hotspots: vec![],
            })
            .to_vec();
        p.slow_rank = Some(SlowRank {
            rank: Some(1),
            pid: 101,
            data_wait_pct: 60.0,
            others_data_wait_pct: 18.0,
        });
        let v = verdict(&e);
        assert_eq!(v.id, VerdictId::InputBound, "{v:?}");
        assert_eq!(v.finding, Some(FindingId::Straggler));
        assert_eq!(v.confidence, 0.9);
        assert!(
            v.summary
                .starts_with("Input-bound: rank 1 starves the others: it waits for data 60%"),
            "{}",
            v.summary
        );
        assert!(v.summary.contains("the other ranks 18%"), "{}", v.summary);
        assert!(!v.summary.contains("  "), "{}", v.summary);
    }

    #[test]
    fn throttled_busy_gpu() {
        let mut e = base(96.0);
        e.gpus[0].throttle.observed_s = 100.0;
        e.gpus[0].throttle.slowing_fraction = Some(0.5);
        e.gpus[0]
            .throttle
            .by_reason
            .insert("hw_thermal".into(), 0.5);
        let v = verdict(&e);
        assert_eq!(v.id, VerdictId::Throttled);
        assert!(v.confidence >= 0.75);
    }

    #[test]
    fn unexplained_low_utilization_is_unknown() {
        let mut e = base(45.0);
        e.gpus[0].mem_used_max_fraction = Some(0.2);
        let v = verdict(&e);
        assert_eq!(v.id, VerdictId::Unknown);
        assert_eq!(v.finding, Some(FindingId::BatchTooSmall));
    }

    /// Per-step work that saves images or writes histograms gets the fix for that (less often,
    /// a background thread), not "compute it with tensor operations on the device".
    #[test]
    fn image_dumps_and_histograms_every_step_get_their_own_fix() {
        use crate::diagnose::evidence::HostCall;
        let call = |function: &str, library, uses: &str| HostCall {
            cause: HostCause::StepPython,
            function: function.into(),
            library,
            at_file: "/home/u/train.py".into(),
            at_line: 36,
            at_code: None,
            pct: 60.0,
            seconds: Some(6.0),
            uses: vec![uses.into()],
        };
        for (c, says) in [
            (
                call("torchvision.utils.save_image", true, "saving images"),
                ["Saving images every step", "background thread"],
            ),
            (
                call("log_histograms", false, "histograms"),
                ["Histograms every step", "every few hundred steps"],
            ),
        ] {
            let mut e = loop_only(2.0, 15.0, 23.0, 0.0);
            e.python.as_mut().unwrap().host_calls = vec![c];
            let f = evaluate(&e);
            let host = f.iter().find(|f| f.id == FindingId::HostBound).unwrap();
            for s in says {
                assert!(
                    host.recommendation.contains(s),
                    "{s}: {}",
                    host.recommendation
                );
            }
            assert!(
                !host.recommendation.contains("tensor operations"),
                "{}",
                host.recommendation
            );
        }
    }

    #[test]
    fn a_loop_that_checkpoints_or_builds_its_batches_is_host_bound_with_its_cause() {
        use crate::diagnose::evidence::{CheckpointSaves, HostCall};
        let call = |cause, function: &str, library, pct| HostCall {
            cause,
            function: function.into(),
            library,
            at_file: "/home/u/train.py".into(),
            at_line: 80,
            at_code: Some("torch.save(state, path)".into()),
            pct,
            seconds: Some(pct / 10.0),
            uses: vec![],
        };
        // 60% other: checkpoints 55% of the loop, a metrics helper 5%.
        let mut e = loop_only(2.0, 15.0, 23.0, 0.0);
        let p = e.python.as_mut().unwrap();
        p.host_calls = vec![
            call(
                HostCause::Checkpointing,
                "torch.serialization.save",
                true,
                55.0,
            ),
            call(HostCause::StepPython, "metrics", false, 5.0),
        ];
        p.checkpoint_saves = Some(CheckpointSaves {
            saves: 12,
            s_per_save: 0.46,
        });
        let f = evaluate(&e);
        let host = f.iter().find(|f| f.id == FindingId::HostBound).unwrap();
        assert_eq!(host.kind, Some(Kind::Host(HostCause::Checkpointing)));
        assert_eq!(host.severity, crate::finding::Severity::Critical);
        for s in [
            "saving checkpoints",
            "torch.serialization.save called at train.py:80",
        ] {
            assert!(host.title.contains(s), "{s}: {}", host.title);
        }
        for s in ["0.5 s", "12 seen", "async_save", "Save 24x less often"] {
            assert!(
                host.recommendation.contains(s),
                "{s}: {}",
                host.recommendation
            );
        }
        assert_eq!(host.expected_speedup, Some(2.22));
        let v = decide(&e, &f);
        assert_eq!(v.id, VerdictId::HostBound, "{v:?}");
        assert_eq!(v.cause, Some(HostCause::Checkpointing));
        assert!(
            v.summary.contains("55% of its time saving checkpoints"),
            "{}",
            v.summary
        );
        // Under the threshold: where the time goes, no host verdict.
        let p = e.python.as_mut().unwrap();
        p.host_calls[0].pct = 20.0;
        assert!(evaluate(&e).iter().all(|f| f.id != FindingId::HostBound));
        // A batch-building loop that also waits more for a DataLoader: the wait decides.
        let mut e = loop_only(45.0, 10.0, 15.0, 0.0);
        e.python.as_mut().unwrap().host_calls =
            vec![call(HostCause::BatchBuilding, "load_batch", false, 30.0)];
        let f = evaluate(&e);
        assert!(f.iter().any(|f| f.id == FindingId::HostBound));
        assert_eq!(decide(&e, &f).id, VerdictId::InputBound);
    }

    #[test]
    fn verdict_ids_serialise_to_their_strings() {
        for id in VerdictId::ALL {
            let json = serde_json::to_string(id).unwrap();
            assert_eq!(json, format!("\"{}\"", id.as_str()));
            assert_eq!(serde_json::from_str::<VerdictId>(&json).unwrap(), *id);
        }
    }

    #[test]
    fn every_verdict_id_is_documented() {
        let docs = include_str!("../../../../docs/diagnose.md");
        for id in VerdictId::ALL {
            assert!(docs.contains(&format!("`{id}`")), "{id}");
        }
    }
}
