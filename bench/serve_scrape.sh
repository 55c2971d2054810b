#!/usr/bin/env bash
# Scrape latency of `gpufeed serve` with 8 GPUs (fake driver) and a job of 64 processes:
# one scraper in a loop, then 50 concurrent scrapers (ApacheBench, keep-alive and a new
# connection per scrape). Goal: p99 <= 5 ms at 50 concurrent scrapers.
# Usage: bench/serve_scrape.sh [N_SCRAPES]
# Builds the release binary and the fake driver unless GPUFEED_BIN / FAKE_NVML_LIB are set.
# Side by side: set GPUFEED_PEER_BIN to another gpufeed binary (e.g. one built before the
# server moved to hyper) and the same runs are made against it, with ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-300}
CONC=${CONC:-50}
TOTAL=${TOTAL:-5000}
TARGET=${CARGO_TARGET_DIR:-target}
if [ -z "${GPUFEED_BIN:-}" ]; then
  cargo build -q --release -p gpufeed -p fake-nvml
  GPUFEED_BIN=$TARGET/release/gpufeed
  FAKE_NVML_LIB=$TARGET/release/libfake_nvml.so
fi
command -v ab >/dev/null || { echo "needs ab (apt-get install apache2-utils)" >&2; exit 2; }
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
python3 - "$work/scenario.json" <<'PY'
import json, sys
dev = lambda i: {"util": {"pattern": "square", "period_s": 2.0, "high": 90, "low": 10, "duty": 0.4},
                 "memory_used_bytes": 60 << 30, "pcie": {"rx_bytes_per_s": 2e9, "tx_bytes_per_s": 1e8},
                 "throttle_reasons": 4 if i % 2 else 0}
json.dump({"devices": [dev(i) for i in range(8)]}, open(sys.argv[1], "w"))
PY
# A job: one parent with 63 children (64 processes).
sh -c 'for i in $(seq 63); do sleep 600 & done; wait' &
job=$!; pids+=("$job")

# bench BIN: starts it, prints "seq_p50 seq_p99 ka_p50 ka_p99 new_p50 new_p99" (ms) on the last line.
bench() {
  local bin=$1 port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  GPUFEED_NVML_LIB=$FAKE_NVML_LIB FAKE_NVML_SCENARIO=$work/scenario.json \
    "$bin" serve --listen "127.0.0.1:$port" --pid "$job" 2>"$work/serve.log" &
  local srv=$!; pids+=("$srv")
  sleep 3
  local seq
  seq=$(python3 - "$port" "$N" <<'PY'
import http.client, sys, time, statistics
port, n = int(sys.argv[1]), int(sys.argv[2])
c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
def scrape():
    t = time.perf_counter(); c.request("GET", "/metrics"); r = c.getresponse(); body = r.read()
    return (time.perf_counter() - t) * 1000, body
for _ in range(10): scrape()
times = []; body = b""
for _ in range(n):
    ms, body = scrape(); times.append(ms); time.sleep(0.01)
times.sort()
text = body.decode()
gpus = len({l.split('gpu="')[1].split('"')[0] for l in text.splitlines() if l.startswith("DCGM_FI_DEV_GPU_UTIL{")})
procs = sum(1 for l in text.splitlines() if l.startswith("gpufeed_job_process_cpu_ratio{"))
print(f"  one scraper: {n} scrapes, gpus={gpus} job_processes={procs} bytes={len(body)}", file=sys.stderr)
print(f"{statistics.median(times):.2f} {times[int(0.99*(n-1))]:.2f}")
PY
)
  local out=()
  for mode in keepalive new; do
    local flag=""; [ "$mode" = keepalive ] && flag=-k
    ab -q $flag -c "$CONC" -n "$TOTAL" -e "$work/ab.csv" "http://127.0.0.1:$port/metrics" >"$work/ab.txt" 2>&1 \
      || { cat "$work/ab.txt" >&2; exit 1; }
    grep -E "^(Failed requests|Non-2xx)" "$work/ab.txt" | sed 's/^/  /' >&2 || true
    out+=("$(awk -F, '$1=="50"{p50=$2} $1=="99"{p99=$2} END{printf "%.2f %.2f", p50, p99}' "$work/ab.csv")")
  done
  kill "$srv" 2>/dev/null || true; wait "$srv" 2>/dev/null || true
  echo "$seq ${out[0]} ${out[1]}"
}

report() {
  read -r s50 s99 k50 k99 n50 n99 <<<"$2"
  printf '%s\n' "$1" \
    "  one scraper:            p50 ${s50} ms  p99 ${s99} ms" \
    "  ${CONC} scrapers keep-alive: p50 ${k50} ms  p99 ${k99} ms  (goal p99 <= 5 ms)" \
    "  ${CONC} scrapers new conn:   p50 ${n50} ms  p99 ${n99} ms"
}
ours=$(bench "$GPUFEED_BIN" | tail -1)
report "gpufeed ($GPUFEED_BIN), $TOTAL scrapes per concurrent run:" "$ours"
if [ -n "${GPUFEED_PEER_BIN:-}" ]; then
  peer=$(bench "$GPUFEED_PEER_BIN" | tail -1)
  report "peer ($GPUFEED_PEER_BIN):" "$peer"
  python3 - "$ours" "$peer" <<'PY'
import sys
o = [float(x) for x in sys.argv[1].split()]; p = [float(x) for x in sys.argv[2].split()]
names = ["one p50", "one p99", "ka p50", "ka p99", "new p50", "new p99"]
print("ratio peer/gpufeed (above 1: gpufeed faster): " + ", ".join(f"{n} {b / a:.2f}" for n, a, b in zip(names, o, p) if a > 0))
PY
fi
