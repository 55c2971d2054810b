//! Exit codes: a public contract. [`Exit`] is the one table: `--help` prints it, the README's
//! "Exit codes" section is tested against it, and the constants below are read from it.

/// Every exit code gpufeed uses, with its meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Success. For `run`, the job's own exit code is returned instead.
    Ok,
    /// An unexpected error (a bug or an OS failure gpufeed could not classify).
    Failure,
    /// Bad command line (unknown option, bad value): clap's own code.
    Usage,
    /// Bad input: a file that is missing, unreadable, empty, truncated beyond use or of an
    /// unknown format.
    Input,
    /// A check failed (`doctor` found a failing check).
    CheckFailed,
    /// A GPU (NVIDIA driver) is required for this command and none was found.
    NoGpu,
    /// The command to run was found but could not be executed (permission, not a program).
    CannotExecute,
    /// The command to run was not found.
    NotFound,
    /// `run`: a job killed by signal N makes gpufeed exit with 128 + N, as a shell does.
    Signal,
}

impl Exit {
    /// The table, in the order it is printed.
    pub const ALL: [Exit; 9] = [
        Exit::Ok,
        Exit::Failure,
        Exit::Usage,
        Exit::Input,
        Exit::CheckFailed,
        Exit::NoGpu,
        Exit::CannotExecute,
        Exit::NotFound,
        Exit::Signal,
    ];

    /// The code (for [`Exit::Signal`], the base the signal number is added to).
    pub const fn code(self) -> u8 {
        match self {
            Exit::Ok => 0,
            Exit::Failure => 1,
            Exit::Usage => 2,
            Exit::Input => 3,
            Exit::CheckFailed => 4,
            Exit::NoGpu => 5,
            Exit::CannotExecute => 126,
            Exit::NotFound => 127,
            Exit::Signal => 128,
        }
    }

    /// The code as the table shows it (`128+N` for a signal).
    pub fn label(self) -> String {
        match self {
            Exit::Signal => format!("{}+N", self.code()),
            _ => self.code().to_string(),
        }
    }

    /// What the code means, for people (`--help` and the README show this text).
    pub const fn meaning(self) -> &'static str {
        match self {
            Exit::Ok => "success (for `run`: the job's own exit code is passed through)",
            Exit::Failure => "unexpected error",
            Exit::Usage => {
                "bad command line (unknown option or bad value, a value out of bounds, an \
                 existing `--output` without `--force`, an output that is an input)"
            }
            Exit::Input => "bad input: missing, unreadable, empty or malformed file; no such pid",
            Exit::CheckFailed => "a check failed (doctor)",
            Exit::NoGpu => "a GPU is required and no NVIDIA driver was found",
            Exit::CannotExecute => {
                "the command to run could not be executed (permission, not a program)"
            }
            Exit::NotFound => "the command to run was not found",
            Exit::Signal => "the job was killed by signal N (`run`)",
        }
    }
}

/// Success. For `run`, the job's own exit code is returned instead.
pub const OK: u8 = Exit::Ok.code();
/// An unexpected error (a bug or an OS failure gpufeed could not classify).
pub const FAILURE: u8 = Exit::Failure.code();
/// Bad command line (unknown option, bad value): clap's own code.
pub const USAGE: u8 = Exit::Usage.code();
/// Bad input: a file that is missing, unreadable, empty, truncated beyond use or of an unknown format.
pub const INPUT: u8 = Exit::Input.code();
/// A check failed (`doctor` found a failing check).
pub const CHECK_FAILED: u8 = Exit::CheckFailed.code();
/// A GPU (NVIDIA driver) is required for this command and none was found.
pub const NO_GPU: u8 = Exit::NoGpu.code();
/// The command to run was found but could not be executed (permission, not a program).
pub const CANNOT_EXECUTE: u8 = Exit::CannotExecute.code();
/// The command to run was not found.
pub const NOT_FOUND: u8 = Exit::NotFound.code();
/// `run`: a job killed by signal N makes gpufeed exit with 128 + N, as a shell does.
pub const SIGNAL_BASE: u8 = Exit::Signal.code();

/// Width `--help` is wrapped to (clap's default without a terminal).
const HELP_WIDTH: usize = 100;

/// The `EXIT CODES:` section of `--help`, generated from [`Exit`]; long meanings wrap under
/// their own column, within the width clap wraps help to.
pub fn help_table() -> String {
    const INDENT: &str = "           ";
    let mut s = String::from("EXIT CODES:\n");
    for e in Exit::ALL {
        let mut line = format!("    {:<6}", e.label());
        for word in e.meaning().split(' ') {
            if line.len() + 1 + word.len() >= HELP_WIDTH {
                s.push_str(&line);
                s.push('\n');
                line = format!("{INDENT}{word}");
            } else {
                line.push(' ');
                line.push_str(word);
            }
        }
        s.push_str(&line);
        s.push('\n');
    }
    s
}

/// The README's table rows (`| code | meaning |`), generated from [`Exit`].
pub fn markdown_rows() -> Vec<String> {
    Exit::ALL
        .iter()
        .map(|e| format!("| {} | {} |", e.label(), e.meaning()))
        .collect()
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_and_ordered() {
        for w in Exit::ALL.windows(2) {
            assert!(w[0].code() < w[1].code(), "{w:?}");
        }
        assert_eq!(SIGNAL_BASE + 9, 137);
    }

    #[test]
    fn the_readme_section_is_the_table() {
        let readme = include_str!("../../../README.md");
        let section = readme
            .split("\n## Exit codes\n")
            .nth(1)
            .expect("README has an `## Exit codes` section");
        let section = section.split("\n## ").next().unwrap_or(section);
        let rows: Vec<String> = section
            .lines()
            .filter(|l| l.starts_with("| ") && !l.starts_with("| code"))
            .map(str::to_string)
            .collect();
        assert_eq!(
            rows,
            markdown_rows(),
            "README's exit-code table differs from gpufeed::exit::Exit: fix one of them"
        );
    }

    #[test]
    fn help_prints_the_table() {
        use clap::CommandFactory;
        let help = crate::cli::Cli::command().render_long_help().to_string();
        assert!(help.contains(&help_table()), "{help}");
        // The commands' own exit notes name only codes of the table.
        let mut cmd = crate::cli::Cli::command();
        for sub in cmd.get_subcommands_mut() {
            let text = sub.render_long_help().to_string();
            let Some(part) = text.split("EXIT CODES:\n").nth(1) else {
                continue;
            };
            for line in part.lines().take_while(|l| l.starts_with("    ")) {
                let label = line.split_whitespace().next().unwrap_or("");
                assert!(
                    Exit::ALL.iter().any(|e| e.label() == label),
                    "`gpufeed {} --help` names exit code {label}, which is not in the table",
                    sub.get_name()
                );
            }
        }
    }
}
