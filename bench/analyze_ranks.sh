#!/usr/bin/env bash
# `gpufeed analyze` over a job's rank traces: 16, 64 and 256 ranks generated from a shared real
# trace (bench/analyze_ranks_gen.py; ranks 7 and 130 stretched 1.3x as stragglers). Prints wall
# time, peak RSS and the throughput against cores x single-trace speed (goal >= 80%), and checks
# that RSS does not grow with the rank count.
#
# usage: bench/analyze_ranks.sh [SRC_TRACE] [RANKS...]
#   SRC_TRACE defaults to ../shared/traces/hta_sampled_rank0.json.gz (1.8 MB of JSON, 128-rank
#   job); RANKS default to "16 64 256". GPUFEED_BIN skips the release build.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${1:-../shared/traces/hta_sampled_rank0.json.gz}
shift || true
COUNTS=${*:-16 64 256}
if [ -z "${GPUFEED_BIN:-}" ]; then
  cargo build --release -q -p gpufeed
  GPUFEED_BIN=target/release/gpufeed
fi
WORK=$(mktemp -d /tmp/gpufeed-ranks.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
CORES=$(nproc)
MAX=$(echo "$COUNTS" | tr ' ' '\n' | sort -n | tail -1)
python3 bench/analyze_ranks_gen.py "$SRC" "$WORK/all" --ranks "$MAX"

# "wall_s peak_kb" of one command, output discarded.
measure() {
  python3 - "$@" <<'PY'
import subprocess, sys, time
t = time.perf_counter()
r = subprocess.run(["/usr/bin/time", "-f", "TIME %M"] + sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
dt = time.perf_counter() - t
if r.returncode != 0:
    sys.exit("failed: " + r.stderr.decode(errors="replace")[-500:])
kb = [l for l in r.stderr.decode(errors="replace").splitlines() if l.startswith("TIME ")][-1].split()[1]
print("%.3f %s" % (dt, kb))
PY
}

# Single-trace speed: the median of 5 runs on rank 0 alone.
singles=()
for _ in 1 2 3 4 5; do singles+=("$(measure "$GPUFEED_BIN" analyze --format json "$WORK/all/rank0000.json" | cut -d' ' -f1)"); done
single=$(printf '%s\n' "${singles[@]}" | sort -n | sed -n 3p)
single_kb=$(measure "$GPUFEED_BIN" analyze --format json "$WORK/all/rank0000.json" | cut -d' ' -f2)
printf 'source %s, %d cores; one trace: %.3f s, %d KiB peak RSS\n' "$SRC" "$CORES" "$single" "$single_kb"
printf '%6s %9s %12s %14s %12s\n' ranks wall_s peak_rss_kib ideal_wall_s throughput
for n in $COUNTS; do
  d="$WORK/n$n"; mkdir -p "$d"
  for i in $(seq 0 $((n - 1))); do ln -s "$WORK/all/$(printf 'rank%04d.json' "$i")" "$d/"; done
  # The generated world is MAX ranks; a subset is still ranks of one job (missing ranks noted).
  read -r wall kb < <(measure "$GPUFEED_BIN" analyze --format json "$d")
  ideal=$(python3 -c "print($n * $single / $CORES)")
  python3 -c "print('%6d %9.3f %12d %14.3f %11.0f%%' % ($n, $wall, $kb, $ideal, 100 * $ideal / $wall))"
done
"$GPUFEED_BIN" analyze "$WORK/n$MAX" | head -4
