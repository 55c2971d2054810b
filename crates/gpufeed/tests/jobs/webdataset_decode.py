"""A WebDataset pipeline over tar shards written to a temporary directory, with a per-sample
map() that parses each sample's text payload into features in Python (num_workers=0): the map
function is the loop's time."""
import io
import os
import random
import tarfile
import tempfile

import torch
import webdataset as wds
from torch.utils.data import DataLoader


def write_shards(root, shards, per_shard):
    rng = random.Random(0)
    urls = []
    for s in range(shards):
        path = os.path.join(root, f"train-{s:03d}.tar")
        with tarfile.open(path, "w") as tar:
            for i in range(per_shard):
                payload = " ".join(f"{rng.random():.6f}" for _ in range(600)).encode()
                for ext, data in (("txt", payload), ("cls", str(i % 3).encode())):
                    info = tarfile.TarInfo(f"sample{s:03d}{i:05d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        urls.append(path)
    return urls


def decode_sample(sample):
    values = [float(v) for v in sample["txt"].decode().split()]
    pooled = [sum(values[k:k + 10]) / 10.0 for k in range(0, len(values), 10)]
    centred = [v - sum(pooled) / len(pooled) for v in pooled]
    return torch.tensor(centred), int(sample["cls"])


def main():
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as root:
        urls = write_shards(root, 4, 400)
        dataset = wds.WebDataset(urls, shardshuffle=False).map(decode_sample)
        model = torch.nn.Linear(60, 3)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for epoch in range(2):
            for features, labels in DataLoader(dataset, batch_size=32, num_workers=0):
                loss = torch.nn.functional.cross_entropy(model(features), labels)
                opt.zero_grad()
                loss.backward()
                opt.step()


if __name__ == "__main__":
    main()
