//! `--html` reports (rendered in headless Chromium when it is installed) and
//! `export --perfetto`, through the binary.

use crate::gpufeed;
use crate::h100_header;
use crate::read_json;
use gpufeed::header_line;
use gpufeed::{End, Line, ProcsLine};
use gpufeed::{GpuSample, HostSample, ProcSample, ProcStart};
use predicates::prelude::*;
use std::io::Write;
use std::path::{Path, PathBuf};

const START_US: u64 = 1_764_676_800_000_000;

/// 20 s of a starving job: GPU 0 square wave, 4 cores with 2 pinned, a main and 2 workers.
fn recording(dir: &Path) -> PathBuf {
    let p = dir.join("rec.ndjson");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&p).unwrap());
    let mut h = h100_header("node1", 4, 1);
    h.start_time = "2025-12-02T12:00:00.000Z".into();
    h.start_unix_us = START_US;
    h.host.cpus_allowed = Some(4);
    h.command = Some(vec!["python".into(), "train.py".into()]);
    h.pid = Some(100);
    writeln!(f, "{}", header_line(&h)).unwrap();
    let mut line = |l: Line| writeln!(f, "{}", serde_json::to_string(&l).unwrap()).unwrap();
    for (pid, ppid, comm) in [
        (100, 1, "python"),
        (101, 100, "pt_data_worker"),
        (102, 100, "pt_data_worker"),
    ] {
        line(Line::ProcStart(ProcStart {
            t_s: 0.0,
            pid,
            ppid,
            cmd: Some("python train.py".into()),
            comm: Some(comm.into()),
        }));
    }
    for k in 1..=40u64 {
        let t = k as f64 * 0.5;
        let samples = (0..3)
            .map(|j| {
                let ts = t - 0.5 + (j as f64 + 1.0) / 6.0;
                [ts, if ts % 2.0 < 0.6 { 90.0 } else { 8.0 }]
            })
            .collect();
        line(Line::Gpu(GpuSample {
            index: 0,
            t_s: t,
            util_samples: Some(samples),
            mem_used_bytes: Some(60 << 30),
            pcie_rx_bytes: Some(k * 1_000_000_000),
            pcie_tx_bytes: Some(k * 10_000_000),
            pcie_gen: Some(4),
            pcie_width: Some(16),
            ..Default::default()
        }));
        line(Line::Host(HostSample {
            t_s: t,
            cpu_pct: vec![99.0, 97.0, 6.0, 3.0],
            cpu_total_pct: Some(51.0),
            ..Default::default()
        }));
        line(Line::Procs(ProcsLine {
            t_s: t,
            procs: [(100, 30.0), (101, 99.0), (102, 98.0)]
                .into_iter()
                .map(|(pid, c)| ProcSample {
                    pid,
                    cpu_pct: Some(c),
                    state: Some('R'),
                    ..Default::default()
                })
                .collect(),
        }));
    }
    line(Line::End(End {
        t_s: 20.0,
        exit_code: Some(0),
        ..Default::default()
    }));
    f.flush().unwrap();
    p
}

fn assert_self_contained(html: &str) {
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(!html.contains("<script"), "no scripts");
    for bad in [
        "src=\"http",
        "href=\"http",
        "@import",
        "url(http",
        "@font-face",
    ] {
        assert!(!html.contains(bad), "external reference {bad}");
    }
}

fn chromium() -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .flat_map(|d| [d.join("chromium"), d.join("chromium-browser")])
        .find(|p| p.is_file())
}

/// Renders `html` to a PNG with headless Chromium (flags from notes/services.md); None if absent.
pub(crate) fn render_png(html: &Path, png: &Path) -> Option<u64> {
    render_png_at(html, png, "1280,2000")
}

/// [`render_png`] in a window of `size` (`"900,700"`).
pub(crate) fn render_png_at(html: &Path, png: &Path, size: &str) -> Option<u64> {
    let Some(c) = chromium() else {
        let _ = writeln!(std::io::stderr(), "SKIPPED rendering {}: chromium is not installed (apt-get install chromium; .ci/run does)", html.display());
        return None;
    };
    let profile = tempfile::tempdir().unwrap();
    let st = std::process::Command::new(c)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("--window-size={size}"))
        .arg(format!("file://{}", html.display()))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(st.success(), "chromium failed on {}", html.display());
    Some(std::fs::metadata(png).unwrap().len())
}

#[test]
fn diagnose_html_has_charts_findings_and_renders() {
    let dir = tempfile::tempdir().unwrap();
    let rec = recording(dir.path());
    let out = dir.path().join("report.html");
    gpufeed()
        .args(["diagnose", "--html"])
        .arg(&out)
        .arg(&rec)
        .assert()
        .success()
        .stderr(predicate::str::contains(format!("wrote {}", out.display())));
    let html = std::fs::read_to_string(&out).unwrap();
    assert_self_contained(&html);
    assert_eq!(
        html.matches("<svg").count(),
        5,
        "utilization, memory, CPU heat strip, busy cores, PCIe"
    );
    assert!(html.contains("GPU utilization (%)"));
    assert!(html.contains("GPU memory used (GiB of 80.0 GiB)"));
    assert!(
        html.contains("link capacity (31.5 GB/s, gen 4 x16)"),
        "PCIe capacity line"
    );
    assert!(
        html.contains("\ncpu0\n") && html.contains("\ncpu3\n"),
        "core labels"
    );
    assert!(html.contains("linear-gradient"), "colour scale");
    assert!(
        html.contains("the job&apos;s processes"),
        "the job apart from the machine"
    );
    assert!(html.contains("<h2>The job's processes</h2>") && html.contains("3 processes"));
    assert!(html.contains("CPU busy per core (%)"));
    assert!(html.contains("PCIe traffic (GB/s)"));
    assert!(html.contains("input_bound"));
    assert!(
        html.contains("<section class=\"topfix\" id=\"top-fix\"><h2>Top fix"),
        "the top fix's box"
    );
    if let Some(size) = render_png(&out, &dir.path().join("report.png")) {
        assert!(
            size > 30_000,
            "a rendered page with charts, got {size} bytes"
        );
    }
    // Logs without host data still get a page (utilization from the evidence).
    let log = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/smi_query_starving.csv");
    gpufeed()
        .args(["diagnose", "--html"])
        .arg(dir.path().join("log.html"))
        .arg(&log)
        .assert()
        .success();
    let html = std::fs::read_to_string(dir.path().join("log.html")).unwrap();
    assert_self_contained(&html);
    assert!(html.contains("<svg"));
}

#[test]
fn analyze_html_has_the_step_breakdown() {
    let trace = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/traces/kineto_resnet50_v100_workers0.json.gz");
    if !trace.exists() {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED analyze_html_has_the_step_breakdown: {} is absent",
            trace.display()
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("trace.html");
    gpufeed()
        .args(["analyze", "--html"])
        .arg(&out)
        .arg(&trace)
        .assert()
        .success();
    let html = std::fs::read_to_string(&out).unwrap();
    assert_self_contained(&html);
    assert!(html.contains("Time per step by category (ms)"));
    assert!(html.contains("dataloader"));
    assert!(html.contains("input_bound"));
    if let Some(size) = render_png(&out, &dir.path().join("trace.png")) {
        assert!(size > 30_000, "{size}");
    }
}

#[test]
fn run_html_without_gpu_and_bad_output_path() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run.html");
    gpufeed()
        .env("GPUFEED_NVML_LIB", "/nonexistent/libnvidia-ml.so.1")
        .args(["run", "-q", "-o"])
        .arg(dir.path().join("r.ndjson"))
        .arg("--html")
        .arg(&out)
        .args(["--", "sh", "-c", "sleep 0.5"])
        .assert()
        .success();
    let html = std::fs::read_to_string(&out).unwrap();
    assert_self_contained(&html);
    assert!(html.contains("CPU busy per core"));
    let rec = recording(dir.path());
    gpufeed()
        .args(["diagnose", "--html", "/nonexistent-dir/x.html"])
        .arg(&rec)
        .assert()
        .code(3)
        .stderr(predicate::str::contains(
            "cannot write /nonexistent-dir/x.html",
        ));
}

#[test]
fn perfetto_export_has_counter_tracks() {
    let dir = tempfile::tempdir().unwrap();
    let rec = recording(dir.path());
    let out = dir.path().join("p.json");
    gpufeed()
        .args(["export", "--perfetto"])
        .arg(&out)
        .arg(&rec)
        .assert()
        .success()
        .stderr(predicate::str::contains("counter events"));
    let v = read_json(&out);
    let ev = v["traceEvents"].as_array().unwrap();
    let names = |n: &str| ev.iter().filter(|e| e["name"] == n).count();
    assert_eq!(names("utilization %"), 120);
    assert_eq!(names("cpu0 %"), 40);
    assert_eq!(names("PCIe GB/s"), 39);
    assert_eq!(names("memory used GiB"), 40);
    let worker: Vec<_> = ev
        .iter()
        .filter(|e| e["name"] == "CPU % (gpufeed)" && e["pid"] == 101)
        .collect();
    assert_eq!(worker.len(), 40);
    assert_eq!(worker[0]["args"]["cpu_pct"], 99.0);
    // One time base: Unix epoch microseconds.
    let first_util = ev.iter().find(|e| e["name"] == "utilization %").unwrap();
    let ts = first_util["ts"].as_f64().unwrap();
    assert!((ts - (START_US as f64 + 1e6 / 6.0)).abs() < 1.0, "{ts}");
    let pcie = ev.iter().find(|e| e["name"] == "PCIe GB/s").unwrap();
    assert!((pcie["args"]["rx_gb_per_s"].as_f64().unwrap() - 2.0).abs() < 1e-9);
}

#[test]
fn perfetto_merge_puts_kineto_on_the_same_time_base() {
    let dir = tempfile::tempdir().unwrap();
    let rec = recording(dir.path());
    // A Kineto trace whose ts are relative to baseTimeNanoseconds (newer PyTorch).
    let base_ns = (START_US + 2_000_000) * 1000;
    let trace = dir.path().join("t.json");
    std::fs::write(
        &trace,
        format!(
            r#"{{"schemaVersion":1,"deviceProperties":[{{"id":0,"name":"H100"}}],"baseTimeNanoseconds":{base_ns},
"traceEvents":[{{"ph":"X","cat":"kernel","name":"gemm","pid":0,"tid":7,"ts":100.0,"dur":50.0}},
{{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":100,"tid":100,"ts":10.0,"dur":80.0}}]}}"#
        ),
    )
    .unwrap();
    let out = dir.path().join("m.json");
    gpufeed()
        .args(["export", "--perfetto"])
        .arg(&out)
        .arg(&rec)
        .arg("--merge")
        .arg(&trace)
        .assert()
        .success()
        .stderr(predicate::str::contains("2 trace events"))
        .stderr(predicate::str::contains("do not overlap").not());
    let v = read_json(&out);
    assert_eq!(v["deviceProperties"][0]["name"], "H100");
    assert!(v.get("baseTimeNanoseconds").is_none());
    let ev = v["traceEvents"].as_array().unwrap();
    let gemm = ev.iter().find(|e| e["name"] == "gemm").unwrap();
    assert_eq!(
        gemm["ts"].as_f64().unwrap(),
        (START_US + 2_000_000) as f64 + 100.0
    );
    assert!(ev.iter().any(|e| e["name"] == "utilization %"));
    // A trace from another day: said so.
    let other = dir.path().join("other.json");
    std::fs::write(
        &other,
        format!(
            r#"{{"baseTimeNanoseconds":{},"traceEvents":[{{"ph":"X","cat":"kernel","name":"gemm","pid":0,"tid":7,"ts":100.0,"dur":50.0}}]}}"#,
            (START_US + 86_400_000_000) * 1000
        ),
    )
    .unwrap();
    gpufeed()
        .args(["export", "--perfetto"])
        .arg(dir.path().join("o.json"))
        .arg(&rec)
        .arg("--merge")
        .arg(&other)
        .assert()
        .success()
        .stderr(predicate::str::contains(
            "warning: the trace and the recording do not overlap in time: the trace starts after the recording by 23h 59m 40s",
        ));
    // Bad inputs: one line, exit 3.
    gpufeed()
        .args(["export", "--perfetto"])
        .arg(dir.path().join("x.json"))
        .arg(dir.path().join("missing.ndjson"))
        .assert()
        .code(3)
        .stderr(predicate::str::contains("cannot open recording"));
    std::fs::write(dir.path().join("bad.json"), "{\"nope\":1}").unwrap();
    gpufeed()
        .args(["export", "--perfetto"])
        .arg(dir.path().join("x.json"))
        .arg(&rec)
        .arg("--merge")
        .arg(dir.path().join("bad.json"))
        .assert()
        .code(3)
        .stderr(predicate::str::contains("no trace events"));
}

/// `export --merge` reads the trace with analyze's reader: what analyze accepts (a cut `.gz`, a
/// byte-order mark, a non-UTF-8 name) merges, what it refuses (no events) is refused the same way.
#[test]
fn perfetto_merge_reads_traces_as_analyze_does() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let rec = recording(dir.path());
    let mut text = String::from("{\"traceEvents\":[\n");
    for i in 0..3000 {
        text.push_str(&format!(
            "{{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"k{i}\",\"pid\":0,\"tid\":7,\"ts\":{},\"dur\":5}},\n",
            START_US + i * 10
        ));
    }
    text.push_str("{\"ph\":\"X\",\"name\":\"last\",\"pid\":0,\"tid\":7,\"ts\":1,\"dur\":1}]}");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(text.as_bytes()).unwrap();
    let gz = gz.finish().unwrap();
    let cut = dir.path().join("cut.json.gz");
    std::fs::write(&cut, &gz[..gz.len() * 2 / 3]).unwrap();
    let bom = dir.path().join("bom.json");
    let mut b = b"\xEF\xBB\xBF{\"traceEvents\":[{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"caf\xe9\",\"pid\":1,\"tid\":1,\"ts\":".to_vec();
    b.extend_from_slice(format!("{},\"dur\":3}}]}}", START_US + 5).as_bytes());
    std::fs::write(&bom, b).unwrap();
    for (trace, events, warned) in [(&cut, None, true), (&bom, Some(1), false)] {
        gpufeed().arg("analyze").arg(trace).assert().success();
        let out = dir.path().join("m.json");
        let a = gpufeed()
            .args(["export", "--perfetto"])
            .arg(&out)
            .arg(&rec)
            .arg("--merge")
            .arg(trace)
            .assert()
            .success();
        let err = String::from_utf8_lossy(&a.get_output().stderr).to_string();
        assert_eq!(err.contains("warning: the merged trace"), warned, "{err}");
        let v = read_json(&out);
        let n = v["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X")
            .count();
        match events {
            Some(k) => assert_eq!(n, k),
            None => assert!(n > 100 && n < 3001, "{n}"),
        }
    }
    let v = read_json(&dir.path().join("m.json"));
    assert!(v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["name"] == "caf\u{FFFD}"));
    let empty = dir.path().join("empty.json");
    std::fs::write(&empty, r#"{"traceEvents":[]}"#).unwrap();
    let analyze = gpufeed().arg("analyze").arg(&empty).assert().code(3);
    let analyze_err = String::from_utf8_lossy(&analyze.get_output().stderr).to_string();
    assert!(analyze_err.contains("no trace events"), "{analyze_err}");
    gpufeed()
        .args(["export", "--perfetto"])
        .arg(dir.path().join("e.json"))
        .arg(&rec)
        .arg("--merge")
        .arg(&empty)
        .assert()
        .code(3)
        .stderr(predicate::str::contains("no trace events"));
    assert!(!dir.path().join("e.json").exists());
}

/// Where a report's top fix lies when headless Chromium shows it in a 900×700 window, and
/// whether the page is wider than its frame (a horizontal scroll bar).
#[derive(Debug, serde::Deserialize)]
pub(crate) struct FirstScreen {
    /// The top fix's box, in the window's pixels (`found`: the page has one).
    pub found: bool,
    pub top: f64,
    pub bottom: f64,
    /// The window's visible height (what the first screen shows).
    pub view_h: f64,
    /// The report's own width against its frame's (or the window's).
    pub scroll_w: f64,
    pub client_w: f64,
}

/// Measures `page` (a whole HTML document) in headless Chromium at 900×700: a copy of it gets a
/// small script that writes the rectangles into the DOM, which `--dump-dom` prints. A page that
/// holds the notebook's frame (`iframe.gpufeed-report`) is measured inside the frame; the copy
/// drops the frame's sandbox so that the script may read it (the layout is the same). `None`
/// (said on stderr) without Chromium.
pub(crate) fn measure_first_screen(page: &str, what: &str) -> Option<FirstScreen> {
    let Some(c) = chromium() else {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED measuring {what} at 900x700: chromium is not installed (apt-get install chromium; .ci/run does)"
        );
        return None;
    };
    const MEASURE: &str = "<script>addEventListener('load',function(){\
var f=document.querySelector('iframe.gpufeed-report'),d=f?f.contentDocument:document,\
off=f?f.getBoundingClientRect().top+f.clientTop:0,b=d.getElementById('top-fix'),\
r=b?b.getBoundingClientRect():null,m={found:!!b,top:r?off+r.top:-1,bottom:r?off+r.bottom:-1,\
view_h:innerHeight,scroll_w:d.documentElement.scrollWidth,client_w:d.documentElement.clientWidth},\
p=document.createElement('pre');p.textContent='MEASURE'+JSON.stringify(m)+'END';\
document.body.appendChild(p);});</script>";
    let mut copy = without_sandbox(page);
    match copy.rfind("</body>") {
        Some(at) => copy.insert_str(at, MEASURE),
        None => copy.push_str(MEASURE),
    }
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("measure.html");
    std::fs::write(&html, copy).unwrap();
    let out = std::process::Command::new(c)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            "--hide-scrollbars",
            "--window-size=900,700",
            "--virtual-time-budget=5000",
            "--dump-dom",
        ])
        .arg(format!(
            "--user-data-dir={}",
            dir.path().join("profile").display()
        ))
        .arg(format!("file://{}", html.display()))
        .stderr(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "chromium failed on {what}");
    let dom = String::from_utf8_lossy(&out.stdout);
    // The script's own text holds the marker too: the measurement is the last one.
    let at = dom
        .rfind("MEASURE{")
        .unwrap_or_else(|| panic!("{what}: no measurement in the DOM"));
    let json = &dom[at + "MEASURE".len()..];
    let json = &json[..json.find("END").unwrap()];
    Some(serde_json::from_str(&json.replace("&quot;", "\"")).unwrap())
}

/// `page` without its frame's `sandbox` attribute, whatever it allows (the attribute follows
/// the frame's `srcdoc`, so the last one is the frame's own).
fn without_sandbox(page: &str) -> String {
    let Some(at) = page.rfind(" sandbox") else {
        return page.to_string();
    };
    let rest = &page[at + " sandbox".len()..];
    let len = match rest.strip_prefix("=\"") {
        Some(v) => " sandbox=\"".len() + v.find('"').unwrap() + 1,
        None => " sandbox".len(),
    };
    format!("{}{}", &page[..at], &page[at + len..])
}

/// The notebook's cell output for a report page: the cell's own printed line, then the frame
/// `gpufeed._profile.iframe` makes (the Python package's own code). `None` without python3.
pub(crate) fn notebook_output(page: &str) -> Option<String> {
    let Some(py) = crate::which("python3") else {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: no python3: the notebook's frame was not made"
        );
        return None;
    };
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("page.html");
    std::fs::write(&p, page).unwrap();
    let out = std::process::Command::new(py)
        .args([
            "-c",
            "import sys; from gpufeed._profile import iframe; \
             sys.stdout.write(iframe(open(sys.argv[1], encoding='utf-8').read()))",
        ])
        .arg(&p)
        .env(
            "PYTHONPATH",
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python"),
        )
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "iframe(): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(format!(
        "<!doctype html><meta charset=utf-8><body style=\"font-family:sans-serif;margin:8px\">\
<pre style=\"margin:4px 0\">LOOP_WAIT_PCT=98.6 STEPS_PER_S=72.60</pre>{}</body>",
        String::from_utf8(out.stdout).unwrap()
    ))
}

/// Asserts that the top fix is on the first screen and nothing scrolls sideways.
pub(crate) fn assert_fix_on_first_screen(m: &FirstScreen, what: &str) {
    let _ = writeln!(std::io::stderr(), "{what} at 900x700: {m:?}");
    assert!(m.found, "{what}: no top-fix box: {m:?}");
    assert!(
        m.top >= 0.0 && m.bottom <= m.view_h,
        "{what}: the top fix is not inside the first screen (900x700, {} px visible): {m:?}",
        m.view_h
    );
    assert!(
        m.scroll_w <= m.client_w,
        "{what}: wider than its frame, a horizontal scroll bar: {m:?}"
    );
}

/// The report people open leads with the fix: in a 900×700 window, directly and in the
/// notebook's frame, the top fix's box is on the first screen, and nothing scrolls sideways
/// (issue 48: it was the fifth section, 39 kB into the page, and the page was wider than the
/// frame).
#[test]
fn html_report_shows_the_top_fix_on_the_first_screen_at_900px() {
    let dir = tempfile::tempdir().unwrap();
    let rec = recording(dir.path());
    let out = dir.path().join("report.html");
    gpufeed()
        .args(["diagnose", "--html"])
        .arg(&out)
        .arg(&rec)
        .assert()
        .success();
    let page = std::fs::read_to_string(&out).unwrap();
    assert!(page.contains("id=\"top-fix\""), "a top-fix box");
    let fix = page.find("id=\"top-fix\"").unwrap();
    let first_chart = page.find("<svg").unwrap();
    assert!(fix < first_chart, "the fix before the charts");
    assert!(
        page.contains("<pre class=\"apply\""),
        "the code that applies the fix, on a line to copy"
    );
    assert!(page.contains("prefers-color-scheme:dark"), "a dark theme");
    if let Some(m) = measure_first_screen(&page, "diagnose --html") {
        assert_fix_on_first_screen(&m, "diagnose --html");
    }
    if let Some(nb) = notebook_output(&page) {
        assert!(!nb.contains("<script"), "the frame needs no script");
        if let Some(m) = measure_first_screen(&nb, "the notebook's cell output") {
            assert_fix_on_first_screen(&m, "the notebook's cell output");
        }
    }
}

/// A recording of a real loop's Python stacks (`num_workers=0`, the stacks' data wait about 60%,
/// 6.5 s of samples) with step markers added that time 10 steps a second for `seconds`, waiting 99% for
/// data: the markers' figure wins.
fn markers_and_stacks_differ(dir: &Path, seconds: u32) -> PathBuf {
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pystacks/plain0.ndjson");
    let text = std::fs::read_to_string(fixture).unwrap();
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let end = lines.pop().unwrap();
    for k in 1..=seconds {
        lines.push(format!(
            r#"{{"type":"steps","t_s":{},"dt_s":1.0,"steps":10,"span_s":1.0,"wait_s":0.99}}"#,
            10 + k
        ));
    }
    lines.push(end);
    let p = dir.join(format!("steps{seconds}.ndjson"));
    std::fs::write(&p, lines.join("\n") + "\n").unwrap();
    p
}

/// One data-wait figure (issue 48): where the step markers (99%) and the stacks (60%) differ,
/// the verdict, the key figures and the loop's phases of the text, Markdown and HTML reports all
/// give the markers' 99%, and the stacks' own share is said once, in the note that says why it
/// differs. The loop's page also fits a 900-pixel frame (its phase bar was 1,100 pixels wide).
#[test]
fn one_data_wait_figure_in_every_report() {
    let dir = tempfile::tempdir().unwrap();
    let rec = markers_and_stacks_differ(dir.path(), 20);
    let run = |format: &str| {
        let out = gpufeed()
            .args(["diagnose", "--format", format])
            .arg(&rec)
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    // The stacks' own share and how long they sampled, as the JSON gives them.
    let json: serde_json::Value = serde_json::from_str(&run("json")).unwrap();
    let py = &json["python"];
    let stacks_pct = format!("{:.0}%", py["data_wait_pct"].as_f64().unwrap());
    let sampled_s = format!(
        "{:.1} s",
        py["main"]["samples"].as_f64().unwrap() / py["rate_hz"].as_f64().unwrap()
    );
    assert_ne!(stacks_pct, "99%");
    let text = run("text");
    assert!(text.contains("waits for data 99% of its time"), "{text}");
    assert!(
        text.contains("  data_wait 99%  "),
        "the loop's phases: {text}"
    );
    let stacks: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(&format!(" {stacks_pct}")))
        .collect();
    assert_eq!(stacks.len(), 1, "the stacks' share said once: {text}");
    assert!(
        stacks[0].starts_with("NOTE  Data wait 99% is from the job's step markers")
            && stacks[0].contains(&format!("the Python stacks' {stacks_pct} is an estimate")),
        "{text}"
    );
    // Steps that are a part of what the stacks sampled (2 s of 6.5): that is the reason given.
    let short = markers_and_stacks_differ(dir.path(), 2);
    let out = gpufeed().arg("diagnose").arg(&short).output().unwrap();
    let short = String::from_utf8(out.stdout).unwrap();
    let expected = format!(
        "NOTE  Data wait 99% is from the job's step markers (every step timed); the Python \
         stacks' {stacks_pct} is lower because they sample the training thread for all {sampled_s} \
         it was recorded, time outside the 20 timed steps (2.0 s) included."
    );
    assert!(short.contains(&expected), "{expected}\n{short}");
    let md = run("markdown");
    assert!(md.contains("| data_wait | 99.0% |"), "{md}");
    assert!(md.contains("waits for data 99% of its time"), "{md}");
    let top = md.find("## Top fix").unwrap();
    assert!(top < md.find("## Findings").unwrap() && top < md.find("## Training loop").unwrap());
    assert!(
        md.contains("```python\nDataLoader(dataset, batch_size=..., num_workers="),
        "the code to copy: {md}"
    );

    let out = dir.path().join("report.html");
    gpufeed()
        .args(["diagnose", "--html"])
        .arg(&out)
        .arg(&rec)
        .assert()
        .success();
    let html = std::fs::read_to_string(&out).unwrap();
    assert!(
        html.contains("<dt>data wait</dt><dd>99% <small>from the step markers</small>"),
        "the key figure"
    );
    assert!(
        html.contains("<td>data_wait</td><td>99.0%</td>"),
        "the loop's phases"
    );
    assert!(
        html.contains("ImageFile.py:425"),
        "the slow stage with its line"
    );
    let order: Vec<usize> = [
        "class=\"verdict",
        "id=\"top-fix\"",
        "id=\"key-figures\"",
        "<h2>Training loop",
    ]
    .iter()
    .map(|m| html.find(m).unwrap_or_else(|| panic!("no {m}")))
    .collect();
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "reading order: {order:?}"
    );
    // In the page's text (not the evidence table of every figure), the stacks' share once.
    let shown = html.split("<details>").next().unwrap().to_string()
        + html.split("</details>").nth(1).unwrap_or("");
    assert_eq!(
        shown.matches(&format!(">{stacks_pct}<")).count()
            + shown.matches(&format!(" {stacks_pct} ")).count(),
        1,
        "{shown}"
    );
    if let Some(m) = measure_first_screen(&html, "the loop's page") {
        assert_fix_on_first_screen(&m, "the loop's page");
    }
    if let Some(nb) = notebook_output(&html) {
        if let Some(m) = measure_first_screen(&nb, "the loop's page in the notebook") {
            assert_fix_on_first_screen(&m, "the loop's page in the notebook");
        }
    }
}
