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
    auto_steps = bool(cfg.get("steps")) and bool(_os.environ.get("GPUFEED_STEP_SOCKET"))
    emit("python", argv=list(getattr(_sys, "argv", []) or [])[:8], executable=_sys.executable)
    if not loader_cfg and not torch_cfg and not auto_steps:
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
        if not loader_cfg:
            # Step markers only: remember where each loader was created, change nothing.
            @functools.wraps(orig_init)
            def __init__(self, *args, **kwargs):
                site = None
                try:
                    site = self._gpufeed_site = site_of(self)
                except Exception:
                    pass
                out = orig_init(self, *args, **kwargs)
                pipeline.loader_created(self, site)
                return out

            __init__._gpufeed_patched = True
            cls.__init__ = __init__
            return
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
            try:
                self._gpufeed_site = site
            except Exception:
                pass
            out = orig_init(self, *new_args, **new_kwargs)
            pipeline.loader_created(self, site)
            return out

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

    steps = _AutoSteps(emit) if auto_steps else None
    pipeline = _PipelineCheck(emit)

    def after_import(name, module):
        try:
            if name == "torch":
                emit("torch", version=str(getattr(module, "__version__", "")))
                if torch_cfg:
                    apply_torch(module)
            if loader_cfg or steps is not None:
                cls = getattr(module, "DataLoader", None)
                if isinstance(cls, type):
                    patch_dataloader(cls)
            if steps is not None:
                steps.install(name, module)
            if name == "torch":
                pipeline.install()
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


class _AutoSteps(object):
    """Step markers from the DataLoader itself (docs/step-protocol.md), no code change.

    Each ``next()`` on a torch DataLoader iterator is timed: the time it took is the step's data
    wait, and the step ends when the loop asks for the next batch (or another loader's, or the
    epoch ends). Markers go out as ``step <t_ns> <wait_ns> <items> <rank> auto``; gpufeed drops
    them once the job sends markers of its own. The training loader is the one whose batches are
    followed by ``optimizer.step()`` (a global post-hook, torch >= 2.0); a loader iterated with no
    optimizer step (validation, evaluation) sends no markers and is counted apart. Until the first
    optimizer step a loader's markers are held back (at most ``HOLD`` of them); a job that never
    steps an optimizer has every loader marked. After a pause (an epoch's end, validation) an
    ``idle <t_ns> <rank> auto`` line restarts the rank's step clock, so the pause is no step.
    """

    HOLD = 16
    MAX_LOADERS = 64
    MAX_THREADS = 8
    FLUSH_NS = 20_000_000
    FLUSH_LINES = 64  # under 4 KiB, gpufeed's datagram buffer

    def __init__(self, emit):
        import threading
        import time

        # Bound once: these run on every batch.
        self.now_ns = time.monotonic_ns
        self.ident = threading.get_ident
        self.emit = emit
        self.pid = None
        self.sock = None
        self.out = []
        self.last_flush_ns = 0
        self.path = _os.environ.get("GPUFEED_STEP_SOCKET")
        self.rank = None
        # Per thread: (loader state, wait_ns, items, the thread's optimizer steps before) of the
        # step open in that thread; at most MAX_THREADS threads are timed.
        self.pending = {}
        self.first_thread = None
        self.train_thread = None  # the thread whose batches are followed by optimizer steps
        self.opt_steps = {}  # optimizer steps per thread
        self.opt_total = 0
        self.opt_hook = False
        self.opt_handle = None  # torch's handle of the optimizer hook (gpufeed.profile removes it)
        self.opt_thread = None  # the thread whose optimizer steps are counted as steps
        self.opt_marking = False
        self.no_optimizer = False
        self.installed = False
        self.noted = set()
        self.loaders = []  # the first MAX_LOADERS loaders, for their counts at exit

    # -- plumbing ---------------------------------------------------------------------------
    def _reset_after_fork(self):
        pid = _os.getpid()
        if pid != self.pid:
            self.pid = pid
            self.sock = None
            self.out = []
            self.pending = {}
            self.first_thread = None
            self.train_thread = None
            self.opt_thread = None
            self.rank = None
            for var in ("RANK", "LOCAL_RANK"):
                v = _os.environ.get(var, "")
                if v.isdigit():
                    self.rank = int(v)
                    break
            if self.rank is None:
                self.rank = pid

    def _send(self, text):
        """Queues a line; the queue goes out as one datagram every FLUSH_NS or FLUSH_LINES lines
        (a sendto costs microseconds, a fast loop's step may not), and at an epoch's end and
        exit. Markers carry their own time, so a late datagram changes nothing."""
        self.out.append(text)
        now = self.now_ns()
        if len(self.out) >= self.FLUSH_LINES or now - self.last_flush_ns >= self.FLUSH_NS:
            self.flush(now)

    def flush(self, now=None):
        self.last_flush_ns = self.now_ns() if now is None else now
        if not self.out:
            return
        text = "".join(self.out)
        self.out = []
        try:
            if self.sock is None:
                import socket

                s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                s.setblocking(False)
                self.sock = s
            self.sock.sendto(text.encode("ascii"), self.path)
        except Exception:
            pass  # gpufeed gone or its buffer full: the markers are dropped, the job goes on

    def note(self, key, detail, site=None):
        if key in self.noted:
            return
        self.noted.add(key)
        self.emit("note", target="DataLoader", key="steps", site=site, detail=detail)

    # -- installing ---------------------------------------------------------------------------
    def install(self, name, module):
        if name == "torch":
            self._hook_optimizer(module)
            return
        base = getattr(module, "_BaseDataLoaderIter", None)
        if self.installed or not isinstance(base, type):
            return
        orig_next = base.__dict__.get("__next__")
        orig_init = base.__dict__.get("__init__")
        if orig_next is None or orig_init is None:
            self.note("no-next", "this torch's DataLoader iterator has no __next__ to time: no "
                      "step markers from it")
            return
        me = self
        import functools

        @functools.wraps(orig_init)
        def __init__(it, loader, *a, **kw):
            orig_init(it, loader, *a, **kw)
            try:
                ls = getattr(loader, "_gpufeed_steps", None)
                if ls is None:
                    ls = _LoaderState(getattr(loader, "_gpufeed_site", None))
                    loader._gpufeed_steps = ls
                    if len(me.loaders) < me.MAX_LOADERS:
                        me.loaders.append(ls)
                it._gpufeed_steps = ls
            except Exception:
                pass

        @functools.wraps(orig_next)
        def __next__(it):
            ls = it.__dict__.get("_gpufeed_steps")
            if ls is None:
                return orig_next(it)
            t0 = None
            try:
                t0 = me.before(ls)
            except Exception:
                pass
            try:
                batch = orig_next(it)
            except StopIteration:
                if t0 is not None:
                    try:
                        me.epoch_end(ls)
                    except Exception:
                        pass
                raise
            if t0 is not None:
                try:
                    me.after(ls, t0, batch)
                except Exception:
                    pass
            return batch

        base.__init__ = __init__
        base.__next__ = __next__
        self.installed = True
        import atexit

        main_pid = _os.getpid()

        def counts():
            # A loop cut short (break) never reached its epoch's end: give the final counts.
            if _os.getpid() != main_pid:
                return
            self.flush()
            for ls in self.loaders:
                if ls.batches and ls.role:
                    self.emit("loader", target="DataLoader", site=ls.site, role=ls.role,
                              batches=ls.batches, epochs=ls.epochs, rank=self.rank)

        atexit.register(counts)
        self.emit("patched", target="DataLoader", key="steps", module=module.__name__)

    def _hook_optimizer(self, torch):
        if self.opt_hook:
            return
        # torch.optim deletes its `optimizer` name: take the module from sys.modules.
        mod = _sys.modules.get("torch.optim.optimizer")
        reg = getattr(mod, "register_optimizer_step_post_hook", None)
        if reg is None:
            self.note("no-opt-hook", "this torch (before 2.0) cannot tell the training loader from "
                      "a validation loader: every loader's batches are counted as steps")
            self.no_optimizer = True
            return

        def hook(optimizer, args, kwargs):
            tid = self.ident()
            self.opt_steps[tid] = self.opt_steps.get(tid, 0) + 1
            self.opt_total += 1
            try:
                self.optimizer_step(tid)
            except Exception:
                pass

        try:
            self.opt_handle = reg(hook)
            self.opt_hook = True
        except Exception as e:
            self.no_optimizer = True
            self.note("opt-hook", "cannot hook optimizer steps (%r): every loader's batches are "
                      "counted as steps" % (e,))

    # -- timing -------------------------------------------------------------------------------
    def before(self, ls):
        """Called on entry to next(): closes this thread's open step. Returns the time, or None
        when this call is not timed (too many threads)."""
        if self.pid != _os.getpid():
            self._reset_after_fork()
        tid = self.ident()
        if self.first_thread is None:
            self.first_thread = tid
        elif tid not in self.pending and tid != self.first_thread:
            if len(self.pending) >= self.MAX_THREADS:
                return None
            self.note("threads", "DataLoaders are iterated from more than one thread: only the "
                      "training thread's batches (those followed by optimizer steps) are timed",
                      site=ls.site)
        t0 = self.now_ns()
        p = self.pending.pop(tid, None)
        if p is not None:
            self.close(p, t0, tid)
        if (p is None or p[0] is not ls) and ls.role != "other":
            # The rank's step clock restarts here: the time since its last marker was no step.
            ls.out(self, "idle %d %d auto\n" % (t0, self.rank), tid)
        return t0

    def after(self, ls, t0, batch):
        t1 = self.now_ns()
        tid = self.ident()
        self.pending[tid] = (ls, t1 - t0, _batch_size(batch), self.opt_steps.get(tid, 0))

    def optimizer_step(self, tid):
        """A loop no torch DataLoader feeds (a hand-written batch loop, a generator) is still
        stepped by a torch optimizer: each `optimizer.step()` then ends a step (no data wait is
        known). Not while a DataLoader's batch is being trained on, nor once a training loader
        is known: its markers are the steps."""
        if self.pid != _os.getpid():
            self._reset_after_fork()
        if self.train_thread is not None or tid in self.pending:
            return
        if self.opt_thread is None:
            self.opt_thread = tid
        elif self.opt_thread != tid:
            return
        if not self.opt_marking:
            self.opt_marking = True
            self.note("optimizer-steps", "no torch DataLoader feeds the training loop: steps are "
                      "counted at each optimizer.step() (exact steps, no data wait; send markers "
                      "with gpufeed.wrap(batches) for the wait)")
        self._send("step %d - - %d auto\n" % (self.now_ns(), self.rank))

    def may_send(self, tid):
        """Markers go out from one thread only: the training thread once known (the first
        thread to iterate a loader where no optimizer step tells it)."""
        if self.no_optimizer:
            return tid == self.first_thread
        return self.train_thread is None or self.train_thread == tid

    def epoch_end(self, ls):
        self.flush()
        ls.epochs += 1
        self.emit("loader", target="DataLoader", site=ls.site, role=ls.role or "unknown",
                  batches=ls.batches, epochs=ls.epochs, rank=self.rank)

    def close(self, p, t_ns, tid):
        """The step of batch p ended at t_ns in thread tid: send its marker, or hold or count it."""
        ls, wait_ns, items, opt_before = p
        ls.batches += 1
        if self.opt_steps.get(tid, 0) > opt_before:
            if self.no_optimizer == "held":
                # Optimizer steps came after all (a long gradient accumulation): back to telling
                # the training loader from the others.
                self.no_optimizer = False
            if self.train_thread is None:
                self.train_thread = tid
            if ls.role != "train":
                ls.role = "train"
                self.emit("loader", target="DataLoader", site=ls.site, role="train",
                          batches=ls.batches, epochs=ls.epochs, rank=self.rank)
                for line in ls.held:
                    self._send(line)
                ls.held = []
        elif ls.role != "train" and not self.no_optimizer:
            if self.opt_total > 0:
                if ls.role != "other":
                    ls.role = "other"
                    ls.held = []
                    self.emit("loader", target="DataLoader", site=ls.site, role="other",
                              batches=ls.batches, epochs=ls.epochs, rank=self.rank)
                return
            if len(ls.held) >= 2 * self.HOLD:
                # No optimizer step in all this time: not a training loop torch's optimizers
                # drive (inference, a custom optimizer). Every loader is marked from now on,
                # unless an optimizer step comes later.
                self.no_optimizer = "held"
                self.note("no-optimizer", "no torch optimizer step was seen in the first %d "
                          "batches: every loader's batches are counted as steps" % self.HOLD)
                for line in ls.held:
                    self._send(line)
                ls.held = []
        items_s = "-" if items is None else str(items)
        ls.out(self, "step %d %d %s %d auto\n" % (t_ns, wait_ns, items_s, self.rank), tid)


class _PipelineCheck(object):
    """Loader set-ups that load every sample more than once, or leave workers idle, said as
    notes: a webdataset with fewer shards than workers, and an IterableDataset whose workers
    never ask ``torch.utils.data.get_worker_info()`` which worker they are (each then iterates
    the whole stream). Never raises into the job."""

    def __init__(self, emit):
        self.emit = emit
        self.asked = False  # get_worker_info() answered in this (worker) process
        self.checked = False  # this worker process has been checked
        self.noted = set()
        self.installed = False

    def note(self, key, site, detail):
        if (key, site) in self.noted:
            return
        self.noted.add((key, site))
        self.emit("note", target="DataLoader", key=key, site=site, detail=detail)

    def loader_created(self, loader, site):
        try:
            self._loader_created(loader, site)
        except Exception:
            pass

    def _loader_created(self, loader, site):
        workers = getattr(loader, "num_workers", 0) or 0
        ds = getattr(loader, "dataset", None)
        if ds is None or workers < 2:
            return
        if (type(ds).__module__ or "").split(".")[0] == "webdataset":
            shards = None
            for stage in getattr(ds, "pipeline", None) or []:
                if type(stage).__name__ == "SimpleShardList":
                    shards = len(getattr(stage, "urls", None) or [])
                    break
            if shards is not None and shards < workers:
                self.note("shards", site, "the webdataset has %d shard%s for %d workers: "
                          "webdataset gives each worker whole shards, so %d worker%s get%s none "
                          "and load nothing; write at least %d shards (wds.ShardWriter's "
                          "maxcount) or use num_workers=%d"
                          % (shards, "" if shards == 1 else "s", workers, workers - shards,
                             "" if workers - shards == 1 else "s",
                             "s" if workers - shards == 1 else "", workers, max(shards, 1)))
            return
        try:
            ds._gpufeed_site = site  # for the workers' check
        except Exception:
            pass

    def install(self):
        if self.installed:
            return
        data = _sys.modules.get("torch.utils.data")
        fetch_mod = _sys.modules.get("torch.utils.data._utils.fetch")
        real_info = getattr(data, "get_worker_info", None)
        fetcher = getattr(fetch_mod, "_IterableDatasetFetcher", None)
        if real_info is None or not isinstance(fetcher, type) or "fetch" not in fetcher.__dict__:
            return
        import functools

        me = self
        orig_fetch = fetcher.__dict__["fetch"]

        @functools.wraps(real_info)
        def get_worker_info():
            info = real_info()
            if info is not None and not me.asked and not me.checked:
                # PyTorch asks too (default_collate, per batch): only the dataset's asking counts,
                # and only until this worker has been checked (after its first batch).
                try:
                    caller = _sys._getframe(1).f_code.co_filename.replace("\\", "/")
                except Exception:
                    caller = ""
                if "torch/utils/data/" not in caller:
                    me.asked = True
            return info

        @functools.wraps(orig_fetch)
        def fetch(f, *a, **kw):
            out = orig_fetch(f, *a, **kw)
            if not me.checked:
                me.checked = True
                try:
                    me.check_worker(real_info)
                except Exception:
                    pass
            return out

        data.get_worker_info = get_worker_info
        fetcher.fetch = fetch
        self.installed = True

    def check_worker(self, real_info):
        """In a worker, after its first batch: did the dataset ask which worker this is?"""
        info = real_info()
        if info is None or self.asked or info.num_workers < 2 or info.id != 0:
            return
        ds = info.dataset
        if (type(ds).__module__ or "").split(".")[0] == "webdataset":
            return  # it splits shards by itself
        site = getattr(ds, "_gpufeed_site", None)
        self.note("worker-split", site, "each of the %d workers iterates %s's whole stream: "
                  "its __iter__ never asks torch.utils.data.get_worker_info() which worker it "
                  "is, so unless it only draws random samples every sample is loaded %d times; "
                  "in __iter__, skip all but every num_workers-th item from worker id "
                  "(itertools.islice(stream, info.id, None, info.num_workers)) or give each "
                  "worker its own files"
                  % (info.num_workers, type(ds).__name__, info.num_workers))


class _LoaderState(object):
    __slots__ = ("site", "role", "held", "batches", "epochs")

    def __init__(self, site):
        self.site = site
        self.role = None  # "train", "other" or None (not known yet)
        self.held = []
        self.batches = 0
        self.epochs = 0

    def out(self, steps, line, tid):
        if self.role == "train" or steps.no_optimizer:
            if steps.may_send(tid):
                steps._send(line)
        elif self.role is None:
            self.held.append(line)  # bounded: close() stops holding past 2 * HOLD lines


def _batch_size(batch):
    """Samples in a batch: the first dimension of its first tensor or sequence; None if unknown
    (also the framework hooks' gpufeed._steps.batch_size)."""
    for _ in range(8):  # nested containers, bounded
        shape = getattr(batch, "shape", None)
        if shape is not None:
            try:
                return int(shape[0]) if len(shape) else None
            except (TypeError, ValueError, IndexError):
                return None
        if isinstance(batch, dict) or hasattr(batch, "values") and hasattr(batch, "keys"):
            values = list(batch.values())
            if not values:
                return None
            batch = values[0]
            continue
        if isinstance(batch, (list, tuple)):
            if not batch:
                return None
            first = batch[0]
            if isinstance(first, (int, float, str, bytes)):
                return len(batch)
            batch = first
            continue
        try:
            return len(batch)
        except TypeError:
            return None
    return None


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


# Imported under another name (gpufeed.profile's copy, python/gpufeed/_autosteps.py), only the
# classes above are wanted: nothing is installed or chained.
if __name__ == "sitecustomize":
    try:
        _gpufeed_install()
    except Exception:
        pass
    _gpufeed_chain()
