"""One DataLoader worker (num_workers=1) feeding a loop whose samples take far longer to make
than to train on: the training process waits on the one worker, whose __getitem__ (a
spectrogram computed in Python) is the slow stage."""
import math

import torch
from torch.utils.data import DataLoader, Dataset


class ToneSpectrograms(Dataset):
    def __init__(self, count):
        self.count = count

    def __len__(self):
        return self.count

    def __getitem__(self, index):
        freq = 50 + (index % 40) * 10
        signal = [math.sin(2 * math.pi * freq * t / 4000.0) for t in range(1024)]
        bins = []
        for k in range(0, 64):
            re = sum(signal[n] * math.cos(2 * math.pi * k * n / 1024) for n in range(0, 1024, 4))
            bins.append(abs(re))
        return torch.tensor(bins), index % 40


def main():
    torch.set_num_threads(1)
    loader = DataLoader(ToneSpectrograms(640), batch_size=16, shuffle=True, num_workers=1)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 40))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(1):
        for spectra, labels in loader:
            loss = torch.nn.functional.cross_entropy(model(spectra), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()


if __name__ == "__main__":
    main()
