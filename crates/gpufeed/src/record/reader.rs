//! The one reader of recordings: streams a `.ndjson` or `.ndjson.zst` file once and hands every
//! line to any number of consumers ([`Sink`]s) in that one pass.
//!
//! - Plain or zstd is decided by the first bytes (the zstd magic number), not by the name.
//! - The frequent line types (`gpu`, `host`, `procs`) go through the scanner in [`super::fast`]
//!   with reused buffers; everything else, and any line the scanner gives up on, through serde.
//!   Either way a sink gets the same values.
//! - A last line cut mid-way (a killed recorder), or a zstd frame cut mid-way, is the end of the
//!   recording, not an error. Bad lines in the middle are counted once ([`ReadStats::malformed`]).
//! - Memory is bounded: a line longer than [`MAX_LINE_BYTES`] is skipped (and counted) without
//!   being held whole, and input whose first bytes cannot start a recording is refused at once.

use super::fast;
use super::format::{parse_header, Header, Line, ReadError, ReadStats};
use crate::sample::{GpuSample, HostSample, ProcSample};
use std::io::Read;
use std::path::Path;

/// Longest line read; longer ones are skipped and counted as malformed. The longest real lines
/// (a `procs` line of a few hundred processes, a Python stack) are far below it.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// Latest time a line may carry, in seconds since the recording started (366 days): a recorder
/// writes seconds since its start, so a line outside `0..=MAX_TIME_S` (or not finite, or with a
/// `dt_s` / `span_s` outside the same bounds) is broken or crafted. It is dropped before any
/// consumer sees it, and counted ([`ReadStats::bad_time`]): a `t_s` of 1e308 had made the HTML
/// chart's axis computation spin, and -1e9 printed a duration of 277777 h (issue 27).
pub const MAX_TIME_S: f64 = 366.0 * 86400.0;

/// Longest string kept from a line (a command line, a Python frame's name or file, a status
/// detail); longer ones are cut at a character boundary and counted
/// ([`ReadStats::long_strings`]). Real command lines and frame names are far shorter; 3,000
/// processes with 1 MB command lines had taken diagnose to 5.9 GB (issue 27).
pub const MAX_STRING_BYTES: usize = 4096;

/// The magic number that starts every zstd frame.
pub const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// A consumer of a recording's lines. Every method has an empty default, so a sink implements
/// only what it uses. `gpu`, `host` and `procs` get the three frequent line types; `line` gets
/// every other one (never those three).
pub trait Sink {
    /// The header, before any line.
    fn header(&mut self, _h: &Header) {}
    fn gpu(&mut self, _g: &GpuSample) {}
    fn host(&mut self, _h: &HostSample) {}
    fn procs(&mut self, _t_s: f64, _procs: &[ProcSample]) {}
    /// Any other line type (`proc_start`, `end`, `overrides`, Python lines, unknown types).
    fn line(&mut self, _l: &Line) {}
}

/// The sink that keeps nothing.
impl Sink for () {}

impl<S: Sink + ?Sized> Sink for &mut S {
    fn header(&mut self, h: &Header) {
        (**self).header(h)
    }
    fn gpu(&mut self, g: &GpuSample) {
        (**self).gpu(g)
    }
    fn host(&mut self, h: &HostSample) {
        (**self).host(h)
    }
    fn procs(&mut self, t_s: f64, procs: &[ProcSample]) {
        (**self).procs(t_s, procs)
    }
    fn line(&mut self, l: &Line) {
        (**self).line(l)
    }
}

impl<S: Sink> Sink for Option<S> {
    fn header(&mut self, h: &Header) {
        if let Some(s) = self {
            s.header(h)
        }
    }
    fn gpu(&mut self, g: &GpuSample) {
        if let Some(s) = self {
            s.gpu(g)
        }
    }
    fn host(&mut self, h: &HostSample) {
        if let Some(s) = self {
            s.host(h)
        }
    }
    fn procs(&mut self, t_s: f64, procs: &[ProcSample]) {
        if let Some(s) = self {
            s.procs(t_s, procs)
        }
    }
    fn line(&mut self, l: &Line) {
        if let Some(s) = self {
            s.line(l)
        }
    }
}

macro_rules! tuple_sink {
    ($($n:tt $t:ident),+) => {
        /// Several sinks fed in one pass, in order.
        impl<$($t: Sink),+> Sink for ($($t,)+) {
            fn header(&mut self, h: &Header) {
                $(self.$n.header(h);)+
            }
            fn gpu(&mut self, g: &GpuSample) {
                $(self.$n.gpu(g);)+
            }
            fn host(&mut self, h: &HostSample) {
                $(self.$n.host(h);)+
            }
            fn procs(&mut self, t_s: f64, procs: &[ProcSample]) {
                $(self.$n.procs(t_s, procs);)+
            }
            fn line(&mut self, l: &Line) {
                $(self.$n.line(l);)+
            }
        }
    };
}
tuple_sink!(0 A, 1 B);
tuple_sink!(0 A, 1 B, 2 C);
tuple_sink!(0 A, 1 B, 2 C, 3 D);

/// A sink that collects every line as a [`Line`] (tests, small tools).
#[derive(Debug, Default)]
pub struct Collect(pub Vec<Line>);

impl Sink for Collect {
    fn gpu(&mut self, g: &GpuSample) {
        self.0.push(Line::Gpu(g.clone()))
    }
    fn host(&mut self, h: &HostSample) {
        self.0.push(Line::Host(h.clone()))
    }
    fn procs(&mut self, t_s: f64, procs: &[ProcSample]) {
        self.0.push(Line::Procs {
            t_s,
            procs: procs.to_vec(),
        })
    }
    fn line(&mut self, l: &Line) {
        self.0.push(l.clone())
    }
}

/// Reads the recording at `path` into `sink`.
pub fn read_path(path: &Path, sink: impl Sink) -> Result<(Header, ReadStats), ReadError> {
    let f = std::fs::File::open(path).map_err(|source| ReadError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    if f.metadata().is_ok_and(|m| m.is_dir()) {
        return Err(ReadError::Open {
            path: path.to_path_buf(),
            source: std::io::Error::other("it is a directory"),
        });
    }
    read_from(path, f, sink)
}

/// True when `head` (the first bytes of a file) starts a zstd frame.
pub fn is_zstd(head: &[u8]) -> bool {
    head.starts_with(&ZSTD_MAGIC)
}

/// As [`read_path`], from any reader, plain or zstd (`path` is only used in messages).
///
/// With more than one core the lines are parsed by a pipeline (`record::pipeline`): one
/// thread reads (and decompresses) and cuts batches of whole lines, worker threads parse them,
/// and the sinks still get every line in order on the calling thread. Sinks see the same
/// values, in the same order, as on one core.
pub fn read_from(
    path: &Path,
    r: impl Read + Send,
    sink: impl Sink,
) -> Result<(Header, ReadStats), ReadError> {
    read_with(path, r, sink, parse_workers(), super::pipeline::BATCH_BYTES)
}

/// Parser threads for the pipeline: one per core the process may run on, none (read on the
/// calling thread) on one core.
fn parse_workers() -> usize {
    match std::thread::available_parallelism().map_or(1, |n| n.get()) {
        1 => 0,
        n => n.min(8),
    }
}

/// As [`read_from`], with `workers` parser threads (0: all on the calling thread) that get
/// batches of about `batch_bytes`.
pub(super) fn read_with(
    path: &Path,
    r: impl Read + Send,
    sink: impl Sink,
    workers: usize,
    batch_bytes: usize,
) -> Result<(Header, ReadStats), ReadError> {
    let io = |source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let (head, r) = sniff(r).map_err(io)?;
    if is_zstd(&head) {
        let d = zstd::stream::read::Decoder::new(r).map_err(io)?;
        read_lines(path, Lines::new(d, true), sink, workers, batch_bytes)
    } else {
        read_lines(path, Lines::new(r, false), sink, workers, batch_bytes)
    }
}

/// Reads only the header of the recording at `path` (plain or zstd): a quick check that a file
/// is a recording this gpufeed reads, before anything is written.
pub fn read_header(path: &Path) -> Result<Header, ReadError> {
    let f = std::fs::File::open(path).map_err(|source| ReadError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    let io = |source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let (head, r) = sniff(f).map_err(io)?;
    if is_zstd(&head) {
        let d = zstd::stream::read::Decoder::new(r).map_err(io)?;
        header_of(path, &mut Lines::new(d, true))
    } else {
        header_of(path, &mut Lines::new(r, false))
    }
}

/// The first bytes of `r` (up to 4, fewer only at its end), and a reader that gives them again.
fn sniff<R: Read>(mut r: R) -> std::io::Result<(Vec<u8>, impl Read)> {
    let mut head = [0u8; 4];
    let mut n = 0;
    while n < head.len() {
        match r.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let reader = std::io::Cursor::new(head).take(n as u64).chain(r);
    Ok((head[..n].to_vec(), reader))
}

/// The header: the first line that is not blank, which must open a JSON object.
fn header_of<R: Read>(path: &Path, lines: &mut Lines<R>) -> Result<Header, ReadError> {
    let io = |source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let not_rec = |detail: String| ReadError::NotARecording {
        path: path.to_path_buf(),
        detail,
    };
    // A UTF-8 byte-order mark (a recording saved by an editor) is not part of the header.
    while lines.end - lines.start < 3 && lines.fill().map_err(io)? {}
    if lines.buf[lines.start..lines.end].starts_with(b"\xEF\xBB\xBF") {
        lines.start += 3;
    }
    loop {
        if let Some(b) = lines.first_byte().map_err(io)? {
            if b != b'{' {
                while lines.peek().len() < 16 && lines.fill().map_err(io)? {}
                return Err(not_rec(describe_start(lines.peek())));
            }
        }
        match lines.next().map_err(io)? {
            None => {
                return Err(ReadError::Empty {
                    path: path.to_path_buf(),
                })
            }
            Some(Chunk::TooLong) => {
                return Err(not_rec(format!(
                    "its first line is longer than {} MiB",
                    MAX_LINE_BYTES >> 20
                )))
            }
            Some(Chunk::Line(a, z, _)) => {
                let text = trim(&lines.buf[a..z]);
                if !text.is_empty() {
                    return parse_header(path, &String::from_utf8_lossy(text));
                }
            }
        }
    }
}

fn read_lines<R: Read + Send>(
    path: &Path,
    mut lines: Lines<R>,
    mut sink: impl Sink,
    workers: usize,
    batch_bytes: usize,
) -> Result<(Header, ReadStats), ReadError> {
    let header = header_of(path, &mut lines)?;
    sink.header(&header);
    if workers > 0 {
        // An input that is one batch is parsed here: threads would gain nothing on it, and each
        // thread started leaves a malloc arena behind (diagnose --job over 128 small nodes
        // peaked 1.3-1.4x higher than over 4 when each read started threads).
        while lines.end < lines.buf.len()
            && lines.fill().map_err(|source| ReadError::Io {
                path: path.to_path_buf(),
                source,
            })?
        {}
    }
    let one_batch = lines.eof && lines.end - lines.start <= batch_bytes;
    let stats = if workers == 0 || one_batch {
        read_body(path, lines, sink)?
    } else {
        let Lines {
            r,
            buf,
            start,
            end,
            eof,
            lenient,
            cut,
        } = lines;
        let src = super::pipeline::Source {
            r,
            eof,
            cut,
            lenient,
        };
        super::pipeline::run(path, src, &buf[start..end], sink, workers, batch_bytes)?
    };
    Ok((header, stats))
}

/// The lines after the header, on this thread: each is read, parsed and handed to the sinks
/// before the next (the path taken on one core; [`super::pipeline`] otherwise).
fn read_body<R: Read>(
    path: &Path,
    mut lines: Lines<R>,
    mut sink: impl Sink,
) -> Result<ReadStats, ReadError> {
    let io = |source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut tally = Tally::new();
    let mut gpu = GpuSample::default();
    let mut host = HostSample::default();
    let mut procs: Vec<ProcSample> = Vec::new();
    while let Some(chunk) = lines.next().map_err(io)? {
        let (a, z, complete) = match chunk {
            Chunk::Line(a, z, c) => (a, z, c),
            Chunk::TooLong => {
                lines.skip_line().map_err(io)?;
                tally.too_long();
                continue;
            }
        };
        if z - a - usize::from(complete) > MAX_LINE_BYTES {
            // Over the cap but read whole (it fitted in the buffer): skipped all the same.
            tally.too_long();
            continue;
        }
        let text = trim(&lines.buf[a..z]);
        if text.is_empty() {
            continue;
        }
        match parse_line(text, &mut gpu, &mut host, &mut procs) {
            Parsed::Gpu => sink.gpu(&gpu),
            Parsed::Host => sink.host(&host),
            Parsed::Procs(t) => sink.procs(t, &procs),
            Parsed::Other(l) => {
                tally.other(&l);
                sink.line(&l)
            }
            Parsed::Bad => {
                tally.bad(complete);
                continue;
            }
            Parsed::BadTime => tally.bad_time(),
            Parsed::LongStrings(l) => {
                tally.long_strings();
                tally.other(&l);
                sink.line(&l)
            }
        }
        tally.ok();
    }
    Ok(tally.finish(lines.cut))
}

/// What [`parse_line`] made of a line.
#[derive(Debug)]
pub(super) enum Parsed {
    /// In its `gpu` buffer.
    Gpu,
    /// In its `host` buffer.
    Host,
    /// At this time, the samples in its `procs` buffer.
    Procs(f64),
    /// Any other line type (boxed: rare, and far larger than the others).
    Other(Box<Line>),
    /// Not valid JSON of a known shape.
    Bad,
    /// Valid, but a time in it is outside [`MAX_TIME_S`]: dropped and counted.
    BadTime,
    /// Valid, with a string cut to [`MAX_STRING_BYTES`]: kept (cut) and counted.
    LongStrings(Box<Line>),
}

/// Parses one trimmed, non-blank line: the frequent types by the scanner in [`super::fast`]
/// (into the buffers given, reused), everything else and whatever it gives up on by serde. The one parser both
/// the single-thread path and the pipeline's workers use, so sinks get the same values. A line
/// whose times are outside [`MAX_TIME_S`] is [`Parsed::BadTime`].
pub(super) fn parse_line(
    text: &[u8],
    gpu: &mut GpuSample,
    host: &mut HostSample,
    procs: &mut Vec<ProcSample>,
) -> Parsed {
    let mut p = parse_shape(text, gpu, host, procs);
    if let Parsed::Other(l) = &mut p {
        if !cap_strings(l) {
            return Parsed::LongStrings(std::mem::replace(l, Box::new(Line::Unknown)));
        }
    }
    let ok = match &p {
        Parsed::Gpu => time_ok(gpu.t_s),
        Parsed::Host => time_ok(host.t_s),
        Parsed::Procs(t) => time_ok(*t),
        Parsed::Other(l) => times_ok(l),
        Parsed::Bad | Parsed::BadTime | Parsed::LongStrings(_) => true,
    };
    if ok {
        p
    } else {
        Parsed::BadTime
    }
}

/// Cuts each string of `l` to [`MAX_STRING_BYTES`]; false when one was cut.
fn cap_strings(l: &mut Line) -> bool {
    let mut all = true;
    let mut cap = |s: &mut String| {
        if s.len() > MAX_STRING_BYTES {
            let mut at = MAX_STRING_BYTES;
            while !s.is_char_boundary(at) {
                at -= 1;
            }
            s.truncate(at);
            s.shrink_to_fit();
            all = false;
        }
    };
    match l {
        Line::ProcStart(p) => {
            p.cmd.iter_mut().chain(p.comm.iter_mut()).for_each(&mut cap);
        }
        Line::PyFrame(f) => {
            cap(&mut f.name);
            cap(&mut f.file);
            f.src.iter_mut().for_each(&mut cap);
        }
        Line::PyStatus(p) => p.detail.iter_mut().for_each(&mut cap),
        Line::End(e) => e.reason.iter_mut().for_each(&mut cap),
        _ => {}
    }
    all
}

/// Within `0..=MAX_TIME_S`.
fn time_ok(t: f64) -> bool {
    (0.0..=MAX_TIME_S).contains(&t)
}

/// Every time a line other than the frequent three carries is within bounds.
fn times_ok(l: &Line) -> bool {
    match l {
        Line::ProcStart(p) => time_ok(p.t_s),
        Line::Procs { t_s, .. } | Line::ProcExit { t_s, .. } => time_ok(*t_s),
        Line::End(e) => time_ok(e.t_s),
        Line::Overrides(o) => time_ok(o.t_s),
        Line::PyStatus(p) => time_ok(p.t_s),
        Line::PySamples(p) => time_ok(p.t_s) && time_ok(p.dt_s),
        Line::Steps(s) => time_ok(s.t_s) && time_ok(s.dt_s) && time_ok(s.span_s),
        Line::Gpu(g) => time_ok(g.t_s),
        Line::Host(h) => time_ok(h.t_s),
        Line::PyFrame(_) | Line::PyStack(_) | Line::Unknown => true,
    }
}

fn parse_shape(
    text: &[u8],
    gpu: &mut GpuSample,
    host: &mut HostSample,
    procs: &mut Vec<ProcSample>,
) -> Parsed {
    if text.starts_with(b"{\"type\":\"gpu\",") {
        if fast::gpu(text, gpu).is_some() {
            return Parsed::Gpu;
        }
    } else if text.starts_with(b"{\"type\":\"host\",") {
        if fast::host(text, host).is_some() {
            return Parsed::Host;
        }
    } else if text.starts_with(b"{\"type\":\"procs\",") {
        if let Some(t) = fast::procs(text, procs) {
            return Parsed::Procs(t);
        }
    }
    match serde_json::from_slice::<Line>(text) {
        Ok(Line::Gpu(g)) => {
            *gpu = g;
            Parsed::Gpu
        }
        Ok(Line::Host(h)) => {
            *host = h;
            Parsed::Host
        }
        Ok(Line::Procs { t_s, procs: p }) => {
            *procs = p;
            Parsed::Procs(t_s)
        }
        Ok(other) => Parsed::Other(Box::new(other)),
        Err(_) => Parsed::Bad,
    }
}

/// The counts of [`ReadStats`], kept the same way on either path: a bad line is counted once
/// something valid follows it; a bad line with nothing valid after it is the cut end.
#[derive(Debug)]
pub(super) struct Tally {
    stats: ReadStats,
    pending_bad: u64,
}

impl Tally {
    pub(super) fn new() -> Self {
        Tally {
            stats: ReadStats {
                unfinished: true,
                ..Default::default()
            },
            pending_bad: 0,
        }
    }

    /// A valid line.
    pub(super) fn ok(&mut self) {
        self.stats.lines += 1;
        self.stats.malformed += self.pending_bad;
        self.pending_bad = 0;
    }

    /// A valid line of another type than the frequent three (before [`Tally::ok`]).
    pub(super) fn other(&mut self, l: &Line) {
        if matches!(l, Line::End(_)) {
            self.stats.unfinished = false;
        }
    }

    /// A valid line dropped for a time out of bounds (before [`Tally::ok`]).
    pub(super) fn bad_time(&mut self) {
        self.stats.bad_time += 1;
    }

    /// A valid line with a string cut to [`MAX_STRING_BYTES`] (before [`Tally::ok`]).
    pub(super) fn long_strings(&mut self) {
        self.stats.long_strings += 1;
    }

    /// A line that did not parse; `complete`: it ended with a newline.
    pub(super) fn bad(&mut self, complete: bool) {
        self.stats.lines += 1;
        if complete {
            self.pending_bad += 1;
        } else {
            self.stats.truncated = true;
        }
    }

    /// A line over [`MAX_LINE_BYTES`], skipped.
    pub(super) fn too_long(&mut self) {
        self.stats.lines += 1;
        self.stats.malformed += self.pending_bad + 1;
        self.pending_bad = 0;
    }

    /// The counts once the input ended (`cut`: it ended in an error taken as its end).
    pub(super) fn finish(mut self, cut: bool) -> ReadStats {
        if self.pending_bad > 0 {
            self.stats.truncated = true;
            self.stats.malformed += self.pending_bad - 1;
        }
        if cut {
            self.stats.truncated = true;
        }
        self.stats
    }
}

/// What the first bytes of something that is not a recording look like, for the message.
fn describe_start(head: &[u8]) -> String {
    let head = &head[..head.len().min(16)];
    let head = match head.iter().position(|b| *b == b'\n' || *b == b'\r') {
        Some(p) if p > 0 => &head[..p],
        _ => head,
    };
    if head.iter().all(|b| b.is_ascii_graphic() || *b == b' ') && !head.is_empty() {
        format!(
            "it starts with {:?}, not a JSON header",
            String::from_utf8_lossy(head)
        )
    } else {
        let hex: Vec<String> = head.iter().take(8).map(|b| format!("{b:02x}")).collect();
        format!(
            "it starts with the bytes {}: binary data, not NDJSON or zstd",
            hex.join(" ")
        )
    }
}

enum Chunk {
    /// A line as a range of the buffer (newline included) and whether it ended with a newline.
    Line(usize, usize, bool),
    /// A line longer than [`MAX_LINE_BYTES`], not yet skipped.
    TooLong,
}

/// Lines read in place from one buffer (no copy per line), of bounded size.
pub(super) struct Lines<R> {
    r: R,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    eof: bool,
    /// Errors end the input instead of failing the read (a zstd stream cut mid-frame).
    lenient: bool,
    /// The input ended in an error taken as its end.
    cut: bool,
}

impl<R: Read> Lines<R> {
    fn new(r: R, lenient: bool) -> Self {
        Lines {
            r,
            buf: vec![0; 2 * MAX_LINE_BYTES],
            start: 0,
            end: 0,
            eof: false,
            lenient,
            cut: false,
        }
    }

    /// Reads more into the free end of the buffer; false at the end of the input.
    fn fill(&mut self) -> std::io::Result<bool> {
        if self.eof {
            return Ok(false);
        }
        if self.end == self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        loop {
            match self.r.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(false);
                }
                Ok(n) => {
                    self.end += n;
                    return Ok(true);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) if self.lenient => {
                    self.eof = true;
                    self.cut = true;
                    return Ok(false);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The first byte that is not white space, without consuming it (`None` at the end).
    fn first_byte(&mut self) -> std::io::Result<Option<u8>> {
        loop {
            if let Some(b) = self.buf[self.start..self.end]
                .iter()
                .find(|b| !b.is_ascii_whitespace())
            {
                return Ok(Some(*b));
            }
            // Only white space so far: it can be dropped.
            self.start = self.end;
            if !self.fill()? {
                return Ok(None);
            }
        }
    }

    /// The unread bytes in the buffer, from the first that is not white space.
    fn peek(&self) -> &[u8] {
        let b = &self.buf[self.start..self.end];
        let at = b
            .iter()
            .position(|c| !c.is_ascii_whitespace())
            .unwrap_or(b.len());
        &b[at..]
    }

    fn next(&mut self) -> std::io::Result<Option<Chunk>> {
        let mut searched = 0;
        loop {
            let avail = &self.buf[self.start + searched..self.end];
            if let Some(p) = memchr::memchr(b'\n', avail) {
                let a = self.start;
                self.start += searched + p + 1;
                return Ok(Some(Chunk::Line(a, self.start, true)));
            }
            searched = self.end - self.start;
            if searched > MAX_LINE_BYTES {
                // The caller skips it ([`Lines::skip_line`]) or gives up.
                return Ok(Some(Chunk::TooLong));
            }
            if !self.fill()? {
                if self.start < self.end {
                    let a = self.start;
                    self.start = self.end;
                    return Ok(Some(Chunk::Line(a, self.end, false)));
                }
                return Ok(None);
            }
        }
    }

    /// Drops bytes up to and including the next newline (or the end of the input).
    fn skip_line(&mut self) -> std::io::Result<()> {
        loop {
            if let Some(p) = memchr::memchr(b'\n', &self.buf[self.start..self.end]) {
                self.start += p + 1;
                return Ok(());
            }
            self.start = 0;
            self.end = 0;
            if !self.fill()? {
                return Ok(());
            }
        }
    }
}

pub(super) fn trim(b: &[u8]) -> &[u8] {
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
    use crate::record::format::End;
    use crate::record::writer::{Compression, RecordingWriter};
    use crate::sample::HostInfo;

    fn header() -> Header {
        Header {
            schema_version: crate::record::format::SCHEMA_VERSION,
            gpufeed_version: None,
            start_time: "2026-12-03T00:00:00Z".into(),
            start_unix_us: 0,
            interval_s: 0.1,
            host: HostInfo::default(),
            driver: None,
            gpus: vec![],
            gpu_error: None,
            command: None,
            pid: None,
            py_rate_hz: None,
        }
    }

    fn lines(n: usize) -> Vec<Line> {
        let mut v: Vec<Line> = (0..n)
            .map(|i| {
                Line::Gpu(GpuSample {
                    index: (i % 2) as u32,
                    t_s: i as f64 * 0.125,
                    util_samples: Some(vec![[i as f64 * 0.125, (i % 100) as f64]]),
                    ..Default::default()
                })
            })
            .collect();
        v.push(Line::End(End {
            t_s: n as f64,
            ..Default::default()
        }));
        v
    }

    /// A recording written by the writer, flushed every `per_flush` lines.
    fn written(c: Compression, ls: &[Line], per_flush: usize) -> Vec<u8> {
        let mut w = RecordingWriter::new(Vec::new(), c).unwrap();
        w.header(&header());
        w.flush().unwrap();
        for (i, l) in ls.iter().enumerate() {
            w.line(&mut l.clone()).unwrap();
            if i % per_flush == per_flush - 1 {
                w.flush().unwrap();
            }
        }
        w.flush().unwrap();
        w.get_ref().clone()
    }

    fn read(b: &[u8]) -> Result<(ReadStats, Vec<Line>), ReadError> {
        let mut got = Collect::default();
        let (_, st) = read_from(Path::new("t"), b, &mut got)?;
        Ok((st, got.0))
    }

    #[test]
    fn plain_and_zstd_read_the_same() {
        let ls = lines(500);
        let plain = written(Compression::None, &ls, 50);
        let zst = written(Compression::Zstd, &ls, 50);
        assert!(is_zstd(&zst) && !is_zstd(&plain));
        assert!(
            zst.len() * 4 < plain.len(),
            "{} vs {}",
            zst.len(),
            plain.len()
        );
        let (st, got) = read(&plain).unwrap();
        assert_eq!(got, ls);
        assert_eq!(read(&zst).unwrap(), (st, got));
        // Concatenated frames: what `zstd -d` reads too.
        assert_eq!(zstd::stream::decode_all(&zst[..]).unwrap(), plain);
    }

    #[test]
    fn a_zstd_recording_cut_anywhere_keeps_its_complete_frames() {
        let ls = lines(300);
        let zst = written(Compression::Zstd, &ls, 100);
        for cut in [zst.len() - 1, zst.len() - 7, zst.len() / 2, zst.len() / 3] {
            let (st, got) = read(&zst[..cut]).unwrap();
            assert!(st.truncated, "cut at {cut}: {st:?}");
            assert_eq!(&got[..], &ls[..got.len()], "a prefix");
            assert_eq!(st.malformed, 0);
        }
        // The header's frame, then the first 100 lines' frame: cut inside the third frame.
        let first_two = written(Compression::Zstd, &ls[..100], 100).len();
        let (_, got) = read(&zst[..first_two + 5]).unwrap();
        assert_eq!(got.len(), 100);
    }

    #[test]
    fn an_overlong_line_is_skipped_counted_and_never_held() {
        let mut b = written(Compression::None, &lines(2)[..1], 1);
        b.push(b'{');
        b.extend(std::iter::repeat_n(b'x', 3 * MAX_LINE_BYTES));
        b.push(b'\n');
        b.extend(
            written(Compression::None, &lines(0), 1)
                .split(|c| *c == b'\n')
                .nth(1)
                .unwrap(),
        );
        b.push(b'\n');
        let (st, got) = read(&b).unwrap();
        assert_eq!(got.len(), 2, "the line before and the end after");
        assert_eq!(st.malformed, 1);
        assert!(!st.truncated && !st.unfinished);
    }

    #[test]
    fn what_is_not_a_recording_is_refused_at_its_first_bytes() {
        // /dev/zero: an endless stream of zero bytes.
        let e = read_from(Path::new("z"), std::io::repeat(0), ()).unwrap_err();
        assert!(matches!(e, ReadError::NotARecording { .. }), "{e}");
        assert!(e.to_string().contains("binary data"), "{e}");
        // An endless first line: refused after the cap, not held whole.
        let e = read_from(
            Path::new("b"),
            std::io::Cursor::new(b"{".to_vec()).chain(std::io::repeat(b'a')),
            (),
        )
        .unwrap_err();
        assert!(e.to_string().contains("longer than 1 MiB"), "{e}");
        let e = read(b"hello world\n").unwrap_err();
        assert!(e.to_string().contains("\"hello world\""), "{e}");
        assert!(matches!(read(b"  \n\n"), Err(ReadError::Empty { .. })));
        assert!(matches!(read(b""), Err(ReadError::Empty { .. })));
    }

    /// Two consumers in one pass see the same lines as each alone.
    #[test]
    fn several_sinks_in_one_pass() {
        let ls = lines(40);
        let b = written(Compression::Zstd, &ls, 7);
        let (mut a, mut c) = (Collect::default(), Collect::default());
        read_from(Path::new("t"), &b[..], (&mut a, &mut c)).unwrap();
        assert_eq!(a.0, ls);
        assert_eq!(c.0, ls);
    }
}
