//! gpufeed: find out why a GPU is starving during training, what to change, and measure the fix.
//!
//! Data flows one way: sources (`sample`, and `import` for other tools' GPU logs) →
//! samples/events (`sample::event`) → timeline (`record`) or trace summary (`trace`) → evidence →
//! rules → findings (`finding`) → presenters (`present`). `tune`, `compare` and `live` sit above
//! the diagnosis they run or read; `bench` and `doctor` measure and check the machine.
//! `units` (the PCIe link table, byte and rate formats, rounding), `exit` (the exit-code table and
//! the one error that reaches `main`), `json` (the one JSON byte cursor under the recording's and
//! the trace's fast readers), `stats` (medians, intervals, the steady-state estimate) and `finding`
//! sit beneath every layer; `cli` declares the arguments, and `commands` (the top) runs them.
//!
//! The layering is tested (`layers.rs`): a table of which top-level module may import which, and
//! no cycle between the files of a folder.

pub mod bench;
pub mod cli;
pub mod commands;
pub mod compare;
pub mod diagnose;
pub mod doctor;
pub mod exit;
pub mod finding;
pub mod import;
pub mod inject;
pub mod job;
pub mod json;
pub mod live;
pub mod outfile;
pub mod present;
pub mod record;
pub mod sample;
pub mod stats;
pub mod trace;
pub mod tui;
pub mod tune;
pub mod units;

#[cfg(test)]
mod layers;
