//! gpufeed: find out why a GPU is starving during training, what to change, and measure the fix.
//!
//! Data flows one way: sources (`sample`, and `import` for other tools' GPU logs: the telemetry
//! engine's crate, `gpufeed_telemetry`) →
//! samples/events (`sample::event`) → timeline (`record`) or trace summary (`trace`) → evidence →
//! rules → findings (`finding`) → presenters (`present`). `tune`, `compare` and `live` sit above
//! the diagnosis they run or read; `bench` and `doctor` measure and check the machine.
//! `units` (the PCIe link table, byte and rate formats, rounding: the engine's, shared), `exit` (the exit-code table and
//! the one error that reaches `main`), `stats` (medians, intervals, the steady-state estimate) and `finding`
//! sit beneath every layer; `cli` declares the arguments, and `commands` (the top) runs them.
//!
//! Beneath them all, crates of their own: `gpufeed-json` (the one JSON byte cursor under the
//! recording's and the trace's fast readers) and `gpufeed-kineto` (the trace reader).
//!
//! The layering is tested (`layers.rs`): a table of which top-level module may import which, and
//! no cycle between the files of a folder.

// A `pub` item that nothing outside the crate can reach says `pub(crate)` (see the list below).
#![warn(unreachable_pub)]
// The docs are for contributors, built with `--document-private-items` (`.ci/run`): a public
// item's doc may link to the private layer it rests on.
#![allow(rustdoc::private_intra_doc_links)]

// The public surface, in one place: what the binary (`main.rs`), the integration tests
// (`tests/it`) and the fuzz targets (`fuzz/`) name. Everything else is private or `pub(crate)`:
// `unreachable_pub` flags a `pub` item nothing outside can reach, and
// `layers::public_modules_stay_few` holds the crate to at most 40 `pub mod`s. A module is public
// here only where its callers need many of its names, or names that would clash at the root.

// main.rs: parse the arguments, run the command, turn an error into its message and exit code.
pub use cli::Cli;
pub use commands::dispatch;
pub use exit::report;

// fuzz/fuzz_targets: the log and recording readers (the trace reader is `trace::analyze_reader`,
// the rules and verdict after them `diagnose::{evidence, rules, verdict}`).
pub use import::dcgmi::{read_dmon, Flavour};
pub use import::smi_csv::{read_smi_csv, CsvOptions};
pub use record::reader::read_from;

// tests/it: recordings written line by line and read back (record.rs, reports.rs, diagnose_*.rs,
// tensorboard.rs, watch.rs, bad_inputs.rs, main.rs), and the figures golden.rs builds reports of.
pub use finding::{Severity, WaitSource};
pub use record::format::{header_line, ReadError, ReadStats};
pub use record::reader::{read_path, Collect};
pub use record::summary::{summarize, Summary};
pub use sample::event::{
    End, EndReason, Header, Line, ProcsLine, PySamples, PyThreadCounts, StepsLine,
};
pub use sample::pyphase::Phase;
pub use sample::{DiskRate, GpuSample, GpuStatic, HostInfo, HostSample, ProcSample, ProcStart};
pub use stats::{Speedup, SpeedupMetric};
pub use units::pcie_link_bytes_per_s;

// tests/it/golden.rs renders every report in every format over fixed inputs, building each
// report by hand; analyze_*.rs run the trace rules; fuzz/ the diagnosis. Public submodules:
pub mod bench;
pub mod compare;
pub mod diagnose; // evidence, input, nodes, phases, rules, verdict
pub mod doctor;
pub mod present; // batch, bench, compare, diagnose, doctor, nodes, prometheus, sweep, sweep_chart, trace, tune
pub mod trace; // breakdown, families, ranks, report, rules
pub mod tune; // batch_plan, params, plan, report, sweep_report, trial

// The telemetry engine (crates/gpufeed-telemetry): the log readers as `import`, and the figure
// formats (`units`) it shares with every layer here.
use gpufeed_telemetry as import;
use gpufeed_telemetry::units;

// The rest of the crate, private.
mod cli;
mod commands;
mod exit;
mod finding;
mod inject;
mod job;
mod live;
mod outfile;
mod record;
mod sample;
mod stats;
mod tui;

#[cfg(test)]
mod layers;
