//! The streaming reader of PyTorch profiler (Kineto / Chrome trace format) traces under `gpufeed
//! analyze`: [`reader::read_trace`] scans a trace of any size once, in bounded memory, and hands
//! each event it can use to an [`event::EventSink`] (gpufeed's `trace::collect` keeps what the
//! analysis needs). Events are read in place by a fast parser on `gpufeed-json`'s cursor where it
//! can be sure and by serde otherwise, with the same result; oversized and broken events are
//! counted, not fatal ([`event::ScanStats`]).
//!
//! A crate of its own: it knows nothing of the analysis above it, so the compiler holds that
//! border.

pub mod event;
mod fast;
pub mod reader;
mod serde_event;

/// Why a trace could not be read at all.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    #[error("the input is empty")]
    Empty,
    #[error("not a Kineto/Chrome trace ({0})")]
    NotATrace(String),
}
