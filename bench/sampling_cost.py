#!/usr/bin/env python3
"""What recording costs, by what the job's processes do (issue 24 item 5), side by side in one run.

Three cases, each a job started once and `gpufeed record --pid` attached to it in alternating
windows, mode after mode, several rounds (so a change of load hits every mode alike):

  idle      33 idle Python processes (a parent and 32 sleeping children), --py-rate 100.
            Modes: off (--py-stacks off), skip (stacks on, the default: a process whose CPU
            time did not move is not read again), noskip (stacks on, GPUFEED_PY_IDLE_SKIP=0).
            Goal: skip <= 1.5 % of a core.
  recorder  33 processes (a shell and 32 `sleep`s), --py-stacks off, --interval 100ms (10 Hz),
            a fake NVML driver (crates/fake-nvml, one GPU). Goal: <= 1 % of a core.
  ranks     a launcher and 2 ranks (RANK / LOCAL_RANK / WORLD_SIZE set), each
            examples/starving_pipeline.py with 4 busy DataLoader-like workers, --py-rate 100.
            Modes: none (nothing attached), off, on. Goals: on <= 3 % of a core; the job's
            steps/s with stacks on >= 0.99x of stacks off.

gpufeed's CPU is given as a share of one core in the steady state (/proc/<gpufeed>/stat from
`--warmup` seconds after the start to the end of the window: what a long recording pays) and
over the whole window (start-up included: one py-spy reader opened per Python process). The load
average is printed: figures from a loaded machine are noisy. Usage:

    cargo build --release -p gpufeed -p fake-nvml
    python3 bench/sampling_cost.py [--cases idle,recorder,ranks] [--secs 20] [--warmup 5]
        [--rounds 3] [--gpufeed target/release/gpufeed | --gpufeed before=OLD,after=NEW]

Set GPUFEED_BENCH_ENV="K=V ..." to pass extra environment to every gpufeed (to compare a
setting).
"""
import argparse
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from common import cpu_s

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

IDLE_CHILD = "import time\nwhile True: time.sleep(3600)\n"
IDLE_PARENT = (
    "import subprocess, sys, time\n"
    "kids = [subprocess.Popen([sys.executable, '-c', %r]) for _ in range(32)]\n"
    "time.sleep(3600)\n" % IDLE_CHILD
)
# A launcher (it only waits, as torchrun does) and its ranks, each with its workers.
LAUNCHER = r'''
import os, subprocess, sys, time
n, workers, script, secs = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
import threading
ranks = []

def relay(r, out):
    for line in out:
        sys.stdout.write("r%d %s" % (r, line))
        sys.stdout.flush()

for r in range(n):
    env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(n))
    p = subprocess.Popen([sys.executable, script, "--workers", workers, "--device-ms", "5",
                          "--decode-passes", "1", "--seconds", secs], env=env,
                         stdout=subprocess.PIPE, text=True)
    threading.Thread(target=relay, args=(r, p.stdout), daemon=True).start()
    ranks.append(p)
for p in ranks:
    p.wait()
'''


class Window:
    """One gpufeed record attached for `secs` (+ warmup): its steady and whole-window CPU."""

    def __init__(self, a, tmp, pid, args, env, gpufeed=None):
        self.a, self.tmp, self.pid, self.args, self.env = a, tmp, pid, args, env
        self.gpufeed = gpufeed or a.gpufeeds[0][1]

    def run(self):
        a = self.a
        out = os.path.join(self.tmp, "rec.ndjson")
        if os.path.exists(out):
            os.unlink(out)
        env = dict(os.environ, **self.env)
        for kv in os.environ.get("GPUFEED_BENCH_ENV", "").split():
            k, _, v = kv.partition("=")
            env[k] = v
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        g = subprocess.Popen([self.gpufeed] + self.args[:1] + ["record", "-q", "--pid", str(self.pid),
                              "-o", out] + self.args[1:], env=env, stderr=subprocess.DEVNULL)
        time.sleep(a.warmup)
        c0, w0 = cpu_s(g.pid), time.monotonic()
        time.sleep(a.secs)
        c1, w1 = cpu_s(g.pid), time.monotonic()
        g.send_signal(signal.SIGINT)
        if g.wait() not in (0, 130, -2):
            sys.exit("gpufeed record failed: %s" % " ".join(self.args))
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        whole = ((ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)) / (
            time.monotonic() - t0) * 100
        steady = (c1 - c0) / (w1 - w0) * 100 if c0 is not None and c1 is not None else None
        return steady, whole, (w0, w1)


def report(title, got, goal=None):
    print(title)
    for m, v in got.items():
        st = [x[0] for x in v if x[0] is not None]
        wh = [x[1] for x in v]
        print("  %-14s steady %5.2f %% of a core (median; rounds %s)   whole window %5.2f %%"
              % (m, statistics.median(st) if st else float("nan"),
                 ", ".join("%.2f" % x for x in st), statistics.median(wh)))
    if goal:
        print("  goal: %s" % goal)


def idle_case(a, tmp):
    job = subprocess.Popen([sys.executable, "-c", IDLE_PARENT], start_new_session=True)
    time.sleep(3)
    nvml = "--nvml-lib=/nonexistent/libnvidia-ml.so.1"
    modes = {
        "off": ([nvml, "--py-stacks", "off"], {}),
        "skip": ([nvml, "--py-stacks", "on", "--py-rate", "100"], {}),
        "noskip": ([nvml, "--py-stacks", "on", "--py-rate", "100"], {"GPUFEED_PY_IDLE_SKIP": "0"}),
    }
    got = {}
    try:
        for _ in range(a.rounds):
            for m, (args, env) in modes.items():
                for label, binary in a.gpufeeds:
                    got.setdefault(m + label, []).append(
                        Window(a, tmp, job.pid, args, env, binary).run())
    finally:
        os.killpg(job.pid, signal.SIGTERM)
        job.wait()
    report("idle: 33 idle Python processes, --py-rate 100", got, "skip <= 1.5 %")


def recorder_case(a, tmp):
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    fakes = (a.fake_nvml.split(",") if a.fake_nvml
             else [os.path.join(target, "release/libfake_nvml.so")])
    fakes += fakes[-1:] * (len(a.gpufeeds) - len(fakes))
    for fake in fakes:
        if not os.path.exists(fake):
            print("recorder: %s missing (cargo build --release -p fake-nvml): skipped" % fake)
            return
    scenario = os.path.join(tmp, "scenario.json")
    with open(scenario, "w") as f:
        json.dump({"devices": [{"name": "Fake H100", "memory_total_bytes": 85899345920,
                                "memory_used_bytes": 80000000000, "compute_capability": [9, 0],
                                "util": {"pattern": "square", "period_s": 2.0, "high": 85,
                                         "low": 10, "duty": 0.3},
                                "processes": [{"pid": "children", "used_memory_bytes": 1000000000,
                                               "sm_util": 80}]}]}, f)
    job = subprocess.Popen(["sh", "-c", "for i in $(seq 32); do sleep 3600 & done; wait"],
                           start_new_session=True)
    time.sleep(1)
    got = {}
    try:
        for _ in range(a.rounds):
            for (label, binary), fake in zip(a.gpufeeds, fakes):
                got.setdefault("off" + label, []).append(
                    Window(a, tmp, job.pid, ["--nvml-lib=" + fake, "--py-stacks", "off",
                                             "--interval", "100ms"],
                           {"FAKE_NVML_SCENARIO": scenario}, binary).run())
    finally:
        os.killpg(job.pid, signal.SIGTERM)
        job.wait()
    report("recorder: 33 processes (sh + 32 sleep), 10 Hz, fake NVML, --py-stacks off", got,
           "<= 1 %")


def ranks_case(a, tmp):
    ons = [("on" + label, binary) for label, binary in a.gpufeeds]
    modes = ["none", "off"] + [m for m, _ in ons]
    window = a.warmup + a.secs
    total = window * len(modes) * a.rounds + 30
    job = subprocess.Popen([sys.executable, "-c", LAUNCHER, "2", "4",
                            os.path.join(ROOT, "examples/starving_pipeline.py"), str(total)],
                           stdout=subprocess.PIPE, text=True, start_new_session=True)
    progress = {0: [], 1: []}  # rank: [(time, steps)], from each rank's "step N" lines
    pat = re.compile(r"^r(\d) step\s+(\d+)")

    def reader():
        for line in job.stdout:
            m = pat.match(line)
            if m:
                progress[int(m.group(1))].append((time.monotonic(), int(m.group(2))))

    threading.Thread(target=reader, daemon=True).start()
    time.sleep(6)
    nvml = "--nvml-lib=/nonexistent/libnvidia-ml.so.1"
    cpu = {m: [] for m in modes if m != "none"}
    spans = {m: [] for m in modes}
    try:
        for _ in range(a.rounds):
            for m in modes:
                if m == "none":
                    time.sleep(a.warmup)
                    w0 = time.monotonic()
                    time.sleep(a.secs)
                    spans[m].append((w0, time.monotonic()))
                    continue
                binary = dict(ons).get(m, a.gpufeeds[0][1])
                args = [nvml, "--py-stacks", "off" if m == "off" else "on", "--py-rate", "100"]
                steady, whole, span = Window(a, tmp, job.pid, args, {}, binary).run()
                cpu[m].append((steady, whole))
                spans[m].append(span)
        time.sleep(2.5)
    finally:
        os.killpg(job.pid, signal.SIGTERM)
        job.wait()

    def steps_at(t):
        v = [rank_steps_at(progress[r], t) for r in progress]
        return None if None in v else sum(v)

    def rank_steps_at(pts, t):
        pts = list(pts)
        before = [p for p in pts if p[0] <= t]
        after = [p for p in pts if p[0] >= t]
        if not before or not after:
            return None
        (t0, s0), (t1, s1) = before[-1], after[0]
        return s0 if t1 == t0 else s0 + (s1 - s0) * (t - t0) / (t1 - t0)

    rates = {m: [] for m in modes}
    for m in modes:
        for w0, w1 in spans[m]:
            s0, s1 = steps_at(w0), steps_at(w1)
            if s0 is not None and s1 is not None:
                rates[m].append((s1 - s0) / (w1 - w0))
    report("ranks: launcher + 2 ranks x 4 busy workers, --py-rate 100", cpu, "on <= 3 %")
    mean = {m: statistics.mean(v) if v else float("nan") for m, v in rates.items()}
    for m in modes:
        print("  %-12s job %.2f steps/s (windows %s)" % (
            m, mean[m], ", ".join("%.1f" % x for x in rates[m])))
    for m, _ in ons:
        print("  %s / off: %.3fx; %s / none: %.3fx (goal on/off >= 0.99)"
              % (m, mean[m] / mean["off"], m, mean[m] / mean["none"]))
    print("  off / none: %.3fx" % (mean["off"] / mean["none"]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpufeed", default=os.path.join(ROOT, "target/release/gpufeed"),
                    help="the binary; or LABEL=PATH,LABEL=PATH,... to run several side by side, "
                         "window after window (the ranks case's off mode uses the first)")
    ap.add_argument("--cases", default="idle,recorder,ranks")
    ap.add_argument("--fake-nvml", default=None,
                    help="the fake driver for the recorder case, one per --gpufeed binary "
                         "(default target/release/libfake_nvml.so)")
    ap.add_argument("--secs", type=float, default=20.0, help="steady-state seconds per window")
    ap.add_argument("--warmup", type=float, default=5.0, help="seconds before the steady state")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    a.gpufeeds = [("@" + g.split("=", 1)[0], g.split("=", 1)[1]) if "=" in g else ("", g)
                  for g in a.gpufeed.split(",")]
    tmp = tempfile.mkdtemp(prefix="gpufeed-bench-cost-")
    print("load average at the start: %.2f %.2f %.2f; %d CPUs" % (os.getloadavg() + (os.cpu_count(),)))
    try:
        for case in a.cases.split(","):
            {"idle": idle_case, "recorder": recorder_case, "ranks": ranks_case}[case](a, tmp)
            print("load average now: %.2f %.2f %.2f" % os.getloadavg())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
