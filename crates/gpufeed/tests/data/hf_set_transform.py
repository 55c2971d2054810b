"""A Hugging Face datasets job (issue 37 item 2): a per-batch transform given to set_transform
(a Python loop over every value) run as the DataLoader reads each batch.

    python hf_set_transform.py STEPS
"""
import sys, random, torch
from datasets import Dataset as HFDataset
from torch.utils.data import DataLoader

rng = random.Random(0)
rows = {"x": [[rng.random() for _ in range(256)] for _ in range(4096)], "y": [rng.randint(0, 9) for _ in range(4096)]}

def normalize(batch):
    # Per batch at load time: a Python loop over every value.
    xs = []
    for row in batch["x"]:
        m = sum(row) / len(row)
        xs.append([(v - m) * 2.0 for v in row])
    return {"x": torch.tensor(xs), "y": torch.tensor(batch["y"])}

if __name__ == "__main__":
    torch.set_num_threads(1)
    steps = int(sys.argv[1])
    ds = HFDataset.from_dict(rows)
    ds.set_transform(normalize)
    model = torch.nn.Linear(256, 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(ds, batch_size=64, num_workers=0, shuffle=True)
    step = 0
    while step < steps:
        for b in loader:
            loss = torch.nn.functional.cross_entropy(model(b["x"]), b["y"])
            opt.zero_grad(); loss.backward(); opt.step()
            step += 1
            if step >= steps:
                break
