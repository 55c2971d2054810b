#!/usr/bin/env bash
# Times `gpufeed diagnose` on a one-hour recording with Python stacks (the training loop's
# phases, its code and the host-side causes are computed from them), in release mode.
#
#   bench/diagnose_stacks.sh SHORT.ndjson [HOURS]     SHORT: a real recording of `gpufeed run`
#   BEFORE=/path/to/old/gpufeed bench/diagnose_stacks.sh ...   also runs that binary, interleaved
#
# The long recording repeats SHORT's timed lines (bench/stacks_gen.py). Prints wall time, CPU
# time and peak RSS for three runs each, and the after/before ratios of the medians.
set -euo pipefail
cd "$(dirname "$0")/.."
SHORT=${1:?a recording made by gpufeed run}
HOURS=${2:-1}
DIR=${GPUFEED_BENCH_DIR:-/tmp/gpufeed-bench-stacks}
mkdir -p "$DIR"
LONG="$DIR/stacks-${HOURS}h.ndjson"
[ -s "$LONG" ] || python3 bench/stacks_gen.py "$SHORT" "$LONG" --hours "$HOURS"
cargo build --release -p gpufeed >/dev/null
AFTER=target/release/gpufeed
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); $(stat -c %s "$LONG") bytes"
one() { # label bin
  /usr/bin/time -f "%e %U %S %M" "$2" diagnose --format json "$LONG" 2>"$DIR/time.txt" >/dev/null || true
  read -r wall user sys rss < <(tail -1 "$DIR/time.txt")
  awk -v l="$1" -v w="$wall" -v u="$user" -v y="$sys" -v r="$rss" \
    'BEGIN { printf "%-7s wall %6.2f s  cpu %6.2f s  peak RSS %6.1f MB\n", l, w, u + y, r / 1024 }'
  echo "$1 $wall $(awk -v u="$user" -v y="$sys" 'BEGIN { print u + y }') $rss" >>"$DIR/runs.txt"
}
: >"$DIR/runs.txt"
for _ in 1 2 3; do
  [ -n "${BEFORE:-}" ] && one before "$BEFORE"
  one after "$AFTER"
done
if [ -n "${BEFORE:-}" ]; then
  python3 - "$DIR/runs.txt" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = lambda lab, i: statistics.median(float(r[i]) for r in rows if r[0] == lab)
for name, i in (("wall", 1), ("cpu", 2), ("peak RSS", 3)):
    print(f"after/before {name}: {med('after', i) / med('before', i):.2f}x")
PY
fi
