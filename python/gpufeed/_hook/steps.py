"""Step markers from the DataLoader itself, with no change to the job's code
(docs/step-protocol.md, "Steps from the DataLoader itself"): ``AutoSteps`` times every batch of a
torch DataLoader iterator and tells the training loader by the optimizer steps that follow its
batches."""

import os
import sys


class AutoSteps(object):
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
        self.path = os.environ.get("GPUFEED_STEP_SOCKET")
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
        pid = os.getpid()
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
                v = os.environ.get(var, "")
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
                    ls = LoaderState(getattr(loader, "_gpufeed_site", None))
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

        main_pid = os.getpid()

        def counts():
            # A loop cut short (break) never reached its epoch's end: give the final counts.
            if os.getpid() != main_pid:
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
        mod = sys.modules.get("torch.optim.optimizer")
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
        if self.pid != os.getpid():
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
        self.pending[tid] = (ls, t1 - t0, batch_size(batch), self.opt_steps.get(tid, 0))

    def optimizer_step(self, tid):
        """A loop no torch DataLoader feeds (a hand-written batch loop, a generator) is still
        stepped by a torch optimizer: each `optimizer.step()` then ends a step (no data wait is
        known). Not while a DataLoader's batch is being trained on, nor once a training loader
        is known: its markers are the steps."""
        if self.pid != os.getpid():
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


class LoaderState(object):
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


def batch_size(batch):
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
