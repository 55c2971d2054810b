"""A streaming IterableDataset that reads JSON-lines text shards from disk and tokenizes every
record in Python as it yields it (num_workers=0): its __iter__ is the loop's time."""
import json
import os
import random
import tempfile

import torch
from torch.utils.data import DataLoader, IterableDataset

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]


def write_shards(root, shards, records):
    rng = random.Random(0)
    paths = []
    for s in range(shards):
        path = os.path.join(root, f"shard_{s:03d}.jsonl")
        with open(path, "w") as f:
            for _ in range(records):
                text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(100, 300)))
                f.write(json.dumps({"text": text, "label": rng.randrange(4)}) + "\n")
        paths.append(path)
    return paths


class ShardStream(IterableDataset):
    def __init__(self, paths, length=64):
        self.paths = paths
        self.length = length
        self.vocab = {w: i + 1 for i, w in enumerate(WORDS)}

    def __iter__(self):
        for path in self.paths:
            with open(path) as f:
                for line in f:
                    record = json.loads(line)
                    ids = [self.vocab.get(w.strip(".,").lower(), 0) for w in record["text"].split()]
                    counts = [0] * (len(WORDS) + 1)
                    for i in ids:
                        counts[i] += 1
                    window = (ids + [0] * self.length)[: self.length]
                    yield torch.tensor(window + counts, dtype=torch.float32), record["label"]


def main():
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as root:
        paths = write_shards(root, 6, 800)
        model = torch.nn.Linear(64 + len(WORDS) + 1, 4)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        for epoch in range(2):
            for features, labels in DataLoader(ShardStream(paths), batch_size=32, num_workers=0):
                loss = torch.nn.functional.cross_entropy(model(features), labels)
                opt.zero_grad()
                loss.backward()
                opt.step()


if __name__ == "__main__":
    main()
