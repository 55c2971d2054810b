#!/usr/bin/env python3
"""`gpufeed tune` against an exhaustive grid over the same knobs, on the same real PyTorch job.

The job is bench/tune_job.py: a CPU PyTorch loop whose DataLoader is hard-coded to num_workers=0
while each sample takes 5 ms to fetch and each step 10 ms, with short epochs (2000 samples; worker start-up at
each epoch counts unless persistent_workers=True). Both runs use the same trial options (the
default adaptive stopping: warm-up cut, stop at a 95% CI half-width <= 3%, --min-time 3s, and
--max-time 20s so that a trial on a loaded box cannot take a minute):

- tune: `gpufeed tune -- PYTHON bench/tune_job.py` (baseline, diagnosis, coordinate ascent over
  num_workers / persistent_workers / prefetch_factor, then the interleaved A/B/A/B re-run);
- grid: `gpufeed sweep` over every combination of the values tune may try:
  num_workers {0,2,4,8} x persistent_workers {0,1} x prefetch_factor {2,4} (16 trials), injected
  with --dataloader as tune does (prefetch/persistent with 0 workers are reset, as PyTorch wants).

Pass criteria (issue 26): tune's setting, as the grid measured it (or as tune's own re-run, the
mean of 2 trials, measured it when the grid has no such point or the grid's trial of it never
settled), is within 5% of the grid's best throughput, and
tune's total trial time is at most 40% of the grid's. Trial time is the sum of the trials'
durations (each job's start-up to its stop); the wall time of each command is printed too.
Prints both runs' figures and a JSON line at the end.

Usage: python3 bench/tune_vs_grid.py [--python PYTHON_WITH_TORCH] [--gpufeed PATH]
                                     [--workers 0,2,4,8] [--keep DIR]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from common import ROOT, find_gpufeed

JOB = os.path.join(ROOT, "bench", "tune_job.py")


def find_python(explicit):
    cands = [explicit, os.environ.get("GPUFEED_TEST_PYTHON"),
             "/root/.cache/gpufeed/ci-venv/bin/python", "python3"]
    for p in cands:
        if p and subprocess.run([p, "-c", "import torch"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL).returncode == 0:
            return p
    sys.exit("no Python with PyTorch: give --python")


def run(cmd, js):
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        sys.exit("gpufeed failed (%d): %s\n%s\n%s" % (p.returncode, " ".join(cmd), p.stdout, p.stderr))
    with open(js) as f:
        return json.load(f), wall, p.stdout


def key(params):
    """(num_workers, persistent_workers, prefetch_factor) with the DataLoader's defaults."""
    return (int(params.get("num_workers", 0)), int(params.get("persistent_workers", 0)),
            int(params.get("prefetch_factor", 2)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python")
    ap.add_argument("--gpufeed")
    ap.add_argument("--workers", default="0,2,4,8")
    ap.add_argument("--max-time", default="20s", help="per trial, both runs (gpufeed's --max-time)")
    ap.add_argument("--keep", help="keep both output folders under DIR")
    a = ap.parse_args()
    gpufeed, python = find_gpufeed(a.gpufeed), find_python(a.python)
    d = tempfile.mkdtemp(prefix="gpufeed-tune-bench-")
    try:
        job = [python, JOB]
        tj = os.path.join(d, "tune.json")
        trial = ["--max-time", a.max_time]
        tune, tune_wall, tune_out = run(
            [gpufeed, "tune", "-q"] + trial + ["--output-dir", os.path.join(d, "tune"), "--export-json", tj,
             "--"] + job, tj)
        gj = os.path.join(d, "grid.json")
        grid, grid_wall, _ = run(
            [gpufeed, "sweep", "-q", "-L", "w", a.workers, "-L", "p", "0,1", "-L", "f", "2,4",
             "--dataloader", "num_workers={w}", "--dataloader", "persistent_workers={p}",
             "--dataloader", "prefetch_factor={f}"] + trial + ["--output-dir", os.path.join(d, "grid"),
             "--export-json", gj, "--"] + job, gj)
        if a.keep:
            shutil.copytree(d, a.keep, dirs_exist_ok=True)
    finally:
        shutil.rmtree(d, ignore_errors=True)

    print("== tune: %.1f s wall" % tune_wall)
    print(tune_out)
    steps = tune["steps"]
    # the interleaved re-runs come after the search: knob-less steps after the baseline
    reruns = [i for i, s in enumerate(steps) if i > 0 and s["knob"] is None]
    search = steps[: reruns[0]] if reruns else steps
    tune_search_s = sum(s["result"]["duration_s"] for s in search)
    tune_total_s = sum(s["result"]["duration_s"] for s in steps)
    grid_total_s = sum(r["duration_s"] for r in grid["results"])

    def grid_key(params):
        return key({"num_workers": params["w"], "persistent_workers": params["p"],
                    "prefetch_factor": params["f"]})

    g = {grid_key(r["parameters"]): r for r in grid["results"]}
    # with 0 workers prefetch/persistent are reset: those points are one setting
    print("== grid: %d trials, %.1f s wall; steps/s by (num_workers, persistent, prefetch):"
          % (len(g), grid_wall))
    for k in sorted(g):
        t = g[k]["throughput"]
        print("  %s: %s (%.1f s%s)" % (k, "%.2f" % t["value"] if t else "-", g[k]["duration_s"],
                                    "" if t and t["steady"] else ", not steady"))
    ok_pts = {k: r["throughput"]["value"] for k, r in g.items() if r["throughput"]}
    grid_best_k = max(ok_pts, key=ok_pts.get)
    grid_best = ok_pts[grid_best_k]
    grid_pick = grid_key(grid["sweet_spot"]["parameters"]) if grid.get("sweet_spot") else None

    chosen = {c["knob"]: c["value"] for c in tune["chosen"]}
    tune_k = key(chosen)
    if tune_k[0] == 0:
        tune_k = (0, 0, 2)
    ba = tune.get("before_after") or {}
    rerun = (ba.get("after") or {}).get("throughput")
    # the grid's one trial of tune's setting, when it settled; else tune's re-run (2 trials)
    steady = tune_k in ok_pts and g[tune_k]["throughput"]["steady"]
    if steady:
        tune_tput, basis = ok_pts[tune_k], "as the grid measured it"
    elif tune_k in ok_pts:
        tune_tput, basis = rerun, ("by tune's re-run (the grid's trial of it, %.2f steps/s, never "
                                   "settled)" % ok_pts[tune_k])
    else:
        tune_tput, basis = rerun, "by tune's re-run (not a grid point)"
    gap = (grid_best - tune_tput) / grid_best if tune_tput else None
    rerun_gap = (grid_best - rerun) / grid_best if rerun else None
    ratio = tune_total_s / grid_total_s
    search_ratio = tune_search_s / grid_total_s
    sp = ba.get("speedup") or {}
    print("tune chose %s (%s trials; stop: %s); speed-up %s %s" % (
        chosen or "nothing", len(steps), tune["stop"], sp.get("value"), sp.get("ci95")))
    print("grid best: %s at %.2f steps/s; sweep's sweet spot %s" % (grid_best_k, grid_best, grid_pick))
    print("tune's re-run of its setting: %s steps/s" % rerun)
    print("tune's setting %s: %s steps/s %s: %s of the grid's best" % (
        tune_k, "%.2f" % tune_tput if tune_tput else "-", basis,
        "%.1f%% short" % (gap * 100) if gap is not None and gap > 0 else
        ("%.1f%% above" % (-gap * 100) if gap is not None else "-")))
    print("trial time: tune %.1f s (search %.1f s + re-run %.1f s) / grid %.1f s = %.0f%% "
          "(search alone %.0f%%); wall %.1f s / %.1f s" % (
              tune_total_s, tune_search_s, tune_total_s - tune_search_s, grid_total_s,
              ratio * 100, search_ratio * 100, tune_wall, grid_wall))
    ok = gap is not None and gap <= 0.05 and ratio <= 0.40
    print("PASS" if ok else "FAIL")
    print(json.dumps({
        "tune_trials": len(steps), "tune_trial_s": round(tune_total_s, 1),
        "tune_search_s": round(tune_search_s, 1), "grid_trials": len(g),
        "grid_trial_s": round(grid_total_s, 1), "ratio": round(ratio, 3),
        "search_ratio": round(search_ratio, 3), "tune_wall_s": round(tune_wall, 1),
        "grid_wall_s": round(grid_wall, 1), "tune_pick": tune_k, "grid_best": grid_best_k,
        "grid_best_steps_per_s": round(grid_best, 2),
        "tune_pick_steps_per_s": round(tune_tput, 2) if tune_tput else None,
        "gap": round(gap, 4) if gap is not None else None,
        "rerun_steps_per_s": rerun, "rerun_gap": round(rerun_gap, 4) if rerun_gap is not None else None,
        "speedup": sp.get("value"), "speedup_ci95": sp.get("ci95"), "pass": ok}))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
