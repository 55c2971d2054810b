"""Gradient statistics read to the host every step: for every row of every weight, the
gradient's norm and largest value are pulled out with .item(), one small tensor at a time (on a
GPU each .item() waits for the device). The statistics helper is the loop's time."""
import torch


def grad_stats(model):
    stats = {}
    for name, p in model.named_parameters():
        if p.grad is None or p.grad.dim() < 2:
            continue
        norms = []
        peaks = []
        for row in p.grad:
            norms.append(row.norm().item())
            peaks.append(row.abs().max().item())
        stats[name] = (max(norms), max(peaks))
    return stats


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    layers = []
    for _ in range(6):
        layers += [torch.nn.Linear(128, 128), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 128)
    y = torch.randint(0, 10, (64,))
    for step in range(80):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        grad_stats(model)
        opt.step()


if __name__ == "__main__":
    main()
