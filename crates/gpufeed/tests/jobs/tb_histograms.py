"""Per-parameter TensorBoard histograms after every training batch, as a model-inspection
callback that calls `add_histogram(name, params, ...)` for every named parameter at each
batch end: binning every weight and gradient on the host is the loop's time."""
import tempfile

import torch
from torch.utils.tensorboard import SummaryWriter


def log_histograms(writer, model, step):
    for name, param in model.named_parameters():
        writer.add_histogram(name, param, step)
        writer.add_histogram(f"{name}.grad", param.grad, step)


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU())
                                  for _ in range(4)], torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 256)
    y = torch.randint(0, 10, (32,))
    with tempfile.TemporaryDirectory() as logdir:
        writer = SummaryWriter(logdir)
        for step in range(30):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            log_histograms(writer, model, step)
        writer.close()


if __name__ == "__main__":
    main()
