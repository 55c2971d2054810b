#!/usr/bin/env python3
"""Two gpufeed binaries side by side on the readers that use the JSON cursor (issue 12).

    bench/json_cursor.py BEFORE_BIN AFTER_BIN [--runs 3] [--recording R.ndjson] [TRACE.json ...]

For each input it runs `analyze --format json TRACE` (traces) or `diagnose --format json R`
(the recording), BEFORE and AFTER interleaved (before, after, before, after, ...) so that a
loaded box slows both alike, takes user+sys CPU of each run from wait4's rusage, checks that both
print the same bytes, and prints every run, the medians and AFTER/BEFORE.
"""

import argparse
import os
import statistics
import subprocess
import sys


def run(cmd):
    """(user+sys CPU seconds, stdout) of one run."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode not in (0, 1):  # diagnose exits 1 when it finds something
        sys.exit(f"{cmd} exited {p.returncode}")
    return ru.ru_utime + ru.ru_stime, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("traces", nargs="*")
    ap.add_argument("--recording")
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_intermixed_args()
    jobs = [("analyze", t) for t in a.traces]
    if a.recording:
        jobs.append(("diagnose", a.recording))
    print(f"{'input':<42} {'MB':>6}  {'before CPU s (runs)':<24} {'after CPU s (runs)':<24} after/before")
    for cmd, path in jobs:
        mb = os.path.getsize(path) / 1e6
        times = {"before": [], "after": []}
        outs = {}
        for _ in range(a.runs):
            for which in ("before", "after"):
                t, out = run([getattr(a, which), cmd, "--format", "json", path])
                times[which].append(t)
                outs[which] = out
        same = "same output" if outs["before"] == outs["after"] else "OUTPUT DIFFERS"
        b, f = statistics.median(times["before"]), statistics.median(times["after"])
        fmt = lambda ts: " ".join(f"{t:.2f}" for t in ts)
        print(
            f"{cmd + ' ' + os.path.basename(path):<42} {mb:>6.1f}  {fmt(times['before']):<24} "
            f"{fmt(times['after']):<24} {f / b:.2f}  ({mb / b:.0f} -> {mb / f:.0f} MB/s CPU, {same})"
        )


if __name__ == "__main__":
    main()
