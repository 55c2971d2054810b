"""Hand-written Hugging Face accelerate loops::

    from gpufeed.accelerate import wrap

    dataloader = accelerator.prepare(dataloader)
    for batch in wrap(dataloader, accelerator):    # one marker per batch, with its data wait
        with accelerator.accumulate(model):
            ...

Needs no import of accelerate: ``accelerator`` is only asked ``is_local_main_process`` so that
one process per node sends. With an ``accelerator``, ``gpufeed/data_wait_pct``,
``gpufeed/steps_per_s`` and ``gpufeed/samples_per_s`` over the last ``log_every`` batches go to
``accelerator.log`` (its trackers: TensorBoard, W&B, MLflow, ... from ``init_trackers``), with or
without gpufeed (under ``gpufeed run``: gpufeed's own figures where it answers, with
``gpufeed/gpu<N>/busy_pct``); ``log=False`` turns that off. Without an accelerator and not under gpufeed the
loader is returned unchanged.
"""

import time

import gpufeed_probe as _probe
from gpufeed._figures import Figures
from gpufeed._steps import batch_size

__all__ = ["wrap"]


def wrap(dataloader, accelerator=None, items=None, log=True, log_every=50):
    """Iterates ``dataloader`` timing each batch fetch; a step marker per batch.

    ``items``: samples per batch (an int or a function of the batch); guessed from the batch
    when not given. ``log``: send the figures to ``accelerator.log`` every ``log_every`` batches
    (and once at the end of the loader), at the step of the batches seen so far.
    """
    if accelerator is not None and not getattr(accelerator, "is_local_main_process", True):
        return dataloader
    count = batch_size if items is None else items
    if accelerator is None or not log:
        return _probe.wrap(dataloader, items=count)
    return _logged(dataloader, accelerator, count, max(1, int(log_every)))


def _items(count, batch):
    if callable(count):
        try:
            return count(batch)
        except Exception:  # counting must never break training
            return None
    return count


def _logged(loader, accelerator, count, log_every):
    """As gpufeed_probe.wrap (a marker when the loop asks for the next batch), plus the figures."""
    figures = Figures(whole_step=False)
    seen = 0

    def log():
        values = figures.report()
        if values and getattr(accelerator, "trackers", None):
            accelerator.log(values, step=seen)

    it = iter(loader)
    previous, wait = None, None
    figures.idle()
    while True:
        t0 = time.monotonic_ns()
        if seen:
            # The loop came back for more: the previous step ended now.
            n = _items(count, previous)
            _probe.step(items=n, wait_ns=wait)
            figures.step(wait_ns=wait, items=n, now_ns=t0)
            if figures.steps >= log_every:
                log()
            t0 = time.monotonic_ns()
        try:
            batch = next(it)
        except StopIteration:
            if figures.steps:
                log()
            return
        wait = time.monotonic_ns() - t0
        seen += 1
        previous = batch
        yield batch
