#!/usr/bin/env python3
"""Cost of Python stack sampling, side by side in one run.

One job runs throughout: examples/starving_pipeline.py with a main process and N workers
(default 4), a CPU-bound input pipeline. The bench attaches `gpufeed record --pid` to it in
alternating windows, in four modes, cycling through them several times:

  none          nothing attached (the job's own throughput)
  py-off        gpufeed record --pid --py-stacks off   (host and process sampling only)
  py-full       gpufeed record --pid --py-stacks on, GPUFEED_PY_CHILD_EVERY=1: every process
                read at --rate (what gpufeed did before workers were read at a quarter rate)
  py-nonblock   gpufeed record --pid --py-stacks on    (py-spy reads the live process; the
                training process at --rate, its worker processes at a quarter of it: the default)
  py-block      the same with GPUFEED_PY_BLOCKING=1     (py-spy pauses each process to read it)
  py-nocache    py-nonblock with GPUFEED_PY_CACHE=0     (the vendored py-spy's frame cache and
                Python-threads-only run-state scan off: upstream py-spy 0.4.3's reads)

and prints, per mode, the job's throughput (steps/s, from its own per-second progress lines)
relative to `none`, and gpufeed's CPU time as a share of one core, twice: over the whole window
(start-up included: opening one py-spy reader per process parses the interpreter's ELF files)
and in the steady state (from /proc/<gpufeed>/stat after `--warmup` seconds to the window's end),
which is what a long recording pays. The sampling cost is the py-* modes minus py-off; the last
line gives py-nocache's steady sampling cost over py-nonblock's (what the cache saves). The load
average is printed at the start and the end: figures from a loaded machine are noisy. Usage:

    cargo build --release -p gpufeed
    python3 bench/pystacks_overhead.py [--gpufeed target/release/gpufeed] [--window 6] [--cycles 3]
        [--workers 4] [--rate 100] [--modes none,py-off,py-nonblock,py-nocache]
"""

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import threading
import time

from common import cpu_s

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpufeed", default=os.path.join(ROOT, "target/release/gpufeed"))
    ap.add_argument("--window", type=float, default=6.0)
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--warmup", type=float, default=2.0,
                    help="seconds of each window left out of the steady-state CPU figure")
    ap.add_argument("--modes", default="none,py-off,py-full,py-nonblock,py-block,py-nocache",
                    help="comma-separated; none and py-off are always run (the baselines)")
    a = ap.parse_args()
    load_start = os.getloadavg()

    job = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "examples/starving_pipeline.py"),
         "--workers", str(a.workers), "--device-ms", "5", "--decode-passes", "1",
         "--seconds", str(a.window * 5 * a.cycles + 30)],
        stdout=subprocess.PIPE, text=True)
    progress = []  # (monotonic time, steps)
    pat = re.compile(r"^step\s+(\d+)")

    def reader():
        for line in job.stdout:
            m = pat.match(line)
            if m:
                progress.append((time.monotonic(), int(m.group(1))))

    threading.Thread(target=reader, daemon=True).start()
    time.sleep(4.0)  # workers started, first batches through

    def steps_at(t):
        # Linear interpolation between progress lines.
        pts = list(progress)
        before = [p for p in pts if p[0] <= t]
        after = [p for p in pts if p[0] >= t]
        if not before or not after:
            return None
        (t0, s0), (t1, s1) = before[-1], after[0]
        return s0 if t1 == t0 else s0 + (s1 - s0) * (t - t0) / (t1 - t0)

    all_modes = ["none", "py-off", "py-full", "py-nonblock", "py-block", "py-nocache"]
    wanted = set(a.modes.split(",")) | {"none", "py-off"}
    unknown = wanted - set(all_modes)
    if unknown:
        sys.exit("unknown --modes %s: choose among %s" % (",".join(sorted(unknown)),
                                                          ",".join(all_modes)))
    modes = [m for m in all_modes if m in wanted]
    rates = {m: [] for m in modes}
    cpu = {m: [] for m in modes}
    steady = {m: [] for m in modes}
    pending = []
    for _ in range(a.cycles):
        for mode in modes:
            start = time.monotonic()
            ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            if mode == "none":
                time.sleep(a.window)
            else:
                env = dict(os.environ)
                env["GPUFEED_NVML_LIB"] = "/nonexistent/libnvidia-ml.so.1"
                if mode == "py-block":
                    env["GPUFEED_PY_BLOCKING"] = "1"
                if mode == "py-full":
                    env["GPUFEED_PY_CHILD_EVERY"] = "1"
                if mode == "py-nocache":
                    env["GPUFEED_PY_CACHE"] = "0"
                out = "/tmp/gpufeed-bench-pystacks-%d-%d.ndjson" % (os.getpid(), len(pending))
                cmd = [a.gpufeed, "record", "-q", "--pid", str(job.pid), "--duration",
                       "%gs" % a.window, "-o", out,
                       "--py-stacks", "off" if mode == "py-off" else "on",
                       "--py-rate", str(a.rate)]
                g = subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL)
                time.sleep(a.warmup)
                c0, w0 = cpu_s(g.pid), time.monotonic()
                time.sleep(max(0.5, a.window - a.warmup - 0.3))
                c1, w1 = cpu_s(g.pid), time.monotonic()
                if g.wait() != 0:
                    sys.exit("gpufeed record failed")
                if c0 is not None and c1 is not None and w1 > w0:
                    steady[mode].append((c1 - c0) / (w1 - w0) * 100.0)
                os.unlink(out)
            end = time.monotonic()
            ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[mode].append(((ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime))
                             / (end - start) * 100.0)
            pending.append((mode, start + 0.5, end))
    time.sleep(1.5)
    for mode, t0, t1 in pending:
        s0, s1 = steps_at(t0), steps_at(t1)
        if s0 is not None and s1 is not None:
            rates[mode].append((s1 - s0) / (t1 - t0))
    job.terminate()
    job.wait()

    base = statistics.mean(rates["none"])
    off_cpu = statistics.mean(cpu["py-off"])
    off_steady = statistics.mean(steady["py-off"]) if steady["py-off"] else 0.0
    print("job: examples/starving_pipeline.py, main + %d workers; %d cycles of %gs windows; "
          "py rate %g Hz; %d CPUs, load average (1 min) %.1f at the start, %.1f at the end"
          % (a.workers, a.cycles, a.window, a.rate, os.cpu_count(), load_start[0],
             os.getloadavg()[0]))
    print("%-12s %10s %10s %14s %14s %15s %15s" % (
        "mode", "steps/s", "vs none", "CPU % window", "sampling %", "CPU % steady",
        "sampling % st"))
    for m in modes:
        r = statistics.mean(rates[m])
        c = statistics.mean(cpu[m])
        st = statistics.mean(steady[m]) if steady[m] else None
        py = m.startswith("py-") and m != "py-off"
        print("%-12s %10.2f %9.3fx %14.2f %14s %15s %15s" % (
            m, r, r / base, c if m != "none" else 0.0,
            "%.2f" % (c - off_cpu) if py else "-",
            "%.2f" % st if st is not None else "-",
            "%.2f" % (st - off_steady) if py and st is not None else "-"))
    if steady.get("py-nocache") and steady.get("py-nonblock"):
        on = statistics.mean(steady["py-nonblock"]) - off_steady
        no = statistics.mean(steady["py-nocache"]) - off_steady
        if on > 0:
            print("frame cache: steady sampling %.2f%% of a core with it, %.2f%% without: %.1fx"
                  % (on, no, no / on))
    print("windows: " + "; ".join("%s %s" % (m, ", ".join("%.2f" % x for x in rates[m]))
                                  for m in modes))


if __name__ == "__main__":
    main()
