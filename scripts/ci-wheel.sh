#!/usr/bin/env bash
# The wheel part of CI (.ci/run calls it; runnable alone): builds the wheel the way a release does
# (maturin --zig, dist profile: the one optimized build of CI), checks its name, tags, metadata
# and contents (scripts/check-wheel.py) and its manylinux compliance (auditwheel show), installs
# it into a fresh venv, runs `gpufeed --version` and `python -m gpufeed --version` and the Python
# package's tests against the installed copy. Prints how long it took.
set -euo pipefail
cd "$(dirname "$0")/.."
# The one optimized build of CI: maturin builds target/x86_64-unknown-linux-gnu/dist/gpufeed and
# packs it; every check below uses that binary, through the installed wheel.
wheel_t0=$(date +%s)
wheel_tmp=$(mktemp -d)
python3 -m venv "$wheel_tmp/tools"
"$wheel_tmp/tools/bin/pip" install -q --disable-pip-version-check "maturin>=1.5,<2" ziglang auditwheel
if ! PATH="$wheel_tmp/tools/bin:$PATH" maturin build --locked --profile dist --zig --compatibility manylinux2014 \
    -o "$wheel_tmp/dist" > "$wheel_tmp/maturin.log" 2>&1; then
  tail -n 60 "$wheel_tmp/maturin.log"; echo "wheel build failed"; exit 1
fi
grep -vE '^ +(Compiling|Checking|Downloaded|Downloading) ' "$wheel_tmp/maturin.log" || true
wheel=$(ls "$wheel_tmp"/dist/gpufeed-*.whl)
python3 scripts/check-wheel.py "$wheel"
"$wheel_tmp/tools/bin/auditwheel" show "$wheel" | tee "$wheel_tmp/auditwheel.txt"
# auditwheel wraps its lines: join them before matching.
tr -s ' \n' '  ' < "$wheel_tmp/auditwheel.txt" \
  | grep -q 'is consistent with the following platform tag: "manylinux_2_17_x86_64"' \
  || { echo "auditwheel: the wheel is not manylinux_2_17_x86_64 compliant"; exit 1; }
python3 -m venv "$wheel_tmp/venv"
"$wheel_tmp/venv/bin/pip" install -q --disable-pip-version-check "$wheel"
"$wheel_tmp/venv/bin/gpufeed" --version
"$wheel_tmp/venv/bin/python" -m gpufeed --version
test "$("$wheel_tmp/venv/bin/gpufeed" --version)" = "$("$wheel_tmp/venv/bin/python" -m gpufeed --version)"
"$wheel_tmp/venv/bin/gpufeed" completions bash | grep -q 'complete -F _gpufeed'
"$wheel_tmp/venv/bin/gpufeed" man | grep -q '^.TH gpufeed 1'
echo "== python package tests against the installed wheel"
GPUFEED_TEST_INSTALLED=1 "$wheel_tmp/venv/bin/python" -m unittest discover -s python/tests -v
rm -rf "$wheel_tmp"
echo "wheel build, checks and tests took $(( $(date +%s) - wheel_t0 )) s"
