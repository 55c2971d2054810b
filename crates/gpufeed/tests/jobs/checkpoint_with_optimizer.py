"""A nanoGPT-style loop that writes a resumable checkpoint (model, AdamW state with both moments,
iteration, config) every few iterations: a pretrained token table stays frozen while the layers
above it train, and every save writes the whole of it again. The saves are the loop's time."""
import os
import tempfile

import torch


class TinyLM(torch.nn.Module):
    def __init__(self, vocab, dim):
        super().__init__()
        self.tokens = torch.nn.Embedding(vocab, dim)
        self.tokens.weight.requires_grad_(False)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 1024), torch.nn.GELU(),
                                       torch.nn.Linear(1024, dim))
        self.head = torch.nn.Linear(dim, 64)

    def forward(self, ids):
        return self.head(self.mlp(self.tokens(ids)))


def write_snapshot(model, optimizer, step, config, root):
    snapshot = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "iter_num": step,
        "config": config,
    }
    torch.save(snapshot, os.path.join(root, "ckpt.pt"))


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = {"vocab": 200_000, "dim": 128, "lr": 3e-4}
    model = TinyLM(config["vocab"], config["dim"])
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=config["lr"])
    with tempfile.TemporaryDirectory() as root:
        for step in range(1, 49):
            ids = torch.randint(0, config["vocab"], (16, 8))
            target = torch.randint(0, 64, (16, 8))
            logits = model(ids)
            loss = torch.nn.functional.cross_entropy(logits.view(-1, 64), target.view(-1))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if step % 4 == 0:
                write_snapshot(model, optimizer, step, config, root)


if __name__ == "__main__":
    main()
