"""A tqdm progress bar refreshed every step, whose postfix is recomputed each time from the whole
loss history in Python (running mean, median, percentiles, an exponential average): the postfix
helper grows with the run and becomes the loop's time."""
import torch
from tqdm import tqdm


def postfix_stats(history):
    ordered = sorted(history)
    n = len(ordered)
    ema = 0.0
    for v in history:
        ema = 0.98 * ema + 0.02 * v
    return {
        "loss": f"{history[-1]:.4f}",
        "mean": f"{sum(history) / n:.4f}",
        "p50": f"{ordered[n // 2]:.4f}",
        "p90": f"{ordered[min(n - 1, int(n * 0.9))]:.4f}",
        "ema": f"{ema:.4f}",
    }


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Linear(32, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 32)
    y = torch.randn(64, 1)
    # A history long enough to resume from, as after earlier epochs.
    history = [float(i % 97) / 97.0 for i in range(60_000)]
    bar = tqdm(range(400), mininterval=0)
    for step in bar:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        history.append(loss.item())
        bar.set_postfix(postfix_stats(history))


if __name__ == "__main__":
    main()
