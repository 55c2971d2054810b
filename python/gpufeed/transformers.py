"""Hugging Face transformers: ``Trainer(..., callbacks=[GpufeedTrainerCallback()])``.

Sends one step marker per optimizer step, with the time the Trainer spent fetching that step's
batches and the samples in it, to gpufeed; a no-op when not under gpufeed. Importing this module
needs ``transformers``; ``import gpufeed`` does not.
"""

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

    def __init__(self, items=None):
        self._items = items
        self._timer = StepTimer(items)

    def on_train_begin(self, args, state, control, **kwargs):
        if self._items is None:
            self._timer.items = _samples_per_step(args)
        self._timer.mark_idle()

    def on_epoch_begin(self, args, state, control, **kwargs):
        self._timer.mark_idle()

    def on_step_begin(self, args, state, control, **kwargs):
        if getattr(state, "is_local_process_zero", True):
            self._timer.begin()

    def on_step_end(self, args, state, control, **kwargs):
        if getattr(state, "is_local_process_zero", True):
            self._timer.end()

    # Called after the Trainer logged, evaluated or saved between two steps.
    def on_log(self, args, state, control, **kwargs):
        self._timer.mark_idle()

    def on_evaluate(self, args, state, control, **kwargs):
        self._timer.mark_idle()

    def on_save(self, args, state, control, **kwargs):
        self._timer.mark_idle()
