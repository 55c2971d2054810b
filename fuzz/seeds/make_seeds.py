#!/usr/bin/env python3
"""Writes the seed inputs of issue 27's and 25's shapes into fuzz/seeds/<target>/ (committed, each
under 64 KiB): impossible times, a byte-order mark, long strings, distinct keys, extreme step
markers for the recording reader; logs without an index column, repeated headers, units inside
values and hex for the nvidia-smi reader; many devices/streams and modern kernel names for the
trace reader. Copy them into the fuzzer's corpus: `cp fuzz/seeds/T/* fuzz/corpus/T/`."""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def put(target, name, data):
    d = os.path.join(HERE, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    assert len(data) < 65536, (target, name, len(data))
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


header = {
    "type": "header", "schema_version": 2, "gpufeed_version": "0.1.0",
    "start_time": "2026-12-03T23:11:05.043Z", "start_unix_us": 1796339465043515,
    "interval_s": 0.1, "host": {"hostname": "vm", "cpu_count": 2, "mem_total_bytes": 25276071936,
                                "clock_ticks_per_s": 100},
    "driver": None, "gpus": [], "gpu_error": "no NVIDIA driver found", "command": ["python", "t.py"],
    "pid": 100, "py_rate_hz": 100.0,
}


def rec(*lines):
    return "\n".join(json.dumps(x) for x in (header,) + lines) + "\n"


put("recording_reader", "bad_times", rec(
    {"type": "proc_start", "t_s": 1e308, "pid": 101, "ppid": 100, "cmd": "python t.py"},
    {"type": "proc_start", "t_s": -1e9, "pid": 102, "ppid": 100, "cmd": "python t.py"},
    {"type": "steps", "t_s": 1.0, "dt_s": 1.0, "steps": 3, "span_s": 1e9, "wait_s": 0.1},
    {"type": "end", "t_s": 2.0, "exit_code": 0}))
put("recording_reader", "bom", "\ufeff" + rec({"type": "end", "t_s": 1.0, "exit_code": 0}))
put("recording_reader", "long_strings", rec(
    {"type": "proc_start", "t_s": 0.1, "pid": 101, "ppid": 100, "cmd": "x" * 20000},
    {"type": "py_frame", "t_s": 0.2, "pid": 101, "id": 1, "name": "f" * 20000, "file": "a.py",
     "line": 1}))
put("recording_reader", "distinct_pids", rec(*[
    {"type": "proc_start", "t_s": 0.1, "pid": 1000 + i, "ppid": 100, "cmd": f"w{i}"}
    for i in range(600)]))
put("recording_reader", "ranks", rec(
    {"type": "py_status", "t_s": 0.1, "pid": 101, "status": "ok", "detail": "3.11.7",
     "rank": {"rank": 1, "local_rank": 1, "world_size": 2}},
    {"type": "steps", "t_s": 1.0, "dt_s": 1.0, "steps": 18446744073709551615, "span_s": 1.0,
     "items": 18446744073709551615, "rank": 4294967295}))

burst = ["timestamp, power.draw [W], utilization.gpu [%], memory.used [MiB]"]
for t in range(40):
    for g in range(2):
        burst.append(f"2026/12/03 10:00:{t // 10:02d}.{(t % 10) * 100 + g:03d}, "
                     f"{69.32 + g:.2f} W, {(t * 7 + g) % 100} %, {3109 + g * 1000} MiB")
put("smi_csv", "no_index_burst", "\n".join(burst) + "\n")
put("smi_csv", "repeated_header", "\n".join(burst[:21] + burst[:21]) + "\n")
put("smi_csv", "no_timestamp", "utilization.gpu [%], memory.used [MiB]\n"
    + "".join(f"{i % 100} %, {512 + (i % 2) * 4000} MiB\n" for i in range(60)))
put("smi_csv", "na_and_hex", "index, utilization.gpu [%], power.draw [W]\n"
    "0, 0x50 %, [N/A]\n0, 12abc, [Not Supported]\n0, 83 %, 69.32 W\n")

events = []
for i in range(300):
    events.append({"ph": "X", "cat": "kernel", "name": f"k{i}_" + "n" * 40, "ts": i * 10, "dur": 5,
                   "pid": i, "tid": i, "args": {"device": i, "stream": i}})
for i, name in enumerate([
        "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<>>(Params)",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1",
        "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNN", "flash_fwd_kernel", "flash_bwd_dq_dk_dv_loop",
        "triton_tem_fused_mm_0", "deep_ep::internode::dispatch<8>", "deep_ep::intranode::combine",
        "nvshmemi_proxy_kernel", "ncclDevKernel_AllToAll_RING_LL", "cross_device_reduce_1stage"]):
    events.append({"ph": "X", "cat": "kernel", "name": name, "ts": 5000 + i * 100, "dur": 90,
                   "pid": 0, "tid": 7, "args": {"device": 0, "stream": 7 + i % 2}})
put("trace_reader", "many_devices_modern_kernels", json.dumps({"traceEvents": events}))
