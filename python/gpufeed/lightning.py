"""PyTorch Lightning: ``Trainer(callbacks=[gpufeed.lightning.GpufeedCallback()])``.

Sends one step marker per training batch, with the time the loop waited for that batch and its
size, to gpufeed (``gpufeed run/sweep/batch-size/watch``); a no-op when not under gpufeed. And,
with or without gpufeed, logs ``gpufeed/data_wait_pct``, ``gpufeed/steps_per_s``,
``gpufeed/samples_per_s`` and the step's phases (``gpufeed/phase/<phase>_pct``: data_wait,
forward, backward, optimizer, other) through the trainer's loggers every ``log_every_n_steps``
batches (``log=False`` turns that off). Under ``gpufeed run`` the figures are gpufeed's own where
it answers (and ``gpufeed/gpu<N>/busy_pct`` is added), else the callback's timing.
Importing this module needs ``lightning`` (or the older ``pytorch_lightning``); ``import gpufeed``
does not.
"""

import time

from gpufeed._figures import Figures
from gpufeed._steps import StepTimer

try:
    from lightning.pytorch.callbacks import Callback as _Callback
except ImportError:  # the older package name
    try:
        from pytorch_lightning.callbacks import Callback as _Callback
    except ImportError as e:
        raise ImportError(
            "gpufeed.lightning needs PyTorch Lightning: pip install lightning "
            "(or pytorch-lightning); gpufeed.step()/gpufeed.wrap() work without it"
        ) from e

__all__ = ["GpufeedCallback"]


class GpufeedCallback(_Callback):
    """Step markers and data-wait times from the Lightning training loop.

    ``items``: samples per batch (an int or a function of the batch); guessed from the batch's
    first tensor when not given. Only local rank 0 sends (one stream per node). ``log``: log the
    figures through ``trainer.loggers`` at the trainer's logging cadence (TensorBoard, MLflow,
    W&B, CSV: whichever loggers the Trainer has).
    """

    def __init__(self, items=None, log=True):
        super().__init__()
        self._timer = StepTimer(items)
        self._figures = Figures() if log else None
        self._t = {}

    def _active(self, trainer):
        return getattr(trainer, "local_rank", 0) == 0

    def on_train_start(self, trainer, pl_module):
        self._timer.mark_idle()
        self._idle()

    def on_train_epoch_start(self, trainer, pl_module):
        self._timer.mark_idle()
        self._idle()

    def on_validation_end(self, trainer, pl_module):
        # Validation inside a training epoch is not the training loop waiting for data.
        self._timer.mark_idle()
        self._idle()

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        self._timer.mark_idle()
        self._idle()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self._active(trainer):
            self._timer.begin(batch)
            self._t = {"start": time.monotonic_ns()}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self._active(trainer):
            log = self._figures_step(trainer, batch)
            self._timer.end(batch)
            if log:  # after the marker: gpufeed's figures then include this step
                self._log(trainer)

    # The step's phases, from the hooks Lightning calls inside it (automatic optimization: the
    # closure runs training_step and backward, then on_before_optimizer_step, then the step).
    def on_before_backward(self, trainer, pl_module, loss):
        self._mark("forward", "start", "backward_start")

    def on_after_backward(self, trainer, pl_module):
        self._mark("backward", "backward_start", "backward_end")

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self._t["optimizer_start"] = time.monotonic_ns()

    def _mark(self, phase, since, now_key):
        now = time.monotonic_ns()
        if self._figures is not None and since in self._t:
            self._figures.phase(phase, now - self._t.pop(since))
        self._t[now_key] = now

    def _idle(self):
        if self._figures is not None:
            self._figures.idle()

    def _figures_step(self, trainer, batch):
        """Adds the step to the window; True when the window is due to be logged."""
        f = self._figures
        if f is None:
            return False
        if "optimizer_start" in self._t:
            f.phase("optimizer", time.monotonic_ns() - self._t.pop("optimizer_start"))
        count = self._timer.count if self._timer.count is not None else self._timer._count(batch)
        f.step(wait_ns=self._timer.wait_ns, items=count)
        return f.steps >= max(1, int(getattr(trainer, "log_every_n_steps", 50) or 50))

    def on_train_end(self, trainer, pl_module):
        # The last window, shorter than the cadence.
        if self._figures is not None and self._figures.steps and self._active(trainer):
            self._log(trainer)

    def _log(self, trainer):
        figures = self._figures.report()
        if figures:
            for logger in getattr(trainer, "loggers", None) or []:
                logger.log_metrics(figures, step=trainer.global_step)
