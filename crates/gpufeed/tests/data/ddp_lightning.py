"""ddp_train.py's job as a Lightning module: Trainer(strategy="ddp", devices=2) on CPU, which
re-launches this script for rank 1 (rank 0 is the process started here).

Environment: STEPS (default 60), NUM_WORKERS (default 0), SLOW_RANK (a rank whose loading is
four times heavier).
"""
import os

import lightning as L
import torch
import torch.nn as nn
from torch.utils.data import DataLoader

from ddp_train import Jpegs

STEPS = int(os.environ.get("STEPS", "60"))
NUM_WORKERS = int(os.environ.get("NUM_WORKERS", "0"))
SLOW_RANK = os.environ.get("SLOW_RANK")


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1),
            nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(256, 10),
        )

    def training_step(self, batch, _):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        slow = SLOW_RANK is not None and int(SLOW_RANK) == self.global_rank
        return DataLoader(Jpegs(4 if slow else 1), batch_size=8, num_workers=NUM_WORKERS)


if __name__ == "__main__":
    torch.set_num_threads(1)
    trainer = L.Trainer(
        accelerator="cpu", devices=2, strategy="ddp", max_steps=STEPS,
        enable_progress_bar=False, logger=False, enable_checkpointing=False,
        enable_model_summary=False, use_distributed_sampler=False,
    )
    trainer.fit(Net())
    print(f"rank {trainer.global_rank}: done", flush=True)
