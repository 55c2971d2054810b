//! Thin binary: parse, dispatch, map errors to exit codes (see `gpufeed::exit`).

use clap::Parser;
use gpufeed::exit::{self, Failure};
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = gpufeed::cli::Cli::parse();
    match gpufeed::commands::dispatch(cli) {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            let code = err
                .chain()
                .find_map(|e| e.downcast_ref::<Failure>().map(|f| f.code))
                .unwrap_or(exit::FAILURE);
            eprintln!("gpufeed: error: {err:#}");
            ExitCode::from(code)
        }
    }
}
