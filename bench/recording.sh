#!/usr/bin/env bash
# The recording reader and writer (issue 12), side by side with the code of a base revision in one
# run, with ratios:
#   1. diagnose of a long multi-GPU recording (plain, and the same recording as .ndjson.zst)
#   2. diagnose --html against plain diagnose (the page's series come from the same single read)
#   3. export --perfetto: wall time and peak RSS
#   4. recording size per hour, plain and zstd, of a 33-process job with a fake GPU (fake NVML)
#
#   bench/recording.sh [HOURS=24] [GPUS=8] [EXPORT_HOURS=1] [SIZE_SECONDS=60]
#   BASE=main (the revision to compare with), GPUFEED_BENCH_DIR=/tmp/gpufeed-bench-recording
#   OLD_BIN=/path/to/gpufeed   compare with that binary instead of building BASE
#
# The old binary is built from a git worktree of BASE inside the bench folder (its target folder is
# seeded from this one's, so only gpufeed itself compiles again). Recordings come from
# bench/diagnose_gen.py and are reused between runs. Times are wall and CPU (user+sys) from
# /usr/bin/time; on a shared machine the CPU column is the steadier one.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
HOURS=${1:-24}
GPUS=${2:-8}
EXPORT_HOURS=${3:-1}
SIZE_SECONDS=${4:-60}
BASE=${BASE:-main}
DIR=${GPUFEED_BENCH_DIR:-/tmp/gpufeed-bench-recording}
mkdir -p "$DIR"

echo "building this tree (release) ..." >&2
cargo build --release --locked -q -p gpufeed -p fake-nvml
NEW="$DIR/gpufeed-new"
cp target/release/gpufeed "$NEW"
FAKE="$DIR/libfake_nvml.so"
cp target/release/libfake_nvml.so "$FAKE"

OLD="$DIR/gpufeed-old"
if [ -n "${OLD_BIN:-}" ]; then
  # A binary of the base revision built before (saves a release build).
  cp "$OLD_BIN" "$OLD"
  BASE="$OLD_BIN"
else
  OLD_SRC="$DIR/old-src"
  if [ ! -d "$OLD_SRC" ]; then
    git worktree add -q --detach "$OLD_SRC" "$BASE"
  fi
  git -C "$OLD_SRC" checkout -q --detach "$BASE"
  if [ ! -d "$DIR/target-old/release" ]; then
    mkdir -p "$DIR/target-old"
    cp -r target/release "$DIR/target-old/release"
  fi
  echo "building $BASE (release) in $OLD_SRC ..." >&2
  (cd "$OLD_SRC" && CARGO_TARGET_DIR="$DIR/target-old" cargo build --release --locked -q -p gpufeed)
  cp "$DIR/target-old/release/gpufeed" "$OLD"
fi

gen() { # hours file: generated once, then reused
  python3 bench/diagnose_gen.py "$2" --hours "$1" --gpus "$GPUS" --reuse
}
LONG="$DIR/rec-${HOURS}h-${GPUS}gpu.ndjson"
SHORT="$DIR/rec-${EXPORT_HOURS}h-${GPUS}gpu.ndjson"
gen "$HOURS" "$LONG"
gen "$EXPORT_HOURS" "$SHORT"
if [ ! -s "$LONG.zst" ]; then
  echo "compressing $LONG ..." >&2
  zstd -q -T0 -9 "$LONG" -o "$LONG.zst"
fi

# measure NAME CMD... -> prints "wall cpu rss_mb" of the best of 3 runs (by CPU)
measure() {
  local best=""
  for _ in 1 2 3; do
    /usr/bin/time -f "%e %U %S %M" "$@" 2>"$DIR/time.txt" >/dev/null || { tail -3 "$DIR/time.txt" >&2; return 1; }
    read -r wall user sys rss < <(tail -1 "$DIR/time.txt")
    local cpu
    cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN{printf "%.2f", u+s}')
    if [ -z "$best" ] || awk -v a="$cpu" -v b="${best#* }" 'BEGIN{exit !(a<b)}' ; then
      best="$wall $cpu $(awk -v r="$rss" 'BEGIN{printf "%.0f", r/1024}')"
    fi
  done
  echo "$best"
}
row() { # label old_triplet new_triplet
  read -r ow oc orss <<<"$2"
  read -r nw nc nrss <<<"$3"
  awk -v l="$1" -v ow="$ow" -v oc="$oc" -v orss="$orss" -v nw="$nw" -v nc="$nc" -v nrss="$nrss" 'BEGIN {
    printf "%-34s old %7.2f s wall %7.2f s cpu %6d MB | new %7.2f s wall %7.2f s cpu %6d MB | cpu %5.2fx faster, RSS %5.1fx smaller\n",
      l, ow, oc, orss, nw, nc, nrss, (nc > 0 ? oc / nc : 0), (nrss > 0 ? orss / nrss : 0) }'
}

cat "$LONG" >/dev/null
echo "== diagnose, $(basename "$LONG") ($(du -h "$LONG" | cut -f1); zstd $(du -h "$LONG.zst" | cut -f1)), load $(cut -d' ' -f1-3 /proc/loadavg)"
O=$(measure "$OLD" diagnose --format json "$LONG")
N=$(measure "$NEW" diagnose --format json "$LONG")
row "diagnose (plain)" "$O" "$N"
NZ=$(measure "$NEW" diagnose --format json "$LONG.zst")
row "diagnose: old plain vs new .zst" "$O" "$NZ"

echo "== --html against plain diagnose (the same file)"
OH=$(measure "$OLD" diagnose --format json --html "$DIR/old.html" "$LONG")
NH=$(measure "$NEW" diagnose --format json --html "$DIR/new.html" "$LONG")
row "diagnose --html" "$OH" "$NH"
awk -v o="${OH#* }" -v op="${O#* }" -v n="${NH#* }" -v np="${N#* }" 'BEGIN {
  split(o, a, " "); split(op, b, " "); split(n, c, " "); split(np, d, " ");
  printf "--html cost vs plain diagnose (cpu): old %.2fx, new %.2fx (goal <= 1.3x)\n", a[1] / b[1], c[1] / d[1] }'

echo "== export --perfetto, $(basename "$SHORT") ($(du -h "$SHORT" | cut -f1))"
OE=$(measure "$OLD" export --perfetto "$DIR/old.json" "$SHORT")
NE=$(measure "$NEW" export --perfetto "$DIR/new.json" "$SHORT")
row "export --perfetto" "$OE" "$NE"
cmp -s "$DIR/old.json" "$DIR/new.json" && echo "  (identical output)" || echo "  (outputs differ!)"
rm -f "$DIR/old.json" "$DIR/new.json"
echo "export --perfetto /dev/zero (new):"
/usr/bin/time -f "  %e s wall, peak RSS %M KB, exit code shown below" timeout 20 "$NEW" export --perfetto "$DIR/zero.json" /dev/zero || echo "  exit $?"

echo "== recording size: ${SIZE_SECONDS} s of a 33-process job (a shell and 32 children) with one fake GPU, 100 ms"
SC="$DIR/scenario.json"
cat >"$SC" <<'EOF'
{"devices": [{"name": "Fake H100", "memory_total_bytes": 85899345920, "memory_used_bytes": 80000000000,
  "compute_capability": [9, 0],
  "util": {"pattern": "square", "period_s": 2.0, "high": 85, "low": 10, "duty": 0.3},
  "processes": [{"pid": "children", "used_memory_bytes": 1000000000, "sm_util": 80}]}]}
EOF
sh -c "for i in \$(seq 32); do sleep $((SIZE_SECONDS + 10)) & done; wait" &
JOB=$!
sleep 0.5
rm -f "$DIR"/size.ndjson "$DIR"/size.ndjson.zst
FAKE_NVML_SCENARIO="$SC" "$NEW" --nvml-lib "$FAKE" record -q --pid "$JOB" --duration "${SIZE_SECONDS}s" -o "$DIR/size.ndjson" &
P1=$!
FAKE_NVML_SCENARIO="$SC" "$NEW" --nvml-lib "$FAKE" record -q --pid "$JOB" --duration "${SIZE_SECONDS}s" -o "$DIR/size.ndjson.zst" &
P2=$!
wait $P1 $P2
kill -- "$JOB" 2>/dev/null || true
pkill -P "$JOB" 2>/dev/null || true
PS=$(stat -c %s "$DIR/size.ndjson")
ZS=$(stat -c %s "$DIR/size.ndjson.zst")
zstd -q -d -c "$DIR/size.ndjson.zst" | head -c 60 >/dev/null && echo "  zstd -d reads the .zst file"
awk -v p="$PS" -v z="$ZS" -v s="$SIZE_SECONDS" 'BEGIN {
  printf "plain %.1f MB/h, zstd %.1f MB/h (goal <= 15 MB/h): %.1fx smaller\n", p / s * 3600 / 1e6, z / s * 3600 / 1e6, p / z }'
