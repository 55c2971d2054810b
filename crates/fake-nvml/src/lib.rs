//! `fake-nvml`: a test double of `libnvidia-ml.so`.
//!
//! Built as `libfake_nvml.so`, it exports the NVML functions gpufeed uses, with NVML's C ABI,
//! and answers them from a JSON scenario named by `FAKE_NVML_SCENARIO` (read in `nvmlInit_v2`,
//! played against the wall clock since init). See `README.md` for the scenario format.
//!
//! - [`scenario`]: parsing, validation and evaluation of the scenario (pure Rust, unit-tested).
//! - [`procs`]: expanding `"children"` / `"self"` PIDs from /proc.
//! - [`types`]: NVML's C structs and constants.
//! - [`ffi`]: the exported functions (thin).

pub mod ffi;
pub mod procs;
pub mod scenario;
pub mod types;

/// The file name of the built library.
pub const LIBRARY_FILE_NAME: &str = "libfake_nvml.so";

/// Finds the built `libfake_nvml.so` for a test executable in `target/<profile>/deps/`.
///
/// `cargo test` (re)builds the library as `target/<profile>/deps/libfake_nvml.so` but does not
/// copy it up to `target/<profile>/`; only `cargo build` does. So this looks in the test
/// executable's own directory and in its parent and returns the most recently modified copy;
/// `None` when neither exists.
pub fn library_path_near(exe: &std::path::Path) -> Option<std::path::PathBuf> {
    let dir = exe.parent()?;
    [Some(dir), dir.parent()]
        .into_iter()
        .flatten()
        .map(|d| d.join(LIBRARY_FILE_NAME))
        .filter_map(|p| {
            let modified = std::fs::metadata(&p).and_then(|m| m.modified()).ok()?;
            Some((modified, p))
        })
        .max_by_key(|(modified, _)| *modified)
        .map(|(_, p)| p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_path_prefers_the_newer_copy() {
        let dir = tempfile::tempdir().unwrap();
        let deps = dir.path().join("deps");
        std::fs::create_dir(&deps).unwrap();
        let exe = deps.join("some_test-0123");
        assert_eq!(library_path_near(&exe), None);

        let up = dir.path().join(LIBRARY_FILE_NAME);
        std::fs::write(&up, b"old").unwrap();
        assert_eq!(library_path_near(&exe), Some(up.clone()));

        let down = deps.join(LIBRARY_FILE_NAME);
        std::fs::write(&down, b"new").unwrap();
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
        std::fs::File::options()
            .write(true)
            .open(&down)
            .unwrap()
            .set_modified(later)
            .unwrap();
        assert_eq!(library_path_near(&exe), Some(down));
    }
}
