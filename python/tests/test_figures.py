"""The figures the hooks log through the frameworks' own loggers (gpufeed/_figures.py), read
back with the real readers: TensorBoard's EventAccumulator, MLflow's client on a local
store (SQLite, no server), and W&B's offline run file (WANDB_MODE=offline, no account) through
W&B's own record definitions. Each real-framework test skips (SKIPPED on stderr) when its
packages are missing.
"""

import glob
import json
import os
import struct
import sys
import tempfile
import time
import unittest
from unittest import mock

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
if not os.environ.get("GPUFEED_TEST_INSTALLED"):
    sys.path.insert(0, SRC)

import gpufeed  # noqa: E402
from gpufeed._figures import Figures, merge  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_package import hf_toys, importable, skipped  # noqa: E402


def scalars(logdir):
    """{tag: [(step, value)]} of every event file under logdir, read by TensorBoard itself."""
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

    m = EventMultiplexer()
    m.AddRunsFromDirectory(logdir)
    m.Reload()
    out = {}
    for run, tags in m.Runs().items():
        for tag in tags.get("scalars", []):
            out.setdefault(tag, []).extend((e.step, e.value) for e in m.Scalars(run, tag))
    return out


class FiguresTest(unittest.TestCase):
    def test_window_figures(self):
        f = Figures()
        f.idle(now_ns=0)
        # Two steps of 100 ms, each waiting 60 ms for 8 samples; 30 ms forward, 10 ms backward.
        for k in (1, 2):
            f.phase("forward", 30_000_000)
            f.phase("backward", 10_000_000)
            f.step(wait_ns=60_000_000, items=8, now_ns=k * 100_000_000)
        got = f.take()
        self.assertAlmostEqual(got["gpufeed/steps_per_s"], 10.0)
        self.assertAlmostEqual(got["gpufeed/data_wait_pct"], 60.0)
        self.assertAlmostEqual(got["gpufeed/samples_per_s"], 80.0)
        self.assertAlmostEqual(got["gpufeed/phase/forward_pct"], 30.0)
        self.assertAlmostEqual(got["gpufeed/phase/backward_pct"], 10.0)
        self.assertAlmostEqual(got["gpufeed/phase/data_wait_pct"], 60.0)
        self.assertAlmostEqual(got["gpufeed/phase/other_pct"], 0.0)
        self.assertEqual(f.take(), {})  # a new window

    def test_unmeasured_is_left_out(self):
        f = Figures(whole_step=False)
        f.idle(now_ns=0)
        f.step(now_ns=50_000_000)  # no wait, no items reported
        got = f.take()
        self.assertEqual(set(got), {"gpufeed/steps_per_s"})
        # Idle time (validation) is not a step's time.
        f.step(now_ns=60_000_000)
        f.idle(now_ns=500_000_000)
        f.step(wait_ns=0, now_ns=510_000_000)
        self.assertAlmostEqual(f.take()["gpufeed/steps_per_s"], 100.0)

    def test_gpufeeds_figures_win_where_it_has_them(self):
        own = {"gpufeed/steps_per_s": 5.0, "gpufeed/data_wait_pct": 30.0,
               "gpufeed/samples_per_s": 40.0, "gpufeed/phase/forward_pct": 20.0,
               "gpufeed/phase/other_pct": 50.0}
        self.assertEqual(merge(own, None), own)
        got = merge(own, {"steps": 10, "steps_per_s": 6.0, "data_wait_pct": float("nan"),
                          "gpus": {"0": 35.0, "1": 45.0, "x/../y": 1.0},
                          "phases": {"data_wait": 60.0, "backward": 10.0, "a/b": 1.0}})
        self.assertEqual(got, {
            "gpufeed/steps_per_s": 6.0,          # gpufeed's
            "gpufeed/data_wait_pct": 30.0,       # gpufeed's is not a number: the hook's stays
            "gpufeed/samples_per_s": 40.0,       # gpufeed did not say: the hook's
            "gpufeed/phase/data_wait_pct": 60.0,  # gpufeed's phases replace the hook's
            "gpufeed/phase/backward_pct": 10.0,
            "gpufeed/gpu0/busy_pct": 35.0,
            "gpufeed/gpu1/busy_pct": 45.0,
        })

    def test_report_without_gpufeed_is_the_hooks_own(self):
        os.environ.pop(gpufeed.ENV_VAR, None)
        f = Figures()
        f.idle(now_ns=0)
        f.step(wait_ns=1, now_ns=10)
        self.assertEqual(set(f.report()), {"gpufeed/steps_per_s", "gpufeed/data_wait_pct"})
        self.assertEqual(f.source, "hook")


def _torch_data(n_batches, batch, sleep_s):
    import torch
    from torch.utils.data import Dataset

    class Slow(Dataset):
        def __len__(self):
            return n_batches * batch

        def __getitem__(self, i):
            time.sleep(sleep_s)
            return torch.randn(3), torch.randn(1)

    return Slow()


class LightningLoggerTest(unittest.TestCase):
    def setUp(self):
        os.environ.pop(gpufeed.ENV_VAR, None)  # the hook's own timing, not gpufeed's

    def fit(self, logdir, log):
        import torch
        from torch.utils.data import DataLoader

        try:
            import lightning.pytorch as pl
            from lightning.pytorch.loggers import TensorBoardLogger
        except ImportError:
            import pytorch_lightning as pl
            from pytorch_lightning.loggers import TensorBoardLogger
        from gpufeed.lightning import GpufeedCallback

        class Model(pl.LightningModule):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(3, 1)

            def training_step(self, b, i):
                return torch.nn.functional.mse_loss(self.lin(b[0]), b[1])

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.01)

        trainer = pl.Trainer(
            max_epochs=1, accelerator="cpu", devices=1, enable_checkpointing=False,
            enable_progress_bar=False, enable_model_summary=False, log_every_n_steps=4,
            logger=TensorBoardLogger(logdir, name="run"), callbacks=[GpufeedCallback(log=log)],
        )
        data = DataLoader(_torch_data(12, 4, 0.01), batch_size=4, num_workers=0)
        trainer.fit(Model(), data)

    def logged(self, log, what):
        """The scalars of a fit with ``GpufeedCallback(log=log)``; ``None``, after saying that
        ``what`` did not run, without Lightning and TensorBoard."""
        if not ((importable("lightning.pytorch") or importable("pytorch_lightning"))
                and importable("tensorboard")):
            skipped("lightning or tensorboard not installed: %s did not run" % what)
            return None
        with tempfile.TemporaryDirectory() as d:
            self.fit(d, log=log)
            return scalars(d)

    def test_lightning_tensorboard_logger_gets_the_figures(self):
        got = self.logged(True, "the Lightning logger test")
        if got is None:
            return
        wait = got.get("gpufeed/data_wait_pct")
        self.assertTrue(wait, sorted(got))
        # 12 batches of 4 samples at 10 ms each, a tiny model: the loop mostly waits for data.
        self.assertEqual(len(wait), 3, wait)  # every 4 steps
        self.assertTrue(all(v > 50 for _, v in wait), wait)
        self.assertTrue(all(v > 5 for _, v in got["gpufeed/steps_per_s"]), got["gpufeed/steps_per_s"])
        for phase in ("forward", "backward", "optimizer", "other"):
            self.assertIn("gpufeed/phase/%s_pct" % phase, got)
        self.assertEqual([s for s, _ in wait], [4, 8, 12])

    def test_lightning_opt_out(self):
        got = self.logged(False, "the Lightning opt-out test")
        if got is None:
            return
        self.assertFalse([t for t in got if t.startswith("gpufeed/")], sorted(got))


def _hf_train(out, report_to):
    from transformers import Trainer, TrainingArguments

    from gpufeed.transformers import GpufeedTrainerCallback

    args = TrainingArguments(
        output_dir=out, per_device_train_batch_size=4, num_train_epochs=1, use_cpu=True,
        report_to=report_to, save_strategy="no", logging_steps=2,
        dataloader_num_workers=0, disable_tqdm=True,
    )
    model, data = hf_toys(24)
    Trainer(model=model, args=args, train_dataset=data,
            callbacks=[GpufeedTrainerCallback()]).train()


class TransformersLoggerTest(unittest.TestCase):
    def setUp(self):
        os.environ.pop(gpufeed.ENV_VAR, None)

    def train(self, out, report_to):
        _hf_train(out, report_to)

    def test_hf_trainer_report_to_tensorboard(self):
        if not (importable("transformers") and importable("accelerate") and importable("tensorboard")):
            return skipped("transformers/accelerate/tensorboard not installed: the HF TensorBoard test did not run")
        with tempfile.TemporaryDirectory() as d:
            self.train(d, ["tensorboard"])
            got = scalars(d)  # under output_dir (TENSORBOARD_LOGGING_DIR unset)
        # The Trainer's TensorBoard integration prefixes training logs with train/.
        wait = got.get("train/gpufeed/data_wait_pct")
        self.assertTrue(wait, sorted(got))
        self.assertEqual(len(wait), 3, wait)  # 6 steps, logged every 2
        self.assertTrue(all(v > 50 for _, v in wait), wait)
        self.assertIn("train/gpufeed/steps_per_s", got)
        self.assertIn("train/gpufeed/samples_per_s", got)
        self.assertIn("train/gpufeed/phase/optimizer_pct", got)

    def test_hf_trainer_report_to_mlflow_local_store(self):
        if not (importable("transformers") and importable("accelerate") and importable("mlflow")):
            return skipped("transformers/accelerate/mlflow not installed: the HF MLflow test did not run")
        import mlflow

        with tempfile.TemporaryDirectory() as d:
            # A local store, no server: SQLite (MLflow 3 refuses its file store unless told
            # MLFLOW_ALLOW_FILE_STORE=true, and calls it deprecated).
            uri = "sqlite:///" + d + "/mlflow.db"
            with mock.patch.dict(os.environ, MLFLOW_TRACKING_URI=uri,
                                 MLFLOW_EXPERIMENT_NAME="gpufeed-test"):
                self.train(d, ["mlflow"])
                client = mlflow.tracking.MlflowClient(tracking_uri=uri)
                exp = client.get_experiment_by_name("gpufeed-test")
                run = client.search_runs([exp.experiment_id])[0]
                hist = client.get_metric_history(run.info.run_id, "gpufeed/data_wait_pct")
        self.assertEqual(len(hist), 3, hist)
        self.assertTrue(all(m.value > 50 for m in hist), hist)


def wandb_history(run_file):
    """The ``history`` records of a W&B run file (``run-<id>.wandb``), as ``[{key: value}]``.

    The file is W&B's LevelDB-style log: a 7-byte header (``:W&B``, magic, version), then 32 KiB
    blocks of chunks (CRC32, length, type: full/first/middle/last) holding W&B ``Record``
    protobufs, decoded with the wandb package's own definitions.
    """
    from wandb.proto import wandb_internal_pb2

    with open(run_file, "rb") as f:
        data = f.read()
    if data[:4] != b":W&B":
        raise ValueError("not a W&B run file: %r" % data[:8])
    out, pos, block, buf = [], 7, 32768, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a chunk header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        buf = chunk if kind in (1, 2) else buf + chunk
        if kind in (1, 4):
            rec = wandb_internal_pb2.Record()
            rec.ParseFromString(buf)
            if rec.WhichOneof("record_type") == "history":
                out.append({(i.key or "/".join(i.nested_key)): json.loads(i.value_json)
                            for i in rec.history.item})
    return out


class WandbLoggerTest(unittest.TestCase):
    def setUp(self):
        os.environ.pop(gpufeed.ENV_VAR, None)

    def test_hf_trainer_report_to_wandb_offline(self):
        if not (importable("transformers") and importable("accelerate") and importable("wandb")):
            return skipped("transformers/accelerate/wandb not installed: the HF W&B test did not run")
        import wandb

        with tempfile.TemporaryDirectory() as d, mock.patch.dict(
            os.environ, WANDB_MODE="offline", WANDB_DIR=d, WANDB_SILENT="true",
            WANDB_PROJECT="gpufeed-test",
        ):
            _hf_train(d, ["wandb"])
            wandb.finish()
            # Now, not at exit: wandb 0.31's atexit teardown passes unittest's exit status
            # (a bool) to a protobuf int field and prints a TypeError.
            wandb.teardown(exit_code=0)
            files = glob.glob(os.path.join(d, "wandb", "offline-run-*", "run-*.wandb"))
            self.assertEqual(len(files), 1, files)
            history = wandb_history(files[0])
        # The Trainer's W&B integration prefixes training logs with train/, as for TensorBoard.
        wait = [h["train/gpufeed/data_wait_pct"] for h in history if "train/gpufeed/data_wait_pct" in h]
        self.assertEqual(len(wait), 3, history)  # 6 steps, logged every 2
        self.assertTrue(all(v > 50 for v in wait), wait)
        self.assertTrue(any("train/gpufeed/steps_per_s" in h for h in history), history)


class AccelerateLoggerTest(unittest.TestCase):
    def test_accelerate_log_to_tensorboard(self):
        if not (importable("accelerate") and importable("tensorboard") and importable("torch")):
            return skipped("accelerate/tensorboard/torch not installed: the accelerate tracker test did not run")
        from accelerate import Accelerator
        from torch.utils.data import DataLoader

        from gpufeed.accelerate import wrap

        os.environ.pop(gpufeed.ENV_VAR, None)
        with tempfile.TemporaryDirectory() as d:
            acc = Accelerator(cpu=True, log_with="tensorboard", project_dir=d)
            acc.init_trackers("run")
            loader = acc.prepare(DataLoader(_torch_data(10, 4, 0.01), batch_size=4))
            n = sum(1 for _ in wrap(loader, acc, log_every=5))
            acc.end_training()
            got = scalars(d)
        self.assertEqual(n, 10)
        wait = got.get("gpufeed/data_wait_pct")
        self.assertTrue(wait, sorted(got))
        self.assertEqual([s for s, _ in wait], [5, 10])
        self.assertTrue(all(v > 50 for _, v in wait), wait)
        self.assertIn("gpufeed/samples_per_s", got)


if __name__ == "__main__":
    unittest.main()
