"""A DDP script for torchrun (gloo on the CPU, two ranks): each rank reads its shard through a
dataset whose __getitem__ synthesises and normalises an audio clip in Python, num_workers=0.
Both ranks wait on that __getitem__."""
import math
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class ChirpClips(Dataset):
    def __len__(self):
        return 512

    def __getitem__(self, index):
        f0 = 100 + index % 50
        clip = [math.sin(2 * math.pi * (f0 + 0.05 * t) * t / 8000.0) for t in range(2000)]
        peak = max(abs(v) for v in clip) or 1.0
        frames = [sum(abs(v) for v in clip[k:k + 25]) / (25 * peak) for k in range(0, 2000, 25)]
        return torch.tensor(frames), index % 5


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    dataset = ChirpClips()
    loader = DataLoader(dataset, batch_size=16, num_workers=0,
                        sampler=DistributedSampler(dataset, world, rank))
    model = DDP(torch.nn.Sequential(torch.nn.Linear(80, 64), torch.nn.ReLU(), torch.nn.Linear(64, 5)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        for frames, labels in loader:
            loss = torch.nn.functional.cross_entropy(model(frames), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
