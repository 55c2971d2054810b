//! The recording file: NDJSON, one JSON object per line, each with a `type`.
//!
//! The first line is a [`Header`] carrying `schema_version`; then samples in time order
//! (`gpu`, `host`, `proc_start`, `procs`, `proc_exit`, and since schema 2 the Python stack lines
//! `py_status`, `py_frame`, `py_stack`, `py_samples`) and, when the recording ended cleanly,
//! an `end` line. Readers ignore line types they do not know, accept every schema version up to
//! [`SCHEMA_VERSION`], and treat a last line cut mid-way (a killed recorder) as the end.

use crate::sample::pyphase::Phase;
use crate::sample::pystacks::PyStatus;
use crate::sample::{
    DriverInfo, GpuSample, GpuStatic, HostInfo, HostSample, ProcSample, ProcStart,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

/// Bump when a field is added; keep reading the old ones.
/// Version 2 added the Python stack lines and the header's `py_rate_hz`.
pub const SCHEMA_VERSION: u32 = 2;

/// First line of a recording.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub schema_version: u32,
    #[serde(default)]
    pub gpufeed_version: Option<String>,
    /// RFC 3339 UTC time the recording started.
    pub start_time: String,
    /// The same instant in microseconds since the Unix epoch; every `t_s` is relative to it.
    pub start_unix_us: u64,
    /// Host and process sampling interval.
    pub interval_s: f64,
    pub host: HostInfo,
    #[serde(default)]
    pub driver: Option<DriverInfo>,
    #[serde(default)]
    pub gpus: Vec<GpuStatic>,
    /// Why GPUs are absent, when they are (e.g. "no NVIDIA driver found").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_error: Option<String>,
    /// The command `gpufeed run` started, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// The job's root process (started by `run`, or attached with `record --pid`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Python stack sampling rate, when stacks were sampled (schema 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub py_rate_hz: Option<f64>,
}

/// A Python frame, written once the first time a stack uses it (schema 2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PyFrameDef {
    pub id: u32,
    /// Function name (qualified with its class on CPython 3.11+).
    pub name: String,
    pub file: String,
    pub line: i32,
    /// The source line being executed, for the user's own files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src: Option<String>,
}

/// A stack, written once the first time it is seen: frame ids, outermost first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PyStackDef {
    pub id: u32,
    pub frames: Vec<u32>,
}

/// One thread's samples over an interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PyThreadCounts {
    pub tid: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `[stack id, samples, of which idle]`.
    pub stacks: Vec<[u64; 3]>,
    /// Samples per training-loop phase (phases with none left out).
    #[serde(default)]
    pub phases: BTreeMap<Phase, u64>,
}

/// One process's Python samples over one interval, aggregated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PySamples {
    /// End of the interval.
    pub t_s: f64,
    pub dt_s: f64,
    pub pid: u32,
    /// Sampling instants at which this process was read.
    pub ticks: u64,
    pub threads: Vec<PyThreadCounts>,
}

/// What sampling a process's Python stacks came to (written once per process).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PyStatusLine {
    pub t_s: f64,
    pub pid: u32,
    pub status: PyStatus,
    /// Interpreter version when ok, the reason otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// Step markers from the job (`GPUFEED_STEP_SOCKET`), aggregated per interval: the steps that
/// ended in it, the seconds they took, and what they reported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepsLine {
    /// End of the interval.
    pub t_s: f64,
    pub dt_s: f64,
    pub steps: u64,
    /// Seconds the steps took, each from the previous step's end to its own.
    pub span_s: f64,
    /// Seconds of it spent waiting for the input batch; absent unless every step reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_s: Option<f64>,
    /// Samples in those steps; absent unless every step reported its count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items: Option<u64>,
}

/// How a recording ended.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct End {
    pub t_s: f64,
    /// The job's exit code, when it exited normally.
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// The signal that killed the job, when one did.
    #[serde(default)]
    pub signal: Option<i32>,
    /// Why the recording stopped: "job_exited", "duration", "interrupted", "attached_exited".
    #[serde(default)]
    pub reason: Option<String>,
}

/// The `overrides` line: values gpufeed put in place of the job's own, and why others could not be.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OverridesLine {
    pub t_s: f64,
    #[serde(default)]
    pub overrides: Vec<crate::inject::Override>,
    #[serde(default)]
    pub notes: Vec<String>,
}

/// Every line after the header.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Line {
    Gpu(GpuSample),
    Host(HostSample),
    ProcStart(ProcStart),
    Procs {
        t_s: f64,
        procs: Vec<ProcSample>,
    },
    ProcExit {
        t_s: f64,
        pid: u32,
    },
    End(End),
    /// What `--dataloader` / `--torch` changed in the job (written once, before `end`).
    Overrides(OverridesLine),
    PyStatus(PyStatusLine),
    PyFrame(PyFrameDef),
    PyStack(PyStackDef),
    PySamples(PySamples),
    Steps(StepsLine),
    /// A line type from a newer gpufeed: ignored.
    #[serde(other)]
    Unknown,
}

/// Rounds `x` to `dp` decimal places.
fn round_dp(x: f64, dp: i32) -> f64 {
    let m = 10f64.powi(dp);
    (x * m).round() / m
}

fn round_opt(x: &mut Option<f64>, dp: i32) {
    if let Some(v) = x {
        *v = round_dp(*v, dp);
    }
}

impl Line {
    /// Rounds the line's figures to what they can mean: times to the microsecond, percentages to
    /// 0.01, rates to the byte per second. Full-precision floats (`33.33333333333333`) would make
    /// the most frequent lines of a recording half again as long for no information.
    pub fn round_for_storage(&mut self) {
        const T: i32 = 6;
        const PCT: i32 = 2;
        match self {
            Line::Gpu(g) => {
                g.t_s = round_dp(g.t_s, T);
                if let Some(v) = &mut g.util_samples {
                    for p in v.iter_mut() {
                        p[0] = round_dp(p[0], T);
                        p[1] = round_dp(p[1], PCT);
                    }
                }
                round_opt(&mut g.util_pct, PCT);
                round_opt(&mut g.mem_util_pct, PCT);
                round_opt(&mut g.power_w, 3);
                round_opt(&mut g.pcie_rx_bytes_per_s, 0);
                round_opt(&mut g.pcie_tx_bytes_per_s, 0);
            }
            Line::Host(h) => {
                h.t_s = round_dp(h.t_s, T);
                for c in h.cpu_pct.iter_mut() {
                    *c = round_dp(*c, PCT);
                }
                for x in [
                    &mut h.cpu_total_pct,
                    &mut h.iowait_pct,
                    &mut h.psi_cpu_some_pct,
                    &mut h.psi_io_some_pct,
                    &mut h.psi_io_full_pct,
                    &mut h.psi_mem_some_pct,
                    &mut h.psi_mem_full_pct,
                ] {
                    round_opt(x, PCT);
                }
                for d in h.disks.iter_mut() {
                    d.read_bytes_per_s = round_dp(d.read_bytes_per_s, 0);
                    d.write_bytes_per_s = round_dp(d.write_bytes_per_s, 0);
                }
            }
            Line::ProcStart(p) => p.t_s = round_dp(p.t_s, T),
            Line::Procs { t_s, procs } => {
                *t_s = round_dp(*t_s, T);
                for p in procs.iter_mut() {
                    round_opt(&mut p.cpu_pct, PCT);
                }
            }
            Line::ProcExit { t_s, .. } => *t_s = round_dp(*t_s, T),
            Line::End(e) => e.t_s = round_dp(e.t_s, T),
            Line::Overrides(o) => o.t_s = round_dp(o.t_s, T),
            Line::PyStatus(p) => p.t_s = round_dp(p.t_s, T),
            Line::PySamples(p) => {
                p.t_s = round_dp(p.t_s, T);
                p.dt_s = round_dp(p.dt_s, T);
            }
            Line::Steps(st) => {
                st.t_s = round_dp(st.t_s, T);
                st.dt_s = round_dp(st.dt_s, T);
                st.span_s = round_dp(st.span_s, T);
                round_opt(&mut st.wait_s, T);
            }
            Line::PyFrame(_) | Line::PyStack(_) | Line::Unknown => {}
        }
    }
}

/// Header line as written: the header plus its `type` tag.
#[derive(Serialize, Deserialize)]
struct TaggedHeader {
    #[serde(rename = "type")]
    kind: String,
    #[serde(flatten)]
    header: Header,
}

pub fn header_line(h: &Header) -> String {
    serde_json::to_string(&TaggedHeader {
        kind: "header".into(),
        header: h.clone(),
    })
    .expect("header serializes")
}

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot open recording {path}: {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is empty: nothing was recorded")]
    Empty { path: PathBuf },
    #[error("{path} is not a gpufeed recording (first line: {detail})")]
    NotARecording { path: PathBuf, detail: String },
    #[error("{path} was written by a newer gpufeed (schema {found}, this one reads up to {SCHEMA_VERSION}): upgrade gpufeed")]
    TooNew { path: PathBuf, found: u32 },
    #[error("error reading {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// What a read found besides the lines.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ReadStats {
    pub lines: u64,
    /// Lines that were not valid JSON of a known shape, other than a cut last line.
    pub malformed: u64,
    /// The last line was cut mid-way (the recorder was killed): it was dropped.
    pub truncated: bool,
    /// No `end` line: the recorder did not finish.
    pub unfinished: bool,
}

/// Reads a recording, handing each line to `visit` in order; streams, never holds the file.
pub fn read_recording(
    path: &Path,
    visit: impl FnMut(&Header, Line),
) -> Result<(Header, ReadStats), ReadError> {
    let f = std::fs::File::open(path).map_err(|source| ReadError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    read_from(path, f, visit)
}

/// As [`read_recording`], from any reader (`path` is only used in messages).
pub fn read_from(
    path: &Path,
    r: impl Read,
    mut visit: impl FnMut(&Header, Line),
) -> Result<(Header, ReadStats), ReadError> {
    let mut reader = BufReader::with_capacity(256 * 1024, r);
    let io_err = |source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut buf = String::new();
    let n = reader.read_line(&mut buf).map_err(io_err)?;
    if n == 0 || buf.trim().is_empty() {
        return Err(ReadError::Empty {
            path: path.to_path_buf(),
        });
    }
    let header = parse_header(path, &buf)?;
    let mut stats = ReadStats {
        unfinished: true,
        ..Default::default()
    };
    let mut pending_bad = 0u64;
    let mut bytes = Vec::new();
    loop {
        bytes.clear();
        let n = reader.read_until(b'\n', &mut bytes).map_err(io_err)?;
        if n == 0 {
            break;
        }
        let complete = bytes.last() == Some(&b'\n');
        let text = String::from_utf8_lossy(&bytes);
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        stats.lines += 1;
        match serde_json::from_str::<Line>(text) {
            Ok(line) => {
                stats.malformed += pending_bad;
                pending_bad = 0;
                if matches!(line, Line::End(_)) {
                    stats.unfinished = false;
                }
                visit(&header, line);
            }
            Err(_) if !complete => stats.truncated = true,
            Err(_) => pending_bad += 1,
        }
    }
    // A bad line with nothing valid after it is the cut end of a killed recording.
    if pending_bad > 0 {
        stats.truncated = true;
        stats.malformed += pending_bad - 1;
    }
    Ok((header, stats))
}

fn parse_header(path: &Path, line: &str) -> Result<Header, ReadError> {
    let v: serde_json::Value =
        serde_json::from_str(line.trim()).map_err(|e| ReadError::NotARecording {
            path: path.to_path_buf(),
            detail: format!("not JSON: {e}"),
        })?;
    if v.get("type").and_then(|t| t.as_str()) != Some("header") {
        return Err(ReadError::NotARecording {
            path: path.to_path_buf(),
            detail: "no gpufeed header".into(),
        });
    }
    let found = v
        .get("schema_version")
        .and_then(|s| s.as_u64())
        .unwrap_or(0) as u32;
    if found > SCHEMA_VERSION {
        return Err(ReadError::TooNew {
            path: path.to_path_buf(),
            found,
        });
    }
    serde_json::from_value::<TaggedHeader>(v)
        .map(|t| t.header)
        .map_err(|e| ReadError::NotARecording {
            path: path.to_path_buf(),
            detail: format!("bad header: {e}"),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            schema_version: SCHEMA_VERSION,
            gpufeed_version: Some("0.1.0".into()),
            start_time: "2026-12-02T12:00:00Z".into(),
            start_unix_us: 1_700_000_000_000_000,
            interval_s: 0.1,
            host: HostInfo {
                cpu_count: 2,
                ..Default::default()
            },
            driver: None,
            gpus: vec![GpuStatic {
                index: 0,
                name: Some("Fake".into()),
                ..Default::default()
            }],
            gpu_error: None,
            command: Some(vec!["python".into(), "train.py".into()]),
            pid: Some(42),
            py_rate_hz: Some(100.0),
        }
    }

    fn lines() -> Vec<Line> {
        vec![
            Line::Gpu(GpuSample {
                index: 0,
                t_s: 0.1,
                util_samples: Some(vec![[0.05, 80.0], [0.1, 10.0]]),
                mem_used_bytes: Some(1 << 30),
                ..Default::default()
            }),
            Line::ProcStart(ProcStart {
                t_s: 0.1,
                pid: 42,
                ppid: 1,
                cmd: Some("python train.py".into()),
                comm: Some("python".into()),
            }),
            Line::Procs {
                t_s: 0.2,
                procs: vec![ProcSample {
                    pid: 42,
                    cpu_pct: Some(99.0),
                    state: Some('R'),
                    ..Default::default()
                }],
            },
            Line::PyStatus(PyStatusLine {
                t_s: 0.2,
                pid: 42,
                status: PyStatus::Ok,
                detail: Some("3.11.2".into()),
            }),
            Line::PyFrame(PyFrameDef {
                id: 0,
                name: "main".into(),
                file: "train.py".into(),
                line: 3,
                src: Some("x = next(it)".into()),
            }),
            Line::PyStack(PyStackDef {
                id: 0,
                frames: vec![0],
            }),
            Line::PySamples(PySamples {
                t_s: 0.25,
                dt_s: 0.25,
                pid: 42,
                ticks: 25,
                threads: vec![PyThreadCounts {
                    tid: 42,
                    name: Some("MainThread".into()),
                    stacks: vec![[0, 25, 20]],
                    phases: [(Phase::DataWait, 25)].into_iter().collect(),
                }],
            }),
            Line::End(End {
                t_s: 0.3,
                exit_code: Some(0),
                signal: None,
                reason: Some("job_exited".into()),
            }),
        ]
    }

    fn write(h: &Header, ls: &[Line]) -> String {
        let mut s = header_line(h);
        s.push('\n');
        for l in ls {
            s.push_str(&serde_json::to_string(l).unwrap());
            s.push('\n');
        }
        s
    }

    fn read(text: &str) -> Result<(Header, ReadStats, Vec<Line>), ReadError> {
        let mut got = Vec::new();
        let (h, st) = read_from(Path::new("t.ndjson"), text.as_bytes(), |_, l| got.push(l))?;
        Ok((h, st, got))
    }

    #[test]
    fn storage_rounding_keeps_meaningful_digits_only() {
        let mut l = Line::Host(HostSample {
            t_s: 0.100289128,
            cpu_pct: vec![33.333333333333336, 100.0],
            psi_io_some_pct: Some(4.993686799762249),
            disks: vec![crate::sample::DiskRate {
                device: "vda".into(),
                read_bytes_per_s: 6198224.585401869,
                write_bytes_per_s: 0.0,
            }],
            ..Default::default()
        });
        l.round_for_storage();
        let s = serde_json::to_string(&l).unwrap();
        assert!(s.contains("\"t_s\":0.100289,"), "{s}");
        assert!(s.contains("\"cpu_pct\":[33.33,100.0]"), "{s}");
        assert!(s.contains("\"psi_io_some_pct\":4.99,"), "{s}");
        assert!(s.contains("\"read_bytes_per_s\":6198225.0"), "{s}");
    }

    #[test]
    fn round_trip_keeps_everything() {
        let text = write(&header(), &lines());
        assert!(text.starts_with("{\"type\":\"header\",\"schema_version\":2"));
        let (h, st, got) = read(&text).unwrap();
        assert_eq!(h, header());
        assert_eq!(got, lines());
        assert_eq!(
            st,
            ReadStats {
                lines: 8,
                ..Default::default()
            }
        );
    }

    #[test]
    fn a_line_cut_mid_way_is_dropped_and_reported() {
        let text = write(&header(), &lines()[..3]);
        let cut = &text[..text.len() - 20];
        let (_, st, got) = read(cut).unwrap();
        assert_eq!(got.len(), 2);
        let _ = &lines()[3..];
        assert!(st.truncated && st.unfinished);
        assert_eq!(st.malformed, 0);
    }

    #[test]
    fn unknown_line_types_and_fields_are_ignored() {
        let mut text = write(&header(), &[]);
        text.push_str("{\"type\":\"from_the_future\",\"x\":1}\n");
        text.push_str("{\"type\":\"proc_exit\",\"t_s\":1.0,\"pid\":7,\"new_field\":true}\n");
        let (_, st, got) = read(&text).unwrap();
        assert_eq!(
            got,
            vec![Line::Unknown, Line::ProcExit { t_s: 1.0, pid: 7 }]
        );
        assert_eq!(st.malformed, 0);
    }

    #[test]
    fn garbage_in_the_middle_is_counted_not_fatal() {
        let mut text = write(&header(), &lines()[..1]);
        text.push_str("not json\n");
        text.push_str(&serde_json::to_string(lines().last().unwrap()).unwrap());
        text.push('\n');
        let (_, st, got) = read(&text).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(st.malformed, 1);
        assert!(!st.truncated && !st.unfinished);
    }

    #[test]
    fn bad_files_get_clear_errors() {
        assert!(matches!(read(""), Err(ReadError::Empty { .. })));
        assert!(matches!(
            read("hello\n"),
            Err(ReadError::NotARecording { .. })
        ));
        assert!(matches!(
            read("{\"a\":1}\n"),
            Err(ReadError::NotARecording { .. })
        ));
        let newer = header_line(&header()).replace("\"schema_version\":2", "\"schema_version\":99");
        let e = read(&newer).unwrap_err();
        assert!(matches!(e, ReadError::TooNew { found: 99, .. }), "{e}");
        assert!(e.to_string().contains("upgrade gpufeed"));
    }

    proptest::proptest! {
        /// Whatever follows a valid header — garbage, or a valid recording cut at any byte —
        /// reading never panics, and a cut recording yields a prefix of its lines.
        #[test]
        fn reading_never_panics_and_cuts_keep_a_prefix(garbage in proptest::collection::vec(proptest::num::u8::ANY, 0..400), cut in 0usize..2000) {
            let mut text = header_line(&header()).into_bytes();
            text.push(b'\n');
            text.extend_from_slice(&garbage);
            let _ = read_from(Path::new("g"), &text[..], |_, _| {});

            let full = write(&header(), &lines());
            let cut = cut.min(full.len());
            let mut got = Vec::new();
            if let Ok((_, st)) = read_from(Path::new("c"), &full.as_bytes()[..cut], |_, l| got.push(l)) {
                proptest::prop_assert_eq!(&got[..], &lines()[..got.len()]);
                proptest::prop_assert_eq!(st.malformed, 0);
            }
        }
    }

    #[test]
    fn missing_optional_header_fields_default() {
        let text = "{\"type\":\"header\",\"schema_version\":1,\"start_time\":\"x\",\"start_unix_us\":0,\"interval_s\":0.1,\"host\":{\"cpu_count\":1,\"hostname\":null,\"kernel\":null,\"cpus_allowed\":null,\"mem_total_bytes\":null,\"clock_ticks_per_s\":null}}\n";
        let (h, _, _) = read(text).unwrap();
        assert!(h.gpus.is_empty() && h.command.is_none());
    }
}
