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
                            [--extra LABEL=PATH:HOW ...] [--no-corpus]

`--extra` adds a file outside the corpus (bench/telemetry_read.sh passes its generated logs;
HOW is csv, spaces, jsonl or promjson). The two programs run alternately, run by run, so that
a change of the machine's load falls on both; a file over 1 GB runs `--big-runs` times.
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
elif how == "promjson":
    # A Prometheus query_range answer: one frame per series, as a notebook loads it.
    with open(path) as f:
        doc = json.load(f)
    frames = [pd.DataFrame(r["values"], columns=["t", "v"]) for r in doc["data"]["result"]]
    df = pd.concat(frames)
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


def one_file(label, path, how, gpufeed, python, runs):
    g, p = [], []
    for _ in range(runs):
        g.append(run([gpufeed, "diagnose", "--format", "json", path]))
        if how is not None:
            p.append(run([python, "-c", PANDAS, path, how]))
    g_ms = statistics.median(x[0] for x in g) * 1000
    g_mb = max(x[1] for x in g)
    ok = "" if g[0][3] == 0 else " (refused: exit %d)" % g[0][3]
    size = os.path.getsize(path)
    if how is None:
        print("%-15s %11d | %9.0f %8.1f | %11s %11s %8s | no pandas reader%s" % (
            label, size, g_ms, g_mb, "-", "-", "-", ok), flush=True)
        return
    reads = [json.loads(x[2])["read_s"] for x in p if x[3] == 0]
    if not reads:
        print("%-15s %11d | %9.0f %8.1f | pandas failed%s" % (label, size, g_ms, g_mb, ok),
              flush=True)
        return
    p_read = statistics.median(reads) * 1000
    p_ms = statistics.median(x[0] for x in p) * 1000
    p_mb = max(x[1] for x in p)
    print("%-15s %11d | %9.0f %8.1f | %9.0fms %9.0fms %8.1f | %5.2fx %5.2fx | %5.2fx%s" % (
        label, size, g_ms, g_mb, p_read, p_ms, p_mb, g_ms / p_ms, g_ms / p_read,
        g_mb / p_mb, ok), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpufeed")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--big-runs", type=int, default=1)
    ap.add_argument("--extra", action="append", default=[])
    ap.add_argument("--no-corpus", action="store_true")
    a = ap.parse_args()
    gpufeed = find_gpufeed(a.gpufeed)
    files = []
    if not a.no_corpus:
        d = corpus_dir()
        largest = {}
        for name in os.listdir(d):
            path = os.path.join(d, name)
            if not os.path.isfile(path):
                continue
            shape = name.split("__")[0]
            if shape not in largest or os.path.getsize(path) > os.path.getsize(largest[shape]):
                largest[shape] = path
        files = [(shape, largest[shape], HOW.get(shape, "csv")) for shape in sorted(largest)]
    for e in a.extra:
        label, rest = e.split("=", 1)
        path, how = rest.rsplit(":", 1)
        files.append((label, path, how))
    print("gpufeed: %s; times are medians of %d runs (%d over 1 GB), alternating; peak = max "
          "RSS" % (gpufeed, a.runs, a.big_runs))
    print("%-15s %11s | %9s %8s | %11s %11s %8s | %-13s | %s" % (
        "input", "bytes", "gpufeed ms", "peak MB", "pandas read", "pandas proc", "peak MB",
        "time / pandas", "peak / pandas"))
    print("%-15s %11s | %9s %8s | %11s %11s %8s | %-13s |" % (
        "", "", "", "", "", "", "", " proc   read"))
    for label, path, how in files:
        runs = a.big_runs if os.path.getsize(path) > (1 << 30) else a.runs
        one_file(label, path, how, gpufeed, a.python, runs)


if __name__ == "__main__":
    main()
