//! How fast a tape encodes and decodes the two shapes diagnose sees most: a 10M-row
//! `timestamp,utilization.gpu` log (whole seconds, whole percent) and a day-and-more of
//! `nvidia-smi --query-gpu` polls of 8 GPUs at 1 Hz. Prints nanoseconds per reading for each side.
//!
//! `cargo run -p gpufeed-telemetry --release --example tape_speed [scale [util|smi]]` (scale 1
//! = 10M and 1M readings; a smaller one, e.g. 0.1, for a quick look; one shape alone).
//!
//! Each side is timed [`REPS`] times, in CPU time, and the fastest kept. The readings are made as they are encoded, as the reading thread makes them; the time the
//! making alone takes is measured apart and taken off the encoder's. The decoder is timed with a
//! light visitor, then checked untimed: every field of every reading must come back.

use std::hint::black_box;

use gpufeed_telemetry::reading::Reading;
use gpufeed_telemetry::tape::{Chunk, Decoder, Encoder};

/// Values that vary without a pattern a branch predictor learns (a fixed pseudo-random table).
fn table(seed: u64) -> Vec<u32> {
    let mut x = seed | 1;
    (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 32) as u32
        })
        .collect()
}

/// The `i`-th reading of a `timestamp,utilization.gpu` log.
fn util_only(r: &mut Reading, i: u64, noise: &[u32]) {
    r.t_s = i as f64;
    r.util_pct = Some(f64::from(noise[(i & 4095) as usize] % 101));
}

/// The `i`-th reading of an 8-GPU nvidia-smi poll at 1 Hz.
fn smi(r: &mut Reading, i: u64, noise: &[u32]) {
    let n = noise[(i & 4095) as usize];
    r.index = (i % 8) as u32;
    r.t_s = (i / 8) as f64;
    r.util_pct = Some(f64::from(n % 101));
    r.mem_util_pct = Some(f64::from((n >> 8) % 60));
    r.mem_used_bytes = Some((30_000 + u64::from((n >> 12) % 8000)) << 20);
    r.sm_clock_mhz = Some(1100 + (n >> 4) % 310);
    r.power_w = Some(f64::from(6_000 + (n >> 3) % 30_000) / 100.0);
    r.temperature_c = Some(35 + (n >> 16) % 45);
    r.pcie_gen = Some(4);
    r.pcie_width = Some(16);
    r.throttle_reasons = Some(if n & 0x300 == 0 { 4 } else { 0 });
}

fn smi_start() -> Reading {
    let mut r = Reading::default();
    smi(&mut r, 0, &[0]);
    r
}

/// Folds every field of `r` into `sum` (what the readings carry, to compare both sides).
fn fold(sum: &mut u64, r: &Reading) {
    let f = |v: Option<f64>| v.map_or(7, f64::to_bits);
    let u = |v: Option<u64>| v.unwrap_or(7);
    let w = |v: Option<u32>| v.map_or(7, u64::from);
    let mut h = *sum;
    for v in [
        u64::from(r.index),
        r.t_s.to_bits(),
        f(r.util_pct),
        f(r.mem_util_pct),
        u(r.mem_used_bytes),
        w(r.sm_clock_mhz),
        f(r.power_w),
        w(r.temperature_c),
        u(r.pcie_rx_bytes),
        u(r.pcie_tx_bytes),
        f(r.pcie_rx_bytes_per_s),
        f(r.pcie_tx_bytes_per_s),
        w(r.pcie_gen),
        w(r.pcie_width),
        u(r.throttle_reasons),
    ] {
        h = (h ^ v).wrapping_mul(0x100_0000_01b3);
    }
    *sum = h;
}

/// Nanoseconds this thread has run on a CPU (Linux's schedstat): the machine is shared, and
/// wall time would count the time others' work held the CPU. Wall time where it is not there.
struct Clock {
    wall: std::time::Instant,
    cpu: Option<u64>,
}

impl Clock {
    fn cpu_ns() -> Option<u64> {
        let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
        s.split_whitespace().next()?.parse().ok()
    }

    fn now() -> Clock {
        Clock {
            cpu: Clock::cpu_ns(),
            wall: std::time::Instant::now(),
        }
    }

    fn elapsed(&self) -> std::time::Duration {
        match (self.cpu, Clock::cpu_ns()) {
            (Some(a), Some(b)) => std::time::Duration::from_nanos(b - a),
            _ => self.wall.elapsed(),
        }
    }
}

/// Each side is timed this many times, the fastest kept: the machine is shared, and what
/// others run only ever adds time.
const REPS: usize = 5;

fn run(name: &str, n: u64, start: Reading, make: fn(&mut Reading, u64, &[u32])) {
    let noise = table(0x9e37_79b9_7f4a_7c15);

    // The making alone, with the checksum the decoder must give back.
    let mut r = start.clone();
    let mut want = 0u64;
    let mut make_ns = f64::INFINITY;
    for _ in 0..REPS {
        let t = Clock::now();
        for i in 0..n {
            make(&mut r, i, &noise);
            black_box(&r);
        }
        make_ns = make_ns.min(t.elapsed().as_nanos() as f64 / n as f64);
    }
    for i in 0..n {
        make(&mut r, i, &noise);
        fold(&mut want, &r);
    }

    // Every try's chunks are kept to the end, as a tape keeps them: each try writes to fresh
    // pages, as the reading thread does (not to ones a freed chunk left behind).
    let mut tries: Vec<Vec<Chunk>> = Vec::new();
    let mut push_ns = f64::INFINITY;
    for _ in 0..REPS {
        let mut r = start.clone();
        let mut chunks = Vec::new();
        let mut e = Encoder::default();
        let t = Clock::now();
        for i in 0..n {
            make(&mut r, i, &noise);
            if let Some(c) = e.push(black_box(&r)) {
                chunks.push(c);
            }
        }
        chunks.extend(e.finish());
        push_ns = push_ns.min(t.elapsed().as_nanos() as f64 / n as f64 - make_ns);
        tries.push(chunks);
    }
    let chunks = tries.pop().expect("a try");
    drop(tries);

    // Timed with a visitor as light as diagnose's lightest use (index, time, utilization)...
    let mut read_ns = f64::INFINITY;
    for _ in 0..REPS {
        let mut d = Decoder::default();
        let mut light = 0.0f64;
        let t = Clock::now();
        for c in &chunks {
            d.read(c, |r| {
                light += f64::from(r.index) + r.t_s + r.util_pct.unwrap_or(0.0);
            });
        }
        read_ns = read_ns.min(t.elapsed().as_nanos() as f64 / n as f64);
        black_box(light);
    }

    // ... and checked, untimed, field by field.
    let mut d = Decoder::default();
    let mut got = 0u64;
    let mut count = 0u64;
    for c in &chunks {
        d.read(c, |r| {
            count += 1;
            fold(&mut got, r);
        });
    }
    assert_eq!(count, n, "{name}: readings decoded");
    assert_eq!(
        got, want,
        "{name}: the decoded readings differ from the pushed ones"
    );
    println!(
        "{name:>10}: {n:>9} readings  push {push_ns:5.1} ns  read {read_ns:5.1} ns a reading  \
         ({} chunks; making a reading, {make_ns:.1} ns, taken off push)",
        chunks.len()
    );
}

fn main() {
    let scale: f64 = std::env::args()
        .nth(1)
        .map_or(1.0, |s| s.parse().expect("scale: a number, e.g. 0.1"));
    let only = std::env::args().nth(2);
    let n = |k: f64| (k * scale).max(1.0) as u64;
    if only.as_deref() != Some("smi") {
        run("util-only", n(10e6), Reading::default(), util_only);
    }
    if only.as_deref() != Some("util") {
        run("smi 8 GPU", n(1e6), smi_start(), smi);
    }
}
