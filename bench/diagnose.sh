#!/usr/bin/env bash
# Times `gpufeed diagnose` on a long multi-GPU recording, on one core, in release mode.
#
#   bench/diagnose.sh [HOURS] [GPUS]        (default: 24 hours, 8 GPUs, 10 Hz)
#
# The recording (about 200 MB per hour with 8 GPUs, 64 CPUs and a 17-process job) is generated
# once into ${GPUFEED_BENCH_DIR:-/tmp/gpufeed-bench-diagnose} by bench/diagnose_gen.py and reused.
# Reports wall time, CPU time (user+sys: the figure that matters on a shared machine) and peak
# RSS for three runs, plus the same for a one-hour file to show memory does not grow with length.
set -euo pipefail
cd "$(dirname "$0")/.."
HOURS=${1:-24}
GPUS=${2:-8}
DIR=${GPUFEED_BENCH_DIR:-/tmp/gpufeed-bench-diagnose}
mkdir -p "$DIR"
cargo build --release -p gpufeed >/dev/null
BIN=target/release/gpufeed
gen() { # hours file
  if [ ! -s "$2" ]; then
    echo "generating $1 h x $GPUS GPUs at 10 Hz into $2 ..." >&2
    python3 bench/diagnose_gen.py "$2" --hours "$1" --gpus "$GPUS"
  fi
}
LONG="$DIR/rec-${HOURS}h-${GPUS}gpu.ndjson"
SHORT="$DIR/rec-1h-${GPUS}gpu.ndjson"
gen "$HOURS" "$LONG"
gen 1 "$SHORT"
PIN=""
command -v taskset >/dev/null && PIN="taskset -c 0"
run() { # file
  local size
  size=$(stat -L -c %s "$1")
  for i in 1 2 3; do
    cat "$1" >/dev/null # warm the page cache: measure parsing, not the disk
    /usr/bin/time -f "%e %U %S %M" $PIN "$BIN" diagnose --format json "$1" 2>"$DIR/time.txt" >"$DIR/out.json"
    read -r wall user sys rss <"$DIR/time.txt"
    awk -v f="$(basename "$1")" -v s="$size" -v w="$wall" -v u="$user" -v y="$sys" -v r="$rss" \
      'BEGIN { c = u + y; printf "%-28s %6.2f GB  wall %6.2f s  cpu %6.2f s  %6.0f MB/s of cpu  peak RSS %5.1f MB\n", f, s/1e9, w, c, s/1e6/c, r/1024 }'
  done
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('  verdict:', d['verdict']['id'], '| findings:', [f['id'] for f in d['findings']], '| lines:', d['source']['lines'])" "$DIR/out.json"
}
run "$SHORT"
run "$LONG"
