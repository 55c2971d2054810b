//! Helpers more than one test area needs: the Python the real-framework tests run.

use std::io::Write as _;

/// The Python the tests run (`GPUFEED_TEST_PYTHON`, else `python3`) when it imports `modules`
/// (comma-separated).
pub(crate) fn python_importing(modules: &str) -> Option<String> {
    let p = std::env::var("GPUFEED_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    std::process::Command::new(&p)
        .args(["-c", &format!("import {modules}")])
        .output()
        .is_ok_and(|o| o.status.success())
        .then_some(p)
}

/// As [`python_importing`], saying on stderr that `what` did not run when there is none.
pub(crate) fn python_with(modules: &str, what: &str) -> Option<String> {
    let found = python_importing(modules);
    if found.is_none() {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: no Python with {modules} (set GPUFEED_TEST_PYTHON=/path/to/python): {what} did not run"
        );
    }
    found
}

/// A Python with real PyTorch: `GPUFEED_TEST_PYTHON`, else `python3` when it imports torch.
pub(crate) fn torch_python() -> Option<String> {
    python_importing("torch")
}
