"""bench/tune_vs_grid.py's job: a real CPU PyTorch loop whose DataLoader is hard-coded to
num_workers=0 while each sample takes --sample-ms to fetch (a sleep, like slow storage) and each
step takes --step-ms (a sleep standing in for the GPU step). Epochs are short (--epoch samples),
so worker start-up at each epoch costs something unless persistent_workers=True. Step markers
(with the wait for each batch) come from python/gpufeed_probe.py.

    num_workers 0: sample-ms x 8 + step-ms per step (~20 steps/s with the defaults)
    num_workers 2: ~45 steps/s; 4: the step's own ~90 steps/s, less the epochs' worker start-up
"""
import argparse
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import gpufeed_probe  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--sample-ms", type=float, default=5.0)
ap.add_argument("--step-ms", type=float, default=10.0)
ap.add_argument("--epoch", type=int, default=2000)
a = ap.parse_args()


class Slow(Dataset):
    def __len__(self):
        return a.epoch

    def __getitem__(self, i):
        time.sleep(a.sample_ms / 1000.0)
        return torch.full((4,), float(i))


loader = DataLoader(Slow(), batch_size=8, shuffle=False, num_workers=0)


def epochs():
    while True:
        for b in loader:
            yield b


for batch in gpufeed_probe.wrap(epochs()):
    time.sleep(a.step_ms / 1000.0)
