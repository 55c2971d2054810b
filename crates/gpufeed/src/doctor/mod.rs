//! `gpufeed doctor`: checks of the machine and its software stack, each with evidence and a fix.
//!
//! Probing (NVML, subprocesses, /proc, /sys) is kept apart from judgement: every check family has
//! pure `judge_*` functions that turn facts into a [`Check`], unit-tested beside them, and a probe
//! that gathers the facts. A fact that could not be read is `None`, never 0; a check whose facts
//! are missing is `skip` with the reason.
//!
//! Families: [`stack`] (driver, CUDA, nvcc, cuDNN, CUDA stack age), [`python`] (the Python/PyTorch
//! probe), [`gpu`] (NVML: GPUs, PCIe link, persistence, ECC, throttling, MIG), [`precision`],
//! [`host`] (/dev/shm, cores per GPU, NUMA, RAM, open files) and [`data`] (`--data`).
//! Its text is `present::doctor`'s; `gpufeed bench` is [`crate::bench`] (measuring) and
//! `present::bench` (its text).

pub(crate) mod data;
pub(crate) mod gpu;
pub(crate) mod host;
pub(crate) mod precision;
pub(crate) mod proc;
pub(crate) mod python;
pub(crate) mod stack;
pub(crate) mod version;

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// Version of the `--format json` report.
pub const SCHEMA_VERSION: u32 = 1;

/// The outcome of one check.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[strum(serialize_all = "snake_case")]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Pass,
    Warn,
    Fail,
    Skip,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Which heading a check is printed under (in this order; `present::doctor` names them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Group {
    Driver,
    Python,
    Gpu,
    Host,
    Data,
}

/// One check: a stable snake_case id, its status, one line for people, the facts it rests on
/// (units in the names) and what to change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Check {
    pub id: String,
    pub group: Group,
    /// The GPU the check is about, for per-GPU checks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u32>,
    pub status: Status,
    pub summary: String,
    pub evidence: BTreeMap<String, serde_json::Value>,
    /// What to change (or, on a passing check, advice worth following); `null` when nothing.
    pub fix: Option<String>,
}

impl Check {
    pub fn new(id: &str, group: Group, status: Status, summary: impl Into<String>) -> Self {
        Check {
            id: id.to_string(),
            group,
            gpu: None,
            status,
            summary: summary.into(),
            evidence: BTreeMap::new(),
            fix: None,
        }
    }

    /// A skipped check and why.
    pub fn skip(id: &str, group: Group, reason: impl Into<String>) -> Self {
        Check::new(id, group, Status::Skip, reason)
    }

    /// Adds one piece of evidence; a `None` (null) value is left out: not read is not zero.
    pub fn with(mut self, name: &str, value: impl Into<serde_json::Value>) -> Self {
        let v = value.into();
        if !v.is_null() {
            self.evidence.insert(name.to_string(), v);
        }
        self
    }

    pub fn fix(mut self, text: impl Into<String>) -> Self {
        self.fix = Some(text.into());
        self
    }

    pub fn gpu(mut self, index: u32) -> Self {
        self.gpu = Some(index);
        self
    }
}

/// Counts of each status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub pass: usize,
    pub warn: usize,
    pub fail: usize,
    pub skip: usize,
}

/// The whole doctor report (`--format json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub schema_version: u32,
    pub checks: Vec<Check>,
    pub counts: Counts,
}

impl Report {
    pub fn new(checks: Vec<Check>) -> Self {
        let mut counts = Counts::default();
        for c in &checks {
            match c.status {
                Status::Pass => counts.pass += 1,
                Status::Warn => counts.warn += 1,
                Status::Fail => counts.fail += 1,
                Status::Skip => counts.skip += 1,
            }
        }
        Report {
            schema_version: SCHEMA_VERSION,
            checks,
            counts,
        }
    }

    pub(crate) fn any_failed(&self) -> bool {
        self.counts.fail > 0
    }
}

/// What a training job's DataLoader would keep in shared memory: `num_workers × prefetch_factor`
/// batches per GPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Workload {
    pub num_workers: u32,
    pub prefetch_factor: u32,
    pub batch_bytes: u64,
}

/// Everything `doctor` needs from the command line.
#[derive(Debug, Clone)]
pub struct Options {
    pub nvml_lib: Option<PathBuf>,
    /// The Python to probe (a name looked up on PATH, or a path).
    pub python: PathBuf,
    pub python_timeout: Duration,
    pub data: Option<PathBuf>,
    /// Most bytes read by the `--data` throughput sample.
    pub data_sample_bytes: u64,
    pub data_sample_time: Duration,
    pub workload: Workload,
    /// Where shared memory is mounted (`/dev/shm`).
    pub shm_path: PathBuf,
}

/// Probes everything and judges it. Never fails: what cannot be probed becomes `skip`.
pub fn run(opts: &Options) -> Report {
    let gpus = gpu::probe(opts.nvml_lib.as_deref());
    let py = python::probe(&opts.python, opts.python_timeout);
    let nvcc = stack::probe_nvcc();
    let site_packages = match &py {
        python::Probe::Ran(f) => f.site_packages.clone(),
        _ => Vec::new(),
    };
    let cudnn = stack::probe_cudnn(&site_packages);
    let host = host::probe(&opts.shm_path);

    let mut checks = Vec::new();
    checks.extend(stack::checks(&gpus, &nvcc, &cudnn, &py));
    checks.extend(python::checks(&py, &gpus));
    checks.extend(gpu::checks(&gpus));
    checks.push(precision::check(&gpus, &py));
    checks.extend(host::checks(&host, &gpus, &opts.workload));
    if let Some(path) = &opts.data {
        checks.extend(data::checks(
            path,
            opts.data_sample_bytes,
            opts.data_sample_time,
        ));
    }
    Report::new(checks)
}

/// Parses a size: a plain number of bytes or one with a K, M, G or T suffix (binary: 1K = 1024),
/// optionally followed by `B` or `iB` (`64M`, `1.5GiB`, `150MB`).
/// The largest size any option takes (1 PiB).
pub const MAX_SIZE_BYTES: u64 = 1 << 50;

pub(crate) fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let stripped = lower
        .strip_suffix("ib")
        .or_else(|| lower.strip_suffix('b'))
        .unwrap_or(&lower);
    let (num, mult) = match stripped.chars().last() {
        Some('k') => (&stripped[..stripped.len() - 1], 1u64 << 10),
        Some('m') => (&stripped[..stripped.len() - 1], 1 << 20),
        Some('g') => (&stripped[..stripped.len() - 1], 1 << 30),
        Some('t') => (&stripped[..stripped.len() - 1], 1 << 40),
        _ => (stripped, 1),
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a size; use e.g. 4096, 64M, 1.5G"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("'{s}' is not a valid size"));
    }
    // Bounded well below u64::MAX so that sums and products of sizes cannot overflow.
    if v * mult as f64 > MAX_SIZE_BYTES as f64 {
        return Err(format!("'{s}' is too large: sizes are at most 1P"));
    }
    Ok((v * mult as f64).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("64M").unwrap(), 64 << 20);
        assert_eq!(parse_size("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_size("150MB").unwrap(), 150 << 20);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
        assert_eq!(parse_size("2k").unwrap(), 2048);
        assert!(parse_size("lots").is_err());
        assert!(parse_size("-1M").is_err());
        assert!(parse_size("18446744073709551615").is_err());
        assert!(parse_size("2048T").unwrap_err().contains("too large"));
        assert_eq!(parse_size("1024T").unwrap(), MAX_SIZE_BYTES);
        assert!(parse_size("").is_err());
    }

    #[test]
    fn counts_and_failure() {
        let r = Report::new(vec![
            Check::new("a", Group::Host, Status::Pass, "ok"),
            Check::new("b", Group::Host, Status::Fail, "bad").fix("do x"),
            Check::skip("c", Group::Gpu, "no GPU"),
        ]);
        assert_eq!(r.counts.pass, 1);
        assert_eq!(r.counts.fail, 1);
        assert_eq!(r.counts.skip, 1);
        assert!(r.any_failed());
    }

    #[test]
    fn none_evidence_is_left_out() {
        let c = Check::new("a", Group::Host, Status::Pass, "ok")
            .with("x_bytes", Some(3u64))
            .with("y_bytes", None::<u64>);
        assert_eq!(c.evidence.len(), 1);
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["fix"], serde_json::Value::Null);
        assert!(json.get("gpu").is_none());
    }
}
