"""A LightningModule trained on the CPU with Trainer(strategy="ddp_spawn", devices=2): Lightning
spawns the two ranks, each loading with num_workers=0 through a dataset whose __getitem__
renders a noisy shape pixel by pixel. Both ranks wait on that __getitem__."""
import math
import random

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset


class NoisyShapes(Dataset):
    def __len__(self):
        return 768

    def __getitem__(self, index):
        rng = random.Random(index)
        image = [[rng.random() * 0.1 for x in range(48)] for y in range(48)]
        for _ in range(3):
            cx, cy, r = rng.uniform(8, 40), rng.uniform(8, 40), rng.uniform(3, 10)
            for y in range(48):
                for x in range(48):
                    if math.hypot(x - cx, y - cy) < r:
                        image[y][x] = 1.0
        return torch.tensor(image).unsqueeze(0), index % 2


class ShapeClassifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(48 * 48, 2))

    def training_step(self, batch, batch_idx):
        images, labels = batch
        return torch.nn.functional.cross_entropy(self.net(images), labels)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)

    def train_dataloader(self):
        return DataLoader(NoisyShapes(), batch_size=16, num_workers=0)


def main():
    torch.set_num_threads(1)
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp_spawn", max_epochs=2,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(ShapeClassifier())


if __name__ == "__main__":
    main()
