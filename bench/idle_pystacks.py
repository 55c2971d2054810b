#!/usr/bin/env python3
"""Cost of Python stack sampling for idle processes (issue 24 item 5).

Starts 33 idle Python processes (one parent, 32 sleeping children) and attaches
`gpufeed record --pid --py-stacks on` for `--secs` seconds per mode, several times, interleaved:
`off` (--py-stacks off), `skip` (stacks on: the default, idle processes not re-read until their
CPU time moves), `noskip` (stacks on, GPUFEED_PY_IDLE_SKIP=0: every process read every tick).
Prints gpufeed's CPU time as a share of one core per mode (the median of the rounds). Usage:

    cargo build --release -p gpufeed
    python3 bench/idle_pystacks.py [--gpufeed target/release/gpufeed] [--secs 10] [--rounds 2]
"""
import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = "import time\nwhile True: time.sleep(3600)\n"
PARENT = (
    "import subprocess, sys, time\n"
    "kids = [subprocess.Popen([sys.executable, '-c', %r]) for _ in range(32)]\n"
    "time.sleep(3600)\n" % CHILD
)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpufeed", default=os.path.join(HERE, "..", "target/release/gpufeed"))
    ap.add_argument("--secs", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    job = subprocess.Popen([sys.executable, "-c", PARENT], start_new_session=True)
    time.sleep(3)
    modes = {"off": ({}, "off"), "skip": ({}, "on"), "noskip": ({"GPUFEED_PY_IDLE_SKIP": "0"}, "on")}
    got = {m: [] for m in modes}
    try:
        for _ in range(a.rounds):
            for m, (env, stacks) in modes.items():
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                p = subprocess.Popen(
                    [a.gpufeed, "--nvml-lib", "/nonexistent/libnvidia-ml.so.1", "record",
                     "--pid", str(job.pid), "--py-stacks", stacks, "-q", "-o", "/dev/null",
                     "--force"],
                    env={**os.environ, **env}, stderr=subprocess.DEVNULL,
                )
                time.sleep(a.secs)
                p.terminate()
                p.wait()
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
                got[m].append(cpu / a.secs * 100)
    finally:
        os.killpg(job.pid, 15)
    print("load average at the end: %.1f" % os.getloadavg()[0])
    for m, v in got.items():
        print("%-7s %5.2f %% of a core (rounds: %s)" % (m, statistics.median(v),
                                                   ", ".join("%.2f" % x for x in v)))


if __name__ == "__main__":
    main()
