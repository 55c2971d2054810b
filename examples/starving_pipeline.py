#!/usr/bin/env python3
"""A training job whose accelerator starves for data, written with Python's standard library only.

The input pipeline is shaped like PyTorch's: a Dataset whose __getitem__ reads a sample and runs
it through transforms (DecodeImage, RandomCrop, Normalize: real CPU work on real bytes), and a
DataLoader that either loads batches in the training process (--workers 0) or in worker
processes (multiprocessing) that feed a queue. The training loop takes a batch, runs a
"device step" (a short forward on the CPU, then the device time simulated as a wait, as a real
GPU step would be spent in the driver), and repeats.

    python3 examples/starving_pipeline.py --workers 0    # the loop loads its own data: starves
    python3 examples/starving_pipeline.py --workers 2    # workers load ahead: the device is fed

Run it under gpufeed to see where each step's time goes and which data stage is slow:

    gpufeed run -- python3 examples/starving_pipeline.py
    gpufeed sweep -L workers 0,1,2,4 -- python3 examples/starving_pipeline.py --workers {workers}

When GPUFEED_STEP_SOCKET is set (gpufeed sweep sets it) one step marker is sent per step
(docs/step-protocol.md) with the time spent waiting for the batch and the batch size.
"""

import argparse
import math
import multiprocessing as mp
import os
import queue
import random
import socket
import struct
import sys
import time
import zlib

IMAGE_SIDE = 48  # pixels per side of a "decoded" image


def make_sample(index):
    """The bytes of one stored sample: a compressed greyscale image (what a file read returns)."""
    rnd = random.Random(index)
    pixels = bytes(
        (x * 3 + y * 5 + rnd.randrange(32)) & 0xFF
        for y in range(IMAGE_SIDE)
        for x in range(IMAGE_SIDE)
    )
    return struct.pack("<HH", IMAGE_SIDE, IMAGE_SIDE) + zlib.compress(pixels, 6)


class DecodeImage:
    """Decompress and unpack the pixels (the expensive stage, like a JPEG decode)."""

    def __init__(self, passes):
        self.passes = passes

    def __call__(self, blob):
        w, h = struct.unpack_from("<HH", blob)
        raw = zlib.decompress(blob[4:])
        rows = [list(raw[y * w:(y + 1) * w]) for y in range(h)]
        # A decoder's inverse transform: a few smoothing passes over every pixel.
        for _ in range(self.passes):
            rows = [
                [(r[max(x - 1, 0)] + 2 * r[x] + r[min(x + 1, w - 1)]) >> 2 for x in range(w)]
                for r in rows
            ]
        return rows


class RandomCrop:
    def __init__(self, size):
        self.size = size

    def __call__(self, rows):
        y = random.randrange(len(rows) - self.size + 1)
        x = random.randrange(len(rows[0]) - self.size + 1)
        return [r[x:x + self.size] for r in rows[y:y + self.size]]


class Normalize:
    def __init__(self, mean, std):
        self.mean, self.std = mean, std

    def __call__(self, rows):
        return [[(v / 255.0 - self.mean) / self.std for v in r] for r in rows]


class Compose:
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, x):
        for t in self.transforms:
            x = t(x)
        return x


class SyntheticImages:
    """A map-style dataset: sample i is read from "storage" and transformed."""

    def __init__(self, n, transform):
        self.n = n
        self.transform = transform
        self.store = {}

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        blob = self.store.get(index)
        if blob is None:
            blob = self.store[index] = make_sample(index)
        return self.transform(blob), index % 10


def collate(samples):
    return [s[0] for s in samples], [s[1] for s in samples]


# How often an idle worker checks that its parent is still there (PyTorch's
# MP_STATUS_CHECK_INTERVAL is 5 s).
STATUS_CHECK_INTERVAL_S = 1.0


def _worker_loop(dataset, index_queue, data_queue):
    """A DataLoader worker: load the batches it is asked for until told to stop, or until its
    parent is gone (killed: nobody would tell it to stop), like PyTorch's worker watchdog."""
    parent = os.getppid()
    while True:
        try:
            job = index_queue.get(timeout=STATUS_CHECK_INTERVAL_S)
        except queue.Empty:
            if os.getppid() != parent:
                # Do not wait at exit for batches nobody will read to be flushed to the pipe.
                data_queue.cancel_join_thread()
                return
            continue
        if job is None:
            return
        n, indices = job
        data_queue.put((n, collate([dataset[i] for i in indices])))


class DataLoader:
    def __init__(self, dataset, batch_size, num_workers, prefetch=2):
        self.dataset = dataset
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.prefetch = prefetch

    def __iter__(self):
        if self.num_workers == 0:
            return _SingleProcessLoaderIter(self)
        return _MultiProcessLoaderIter(self)


class _SingleProcessLoaderIter:
    def __init__(self, loader):
        self.loader = loader
        self.next_index = 0

    def __next__(self):
        return self._next_data()

    def _next_data(self):
        ds, bs = self.loader.dataset, self.loader.batch_size
        indices = [(self.next_index + i) % len(ds) for i in range(bs)]
        self.next_index += bs
        return collate([ds[i] for i in indices])


class _MultiProcessLoaderIter:
    def __init__(self, loader):
        ctx = mp.get_context("fork")
        self.loader = loader
        self.index_queues = []
        self.data_queue = ctx.Queue()
        self.workers = []
        for _ in range(loader.num_workers):
            q = ctx.Queue()
            w = ctx.Process(target=_worker_loop, args=(loader.dataset, q, self.data_queue))
            w.daemon = True
            w.start()
            self.index_queues.append(q)
            self.workers.append(w)
        self.sent = 0
        self.received = 0
        self.reorder = {}
        for _ in range(loader.prefetch * loader.num_workers):
            self._send()

    def _send(self):
        ds, bs = self.loader.dataset, self.loader.batch_size
        start = self.sent * bs
        indices = [(start + i) % len(ds) for i in range(bs)]
        self.index_queues[self.sent % len(self.index_queues)].put((self.sent, indices))
        self.sent += 1

    def __next__(self):
        return self._next_data()

    def _next_data(self):
        while self.received not in self.reorder:
            n, batch = self._get_data()
            self.reorder[n] = batch
        batch = self.reorder.pop(self.received)
        self.received += 1
        self._send()
        return batch

    def _get_data(self):
        return self.data_queue.get()

    def shutdown(self):
        # Workers may be blocked handing over batches nobody will take: stop them outright.
        for w in self.workers:
            w.terminate()
        for w in self.workers:
            w.join()


class Model:
    """The device step: a little host work to launch it, then the device's own time."""

    def __init__(self, device_ms):
        self.device_s = device_ms / 1000.0
        self.weights = [0.0] * 64

    def forward(self, images):
        # Host-side work of a forward (flattening the batch, launching kernels).
        acc = 0.0
        for img in images:
            acc += sum(img[0])
        # The accelerator computes: the host waits (as in a CUDA sync at the end of the step).
        time.sleep(self.device_s * 0.4)
        return acc

    def backward(self, loss):
        time.sleep(self.device_s * 0.6)


class SGD:
    def __init__(self, model, lr):
        self.model, self.lr = model, lr

    def step(self):
        w = self.model.weights
        for i in range(len(w)):
            w[i] -= self.lr * math.sin(i)


def step_socket():
    path = os.environ.get("GPUFEED_STEP_SOCKET")
    if not path:
        return None, None
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.setblocking(False)
        return s, path
    except OSError:
        return None, None


def train(args):
    dataset = SyntheticImages(
        4096,
        Compose([DecodeImage(args.decode_passes), RandomCrop(32), Normalize(0.5, 0.25)]),
    )
    loader = DataLoader(dataset, batch_size=args.batch_size, num_workers=args.workers)
    model = Model(args.device_ms)
    optimizer = SGD(model, 0.01)
    sock, sock_path = step_socket()
    it = iter(loader)
    start = time.monotonic()
    last_report = start
    steps = 0
    waited = 0.0
    window_steps, window_wait = 0, 0.0
    try:
        while time.monotonic() - start < args.seconds:
            t0 = time.monotonic()
            images, labels = next(it)
            wait = time.monotonic() - t0
            loss = model.forward(images)
            model.backward(loss)
            optimizer.step()
            steps += 1
            waited += wait
            window_steps += 1
            window_wait += wait
            if sock is not None:
                msg = "step %d %d %d" % (time.monotonic_ns(), int(wait * 1e9), len(images))
                try:
                    sock.sendto(msg.encode(), sock_path)
                except OSError:
                    pass
            now = time.monotonic()
            if now - last_report >= 1.0:
                rate = window_steps / (now - last_report)
                print(
                    "step %5d  %6.1f it/s  %7.1f samples/s  waiting for data %3.0f%%"
                    % (steps, rate, rate * args.batch_size,
                       100.0 * window_wait / (now - last_report)),
                    flush=True,
                )
                last_report, window_steps, window_wait = now, 0, 0.0
    finally:
        if args.workers > 0:
            it.shutdown()
    total = time.monotonic() - start
    print(
        "done: %d steps in %.1f s (%.1f it/s, %.1f samples/s), waited for data %.0f%% of the time"
        % (steps, total, steps / total, steps * args.batch_size / total, 100.0 * waited / total),
        flush=True,
    )


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=0, help="loader worker processes (0: load in the training loop)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seconds", type=float, default=8.0, help="how long to train")
    p.add_argument("--device-ms", type=float, default=40.0, help="simulated device time per step")
    p.add_argument("--decode-passes", type=int, default=2, help="cost of DecodeImage per sample")
    args = p.parse_args(argv)
    if args.workers < 0:
        p.error("--workers must be 0 or more")
    train(args)


if __name__ == "__main__":
    sys.exit(main())
