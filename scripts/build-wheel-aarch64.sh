#!/usr/bin/env bash
# Builds the aarch64 (ARM64) manylinux wheel by cross-compiling with zig, checks it with
# scripts/check-wheel.py and auditwheel, and, when qemu-aarch64 and an aarch64 glibc are present
# (Debian: qemu-user, libc6-arm64-cross), runs the binary it holds. Not in CI: a cross release
# build takes 10-30 minutes on a 2-core machine. Prints where the wheel is.
#
# usage: scripts/build-wheel-aarch64.sh [OUT_DIR]   (default: target/wheels-aarch64)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/wheels-aarch64}
rustup target list --installed | grep -qx aarch64-unknown-linux-gnu \
  || rustup target add aarch64-unknown-linux-gnu
tools=$(mktemp -d)
trap 'rm -rf "$tools"' EXIT
python3 -m venv "$tools/venv"
"$tools/venv/bin/pip" install -q --disable-pip-version-check "maturin>=1.5,<2" ziglang auditwheel
PATH="$tools/venv/bin:$PATH" maturin build --locked --profile dist --zig \
  --target aarch64-unknown-linux-gnu --compatibility manylinux2014 -o "$out"
wheel=$(ls -t "$out"/gpufeed-*manylinux*_aarch64.whl | head -1)
python3 scripts/check-wheel.py "$wheel"
"$tools/venv/bin/auditwheel" show "$wheel" | tr -s ' \n' '  ' \
  | grep -q 'consistent with the following platform tag: "manylinux_2_17_aarch64"' \
  || { echo "auditwheel: $wheel is not manylinux_2_17_aarch64 compliant"; exit 1; }
if command -v qemu-aarch64 >/dev/null 2>&1 && [ -e /usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1 ]; then
  (cd "$tools" && python3 -m zipfile -e "$wheel" x >/dev/null)
  qemu-aarch64 -L /usr/aarch64-linux-gnu "$tools"/x/gpufeed-*.data/scripts/gpufeed --version
  qemu-aarch64 -L /usr/aarch64-linux-gnu "$tools"/x/gpufeed-*.data/scripts/gpufeed \
    diagnose crates/gpufeed/tests/data/smi_query_starving.csv | head -3
else
  echo "note: qemu-aarch64 or the aarch64 glibc is missing (apt-get install qemu-user libc6-arm64-cross): the binary was not run"
fi
echo "aarch64 wheel: $wheel"
