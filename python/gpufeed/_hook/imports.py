"""The one import hook of the job's side: ``ImportHook(names, after)`` calls ``after(name,
module)`` once each watched module has been executed, whoever imports it, without importing it
itself. Used by the job's start-up (``site``) and by ``gpufeed.profile()`` (``gpufeed._inproc``),
which takes it off again (``remove``)."""

import sys


class _Loader(object):
    """Wraps a watched module's loader: the module runs, then the callback."""

    def __init__(self, loader, name, after):
        self._loader = loader
        self._name = name
        self._after = after

    def __getattr__(self, attr):
        return getattr(self._loader, attr)

    def create_module(self, spec):
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create else None

    def exec_module(self, module):
        # The module sees its real loader; only this call is wrapped.
        try:
            module.__loader__ = self._loader
            if getattr(module, "__spec__", None) is not None:
                module.__spec__.loader = self._loader
        except Exception:
            pass
        self._loader.exec_module(module)
        try:
            self._after(self._name, module)
        except Exception:
            pass  # the callbacks report their own failures; never raise into the job


class ImportHook(object):
    """A meta path finder that finds nothing itself: for a watched name it asks the finders
    after it and wraps the loader they give."""

    def __init__(self, names, after):
        self.names = tuple(names)
        self.after = after
        self._busy = set()

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.names or fullname in self._busy:
            return None
        self._busy.add(fullname)
        try:
            for finder in sys.meta_path:
                if finder is self:
                    continue
                find = getattr(finder, "find_spec", None)
                spec = find(fullname, path, target) if find else None
                if spec is not None:
                    break
            else:
                return None
            if spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return spec
            spec.loader = _Loader(spec.loader, fullname, self.after)
            return spec
        finally:
            self._busy.discard(fullname)

    def install(self):
        """Puts the hook first on ``sys.meta_path``, and calls back at once for the watched
        modules already imported, in the order watched."""
        sys.meta_path.insert(0, self)
        for name in self.names:
            if name in sys.modules:
                try:
                    self.after(name, sys.modules[name])
                except Exception:
                    pass
        return self

    def remove(self):
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
