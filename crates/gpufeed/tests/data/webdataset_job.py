"""A webdataset job (issue 37 item 2): JPEG images in tar shards it writes itself, decoded by
webdataset's .decode("pil") and resized by torchvision v1 transforms, read by a torch DataLoader.

    python webdataset_job.py STEPS WORKERS SHARD_DIR [SHARDS]
"""
import io, os, sys, random, tarfile, torch
import webdataset as wds
from PIL import Image
from torch.utils.data import DataLoader
import torchvision.transforms as T

def make_shards(d, shards=2, per=200):
    os.makedirs(d, exist_ok=True)
    rng = random.Random(0)
    urls = []
    for s in range(shards):
        p = os.path.join(d, "shard-%04d.tar" % s)
        urls.append(p)
        if os.path.exists(p):
            continue
        with tarfile.open(p, "w") as tar:
            for i in range(per):
                im = Image.new("RGB", (640, 480), (rng.randint(0, 255), 30, 60))
                b = io.BytesIO(); im.save(b, "JPEG", quality=90); data = b.getvalue()
                for ext, payload in (("jpg", data), ("cls", str(i % 10).encode())):
                    ti = tarfile.TarInfo("%06d.%s" % (s * per + i, ext)); ti.size = len(payload)
                    tar.addfile(ti, io.BytesIO(payload))
    return urls

if __name__ == "__main__":
    torch.set_num_threads(1)
    steps, workers = int(sys.argv[1]), int(sys.argv[2])
    urls = make_shards(sys.argv[3], shards=int(sys.argv[4]) if len(sys.argv) > 4 else 2)
    tf = T.Compose([T.Resize(128), T.CenterCrop(112), T.ToTensor()])
    ds = (wds.WebDataset(urls, shardshuffle=False, empty_check=False).decode("pil")
          .to_tuple("jpg", "cls").map_tuple(tf, int))
    if workers == 0:
        ds = ds.repeat()  # with workers, one pass: a worker with no shard then simply ends
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 112 * 112, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(ds, batch_size=16, num_workers=workers)
    for step, (x, y) in enumerate(loader):
        loss = torch.nn.functional.cross_entropy(model(x), torch.as_tensor(y))
        opt.zero_grad(); loss.backward(); opt.step()
        if step + 1 >= steps:
            break
