"""Step markers for `gpufeed sweep` / `gpufeed batch-size` (stdlib only).

gpufeed starts the training job with ``GPUFEED_STEP_SOCKET`` set to the path of a Unix datagram
socket. This module sends one datagram per training step to it (protocol: docs/step-protocol.md),
so gpufeed measures steps/s exactly and, through :func:`wrap`, how long each step waited for its
input batch — the data-wait fraction, the most direct measure of a starving GPU.

Without ``GPUFEED_STEP_SOCKET`` every function is a no-op that costs a dictionary lookup, so the
calls can stay in the training script. Sending never blocks and never raises: if gpufeed is gone
or its buffer is full, the marker is dropped.

    import gpufeed_probe as probe

    for batch in probe.wrap(loader):      # times each next(): the data wait
        loss = model(batch).sum()
        loss.backward(); opt.step()       # wrap() marks the step when the next batch is asked for

or, with an explicit marker::

    for batch in probe.wrap(loader, steps=False):
        train_step(batch)
        probe.step(items=len(batch))
"""

import os
import socket
import time

__all__ = ["step", "wrap", "enabled", "ENV_VAR"]
__version__ = "0.1.0"

ENV_VAR = "GPUFEED_STEP_SOCKET"


class _Probe:
    def __init__(self):
        self.path = None
        self.sock = None
        self.pending_wait_ns = None

    def target(self):
        path = os.environ.get(ENV_VAR)
        if not path:
            return None
        if path != self.path or self.sock is None:
            self.close()
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                s.setblocking(False)
            except OSError:
                return None
            self.sock, self.path = s, path
        return self.sock

    def send(self, text):
        s = self.target()
        if s is None:
            return False
        try:
            s.sendto(text.encode("ascii"), self.path)
            return True
        except OSError:
            # gpufeed gone, socket buffer full, path removed: drop the marker, never the step.
            return False

    def close(self):
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
        self.sock = None
        self.path = None


_probe = _Probe()


def enabled():
    """True when running under gpufeed (``GPUFEED_STEP_SOCKET`` is set)."""
    return bool(os.environ.get(ENV_VAR))


def _fmt(x):
    return "-" if x is None else str(int(x))


def _rank():
    """This process's rank in a multi-process job (``RANK``, else ``LOCAL_RANK``), else its pid."""
    for var in ("RANK", "LOCAL_RANK"):
        v = os.environ.get(var, "")
        if v.isdigit():
            return int(v)
    return os.getpid()


def step(items=None, wait_ns=None):
    """Marks the end of one training step.

    ``items``: samples in the step (lets gpufeed report samples/s). ``wait_ns``: nanoseconds the
    step waited for its input; by default the wait measured by :func:`wrap` since the last step.
    Returns True when a marker was sent.
    """
    if not os.environ.get(ENV_VAR):
        return False
    now = time.monotonic_ns()
    if wait_ns is None:
        wait_ns = _probe.pending_wait_ns
    _probe.pending_wait_ns = None
    return _probe.send("step %d %s %s %d" % (now, _fmt(wait_ns), _fmt(items), _rank()))


def _add_wait(ns):
    _probe.pending_wait_ns = (_probe.pending_wait_ns or 0) + ns


def wrap(loader, steps=True, items=None):
    """Iterates ``loader``, timing each ``next()`` (the time the step waited for data).

    With ``steps=True`` (default) a step marker is sent each time the loop asks for the next batch
    after the first: the previous step is then complete. With ``steps=False`` only the wait is
    measured, and :func:`step` sends it. ``items`` (an int, or a function of the batch) gives the
    samples per step. Without ``GPUFEED_STEP_SOCKET`` the loader is returned unchanged.
    """
    if not os.environ.get(ENV_VAR):
        return loader
    return _wrapped(loader, steps, items)


def _count(items, batch):
    if items is None:
        return None
    if callable(items):
        try:
            return items(batch)
        except Exception:  # a counting helper must never break training
            return None
    return items


def _wrapped(loader, steps, items):
    it = iter(loader)
    previous = None
    first = True
    while True:
        t0 = time.monotonic_ns()
        if not first and steps:
            # The loop came back for more: the previous step ended now.
            step(items=_count(items, previous))
            t0 = time.monotonic_ns()
        try:
            batch = next(it)
        except StopIteration:
            return
        _add_wait(time.monotonic_ns() - t0)
        first = False
        previous = batch
        yield batch
