"""Short epochs over a DataLoader with two workers and no persistent_workers: both workers are
started anew at the top of every epoch (each rebuilding the dataset's lookup table in the new
process), and the loop waits for them each time."""
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info


class Captions(Dataset):
    def __init__(self, count):
        self.count = count
        self.vocab = None

    def __len__(self):
        return self.count

    def __getitem__(self, index):
        tokens = [(index * 31 + k) % 997 for k in range(32)]
        return torch.tensor(tokens), index % 5


def build_vocab(worker_id):
    # Each worker builds its own table when it starts, as many text pipelines do.
    dataset = get_worker_info().dataset
    dataset.vocab = {f"tok{i}": i for i in range(150_000)}


def main():
    torch.set_num_threads(1)
    loader = DataLoader(Captions(64), batch_size=16, shuffle=True, num_workers=2,
                        worker_init_fn=build_vocab)
    model = torch.nn.Sequential(torch.nn.Embedding(997, 16), torch.nn.Flatten(),
                                torch.nn.Linear(32 * 16, 5))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(12):
        for tokens, labels in loader:
            loss = torch.nn.functional.cross_entropy(model(tokens), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()


if __name__ == "__main__":
    main()
