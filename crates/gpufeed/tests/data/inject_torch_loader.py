"""A real PyTorch input pipeline with a hard-coded DataLoader(num_workers=0): each sample takes
5 ms to fetch (a sleep, like reading from slow storage), so worker processes raise throughput
whatever the machine's load. Prints its rate in batches/s every 0.2 s, forever."""
import time

import torch  # noqa: F401
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __len__(self):
        return 10**7

    def __getitem__(self, i):
        time.sleep(0.005)
        return i


loader = DataLoader(Slow(), batch_size=8, num_workers=0)
t, n = time.time(), 0
for _ in loader:
    n += 1
    now = time.time()
    if now - t >= 0.2:
        print("rate: %.2f batches/s" % (n / (now - t)), flush=True)
        t, n = now, 0
