#!/usr/bin/env python3
"""Writes report.md and results.json for scripts/device-check.sh from the files it left in OUT.

Usage: scripts/device-report.py OUT ELAPSED_S
Only measured figures are written; a figure that is missing is reported as missing, never guessed.
"""

import json
import os
import re
import sys


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return None


def last_json(text):
    """The last line of ``text`` that parses as a JSON object (gpufeed run --format json)."""
    for line in reversed((text or "").splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def run_figures(out, name):
    text = read(os.path.join(out, name + ".out"))
    report = last_json(text)
    fig = {"images_per_s": None, "data_wait_pct": None, "gpu_busy_pct": None, "util_samples": None,
           "duration_s": None, "verdict": None}
    m = re.findall(r"^done: steps \d+ seconds [\d.]+ images/s ([\d.]+) data_wait ([\d.]+)%", text or "", re.M)
    if m:
        fig["images_per_s"], fig["data_wait_pct"] = float(m[-1][0]), float(m[-1][1])
    if report:
        gpus = report.get("gpus") or []
        if gpus:
            fig["gpu_busy_pct"] = gpus[0].get("util_mean_pct")
            fig["util_samples"] = gpus[0].get("util_samples")
        fig["duration_s"] = report.get("duration_s")
        fig["verdict"] = report.get("verdict")
        fig["findings"] = [f.get("id") or f.get("kind") for f in report.get("findings") or []]
    return fig


def main():
    out, elapsed = sys.argv[1], sys.argv[2]
    steps = []
    for line in (read(os.path.join(out, "steps.tsv")) or "").splitlines():
        name, status, note = (line.split("\t") + ["", ""])[:3]
        steps.append({"step": name, "status": status, "note": note})
    res = {
        "elapsed_s": int(elapsed),
        "steps": steps,
        "versions": read(os.path.join(out, "versions.txt")),
        "doctor": load_json(os.path.join(out, "doctor.json")),
        "bench": load_json(os.path.join(out, "bench.json")),
        "starved": run_figures(out, "run-starved"),
        "tuned": run_figures(out, "run-tuned"),
        "sweep": load_json(os.path.join(out, "sweep", "sweep.json")),
        "batch_size": load_json(os.path.join(out, "batch-size", "batch-size.json")),
        "analyze_starved": load_json(os.path.join(out, "analyze-starved.json")),
        "analyze_tuned": load_json(os.path.join(out, "analyze-tuned.json")),
    }
    s, t = res["starved"], res["tuned"]
    speedup = None
    if s["images_per_s"] and t["images_per_s"]:
        speedup = t["images_per_s"] / s["images_per_s"]
    res["speedup"] = speedup
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(res, f, indent=2)

    md = ["# gpufeed on a real GPU: device-check report", ""]
    md.append("Script: `scripts/device-check.sh`, %s s." % elapsed)
    md += ["", "```", (res["versions"] or "versions: missing").strip(), "```", "", "## Steps", "",
           "| step | status | note |", "|---|---|---|"]
    md += ["| %s | %s | %s |" % (x["step"], x["status"], x["note"].replace("|", "/")) for x in steps]

    def fmt(v, unit=""):
        return "missing" if v is None else ("%.1f%s" % (v, unit) if isinstance(v, float) else "%s%s" % (v, unit))

    md += ["", "## Before and after", "", "| | starved | tuned |", "|---|---|---|"]
    for key, label, unit in (("images_per_s", "images/s", ""), ("gpu_busy_pct", "GPU busy (NVML mean)", "%"),
                             ("data_wait_pct", "data wait (job)", "%"), ("util_samples", "NVML samples", ""),
                             ("duration_s", "recorded seconds", "")):
        md.append("| %s | %s | %s |" % (label, fmt(s.get(key), unit), fmt(t.get(key), unit)))
    md.append("| verdict | %s | %s |" % (json.dumps(s.get("verdict")), json.dumps(t.get("verdict"))))
    md.append("")
    if speedup is not None:
        md.append("Throughput: %.1f× faster (%.1f → %.1f images/s)." % (speedup, s["images_per_s"], t["images_per_s"]))
    else:
        md.append("Throughput: not measured in both configurations.")
    if s.get("gpu_busy_pct") is not None and t.get("gpu_busy_pct") is not None:
        md.append("GPU busy: %.0f%% → %.0f%%." % (s["gpu_busy_pct"], t["gpu_busy_pct"]))
    for name, title in (("sweep.md", "Sweep (num_workers)"), ("batch-size.out", "Batch size (JSON)"),
                        ("analyze-starved-text.out", "analyze: starved trace"),
                        ("analyze-tuned-text.out", "analyze: tuned trace"), ("doctor.out", "doctor"),
                        ("bench.out", "bench")):
        text = read(os.path.join(out, name))
        if text:
            md += ["", "## " + title, "", "```" if not name.endswith(".md") else "", text.strip()[:6000],
                   "```" if not name.endswith(".md") else ""]
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
