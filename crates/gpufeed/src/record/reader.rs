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

use super::parse::{parse_line, trim, Parsed, Tally};
pub(crate) use super::parse::{Sink, MAX_LINE_BYTES, MAX_STRING_BYTES};
use crate::record::format::{parse_header, ReadError, ReadStats};
use crate::sample::event::{Header, Line, ProcsLine};
use crate::sample::{GpuSample, HostSample, ProcSample};
use std::io::Read;
use std::path::Path;

/// The magic number that starts every zstd frame.
pub(crate) const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

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
        self.0.push(Line::Procs(ProcsLine {
            t_s,
            procs: procs.to_vec(),
        }))
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

/// What a zstd frame whose window is over the decoder's limit (128 MiB) is said to be: it was
/// read as the end of the input, and a recording of one such frame was called empty.
const WINDOW_TOO_LARGE: &str = "a zstd frame in it needs a decoding window over 128 MiB (written \
with zstd --long or a large --zstd=wlog): decompress it first (zstd -d --long=31 FILE) and read \
the plain file";

/// True for the zstd error of a frame whose window is over the decoder's limit (zstd's own
/// words, as the zstd crate passes them on).
fn is_window_too_large(e: &std::io::Error) -> bool {
    e.to_string().contains("Frame requires too much memory")
}

/// True when `head` (the first bytes of a file) starts a zstd frame.
pub(crate) fn is_zstd(head: &[u8]) -> bool {
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
pub(crate) fn read_header(path: &Path) -> Result<Header, ReadError> {
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
                // not a cut: the frame is whole but asks for more memory than is allowed
                Err(e) if self.lenient && is_window_too_large(&e) => {
                    return Err(std::io::Error::new(e.kind(), WINDOW_TOO_LARGE));
                }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::writer::{Compression, RecordingWriter};
    use crate::sample::event::End;
    use crate::sample::HostInfo;

    fn header() -> Header {
        Header {
            schema_version: crate::sample::event::SCHEMA_VERSION,
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

    /// A zstd frame with a 2 GiB window (`zstd --long`) was read as the end of the input and
    /// the recording called empty; the real reason is said.
    #[test]
    fn a_zstd_frame_with_a_window_over_the_limit_is_said_to_be_one() {
        let content = b"{\"schema_version\":1}\n";
        // magic, frame header (no single segment), window descriptor 2^(10+21) = 2 GiB, then one
        // raw last block holding the content
        let mut f = ZSTD_MAGIC.to_vec();
        f.extend([0x00, 21 << 3]);
        f.extend(&((content.len() as u32) << 3 | 1).to_le_bytes()[..3]);
        f.extend(content);
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("big-window.ndjson.zst");
        std::fs::write(&p, &f).unwrap();
        let e = read_header(&p).unwrap_err().to_string();
        assert!(
            e.contains("decoding window over 128 MiB") && !e.contains("empty"),
            "{e}"
        );
        let e = read_path(&p, Collect::default()).unwrap_err().to_string();
        assert!(e.contains("decoding window over 128 MiB"), "{e}");
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
