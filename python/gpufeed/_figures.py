"""The figures the framework hooks log through the framework's own logger (TensorBoard, W&B,
MLflow, ... whatever it is set up with): per logging window, the share of the steps' time spent
waiting for data, steps/s, samples/s and, where the framework has hooks for them, the share of
each phase of the step.

Under ``gpufeed run`` (``GPUFEED_STEP_SOCKET`` set) :meth:`Figures.report` asks gpufeed for its own
figures of the window (the reply direction of docs/step-protocol.md) and each figure gpufeed has
wins, with GPU busy per GPU added; otherwise, or when gpufeed does not answer in time, they come
from the hook's own timing.

Names are those of ``gpufeed run --tensorboard`` (docs/integrations.md): ``gpufeed/data_wait_pct``,
``gpufeed/steps_per_s``, ``gpufeed/samples_per_s``, ``gpufeed/phase/<phase>_pct``,
``gpufeed/gpu<N>/busy_pct``. A figure that was not measured in the window is left out, never
logged as 0.
"""

import time

import gpufeed_probe as _probe

PREFIX = "gpufeed/"


class Figures:
    """Sums over the steps since the last :meth:`take`.

    A step runs from the previous step's end (or the last :meth:`idle`: validation, checkpointing
    and logging are not the loop) to its own end; steps after an idle spell are timed from it.
    """

    # Where the last report's figures came from: "gpufeed" (its reply) or "hook" (own timing).
    source = None

    def __init__(self, whole_step=True):
        # whole_step: the phases given cover the whole step but for the data wait, so the rest is
        # "other"; False when the framework's hooks time only some phases (the rest is unknown).
        self.whole_step = whole_step
        self._last_ns = None
        self._clear()

    def _clear(self):
        self.steps = 0
        self._span_ns = 0
        self._wait_ns = 0
        self._wait_span_ns = 0
        self._items = 0
        self._items_span_ns = 0
        self._phases = {}

    def idle(self, now_ns=None):
        """Other work ended now: the next step is timed from here."""
        self._last_ns = time.monotonic_ns() if now_ns is None else now_ns

    def phase(self, name, ns):
        """Adds ``ns`` nanoseconds of the current step to phase ``name`` (forward, backward, ...)."""
        if ns is not None and ns >= 0:
            self._phases[name] = self._phases.get(name, 0) + ns

    def step(self, wait_ns=None, items=None, now_ns=None):
        """A step ended now; ``wait_ns``: its wait for data, ``items``: its samples (or None)."""
        now = time.monotonic_ns() if now_ns is None else now_ns
        if self._last_ns is not None and now > self._last_ns:
            span = now - self._last_ns
            self.steps += 1
            self._span_ns += span
            if wait_ns is not None:
                self._wait_ns += min(wait_ns, span)
                self._wait_span_ns += span
            if items is not None:
                self._items += items
                self._items_span_ns += span
        else:
            self._phases.clear()  # phases of a step that is not timed
        self._last_ns = now

    def take(self):
        """The figures of the window as ``{name: float}``, and a new window."""
        out = {}
        if self.steps and self._span_ns > 0:
            out[PREFIX + "steps_per_s"] = self.steps * 1e9 / self._span_ns
            if self._wait_span_ns:
                out[PREFIX + "data_wait_pct"] = 100.0 * self._wait_ns / self._wait_span_ns
            if self._items_span_ns:
                out[PREFIX + "samples_per_s"] = self._items * 1e9 / self._items_span_ns
            if self._phases:
                known = sum(self._phases.values())
                waited = self._wait_ns if self._wait_span_ns == self._span_ns else 0
                phases = dict(self._phases)
                if waited:
                    phases["data_wait"] = phases.get("data_wait", 0) + waited
                if self.whole_step:
                    rest = max(0, self._span_ns - known - waited)
                    phases["other"] = phases.get("other", 0) + rest
                for name, ns in sorted(phases.items()):
                    out[PREFIX + "phase/%s_pct" % name] = 100.0 * ns / self._span_ns
        self._clear()
        return out

    def report(self, timeout=0.05):
        """:meth:`take`, with gpufeed's figures where it answers (see :func:`merge`)."""
        own = self.take()
        reply = _probe.figures(timeout)
        self.source = "hook" if reply is None else "gpufeed"
        return merge(own, reply)


def _number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x == x  # not NaN


def merge(own, reply):
    """The hook's figures ``own`` with gpufeed's ``reply`` (gpufeed_probe.figures) laid over them.

    Steps/s, data wait and samples/s: gpufeed's when its reply has them (from the same markers,
    timed on receipt). Phases: gpufeed's (the Python stacks of this process's training thread)
    replace the hook's when it has them. GPU busy: gpufeed's only (the hook cannot see the GPU).
    """
    if not isinstance(reply, dict):
        return own
    out = dict(own)
    for key in ("steps_per_s", "data_wait_pct", "samples_per_s"):
        if _number(reply.get(key)):
            out[PREFIX + key] = float(reply[key])
    phases = reply.get("phases")
    if isinstance(phases, dict) and phases:
        for k in [k for k in out if k.startswith(PREFIX + "phase/")]:
            del out[k]
        for name, pct in phases.items():
            if _number(pct) and str(name).replace("_", "").isalnum():
                out[PREFIX + "phase/%s_pct" % name] = float(pct)
    gpus = reply.get("gpus")
    if isinstance(gpus, dict):
        for index, pct in gpus.items():
            if _number(pct) and str(index).isdigit():
                out[PREFIX + "gpu%s/busy_pct" % index] = float(pct)
    return out
