# Written by gpufeed (--dataloader / --torch) into a private directory put first on PYTHONPATH.
#
# It changes nothing at start: it installs an import hook that, when the job itself imports torch,
# overrides DataLoader arguments and global torch switches, and reports each override (with the
# file:line that created the DataLoader) to gpufeed as NDJSON lines in this directory. It never
# imports torch itself. Then it runs the sitecustomize that was there before, if any.
# Stdlib only; every failure is reported, never raised into the job.

import os as _os
import sys as _sys


def _gpufeed_install():
    import json
    import time

    here = _os.path.dirname(_os.path.abspath(__file__))
    report_path = _os.path.join(here, "report.ndjson")

    def emit(event, **fields):
        fields["event"] = event
        fields["pid"] = _os.getpid()
        fields["t_unix"] = time.time()
        try:
            line = (json.dumps(fields, default=repr) + "\n").encode("utf-8", "replace")
            fd = _os.open(report_path, _os.O_WRONLY | _os.O_APPEND | _os.O_CREAT, 0o600)
            try:
                _os.write(fd, line)
            finally:
                _os.close(fd)
        except Exception:
            pass

    try:
        with open(_os.path.join(here, "config.json")) as f:
            cfg = json.load(f)
    except Exception as e:
        emit("error", detail="cannot read gpufeed's config: %r" % (e,))
        return
    loader_cfg = cfg.get("dataloader") or {}
    torch_cfg = cfg.get("torch") or {}
    emit("python", argv=list(getattr(_sys, "argv", []) or [])[:8], executable=_sys.executable)
    if not loader_cfg and not torch_cfg:
        return

    def site_of(obj):
        """file:line of the code that created obj: the first frame outside obj's own __init__s."""
        f = _sys._getframe(2)
        while f is not None and f.f_locals.get("self") is obj:
            f = f.f_back
        if f is None:
            return None
        path = f.f_code.co_filename
        try:
            rel = _os.path.relpath(path)
            if not rel.startswith(".."):
                path = rel
        except ValueError:
            pass
        return "%s:%d" % (path, f.f_lineno)

    def is_iterable_dataset(ds):
        for k in type(ds).__mro__:
            if k.__name__ == "IterableDataset" and k.__module__.startswith("torch.utils.data"):
                return True
        return False

    def patch_dataloader(cls):
        if getattr(cls.__init__, "_gpufeed_patched", False):
            return
        import functools
        import inspect

        orig_init = cls.__init__
        try:
            sig = inspect.signature(orig_init)
        except (TypeError, ValueError) as e:
            emit("note", target="DataLoader", detail="cannot read DataLoader's arguments: %r" % (e,))
            return
        params = sig.parameters

        def default(name):
            p = params.get(name)
            return None if p is None or p.default is inspect.Parameter.empty else p.default

        def decide(bound, obj, site):
            """Changes bound.arguments in place; returns the events to report."""
            events = []
            a = bound.arguments
            unknown = [k for k in loader_cfg if k not in params]
            for k in unknown:
                events.append(("skip", dict(key=k, value=loader_cfg[k],
                               reason="this torch's DataLoader has no %s argument" % k)))
            want = dict((k, v) for k, v in loader_cfg.items() if k in params)
            ds = a.get("dataset")
            iterable = is_iterable_dataset(ds)
            if "batch_size" in want:
                why = None
                if a.get("batch_sampler") is not None:
                    why = "it has a batch_sampler, which rules out batch_size"
                elif iterable:
                    why = "its dataset is an IterableDataset, which may batch by itself"
                elif a.get("batch_size", default("batch_size")) is None:
                    why = "it was created with batch_size=None (batching turned off)"
                if why:
                    events.append(("skip", dict(key="batch_size", value=want.pop("batch_size"),
                                   reason="left alone: " + why)))
            for k, v in want.items():
                was = a.get(k, default(k))
                if isinstance(v, dict):
                    # gpufeed tune's first batch trial: a multiple of the job's own batch size
                    if not isinstance(was, int) or isinstance(was, bool) or was < 1:
                        events.append(("skip", dict(key=k, value=v, reason=(
                            "left alone: its %s is %r, not a whole number to scale" % (k, was)))))
                        continue
                    v = max(1, int(was * v.get("times", 1)))
                a[k] = v
                events.append(("override", dict(key=k, value=v, original=was)))
            workers = a.get("num_workers", default("num_workers")) or 0
            # PyTorch's rules: prefetch_factor and persistent_workers only with worker processes.
            if workers == 0:
                for k, off in (("prefetch_factor", default("prefetch_factor")),
                               ("persistent_workers", False)):
                    if k not in params or a.get(k, default(k)) in (off, None, False):
                        continue
                    if k in want:
                        events = [e for e in events if not (e[0] == "override" and e[1]["key"] == k)]
                        events.append(("skip", dict(key=k, value=want[k],
                                       reason="left at its default: PyTorch allows %s only with num_workers > 0" % k)))
                    else:
                        events.append(("override", dict(key=k, value=off, original=a.get(k),
                                       reason="reset: PyTorch allows %s only with num_workers > 0" % k)))
                    a[k] = off
            elif iterable and "num_workers" in want and want["num_workers"] > 0:
                events.append(("note", dict(key="num_workers", detail=(
                    "its dataset is an IterableDataset: each worker iterates all of it unless it "
                    "shards with torch.utils.data.get_worker_info()"))))
            return events

        @functools.wraps(orig_init)
        def __init__(self, *args, **kwargs):
            events = []
            site = None
            new_args, new_kwargs = args, kwargs
            try:
                site = site_of(self)
                bound = sig.bind(self, *args, **kwargs)
                events = decide(bound, self, site)
                new_args, new_kwargs = bound.args[1:], bound.kwargs
            except Exception as e:
                events = [("error", dict(detail="DataLoader left unchanged: %r" % (e,)))]
                new_args, new_kwargs = args, kwargs
            for kind, fields in events:
                emit(kind, target="DataLoader", site=site, **fields)
            return orig_init(self, *new_args, **new_kwargs)

        __init__._gpufeed_patched = True
        cls.__init__ = __init__
        emit("patched", target="DataLoader", module=cls.__module__)

    def apply_torch(torch):
        def ov(target, key, value, original):
            emit("override", target=target, key=key, value=value, original=original, site=None)

        applied = []
        for key, value in torch_cfg.items():
            try:
                if key == "matmul_precision":
                    if not hasattr(torch, "set_float32_matmul_precision"):
                        emit("skip", target="torch", key=key, value=value,
                             reason="this torch has no set_float32_matmul_precision (PyTorch 1.12+)")
                        continue
                    get = getattr(torch, "get_float32_matmul_precision", None)
                    was = get() if get else None
                    torch.set_float32_matmul_precision(value)
                    ov("torch", "matmul_precision", value, was)
                    applied.append((lambda: get() if get else None, value, "torch", key))
                elif key == "cudnn_benchmark":
                    m = torch.backends.cudnn
                    was = getattr(m, "benchmark", None)
                    m.benchmark = bool(value)
                    ov("torch.backends.cudnn", "benchmark", bool(value), was)
                    applied.append((lambda m=m: getattr(m, "benchmark", None), bool(value),
                                    "torch.backends.cudnn", "benchmark"))
                elif key == "allow_tf32":
                    for target, m in (("torch.backends.cuda.matmul", torch.backends.cuda.matmul),
                                      ("torch.backends.cudnn", torch.backends.cudnn)):
                        was = getattr(m, "allow_tf32", None)
                        m.allow_tf32 = bool(value)
                        ov(target, "allow_tf32", bool(value), was)
                        applied.append((lambda m=m: getattr(m, "allow_tf32", None), bool(value),
                                        target, "allow_tf32"))
                else:
                    emit("skip", target="torch", key=key, value=value, reason="unknown switch")
            except Exception as e:
                emit("skip", target="torch", key=key, value=value,
                     reason="this torch refused it: %r" % (e,))
        if applied:
            import atexit

            main_pid = _os.getpid()

            def check():
                if _os.getpid() != main_pid:
                    return
                for get, value, target, key in applied:
                    try:
                        now = get()
                    except Exception:
                        continue
                    if now is not None and now != value:
                        emit("reverted", target=target, key=key, value=value, now=now)

            atexit.register(check)

    def after_import(name, module):
        try:
            if name == "torch":
                emit("torch", version=str(getattr(module, "__version__", "")))
                if torch_cfg:
                    apply_torch(module)
            if loader_cfg:
                cls = getattr(module, "DataLoader", None)
                if isinstance(cls, type):
                    patch_dataloader(cls)
        except Exception as e:
            emit("error", detail="while patching %s: %r" % (name, e))

    watched = ("torch", "torch.utils.data.dataloader", "torch.utils.data")

    class _Loader(object):
        def __init__(self, loader, name):
            self._loader = loader
            self._name = name

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
            after_import(self._name, module)

    class _Finder(object):
        def __init__(self):
            self._busy = set()

        def find_spec(self, fullname, path=None, target=None):
            if fullname not in watched or fullname in self._busy:
                return None
            self._busy.add(fullname)
            try:
                for finder in _sys.meta_path:
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
                spec.loader = _Loader(spec.loader, fullname)
                return spec
            finally:
                self._busy.discard(fullname)

    _sys.meta_path.insert(0, _Finder())
    # torch imported before this ran (it should not be): patch what is there now.
    for name in watched:
        if name in _sys.modules:
            after_import(name, _sys.modules[name])


def _gpufeed_chain():
    """Runs the sitecustomize this one shadows, as Python would have without gpufeed."""
    import importlib

    here = _os.path.dirname(_os.path.abspath(__file__))
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


try:
    _gpufeed_install()
except Exception:
    pass
_gpufeed_chain()
