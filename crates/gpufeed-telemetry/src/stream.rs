//! Opening a telemetry input once and reading it as UTF-8 text, whatever it arrived as: a file,
//! stdin (`-`), a pipe or process substitution (`<(zcat gpu.csv.gz)`), a FIFO; plain, gzip or
//! zstd (told by their magic bytes, not the name); UTF-8 with or without a byte-order mark, or
//! UTF-16 with one (PowerShell's `>` writes UTF-16 LE). Nothing here seeks: the first bytes
//! that decide the format are read into a buffer and the same stream is read on after them.

use std::io::{self, Cursor, Read, Seek};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// How many decoded bytes decide a format.
pub const HEAD_BYTES: usize = 8192;

const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];

/// The compression an input arrived in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

/// The text encoding under the compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Utf8,
    /// UTF-8 after a byte-order mark (Excel's "CSV UTF-8", Notepad): the mark is dropped.
    Utf8Bom,
    Utf16Le,
    Utf16Be,
}

/// An input opened once: its first decoded bytes, and the whole stream from its start.
pub struct Input {
    /// The first [`HEAD_BYTES`] of the decoded text (fewer at the end of input).
    pub head: Vec<u8>,
    pub compression: Compression,
    pub encoding: Encoding,
    /// The raw bytes already read, replayed before `rest`.
    raw_prefix: Vec<u8>,
    rest: Box<dyn Read + Send>,
    /// A regular file can be opened again for a second pass; a pipe cannot.
    reopenable: Option<PathBuf>,
    /// The raw input has ended (set by its reader).
    raw_ended: Arc<AtomicBool>,
    /// The compressed stream stopped short at the end of the raw input (a cut file): what it
    /// held up to there was read.
    cut: Arc<AtomicBool>,
}

/// Notes when its reader has ended.
struct EndFlag<R> {
    inner: R,
    ended: Arc<AtomicBool>,
}

impl<R: Read> Read for EndFlag<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && !buf.is_empty() {
            self.ended.store(true, Ordering::Relaxed);
        }
        Ok(n)
    }
}

/// A decoder whose error at the very end of the raw input, after it gave some text, is the
/// end of a cut file (a log copied while it was written, `head -c`): the text before the cut
/// is read, and `cut` says so. An error anywhere else is an error.
struct CutAtEnd<R> {
    inner: R,
    raw_ended: Arc<AtomicBool>,
    cut: Arc<AtomicBool>,
    gave: bool,
}

impl<R> CutAtEnd<R> {
    fn new(inner: R, raw_ended: &Arc<AtomicBool>, cut: &Arc<AtomicBool>) -> Self {
        CutAtEnd {
            inner,
            raw_ended: raw_ended.clone(),
            cut: cut.clone(),
            gave: false,
        }
    }
}

impl<R: Read> Read for CutAtEnd<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.inner.read(buf) {
            Ok(n) => {
                self.gave |= n > 0;
                Ok(n)
            }
            Err(e)
                if e.kind() != io::ErrorKind::Interrupted
                    && self.gave
                    && self.raw_ended.load(Ordering::Relaxed) =>
            {
                self.cut.store(true, Ordering::Relaxed);
                Ok(0)
            }
            Err(e) => Err(e),
        }
    }
}

/// Is `path` the standard input?
pub(crate) fn is_stdin(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// Keeps a copy of every byte read through it, so that the raw bytes a decoder consumed to
/// give the head can be replayed.
struct Keep<R> {
    inner: R,
    kept: Vec<u8>,
}

impl<R: Read> Read for Keep<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.kept.extend_from_slice(&buf[..n]);
        Ok(n)
    }
}

/// Reads up to `max` bytes of `r` (fewer only at its end).
fn read_up_to(r: &mut impl Read, max: usize) -> io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(max.min(1 << 16));
    r.take(max as u64).read_to_end(&mut out)?;
    Ok(out)
}

impl Input {
    /// Opens `path` (`-` for stdin) and reads the first bytes that decide its format.
    pub fn open(path: &Path) -> io::Result<Input> {
        let (raw, reopenable): (Box<dyn Read + Send>, _) = if is_stdin(path) {
            (Box::new(io::stdin()), None)
        } else {
            let f = std::fs::File::open(path)?;
            let meta = f.metadata()?;
            if meta.is_dir() {
                return Err(io::Error::other("it is a directory, and no W&B or MLflow run folder (give a log file, a `wandb/run-…` folder or an MLflow run folder)"));
            }
            let again = meta.is_file().then(|| path.to_path_buf());
            (Box::new(f), again)
        };
        Self::from_reader(raw, reopenable)
    }

    /// As [`Input::open`], from any reader (never opened again).
    pub(crate) fn from_reader(
        raw: Box<dyn Read + Send>,
        reopenable: Option<PathBuf>,
    ) -> io::Result<Input> {
        let raw_ended = Arc::new(AtomicBool::new(false));
        let cut = Arc::new(AtomicBool::new(false));
        let raw: Box<dyn Read + Send> = Box::new(EndFlag {
            inner: raw,
            ended: raw_ended.clone(),
        });
        let mut keep = Keep {
            inner: raw,
            kept: Vec::new(),
        };
        let magic = read_up_to(&mut keep, 4)?;
        let compression = if magic.starts_with(&[0x1f, 0x8b]) {
            Compression::Gzip
        } else if magic.starts_with(&ZSTD_MAGIC) {
            Compression::Zstd
        } else {
            Compression::None
        };
        // The decoded head, read through a decoder over the kept bytes and the rest; every raw
        // byte it pulled is kept, so the stream can be decoded again from its start.
        let decoded_head = {
            let replay = Cursor::new(std::mem::take(&mut keep.kept)).chain(&mut keep);
            let mut tee = Keep {
                inner: replay,
                kept: Vec::new(),
            };
            let head = match compression {
                Compression::None => read_up_to(&mut tee, HEAD_BYTES * 2 + 4),
                Compression::Gzip => read_up_to(
                    &mut CutAtEnd::new(
                        flate2::read::MultiGzDecoder::new(&mut tee),
                        &raw_ended,
                        &cut,
                    ),
                    HEAD_BYTES * 2 + 4,
                ),
                Compression::Zstd => zstd::stream::read::Decoder::new(&mut tee).and_then(|d| {
                    read_up_to(&mut CutAtEnd::new(d, &raw_ended, &cut), HEAD_BYTES * 2 + 4)
                }),
            };
            let kept = std::mem::take(&mut tee.kept);
            (head, kept)
        };
        let (head, raw_prefix) = decoded_head;
        let mut head = head.map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "{} data that could not be decompressed: {e}",
                    compression.name()
                ),
            )
        })?;
        let encoding = if head.starts_with(b"\xEF\xBB\xBF") {
            Encoding::Utf8Bom
        } else if head.starts_with(b"\xFF\xFE") {
            Encoding::Utf16Le
        } else if head.starts_with(b"\xFE\xFF") {
            Encoding::Utf16Be
        } else {
            Encoding::Utf8
        };
        head = match encoding {
            Encoding::Utf8 => head,
            Encoding::Utf8Bom => head[3..].to_vec(),
            Encoding::Utf16Le | Encoding::Utf16Be => {
                read_up_to(&mut Utf16ToUtf8::new(&head[2..], encoding), usize::MAX)?
            }
        };
        head.truncate(HEAD_BYTES);
        Ok(Input {
            head,
            compression,
            encoding,
            raw_prefix,
            rest: keep.inner,
            reopenable,
            raw_ended,
            cut,
        })
    }

    /// Set once the compressed stream is found to stop short at the end of the input (read
    /// up to the cut): look after reading.
    pub fn cut_flag(&self) -> Arc<AtomicBool> {
        self.cut.clone()
    }

    /// The raw bytes from the start, undecoded (a zstd recording's own reader decodes it).
    pub fn raw(self) -> Box<dyn Read + Send> {
        Box::new(Cursor::new(self.raw_prefix).chain(self.rest))
    }

    /// The whole input from its start as UTF-8 text: decompressed, its byte-order mark dropped,
    /// UTF-16 turned into UTF-8.
    pub fn text(self) -> io::Result<Box<dyn Read + Send>> {
        let (encoding, compression) = (self.encoding, self.compression);
        let (raw_ended, cut) = (self.raw_ended.clone(), self.cut.clone());
        let tolerant = |inner: Box<dyn Read + Send>| -> Box<dyn Read + Send> {
            Box::new(CutAtEnd {
                inner,
                raw_ended,
                cut,
                gave: false,
            })
        };
        let raw = self.raw();
        let mut decoded: Box<dyn Read + Send> = match compression {
            Compression::None => raw,
            Compression::Gzip => tolerant(Box::new(flate2::read::MultiGzDecoder::new(raw))),
            Compression::Zstd => tolerant(Box::new(zstd::stream::read::Decoder::new(raw)?)),
        };
        Ok(match encoding {
            Encoding::Utf8 => decoded,
            Encoding::Utf8Bom => {
                let mut bom = [0u8; 3];
                decoded.read_exact(&mut bom)?;
                decoded
            }
            Encoding::Utf16Le | Encoding::Utf16Be => {
                let mut bom = [0u8; 2];
                decoded.read_exact(&mut bom)?;
                Box::new(Utf16ToUtf8::new(decoded, encoding))
            }
        })
    }

    /// A source of the text that can be read more than once and sought in (the nvidia-smi
    /// CSV reader finds the runs of a log, then goes back to the one it judges): a plain
    /// regular file is opened again for each pass; anything else (stdin, a pipe, a FIFO, a
    /// compressed or transcoded file) is decoded once into a temporary file (on disk, not in
    /// memory) that each pass reads from its start.
    pub fn into_passes(self) -> io::Result<Passes> {
        match self.reopenable.clone() {
            Some(path)
                if self.compression == Compression::None && self.encoding == Encoding::Utf8 =>
            {
                Ok(Passes::Reopen(path))
            }
            _ => {
                let mut spill = tempfile::tempfile()?;
                io::copy(&mut self.text()?, &mut spill)?;
                Ok(Passes::Spilled(spill))
            }
        }
    }

    /// Was the input decompressed or transcoded? Said in a note, so that the reading is
    /// explained.
    pub fn how_decoded(&self) -> Option<String> {
        let enc = match self.encoding {
            Encoding::Utf8 | Encoding::Utf8Bom => None,
            Encoding::Utf16Le => Some("UTF-16 LE"),
            Encoding::Utf16Be => Some("UTF-16 BE"),
        };
        let comp = match self.compression {
            Compression::None => None,
            c => Some(c.name()),
        };
        match (comp, enc) {
            (None, None) => None,
            (Some(c), None) => Some(format!("Read {c}-compressed.")),
            (None, Some(e)) => Some(format!("Read as {e} text.")),
            (Some(c), Some(e)) => Some(format!("Read {c}-compressed {e} text.")),
        }
    }
}

impl Compression {
    fn name(self) -> &'static str {
        self.into()
    }
}

/// The text of an input, for as many passes as a reader needs.
pub enum Passes {
    /// A plain regular file, opened again for each pass.
    Reopen(PathBuf),
    /// A stream, or a file that needed decoding, read once into a temporary file.
    Spilled(std::fs::File),
}

impl Passes {
    /// The text from its start.
    pub fn pass(&mut self) -> io::Result<std::fs::File> {
        match self {
            Passes::Reopen(path) => std::fs::File::open(path),
            Passes::Spilled(f) => {
                let mut f = f.try_clone()?;
                f.rewind()?;
                Ok(f)
            }
        }
    }
}

/// UTF-16 bytes read as UTF-8: an unpaired surrogate becomes U+FFFD, an odd last byte is
/// dropped.
struct Utf16ToUtf8<R> {
    inner: R,
    big_endian: bool,
    /// Raw bytes not yet decoded (an odd byte, half a surrogate pair).
    pending: Vec<u8>,
    /// UTF-8 bytes decoded and not yet handed out.
    out: Vec<u8>,
    out_at: usize,
    done: bool,
}

impl<R: Read> Utf16ToUtf8<R> {
    fn new(inner: R, encoding: Encoding) -> Self {
        Utf16ToUtf8 {
            inner,
            big_endian: encoding == Encoding::Utf16Be,
            pending: Vec::new(),
            out: Vec::new(),
            out_at: 0,
            done: false,
        }
    }

    /// Decodes the pending bytes, keeping back what may pair with the next read.
    fn decode(&mut self, at_end: bool) {
        let units = self.pending.len() / 2;
        let mut n = units;
        if !at_end && n > 0 {
            // A high surrogate at the end waits for its partner.
            let last = self.unit(n - 1);
            if (0xD800..0xDC00).contains(&last) {
                n -= 1;
            }
        }
        let decoded: String = char::decode_utf16((0..n).map(|i| self.unit(i)))
            .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
            .collect();
        self.out.clear();
        self.out_at = 0;
        self.out.extend_from_slice(decoded.as_bytes());
        self.pending.drain(..n * 2);
        if at_end {
            self.pending.clear();
        }
    }

    fn unit(&self, i: usize) -> u16 {
        let b = [self.pending[2 * i], self.pending[2 * i + 1]];
        if self.big_endian {
            u16::from_be_bytes(b)
        } else {
            u16::from_le_bytes(b)
        }
    }
}

impl<R: Read> Read for Utf16ToUtf8<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.out_at == self.out.len() {
            if self.done {
                return Ok(0);
            }
            let mut chunk = [0u8; 8192];
            let n = loop {
                match self.inner.read(&mut chunk) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    r => break r?,
                }
            };
            self.pending.extend_from_slice(&chunk[..n]);
            self.done = n == 0;
            self.decode(self.done);
        }
        let n = buf.len().min(self.out.len() - self.out_at);
        buf[..n].copy_from_slice(&self.out[self.out_at..self.out_at + n]);
        self.out_at += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    fn open_bytes(b: Vec<u8>) -> Input {
        Input::from_reader(Box::new(Cursor::new(b)), None).unwrap()
    }

    fn text_of(b: Vec<u8>) -> String {
        let mut s = String::new();
        open_bytes(b)
            .text()
            .unwrap()
            .read_to_string(&mut s)
            .unwrap();
        s
    }

    const CSV: &str = "index, utilization.gpu [%]\n0, 97 %\n1, 3 %\n";

    #[test]
    fn plain_text_reads_as_it_is() {
        let i = open_bytes(CSV.into());
        assert_eq!(i.head, CSV.as_bytes());
        assert_eq!(
            (i.compression, i.encoding),
            (Compression::None, Encoding::Utf8)
        );
        assert_eq!(text_of(CSV.into()), CSV);
    }

    #[test]
    fn a_byte_order_mark_is_dropped() {
        let b = [b"\xEF\xBB\xBF".as_slice(), CSV.as_bytes()].concat();
        assert_eq!(open_bytes(b.clone()).head, CSV.as_bytes());
        assert_eq!(text_of(b), CSV);
    }

    #[test]
    fn utf16_with_a_mark_is_decoded() {
        // Past the 8 KiB head, and a character outside the basic plane across reads.
        let long = format!("{CSV}{}name 𝄞 é\n", "0, 50 %\n".repeat(3000));
        for be in [false, true] {
            let mut b = if be {
                vec![0xFE, 0xFF]
            } else {
                vec![0xFF, 0xFE]
            };
            for u in long.encode_utf16() {
                b.extend(if be { u.to_be_bytes() } else { u.to_le_bytes() });
            }
            let i = open_bytes(b.clone());
            assert!(long.as_bytes().starts_with(&i.head));
            assert_eq!(i.head.len(), HEAD_BYTES);
            assert_eq!(text_of(b), long);
        }
    }

    #[test]
    fn gzip_and_zstd_are_told_by_their_magic() {
        let long = CSV.repeat(2000);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(long.as_bytes()).unwrap();
        let gz = gz.finish().unwrap();
        let zst = zstd::encode_all(long.as_bytes(), 3).unwrap();
        for (b, c) in [(gz, Compression::Gzip), (zst, Compression::Zstd)] {
            let i = open_bytes(b.clone());
            assert_eq!(i.compression, c);
            assert_eq!(i.head, &long.as_bytes()[..HEAD_BYTES]);
            assert_eq!(text_of(b.clone()), long);
            // The raw stream replays the compressed bytes whole.
            let mut raw = Vec::new();
            open_bytes(b.clone()).raw().read_to_end(&mut raw).unwrap();
            assert_eq!(raw, b);
        }
    }

    #[test]
    fn a_stream_is_spilled_for_a_second_pass() {
        let mut p = open_bytes(CSV.into()).into_passes().unwrap();
        for _ in 0..2 {
            let mut s = String::new();
            p.pass().unwrap().read_to_string(&mut s).unwrap();
            assert_eq!(s, CSV);
        }
    }

    #[test]
    fn a_cut_gzip_is_read_up_to_the_cut() {
        let mut text = String::new();
        for i in 0..20_000 {
            text.push_str(&format!(
                "2026/12/05 10:{:02}:{:02}.000, 0, {} %\n",
                i / 60 % 60,
                i % 60,
                i % 100
            ));
        }
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut gz, text.as_bytes()).unwrap();
        let whole = gz.finish().unwrap();
        let cut_at = whole.len() / 2;
        let input =
            Input::from_reader(Box::new(Cursor::new(whole[..cut_at].to_vec())), None).unwrap();
        let cut = input.cut_flag();
        let mut got = String::new();
        input.text().unwrap().read_to_string(&mut got).unwrap();
        assert!(cut.load(Ordering::Relaxed));
        assert!(
            got.len() > text.len() / 4 && got.len() < text.len(),
            "{}",
            got.len()
        );
        assert!(text.starts_with(&got));
        // The whole stream is no cut.
        let input = Input::from_reader(Box::new(Cursor::new(whole)), None).unwrap();
        let cut = input.cut_flag();
        let mut got = String::new();
        input.text().unwrap().read_to_string(&mut got).unwrap();
        assert_eq!(got, text);
        assert!(!cut.load(Ordering::Relaxed));
    }

    #[test]
    fn broken_gzip_says_so() {
        let e = Input::from_reader(Box::new(Cursor::new(vec![0x1f, 0x8b, 9, 9, 9])), None)
            .err()
            .unwrap();
        assert!(e.to_string().starts_with("gzip data that could not"), "{e}");
    }
}
