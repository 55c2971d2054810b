"""A torchvision v2 job (issue 37 item 2): uint8 image tensors augmented by v2 transforms
(RandomResizedCrop, ColorJitter) in __getitem__, loaded with num_workers=0.

    python torchvision_v2_job.py STEPS
"""
import sys, torch
from torch.utils.data import Dataset, DataLoader
from torchvision.transforms import v2

class Frames(Dataset):
    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.imgs = [torch.randint(0, 256, (3, 480, 640), dtype=torch.uint8, generator=g) for _ in range(32)]
        self.tf = v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip(),
                              v2.ColorJitter(0.4, 0.4, 0.4), v2.ToDtype(torch.float32, scale=True)])
    def __len__(self):
        return 1 << 16
    def __getitem__(self, i):
        return self.tf(self.imgs[i % 32]), i % 10

if __name__ == "__main__":
    torch.set_num_threads(1)
    steps = int(sys.argv[1])
    model = torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(8), torch.nn.Flatten(), torch.nn.Linear(192, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step, (x, y) in enumerate(DataLoader(Frames(), batch_size=16, num_workers=0)):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
        if step + 1 >= steps:
            break
