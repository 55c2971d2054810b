"""``gpufeed.profile()`` (issue 36): a clear one-line error without the binary, and, with it (the
checkout's target/debug/gpufeed or GPUFEED_BIN; SKIPPED on stderr otherwise), a real recording
of this process: the report filled in, the environment and torch's DataLoader put back as they
were, no recorder left running, a nested profile a note. The notebook itself is tested in
crates/gpufeed/tests/it/notebook.rs (real ipykernel and nbclient)."""

import os
import sys
import time
import unittest

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
if not os.environ.get("GPUFEED_TEST_INSTALLED"):
    sys.path.insert(0, SRC)

import gpufeed  # noqa: E402
from gpufeed import _find, _profile  # noqa: E402

REPO_BIN = os.path.join(SRC, "..", "target", "debug", "gpufeed")


def skipped(what):
    sys.stderr.write("\nSKIPPED: %s\n" % what)
    sys.stderr.flush()


def binary():
    for p in (os.environ.get("GPUFEED_BIN"), REPO_BIN):
        if p and os.path.isfile(p) and os.access(p, os.X_OK):
            return os.path.abspath(p)
    try:
        return _find.find_gpufeed_bin()
    except FileNotFoundError:
        return None


def children_named(name):
    me, out = os.getpid(), []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                s = f.read()
        except OSError:
            continue
        fields = s[s.rindex(")") + 2:].split()
        if s[s.index("(") + 1:s.rindex(")")] == name and int(fields[1]) == me \
                and fields[0] not in "ZX":
            out.append(int(d))
    return out


class Env(object):
    def __init__(self, **kv):
        self.kv = kv

    def __enter__(self):
        self.saved = dict((k, os.environ.get(k)) for k in self.kv)
        for k, v in self.kv.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    def __exit__(self, *a):
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class NoBinary(unittest.TestCase):
    def test_gpufeed_bin_not_executable_is_one_clear_line(self):
        with Env(GPUFEED_BIN="/nonexistent/gpufeed"):
            with self.assertRaises(gpufeed.GpufeedError) as cm:
                with gpufeed.profile():
                    self.fail("the block must not run without a recorder")
        msg = str(cm.exception)
        self.assertNotIn("\n", msg)
        self.assertIn("GPUFEED_BIN=/nonexistent/gpufeed is not an executable file", msg)
        self.assertIsNone(_profile._active[0])
        self.assertNotIn(gpufeed.ENV_VAR, os.environ)

    def test_no_binary_anywhere_says_how_to_get_one(self):
        def missing():
            raise FileNotFoundError("the gpufeed binary is not installed beside this Python "
                                    "package (looked in /x); reinstall with `pip install "
                                    "--force-reinstall gpufeed`")

        saved = _find.find_gpufeed_bin
        _find.find_gpufeed_bin = missing
        try:
            with Env(GPUFEED_BIN=None, PATH="/nonexistent"):
                with self.assertRaises(gpufeed.GpufeedError) as cm:
                    gpufeed.profile().start()
        finally:
            _find.find_gpufeed_bin = saved
        msg = str(cm.exception)
        self.assertNotIn("\n", msg)
        self.assertIn("pip install --force-reinstall gpufeed", msg)
        self.assertIn("or set GPUFEED_BIN=/path/to/gpufeed", msg)


class Recording(unittest.TestCase):
    def setUp(self):
        self.bin = binary()
        if self.bin is None:
            skipped("no gpufeed binary (cargo build, or GPUFEED_BIN): profile() not recorded")
            self.skipTest("no gpufeed binary")

    def test_profile_records_this_process_and_leaves_nothing_behind(self):
        with Env(GPUFEED_BIN=self.bin, GPUFEED_NVML_LIB="/nonexistent/libnvidia-ml.so.1"):
            with gpufeed.profile(interval="50ms", quiet=True) as p:
                self.assertTrue(os.environ.get(gpufeed.ENV_VAR))
                self.assertEqual(len(children_named("gpufeed")), 1)
                with gpufeed.profile(quiet=True) as inner:
                    self.assertTrue(inner.nested)
                self.assertEqual(len(children_named("gpufeed")), 1, "still one recorder")
                self.assertTrue(any("already recording" in n for n in inner.notes))
                t0 = time.time()
                while time.time() - t0 < 1.0:
                    time.sleep(0.02)
                    gpufeed.step(items=4)
        self.assertNotIn(gpufeed.ENV_VAR, os.environ)
        self.assertEqual(children_named("gpufeed"), [])
        self.assertIsNone(p.error, p.notes)
        self.assertTrue(os.path.exists(p.recording))
        self.assertIsInstance(p.report, dict)
        self.assertIsNotNone(p.verdict)
        self.assertIsInstance(p.findings, list)
        self.assertIn("<html", p.html()[:500].lower())
        self.assertIn("VERDICT", p.text)
        self.assertGreater(p.report["steps"]["steps"], 20, p.report["steps"])

    def test_an_existing_output_is_refused_and_left_alone(self):
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "mine.ndjson")
            with open(path, "w") as f:
                f.write("keep me")
            with Env(GPUFEED_BIN=self.bin):
                with self.assertRaises(gpufeed.GpufeedError) as cm:
                    gpufeed.profile(output=path).start()
            self.assertEqual(str(cm.exception), "%s already exists: choose another output "
                             "(gpufeed never replaces a recording)" % path)
            with open(path) as f:
                self.assertEqual(f.read(), "keep me")
        self.assertEqual(children_named("gpufeed"), [])

    def test_the_block_exception_goes_on_unchanged(self):
        boom = ValueError("the block's own")
        with Env(GPUFEED_BIN=self.bin, GPUFEED_NVML_LIB="/nonexistent/libnvidia-ml.so.1"):
            with self.assertRaises(ValueError) as cm:
                with gpufeed.profile(quiet=True) as p:
                    raise boom
        self.assertIs(cm.exception, boom)
        self.assertIsInstance(p.report, dict)
        self.assertEqual(children_named("gpufeed"), [])

    def test_dataloader_is_put_back_after_the_block(self):
        try:
            import torch
            from torch.utils.data import dataloader
        except ImportError:
            skipped("no torch: the in-process DataLoader hook not tested")
            return
        base = dataloader._BaseDataLoaderIter
        before = (base.__dict__["__init__"], base.__dict__["__next__"])
        opt_hooks = len(sys.modules["torch.optim.optimizer"]._global_optimizer_post_hooks)
        with Env(GPUFEED_BIN=self.bin, GPUFEED_NVML_LIB="/nonexistent/libnvidia-ml.so.1"):
            with gpufeed.profile(quiet=True) as p:
                self.assertIsNot(base.__dict__["__next__"], before[1], "timed inside")
                model = torch.nn.Linear(4, 1)
                opt = torch.optim.SGD(model.parameters(), lr=0.1)
                data = torch.utils.data.TensorDataset(torch.randn(256, 4))
                for (x,) in torch.utils.data.DataLoader(data, batch_size=4):
                    model(x).sum().backward()
                    opt.step()
                    # A step of a few ms, as real ones are: markers sent back to back faster
                    # than the recorder reads them overflow the socket's queue and are dropped.
                    time.sleep(0.003)
        self.assertEqual((base.__dict__["__init__"], base.__dict__["__next__"]), before)
        self.assertEqual(len(sys.modules["torch.optim.optimizer"]._global_optimizer_post_hooks), opt_hooks)
        self.assertGreaterEqual(p.report["steps"]["steps"], 60, p.report["steps"])  # of 64 batches


if __name__ == "__main__":
    unittest.main()
