#!/usr/bin/env bash
# Runs everything that needs a real NVIDIA GPU, in one go, in well under 8 minutes:
#   1. builds the workspace (debug, tests included),
#   2. runs the whole test suite including the #[ignore]d GPU-only tests,
#   3. runs `gpufeed doctor` and `gpufeed bench` (text and JSON) on the real driver.
# Usage: scripts/device-check.sh            (from anywhere in the repository)
#        OUT=/some/dir scripts/device-check.sh   also keeps every output under $OUT
# Exits non-zero at the first failing step; each step's output is printed and, with $OUT, saved.
set -euo pipefail

cd "$(dirname "$0")/.."
out="${OUT:-$(mktemp -d)}"
mkdir -p "$out"
start=$(date +%s)

step() { echo; echo "=== $* ($(( $(date +%s) - start )) s)"; }

step "versions"
{
  uname -a
  rustc --version
  cargo --version
  nvidia-smi --query-gpu=index,name,driver_version,pcie.link.gen.max,pcie.link.width.max --format=csv || echo "nvidia-smi unavailable"
  nvidia-smi | head -n 4 || true
  command -v nvcc && nvcc --version | tail -n 2 || echo "nvcc not on PATH"
  ldconfig -p | grep -E 'libcuda\.so|libcublas\.so' || echo "no libcuda/libcublas in ldconfig"
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>/dev/null || echo "no torch"
} 2>&1 | tee "$out/versions.txt"

step "build"
timeout 300 cargo build --workspace --all-targets 2>&1 | tail -n 5 | tee "$out/build.txt"

step "tests, GPU-only ones included"
# --include-ignored runs the normal tests and the #[ignore = "needs an NVIDIA GPU"] ones.
set +e
timeout 240 cargo test --workspace -- --include-ignored > "$out/tests.txt" 2>&1
test_rc=$?
set -e
grep -E '^test result|FAILED|panicked|SKIPPED' "$out/tests.txt" || true
if [ "$test_rc" -ne 0 ]; then
  echo "TESTS FAILED (exit $test_rc): last lines of $out/tests.txt"; tail -n 60 "$out/tests.txt"; exit 1
fi

bin=target/debug/gpufeed
if [ -n "${CARGO_TARGET_DIR:-}" ]; then bin="$CARGO_TARGET_DIR/debug/gpufeed"; fi

step "gpufeed doctor"
# Exit code 4 means a check failed on this machine: reported, not a script failure.
set +e
timeout 90 "$bin" doctor 2>&1 | tee "$out/doctor.txt"
timeout 90 "$bin" doctor --format json > "$out/doctor.json"
doctor_rc=$?
set -e
echo "doctor --format json exit code: $doctor_rc (0 all good, 4 a check failed)"
[ "$doctor_rc" -eq 0 ] || [ "$doctor_rc" -eq 4 ]
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print({c["id"]+("/%s"%c["gpu"] if "gpu" in c else ""): c["status"] for c in r["checks"]})' "$out/doctor.json" || true

step "gpufeed bench"
XDG_CACHE_HOME="$out/cache" timeout 150 "$bin" bench 2>&1 | tee "$out/bench.txt"
XDG_CACHE_HOME="$out/cache" timeout 90 "$bin" bench --format json --max-size 256M --gemm-size 4096 > "$out/bench.json"
cat "$out/cache/gpufeed/bench.json" | tee "$out/bench-saved.json"

step "done: all steps passed; outputs in $out"
