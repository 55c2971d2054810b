"""No DataLoader: a nanoGPT-style get_batch slices random windows out of a memory-mapped token
file and converts each window sample by sample (through Python lists) before stacking. The
helper is the loop's time; the model is a small bigram-style network."""
import os
import tempfile

import numpy as np
import torch

BLOCK = 256
BATCH = 32
VOCAB = 64


def get_batch(data, remap):
    starts = torch.randint(len(data) - BLOCK - 1, (BATCH,)).tolist()
    xs, ys = [], []
    for s in starts:
        window = [remap[t] for t in data[s:s + BLOCK + 1].astype(np.int64).tolist()]
        xs.append(torch.tensor(window[:-1]))
        ys.append(torch.tensor(window[1:]))
    return torch.stack(xs), torch.stack(ys)


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as root:
        path = os.path.join(root, "train.bin")
        np.random.default_rng(0).integers(0, 50000, 2_000_000, dtype=np.uint16).tofile(path)
        data = np.memmap(path, dtype=np.uint16, mode="r")
        # The token ids of the file, folded into the model's small vocabulary.
        remap = {t: t % VOCAB for t in range(50000)}
        model = torch.nn.Sequential(torch.nn.Embedding(VOCAB, 8), torch.nn.Linear(8, VOCAB))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(120):
            x, y = get_batch(data, remap)
            logits = model(x)
            loss = torch.nn.functional.cross_entropy(logits.view(-1, VOCAB), y.view(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()


if __name__ == "__main__":
    main()
