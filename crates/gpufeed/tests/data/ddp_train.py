"""A small DDP training job on CPU (gloo): each rank decodes and colour-jitters JPEGs in its
DataLoader, then runs a small conv net. Started by torchrun, `accelerate launch` or run alone.

Environment: STEPS (default 60), NUM_WORKERS (default 0), SLOW_RANK (a rank whose loading is
four times heavier: it starves the others).
"""
import io
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms

STEPS = int(os.environ.get("STEPS", "60"))
NUM_WORKERS = int(os.environ.get("NUM_WORKERS", "0"))
SLOW_RANK = os.environ.get("SLOW_RANK")


def make_jpeg(seed):
    g = torch.Generator().manual_seed(seed)
    arr = (torch.rand(160, 160, 3, generator=g) * 255).to(torch.uint8).numpy()
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


class Jpegs(Dataset):
    def __init__(self, repeat):
        self.blobs = [make_jpeg(i) for i in range(16)]
        self.repeat = repeat
        self.tf = transforms.Compose(
            [
                transforms.ColorJitter(0.4, 0.4, 0.4, 0.1),
                transforms.RandomResizedCrop(96),
                transforms.ToTensor(),
            ]
        )

    def __len__(self):
        return 1 << 20

    def __getitem__(self, i):
        x = None
        for _ in range(self.repeat):
            img = Image.open(io.BytesIO(self.blobs[i % len(self.blobs)])).convert("RGB")
            x = self.tf(img)
        return x, i % 10


def main():
    local = "RANK" in os.environ
    if local:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if local else 0
    torch.manual_seed(0)
    torch.set_num_threads(1)
    repeat = 4 if SLOW_RANK is not None and int(SLOW_RANK) == rank else 1
    loader = DataLoader(Jpegs(repeat), batch_size=8, num_workers=NUM_WORKERS)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1),
        nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(256, 10),
    )
    if local:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    t0 = time.time()
    for step, (x, y) in enumerate(loader):
        if step >= STEPS:
            break
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"rank {rank}: {STEPS} steps in {time.time() - t0:.1f} s", flush=True)
    if local:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
