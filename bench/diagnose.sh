#!/usr/bin/env bash
# Times `gpufeed diagnose` on a long multi-GPU recording, in release mode, on all the cores the
# process may use (the reader parses on several threads).
#
#   bench/diagnose.sh [HOURS] [GPUS]        (default: 24 hours, 8 GPUs, 10 Hz)
#   BEFORE=/path/to/old/gpufeed bench/diagnose.sh   also runs that binary, interleaved run by run,
#                                                    checks its JSON is identical, prints ratios
#
# The long recording is also read as .ndjson.zst (compressed once with `zstd -9`); once the .zst
# exists the plain long file is neither needed nor regenerated (delete it to save 4.9 GB of disk).
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
gen() { # hours file: generated once, then reused
  python3 bench/diagnose_gen.py "$2" --hours "$1" --gpus "$GPUS" --reuse
}
LONG="$DIR/rec-${HOURS}h-${GPUS}gpu.ndjson"
SHORT="$DIR/rec-1h-${GPUS}gpu.ndjson"
gen 1 "$SHORT"
if [ ! -s "$LONG.zst" ]; then
  gen "$HOURS" "$LONG"
  echo "compressing $LONG ..." >&2
  zstd -q -T0 -9 "$LONG" -o "$LONG.zst"
fi
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"
one() { # label bin file -> prints a row, leaves "wall cpu" in $DIR/last.txt and JSON in $DIR/out-label.json
  /usr/bin/time -f "%e %U %S %M" "$2" diagnose --format json "$3" 2>"$DIR/time.txt" >"$DIR/out-$1.json"
  read -r wall user sys rss < <(tail -1 "$DIR/time.txt")
  awk -v l="$1" -v f="$(basename "$3")" -v s="$(stat -L -c %s "$3")" -v w="$wall" -v u="$user" -v y="$sys" -v r="$rss" \
    'BEGIN { c = u + y; printf "%-7s %-28s %6.2f GB  wall %6.2f s  cpu %6.2f s  peak RSS %5.1f MB\n", l, f, s/1e9, w, c, r/1024 }'
  awk -v w="$wall" -v u="$user" -v y="$sys" 'BEGIN { print w, u + y }' >"$DIR/last.txt"
}
run() { # file
  cat "$1" >/dev/null # warm the page cache: measure parsing, not the disk
  for i in 1 2 3; do
    if [ -n "${BEFORE:-}" ]; then
      one before "$BEFORE" "$1"
      read -r bw bc <"$DIR/last.txt"
    fi
    one after "$BIN" "$1"
    read -r aw ac <"$DIR/last.txt"
    if [ -n "${BEFORE:-}" ]; then
      cmp -s "$DIR/out-before.json" "$DIR/out-after.json" || echo "  JSON DIFFERS from $BEFORE"
      awk -v bw="$bw" -v bc="$bc" -v aw="$aw" -v ac="$ac" \
        'BEGIN { printf "        ratio before/after: wall %.2fx, cpu %.2fx\n", bw / aw, bc / ac }'
    fi
  done
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('  verdict:', d['verdict']['id'], '| findings:', [f['id'] for f in d['findings']], '| lines:', d['source']['lines'])" "$DIR/out-after.json"
}
run "$SHORT"
if [ "$LONG" != "$SHORT" ]; then
  if [ -s "$LONG" ]; then
    run "$LONG"
  else
    # The plain 24 h file is 4.9 GB: once the .zst exists it may be deleted to save disk.
    echo "($(basename "$LONG") is not on disk: only its .zst is timed)"
  fi
fi
run "$LONG.zst"
