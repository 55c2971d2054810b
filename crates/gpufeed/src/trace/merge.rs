//! A Kineto trace read for `gpufeed export --merge`: through the same streaming reader as
//! `analyze` (gzip, a cut `.gz`, a byte-order mark, non-UTF-8 names, oversized values), with the
//! same rule for a trace without events, and without holding the trace in memory.
//!
//! Two passes over the file: the first finds the top-level fields (which may follow the events)
//! and checks that there are events; the second hands each event's JSON text to the writer.

use super::TraceError;
use gpufeed_kineto::event::{Event, EventSink, ScanStats};
use gpufeed_kineto::reader;
use std::path::{Path, PathBuf};

/// What the first pass found.
#[derive(Debug, Default)]
pub(crate) struct MergeHead {
    /// Top-level fields other than `traceEvents`, `baseTimeNanoseconds` and `displayTimeUnit`,
    /// as (key, JSON text), in file order.
    pub fields: Vec<(String, String)>,
    /// `baseTimeNanoseconds` in µs: newer Kineto writes `ts` relative to it (0 when absent).
    pub shift_us: f64,
    pub events: u64,
    /// The reader's warnings (a cut `.gz`, skipped events), to show to the user.
    pub warnings: Vec<String>,
}

/// One event as the second pass hands it over.
pub(crate) struct RawEvent<'a> {
    pub ph: u8,
    pub ts: Option<f64>,
    pub dur: Option<f64>,
    /// The event's JSON text (invalid UTF-8 in names replaced by U+FFFD), checked to be JSON.
    pub json: &'a str,
}

/// A trace opened for merging; stdin (`-`) is spooled to a temporary file for the two passes.
pub(crate) struct MergeTrace {
    path: PathBuf,
    _spool: Option<tempfile::NamedTempFile>,
}

impl MergeTrace {
    pub(crate) fn open(path: &Path) -> Result<Self, TraceError> {
        if path.as_os_str() != "-" {
            return Ok(MergeTrace {
                path: path.to_path_buf(),
                _spool: None,
            });
        }
        let io = |source| TraceError::Io {
            path: "-".into(),
            source,
        };
        let mut spool = tempfile::NamedTempFile::new().map_err(io)?;
        std::io::copy(&mut std::io::stdin().lock(), &mut spool).map_err(io)?;
        Ok(MergeTrace {
            path: spool.path().to_path_buf(),
            _spool: Some(spool),
        })
    }

    /// First pass: top-level fields and the events check (the rule of `analyze`).
    pub(crate) fn head(&self) -> Result<MergeHead, TraceError> {
        struct Head {
            h: MergeHead,
            x_events: u64,
        }
        impl EventSink for Head {
            fn event(&mut self, ev: &Event<'_>) {
                if ev.ph == b'X' {
                    self.x_events += 1;
                }
            }
            fn top_level(&mut self, key: &str, value: serde_json::Value) {
                if key == "baseTimeNanoseconds" {
                    if let Some(ns) = value.as_f64() {
                        self.h.shift_us = ns / 1e3;
                    }
                }
            }
            fn top_level_raw(&mut self, key: &[u8], json: &[u8]) {
                let key = String::from_utf8_lossy(key);
                if matches!(
                    &*key,
                    "traceEvents" | "baseTimeNanoseconds" | "displayTimeUnit"
                ) {
                    return;
                }
                let json = String::from_utf8_lossy(json);
                if serde_json::from_str::<serde::de::IgnoredAny>(&json).is_ok() {
                    self.h.fields.push((key.into_owned(), json.into_owned()));
                }
            }
        }
        let mut sink = Head {
            h: MergeHead::default(),
            x_events: 0,
        };
        let st = reader::read_trace(super::open(&self.path)?, &mut sink)?;
        if let Some(e) = super::mostly_unreadable(&st) {
            return Err(e);
        }
        if sink.x_events == 0 {
            return Err(super::no_events(&st));
        }
        sink.h.events = st.events;
        sink.h.warnings = st.warnings;
        Ok(sink.h)
    }

    /// Second pass: each event that is valid JSON, in file order. Returns the events handed
    /// over and the reader's statistics.
    pub(crate) fn events(
        &self,
        mut visit: impl FnMut(&RawEvent<'_>) -> std::io::Result<()>,
    ) -> Result<(u64, ScanStats, Option<std::io::Error>), TraceError> {
        struct Copy<'v> {
            visit: &'v mut dyn FnMut(&RawEvent<'_>) -> std::io::Result<()>,
            n: u64,
            error: Option<std::io::Error>,
        }
        impl EventSink for Copy<'_> {
            fn event(&mut self, _ev: &Event<'_>) {}
            fn top_level(&mut self, _key: &str, _value: serde_json::Value) {}
            fn raw_event(&mut self, ev: &Event<'_>, json: &[u8]) {
                if self.error.is_some() {
                    return;
                }
                let json = String::from_utf8_lossy(json);
                if serde_json::from_str::<serde::de::IgnoredAny>(&json).is_err() {
                    return;
                }
                let raw = RawEvent {
                    ph: ev.ph,
                    ts: ev.ts,
                    dur: ev.dur,
                    json: &json,
                };
                match (self.visit)(&raw) {
                    Ok(()) => self.n += 1,
                    Err(e) => self.error = Some(e),
                }
            }
        }
        let mut sink = Copy {
            visit: &mut visit,
            n: 0,
            error: None,
        };
        let st = reader::read_trace(super::open(&self.path)?, &mut sink)?;
        Ok((sink.n, st, sink.error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file(bytes: &[u8]) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(bytes).unwrap();
        f
    }

    fn copy(t: &MergeTrace) -> Vec<String> {
        let mut out = Vec::new();
        t.events(|e| {
            out.push(e.json.to_string());
            Ok(())
        })
        .unwrap();
        out
    }

    #[test]
    fn fields_after_the_events_and_a_bom_and_a_latin1_name() {
        let f = file(
            b"\xEF\xBB\xBF{\"traceEvents\":[{\"ph\":\"X\",\"name\":\"caf\xe9\",\"ts\":1,\"dur\":2,\"pid\":1,\"tid\":1}],\"traceName\":\"t\",\"baseTimeNanoseconds\":5000}",
        );
        let t = MergeTrace::open(f.path()).unwrap();
        let h = t.head().unwrap();
        assert_eq!(h.fields, vec![("traceName".into(), "\"t\"".into())]);
        assert_eq!(h.shift_us, 5.0);
        let ev = copy(&t);
        assert_eq!(ev.len(), 1);
        let v: serde_json::Value = serde_json::from_str(&ev[0]).unwrap();
        assert_eq!(v["name"], "caf\u{FFFD}");
    }

    #[test]
    fn no_events_is_refused_as_analyze_refuses_it() {
        let f = file(br#"{"traceEvents":[]}"#);
        let t = MergeTrace::open(f.path()).unwrap();
        assert!(matches!(t.head(), Err(TraceError::NoEvents)));
        let f = file(b"\0\0\0\0");
        let t = MergeTrace::open(f.path()).unwrap();
        assert!(matches!(t.head(), Err(TraceError::NotATrace(_))));
    }

    #[test]
    fn a_cut_gzip_keeps_the_events_before_the_cut() {
        let mut text = String::from("{\"traceEvents\":[\n");
        for i in 0..2000 {
            text.push_str(&format!(
                "{{\"ph\":\"X\",\"name\":\"op{i}\",\"ts\":{i},\"dur\":1,\"pid\":1,\"tid\":1}},\n"
            ));
        }
        text.push_str("{\"ph\":\"X\",\"ts\":0,\"dur\":0}]}");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(text.as_bytes()).unwrap();
        let gz = gz.finish().unwrap();
        let f = file(&gz[..gz.len() / 2]);
        let t = MergeTrace::open(f.path()).unwrap();
        let h = t.head().unwrap();
        assert!(!h.warnings.is_empty());
        let n = copy(&t).len();
        assert!(n > 10 && n < 2001, "{n}");
    }
}
