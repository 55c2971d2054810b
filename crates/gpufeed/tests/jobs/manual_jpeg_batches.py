"""No DataLoader: every step a helper picks random image files, opens and decodes each JPEG
with PIL, resizes it and stacks the batch in the training process. The helper is the loop's
time."""
import os
import random
import tempfile

import numpy as np
import torch
from PIL import Image


def write_jpegs(root, count, size):
    rng = np.random.default_rng(1)
    paths = []
    for i in range(count):
        path = os.path.join(root, f"frame_{i:04d}.jpg")
        Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(path)
        paths.append(path)
    return paths


def load_batch(paths, batch_size):
    chosen = random.sample(paths, batch_size)
    images = []
    for path in chosen:
        with Image.open(path) as image:
            image = image.convert("RGB").resize((48, 48))
            images.append(torch.from_numpy(np.array(image, dtype=np.float32) / 255.0))
    labels = torch.tensor([int(os.path.basename(p)[6:10]) % 10 for p in chosen])
    return torch.stack(images).permute(0, 3, 1, 2), labels


def main():
    torch.set_num_threads(1)
    random.seed(0)
    with tempfile.TemporaryDirectory() as root:
        paths = write_jpegs(root, 80, 448)
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 5, stride=4), torch.nn.ReLU(),
                                    torch.nn.Flatten(), torch.nn.Linear(8 * 11 * 11, 10))
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        for step in range(60):
            images, labels = load_batch(paths, 16)
            loss = torch.nn.functional.cross_entropy(model(images), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()


if __name__ == "__main__":
    main()
