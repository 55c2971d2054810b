// Shared by integration tests (included with `mod common_fake;`): locating the fake NVML library.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::OnceLock;

/// Directory of the built binaries (target/debug or target/release).
pub fn target_dir() -> PathBuf {
    let bin = assert_cmd::cargo::cargo_bin("gpufeed");
    bin.parent().expect("binary has a directory").to_path_buf()
}

/// Path of libfake_nvml.so, building the fake-nvml crate first when it is not there yet.
/// `cargo test` refreshes only target/debug/deps/libfake_nvml.so (not target/debug/), so the
/// newer of the two copies is used.
pub fn fake_nvml() -> PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let newest = || {
            let dir = target_dir();
            [
                dir.join("libfake_nvml.so"),
                dir.join("deps").join("libfake_nvml.so"),
            ]
            .into_iter()
            .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
            .max()
            .map(|(_, p)| p)
        };
        if let Some(p) = newest() {
            return p;
        }
        let status = std::process::Command::new(env!("CARGO"))
            .args(["build", "-p", "fake-nvml"])
            .status()
            .expect("cargo runs");
        assert!(status.success(), "building fake-nvml failed");
        newest().expect("libfake_nvml.so exists after building fake-nvml")
    })
    .clone()
}

/// Writes a scenario file into `dir` and returns its path.
pub fn scenario(dir: &std::path::Path, json: &str) -> PathBuf {
    let p = dir.join("scenario.json");
    std::fs::write(&p, json).unwrap();
    p
}
