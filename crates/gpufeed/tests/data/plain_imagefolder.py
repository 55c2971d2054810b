"""A plain training script as people write it: torchvision's ImageFolder over JPEG files on disk,
a DataLoader with num_workers=0, no tqdm and no step markers; it prints the loss every 50 steps.

    python plain_imagefolder.py DATA_DIR SECONDS [--val] [--threads] [--iter-only] [--subclass]
        [--monkeypatch] [--probe]

DATA_DIR is filled with JPEG files (2 classes) when it does not exist. --val runs a validation
loader after each epoch. The other flags are the odd uses gpufeed's DataLoader hook must survive:
a loader also iterated from a second thread, iter() without next(), a DataLoader subclass
overriding __iter__, a job that replaces DataLoader itself, and the job's own step markers
(gpufeed_probe.wrap)."""
import os
import random
import sys
import threading
import time

import torch
from PIL import Image
from torchvision import datasets, transforms

root, seconds = sys.argv[1], float(sys.argv[2])
flags = set(sys.argv[3:])

if not os.path.isdir(root):
    rnd = random.Random(0)
    for c in ("cat", "dog"):
        os.makedirs(os.path.join(root, c))
        for i in range(48):
            img = Image.effect_noise((320, 240), 40 + rnd.random() * 40).convert("RGB")
            img.save(os.path.join(root, c, "%d.jpg" % i), quality=90)

if "--monkeypatch" in flags:
    class LoggingLoader(torch.utils.data.DataLoader):
        def __iter__(self):
            return super().__iter__()

    torch.utils.data.DataLoader = LoggingLoader

DataLoader = torch.utils.data.DataLoader
if "--subclass" in flags:
    class Loader(DataLoader):
        def __iter__(self):
            for b in super().__iter__():
                yield b
else:
    Loader = DataLoader

torch.set_num_threads(1)
tf = transforms.Compose([transforms.RandomResizedCrop(64), transforms.ToTensor()])


def open_slowly(path):
    # Storage like a network file system: 4 ms before the bytes arrive, then PIL decodes. Worker
    # processes overlap the wait whatever the number of cores.
    time.sleep(0.004)
    return datasets.folder.default_loader(path)


# Each image five times an epoch (60 batches): epochs long enough that worker start-up is no cost.
images = torch.utils.data.ConcatDataset([datasets.ImageFolder(root, tf, loader=open_slowly)] * 5)
train = Loader(images, batch_size=8, shuffle=True, num_workers=0)
val = DataLoader(datasets.ImageFolder(root, tf), batch_size=16, num_workers=0)
model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=4), torch.nn.ReLU(),
                            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.01)

if "--iter-only" in flags:
    iter(train)  # an iterator never advanced
if "--threads" in flags:
    def side():
        for _ in zip(range(3), val):
            pass
    threading.Thread(target=side).start()

if "--probe" in flags:
    import gpufeed_probe

    wrap = gpufeed_probe.wrap
else:
    def wrap(loader):
        return loader


def compute():
    end = time.perf_counter() + 0.004  # the rest of a training step, like a GPU's
    while time.perf_counter() < end:
        pass


t0 = time.time()
step = 0
while time.time() - t0 < seconds:
    for x, y in wrap(train):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        compute()
        step += 1
        if step % 50 == 0:
            print("step %d loss %.3f" % (step, loss.item()), flush=True)
        if time.time() - t0 >= seconds:
            break
    if "--val" in flags:
        with torch.no_grad():
            for x, y in val:
                model(x)
print("done: %d steps" % step, flush=True)
