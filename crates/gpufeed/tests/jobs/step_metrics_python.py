"""Metrics computed in pure Python after every optimizer step: predictions and labels turned
into lists with .tolist(), then a confusion matrix, per-class precision/recall and top-k hits
counted row by row. The metric function is the loop's time."""
import torch


def compute_metrics(logits, labels, num_classes):
    probs = torch.softmax(logits, dim=1).tolist()
    targets = labels.tolist()
    confusion = [[0] * num_classes for _ in range(num_classes)]
    top3 = 0
    for row, target in zip(probs, targets):
        ranked = sorted(range(num_classes), key=lambda c: row[c], reverse=True)
        confusion[target][ranked[0]] += 1
        top3 += target in ranked[:3]
    precision = []
    recall = []
    for c in range(num_classes):
        predicted = sum(confusion[r][c] for r in range(num_classes))
        actual = sum(confusion[c])
        precision.append(confusion[c][c] / predicted if predicted else 0.0)
        recall.append(confusion[c][c] / actual if actual else 0.0)
    return {"top3": top3 / len(targets), "precision": precision, "recall": recall}


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    classes = 100
    inputs = torch.randn(8192, 32)
    targets = torch.randint(0, classes, (8192,))
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, classes))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    history = []
    for step in range(240):
        idx = torch.randint(0, 8192, (512,))
        logits = model(inputs[idx])
        loss = torch.nn.functional.cross_entropy(logits, targets[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        history.append(compute_metrics(logits.detach(), targets[idx], classes))


if __name__ == "__main__":
    main()
