#!/usr/bin/env bash
# gpufeed against pandas.read_csv on real and generated telemetry, side by side: the largest real
# file of each shape (../shared/telemetry), then generated logs (bench/telemetry_gen.py): 8 GPUs
# at 1 Hz in nvidia-smi's --query-gpu CSV for a day, a week and a month, 10M rows of
# `timestamp,utilization.gpu` in epoch seconds, a 200 MiB log with the header before every
# reading and a 64 MiB Prometheus query_range answer. The generated files go to a temporary
# folder (about 2.3 GB with the month) and are deleted at the end.
#
#   bench/telemetry_read.sh [--gpufeed PATH] [--runs 3] [--big-runs 1] [--no-month] [--no-corpus]
#
# PYTHON (default: the CI venv, else python3) must have pandas.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
PYTHON="${PYTHON:-/root/.cache/gpufeed/ci-venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
month=1
args=()
for a in "$@"; do
    if [ "$a" = --no-month ]; then month=0; else args+=("$a"); fi
done
dir="$(mktemp -d "${TMPDIR:-/tmp}/gpufeed-telemetry-bench.XXXXXX")"
trap 'rm -rf "$dir"' EXIT
gen() { python3 "$here/telemetry_gen.py" "$@"; }
gen smi "$dir/smi-day.csv" --days 1
gen smi "$dir/smi-week.csv" --days 7
extra=(--extra "smi 1 day=$dir/smi-day.csv:csv" --extra "smi 1 week=$dir/smi-week.csv:csv")
if [ "$month" = 1 ]; then
    gen smi "$dir/smi-month.csv" --days 30
    extra+=(--extra "smi 30 days=$dir/smi-month.csv:csv")
fi
gen epoch "$dir/epoch-10M.csv" --rows 10000000
gen perread "$dir/perread.csv" --mib 200
gen promjson "$dir/query_range.json" --mib 64
extra+=(--extra "epoch 10M rows=$dir/epoch-10M.csv:csv"
        --extra "header/reading=$dir/perread.csv:csv"
        --extra "prom range 64M=$dir/query_range.json:promjson")
"$PYTHON" "$here/telemetry_read.py" --python "$PYTHON" ${args[@]+"${args[@]}"} "${extra[@]}"
