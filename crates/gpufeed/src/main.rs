//! Thin binary: parse, dispatch, and turn an error into its message and exit code by walking
//! its chain ([`gpufeed::report`]).

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = gpufeed::Cli::parse();
    match gpufeed::dispatch(cli) {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            let (message, code) = gpufeed::report(&err);
            eprintln!("gpufeed: error: {message}");
            ExitCode::from(code)
        }
    }
}
