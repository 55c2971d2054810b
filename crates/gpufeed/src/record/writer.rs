//! Writing a recording: NDJSON lines, plain or compressed with zstd on the fly.
//!
//! Compressed recordings are a sequence of independent zstd frames, one per flush: everything
//! flushed is a complete frame on disk, so a killed gpufeed loses only what it had not flushed yet
//! (at most [`super::recorder::FLUSH_EVERY`]), and `zstd -d` (which reads concatenated frames)
//! decompresses the file by hand. The reader ([`super::reader`]) tells the two apart by the
//! first bytes.

use crate::record::format::header_line;
use crate::sample::event::{Header, Line};
use std::io::{self, Write};
use std::path::Path;

/// zstd level: level 9 compresses a one-second frame of recording about as well as level 19
/// for a small fraction of the CPU (a few ms a second).
pub(crate) const ZSTD_LEVEL: i32 = 9;

/// How a recording's bytes are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Compression {
    /// Plain NDJSON (`.ndjson`, or any name not ending in `.zst`).
    None,
    /// zstd frames (`.ndjson.zst`, the default name).
    Zstd,
}

impl Compression {
    /// zstd for a name ending in `.zst`, plain otherwise: a name the user gives keeps its meaning.
    pub(crate) fn for_path(path: &Path) -> Compression {
        match path.extension() {
            Some(e) if e.eq_ignore_ascii_case("zst") => Compression::Zstd,
            _ => Compression::None,
        }
    }
}

/// Lines buffered in memory and written out, as one zstd frame or as they are, at each
/// [`RecordingWriter::flush`].
pub(crate) struct RecordingWriter<W: Write> {
    out: W,
    buf: Vec<u8>,
    zstd: Option<zstd::bulk::Compressor<'static>>,
    frame: Vec<u8>,
    written: u64,
}

impl<W: Write> RecordingWriter<W> {
    pub(crate) fn new(out: W, compression: Compression) -> io::Result<Self> {
        let zstd = match compression {
            Compression::None => None,
            Compression::Zstd => {
                let mut c = zstd::bulk::Compressor::new(ZSTD_LEVEL)?;
                // The content size in each frame header lets `zstd -l` and readers size buffers.
                c.include_contentsize(true)?;
                c.include_checksum(true)?;
                Some(c)
            }
        };
        Ok(RecordingWriter {
            out,
            buf: Vec::with_capacity(64 * 1024),
            zstd,
            frame: Vec::new(),
            written: 0,
        })
    }

    /// Adds the header line (written at the next flush).
    pub(crate) fn header(&mut self, h: &Header) {
        self.buf.extend_from_slice(header_line(h).as_bytes());
        self.buf.push(b'\n');
    }

    /// Adds a line, its figures rounded for storage (written at the next flush).
    pub(crate) fn line(&mut self, line: &mut Line) -> io::Result<()> {
        line.round_for_storage();
        serde_json::to_writer(&mut self.buf, line).map_err(io::Error::from)?;
        self.buf.push(b'\n');
        Ok(())
    }

    /// Bytes waiting for the next flush.
    pub(crate) fn pending(&self) -> usize {
        self.buf.len()
    }

    /// Writes what is buffered (one zstd frame when compressing) and flushes the file.
    pub(crate) fn flush(&mut self) -> io::Result<()> {
        if !self.buf.is_empty() {
            match &mut self.zstd {
                Some(c) => {
                    self.frame.clear();
                    self.frame
                        .reserve(zstd::zstd_safe::compress_bound(self.buf.len()));
                    c.compress_to_buffer(&self.buf, &mut self.frame)?;
                    self.out.write_all(&self.frame)?;
                    self.written += self.frame.len() as u64;
                }
                None => {
                    self.out.write_all(&self.buf)?;
                    self.written += self.buf.len() as u64;
                }
            }
            self.buf.clear();
        }
        self.out.flush()
    }

    pub(crate) fn get_ref(&self) -> &W {
        &self.out
    }
}
