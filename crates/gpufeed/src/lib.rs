//! gpufeed: find out why a GPU is starving during training, what to change, and measure the fix.
//!
//! Data flows one way: sources (`sample`) → samples/events (`sample::event`) → timeline
//! (`record`) or trace summary (`trace`) → evidence → rules → findings (`finding`) → presenters
//! (`present`).
//! `units` (the PCIe link table, byte and rate formats), `exit` (the exit-code table) and `json`
//! (the one JSON byte cursor under the recording's and the trace's fast readers) sit beneath every
//! layer and import nothing from the others; `cli` declares the arguments, and `commands` (the top) runs them.

pub mod cli;
pub mod commands;
pub mod compare;
pub mod diagnose;
pub mod doctor;
pub mod exit;
pub mod finding;
pub mod inject;
pub mod job;
pub mod json;
pub mod live;
pub mod outfile;
pub mod present;
pub mod record;
pub mod sample;
pub mod trace;
pub mod tui;
pub mod tune;
pub mod units;
