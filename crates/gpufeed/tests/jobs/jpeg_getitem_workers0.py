"""An image-folder dataset whose __getitem__ decodes real JPEG files with PIL, loaded in the
training process (num_workers=0): the decode is the loop's time."""
import os
import tempfile

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset


def write_jpegs(root, count, size):
    rng = np.random.default_rng(0)
    paths = []
    for i in range(count):
        pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
        path = os.path.join(root, f"img_{i:04d}.jpg")
        Image.fromarray(pixels).save(path, quality=90)
        paths.append(path)
    return paths


class JpegFolder(Dataset):
    def __init__(self, paths):
        self.paths = paths

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, index):
        image = Image.open(self.paths[index]).convert("RGB")
        image = image.resize((64, 64), Image.BILINEAR)
        array = np.asarray(image, dtype=np.float32) / 255.0
        return torch.from_numpy(array).permute(2, 0, 1), index % 10


def main():
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as root:
        loader = DataLoader(JpegFolder(write_jpegs(root, 96, 448)), batch_size=16,
                            shuffle=True, num_workers=0)
        model = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, stride=2), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(4), torch.nn.Flatten(), torch.nn.Linear(128, 10))
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        for epoch in range(4):
            for images, labels in loader:
                loss = torch.nn.functional.cross_entropy(model(images), labels)
                opt.zero_grad()
                loss.backward()
                opt.step()


if __name__ == "__main__":
    main()
