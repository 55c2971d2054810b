//! Reading the GPU telemetry other tools wrote: `nvidia-smi --query-gpu --format=csv`
//! ([`smi_csv`], with [`smi_layout`] telling GPUs apart in a log without an index column),
//! `nvidia-smi dmon` / `dcgmi dmon` ([`dcgmi`]), and through one vocabulary of names
//! ([`vocab`]) into one table of readings ([`table`]): other tools' CSVs ([`csv_table`]: DCGM,
//! W&B and MLflow exports, Grafana, rocm-smi, amd-smi), W&B events ([`wandb`]), Prometheus
//! scrapes and query results ([`prom`]), MLflow runs ([`mlflow`]) and rocm-smi's own table
//! ([`rocm_table`]). They sample nothing: they turn a file into the sample lines of a
//! recording, through one read loop ([`each_line`]) that holds no line longer than
//! [`MAX_LOG_LINE_BYTES`].

// The docs are for contributors, built with `--document-private-items` (`.ci/run`): a public
// item's doc may link to the private helper it rests on.
#![allow(rustdoc::private_intra_doc_links)]

pub mod csv_table;
pub mod dcgmi;
mod fast;
pub mod formats;
pub mod mlflow;
pub mod monitor_text;
pub mod prom;
pub mod reading;
pub mod rocm_table;
pub mod smi_csv;
pub mod smi_layout;
pub mod smi_q;
pub mod smi_table;
pub mod stats;
pub mod stream;
pub mod table;
pub mod tape;
pub mod tegrastats;
pub mod units;
pub mod vocab;
pub mod wandb;

use std::io::Read;

/// The most GPUs one log is read apart (a node holds a few dozen, a fleet's export a few
/// hundred): rows of GPUs past them are counted in a note, not followed (each followed GPU
/// costs its figures: 40,000 distinct indices took 440 MB).
pub const MAX_GPUS: usize = 1024;

use crate::units::printable;

/// A running mean of the values that were read (`None` for none).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Mean {
    n: u64,
    sum: f64,
}

impl Mean {
    pub(crate) fn add(&mut self, v: Option<f64>) {
        if let Some(v) = v {
            self.n += 1;
            self.sum += v;
        }
    }

    pub(crate) fn mean(&self) -> Option<f64> {
        (self.n > 0).then(|| self.sum / self.n as f64)
    }
}

/// Epoch seconds from a number a file gives as a time, by its size: seconds, else milli-,
/// micro- or nanoseconds. Below 1e12 it is seconds: milliseconds that small would fall in
/// 1973–2001, before any GPU log, so a count of seconds in the year 9999 (2.5e11, a script's
/// bad clock or a placeholder) stays seconds — its differences are right — instead of being
/// read as milliseconds of 1978, a thousand times too short.
pub(crate) fn epoch_seconds(x: f64) -> f64 {
    match x {
        x if x >= 1e17 => x / 1e9,
        x if x >= 1e14 => x / 1e6,
        x if x >= 1e12 => x / 1e3,
        x => x,
    }
}

/// Seconds past the year 2200: no clock of a real run.
pub(crate) const ABSURD_EPOCH_S: f64 = 7.26e9;

/// The note for a log whose times are epoch seconds past the year 2200.
pub(crate) fn absurd_epoch_note(first_s: f64) -> String {
    let year = chrono::DateTime::from_timestamp(first_s as i64, 0)
        .map_or_else(|| "far future".to_string(), |d| d.format("%Y").to_string());
    format!(
        "The log's times are epoch seconds in the year {year}: no real clock (a bad clock or a \
         placeholder). Read as seconds: only the time between readings is used."
    )
}

/// The note for rows of GPUs past [`MAX_GPUS`].
pub(crate) fn gpus_over_cap_note(rows: u64) -> String {
    format!(
        "More than {MAX_GPUS} GPUs named: the {rows} rows of the others were left out (a node \
         holds a few dozen: check the log's GPU column)."
    )
}

/// What a log reader found besides the lines.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogInfo {
    /// Data rows accepted.
    pub rows: u64,
    /// Rows that could not be read (wrong field count, no usable value).
    pub malformed: u64,
    /// The last row was cut (killed logger): dropped.
    pub truncated: bool,
    /// Lines longer than [`MAX_LOG_LINE_BYTES`], skipped (also counted in `malformed`).
    pub overlong: u64,
    /// No timestamp column and no interval given: the time between readings is unknown.
    pub interval_unknown: bool,
    /// How the log was read, for people (runs judged, how many GPUs and how that was found).
    pub notes: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("the log is empty")]
    Empty,
    #[error("{0}")]
    Format(String),
    /// The file could not be read: the I/O error itself is the cause (`source()`).
    #[error("read error: {0}")]
    Io(#[from] std::io::Error),
    /// Rows were read but none held a utilization or memory value (every value N/A): the same
    /// rule and message shape for every log format.
    #[error("no {format} rows with utilization or memory values ({rows} rows, every value N/A or missing): log utilization.gpu and memory.used")]
    NoValues { format: &'static str, rows: u64 },
    /// Only lines too long to be log rows.
    #[error("{0} lines longer than 64 KiB and no log rows: not a GPU log")]
    OnlyOverlong(u64),
}

/// The longest line a GPU log reader holds: a full `--query-gpu` row is under 2 KiB, so anything
/// longer is not a log row. Longer lines are skipped without being held (memory stays bounded on
/// a 200 MB one-line file).
pub(crate) const MAX_LOG_LINE_BYTES: usize = 64 << 10;

/// The lines of a reader, each handed out borrowed from one large buffer (a 10M-row log's lines
/// were each copied into a buffer of their own: a tenth of the read).
pub(crate) struct Lines<R> {
    r: R,
    buf: Vec<u8>,
    /// The unread bytes are `buf[start..end]`.
    start: usize,
    end: usize,
    eof: bool,
    /// A line handed out of `buf` but changed: its NUL bytes dropped, or the part of an
    /// over-long line that is held.
    scratch: Vec<u8>,
    /// `buf[start..nul_free_to]` holds no NUL byte: a line inside it is not searched for one
    /// (each block is searched once as it is read, not each short line again).
    nul_free_to: usize,
}

/// Bytes read from the input at a time.
const LINES_BLOCK: usize = 1 << 20;

impl<R: Read> Lines<R> {
    pub(crate) fn new(r: R) -> Self {
        Lines {
            r,
            buf: vec![0; LINES_BLOCK],
            start: 0,
            end: 0,
            eof: false,
            scratch: Vec::new(),
            nul_free_to: 0,
        }
    }

    /// The bytes read but not handed out yet (whole lines and maybe the start of one), for a
    /// reader that takes whole lines itself ([`Lines::consume`]). They may hold NUL bytes.
    pub(crate) fn unread(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// Marks the first `n` bytes of [`Lines::unread`] as handed out (`n` ends a line).
    pub(crate) fn consume(&mut self, n: usize) {
        debug_assert!(n <= self.end - self.start);
        self.start += n;
    }

    /// The whole lines at the start of the unread bytes that have no NUL byte, are at most
    /// `max` bytes long and that `plain` takes, handed out together: their count, their bytes
    /// and the last of them. For a reader that only counts such lines (a log's common row).
    pub(crate) fn take_plain_lines(
        &mut self,
        max: usize,
        plain: impl Fn(&[u8]) -> bool,
    ) -> (u64, usize, Option<&[u8]>) {
        let from = self.start;
        let window = &self.buf[from..self.nul_free_to.max(from)];
        let (mut lines, mut at, mut last) = (0u64, 0usize, None);
        for nl in memchr::memchr_iter(b'\n', window) {
            let line = &window[at..=nl];
            if line.len() > max || !plain(line) {
                break;
            }
            last = Some((at, nl + 1));
            lines += 1;
            at = nl + 1;
        }
        self.start += at;
        (lines, at, last.map(|(a, z)| &self.buf[from + a..from + z]))
    }

    /// The next line (newline included), at most `max` bytes of it held (the rest of an
    /// over-long line is read and dropped) and its NUL bytes dropped (a hole a truncating
    /// process left in the log is no part of a line); with the bytes it took in the input and
    /// whether it was longer than `max`. `None` at the end of the input.
    pub(crate) fn next_line(&mut self, max: usize) -> std::io::Result<Option<(&[u8], u64, bool)>> {
        loop {
            let unread = &self.buf[self.start..self.end];
            let at = memchr::memchr(b'\n', unread).map(|i| i + 1);
            let at = at.or((self.eof && !unread.is_empty()).then_some(unread.len()));
            if let Some(n) = at {
                let (s, e) = (self.start, self.start + n);
                self.start = e;
                let overlong = n > max;
                let line = &self.buf[s..e.min(s + max)];
                if e <= self.nul_free_to || memchr::memchr(0, line).is_none() {
                    return Ok(Some((&self.buf[s..e.min(s + max)], n as u64, overlong)));
                }
                self.scratch.clear();
                self.scratch
                    .extend(line.iter().copied().filter(|&b| b != 0));
                return Ok(Some((&self.scratch, n as u64, overlong)));
            }
            if self.eof {
                return Ok(None);
            }
            if self.end - self.start > max {
                return self.overlong(max).map(Some);
            }
            self.fill()?;
        }
    }

    /// Reads more of the input after the unread bytes (moved to the front first; the buffer
    /// grows when a line fills it).
    fn fill(&mut self) -> std::io::Result<()> {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            self.buf.resize(self.buf.len() * 2, 0);
        }
        loop {
            match self.r.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(());
                }
                Ok(n) => {
                    self.end += n;
                    // The unread bytes (a line's start, and the block read) are searched for a
                    // NUL once here, not line by line.
                    let unread = &self.buf[self.start..self.end];
                    self.nul_free_to =
                        memchr::memchr(0, unread).map_or(self.end, |i| self.start + i);
                    return Ok(());
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// A line longer than `max` whose end is not read yet: its first `max` bytes are held, the
    /// rest read and dropped up to its newline.
    fn overlong(&mut self, max: usize) -> std::io::Result<(&[u8], u64, bool)> {
        self.scratch.clear();
        let head = &self.buf[self.start..self.start + max];
        self.scratch
            .extend(head.iter().copied().filter(|&b| b != 0));
        let mut taken = (self.end - self.start) as u64;
        (self.start, self.end) = (0, 0);
        loop {
            self.fill()?;
            let read = &self.buf[self.start..self.end];
            if let Some(i) = memchr::memchr(b'\n', read) {
                self.start = i + 1;
                taken += (i + 1) as u64;
                return Ok((&self.scratch, taken, true));
            }
            taken += read.len() as u64;
            (self.start, self.end) = (0, 0);
            if self.eof {
                return Ok((&self.scratch, taken, true));
            }
        }
    }
}

/// The fewest NUL bytes in a row that are a hole in a text log rather than binary data.
const NUL_HOLE: usize = 64;

/// Does this start of a file look like binary data rather than a text log (a NUL byte, or many
/// control characters or invalid UTF-8 sequences)? A sequence cut at the end is not counted.
pub fn looks_binary(head: &[u8]) -> bool {
    // A text log truncated by another process while its writer kept its offset has a hole of
    // NUL bytes; NULs anywhere else are binary data.
    let mut kept = Vec::with_capacity(head.len());
    let mut i = 0;
    while i < head.len() {
        if head[i] != 0 {
            kept.push(head[i]);
            i += 1;
            continue;
        }
        let run = head[i..].iter().take_while(|&&b| b == 0).count();
        if run < NUL_HOLE && i + run < head.len() {
            return true;
        }
        i += run;
    }
    if kept.is_empty() && !head.is_empty() {
        return true;
    }
    let text = String::from_utf8_lossy(&kept);
    let odd = text
        .chars()
        .filter(|&c| c == '\u{FFFD}' || (c.is_control() && !matches!(c, '\n' | '\r' | '\t')))
        .count();
    // A few odd characters are a name in a legacy encoding; random bytes give about half.
    odd > 8 && odd * 10 > text.chars().count()
}

impl LogInfo {
    /// Counts a line longer than [`MAX_LOG_LINE_BYTES`]: skipped, and malformed.
    pub(crate) fn overlong_line(&mut self) {
        self.overlong += 1;
        self.malformed += 1;
    }
}

/// One line of a log as [`each_line`] hands it on.
pub(crate) enum LogLine<'a> {
    /// A line of at most [`MAX_LOG_LINE_BYTES`], its newline included when it has one (a line
    /// without one was cut: the file ends there).
    Text(&'a [u8]),
    /// A line longer than that, its bytes dropped (count it with [`LogInfo::overlong_line`]).
    Overlong,
}

/// Most physical lines one quoted CSV row may span (see [`each_line`]).
const MAX_QUOTED_LINES: usize = 8;

/// A CSV line that leaves a quote open where a field starts (its first, or one after a comma):
/// that field goes on over the line break (`"timestamp","utilization.gpu<LF>[%]"`, a header
/// written by a spreadsheet; `0.08,0,472,"26.11<LF>0"`, a script's value with a newline in it).
fn opens_quote(line: &[u8]) -> bool {
    if line.iter().filter(|&&c| c == b'"').count() % 2 == 0 {
        return false;
    }
    let Some(last) = memchr::memrchr(b'"', line) else {
        return false;
    };
    matches!(line[..last].trim_ascii_end().last(), None | Some(b','))
}

/// The longest line a reader of other tools' wide exports holds (`csv_table`): a W&B or Grafana
/// export of many runs has three columns per run and series, a header of hundreds of KiB, and
/// rows as wide; past this a line is still dropped, so memory stays bounded.
pub(crate) const MAX_WIDE_LINE_BYTES: usize = 16 << 20;

/// The read loop of every log reader: reads `r` line by line, no line held longer than
/// [`MAX_LOG_LINE_BYTES`], and hands each to `f` until the end or an error of `f`. A quoted
/// field holding a line break is handed on as one line, the break read as a space (at most
/// [`MAX_QUOTED_LINES`] lines joined): split, its header was refused as a cut line.
pub(crate) fn each_line(
    r: impl Read,
    f: impl FnMut(LogLine<'_>) -> Result<(), LogError>,
) -> Result<(), LogError> {
    each_line_up_to(r, MAX_LOG_LINE_BYTES, f)
}

/// [`each_line`], no line held longer than `max`.
pub(crate) fn each_line_up_to(
    r: impl Read,
    max: usize,
    mut f: impl FnMut(LogLine<'_>) -> Result<(), LogError>,
) -> Result<(), LogError> {
    each_piece(r, max, false, |p| match p {
        Piece::Line(l) => f(l).map(|()| 0),
        Piece::Rows(_) => Ok(0),
    })
}

/// What [`each_piece`] hands on.
pub(crate) enum Piece<'a> {
    /// A line, as [`each_line`] hands it on (its answer is not looked at).
    Line(LogLine<'a>),
    /// The bytes read and not handed out yet, for a reader that takes whole rows of the common
    /// shape itself: it answers how many bytes it took (whole lines, maybe none); the rest goes
    /// on line by line. They may end inside a line and may hold NUL bytes.
    Rows(&'a [u8]),
}

/// [`each_line_up_to`], and with `rows` the unread bytes offered first as [`Piece::Rows`]
/// whenever no quoted line is being joined (a log's plain rows read straight from the buffer:
/// a tenth of the work of handing each on as a line).
pub(crate) fn each_piece(
    r: impl Read,
    max: usize,
    rows: bool,
    mut f: impl FnMut(Piece<'_>) -> Result<usize, LogError>,
) -> Result<(), LogError> {
    let mut lines = Lines::new(r);
    let mut held: Vec<u8> = Vec::new();
    let mut parts = 0;
    loop {
        if rows && held.is_empty() {
            let n = f(Piece::Rows(lines.unread()))?;
            lines.consume(n);
        }
        let Some((buf, _, overlong)) = lines.next_line(max)? else {
            if !held.is_empty() {
                f(Piece::Line(LogLine::Text(&held)))?;
            }
            return Ok(());
        };
        if overlong {
            if !held.is_empty() {
                f(Piece::Line(LogLine::Text(&held)))?;
                held.clear();
            }
            f(Piece::Line(LogLine::Overlong))?;
            continue;
        }
        if held.is_empty() {
            if opens_quote(buf) && buf.last() == Some(&b'\n') {
                held.extend_from_slice(buf);
                parts = 1;
            } else {
                f(Piece::Line(LogLine::Text(buf)))?;
            }
            continue;
        }
        while matches!(held.last(), Some(b'\n' | b'\r')) {
            held.pop();
        }
        held.push(b' ');
        held.extend_from_slice(buf);
        parts += 1;
        let closed = held.iter().filter(|&&c| c == b'"').count() % 2 == 0;
        if closed || parts >= MAX_QUOTED_LINES || held.len() >= max {
            f(Piece::Line(LogLine::Text(&held)))?;
            held.clear();
        }
    }
}

#[cfg(test)]
mod line_tests {
    use super::*;

    #[test]
    fn a_long_line_is_cut_and_the_next_one_read_whole() {
        for long in [100, LINES_BLOCK * 3 + 5] {
            let mut data = vec![b'x'; long];
            data.extend_from_slice(b"\nshort\nwith\0nul\nlast");
            let mut r = Lines::new(&data[..]);
            let line =
                |r: &mut Lines<&[u8]>| r.next_line(10).unwrap().map(|(l, n, o)| (l.to_vec(), n, o));
            assert_eq!(line(&mut r), Some((vec![b'x'; 10], long as u64 + 1, true)));
            assert_eq!(line(&mut r), Some((b"short\n".to_vec(), 6, false)));
            assert_eq!(line(&mut r), Some((b"withnul\n".to_vec(), 9, false)));
            assert_eq!(line(&mut r), Some((b"last".to_vec(), 4, false)));
            assert_eq!(line(&mut r), None);
        }
    }

    /// A reader that hands out a few bytes at a time, as a pipe does.
    struct Trickle<'a>(&'a [u8], usize);

    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            let n = self.1.min(out.len()).min(self.0.len());
            out[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn lines_read_the_same_whatever_the_reads_hand_out() {
        let mut text = String::new();
        for i in 0..50_000 {
            text.push_str(&format!("{i},{}\n", i % 101));
        }
        text.push_str("no newline at the end");
        let want: Vec<&str> = text.split_inclusive('\n').collect();
        for step in [1, 7, 4096, usize::MAX] {
            let mut r = Lines::new(Trickle(text.as_bytes(), step));
            let mut got = Vec::new();
            let mut taken = 0;
            while let Some((l, n, o)) = r.next_line(64).unwrap() {
                assert!(!o);
                taken += n;
                got.push(String::from_utf8(l.to_vec()).unwrap());
            }
            assert_eq!(got, want, "reads of {step} bytes");
            assert_eq!(taken, text.len() as u64);
        }
    }

    /// The text lines `each_line` hands on for `text`.
    fn text_lines(text: &str) -> Vec<String> {
        let mut got = Vec::new();
        each_line(text.as_bytes(), |l| {
            if let LogLine::Text(t) = l {
                got.push(String::from_utf8_lossy(t).into_owned());
            }
            Ok(())
        })
        .unwrap();
        got
    }

    #[test]
    fn a_quoted_value_goes_on_over_a_line_break() {
        // A script's last value with a newline in it; a stray quote inside a field is none.
        let text = "t,u,p\n0.08,0,\"26.11\n0\"\n0.34,2,\"36.51\n0\"\n1,2,3 \"x\n4,5,6\n";
        assert_eq!(
            text_lines(text),
            [
                "t,u,p\n",
                "0.08,0,\"26.11 0\"\n",
                "0.34,2,\"36.51 0\"\n",
                "1,2,3 \"x\n",
                "4,5,6\n"
            ]
        );
    }

    #[test]
    fn a_quoted_field_goes_on_over_a_line_break() {
        let text = "\"timestamp\",\"utilization.gpu\n[%]\"\n1,2\n\"open\nlast";
        assert_eq!(
            text_lines(text),
            [
                "\"timestamp\",\"utilization.gpu [%]\"\n",
                "1,2\n",
                "\"open last"
            ]
        );
    }

    #[test]
    fn a_read_error_keeps_its_cause() {
        struct Broken;
        impl Read for Broken {
            fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
                Err(std::io::Error::other("disk on fire"))
            }
        }
        let e = each_line(Broken, |_| Ok(())).unwrap_err();
        assert_eq!(e.to_string(), "read error: disk on fire");
        let cause = std::error::Error::source(&e).expect("the I/O error is the source");
        assert_eq!(cause.to_string(), "disk on fire");
    }

    #[test]
    fn names_from_files_print_without_control_characters() {
        assert_eq!(printable("GPU 0"), "GPU 0");
        assert_eq!(
            printable("A100\u{1b}]0;pwned\u{7}\r\nVERDICT"),
            "A100\\x1b]0;pwned\\x07\\x0d\\x0aVERDICT"
        );
    }

    #[test]
    fn binary_is_told_from_text() {
        assert!(looks_binary(&[0u8; 64]));
        assert!(looks_binary(b"abc\0def"));
        // A hole of NULs a truncating process left in a text log is no binary data.
        let mut holed = b"0, 87 %\n".to_vec();
        holed.extend([0u8; 200]);
        holed.extend(b"7 %\n0, 88 %\n");
        assert!(!looks_binary(&holed));
        assert!(!looks_binary(&holed[..100]));
        assert!(looks_binary(b"0, 87 %\n\0\0\0\0\n0, 88 %\n"));
        let random: Vec<u8> = (0u32..4096)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        assert!(looks_binary(&random));
        assert!(!looks_binary(
            "timestamp, name\n2026/12/02 12:00:00, Gerät Ä\n".as_bytes()
        ));
        assert!(!looks_binary(b"0, 87 %, caf\xe9 latin-1 name, 1024 MiB\n"));
    }
}
