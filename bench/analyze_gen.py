#!/usr/bin/env python3
"""Make a large Kineto trace by repeating a real trace's events with shifted timestamps.

usage: analyze_gen.py SOURCE.json[.gz] OUT.json SIZE_MB

Each repetition shifts ts by the source's span (plus a gap), and offsets correlation / External id
and the ProfilerStep#N numbers so they stay unique. Written event by event (never the whole list).
"""
import gzip
import json
import sys


def main():
    src, out, size_mb = sys.argv[1], sys.argv[2], float(sys.argv[3])
    opener = gzip.open if src.endswith(".gz") else open
    with opener(src, "rt", encoding="utf-8", errors="replace") as f:
        doc = json.load(f)
    events = doc.pop("traceEvents")
    xs = [e for e in events if isinstance(e.get("ts"), (int, float))]
    t0 = min(e["ts"] for e in xs)
    t1 = max(e["ts"] + e.get("dur", 0) for e in xs)
    span = (t1 - t0) + 1000.0
    steps = [int(e["name"].split("#")[1]) for e in xs if str(e.get("name", "")).startswith("ProfilerStep#")]
    nsteps = (max(steps) - min(steps) + 1) if steps else 0
    target = size_mb * 1e6
    written = 0
    rep = 0
    with open(out, "w") as o:
        head = json.dumps(doc)[:-1]  # without the closing brace
        o.write(head + (", " if doc else "") + '"traceEvents": [\n')
        first = True
        while written < target:
            shift = rep * span
            for e in events:
                if e.get("ph") == "M" and rep > 0:
                    continue
                e2 = dict(e)
                if isinstance(e2.get("ts"), (int, float)):
                    e2["ts"] = e2["ts"] + shift
                if e2.get("ph") in ("s", "f") and isinstance(e2.get("id"), int):
                    e2["id"] = e2["id"] + rep * 10_000_000
                a = e2.get("args")
                if isinstance(a, dict):
                    a = dict(a)
                    for k in ("correlation", "External id", "external id"):
                        if isinstance(a.get(k), int):
                            a[k] = a[k] + rep * 10_000_000
                    e2["args"] = a
                n = e2.get("name")
                if nsteps and isinstance(n, str) and n.startswith("ProfilerStep#"):
                    e2["name"] = "ProfilerStep#%d" % (int(n.split("#")[1]) + rep * nsteps)
                s = json.dumps(e2)
                o.write(("" if first else ",\n") + s)
                first = False
                written += len(s) + 2
            rep += 1
        o.write("\n]}\n")
    print("wrote %s: %.0f MB, %d repetitions of %s" % (out, written / 1e6, rep, src))


if __name__ == "__main__":
    main()
