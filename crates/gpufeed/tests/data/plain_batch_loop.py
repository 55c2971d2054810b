"""A hand-written batch loop, no torch DataLoader: a generator loads each batch (LOAD ms of
decoding-like work), the loop trains a small model (about 20 ms a step) with a torch optimizer.

    python plain_batch_loop.py [LOAD_MS] [SECONDS]
"""
import sys
import time

import torch

load_ms = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0
seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 1e9


def decode(n):
    end = time.perf_counter() + n / 1000.0
    while time.perf_counter() < end:
        pass
    return torch.randn(8, 64)


def batches():
    while True:
        yield decode(load_ms)


model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
t0 = time.time()
steps = 0
for x in batches():
    end = time.perf_counter() + 0.02
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    while time.perf_counter() < end:
        pass
    steps += 1
    if time.time() - t0 > seconds:
        break
print("done: %d steps in %.1f s" % (steps, time.time() - t0))
