//! The integration tests: one binary (ripgrep's layout), one module per area. Each runs the
//! real `gpufeed` binary as a child process (assert_cmd); `common_fake` builds the fake NVML.

mod analyze_ranks;
mod analyze_rules;
mod analyze_traces;
mod bad_inputs;
mod cli_limits;
mod common_fake;
mod completions_man;
mod dashboard;
mod deploy_files;
mod diagnose_cli;
mod diagnose_job;
mod diagnose_logs;
mod diagnose_scenarios;
mod doctor;
mod fleet_prometheus;
mod inject;
mod outputs;
mod processes;
mod pystacks;
mod record;
mod reports;
mod serve;
mod serve_http;
mod sweep;
mod watch;

/// The `gpufeed` binary under test, with no driver or scenario inherited from the environment
/// (a test that wants the fake NVML sets it) and no colour.
pub fn gpufeed() -> assert_cmd::Command {
    let mut c = assert_cmd::Command::cargo_bin("gpufeed").unwrap();
    c.env_remove("GPUFEED_NVML_LIB")
        .env_remove("FAKE_NVML_SCENARIO")
        .env("NO_COLOR", "1");
    c
}

/// `../shared/traces` (real profiler traces, never copied into the repository), or `None` after
/// saying loudly on stderr that `what` did not run.
pub fn shared_traces(what: &str) -> Option<std::path::PathBuf> {
    let d = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces");
    if d.is_dir() {
        Some(d)
    } else {
        // Straight to stderr, not eprintln!: the test harness captures that, and a skip must show.
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: {} not found: {what} did not run",
            d.display()
        );
        None
    }
}
