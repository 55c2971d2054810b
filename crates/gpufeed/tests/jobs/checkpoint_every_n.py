"""A fine-tuning loop (a frozen embedding backbone and a small trained head) that saves the
whole state dict with torch.save every few steps into a temporary directory: each save writes
about 200 MB, and the saves are the loop's time."""
import os
import tempfile

import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = torch.nn.Embedding(400_000, 128)
        self.backbone.weight.requires_grad_(False)
        self.head = torch.nn.Linear(128, 8)

    def forward(self, ids):
        return self.head(self.backbone(ids).mean(dim=1))


def save_checkpoint(model, step, root):
    path = os.path.join(root, "model.pt")
    torch.save({"step": step, "model": model.state_dict()}, path)


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = Model()
    opt = torch.optim.SGD(model.head.parameters(), lr=0.1)
    with tempfile.TemporaryDirectory() as root:
        for step in range(1, 41):
            ids = torch.randint(0, 400_000, (64, 32))
            labels = torch.randint(0, 8, (64,))
            loss = torch.nn.functional.cross_entropy(model(ids), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % 4 == 0:
                save_checkpoint(model, step, root)


if __name__ == "__main__":
    main()
