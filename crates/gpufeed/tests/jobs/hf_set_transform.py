"""A Hugging Face `datasets` image dataset with an on-the-fly transform (`set_transform`) that
augments every example in Python when it is read, loaded with num_workers=0: the transform is
the loop's time."""
import random

import numpy as np
import torch
from datasets import Dataset as HFDataset
from torch.utils.data import DataLoader


def make_dataset(count):
    rng = np.random.default_rng(0)
    return HFDataset.from_dict({
        "pixels": [rng.integers(0, 256, (24, 24), dtype=np.uint8).tolist() for _ in range(count)],
        "label": [int(i % 10) for i in range(count)],
    })


def augment_examples(examples):
    out = []
    for pixels in examples["pixels"]:
        flip = random.random() < 0.5
        rows = []
        for row in pixels:
            row = row[::-1] if flip else row
            rows.append([(v / 255.0 - 0.5) / 0.25 + random.uniform(-0.02, 0.02) for v in row])
        out.append(torch.tensor(rows).unsqueeze(0))
    return {"pixel_values": out, "label": examples["label"]}


def collate(batch):
    return (torch.stack([b["pixel_values"] for b in batch]),
            torch.tensor([b["label"] for b in batch]))


def main():
    torch.set_num_threads(1)
    random.seed(0)
    dataset = make_dataset(1024)
    dataset.set_transform(augment_examples)
    loader = DataLoader(dataset, batch_size=32, shuffle=True, num_workers=0, collate_fn=collate)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(24 * 24, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(3):
        for pixels, labels in loader:
            loss = torch.nn.functional.cross_entropy(model(pixels), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()


if __name__ == "__main__":
    main()
