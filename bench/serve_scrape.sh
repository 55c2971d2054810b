#!/usr/bin/env bash
# Scrape latency of `gpufeed serve` with 8 GPUs (fake driver) and a job of 64 processes.
# Goal: a /metrics scrape served in <= 5 ms. Usage: bench/serve_scrape.sh [N_SCRAPES]
# Builds the release binary and the fake driver unless GPUFEED_BIN / FAKE_NVML_LIB are set.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-300}
TARGET=${CARGO_TARGET_DIR:-target}
if [ -z "${GPUFEED_BIN:-}" ]; then
  cargo build -q --release -p gpufeed -p fake-nvml
  GPUFEED_BIN=$TARGET/release/gpufeed
  FAKE_NVML_LIB=$TARGET/release/libfake_nvml.so
fi
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
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
GPUFEED_NVML_LIB=$FAKE_NVML_LIB FAKE_NVML_SCENARIO=$work/scenario.json \
  "$GPUFEED_BIN" serve --listen "127.0.0.1:$port" --pid "$job" 2>"$work/serve.log" &
pids+=("$!")
sleep 3
python3 - "$port" "$N" <<'PY'
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
procs = sum(1 for l in text.splitlines() if l.startswith("gpufeed_job_process_cpu_percent{"))
print(f"scrapes={n} gpus={gpus} job_processes={procs} bytes={len(body)}")
print(f"latency_ms p50={statistics.median(times):.2f} p99={times[int(0.99*(n-1))]:.2f} max={times[-1]:.2f} (goal <= 5 ms)")
PY
