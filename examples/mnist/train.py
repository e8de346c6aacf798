"""MNIST as the classic PyTorch example feeds it (torchvision's MNIST, ToTensor, one-value
Normalize, a net whose first layer takes one channel), with `gpudecode.Loader(dataset,
...)` in place of `DataLoader(dataset, ...)` and nothing else changed: the Loader reads the
images from the dataset's array, converts its transform, and gives [N, 1, 28, 28] batches,
as torchvision does for a grey set. The set is decoded once and kept (`keep="auto"`).

    python examples/mnist/train.py DATA [--epochs 2] [--batch-size 64] [--device auto]
    python examples/mnist/train.py --demo [--demo-size 2000]  (a stand-in set of rendered digits)
    python examples/mnist/train.py DATA --torchvision  (the same training fed by DataLoader)

DATA is the folder torchvision's `MNIST(DATA, download=True)` leaves (MNIST/raw/ inside).
`--augment` adds RandomAffine (a few degrees, a little shift) and ColorJitter's brightness
and contrast before ToTensor; contrast then blends with the one channel's mean, as
torchvision's does on a grey image.
"""
from __future__ import annotations

import argparse
import os
import struct
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MEAN, STD = (0.1307,), (0.3081,)


def make_demo(folder: str, n: int = 2000) -> str:
    """A stand-in for MNIST in torchvision's file format (IDX files in MNIST/raw): n digits
    drawn with Pillow's default font at random sizes, places and greys for training, n // 5
    more for the test split, each labelled by its digit."""
    from PIL import Image, ImageDraw, ImageFont

    rng = np.random.default_rng(0)
    raw = os.path.join(folder, "MNIST", "raw")
    os.makedirs(raw, exist_ok=True)

    def digits(count: int) -> tuple[np.ndarray, np.ndarray]:
        images, labels = np.zeros((count, 28, 28), np.uint8), rng.integers(0, 10, count).astype(np.uint8)
        for k, d in enumerate(labels):
            im = Image.new("L", (28, 28))
            font = ImageFont.load_default(size=float(rng.integers(16, 24)))
            ImageDraw.Draw(im).text((int(rng.integers(6, 12)), int(rng.integers(0, 5))), str(d),
                                    fill=int(rng.integers(160, 256)), font=font)
            images[k] = np.asarray(im.rotate(float(rng.uniform(-15, 15)), Image.Resampling.BILINEAR))
        return images, labels

    for split, count in (("train", n), ("t10k", max(1, n // 5))):
        images, labels = digits(count)
        for name, arr in (("images-idx3", images), ("labels-idx1", labels)):
            with open(os.path.join(raw, f"{split}-{name}-ubyte"), "wb") as f:  # IDX: magic, sizes, bytes
                f.write(struct.pack(">HBB", 0, 8, arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.tobytes())
    return folder


class Net(nn.Module):
    """Two convolutions on one channel, max-pooled, then two linear layers."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 32, 3), nn.Conv2d(32, 64, 3)
        self.fc1, self.fc2 = nn.Linear(64 * 12 * 12, 128), nn.Linear(128, 10)
        self.drop = nn.Dropout(0.25)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
        x = F.relu(self.fc1(self.drop(torch.flatten(x, 1))))
        return self.fc2(self.drop(x))


def loaders(args: argparse.Namespace, device: str):
    """(train, test) as iterables of (images, labels): torchvision's MNIST datasets with
    torchvision's transforms, fed by gpudecode's Loader, or with --torchvision by
    DataLoader."""
    import torchvision
    import torchvision.transforms as tvt

    augment = [tvt.RandomAffine(8, translate=(0.08, 0.08)), tvt.ColorJitter(0.3, 0.3)] if args.augment else []
    train_tf = tvt.Compose([*augment, tvt.ToTensor(), tvt.Normalize(MEAN, STD)])
    test_tf = tvt.Compose([tvt.ToTensor(), tvt.Normalize(MEAN, STD)])
    train = torchvision.datasets.MNIST(args.data, train=True, transform=train_tf)
    test = torchvision.datasets.MNIST(args.data, train=False, transform=test_tf)
    if args.torchvision:
        kw = dict(num_workers=args.workers, pin_memory=device.startswith("cuda"), persistent_workers=args.workers > 0)
        return (torch.utils.data.DataLoader(train, batch_size=args.batch_size, shuffle=True, **kw),
                torch.utils.data.DataLoader(test, batch_size=1000, **kw))
    import gpudecode

    return (gpudecode.Loader(train, batch_size=args.batch_size, device=device, seed=args.seed, keep="auto"),
            gpudecode.Loader(test, batch_size=1000, device=device, shuffle=False, keep="auto"))


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", nargs="?", help="the folder holding MNIST/raw/")
    p.add_argument("--demo", action="store_true", help="a stand-in set of rendered digits, in a temporary folder")
    p.add_argument("--demo-size", type=int, default=2000, help="the stand-in's training images (a fifth more to test)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=0, help="stop each epoch after this many steps (0: the whole epoch)")
    p.add_argument("--lr", type=float, default=1.0, help="Adadelta's rate")
    p.add_argument("--augment", action="store_true", help="RandomAffine and ColorJitter before ToTensor")
    p.add_argument("--device", default="auto", help="auto (a GPU when there is one), cpu, cuda, cuda:N")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--torchvision", action="store_true", help="feed it with torchvision's MNIST + DataLoader")
    p.add_argument("--workers", type=int, default=1, help="DataLoader's worker processes (with --torchvision)")
    args = p.parse_args(argv)
    if args.demo == (args.data is not None):
        p.error("give DATA or --demo")
    tmp = None
    if args.demo:
        tmp = tempfile.TemporaryDirectory()
        args.data = make_demo(tmp.name, max(10, args.demo_size))
    if not os.path.isdir(os.path.join(args.data, "MNIST", "raw")):
        sys.exit(f"{args.data}: no MNIST/raw/ inside: torchvision.datasets.MNIST({args.data!r}, download=True) "
                 "fetches it (or run with --demo)")
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    torch.manual_seed(args.seed)
    train, test = loaders(args, device)
    model = Net().to(device)
    opt = torch.optim.Adadelta(model.parameters(), lr=args.lr)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
    report: dict = {"device": device, "epochs": []}
    for epoch in range(args.epochs):
        if hasattr(train, "set_epoch"):
            train.set_epoch(epoch)
        model.train()
        t0, seen, total = time.perf_counter(), 0, 0.0
        for step, (images, labels) in enumerate(train):
            if step == 0:
                report["batch_shape"] = tuple(images.shape)
            images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
            loss = F.cross_entropy(model(images), labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            seen += len(labels)
            total += loss.detach() * len(labels)  # (no host sync a step)
            if args.steps and step + 1 >= args.steps:
                break
        sched.step()
        row = {"epoch": epoch, "loss": float(total) / max(1, seen), "img_s": seen / (time.perf_counter() - t0)}
        report["epochs"].append(row)
        print(f"epoch {epoch}: loss {row['loss']:.3f}, {row['img_s']:,.0f} img/s (training included), batches "
              f"{list(report['batch_shape'])}", flush=True)
    model.eval()
    correct = count = 0
    with torch.no_grad():
        for images, labels in test:
            correct += int((model(images.to(device)).argmax(1) == labels.to(device)).sum())
            count += len(labels)
    report["accuracy"] = correct / max(1, count)
    print(f"test accuracy {report['accuracy']:.3f} on {count:,} images")
    for ld in (train, test):
        if hasattr(ld, "close"):
            ld.close()
    if tmp is not None:
        tmp.cleanup()
    return report


if __name__ == "__main__":
    main()
