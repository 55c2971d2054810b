#!/usr/bin/env python3
"""Writes N rank traces of one job from one real trace: each copy gets distributedInfo
{"backend": "nccl", "rank": i, "world_size": N}; the ranks in --slow have every timestamp and
duration stretched by --stretch (stragglers).

Usage: analyze_ranks_gen.py SRC.json[.gz] OUTDIR [--ranks 256] [--slow 7,130] [--stretch 1.3]
"""
import argparse
import gzip
import os
import re


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--ranks", type=int, default=256)
    ap.add_argument("--slow", default="7,130")
    ap.add_argument("--stretch", type=float, default=1.3)
    a = ap.parse_args()
    opener = gzip.open if a.src.endswith(".gz") else open
    with opener(a.src, "rt", encoding="utf-8") as f:
        text = f.read()
    info = re.compile(r'"distributedInfo": \{[^\n]*?"world_size": \d+')
    if not info.search(text):
        raise SystemExit("no distributedInfo with a world_size in " + a.src)
    slow = {int(x) for x in a.slow.split(",") if x}
    num = re.compile(r'"(ts|dur)": (\d+(?:\.\d+)?)')
    stretched = num.sub(lambda m: '"%s": %.3f' % (m.group(1), float(m.group(2)) * a.stretch), text)
    os.makedirs(a.out, exist_ok=True)
    for r in range(a.ranks):
        body = stretched if r in slow else text
        di = '"distributedInfo": {"backend": "nccl", "rank": %d, "world_size": %d' % (r, a.ranks)
        with open(os.path.join(a.out, "rank%04d.json" % r), "w", encoding="utf-8") as f:
            f.write(info.sub(di, body, count=1))


if __name__ == "__main__":
    main()
