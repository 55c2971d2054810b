"""Two data-parallel ranks started with torch.multiprocessing.spawn (gloo, DDP), each loading
its shard in its own process (num_workers=0) through a slow transform: every rank waits on
its transform's __call__."""
import os
import random

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class Cutout:
    """Blanks a random square of every image, pixel by pixel."""

    def __init__(self, size):
        self.size = size

    def __call__(self, image):
        rows = image.tolist()
        top = random.randrange(len(rows[0]) - self.size)
        left = random.randrange(len(rows[0][0]) - self.size)
        for channel in rows:
            for r in range(top, top + self.size):
                for c in range(left, left + self.size):
                    channel[r][c] = 0.0
        return torch.tensor(rows)


class Tiles(Dataset):
    def __init__(self, count, transform):
        g = torch.Generator().manual_seed(0)
        self.images = torch.rand(count, 3, 32, 32, generator=g)
        self.transform = transform

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        return self.transform(self.images[index]), index % 10


def run(rank, world_size, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.set_num_threads(1)
    random.seed(rank)
    dataset = Tiles(1440, Cutout(24))
    loader = DataLoader(dataset, batch_size=16, num_workers=0,
                        sampler=DistributedSampler(dataset, world_size, rank))
    model = DDP(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for images, labels in loader:
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    mp.spawn(run, args=(2, free_port()), nprocs=2)
