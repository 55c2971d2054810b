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

:func:`figures` asks gpufeed for its own figures of this rank (GPU busy, the loop's phases from
the Python stacks, steps/s and data wait from the markers), at a logging cadence: it waits at
most ``timeout`` seconds for the answer, and returns None when there is none (not under gpufeed,
or a gpufeed too old to answer: then it stops asking).
"""

import itertools
import json
import os
import select
import socket
import time

__all__ = ["step", "wrap", "figures", "enabled", "ENV_VAR"]
__version__ = "0.1.0"

ENV_VAR = "GPUFEED_STEP_SOCKET"

# A gpufeed that left this many queries in a row unanswered is not asked again (an old one).
_MAX_UNANSWERED = 2
# The longest reply read (gpufeed keeps its replies under 4 KiB).
_REPLY_BYTES = 65536


class _Probe:
    def __init__(self):
        self.path = None
        self.sock = None
        self.pending_wait_ns = None
        self.ask = None  # the socket queries go out on (it has an address, for the reply)
        self.ask_path = None
        self.ask_pid = None
        self.unanswered = 0
        self.nonce = itertools.count(1)

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

    def query(self, timeout):
        """gpufeed's figures (a dict) or None; waits at most ``timeout`` seconds."""
        path = os.environ.get(ENV_VAR)
        if not path:
            return None
        if path != self.ask_path or self.ask_pid != os.getpid():
            self.close_ask()
            self.ask_path, self.ask_pid, self.unanswered = path, os.getpid(), 0
        if self.unanswered >= _MAX_UNANSWERED:
            return None
        s = self.ask
        if s is None:
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                s.setblocking(False)
                s.bind("")  # Linux: a unique abstract address, for gpufeed's reply
            except OSError:
                self.unanswered = _MAX_UNANSWERED  # no way to get replies here
                return None
            self.ask = s
        _drain(s)  # late answers to earlier queries
        nonce = next(self.nonce)
        try:
            s.sendto(("figures %d %d %d\n" % (_rank(), os.getpid(), nonce)).encode("ascii"), path)
        except OSError:
            return None  # gpufeed gone or busy: not a sign of an old gpufeed
        reply = _await(s, path, nonce, timeout)
        self.unanswered = 0 if reply is not None else self.unanswered + 1
        return reply

    def close_ask(self):
        if self.ask is not None:
            try:
                self.ask.close()
            except OSError:
                pass
        self.ask = None
        self.ask_path = None

    def close(self):
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
        self.sock = None
        self.path = None
        self.close_ask()


def _drain(s):
    try:
        while True:
            s.recv(_REPLY_BYTES)
    except OSError:  # BlockingIOError: nothing left
        pass


def _await(s, path, nonce, timeout):
    """The reply to query ``nonce`` from gpufeed's socket ``path``, or None after ``timeout`` s."""
    deadline = time.monotonic() + max(0.0, timeout)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        try:
            # poll, not select: a job with over 1024 open files has descriptors select refuses.
            poller = select.poll()
            poller.register(s, select.POLLIN)
            if not poller.poll(max(1, int(left * 1000))):
                return None
        except (OSError, ValueError, AttributeError):  # AttributeError: no poll (not Linux)
            return None
        try:
            data, sender = s.recvfrom(_REPLY_BYTES)
        except BlockingIOError:
            continue
        except OSError:
            return None
        if isinstance(sender, bytes):
            sender = sender.decode("utf-8", "replace")
        if sender != path:
            continue  # only gpufeed's own socket answers (an abstract address is anyone's to write)
        try:
            reply = json.loads(data.decode("utf-8"))
        except ValueError:
            continue
        if isinstance(reply, dict) and reply.get("q") == nonce:
            return reply


_probe = _Probe()


def enabled():
    """True when running under gpufeed (``GPUFEED_STEP_SOCKET`` is set)."""
    return bool(os.environ.get(ENV_VAR))


def figures(timeout=0.05):
    """gpufeed's figures for this rank since its previous call, as a dict, or None.

    Keys (each absent when gpufeed has not measured it): ``steps``, ``steps_per_s``,
    ``data_wait_pct``, ``samples_per_s`` (from this rank's step markers), ``gpu_busy_pct`` and
    ``gpus`` (``{"0": busy %}``), ``phases`` (``{"forward": %, ...}``: this process's training
    thread, from its Python stacks), ``window_s``, ``gpufeed`` (its version). Waits at most
    ``timeout`` seconds; call it at a logging cadence, not every step. None when not under gpufeed,
    or when it does not answer (after two unanswered calls it is not asked again).
    """
    if not os.environ.get(ENV_VAR):
        return None
    return _probe.query(timeout)


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
