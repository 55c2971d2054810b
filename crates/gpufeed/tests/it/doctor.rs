//! `gpufeed doctor` and `gpufeed bench` through the real binary: fake-driver scenarios, stand-in
//! Pythons on PATH (one that answers like torch, one that hangs), /dev/shm on a tmpfs of chosen
//! size, `--data`, and the no-GPU paths. The JSON report is read into the structs below, which
//! spell out the documented contract (docs/doctor.md), not the crate's own types.

use crate::common_fake;
use std::io::Write as _;

use crate::{gpufeed, read_json, usage_error};
use common_fake::{fake_nvml, scenario};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Debug, Deserialize)]
struct JsonReport {
    schema_version: u32,
    checks: Vec<JsonCheck>,
    counts: BTreeMap<String, usize>,
}

#[derive(Debug, Deserialize)]
struct JsonCheck {
    id: String,
    status: String,
    summary: String,
    evidence: BTreeMap<String, serde_json::Value>,
    fix: Option<String>,
    #[serde(default)]
    gpu: Option<u32>,
}

impl JsonReport {
    fn get(&self, id: &str) -> &JsonCheck {
        self.checks
            .iter()
            .find(|c| c.id == id)
            .unwrap_or_else(|| panic!("no check {id} in {:#?}", self.ids()))
    }
    fn status(&self, id: &str) -> &str {
        &self.get(id).status
    }
    fn ids(&self) -> Vec<(&str, &str)> {
        self.checks
            .iter()
            .map(|c| (c.id.as_str(), c.status.as_str()))
            .collect()
    }
}

/// A stand-in `python3` in its own directory, put first on PATH.
struct FakePython {
    dir: tempfile::TempDir,
}

impl FakePython {
    fn new(script_body: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("python3");
        std::fs::write(&p, format!("#!/bin/sh\n{script_body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        FakePython { dir }
    }

    /// Answers like a torch build: `fields` is the JSON object the probe would print.
    fn torch(fields: &str) -> Self {
        FakePython::new(&format!(
            "echo 'some import warning'\ncat <<'EOF'\nGPUFEED_PROBE {}\nEOF",
            fields.replace('\n', " ")
        ))
    }

    fn path_env(&self) -> String {
        format!(
            "{}:{}",
            self.dir.path().display(),
            std::env::var("PATH").unwrap_or_default()
        )
    }
}

const TORCH_CU121: &str = r#"{"python_version": "3.11.4", "executable": "/venv/bin/python3",
  "site_packages": [], "torch_version": "2.4.1+cu121", "torch_cuda": "12.1",
  "cudnn_version": 90100, "cuda_available": true,
  "arch_list": ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]}"#;

const TORCH_CU118: &str = r#"{"python_version": "3.10.12", "torch_version": "2.1.0+cu118",
  "torch_cuda": "11.8", "cudnn_version": 8700, "cuda_available": true,
  "arch_list": ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]}"#;

/// Runs `gpufeed doctor --format json` on a fake-driver scenario (None: no driver at all) with a
/// stand-in Python; returns the exit code and the report.
fn doctor(scenario_json: Option<&str>, python: &FakePython, extra: &[&str]) -> (i32, JsonReport) {
    let mut cmd = gpufeed();
    cmd.env("PATH", python.path_env());
    doctor_with(cmd, scenario_json, extra)
}

/// [`doctor`] with `cmd` (the job's environment already set) in place of a stand-in Python.
fn doctor_with(
    mut cmd: assert_cmd::Command,
    scenario_json: Option<&str>,
    extra: &[&str],
) -> (i32, JsonReport) {
    let dir = tempfile::tempdir().unwrap();
    match scenario_json {
        Some(s) => {
            cmd.env("FAKE_NVML_SCENARIO", scenario(dir.path(), s))
                .arg("--nvml-lib")
                .arg(fake_nvml());
        }
        None => {
            cmd.args(["--nvml-lib", "/nonexistent/libnvidia-ml.so.1"]);
        }
    }
    cmd.args(["doctor", "--format", "json"]);
    // Unless the test is about /dev/shm, size it for a tiny loader so a small /dev/shm on the
    // machine running the tests (a container's 64 MiB) does not fail every scenario.
    if !extra
        .iter()
        .any(|a| *a == "--num-workers" || *a == "--shm-path")
    {
        cmd.args(["--num-workers", "1", "--batch-bytes", "1K"]);
    }
    let out = cmd.args(extra).output().unwrap();
    let code = out.status.code().expect("exited");
    let text = String::from_utf8_lossy(&out.stdout);
    let r: JsonReport = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "bad JSON ({e}): {text}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(r.schema_version, 1);
    (code, r)
}

fn no_torch() -> FakePython {
    FakePython::torch(
        r#"{"python_version": "3.12.1", "torch_error": "ModuleNotFoundError: No module named 'torch'"}"#,
    )
}

#[test]
fn no_driver_skips_gpu_checks_and_exits_cleanly() {
    let (code, r) = doctor(None, &no_torch(), &[]);
    assert_eq!(code, 0, "{:?}", r.ids());
    for id in ["nvidia_driver", "cuda_driver", "gpus", "precision"] {
        assert_eq!(r.status(id), "skip", "{id}");
    }
    let why = &r.get("gpus").summary;
    assert!(
        why.contains("no GPU checks") && why.contains("/nonexistent/libnvidia-ml.so.1"),
        "{why}"
    );
    assert_eq!(r.status("torch"), "skip");
    assert!(r.get("torch").summary.contains("No module named 'torch'"));
    assert_eq!(r.status("python"), "pass");
    // Host checks still run.
    for id in ["dev_shm", "cpu_cores", "ram", "open_files"] {
        assert_ne!(r.status(id), "skip", "{id}");
    }
    assert_eq!(r.counts["fail"], 0);
    // Every check has the documented fields.
    assert!(r.checks.iter().all(|c| !c.summary.is_empty()));
    assert!(r
        .checks
        .iter()
        .filter(|c| c.status == "warn" || c.status == "fail")
        .all(|c| c.fix.is_some()));
}

#[test]
fn no_python_at_all_is_skipped_with_the_reason() {
    let (code, r) = doctor(None, &no_torch(), &["--python", "/nonexistent/python3"]);
    assert_eq!(code, 0);
    assert_eq!(r.status("python"), "skip");
    assert!(r.get("python").summary.contains("not found"));
    for id in ["torch", "torch_cuda", "torch_arch", "cuda_stack_age"] {
        assert_eq!(r.status(id), "skip", "{id}");
    }
}

#[test]
fn text_output_is_grouped_with_fixes() {
    let dir = tempfile::tempdir().unwrap();
    let s = scenario(dir.path(), r#"{"devices": [{"persistence_mode": false}]}"#);
    let py = no_torch();
    let out = gpufeed()
        .env("FAKE_NVML_SCENARIO", s)
        .env("PATH", py.path_env())
        .arg("--nvml-lib")
        .arg(fake_nvml())
        .arg("doctor")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for heading in ["Driver and CUDA", "Python and PyTorch", "GPU", "Host"] {
        assert!(text.contains(&format!("{heading}\n")), "{heading}: {text}");
    }
    assert!(text.contains("[warn] persistence_mode (GPU 0)"), "{text}");
    assert!(text.contains("fix: `sudo nvidia-smi -pm 1`"), "{text}");
    assert!(text.contains("passed,"), "{text}");
}

#[test]
fn old_driver_fails_on_a_hopper_gpu() {
    let (code, r) = doctor(
        Some(
            r#"{"driver_version": "470.82.01", "cuda_driver_version": 11040,
                 "devices": [{"compute_capability": [9, 0]}]}"#,
        ),
        &FakePython::torch(TORCH_CU121),
        &[],
    );
    assert_eq!(code, 4, "{:?}", r.ids());
    assert_eq!(r.status("nvidia_driver"), "warn");
    assert_eq!(
        r.get("nvidia_driver").evidence["driver_version"],
        "470.82.01"
    );
    assert_eq!(r.status("cuda_driver"), "fail");
    assert!(r.get("cuda_driver").summary.contains("11.4"));
    // The wheel (CUDA 12.1) runs, per the stand-in, only through compatibility: warn.
    assert_eq!(r.status("torch_cuda"), "warn");
}

#[test]
fn old_driver_makes_torch_cuda_unavailable() {
    let py = FakePython::torch(
        &TORCH_CU121.replace(r#""cuda_available": true"#, r#""cuda_available": false"#),
    );
    let (code, r) = doctor(
        Some(
            r#"{"driver_version": "470.82.01", "cuda_driver_version": 11040,
                 "devices": [{"compute_capability": [8, 0]}]}"#,
        ),
        &py,
        &[],
    );
    assert_eq!(code, 4);
    assert_eq!(
        r.status("cuda_driver"),
        "warn",
        "A100 runs on 11.4, but old"
    );
    let c = r.get("torch_cuda");
    assert_eq!(c.status, "fail");
    assert!(c.fix.as_deref().unwrap().contains("525"), "{c:?}");
}

#[test]
fn pascal_gpu_gets_memory_only_precision_advice() {
    let (code, r) = doctor(
        Some(
            r#"{"devices": [{"name": "NVIDIA GeForce GTX 1080 Ti", "compute_capability": [6, 1]}]}"#,
        ),
        &FakePython::torch(TORCH_CU121),
        &[],
    );
    assert_eq!(code, 0, "{:?}", r.ids());
    let p = r.get("precision");
    assert_eq!(p.status, "warn");
    assert!(p.summary.contains("memory"), "{}", p.summary);
    assert_eq!(p.evidence["compute_capability"], "6.1");
    assert_eq!(r.status("torch_arch"), "pass", "sm_60 kernels run on 6.1");
    assert_eq!(r.status("cuda_stack_age"), "pass");
    // A consumer GPU without ECC or MIG: skipped, not failed.
    assert_eq!(r.status("ecc"), "skip");
}

#[test]
fn pascal_gpu_with_a_cuda13_wheel_fails() {
    let py = FakePython::torch(
        r#"{"torch_version": "2.9.0+cu130", "torch_cuda": "13.0", "cuda_available": true,
            "arch_list": ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]}"#,
    );
    let (code, r) = doctor(
        Some(
            r#"{"driver_version": "580.82.07", "cuda_driver_version": 13000,
                 "devices": [{"compute_capability": [6, 1]}]}"#,
        ),
        &py,
        &[],
    );
    assert_eq!(code, 4);
    assert_eq!(r.status("torch_arch"), "fail");
    assert_eq!(r.status("cuda_stack_age"), "fail");
}

#[test]
fn ampere_gets_bf16_and_tf32_advice() {
    let (code, r) = doctor(
        Some(
            r#"{"devices": [{"name": "NVIDIA A100-SXM4-80GB", "compute_capability": [8, 0],
                               "pcie": {"max_gen": 4, "cur_gen": 4}}]}"#,
        ),
        &FakePython::torch(TORCH_CU121),
        &[],
    );
    assert_eq!(code, 0, "{:?}", r.ids());
    let p = r.get("precision");
    assert_eq!(p.status, "pass");
    assert!(p
        .fix
        .as_deref()
        .unwrap()
        .contains("torch.set_float32_matmul_precision('high')"));
    assert!(!p.summary.contains("FP8"));
    assert_eq!(r.status("torch_arch"), "pass");
    assert_eq!(r.status("torch_cuda"), "pass");
    assert_eq!(r.status("torch"), "pass");
    assert!(r.get("torch").summary.contains("cuDNN 9.1.0"));
}

#[test]
fn hopper_on_an_old_cuda_wheel_warns_about_stack_age() {
    let (code, r) = doctor(
        Some(r#"{"devices": [{"compute_capability": [9, 0]}]}"#),
        &FakePython::torch(TORCH_CU118),
        &[],
    );
    assert_eq!(code, 0, "{:?}", r.ids());
    let c = r.get("cuda_stack_age");
    assert_eq!(c.status, "warn");
    assert_eq!(c.evidence["recommended_cuda"], "12.1");
    let p = r.get("precision");
    assert!(p.summary.contains("FP8"));
    assert!(p.fix.as_deref().unwrap().contains("Transformer Engine"));
}

#[test]
fn degraded_link_under_load_fails_but_idle_step_down_passes() {
    let (code, r) = doctor(
        Some(
            r#"{"devices": [{"util": 97, "pcie": {"max_gen": 5, "max_width": 16, "cur_gen": 3, "cur_width": 16}}]}"#,
        ),
        &no_torch(),
        &[],
    );
    assert_eq!(code, 4);
    let c = r.get("pcie_link");
    assert_eq!(c.status, "fail");
    assert_eq!(c.gpu, Some(0));
    assert_eq!(c.evidence["pcie_cur_gen"], 3);
    assert_eq!(c.evidence["util_pct"], 97);

    let (code, r) = doctor(
        Some(r#"{"devices": [{"util": 0, "pcie": {"max_gen": 5, "cur_gen": 1}}]}"#),
        &no_torch(),
        &[],
    );
    assert_eq!(code, 0);
    let c = r.get("pcie_link");
    assert_eq!(c.status, "pass");
    assert!(c.summary.contains("idle"), "{}", c.summary);

    let (_, r) = doctor(
        Some(r#"{"devices": [{"util": 0, "pcie": {"max_width": 16, "cur_width": 8}}]}"#),
        &no_torch(),
        &[],
    );
    assert_eq!(r.status("pcie_link"), "warn");
}

#[test]
fn throttle_reasons() {
    let t = |mask: u32| {
        doctor(
            Some(&format!(
                r#"{{"devices": [{{"throttle_reasons": {mask}}}]}}"#
            )),
            &no_torch(),
            &[],
        )
    };
    let (code, r) = t(1);
    assert_eq!(code, 0);
    assert_eq!(r.status("throttle"), "pass", "GpuIdle is not throttling");
    let (_, r) = t(4);
    assert_eq!(r.status("throttle"), "warn");
    assert_eq!(
        r.get("throttle").evidence["throttle_reasons"],
        serde_json::json!(["sw_power_cap"])
    );
    let (code, r) = t(0x40 | 1);
    assert_eq!(code, 4);
    assert_eq!(r.status("throttle"), "fail");
}

#[test]
fn mig_ecc_persistence_and_numa() {
    let (code, r) = doctor(
        Some(
            r#"{"devices": [
            {"mig_mode": 1, "persistence_mode": false, "numa_node": 0,
             "ecc": {"volatile_uncorrected": 0, "aggregate_uncorrected": 4}},
            {"mig_mode": 0, "ecc": {"volatile_uncorrected": 3}}]}"#,
        ),
        &no_torch(),
        &[],
    );
    assert_eq!(code, 4, "GPU 1 has uncorrectable ECC errors");
    let per = |id: &str, gpu: u32| {
        r.checks
            .iter()
            .find(|c| c.id == id && c.gpu == Some(gpu))
            .unwrap_or_else(|| panic!("{id} GPU {gpu}"))
    };
    assert_eq!(per("mig", 0).status, "warn");
    assert_eq!(per("mig", 1).status, "pass");
    assert_eq!(per("persistence_mode", 0).status, "warn");
    assert_eq!(per("persistence_mode", 1).status, "pass");
    assert_eq!(per("ecc", 0).status, "warn");
    assert_eq!(per("ecc", 0).evidence["aggregate_uncorrected"], 4);
    assert_eq!(per("ecc", 1).status, "fail");
    assert_eq!(r.get("gpus").evidence["gpu_count"], 2);
    // NUMA: judged per GPU (pass on a single-node machine, skip when the node is unknown).
    assert!(["pass", "warn"].contains(&per("numa", 0).status.as_str()));
    assert!(["pass", "skip"].contains(&per("numa", 1).status.as_str()));
    // /dev/shm need scales with the GPU count.
    assert_eq!(r.get("dev_shm").evidence["gpu_count"], 2);
}

#[test]
fn a_hanging_python_is_killed_at_the_timeout() {
    // Not `exec`: the shell's child `sleep` must die too (process group), or its open pipe
    // would keep doctor waiting.
    let py = FakePython::new("sleep 60\necho never");
    let t0 = Instant::now();
    let (code, r) = doctor(None, &py, &["--python-timeout", "1s"]);
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(20), "took {took:?}");
    assert_eq!(code, 0);
    let c = r.get("python");
    assert_eq!(c.status, "warn");
    assert!(
        c.summary.contains("did not finish within 1 s"),
        "{}",
        c.summary
    );
    assert!(c.fix.as_deref().unwrap().contains("--python-timeout"));
    assert_eq!(r.status("torch"), "skip");
}

#[test]
fn a_python_that_prints_nothing_useful_is_skipped() {
    let py = FakePython::new("echo 'Traceback: boom' >&2\nexit 1");
    let (code, r) = doctor(None, &py, &[]);
    assert_eq!(code, 0);
    let c = r.get("python");
    assert_eq!(c.status, "skip");
    assert!(c.summary.contains("boom"), "{}", c.summary);
}

/// A stand-in `torch` package importable by the real python3, so the real probe script runs.
fn fake_torch_package(dir: &Path) {
    let t = dir.join("torch");
    std::fs::create_dir_all(t.join("backends")).unwrap();
    let files = [
        ("__init__.py", "__version__ = '2.5.1+cu124'\nfrom . import version, backends, cuda\n"),
        ("version.py", "cuda = '12.4'\n"),
        ("backends/__init__.py", "from . import cudnn\n"),
        ("backends/cudnn.py", "def version():\n    return 90100\n"),
        (
            "cuda.py",
            "import os, warnings\n\
             def is_available():\n\
             \x20   if os.environ.get('FAKE_TORCH_CUDA') == '1':\n\
             \x20       return True\n\
             \x20   warnings.warn('CUDA initialization: The NVIDIA driver on your system is too old (found version 11040).')\n\
             \x20   return False\n\
             def get_arch_list():\n\
             \x20   return ['sm_50', 'sm_80', 'sm_86', 'sm_90'] if is_available() else []\n\
             def get_device_capability(i=0):\n\
             \x20   return (8, 0)\n\
             def get_device_name(i=0):\n\
             \x20   return 'NVIDIA A100-SXM4-80GB'\n",
        ),
    ];
    for (name, body) in files {
        std::fs::write(t.join(name), body).unwrap();
    }
}

#[test]
fn the_real_probe_script_reads_a_torch_like_package() {
    if std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_err()
    {
        let _ = writeln!(std::io::stderr(), "SKIPPED: no python3 on PATH");
        return;
    }
    let pkgs = tempfile::tempdir().unwrap();
    fake_torch_package(pkgs.path());
    let run = |cuda: &str, scenario_json: &str| {
        let mut cmd = gpufeed();
        cmd.env("PYTHONPATH", pkgs.path())
            .env("FAKE_TORCH_CUDA", cuda);
        doctor_with(cmd, Some(scenario_json), &[])
    };
    // The driver is too old for the wheel: torch says so in a warning, which doctor quotes.
    let (code, r) = run(
        "0",
        r#"{"driver_version": "470.82.01", "cuda_driver_version": 11040,
            "devices": [{"compute_capability": [8, 0]}]}"#,
    );
    assert_eq!(code, 4);
    let t = r.get("torch");
    assert_eq!(t.status, "pass");
    assert_eq!(t.evidence["torch_version"], "2.5.1+cu124");
    assert_eq!(t.evidence["cudnn_version"], "9.1.0");
    let c = r.get("torch_cuda");
    assert_eq!(c.status, "fail");
    assert!(
        c.evidence["cuda_error"]
            .as_str()
            .unwrap()
            .contains("too old"),
        "{c:?}"
    );
    // A working set-up: arch list and capability read through the real script.
    let (code, r) = run("1", r#"{"devices": [{"compute_capability": [8, 0]}]}"#);
    assert_eq!(code, 0, "{:?}", r.ids());
    assert_eq!(r.status("torch_cuda"), "pass");
    let a = r.get("torch_arch");
    assert_eq!(a.status, "pass");
    assert_eq!(
        a.evidence["arch_list"],
        serde_json::json!(["sm_50", "sm_80", "sm_86", "sm_90"])
    );
    assert_eq!(r.status("cuda_stack_age"), "pass");
}

#[test]
fn cudnn_from_ld_library_path_and_nvcc_on_path() {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("lib")).unwrap();
    std::fs::create_dir_all(root.path().join("include")).unwrap();
    // Never loaded: the version comes from the header next to it.
    std::fs::write(root.path().join("lib/libcudnn.so.9"), b"").unwrap();
    std::fs::write(
        root.path().join("include/cudnn_version.h"),
        "#define CUDNN_MAJOR 9\n#define CUDNN_MINOR 3\n#define CUDNN_PATCHLEVEL 0\n",
    )
    .unwrap();
    let py = FakePython::new(
        "cat <<'EOF'\nGPUFEED_PROBE {\"python_version\": \"3.12.1\", \"torch_error\": \"ModuleNotFoundError\"}\nEOF",
    );
    let nvcc = py.dir.path().join("nvcc");
    std::fs::write(
        &nvcc,
        "#!/bin/sh\necho 'nvcc: NVIDIA (R) Cuda compiler driver'\necho 'Cuda compilation tools, release 13.0, V13.0.48'\n",
    )
    .unwrap();
    std::fs::set_permissions(&nvcc, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut cmd = gpufeed();
    cmd.env("PATH", py.path_env())
        .env("LD_LIBRARY_PATH", root.path().join("lib"));
    let (_, r) = doctor_with(cmd, Some(r#"{"cuda_driver_version": 12040}"#), &[]);
    let c = r.get("cudnn");
    assert_eq!(c.status, "pass", "{c:?}");
    assert_eq!(c.evidence["cudnn_version"], "9.3.0");
    assert!(c.evidence["version_source"]
        .as_str()
        .unwrap()
        .ends_with("include/cudnn_version.h"));
    let n = r.get("nvcc");
    assert_eq!(
        n.status, "warn",
        "nvcc 13.0 builds code a 12.4 driver cannot run: {n:?}"
    );
    assert_eq!(n.evidence["nvcc_version"], "13.0");
}

/// A tmpfs mounted for one test, unmounted on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().ok()?;
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Tmpfs { dir })
    }
    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.dir.path())
            .status();
    }
}

#[test]
fn shm_on_a_container_sized_tmpfs_fails_with_bus_error_advice() {
    let Some(shm) = Tmpfs::mount("64m") else {
        let _ = writeln!(std::io::stderr(), "SKIPPED: mounting a tmpfs is not permitted here (needs root / CAP_SYS_ADMIN); the judgement is unit-tested in doctor::host");
        return;
    };
    let shm_path = shm.path().display().to_string();
    let (code, r) = doctor(None, &no_torch(), &["--shm-path", &shm_path]);
    assert_eq!(code, 4);
    let c = r.get("dev_shm");
    assert_eq!(c.status, "fail");
    assert!(c.summary.contains("bus error"), "{}", c.summary);
    assert!(c.summary.contains("64 MiB"), "{}", c.summary);
    assert_eq!(c.evidence["shm_total_bytes"], 64 << 20);
    assert!(c.fix.as_deref().unwrap().contains("--shm-size"));

    // A small loader fits: 2 workers × 2 × 8 MiB = 32 MiB.
    let (code, r) = doctor(
        None,
        &no_torch(),
        &[
            "--shm-path",
            &shm_path,
            "--num-workers",
            "2",
            "--batch-bytes",
            "8M",
        ],
    );
    assert_eq!(code, 0);
    assert_eq!(r.status("dev_shm"), "pass");
    assert_eq!(r.get("dev_shm").evidence["needed_bytes"], 32 << 20);

    // Full enough that what is free no longer fits: warn.
    std::fs::write(shm.path().join("stale"), vec![0u8; 40 << 20]).unwrap();
    let (_, r) = doctor(
        None,
        &no_torch(),
        &[
            "--shm-path",
            &shm_path,
            "--num-workers",
            "2",
            "--batch-bytes",
            "8M",
        ],
    );
    assert_eq!(r.status("dev_shm"), "warn");
}

#[test]
fn missing_shm_fails() {
    let (code, r) = doctor(None, &no_torch(), &["--shm-path", "/nonexistent/shm"]);
    assert_eq!(code, 4);
    assert_eq!(r.status("dev_shm"), "fail");
}

#[test]
fn data_checks_sample_the_directory() {
    let data = tempfile::tempdir().unwrap();
    for i in 0..4 {
        std::fs::write(
            data.path().join(format!("shard-{i}.bin")),
            vec![7u8; 1 << 20],
        )
        .unwrap();
    }
    let d = data.path().display().to_string();
    let (_, r) = doctor(None, &no_torch(), &["--data", &d, "--data-sample", "3M"]);
    let fs = r.get("data_filesystem");
    assert_ne!(fs.status, "fail");
    assert!(fs.evidence.contains_key("fs_type"), "{fs:?}");
    let t = r.get("data_read_throughput");
    assert!(["pass", "warn"].contains(&t.status.as_str()), "{t:?}");
    assert_eq!(t.evidence["read_bytes"], 3 << 20);
    assert!(t.evidence["read_bytes_per_s"].as_f64().unwrap() > 0.0);
    // Storage: a verdict, or a skip on overlay/tmpfs.
    let s = r.get("data_storage");
    assert!(["pass", "warn", "skip"].contains(&s.status.as_str()));
}

#[test]
fn a_missing_data_path_fails_that_check() {
    let (code, r) = doctor(None, &no_torch(), &["--data", "/nonexistent/dataset"]);
    assert_eq!(code, 4);
    assert_eq!(r.status("data_filesystem"), "fail");
    assert_eq!(r.status("data_read_throughput"), "skip");
}

#[test]
fn bad_command_lines_exit_2() {
    usage_error(["doctor", "--format", "xml"]);
    usage_error(["doctor", "--batch-bytes", "lots"]);
    usage_error(["doctor", "--python-timeout", "soon"]);
    usage_error(["bench", "--max-size", "huge"]);
    usage_error(["bench", "--min-size", "0"]).stderr(predicates::str::contains("--min-size"));
}

#[test]
fn help_documents_the_exit_codes() {
    let out = gpufeed().args(["doctor", "--help"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("4      at least one check failed"), "{text}");
    let out = gpufeed().args(["bench", "--help"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("5      no NVIDIA GPU or CUDA driver"),
        "{text}"
    );
}

fn libcuda_present() -> bool {
    // SAFETY: only dlopens the CUDA driver library to see whether it exists.
    unsafe { libloading::Library::new("libcuda.so.1").is_ok() }
}

#[test]
fn bench_without_a_gpu_exits_5_with_one_line() {
    if libcuda_present() {
        let _ = writeln!(std::io::stderr(), "SKIPPED: this machine has libcuda.so.1; the GPU path is tested by the ignored bench tests");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = gpufeed()
        .env("XDG_CACHE_HOME", dir.path())
        .arg("bench")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("needs an NVIDIA GPU"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(out.stdout.is_empty());
    assert!(
        !dir.path().join("gpufeed").exists(),
        "nothing saved without a GPU"
    );
}

/// Builds a stand-in libcuda.so.1 from C source with the system compiler; `None` without one.
fn stub_libcuda(dir: &Path, c_source: &str) -> Option<PathBuf> {
    let src = dir.join("cuda.c");
    std::fs::write(&src, c_source).unwrap();
    let lib = dir.join("libcuda.so.1");
    let ok = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&src)
        .status()
        .is_ok_and(|s| s.success());
    ok.then_some(lib)
}

#[test]
fn bench_with_a_driver_but_no_device_exits_5_with_one_line() {
    if libcuda_present() {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: this machine has a real libcuda.so.1"
        );
        return;
    }
    for (name, source) in [
        // What a driver without a GPU answers.
        ("no_device", "int cuInit(unsigned int f) { return 100; }\n"),
        // A library missing the functions cudarc calls next: a panic inside cudarc, caught.
        (
            "missing_symbols",
            "int cuInit(unsigned int f) { return 0; }\n",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let Some(_) = stub_libcuda(dir.path(), source) else {
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: no C compiler (cc) to build a stand-in libcuda"
            );
            return;
        };
        let out = gpufeed()
            .env("LD_LIBRARY_PATH", dir.path())
            .env("XDG_CACHE_HOME", dir.path())
            .arg("bench")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(5), "{name}: {err}");
        assert_eq!(err.lines().count(), 1, "{name}: {err}");
        assert!(err.contains("needs an NVIDIA GPU"), "{name}: {err}");
        assert!(!err.contains("panicked"), "{name}: {err}");
    }
}

/// The whole bench flow (context, pinned and pageable buffers, every size, GEMM per precision,
/// table, JSON, the saved file) against tests/fake_cuda/libcuda.c, whose "device" memory is host
/// memory, and tests/fake_cuda/libcublas.c, whose GEMM only sleeps for a time set by its
/// precision (fp32 8x slower than fp16/bf16). Both are first on LD_LIBRARY_PATH, so a real CUDA
/// installation is never reached.
#[test]
fn bench_runs_end_to_end_on_a_stand_in_cuda_driver() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = |name: &str| {
        std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fake_cuda")
                .join(name),
        )
        .unwrap()
    };
    let Some(lib) = stub_libcuda(dir.path(), &fixture("libcuda.c")) else {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: no C compiler (cc) to build a stand-in libcuda"
        );
        return;
    };
    // cudarc tries libcuda.so before libcuda.so.1 (and libcublas.so first): every name it may
    // try first must be the stand-in.
    std::fs::copy(&lib, dir.path().join("libcuda.so")).unwrap();
    let blas_dir = tempfile::tempdir().unwrap();
    let blas = stub_libcuda(blas_dir.path(), &fixture("libcublas.c")).unwrap();
    for name in ["libcublas.so", "libcublas.so.13", "libcublas.so.12"] {
        std::fs::copy(&blas, dir.path().join(name)).unwrap();
    }
    let cache = dir.path().join("cache");
    let bench = |format: &str| {
        let mut c = gpufeed();
        c.env("LD_LIBRARY_PATH", dir.path())
            .env("XDG_CACHE_HOME", &cache)
            .env_remove("CUDA_HOME")
            .env_remove("CUDA_PATH")
            .args(["--nvml-lib", "/nonexistent/libnvidia-ml.so.1"])
            .args([
                "bench",
                "--format",
                format,
                "--max-size",
                "4M",
                "--gemm-size",
                "512",
            ]);
        c.output().unwrap()
    };
    let out = bench("json");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["gpu_name"], "Fake CUDA GPU");
    assert_eq!(v["gpu_uuid"], "GPU-c0c1c2c3-c4c5-c6c7-c8c9-cacbcccdcecf");
    assert_eq!(v["compute_capability"], serde_json::json!([9, 0]));
    let copies = v["copies"].as_array().unwrap();
    assert_eq!(
        copies.len(),
        2 * 4,
        "1 MiB and 4 MiB, H2D/D2H, pinned/pageable"
    );
    assert!(copies
        .iter()
        .all(|c| c["bytes_per_s"].as_f64().unwrap() > 0.0));
    assert!(
        copies.iter().all(|c| c["fraction_of_link"].is_null()),
        "no NVML: no link"
    );
    assert!(v["best"]["h2d_pinned_bytes_per_s"].as_f64().unwrap() > 0.0);
    assert!(v["gemm_skipped"].is_null(), "{v:#}");
    let gemm = v["gemm"].as_array().unwrap();
    let precisions: Vec<&str> = gemm
        .iter()
        .map(|g| g["precision"].as_str().unwrap())
        .collect();
    assert_eq!(precisions, ["fp32", "tf32", "fp16", "bf16"]);
    assert!(gemm.iter().all(|g| g["n"] == 512));
    assert_eq!(gemm[0]["speedup_vs_fp32"], 1.0);
    // The stand-in makes fp16/bf16 8x and TF32 4x faster than fp32; sleeps only overshoot, so
    // allow a wide margin.
    let amp = v["expected_amp_speedup"].as_f64().unwrap();
    assert!((2.5..=12.0).contains(&amp), "{amp}");
    let tf32 = gemm[1]["speedup_vs_fp32"].as_f64().unwrap();
    assert!((1.5..=6.0).contains(&tf32), "{tf32}");
    let saved = read_json(&cache.join("gpufeed/bench.json"));
    assert_eq!(saved["gpus"].as_array().unwrap().len(), 1);
    assert_eq!(
        saved["gpus"][0]["uuid"],
        "GPU-c0c1c2c3-c4c5-c6c7-c8c9-cacbcccdcecf"
    );
    assert!(saved["gpus"][0]["h2d_pinned_bytes_per_s"].as_f64().unwrap() > 0.0);

    // Text: the table; a second run replaces this GPU's entry rather than adding one.
    let out = bench("text");
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("GPU 0: Fake CUDA GPU (compute capability 9.0)"),
        "{text}"
    );
    assert!(text.contains("H2D pinned"), "{text}");
    assert!(text.contains("4.0 MiB"), "{text}");
    assert!(text.contains("Saved the pinned bandwidth"), "{text}");
    assert!(text.contains("bf16"), "{text}");
    assert!(
        text.contains("mixed precision (bf16/fp16 autocast)"),
        "{text}"
    );
    let saved = read_json(&cache.join("gpufeed/bench.json"));
    assert_eq!(saved["gpus"].as_array().unwrap().len(), 1);

    // A device that does not exist: a usage error, one line.
    let out = gpufeed()
        .env("LD_LIBRARY_PATH", dir.path())
        .env("XDG_CACHE_HOME", &cache)
        .args(["bench", "--device", "3"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("GPU 3 does not exist (1 GPU visible"), "{err}");
}

/// GPU only: the real `gpufeed bench` end to end, small sizes, JSON, saved file.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn bench_on_a_real_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let out = gpufeed()
        .env("XDG_CACHE_HOME", dir.path())
        .args([
            "bench",
            "--format",
            "json",
            "--max-size",
            "256M",
            "--gemm-size",
            "4096",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v["best"]["h2d_pinned_bytes_per_s"].as_f64().unwrap() > 1e9,
        "{v:#}"
    );
    assert!(v["copies"].as_array().unwrap().len() >= 4);
    let saved: PathBuf = dir.path().join("gpufeed/bench.json");
    let s = read_json(&saved);
    assert_eq!(s["schema_version"], 1);
    assert!(s["gpus"][0]["h2d_pinned_bytes_per_s"].as_f64().unwrap() > 1e9);
    eprintln!("{}", String::from_utf8_lossy(&out.stdout));
}

/// GPU only: doctor on the real driver finds the GPU and judges its link, ECC, throttling.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn doctor_on_a_real_gpu() {
    let out = gpufeed()
        .args(["doctor", "--format", "json"])
        .output()
        .unwrap();
    let r: JsonReport = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r.status("nvidia_driver"), "pass", "{:?}", r.ids());
    assert_ne!(r.status("cuda_driver"), "skip");
    assert_eq!(r.status("gpus"), "pass");
    assert_ne!(r.status("precision"), "skip");
    assert!(r
        .checks
        .iter()
        .any(|c| c.id == "pcie_link" && c.gpu == Some(0)));
    eprintln!("{:#?}", r.ids());
}
