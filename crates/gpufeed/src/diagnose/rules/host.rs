//! `host_bound`: the training loop spends its time on the host in the user's own code — batches
//! built by hand, per-step Python, checkpoints, evaluation — rather than waiting for a
//! DataLoader or computing. Read from the calls the loop makes (`python.host_calls`), each
//! already named in the user's terms by the evidence.

use super::{r1, r2};
use crate::diagnose::evidence::{Evidence, HostCall, PythonEvidence};
use crate::finding::{Finding, FindingId, HostCause, Item, Kind, Severity};

use super::stacks::HOST_PCT;
/// Share from which it is critical.
const HOST_CRITICAL_PCT: f64 = 50.0;
/// The share of the loop a cause is brought under by the "less often" fixes.
const TARGET_PCT: f64 = 5.0;

/// How a call is named in a sentence: `load_batch (train.py:57)`, or for a library function
/// called on the loop's line, `torch.serialization.save at train.py:80`.
fn call_words(c: &HostCall) -> String {
    let code = c
        .at_code
        .as_deref()
        .map(|s| format!(": `{}`", s.trim()))
        .unwrap_or_default();
    if c.library || c.function.is_empty() {
        format!("{} called at {}{code}", c.function, c.at())
    } else {
        format!("{} (called at {}{code})", c.function, c.at())
    }
}

/// How many times less often a cause taking `pct` of the loop must run to take [`TARGET_PCT`].
fn less_often(pct: f64, target: f64) -> u32 {
    let keep = (100.0 - pct).max(1.0);
    // x/k / (keep + x/k) = target  →  k = x (1 - target) / (target keep)
    let t = target / 100.0;
    ((pct * (1.0 - t)) / (t * keep)).ceil().max(2.0) as u32
}

fn fix(cause: HostCause, c: &HostCall, pct: f64, p: &PythonEvidence, cores: u32) -> String {
    let f = &c.function;
    match cause {
        HostCause::BatchBuilding => {
            let need = super::stacks::workers_needed(pct, 0, None);
            let n = need.min(super::stacks::workers_cap(cores)).max(1);
            let site = if c.library {
                format!("the work on {}", c.at())
            } else {
                f.clone()
            };
            format!(
                "Build batches in DataLoader workers instead of in the training loop: turn \
                 {site} into a Dataset whose __getitem__(i) returns one sample (what {site} \
                 does for one item; stacking is the DataLoader's collate), then iterate \
                 `DataLoader(dataset, batch_size=..., shuffle=True, num_workers={n}, \
                 persistent_workers=True, pin_memory=True)` instead of calling it at {at}: the \
                 workers build the next batches while the loop trains (about {need} workers \
                 hide {pct:.0}% of the loop{cap}).",
                at = c.at(),
                cap = if need > n {
                    format!(
                        "; this machine has {}, so beyond {n} they share cores with the loop",
                        crate::units::plural(cores as usize, "core", "cores")
                    )
                } else {
                    String::new()
                }
            )
        }
        HostCause::StepPython => step_python_fix(c, pct),
        HostCause::Checkpointing => {
            let per = p
                .checkpoint_saves
                .map(|s| {
                    format!(
                        " Each save takes about {} ({} seen).",
                        crate::units::duration(s.s_per_save),
                        s.saves
                    )
                })
                .unwrap_or_default();
            format!(
                "Checkpoints take {pct:.0}% of the loop ({w}).{per} Save {k}x less often (that \
                 brings them under {TARGET_PCT:.0}%), asynchronously (`torch.distributed.\
                 checkpoint.async_save`, or copy the state dict to CPU and write it from a \
                 background thread), only what resumes training (model, optimizer, scheduler, \
                 step), and to fast local storage.",
                w = call_words(c),
                k = less_often(pct, TARGET_PCT)
            )
        }
        HostCause::Evaluation => format!(
            "Evaluation inside training takes {pct:.0}% of the loop ({w}). Evaluate {k}x less \
             often (every N steps or epochs: that brings it under 10%), on a fixed subset of \
             the validation set, with a DataLoader of its own (`num_workers`, \
             `persistent_workers=True`) and under `torch.inference_mode()`.",
            w = call_words(c),
            k = less_often(pct, 10.0)
        ),
        HostCause::HostSync => format!(
            "Host–device syncs: {w} takes {pct:.0}% of the loop reading values back \
             (`.item()`, `.cpu()`, `.tolist()`, printing tensors). Keep them on the device: \
             accumulate as tensors and read them every N steps (`if step % {k} == 0:`) or once \
             per epoch; drop `torch.cuda.synchronize()` outside timing code.",
            w = call_words(c),
            k = less_often(pct, TARGET_PCT).max(10)
        ),
    }
}

/// The fix for per-step Python work: what it does decides how (images and histograms are
/// written less often; computations move to the device).
fn step_python_fix(c: &HostCall, pct: f64) -> String {
    if c.uses.iter().any(|u| u == "saving images") {
        return format!(
            "Saving images every step: {w} takes {pct:.0}% of the loop encoding image files. \
             Save samples every N steps (`if step % {k} == 0:`; the DCGAN example saves every \
             100) or at the end of an epoch, or hand the tensors (`.cpu()`) to a background \
             thread that writes them.",
            w = call_words(c),
            k = less_often(pct, TARGET_PCT).max(10)
        );
    }
    if c.uses.iter().any(|u| u == "histograms") {
        return format!(
            "Histograms every step: {w} takes {pct:.0}% of the loop copying every parameter \
             and gradient to the host and binning it. Write histograms every few hundred steps \
             (`if step % {k} == 0:`) or once per epoch, for the layers you watch; log scalars \
             (norms) in between.",
            w = call_words(c),
            k = less_often(pct, TARGET_PCT).max(100)
        );
    }
    let mut extra = String::new();
    if c.uses.iter().any(|u| u == "tqdm") {
        extra.push_str(
            " Refresh the progress bar less often (`tqdm(..., mininterval=1.0)`, \
                     `set_postfix` every N steps with plain numbers).",
        );
    }
    if c.uses
        .iter()
        .any(|u| u == "logging" || u == "wandb" || u == "tensorboard")
    {
        extra.push_str(" Log every N steps, not every step.");
    }
    if c.uses.iter().any(|u| u == "printing tensors") {
        extra.push_str(" Do not print tensors every step.");
    }
    format!(
        "Per-step Python work: {w} takes {pct:.0}% of the loop. Compute it with tensor \
                 operations on the device (torch ops or torchmetrics, accumulated across \
                 steps) instead of Python loops over `.tolist()`/`.item()` values, and only \
                 every N steps (`if step % {k} == 0:`) or once per epoch.{extra}",
        w = call_words(c),
        k = less_often(pct, TARGET_PCT).max(10)
    )
}

/// `host_bound`: one host-side cause takes [`HOST_PCT`] of a training loop (one that runs
/// backward passes or optimizer steps) whose GPU, where measured, is not busy.
pub(crate) fn host_bound(e: &Evidence) -> Option<Finding> {
    let p = e.python.as_ref()?;
    let m = p.main.as_ref()?;
    if m.phases_pct.backward + m.phases_pct.optimizer <= 0.0 {
        return None;
    }
    if e.busy_fraction().is_some_and(|b| b >= super::STARVED_BUSY) {
        return None;
    }
    let (cause, pct, call) = p.host_causes().into_iter().next()?;
    if pct < HOST_PCT {
        return None;
    }
    let cores = super::stacks::cores(e);
    let title = format!(
        "The training loop spends {pct:.0}% of its time {}: most in {}",
        cause.words(),
        call_words(call)
    );
    let mut f = Finding::new(
        FindingId::HostBound,
        if pct >= HOST_CRITICAL_PCT {
            Severity::Critical
        } else {
            Severity::Warning
        },
        title,
    )
    .kind(Kind::Host(cause))
    .with(Item::HostPct(r1(pct)))
    .with(Item::HostCall(call.function.as_str().into()))
    .with(Item::HostCallAt(call.at()))
    .with(Item::HostCallPct(r1(call.pct)));
    if let Some(s) = call.seconds {
        f = f.with(Item::HostCallS(s));
    }
    if let (HostCause::Checkpointing, Some(s)) = (cause, p.checkpoint_saves) {
        f = f
            .with(Item::CheckpointSaves(s.saves))
            .with(Item::CheckpointSPerSave(s.s_per_save));
    }
    let fix = fix(cause, call, pct, p, cores);
    Some(
        f.recommend(fix)
            .speedup(Some(r2((100.0 / (100.0 - pct).max(2.0)).min(50.0)))),
    )
}
