"""Logging every step: a helper formats a record of the step (per-layer weight and gradient
statistics, and every sample's loss) into a line of text and writes it through the logging
module to a file. The formatting is the loop's time."""
import json
import logging
import os
import tempfile

import torch


def log_step(logger, step, model, per_sample_loss):
    record = {"step": step}
    for name, p in model.named_parameters():
        values = p.detach().flatten().tolist()
        grads = p.grad.flatten().tolist()
        record[name] = {
            "mean": f"{sum(values) / len(values):.6f}",
            "absmax": f"{max(abs(v) for v in values):.6f}",
            "grad_rms": f"{(sum(g * g for g in grads) / len(grads)) ** 0.5:.6e}",
        }
    record["losses"] = [f"{v:.5f}" for v in per_sample_loss.tolist()]
    logger.info("step %d %s", step, json.dumps(record, sort_keys=True))


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as root:
        logger = logging.getLogger("train")
        logger.setLevel(logging.INFO)
        logger.addHandler(logging.FileHandler(os.path.join(root, "train.log")))
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        inputs = torch.randn(256, 64)
        targets = torch.randint(0, 10, (256,))
        for step in range(320):
            per_sample = torch.nn.functional.cross_entropy(model(inputs), targets, reduction="none")
            loss = per_sample.mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            log_step(logger, step, model, per_sample.detach())


if __name__ == "__main__":
    main()
