//! Reading any supported input into evidence: format detection and a fast recording reader.

use super::evidence::EvidenceBuilder;
use super::fast;
use super::{DiagnoseError, Evidence, Source};
use crate::record::format::{self, Header, Line, ReadError};
use crate::sample::dcgmi::{self, Flavour};
use crate::sample::smi_csv::{self, CsvOptions, LogError};
use crate::sample::{GpuSample, HostSample, ProcSample};
use std::io::Read;
use std::path::Path;

/// Input formats (`--input-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum InputFormat {
    /// Detect from the first lines
    #[default]
    Auto,
    /// gpufeed NDJSON recording
    Recording,
    /// nvidia-smi --query-gpu=... --format=csv log
    SmiCsv,
    /// nvidia-smi dmon output
    SmiDmon,
    /// dcgmi dmon output
    Dcgmi,
}

impl InputFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            InputFormat::Auto => "auto",
            InputFormat::Recording => "recording",
            InputFormat::SmiCsv => "smi_csv",
            InputFormat::SmiDmon => "smi_dmon",
            InputFormat::Dcgmi => "dcgmi",
        }
    }
}

/// Options for logs that do not describe themselves.
#[derive(Debug, Clone, Default)]
pub struct LogOptions {
    /// nvidia-smi CSV field names, for logs written with `noheader`.
    pub columns: Option<Vec<String>>,
    /// Seconds between polls in logs without timestamps.
    pub interval_s: Option<f64>,
}

/// What reading a file produced.
#[derive(Debug)]
pub struct ReadOutcome {
    pub source: Source,
    pub evidence: Evidence,
    /// The recording header's hostname (logs have none).
    pub hostname: Option<String>,
}

/// Guesses the format from the first bytes of a file.
pub fn detect(head: &str) -> Option<InputFormat> {
    let lines: Vec<&str> = head
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .take(20)
        .collect();
    let first = lines.first()?;
    if first.starts_with('{') {
        return Some(InputFormat::Recording);
    }
    for l in &lines {
        if let Some(rest) = l.strip_prefix('#') {
            let toks: Vec<String> = rest
                .split_whitespace()
                .map(|t| t.to_ascii_lowercase())
                .collect();
            if toks.first().is_some_and(|t| t == "entity") {
                return Some(InputFormat::Dcgmi);
            }
            if toks.iter().any(|t| t == "gpu")
                && toks
                    .iter()
                    .any(|t| ["sm", "pwr", "mem", "fb", "rxpci", "gtemp"].contains(&t.as_str()))
            {
                return Some(InputFormat::SmiDmon);
            }
        }
        if l.starts_with("GPU ")
            && l.split_whitespace()
                .nth(1)
                .is_some_and(|t| t.parse::<u32>().is_ok())
        {
            return Some(InputFormat::Dcgmi);
        }
    }
    let csv_like = lines.iter().filter(|l| l.contains(',')).count();
    if csv_like * 2 >= lines.len() {
        let known = [
            "utilization.gpu",
            "memory.used",
            "memory.total",
            "timestamp",
            "pci.bus_id",
            "index",
        ];
        let has_header = lines.iter().any(|l| {
            let l = l.to_ascii_lowercase();
            known.iter().any(|k| l.contains(k))
        });
        let has_units = lines.iter().any(|l| l.contains(" %") || l.contains("MiB"));
        // `noheader,nounits`: rows of numbers; the CSV reader asks for --columns.
        let numeric = lines.iter().all(|l| {
            l.split(',').all(|v| {
                let v = v.trim();
                v.parse::<f64>().is_ok() || v.starts_with('[')
            })
        });
        if has_header || has_units || (numeric && lines.iter().any(|l| l.contains(','))) {
            return Some(InputFormat::SmiCsv);
        }
    }
    None
}

fn open(path: &Path) -> Result<std::fs::File, DiagnoseError> {
    let f = std::fs::File::open(path).map_err(|e| DiagnoseError::Open {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    if f.metadata().map(|m| m.is_dir()).unwrap_or(false) {
        return Err(DiagnoseError::Open {
            path: path.to_path_buf(),
            reason: "it is a directory".into(),
        });
    }
    Ok(f)
}

fn bad(path: &Path, e: LogError) -> DiagnoseError {
    match e {
        LogError::Empty => DiagnoseError::Empty {
            path: path.to_path_buf(),
        },
        other => DiagnoseError::Bad {
            path: path.to_path_buf(),
            detail: other.to_string(),
        },
    }
}

/// Reads `path` in `format` (detecting it for `Auto`) into evidence.
pub fn read(
    path: &Path,
    format: InputFormat,
    opts: &LogOptions,
) -> Result<ReadOutcome, DiagnoseError> {
    let format = match format {
        InputFormat::Auto if opts.columns.is_some() => InputFormat::SmiCsv,
        InputFormat::Auto => {
            let mut head = Vec::with_capacity(8192);
            open(path)?
                .take(8192)
                .read_to_end(&mut head)
                .map_err(|e| DiagnoseError::Open {
                    path: path.to_path_buf(),
                    reason: e.to_string(),
                })?;
            if head.iter().all(|b| b.is_ascii_whitespace()) {
                return Err(DiagnoseError::Empty {
                    path: path.to_path_buf(),
                });
            }
            detect(&String::from_utf8_lossy(&head)).ok_or_else(|| DiagnoseError::UnknownFormat {
                path: path.to_path_buf(),
            })?
        }
        f => f,
    };
    let file = open(path)?;
    let mut b = EvidenceBuilder::new();
    let mut source = Source {
        path: path.display().to_string(),
        format: format.as_str().to_string(),
        lines: 0,
        malformed: 0,
        truncated: false,
        unfinished: false,
    };
    let header = match format {
        InputFormat::Recording | InputFormat::Auto => {
            let (h, st) = read_recording_fast(path, file, &mut b).map_err(|e| match e {
                ReadError::Empty { .. } => DiagnoseError::Empty {
                    path: path.to_path_buf(),
                },
                ReadError::Open { source, .. } => DiagnoseError::Open {
                    path: path.to_path_buf(),
                    reason: source.to_string(),
                },
                other => DiagnoseError::Bad {
                    path: path.to_path_buf(),
                    detail: other
                        .to_string()
                        .replace(&format!("{} ", path.display()), ""),
                },
            })?;
            source.lines = st.lines;
            source.malformed = st.malformed;
            source.truncated = st.truncated;
            source.unfinished = st.unfinished;
            h
        }
        InputFormat::SmiCsv => {
            let o = CsvOptions {
                columns: opts.columns.clone(),
                interval_s: opts.interval_s,
            };
            let (h, info) =
                smi_csv::read_smi_csv(file, &o, |l| b.push(l)).map_err(|e| bad(path, e))?;
            source.lines = info.rows;
            source.malformed = info.malformed;
            source.truncated = info.truncated;
            h
        }
        InputFormat::SmiDmon | InputFormat::Dcgmi => {
            let flavour = if format == InputFormat::Dcgmi {
                Flavour::Dcgmi
            } else {
                Flavour::SmiDmon
            };
            let (h, info, prof) = dcgmi::read_dmon(file, flavour, opts.interval_s, |l| b.push(l))
                .map_err(|e| bad(path, e))?;
            for (i, p) in prof {
                b.set_profiling(i, p);
            }
            source.lines = info.rows;
            source.malformed = info.malformed;
            source.truncated = info.truncated;
            h
        }
    };
    Ok(ReadOutcome {
        source,
        hostname: header.host.hostname.clone(),
        evidence: b.finish(&header),
    })
}

/// Like [`format::read_from`] (same tolerance and statistics), feeding the evidence builder:
/// the frequent line types go through the specialised scanner in `fast` with reused buffers,
/// everything else (and any line the scanner gives up on) through serde.
pub fn read_recording_fast(
    path: &Path,
    r: impl Read,
    b: &mut EvidenceBuilder,
) -> Result<(Header, format::ReadStats), ReadError> {
    let io = |source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut lines = Lines::new(r);
    let header = match lines.next().map_err(io)? {
        Some((a, z, _)) => {
            let first = &lines.buf[a..z];
            format::read_from(path, first, |_, _| {})?.0
        }
        None => format::read_from(path, &b""[..], |_, _| {})?.0,
    };
    let mut stats = format::ReadStats {
        unfinished: true,
        ..Default::default()
    };
    let mut pending_bad = 0u64;
    let mut gpu = GpuSample::default();
    let mut host = HostSample::default();
    let mut procs: Vec<ProcSample> = Vec::new();
    while let Some((a, z, complete)) = lines.next().map_err(io)? {
        let bytes = &lines.buf[a..z];
        let text = trim(bytes);
        if text.is_empty() {
            continue;
        }
        stats.lines += 1;
        let fast_done = if text.starts_with(b"{\"type\":\"gpu\",") {
            fast::gpu(text, &mut gpu).map(|_| b.push_gpu(&gpu))
        } else if text.starts_with(b"{\"type\":\"host\",") {
            fast::host(text, &mut host).map(|_| b.push_host(&host))
        } else if text.starts_with(b"{\"type\":\"procs\",") {
            fast::procs(text, &mut procs).map(|t| b.push_procs(t, &procs))
        } else {
            None
        };
        let ok = fast_done.is_some()
            || match serde_json::from_slice::<Line>(text) {
                Ok(line) => {
                    if matches!(line, Line::End(_)) {
                        stats.unfinished = false;
                    }
                    b.push(&line);
                    true
                }
                Err(_) => false,
            };
        if ok {
            stats.malformed += pending_bad;
            pending_bad = 0;
        } else if !complete {
            stats.truncated = true;
        } else {
            pending_bad += 1;
        }
    }
    if pending_bad > 0 {
        stats.truncated = true;
        stats.malformed += pending_bad - 1;
    }
    Ok((header, stats))
}

/// Lines read in place from a large buffer (no copy per line); the last one may lack its
/// newline (`complete` false).
struct Lines<R> {
    r: R,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    eof: bool,
}

impl<R: Read> Lines<R> {
    fn new(r: R) -> Self {
        Lines {
            r,
            buf: vec![0; 4 << 20],
            start: 0,
            end: 0,
            eof: false,
        }
    }

    /// The next line as a range of `buf` (newline included) and whether it was complete.
    fn next(&mut self) -> std::io::Result<Option<(usize, usize, bool)>> {
        loop {
            if let Some(p) = memchr::memchr(b'\n', &self.buf[self.start..self.end]) {
                let a = self.start;
                self.start += p + 1;
                return Ok(Some((a, self.start, true)));
            }
            if self.eof {
                if self.start < self.end {
                    let a = self.start;
                    self.start = self.end;
                    return Ok(Some((a, self.end, false)));
                }
                return Ok(None);
            }
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            if self.end == self.buf.len() {
                let n = self.buf.len() * 2;
                self.buf.resize(n, 0);
            }
            match self.r.read(&mut self.buf[self.end..]) {
                Ok(0) => self.eof = true,
                Ok(n) => self.end += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

fn trim(b: &[u8]) -> &[u8] {
    let start = b
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(b.len());
    let end = b
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &b[start..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection() {
        assert_eq!(
            detect("{\"type\":\"header\"}\n"),
            Some(InputFormat::Recording)
        );
        assert_eq!(
            detect("timestamp, index, utilization.gpu [%]\n2026/12/02 12:00:00.000, 0, 5 %\n"),
            Some(InputFormat::SmiCsv)
        );
        assert_eq!(detect("0, 87 %, 1024 MiB\n"), Some(InputFormat::SmiCsv));
        assert_eq!(
            detect("# gpu    pwr  gtemp     sm\n# Idx      W      C      %\n    0  50 40 3\n"),
            Some(InputFormat::SmiDmon)
        );
        assert_eq!(
            detect("#Entity  GPUTL\nID\nGPU 0  5\n"),
            Some(InputFormat::Dcgmi)
        );
        assert_eq!(detect("hello world\n"), None);
        assert_eq!(detect("a,b\nx,y\n"), None);
        assert_eq!(detect("97, 40211, 81920\n"), Some(InputFormat::SmiCsv));
        assert_eq!(detect(""), None);
    }
}
