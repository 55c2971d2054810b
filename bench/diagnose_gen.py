#!/usr/bin/env python3
"""Writes a synthetic gpufeed recording shaped like `gpufeed run` output: N GPUs sampled at
10 Hz (each GPU line carries the driver's 1/6 s utilization samples, PCIe counters, the link
state once a second), host lines at 10 Hz and the job's process lines at 10 Hz.

Usage: diagnose_gen.py OUT [--hours 24] [--gpus 8] [--hz 10] [--cpus 64] [--procs 17] [--reuse]

With --reuse an OUT that exists and is not empty is kept (the benchmarks generate each file once).

The utilization is the "starving" signature (85% then 10% every 2 s) on every GPU, so the
diagnosis has real work to do (periodicity, bimodality, a worker split).
Lines are formatted from templates (not json.dumps) so 24 hours take minutes, not an hour.
"""
import argparse
import json
import os
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--hz", type=float, default=10.0)
    ap.add_argument("--cpus", type=int, default=64)
    ap.add_argument("--procs", type=int, default=17,
                    help="processes in the job tree (1 main + workers)")
    ap.add_argument("--reuse", action="store_true",
                    help="keep OUT when it exists and is not empty")
    a = ap.parse_args()
    if a.reuse and os.path.isfile(a.out) and os.path.getsize(a.out) > 0:
        return
    print("generating %g h x %d GPUs at %g Hz into %s ..." % (a.hours, a.gpus, a.hz, a.out),
          file=sys.stderr)

    header = {
        "type": "header", "schema_version": 1, "gpufeed_version": "0.1.0",
        "start_time": "2026-12-01T00:00:00.000Z", "start_unix_us": 1796083200000000,
        "interval_s": 1.0 / a.hz,
        "host": {"hostname": "bench", "kernel": "6.8.0", "cpu_count": a.cpus,
                 "cpus_allowed": a.cpus, "mem_total_bytes": 2 << 40, "clock_ticks_per_s": 100},
        "driver": {"driver_version": "550.54.15", "cuda_driver_version": "12.4"},
        "gpus": [{"index": i, "name": "NVIDIA H100 80GB HBM3",
                  "uuid": "GPU-fa4e0000-0000-4000-8000-%012x" % i,
                  "memory_total_bytes": 85899345920, "compute_capability": [9, 0],
                  "pcie_max_gen": 5, "pcie_max_width": 16, "mig_enabled": False,
                  "power_limit_w": 700.0} for i in range(a.gpus)],
        "command": ["torchrun", "--nproc-per-node", str(a.gpus), "train.py"], "pid": 1000,
    }
    gpu_fast = ('{"type":"gpu","index":%d,"t_s":%.6f,"util_samples":%s,"util_pct":%.1f,'
                '"mem_util_pct":%.1f,"mem_used_bytes":80000000000,"sm_clock_mhz":1980,'
                '"power_w":%.1f,"temperature_c":%d,"pcie_rx_bytes":%d,"pcie_tx_bytes":%d,'
                '"pcie_rx_bytes_per_s":null,"pcie_tx_bytes_per_s":null,"pcie_gen":%s,'
                '"pcie_width":%s,"throttle_reasons":%d}\n')
    host_t = ('{"type":"host","t_s":%.6f,"cpu_pct":[%s],"cpu_total_pct":%.1f,"iowait_pct":0.4,'
              '"mem_total_bytes":2199023255552,"mem_available_bytes":1649267441664,'
              '"mem_cached_bytes":549755813888,"swap_total_bytes":0,"swap_free_bytes":0,'
              '"psi_cpu_some_pct":1.2,"psi_io_some_pct":0.3,"psi_io_full_pct":0.1,'
              '"psi_mem_some_pct":0.0,"psi_mem_full_pct":0.0,"disks":[{"device":"nvme0n1",'
              '"read_bytes_per_s":%.1f,"write_bytes_per_s":0.0}]}\n')
    proc_t = ('{"pid":%d,"cpu_pct":%.1f,"rss_bytes":%d,"read_bytes":%d,"write_bytes":0,'
              '"state":"%s","threads":%d}')
    out = open(a.out, "w", buffering=1 << 22)
    w = out.write
    w(json.dumps(header, separators=(",", ":")) + "\n")
    pids = [1000] + [1001 + i for i in range(a.procs - 1)]
    for p in pids:
        ppid = 1 if p == 1000 else 1000
        w('{"type":"proc_start","t_s":0.0,"pid":%d,"ppid":%d,"cmd":"python train.py",'
          '"comm":"python"}\n' % (p, ppid))
    n = int(a.hours * 3600 * a.hz)
    dt = 1.0 / a.hz
    rx = [0] * a.gpus
    next_drv = 1.0 / 6.0
    cores_busy = ",".join("100.0" if c < a.procs - 1 else "3.0" for c in range(a.cpus))
    total = (min(a.procs - 1, a.cpus) * 100.0 + max(0, a.cpus - a.procs + 1) * 3.0) / a.cpus
    for k in range(1, n + 1):
        t = k * dt
        # Driver samples (every 1/6 s) that fell into this tick.
        drv = []
        while next_drv <= t:
            drv.append(next_drv)
            next_drv += 1.0 / 6.0
        slow = k % int(a.hz) == 0
        gen = "5" if slow else "null"
        width = "16" if slow else "null"
        for g in range(a.gpus):
            busy = ((t + 0.1 * g) % 2.0) < 0.6
            u = 85.0 if busy else 10.0
            samples = "[" + ",".join("[%.6f,%.1f]" % (d, 85.0 if ((d + 0.1 * g) % 2.0) < 0.6 else 10.0)
                                     for d in drv) + "]"
            rx[g] += 2_000_000_000 // int(a.hz) if busy else 50_000_000 // int(a.hz)
            w(gpu_fast % (g, t, samples, u, u / 3, 650.0 if busy else 180.0, 62 if busy else 55,
                          rx[g], rx[g] // 50, gen, width, 0 if busy else 1))
        w(host_t % (t, cores_busy, total, 3.5e8))
        w('{"type":"procs","t_s":%.6f,"procs":[%s]}\n' % (t, ",".join(
            proc_t % (p, 35.0 if p == 1000 else 99.0, (8 << 30) if p == 1000 else (2 << 30),
                      k * 4_000_000, "S" if p == 1000 else "R", 40 if p == 1000 else 4)
            for p in pids)))
        if k % 36000 == 0:
            print("  %.0f h written" % (t / 3600), file=sys.stderr)
    w('{"type":"end","t_s":%.6f,"exit_code":0,"signal":null,"reason":"job_exited"}\n' % (n * dt))
    out.close()


if __name__ == "__main__":
    main()
