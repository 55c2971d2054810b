#!/usr/bin/env bash
# CPU used by `gpufeed watch` (whole process: sampling threads + drawing) at the default rates,
# in a 120x40 tmux pane, with the fake driver (1 GPU) and a job of 9 processes.
# Goal: <= 2% of one core. Usage: bench/watch_cpu.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-30}
TARGET=${CARGO_TARGET_DIR:-target}
if [ -z "${GPUFEED_BIN:-}" ]; then
  cargo build -q --release -p gpufeed -p fake-nvml
  GPUFEED_BIN=$TARGET/release/gpufeed
  FAKE_NVML_LIB=$TARGET/release/libfake_nvml.so
fi
work=$(mktemp -d)
sock=gpufeed-bench-$$
cleanup() { tmux -L "$sock" kill-server 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
echo '{"devices":[{"util":{"pattern":"square","period_s":2.0,"high":90,"low":10,"duty":0.3},"pcie":{"rx_bytes_per_s":2e9}}]}' > "$work/s.json"
tmux -L "$sock" new-session -d -s b -x 120 -y 40 \
  "cd $work && GPUFEED_NVML_LIB=$FAKE_NVML_LIB FAKE_NVML_SCENARIO=$work/s.json $GPUFEED_BIN watch -- sh -c 'for i in 1 2 3 4 5 6 7 8; do sleep 600 & done; wait'"
sleep 3
pid=$(pgrep -n -f "$GPUFEED_BIN watch" || true)
[ -n "$pid" ] || { echo "watch did not start"; tmux -L "$sock" capture-pane -p -t b; exit 1; }
hz=$(getconf CLK_TCK)
ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
t0=$(ticks "$pid"); s0=$(date +%s.%N)
sleep "$SECS"
t1=$(ticks "$pid"); s1=$(date +%s.%N)
python3 -c "
cpu=($t1-$t0)/$hz; wall=$s1-$s0
print(f'watch pid $pid: {cpu:.2f} s CPU over {wall:.1f} s = {100*cpu/wall:.2f}% of a core (goal <= 2%)')"
tmux -L "$sock" send-keys -t b q
sleep 1
