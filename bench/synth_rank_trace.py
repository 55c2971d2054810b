#!/usr/bin/env python3
"""Writes one synthetic Kineto trace of a data-parallel rank, for benchmarks when ../shared/traces
is absent: ProfilerStep# annotations, a DataLoader __next__ per step, aten ops launching kernels
(cudaLaunchKernel with correlation ids), an NCCL all-reduce, a host-to-device copy, and
distributedInfo {"backend": "nccl", "rank": 0, "world_size": N}. About 1.8 MB at 400 steps.

usage: synth_rank_trace.py OUT.json [--steps 400] [--world 256]
"""
import argparse
import json


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--world", type=int, default=256)
    a = ap.parse_args()
    ev = []
    corr = 1
    t = 1_000_000.0
    for s in range(a.steps):
        step_start = t
        dl = 3000.0 + (s % 7) * 150
        ev.append({"ph": "X", "cat": "user_annotation", "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
                   "pid": 1, "tid": 1, "ts": t, "dur": dl})
        t += dl
        for k in range(12):
            op_dur = 40.0
            ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::addmm" if k % 2 else "aten::relu",
                       "pid": 1, "tid": 1, "ts": t, "dur": op_dur, "args": {"External id": corr}})
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                       "ts": t + 5, "dur": 8.0, "args": {"correlation": corr, "External id": corr}})
            ev.append({"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_tn" if k % 2 else "vectorized_relu_kernel",
                       "pid": 0, "tid": 7, "ts": t + 20, "dur": 180.0 if k % 2 else 30.0,
                       "args": {"correlation": corr, "External id": corr, "stream": 7, "device": 0}})
            corr += 1
            t += op_dur + 5
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1, "ts": t,
                   "dur": 12.0, "args": {"correlation": corr}})
        ev.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 7,
                   "ts": t + 15, "dur": 400.0, "args": {"correlation": corr, "bytes": 12_582_912, "stream": 7, "device": 0}})
        corr += 1
        t += 450
        ev.append({"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "pid": 0, "tid": 13,
                   "ts": t, "dur": 900.0, "args": {"stream": 13, "device": 0, "Collective name": "allreduce"}})
        t += 1000
        ev.append({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#%d" % s, "pid": 1, "tid": 1,
                   "ts": step_start, "dur": t - step_start})
        t += 10
    doc = {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": a.world},
           "deviceProperties": [{"id": 0, "name": "NVIDIA H100", "computeMajor": 9}],
           "traceEvents": ev}
    with open(a.out, "w") as f:
        # One event per line, as Kineto writes them (analyze_ranks_gen.py edits lines).
        f.write('{"schemaVersion": 1, "distributedInfo": %s, "deviceProperties": %s,\n"traceEvents": [\n'
                % (json.dumps(doc["distributedInfo"]), json.dumps(doc["deviceProperties"])))
        f.write(",\n".join(json.dumps(e) for e in ev))
        f.write("\n]}\n")


if __name__ == "__main__":
    main()
