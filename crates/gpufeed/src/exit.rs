//! Exit codes: a public contract. [`Exit`] is the one table: `--help` prints it, the README's
//! "Exit codes" section is tested against it, each code's meaning is written once (in
//! [`Exit::meaning`]), and every error reaches `main` as a [`Failure`] that names its `Exit`.

/// Every exit code gpufeed uses. What each means is written once, in [`Exit::meaning`]; its
/// number, in [`Exit::code`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Ok,
    Failure,
    Usage,
    Input,
    CheckFailed,
    NoGpu,
    CannotExecute,
    NotFound,
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

    /// The code of a job killed by `signal` (128 + N, as a shell reports it).
    pub const fn signal(signal: i32) -> u8 {
        Exit::Signal.code().wrapping_add(signal as u8)
    }

    /// The code as the table shows it (`128+N` for a signal).
    pub fn label(self) -> String {
        match self {
            Exit::Signal => format!("{}+N", self.code()),
            _ => self.code().to_string(),
        }
    }

    /// What the code means, for people (`--help` and the README show this text).
    pub(crate) const fn meaning(self) -> &'static str {
        match self {
            Exit::Ok => "success (for `run`: the job's own exit code is passed through)",
            Exit::Failure => "unexpected error",
            Exit::Usage => {
                "bad command line (unknown option or bad value, a value out of bounds, an \
                 existing `--output` without `--force`, an output that is an input or another \
                 output)"
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

/// Width `--help` is wrapped to (clap's default without a terminal).
const HELP_WIDTH: usize = 100;

/// The `EXIT CODES:` section of `--help`, generated from [`Exit`]; long meanings wrap under
/// their own column, within the width clap wraps help to.
pub(crate) fn help_table() -> String {
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

/// What a module's error type says about how gpufeed ends when it reaches `main`: each error
/// type names its [`Exit`] here, next to its variants, and [`Failure::from`] keeps it with the
/// error itself.
pub trait HasExit {
    fn exit(&self) -> Exit;
}

/// The error that reaches `main`: the [`Exit`] it ends in, and the error itself (its cause).
/// It shows the message of `source` and hands on `source`'s own causes, so `main` finds the
/// exit code and the message by walking one chain ([`report`]).
#[derive(Debug)]
pub struct Failure {
    pub exit: Exit,
    pub source: Box<dyn std::error::Error + Send + Sync + 'static>,
}

impl Failure {
    /// A failure described by `message` alone.
    pub fn new(exit: Exit, message: impl Into<String>) -> Self {
        Failure {
            exit,
            source: message.into().into(),
        }
    }
    /// Bad input ([`Exit::Input`]) described by `message`.
    pub fn input(message: impl Into<String>) -> Self {
        Self::new(Exit::Input, message)
    }
    /// `source`, ending in `exit` whatever its type says (the command knows better).
    pub fn with(exit: Exit, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        Failure {
            exit,
            source: Box::new(source),
        }
    }
    /// The process exit code.
    pub fn code(&self) -> u8 {
        self.exit.code()
    }
}

impl<E: HasExit + std::error::Error + Send + Sync + 'static> From<E> for Failure {
    fn from(e: E) -> Self {
        Failure::with(e.exit(), e)
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.source.fmt(f)
    }
}

impl std::error::Error for Failure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.source()
    }
}

/// What `main` prints and exits with for `err`: the messages of its chain joined by `: ` (as
/// `{err:#}` shows them), up to the first [`Failure`], whose [`Exit`] gives the code; a chain
/// without one is [`Exit::Failure`]. A `Failure`'s own message already says its cause (module
/// errors put it in their text), so the causes under it are kept for a debugger, not printed twice.
pub fn report(err: &anyhow::Error) -> (String, u8) {
    let mut message = String::new();
    for cause in err.chain() {
        if !message.is_empty() {
            message.push_str(": ");
        }
        message.push_str(&cause.to_string());
        if let Some(f) = cause.downcast_ref::<Failure>() {
            return (message, f.code());
        }
    }
    (message, Exit::Failure.code())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The README's table rows (`| code | meaning |`), generated from [`Exit`].
    fn markdown_rows() -> Vec<String> {
        Exit::ALL
            .iter()
            .map(|e| format!("| {} | {} |", e.label(), e.meaning()))
            .collect()
    }

    #[test]
    fn codes_are_distinct_and_ordered() {
        for w in Exit::ALL.windows(2) {
            assert!(w[0].code() < w[1].code(), "{w:?}");
        }
        assert_eq!(Exit::signal(9), 137);
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
