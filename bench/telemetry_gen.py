#!/usr/bin/env python3
"""Large telemetry logs for bench/telemetry_read.sh, written fast (whole blocks of lines joined at
once, no per-value formatting in the inner loop: a month of 8 GPUs is 20.7M rows, 1.6 GB).

    bench/telemetry_gen.py KIND PATH [--days D] [--rows N] [--mib M]

KIND:
  smi       `nvidia-smi --query-gpu=timestamp,index,utilization.gpu,utilization.memory,
            memory.used,memory.total,temperature.gpu,power.draw --format=csv -l 1`, 8 GPUs, D days
  epoch     `timestamp,utilization.gpu`, epoch seconds, one GPU, N rows
  perread   the header before every reading (a shell loop calling nvidia-smi per reading, `>>`
            to one file), 8 GPUs, no index column, about M MiB
  promjson  a Prometheus `query_range` answer (DCGM utilization and framebuffer memory of 8
            GPUs at 1 s steps), about M MiB

The utilization is a starving job: busy stretches with a dip every 10 s (the data loader), so
the diagnosis has something to find.
"""
import argparse
import datetime
import json

GPUS = 8
T0 = datetime.datetime(2024, 1, 31, 0, 0, 0)
EPOCH0 = 1706659200  # 2024-01-31 00:00:00 UTC

# One minute of each GPU's values, repeated: utilization dips to 0-10% 3 s of every 10.
UTIL = [[(7 + g + 3 * s) % 10 if s % 10 < 3 else 85 + (s * 7 + g) % 15 for s in range(60)]
        for g in range(GPUS)]
MEMU = [[30 + (s + g) % 20 for s in range(60)] for g in range(GPUS)]
MEM = [[40000 + 100 * g + (s * 13) % 500 for s in range(60)] for g in range(GPUS)]
TEMP = [[60 + (s + g) % 10 for s in range(60)] for g in range(GPUS)]
POW = [["%.2f" % (150 + UTIL[g][s] * 2 + g * 0.37) for s in range(60)] for g in range(GPUS)]


def smi_rows_of_minute():
    """For each second of a minute, the 8 rows after the timestamp (`, 0, 87 %, ...`)."""
    out = []
    for s in range(60):
        out.append(["%d, %d %%, %d %%, %d MiB, 81920 MiB, %d, %s W\n" % (
            g, UTIL[g][s], MEMU[g][s], MEM[g][s], TEMP[g][s], POW[g][s]) for g in range(GPUS)])
    return out


def smi(path, days):
    rows = smi_rows_of_minute()
    with open(path, "w", buffering=1 << 22) as f:
        f.write("timestamp, index, utilization.gpu [%], utilization.memory [%], "
                "memory.used [MiB], memory.total [MiB], temperature.gpu, power.draw [W]\n")
        for minute in range(int(days * 24 * 60)):
            t = T0 + datetime.timedelta(minutes=minute)
            prefix = t.strftime("%Y/%m/%d %H:%M:")
            block = []
            for s in range(60):
                for g in range(GPUS):
                    # nvidia-smi's milliseconds: each GPU's row a few ms after the one before.
                    block.append("%s%02d.%03d, " % (prefix, s, 100 + 7 * g))
                    block.append(rows[s][g])
            f.write("".join(block))


def epoch(path, n):
    util = [str(UTIL[0][s]) for s in range(60)]
    with open(path, "w", buffering=1 << 22) as f:
        f.write("timestamp,utilization.gpu\n")
        step = 100000
        for start in range(0, n, step):
            f.write("".join("%d,%s\n" % (EPOCH0 + i, util[i % 60])
                            for i in range(start, min(n, start + step))))


def perread(path, mib):
    header = "timestamp, name, utilization.gpu [%], memory.used [MiB]\n"
    with open(path, "w", buffering=1 << 22) as f:
        written, sec = 0, 0
        while written < mib << 20:
            block = []
            for _ in range(600):
                t = T0 + datetime.timedelta(seconds=sec)
                ts = t.strftime("%Y/%m/%d %H:%M:%S")
                s = sec % 60
                block.append(header)
                for g in range(GPUS):
                    block.append("%s.%03d, NVIDIA A100-SXM4-80GB, %d %%, %d MiB\n" % (
                        ts, 100 + 7 * g, UTIL[g][s], MEM[g][s]))
                sec += 1
            text = "".join(block)
            f.write(text)
            written += len(text)


def promjson(path, mib):
    # Two metrics of 8 GPUs; each point `[1706659200,"87"],` is about 20 bytes.
    points = (mib << 20) // (2 * GPUS * 20)
    with open(path, "w", buffering=1 << 22) as f:
        f.write('{"status":"success","data":{"resultType":"matrix","result":[')
        first = True
        for name, table in (("DCGM_FI_DEV_GPU_UTIL", UTIL), ("DCGM_FI_DEV_FB_USED", MEM)):
            for g in range(GPUS):
                metric = {"__name__": name, "gpu": str(g), "UUID": "GPU-%08d" % g,
                          "Hostname": "node1", "modelName": "NVIDIA A100-SXM4-80GB"}
                f.write(("" if first else ",") + '{"metric":' + json.dumps(metric) +
                        ',"values":[')
                first = False
                vals = table[g]
                step = 100000
                for start in range(0, points, step):
                    end = min(points, start + step)
                    f.write(("," if start else "") + ",".join(
                        '[%d,"%d"]' % (EPOCH0 + i, vals[i % 60]) for i in range(start, end)))
                f.write("]}")
        f.write("]}}\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["smi", "epoch", "perread", "promjson"])
    ap.add_argument("path")
    ap.add_argument("--days", type=float, default=1)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--mib", type=int, default=200)
    a = ap.parse_args()
    if a.kind == "smi":
        smi(a.path, a.days)
    elif a.kind == "epoch":
        epoch(a.path, a.rows)
    elif a.kind == "perread":
        perread(a.path, a.mib)
    else:
        promjson(a.path, a.mib)


if __name__ == "__main__":
    main()
