"""A real image-classification training job for trying gpufeed: JPEG decoding and torchvision
augmentation in a Dataset, a ResNet (default ResNet-50, random init) trained with SGD, on CUDA
when there is a GPU, else on the CPU.

At ``--workers 0`` (decoding in the training process), pageable memory and fp32 it starves a
fast GPU: the GPU waits for the CPU to decode. The knobs are the usual fixes:

    python examples/train_images.py --workers 0 --pin 0 --amp off --seconds 60      # starved
    python examples/train_images.py --workers 8 --pin 1 --amp bf16 --channels-last 1 # tuned

    gpufeed run -- python examples/train_images.py --seconds 60
    gpufeed sweep -L workers 0,4,8,16 -- python examples/train_images.py --workers {workers}
    gpufeed batch-size --param bs --start 64 --max 1024 -- \\
        python examples/train_images.py --data synthetic --batch-size {bs}

Data: ``--images`` synthetic JPEGs (``--image-size``, default 500x375 like an average ImageNet
photo, noise and shapes so that they compress like photos) are made once with PIL, in parallel,
into ``--data-dir`` (default ``$XDG_CACHE_HOME/gpufeed-examples/``) and reused. ``--data
synthetic`` skips decoding (random tensors made on the device): for batch-size searches.

Output: one line every ``--print-every`` seconds and a last one, both readable by
``gpufeed sweep --rate-regex 'images/s ([0-9.]+)'``::

    train: step 40 images/s 152.3 data_wait 81.2% loss 6.93
    done: steps 120 seconds 60.1 images/s 151.9 data_wait 80.7%

Under gpufeed (``GPUFEED_STEP_SOCKET`` set) each step also sends a step marker with its data
wait and batch size (docs/step-protocol.md), through the installed ``gpufeed`` package or the
repository's python/gpufeed_probe.py. ``--profile DIR`` writes a PyTorch profiler (Kineto) trace
of a few steps into DIR for ``gpufeed analyze``.
"""

import argparse
import io
import itertools
import math
import os
import random
import sys
import time

try:
    import gpufeed_probe as probe
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    try:
        import gpufeed_probe as probe
    except ImportError:  # the example still runs without gpufeed
        probe = None


def parse_bool(s):
    v = str(s).strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError("expected 0 or 1, got %r" % s)


def parse_amp(s):
    v = str(s).strip().lower()
    aliases = {"0": "off", "none": "off", "fp32": "off", "1": "bf16", "bfloat16": "bf16", "float16": "fp16"}
    v = aliases.get(v, v)
    if v not in ("off", "bf16", "fp16"):
        raise argparse.ArgumentTypeError("--amp: off, bf16 or fp16 (0/1 also work), got %r" % s)
    return v


def parse_size(s):
    try:
        w, h = (int(x) for x in s.lower().split("x"))
        if w < 32 or h < 32:
            raise ValueError
        return w, h
    except ValueError:
        raise argparse.ArgumentTypeError("--image-size: WIDTHxHEIGHT, each at least 32, got %r" % s)


def options(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=0, help="DataLoader worker processes (default 0)")
    p.add_argument("--pin", type=parse_bool, default=False, help="pin_memory 0/1 (default 0)")
    p.add_argument("--amp", type=parse_amp, default="off", help="mixed precision: off, bf16, fp16 (default off)")
    p.add_argument("--batch-size", type=int, default=128, help="images per step (default 128)")
    p.add_argument("--channels-last", type=parse_bool, default=False, help="channels_last memory format 0/1")
    p.add_argument("--seconds", type=float, default=60.0, help="train this long, then exit (0: until stopped)")
    p.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: no limit)")
    p.add_argument("--arch", default="resnet50", help="torchvision model (default resnet50; resnet18 for CPU tries)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N (default auto)")
    p.add_argument("--data", choices=("jpeg", "synthetic"), default="jpeg", help="jpeg: decode+augment; synthetic: random tensors on the device")
    p.add_argument("--images", type=int, default=2048, help="synthetic JPEGs in the data set (default 2048)")
    p.add_argument("--image-size", type=parse_size, default=(500, 375), help="JPEG size WxH (default 500x375)")
    p.add_argument("--crop", type=int, default=224, help="training crop (default 224)")
    p.add_argument("--data-dir", default=None, help="where the JPEGs are made and kept")
    p.add_argument("--prefetch-factor", type=int, default=2, help="batches prefetched per worker (workers > 0)")
    p.add_argument("--print-every", type=float, default=2.0, help="seconds between rate lines")
    p.add_argument("--profile", metavar="DIR", default=None, help="write a Kineto trace of a few steps to DIR")
    p.add_argument("--profile-skip", type=int, default=10, help="steps before the profiled ones (default 10)")
    p.add_argument("--profile-steps", type=int, default=8, help="profiled steps (default 8)")
    a = p.parse_args(argv)
    for name in ("workers", "batch_size", "images", "crop", "prefetch_factor", "steps", "profile_skip", "profile_steps"):
        v = getattr(a, name)
        if v < 0 or (v == 0 and name in ("batch_size", "images", "crop", "prefetch_factor", "profile_steps")):
            p.error("--%s must be %s, got %d" % (name.replace("_", "-"), "positive" if v <= 0 else "valid", v))
    if a.seconds < 0 or a.print_every <= 0:
        p.error("--seconds must be >= 0 and --print-every > 0")
    return a


# --- data ---------------------------------------------------------------------------------------


def _make_jpeg(job):
    """One photo-like JPEG: noise (photos are not flat) under random shapes, quality 90."""
    from PIL import Image, ImageDraw, ImageFilter

    path, index, (w, h) = job
    rng = random.Random(index)
    img = Image.merge("RGB", [Image.effect_noise((w, h), rng.uniform(30, 70)) for _ in range(3)])
    draw = ImageDraw.Draw(img)
    for _ in range(12):
        x0, y0 = rng.randrange(w), rng.randrange(h)
        x1, y1 = x0 + rng.randrange(20, w // 2), y0 + rng.randrange(20, h // 2)
        color = tuple(rng.randrange(256) for _ in range(3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)((x0, y0, x1, y1), fill=color)
    img = img.filter(ImageFilter.GaussianBlur(0.8))
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=90)
    tmp = path + ".tmp%d" % os.getpid()
    with open(tmp, "wb") as f:
        f.write(buf.getvalue())
    os.replace(tmp, path)


def prepare_jpegs(args):
    """Makes the data set once (in parallel); returns the list of files."""
    base = args.data_dir or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "gpufeed-examples"
    )
    w, h = args.image_size
    folder = os.path.join(base, "jpeg-%d-%dx%d" % (args.images, w, h))
    files = [os.path.join(folder, "%06d.jpg" % i) for i in range(args.images)]
    done = os.path.join(folder, "COMPLETE")
    if os.path.exists(done):
        return files, folder
    os.makedirs(folder, exist_ok=True)
    todo = [(f, i, (w, h)) for i, f in enumerate(files) if not os.path.exists(f)]
    t0 = time.monotonic()
    if todo:
        import multiprocessing as mp

        procs = max(1, min(len(os.sched_getaffinity(0)), 16))
        with mp.get_context("fork").Pool(procs) as pool:
            for _ in pool.imap_unordered(_make_jpeg, todo, chunksize=16):
                pass
    open(done, "w").close()
    size = sum(os.path.getsize(f) for f in files)
    print("data: made %d JPEGs (%.0f KB each) in %s in %.1f s" % (len(todo), size / len(files) / 1024, folder, time.monotonic() - t0), flush=True)
    return files, folder


class JpegDataset:
    """Decodes a JPEG with PIL and augments it like ImageNet training (torchvision)."""

    def __init__(self, files, crop, classes):
        from torchvision import transforms

        self.files = files
        self.classes = classes
        self.transform = transforms.Compose([
            transforms.RandomResizedCrop(crop),
            transforms.RandomHorizontalFlip(),
            transforms.ColorJitter(0.4, 0.4, 0.4),
            transforms.ToTensor(),
            transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
        ])

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        from PIL import Image

        with Image.open(self.files[i]) as img:
            x = self.transform(img.convert("RGB"))
        return x, i % self.classes


# --- training -----------------------------------------------------------------------------------


def main(argv=None):
    args = options(argv)
    import torch
    import torchvision
    from torch.utils.data import DataLoader

    if args.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(args.device)
    cuda = device.type == "cuda"
    if cuda:
        torch.backends.cudnn.benchmark = True
    classes = 1000
    try:
        model = getattr(torchvision.models, args.arch)(weights=None, num_classes=classes)
    except AttributeError:
        sys.exit("train_images.py: error: no torchvision model %r (try resnet50, resnet18)" % args.arch)
    model = model.to(device)
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
    model = model.to(memory_format=memory_format)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.amp)
    scaler = torch.amp.GradScaler(device.type, enabled=(args.amp == "fp16" and cuda))

    if args.data == "jpeg":
        files, folder = prepare_jpegs(args)
        loader = DataLoader(
            JpegDataset(files, args.crop, classes), batch_size=args.batch_size, shuffle=True, drop_last=True,
            num_workers=args.workers, pin_memory=args.pin and cuda, persistent_workers=args.workers > 0,
            prefetch_factor=args.prefetch_factor if args.workers > 0 else None,
        )
        if len(loader) == 0:
            sys.exit("train_images.py: error: --images %d is less than one batch of %d" % (args.images, args.batch_size))

        def batches():
            for _ in itertools.count():
                for b in loader:
                    yield b
    else:
        x = torch.randn(args.batch_size, 3, args.crop, args.crop, device=device)
        y = torch.randint(0, classes, (args.batch_size,), device=device)

        def batches():
            while True:
                yield x, y

    print("config: arch %s device %s data %s workers %d pin %d amp %s batch %d channels_last %d torch %s" % (
        args.arch, device, args.data, args.workers, args.pin, args.amp, args.batch_size, args.channels_last,
        torch.__version__), flush=True)

    prof = None
    if args.profile:
        from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        prof = profile(
            activities=acts,
            schedule=schedule(wait=args.profile_skip, warmup=2, active=args.profile_steps, repeat=1),
            on_trace_ready=tensorboard_trace_handler(args.profile),
        )
        prof.start()

    marker = probe if probe is not None and probe.enabled() else None
    model.train()
    it = batches()
    t_start = time.monotonic()
    t_last, steps_last, wait_last = t_start, 0, 0.0
    steps, images, wait_total = 0, 0, 0.0
    loss = None
    while True:
        t0 = time.monotonic()
        xb, yb = next(it)
        wait = time.monotonic() - t0
        xb = xb.to(device, non_blocking=args.pin).contiguous(memory_format=memory_format)
        yb = yb.to(device, non_blocking=args.pin)
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            loss = loss_fn(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        steps += 1
        images += xb.shape[0]
        wait_total += wait
        if marker is not None:
            marker.step(items=xb.shape[0], wait_ns=int(wait * 1e9))
        if prof is not None:
            prof.step()
            if steps >= args.profile_skip + 2 + args.profile_steps:
                prof.stop()
                print("profile: Kineto trace written under %s" % args.profile, flush=True)
                prof = None
        now = time.monotonic()
        if now - t_last >= args.print_every:
            value = float(loss.item())  # synchronizes: the rate covers finished GPU work
            now = time.monotonic()
            n = steps - steps_last
            rate = n * args.batch_size / (now - t_last)
            dw = 100.0 * (wait_total - wait_last) / (now - t_last)
            print("train: step %d images/s %.1f data_wait %.1f%% loss %.3f" % (steps, rate, dw, value), flush=True)
            if not math.isfinite(value):
                sys.exit("train_images.py: error: the loss is %s" % value)
            t_last, steps_last, wait_last = now, steps, wait_total
        if (args.seconds and now - t_start >= args.seconds) or (args.steps and steps >= args.steps):
            break
    if cuda:
        torch.cuda.synchronize()
    if prof is not None:
        prof.stop()
    took = time.monotonic() - t_start
    print("done: steps %d seconds %.1f images/s %.1f data_wait %.1f%%" % (
        steps, took, images / took, 100.0 * wait_total / took), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
