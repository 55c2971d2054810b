//! The readings of one pass over a log kept in a compact form, so that a second look at them
//! (diagnose finds a log's phases first, then judges the active ones) replays them from memory
//! instead of reading and parsing the file again.
//!
//! Each reading is a few bytes: which fields it has (a bitmask), its GPU index, its time as a
//! difference in milliseconds from the reading before, and each value as a small integer where it
//! is one (a whole number, or a whole number of thousandths), else its eight bytes. A value is
//! stored that way only when the decoder's arithmetic gives back the very same `f64`, so a replay
//! hands on readings equal, bit for bit, to the ones pushed. The tape holds at most its budget
//! of bytes: a log too large for it is read a second time, as before (`is_complete` says which).
//!
//! Hand-written rather than a crate: the general-purpose encoders (bincode, postcard) write an
//! `f64` as its eight bytes, which would make a 10M-row log's tape larger than the file; the
//! integer and thousandths forms are what make it small, and they are a few lines.

use crate::reading::Reading;

/// Bytes of one chunk: the tape grows a chunk at a time, never by copying what it holds.
const CHUNK: usize = 1 << 20;

/// The readings of one pass, encoded; see the module's documentation.
#[derive(Debug)]
pub struct Tape {
    chunks: Vec<Chunk>,
    budget_bytes: usize,
    held_bytes: usize,
    /// A chunk did not fit in the budget: the tape was dropped and takes no more.
    overflowed: bool,
    readings: u64,
}

/// Readings encoded one after the other, about [`CHUNK`] bytes of them: what an [`Encoder`]
/// hands on (to a [`Tape`], or from a reading thread to the one that uses them).
#[derive(Debug)]
pub struct Chunk {
    bytes: Vec<u8>,
    readings: u64,
}

/// Encodes readings into [`Chunk`]s.
#[derive(Debug)]
pub struct Encoder {
    cur: Chunk,
    /// The last time stored in thousandths of a second (the next one is a difference from it).
    prev_ms: i64,
}

/// Decodes the [`Chunk`]s of one [`Encoder`], in the order it made them.
#[derive(Debug, Default)]
pub struct Decoder {
    prev_ms: i64,
}

/// The fields of a [`Reading`] besides its index and time, one bit each in a reading's mask.
mod bit {
    pub const UTIL: u16 = 1;
    pub const MEM_UTIL: u16 = 1 << 1;
    pub const MEM_USED: u16 = 1 << 2;
    pub const SM_CLOCK: u16 = 1 << 3;
    pub const POWER: u16 = 1 << 4;
    pub const TEMPERATURE: u16 = 1 << 5;
    pub const PCIE_RX: u16 = 1 << 6;
    pub const PCIE_TX: u16 = 1 << 7;
    pub const PCIE_RX_RATE: u16 = 1 << 8;
    pub const PCIE_TX_RATE: u16 = 1 << 9;
    pub const PCIE_GEN: u16 = 1 << 10;
    pub const PCIE_WIDTH: u16 = 1 << 11;
    pub const THROTTLE: u16 = 1 << 12;
    /// The time is stored as its eight bytes (it is no whole number of thousandths).
    pub const RAW_TIME: u16 = 1 << 13;
}

/// How a value is stored: the low two bits of its first varint.
const WHOLE: u64 = 0;
const MILLI: u64 = 1;
const RAW: u64 = 2;

/// The largest magnitude stored as an integer: beyond it an `i64` round trip is not exact.
const EXACT_INT: f64 = 9_007_199_254_740_992.0; // 2^53

impl Tape {
    /// An empty tape that holds at most `budget_bytes` (counted in whole chunks).
    pub fn with_budget(budget_bytes: usize) -> Tape {
        Tape {
            chunks: Vec::new(),
            budget_bytes,
            held_bytes: 0,
            overflowed: false,
            readings: 0,
        }
    }

    /// Every reading kept is on the tape (no chunk was dropped for the budget).
    pub fn is_complete(&self) -> bool {
        !self.overflowed
    }

    /// Readings on the tape.
    pub fn len(&self) -> u64 {
        self.readings
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the tape holds (its chunks' capacity).
    pub fn held_bytes(&self) -> usize {
        self.held_bytes
    }

    /// Adds the next chunk of one [`Encoder`] (a reading thread's), in the order it made them;
    /// past the budget the tape is dropped and this and later chunks are not kept.
    pub fn keep(&mut self, c: Chunk) {
        if self.overflowed || self.held_bytes + c.bytes.capacity() > self.budget_bytes {
            self.overflowed = true;
            self.chunks = Vec::new();
            self.held_bytes = 0;
            self.readings = 0;
            return;
        }
        self.held_bytes += c.bytes.capacity();
        self.readings += c.readings;
        self.chunks.push(c);
    }

    /// Hands every reading on the tape to `visit`, in the order encoded. Nothing when the tape
    /// overflowed (check [`Tape::is_complete`] first).
    pub fn replay(&self, mut visit: impl FnMut(&Reading)) {
        let mut d = Decoder::default();
        for c in &self.chunks {
            d.read(c, &mut visit);
        }
    }
}

impl Default for Encoder {
    fn default() -> Self {
        Encoder {
            cur: Chunk::new(),
            prev_ms: 0,
        }
    }
}

impl Chunk {
    /// An empty chunk; its bytes are allocated with its first reading.
    fn new() -> Chunk {
        Chunk {
            bytes: Vec::new(),
            readings: 0,
        }
    }

    /// Readings in it.
    pub fn len(&self) -> u64 {
        self.readings
    }

    pub fn is_empty(&self) -> bool {
        self.readings == 0
    }
}

impl Encoder {
    /// Encodes one reading; hands on the chunk it filled, if it filled one.
    pub fn push(&mut self, r: &Reading) -> Option<Chunk> {
        // A chunk takes a reading only while it surely has room for it: it never grows.
        let full = (self.cur.bytes.len() + MAX_READING_BYTES > CHUNK)
            .then(|| std::mem::replace(&mut self.cur, Chunk::new()));
        if self.cur.bytes.capacity() == 0 {
            self.cur.bytes.reserve_exact(CHUNK);
        }
        let mut bytes = std::mem::take(&mut self.cur.bytes);
        self.encode(r, &mut Writer { out: &mut bytes });
        self.cur.bytes = bytes;
        self.cur.readings += 1;
        full
    }

    /// The last chunk, unless it is empty.
    pub fn finish(self) -> Option<Chunk> {
        (!self.cur.is_empty()).then_some(self.cur)
    }

    fn encode(&mut self, r: &Reading, w: &mut Writer) {
        let mut mask = 0u16;
        let opts = [
            (r.util_pct.is_some(), bit::UTIL),
            (r.mem_util_pct.is_some(), bit::MEM_UTIL),
            (r.mem_used_bytes.is_some(), bit::MEM_USED),
            (r.sm_clock_mhz.is_some(), bit::SM_CLOCK),
            (r.power_w.is_some(), bit::POWER),
            (r.temperature_c.is_some(), bit::TEMPERATURE),
            (r.pcie_rx_bytes.is_some(), bit::PCIE_RX),
            (r.pcie_tx_bytes.is_some(), bit::PCIE_TX),
            (r.pcie_rx_bytes_per_s.is_some(), bit::PCIE_RX_RATE),
            (r.pcie_tx_bytes_per_s.is_some(), bit::PCIE_TX_RATE),
            (r.pcie_gen.is_some(), bit::PCIE_GEN),
            (r.pcie_width.is_some(), bit::PCIE_WIDTH),
            (r.throttle_reasons.is_some(), bit::THROTTLE),
        ];
        for (some, b) in opts {
            if some {
                mask |= b;
            }
        }
        // Whole seconds first: exact as thousandths, and cheaper to tell.
        let ms = whole(r.t_s)
            .filter(|i| i.unsigned_abs() < 1 << 40)
            .map(|i| i * 1000)
            .or_else(|| milli(r.t_s));
        if ms.is_none() {
            mask |= bit::RAW_TIME;
        }
        w.varint(u64::from(mask));
        w.varint(u64::from(r.index));
        match ms {
            Some(k) => {
                w.varint(zigzag(k.wrapping_sub(self.prev_ms)));
                self.prev_ms = k;
            }
            None => w.raw(r.t_s),
        }
        let f = |w: &mut Writer, v: Option<f64>| {
            if let Some(v) = v {
                w.number(v);
            }
        };
        let u = |w: &mut Writer, v: Option<u64>| {
            if let Some(v) = v {
                w.varint(v);
            }
        };
        f(w, r.util_pct);
        f(w, r.mem_util_pct);
        u(w, r.mem_used_bytes);
        u(w, r.sm_clock_mhz.map(u64::from));
        f(w, r.power_w);
        u(w, r.temperature_c.map(u64::from));
        u(w, r.pcie_rx_bytes);
        u(w, r.pcie_tx_bytes);
        f(w, r.pcie_rx_bytes_per_s);
        f(w, r.pcie_tx_bytes_per_s);
        u(w, r.pcie_gen.map(u64::from));
        u(w, r.pcie_width.map(u64::from));
        u(w, r.throttle_reasons);
    }
}

impl Decoder {
    /// Hands the readings of `c` to `visit`.
    pub fn read(&mut self, c: &Chunk, mut visit: impl FnMut(&Reading)) {
        let mut r = Reading::default();
        let mut at = 0;
        while at < c.bytes.len() {
            at = decode(&c.bytes, at, &mut self.prev_ms, &mut r);
            visit(&r);
        }
    }
}

/// The most bytes one reading takes: mask, index, time and 13 values, each at most a 10-byte
/// varint (a raw value: a 1-byte tag and 8 bytes).
const MAX_READING_BYTES: usize = 16 * 10;

struct Writer<'a> {
    out: &'a mut Vec<u8>,
}

impl Writer<'_> {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.out.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.out.push(v as u8);
    }

    fn raw(&mut self, v: f64) {
        self.out.extend_from_slice(&v.to_bits().to_le_bytes());
    }

    /// A value as a whole number, a whole number of thousandths, or its eight bytes: the first
    /// form that decodes to the same bits.
    fn number(&mut self, v: f64) {
        if let Some(i) = whole(v) {
            self.varint(zigzag(i) << 2 | WHOLE);
        } else if let Some(k) = milli(v) {
            self.varint(zigzag(k) << 2 | MILLI);
        } else {
            self.varint(RAW);
            self.raw(v);
        }
    }
}

/// `v` as an integer whose `as f64` is `v` itself, bit for bit (not -0.0, not beyond 2^53).
fn whole(v: f64) -> Option<i64> {
    let i = v as i64;
    (v.abs() < EXACT_INT && (i as f64).to_bits() == v.to_bits()).then_some(i)
}

/// `v` as a count of thousandths `k` whose `k as f64 / 1000.0` is `v`, bit for bit.
fn milli(v: f64) -> Option<i64> {
    let k = (v * 1000.0).round();
    if k.is_nan() || k.abs() >= EXACT_INT {
        return None;
    }
    let k = k as i64;
    ((k as f64 / 1000.0).to_bits() == v.to_bits()).then_some(k)
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn read_varint(b: &[u8], at: &mut usize) -> u64 {
    let mut v = 0u64;
    let mut shift = 0;
    loop {
        let byte = b[*at];
        *at += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return v;
        }
        shift += 7;
    }
}

fn read_raw(b: &[u8], at: &mut usize) -> f64 {
    let bytes: [u8; 8] = b[*at..*at + 8].try_into().expect("8 bytes");
    *at += 8;
    f64::from_bits(u64::from_le_bytes(bytes))
}

fn read_number(b: &[u8], at: &mut usize) -> f64 {
    let v = read_varint(b, at);
    match v & 3 {
        WHOLE => unzigzag(v >> 2) as f64,
        MILLI => unzigzag(v >> 2) as f64 / 1000.0,
        _ => read_raw(b, at),
    }
}

/// Reads the reading at `at` into `r`; returns where the next one starts.
fn decode(b: &[u8], mut at: usize, prev_ms: &mut i64, r: &mut Reading) -> usize {
    let mask = read_varint(b, &mut at) as u16;
    r.index = read_varint(b, &mut at) as u32;
    r.t_s = if mask & bit::RAW_TIME != 0 {
        read_raw(b, &mut at)
    } else {
        *prev_ms = prev_ms.wrapping_add(unzigzag(read_varint(b, &mut at)));
        *prev_ms as f64 / 1000.0
    };
    let has = |m: u16| mask & m != 0;
    let mut f = |m: u16| has(m).then(|| read_number(b, &mut at));
    r.util_pct = f(bit::UTIL);
    r.mem_util_pct = f(bit::MEM_UTIL);
    let mut u = |m: u16| has(m).then(|| read_varint(b, &mut at));
    r.mem_used_bytes = u(bit::MEM_USED);
    r.sm_clock_mhz = u(bit::SM_CLOCK).map(|v| v as u32);
    r.power_w = has(bit::POWER).then(|| read_number(b, &mut at));
    let mut u = |m: u16| has(m).then(|| read_varint(b, &mut at));
    r.temperature_c = u(bit::TEMPERATURE).map(|v| v as u32);
    r.pcie_rx_bytes = u(bit::PCIE_RX);
    r.pcie_tx_bytes = u(bit::PCIE_TX);
    let mut f = |m: u16| has(m).then(|| read_number(b, &mut at));
    r.pcie_rx_bytes_per_s = f(bit::PCIE_RX_RATE);
    r.pcie_tx_bytes_per_s = f(bit::PCIE_TX_RATE);
    let mut u = |m: u16| has(m).then(|| read_varint(b, &mut at));
    r.pcie_gen = u(bit::PCIE_GEN).map(|v| v as u32);
    r.pcie_width = u(bit::PCIE_WIDTH).map(|v| v as u32);
    r.throttle_reasons = u(bit::THROTTLE);
    at
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn reading(i: u32, t: f64, util: f64) -> Reading {
        Reading {
            index: i,
            t_s: t,
            util_pct: Some(util),
            ..Default::default()
        }
    }

    fn replayed(t: &Tape) -> Vec<Reading> {
        let mut out = Vec::new();
        t.replay(|r| out.push(r.clone()));
        out
    }

    /// A tape of `rs`, through an encoder's chunks as the reading thread makes them.
    fn tape_of<'a>(budget: usize, rs: impl IntoIterator<Item = &'a Reading>) -> Tape {
        let mut t = Tape::with_budget(budget);
        let mut e = Encoder::default();
        for r in rs {
            if let Some(c) = e.push(r) {
                t.keep(c);
            }
        }
        if let Some(c) = e.finish() {
            t.keep(c);
        }
        t
    }

    /// Readings equal field by field, floats compared by their bits (NaN and -0.0 included).
    fn same(a: &Reading, b: &Reading) -> bool {
        let f = |x: Option<f64>, y: Option<f64>| x.map(f64::to_bits) == y.map(f64::to_bits);
        a.index == b.index
            && a.t_s.to_bits() == b.t_s.to_bits()
            && f(a.util_pct, b.util_pct)
            && f(a.mem_util_pct, b.mem_util_pct)
            && a.mem_used_bytes == b.mem_used_bytes
            && a.sm_clock_mhz == b.sm_clock_mhz
            && f(a.power_w, b.power_w)
            && a.temperature_c == b.temperature_c
            && a.pcie_rx_bytes == b.pcie_rx_bytes
            && a.pcie_tx_bytes == b.pcie_tx_bytes
            && f(a.pcie_rx_bytes_per_s, b.pcie_rx_bytes_per_s)
            && f(a.pcie_tx_bytes_per_s, b.pcie_tx_bytes_per_s)
            && a.pcie_gen == b.pcie_gen
            && a.pcie_width == b.pcie_width
            && a.throttle_reasons == b.throttle_reasons
    }

    #[test]
    fn a_log_of_whole_seconds_takes_a_few_bytes_a_reading() {
        let rs: Vec<Reading> = (0..100_000u32)
            .map(|s| reading(0, f64::from(s), f64::from(s % 101)))
            .collect();
        let t = tape_of(64 << 20, &rs);
        assert!(t.is_complete());
        assert_eq!(t.len(), 100_000);
        let used: usize = t.chunks.iter().map(|c| c.bytes.len()).sum();
        assert!(used <= 6 * 100_000, "{used} bytes");
        let back = replayed(&t);
        assert_eq!(back.len(), 100_000);
        assert!(back
            .iter()
            .enumerate()
            .all(|(s, r)| same(r, &reading(0, s as f64, (s % 101) as f64))));
    }

    #[test]
    fn odd_values_come_back_bit_for_bit() {
        let odd = [
            0.1 + 0.2,
            -0.0,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            1e300,
            -1.5e-300,
            9_007_199_254_740_993.0,
            3600.123,
            1706659200.123 - 1706659200.0,
        ];
        let mut pushed = Vec::new();
        for (i, &v) in odd.iter().enumerate() {
            let r = Reading {
                index: i as u32,
                t_s: v,
                util_pct: Some(v),
                power_w: Some(-v),
                pcie_rx_bytes_per_s: Some(v * 3.0),
                mem_used_bytes: Some(u64::MAX),
                throttle_reasons: Some(0x8000_0000_0000_0001),
                sm_clock_mhz: Some(u32::MAX),
                ..Default::default()
            };
            pushed.push(r);
        }
        let back = replayed(&tape_of(1 << 20, &pushed));
        assert_eq!(back.len(), pushed.len());
        for (a, b) in pushed.iter().zip(&back) {
            assert!(same(a, b), "{a:?} came back as {b:?}");
        }
    }

    #[test]
    fn past_its_budget_the_tape_is_dropped_and_says_so() {
        let rs: Vec<Reading> = (0..1_000_000u32)
            .map(|s| reading(s % 8, f64::from(s) * 0.1 + 1e-7, 50.5))
            .collect();
        let t = tape_of(CHUNK, &rs);
        assert!(!t.is_complete());
        assert_eq!(t.held_bytes(), 0);
        assert!(replayed(&t).is_empty());
    }

    fn any_f64() -> impl Strategy<Value = f64> {
        prop_oneof![
            any::<f64>(),
            (0u32..100_000).prop_map(f64::from),
            (0i64..10_000_000).prop_map(|k| k as f64 / 1000.0),
            (0.0f64..1e7),
        ]
    }

    fn any_reading() -> impl Strategy<Value = Reading> {
        (
            (any::<u32>(), any_f64(), proptest::option::of(any_f64())),
            (
                proptest::option::of(any_f64()),
                proptest::option::of(any::<u64>()),
                proptest::option::of(any::<u32>()),
                proptest::option::of(any_f64()),
                proptest::option::of(any::<u32>()),
            ),
            (
                proptest::option::of(any::<u64>()),
                proptest::option::of(any::<u64>()),
                proptest::option::of(any_f64()),
                proptest::option::of(any_f64()),
                proptest::option::of(any::<u32>()),
                proptest::option::of(any::<u32>()),
                proptest::option::of(any::<u64>()),
            ),
        )
            .prop_map(|((index, t_s, util_pct), a, b)| Reading {
                index,
                t_s,
                util_pct,
                mem_util_pct: a.0,
                mem_used_bytes: a.1,
                sm_clock_mhz: a.2,
                power_w: a.3,
                temperature_c: a.4,
                pcie_rx_bytes: b.0,
                pcie_tx_bytes: b.1,
                pcie_rx_bytes_per_s: b.2,
                pcie_tx_bytes_per_s: b.3,
                pcie_gen: b.4,
                pcie_width: b.5,
                throttle_reasons: b.6,
            })
    }

    proptest! {
        #[test]
        fn every_reading_comes_back_as_it_was_pushed(rs in proptest::collection::vec(any_reading(), 0..200)) {
            let back = replayed(&tape_of(64 << 20, &rs));
            prop_assert_eq!(back.len(), rs.len());
            for (a, b) in rs.iter().zip(&back) {
                prop_assert!(same(a, b), "{:?} came back as {:?}", a, b);
            }
        }
    }
}
