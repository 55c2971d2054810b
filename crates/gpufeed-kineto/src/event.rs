//! A trace event as the readers hand it on ([`Event`], [`Args`]) to an [`EventSink`], what a
//! scan saw besides events ([`ScanStats`]), the bounds every reader applies to one event, and how
//! a string id becomes a number. Beneath the scanner ([`super::reader`]), its fast path
//! (`trace::fast`) and its serde_json fallback (`trace::serde_event`).

use std::borrow::Cow;

/// The largest JSON value (one event, one top-level field) held in memory. A larger one (no real
/// Kineto event comes near) is skipped without being buffered, with a warning, so that memory
/// stays bounded whatever the input.
pub const MAX_VALUE_BYTES: usize = 64 << 20;

/// The longest event name or category handed to a sink: longer ones (the longest C++ template
/// kernel names are a few KiB) are cut, with a warning, so that names interned per distinct value
/// stay bounded (a 1 MB `.json.gz` can hold thousands of distinct megabyte names).
pub const MAX_NAME_BYTES: usize = 8 << 10;

/// Cuts a name to [`MAX_NAME_BYTES`]; true when it was longer.
fn cap_name(c: &mut Cow<'_, [u8]>) -> bool {
    if c.len() <= MAX_NAME_BYTES {
        return false;
    }
    *c = match std::mem::take(c) {
        Cow::Borrowed(b) => Cow::Borrowed(&b[..MAX_NAME_BYTES]),
        Cow::Owned(mut v) => {
            v.truncate(MAX_NAME_BYTES);
            Cow::Owned(v)
        }
    };
    true
}

/// Cuts an event's name and category (see [`MAX_NAME_BYTES`]), drops an impossible time (a
/// negative or non-finite duration, a non-finite timestamp), counting both, and widens the span.
pub(super) fn check_event(ev: &mut Event<'_>, st: &mut ScanStats) {
    let cut = cap_name(&mut ev.name) | cap_name(&mut ev.cat);
    if cut {
        st.long_names += 1;
    }
    let bad_ts = ev.ts.is_some_and(|t| !t.is_finite());
    let bad_dur = ev.dur.is_some_and(|d| !d.is_finite() || d < 0.0);
    if bad_ts || bad_dur {
        st.impossible_times += 1;
        if bad_ts {
            ev.ts = None;
        }
        if bad_dur {
            ev.dur = None;
        }
    }
    if let Some(t) = ev.ts {
        let end = t + ev.dur.unwrap_or(0.0);
        st.span_us = Some(match st.span_us {
            None => (t, end),
            Some((a, z)) => (a.min(t), z.max(end)),
        });
    }
}

/// A trace spanning more than this (a day) has broken timestamps: profiles cover seconds.
pub const MAX_PLAUSIBLE_SPAN_US: f64 = 86_400e6;

/// One trace event, borrowing from the read buffer where it can.
#[derive(Debug, Default)]
pub struct Event<'a> {
    pub ph: u8,
    pub cat: Cow<'a, [u8]>,
    pub name: Cow<'a, [u8]>,
    pub pid: Option<u64>,
    pub tid: Option<u64>,
    pub ts: Option<f64>,
    pub dur: Option<f64>,
    pub args: Args,
}

/// Only the `args` the analyses need.
#[derive(Debug, Default, Clone, Copy)]
pub struct Args {
    pub external_id: Option<u64>,
    pub correlation: Option<u64>,
    pub bytes: Option<f64>,
    pub stream: Option<u64>,
    pub device: Option<u64>,
    pub collective: bool,
}

/// The keys of an event that gpufeed reads, named once for both of its readers (the fast path,
/// `fast.rs`, and serde's, `serde_event.rs`): each matches on these with no catch-all arm, so a
/// key added here is read by both or compiles in neither.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum EventKey {
    Ph,
    Cat,
    Name,
    Pid,
    Tid,
    Ts,
    Dur,
    Args,
    Other,
}

impl EventKey {
    #[inline]
    pub(super) fn of(k: &[u8]) -> Self {
        match k {
            b"ph" => EventKey::Ph,
            b"cat" => EventKey::Cat,
            b"name" => EventKey::Name,
            b"pid" => EventKey::Pid,
            b"tid" => EventKey::Tid,
            b"ts" => EventKey::Ts,
            b"dur" => EventKey::Dur,
            b"args" => EventKey::Args,
            _ => EventKey::Other,
        }
    }
}

/// The keys of an event's `args` that fill [`Args`], named once for both readers (as
/// [`EventKey`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ArgKey {
    ExternalId,
    Correlation,
    Bytes,
    Stream,
    Device,
    /// Its presence marks a collective (its value is not read).
    Collective,
    Other,
}

impl ArgKey {
    #[inline]
    pub(super) fn of(k: &[u8]) -> Self {
        match k {
            b"External id" | b"external id" => ArgKey::ExternalId,
            b"correlation" => ArgKey::Correlation,
            b"bytes" => ArgKey::Bytes,
            b"stream" => ArgKey::Stream,
            b"device" => ArgKey::Device,
            b"Collective name" => ArgKey::Collective,
            _ => ArgKey::Other,
        }
    }
}

/// Receives events and the few top-level fields.
pub trait EventSink {
    fn event(&mut self, ev: &Event<'_>);
    fn top_level(&mut self, key: &str, value: serde_json::Value);
    /// An event with its JSON text as read (one value, at most [`MAX_VALUE_BYTES`]), for sinks
    /// that copy events (`export --merge`); by default only the decoded event is used.
    fn raw_event(&mut self, ev: &Event<'_>, _json: &[u8]) {
        self.event(ev)
    }
    /// Every top-level field but `traceEvents`, as JSON text (at most [`MAX_VALUE_BYTES`]).
    fn top_level_raw(&mut self, _key: &[u8], _json: &[u8]) {}
}

/// What the scan saw besides events.
#[derive(Debug, Default, Clone)]
pub struct ScanStats {
    pub bytes: u64,
    pub events: u64,
    pub bad_events: u64,
    pub truncated: bool,
    pub found_events_key: bool,
    /// Values larger than [`MAX_VALUE_BYTES`], skipped.
    pub oversized: u64,
    /// Events whose name or category was cut to [`MAX_NAME_BYTES`].
    pub long_names: u64,
    /// Events with a negative or non-finite duration or a non-finite timestamp (dropped).
    pub impossible_times: u64,
    /// First timestamp and last end of the events (µs).
    pub span_us: Option<(f64, f64)>,
    pub warnings: Vec<String>,
}

/// Any JSON value read as a number if it is one (or a numeric string); ids also hash strings.
#[derive(Clone, Copy)]
pub(super) struct Num {
    pub(super) f: Option<f64>,
    pub(super) id: Option<u64>,
}

/// For the fast path: (number, id) of a string id.
pub(super) fn num_from_bytes(v: &[u8]) -> (Option<f64>, Option<u64>) {
    let n = num_from_str(v);
    (n.f, n.id)
}

/// "7", "stream 7", "python 123" → the number; other strings → a stable hash with the top bit set.
pub(super) fn num_from_str(v: &[u8]) -> Num {
    let s = String::from_utf8_lossy(v);
    let t = s.trim();
    if let Ok(f) = t.parse::<f64>() {
        let id = if (0.0..1.8e19).contains(&f) {
            Some(f as u64)
        } else {
            None
        };
        return Num {
            f: Some(f).filter(|x| x.is_finite()),
            id,
        };
    }
    let digits: String = t
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_digit())
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    if !digits.is_empty() && digits.len() < 19 {
        if let Ok(n) = digits.parse::<u64>() {
            return Num {
                f: None,
                id: Some(n),
            };
        }
    }
    // FNV-1a
    let mut h: u64 = 0xcbf29ce484222325;
    for b in v {
        h ^= *b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    Num {
        f: None,
        id: Some(h | (1 << 63)),
    }
}
