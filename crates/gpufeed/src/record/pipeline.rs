//! The recording reader on several cores: one thread reads (and decompresses) the input and cuts
//! it into batches of whole lines, `workers` threads parse the batches, and the calling thread
//! hands the parsed lines to the sinks in file order.
//!
//! - Order: batch `k` goes to worker `k % workers` and its result is taken from that worker
//!   next, so batches come back in the order they were cut, with no reordering buffer.
//! - Memory is bounded whatever the file's length: every channel holds one batch, so at most
//!   `3 * workers + 2` batches of [`BATCH_BYTES`] (plus their parsed lines) exist at once, and
//!   their buffers are reused rather than allocated per batch.
//! - The same line rules as the single-thread path ([`super::reader`]): the same parser
//!   ([`parse_line`]), the same counts ([`Tally`]), a cut last line or zstd frame is the end,
//!   and a line over [`MAX_LINE_BYTES`] is skipped without being held whole.
//! - An input that is one batch never comes here: [`super::reader`] parses it on the calling
//!   thread (threads would gain nothing, and each one started leaves a malloc arena behind).

use super::parse::{parse_line, trim, Parsed, Sink, Tally, MAX_LINE_BYTES};
use crate::record::format::{ReadError, ReadStats};
use crate::sample::event::Line;
use crate::sample::{GpuSample, HostSample, ProcSample};
use std::io::{ErrorKind, Read};
use std::path::Path;
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};

/// Bytes of input read before a batch is cut at its last newline.
pub(super) const BATCH_BYTES: usize = 1 << 20;

/// The input after the header, as the single-thread reader left it.
pub(super) struct Source<R> {
    pub r: R,
    pub eof: bool,
    /// The input ended in an error taken as its end.
    pub cut: bool,
    /// Errors end the input instead of failing the read (a zstd stream cut mid-frame).
    pub lenient: bool,
}

/// The bytes the single-thread reader had read past the header, then the rest of the input.
struct Input<'a, R> {
    pre: &'a [u8],
    src: Source<R>,
}

impl<R: Read> Input<'_, R> {
    /// Reads into `buf` (not empty); 0 at the end of the input.
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        debug_assert!(!buf.is_empty());
        if !self.pre.is_empty() {
            let n = buf.len().min(self.pre.len());
            buf[..n].copy_from_slice(&self.pre[..n]);
            self.pre = &self.pre[n..];
            return Ok(n);
        }
        let src = &mut self.src;
        while !src.eof {
            match src.r.read(buf) {
                Ok(0) => src.eof = true,
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) if src.lenient => {
                    src.eof = true;
                    src.cut = true;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(0)
    }

    /// True once everything was read.
    fn done(&self) -> bool {
        self.pre.is_empty() && self.src.eof
    }
}

/// Whole lines of the input, as cut by the reading thread.
struct Batch {
    /// [`MAX_LINE_BYTES`] + the batch size long (the longest carried-over start of a line, then
    /// a batch) (zeroed once, reused); the lines are `buf[..len]`.
    buf: Vec<u8>,
    len: usize,
    /// A line over [`MAX_LINE_BYTES`] follows these lines (it was skipped).
    too_long_after: bool,
}

/// What a worker made of a batch.
#[derive(Default)]
struct ParsedBatch {
    items: Vec<Item>,
    /// Slots reused from batch to batch: the first `n_*` of each are this batch's.
    gpus: Vec<GpuSample>,
    hosts: Vec<HostSample>,
    procs: Vec<Vec<ProcSample>>,
    others: Vec<Line>,
}

#[derive(Debug, Clone, Copy)]
enum Item {
    Gpu,
    Host,
    Procs(f64),
    Other,
    Bad {
        complete: bool,
    },
    BadTime,
    /// An `Other` line with a string cut.
    OtherCut,
    TooLong,
}

/// Reads the lines after the header from `src` (`head`: bytes already read past the header)
/// into `sink` with `workers` parser threads, cutting batches of about `batch_bytes` (at least as
/// many as `head` holds).
pub(super) fn run<R: Read + Send>(
    path: &Path,
    src: Source<R>,
    head: &[u8],
    mut sink: impl Sink,
    workers: usize,
    batch_bytes: usize,
) -> Result<ReadStats, ReadError> {
    let workers = workers.max(1);
    let batch_bytes = batch_bytes.max(1);
    let (pool_tx, pool_rx) = channel::<Vec<u8>>();
    let mut tally = Tally::new();
    let result = std::thread::scope(|s| {
        let mut to_workers = Vec::with_capacity(workers);
        let mut from_workers = Vec::with_capacity(workers);
        let mut give_back = Vec::with_capacity(workers);
        for _ in 0..workers {
            let (in_tx, in_rx) = sync_channel::<Batch>(1);
            let (out_tx, out_rx) = sync_channel::<ParsedBatch>(1);
            let (back_tx, back_rx) = channel::<ParsedBatch>();
            let pool_tx = pool_tx.clone();
            s.spawn(move || worker(in_rx, out_tx, back_rx, pool_tx));
            to_workers.push(in_tx);
            from_workers.push(out_rx);
            give_back.push(back_tx);
        }
        drop(pool_tx);
        let reading = s.spawn(move || cut_batches(src, head, batch_bytes, to_workers, pool_rx));
        let mut k = 0;
        while let Ok(mut b) = from_workers[k % workers].recv() {
            apply(&b, &mut sink, &mut tally);
            b.items.clear();
            let _ = give_back[k % workers].send(b);
            k += 1;
        }
        drop(from_workers);
        match reading.join() {
            Ok(r) => r,
            Err(p) => std::panic::resume_unwind(p),
        }
    });
    match result {
        Ok(cut) => Ok(tally.finish(cut)),
        Err(source) => Err(ReadError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Hands one parsed batch to the sinks, in order, counting as the single-thread path does.
fn apply(b: &ParsedBatch, sink: &mut impl Sink, tally: &mut Tally) {
    let (mut g, mut h, mut p, mut o) = (0, 0, 0, 0);
    for it in &b.items {
        match *it {
            Item::Gpu => {
                sink.gpu(&b.gpus[g]);
                g += 1;
            }
            Item::Host => {
                sink.host(&b.hosts[h]);
                h += 1;
            }
            Item::Procs(t) => {
                sink.procs(t, &b.procs[p]);
                p += 1;
            }
            Item::Other => {
                let l = &b.others[o];
                o += 1;
                tally.other(l);
                sink.line(l);
            }
            Item::Bad { complete } => {
                tally.bad(complete);
                continue;
            }
            Item::TooLong => {
                tally.too_long();
                continue;
            }
            Item::BadTime => tally.bad_time(),
            Item::OtherCut => {
                let l = &b.others[o];
                o += 1;
                tally.long_strings();
                tally.other(l);
                sink.line(l);
            }
        }
        tally.ok();
    }
}

/// The reading thread: cuts the input into batches of whole lines, sent round-robin to the
/// workers. Returns whether the input ended in an error taken as its end.
fn cut_batches<R: Read>(
    src: Source<R>,
    head: &[u8],
    batch_bytes: usize,
    to_workers: Vec<SyncSender<Batch>>,
    pool: Receiver<Vec<u8>>,
) -> std::io::Result<bool> {
    let buf_bytes = MAX_LINE_BYTES + batch_bytes;
    let mut src = Input { pre: head, src };
    let mut carry: Vec<u8> = Vec::new();
    let mut scratch: Vec<u8> = Vec::new();
    let mut k = 0usize;
    loop {
        let mut buf = pool.try_recv().unwrap_or_else(|_| vec![0; buf_bytes]);
        // The carried-over start of a line (at most the cap).
        let mut n = carry.len();
        buf[..n].copy_from_slice(&carry);
        carry.clear();
        let mut target = batch_bytes.max(n + 1).min(buf_bytes);
        let mut too_long_after = false;
        let len = loop {
            while n < target {
                let got = src.read(&mut buf[n..target])?;
                if got == 0 {
                    break;
                }
                n += got;
            }
            if let Some(p) = memchr::memrchr(b'\n', &buf[..n]) {
                carry.extend_from_slice(&buf[p + 1..n]);
                break p + 1;
            }
            if src.done() {
                break n;
            }
            if n > MAX_LINE_BYTES {
                // One line, still going, over the cap: skipped below.
                too_long_after = true;
                break 0;
            }
            target = buf_bytes;
        };
        if carry.len() > MAX_LINE_BYTES {
            // The last line started here is over the cap (it has no newline yet).
            too_long_after = true;
            carry.clear();
        }
        if too_long_after {
            skip_line(&mut src, &mut scratch, &mut carry)?;
        }
        if len == 0 && !too_long_after {
            // Nothing left (a batch always ends at a newline or at the end of the input).
            return Ok(src.src.cut);
        }
        let batch = Batch {
            buf,
            len,
            too_long_after,
        };
        if to_workers[k % to_workers.len()].send(batch).is_err() {
            // The consumer stopped (it panicked): nothing more to do.
            return Ok(src.src.cut);
        }
        k += 1;
    }
}

/// Reads up to and including the next newline, dropping it; what follows it goes to `carry`.
fn skip_line<R: Read>(
    src: &mut Input<'_, R>,
    scratch: &mut Vec<u8>,
    carry: &mut Vec<u8>,
) -> std::io::Result<()> {
    if scratch.is_empty() {
        scratch.resize(64 << 10, 0);
    }
    loop {
        let got = src.read(scratch)?;
        if got == 0 {
            return Ok(());
        }
        if let Some(p) = memchr::memchr(b'\n', &scratch[..got]) {
            carry.extend_from_slice(&scratch[p + 1..got]);
            return Ok(());
        }
    }
}

/// A parser thread: parses each batch it gets into typed lines, reusing the batches the
/// consumer gives back.
fn worker(
    batches: Receiver<Batch>,
    out: SyncSender<ParsedBatch>,
    back: Receiver<ParsedBatch>,
    pool: Sender<Vec<u8>>,
) {
    while let Ok(batch) = batches.recv() {
        let mut p = back.try_recv().unwrap_or_default();
        parse_batch(&batch.buf[..batch.len], batch.too_long_after, &mut p);
        let _ = pool.send(batch.buf);
        if out.send(p).is_err() {
            return;
        }
    }
}

/// Parses the lines of `data` into `p` (its items cleared first).
fn parse_batch(data: &[u8], too_long_after: bool, p: &mut ParsedBatch) {
    p.items.clear();
    p.others.clear();
    let (mut g, mut h, mut r) = (0, 0, 0);
    let mut at = 0;
    while at < data.len() {
        let (line, complete) = match memchr::memchr(b'\n', &data[at..]) {
            Some(e) => {
                let l = &data[at..at + e];
                at += e + 1;
                (l, true)
            }
            None => {
                let l = &data[at..];
                at = data.len();
                (l, false)
            }
        };
        if line.len() > MAX_LINE_BYTES {
            p.items.push(Item::TooLong);
            continue;
        }
        let text = trim(line);
        if text.is_empty() {
            continue;
        }
        // Parse into this batch's next slots (the ones a previous batch left, reused).
        if p.gpus.len() == g {
            p.gpus.push(GpuSample::default());
        }
        if p.hosts.len() == h {
            p.hosts.push(HostSample::default());
        }
        if p.procs.len() == r {
            p.procs.push(Vec::new());
        }
        let item = match parse_line(text, &mut p.gpus[g], &mut p.hosts[h], &mut p.procs[r]) {
            Parsed::Gpu => Item::Gpu,
            Parsed::Host => Item::Host,
            Parsed::Procs(t) => Item::Procs(t),
            Parsed::Other(l) => {
                p.others.push(*l);
                Item::Other
            }
            Parsed::Bad => Item::Bad { complete },
            Parsed::BadTime => Item::BadTime,
            Parsed::LongStrings(l) => {
                p.others.push(*l);
                Item::OtherCut
            }
        };
        match item {
            Item::Gpu => g += 1,
            Item::Host => h += 1,
            Item::Procs(_) => r += 1,
            _ => {}
        }
        p.items.push(item);
    }
    if too_long_after {
        p.items.push(Item::TooLong);
    }
}

#[cfg(test)]
mod tests {
    use super::super::reader::{read_with, Collect};
    use super::*;
    use crate::sample::event::ProcsLine;
    use proptest::prelude::*;

    const HEADER: &str = "{\"type\":\"header\",\"schema_version\":1,\"start_time\":\"2026-12-03T00:00:00Z\",\"start_unix_us\":0,\"interval_s\":0.1,\"host\":{\"hostname\":\"t\",\"kernel\":\"6.8\",\"cpu_count\":4,\"mem_total_bytes\":1000,\"clock_ticks_per_s\":100},\"gpus\":[]}\n";

    /// One line of a generated recording (with its newline).
    fn line(kind: u8, i: usize) -> String {
        let t = i as f64 * 0.1;
        match kind % 9 {
            0 | 1 => format!(
                "{{\"type\":\"gpu\",\"index\":{},\"t_s\":{t},\"util_samples\":[[{t},{}.5]],\"util_pct\":{}.0,\"pcie_rx_bytes\":{}}}\n",
                i % 4,
                i % 100,
                i % 97,
                i * 1000
            ),
            // Not the fast path's key order: serde parses it.
            2 => format!("{{\"t_s\":{t},\"type\":\"gpu\",\"index\":1,\"util_pct\":3.0}}\n"),
            3 => format!(
                "{{\"type\":\"host\",\"t_s\":{t},\"cpu_pct\":[1.0,{}.0],\"cpu_total_pct\":5.0,\"disks\":[{{\"device\":\"sda\",\"read_bytes_per_s\":1.0,\"write_bytes_per_s\":2.0}}]}}\n",
                i % 100
            ),
            4 => format!(
                "{{\"type\":\"procs\",\"t_s\":{t},\"procs\":[{{\"pid\":{},\"cpu_pct\":9.5,\"rss_bytes\":100,\"state\":\"R\",\"threads\":2}}]}}\n",
                1000 + i % 5
            ),
            5 => format!(
                "{{\"type\":\"proc_start\",\"t_s\":{t},\"pid\":{i},\"ppid\":1,\"cmd\":\"python\",\"comm\":\"python\"}}\n"
            ),
            6 => format!("{{\"type\":\"gpu\",\"index\":oops {i}\n"),
            7 => "  \r\n".to_string(),
            _ => format!("{{\"type\":\"proc_exit\",\"t_s\":{t},\"pid\":{i}}}\n"),
        }
    }

    fn recording(kinds: &[u8]) -> Vec<u8> {
        let mut b = HEADER.as_bytes().to_vec();
        for (i, k) in kinds.iter().enumerate() {
            b.extend_from_slice(line(*k, i).as_bytes());
        }
        b
    }

    fn read(b: &[u8], workers: usize, batch: usize) -> (ReadStats, Vec<Line>) {
        let mut got = Collect::default();
        let (_, st) = read_with(Path::new("t"), b, &mut got, workers, batch).unwrap();
        (st, got.0)
    }

    /// The pipeline with several batch sizes and worker counts gives what the single-thread
    /// path gives.
    fn same_as_single_thread(b: &[u8]) -> (ReadStats, Vec<Line>) {
        let one = read(b, 0, 0);
        for (workers, batch) in [(1, 1), (2, 37), (3, 200), (2, 4096), (4, BATCH_BYTES)] {
            let many = read(b, workers, batch);
            assert_eq!(
                many.0, one.0,
                "stats, {workers} workers, batches of {batch}"
            );
            assert_eq!(
                many.1, one.1,
                "lines, {workers} workers, batches of {batch}"
            );
        }
        one
    }

    #[test]
    fn lines_with_times_out_of_bounds_are_dropped_and_counted_on_both_paths() {
        let mut b = recording(&[0, 3, 4, 5, 8, 0]);
        for t in ["1e308", "-1e9", "40000000"] {
            // Line 1's shapes (t_s 0.1), at the bad time: gpu, host, procs, proc_start, exit.
            for k in [0, 3, 4, 5, 8] {
                let l = line(k, 1).replace("0.1", t);
                b.extend_from_slice(l.as_bytes());
            }
            let steps = format!(
                "{{\"type\":\"steps\",\"t_s\":1.0,\"dt_s\":1.0,\"steps\":2,\"span_s\":{t}}}\n"
            );
            b.extend_from_slice(steps.as_bytes());
        }
        b.extend_from_slice(line(3, 7).as_bytes());
        let (st, got) = same_as_single_thread(&b);
        assert_eq!(st.bad_time, 18, "{st:?}");
        assert_eq!(st.malformed, 0);
        assert_eq!(got.len(), 7, "{got:?}");
    }

    #[test]
    fn order_is_kept_across_batches() {
        let kinds: Vec<u8> = (0..5000).map(|i| [0, 3, 4, 5, 8][i % 5]).collect();
        let b = recording(&kinds);
        assert!(b.len() > 3 * 100_000);
        let (st, got) = same_as_single_thread(&b);
        assert_eq!(got.len(), 5000);
        assert_eq!(st.lines, 5000);
        // Many small batches on 3 workers: still in file order.
        let (_, got) = read(&b, 3, 1000);
        let times: Vec<f64> = got
            .iter()
            .map(|l| match l {
                Line::Gpu(g) => g.t_s,
                Line::Host(h) => h.t_s,
                Line::Procs(ProcsLine { t_s, .. }) | Line::ProcExit { t_s, .. } => *t_s,
                Line::ProcStart(p) => p.t_s,
                other => panic!("{other:?}"),
            })
            .collect();
        assert!(times.windows(2).all(|w| w[0] < w[1]), "in file order");
    }

    #[test]
    fn a_cut_last_line_is_the_end() {
        let mut b = recording(&[0, 3, 4, 0, 3]);
        b.truncate(b.len() - 20);
        let (st, got) = same_as_single_thread(&b);
        assert!(st.truncated && st.unfinished, "{st:?}");
        assert_eq!((st.lines, st.malformed, got.len()), (5, 0, 4));
        // Cut right after a newline: nothing is cut.
        let b = recording(&[0, 3, 4]);
        let (st, _) = same_as_single_thread(&b);
        assert!(!st.truncated, "{st:?}");
    }

    #[test]
    fn bad_lines_are_counted_as_on_one_thread() {
        // Bad lines at the start, in runs, before the last line, and last (the cut end).
        let kinds = [6, 6, 0, 0, 6, 3, 6, 6, 6, 4, 7, 6, 0, 6];
        let b = recording(&kinds);
        let (st, got) = same_as_single_thread(&b);
        assert_eq!(st.malformed, 7, "{st:?}");
        assert!(st.truncated, "the last bad line is the cut end");
        assert_eq!(st.lines, 13, "blank lines are not lines");
        assert_eq!(got.len(), 5);
    }

    #[test]
    fn a_line_over_the_cap_is_skipped_and_counted_anywhere() {
        let long = {
            let mut l = vec![b'{'];
            l.extend(std::iter::repeat_n(b'x', MAX_LINE_BYTES + 10));
            l.push(b'\n');
            l
        };
        let just_under = {
            let mut l = b"{\"type\":\"proc_exit\",\"t_s\":1.0,\"pid\":7}".to_vec();
            l.extend(std::iter::repeat_n(b' ', MAX_LINE_BYTES - l.len()));
            l.push(b'\n');
            l
        };
        // In the middle (after a bad line: both counted), twice in a row, and last (cut).
        let mut b = recording(&[0, 6]);
        b.extend_from_slice(&long);
        b.extend_from_slice(line(3, 2).as_bytes());
        b.extend_from_slice(&long);
        b.extend_from_slice(&long);
        b.extend_from_slice(&just_under);
        b.extend_from_slice(line(4, 3).as_bytes());
        b.extend_from_slice(&long[..long.len() - 1]);
        let (st, got) = same_as_single_thread(&b);
        assert_eq!(got.len(), 4, "{got:?}");
        assert_eq!(st.lines, 9);
        assert_eq!(st.malformed, 5, "the bad line and four long ones: {st:?}");
        assert!(!st.truncated);
    }

    #[test]
    fn a_zstd_recording_cut_mid_frame_reads_as_on_one_thread() {
        let kinds: Vec<u8> = (0..3000).map(|i| (i % 6) as u8).collect();
        let plain = recording(&kinds);
        let mut z = Vec::new();
        for part in plain.chunks(7000) {
            z.extend(zstd::encode_all(part, 3).unwrap());
        }
        for cut in [z.len(), z.len() - 3, z.len() / 2, z.len() / 3 + 11] {
            let (st, got) = same_as_single_thread(&z[..cut]);
            assert_eq!(st.truncated, cut < z.len(), "cut at {cut}");
            assert!(!got.is_empty());
        }
    }

    #[test]
    fn an_input_error_is_an_error() {
        struct Fails(usize);
        impl Read for Fails {
            fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
                let rec = recording(&[0; 50]);
                if self.0 >= rec.len() {
                    return Err(std::io::Error::other("disk on fire"));
                }
                let n = b.len().min(rec.len() - self.0).min(100);
                b[..n].copy_from_slice(&rec[self.0..self.0 + n]);
                self.0 += n;
                Ok(n)
            }
        }
        let e = read_with(Path::new("t"), Fails(0), (), 2, 64).unwrap_err();
        assert!(e.to_string().contains("disk on fire"), "{e}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Generated recordings (every line type, bad and blank lines, cut anywhere) give the
        /// sinks the same lines and the same counts on the pipeline as on one thread.
        #[test]
        fn the_pipeline_gives_the_sinks_what_one_thread_gives(
            kinds in proptest::collection::vec(0u8..9, 0..400),
            cut in 0usize..20_000,
        ) {
            let mut b = recording(&kinds);
            let keep = b.len() - cut.min(b.len() - HEADER.len());
            b.truncate(keep);
            same_as_single_thread(&b);
        }
    }
}
