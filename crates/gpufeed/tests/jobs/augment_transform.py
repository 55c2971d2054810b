"""A custom augmentation written as a transform class (random per-row shifts and noise in pure
Python over each image), applied in __getitem__ with num_workers=0: the transform's __call__ is
the loop's time."""
import random

import torch
from torch.utils.data import DataLoader, Dataset


class RowJitter:
    """Shifts every row of every channel by a random offset and adds noise, row by row."""

    def __init__(self, max_shift=3, noise=0.05):
        self.max_shift = max_shift
        self.noise = noise

    def __call__(self, image):
        channels = []
        for channel in image:
            rows = []
            for row in channel.tolist():
                shift = random.randint(-self.max_shift, self.max_shift)
                row = row[shift:] + row[:shift]
                rows.append([v + random.gauss(0.0, self.noise) for v in row])
            channels.append(rows)
        return torch.tensor(channels)


class InMemoryImages(Dataset):
    def __init__(self, count, transform):
        generator = torch.Generator().manual_seed(0)
        self.images = torch.rand(count, 3, 32, 32, generator=generator)
        self.labels = torch.randint(0, 10, (count,), generator=generator)
        self.transform = transform

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        return self.transform(self.images[index]), self.labels[index]


def main():
    torch.set_num_threads(1)
    random.seed(0)
    loader = DataLoader(InMemoryImages(512, RowJitter()), batch_size=32, shuffle=True,
                        num_workers=0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, 64),
                                torch.nn.ReLU(), torch.nn.Linear(64, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(3):
        for images, labels in loader:
            loss = torch.nn.functional.cross_entropy(model(images), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()


if __name__ == "__main__":
    main()
