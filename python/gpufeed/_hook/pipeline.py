"""Loader set-ups that load every sample more than once, or leave workers idle, found in the
job and said as notes (``PipelineCheck``)."""

import sys


class PipelineCheck(object):
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
        data = sys.modules.get("torch.utils.data")
        fetch_mod = sys.modules.get("torch.utils.data._utils.fetch")
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
                    caller = sys._getframe(1).f_code.co_filename.replace("\\", "/")
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
