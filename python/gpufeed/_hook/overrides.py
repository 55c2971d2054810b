"""``--dataloader`` and ``--torch``: the one patch of ``DataLoader.__init__`` (every loader's
arguments overridden within PyTorch's rules, and the file:line that created it kept for the
step markers and the pipeline checks), and torch's global switches. Each override, skip and
note is reported through ``emit``; nothing is raised into the job."""

import os
import sys


def site_of(obj):
    """file:line of the code that created obj: the first frame outside obj's own __init__s."""
    f = sys._getframe(2)
    while f is not None and f.f_locals.get("self") is obj:
        f = f.f_back
    if f is None:
        return None
    path = f.f_code.co_filename
    try:
        rel = os.path.relpath(path)
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


def decide(loader_cfg, params, bound):
    """Changes ``bound.arguments`` (a DataLoader's) in place to the wanted values that PyTorch
    allows; returns the events to report as ``(kind, fields)``."""
    import inspect

    def default(name):
        p = params.get(name)
        return None if p is None or p.default is inspect.Parameter.empty else p.default

    events = []
    a = bound.arguments
    for k in loader_cfg:
        if k not in params:
            events.append(("skip", dict(key=k, value=loader_cfg[k],
                           reason="this torch's DataLoader has no %s argument" % k)))
    want = dict((k, v) for k, v in loader_cfg.items() if k in params)
    iterable = is_iterable_dataset(a.get("dataset"))
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
                               reason="left at its default: PyTorch allows %s only with "
                                      "num_workers > 0" % k)))
            else:
                events.append(("override", dict(key=k, value=off, original=a.get(k),
                               reason="reset: PyTorch allows %s only with num_workers > 0" % k)))
            a[k] = off
    elif iterable and "num_workers" in want and want["num_workers"] > 0:
        events.append(("note", dict(key="num_workers", detail=(
            "its dataset is an IterableDataset: each worker iterates all of it unless it "
            "shards with torch.utils.data.get_worker_info()"))))
    return events


def patch_dataloader(cls, loader_cfg, emit, created):
    """Wraps ``cls.__init__`` (torch's DataLoader) once: each new loader keeps the file:line that
    created it (``_gpufeed_site``), gets ``loader_cfg``'s values where PyTorch allows them, and
    is handed to ``created(loader, site)`` (the pipeline checks) once built."""
    if getattr(cls.__init__, "_gpufeed_patched", False):
        return
    import functools
    import inspect

    orig_init = cls.__init__
    sig = None
    if loader_cfg:
        try:
            sig = inspect.signature(orig_init)
        except (TypeError, ValueError) as e:
            emit("note", target="DataLoader",
                 detail="cannot read DataLoader's arguments: %r" % (e,))

    @functools.wraps(orig_init)
    def __init__(self, *args, **kwargs):
        events = []
        site = None
        new_args, new_kwargs = args, kwargs
        try:
            site = site_of(self)
            if sig is not None:
                bound = sig.bind(self, *args, **kwargs)
                events = decide(loader_cfg, sig.parameters, bound)
                new_args, new_kwargs = bound.args[1:], bound.kwargs
        except Exception as e:
            events = [("error", dict(detail="DataLoader left unchanged: %r" % (e,)))]
            new_args, new_kwargs = args, kwargs
        for kind, fields in events:
            emit(kind, target="DataLoader", site=site, **fields)
        try:
            self._gpufeed_site = site
        except Exception:
            pass
        out = orig_init(self, *new_args, **new_kwargs)
        try:
            created(self, site)
        except Exception:
            pass
        return out

    __init__._gpufeed_patched = True
    cls.__init__ = __init__
    if sig is not None:
        emit("patched", target="DataLoader", module=cls.__module__)


def apply_torch(torch, torch_cfg, emit):
    """Sets the ``--torch`` switches on the imported ``torch``; at exit, says which of them the
    job set back."""
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
    if not applied:
        return
    import atexit

    main_pid = os.getpid()

    def check():
        if os.getpid() != main_pid:
            return
        for get, value, target, key in applied:
            try:
                now = get()
            except Exception:
                continue
            if now is not None and now != value:
                emit("reverted", target=target, key=key, value=value, now=now)

    atexit.register(check)
