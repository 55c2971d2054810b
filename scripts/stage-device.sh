#!/usr/bin/env bash
# Builds the shipped (dist: optimized, stripped) gpufeed and stages it in .device/ (git-ignored),
# the folder the device tool carries to the GPU machine, which has no Rust toolchain:
#   .device/bin/gpufeed   the binary
#   .device/MANIFEST      git commit, size, sha256, glibc floor note
# Usage: scripts/stage-device.sh                    cargo build --profile dist (glibc of this machine)
#        GPUFEED_BIN=path scripts/stage-device.sh   stage an existing binary instead, e.g. the one
#          maturin --zig built for the wheel (target/x86_64-unknown-linux-gnu/dist/gpufeed:
#          glibc 2.17 floor, runs on any GPU machine's Linux)
# Then, with the device tool: carry [".device"], command "scripts/device-check.sh" (results in $OUT).
set -euo pipefail
cd "$(dirname "$0")/.."
src="${GPUFEED_BIN:-}"
if [ -z "$src" ]; then
  cargo build --locked --profile dist -p gpufeed
  src="${CARGO_TARGET_DIR:-target}/dist/gpufeed"
fi
[ -x "$src" ] || { echo "stage-device: no executable at $src"; exit 1; }
mkdir -p .device/bin
cp -f "$src" .device/bin/gpufeed
{
  echo "commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates Cargo.toml Cargo.lock || echo '+dirty')"
  echo "size_bytes $(stat -c %s .device/bin/gpufeed)"
  echo "sha256 $(sha256sum .device/bin/gpufeed | cut -d' ' -f1)"
  echo "from $src"
} > .device/MANIFEST
.device/bin/gpufeed --version
cat .device/MANIFEST
du -sh .device
