//! Output files through the real binary (issue 13, items 1–5): nothing lost, nothing overwritten
//! without `--force`, no symlink followed, no output written over an input, unique default names,
//! unfinished recordings labelled.

use crate::{gpufeed, gpufeed_no_gpu};
use predicates::prelude::*;
use std::os::unix::fs::symlink;
use std::path::Path;

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap()
}

/// A short real recording at `out`.
fn record(out: &Path) {
    gpufeed()
        .args(["run", "-q", "--interval", "20ms", "-o"])
        .arg(out)
        .args(["--", "sleep", "0.3"])
        .assert()
        .success();
}

#[test]
fn an_existing_recording_is_kept_without_force() {
    let d = tempfile::tempdir().unwrap();
    let keep = d.path().join("keep.ndjson");
    std::fs::write(&keep, "precious\n").unwrap();
    let marker = d.path().join("ran");
    gpufeed()
        .args(["run", "-q", "-o"])
        .arg(&keep)
        .args(["--", "touch"])
        .arg(&marker)
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("already exists").and(predicate::str::contains("--force")),
        );
    assert_eq!(read(&keep), "precious\n");
    assert!(
        !marker.exists(),
        "the job must not run when its recording is refused"
    );
    gpufeed()
        .args(["record", "-q", "--duration", "100ms", "-o"])
        .arg(&keep)
        .assert()
        .code(2);
    assert_eq!(read(&keep), "precious\n");
}

#[test]
fn a_failed_start_leaves_an_existing_file_alone_even_with_force() {
    let d = tempfile::tempdir().unwrap();
    let keep = d.path().join("keep.ndjson");
    std::fs::write(&keep, "precious\n").unwrap();
    gpufeed()
        .args(["run", "-q", "--force", "-o"])
        .arg(&keep)
        .args(["--", "/no/such/cmd"])
        .assert()
        .code(127);
    assert_eq!(read(&keep), "precious\n");
    // Nothing else left behind (no temporary file).
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
    // With --force and a job that starts, the recording replaces it.
    gpufeed()
        .args(["run", "-q", "--force", "-o"])
        .arg(&keep)
        .args(["--", "true"])
        .assert()
        .success();
    assert!(read(&keep).starts_with("{\"type\":\"header\""));
}

#[test]
fn a_failed_start_leaves_no_file() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("r.ndjson");
    gpufeed()
        .args(["run", "-q", "-o"])
        .arg(&out)
        .args(["--", "/no/such/cmd"])
        .assert()
        .code(127);
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
}

#[test]
fn symlinks_at_outputs_are_never_followed() {
    let d = tempfile::tempdir().unwrap();
    let victim = d.path().join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let link = d.path().join("link.ndjson");
    symlink(&victim, &link).unwrap();
    // Without --force: a symlink is an existing file.
    gpufeed()
        .args(["run", "-q", "-o"])
        .arg(&link)
        .args(["--", "true"])
        .assert()
        .code(2);
    // With --force: the link itself is replaced.
    gpufeed()
        .args(["run", "-q", "--force", "-o"])
        .arg(&link)
        .args(["--", "true"])
        .assert()
        .success();
    assert_eq!(read(&victim), "precious\n");
    assert!(!std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    // Reports: --html and --perfetto replace a planted link, never write through it.
    let html = d.path().join("r.html");
    symlink(&victim, &html).unwrap();
    gpufeed()
        .args(["diagnose", "--html"])
        .arg(&html)
        .arg(&link)
        .assert()
        .success();
    let pf = d.path().join("p.json");
    symlink(&victim, &pf).unwrap();
    gpufeed()
        .args(["export", "--perfetto"])
        .arg(&pf)
        .arg(&link)
        .assert()
        .success();
    assert_eq!(read(&victim), "precious\n");
    assert!(read(&html).contains("<html"));
    assert!(read(&pf).contains("traceEvents"));
    // No temporary file left over.
    let names: Vec<String> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names
            .iter()
            .all(|n| !n.contains(".part") && !n.ends_with(".tmp")),
        "{names:?}"
    );
}

#[test]
fn an_output_that_is_an_input_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let r = d.path().join("r.ndjson");
    record(&r);
    let before = read(&r);
    let hard = d.path().join("same-inode.json");
    std::fs::hard_link(&r, &hard).unwrap();
    for args in [
        vec!["export", "--perfetto", "R", "R"],
        vec!["export", "--perfetto", "H", "R"],
        vec!["diagnose", "--html", "R", "R"],
        vec!["diagnose", "--html", "H", "R"],
        vec!["diagnose", "--export-json", "R", "R"],
        vec!["diagnose", "--export-json", "H", "R"],
        vec!["compare", "--export-json", "H", "R", "R"],
        vec!["compare", "--html", "R", "H", "R"],
    ] {
        let args: Vec<&std::ffi::OsStr> = args
            .iter()
            .map(|a| match *a {
                "R" => r.as_os_str(),
                "H" => hard.as_os_str(),
                a => std::ffi::OsStr::new(a),
            })
            .collect();
        gpufeed()
            .args(&args)
            .assert()
            .code(2)
            .stderr(predicate::str::contains("same file as the input"));
        assert_eq!(read(&r), before, "{args:?}");
    }
    let o = d.path().join("o");
    for flag in ["--html", "--export-json"] {
        gpufeed()
            .args(["run", "-q", "-o"])
            .arg(&o)
            .arg(flag)
            .arg(&o)
            .args(["--", "true"])
            .assert()
            .code(2)
            .stderr(predicate::str::contains("the same file"));
        assert!(!o.exists(), "{flag}");
    }
}

#[test]
fn default_names_do_not_collide() {
    let d = tempfile::tempdir().unwrap();
    // Four runs started together in one folder: four recordings, each with one header.
    let children: Vec<_> = (0..4)
        .map(|_| {
            std::process::Command::new(assert_cmd::cargo::cargo_bin("gpufeed"))
                .current_dir(d.path())
                .env_remove("GPUFEED_NVML_LIB")
                .args(["run", "-q", "--", "sleep", "0.3"])
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let mut names: Vec<String> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names.len(), 4, "{names:?}");
    // Default names are compressed (`.ndjson.zst`, suffixed before the extensions).
    let re = regex::Regex::new(r"^gpufeed-\d{8}-\d{6}-\d{3}(-\d+)?\.ndjson\.zst$").unwrap();
    for n in &names {
        assert!(re.is_match(n), "{n}");
        let bytes = std::fs::read(d.path().join(n)).unwrap();
        let text = String::from_utf8(zstd::stream::decode_all(&bytes[..]).unwrap()).unwrap();
        assert_eq!(text.matches("\"type\":\"header\"").count(), 1, "{n}");
        assert_eq!(text.matches("\"type\":\"end\"").count(), 1, "{n}");
    }
}

#[test]
fn an_unfinished_recording_says_so_in_text() {
    let d = tempfile::tempdir().unwrap();
    let r = d.path().join("r.ndjson");
    record(&r);
    // As a SIGKILLed recorder leaves it: no end line.
    let cut: String = read(&r)
        .lines()
        .filter(|l| !l.contains("\"type\":\"end\""))
        .map(|l| format!("{l}\n"))
        .collect();
    let u = d.path().join("u.ndjson");
    std::fs::write(&u, cut).unwrap();
    gpufeed()
        .args(["diagnose", "--color", "never"])
        .arg(&u)
        .assert()
        .success()
        .stdout(predicate::str::contains("unfinished"));
    gpufeed()
        .args(["diagnose", "--color", "never"])
        .arg(&r)
        .assert()
        .success()
        .stdout(predicate::str::contains("unfinished").not());
}

#[test]
fn zstd_recordings_are_read_by_every_command_and_junk_is_refused_at_once() {
    let d = tempfile::tempdir().unwrap();
    let z = d.path().join("r.ndjson.zst");
    gpufeed()
        .args(["run", "-q", "--interval", "50ms", "-o"])
        .arg(&z)
        .args(["--", "sleep", "0.4"])
        .assert()
        .success();
    let bytes = std::fs::read(&z).unwrap();
    assert_eq!(&bytes[..4], &[0x28, 0xb5, 0x2f, 0xfd], "zstd frames");
    // Detected by its first bytes, not its name.
    let renamed = d.path().join("renamed.ndjson");
    std::fs::copy(&z, &renamed).unwrap();
    for f in [&z, &renamed] {
        gpufeed()
            .args(["diagnose", "--format", "json"])
            .arg(f)
            .assert()
            .success()
            .stdout(predicate::str::contains("\"format\": \"recording\""));
    }
    let out = d.path().join("t.json");
    gpufeed()
        .args(["export", "--perfetto"])
        .arg(&out)
        .arg(&z)
        .assert()
        .success();
    assert!(read(&out).contains("\"traceEvents\":["));
    // /dev/zero: refused from its first bytes, one line, exit 3, nothing written.
    let zero = d.path().join("zero.json");
    gpufeed()
        .args(["export", "--perfetto"])
        .arg(&zero)
        .arg("/dev/zero")
        .timeout(std::time::Duration::from_secs(20))
        .assert()
        .code(3)
        .stderr(
            predicate::str::contains("not a gpufeed recording").and(predicate::function(
                |s: &str| s.trim_end().lines().count() == 1,
            )),
        );
    assert!(!zero.exists());
}

#[test]
fn a_folder_as_output_and_a_symlinked_output_dir_are_refused_before_the_job_starts() {
    let d = tempfile::tempdir().unwrap();
    let ran = d.path().join("ran");
    let job = format!("touch {}", ran.display());
    // `run -o DIR --force`: exit 2 before the job starts (it used to run unrecorded).
    gpufeed()
        .args(["run", "-q", "--force", "-o"])
        .arg(d.path())
        .args(["--", "sh", "-c", &job])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("is a folder"));
    assert!(!ran.exists());
    // `--output-dir LINK`: refused, not followed.
    let real = d.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = d.path().join("link");
    symlink(&real, &link).unwrap();
    gpufeed()
        .args(["sweep", "-L", "workers", "1", "--output-dir"])
        .arg(&link)
        .args(["--", "sh", "-c", &job, "{workers}"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("is a symlink"));
    assert!(!ran.exists());
    assert_eq!(std::fs::read_dir(&real).unwrap().count(), 0);
}

/// Issue 39 item 9: two outputs of one command at one path are refused (exit 2) before anything
/// is written or run, by every command, as `diagnose` did; an output folder's own report may share
/// its path with the option that writes the same bytes.
#[test]
fn two_outputs_at_one_path_are_refused_by_every_command() {
    let d = tempfile::tempdir().unwrap();
    let r = d.path().join("r.ndjson");
    record(&r);
    let t = d.path().join("t.json");
    std::fs::write(&t, "{}").unwrap();
    let x = d.path().join("x.out");
    let out = d.path().join("out");
    let tune_json = out.join("tune.json");
    let sweep_json = out.join("sweep.json");
    let job = ["--", "sh", "-c", "touch ran # {w}"];
    let cases: Vec<Vec<&std::ffi::OsStr>> = vec![
        vec![
            "analyze".as_ref(),
            "--html".as_ref(),
            x.as_ref(),
            "--export-json".as_ref(),
            x.as_ref(),
            t.as_ref(),
        ],
        vec![
            "compare".as_ref(),
            "--html".as_ref(),
            x.as_ref(),
            "--export-json".as_ref(),
            x.as_ref(),
            r.as_ref(),
            r.as_ref(),
        ],
        vec![
            "run".as_ref(),
            "-q".as_ref(),
            "--html".as_ref(),
            x.as_ref(),
            "--export-json".as_ref(),
            x.as_ref(),
        ],
        vec![
            "run".as_ref(),
            "-q".as_ref(),
            "--tensorboard".as_ref(),
            x.as_ref(),
            "-o".as_ref(),
            x.as_ref(),
        ],
        vec![
            "sweep".as_ref(),
            "-L".as_ref(),
            "w".as_ref(),
            "1".as_ref(),
            "--export-csv".as_ref(),
            x.as_ref(),
            "--export-json".as_ref(),
            x.as_ref(),
        ],
        vec![
            "sweep".as_ref(),
            "-L".as_ref(),
            "w".as_ref(),
            "1".as_ref(),
            "--export-markdown".as_ref(),
            x.as_ref(),
            "--html".as_ref(),
            x.as_ref(),
        ],
        vec![
            "sweep".as_ref(),
            "-L".as_ref(),
            "w".as_ref(),
            "1".as_ref(),
            "--output-dir".as_ref(),
            out.as_ref(),
            "--export-csv".as_ref(),
            sweep_json.as_ref(),
        ],
        vec![
            "tune".as_ref(),
            "--html".as_ref(),
            x.as_ref(),
            "--export-json".as_ref(),
            x.as_ref(),
        ],
        vec![
            "tune".as_ref(),
            "--output-dir".as_ref(),
            out.as_ref(),
            "--html".as_ref(),
            tune_json.as_ref(),
        ],
        vec![
            "export".as_ref(),
            "--perfetto".as_ref(),
            x.as_ref(),
            "--tensorboard".as_ref(),
            x.as_ref(),
            r.as_ref(),
        ],
    ];
    for mut args in cases {
        let is_job = matches!(args[0].to_str(), Some("run" | "sweep" | "tune"));
        if is_job {
            args.extend(job.iter().map(std::ffi::OsStr::new));
        }
        gpufeed_no_gpu()
            .current_dir(d.path())
            .args(&args)
            .assert()
            .code(2)
            .stderr(predicate::str::contains(
                "are the same file: one would overwrite the other",
            ));
        assert!(!x.exists() && !out.exists(), "{args:?}");
        assert!(
            !d.path().join("ran").exists(),
            "the job never started: {args:?}"
        );
    }
    // the folder's tune.json and --export-json hold the same bytes: not refused (the baseline
    // fails at once: exit 1, not 2)
    let o = gpufeed_no_gpu()
        .current_dir(d.path())
        .args(["tune", "-q", "--output-dir"])
        .arg(&out)
        .arg("--export-json")
        .arg(&tune_json)
        .args(["--", "false"])
        .output()
        .unwrap();
    assert_ne!(o.status.code(), Some(2), "{o:?}");
}

/// Issue 39 item 11: `run -o /dev/null --force` exited 3 (an input error) where the README says
/// 2: a device as the recording is a bad option value, refused before the job starts.
#[test]
fn a_device_as_the_recording_is_a_usage_error_before_the_job_starts() {
    let d = tempfile::tempdir().unwrap();
    for force in [true, false] {
        let mut c = gpufeed_no_gpu();
        c.current_dir(d.path())
            .args(["run", "-q", "-o", "/dev/null"]);
        if force {
            c.arg("--force");
        }
        c.args(["--", "sh", "-c", "touch ran"])
            .assert()
            .code(2)
            .stderr(predicate::str::contains(
                "is a device, FIFO or socket, not a file",
            ));
        assert!(!d.path().join("ran").exists(), "the job never started");
    }
}
