#!/usr/bin/env python3
"""Makes a long recording with Python stacks from a short real one, for `bench/diagnose_stacks.sh`.

The short recording's timed lines (host, procs, py_samples, steps, gpu) are repeated, their times
shifted by the recording's length each round, until HOURS are covered; its definitions (header,
frames, stacks, statuses) are written once. So the long file has the real job's stacks, phases
and frames, at the real sampling rate, for as long as asked.

    python3 bench/stacks_gen.py SHORT.ndjson OUT.ndjson [--hours 1]
"""
import argparse
import json


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("short")
    ap.add_argument("out")
    ap.add_argument("--hours", type=float, default=1.0)
    a = ap.parse_args()
    once, timed, end = [], [], None
    span = 0.0
    with open(a.short) as f:
        for line in f:
            o = json.loads(line)
            if o.get("type") == "end":
                end = o
            elif "t_s" in o and o.get("type") not in ("proc_start", "proc_exit"):
                timed.append(o)
                span = max(span, float(o["t_s"]))
            else:
                once.append(o)
    if span <= 0:
        raise SystemExit("the short recording has no timed lines")
    rounds = int(a.hours * 3600 / span) + 1
    with open(a.out, "w") as out:
        for o in once:
            out.write(json.dumps(o, separators=(",", ":")) + "\n")
        for k in range(rounds):
            for o in timed:
                o2 = dict(o)
                o2["t_s"] = round(o["t_s"] + k * span, 6)
                out.write(json.dumps(o2, separators=(",", ":")) + "\n")
        if end is not None:
            end = dict(end)
            if "t_s" in end:
                end["t_s"] = round(rounds * span, 6)
            out.write(json.dumps(end, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
