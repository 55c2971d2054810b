"""Two data-parallel ranks started by hand with multiprocessing.Process (as the Hogwild example
starts its trainers), joined by gloo and DDP, each reading its samples in-process through a
slow __getitem__ that parses text records: every rank waits on that __getitem__."""
import multiprocessing
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class CsvRecords(Dataset):
    def __init__(self, count):
        self.lines = [",".join(f"{(i * 7 + k) % 1000 / 10.0}" for k in range(256))
                      for i in range(count)]

    def __len__(self):
        return len(self.lines)

    def __getitem__(self, index):
        values = [float(v) for v in self.lines[index].split(",")]
        mean = sum(values) / len(values)
        std = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5 or 1.0
        features = [(v - mean) / std for v in values]
        smoothed = [sum(features[max(0, k - 4):k + 5]) / 9.0 for k in range(len(features))]
        return torch.tensor(smoothed), index % 4


def train(rank, world_size, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.set_num_threads(1)
    dataset = CsvRecords(2048)
    loader = DataLoader(dataset, batch_size=32, num_workers=0,
                        sampler=DistributedSampler(dataset, world_size, rank))
    model = DDP(torch.nn.Linear(256, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for features, labels in loader:
        loss = torch.nn.functional.cross_entropy(model(features), labels)
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
    port = free_port()
    processes = []
    for rank in range(2):
        p = multiprocessing.Process(target=train, args=(rank, 2, port))
        p.start()
        processes.append(p)
    for p in processes:
        p.join()
    raise SystemExit(max(p.exitcode for p in processes))
