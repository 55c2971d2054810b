//! Thin binary: parse, dispatch, and turn an error into its message and exit code by walking
//! its chain ([`gpufeed::exit::report`]).

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = gpufeed::cli::Cli::parse();
    match gpufeed::commands::dispatch(cli) {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            let (message, code) = gpufeed::exit::report(&err);
            eprintln!("gpufeed: error: {message}");
            ExitCode::from(code)
        }
    }
}
