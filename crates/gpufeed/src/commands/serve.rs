//! `gpufeed serve`: a Prometheus exporter (dcgm-exporter names plus gpufeed's own metrics).

use crate::cli::{GlobalOpts, ServeArgs};
use crate::exit::{Exit, Failure};
use crate::job::SignalWatch;
use crate::live::http;
use crate::live::sampler::LiveSampler;
use crate::live::shared::LiveExtras;
use crate::live::LiveState;
use crate::present::prometheus;
use crate::sample::host::pid_alive;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A step-marker socket for a job started beside the exporter (not with --once: it ends before a
/// job could be told); `--step-socket PATH` binds the path a running job was given.
fn step_socket(
    once: bool,
    given: Option<&std::path::Path>,
) -> anyhow::Result<Option<Arc<crate::sample::steps::StepSocket>>> {
    if once {
        return Ok(None);
    }
    Ok(crate::sample::steps::for_job(given, Some("read"))?)
}

/// `--once`: samples for 1.5 s, prints one exposition and stops.
fn print_once(
    mut sampler: LiveSampler,
    state: &Mutex<LiveState>,
    labels: &[(String, String)],
) -> anyhow::Result<u8> {
    let until = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    let text = {
        let mut s = state
            .lock()
            .map_err(|_| anyhow::anyhow!("state poisoned"))?;
        s.evaluate();
        prometheus::encode_state_labeled(&s, labels)
    };
    sampler.stop();
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
    Ok(Exit::Ok.code())
}

/// Serves until a signal; says once when the followed `pid` has exited.
fn wait_for_stop(pid: Option<u32>) -> anyhow::Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let _watch =
        SignalWatch::start(move |_| flag.store(true, Ordering::SeqCst)).map_err(Failure::from)?;
    let mut told_exit = false;
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(100));
        if let Some(p) = pid.filter(|p| !told_exit && !pid_alive(*p)) {
            eprintln!("gpufeed: pid {p} exited; still serving host and GPU metrics");
            told_exit = true;
        }
    }
    Ok(())
}

pub(crate) fn run(global: &GlobalOpts, args: &ServeArgs) -> anyhow::Result<u8> {
    // Bind first: a port in use fails at once, before NVML is opened.
    let listener = if args.once {
        None
    } else {
        Some(http::bind(args.listen).map_err(|e| Failure::with(Exit::Usage, e))?)
    };
    let labels = prometheus::fleet_labels_from_env(|k| std::env::var(k).ok());
    let generation = Arc::new(AtomicU64::new(0));
    let steps = step_socket(args.once, args.step_socket.as_deref())?;
    let step_path = steps.as_ref().map(|s| s.path().display().to_string());
    let extras = LiveExtras {
        py: args.py.config(true),
        steps,
    };
    let (mut sampler, state) = crate::live::shared::start(
        global.nvml_lib.clone(),
        args.interval,
        args.window,
        args.pid,
        extras,
        Arc::clone(&generation),
    )?;
    if args.once {
        return print_once(sampler, &state, &labels);
    }
    let listener = listener.expect("bound above");
    let addr = listener.local_addr().unwrap_or(args.listen);
    eprintln!("gpufeed: serving http://{addr}/metrics; Ctrl-C stops");
    if let Some(p) = &step_path {
        eprintln!(
            "gpufeed: step markers: start the job with {}={p}",
            crate::sample::steps::ENV_VAR
        );
    }
    http::spawn_metrics(
        listener,
        Arc::clone(&state),
        generation,
        prometheus::CONTENT_TYPE,
        move |s| prometheus::encode_state_labeled(s, &labels),
    )?;
    wait_for_stop(args.pid)?;
    sampler.stop();
    Ok(Exit::Ok.code())
}
