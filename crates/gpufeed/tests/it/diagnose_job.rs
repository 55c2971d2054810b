//! `gpufeed diagnose --job` over several nodes' recordings, through the real binary: the job
//! verdict names the starving and straggling nodes, the JSON contract, and peak memory that does
//! not grow with the number of nodes.

use crate::gpufeed;
use crate::h100_header;
use crate::json_ok;
use gpufeed::diagnose::nodes::{JobReport, JobVerdict};
use gpufeed::header_line;
use gpufeed::{End, Line};
use gpufeed::{GpuSample, HostSample};
use std::path::{Path, PathBuf};

/// A 60 s recording of one node with two GPUs at 10 Hz; `util(t)` and throttle reasons.
fn node(dir: &Path, host: &str, util: fn(f64) -> f64, throttle: u64) -> PathBuf {
    let h = h100_header(host, 8, 2);
    let mut out = header_line(&h);
    out.push('\n');
    for i in 1..=600u64 {
        let t = i as f64 / 10.0;
        for g in 0..2 {
            let u = util(t);
            let l = Line::Gpu(GpuSample {
                index: g,
                t_s: t,
                util_samples: Some(vec![[t - 0.05, u]]),
                util_pct: Some(u),
                throttle_reasons: Some(if u < 20.0 { 1 } else { throttle }),
                sm_clock_mhz: Some(if throttle != 0 { 1100 } else { 1980 }),
                temperature_c: Some(if throttle != 0 { 90 } else { 65 }),
                power_w: Some(500.0),
                ..Default::default()
            });
            out.push_str(&serde_json::to_string(&l).unwrap());
            out.push('\n');
        }
        let l = Line::Host(HostSample {
            t_s: t,
            cpu_pct: vec![50.0; 8],
            cpu_total_pct: Some(50.0),
            ..Default::default()
        });
        out.push_str(&serde_json::to_string(&l).unwrap());
        out.push('\n');
    }
    let l = Line::End(End {
        t_s: 60.0,
        exit_code: Some(0),
        signal: None,
        reason: Some(gpufeed::EndReason::JobExited),
        ..Default::default()
    });
    out.push_str(&serde_json::to_string(&l).unwrap());
    out.push('\n');
    let p = dir.join(format!("{host}.ndjson"));
    std::fs::write(&p, out).unwrap();
    p
}

fn busy(_: f64) -> f64 {
    97.0
}

fn starving(t: f64) -> f64 {
    if (t / 2.0).fract() < 0.3 {
        90.0
    } else {
        2.0
    }
}

fn job_json(files: &[PathBuf]) -> JobReport {
    let v = json_ok(
        gpufeed()
            .args(["diagnose", "--job", "--format", "json"])
            .args(files),
    );
    // The documented contract: nodes [{recording, hostname, verdict}], job {verdict, starving,
    // stragglers}.
    for n in v["nodes"].as_array().unwrap() {
        for k in ["recording", "hostname", "verdict"] {
            assert!(n.get(k).is_some(), "node without {k}: {n}");
        }
    }
    for k in ["verdict", "starving", "stragglers"] {
        assert!(v["job"].get(k).is_some(), "job without {k}");
    }
    serde_json::from_value(v).unwrap()
}

#[test]
fn the_starving_node_of_four_is_named_in_text_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<PathBuf> = ["gpu-01", "gpu-02", "gpu-03", "gpu-04"]
        .iter()
        .map(|h| {
            node(
                dir.path(),
                h,
                if *h == "gpu-03" { starving } else { busy },
                0,
            )
        })
        .collect();
    let r = job_json(&files);
    assert_eq!(r.job.verdict, JobVerdict::InputBound);
    assert_eq!(r.job.starving, vec![files[2].display().to_string()]);
    assert!(r.job.stragglers.is_empty());
    assert_eq!(r.nodes.len(), 4);
    assert_eq!(r.nodes[2].hostname.as_deref(), Some("gpu-03"));
    assert_eq!(r.nodes[2].verdict.id.as_str(), "input_bound");
    // One verdict shape everywhere: the node's is diagnose's {id, confidence, summary}.
    assert!(
        r.nodes[2].verdict.summary.starts_with("Input-bound"),
        "{:?}",
        r.nodes[2].verdict
    );
    assert_eq!(r.nodes[2].verdict_id, r.nodes[2].verdict.id);
    assert_eq!(r.nodes[0].verdict.id.as_str(), "compute_bound");

    let out = gpufeed()
        .args(["diagnose", "--job"])
        .args(&files)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("JOB VERDICT  input_bound"), "{text}");
    assert!(
        text.contains("1 node of 4 starves for data: gpu-03"),
        "{text}"
    );
    let row = text.lines().find(|l| l.starts_with("gpu-03")).unwrap();
    assert!(row.ends_with("starving"), "{row}");
    assert_eq!(text.lines().filter(|l| l.starts_with("gpu-0")).count(), 4);
}

#[test]
fn a_throttled_node_is_a_straggler() {
    let dir = tempfile::tempdir().unwrap();
    let files = vec![
        node(dir.path(), "a", busy, 0),
        node(dir.path(), "b", busy, 0x20 | 0x40),
        node(dir.path(), "c", busy, 0),
    ];
    let r = job_json(&files);
    assert_eq!(
        r.nodes[1].verdict.id.as_str(),
        "throttled",
        "{:?}",
        r.nodes[1]
    );
    assert_eq!(r.job.verdict, JobVerdict::Straggler);
    assert_eq!(r.job.stragglers, vec![files[1].display().to_string()]);
    assert!(r.job.starving.is_empty());
}

#[test]
fn a_bad_node_file_is_one_line_exit_3_and_html_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let a = node(dir.path(), "a", busy, 0);
    let bad = dir.path().join("b.ndjson");
    std::fs::write(&bad, "not a recording\n").unwrap();
    let out = gpufeed()
        .args(["diagnose", "--job"])
        .arg(&a)
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
    let out = gpufeed()
        .args(["diagnose", "--job", "--html", "x.html"])
        .arg(&a)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// Peak RSS (KiB) of `gpufeed diagnose --job FILES`.
// The child is reaped by wait4 (which also gives its rusage), not by Child::wait.
#[allow(clippy::zombie_processes)]
fn peak_rss_kib(files: &[PathBuf]) -> i64 {
    let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("gpufeed"))
        .args(["diagnose", "--job", "--format", "json"])
        .args(files)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut status = 0;
    // SAFETY: rusage is plain data, filled by wait4 for this child only.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = child.id() as libc::pid_t;
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    assert_eq!(r, pid);
    assert_eq!(status, 0);
    ru.ru_maxrss
}

#[test]
fn memory_does_not_grow_with_the_number_of_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let one = node(dir.path(), "n", starving, 0);
    let many = |n: usize| -> Vec<PathBuf> {
        (0..n)
            .map(|i| {
                let p = dir.path().join(format!("n{i}.ndjson"));
                if !p.exists() {
                    std::fs::copy(&one, &p).unwrap();
                }
                p
            })
            .collect()
    };
    let small = peak_rss_kib(&many(4));
    let large = peak_rss_kib(&many(128));
    eprintln!("diagnose --job peak RSS: 4 nodes {small} KiB, 128 nodes {large} KiB");
    assert!(
        (large as f64) < small as f64 * 1.3,
        "4 nodes {small} KiB, 128 nodes {large} KiB"
    );
}

/// Issue 39 item 6: a hostname and a command line with an OSC title sequence, a bell, a CSI and
/// CR-LF (a forged `VERDICT compute_bound` line) reach the terminal escaped through every text
/// presenter of `diagnose` and `diagnose --job`: nothing but line feeds is a control character.
#[test]
fn control_characters_from_a_recording_never_reach_the_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let evil = "node\u{1b}]0;pwned\u{7}\r\nVERDICT  compute_bound\u{9b}2J";
    let a = node(dir.path(), evil, starving, 0);
    let b = node(dir.path(), "node2", busy, 0);
    // the job's command line too
    let text = std::fs::read_to_string(&a).unwrap();
    let (head, rest) = text.split_once('\n').unwrap();
    let mut h: serde_json::Value = serde_json::from_str(head).unwrap();
    h["command"] = serde_json::json!([
        "python",
        "train.py\u{1b}[2J\u{1b}]2;x\u{7}\r\nVERDICT  idle"
    ]);
    std::fs::write(&a, format!("{h}\n{rest}")).unwrap();
    let check = |args: &[&str], files: &[&PathBuf]| {
        let out = gpufeed().args(args).args(files).output().unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        let s = String::from_utf8(out.stdout).unwrap();
        // gpufeed's own colours aside (`ESC [ 1 ; 31 m`)
        let mut plain = s.clone();
        for code in [
            "0", "1", "2", "33", "36", "1;31", "1;32", "1;33", "31", "32",
        ] {
            plain = plain.replace(&format!("\u{1b}[{code}m"), "");
        }
        assert!(
            !plain.chars().any(|c| c.is_control() && c != '\n'),
            "{args:?}: a control character reached the terminal:\n{s:?}"
        );
        assert!(
            !s.lines()
                .any(|l| l.starts_with("VERDICT  compute_bound") || l.starts_with("VERDICT  idle")),
            "{args:?}: a forged line:\n{s}"
        );
        assert!(
            s.contains("\\x1b]0;pwned\\x07\\x0d\\x0aVERDICT"),
            "{args:?}: the name is shown escaped:\n{s}"
        );
    };
    check(&["diagnose", "--color", "always"], &[&a]);
    check(&["diagnose", "--color", "never", "--verbose"], &[&a]);
    check(&["diagnose", "--format", "markdown"], &[&a]);
    check(&["diagnose", "--job"], &[&a, &b]);
    check(&["diagnose", "--job", "--format", "markdown"], &[&a, &b]);
    // JSON keeps the bytes (escaped by JSON itself)
    let j = json_ok(gpufeed().args(["diagnose", "--format", "json"]).arg(&a));
    assert!(
        j["source"]["path"]
            .as_str()
            .unwrap()
            .contains("\u{1b}]0;pwned\u{7}\r\n"),
        "{j}"
    );
}
