"""The `gpufeed` Python package: the probe API, `python -m gpufeed`, and the Lightning,
transformers and accelerate hooks.

The hooks are tested against the real frameworks when they are importable (a real CPU training
run for Lightning and transformers), else against stand-in base classes with a SKIPPED notice on
stderr. With GPUFEED_TEST_INSTALLED=1 the installed package is tested (CI: the built wheel in a
fresh venv), else the source tree's python/.
"""

import importlib
import os
import subprocess
import sys
import tempfile
import time
import types
import unittest

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
INSTALLED = bool(os.environ.get("GPUFEED_TEST_INSTALLED"))
if not INSTALLED:
    sys.path.insert(0, SRC)

import gpufeed  # noqa: E402
import gpufeed_probe  # noqa: E402
from gpufeed import _find, _steps  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stepsock  # noqa: E402


def skipped(what):
    sys.stderr.write("\nSKIPPED: %s\n" % what)
    sys.stderr.flush()


def importable(name):
    try:
        importlib.import_module(name)
        return True
    except Exception:  # ImportError, or a framework broken by its own dependencies
        return False


class Receiver(stepsock.Receiver):
    """The gpufeed end of the step socket, read without waiting."""

    def marks(self):
        out = []
        try:
            while True:
                for line in self.sock.recv(65536).decode("ascii").splitlines():
                    if line.startswith("step"):  # as gpufeed: `figures` queries are not marks
                        out.append(line.split())
        except BlockingIOError:
            pass
        return out


def hf_toys(n):
    """A model and a dataset of ``n`` samples, 10 ms each to fetch, in the dict form a Hugging
    Face Trainer takes (``x`` and ``labels``; the model returns ``loss``)."""
    import torch
    from torch.utils.data import Dataset

    class Slow(Dataset):
        def __len__(self):
            return n

        def __getitem__(self, i):
            time.sleep(0.01)
            return {"x": torch.randn(3), "labels": torch.randn(1)}

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 1)

        def forward(self, x, labels):
            return {"loss": torch.nn.functional.mse_loss(self.lin(x), labels)}

    return Model(), Slow()


class WithSocket(unittest.TestCase):
    def setUp(self):
        self.old = os.environ.pop(gpufeed.ENV_VAR, None)
        self.rx = Receiver()
        os.environ[gpufeed.ENV_VAR] = self.rx.path

    def tearDown(self):
        os.environ.pop(gpufeed.ENV_VAR, None)
        if self.old is not None:
            os.environ[gpufeed.ENV_VAR] = self.old
        gpufeed_probe._probe.close()
        gpufeed_probe._probe.pending_wait_ns = None
        self.rx.close()

    def assertMarks(self, marks, n, min_wait_ns=None, items=None):
        self.assertEqual(len(marks), n, marks)
        for m in marks:
            self.assertEqual(m[0], "step", m)
            # step, time, wait, items, and the sender's rank (its pid outside a launcher).
            self.assertEqual(len(m), 5, m)
            self.assertTrue(m[4].isdigit(), m)
            if items is not None:
                self.assertEqual(m[3], str(items), m)
        if min_wait_ns is not None:
            # Every step after the first waited for its (slow) batch.
            for m in marks[1:]:
                self.assertNotEqual(m[2], "-", m)
                self.assertGreaterEqual(int(m[2]), min_wait_ns, m)


class PackageTest(WithSocket):
    def test_probe_api_is_the_module_api(self):
        self.assertIs(gpufeed.step, gpufeed_probe.step)
        self.assertIs(gpufeed.wrap, gpufeed_probe.wrap)
        self.assertEqual(gpufeed.ENV_VAR, "GPUFEED_STEP_SOCKET")
        self.assertTrue(gpufeed.enabled())
        self.assertTrue(gpufeed.step(items=4, wait_ns=10))
        self.assertEqual(self.rx.marks()[0][2:4], ["10", "4"])

    def test_installed_where_expected(self):
        where = os.path.dirname(os.path.abspath(gpufeed.__file__))
        if INSTALLED:
            self.assertNotEqual(os.path.realpath(os.path.dirname(where)), os.path.realpath(SRC))
            self.assertRegex(gpufeed.__version__, r"^\d+\.\d+\.\d+")
        else:
            self.assertEqual(os.path.realpath(os.path.dirname(where)), os.path.realpath(SRC))

    def test_batch_size_guess(self):
        class T:  # a tensor's shape, without torch
            def __init__(self, *shape):
                self.shape = shape

        self.assertEqual(_steps.batch_size(T(32, 3, 224, 224)), 32)
        self.assertEqual(_steps.batch_size((T(16, 3), T(16))), 16)
        self.assertEqual(_steps.batch_size({"input_ids": T(8, 128), "labels": T(8)}), 8)
        self.assertEqual(_steps.batch_size([[T(4, 2), T(4)], 0]), 4)
        self.assertEqual(_steps.batch_size([1, 2, 3]), 3)
        self.assertIsNone(_steps.batch_size(T()))
        self.assertIsNone(_steps.batch_size(object()))
        self.assertIsNone(_steps.batch_size({}))

    def test_accelerate_wrap(self):
        from gpufeed import accelerate

        def loader():
            for _ in range(4):
                time.sleep(0.03)
                yield [[0] * 6, [1] * 6]

        class Acc:
            def __init__(self, main):
                self.is_local_main_process = main

        other = [1, 2]
        self.assertIs(accelerate.wrap(other, Acc(False)), other)  # other ranks: untouched
        n = sum(1 for _ in accelerate.wrap(loader(), Acc(True)))
        self.assertEqual(n, 4)
        self.assertMarks(self.rx.marks(), 4, min_wait_ns=20_000_000, items=6)
        if not importable("accelerate"):
            skipped("accelerate not installed: gpufeed.accelerate tested with a stand-in Accelerator")


class MainTest(unittest.TestCase):
    """`python -m gpufeed` finds the binary beside the package and execs it."""

    def run_main(self, args, scripts_dir):
        code = (
            "import sys; sys.path.insert(0, %r)\n"
            "import gpufeed._find as f\n"
            "f._candidates = lambda: [%r]\n"
            "import runpy; sys.argv = ['gpufeed'] + %r\n"
            "runpy.run_module('gpufeed', run_name='__main__', alter_sys=True)\n"
        ) % (os.path.dirname(os.path.dirname(os.path.abspath(gpufeed.__file__))), scripts_dir, args)
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)

    def test_execs_the_binary_with_the_arguments(self):
        with tempfile.TemporaryDirectory() as d:
            fake = os.path.join(d, _find.EXE)
            with open(fake, "w") as f:
                f.write('#!/bin/sh\necho "fake gpufeed $*"\nexit 7\n')
            os.chmod(fake, 0o755)
            r = self.run_main(["doctor", "--format", "json"], d)
            self.assertEqual(r.returncode, 7, r.stderr)
            self.assertEqual(r.stdout.strip(), "fake gpufeed doctor --format json")

    def test_missing_binary_is_a_clear_error(self):
        with tempfile.TemporaryDirectory() as d:
            r = self.run_main(["--version"], d)
        self.assertEqual(r.returncode, 127)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn("gpufeed binary is not installed", r.stderr)
        self.assertIn(d, r.stderr)

    def test_real_binary_when_installed(self):
        if not INSTALLED:
            return skipped("source tree: `python -m gpufeed --version` is run by CI on the installed wheel")
        r = subprocess.run([sys.executable, "-m", "gpufeed", "--version"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "gpufeed " + gpufeed.__version__)


def _stand_in(modules):
    """Puts stand-in modules into sys.modules; returns a function that removes them again."""
    saved = {name: sys.modules.get(name) for name in modules}
    for name, attrs in modules.items():
        if attrs is None:  # `import name` raises ImportError
            sys.modules[name] = None
            continue
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        sys.modules[name] = m

    def undo():
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old

    return undo


def _fresh(module):
    sys.modules.pop(module, None)
    return importlib.import_module(module)


class LightningTest(WithSocket):
    def test_callback_with_real_trainer(self):
        if not (importable("lightning.pytorch") or importable("pytorch_lightning")):
            return skipped(
                "lightning not installed (it needs torch: too big for CI): "
                "GpufeedCallback tested only against a stand-in Callback base class"
            )
        import torch
        from torch.utils.data import DataLoader, Dataset

        try:
            import lightning.pytorch as pl
        except ImportError:
            import pytorch_lightning as pl
        from gpufeed.lightning import GpufeedCallback

        class Slow(Dataset):
            def __len__(self):
                return 6 * 4

            def __getitem__(self, i):
                time.sleep(0.01)  # 4 samples per batch: ~40 ms per batch
                return torch.randn(3), torch.randn(1)

        class Model(pl.LightningModule):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(3, 1)

            def training_step(self, batch, batch_idx):
                x, y = batch
                return torch.nn.functional.mse_loss(self.lin(x), y)

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.01)

        trainer = pl.Trainer(
            max_epochs=1, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
            enable_progress_bar=False, enable_model_summary=False, callbacks=[GpufeedCallback()],
        )
        trainer.fit(Model(), DataLoader(Slow(), batch_size=4, num_workers=0))
        self.assertMarks(self.rx.marks(), 6, min_wait_ns=30_000_000, items=4)

    def test_callback_hooks_with_stand_in(self):
        class Callback:
            pass

        undo = _stand_in({
            "lightning": {},
            "lightning.pytorch": {},
            "lightning.pytorch.callbacks": {"Callback": Callback},
        })
        try:
            mod = _fresh("gpufeed.lightning")
            cb = mod.GpufeedCallback(items=lambda b: len(b))
            self.assertIsInstance(cb, Callback)

            class Trainer:
                local_rank = 0

            t = Trainer()
            cb.on_train_start(t, None)
            for i in range(3):
                time.sleep(0.03)  # the loop fetching the batch
                cb.on_train_batch_start(t, None, [0] * 5, i)
                cb.on_train_batch_end(t, None, None, [0] * 5, i)
            cb.on_validation_end(t, None)
            cb.on_train_batch_start(t, None, [0] * 5, 3)  # right after validation: no wait
            cb.on_train_batch_end(t, None, None, [0] * 5, 3)
            t.local_rank = 1  # other ranks send nothing
            cb.on_train_batch_start(t, None, [0] * 5, 4)
            cb.on_train_batch_end(t, None, None, [0] * 5, 4)
            marks = self.rx.marks()
            self.assertMarks(marks[:3], 3, min_wait_ns=20_000_000, items=5)
            self.assertEqual(len(marks), 4)
            self.assertLess(int(marks[3][2]), 20_000_000)
        finally:
            undo()
            sys.modules.pop("gpufeed.lightning", None)

    def test_import_error_names_the_package(self):
        undo = _stand_in({name: None for name in (
            "lightning", "lightning.pytorch", "lightning.pytorch.callbacks",
            "pytorch_lightning", "pytorch_lightning.callbacks")})
        try:
            with self.assertRaises(ImportError) as e:
                _fresh("gpufeed.lightning")
            self.assertIn("pip install lightning", str(e.exception))
        finally:
            undo()
            sys.modules.pop("gpufeed.lightning", None)


class TransformersTest(WithSocket):
    def test_callback_with_real_trainer(self):
        if not (importable("transformers") and importable("torch") and importable("accelerate")):
            return skipped(
                "transformers + torch + accelerate not installed (torch is too big for CI): "
                "GpufeedTrainerCallback tested only against a stand-in TrainerCallback"
            )
        from transformers import Trainer, TrainingArguments

        from gpufeed.transformers import GpufeedTrainerCallback

        with tempfile.TemporaryDirectory() as out:
            args = TrainingArguments(
                output_dir=out, per_device_train_batch_size=2, gradient_accumulation_steps=2,
                num_train_epochs=1, use_cpu=True, report_to=[], save_strategy="no",
                logging_strategy="no", dataloader_num_workers=0, disable_tqdm=True,
            )
            model, data = hf_toys(5 * 4)
            Trainer(model=model, args=args, train_dataset=data,
                    callbacks=[GpufeedTrainerCallback()]).train()
        # 20 samples, 2 per batch, 2 batches per optimizer step: 5 steps of 4 samples. The
        # bounds are what the dataset's sleeps take at the least (time.sleep never returns
        # early; a loaded machine only makes the waits longer), less 5% for where the probe's
        # clock starts and stops: accelerate's loader reads one batch ahead, so each step but
        # the last waits for two batches (4 sleeps, >= 40 ms) and the last for the one batch
        # left (2 sleeps, >= 20 ms). Measured on an idle 2-core machine: 41-45 ms and 21 ms.
        marks = self.rx.marks()
        self.assertMarks(marks, 5, min_wait_ns=19_000_000, items=4)
        for m in marks[1:-1]:
            self.assertGreaterEqual(int(m[2]), 38_000_000, marks)

    def test_callback_hooks_with_stand_in(self):
        class TrainerCallback:
            pass

        if importable("transformers"):
            base = None
            mod = _fresh("gpufeed.transformers")
        else:
            skipped("transformers not installed: GpufeedTrainerCallback hooks driven through a stand-in base")
            undo = _stand_in({"transformers": {"TrainerCallback": TrainerCallback}})
            try:
                mod = _fresh("gpufeed.transformers")
            finally:
                undo()
            base = TrainerCallback
        try:
            cb = mod.GpufeedTrainerCallback()
            if base is not None:
                self.assertIsInstance(cb, base)
            args = types.SimpleNamespace(per_device_train_batch_size=8, gradient_accumulation_steps=4)
            state = types.SimpleNamespace(is_local_process_zero=True)
            cb.on_train_begin(args, state, None)
            for _ in range(3):
                time.sleep(0.03)
                cb.on_step_begin(args, state, None)
                cb.on_step_end(args, state, None)
            cb.on_evaluate(args, state, None, metrics={})
            cb.on_step_begin(args, state, None)
            cb.on_step_end(args, state, None)
            state.is_local_process_zero = False
            cb.on_step_begin(args, state, None)
            cb.on_step_end(args, state, None)
            marks = self.rx.marks()
            self.assertMarks(marks[:3], 3, min_wait_ns=20_000_000, items=32)
            self.assertEqual(len(marks), 4)
            self.assertLess(int(marks[3][2]), 20_000_000)
        finally:
            sys.modules.pop("gpufeed.transformers", None)


if __name__ == "__main__":
    unittest.main()
