"""gpufeed tune's end-to-end job: a real PyTorch loop whose DataLoader is hard-coded to
num_workers=0 while each sample takes 5 ms to fetch (a sleep, like slow storage) and each step
computes for 20 ms (a busy loop, like a GPU step): input-bound with no workers, compute-bound
with about four. Step markers (with the wait for each batch) come from gpufeed_probe."""
import time

import torch
from torch.utils.data import DataLoader, Dataset

import gpufeed_probe


class Slow(Dataset):
    def __len__(self):
        return 10**7

    def __getitem__(self, i):
        time.sleep(0.005)
        return torch.ones(4)


def compute():
    end = time.perf_counter() + 0.020
    while time.perf_counter() < end:
        pass


loader = DataLoader(Slow(), batch_size=8, shuffle=False, num_workers=0)
for batch in gpufeed_probe.wrap(loader):
    compute()
