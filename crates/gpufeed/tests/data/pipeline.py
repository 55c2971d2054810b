"""A small input pipeline for gpufeed's sweep tests: worker processes do real CPU work per batch
(like DataLoader workers decoding and augmenting), the main process "trains" on each batch
(a sleep standing in for GPU time). Throughput rises with workers until the main loop is the
limit, then plateaus:

    workers 0: work + train per step        (~13 steps/s with the defaults on an idle 2-core box)
    workers 1: one worker's production      (~25 steps/s: a batch takes ~40 ms of CPU)
    workers 2+: the training step (25 ms)   (~40 steps/s), or the two cores when they are busy

Options: --workers N, --batch B (samples per step), --work N (loop iterations per batch),
--io-ms MS (a wait per batch in the worker, like reading from remote storage), --train-ms MS, --progress socket|tqdm|print|none, --fail-above B (PyTorch's OOM message and
exit 1 when --batch is larger), --exit-code C (fail with a ValueError and exit C after
--steps steps), --steps N (stop after N steps; default: run until stopped), --tag T (ignored:
lets a test find its processes).
"""

import argparse
import collections
import multiprocessing as mp
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "python"))
import gpufeed_probe as probe  # noqa: E402

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 79.11 GiB of which 1.19 GiB is free. Including non-PyTorch memory, this process "
    "has 77.91 GiB memory in use. Of the allocated memory 75.20 GiB is allocated by PyTorch, and "
    "1.21 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large "
    "try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
    "documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)


def make_batch(args):
    n, size, io_s = args
    if io_s:
        time.sleep(io_s)  # waiting on storage or the network
    s = 0
    for i in range(n):
        s += i * i
    return [s] * size


def batches(a):
    job = (a.work, a.batch, a.io_ms / 1000.0)
    if a.workers == 0:
        while True:
            yield make_batch(job)
    with mp.Pool(a.workers) as pool:
        ahead = collections.deque(pool.apply_async(make_batch, (job,)) for _ in range(2 * a.workers))
        while True:
            r = ahead.popleft()
            ahead.append(pool.apply_async(make_batch, (job,)))
            yield r.get()


def tqdm_line(n, t0):
    el = time.monotonic() - t0
    rate = n / el if el > 0 else 0
    m, s = divmod(int(el), 60)
    return "train: %dit [%02d:%02d, %5.2fit/s, loss=0.5]" % (n, m, s, rate)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--work", type=int, default=750_000)
    p.add_argument("--train-ms", type=float, default=25.0)
    p.add_argument("--io-ms", type=float, default=0.0)
    p.add_argument("--progress", default="socket")
    p.add_argument("--fail-above", type=int, default=None)
    p.add_argument("--exit-code", type=int, default=0)
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--tag", default="")
    a = p.parse_args()
    print("pipeline: workers=%d batch=%d" % (a.workers, a.batch), flush=True)
    if a.fail_above is not None and a.batch > a.fail_above:
        time.sleep(0.2)  # model build before the first forward pass
        print("Traceback (most recent call last):", file=sys.stderr)
        print('  File "train.py", line 42, in <module>', file=sys.stderr)
        print(OOM, file=sys.stderr)
        sys.exit(1)
    loader = batches(a)
    if a.progress == "socket":
        loader = probe.wrap(loader, items=len)
    t0 = time.monotonic()
    n = 0
    for batch in loader:
        time.sleep(a.train_ms / 1000.0)
        n += 1
        if a.progress == "tqdm" and n % 2 == 0:
            sys.stderr.write("\r" + tqdm_line(n, t0))
            sys.stderr.flush()
        elif a.progress == "print" and n % 5 == 0:
            print("step %d throughput: %.1f samples/s" % (n, n * a.batch / (time.monotonic() - t0)))
        if a.steps is not None and n >= a.steps:
            if a.exit_code:
                print("ValueError: loss is nan at step %d" % n, file=sys.stderr)
                sys.exit(a.exit_code)
            break


if __name__ == "__main__":
    main()
