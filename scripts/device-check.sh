#!/usr/bin/env bash
# The GPU proof (issue 14), in one time-boxed run on the device machine: no cargo, no network.
# It uses the prebuilt binary staged by scripts/stage-device.sh in the ignored folder .device/
# and the real training job examples/train_images.py (PyTorch, torchvision on the machine).
#
#   1. versions; gpufeed doctor (text, JSON); gpufeed bench (text, JSON) on the real driver
#   2. gpufeed run on the starved configuration (workers 0, pageable, fp32), ~60 s
#   3. gpufeed sweep -L workers 0,4,8,16 on the real job
#   4. gpufeed batch-size up to a real out-of-memory, capped, with an accumulation plan
#   5. gpufeed run on the tuned configuration (sweet-spot workers, pinned, bf16, channels-last)
#   6. gpufeed analyze on the Kineto traces of steps 2 and 5; one scrape of gpufeed serve
#
# Every step has its own timeout and the whole script stops starting steps once its budget
# (DEVICE_CHECK_BUDGET_S, default 470 s: under 8 minutes) is spent. Results go to $OUT (a temp
# folder when unset): report.md (Markdown) and results.json, plus every step's raw output.
# Without an NVIDIA GPU the GPU steps are reported as SKIPPED and the script exits 5 (the README's
# "a GPU is required" code) after writing the report; a failed step makes it exit 1.
#
# Usage (on the device machine, from the repository root):
#   scripts/stage-device.sh            # here, first: builds and stages .device/bin/gpufeed
#   OUT=/some/dir scripts/device-check.sh
set -uo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)
out="${OUT:-$(mktemp -d)}"
mkdir -p "$out"
out=$(cd "$out" && pwd)
budget=${DEVICE_CHECK_BUDGET_S:-470}
start=$(date +%s)
bin="${GPUFEED_BIN:-$root/.device/bin/gpufeed}"
py="${PYTHON:-python3}"
job=("$py" "$root/examples/train_images.py" --data-dir "$out/data")
status_file="$out/steps.tsv"
: > "$status_file"
export XDG_CACHE_HOME="$out/cache"
export PYTHONUNBUFFERED=1

elapsed() { echo $(( $(date +%s) - start )); }
left() { echo $(( budget - $(elapsed) )); }
log() { echo "[$(elapsed) s] $*"; }
# record STEP STATUS NOTE: one line per step for the report (status: ok, failed, skipped, timeout)
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >> "$status_file"; log "$1: $2 ${3:+($3)}"; }

# boxed SECONDS NAME -- CMD...: runs CMD with a timeout of min(SECONDS, what is left - 10 s);
# stdout/stderr to $out/NAME.out/.err. SIGINT first (gpufeed writes what it has), SIGKILL 15 s later.
boxed() {
  local secs=$1 name=$2; shift 3
  local l; l=$(left)
  if [ $(( l - 10 )) -lt "$secs" ]; then secs=$(( l - 10 )); fi
  if [ "$secs" -lt 5 ]; then record "$name" skipped "budget spent"; return 124; fi
  log "$name (up to $secs s): $*"
  timeout -s INT -k 15 "$secs" "$@" > "$out/$name.out" 2> "$out/$name.err"
  local rc=$?
  echo "$rc" > "$out/$name.rc"
  return $rc
}

[ -x "$bin" ] || { echo "device-check: no gpufeed binary at $bin: run scripts/stage-device.sh first (it builds one and copies it to .device/)"; exit 1; }

# --- 1. versions, doctor, bench -----------------------------------------------------------------
log "versions"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(uname -srm), $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
  echo "gpufeed: $("$bin" --version 2>&1) ($(cat .device/MANIFEST 2>/dev/null | tr '\n' ' '))"
  timeout 20 nvidia-smi --query-gpu=index,name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max --format=csv 2>&1 || echo "nvidia-smi: unavailable"
  timeout 30 "$py" -c 'import torch, torchvision; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), "gpu", torch.cuda.is_available(), "torchvision", torchvision.__version__)' 2>&1 || echo "torch: not importable"
} > "$out/versions.txt" 2>&1
cat "$out/versions.txt"
gpu=0
if timeout 20 nvidia-smi -L > /dev/null 2>&1 && timeout 30 "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  gpu=1
fi
record versions ok "gpu=$gpu"

boxed 30 doctor -- "$bin" doctor; rc=$?
case $rc in 0|4) record doctor ok "exit $rc";; 5) record doctor skipped "no NVIDIA driver (exit 5)";; *) record doctor failed "exit $rc";; esac
boxed 30 doctor-json -- "$bin" doctor --format json; rc=$?
mv -f "$out/doctor-json.out" "$out/doctor.json" 2>/dev/null
case $rc in 0|4) record doctor-json ok "exit $rc";; 5) record doctor-json skipped "no NVIDIA driver (exit 5)";; *) record doctor-json failed "exit $rc";; esac

if [ "$gpu" = 1 ]; then
  boxed 45 bench-json -- "$bin" bench --format json --max-size 256M --gemm-size 4096; rc=$?
  mv -f "$out/bench-json.out" "$out/bench.json" 2>/dev/null
  [ $rc = 0 ] && record bench-json ok "" || record bench-json failed "exit $rc"
  boxed 30 bench -- "$bin" bench --max-size 64M --gemm-size 2048; rc=$?
  [ $rc = 0 ] && record bench ok "" || record bench failed "exit $rc"
else
  record bench skipped "no GPU"
fi

if [ "$gpu" != 1 ]; then
  for s in data run-starved sweep batch-size run-tuned analyze serve; do record "$s" skipped "no GPU (needs the device machine)"; done
else
  # --- the job's data, made once (parallel PIL) ---------------------------------------------------
  boxed 40 data -- "${job[@]}" --device cpu --arch resnet18 --steps 1 --batch-size 8 --seconds 0; rc=$?
  [ $rc = 0 ] && record data ok "$(grep '^data:' "$out/data.out" | head -1)" || record data failed "exit $rc"

  # --- 2. the starved configuration ---------------------------------------------------------------
  boxed 90 run-starved -- "$bin" run --format json -o "$out/starved.ndjson" --html "$out/starved.html" -- \
    "${job[@]}" --workers 0 --pin 0 --amp off --channels-last 0 --seconds 60 --profile "$out/trace-starved"
  rc=$?; [ $rc = 0 ] && record run-starved ok "" || record run-starved failed "exit $rc"

  # --- 3. sweep num_workers -------------------------------------------------------------------------
  boxed 130 sweep -- "$bin" sweep -q -L workers 0,4,8,16 --min-time 5s --max-time 18s --format json \
    --output-dir "$out/sweep" --export-markdown "$out/sweep.md" -- \
    "${job[@]}" --workers '{workers}' --seconds 0
  rc=$?; [ $rc = 0 ] && record sweep ok "" || record sweep failed "exit $rc"
  best=$("$py" -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["sweet_spot"]["parameters"]["workers"])' "$out/sweep.out" 2>/dev/null)
  [ -n "$best" ] || best=$(( $(nproc) > 17 ? 16 : $(nproc) - 1 ))

  # --- 4. batch size up to a real OOM (synthetic data: the search is about memory) -----------------
  boxed 80 batch-size -- "$bin" batch-size -q --param bs --start 256 --max 4096 --target-batch 4096 \
    --min-time 3s --max-time 8s --format json --output-dir "$out/batch-size" -- \
    "${job[@]}" --data synthetic --amp bf16 --channels-last 1 --batch-size '{bs}' --seconds 0
  rc=$?; [ $rc = 0 ] && record batch-size ok "" || record batch-size failed "exit $rc"

  # --- 5. the tuned configuration -------------------------------------------------------------------
  boxed 75 run-tuned -- "$bin" run --format json -o "$out/tuned.ndjson" --html "$out/tuned.html" -- \
    "${job[@]}" --workers "$best" --pin 1 --amp bf16 --channels-last 1 --seconds 45 --profile "$out/trace-tuned"
  rc=$?; [ $rc = 0 ] && record run-tuned ok "workers=$best" || record run-tuned failed "exit $rc"

  # --- 6. analyze the Kineto traces; scrape serve once ----------------------------------------------
  arc=0
  for c in starved tuned; do
    boxed 20 "analyze-$c" -- "$bin" analyze --format json "$out/trace-$c" || arc=1
    cp "$out/analyze-$c.out" "$out/analyze-$c.json" 2>/dev/null
    boxed 20 "analyze-$c-text" -- "$bin" analyze --steps "$out/trace-$c" || arc=1
  done
  [ $arc = 0 ] && record analyze ok "" || record analyze failed "see analyze-*.err"
  port=$(( 20000 + RANDOM % 20000 ))
  "$bin" serve --listen "127.0.0.1:$port" > "$out/serve.out" 2> "$out/serve.err" &
  spid=$!
  sleep 3
  if timeout 10 "$py" -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' \
       "http://127.0.0.1:$port/metrics" > "$out/metrics.txt" 2> "$out/metrics.err"; then
    record serve ok "$(grep -c '^[a-z]' "$out/metrics.txt") metric lines"
  else
    record serve failed "scrape failed"
  fi
  kill -INT "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
fi

# --- report -------------------------------------------------------------------------------------
"$py" "$root/scripts/device-report.py" "$out" "$(elapsed)" || echo "device-check: the report could not be written"
log "done: report in $out/report.md, JSON in $out/results.json"
if grep -q $'\tfailed\t' "$status_file"; then exit 1; fi
if [ "$gpu" != 1 ]; then echo "device-check: no GPU here: GPU steps SKIPPED (exit 5)"; exit 5; fi
exit 0
