#!/usr/bin/env bash
# `gpufeed analyze -` (a pipe) against `gpufeed analyze FILE` on traces with one huge nested args
# value (issue 13 item 10: the pipe was quadratic in the size of one value). Prints wall seconds
# and peak RSS of each and the pipe/file ratio.
#
# usage: bench/analyze_stdin.sh [SIZES_MB="10 40"]   (BIN=path to use another binary)
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES=${1:-"10 40"}
BIN=${BIN:-target/release/gpufeed}
if [ ! -x "$BIN" ]; then cargo build --release -q -p gpufeed; fi
WORK=$(mktemp -d /tmp/gpufeed-stdin.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
printf "%-8s %10s %10s %10s %10s %8s\n" "MB" "file s" "file MB" "pipe s" "pipe MB" "pipe/file"
for mb in $SIZES; do
  python3 - "$WORK/t.json" "$mb" <<'PY'
import sys
path, mb = sys.argv[1], int(sys.argv[2])
with open(path, "w") as f:
    f.write('{"traceEvents":[{"ph":"X","cat":"cpu_op","name":"a","ts":1,"dur":2,"pid":1,"tid":1},')
    f.write('{"ph":"X","cat":"cpu_op","name":"big","ts":2,"dur":1,"pid":1,"tid":1,"args":{"x":[')
    n = mb * 1024 * 1024 // 12
    f.write(",".join('{"k":%d}' % i for i in range(n)))
    f.write(']}},{"ph":"X","cat":"cpu_op","name":"b","ts":3,"dur":1,"pid":1,"tid":1}]}\n')
PY
  /usr/bin/time -o "$WORK/tf" -f "%e %M" "$BIN" analyze --format json "$WORK/t.json" >/dev/null 2>&1
  cat "$WORK/t.json" | /usr/bin/time -o "$WORK/tp" -f "%e %M" "$BIN" analyze --format json - >/dev/null 2>&1
  f=$(tail -1 "$WORK/tf"); p=$(tail -1 "$WORK/tp")
  set -- $f; fs=$1; fk=$2; set -- $p; ps=$1; pk=$2
  printf "%-8s %10s %10.0f %10s %10.0f %8.2f\n" "$mb" "$fs" "$((fk/1024))" "$ps" "$((pk/1024))" "$(python3 -c "print($ps/max($fs,0.01))")"
done
