"""What gpufeed's DataLoader step hook (issue 41) costs a job, side by side in one run.

    GPUFEED_TEST_PYTHON=/path/to/python-with-torch python3 bench/auto_steps_cost.py [ROUNDS]

1. ns per batch: a DataLoader over an in-memory TensorDataset (batch of 8 tiny tensors, nothing
   else in the loop) iterated 20,000 times with the hook installed (a step socket bound and
   drained) and without, interleaved ROUNDS times (default 5); the difference is the hook's cost
   per step, printed beside the loop's own time per step.
2. A real job's steps/s with and without: tests/data/plain_imagefolder.py (JPEG decoding, num_workers
   0) for 8 s each, interleaved, its steps counted from its own `done:` line.

The hook is the repository's python/gpufeed/_hook/ (its sitecustomize.py beside it as _gpufeed_hook/), written with its config
into a private folder put first on PYTHONPATH, as gpufeed does.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PY = os.environ.get("GPUFEED_TEST_PYTHON", sys.executable)
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 5

LOOP = r"""
import time, torch
from torch.utils.data import DataLoader, TensorDataset
ds = TensorDataset(torch.zeros(8 * 20000, 2))
dl = DataLoader(ds, batch_size=8)
t = time.perf_counter_ns(); n = 0
for _ in dl:
    n += 1
print((time.perf_counter_ns() - t) / n)
"""


def hooked_env(tmp, sock_path):
    inj = os.path.join(tmp, "inj")
    os.makedirs(inj, exist_ok=True)
    hook = os.path.join(ROOT, "python/gpufeed/_hook")
    shutil.copytree(hook, os.path.join(inj, "_gpufeed_hook"), ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(os.path.join(hook, "sitecustomize.py"), os.path.join(inj, "sitecustomize.py"))
    with open(os.path.join(inj, "config.json"), "w") as f:
        json.dump({"dataloader": {}, "torch": {}, "steps": True}, f)
    env = dict(os.environ, PYTHONPATH=inj, GPUFEED_STEP_SOCKET=sock_path)
    return env


def main():
    tmp = tempfile.mkdtemp(prefix="gpufeed-bench-")
    sock_path = os.path.join(tmp, "s.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(sock_path)
    got = [0]

    def drain():
        while True:
            try:
                s.recv(4096)
                got[0] += 1
            except OSError:
                return

    threading.Thread(target=drain, daemon=True).start()
    plain = dict(os.environ)
    plain.pop("GPUFEED_STEP_SOCKET", None)
    hooked = hooked_env(tmp, sock_path)
    per = {"without": [], "with": []}
    for _ in range(ROUNDS):
        for name, env in (("without", plain), ("with", hooked)):
            out = subprocess.run([PY, "-c", LOOP], env=env, capture_output=True, text=True, check=True)
            per[name].append(float(out.stdout.strip()))
    med = {k: sorted(v)[len(v) // 2] for k, v in per.items()}
    print("1. in-memory loader, ns per batch (median of %d): without %.0f, with %.0f: the hook costs %.0f ns "
          "per step (%d markers received)" % (ROUNDS, med["without"], med["with"], med["with"] - med["without"], got[0]))
    job = os.path.join(ROOT, "crates/gpufeed/tests/data/plain_imagefolder.py")
    imgs = os.path.join(tmp, "imgs")
    subprocess.run([PY, job, imgs, "1"], env=plain, capture_output=True, check=True)
    rates = {"without": [], "with": []}
    for _ in range(max(1, ROUNDS // 2)):
        for name, env in (("without", plain), ("with", hooked)):
            out = subprocess.run([PY, job, imgs, "8"], env=env, capture_output=True, text=True, check=True)
            steps = int(out.stdout.strip().splitlines()[-1].split()[1])
            rates[name].append(steps / 8.0)
    w, h = (sum(v) / len(v) for v in (rates["without"], rates["with"]))
    print("2. plain_imagefolder.py, steps/s: without %.1f, with %.1f: %.3fx, one step %.1f ms" % (w, h, h / w, 1000 / w))
    s.close()
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
