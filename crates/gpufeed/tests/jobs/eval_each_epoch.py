"""An ImageNet-example-style loop: a short training epoch, then validate() over a validation
set several times larger than the epoch's training data, every epoch. The validation loop is
the loop's time."""
import torch


def make_batches(count, batch, generator):
    return [(torch.randn(batch, 3, 32, 32, generator=generator),
             torch.randint(0, 10, (batch,), generator=generator)) for _ in range(count)]


def train_one_epoch(model, batches, opt):
    model.train()
    for images, labels in batches:
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()


@torch.no_grad()
def validate(model, batches):
    model.eval()
    correct = 0
    total = 0
    for images, labels in batches:
        correct += (model(images).argmax(1) == labels).sum()
        total += len(labels)
    return correct / total


def main():
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    train_batches = make_batches(6, 64, g)
    val_batches = make_batches(40, 64, g)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(), torch.nn.Linear(32, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for epoch in range(4):
        train_one_epoch(model, train_batches, opt)
        validate(model, val_batches)


if __name__ == "__main__":
    main()
