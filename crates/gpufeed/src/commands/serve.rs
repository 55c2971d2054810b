//! `gpufeed serve`: a Prometheus exporter (dcgm-exporter names plus gpufeed's own metrics).

use crate::cli::{parse_duration, GlobalOpts};
use crate::exit::{self, Failure};
use crate::job::SignalWatch;
use crate::live::http::{self, Response};
use crate::live::sampler::{LiveSampler, SamplerConfig};
use crate::live::LiveState;
use crate::present::prometheus;
use crate::sample::host::pid_alive;
use clap::Args;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to serve /metrics on (0.0.0.0:9400 to be scraped from other machines)
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:9400")]
    pub listen: SocketAddr,
    /// Print one exposition to stdout (after about 1.5 s of sampling) and exit
    #[arg(long)]
    pub once: bool,
    /// Sampling interval of host and processes (GPU utilization keeps every driver sample)
    #[arg(long, value_name = "DURATION", default_value = "200ms", value_parser = crate::cli::parse_interval)]
    pub interval: Duration,
    /// Window of the busy ratio, oscillation, starvation score and verdict
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub window: Duration,
    /// Follow this job's process tree (worker CPU, starvation verdict)
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
}

/// Starts sampling into a shared state; the returned sampler stops when dropped.
pub fn start_live(
    global: &GlobalOpts,
    interval: Duration,
    window: Duration,
    pid: Option<u32>,
) -> anyhow::Result<(LiveSampler, Arc<Mutex<LiveState>>)> {
    if interval < Duration::from_millis(10) {
        return Err(Failure::new(exit::USAGE, "--interval must be at least 10ms").into());
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
        },
        tx,
    )
    .map_err(|e| Failure::new(exit::FAILURE, e.to_string()))?;
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
                        s.evaluation_due().then(|| s.eval_input())
                    }
                    Err(_) => return,
                };
                // The verdict is computed without the lock, so a scrape never waits for it.
                if let Some(input) = due {
                    let report = input.run();
                    if let Ok(mut s) = st.lock() {
                        s.set_report(report);
                    }
                }
            }
        })
        .map_err(|e| Failure::new(exit::FAILURE, format!("cannot start a thread: {e}")))?;
    Ok((sampler, state))
}

pub fn run(global: &GlobalOpts, args: &ServeArgs) -> anyhow::Result<u8> {
    // Bind first: a port in use fails at once, before NVML is opened.
    let listener = if args.once {
        None
    } else {
        Some(http::bind(args.listen).map_err(|e| Failure::new(exit::USAGE, e.to_string()))?)
    };
    let (mut sampler, state) = start_live(global, args.interval, args.window, args.pid)?;
    if args.once {
        let until = Instant::now() + Duration::from_millis(1500);
        while Instant::now() < until {
            std::thread::sleep(Duration::from_millis(50));
        }
        let text = {
            let mut s = state
                .lock()
                .map_err(|_| anyhow::anyhow!("state poisoned"))?;
            s.evaluate();
            prometheus::encode_state(&s)
        };
        sampler.stop();
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
        return Ok(exit::OK);
    }
    let listener = listener.expect("bound above");
    let addr = listener.local_addr().unwrap_or(args.listen);
    eprintln!("gpufeed: serving http://{addr}/metrics; Ctrl-C stops");
    let st = Arc::clone(&state);
    std::thread::Builder::new()
        .name("gpufeed-http-accept".into())
        .spawn(move || {
            http::serve(listener, move |_, path| match path {
                "/metrics" => Response {
                    status: 200,
                    content_type: prometheus::CONTENT_TYPE,
                    body: match st.lock() {
                        Ok(s) => prometheus::encode_state(&s).into_bytes(),
                        Err(_) => b"# EOF\n".to_vec(),
                    },
                },
                "/" => Response {
                    status: 200,
                    content_type: "text/html; charset=utf-8",
                    body: b"<html><body><a href=\"/metrics\">/metrics</a></body></html>\n".to_vec(),
                },
                _ => Response {
                    status: 404,
                    content_type: "text/plain; charset=utf-8",
                    body: b"not found: try /metrics\n".to_vec(),
                },
            })
        })
        .map_err(|e| Failure::new(exit::FAILURE, format!("cannot start a thread: {e}")))?;
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let _watch = SignalWatch::start(move |_| flag.store(true, Ordering::SeqCst))
        .map_err(|e| Failure::new(e.exit_code(), e.to_string()))?;
    let mut told_exit = false;
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(100));
        if let Some(p) = args.pid.filter(|p| !told_exit && !pid_alive(*p)) {
            eprintln!("gpufeed: pid {p} exited; still serving host and GPU metrics");
            told_exit = true;
        }
    }
    sampler.stop();
    Ok(exit::OK)
}
