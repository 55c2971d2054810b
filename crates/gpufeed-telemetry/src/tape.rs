//! The readings of one pass over a log kept in a compact form, so that a second look at them
//! (diagnose finds a log's phases first, then judges the active ones) replays them from memory
//! instead of reading and parsing the file again.
//!
//! Each reading is a few bytes. A head byte says how it follows from the reading before: the same
//! fields or a new bitmask of them, the same GPU index, the next, the first of a poll or a new
//! one, the same time, one more step (the last difference), or a new difference in milliseconds.
//! Then each value, as a small integer where it is one (one byte for a whole number below 253, a
//! varint for a larger one or a whole number of thousandths), else its eight bytes. A steady log
//! of utilization alone takes two bytes a reading, a poll of 8 GPUs by nvidia-smi about 18.
//!
//! A time or value is stored that way only when the decoder's arithmetic gives back the very
//! same `f64`, so a replay hands on readings equal, bit for bit, to the ones pushed. The tape
//! holds at most its budget of bytes: a log too large for it is read a second time, as before
//! (`is_complete` says which).
//!
//! Both sides are written for speed (a 10M-row log is 10M readings through each): the encoder
//! writes into a chunk's zeroed bytes by index, with no growth check, and keeps the rare paths
//! out of line; the decoder overwrites only the values of a reading with the same fields as the
//! one before. `examples/tape_speed.rs` measures them.
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
    /// The chunk being filled: [`CHUNK`] zeroed bytes from its first reading on, of which the
    /// first `len` are written (it is cut to them when handed on).
    cur: Chunk,
    len: usize,
    last: Last,
    /// The time one more step makes: a reading at it needs no conversion of its time.
    next_t: f64,
}

/// Decodes the [`Chunk`]s of one [`Encoder`], in the order it made them.
#[derive(Debug, Default)]
pub struct Decoder {
    last: Last,
    /// The reading decoded last: a reading with the same mask overwrites only its values.
    r: Reading,
}

/// What both sides remember of the readings before: a reading that repeats it (the same fields,
/// the next GPU, the same step in time) says so in its head byte instead of spelling it out.
#[derive(Debug, Default)]
struct Last {
    mask: u16,
    index: u32,
    /// The last index written out: the GPU a poll of several starts from.
    first_index: u32,
    clock: Clock,
}

/// The time of the readings, as both sides keep it: the last time stored in thousandths of a
/// second, the last difference written out (the step of a log polled at a steady rate), and
/// the time in seconds they make.
///
/// While both are whole seconds they are also kept as seconds, and a step makes the time
/// with an integer conversion instead of a division (the division alone took longer than the
/// rest of a one-value reading). Both sides make it the same way: the encoder stores a step
/// only when what it makes is the reading's very time, so a replay's is too.
#[derive(Debug, Default)]
struct Clock {
    ms: i64,
    step_ms: i64,
    s: i64,
    step_s: i64,
    /// `ms` and `step_ms` are whole seconds, `s` and `step_s`.
    whole: bool,
    /// The time in seconds `ms` makes.
    now: f64,
}

impl Clock {
    /// The time a step past `now` makes (the clock unchanged).
    #[inline]
    fn after_step(&self) -> f64 {
        if self.whole {
            self.s.wrapping_add(self.step_s) as f64
        } else {
            self.ms.wrapping_add(self.step_ms) as f64 / 1000.0
        }
    }

    /// One step on, to the time `after_step` made.
    #[inline]
    fn step_to(&mut self, now: f64) {
        self.ms = self.ms.wrapping_add(self.step_ms);
        self.s = self.s.wrapping_add(self.step_s);
        self.now = now;
    }

    /// A step of `d` thousandths on, the step from now on.
    fn new_step(&mut self, d: i64) {
        self.step_ms = d;
        self.ms = self.ms.wrapping_add(d);
        self.whole = self.ms % 1000 == 0 && d % 1000 == 0;
        if self.whole {
            self.s = self.ms / 1000;
            self.step_s = d / 1000;
            self.now = self.s as f64;
        } else {
            (self.s, self.step_s) = (0, 0);
            self.now = self.ms as f64 / 1000.0;
        }
    }
}

/// The fields of a [`Reading`] besides its index and time, by their bit in a reading's mask
/// (stored in this order).
mod field {
    pub const UTIL: u32 = 0;
    pub const MEM_UTIL: u32 = 1;
    pub const MEM_USED: u32 = 2;
    pub const SM_CLOCK: u32 = 3;
    pub const POWER: u32 = 4;
    pub const TEMPERATURE: u32 = 5;
    pub const PCIE_RX: u32 = 6;
    pub const PCIE_TX: u32 = 7;
    pub const PCIE_RX_RATE: u32 = 8;
    pub const PCIE_TX_RATE: u32 = 9;
    pub const PCIE_GEN: u32 = 10;
    pub const PCIE_WIDTH: u32 = 11;
    pub const THROTTLE: u32 = 12;
}

/// A reading's first byte: how its time and index follow from the reading before, and whether
/// its mask does.
mod head {
    /// The time: the same as the one before, one more step, a new step (a zigzag varint of
    /// thousandths follows, the step from then on), or eight bytes (no whole number of
    /// thousandths); see [`super::Clock`].
    pub const TIME: u8 = 0b11;
    pub const T_SAME: u8 = 0;
    pub const T_STEP: u8 = 1;
    pub const T_NEW_STEP: u8 = 2;
    pub const T_RAW: u8 = 3;
    /// The index: the one before plus one, the same, the last one written out, or a varint.
    pub const INDEX: u8 = 0b11 << 2;
    pub const I_NEXT: u8 = 0;
    pub const I_SAME: u8 = 1 << 2;
    pub const I_FIRST: u8 = 2 << 2;
    pub const I_GIVEN: u8 = 3 << 2;
    /// A mask follows (a varint): the fields differ from the reading before's.
    pub const NEW_MASK: u8 = 1 << 4;
}

/// A value's first byte: below `WHOLE`, the value itself (a whole number 0..=252, most
/// percentages and temperatures); else how the rest of it is stored.
const WHOLE: u8 = 0xfd; // a zigzag varint follows
const MILLI: u8 = 0xfe; // a zigzag varint of thousandths follows
const RAW: u8 = 0xff; // its eight bytes follow

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
            len: 0,
            last: Last::default(),
            // What a step of none makes from a clock at 0.
            next_t: 0.0,
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
    // Inlined into the reading loop: a call's saving and restoring of registers was a fifth of
    // a one-value reading.
    #[inline]
    pub fn push(&mut self, r: &Reading) -> Option<Chunk> {
        // A chunk takes a reading only while it surely has room for it: it never grows.
        let full = if self.len + MAX_READING_BYTES > CHUNK || self.cur.bytes.is_empty() {
            self.next_chunk()
        } else {
            None
        };
        let mut w = Writer {
            out: &mut self.cur.bytes[self.len..self.len + MAX_READING_BYTES],
            at: 0,
        };
        self.last.encode(r, &mut w, &mut self.next_t);
        self.len += w.at;
        self.cur.readings += 1;
        full
    }

    /// The last chunk, unless it is empty.
    pub fn finish(mut self) -> Option<Chunk> {
        (!self.cur.is_empty()).then(|| self.take())
    }

    /// Starts a chunk; hands on the one before, if it was full. Out of line: once a chunk.
    #[cold]
    #[inline(never)]
    fn next_chunk(&mut self) -> Option<Chunk> {
        let full = (self.len + MAX_READING_BYTES > CHUNK).then(|| self.take());
        // Zeroed pages come from the system as they are touched, as a reserved buffer's do;
        // written by index, they need no capacity check a byte.
        self.cur.bytes = vec![0; CHUNK];
        full
    }

    /// The chunk being filled, cut to what was written (its capacity stays [`CHUNK`]).
    fn take(&mut self) -> Chunk {
        let mut c = std::mem::replace(&mut self.cur, Chunk::new());
        c.bytes.truncate(self.len);
        self.len = 0;
        c
    }
}

/// Which fields `r` has, a bit each.
fn mask_of(r: &Reading) -> u16 {
    let b = |some: bool, f: u32| u16::from(some) << f;
    b(r.util_pct.is_some(), field::UTIL)
        | b(r.mem_util_pct.is_some(), field::MEM_UTIL)
        | b(r.mem_used_bytes.is_some(), field::MEM_USED)
        | b(r.sm_clock_mhz.is_some(), field::SM_CLOCK)
        | b(r.power_w.is_some(), field::POWER)
        | b(r.temperature_c.is_some(), field::TEMPERATURE)
        | b(r.pcie_rx_bytes.is_some(), field::PCIE_RX)
        | b(r.pcie_tx_bytes.is_some(), field::PCIE_TX)
        | b(r.pcie_rx_bytes_per_s.is_some(), field::PCIE_RX_RATE)
        | b(r.pcie_tx_bytes_per_s.is_some(), field::PCIE_TX_RATE)
        | b(r.pcie_gen.is_some(), field::PCIE_GEN)
        | b(r.pcie_width.is_some(), field::PCIE_WIDTH)
        | b(r.throttle_reasons.is_some(), field::THROTTLE)
}

/// `t` as a whole number of thousandths of a second, where that is exact.
fn ms_of(t: f64) -> Option<i64> {
    // Whole seconds first: exact as thousandths, and cheaper to tell.
    whole(t)
        .filter(|i| i.unsigned_abs() < 1 << 40)
        .map(|i| i * 1000)
        .or_else(|| milli(t))
}

impl Last {
    /// Writes `r` into `w` (the head byte last, when all that follows it is known). The common
    /// case stays inline and short; what a steady log seldom needs is out of line.
    #[inline]
    fn encode(&mut self, r: &Reading, w: &mut Writer, next_t: &mut f64) {
        w.at = 1;
        let mut h = 0u8;
        let mask = mask_of(r);
        if mask != self.mask {
            h |= head::NEW_MASK;
            w.varint(u64::from(mask));
            self.mask = mask;
        }
        h |= if r.index == self.index {
            head::I_SAME
        } else if r.index == self.index.wrapping_add(1) {
            head::I_NEXT
        } else if r.index == self.first_index {
            head::I_FIRST
        } else {
            w.varint(u64::from(r.index));
            self.first_index = r.index;
            head::I_GIVEN
        };
        self.index = r.index;
        h |= self.time(r.t_s, w, next_t);
        w.values(r, mask);
        w.out[0] = h;
    }

    /// Writes what follows the head byte for time `t`; returns the head's time bits.
    #[inline]
    fn time(&mut self, t: f64, w: &mut Writer, next_t: &mut f64) -> u8 {
        let c = &mut self.clock;
        // The time the decoder makes of one more step, or of none, is the very time, bit for
        // bit: no conversion of `t` needed.
        if t.to_bits() == next_t.to_bits() {
            c.step_to(t);
            *next_t = c.after_step();
            return head::T_STEP;
        }
        if t.to_bits() == c.now.to_bits() {
            return head::T_SAME;
        }
        // A new step (even one of 0: the clock's time is not `t`'s, bit for bit, when its
        // thousandths wrapped around), which makes `t` itself: `ms_of` is exact.
        let Some(ms) = ms_of(t) else {
            w.raw(t);
            return head::T_RAW;
        };
        let d = ms.wrapping_sub(c.ms);
        w.varint(zigzag(d));
        c.new_step(d);
        debug_assert_eq!(c.now.to_bits(), t.to_bits(), "ms_of({t}) is exact");
        *next_t = c.after_step();
        head::T_NEW_STEP
    }
}

impl Decoder {
    /// Hands the readings of `c` to `visit`.
    pub fn read(&mut self, c: &Chunk, mut visit: impl FnMut(&Reading)) {
        let b = &c.bytes[..];
        let mut at = 0;
        while at < b.len() {
            at = self.next(b, at);
            visit(&self.r);
        }
    }

    /// Reads the reading at `at` into `self.r`; returns where the next one starts.
    // Inlined into `read`'s copies (one a visitor): a call a reading costs as much as a reading.
    #[inline]
    fn next(&mut self, b: &[u8], mut at: usize) -> usize {
        let h = b[at];
        at += 1;
        if h & head::NEW_MASK != 0 {
            self.last.mask = read_varint(b, &mut at) as u16;
            // The fields it lacks are `None`; those it has are all written below.
            self.r = Reading::default();
        }
        let last = &mut self.last;
        last.index = match h & head::INDEX {
            head::I_SAME => last.index,
            head::I_NEXT => last.index.wrapping_add(1),
            head::I_FIRST => last.first_index,
            _ => {
                last.first_index = read_varint(b, &mut at) as u32;
                last.first_index
            }
        };
        self.r.index = last.index;
        let t = h & head::TIME;
        let c = &mut last.clock;
        if t == head::T_STEP {
            c.step_to(c.after_step());
            self.r.t_s = c.now;
        } else if t == head::T_SAME {
            self.r.t_s = c.now;
        } else if t == head::T_NEW_STEP {
            c.new_step(unzigzag(read_varint(b, &mut at)));
            self.r.t_s = c.now;
        } else {
            self.r.t_s = read_raw(b, &mut at);
        }
        read_values(b, at, last.mask, &mut self.r)
    }
}

/// Reads the values of the fields in `mask` from `at` into `r`; returns where they end.
#[inline]
fn read_values(b: &[u8], mut at: usize, mask: u16, r: &mut Reading) -> usize {
    // A steady log's mask is the same reading after reading: each test goes the same way.
    let has = |f: u32| mask & (1 << f) != 0;
    if has(field::UTIL) {
        r.util_pct = Some(read_number(b, &mut at));
    }
    if mask == 1 << field::UTIL {
        return at;
    }
    if has(field::MEM_UTIL) {
        r.mem_util_pct = Some(read_number(b, &mut at));
    }
    if has(field::MEM_USED) {
        r.mem_used_bytes = Some(read_varint(b, &mut at));
    }
    if has(field::SM_CLOCK) {
        r.sm_clock_mhz = Some(read_varint(b, &mut at) as u32);
    }
    if has(field::POWER) {
        r.power_w = Some(read_number(b, &mut at));
    }
    if has(field::TEMPERATURE) {
        r.temperature_c = Some(read_varint(b, &mut at) as u32);
    }
    if mask >> field::PCIE_RX != 0 {
        if has(field::PCIE_RX) {
            r.pcie_rx_bytes = Some(read_varint(b, &mut at));
        }
        if has(field::PCIE_TX) {
            r.pcie_tx_bytes = Some(read_varint(b, &mut at));
        }
        if has(field::PCIE_RX_RATE) {
            r.pcie_rx_bytes_per_s = Some(read_number(b, &mut at));
        }
        if has(field::PCIE_TX_RATE) {
            r.pcie_tx_bytes_per_s = Some(read_number(b, &mut at));
        }
        if has(field::PCIE_GEN) {
            r.pcie_gen = Some(read_varint(b, &mut at) as u32);
        }
        if has(field::PCIE_WIDTH) {
            r.pcie_width = Some(read_varint(b, &mut at) as u32);
        }
        if has(field::THROTTLE) {
            r.throttle_reasons = Some(read_varint(b, &mut at));
        }
    }
    at
}

/// The most bytes one reading takes: its head, its mask (13 bits: 2 bytes), its index (a u32:
/// 5 bytes), its time (eight bytes, or a varint of at most 10) and 13 values, each at most a
/// 10-byte varint (a tag byte and eight bytes, or a tag and a zigzag varint of at most 54 bits:
/// 8 bytes).
const MAX_READING_BYTES: usize = 1 + 2 + 5 + 10 + 13 * 10;

/// Writes one reading into the room a chunk surely has for it ([`MAX_READING_BYTES`]).
struct Writer<'a> {
    out: &'a mut [u8],
    at: usize,
}

impl Writer<'_> {
    #[inline]
    fn byte(&mut self, b: u8) {
        self.out[self.at] = b;
        self.at += 1;
    }

    #[inline]
    fn varint(&mut self, v: u64) {
        if v < 0x80 {
            self.byte(v as u8);
        } else {
            self.at = long_varint(self.out, self.at, v);
        }
    }

    fn raw(&mut self, v: f64) {
        self.out[self.at..self.at + 8].copy_from_slice(&v.to_bits().to_le_bytes());
        self.at += 8;
    }

    /// A value as a small whole number (one byte), else as [`long_number`] has it.
    #[inline]
    fn number(&mut self, v: f64) {
        // Adding 2^52 + 2^51 leaves a whole number 0 <= v < 2^51 in the low bits of the sum
        // (it rounds anything else away): those bits are the byte when they are small and
        // taking the constant off gives back `v` itself, bit for bit (not -0.0, NaN or an
        // infinity). Fewer instructions than a saturating `as`, a reading's most common value.
        const SHIFT: f64 = 6_755_399_441_055_744.0;
        let sum = v + SHIFT;
        let small = sum.to_bits().wrapping_sub(SHIFT.to_bits());
        if small < u64::from(WHOLE) && (sum - SHIFT).to_bits() == v.to_bits() {
            self.byte(small as u8);
        } else {
            self.at = long_number(self.out, self.at, v);
        }
    }

    /// The values of the fields in `mask`, in their order.
    #[inline]
    fn values(&mut self, r: &Reading, mask: u16) {
        // The mask says which are there: the defaults are never taken.
        if let Some(v) = r.util_pct {
            self.number(v);
        }
        if mask != 1 << field::UTIL {
            self.at = more_values(self.out, self.at, r, mask);
        }
    }
}

/// The values of the fields in `mask` after the utilization, at `out[at..]`; returns where they
/// end. Out of line: a log of utilization alone needs none of it.
#[inline(never)]
fn more_values(out: &mut [u8], at: usize, r: &Reading, mask: u16) -> usize {
    let mut w = Writer { out, at };
    w.rest(r, mask);
    w.at
}

impl Writer<'_> {
    #[inline]
    fn rest(&mut self, r: &Reading, mask: u16) {
        let n = |w: &mut Self, v: Option<f64>| {
            if let Some(v) = v {
                w.number(v);
            }
        };
        let u = |w: &mut Self, v: Option<u64>| {
            if let Some(v) = v {
                w.varint(v);
            }
        };
        n(self, r.mem_util_pct);
        u(self, r.mem_used_bytes);
        u(self, r.sm_clock_mhz.map(u64::from));
        n(self, r.power_w);
        u(self, r.temperature_c.map(u64::from));
        if mask >> field::PCIE_RX != 0 {
            u(self, r.pcie_rx_bytes);
            u(self, r.pcie_tx_bytes);
            n(self, r.pcie_rx_bytes_per_s);
            n(self, r.pcie_tx_bytes_per_s);
            u(self, r.pcie_gen.map(u64::from));
            u(self, r.pcie_width.map(u64::from));
            u(self, r.throttle_reasons);
        }
    }
}

// What follows is out of line and takes the place to write at by value: a `Writer` handed to a
// call would keep its place in memory, a load and a store a byte on the common path.

/// `v` as a varint at `out[at..]`; returns where it ends.
#[inline(never)]
fn long_varint(out: &mut [u8], mut at: usize, mut v: u64) -> usize {
    while v >= 0x80 {
        out[at] = (v as u8) | 0x80;
        at += 1;
        v >>= 7;
    }
    out[at] = v as u8;
    at + 1
}

/// A value as a whole number, a whole number of thousandths, or its eight bytes (the first
/// form that decodes to the same bits) at `out[at..]`; returns where it ends.
#[inline(never)]
fn long_number(out: &mut [u8], at: usize, v: f64) -> usize {
    if let Some(i) = whole(v) {
        out[at] = WHOLE;
        long_varint(out, at + 1, zigzag(i))
    } else if let Some(k) = milli(v) {
        out[at] = MILLI;
        long_varint(out, at + 1, zigzag(k))
    } else {
        out[at] = RAW;
        out[at + 1..at + 9].copy_from_slice(&v.to_bits().to_le_bytes());
        at + 9
    }
}

/// `v` as an integer whose `as f64` is `v` itself, bit for bit (not -0.0), within 2^53 (its
/// zigzag varint at most 8 bytes).
fn whole(v: f64) -> Option<i64> {
    let i = v as i64;
    (v.abs() < EXACT_INT && (i as f64).to_bits() == v.to_bits()).then_some(i)
}

/// `v` as a count of thousandths `k` whose `k as f64 / 1000.0` is `v`, bit for bit, within
/// 2^53. The check is what makes it exact (the decoder does the same arithmetic): rounding by
/// adding a half is only the guess, and cheaper than `round`, a library call.
fn milli(v: f64) -> Option<i64> {
    let x = v * 1000.0;
    let k = (x + 0.5f64.copysign(x)) as i64;
    (k.unsigned_abs() < 1 << 53 && (k as f64 / 1000.0).to_bits() == v.to_bits()).then_some(k)
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

#[inline]
fn read_varint(b: &[u8], at: &mut usize) -> u64 {
    let byte = b[*at];
    *at += 1;
    if byte < 0x80 {
        u64::from(byte)
    } else {
        read_long_varint(b, at, byte)
    }
}

fn read_long_varint(b: &[u8], at: &mut usize, first: u8) -> u64 {
    let mut v = u64::from(first & 0x7f);
    let mut shift = 7;
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

#[inline]
fn read_number(b: &[u8], at: &mut usize) -> f64 {
    let tag = b[*at];
    *at += 1;
    if tag < WHOLE {
        f64::from(tag)
    } else {
        read_long_number(b, at, tag)
    }
}

fn read_long_number(b: &[u8], at: &mut usize, tag: u8) -> f64 {
    match tag {
        WHOLE => unzigzag(read_varint(b, at)) as f64,
        MILLI => unzigzag(read_varint(b, at)) as f64 / 1000.0,
        _ => read_raw(b, at),
    }
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

    fn bytes_used(t: &Tape) -> usize {
        t.chunks.iter().map(|c| c.bytes.len()).sum()
    }

    /// Back from a tape of `rs`, field by field, or the first reading that is not.
    fn round_trip(rs: &[Reading]) -> Result<(), String> {
        let back = replayed(&tape_of(1 << 30, rs));
        if back.len() != rs.len() {
            return Err(format!("{} readings came back of {}", back.len(), rs.len()));
        }
        match rs.iter().zip(&back).position(|(a, b)| !same(a, b)) {
            Some(i) => Err(format!(
                "reading {i}: {:?} came back as {:?}",
                rs[i], back[i]
            )),
            None => Ok(()),
        }
    }

    #[test]
    fn a_steady_log_of_utilization_takes_two_bytes_a_reading() {
        // A head byte (the same fields, GPU and step as before) and the value's byte.
        let rs: Vec<Reading> = (0..100_000u32)
            .map(|s| reading(0, f64::from(s) + 1_700_000_000.0, f64::from(s * 7 % 101)))
            .collect();
        let t = tape_of(64 << 20, &rs);
        assert!(
            bytes_used(&t) <= 2 * rs.len() + 16,
            "{} bytes",
            bytes_used(&t)
        );
        round_trip(&rs).unwrap();
    }

    /// The `i`-th reading of an nvidia-smi poll of 8 GPUs at 1 Hz.
    fn smi(i: u32) -> Reading {
        Reading {
            index: i % 8,
            t_s: f64::from(i / 8),
            util_pct: Some(f64::from(i * 7 % 101)),
            mem_util_pct: Some(f64::from(i * 3 % 60)),
            mem_used_bytes: Some(u64::from(30_000 + i % 8000) << 20),
            sm_clock_mhz: Some(1100 + i % 310),
            power_w: Some(f64::from(6_000 + i * 13 % 30_000) / 100.0),
            temperature_c: Some(35 + i % 45),
            pcie_gen: Some(4),
            pcie_width: Some(16),
            throttle_reasons: Some(if i % 5 == 0 { 4 } else { 0 }),
            ..Default::default()
        }
    }

    #[test]
    fn a_poll_of_8_gpus_takes_its_values_and_a_byte() {
        // The head byte says the fields, the GPU (the next, or the first again) and the time
        // (the same, or one more second); then at most 18 bytes of values: utilization,
        // memory utilization, temperature, PCIe generation and width and the throttle bits a
        // byte each, the clock 2, the power (hundredths) 4 and the memory used 6 (past 32 GiB).
        let rs: Vec<Reading> = (0..80_000).map(smi).collect();
        let t = tape_of(64 << 20, &rs);
        assert!(
            bytes_used(&t) <= 19 * rs.len() + 32,
            "{} bytes",
            bytes_used(&t)
        );
        round_trip(&rs).unwrap();
    }

    /// Readings as logs make them, in runs: polls of a few GPUs at a steady step (whole
    /// seconds, tenths, thousandths, times no whole number of thousandths, a step of none),
    /// from times near 0, of an epoch or past 2^40 s, each run with fields of its own and
    /// values of every kind, NaN and -0.0 included. `seed` picks them.
    fn runs(seed: u64, n: usize) -> Vec<Reading> {
        let mut x = seed | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut out = Vec::with_capacity(n);
        let mut t0 = 0.0;
        while out.len() < n {
            let len = (next() % 3000) as usize + 1;
            let gpus = (next() % 8 + 1) as u32;
            let first = [0, 0, 4, u32::MAX - 2, next() as u32][(next() % 5) as usize];
            let step = [1.0, 0.1, 0.001, 2.5, 1e-7, 0.0, -1.0, 0.25][(next() % 8) as usize];
            t0 = match next() % 6 {
                0 => 0.0,
                1 => 1_700_000_000.0,
                2 => 2f64.powi(41) + 0.5,
                3 => -3.0,
                _ => t0,
            };
            let mask = next() as u16 & 0x1fff;
            let kind = next() % 5;
            for i in 0..len {
                let k = next();
                let v = |k: u64| -> f64 {
                    match (kind + k) % 7 {
                        0 | 1 => (k % 101) as f64,
                        2 => (k % 100_000) as f64 / 100.0,
                        3 => (k % (1 << 40)) as f64,
                        4 => f64::from_bits(k),
                        5 => -0.0,
                        _ => f64::NAN,
                    }
                };
                let on = |f: u32| mask & (1 << f) != 0;
                let f = |f: u32, k: u64| on(f).then(|| v(k));
                let u = |f: u32, k: u64| on(f).then_some(k >> (k % 64));
                let w = |f: u32, k: u64| on(f).then_some((k >> (k % 32)) as u32);
                let mut t = t0 + (i as u32 / gpus) as f64 * step;
                if k % 997 == 0 {
                    t = [f64::NAN, -0.0, f64::INFINITY, 1e300][(k % 4) as usize];
                }
                out.push(Reading {
                    index: first.wrapping_add(i as u32 % gpus),
                    t_s: t,
                    util_pct: f(field::UTIL, k),
                    mem_util_pct: f(field::MEM_UTIL, k >> 3),
                    mem_used_bytes: u(field::MEM_USED, k >> 5),
                    sm_clock_mhz: w(field::SM_CLOCK, k >> 7),
                    power_w: f(field::POWER, k >> 11),
                    temperature_c: w(field::TEMPERATURE, k >> 13),
                    pcie_rx_bytes: u(field::PCIE_RX, k >> 17),
                    pcie_tx_bytes: u(field::PCIE_TX, k >> 19),
                    pcie_rx_bytes_per_s: f(field::PCIE_RX_RATE, k >> 23),
                    pcie_tx_bytes_per_s: f(field::PCIE_TX_RATE, k >> 29),
                    pcie_gen: w(field::PCIE_GEN, k >> 31),
                    pcie_width: w(field::PCIE_WIDTH, k >> 37),
                    throttle_reasons: u(field::THROTTLE, k >> 41),
                });
                if out.len() == n {
                    break;
                }
            }
            t0 += len as f64 * step;
        }
        out
    }

    #[test]
    fn runs_of_readings_come_back_across_chunks() {
        // Enough for several chunks: what a reading repeats of the one before crosses them.
        let rs = runs(0x5eed, 300_000);
        let t = tape_of(1 << 30, &rs);
        assert!(t.chunks.len() > 3, "{} chunks", t.chunks.len());
        round_trip(&rs).unwrap();
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
        fn runs_of_readings_come_back_as_they_were_pushed(seed in any::<u64>(), n in 0usize..4000) {
            let rs = runs(seed, n);
            prop_assert_eq!(round_trip(&rs), Ok(()));
        }

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
