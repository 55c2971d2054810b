"""Step markers from torch DataLoaders in this very process, for ``gpufeed.profile()``.

The same timing ``gpufeed run`` injects into a job it starts (``_autosteps.py`` is the very file
``gpufeed`` writes into the job as ``sitecustomize.py``), installed here while a
profile runs and taken off afterwards: DataLoader iterators are as they were, and the optimizer
hook is removed. torch is never imported here; when the block imports it, it is hooked then.
"""

import sys

_WATCHED = "torch"


class _Finder(object):
    """Installs the hook once the block itself imports torch."""

    def __init__(self, steps):
        self.steps = steps
        self.busy = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != _WATCHED or self.busy:
            return None
        self.busy = True
        try:
            import importlib.util

            spec = importlib.util.find_spec(fullname)
        finally:
            self.busy = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        real = spec.loader
        steps = self.steps

        class _Loader(object):
            def create_module(self, spec):
                create = getattr(real, "create_module", None)
                return create(spec) if create else None

            def exec_module(self, module):
                module.__loader__ = real
                if getattr(module, "__spec__", None) is not None:
                    module.__spec__.loader = real
                real.exec_module(module)
                try:
                    steps.hook_now()
                except Exception:
                    pass

        spec.loader = _Loader()
        return spec


def _steps_class():
    from gpufeed import _autosteps

    class Steps(_autosteps._AutoSteps):
        def __init__(self, path):
            self.events = []
            _autosteps._AutoSteps.__init__(self, self._emit)
            self.path = path
            self.saved = None
            self.finder = None

        def _emit(self, event, **fields):
            if len(self.events) < 256:
                fields["event"] = event
                self.events.append(fields)

        def hook_now(self):
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
                try:
                    sys.meta_path.remove(self.finder)
                except ValueError:
                    pass
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

    return Steps


def install(path):
    """Times DataLoader batches in this process as step markers to ``path``; returns an object
    whose ``uninstall()`` takes it all off."""
    steps = _steps_class()(path)
    if "torch.utils.data.dataloader" in sys.modules and "torch" in sys.modules:
        steps.hook_now()
    else:
        steps.finder = _Finder(steps)
        sys.meta_path.insert(0, steps.finder)
    return steps
