"""A nanoGPT-style loop that estimates the train and validation loss every few iterations over
many evaluation batches (eval_iters far larger than the interval): the evaluation function is
the loop's time."""
import torch

VOCAB = 256
BLOCK = 64


def sample(data, batch):
    starts = torch.randint(len(data) - BLOCK - 1, (batch,))
    x = torch.stack([data[s:s + BLOCK] for s in starts])
    y = torch.stack([data[s + 1:s + BLOCK + 1] for s in starts])
    return x, y


@torch.no_grad()
def estimate_loss(model, splits, eval_iters):
    out = {}
    model.eval()
    for name, data in splits.items():
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            x, y = sample(data, 32)
            logits = model(x)
            losses[k] = torch.nn.functional.cross_entropy(logits.view(-1, VOCAB), y.view(-1))
        out[name] = losses.mean()
    model.train()
    return out


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    train = torch.randint(0, VOCAB, (200_000,))
    val = torch.randint(0, VOCAB, (50_000,))
    model = torch.nn.Sequential(torch.nn.Embedding(VOCAB, 64), torch.nn.Linear(64, 128),
                                torch.nn.GELU(), torch.nn.Linear(128, VOCAB))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for it in range(60):
        if it % 20 == 0:
            estimate_loss(model, {"train": train, "val": val}, eval_iters=60)
        x, y = sample(train, 32)
        loss = torch.nn.functional.cross_entropy(model(x).view(-1, VOCAB), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
