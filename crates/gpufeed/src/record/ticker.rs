//! The schedule of the sampling threads (the recorder's, the Python sampler's, `live`'s).

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// Expensive readings (GPU process lists, PCIe throughput and link, context switches) run at most
/// this often.
pub(crate) const SLOW_EVERY: Duration = Duration::from_secs(1);

/// The schedule of a sampling thread: readings every `every` from `t0` (skipping missed ones
/// rather than bunching them), with a "slow" reading at most every `SLOW_EVERY`.
pub(crate) struct Ticker {
    t0: Instant,
    every: Duration,
    next: Instant,
    last_slow: Option<Instant>,
}

impl Ticker {
    pub(crate) fn new(t0: Instant, every: Duration) -> Self {
        Ticker {
            t0,
            every,
            next: t0,
            last_slow: None,
        }
    }

    /// Seconds since the start, and whether this reading is a slow one.
    pub(crate) fn now(&mut self) -> (f64, bool) {
        let now = Instant::now();
        let slow = self
            .last_slow
            .is_none_or(|t| now.duration_since(t) >= SLOW_EVERY);
        if slow {
            self.last_slow = Some(now);
        }
        (now.duration_since(self.t0).as_secs_f64(), slow)
    }

    /// Sleeps until the next reading or a stop message; true when asked to stop.
    pub(crate) fn wait(&mut self, stop: &Receiver<()>) -> bool {
        self.wait_ticks(1, stop)
    }

    /// Sleeps until the `n`th reading from now (`n` ≥ 1; the ones between are passed over by a
    /// caller that has nothing to read at them) or a stop message; true when asked to stop.
    pub(crate) fn wait_ticks(&mut self, n: u32, stop: &Receiver<()>) -> bool {
        self.next += self.every * n.max(1);
        let now = Instant::now();
        if self.next < now {
            self.next = now + self.every;
        }
        let timeout = self.next.saturating_duration_since(now);
        !matches!(stop.recv_timeout(timeout), Err(RecvTimeoutError::Timeout))
    }
}
