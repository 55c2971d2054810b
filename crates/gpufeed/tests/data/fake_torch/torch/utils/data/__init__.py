from .dataset import Dataset, IterableDataset  # noqa: F401
from .dataloader import DataLoader  # noqa: F401
