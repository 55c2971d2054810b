//! Exit codes: a public contract, documented in `--help` and the README.

/// Success. For `run`, the job's own exit code is returned instead.
pub const OK: u8 = 0;
/// An unexpected error (a bug or an OS failure gpufeed could not classify).
pub const FAILURE: u8 = 1;
/// Bad command line (unknown option, bad value): clap's own code.
pub const USAGE: u8 = 2;
/// Bad input: a file that is missing, unreadable, empty, truncated beyond use or of an unknown format.
pub const INPUT: u8 = 3;
/// A check failed (`doctor` found a failing check).
pub const CHECK_FAILED: u8 = 4;
/// A GPU (NVIDIA driver) is required for this command and none was found.
pub const NO_GPU: u8 = 5;
/// The command to run was found but could not be executed (permission, not a program).
pub const CANNOT_EXECUTE: u8 = 126;
/// The command to run was not found.
pub const NOT_FOUND: u8 = 127;
/// `run`: a job killed by signal N makes gpufeed exit with 128 + N, as a shell does.
pub const SIGNAL_BASE: u8 = 128;

/// The table printed in `--help` and the README.
pub const HELP_TABLE: &str = "\
EXIT CODES:
    0      success (for `run`: the job's own exit code is passed through)
    1      unexpected error
    2      bad command line (unknown option or bad value)
    3      bad input: missing, unreadable, empty or malformed file
    4      a check failed (doctor)
    5      a GPU is required and no NVIDIA driver was found
    126    the command to run could not be executed (permission, not a program)
    127    the command to run was not found
    128+N  the job was killed by signal N (for `run`)";

/// An error that carries its own exit code; modules' errors are turned into this at the command edge.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    pub fn new(code: u8, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
        }
    }
    pub fn input(message: impl Into<String>) -> Self {
        Self::new(INPUT, message)
    }
}
