//! The line parser of recordings, beneath both ways of reading one ([`super::reader`] on the
//! calling thread, [`super::pipeline`] on worker threads): the bounds a line must keep, the
//! consumers' trait ([`Sink`]), one line's parse ([`parse_line`]) and the counts of what was read
//! ([`Tally`]).

use super::fast;
use crate::record::format::ReadStats;
use crate::sample::event::{Header, Line, ProcsLine};
use crate::sample::{GpuSample, HostSample, ProcSample};

/// Longest line read; longer ones are skipped and counted as malformed. The longest real lines
/// (a `procs` line of a few hundred processes, a Python stack) are far below it.
pub(crate) const MAX_LINE_BYTES: usize = 1 << 20;

/// Latest time a line may carry, in seconds since the recording started (366 days): a recorder
/// writes seconds since its start, so a line outside `0..=MAX_TIME_S` (or not finite, or with a
/// `dt_s` / `span_s` outside the same bounds) is broken or crafted. It is dropped before any
/// consumer sees it, and counted ([`ReadStats::bad_time`]): a `t_s` of 1e308 had made the HTML
/// chart's axis computation spin, and -1e9 printed a duration of 277777 h.
pub(super) const MAX_TIME_S: f64 = 366.0 * 86400.0;

/// Longest string kept from a line (a command line, a Python frame's name or file, a status
/// detail); longer ones are cut at a character boundary and counted
/// ([`ReadStats::long_strings`]). Real command lines and frame names are far shorter; 3,000
/// processes with 1 MB command lines (a crafted recording) had taken diagnose to 5.9 GB.
pub(crate) const MAX_STRING_BYTES: usize = 4096;

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
        Line::Procs(ProcsLine { t_s, .. }) | Line::ProcExit { t_s, .. } => time_ok(*t_s),
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
        Ok(Line::Procs(ProcsLine { t_s, procs: p })) => {
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
