"""gpufeed tune's fake-driver job for a batch too small: each step costs 4 ms plus 0.5 ms per
sample, so samples/s grows with the DataLoader's batch_size (8: 1000/s, 16: 1333/s, 32: 1600/s,
40: 1667/s); above 40 it prints PyTorch's out-of-memory error and exits 1. Runs with the
stand-in torch (tests/data/fake_torch), whose DataLoader keeps its arguments."""
import sys
import time

from torch.utils.data import DataLoader

import gpufeed_probe

loader = DataLoader(list(range(64)), batch_size=8, shuffle=True, num_workers=0)
bs = loader.batch_size
if bs > 40:
    print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", flush=True)
    sys.exit(1)
while True:
    time.sleep(0.004 + 0.0005 * bs)
    gpufeed_probe.step(wait_ns=0)
