//! Prometheus / OpenMetrics exposition of a [`LiveState`] (prometheus-client's text encoder).
//!
//! dcgm-exporter's names where the meaning is the same (so existing dashboards and alerts keep
//! working), `gpufeed_*` for what gpufeed adds. Labels: `gpu`, `uuid`, `hostname` (processes:
//! `pid`, `comm`, `role`). A value that was not read is left out, never exported as 0.

use crate::live::LiveState;
use crate::present::fmt::prom_label;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

/// Content type of [`encode_state_labeled`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

type Labels = Vec<(String, String)>;
type GaugeF = Family<Labels, Gauge<f64, AtomicU64>>;
type CounterF = Family<Labels, Counter<f64, AtomicU64>>;

/// Every metric family gpufeed exports: (name as exposed, type, help). Used by the docs and by
/// the dashboard test.
pub const METRICS: &[(&str, &str, &str)] = &[
    // Units: gpufeed's own metrics follow Prometheus naming (base units in the name: _ratio
    // 0-1, _seconds, _bytes); the DCGM_* ones keep dcgm-exporter's names and units (%, MiB,
    // MHz, W, C) so that its dashboards work unchanged. Every HELP ends with its unit.
    ("gpufeed_up", "gauge", "1 while gpufeed is sampling (boolean)"),
    ("gpufeed_build_info", "info", "gpufeed version (info)"),
    ("gpufeed_gpus", "gauge", "GPUs the driver reports, 0 without a driver (count)"),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization, mean of the driver samples of the last second (percent 0-100)"),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (percent 0-100)"),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (MiB)"),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (MiB)"),
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (MHz)"),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (watts)"),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (degrees Celsius)"),
    ("gpufeed_gpu_busy_ratio", "gauge", "Share of time a kernel ran over the window, mean utilization / 100 (ratio 0-1)"),
    ("gpufeed_gpu_util_oscillation_strength", "gauge", "Strength of periodic utilization swings over the window, 0 when none was found (ratio 0-1)"),
    ("gpufeed_gpu_util_oscillation_period_seconds", "gauge", "Period of the utilization swings, when one was found (seconds)"),
    ("gpufeed_data_starvation_score", "gauge", "Idle share of the GPU when the verdict is input_bound, weighted by its confidence; 0 otherwise (ratio 0-1)"),
    ("gpufeed_pcie_rx_bytes_per_second", "gauge", "PCIe host-to-device rate (bytes per second)"),
    ("gpufeed_pcie_tx_bytes_per_second", "gauge", "PCIe device-to-host rate (bytes per second)"),
    ("gpufeed_pcie_rx_bytes_total", "counter", "PCIe data received by the GPU since gpufeed started (bytes)"),
    ("gpufeed_pcie_tx_bytes_total", "counter", "PCIe data sent by the GPU since gpufeed started (bytes)"),
    ("DCGM_FI_DEV_PCIE_LINK_GEN", "gauge", "Current PCIe link generation; GPUs lower it when idle (generation)"),
    ("DCGM_FI_DEV_PCIE_LINK_WIDTH", "gauge", "Current PCIe link width (lanes)"),
    ("gpufeed_pcie_link_max_gen", "gauge", "Highest PCIe link generation the GPU and its slot support (generation)"),
    ("gpufeed_pcie_link_max_width", "gauge", "Widest PCIe link the GPU and its slot support (lanes)"),
    ("gpufeed_data_wait_ratio", "gauge", "Share of the training loop's time spent waiting for the next batch over the window, when measured: the step probe's exact wait, else the Python stacks' estimate; absent otherwise; a multi-process job adds one series per rank (label rank) (ratio 0-1)"),
    ("gpufeed_loop_phase_ratio", "gauge", "Share of wall time of the training thread's Python stack samples in each phase over the window (label phase: data_wait, forward, backward, optimizer, sync, checkpoint_io, other); absent without Python stacks (ratio 0-1)"),
    ("gpufeed_loop_steps_per_second", "gauge", "Training steps per second over the window, from the job's step markers (GPUFEED_STEP_SOCKET); absent without them; a multi-process job adds one series per rank (label rank) (steps per second)"),
    ("gpufeed_throttle_seconds_total", "counter", "Time with a clock-slowing reason set (GpuIdle excluded), by reason (seconds)"),
    ("gpufeed_verdict", "gauge", "1 for the live verdict over the window (label id), with its confidence in gpufeed_verdict_confidence (boolean)"),
    ("gpufeed_verdict_confidence", "gauge", "Confidence of the live verdict (ratio 0-1)"),
    ("gpufeed_host_cpu_busy_ratio", "gauge", "Mean busy share over all logical CPUs (ratio 0-1)"),
    ("gpufeed_host_cpu_core_busy_ratio", "gauge", "Busy share of each logical CPU (ratio 0-1)"),
    ("gpufeed_job_processes", "gauge", "Processes in the followed job's tree (count)"),
    ("gpufeed_job_process_cpu_ratio", "gauge", "CPU of each job process, role main or worker: CPU seconds per second, 1 = one core busy (ratio, above 1 for several cores)"),
];

fn help(name: &str) -> &'static str {
    METRICS
        .iter()
        .find(|m| m.0 == name)
        .map(|m| m.2)
        .unwrap_or("")
}

/// Registers a gauge family under its exposed name.
fn gauge(reg: &mut Registry, name: &str) -> GaugeF {
    let f = GaugeF::default();
    reg.register(name, help(name), f.clone());
    f
}

/// Registers a counter family; prometheus-client appends `_total` to the name.
fn counter(reg: &mut Registry, name: &str) -> CounterF {
    let f = CounterF::default();
    let base = name.strip_suffix("_total").unwrap_or(name);
    reg.register(base, help(name), f.clone());
    f
}

/// Label pairs with their values escaped (process names, hostnames and UUIDs come from outside).
fn l(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), prom_label(v)))
        .collect()
}

const MIB: f64 = 1024.0 * 1024.0;

/// (label, environment variable): labels `serve` puts on every series when the variable is set
/// and not empty. `k8s_*` rather than `pod`/`namespace`, which Prometheus' Kubernetes discovery
/// sets on the target itself.
pub const FLEET_LABELS: &[(&str, &str)] = &[
    ("slurm_job_id", "SLURM_JOB_ID"),
    ("slurm_procid", "SLURM_PROCID"),
    ("slurm_nodeid", "SLURM_NODEID"),
    ("k8s_pod", "POD_NAME"),
    ("k8s_namespace", "POD_NAMESPACE"),
    ("k8s_node", "NODE_NAME"),
];

/// The fleet labels whose variable `env` knows (pass `|k| std::env::var(k).ok()`).
pub(crate) fn fleet_labels_from_env(env: impl Fn(&str) -> Option<String>) -> Vec<(String, String)> {
    FLEET_LABELS
        .iter()
        .filter_map(|(label, var)| {
            env(var)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .map(|v| (label.to_string(), v))
        })
        .collect()
}

/// Encodes the state as OpenMetrics text (`# EOF` terminated), `labels` added to every series.
pub(crate) fn encode_state_labeled(st: &LiveState, labels: &[(String, String)]) -> String {
    let mut reg = Registry::with_labels(
        labels
            .iter()
            .map(|(k, v)| (k.clone().into(), prom_label(v).into())),
    );
    let up = Gauge::<i64>::default();
    reg.register("gpufeed_up", help("gpufeed_up"), up.clone());
    up.set(1);
    let info = Info::new(vec![
        ("version".to_string(), env!("CARGO_PKG_VERSION").to_string()),
        ("hostname".to_string(), prom_label(&st.hostname)),
    ]);
    reg.register("gpufeed_build", help("gpufeed_build_info"), info);
    let gpus_n = Gauge::<i64>::default();
    reg.register("gpufeed_gpus", help("gpufeed_gpus"), gpus_n.clone());
    gpus_n.set(st.gpus.len() as i64);
    // Families are exposed in the order they are registered here.
    let gpu = GpuFamilies::register(&mut reg);
    for g in &st.gpus {
        gpu.set(st, g);
    }
    verdict_series(&mut reg, st);
    host_series(&mut reg, st);
    job_series(&mut reg, st);
    let mut out = String::with_capacity(16 * 1024);
    // Writing to a String cannot fail.
    let _ = encode(&mut out, &reg);
    out
}

/// The per-GPU families (DCGM's names where DCGM has the field).
struct GpuFamilies {
    util: GaugeF,
    mem_util: GaugeF,
    fb_used: GaugeF,
    fb_free: GaugeF,
    clock: GaugeF,
    power: GaugeF,
    temp: GaugeF,
    busy: GaugeF,
    osc: GaugeF,
    osc_p: GaugeF,
    starve: GaugeF,
    rx_rate: GaugeF,
    tx_rate: GaugeF,
    rx_total: CounterF,
    tx_total: CounterF,
    thr: CounterF,
    link_gen: GaugeF,
    link_width: GaugeF,
    link_max_gen: GaugeF,
    link_max_width: GaugeF,
}

impl GpuFamilies {
    fn register(reg: &mut Registry) -> Self {
        GpuFamilies {
            util: gauge(reg, "DCGM_FI_DEV_GPU_UTIL"),
            mem_util: gauge(reg, "DCGM_FI_DEV_MEM_COPY_UTIL"),
            fb_used: gauge(reg, "DCGM_FI_DEV_FB_USED"),
            fb_free: gauge(reg, "DCGM_FI_DEV_FB_FREE"),
            clock: gauge(reg, "DCGM_FI_DEV_SM_CLOCK"),
            power: gauge(reg, "DCGM_FI_DEV_POWER_USAGE"),
            temp: gauge(reg, "DCGM_FI_DEV_GPU_TEMP"),
            busy: gauge(reg, "gpufeed_gpu_busy_ratio"),
            osc: gauge(reg, "gpufeed_gpu_util_oscillation_strength"),
            osc_p: gauge(reg, "gpufeed_gpu_util_oscillation_period_seconds"),
            starve: gauge(reg, "gpufeed_data_starvation_score"),
            rx_rate: gauge(reg, "gpufeed_pcie_rx_bytes_per_second"),
            tx_rate: gauge(reg, "gpufeed_pcie_tx_bytes_per_second"),
            rx_total: counter(reg, "gpufeed_pcie_rx_bytes_total"),
            tx_total: counter(reg, "gpufeed_pcie_tx_bytes_total"),
            thr: counter(reg, "gpufeed_throttle_seconds_total"),
            link_gen: gauge(reg, "DCGM_FI_DEV_PCIE_LINK_GEN"),
            link_width: gauge(reg, "DCGM_FI_DEV_PCIE_LINK_WIDTH"),
            link_max_gen: gauge(reg, "gpufeed_pcie_link_max_gen"),
            link_max_width: gauge(reg, "gpufeed_pcie_link_max_width"),
        }
    }

    /// One GPU's series; a value not read is left out, not 0.
    fn set(&self, st: &LiveState, g: &crate::live::GpuLive) {
        let idx = g.index.to_string();
        let uuid = g.uuid.as_deref().unwrap_or("");
        let labels = l(&[("gpu", &idx), ("uuid", uuid), ("hostname", &st.hostname)]);
        let set = |f: &GaugeF, v: Option<f64>| {
            if let Some(v) = v.filter(|v| v.is_finite()) {
                f.get_or_create(&labels).set(v);
            }
        };
        let last = g.last.as_ref();
        set(
            &self.util,
            st.util_mean(g, 1.0).or(last.and_then(|s| s.util_pct)),
        );
        set(&self.mem_util, last.and_then(|s| s.mem_util_pct));
        let used = last.and_then(|s| s.mem_used_bytes);
        set(&self.fb_used, used.map(|b| (b as f64 / MIB).round()));
        set(
            &self.fb_free,
            used.zip(g.mem_total_bytes)
                .map(|(u, t)| (t.saturating_sub(u) as f64 / MIB).round()),
        );
        set(
            &self.clock,
            last.and_then(|s| s.sm_clock_mhz).map(f64::from),
        );
        set(&self.power, last.and_then(|s| s.power_w));
        set(
            &self.temp,
            last.and_then(|s| s.temperature_c).map(f64::from),
        );
        let ev = st.gpu_evidence(g.index);
        set(&self.busy, ev.and_then(|e| e.busy_fraction));
        if let Some(e) = ev.filter(|e| e.util_samples > 0) {
            set(&self.osc, Some(e.periodicity.map_or(0.0, |p| p.strength)));
            set(&self.osc_p, e.periodicity.map(|p| p.period_s));
        }
        set(&self.starve, st.starvation_score(g.index));
        set(&self.link_gen, last.and_then(|s| s.pcie_gen).map(f64::from));
        set(
            &self.link_width,
            last.and_then(|s| s.pcie_width).map(f64::from),
        );
        set(&self.link_max_gen, g.pcie_max_gen.map(f64::from));
        set(&self.link_max_width, g.pcie_max_width.map(f64::from));
        set(&self.rx_rate, g.pcie_rx_bytes_per_s);
        set(&self.tx_rate, g.pcie_tx_bytes_per_s);
        if let Some(v) = g.pcie_rx_bytes_total {
            self.rx_total.get_or_create(&labels).inc_by(v);
        }
        if let Some(v) = g.pcie_tx_bytes_total {
            self.tx_total.get_or_create(&labels).inc_by(v);
        }
        if g.throttle_observed_s > 0.0 {
            for reason in [
                "sw_power_cap",
                "hw_slowdown",
                "sw_thermal",
                "hw_thermal",
                "hw_power_brake",
            ] {
                let mut lr = labels.clone();
                lr.push(("reason".into(), reason.into()));
                self.thr
                    .get_or_create(&lr)
                    .inc_by(g.throttle_s.get(reason).copied().unwrap_or(0.0));
            }
        }
    }
}

/// The verdict, the data wait, the loop's phase split and step rate.
fn verdict_series(reg: &mut Registry, st: &LiveState) {
    let host = st.hostname.as_str();
    let verdict = gauge(reg, "gpufeed_verdict");
    let conf = gauge(reg, "gpufeed_verdict_confidence");
    let wait = gauge(reg, "gpufeed_data_wait_ratio");
    let phase = gauge(reg, "gpufeed_loop_phase_ratio");
    let steps = gauge(reg, "gpufeed_loop_steps_per_second");
    if let Some(r) = &st.report {
        // The probe's exact wait, else the stacks' estimate, else what a finding measured.
        let probe = r.steps.as_ref().and_then(|s| s.data_wait_pct);
        let stacks = r.python.as_ref().and_then(|p| p.data_wait_pct);
        let finding = r
            .findings
            .iter()
            .filter_map(|f| crate::finding::evidence_of!(f.evidence, DataWaitPct).copied())
            .filter(|v| v.is_finite())
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
        // One series whatever the source, so alerts over time see one series.
        if let Some(pct) = probe.or(stacks).or(finding) {
            wait.get_or_create(&l(&[("hostname", host)]))
                .set((pct / 100.0).clamp(0.0, 1.0));
        }
        if let Some(m) = r.python.as_ref().and_then(|p| p.main.as_ref()) {
            use crate::sample::pyphase::Phase;
            for &p in Phase::ALL {
                phase
                    .get_or_create(&l(&[("hostname", host), ("phase", p.as_str())]))
                    .set((m.phases_pct.get(p) / 100.0).clamp(0.0, 1.0));
            }
        }
        if let Some(v) = r.steps.as_ref().and_then(|s| s.steps_per_s) {
            steps.get_or_create(&l(&[("hostname", host)])).set(v);
        }
        rank_series(r, host, &wait, &steps);
        verdict
            .get_or_create(&l(&[("id", r.verdict.id.as_str()), ("hostname", host)]))
            .set(1.0);
        conf.get_or_create(&l(&[("hostname", host)]))
            .set(r.verdict.confidence);
    }
}

/// Multi-process jobs: one more series per rank (label `rank`: `RANK`, else the pid) of the
/// data wait (the rank's own stacks) and the step rate (its own markers), beside the job's
/// series without the label. A single-rank job gets none: its series stay as they were.
fn rank_series(r: &crate::live::LiveReport, host: &str, wait: &GaugeF, steps: &GaugeF) {
    if let Some(p) = r.python.as_ref().filter(|p| p.ranks.len() >= 2) {
        for k in &p.ranks {
            let rank = k.rank.unwrap_or(k.pid).to_string();
            wait.get_or_create(&l(&[("hostname", host), ("rank", &rank)]))
                .set((k.data_wait_pct / 100.0).clamp(0.0, 1.0));
        }
    }
    if let Some(by) = r
        .steps
        .as_ref()
        .map(|s| &s.steps_per_s_by_rank)
        .filter(|b| b.len() >= 2)
    {
        for (rank, v) in by {
            steps
                .get_or_create(&l(&[("hostname", host), ("rank", &rank.to_string())]))
                .set(*v);
        }
    }
}

/// The machine's CPU, whole and per core.
fn host_series(reg: &mut Registry, st: &LiveState) {
    let host = st.hostname.as_str();
    let cpu = gauge(reg, "gpufeed_host_cpu_busy_ratio");
    let core = gauge(reg, "gpufeed_host_cpu_core_busy_ratio");
    if let Some(h) = &st.host {
        if let Some(v) = h.cpu_total_pct {
            cpu.get_or_create(&l(&[("hostname", host)])).set(v / 100.0);
        }
        for (i, v) in h.cpu_pct.iter().enumerate() {
            core.get_or_create(&l(&[("cpu", &i.to_string()), ("hostname", host)]))
                .set(*v / 100.0);
        }
    }
}

/// The job's process count and each process's CPU.
fn job_series(reg: &mut Registry, st: &LiveState) {
    let host = st.hostname.as_str();
    let nprocs = gauge(reg, "gpufeed_job_processes");
    let pcpu = gauge(reg, "gpufeed_job_process_cpu_ratio");
    if st.header.pid.is_some() {
        nprocs
            .get_or_create(&l(&[("hostname", host)]))
            .set(st.procs.len() as f64);
        let root = st.header.pid;
        for p in st.procs.values() {
            let Some(c) = p.cpu_pct else { continue };
            let role = if Some(p.pid) == root || !st.procs.contains_key(&p.ppid) {
                "main"
            } else {
                "worker"
            };
            pcpu.get_or_create(&l(&[
                ("pid", &p.pid.to_string()),
                ("comm", p.comm.as_deref().unwrap_or("")),
                ("role", role),
                ("hostname", host),
            ]))
            .set(c / 100.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::fixture;

    #[test]
    fn a_multi_process_job_adds_a_series_per_rank_beside_the_jobs() {
        let text = encode_state_labeled(&fixture::state_with_ranks(1, 20), &[]);
        for series in [
            "gpufeed_data_wait_ratio{hostname=\"node1\",rank=\"0\"} 0.12\n",
            "gpufeed_data_wait_ratio{hostname=\"node1\",rank=\"1\"} 0.55\n",
            "gpufeed_loop_steps_per_second{hostname=\"node1\",rank=\"0\"} 10.0\n",
            "gpufeed_loop_steps_per_second{hostname=\"node1\",rank=\"1\"} 8.0\n",
            // The job's own series, unchanged.
            "gpufeed_data_wait_ratio{hostname=\"node1\"} ",
            "gpufeed_loop_steps_per_second{hostname=\"node1\"} ",
        ] {
            assert!(text.contains(series), "{series}: {text}");
        }
        // A single-process job has no rank label at all.
        let one = encode_state_labeled(&fixture::state_with_loop(1, 20), &[]);
        assert!(!one.contains("rank="), "{one}");
    }

    #[test]
    fn loop_phases_and_the_probes_wait_are_exported_as_ratios() {
        let text = encode_state_labeled(&fixture::state_with_loop(1, 20), &[]);
        for (phase, v) in [
            ("data_wait", "0.5"),
            ("forward", "0.25"),
            ("backward", "0.15"),
            ("optimizer", "0.05"),
            ("sync", "0.0"),
            ("checkpoint_io", "0.0"),
            ("other", "0.05"),
        ] {
            let series =
                format!("gpufeed_loop_phase_ratio{{hostname=\"node1\",phase=\"{phase}\"}} {v}\n");
            assert!(text.contains(&series), "{series}: {text}");
        }
        assert!(text.contains("# HELP gpufeed_loop_phase_ratio Share of wall time"));
        assert!(text.contains("# TYPE gpufeed_loop_phase_ratio gauge"));
        // The probe's exact wait (46%) wins over the stacks' 50%.
        assert!(
            text.contains("gpufeed_data_wait_ratio{hostname=\"node1\"} 0.46\n"),
            "{text}"
        );
        assert!(text.contains("gpufeed_loop_steps_per_second{hostname=\"node1\"} 10.0\n"));
        // Without stacks or steps: absent, never 0.
        let plain = encode_state_labeled(&fixture::state(1, 20), &[]);
        assert!(!plain.contains("gpufeed_loop_phase_ratio{"), "{plain}");
        assert!(!plain.contains("gpufeed_loop_steps_per_second{"));
    }

    #[test]
    fn exposition_names_values_and_order() {
        let st = fixture::state(2, 20);
        let text = encode_state_labeled(&st, &[]);
        let first: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .take(2)
            .collect();
        assert_eq!(first[0], "gpufeed_up 1");
        assert!(
            first[1].starts_with("gpufeed_build_info{version=\""),
            "{}",
            first[1]
        );
        assert!(text.ends_with("# EOF\n"));
        let lbl = "gpu=\"1\",uuid=\"GPU-00000001-aaaa-bbbb-cccc-dddddddddddd\",hostname=\"node1\"";
        assert!(
            text.contains(&format!("DCGM_FI_DEV_GPU_UTIL{{{lbl}}} 97.0")),
            "{text}"
        );
        assert!(text.contains(&format!("DCGM_FI_DEV_FB_USED{{{lbl}}} 61440.0")));
        assert!(text.contains(&format!("DCGM_FI_DEV_FB_FREE{{{lbl}}} 20480.0")));
        assert!(text.contains(&format!("DCGM_FI_DEV_POWER_USAGE{{{lbl}}} 351.0")));
        assert!(text.contains(&format!(
            "gpufeed_throttle_seconds_total{{{lbl},reason=\"sw_power_cap\"}} 19.5"
        )));
        assert!(text.contains("# TYPE gpufeed_pcie_rx_bytes counter"));
        assert!(text.contains("gpufeed_job_process_cpu_ratio{pid=\"101\",comm=\"pt_data_worker\",role=\"worker\",hostname=\"node1\"} 0.99"));
        assert!(text
            .contains("gpufeed_job_process_cpu_ratio{pid=\"100\",comm=\"python\",role=\"main\""));
        // Shares are ratios 0-1 under a _ratio name, as Prometheus names them.
        for line in text.lines().filter(|l| l.starts_with("gpufeed_host_cpu")) {
            let v: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
            assert!((0.0..=1.0).contains(&v), "{line}");
        }
        // Every documented family appears, its HELP ends with its unit, and gpufeed's own
        // names carry a base unit or are plainly unitless.
        for (name, _, help) in METRICS {
            assert!(help.ends_with(')'), "{name}: HELP without its unit: {help}");
            assert!(
                !name.contains("percent") && !name.ends_with("_ms") && !name.contains("mib"),
                "{name}"
            );
            if help.ends_with("(ratio 0-1)") && name.starts_with("gpufeed_") {
                assert!(
                    name.ends_with("_ratio")
                        || name.ends_with("_score")
                        || name.ends_with("_strength")
                        || name.ends_with("_confidence"),
                    "{name}"
                );
            }
            let base = name.strip_suffix("_total").unwrap_or(name);
            let base = base.strip_suffix("_info").unwrap_or(base);
            assert!(
                text.contains(&format!("# TYPE {base} ")),
                "{name} missing:\n{text}"
            );
        }
    }

    #[test]
    fn fleet_labels_come_from_the_environment_and_go_on_every_series() {
        let env = |k: &str| match k {
            "SLURM_JOB_ID" => Some("4242".to_string()),
            "SLURM_PROCID" => Some("3".to_string()),
            "POD_NAME" => Some(" ".to_string()),
            _ => None,
        };
        let labels = fleet_labels_from_env(env);
        assert_eq!(
            labels,
            vec![
                ("slurm_job_id".to_string(), "4242".to_string()),
                ("slurm_procid".to_string(), "3".to_string())
            ]
        );
        let text = encode_state_labeled(&fixture::state(1, 5), &labels);
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            assert!(
                line.contains("slurm_job_id=\"4242\"") && line.contains("slurm_procid=\"3\""),
                "{line}"
            );
        }
        assert!(!encode_state_labeled(&fixture::state(1, 5), &[]).contains("slurm"));
    }

    #[test]
    fn unread_values_are_absent_not_zero() {
        let st = crate::live::LiveState::new(fixture::header(1), 30.0);
        let text = encode_state_labeled(&st, &[]);
        assert!(!text.contains("DCGM_FI_DEV_GPU_UTIL{"));
        assert!(!text.contains("gpufeed_pcie_rx_bytes_total{"));
        assert!(text.contains("gpufeed_gpus 1"));
    }
}
