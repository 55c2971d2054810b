"""Step markers from torch DataLoaders in this very process, for ``gpufeed.profile()``.

The same timing ``gpufeed run`` injects into a job it starts (``gpufeed._hook.steps``, which
``gpufeed`` writes into the job beside its ``sitecustomize.py``), installed here while a
profile runs and taken off afterwards: DataLoader iterators are as they were, and the optimizer
hook is removed. torch is never imported here; when the block imports it, it is hooked then,
through the job side's one import hook (``gpufeed._hook.imports``).
"""

import sys

from gpufeed._hook import imports, steps


class Steps(steps.AutoSteps):
    def __init__(self, path):
        self.events = []
        steps.AutoSteps.__init__(self, self._emit)
        self.path = path
        self.saved = None
        self.finder = None

    def _emit(self, event, **fields):
        if len(self.events) < 256:
            fields["event"] = event
            self.events.append(fields)

    def hook_now(self, *_imported):
        mod = sys.modules.get("torch.utils.data.dataloader")
        torch = sys.modules.get("torch")
        if mod is None or torch is None or self.installed:
            return
        base = getattr(mod, "_BaseDataLoaderIter", None)
        if not isinstance(base, type):
            return
        self.saved = (base, base.__dict__.get("__init__"), base.__dict__.get("__next__"))
        self.install("torch", torch)
        self.install("torch.utils.data.dataloader", mod)

    def uninstall(self):
        if self.finder is not None:
            self.finder.remove()
            self.finder = None
        if self.saved is not None and self.installed:
            base, init, nxt = self.saved
            if init is not None:
                base.__init__ = init
            if nxt is not None:
                base.__next__ = nxt
            self.installed = False
        self.saved = None
        try:
            self.flush()  # markers still queued go out before the recorder stops
        except Exception:
            pass
        if self.opt_handle is not None:
            try:
                self.opt_handle.remove()
            except Exception:
                pass
            self.opt_handle = None
            self.opt_hook = False
        self.path = None  # a loader iterator made inside the block sends nothing more
        if self.sock is not None:
            try:
                self.sock.close()
            except Exception:
                pass
            self.sock = None


def install(path):
    """Times DataLoader batches in this process as step markers to ``path``; returns an object
    whose ``uninstall()`` takes it all off."""
    s = Steps(path)
    if "torch.utils.data.dataloader" in sys.modules and "torch" in sys.modules:
        s.hook_now()
    else:
        s.finder = imports.ImportHook(("torch",), s.hook_now).install()
    return s
