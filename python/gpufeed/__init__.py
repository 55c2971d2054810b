"""gpufeed's Python side: step markers and data-wait times for the ``gpufeed`` command.

``pip install .`` in a checkout (``pip install gpufeed`` once published) installs the
``gpufeed`` command (also ``python -m gpufeed``) and this package. Under ``gpufeed run/sweep/batch-size/watch`` the job gets ``GPUFEED_STEP_SOCKET``; the
functions here send one datagram per training step to it (docs/step-protocol.md). Without it
they are no-ops, so the calls can stay in the training script.

    import gpufeed

    for batch in gpufeed.wrap(loader, items=len):   # times each next(): the data wait
        train_step(batch)

Framework hooks (imported only when used, so none of these frameworks is a dependency):

* ``gpufeed.lightning.GpufeedCallback``             -- ``Trainer(callbacks=[GpufeedCallback()])``
* ``gpufeed.transformers.GpufeedTrainerCallback``   -- ``Trainer(..., callbacks=[...])``
* ``gpufeed.accelerate.wrap(loader, accelerator)``  -- in a hand-written accelerate loop

In a notebook or script, ``with gpufeed.profile() as p:`` records this very process and fills
``p.verdict``, ``p.findings``, ``p.report``; ``%load_ext gpufeed`` gives ``%%gpufeed`` on a cell
(docs/notebooks.md).
"""

from gpufeed_probe import ENV_VAR, enabled, step, wrap

from gpufeed._profile import GpufeedError, Profile, profile

__all__ = ["ENV_VAR", "GpufeedError", "Profile", "enabled", "profile", "step", "wrap",
           "__version__"]


def load_ipython_extension(ipython):
    """``%load_ext gpufeed``: the ``%%gpufeed`` cell magic and ``%gpufeed start|stop``."""
    from gpufeed._ipython import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython):
    from gpufeed._ipython import unload_ipython_extension as unload

    unload(ipython)


def _version():
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # Python < 3.8
        return "unknown"
    try:
        return version("gpufeed")
    except PackageNotFoundError:  # imported from a source checkout
        return "unknown"


__version__ = _version()
