//! Presenters: turn summaries and findings into bytes. They never open files or touch hardware:
//! the command layer (`crate::commands`) writes what they return (the test
//! `presenters_do_no_io` below holds every presenter module to that).

pub mod batch;
pub mod bench;
pub(crate) mod chart;
pub mod compare;
pub mod diagnose;
pub mod doctor;
pub(crate) mod end_summary;
pub(crate) mod fmt;
pub(crate) mod html;
pub mod nodes;
pub(crate) mod perfetto;
pub mod prometheus;
pub(crate) mod run;
pub mod sweep;
pub mod sweep_chart;
pub(crate) mod tensorboard;
pub(crate) mod tfevents;
pub mod trace;
pub mod tune;

/// The output formats of every `--format` option; each command takes the subset it can write
/// (see [`OutputFormat::parser`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum OutputFormat {
    #[default]
    Text,
    Json,
    Markdown,
    Html,
}

impl OutputFormat {
    /// Summaries: `run`, `record`, `doctor`, `bench`.
    pub const TEXT_JSON: &'static [OutputFormat] = &[OutputFormat::Text, OutputFormat::Json];
    /// Reports: `diagnose`, `analyze`, `sweep`, `batch-size`.
    pub const REPORTS: &'static [OutputFormat] = &[
        OutputFormat::Text,
        OutputFormat::Json,
        OutputFormat::Markdown,
    ];
    /// `compare`: every format.
    pub const ALL: &'static [OutputFormat] = &[
        OutputFormat::Text,
        OutputFormat::Json,
        OutputFormat::Markdown,
        OutputFormat::Html,
    ];

    /// A clap parser that takes only `allowed`, named as `--format` spells them.
    pub(crate) fn parser(
        allowed: &'static [OutputFormat],
    ) -> impl clap::builder::TypedValueParser<Value = OutputFormat> {
        use clap::builder::TypedValueParser;
        use clap::ValueEnum;
        clap::builder::PossibleValuesParser::new(
            allowed.iter().filter_map(|f| f.to_possible_value()),
        )
        .map(|s| OutputFormat::from_str(&s, false).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::OutputFormat;
    use clap::Parser;

    #[derive(Parser)]
    struct Args {
        #[arg(long, value_parser = OutputFormat::parser(OutputFormat::TEXT_JSON), default_value = "text")]
        format: OutputFormat,
    }

    #[test]
    fn a_format_subset_takes_only_its_formats() {
        let a = Args::try_parse_from(["x", "--format", "json"]).unwrap();
        assert_eq!(a.format, OutputFormat::Json);
        assert_eq!(
            Args::try_parse_from(["x"]).unwrap().format,
            OutputFormat::Text
        );
        let e = Args::try_parse_from(["x", "--format", "html"])
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("possible values: text, json"), "{e}");
    }

    #[test]
    fn byte_units() {
        assert_eq!(super::fmt::plural(1, "process", "processes"), "1 process");
        assert_eq!(super::fmt::plural(2, "process", "processes"), "2 processes");
    }

    /// Every presenter module: every file of this folder.
    fn presenter_sources() -> Vec<(String, String)> {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(src.join("present"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "rs"))
            .collect();
        files.sort();
        files
            .into_iter()
            .map(|p| {
                let text = std::fs::read_to_string(&p).unwrap();
                // The module's own code: its unit tests (this one included) may read fixtures.
                let code = text.split("#[cfg(test)]").next().unwrap_or_default();
                (
                    p.strip_prefix(&src).unwrap().display().to_string(),
                    code.to_string(),
                )
            })
            .collect()
    }

    /// Presenters take data and return bytes (or write to a `Write` they are handed); opening,
    /// creating or replacing files, and touching the GPU or other processes, is the commands'.
    /// Checked on the source text, like `commands::tests::cli_and_commands_import_one_way`.
    #[test]
    fn presenters_do_no_io() {
        const FORBIDDEN: &[&str] = &[
            "std::fs",
            "fs::",
            "File::",
            "::File",
            "OpenOptions",
            "outfile::",
            "std::process",
            "std::net",
            "nvml",
        ];
        let sources = presenter_sources();
        assert!(sources.len() >= 10, "found only {}", sources.len());
        for (name, text) in &sources {
            for (i, line) in text.lines().enumerate() {
                if line.trim_start().starts_with("//") {
                    continue;
                }
                for bad in FORBIDDEN {
                    assert!(
                        !line.contains(bad),
                        "src/{name}:{}: a presenter uses `{bad}`: return the bytes and let the \
                         command write them (outfile::write_report)",
                        i + 1
                    );
                }
            }
        }
    }

    /// Every `.rs` file under `dir` (relative to `src/`), recursively.
    fn rust_files(src: &std::path::Path, dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                rust_files(src, &p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p.strip_prefix(src).unwrap().to_path_buf());
            }
        }
    }

    /// Layers import downwards only: beneath `present/` (everything but `present/`, `commands/`,
    /// `cli` and `main.rs`) nothing takes from it. Shared formats live in `units`.
    #[test]
    fn lower_layers_do_not_import_present() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        rust_files(&src, &src, &mut files);
        let above = [
            "present/",
            "commands/",
            "cli/",
            "cli.rs",
            "main.rs",
            "lib.rs",
        ];
        for f in files {
            let name = f.display().to_string();
            if above.iter().any(|a| name.starts_with(a)) {
                continue;
            }
            let text = std::fs::read_to_string(src.join(&f)).unwrap();
            for (i, line) in text.lines().enumerate() {
                assert!(
                    !line.contains("crate::present"),
                    "src/{name}:{}: a lower layer imports present/: move the shared piece into \
                     units (or the layer's own types)",
                    i + 1
                );
            }
        }
    }
}
