//! `gpufeed serve`: a Prometheus exporter (dcgm-exporter names plus gpufeed's own metrics).

use crate::cli::{GlobalOpts, ServeArgs};
use crate::exit::{Exit, Failure};
use crate::job::SignalWatch;
use crate::live::http::{self, Response};
use crate::live::sampler::{LiveSampler, SamplerConfig};
use crate::live::LiveState;
use crate::present::prometheus;
use crate::sample::host::pid_alive;
use hyper::body::Bytes;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// What a live view samples beside host and GPUs.
#[derive(Debug, Clone, Default)]
pub struct LiveExtras {
    /// Python stacks of the followed job (`--py-stacks`).
    pub py: Option<crate::record::pyrec::PyConfig>,
    /// The step-marker socket whose steps are folded in.
    pub steps: Option<Arc<crate::sample::steps::StepSocket>>,
}

/// Starts sampling into a shared state; the returned sampler stops when dropped.
pub fn start_live(
    global: &GlobalOpts,
    interval: Duration,
    window: Duration,
    pid: Option<u32>,
    extras: LiveExtras,
) -> anyhow::Result<(LiveSampler, Arc<Mutex<LiveState>>)> {
    start_live_counted(
        global,
        interval,
        window,
        pid,
        extras,
        Arc::new(AtomicU64::new(0)),
    )
}

/// [`start_live`], bumping `generation` after every change of the state (so a reader can tell
/// whether what it encoded last is still current).
pub(crate) fn start_live_counted(
    global: &GlobalOpts,
    interval: Duration,
    window: Duration,
    pid: Option<u32>,
    extras: LiveExtras,
    generation: Arc<AtomicU64>,
) -> anyhow::Result<(LiveSampler, Arc<Mutex<LiveState>>)> {
    if interval < Duration::from_millis(10) {
        return Err(Failure::new(Exit::Usage, "--interval must be at least 10ms").into());
    }
    if let Some(p) = pid {
        if !pid_alive(p) {
            return Err(Failure::input(format!(
                "no process with pid {p}: check it with `ps -p {p}`"
            ))
            .into());
        }
    }
    let (tx, rx) = mpsc::channel();
    let sampler = LiveSampler::start(
        SamplerConfig {
            interval,
            nvml_lib: global.nvml_lib.clone(),
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

/// A step-marker socket for a job started beside the exporter (not with --once: it ends before a
/// job could be told); `--step-socket PATH` binds the path a running job was given.
fn step_socket(
    once: bool,
    given: Option<&std::path::Path>,
) -> anyhow::Result<Option<Arc<crate::sample::steps::StepSocket>>> {
    if once {
        return Ok(None);
    }
    Ok(super::step_socket(given, Some("read"))?)
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

/// Serves `/metrics` (and a link to it at `/`) from a thread of its own.
fn spawn_http(
    listener: std::net::TcpListener,
    state: Arc<Mutex<LiveState>>,
    generation: Arc<AtomicU64>,
    labels: Vec<(String, String)>,
) -> anyhow::Result<()> {
    // The last exposition and the state generation it was encoded from: scrapes between two
    // samples share one encoding instead of each taking the state's lock to encode it again.
    let cache: Mutex<(u64, Bytes)> = Mutex::new((u64::MAX, Bytes::new()));
    let metrics = move || -> Bytes {
        let Ok(mut c) = cache.lock() else {
            return Bytes::from_static(b"# EOF\n");
        };
        let now = generation.load(Ordering::Acquire);
        if c.0 != now {
            let body = match state.lock() {
                Ok(s) => Bytes::from(prometheus::encode_state_labeled(&s, &labels)),
                Err(_) => Bytes::from_static(b"# EOF\n"),
            };
            *c = (now, body);
        }
        c.1.clone()
    };
    std::thread::Builder::new()
        .name("gpufeed-http".into())
        .spawn(move || {
            let served = http::serve(listener, http::Limits::default(), move |path| match path {
                "/metrics" => Response {
                    status: 200,
                    content_type: prometheus::CONTENT_TYPE,
                    body: metrics(),
                },
                "/" => Response {
                    status: 200,
                    content_type: "text/html; charset=utf-8",
                    body: Bytes::from_static(
                        b"<html><body><a href=\"/metrics\">/metrics</a></body></html>\n",
                    ),
                },
                _ => Response {
                    status: 404,
                    content_type: "text/plain; charset=utf-8",
                    body: Bytes::from_static(b"not found: try /metrics\n"),
                },
            });
            if let Err(e) = served {
                eprintln!("gpufeed: {e}");
            }
        })
        .map_err(|e| Failure::new(Exit::Failure, format!("cannot start a thread: {e}")))?;
    Ok(())
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

pub fn run(global: &GlobalOpts, args: &ServeArgs) -> anyhow::Result<u8> {
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
    let (mut sampler, state) = start_live_counted(
        global,
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
    spawn_http(listener, Arc::clone(&state), generation, labels)?;
    wait_for_stop(args.pid)?;
    sampler.stop();
    Ok(Exit::Ok.code())
}
