class Dataset:
    pass


class IterableDataset(Dataset):
    pass
