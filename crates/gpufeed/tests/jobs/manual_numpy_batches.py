"""No DataLoader: a nanoGPT-style get_batch slices random windows out of a memory-mapped token
file and converts each window sample by sample (through Python lists, folding every id into the
model's vocabulary) before stacking. The model reads a window's tokens as a bag and predicts the
token after it, so the helper is the loop's time."""
import os
import tempfile

import numpy as np
import torch

BLOCK = 256
BATCH = 128
VOCAB = 64


def get_batch(data, remap):
    starts = torch.randint(len(data) - BLOCK - 1, (BATCH,)).tolist()
    xs, ys = [], []
    for s in starts:
        window = [remap[t] for t in data[s:s + BLOCK + 1].astype(np.int64).tolist()]
        xs.append(torch.tensor(window[:-1]))
        ys.append(window[-1])
    return torch.stack(xs), torch.tensor(ys)


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as root:
        path = os.path.join(root, "train.bin")
        np.random.default_rng(0).integers(0, 50000, 2_000_000, dtype=np.uint16).tofile(path)
        data = np.memmap(path, dtype=np.uint16, mode="r")
        # The token ids of the file, folded into the model's small vocabulary.
        remap = {t: t % VOCAB for t in range(50000)}
        bag = torch.nn.EmbeddingBag(VOCAB, 32, mode="mean")
        head = torch.nn.Linear(32, VOCAB)
        opt = torch.optim.SGD(list(bag.parameters()) + list(head.parameters()), lr=0.1)
        for step in range(80):
            x, y = get_batch(data, remap)
            loss = torch.nn.functional.cross_entropy(head(bag(x)), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()


if __name__ == "__main__":
    main()
