//! The bad-input corpus (issue 13, "Keep them closed"): generated here from the classes of bad
//! input (nothing big is committed), run through every reader as a real child process under a
//! time limit and an address-space limit. Every run must end in time, never panic (101), exit
//! with a documented code (0 or 3 here; 3 where the input cannot be read), and a failure must be
//! one line on stderr.

use gpufeed::GpuSample;
use gpufeed::Line;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Far below what the old readers took on the huge inputs here (a 200 MB line held whole, twice),
/// far above what a bounded reader needs (a debug build's code, one 64 MiB trace value).
const MEMORY_LIMIT_BYTES: u64 = 512 << 20;
/// For the long-names case: a small trace needs far less, 1,500 names of 100 KiB held twice more.
const LONG_NAMES_MEMORY_LIMIT_BYTES: u64 = 256 << 20;
/// Generous for a debug build on a loaded machine; a hang runs into it.
const TIME_LIMIT: Duration = Duration::from_secs(120);

/// The classes of bad input, each a file of one kind.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Trace,
    Csv,
    Dcgmi,
    Recording,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Expect {
    /// Must be refused: exit 3.
    Refused,
    /// Read (exit 0) or refused (exit 3): a damaged but partly usable file.
    Either,
}

struct Case {
    name: &'static str,
    kind: Kind,
    path: PathBuf,
    expect: Expect,
    /// What stdout or stderr must contain (a warning said, a message named).
    says: Option<&'static str>,
    /// The address-space limit of its runs.
    memory_limit: u64,
}

const START_US: u64 = 1_764_676_800_000_000;

fn valid_trace() -> String {
    let mut ev = Vec::new();
    for step in 0..5u64 {
        let t = step * 10_000;
        ev.push(format!(
            r#"{{"ph":"X","cat":"user_annotation","name":"ProfilerStep#{step}","pid":1,"tid":1,"ts":{t},"dur":9000}}"#
        ));
        ev.push(format!(
            r#"{{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":{},"dur":100,"args":{{"External id":{step}}}}}"#,
            t + 100
        ));
        ev.push(format!(
            r#"{{"ph":"X","cat":"kernel","name":"gemm","pid":0,"tid":7,"ts":{},"dur":5000,"args":{{"correlation":{step},"stream":7,"device":0}}}}"#,
            t + 2000
        ));
    }
    format!(
        "{{\"schemaVersion\":1,\"deviceProperties\":[{{\"id\":0,\"name\":\"H100\"}}],\n\"traceEvents\":[\n{}\n],\n\"traceName\":\"t\"}}\n",
        ev.join(",\n")
    )
}

fn valid_csv() -> String {
    let mut s = String::from(
        "timestamp, index, name, utilization.gpu [%], memory.used [MiB], memory.total [MiB]\n",
    );
    for i in 0..60 {
        s.push_str(&format!(
            "2026/12/02 12:{:02}:{:02}.000, 0, NVIDIA H100, {} %, 40000 MiB, 81559 MiB\n",
            i / 60,
            i % 60,
            if i % 3 == 0 { 95 } else { 5 }
        ));
    }
    s
}

fn valid_dcgmi() -> String {
    let mut s = String::from("#Entity   GPUTL  FBUSD   POWER\nID\n");
    for i in 0..60 {
        s.push_str(&format!(
            "GPU 0     {}     40000   300.5\n",
            if i % 3 == 0 { 95 } else { 5 }
        ));
    }
    s
}

fn header_line() -> String {
    format!(
        r#"{{"type":"header","schema_version":2,"gpufeed_version":"0.1.0","start_time":"2025-12-02T12:00:00.000Z","start_unix_us":{START_US},"interval_s":0.1,"host":{{"hostname":"node1","cpu_count":4,"cpus_allowed":4}},"driver":null,"gpus":[{{"index":0,"name":"NVIDIA H100"}}],"gpu_error":null,"command":["python","train.py"],"pid":100,"py_rate_hz":null}}"#
    )
}

fn gpu_line(t: f64, util: f64, mem: u64) -> String {
    serde_json::to_string(&Line::Gpu(GpuSample {
        index: 0,
        t_s: t,
        util_pct: Some(util),
        mem_used_bytes: Some(mem),
        ..Default::default()
    }))
    .unwrap()
}

fn valid_recording() -> String {
    let mut s = header_line();
    s.push('\n');
    for i in 0..60 {
        s.push_str(&gpu_line(i as f64 * 0.5, (i % 3 * 40) as f64, 40 << 30));
        s.push('\n');
    }
    s.push_str("{\"type\":\"end\",\"t_s\":30.0,\"exit_code\":0}\n");
    s
}

/// Pseudo-random bytes (xorshift), the same on every run.
fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// A file of `prefix` followed by zeros up to `len` bytes: sparse, so a 200 MB one-line file
/// costs no disk and no time to write.
fn sparse(path: &Path, prefix: &[u8], len: u64) {
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(prefix).unwrap();
    f.set_len(len).unwrap();
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(bytes).unwrap();
    gz.finish().unwrap()
}

fn corpus(dir: &Path) -> Vec<Case> {
    let mut cases = Vec::new();
    let mut add = |name: &'static str,
                   kind: Kind,
                   bytes: &[u8],
                   expect: Expect,
                   says: Option<&'static str>| {
        let ext = match kind {
            Kind::Trace => "json",
            Kind::Csv => "csv",
            Kind::Dcgmi => "log",
            Kind::Recording => "ndjson",
        };
        let path = dir.join(format!("{name}.{ext}"));
        std::fs::write(&path, bytes).unwrap();
        cases.push(Case {
            name,
            kind,
            path,
            expect,
            says,
            memory_limit: if name == "trace-gz-long-names" {
                LONG_NAMES_MEMORY_LIMIT_BYTES
            } else {
                MEMORY_LIMIT_BYTES
            },
        });
    };
    let valid = [
        (Kind::Trace, valid_trace()),
        (Kind::Csv, valid_csv()),
        (Kind::Dcgmi, valid_dcgmi()),
        (Kind::Recording, valid_recording()),
    ];
    for (kind, text) in &valid {
        let k = *kind;
        let b = text.as_bytes();
        let names: [&'static str; 9] = match k {
            Kind::Trace => [
                "trace-empty",
                "trace-blank",
                "trace-zeros",
                "trace-random",
                "trace-cut",
                "trace-bom",
                "trace-latin1",
                "trace-garbled",
                "trace-valid",
            ],
            Kind::Csv => [
                "csv-empty",
                "csv-blank",
                "csv-zeros",
                "csv-random",
                "csv-cut",
                "csv-bom",
                "csv-latin1",
                "csv-garbled",
                "csv-valid",
            ],
            Kind::Dcgmi => [
                "dcgmi-empty",
                "dcgmi-blank",
                "dcgmi-zeros",
                "dcgmi-random",
                "dcgmi-cut",
                "dcgmi-bom",
                "dcgmi-latin1",
                "dcgmi-garbled",
                "dcgmi-valid",
            ],
            Kind::Recording => [
                "rec-empty",
                "rec-blank",
                "rec-zeros",
                "rec-random",
                "rec-cut",
                "rec-bom",
                "rec-latin1",
                "rec-garbled",
                "rec-valid",
            ],
        };
        add(names[0], k, b"", Expect::Refused, None);
        add(
            names[1],
            k,
            &b" \n\t\r\n".repeat(4000),
            Expect::Refused,
            None,
        );
        add(names[2], k, &[0u8; 65536], Expect::Refused, None);
        add(
            names[3],
            k,
            &random_bytes(1 << 20, k as u64 + 7),
            Expect::Refused,
            None,
        );
        add(names[4], k, &b[..b.len() * 2 / 3], Expect::Either, None);
        let mut bom = b"\xEF\xBB\xBF".to_vec();
        bom.extend_from_slice(b);
        add(names[5], k, &bom, Expect::Either, None);
        // A non-UTF-8 byte in a name.
        let latin1: Vec<u8> = String::from_utf8_lossy(b)
            .replace("H100", "H100 caf\u{e9}")
            .replace("gemm", "gemm_caf\u{e9}")
            .chars()
            .flat_map(|c| {
                if c == '\u{e9}' {
                    vec![0xe9]
                } else {
                    c.to_string().into_bytes()
                }
            })
            .collect();
        add(names[6], k, &latin1, Expect::Either, None);
        // Every third line garbled.
        let garbled: String = text
            .lines()
            .enumerate()
            .map(|(i, l)| {
                if i % 3 == 2 {
                    format!("{}}}]\"{{,,x\n", &l[..l.len() / 2])
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        add(names[7], k, garbled.as_bytes(), Expect::Either, None);
        add(names[8], k, b, Expect::Either, None);
    }
    // Structure: nested values, no events, header only, all N/A.
    let deep = format!(
        "{{\"traceEvents\":[{{\"ph\":\"X\",\"name\":\"n\",\"ts\":1,\"dur\":1,\"pid\":1,\"tid\":1,\"args\":{}{}}}]}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    add(
        "trace-nested",
        Kind::Trace,
        deep.as_bytes(),
        Expect::Either,
        None,
    );
    add(
        "trace-no-events",
        Kind::Trace,
        br#"{"schemaVersion":1,"traceEvents":[]}"#,
        Expect::Refused,
        Some("no trace events"),
    );
    add(
        "trace-not-events",
        Kind::Trace,
        br#"{"traceEvents":[1,"x",null,[],{}]}"#,
        Expect::Refused,
        None,
    );
    let mostly_garbage = format!(
        "{{\"traceEvents\":[\n{}{{\"ph\":\"X\",\"name\":\"a\",\"ts\":1,\"dur\":1,\"pid\":1,\"tid\":1}}]}}",
        "{\"ph\":\"X\",\"name\":\"x\" ]]} garbage,\n".repeat(100)
    );
    add(
        "trace-mostly-garbage",
        Kind::Trace,
        mostly_garbage.as_bytes(),
        Expect::Refused,
        Some("mostly unreadable"),
    );
    add(
        "csv-header-only",
        Kind::Csv,
        b"timestamp, index, utilization.gpu [%], memory.used [MiB]\n",
        Expect::Refused,
        None,
    );
    add(
        "dcgmi-header-only",
        Kind::Dcgmi,
        b"#Entity   GPUTL  FBUSD\nID\n",
        Expect::Refused,
        None,
    );
    add(
        "rec-header-only",
        Kind::Recording,
        format!("{}\n", header_line()).as_bytes(),
        Expect::Either,
        None,
    );
    let na_csv: String =
        std::iter::once("timestamp, index, utilization.gpu [%], memory.used [MiB]\n".to_string())
            .chain((0..30).map(|i| format!("2026/12/02 12:00:{i:02}.000, 0, [N/A], [N/A]\n")))
            .collect();
    add(
        "csv-all-na",
        Kind::Csv,
        na_csv.as_bytes(),
        Expect::Refused,
        Some("rows with utilization or memory values"),
    );
    let na_dcgmi = format!(
        "#Entity   GPUTL  FBUSD\nID\n{}",
        "GPU 0     N/A    N/A\n".repeat(30)
    );
    add(
        "dcgmi-all-na",
        Kind::Dcgmi,
        na_dcgmi.as_bytes(),
        Expect::Refused,
        Some("rows with utilization or memory values"),
    );
    // Impossible values: said, never averaged in.
    let impossible_csv: String =
        std::iter::once("timestamp, index, utilization.gpu [%], memory.used [MiB]\n".to_string())
            .chain((0..30).map(|i| {
                format!(
                    "2026/12/02 12:00:{:02}.000, 0, -14 %, 99999999999999999 MiB\n",
                    59 - i
                )
            }))
            .collect();
    add(
        "csv-impossible",
        Kind::Csv,
        impossible_csv.as_bytes(),
        Expect::Either,
        Some("Impossible values"),
    );
    let mut impossible_rec = header_line();
    impossible_rec.push('\n');
    for i in 0..30 {
        impossible_rec.push_str(&gpu_line(30.0 - i as f64, 250.0, u64::MAX));
        impossible_rec.push('\n');
    }
    add(
        "rec-impossible",
        Kind::Recording,
        impossible_rec.as_bytes(),
        Expect::Either,
        Some("Impossible values"),
    );
    let mut huge = Vec::new();
    // Huge: one 200 MB line (sparse: a valid start, then zeros without a newline), and a 1 MB
    // gzip holding a 100 MB string.
    for (name, kind, prefix) in [
        (
            "csv-one-line",
            Kind::Csv,
            b"timestamp, index, utilization.gpu [%]\n2026/12/02 12:00:00.000, 0, ".to_vec(),
        ),
        (
            "dcgmi-one-line",
            Kind::Dcgmi,
            b"#Entity   GPUTL  FBUSD\nID\nGPU 0 ".to_vec(),
        ),
        (
            "trace-one-line",
            Kind::Trace,
            b"{\"traceEvents\":[{\"ph\":\"X\",\"name\":\"".to_vec(),
        ),
        (
            "rec-one-line",
            Kind::Recording,
            format!("{}\n{{\"type\":\"gpu\",\"x\":\"", header_line()).into_bytes(),
        ),
    ] {
        // 16 KiB of text after the start, so that the first bytes read as the format and the
        // reader itself meets the long line.
        let mut prefix = prefix;
        let fill: &[u8] = if kind == Kind::Csv { b"1," } else { b"1 " };
        for _ in 0..8192 {
            prefix.extend_from_slice(fill);
        }
        let path = dir.join(name);
        sparse(&path, &prefix, 200 << 20);
        huge.push(Case {
            name,
            kind,
            path,
            expect: Expect::Either,
            says: None,
            memory_limit: MEMORY_LIMIT_BYTES,
        });
    }
    let mut big = b"{\"traceEvents\":[{\"ph\":\"X\",\"name\":\"".to_vec();
    big.resize(big.len() + (100 << 20), b'a');
    big.extend_from_slice(b"\",\"ts\":1,\"dur\":2,\"pid\":1,\"tid\":1}]}");
    add(
        "trace-gz-huge-string",
        Kind::Trace,
        &gzip(&big),
        Expect::Refused,
        Some("larger than 64 MiB"),
    );
    // 1,500 distinct 100 KiB kernel names (150 MB, a few MB gzipped): names are interned per
    // distinct value, so they must be cut (held whole, they took 300 MB; cut, 25 MB). Run under a
    // tighter limit, which a small trace fits easily.
    let mut names = String::from("{\"traceEvents\":[\n");
    let long = "k".repeat(100 << 10);
    for i in 0..1500 {
        names.push_str(&format!(
            "{{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"{i}{long}\",\"pid\":0,\"tid\":7,\"ts\":{},\"dur\":5}},\n",
            i * 10
        ));
    }
    names.push_str("{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"end\",\"pid\":1,\"tid\":1,\"ts\":1,\"dur\":1}]}");
    add(
        "trace-gz-long-names",
        Kind::Trace,
        &gzip(names.as_bytes()),
        Expect::Either,
        Some("event names longer than 8 KiB"),
    );
    let cut = gzip(valid_trace().as_bytes());
    add(
        "trace-gz-cut",
        Kind::Trace,
        &cut[..cut.len() / 2],
        Expect::Either,
        None,
    );
    cases.extend(huge);
    cases
}

struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

fn run(args: &[&std::ffi::OsStr]) -> Outcome {
    run_limited(args, MEMORY_LIMIT_BYTES)
}

fn run_limited(args: &[&std::ffi::OsStr], memory_limit: u64) -> Outcome {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpufeed"));
    cmd.args(args)
        .env_remove("GPUFEED_NVML_LIB")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: memory_limit,
                rlim_max: memory_limit,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let start = Instant::now();
    let mut child = cmd.spawn().expect("spawn gpufeed");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let o = std::thread::spawn(move || {
        let mut s = Vec::new();
        std::io::Read::read_to_end(&mut out, &mut s).ok();
        s
    });
    let e = std::thread::spawn(move || {
        let mut s = Vec::new();
        std::io::Read::read_to_end(&mut err, &mut s).ok();
        s
    });
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if start.elapsed() > TIME_LIMIT {
            child.kill().ok();
            child.wait().ok();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let elapsed = start.elapsed();
    Outcome {
        code: status.and_then(|s| s.code()),
        stdout: String::from_utf8_lossy(&o.join().unwrap()).into_owned(),
        stderr: String::from_utf8_lossy(&e.join().unwrap()).into_owned(),
        elapsed,
    }
}

/// The readers that take a file of this kind, as command lines.
fn commands(c: &Case, dir: &Path) -> Vec<Vec<std::ffi::OsString>> {
    let p = c.path.as_os_str().to_owned();
    let out = dir.join("out.json").into_os_string();
    let s = |x: &str| std::ffi::OsString::from(x);
    if c.name == "trace-gz-long-names" {
        // Only the reader that interns names (the others stream it; it is slow in a debug build).
        return vec![vec![s("analyze"), p]];
    }
    match c.kind {
        Kind::Trace => vec![
            vec![s("analyze"), p.clone()],
            vec![
                s("export"),
                s("--perfetto"),
                out,
                dir.join("base.ndjson").into_os_string(),
                s("--merge"),
                p.clone(),
            ],
            // What diagnose says about a trace (another command's input).
            vec![s("diagnose"), p],
        ],
        Kind::Csv => vec![
            vec![s("diagnose"), p.clone()],
            vec![s("diagnose"), s("--input-format"), s("smi-csv"), p.clone()],
            vec![
                s("diagnose"),
                s("--columns"),
                s("timestamp,index,utilization.gpu,memory.used"),
                p,
            ],
        ],
        Kind::Dcgmi => vec![
            vec![s("diagnose"), p.clone()],
            vec![s("diagnose"), s("--input-format"), s("dcgmi"), p.clone()],
            vec![s("diagnose"), s("--input-format"), s("smi-dmon"), p],
        ],
        Kind::Recording => vec![
            vec![s("diagnose"), p.clone()],
            vec![
                s("diagnose"),
                s("--input-format"),
                s("recording"),
                p.clone(),
            ],
            vec![s("export"), s("--perfetto"), out, p],
        ],
    }
}

#[test]
fn every_reader_survives_the_bad_input_corpus() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("base.ndjson"), valid_recording()).unwrap();
    let cases = corpus(dir.path());
    assert!(cases.len() > 50, "{} cases", cases.len());
    let mut failures = Vec::new();
    let mut runs = 0;
    let mut slowest = (Duration::ZERO, String::new());
    for c in &cases {
        for (i, cmd) in commands(c, dir.path()).into_iter().enumerate() {
            let args: Vec<&std::ffi::OsStr> = cmd.iter().map(|a| a.as_os_str()).collect();
            let shown = format!(
                "{} [{}]",
                cmd.iter()
                    .map(|a| a
                        .to_string_lossy()
                        .replace(&*dir.path().to_string_lossy(), ""))
                    .collect::<Vec<_>>()
                    .join(" "),
                c.name
            );
            let o = run_limited(&args, c.memory_limit);
            runs += 1;
            if o.elapsed > slowest.0 {
                slowest = (o.elapsed, shown.clone());
            }
            let mut fail = |why: String| failures.push(format!("{shown}: {why}"));
            let Some(code) = o.code else {
                fail(format!(
                    "no exit code: killed after {:?} (time or memory limit)",
                    o.elapsed
                ));
                continue;
            };
            if code == 101 || o.stderr.contains("panicked") {
                fail(format!("panicked: {}", o.stderr));
                continue;
            }
            let is_diagnose_of_trace = c.kind == Kind::Trace && cmd[0] == "diagnose";
            let allowed: &[i32] = match (c.expect, is_diagnose_of_trace) {
                (_, true) | (Expect::Refused, false) => &[3],
                (Expect::Either, false) => &[0, 3],
            };
            if !allowed.contains(&code) {
                fail(format!(
                    "exit {code}, expected one of {allowed:?}; stderr: {}",
                    o.stderr
                ));
                continue;
            }
            if code != 0 {
                let lines: Vec<&str> = o.stderr.lines().collect();
                if lines.len() != 1 || !lines[0].starts_with("gpufeed: error: ") {
                    fail(format!("stderr is not one error line: {:?}", o.stderr));
                }
            }
            // What a case must say is its own reader's message (the first command: analyze for
            // a trace, diagnose with format detection for the others).
            if let Some(says) = c.says.filter(|_| i == 0) {
                let both = format!("{}{}", o.stdout, o.stderr);
                if !both.contains(says) {
                    fail(format!("does not say {says:?}: {both}"));
                }
            }
        }
    }
    eprintln!(
        "{} cases, {runs} runs; slowest {:?}: {}",
        cases.len(),
        slowest.0,
        slowest.1
    );
    assert!(
        failures.is_empty(),
        "{} of {runs} runs failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The messages the issue named, one by one: a trace given to diagnose is named as one, random
/// bytes are "not a format gpufeed reads" (even with --columns), blank input is not "empty" when
/// it is 8 KiB of blanks, and a large input is not said to end after a few bytes.
#[test]
fn bad_input_messages_name_what_the_file_is() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let trace = d.join("t.json");
    std::fs::write(&trace, valid_trace()).unwrap();
    let o = run(&["diagnose".as_ref(), trace.as_os_str()]);
    assert_eq!(o.code, Some(3));
    assert!(o.stderr.contains("profiler (Kineto) trace"), "{}", o.stderr);
    assert!(o.stderr.contains("gpufeed analyze"), "{}", o.stderr);
    assert!(!o.stderr.contains("empty"), "{}", o.stderr);

    let random = d.join("r.bin");
    std::fs::write(&random, random_bytes(1 << 20, 3)).unwrap();
    for extra in [
        vec![],
        vec!["--columns", "utilization.gpu,memory.used"],
        vec!["--input-format", "smi-csv"],
        vec!["--input-format", "dcgmi"],
    ] {
        let mut args: Vec<&std::ffi::OsStr> = vec!["diagnose".as_ref()];
        args.extend(extra.iter().map(std::ffi::OsStr::new));
        args.push(random.as_os_str());
        let o = run(&args);
        assert_eq!(o.code, Some(3), "{extra:?}: {}", o.stderr);
        assert!(
            o.stderr.contains("not a format gpufeed reads"),
            "{extra:?}: {}",
            o.stderr
        );
        assert!(o.stderr.contains("nvidia-smi dmon"), "{}", o.stderr);
        assert!(!o.stderr.contains("without a header"), "{}", o.stderr);
    }

    let blank = d.join("blank.json");
    std::fs::write(&blank, vec![b' '; 1 << 20]).unwrap();
    let o = run(&["diagnose".as_ref(), blank.as_os_str()]);
    assert_eq!(o.code, Some(3));
    assert!(o.stderr.contains("blank"), "{}", o.stderr);
    let o = run(&["analyze".as_ref(), blank.as_os_str()]);
    assert_eq!(o.code, Some(3));
    assert!(o.stderr.contains("empty"), "{}", o.stderr);

    // 200 MB after the start of an event: the byte count said is the real one.
    let long = d.join("long.json");
    sparse(
        &long,
        b"{\"traceEvents\":[{\"ph\":\"X\",\"name\":\"",
        200 << 20,
    );
    let o = run(&["analyze".as_ref(), long.as_os_str()]);
    assert_eq!(o.code, Some(3), "{}", o.stderr);
    assert!(
        !o.stderr.contains("after 16 bytes") && !o.stderr.contains("after 35 bytes"),
        "{}",
        o.stderr
    );
}

/// Times out of bounds (issue 27, item 2): one `t_s` of 1e308 made `diagnose --html` spin in the
/// chart's axis computation and the text say "18446744073709551615h"; -1e9 said "277777h". Such
/// lines are dropped by the reader, with a note, before anything is summed or charted.
#[test]
fn times_out_of_bounds_are_dropped_with_a_note_before_charts_and_sums() {
    let dir = tempfile::tempdir().unwrap();
    for (name, bad) in [("huge", "1e308"), ("negative", "-1e9"), ("far", "40000000")] {
        let mut rec = valid_recording();
        let at = rec.find('\n').unwrap() + 1;
        let line = format!(
            "{{\"type\":\"gpu\",\"index\":0,\"t_s\":{bad},\"util_pct\":50.0}}\n\
             {{\"type\":\"proc_exit\",\"t_s\":{bad},\"pid\":7}}\n"
        );
        rec.insert_str(at, &line);
        let p = dir.path().join(format!("{name}.ndjson"));
        std::fs::write(&p, rec).unwrap();
        let html = dir.path().join(format!("{name}.html"));
        let o = run(&[
            "diagnose".as_ref(),
            "--html".as_ref(),
            html.as_os_str(),
            p.as_os_str(),
        ]);
        assert_eq!(o.code, Some(0), "{name}: {:?} {}", o.elapsed, o.stderr);
        assert!(
            o.stdout
                .contains("2 lines with a time outside 0 s to 366 days"),
            "{name}: {}",
            o.stdout
        );
        assert!(!o.stdout.contains("277777h") && !o.stdout.contains("18446744073709551615"));
        assert!(o.stdout.contains("(recording, 29.5 s"), "{}", o.stdout);
        assert!(std::fs::metadata(&html).unwrap().len() > 1000);
        let o = run(&[
            "diagnose".as_ref(),
            "--format".as_ref(),
            "json".as_ref(),
            p.as_os_str(),
        ]);
        let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
        assert_eq!(v["source"]["bad_time"], 2, "{name}");
        assert!(
            v["duration_s"].as_f64().unwrap() <= 31.0,
            "{name}: {}",
            v["duration_s"]
        );
    }
}

/// A `.ndjson.zst` whose lines are `prefix(i) + body + suffix(i)`, `body` compressed once and its
/// frame repeated (concatenated zstd frames decode as one stream): 300 lines of 1 MB in a few KB,
/// written in milliseconds however slow the debug build's zstd is.
fn repeated_body_zst(path: &Path, n: usize, body: &[u8], line: impl Fn(usize) -> (String, String)) {
    let frame = |b: &[u8]| zstd::encode_all(b, 1).unwrap();
    let body_frame = frame(body);
    let mut out = frame(format!("{}\n", header_line()).as_bytes());
    for i in 0..n {
        let (pre, post) = line(i);
        out.extend(frame(pre.as_bytes()));
        out.extend_from_slice(&body_frame);
        out.extend(frame(post.as_bytes()));
    }
    let mut tail = String::new();
    for i in 0..20 {
        tail.push_str(&gpu_line(i as f64, 50.0, 1 << 30));
        tail.push('\n');
    }
    tail.push_str("{\"type\":\"end\",\"t_s\":20.0,\"exit_code\":0}\n");
    out.extend(frame(tail.as_bytes()));
    std::fs::write(path, out).unwrap();
}

/// Runs gpufeed and returns its exit code, stdout then stderr, and its peak RSS (VmHWM, read
/// until it exits).
fn run_peak_rss(args: &[&std::ffi::OsStr]) -> (Option<i32>, String, u64) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gpufeed"))
        .args(args)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut out, &mut s).ok();
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut err, &mut s).ok();
        s
    });
    let (mut peak_kb, start) = (0u64, Instant::now());
    let status = loop {
        if let Ok(s) = std::fs::read_to_string(format!("/proc/{}/status", child.id())) {
            if let Some(kb) = s
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            {
                peak_kb = peak_kb.max(kb);
            }
        }
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if start.elapsed() > TIME_LIMIT {
            child.kill().ok();
            child.wait().ok();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    (
        status.and_then(|s| s.code()),
        reader.join().unwrap() + &err_reader.join().unwrap(),
        peak_kb << 10,
    )
}

/// Memory bounds (issue 27, item 1): distinct processes with 1 MB command lines and Python frames
/// with 1 MB names, in small `.zst` files, through diagnose, compare and export; and more distinct
/// processes than are followed one by one. Peak RSS stays under 200 MB (the old readers kept
/// every string whole: 300 such lines took well over 600 MB).
#[test]
fn crafted_recordings_keep_memory_bounded_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mb = vec![b'a'; 1_000_000];
    let procs = d.join("procs.ndjson.zst");
    repeated_body_zst(&procs, 300, &mb, |i| {
        (
            format!(
                "{{\"type\":\"proc_start\",\"t_s\":1.0,\"pid\":{},\"ppid\":1,\"cmd\":\"",
                1000 + i
            ),
            "\",\"comm\":\"python\"}\n".into(),
        )
    });
    let frames = d.join("frames.ndjson.zst");
    repeated_body_zst(&frames, 300, &mb, |i| {
        (
            format!("{{\"type\":\"py_frame\",\"id\":{i},\"name\":\""),
            "\",\"file\":\"train.py\",\"line\":1}\n".into(),
        )
    });
    let many = d.join("many.ndjson.zst");
    let mut text = format!("{}\n", header_line());
    for i in 0..12_000 {
        text.push_str(&format!(
            "{{\"type\":\"proc_start\",\"t_s\":1.0,\"pid\":{},\"ppid\":1,\"cmd\":\"python\"}}\n",
            1000 + i
        ));
    }
    text.push_str("{\"type\":\"end\",\"t_s\":20.0,\"exit_code\":0}\n");
    std::fs::write(&many, zstd::encode_all(text.as_bytes(), 3).unwrap()).unwrap();
    for f in [&procs, &frames, &many] {
        let size = std::fs::metadata(f).unwrap().len();
        assert!(size < 400_000, "{}: {size} bytes on disk", f.display());
    }
    let out = d.join("o.json");
    let s = |x: &str| std::ffi::OsString::from(x);
    let runs: Vec<(Vec<std::ffi::OsString>, Option<&str>)> = vec![
        (vec![s("diagnose"), procs.clone().into()], Some("was cut")),
        (vec![s("diagnose"), frames.clone().into()], Some("was cut")),
        (
            vec![s("diagnose"), many.clone().into()],
            Some("beyond the first 10000 processes"),
        ),
        (
            vec![s("compare"), procs.clone().into(), frames.clone().into()],
            None,
        ),
        (
            vec![
                s("export"),
                s("--perfetto"),
                out.clone().into(),
                procs.clone().into(),
            ],
            None,
        ),
        (
            vec![
                s("export"),
                s("--perfetto"),
                out.clone().into(),
                many.clone().into(),
            ],
            None,
        ),
    ];
    for (args, says) in runs {
        let a: Vec<&std::ffi::OsStr> = args.iter().map(|x| x.as_os_str()).collect();
        let (code, stdout, peak) = run_peak_rss(&a);
        let shown = format!(
            "{:?}",
            args.iter()
                .map(|x| x.to_string_lossy().replace(&*d.to_string_lossy(), ""))
                .collect::<Vec<_>>()
        );
        eprintln!("{shown}: exit {code:?}, peak RSS {} MB", peak >> 20);
        assert_eq!(code, Some(0), "{shown}: {stdout}");
        assert!(peak < 200 << 20, "{shown}: peak RSS {} MB", peak >> 20);
        if let Some(says) = says {
            assert!(stdout.contains(says), "{shown}: {stdout}");
        }
    }
}

/// Memory bounds in `analyze` (issue 27, item 1): 30,000 kernels, each with its own 8 KB name,
/// device and stream, in a small `.json.gz` (gzip members concatenated: the 8 KB body is
/// compressed once). Peak RSS stays under 200 MB and the report says what was folded together.
#[test]
fn a_trace_of_distinct_devices_and_long_names_keeps_memory_bounded() {
    use flate2::write::GzEncoder;
    let gz = |b: &[u8]| {
        let mut e = GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(b).unwrap();
        e.finish().unwrap()
    };
    let body = gz(&[b'k'; 8000]);
    let n = 30_000;
    let mut out = gz(b"{\"traceEvents\":[\n{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"0");
    for i in 0..n {
        out.extend_from_slice(&body);
        let next = if i + 1 < n {
            format!(",\n{{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"{}", i + 1)
        } else {
            ",\n{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"end\",\"pid\":1,\"tid\":1,\"ts\":1,\"dur\":1}]}".into()
        };
        let end = format!(
            "\",\"pid\":0,\"tid\":7,\"ts\":{},\"dur\":5,\"args\":{{\"device\":{i},\"stream\":{i}}}}}{next}",
            i * 10
        );
        out.extend(gz(end.as_bytes()));
    }
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("devices.json.gz");
    std::fs::write(&p, &out).unwrap();
    assert!(out.len() < 8 << 20, "{} bytes on disk", out.len());
    let (code, stdout, peak) = run_peak_rss(&["analyze".as_ref(), p.as_os_str()]);
    eprintln!(
        "analyze: exit {code:?}, peak RSS {} MB, {} bytes on disk",
        peak >> 20,
        out.len()
    );
    assert_eq!(code, Some(0), "{stdout}");
    assert!(peak < 200 << 20, "peak RSS {} MB", peak >> 20);
    assert!(stdout.contains("booked together as \"other\""), "{stdout}");
}

/// `diagnose --html X --export-json X` (issue 27, item 9): refused (exit 2) before anything is
/// written, instead of one output silently overwriting the other; also through another name.
#[test]
fn html_and_json_outputs_on_one_file_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.ndjson");
    std::fs::write(&rec, valid_recording()).unwrap();
    let out = dir.path().join("out");
    let other_name = dir.path().join(".").join("out");
    let o = run(&[
        "diagnose".as_ref(),
        "--html".as_ref(),
        out.as_os_str(),
        "--export-json".as_ref(),
        other_name.as_os_str(),
        rec.as_os_str(),
    ]);
    assert_eq!(o.code, Some(2), "{}", o.stderr);
    assert!(o.stderr.contains("are the same file"), "{}", o.stderr);
    assert_eq!(o.stderr.lines().count(), 1, "{}", o.stderr);
    assert!(!out.exists());
}

/// A recording starting with a UTF-8 byte-order mark (issue 27, item 9) is read as a recording by
/// diagnose (it was called an nvidia-smi CSV) and by export, plain and zstd-compressed.
#[test]
fn a_recording_with_a_byte_order_mark_is_a_recording() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!("\u{feff}{}", valid_recording());
    let plain = dir.path().join("bom.ndjson");
    std::fs::write(&plain, &text).unwrap();
    let zst = dir.path().join("bom.ndjson.zst");
    std::fs::write(&zst, zstd::encode_all(text.as_bytes(), 3).unwrap()).unwrap();
    let out = dir.path().join("o.json");
    for p in [&plain, &zst] {
        let o = run(&["diagnose".as_ref(), p.as_os_str()]);
        assert_eq!(o.code, Some(0), "{}", o.stderr);
        assert!(o.stdout.contains("(recording, 29.5 s"), "{}", o.stdout);
        let o = run(&[
            "export".as_ref(),
            "--perfetto".as_ref(),
            out.as_os_str(),
            p.as_os_str(),
        ]);
        assert_eq!(o.code, Some(0), "{}", o.stderr);
    }
}

/// FIFO and pipe inputs (issue 27, item 7): export and compare, which read an input more than
/// once, refuse a FIFO or /dev/stdin with exit 2 and one line at once (they hung, or said "the
/// input is empty"); nothing ever writes the FIFO here, so a hang would run into the time limit.
#[test]
fn fifo_and_pipe_inputs_are_refused_by_readers_that_read_twice_never_hang() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo on a path we own, with a NUL-terminated string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let rec = dir.path().join("r.ndjson");
    std::fs::write(&rec, valid_recording()).unwrap();
    let out = dir.path().join("o.json");
    let (f, r, o) = (fifo.as_os_str(), rec.as_os_str(), out.as_os_str());
    for args in [
        vec!["export".as_ref(), "--perfetto".as_ref(), o, f],
        vec![
            "export".as_ref(),
            "--perfetto".as_ref(),
            o,
            r,
            "--merge".as_ref(),
            f,
        ],
        vec!["compare".as_ref(), f, r],
        vec!["compare".as_ref(), r, f],
    ] {
        let t = Instant::now();
        let res = run(&args);
        assert_eq!(res.code, Some(2), "{args:?}: {}", res.stderr);
        assert!(
            res.stderr.contains("is a pipe or a socket"),
            "{}",
            res.stderr
        );
        assert_eq!(res.stderr.lines().count(), 1, "{}", res.stderr);
        assert!(t.elapsed() < Duration::from_secs(30), "{args:?}");
    }
    // `--merge /dev/stdin` with a pipe on stdin (it said "the input is empty": read twice).
    let mut c = Command::new(env!("CARGO_BIN_EXE_gpufeed"))
        .args(["export", "--perfetto"])
        .args([o, r])
        .args(["--merge", "/dev/stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(c.stdin.take());
    let mut err = String::new();
    std::io::Read::read_to_string(c.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(c.wait().unwrap().code(), Some(2), "{err}");
    assert!(err.contains("is a pipe or a socket"), "{err}");
    assert!(!out.exists());
}

/// Telemetry of other tools at its worst (issue 35): a million distinct GPU ids, a 100 MB line,
/// a header repeated 100,000 times, time going backwards, a thousand GPUs on one row, a `.wandb`
/// run file cut mid-record, an MLflow run of garbage. Each is read with a note or refused in one
/// line, no panic, peak RSS under 200 MB.
#[test]
fn other_tools_telemetry_at_its_worst_stays_bounded() {
    use std::fmt::Write as _;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut cases: Vec<(&str, std::path::PathBuf, &[i32], Option<&str>)> = Vec::new();

    let mut uuids = String::with_capacity(70 << 20);
    for i in 0..1_000_000u32 {
        let _ = writeln!(
            uuids,
            "nvidia_smi_utilization_gpu_ratio{{uuid=\"GPU-{i:08x}\"}} 0.5"
        );
    }
    let p = d.join("uuids.prom");
    std::fs::write(&p, &uuids).unwrap();
    drop(uuids);
    cases.push(("a million uuids", p, &[0], Some("More than 1024 GPUs")));

    let mut ids = String::from("EntityId,GRACT,FBUSD,TimeStamp\n");
    for i in 0..1_000_000u32 {
        let _ = writeln!(ids, "{i},0.5,100,{}", 1_700_000_000 + i / 1000);
    }
    let p = d.join("entities.csv");
    std::fs::write(&p, &ids).unwrap();
    drop(ids);
    cases.push(("a million entity ids", p, &[0], Some("More than 1024 GPUs")));

    // Issue 39 item 7: 40,000 distinct indices took 440 MB and 6 s (quadratic); GPUs past the
    // 1024th are counted, not followed.
    let mut idx = String::from("timestamp, index, utilization.gpu [%], memory.used [MiB]\n");
    for i in 0..200_000u32 {
        let _ = writeln!(
            idx,
            "2026/12/02 12:{:02}:{:02}.000, {i}, 50 %, 1000 MiB",
            i / 3600 % 60,
            i / 60 % 60
        );
    }
    let p = d.join("indices.csv");
    std::fs::write(&p, &idx).unwrap();
    drop(idx);
    cases.push((
        "200,000 distinct nvidia-smi indices",
        p,
        &[0],
        Some("More than 1024 GPUs"),
    ));
    let mut ent = String::from("#Entity   GPUTL  FBUSD\nID\n");
    for i in 0..200_000u32 {
        let _ = writeln!(ent, "GPU {i}     50     1000");
    }
    let p = d.join("entities.dcgmi");
    std::fs::write(&p, &ent).unwrap();
    drop(ent);
    cases.push((
        "200,000 dcgmi entities",
        p,
        &[0],
        Some("More than 1024 GPUs"),
    ));

    let mut long = b"EntityId,GRACT,TimeStamp\n0,0.5,1700000000\n".to_vec();
    long.extend(std::iter::repeat_n(b'9', 100 << 20));
    long.extend(b"\n0,0.6,1700000001\n");
    let p = d.join("long_line.csv");
    std::fs::write(&p, &long).unwrap();
    drop(long);
    cases.push(("a 100 MB line", p, &[0], None));

    let mut headers = String::new();
    for i in 0..100_000u32 {
        headers.push_str("EntityId,GRACT,FBUSD,TimeStamp\n");
        if i % 1000 == 0 {
            let _ = writeln!(headers, "0,0.5,100,{}", 1_700_000_000 + i);
        }
    }
    let p = d.join("headers.csv");
    std::fs::write(&p, &headers).unwrap();
    cases.push(("a header 100,000 times", p, &[0], None));

    let mut back = String::new();
    for i in 0..500u32 {
        let _ = writeln!(
            back,
            "{{\"system.gpu.0.gpu\": {}, \"_timestamp\": {}}}",
            i % 100,
            1_700_000_000 - i * 30
        );
    }
    let p = d.join("backwards.jsonl");
    std::fs::write(&p, &back).unwrap();
    cases.push(("time going backwards", p, &[0], None));

    let mut row = String::from("{");
    for g in 0..2000 {
        let _ = write!(row, "\"system.gpu.{g}.gpu\": 50, ");
    }
    row.push_str("\"_timestamp\": 1700000000}\n");
    let p = d.join("one_row.jsonl");
    std::fs::write(&p, row.repeat(20)).unwrap();
    cases.push(("every GPU on one row", p, &[0], Some("More than 1024 GPUs")));

    let mut wandb = b":W&B\x00\x01\x00\x00".to_vec();
    wandb.extend(random_bytes(10_000, 7));
    let p = d.join("run-abc.wandb");
    std::fs::write(&p, &wandb).unwrap();
    cases.push(("a .wandb cut mid-record", p, &[3], Some("W&B run file")));

    let run = d.join("mlruns/0/abc/metrics/system");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(
        run.join("gpu_0_utilization_percentage"),
        random_bytes(5000, 3),
    )
    .unwrap();
    cases.push((
        "an MLflow run of garbage",
        d.join("mlruns/0/abc"),
        &[3],
        None,
    ));

    for (what, path, codes, says) in cases {
        let (code, stdout, peak) = run_peak_rss(&["diagnose".as_ref(), path.as_os_str()]);
        eprintln!("{what}: exit {code:?}, peak RSS {} MB", peak >> 20);
        assert!(
            code.is_some_and(|c| codes.contains(&c)),
            "{what}: exit {code:?}: {stdout}"
        );
        assert!(peak < 200 << 20, "{what}: peak RSS {} MB", peak >> 20);
        if let Some(says) = says {
            assert!(stdout.contains(says), "{what}: {stdout}");
        }
    }
}
