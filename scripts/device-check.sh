#!/usr/bin/env bash
# Everything that needs a real NVIDIA GPU, in one go (typically 3–5 minutes on a 16-core machine;
# every step has its own timeout, so the whole script cannot hang):
#   1. prints versions (Rust, driver, CUDA, cuBLAS, torch),
#   2. builds the workspace (debug, tests included),
#   3. runs the whole test suite including the #[ignore]d GPU-only tests,
#   4. runs `gpufeed doctor` (text and JSON) and `gpufeed bench` (text and JSON) on the real driver.
# Usage: scripts/device-check.sh                 (from anywhere in the repository)
#        OUT=/some/dir scripts/device-check.sh   keeps every output under $OUT (else a temp dir)
# Exits non-zero at the first failing step, after printing that step's output.
set -euo pipefail

cd "$(dirname "$0")/.."
out="${OUT:-$(mktemp -d)}"
mkdir -p "$out"
start=$(date +%s)

step() { echo; echo "=== $* ($(( $(date +%s) - start )) s)"; }
fail() { echo "DEVICE CHECK FAILED: $*"; exit 1; }

command -v cargo >/dev/null || fail "cargo not found: the GPU machine needs a Rust toolchain (rustup)"

step "versions"
{
  uname -a
  rustc --version
  cargo --version
  nvidia-smi --query-gpu=index,name,driver_version,pcie.link.gen.max,pcie.link.width.max --format=csv || echo "nvidia-smi unavailable"
  (command -v nvcc >/dev/null && nvcc --version | tail -n 2) || echo "nvcc not on PATH"
  (ldconfig -p | grep -E 'libcuda\.so|libcublas(Lt)?\.so') || echo "no libcuda/libcublas in the ld.so cache"
  ls /usr/local/cuda/lib64/libcublas.so* 2>/dev/null || echo "no /usr/local/cuda/lib64/libcublas.so*"
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>/dev/null || echo "no torch in python3"
} 2>&1 | tee "$out/versions.txt"

step "build"
set +e
timeout 300 cargo build --workspace --all-targets > "$out/build.txt" 2>&1
rc=$?
set -e
tail -n 3 "$out/build.txt"
[ "$rc" -eq 0 ] || { tail -n 60 "$out/build.txt"; fail "build (exit $rc)"; }

step "tests, GPU-only ones included"
# --include-ignored runs the normal tests and the #[ignore = "needs an NVIDIA GPU"] ones.
set +e
timeout 240 cargo test --workspace --no-fail-fast -- --include-ignored > "$out/tests.txt" 2>&1
rc=$?
set -e
grep -E '^test result|FAILED|panicked|SKIPPED|GEMM skipped' "$out/tests.txt" || true
[ "$rc" -eq 0 ] || { tail -n 80 "$out/tests.txt"; fail "tests (exit $rc)"; }

bin="${CARGO_TARGET_DIR:-target}/debug/gpufeed"
[ -x "$bin" ] || fail "no binary at $bin"

step "gpufeed doctor"
# Exit code 4 means a check failed on this machine: shown, not a failure of this script.
set +e
timeout 90 "$bin" doctor 2>&1 | tee "$out/doctor.txt"
timeout 90 "$bin" doctor --format json > "$out/doctor.json" 2> "$out/doctor.stderr"
rc=$?
set -e
echo "doctor --format json exit code: $rc (0: no check failed, 4: a check failed)"
[ "$rc" -eq 0 ] || [ "$rc" -eq 4 ] || { cat "$out/doctor.stderr"; fail "doctor (exit $rc)"; }
python3 - "$out/doctor.json" <<'EOF' || fail "doctor JSON unreadable"
import json, sys
r = json.load(open(sys.argv[1]))
for c in r["checks"]:
    gpu = "" if c.get("gpu") is None else " (GPU %d)" % c["gpu"]
    print("%-5s %s%s" % (c["status"], c["id"], gpu))
print(r["counts"])
EOF

step "gpufeed bench"
set +e
XDG_CACHE_HOME="$out/cache" timeout 150 "$bin" bench 2>&1 | tee "$out/bench.txt"
rc=${PIPESTATUS[0]}
set -e
[ "$rc" -eq 0 ] || fail "bench (exit $rc)"
set +e
XDG_CACHE_HOME="$out/cache" timeout 90 "$bin" bench --format json --max-size 256M --gemm-size 4096 \
  > "$out/bench.json" 2> "$out/bench.stderr"
rc=$?
set -e
[ "$rc" -eq 0 ] || { cat "$out/bench.stderr"; fail "bench --format json (exit $rc)"; }
echo "saved ceiling ($out/cache/gpufeed/bench.json):"
cat "$out/cache/gpufeed/bench.json"

step "done: every step passed; outputs in $out"
