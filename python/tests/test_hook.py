"""The job's side of gpufeed (``gpufeed/_hook``: what runs inside the user's Python), tested
piece by piece here and whole from Rust (crates/gpufeed/tests/it/inject.rs and auto_steps.rs,
which run jobs under ``gpufeed run``). The pieces need no torch; the tests of a real DataLoader
run only where torch imports (the CI venv), else they say SKIPPED on stderr."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..")
if not os.environ.get("GPUFEED_TEST_INSTALLED"):
    sys.path.insert(0, SRC)
sys.path.insert(0, HERE)

from gpufeed._hook import imports, overrides, steps  # noqa: E402
import stepsock  # noqa: E402

HOOK = os.path.join(SRC, "gpufeed", "_hook")
FAKE_TORCH = os.path.join(SRC, "..", "crates", "gpufeed", "tests", "data", "fake_torch")

try:
    import torch  # noqa: F401
    HAS_TORCH = True
except Exception:
    HAS_TORCH = False


def skipped(what):
    sys.stderr.write("\nSKIPPED: %s\n" % what)
    sys.stderr.flush()


class Loader(object):
    """DataLoader's arguments as torch's, enough for the overrides."""

    def __init__(self, dataset, batch_size=1, shuffle=False, batch_sampler=None, num_workers=0,
                 prefetch_factor=None, persistent_workers=False):
        self.dataset = dataset
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.persistent_workers = persistent_workers


def patched(cfg):
    """A fresh Loader class patched with ``cfg``; the events and created loaders are listed."""
    events, created = [], []

    class L(Loader):
        pass

    L.__init__ = Loader.__init__  # patched on the class itself, as on torch's DataLoader

    def emit(event, **fields):
        fields["event"] = event
        events.append(fields)

    overrides.patch_dataloader(L, cfg, emit, lambda loader, site: created.append((loader, site)))
    return L, events, created


class Files(unittest.TestCase):
    def test_no_file_of_the_package_is_over_500_lines(self):
        for root, _, names in os.walk(SRC):
            if "__pycache__" in root:
                continue
            for n in names:
                if n.endswith(".py"):
                    with open(os.path.join(root, n)) as f:
                        lines = len(f.readlines())
                    self.assertLessEqual(lines, 500, os.path.join(root, n))


class ImportHook(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        with open(os.path.join(self.dir, "gpufeed_watched_mod.py"), "w") as f:
            f.write("X = 41\n")
        sys.path.insert(0, self.dir)
        self.calls = []

    def tearDown(self):
        sys.path.remove(self.dir)
        sys.modules.pop("gpufeed_watched_mod", None)
        shutil.rmtree(self.dir)

    def test_calls_back_once_the_module_ran_and_leaves_its_loader_as_it_was(self):
        hook = imports.ImportHook(("gpufeed_watched_mod",),
                                  lambda n, m: self.calls.append((n, m.X)))
        hook.install()
        try:
            import gpufeed_watched_mod as m
        finally:
            hook.remove()
        self.assertEqual(self.calls, [("gpufeed_watched_mod", 41)])
        self.assertNotIsInstance(m.__loader__, imports._Loader)
        self.assertNotIn(hook, sys.meta_path)

    def test_a_module_already_imported_is_called_back_at_install(self):
        import gpufeed_watched_mod  # noqa: F401

        hook = imports.ImportHook(("gpufeed_watched_mod",), lambda n, m: self.calls.append(n))
        hook.install().remove()
        self.assertEqual(self.calls, ["gpufeed_watched_mod"])

    def test_a_failing_callback_does_not_fail_the_import(self):
        def boom(n, m):
            raise RuntimeError("boom")

        hook = imports.ImportHook(("gpufeed_watched_mod",), boom).install()
        try:
            import gpufeed_watched_mod as m
        finally:
            hook.remove()
        self.assertEqual(m.X, 41)


class DataLoaderPatch(unittest.TestCase):
    def test_overrides_within_pytorchs_rules_and_keeps_the_site(self):
        L, events, created = patched({"num_workers": 4, "batch_size": 8})
        line = sys._getframe().f_lineno + 1
        d = L(list(range(10)), batch_size=2)
        self.assertEqual((d.num_workers, d.batch_size), (4, 8))
        site = "%s:%d" % (os.path.relpath(__file__), line)
        self.assertEqual(d._gpufeed_site, site)
        self.assertEqual(created, [(d, site)])
        got = sorted((e["event"], e["key"], e["value"], e["original"]) for e in events
                     if e["event"] == "override")
        self.assertEqual(got, [("override", "batch_size", 8, 2),
                               ("override", "num_workers", 4, 0)])

    def test_what_pytorch_forbids_is_skipped_or_reset(self):
        L, events, _ = patched({"persistent_workers": True, "pin_memory_device": "x"})
        d = L([1], persistent_workers=False)
        self.assertFalse(d.persistent_workers)
        skips = dict((e["key"], e["reason"]) for e in events if e["event"] == "skip")
        self.assertIn("only with num_workers > 0", skips["persistent_workers"])
        self.assertIn("has no pin_memory_device argument", skips["pin_memory_device"])
        L, events, _ = patched({"batch_size": 4})
        d = L([1], batch_size=None)
        self.assertIsNone(d.batch_size)
        skip = [e for e in events if e["event"] == "skip"]
        self.assertIn("batching turned off", skip[0]["reason"])

    def test_step_markers_alone_change_nothing_and_patch_once(self):
        L, events, created = patched({})
        d = L([1, 2], batch_size=2, num_workers=3)
        self.assertEqual((d.batch_size, d.num_workers), (2, 3))
        self.assertEqual(events, [])
        self.assertEqual(len(created), 1)
        first = L.__init__
        overrides.patch_dataloader(L, {"num_workers": 1}, lambda *a, **k: None, None)
        self.assertIs(L.__init__, first)


class BatchSize(unittest.TestCase):
    def test_first_dimension_of_the_first_tensor_or_sequence(self):
        class T(object):
            shape = (16, 3)

        self.assertEqual(steps.batch_size(T()), 16)
        self.assertEqual(steps.batch_size({"x": [T(), T()], "y": 1}), 16)
        self.assertEqual(steps.batch_size([1, 2, 3]), 3)
        self.assertIsNone(steps.batch_size({}))
        self.assertIsNone(steps.batch_size(object()))


def job_folder(tmp, cfg):
    """The private folder gpufeed writes (crates/gpufeed/src/inject: HOOK_FILES)."""
    inj = os.path.join(tmp, "inj")
    shutil.copytree(HOOK, os.path.join(inj, "_gpufeed_hook"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(os.path.join(HOOK, "sitecustomize.py"), os.path.join(inj, "sitecustomize.py"))
    with open(os.path.join(inj, "config.json"), "w") as f:
        json.dump(cfg, f)
    return inj


def report(inj):
    with open(os.path.join(inj, "report.ndjson")) as f:
        return [json.loads(line) for line in f]


class InTheJob(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def run_job(self, inj, code, *more_path):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join((inj,) + more_path))
        env.pop("GPUFEED_STEP_SOCKET", None)
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True, timeout=120)

    def test_overrides_a_loader_and_hands_over_to_the_sitecustomize_it_shadows(self):
        inj = job_folder(self.tmp, {"dataloader": {"num_workers": 2}, "torch": {},
                                    "steps": False})
        other = os.path.join(self.tmp, "other")
        os.mkdir(other)
        with open(os.path.join(other, "sitecustomize.py"), "w") as f:
            f.write("import sys\nsys.stderr.write('other sitecustomize ran\\n')\n")
        out = self.run_job(inj, "import torch\nfrom torch.utils.data import DataLoader\n"
                                "print(DataLoader([1, 2, 3]).num_workers)", other, FAKE_TORCH)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.strip(), "2", out.stderr)
        self.assertIn("other sitecustomize ran", out.stderr)
        events = report(inj)
        ov = [e for e in events if e["event"] == "override"]
        self.assertEqual([(e["key"], e["value"], e["site"]) for e in ov],
                         [("num_workers", 2, "<string>:3")], events)
        self.assertEqual(events[0]["event"], "python")

    def test_a_bad_config_is_reported_and_the_job_runs(self):
        inj = job_folder(self.tmp, {})
        with open(os.path.join(inj, "config.json"), "w") as f:
            f.write("{not json")
        out = self.run_job(inj, "print('ran')")
        self.assertEqual((out.returncode, out.stdout.strip()), (0, "ran"), out.stderr)
        self.assertIn("cannot read gpufeed's config", report(inj)[0]["detail"])


class RealTorch(unittest.TestCase):
    def setUp(self):
        if not HAS_TORCH:
            skipped("torch is not importable here (GPUFEED_TEST_PYTHON's venv has it)")
            self.skipTest("no torch")

    def test_profile_times_a_real_loader_and_puts_it_back(self):
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        from torch.utils.data.dataloader import _BaseDataLoaderIter

        from gpufeed import _inproc

        before = _BaseDataLoaderIter.__dict__["__next__"]
        rx = stepsock.Receiver(timeout=None)
        try:
            s = _inproc.install(rx.path)
            model = torch.nn.Linear(2, 1)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for (x,) in DataLoader(TensorDataset(torch.zeros(64, 2)), batch_size=8):
                model(x).sum().backward()
                opt.step()
                opt.zero_grad()
            s.uninstall()
            lines = []
            while True:
                try:
                    lines += rx.sock.recv(65536).decode().splitlines()
                except BlockingIOError:
                    break
        finally:
            rx.close()
        marks = [line.split() for line in lines if line.startswith("step ")]
        self.assertEqual(len(marks), 8, lines)
        self.assertEqual(set(m[3] for m in marks), {"8"})
        self.assertIs(_BaseDataLoaderIter.__dict__["__next__"], before)


if __name__ == "__main__":
    unittest.main()
