//! Sampling into a shared [`LiveState`] from a thread of its own: what `serve` exports.

use super::sampler::{LiveSampler, SamplerConfig};
use super::LiveState;
use crate::exit::{Exit, Failure};
use crate::sample::host::pid_alive;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// What a live view samples beside host and GPUs.
#[derive(Debug, Clone, Default)]
pub(crate) struct LiveExtras {
    /// Python stacks of the followed job (`--py-stacks`).
    pub py: Option<crate::record::pyrec::PyConfig>,
    /// The step-marker socket whose steps are folded in.
    pub steps: Option<Arc<crate::sample::steps::StepSocket>>,
}

/// Starts sampling into a shared state (the returned sampler stops when dropped), bumping
/// `generation` after every change of the state (so a reader can tell whether what it encoded
/// last is still current).
pub(crate) fn start(
    nvml_lib: Option<std::path::PathBuf>,
    interval: Duration,
    window: Duration,
    pid: Option<u32>,
    extras: LiveExtras,
    generation: Arc<AtomicU64>,
) -> Result<(LiveSampler, Arc<Mutex<LiveState>>), Failure> {
    if interval < Duration::from_millis(10) {
        return Err(Failure::new(
            Exit::Usage,
            "--interval must be at least 10ms",
        ));
    }
    if let Some(p) = pid {
        if !pid_alive(p) {
            return Err(Failure::input(format!(
                "no process with pid {p}: check it with `ps -p {p}`"
            )));
        }
    }
    let (tx, rx) = mpsc::channel();
    let sampler = LiveSampler::start(
        SamplerConfig {
            interval,
            nvml_lib,
            no_gpu: false,
            root_pid: pid,
            py: extras.py,
            steps: extras.steps,
        },
        tx,
    )
    .map_err(|e| Failure::with(Exit::Failure, e))?;
    if let Some(e) = &sampler.header().gpu_error {
        eprintln!("gpufeed: {e}: host metrics only");
    }
    let mut live = LiveState::new(sampler.header().clone(), window.as_secs_f64());
    live.set_auto_evaluate(false);
    let state = Arc::new(Mutex::new(live));
    let st = Arc::clone(&state);
    std::thread::Builder::new()
        .name("gpufeed-live-state".into())
        .spawn(move || {
            while let Ok(line) = rx.recv() {
                let due = match st.lock() {
                    Ok(mut s) => {
                        s.push(line);
                        generation.fetch_add(1, Ordering::Release);
                        s.evaluation_due().then(|| s.eval_input())
                    }
                    Err(_) => return,
                };
                // The verdict is computed without the lock, so a scrape never waits for it.
                if let Some(input) = due {
                    let report = input.run();
                    if let Ok(mut s) = st.lock() {
                        s.set_report(report);
                        generation.fetch_add(1, Ordering::Release);
                    }
                }
            }
        })
        .map_err(|e| Failure::new(Exit::Failure, format!("cannot start a thread: {e}")))?;
    Ok((sampler, state))
}
