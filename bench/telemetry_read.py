#!/usr/bin/env python3
"""Reading real telemetry: gpufeed against pandas, side by side, on the largest file of each shape.

For every shape of the real corpus (tests/data/real/SOURCES.md; the files from
../shared/telemetry or crates/gpufeed/tests/data/real/files), the largest file is read by
`gpufeed diagnose --format json` (the whole job: read, judge, report) and by pandas (`read_csv`,
`read_csv(sep=r"\\s+")` for dmon tables, `read_json(lines=True)` for W&B events: parsing only,
no judgement). Each runs in its own process, `--runs` times; the median wall time and the peak
RSS (ru_maxrss) are printed, with pandas' own read time inside its process beside them (its
import alone costs more than most of these files).

    bench/telemetry_read.py [--gpufeed PATH] [--python PYTHON_WITH_PANDAS] [--runs 5]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from common import ROOT, find_gpufeed

PANDAS = r"""
import sys, time, json
t0 = time.perf_counter()
import pandas as pd
t1 = time.perf_counter()
path, how = sys.argv[1], sys.argv[2]
if how == "csv":
    df = pd.read_csv(path, skipinitialspace=True, on_bad_lines="skip", encoding_errors="replace")
elif how == "spaces":
    df = pd.read_csv(path, sep=r"\s+", comment="#", header=None, on_bad_lines="skip",
                     encoding_errors="replace")
else:
    df = pd.read_json(path, lines=True)
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "read_s": t2 - t1, "rows": len(df)}))
"""

HOW = {
    "dcgmi-dmon": "spaces",
    "smi-dmon": "spaces",
    "nvml-log": "spaces",
    "wandb-events": "jsonl",
    "prom-text": None,
    "rocm-smi": "csv",
}


TIME = "/usr/bin/time"


def run(cmd):
    """Wall seconds, peak RSS in MB, stdout and exit code of one process. The peak comes from
    GNU time (`%M`) where it is installed: a child's ru_maxrss seen from Python counts the
    forked Python's pages before the exec."""
    timed = os.path.exists(TIME)
    full = [TIME, "-f", "MAXRSS %M"] + cmd if timed else cmd
    t0 = time.perf_counter()
    p = subprocess.run(full, capture_output=True)
    wall = time.perf_counter() - t0
    peak = None
    if timed:
        for line in p.stderr.decode(errors="replace").splitlines():
            if line.startswith("MAXRSS "):
                peak = int(line.split()[1]) / 1024
    if peak is None:
        peak = float("nan")
    return wall, peak, p.stdout, p.returncode


def corpus_dir():
    for d in (os.path.join(ROOT, "..", "shared", "telemetry"),
              os.path.join(ROOT, "crates", "gpufeed", "tests", "data", "real", "files")):
        if os.path.isdir(d):
            return d
    sys.exit("no corpus: ../shared/telemetry or crates/gpufeed/tests/data/real/files "
             "(scripts/corpus-extract.sh fills it)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpufeed")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    gpufeed = find_gpufeed(a.gpufeed)
    d = corpus_dir()
    largest = {}
    for name in os.listdir(d):
        path = os.path.join(d, name)
        if not os.path.isfile(path):
            continue
        shape = name.split("__")[0]
        if shape not in largest or os.path.getsize(path) > os.path.getsize(largest[shape]):
            largest[shape] = path
    print("%-15s %9s | %11s %8s | %11s %11s %8s | %s" % (
        "shape", "bytes", "gpufeed ms", "peak MB", "pandas read", "pandas proc", "peak MB",
        "gpufeed / pandas read"))
    for shape in sorted(largest):
        path = largest[shape]
        g = [run([gpufeed, "diagnose", "--format", "json", path]) for _ in range(a.runs)]
        g_ms = statistics.median(x[0] for x in g) * 1000
        g_mb = max(x[1] for x in g)
        ok = "" if g[0][3] == 0 else " (refused)"
        how = HOW.get(shape, "csv")
        if how is None:
            print("%-15s %9d | %11.1f %8.1f | %11s %11s %8s | no pandas reader%s" % (
                shape, os.path.getsize(path), g_ms, g_mb, "-", "-", "-", ok))
            continue
        p = [run([a.python, "-c", PANDAS, path, how]) for _ in range(a.runs)]
        reads = [json.loads(x[2])["read_s"] for x in p if x[3] == 0]
        if not reads:
            print("%-15s %9d | %11.1f %8.1f | pandas failed%s" % (
                shape, os.path.getsize(path), g_ms, g_mb, ok))
            continue
        p_read = statistics.median(reads) * 1000
        p_ms = statistics.median(x[0] for x in p) * 1000
        p_mb = max(x[1] for x in p)
        print("%-15s %9d | %11.1f %8.1f | %9.1fms %9.1fms %8.1f | %.2fx of its read, %.2fx of its process%s" % (
            shape, os.path.getsize(path), g_ms, g_mb, p_read, p_ms, p_mb, g_ms / p_read,
            g_ms / p_ms, ok))


if __name__ == "__main__":
    main()
