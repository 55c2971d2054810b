//! Issue 36: gpufeed in the notebook. Notebooks executed headlessly by nbclient with the real
//! ipykernel and real PyTorch on the CPU (`GPUFEED_TEST_PYTHON`; skipped loudly without torch,
//! nbclient, ipykernel or PIL): `%%gpufeed` and `with gpufeed.profile()` record the kernel itself
//! (`gpufeed record --pid`) and show the report in the cell's output; a cell that raises, is
//! interrupted, kills the recorder or nests the magic, and a kernel restarted while recording,
//! leave a note, a working kernel and no recorder process behind.

use serde_json::Value;
use std::path::Path;

/// The Python with everything a notebook test needs, or `None` after saying so on stderr.
fn notebook_python(what: &str) -> Option<String> {
    crate::common::python_with("torch, PIL, nbclient, nbformat, ipykernel", what)
}

/// Runs `tests/data/notebook_run.py SCENARIO` (the kernel gets gpufeed's Python package and
/// this build's binary): the cells' outputs and the driver's extra figures.
fn run_notebook(py: &str, scenario: &str, env: &[(&str, &str)]) -> Value {
    let _g = crate::sweep::serial();
    let dir = tempfile::tempdir().unwrap();
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut cmd = std::process::Command::new(py);
    cmd.arg(manifest.join("tests/data/notebook_run.py"))
        .arg(scenario)
        .current_dir(dir.path())
        .env("PYTHONPATH", manifest.join("../../python"))
        .env("GPUFEED_BIN", assert_cmd::cargo::cargo_bin("gpufeed"))
        .env("GPUFEED_NVML_LIB", "/nonexistent/libnvidia-ml.so.1")
        .env("JUPYTER_PLATFORM_DIRS", "1")
        .env_remove("GPUFEED_STEP_SOCKET");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "notebook {scenario}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "notebook {scenario}: bad JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Everything cell `i` showed: its streams, its displays' plain text and HTML, its error.
fn cell_text(nb: &Value, i: usize) -> String {
    let mut s = String::new();
    for o in nb["cells"][i].as_array().unwrap() {
        for v in [
            &o["text"],
            &o["data"]["text/plain"],
            &o["data"]["text/html"],
        ] {
            if let Some(t) = v.as_str() {
                s.push_str(t);
                s.push('\n');
            }
        }
        if o["type"] == "error" {
            s.push_str(&format!("ERROR {}: {}\n", o["ename"], o["evalue"]));
        }
    }
    s
}

/// The output types of cell `i`, in order ("stream", "display_data", "error", ...).
fn kinds(nb: &Value, i: usize) -> Vec<String> {
    nb["cells"][i]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["type"].as_str().unwrap_or("").to_string())
        .collect()
}

/// The number after `key=` in `text`.
fn figure(text: &str, key: &str) -> f64 {
    let at = text
        .find(&format!("{key}="))
        .unwrap_or_else(|| panic!("no {key}= in {text}"));
    text[at + key.len() + 1..]
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|e| panic!("{key}: {e} in {text}"))
}

/// The %%gpufeed report of the kernel itself, in the cell: a loop that decodes a JPEG per
/// sample with `num_workers=0` is input-bound, the decode (PIL's `ImageFile.load`) is its slow
/// stage, and the data wait matches the loop's own clock; then `with gpufeed.profile()` on two
/// workers that keep up is not called input-bound and sees both workers. No recorder is left.
#[test]
fn real_notebook_magic_and_profile_show_the_verdict_in_the_cell() {
    let Some(py) = notebook_python("the real-notebook %%gpufeed test") else {
        return;
    };
    let nb = run_notebook(&py, "train", &[]);
    let magic = cell_text(&nb, 2);
    // The training's own output first, then the report (HTML with a text fallback).
    assert_eq!(kinds(&nb, 2), ["stream", "display_data"], "{magic}");
    let shown = &nb["cells"][2][1]["data"];
    let text = shown["text/plain"].as_str().unwrap();
    assert!(text.contains("VERDICT  input_bound"), "{text}");
    assert!(text.contains("ImageFile.load"), "the decode stage: {text}");
    let html = shown["text/html"].as_str().unwrap();
    assert!(
        html.starts_with("<iframe class=\"gpufeed-report\"") && html.contains("ImageFile.load"),
        "{}",
        &html[..html.len().min(400)]
    );
    let after = cell_text(&nb, 3);
    assert!(after.contains("VERDICT1=input_bound"), "{after}");
    assert!(after.contains("RECORDERS=[]"), "{after}");
    let loop_wait = figure(&magic, "LOOP_WAIT_PCT");
    let report_wait = figure(&after, "REPORT_WAIT_PCT");
    assert!(
        (loop_wait - report_wait).abs() <= 10.0,
        "data wait: the loop's clock {loop_wait}%, gpufeed {report_wait}%"
    );

    render_cell(&nb, 2);

    let workers = cell_text(&nb, 4);
    assert!(!workers.contains("VERDICT2=input_bound"), "{workers}");
    assert!(workers.contains("VERDICT2="), "{workers}");
    assert!(workers.contains("WORKERS2=2"), "{workers}");
    assert!(figure(&workers, "HTML2") > 1000.0, "{workers}");
    assert!(workers.contains("RECORDING2=True"), "{workers}");
    assert!(workers.contains("RECORDERS=[]"), "{workers}");
    let wait2 = figure(&workers, "LOOP_WAIT_PCT");
    assert!(wait2 < 50.0, "two workers keep up: {workers}");
}

/// Bad input in one kernel: a cell that raises shows the report and then its own exception,
/// unchanged; the recorder killed mid-cell is a note and the cell's value is still its Out;
/// a nested %%gpufeed is a note and no second recorder; a cell with no training loop gets a
/// report too; a cell that does not compile records nothing; without the binary the cell runs
/// after one line saying what to do. After each, no recorder is left and the kernel works.
#[test]
fn real_notebook_bad_cells_leave_a_note_and_a_working_kernel() {
    let Some(py) = notebook_python("the real-notebook bad-input test") else {
        return;
    };
    let nb = run_notebook(&py, "bad", &[]);

    let raised = cell_text(&nb, 2);
    assert_eq!(
        kinds(&nb, 2),
        ["stream", "display_data", "error"],
        "the report, then the cell's error: {raised}"
    );
    let err = &nb["cells"][2][2];
    assert_eq!(err["ename"], "ValueError", "{err}");
    assert_eq!(err["evalue"], "boom from the cell", "{err}");
    assert!(raised.contains("VERDICT  input_bound"), "{raised}");
    assert!(cell_text(&nb, 3).contains("RECORDERS=[]"));

    let killed = cell_text(&nb, 4);
    assert!(
        killed.contains(
            "gpufeed: note: the recorder stopped before the cell ended (killed by signal 9): \
             the report covers what it recorded until then"
        ),
        "{killed}"
    );
    assert!(killed.contains("'the cell value'"), "{killed}");
    assert_eq!(killed.matches("LOOP_WAIT_PCT=").count(), 2, "{killed}");
    assert!(cell_text(&nb, 5).contains("RECORDERS=[]"));

    let nested = cell_text(&nb, 6);
    assert!(
        nested.contains("gpufeed: note: gpufeed is already recording this kernel"),
        "{nested}"
    );
    assert!(
        nested.contains("OUTER_RECORDERS=1") && nested.contains("INNER_RECORDERS=1"),
        "{nested}"
    );
    assert_eq!(
        nested.matches("VERDICT  ").count(),
        1,
        "one report: {nested}"
    );

    let idle = cell_text(&nb, 7);
    assert!(idle.contains("VERDICT  "), "{idle}");
    assert!(idle.contains("499500"), "the cell's value: {idle}");

    let last = cell_text(&nb, 8);
    assert!(
        last.contains("RECORDERS=[]") && last.contains("ALIVE"),
        "{last}"
    );

    // A cell that does not compile: its SyntaxError, and nothing recorded or shown.
    assert_eq!(kinds(&nb, 9), ["error"], "{}", cell_text(&nb, 9));
    assert_eq!(nb["cells"][9][0]["ename"], "SyntaxError");

    // No binary: one line saying what to do, and the cell runs without gpufeed.
    let without = cell_text(&nb, 11);
    assert!(
        without.contains(
            "gpufeed: GPUFEED_BIN=/nonexistent/gpufeed is not an executable file: point it at \
             the gpufeed binary, or unset it; the cell runs without gpufeed"
        ),
        "{without}"
    );
    assert!(without.contains("RAN WITHOUT"), "{without}");
    assert!(!without.contains("VERDICT"), "{without}");
    let end = cell_text(&nb, 12);
    assert!(
        end.contains("RECORDERS=[]") && end.contains("ALIVE"),
        "{end}"
    );
}

/// Kernel -> Interrupt (SIGINT to the kernel) during a %%gpufeed cell: the report of what ran
/// is shown, the KeyboardInterrupt is the cell's error, the kernel goes on, no recorder is left.
#[test]
fn real_notebook_interrupted_cell_shows_the_report_and_stops_the_recorder() {
    let Some(py) = notebook_python("the real-notebook interrupt test") else {
        return;
    };
    let nb = run_notebook(&py, "interrupt", &[]);
    let cell = cell_text(&nb, 2);
    assert_eq!(kinds(&nb, 2), ["stream", "display_data", "error"], "{cell}");
    assert_eq!(nb["cells"][2][2]["ename"], "KeyboardInterrupt");
    assert!(cell.contains("VERDICT  input_bound"), "{cell}");
    let next = cell_text(&nb, 3);
    assert!(
        next.contains("RECORDERS=[]") && next.contains("ALIVE"),
        "{next}"
    );
}

/// The kernel restarted while `%gpufeed start` records: the recorder sees its process gone
/// and ends (its recording closed), never left running.
#[test]
fn real_notebook_kernel_restart_ends_the_recorder() {
    let Some(py) = notebook_python("the real-notebook restart test") else {
        return;
    };
    let nb = run_notebook(&py, "restart", &[]);
    assert!(
        cell_text(&nb, 2).contains("gpufeed: recording this kernel to "),
        "{}",
        cell_text(&nb, 2)
    );
    let extra = &nb["extra"];
    assert_eq!(extra["recorder_alive"], false, "{extra}");
    assert!(
        extra["recorder_gone_after_s"].as_f64().unwrap() < 5.0,
        "{extra}"
    );
}

/// Renders cell `i`'s outputs as a notebook shows them (its stream text, then its HTML) with
/// headless Chromium, when there is one, in a 900×700 window: the framed report must render,
/// its top fix must be on the first screen and nothing may scroll sideways. With
/// `GPUFEED_NOTEBOOK_PNG=PATH` the first screen's picture is kept there (docs/notebooks.md's
/// screenshot).
fn render_cell(nb: &Value, i: usize) {
    let dir = tempfile::tempdir().unwrap();
    let mut page = String::from(
        "<!doctype html><meta charset=utf-8><body style=\"font-family:sans-serif;margin:8px\">",
    );
    for o in nb["cells"][i].as_array().unwrap() {
        if let Some(t) = o["text"].as_str() {
            page.push_str("<pre style=\"margin:4px 0\">");
            page.push_str(&t.replace('&', "&amp;").replace('<', "&lt;"));
            page.push_str("</pre>");
        } else if let Some(h) = o["data"]["text/html"].as_str() {
            page.push_str(h);
        }
    }
    page.push_str("</body>");
    if let Some(m) = crate::reports::measure_first_screen(&page, "the %%gpufeed cell") {
        crate::reports::assert_fix_on_first_screen(&m, "the %%gpufeed cell");
    }
    let html = dir.path().join("cell.html");
    std::fs::write(&html, page).unwrap();
    let png = std::env::var_os("GPUFEED_NOTEBOOK_PNG")
        .map_or_else(|| dir.path().join("cell.png"), std::path::PathBuf::from);
    // Headless Chromium's --screenshot may be taken before a srcdoc frame has painted (a blank
    // frame, about 8-15 KB, one time in three here): a few tries.
    let mut sizes = Vec::new();
    for _ in 0..5 {
        let Some(bytes) = crate::reports::render_png_at(&html, &png, "900,700") else {
            return;
        };
        sizes.push(bytes);
        if bytes > 40_000 {
            return;
        }
    }
    panic!("the framed report never rendered (PNG sizes {sizes:?}: blank pages)");
}

/// Issue 47 item 2: `%%gpufeed` under a real IPython shell (python/tests/test_magic.py, with this
/// build's binary): a bad option raises before the cell runs, a bad value says what is wrong in
/// one line, top-level `await` and a trailing `;` behave as without the magic, an interrupt at
/// any moment of the recorder's start leaves no recorder and no kernel marked as recording, and
/// the report's frame allows no script.
#[test]
fn the_magic_under_a_real_ipython_shell() {
    let Some(py) = crate::common::python_with("IPython", "the %%gpufeed magic tests") else {
        return;
    };
    let _g = crate::sweep::serial();
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new(py)
        .args(["-m", "unittest", "-v", "test_magic"])
        .current_dir(manifest.join("../../python/tests"))
        .env("GPUFEED_BIN", assert_cmd::cargo::cargo_bin("gpufeed"))
        .env("GPUFEED_NVML_LIB", "/nonexistent/libnvidia-ml.so.1")
        .env_remove("GPUFEED_STEP_SOCKET")
        .env_remove("GPUFEED_TEST_INSTALLED")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(
        !said.contains("SKIPPED"),
        "every case must run here: {said}"
    );
}
