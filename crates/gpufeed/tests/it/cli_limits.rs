//! Command-line values at their limits through the real binary (issue 13, items 7–9): arguments
//! that are not UTF-8 pass through, knob values are substituted once, and every duration and size
//! option is bounded (exit 2 with a message, never a panic or an empty recording).

use crate::gpufeed;
use predicates::prelude::*;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

#[test]
fn non_utf8_arguments_reach_the_job_unchanged() {
    let d = tempfile::tempdir().unwrap();
    let got = d.path().join("got");
    let arg = OsStr::from_bytes(b"caf\xe9-\xff\xfe");
    gpufeed()
        .args(["run", "-q", "-o"])
        .arg(d.path().join("r.ndjson"))
        .args(["--", "sh", "-c", "printf %s \"$1\" > \"$2\"", "sh"])
        .arg(arg)
        .arg(&got)
        .assert()
        .success();
    assert_eq!(std::fs::read(&got).unwrap(), b"caf\xe9-\xff\xfe");
    // The program name itself may be non-UTF-8 too: not found is 127, not a usage error.
    gpufeed()
        .args(["run", "-q", "-o"])
        .arg(d.path().join("r2.ndjson"))
        .arg("--")
        .arg(OsStr::from_bytes(b"/no/such/\xff"))
        .assert()
        .code(127);
}

#[test]
fn knob_values_are_substituted_once() {
    let d = tempfile::tempdir().unwrap();
    let got = d.path().join("got");
    gpufeed()
        .args([
            "sweep",
            "-q",
            "--min-time",
            "0.2s",
            "--max-time",
            "2s",
            "--output-dir",
        ])
        .arg(d.path().join("s"))
        .args(["-L", "a", "{b}", "-L", "b", "INJ", "--", "sh", "-c"])
        .arg(format!("echo 'a={{a}} b={{b}}' >> {}", got.display()))
        .assert()
        .code(predicate::in_iter([0, 1]));
    assert_eq!(
        std::fs::read_to_string(&got).unwrap(),
        "a={b} b=INJ\n",
        "a value must not be searched for knob names again"
    );
}

#[test]
fn huge_durations_and_sizes_are_refused_with_exit_2() {
    let huge = "18446744073709551615s";
    let d = tempfile::tempdir().unwrap();
    let r = d.path().join("r.ndjson");
    // A one-trial sweep with `option` at the huge duration.
    let sweep = |option: &'static str| -> Vec<&OsStr> {
        ["sweep", option, huge, "-L", "w", "1", "--", "echo", "{w}"]
            .map(OsStr::new)
            .to_vec()
    };
    let cases: Vec<Vec<&OsStr>> = vec![
        vec![
            "run".as_ref(),
            "--interval".as_ref(),
            huge.as_ref(),
            "-o".as_ref(),
            r.as_os_str(),
            "--".as_ref(),
            "true".as_ref(),
        ],
        vec![
            "record".as_ref(),
            "--duration".as_ref(),
            huge.as_ref(),
            "-o".as_ref(),
            r.as_os_str(),
        ],
        vec![
            "record".as_ref(),
            "--interval".as_ref(),
            "1e300".as_ref(),
            "-o".as_ref(),
            r.as_os_str(),
        ],
        sweep("--interval"),
        sweep("--max-time"),
        vec![
            "serve".as_ref(),
            "--once".as_ref(),
            "--interval".as_ref(),
            huge.as_ref(),
        ],
        vec![
            "serve".as_ref(),
            "--once".as_ref(),
            "--window".as_ref(),
            huge.as_ref(),
        ],
        vec!["watch".as_ref(), "--interval".as_ref(), huge.as_ref()],
        vec![
            "doctor".as_ref(),
            "--data-sample".as_ref(),
            "18446744073709551615".as_ref(),
        ],
        vec![
            "diagnose".as_ref(),
            "--sample-interval".as_ref(),
            "1e300".as_ref(),
            r.as_os_str(),
        ],
    ];
    for args in cases {
        gpufeed()
            .args(&args)
            .timeout(std::time::Duration::from_secs(20))
            .assert()
            .code(2)
            .stderr(predicate::str::contains("panicked").not());
    }
    assert!(
        !r.exists(),
        "no recording may be left by a refused command line"
    );
}

#[test]
fn mostly_unreadable_input_is_bad_input() {
    // 2 MB of pseudo-random bytes (xorshift), read as an nvidia-smi log with --columns.
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("noise.csv");
    let mut x: u64 = 0x9E3779B97F4A7C15;
    let bytes: Vec<u8> = (0..2_000_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    std::fs::write(&f, bytes).unwrap();
    gpufeed()
        .args(["diagnose", "--columns", "utilization.gpu,memory.used"])
        .arg(&f)
        .assert()
        .code(3)
        // Random bytes are refused from their first bytes as binary data, before any row is read.
        .stderr(predicate::str::contains(
            "binary data, not a format gpufeed reads",
        ));
}
