#!/usr/bin/env bash
# Side-by-side: `gpufeed analyze` vs Python's json.load (and HTA when installable) on every shared
# trace and on a large generated trace. Wall time and peak RSS from /usr/bin/time.
#
# usage: bench/analyze.sh [TRACES_DIR] [BIG_MB]
#   TRACES_DIR defaults to ../shared/traces; BIG_MB (default 1000) sizes the generated trace
#   (0 skips it). HTA: set HTA_PY to a python with HolisticTraceAnalysis installed, e.g.
#   python3 -m venv /tmp/htavenv && /tmp/htavenv/bin/pip install HolisticTraceAnalysis
#   HTA_PY=/tmp/htavenv/bin/python bench/analyze.sh   (HTA_MAX_MB=400: larger files skip HTA)
set -euo pipefail
cd "$(dirname "$0")/.."
TRACES=${1:-../shared/traces}
BIG_MB=${2:-1000}
WORK=${WORK:-$(mktemp -d /tmp/gpufeed-bench.XXXXXX)}
HTA_PY=${HTA_PY:-/tmp/htavenv/bin/python}
BIN=target/release/gpufeed
cargo build --release -q -p gpufeed || { [ -x "$BIN" ] && echo "warning: cargo build failed; using the existing $BIN" >&2; }

if [ -x "$HTA_PY" ] && "$HTA_PY" -c 'import hta' 2>/dev/null; then HAVE_HTA=1; else
  HAVE_HTA=0; echo "note: HTA not available ($HTA_PY); skipping the HTA column" >&2; fi

# prints "wall_seconds peak_kb cpu_seconds" of a command (output discarded)
# prints "wall_seconds peak_kb cpu_seconds" of a command (its output discarded)
MEASURE_PY='
import subprocess, sys, time
t = time.perf_counter()
r = subprocess.run(["/usr/bin/time", "-f", "TIME %M %U %S"] + sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
dt = time.perf_counter() - t
kb, u, s = [l for l in r.stderr.decode(errors="replace").splitlines() if l.startswith("TIME ")][-1].split()[1:4]
print("%.4f %s %.2f" % (dt, kb, float(u) + float(s)))
'
measure() { python3 -c "$MEASURE_PY" "$@"; }

cat > "$WORK/jsonload.py" <<'PY'
import json, sys
with open(sys.argv[1], "rb") as f:
    d = json.load(f)
print(len(d["traceEvents"] if isinstance(d, dict) else d))
PY
cat > "$WORK/hta_run.py" <<'PY'
import os, shutil, sys, tempfile
from hta.trace_analysis import TraceAnalysis
d = tempfile.mkdtemp()
shutil.copy(sys.argv[1], os.path.join(d, "rank-0.json"))
t = TraceAnalysis(trace_dir=d)
t.get_temporal_breakdown(visualize=False)
try:
    t.get_idle_time_breakdown(visualize=False)
except Exception as e:
    print("idle_time_breakdown failed:", repr(e), file=sys.stderr)
PY

row() { # name file
  local name=$1 f=$2 mb g p h
  mb=$(awk -v b="$(stat -c %s "$f")" 'BEGIN{printf "%.1f", b/1e6}')
  g=$(measure "$BIN" analyze --format json "$f")
  p=$(measure python3 "$WORK/jsonload.py" "$f")
  if [ "$HAVE_HTA" = 1 ] && [ "${mb%.*}" -le "${HTA_MAX_MB:-400}" ]; then h=$(measure "$HTA_PY" "$WORK/hta_run.py" "$f"); else h="- - -"; fi
  read -r gs gk gc <<< "$g"; read -r ps pk _ <<< "$p"; read -r hs hk _ <<< "$h"
  awk -v n="$name" -v mb="$mb" -v gs="$gs" -v gk="$gk" -v gc="$gc" -v ps="$ps" -v pk="$pk" -v hs="$hs" -v hk="$hk" 'BEGIN{
    gr = (gs > 0) ? mb / gs : 0;
    r1 = (gs > 0) ? ps / gs : 0; m1 = (gk > 0) ? pk / gk : 0;
    if (hs == "-") { r2 = "-"; m2 = "-" } else { r2 = sprintf("%.0fx", (gs > 0) ? hs / gs : 0); m2 = sprintf("%.0fx", hk / gk) }
    printf "%-40s %8.1f %7.3f %6.2f %7.0f %7.0f | %7.3f %7.0f %5.0fx %5.0fx | %7s %8s %6s %6s\n",
      n, mb, gs, gc, gk/1024, gr, ps, pk/1024, r1, m1, hs, (hk == "-") ? "-" : sprintf("%.0f", hk/1024), r2, m2 }'
}

printf "%-40s %8s %7s %6s %7s %7s | %7s %7s %6s %6s | %7s %8s %6s %6s\n" trace MB gf_s gf_cpu gf_MB "MB/s" \
  json_s json_MB "x" "xRSS" hta_s hta_MB "x" "xRSS"
for gz in "$TRACES"/*.json.gz; do
  n=$(basename "$gz" .gz)
  gunzip -c "$gz" > "$WORK/$n"
  row "$n" "$WORK/$n"
done

if [ "$BIG_MB" != 0 ]; then
  BIG=${BIG_TRACE:-$WORK/big.json}   # BIG_TRACE=path reuses a trace generated before
  [ -f "$BIG" ] || python3 bench/analyze_gen.py "$TRACES/kineto_resnet50_v100_workers0.json.gz" "$BIG" "$BIG_MB" >&2
  row "big (repeated resnet50 workers0)" "$BIG"
  # several ranks at once: two links to the big trace in one directory (both cores should be busy)
  mkdir -p "$WORK/ranks"
  ln -sf "$(readlink -f "$BIG")" "$WORK/ranks/rank0.json"
  ln -sf "$(readlink -f "$BIG")" "$WORK/ranks/rank1.json"
  /usr/bin/time -f "2 ranks x $BIG_MB MB in one run: %e s wall, %U s user, %P CPU, %M KB peak" "$BIN" analyze "$WORK/ranks" > /dev/null
fi
echo "(work files in $WORK)" >&2
