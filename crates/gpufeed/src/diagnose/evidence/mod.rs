//! Evidence: derived statistics computed by streaming over a recording's lines.
//!
//! [`EvidenceBuilder`] ([`builder`]) takes one line at a time and keeps only running sums, fixed
//! histograms and fixed-size buffers ([`acc`], and [`pyloop`] for the Python stacks and step
//! markers), so memory does not grow with the recording's length (per-process state grows with
//! the number of processes, not with time). [`EvidenceBuilder::finish`] turns them into an
//! [`Evidence`] ([`types`], [`python`]) that the rules read.

pub mod acc;
pub mod builder;
pub mod pyloop;
pub mod python;
pub mod types;

pub use builder::EvidenceBuilder;
pub use python::*;
pub use types::*;
