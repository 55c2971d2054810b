"""Executes a notebook headlessly with nbclient and the real ipykernel (issue 36's tests), and
prints its cells' outputs as one JSON object: {"cells": [[output, ...], ...], "extra": {...}}.

    python notebook_run.py SCENARIO

The kernel inherits this process's environment (PYTHONPATH with gpufeed's package, GPUFEED_BIN).
Scenarios: "train" (a %%gpufeed cell that waits for a JPEG decode, then a gpufeed.profile() block
with two workers), "bad" (a cell that raises, a killed recorder, nested %%gpufeed, a cell with no
training loop), "interrupt" (Kernel -> Interrupt during a %%gpufeed cell), "restart" (the kernel
restarted while %gpufeed start records), "cost" (the bundled example's steps/s with and without
%%gpufeed, and the time from the cell's end to the report; bench/README.md).
"""

import json
import os
import signal
import sys
import threading
import time

import nbformat
from nbclient import NotebookClient
from nbclient.util import run_sync

SETUP = r'''
import io, os, time, torch
from PIL import Image
from torch.utils.data import Dataset, DataLoader
torch.set_num_threads(1)
_buf = io.BytesIO()
Image.effect_noise((384, 384), 64).convert("RGB").save(_buf, format="JPEG", quality=95)
JPEG = _buf.getvalue()

class Photos(Dataset):
    """A JPEG decoded per sample: the decode stage."""
    def __len__(self):
        return 1 << 20
    def __getitem__(self, i):
        img = Image.open(io.BytesIO(JPEG))
        img.load()
        return torch.frombuffer(bytearray(img.tobytes()[:3072]), dtype=torch.uint8).float()

def train(loader, steps, work, seconds=None):
    """The loop's own clock: the share of its time spent in next(loader), and steps/s."""
    model = torch.nn.Linear(3072, 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    w = torch.randn(512, 512)
    waited = 0.0
    t0 = time.perf_counter()
    it = iter(loader)
    done = 0
    while done < steps or (seconds and time.perf_counter() - t0 < seconds):
        a = time.perf_counter()
        x = next(it)
        waited += time.perf_counter() - a
        for _ in range(work):
            w = torch.tanh(w @ w)
        loss = model(x).sum()
        opt.zero_grad(); loss.backward(); opt.step()
        done += 1
        if seconds and time.perf_counter() - t0 >= seconds:
            break
    total = time.perf_counter() - t0
    print("LOOP_WAIT_PCT=%.1f STEPS_PER_S=%.2f" % (100 * waited / total, done / total))

def recorders():
    """gpufeed processes that are this kernel's children."""
    me, out = os.getpid(), []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                s = f.read()
        except OSError:
            continue
        comm = s[s.index("(") + 1:s.rindex(")")]
        fields = s[s.rindex(")") + 2:].split()
        if comm == "gpufeed" and int(fields[1]) == me and fields[0] not in "ZX":
            out.append(int(d))
    return out
'''


def cell(src):
    return nbformat.v4.new_code_cell(src)


def scenario_cells(name):
    head = [cell("%load_ext gpufeed"), cell(SETUP)]
    if name == "train":
        return head + [
            cell("%%gpufeed\ntrain(DataLoader(Photos(), batch_size=16, num_workers=0), 60, 0)"),
            cell("print('REPORT_WAIT_PCT=%s' % _gpufeed.report['steps']['data_wait_pct'])\n"
                 "print('VERDICT1=%s' % _gpufeed.verdict)\n"
                 "print('RECORDERS=%s' % recorders())"),
            cell("import gpufeed\n"
                 "with gpufeed.profile() as p:\n"
                 "    train(DataLoader(Photos(), batch_size=16, num_workers=2), 60, 8)\n"
                 "print('VERDICT2=%s' % p.verdict)\n"
                 "print('WORKERS2=%s' % p.report['job'].get('workers_max'))\n"
                 "print('HTML2=%d' % len(p.html() or ''))\n"
                 "print('RECORDING2=%s' % os.path.exists(p.recording))\n"
                 "print('RECORDERS=%s' % recorders())"),
        ]
    if name == "bad":
        return head + [
            # 2: a cell that raises after training
            cell("%%gpufeed\ntrain(DataLoader(Photos(), batch_size=16, num_workers=0), 30, 0)\n"
                 "raise ValueError('boom from the cell')"),
            cell("print('RECORDERS=%s' % recorders())"),
            # 4: the recorder killed mid-cell
            cell("%%gpufeed\nimport signal, gpufeed._profile as gp\n"
                 "train(DataLoader(Photos(), batch_size=16, num_workers=0), 20, 0)\n"
                 "os.kill(gp._active[0]._proc.pid, signal.SIGKILL)\n"
                 "train(DataLoader(Photos(), batch_size=16, num_workers=0), 20, 0)\n"
                 "'the cell value'"),
            cell("print('RECORDERS=%s' % recorders())"),
            # 6: nested %%gpufeed
            cell("%%gpufeed\nprint('OUTER_RECORDERS=%d' % len(recorders()))\n"
                 "get_ipython().run_cell_magic('gpufeed', '', "
                 "\"print('INNER_RECORDERS=%d' % len(recorders()))\")\n"
                 "train(DataLoader(Photos(), batch_size=16, num_workers=0), 20, 0)"),
            # 7: no training loop at all
            cell("%%gpufeed\nx = sum(range(1000))\nx"),
            cell("print('RECORDERS=%s' % recorders())\nprint('ALIVE')"),
            # 9: a cell that does not compile: nothing recorded
            cell("%%gpufeed\nx = (\n"),
            # 10, 11: no binary: the cell runs without gpufeed
            cell("_saved_bin = os.environ['GPUFEED_BIN']\n"
                 "os.environ['GPUFEED_BIN'] = '/nonexistent/gpufeed'"),
            cell("%%gpufeed\nprint('RAN WITHOUT')"),
            cell("os.environ['GPUFEED_BIN'] = _saved_bin\n"
                 "print('RECORDERS=%s' % recorders())\nprint('ALIVE')"),
        ]
    if name == "interrupt":
        return head + [
            cell("%%gpufeed\nprint('TRAINING pid=%d' % os.getpid(), flush=True)\n"
                 "train(DataLoader(Photos(), batch_size=16, num_workers=0), 10**9, 0)"),
            cell("print('RECORDERS=%s' % recorders())\nprint('ALIVE')"),
        ]
    if name == "restart":
        return head + [
            cell("%gpufeed start"),
            cell("import gpufeed._profile as gp\nprint('RECORDER=%d' % gp._active[0]._proc.pid)"),
        ]
    if name == "cost":
        # The bundled example (examples/starving_pipeline.py) in the kernel, without and with
        # %%gpufeed, in the order A B B A so that a drift of the machine cancels out.
        example = os.environ.get("GPUFEED_EXAMPLE") or os.path.join(
            os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "examples",
            "starving_pipeline.py")
        run = "%%run %s --workers 0 --seconds %s" % (example, os.environ.get("COST_SECONDS", "10"))
        plain = cell(run)
        magic = [cell("%%gpufeed\n" + run),
                 cell("print('REPORT_S=%.3f' % _gpufeed.report_seconds)")]
        return head + [plain] + magic + magic + [cell(run)]
    raise SystemExit("unknown scenario %r" % name)


def outputs(nb):
    out = []
    for c in nb.cells:
        got = []
        for o in c.get("outputs", []):
            d = {"type": o.get("output_type")}
            for k in ("name", "text", "ename", "evalue"):
                if k in o:
                    d[k] = o[k]
            if "data" in o:
                d["data"] = dict(o["data"])
            got.append(d)
        out.append(got)
    return out


def main():
    name = sys.argv[1]
    nb = nbformat.v4.new_notebook()
    nb.cells = scenario_cells(name)
    client = NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True)
    extra = {}
    if name == "interrupt":
        # Kernel -> Interrupt once the training cell has printed that it started.
        # (what Jupyter's Interrupt does to an ipykernel: SIGINT to the kernel process).
        def interrupt():
            while "TRAINING" not in json.dumps(nb.cells[2].get("outputs", [])):
                time.sleep(0.1)
            text = json.dumps(nb.cells[2]["outputs"])
            time.sleep(3)
            os.kill(int(text.split("TRAINING pid=")[1].split("\\n")[0]), signal.SIGINT)

        threading.Thread(target=interrupt, daemon=True).start()
        client.execute()
    elif name == "restart":
        with client.setup_kernel():
            for i, c in enumerate(nb.cells):
                client.execute_cell(c, i)
            text = json.dumps(nb.cells[-1]["outputs"])
            pid = int(text.split("RECORDER=")[1].split("\\n")[0])
            extra["recorder"] = pid
            run_sync(client.km.restart_kernel)(now=True)
            t0 = time.monotonic()
            while os.path.exists("/proc/%d" % pid) and time.monotonic() - t0 < 10:
                try:
                    with open("/proc/%d/stat" % pid) as f:
                        if f.read().split(")")[-1].split()[0] in ("Z", "X"):
                            break
                except OSError:
                    break
                time.sleep(0.05)
            extra["recorder_gone_after_s"] = round(time.monotonic() - t0, 2)
            extra["recorder_alive"] = os.path.exists("/proc/%d" % pid) and not open(
                "/proc/%d/stat" % pid).read().split(")")[-1].split()[0] in ("Z", "X")
    else:
        client.execute()
    json.dump({"cells": outputs(nb), "extra": extra}, sys.stdout)


if __name__ == "__main__":
    main()
