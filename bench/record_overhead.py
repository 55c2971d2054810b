#!/usr/bin/env python3
"""Sampler overhead of `gpufeed record` next to a Python psutil loop (what nvitop/gpustat do).

Both watch the same 33-process job tree (a shell and 32 children) at the same rate (default
100 ms), collecting the same per-process figures (CPU, RSS, I/O bytes, state, threads, context
switches) plus per-core CPU, memory and disks; gpufeed also samples a fake GPU through the real
NVML code path. Each side runs as its own process with no children of its own, so its CPU time
comes from wait4's rusage. Prints CPU time / wall time and the ratio; with --rss-run N also
records N seconds at a 10 ms interval (N=360 gives as many host/process samples as one hour at
the default 100 ms) and prints the peak RSS.

Usage: python3 bench/record_overhead.py [--seconds 20] [--interval 0.1] [--rss-run 360]
Needs: cargo, and psutil (pip install psutil).
"""
import argparse, json, os, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PSUTIL_LOOP = r'''
import json, sys, time, psutil
root, seconds, interval, out = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
f = open(out, "w")
seen = {}
psutil.cpu_percent(percpu=True)
end = time.monotonic() + seconds
nxt = time.monotonic()
while time.monotonic() < end:
    t = time.monotonic()
    host = {"cpu": psutil.cpu_percent(percpu=True), "mem": psutil.virtual_memory()._asdict(),
            "swap": psutil.swap_memory()._asdict(),
            "disks": {k: v._asdict() for k, v in psutil.disk_io_counters(perdisk=True).items()}}
    f.write(json.dumps({"type": "host", "t": t, **host}) + "\n")
    try:
        r = psutil.Process(root)
        procs = [r] + r.children(recursive=True)
    except psutil.NoSuchProcess:
        break
    rows = []
    for p in procs:
        try:
            if p.pid not in seen:
                seen[p.pid] = p
                f.write(json.dumps({"type": "proc_start", "pid": p.pid, "ppid": p.ppid(), "cmd": " ".join(p.cmdline())}) + "\n")
            p = seen[p.pid]
            with p.oneshot():
                io = p.io_counters()
                cs = p.num_ctx_switches()
                rows.append({"pid": p.pid, "cpu": p.cpu_percent(), "rss": p.memory_info().rss,
                             "read": io.read_bytes, "write": io.write_bytes, "state": p.status(),
                             "threads": p.num_threads(), "vol": cs.voluntary, "invol": cs.involuntary})
        except psutil.NoSuchProcess:
            pass
    f.write(json.dumps({"type": "procs", "t": t, "procs": rows}) + "\n")
    f.flush()
    nxt += interval
    time.sleep(max(0.0, nxt - time.monotonic()))
'''

def run_measured(cmd, env=None):
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.monotonic() - t0
    err = p.stderr.read().decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{err}")
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss * 1024

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--interval", type=float, default=0.1)
    ap.add_argument("--children", type=int, default=32)
    ap.add_argument("--rss-run", type=float, default=0)
    a = ap.parse_args()

    subprocess.run(["cargo", "build", "--release", "-q", "-p", "gpufeed", "-p", "fake-nvml"], cwd=ROOT, check=True)
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    gpufeed = os.path.join(target, "release/gpufeed")
    fake = os.path.join(target, "release/libfake_nvml.so")
    tmp = tempfile.mkdtemp(prefix="gpufeed-bench-")
    scenario = os.path.join(tmp, "scenario.json")
    with open(scenario, "w") as f:
        json.dump({"devices": [{"name": "Fake H100", "memory_total_bytes": 85899345920,
                                "memory_used_bytes": 80000000000, "compute_capability": [9, 0],
                                "util": {"pattern": "square", "period_s": 2.0, "high": 85, "low": 10, "duty": 0.3},
                                "processes": [{"pid": "children", "used_memory_bytes": 1000000000, "sm_util": 80}]}]}, f)
    env = dict(os.environ, FAKE_NVML_SCENARIO=scenario)

    def tree(seconds):
        # A shell with N sleeping children: 1 + N processes.
        return subprocess.Popen(["sh", "-c", f"for i in $(seq {a.children}); do sleep {seconds + 5} & done; wait"])

    interval_ms = f"{int(a.interval * 1000)}ms"
    print(f"job tree: {a.children + 1} processes; interval {interval_ms}; {a.seconds:.0f} s each")

    job = tree(a.seconds)
    time.sleep(0.5)
    g_wall, g_cpu, g_rss = run_measured([gpufeed, "--nvml-lib", fake, "record", "-q", "--pid", str(job.pid),
                                         "--duration", f"{a.seconds}s", "--interval", interval_ms,
                                         "-o", os.path.join(tmp, "g.ndjson")], env)
    job.kill(); job.wait()
    subprocess.run(["pkill", "-f", f"sleep {a.seconds + 5}"], check=False)

    job = tree(a.seconds)
    time.sleep(0.5)
    loop = os.path.join(tmp, "psutil_loop.py")
    with open(loop, "w") as f:
        f.write(PSUTIL_LOOP)
    p_wall, p_cpu, p_rss = run_measured([sys.executable, loop, str(job.pid), str(a.seconds), str(a.interval),
                                         os.path.join(tmp, "p.ndjson")])
    job.kill(); job.wait()
    subprocess.run(["pkill", "-f", f"sleep {a.seconds + 5}"], check=False)

    g_pct, p_pct = g_cpu / g_wall * 100, p_cpu / p_wall * 100
    print(f"{'':24}{'CPU time':>10}{'wall':>8}{'% of a core':>13}{'peak RSS':>11}")
    print(f"{'gpufeed record':24}{g_cpu:>9.2f}s{g_wall:>7.1f}s{g_pct:>12.2f}%{g_rss / 2**20:>8.1f} MiB")
    print(f"{'python psutil loop':24}{p_cpu:>9.2f}s{p_wall:>7.1f}s{p_pct:>12.2f}%{p_rss / 2**20:>8.1f} MiB")
    print(f"ratio psutil/gpufeed CPU: {p_pct / g_pct:.1f}x")

    if a.rss_run:
        job = tree(a.rss_run)
        time.sleep(0.5)
        out = os.path.join(tmp, "long.ndjson")
        wall, cpu, rss = run_measured([gpufeed, "--nvml-lib", fake, "record", "-q", "--pid", str(job.pid),
                                       "--duration", f"{a.rss_run}s", "--interval", "10ms", "-o", out], env)
        job.kill(); job.wait()
        subprocess.run(["pkill", "-f", f"sleep {a.rss_run + 5}"], check=False)
        lines = sum(1 for _ in open(out))
        print(f"long run: {a.rss_run:.0f} s at 10 ms ({lines} lines, {os.path.getsize(out) / 2**20:.0f} MiB on disk): "
              f"peak RSS {rss / 2**20:.1f} MiB, CPU {cpu / wall * 100:.1f}% of a core")

if __name__ == "__main__":
    main()
