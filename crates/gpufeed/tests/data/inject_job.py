"""A training script with hard-coded DataLoader arguments, for the --dataloader/--torch tests.

Usage: inject_job.py OUT.json MODE. Writes what its DataLoader and torch ended up with to OUT.json.
Modes: plain (one loader), rules (PyTorch's argument rules), sweep (prints a rate that grows with
num_workers, forever), notorch (never imports torch; prints a rate), batch (runs out of memory
above batch_size 16, else prints a rate forever).
"""
import json
import sys
import time

out, mode = sys.argv[1], sys.argv[2]


def rate_forever(per_batch_s):
    while True:
        time.sleep(per_batch_s)
        print("rate: %.2f batches/s" % (1.0 / per_batch_s), flush=True)


if mode == "notorch":
    rate_forever(0.02)

import torch  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402


class Batches:
    """A batch_sampler: it decides the batches, so batch_size must stay 1."""

    def __iter__(self):
        return iter([[0, 1], [2, 3]])

    def __len__(self):
        return 2


seen = {}
if mode == "rules":
    dl = DataLoader(list(range(8)), num_workers=4, prefetch_factor=2, persistent_workers=True)  # SITE-RULES
    dl2 = DataLoader(list(range(8)), batch_sampler=Batches())  # SITE-SAMPLER
    seen["sampler_batch_size"] = dl2.batch_size
else:
    dl = DataLoader(list(range(8)), batch_size=4, num_workers=0)  # SITE-PLAIN
seen.update(
    num_workers=dl.num_workers,
    batch_size=dl.batch_size,
    pin_memory=dl.pin_memory,
    prefetch_factor=dl.prefetch_factor,
    persistent_workers=dl.persistent_workers,
    cudnn_benchmark=torch.backends.cudnn.benchmark,
    matmul_precision=torch.get_float32_matmul_precision(),
)
with open(out, "w") as f:
    json.dump(seen, f)
if mode == "sweep":
    rate_forever(0.02 / (1 + dl.num_workers))
if mode == "batch":
    if dl.batch_size > 16:
        print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", flush=True)
        sys.exit(1)
    rate_forever(0.02)
