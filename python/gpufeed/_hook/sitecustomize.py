# Written by gpufeed (--dataloader / --torch, and the DataLoader step markers) as
# `sitecustomize.py` into a private directory put first on the job's PYTHONPATH, beside the
# package `_gpufeed_hook` (python/gpufeed/_hook in gpufeed's source).
#
# It changes nothing at start: it installs an import hook (`_gpufeed_hook.site`) that acts when
# the job itself imports torch, and never imports torch itself. Then it runs the sitecustomize
# that was there before, if any. Stdlib only; every failure is reported, never raised into the
# job. Imported under another name (as gpufeed._hook.sitecustomize) it does nothing.

import os as _os
import sys as _sys


def _gpufeed_chain(here):
    """Runs the sitecustomize this one shadows, as Python would have without gpufeed."""
    import importlib

    ours = _sys.modules.pop("sitecustomize", None)
    saved = list(_sys.path)

    def same(p):
        try:
            return _os.path.abspath(p or ".") == here
        except Exception:
            return False

    _sys.path[:] = [p for p in _sys.path if not same(p)]
    chained = None
    try:
        chained = importlib.import_module("sitecustomize")
    except ImportError as e:
        if getattr(e, "name", None) != "sitecustomize":
            raise
    finally:
        # Keep what the other sitecustomize added to sys.path; put our directory back in place.
        for i, p in enumerate(saved):
            if same(p) and p not in _sys.path:
                _sys.path.insert(min(i, len(_sys.path)), p)
        if chained is None and ours is not None:
            _sys.modules["sitecustomize"] = ours


if __name__ == "sitecustomize":
    _here = _os.path.dirname(_os.path.abspath(__file__))
    try:
        from _gpufeed_hook import site as _gpufeed_site

        _gpufeed_site.install(_here)
    except Exception:
        pass
    _gpufeed_chain(_here)
