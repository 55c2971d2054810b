//! Streaming Kineto reader.
//!
//! The input is read in chunks; a small scanner finds each element of `traceEvents` (string- and
//! escape-aware brace matching) and that one event is deserialized from the buffer with
//! serde_json's slice reader into a borrowed, compact [`Event`](super::event::Event). The whole event list is never held:
//! each event is handed to an [`EventSink`] at once and dropped. Top-level keys other than
//! `traceEvents` are read only when needed (`baseTimeNanoseconds`, `deviceProperties`,
//! `distributedInfo`).
//!
//! Robustness: a read error (truncated gzip) or an unexpected end of input stops the scan and
//! marks the result truncated, keeping everything read so far; an event that does not
//! deserialize is counted and skipped; strings are taken as raw bytes (no UTF-8 validation) and
//! decoded lossily where they are used.

use std::io::Read;

use crate::event::check_event;
use crate::event::{EventSink, ScanStats, MAX_NAME_BYTES, MAX_PLAUSIBLE_SPAN_US, MAX_VALUE_BYTES};
use crate::serde_event::EventDe;
use crate::ReadError;

const CHUNK: usize = 1 << 20;

struct Buf<R> {
    r: R,
    /// Always fully initialised; the valid bytes are `data[pos..end]`.
    data: Vec<u8>,
    end: usize,
    pos: usize,
    eof: bool,
    consumed: u64,
    read_error: Option<String>,
    /// [`MAX_VALUE_BYTES`], smaller in tests.
    max_value: usize,
}

impl<R: Read> Buf<R> {
    /// Reads more; returns false at the end of input (or after a read error, which is recorded).
    fn fill(&mut self) -> bool {
        if self.eof {
            return false;
        }
        if self.pos > 0 {
            self.consumed += self.pos as u64;
            self.data.copy_within(self.pos..self.end, 0);
            self.end -= self.pos;
            self.pos = 0;
        }
        if self.data.len() - self.end < CHUNK / 2 {
            let n = (self.data.len() * 2).max(CHUNK);
            self.data.resize(n, 0);
        }
        // Fill the free space, not just one read's worth: a pipe gives 64 KiB per read, and a
        // value rescanned after every small read made `analyze -` quadratic in its size. With
        // the buffer doubling, a value is rescanned O(log n) times: linear in total.
        let start = self.end;
        while self.end < self.data.len() {
            match self.r.read(&mut self.data[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(n) => self.end += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.eof = true;
                    self.read_error = Some(e.to_string());
                    break;
                }
            }
        }
        self.end > start
    }

    /// True when the value at `pos` has outgrown [`MAX_VALUE_BYTES`] without ending.
    fn too_big(&self) -> bool {
        self.end - self.pos >= self.max_value
    }

    /// Skips the value at `pos` without holding it: a streaming scan that keeps only its state
    /// (depth, inside a string, after a backslash). Err(()) when the input ends first.
    fn skip_value(&mut self) -> Result<(), ()> {
        let first = match self.data.get(self.pos) {
            Some(&b) if self.pos < self.end => b,
            _ => return Err(()),
        };
        let (mut depth, mut in_str, mut esc) = (0usize, false, false);
        if first == b'"' {
            in_str = true;
            self.pos += 1;
        } else if first != b'{' && first != b'[' {
            // A scalar: up to the next delimiter.
            loop {
                let b = &self.data[self.pos..self.end];
                match b
                    .iter()
                    .position(|&c| matches!(c, b',' | b']' | b'}' | b' ' | b'\n' | b'\r' | b'\t'))
                {
                    Some(k) => {
                        self.pos += k;
                        return Ok(());
                    }
                    None => {
                        self.pos = self.end;
                        if !self.fill() {
                            return Ok(());
                        }
                    }
                }
            }
        }
        loop {
            while self.pos < self.end {
                let c = self.data[self.pos];
                self.pos += 1;
                if in_str {
                    if esc {
                        esc = false;
                    } else if c != b'"' && c != b'\\' {
                        // Jump to the next quote or backslash.
                        match memchr::memchr2(b'"', b'\\', &self.data[self.pos..self.end]) {
                            Some(k) => self.pos += k,
                            None => self.pos = self.end,
                        }
                    } else if c == b'\\' {
                        esc = true;
                    } else if c == b'"' {
                        in_str = false;
                        if depth == 0 {
                            return Ok(());
                        }
                    }
                    continue;
                }
                match c {
                    b'"' => in_str = true,
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth = depth.saturating_sub(1);
                        if depth == 0 {
                            return Ok(());
                        }
                    }
                    _ => {}
                }
            }
            if !self.fill() {
                return Err(());
            }
        }
    }

    /// Next non-whitespace byte, not consumed; None at end of input.
    fn peek(&mut self) -> Option<u8> {
        loop {
            while self.pos < self.end {
                let b = self.data[self.pos];
                if matches!(b, b' ' | b'\n' | b'\r' | b'\t') {
                    self.pos += 1;
                } else if self.consumed == 0
                    && self.pos == 0
                    && self.data[..self.end].starts_with(b"\xEF\xBB\xBF")
                {
                    self.pos = 3; // UTF-8 byte-order mark
                } else {
                    return Some(b);
                }
            }
            if !self.fill() {
                return None;
            }
        }
    }

    /// Length of the complete JSON value starting at `pos`, reading more as needed.
    /// Err(()) when the input ends first.
    fn value_len(&mut self) -> Result<usize, ()> {
        loop {
            if let Some(n) = gpufeed_json::value_len(&self.data[self.pos..self.end], self.eof) {
                return Ok(n);
            }
            if self.too_big() {
                return Err(());
            }
            if !self.fill() {
                // one last try with eof = true (a bare number at the very end)
                return gpufeed_json::value_len(&self.data[self.pos..self.end], true).ok_or(());
            }
        }
    }

    /// A JSON string at `pos` (which must be '"'): its raw contents; advances past it.
    fn string(&mut self) -> Result<Vec<u8>, ()> {
        let n = self.value_len()?;
        let s = self.data[self.pos + 1..self.pos + n - 1].to_vec();
        self.pos += n;
        Ok(s)
    }
}

/// Reads a whole trace from `r` into `sink`. Errors only when nothing could be read as a trace.
pub fn read_trace<R: Read>(r: R, sink: &mut dyn EventSink) -> Result<ScanStats, ReadError> {
    read_trace_limited(r, sink, MAX_VALUE_BYTES)
}

/// [`read_trace`] with another cap on one value's size.
pub fn read_trace_limited<R: Read>(
    r: R,
    sink: &mut dyn EventSink,
    max_value: usize,
) -> Result<ScanStats, ReadError> {
    let mut buf = Buf {
        max_value,
        r,
        data: Vec::new(),
        end: 0,
        pos: 0,
        eof: false,
        consumed: 0,
        read_error: None,
    };
    let mut st = ScanStats::default();
    let res = scan_top(&mut buf, sink, &mut st);
    st.bytes = buf.consumed + buf.pos as u64;
    if let Some(e) = buf.read_error.take() {
        st.truncated = true;
        st.warnings.push(format!(
            "input ended early ({e}); analyzed the {} events read before that",
            st.events
        ));
    }
    match res {
        Ok(()) => {}
        Err(Stop::Blank) if !st.truncated => return Err(ReadError::Empty),
        Err(Stop::Eof | Stop::Blank) => {
            if st.bytes == 0 && !st.truncated {
                return Err(ReadError::Empty);
            }
            if !st.truncated {
                st.truncated = true;
                st.warnings.push(format!(
                    "the trace ends in the middle (after {} bytes); analyzed the {} events read before that",
                    st.bytes, st.events
                ));
            }
        }
        Err(Stop::Syntax(msg)) => {
            if st.events == 0 && !st.found_events_key {
                return Err(ReadError::NotATrace(msg));
            }
            st.truncated = true;
            st.warnings.push(format!(
                "malformed JSON at byte {} ({msg}); analyzed the {} events read before that",
                st.bytes, st.events
            ));
        }
    }
    if st.bad_events > 0 {
        st.warnings.push(format!(
            "{} events could not be decoded and were skipped",
            st.bad_events
        ));
    }
    if st.impossible_times > 0 {
        st.warnings.push(format!(
            "{} events with a negative or non-numeric time or duration: those times were ignored",
            st.impossible_times
        ));
    }
    if let Some((a, z)) = st.span_us.filter(|(a, z)| z - a > MAX_PLAUSIBLE_SPAN_US) {
        st.warnings.push(format!(
            "the events span {:.0} days: their timestamps are probably wrong, and so are the step times",
            (z - a) / 86_400e6
        ));
    }
    if st.long_names > 0 {
        st.warnings.push(format!(
            "{} event names longer than {} KiB were cut to that length",
            st.long_names,
            MAX_NAME_BYTES >> 10
        ));
    }
    if st.oversized > 0 {
        st.warnings.push(format!(
            "{} values larger than {} MiB (no real trace event is) were skipped",
            st.oversized,
            buf.max_value >> 20
        ));
    }
    Ok(st)
}

enum Stop {
    Eof,
    Blank,
    Syntax(String),
}

fn expect<R: Read>(buf: &mut Buf<R>, what: &[u8]) -> Result<u8, Stop> {
    match buf.peek() {
        None => Err(Stop::Eof),
        Some(b) if what.contains(&b) => {
            buf.pos += 1;
            Ok(b)
        }
        Some(b) => Err(Stop::Syntax(format!(
            "expected one of {:?}, found {:?}",
            String::from_utf8_lossy(what),
            b as char
        ))),
    }
}

fn scan_top<R: Read>(
    buf: &mut Buf<R>,
    sink: &mut dyn EventSink,
    st: &mut ScanStats,
) -> Result<(), Stop> {
    match buf.peek() {
        // nothing but blank space (and a byte-order mark): an empty input, however long
        None => Err(Stop::Blank),
        Some(b'[') => {
            st.found_events_key = true;
            scan_events(buf, sink, st)
        }
        Some(b'{') => {
            buf.pos += 1;
            loop {
                if buf.peek() == Some(b'}') {
                    buf.pos += 1;
                    return Ok(());
                }
                if buf.peek() != Some(b'"') {
                    return match buf.peek() {
                        None => Err(Stop::Eof),
                        Some(c) => Err(Stop::Syntax(format!(
                            "expected a key, found {:?}",
                            c as char
                        ))),
                    };
                }
                let key = buf.string().map_err(|_| Stop::Eof)?;
                expect(buf, b":")?;
                if key == b"traceEvents" && buf.peek() == Some(b'[') {
                    st.found_events_key = true;
                    scan_events(buf, sink, st)?;
                } else {
                    if buf.peek().is_none() {
                        return Err(Stop::Eof);
                    }
                    let n = match buf.value_len() {
                        Ok(n) => n,
                        Err(()) if buf.too_big() => {
                            st.oversized += 1;
                            buf.skip_value().map_err(|_| Stop::Eof)?;
                            if expect(buf, b",}")? == b'}' {
                                return Ok(());
                            }
                            continue;
                        }
                        Err(()) => return Err(Stop::Eof),
                    };
                    let span = &buf.data[buf.pos..buf.pos + n];
                    sink.top_level_raw(&key, span);
                    if matches!(
                        key.as_slice(),
                        b"baseTimeNanoseconds"
                            | b"deviceProperties"
                            | b"distributedInfo"
                            | b"displayTimeUnit"
                    ) {
                        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(span) {
                            sink.top_level(&String::from_utf8_lossy(&key), v);
                        }
                    }
                    buf.pos += n;
                }
                if expect(buf, b",}")? == b'}' {
                    return Ok(());
                }
            }
        }
        Some(c) => Err(Stop::Syntax(format!(
            "a trace starts with '{{' or '[', found {:?}",
            c as char
        ))),
    }
}

fn scan_events<R: Read>(
    buf: &mut Buf<R>,
    sink: &mut dyn EventSink,
    st: &mut ScanStats,
) -> Result<(), Stop> {
    expect(buf, b"[")?;
    if buf.peek() == Some(b']') {
        buf.pos += 1;
        return Ok(());
    }
    loop {
        let bad_before = st.bad_events;
        let Some(first) = buf.peek() else {
            return Err(Stop::Eof);
        };
        if first == b'{' {
            // the fast path, else serde_json parsing straight from the buffer (it says where the
            // event ended); an event cut by the end of the buffer is parsed again after a refill
            let avail = &buf.data[buf.pos..buf.end];
            if let Some((mut ev, n)) = super::fast::event(avail) {
                check_event(&mut ev, st);
                st.events += 1;
                sink.raw_event(&ev, &avail[..n]);
                buf.pos += n;
            } else {
                let mut it = serde_json::Deserializer::from_slice(avail).into_iter::<EventDe>();
                match it.next() {
                    Some(Ok(mut ev)) => {
                        let n = it.byte_offset();
                        check_event(&mut ev.0, st);
                        st.events += 1;
                        sink.raw_event(&ev.0, &avail[..n]);
                        buf.pos += n;
                    }
                    Some(Err(e)) if e.is_eof() => {
                        if buf.too_big() {
                            st.oversized += 1;
                            buf.skip_value().map_err(|_| Stop::Eof)?;
                        } else if !buf.fill() {
                            return Err(Stop::Eof);
                        } else {
                            continue;
                        }
                    }
                    _ => {
                        // valid JSON but not an event: skip it; broken JSON (an unescaped quote in
                        // old Kineto output): resynchronise on the next line that starts an object
                        st.bad_events += 1;
                        match gpufeed_json::value_len(&buf.data[buf.pos..buf.end], false) {
                            Some(n) => buf.pos += n,
                            None => {
                                if resync(buf)? {
                                    return Ok(());
                                }
                                continue;
                            }
                        }
                    }
                }
            }
        } else {
            match buf.value_len() {
                Ok(n) => buf.pos += n,
                Err(()) if buf.too_big() => {
                    st.oversized += 1;
                    buf.skip_value().map_err(|_| Stop::Eof)?;
                }
                Err(()) => return Err(Stop::Eof),
            }
            st.bad_events += 1;
        }
        match expect(buf, b",]") {
            Ok(b']') => return Ok(()),
            Ok(_) => {}
            Err(e @ (Stop::Eof | Stop::Blank)) => return Err(e),
            Err(Stop::Syntax(_)) => {
                // one broken element counts once, even when its end is broken too
                if st.bad_events == bad_before {
                    st.bad_events += 1;
                }
                if resync(buf)? {
                    return Ok(());
                }
            }
        }
    }
}

/// Skips to the next line that starts with `{` (Kineto writes one event per line, or starts each
/// on its own line) or `]` (the end of the events: consumed, returns true).
fn resync<R: Read>(buf: &mut Buf<R>) -> Result<bool, Stop> {
    loop {
        match memchr::memchr(b'\n', &buf.data[buf.pos..buf.end]) {
            Some(k) => {
                buf.pos += k + 1;
                match buf.peek() {
                    None => return Err(Stop::Eof),
                    Some(b'{') => return Ok(false),
                    Some(b']') => {
                        buf.pos += 1;
                        return Ok(true);
                    }
                    Some(_) => {}
                }
            }
            None => {
                buf.pos = buf.end;
                if !buf.fill() {
                    return Err(Stop::Eof);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Event;

    #[derive(Default)]
    struct Collect {
        names: Vec<String>,
        tops: Vec<String>,
    }
    impl EventSink for Collect {
        fn event(&mut self, ev: &Event<'_>) {
            self.names
                .push(String::from_utf8_lossy(&ev.name).into_owned());
        }
        fn top_level(&mut self, key: &str, _v: serde_json::Value) {
            self.tops.push(key.to_string());
        }
    }

    fn read(s: &[u8]) -> (Collect, Result<ScanStats, ReadError>) {
        let mut c = Collect::default();
        let r = read_trace(s, &mut c);
        (c, r)
    }

    #[test]
    fn reads_events_and_top_level() {
        let (c, r) = read(br#"{"schemaVersion":1,"traceEvents":[{"ph":"X","name":"a\"b","ts":1.5,"dur":2,"pid":"7","tid":"stream 7","args":{"External id":18446744073709551616,"x":[1,{"y":"}"}]}},{"name":"c"}],"baseTimeNanoseconds":17}"#);
        let st = r.unwrap();
        assert!(!st.truncated);
        assert_eq!(c.names, vec!["a\"b", "c"]);
        assert_eq!(c.tops, vec!["baseTimeNanoseconds"]);
    }

    /// A reader that gives at most 64 KiB per read, as a pipe does.
    struct PipeLike<R>(R);
    impl<R: Read> Read for PipeLike<R> {
        fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
            let n = b.len().min(64 << 10);
            self.0.read(&mut b[..n])
        }
    }

    #[test]
    fn a_pipe_reads_like_a_file() {
        // One event with a 3 MB nested args value between two small ones.
        let mut t = br#"{"traceEvents":[{"ph":"X","name":"a","ts":1,"dur":2},{"ph":"X","name":"big","ts":2,"dur":1,"args":{"x":["#.to_vec();
        for i in 0..300_000 {
            t.extend_from_slice(format!("{i},").as_bytes());
        }
        t.extend_from_slice(br#"0]}},{"ph":"X","name":"b","ts":3,"dur":1}]}"#);
        let (file, rf) = read(&t);
        let mut pipe = Collect::default();
        let rp = read_trace(PipeLike(&t[..]), &mut pipe);
        assert_eq!(file.names, vec!["a", "big", "b"]);
        assert_eq!(pipe.names, file.names);
        assert_eq!(rp.unwrap().bytes, rf.unwrap().bytes);
    }

    #[test]
    fn impossible_times_are_dropped_and_an_absurd_span_said() {
        let text = br#"{"traceEvents":[{"ph":"X","name":"a","ts":0,"dur":-5},{"ph":"X","name":"b","ts":1e18,"dur":1}]}"#;
        let mut c = Collect::default();
        let st = read_trace(&text[..], &mut c).unwrap();
        assert_eq!(st.impossible_times, 1);
        let w = st.warnings.join(" | ");
        assert!(w.contains("1 events with a negative"), "{w}");
        assert!(w.contains("timestamps are probably wrong"), "{w}");
        let ok = br#"{"traceEvents":[{"ph":"X","name":"a","ts":1764676800000000,"dur":5}]}"#;
        assert!(read_trace(&ok[..], &mut c).unwrap().warnings.is_empty());
    }

    #[test]
    fn long_names_are_cut_with_a_warning() {
        let long = "k".repeat(MAX_NAME_BYTES * 3);
        let text = format!(
            r#"{{"traceEvents":[{{"ph":"X","name":"{long}","ts":1,"dur":2,"pid":1,"tid":1}},{{"ph":"X","name":"{long}\u0041","cat":"{long}","ts":1,"dur":2,"pid":1,"tid":1}},{{"ph":"X","name":"short","ts":1,"dur":2,"pid":1,"tid":1}}]}}"#
        );
        let mut c = Collect::default();
        let st = read_trace(text.as_bytes(), &mut c).unwrap();
        assert_eq!(st.events, 3);
        assert_eq!(st.long_names, 2);
        assert!(
            c.names.iter().all(|n| n.len() <= MAX_NAME_BYTES),
            "{:?}",
            c.names.iter().map(|n| n.len()).collect::<Vec<_>>()
        );
        assert_eq!(c.names[2], "short");
        assert!(st
            .warnings
            .iter()
            .any(|w| w.contains("2 event names longer than 8 KiB")));
    }

    #[test]
    fn an_oversized_value_is_skipped_without_being_held() {
        // 5 MiB inside one string against a 1 MiB cap (the real cap is 64 MiB).
        let head = &br#"{"traceEvents":[{"ph":"X","name":"a","ts":1,"dur":2},{"ph":"X","name":"big","args":{"s":""#[..];
        let big = std::io::repeat(b'a').take(5 << 20);
        let tail = &br#""}},{"ph":"X","name":"b","ts":3,"dur":1}],"deviceProperties":"#[..];
        let big2 = std::io::repeat(b'[').take(3 << 20);
        let mut c = Collect::default();
        let r = PipeLike(head.chain(big).chain(tail).chain(big2));
        let st = read_trace_limited(r, &mut c, 1 << 20).unwrap();
        assert_eq!(c.names, vec!["a", "b"]);
        assert_eq!(st.oversized, 2, "{:?}", st.warnings);
        assert!(st.truncated);
        assert!(st.warnings.iter().any(|w| w.contains("larger than 1 MiB")));
    }

    #[test]
    fn truncated_and_invalid_utf8() {
        let (c, r) = read(b"{\"traceEvents\":[{\"name\":\"ok\xff\"},{\"name\":\"cut");
        let st = r.unwrap();
        assert!(st.truncated);
        assert_eq!(c.names, vec!["ok\u{fffd}"]);
        let (_, r) = read(b"");
        assert!(matches!(r, Err(ReadError::Empty)));
        let (_, r) = read(b"hello");
        assert!(matches!(r, Err(ReadError::NotATrace(_))));
    }

    /// A reader that hands out a few bytes at a time, so events straddle every refill.
    struct Dribble<'a>(&'a [u8], usize);
    impl Read for Dribble<'_> {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            self.1 = self.1 % 7 + 1;
            let n = self.1.min(self.0.len()).min(out.len());
            out[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn events_split_across_reads() {
        let mut doc = String::from("{\"deviceProperties\": [{\"id\": 0}], \"traceEvents\": [");
        for i in 0..500 {
            if i > 0 {
                doc.push(',');
            }
            doc.push_str(&format!(r#"{{"ph":"X","name":"e{i} \"q\"","ts":{i}.5,"dur":12345678,"args":{{"a":[1,{{"b":"]}}"}}]}}}}"#));
        }
        doc.push_str("], \"baseTimeNanoseconds\": 1}");
        let mut c = Collect::default();
        let st = read_trace(Dribble(doc.as_bytes(), 0), &mut c).unwrap();
        assert!(!st.truncated, "{:?}", st.warnings);
        assert_eq!(st.bad_events, 0);
        assert_eq!(c.names.len(), 500);
        assert_eq!(c.names[499], "e499 \"q\"");
        assert_eq!(c.tops, vec!["deviceProperties", "baseTimeNanoseconds"]);
    }

    #[test]
    fn resynchronises_after_unescaped_quotes() {
        let doc = b"{\"traceEvents\": [\n  {\"ph\":\"X\",\"name\":\"a\",\"ts\":1},\n  {\"ph\":\"X\",\"name\":\"b \"bad\" c\",\"ts\":2},\n  {\"ph\":\"X\",\"name\":\"b \"odd c\",\"ts\":2},\n  {\"ph\":\"X\",\"name\":\"d\",\"ts\":3}\n],\n\"baseTimeNanoseconds\": 5}";
        let (c, r) = read(doc);
        let st = r.unwrap();
        assert_eq!(c.names, vec!["a", "d"], "{:?}", st.warnings);
        assert_eq!(st.bad_events, 2);
        assert!(!st.truncated, "{:?}", st.warnings);
        assert_eq!(c.tops, vec!["baseTimeNanoseconds"]);
    }

    #[test]
    fn bare_array_and_bad_event() {
        let (c, r) = read(br#"[{"name":"a"}, 5, {"name":"b","ts":"x"}]"#);
        let st = r.unwrap();
        assert_eq!(st.bad_events, 1);
        assert_eq!(c.names, vec!["a", "b"]);
    }
}
