"""Hugging Face transformers: ``Trainer(..., callbacks=[GpufeedTrainerCallback()])``.

Sends one step marker per optimizer step, with the time the Trainer spent fetching that step's
batches and the samples in it, to gpufeed; a no-op when not under gpufeed. And, with or without
gpufeed, adds ``gpufeed/data_wait_pct``, ``gpufeed/steps_per_s``, ``gpufeed/samples_per_s`` and
``gpufeed/phase/optimizer_pct`` over the steps since the last log to the Trainer's ``logs``, so
every ``report_to`` integration (TensorBoard, W&B, MLflow, ...) gets them (``log=False`` turns
that off). Under ``gpufeed run`` the figures are gpufeed's own where it answers (with
``gpufeed/gpu<N>/busy_pct`` and the phases from the Python stacks), else the callback's timing. Importing this module needs ``transformers``; ``import gpufeed`` does not.
"""

import sys
import time
import warnings

from gpufeed._figures import Figures
from gpufeed._steps import StepTimer

try:
    from transformers import TrainerCallback as _TrainerCallback
except ImportError as e:
    raise ImportError(
        "gpufeed.transformers needs Hugging Face transformers: pip install transformers; "
        "gpufeed.step()/gpufeed.wrap() work without it"
    ) from e

__all__ = ["GpufeedTrainerCallback"]


def _samples_per_step(args):
    per_device = getattr(args, "per_device_train_batch_size", None)
    accumulation = getattr(args, "gradient_accumulation_steps", None) or 1
    if not isinstance(per_device, int) or not isinstance(accumulation, int):
        return None
    return per_device * accumulation


class GpufeedTrainerCallback(_TrainerCallback):
    """Step markers and data-wait times from the Trainer loop.

    One marker per optimizer step (gradient-accumulation micro-batches included in it). ``items``:
    samples per step; by default ``per_device_train_batch_size × gradient_accumulation_steps`` (per
    process). Only the local main process sends (one stream per node). Time spent logging,
    evaluating and saving between steps is not counted as data wait.
    """

    def __init__(self, items=None, log=True):
        self._items = items
        self._timer = StepTimer(items)
        self._figures = Figures(whole_step=False) if log else None
        self._opt_start = None

    def on_init_end(self, args, state, control, **kwargs):
        # The Trainer calls the report_to integrations before the callbacks it was given: to add
        # the figures to `logs` before TensorBoard/MLflow/W&B read them, this callback moves
        # itself first. The handler is the caller (CallbackHandler.call_event).
        if self._figures is None:
            return
        handler = sys._getframe(1).f_locals.get("self")
        callbacks = getattr(handler, "callbacks", None)
        if isinstance(callbacks, list) and self in callbacks:
            callbacks.remove(self)
            callbacks.insert(0, self)
        else:
            warnings.warn("gpufeed: could not put GpufeedTrainerCallback first: the report_to "
                          "integrations may log without the gpufeed figures", stacklevel=2)

    def on_train_begin(self, args, state, control, **kwargs):
        if self._items is None:
            self._timer.items = _samples_per_step(args)
        self._timer.mark_idle()
        self._idle()

    def on_epoch_begin(self, args, state, control, **kwargs):
        self._timer.mark_idle()
        self._idle()

    def on_step_begin(self, args, state, control, **kwargs):
        if getattr(state, "is_local_process_zero", True):
            self._timer.begin()

    def on_step_end(self, args, state, control, **kwargs):
        if getattr(state, "is_local_process_zero", True):
            if self._figures is not None:
                self._figures.step(wait_ns=self._timer.wait_ns, items=self._timer.count)
            self._timer.end()

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self._opt_start = time.monotonic_ns()

    def on_optimizer_step(self, args, state, control, **kwargs):
        if self._figures is not None and self._opt_start is not None:
            self._figures.phase("optimizer", time.monotonic_ns() - self._opt_start)
        self._opt_start = None

    # Called after the Trainer logged, evaluated or saved between two steps.
    def on_log(self, args, state, control, logs=None, **kwargs):
        if self._figures is not None and isinstance(logs, dict) and self._figures.steps:
            # Training logs only (those with a loss); evaluation's own logs are left alone.
            if "loss" in logs or "train_loss" in logs:
                logs.update(self._figures.report())
        self._timer.mark_idle()
        self._idle()

    def on_evaluate(self, args, state, control, **kwargs):
        self._timer.mark_idle()
        self._idle()

    def on_save(self, args, state, control, **kwargs):
        self._timer.mark_idle()
        self._idle()

    def _idle(self):
        if self._figures is not None:
            self._figures.idle()
