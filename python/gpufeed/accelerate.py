"""Hand-written Hugging Face accelerate loops::

    from gpufeed.accelerate import wrap

    dataloader = accelerator.prepare(dataloader)
    for batch in wrap(dataloader, accelerator):    # one marker per batch, with its data wait
        with accelerator.accumulate(model):
            ...

Needs no import of accelerate: ``accelerator`` is only asked ``is_local_main_process`` so that
one process per node sends. A no-op (the loader is returned unchanged) when not under gpufeed.
"""

import gpufeed_probe as _probe
from gpufeed._steps import batch_size

__all__ = ["wrap"]


def wrap(dataloader, accelerator=None, items=None):
    """Iterates ``dataloader`` timing each batch fetch; a step marker per batch.

    ``items``: samples per batch (an int or a function of the batch); guessed from the batch
    when not given.
    """
    if accelerator is not None and not getattr(accelerator, "is_local_main_process", True):
        return dataloader
    return _probe.wrap(dataloader, items=batch_size if items is None else items)
