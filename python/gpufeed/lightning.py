"""PyTorch Lightning: ``Trainer(callbacks=[gpufeed.lightning.GpufeedCallback()])``.

Sends one step marker per training batch, with the time the loop waited for that batch and its
size, to gpufeed (``gpufeed run/sweep/batch-size/watch``); a no-op when not under gpufeed.
Importing this module needs ``lightning`` (or the older ``pytorch_lightning``); ``import gpufeed``
does not.
"""

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
    first tensor when not given. Only local rank 0 sends (one stream per node).
    """

    def __init__(self, items=None):
        super().__init__()
        self._timer = StepTimer(items)

    def _active(self, trainer):
        return getattr(trainer, "local_rank", 0) == 0

    def on_train_start(self, trainer, pl_module):
        self._timer.mark_idle()

    def on_train_epoch_start(self, trainer, pl_module):
        self._timer.mark_idle()

    def on_validation_end(self, trainer, pl_module):
        # Validation inside a training epoch is not the training loop waiting for data.
        self._timer.mark_idle()

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        self._timer.mark_idle()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self._active(trainer):
            self._timer.begin(batch)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self._active(trainer):
            self._timer.end(batch)
