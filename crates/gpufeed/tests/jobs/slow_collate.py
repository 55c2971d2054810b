"""A detection-style collate_fn that pads variable numbers of boxes per image in pure Python
(list by list, then a tensor), loaded with num_workers=0: the collate function is the loop's
time."""
import random

import torch
from torch.utils.data import DataLoader, Dataset


class BoxScenes(Dataset):
    def __init__(self, count):
        rng = random.Random(0)
        self.scenes = [[[rng.random() for _ in range(4)] + [rng.randrange(20)]
                        for _ in range(rng.randint(5, 200))] for _ in range(count)]

    def __len__(self):
        return len(self.scenes)

    def __getitem__(self, index):
        return torch.zeros(3, 16, 16), self.scenes[index]


def collate_boxes(batch):
    images = torch.stack([image for image, _ in batch])
    widest = max(len(boxes) for _, boxes in batch)
    padded, masks = [], []
    for _, boxes in batch:
        rows = [list(box) for box in boxes]
        mask = [1.0] * len(rows)
        while len(rows) < widest:
            rows.append([0.0, 0.0, 0.0, 0.0, -1])
            mask.append(0.0)
        rows = [[float(v) for v in row] for row in rows]
        padded.append(rows)
        masks.append(mask)
    return images, torch.tensor(padded), torch.tensor(masks)


def main():
    torch.set_num_threads(1)
    loader = DataLoader(BoxScenes(1024), batch_size=64, shuffle=True, num_workers=0,
                        collate_fn=collate_boxes)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 16 * 16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(3):
        for images, boxes, mask in loader:
            pred = model(images)
            loss = ((pred.unsqueeze(1) - boxes[..., :4]) ** 2 * mask.unsqueeze(-1)).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()


if __name__ == "__main__":
    main()
