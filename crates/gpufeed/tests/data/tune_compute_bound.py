"""gpufeed tune's job with nothing to tune: batches are ready at once and each step computes for
20 ms (a busy loop standing in for the GPU step)."""
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

import gpufeed_probe

loader = DataLoader(TensorDataset(torch.ones(10**6, 4)), batch_size=8, num_workers=0)
while True:
    for batch in gpufeed_probe.wrap(loader):
        end = time.perf_counter() + 0.020
        while time.perf_counter() < end:
            pass
