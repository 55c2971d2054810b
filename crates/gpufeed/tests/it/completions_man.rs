//! `gpufeed completions SHELL` and `gpufeed man` through the real binary: the scripts are loaded
//! into the real shells (bash, zsh, fish; each skips loudly when absent) and asked to complete,
//! and the man page is rendered by groff with warnings on.

use crate::gpufeed;
use crate::which;
use std::io::Write as _;
use std::path::{Path, PathBuf};

fn generate(args: &[&str]) -> String {
    let out = gpufeed().args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}: {out:?}");
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn skip(what: &str) {
    let _ = writeln!(std::io::stderr(), "SKIPPED: {what}");
}

fn script_file(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

/// Runs a program; returns stdout, failing the test on a non-zero exit or stderr output.
fn shell(prog: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new(prog)
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{prog:?} {args:?}: {stderr}");
    assert!(stderr.trim().is_empty(), "{prog:?} {args:?}: {stderr}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn bash_completes_subcommands_and_option_values() {
    let script = generate(&["completions", "bash"]);
    let Some(bash) = which("bash") else {
        return skip("bash not on PATH: bash completion not loaded");
    };
    let dir = tempfile::tempdir().unwrap();
    let f = script_file(dir.path(), "gpufeed.bash", &script);
    let complete = |words: &str| {
        shell(
            &bash,
            &[
                "-c",
                &format!(
                    "source {f}; COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}}-1)); \
                     COMP_LINE=\"${{COMP_WORDS[*]}}\"; COMP_POINT=${{#COMP_LINE}}; \
                     _gpufeed gpufeed \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
                    f = f.display()
                ),
            ],
        )
    };
    let subs = complete("gpufeed ''");
    for sub in ["run", "sweep", "batch-size", "completions", "man", "doctor"] {
        assert!(subs.lines().any(|l| l == sub), "no {sub} in {subs}");
    }
    let shells = complete("gpufeed completions ''");
    for sh in ["bash", "zsh", "fish", "powershell"] {
        assert!(shells.lines().any(|l| l == sh), "no {sh} in {shells}");
    }
    let formats = complete("gpufeed doctor --format ''");
    assert!(formats.lines().any(|l| l == "json"), "{formats}");
}

#[test]
fn zsh_script_parses() {
    let script = generate(&["completions", "zsh"]);
    assert!(script.starts_with("#compdef gpufeed"), "{}", &script[..40]);
    let Some(zsh) = which("zsh") else {
        return skip("zsh not on PATH: zsh completion not parsed");
    };
    let dir = tempfile::tempdir().unwrap();
    let f = script_file(dir.path(), "_gpufeed", &script);
    shell(&zsh, &["-n", f.to_str().unwrap()]);
}

#[test]
fn fish_completes_subcommands() {
    let script = generate(&["completions", "fish"]);
    let Some(fish) = which("fish") else {
        return skip("fish not on PATH: fish completion not loaded");
    };
    let dir = tempfile::tempdir().unwrap();
    let f = script_file(dir.path(), "gpufeed.fish", &script);
    let got = shell(
        &fish,
        &[
            "--no-config",
            "-c",
            &format!("source {}; complete -C 'gpufeed batch'", f.display()),
        ],
    );
    assert!(got.starts_with("batch-size"), "{got}");
}

#[test]
fn powershell_script_registers_a_completer() {
    let script = generate(&["completions", "powershell"]);
    assert!(
        script.contains("Register-ArgumentCompleter -Native -CommandName 'gpufeed'"),
        "{script}"
    );
    assert!(script.contains("'batch-size'"));
    if which("pwsh").is_none() {
        skip("pwsh not on PATH: the PowerShell completion was checked as text only");
    }
}

#[test]
fn unknown_shell_is_a_usage_error() {
    let out = gpufeed().args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("possible values"), "{err}");
}

#[test]
fn man_page_renders_without_warnings() {
    let page = generate(&["man"]);
    assert!(page.contains(".TH gpufeed 1"), "{}", &page[..200]);
    let Some(groff) = which("groff") else {
        return skip("groff not on PATH: the man page was checked as text only");
    };
    let dir = tempfile::tempdir().unwrap();
    let f = script_file(dir.path(), "gpufeed.1", &page);
    let text = shell(
        &groff,
        &["-man", "-Tutf8", "-ww", "-P-cbou", f.to_str().unwrap()],
    );
    for heading in ["NAME", "SYNOPSIS", "SUBCOMMANDS", "EXIT CODES", "VERSION"] {
        assert!(text.contains(heading), "no {heading} in\n{text}");
    }
    assert!(text.contains("gpufeed-batch-size(1)"), "{text}");
}

#[test]
fn man_subcommand_page_and_unknown_name() {
    let page = generate(&["man", "batch-size"]);
    assert!(
        page.contains(".TH gpufeed-batch-size 1"),
        "{}",
        &page[..200]
    );
    let out = gpufeed().args(["man", "batchsize"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("no subcommand 'batchsize'") && err.contains("batch-size"),
        "{err}"
    );
}

/// Issue 39 item 11: `tune --help` named its folder `gpufeed-sweep-…` (the help of the options
/// sweep, tune and batch-size share); each names the folder it really makes.
#[test]
fn each_command_names_its_own_output_folder() {
    for (cmd, prefix) in [
        ("sweep", "gpufeed-sweep-"),
        ("tune", "gpufeed-tune-"),
        ("batch-size", "gpufeed-batch-size-"),
    ] {
        let out = crate::run_ok(crate::gpufeed().args([cmd, "--help"]));
        let help = String::from_utf8(out.stdout).unwrap();
        let line = help
            .split("--output-dir")
            .nth(1)
            .unwrap_or_else(|| panic!("{cmd}: no --output-dir in\n{help}"));
        let line: String = line
            .split("\n      -")
            .next()
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        assert!(line.contains(prefix), "{cmd}: {line}");
        for other in ["gpufeed-sweep-", "gpufeed-tune-", "gpufeed-batch-size-"] {
            assert!(other == prefix || !line.contains(other), "{cmd}: {line}");
        }
    }
}
