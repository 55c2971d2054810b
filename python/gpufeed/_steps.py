"""Shared by the framework hooks: a step timer that turns "step began" / "step ended" calls into
step markers carrying the data wait (docs/step-protocol.md), and a batch-size guesser."""

import time

import gpufeed_probe as _probe

# The batch-size guess of gpufeed's DataLoader hook, from the one file that holds it.
from gpufeed._hook.steps import batch_size


class StepTimer:
    """``begin()`` when a step starts (its batch is in hand), ``end()`` when it is done.

    The wait of a step is the time from the previous step's end (or the last :meth:`mark_idle`:
    start of training, end of a validation or checkpoint) to its begin: the loop was fetching its
    input. ``items``: an int, a function of the batch, or None to guess from the batch.
    """

    def __init__(self, items=None):
        self.items = items
        self.last_end_ns = None
        self.wait_ns = None
        self.count = None

    def mark_idle(self):
        """Other work (validation, checkpointing, logging) ended now: not counted as data wait."""
        self.last_end_ns = time.monotonic_ns()

    def begin(self, batch=None):
        now = time.monotonic_ns()
        self.wait_ns = None if self.last_end_ns is None else max(0, now - self.last_end_ns)
        self.count = self._count(batch)

    def end(self, batch=None):
        if batch is not None and self.count is None:
            self.count = self._count(batch)
        sent = _probe.step(items=self.count, wait_ns=self.wait_ns)
        self.wait_ns = None
        self.count = None
        self.last_end_ns = time.monotonic_ns()
        return sent

    def _count(self, batch):
        items = self.items
        if callable(items):
            try:
                return items(batch)
            except Exception:  # counting must never break training
                return None
        if items is not None:
            return items
        return None if batch is None else batch_size(batch)
