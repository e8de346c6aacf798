"""CIFAR-10 the way the fastest CIFAR trainers feed it: the set decoded once and kept where
it fits (`keep="auto"`: GPU memory when the Loader runs on a GPU, else RAM), every later
epoch augmented in place by one fused kernel (RandomCrop(32, padding=4) + flip +
Normalize), no worker processes, no per-sample Python.

    python examples/cifar/train.py DATA [--epochs 8] [--batch-size 512] [--device auto]
    python examples/cifar/train.py --demo [--demo-size 2000]  (a stand-in set cut from scikit-image's photographs)
    python examples/cifar/train.py DATA --torchvision  (the same training fed by torchvision's
                                                          CIFAR10 + DataLoader, to compare)

DATA is the folder torchvision's `CIFAR10(DATA, download=True)` leaves (cifar-10-batches-py/
inside). Both ways build the same torchvision CIFAR10 datasets with torchvision's transforms;
the only change is `gpudecode.Loader(dataset, ...)` in place of `DataLoader(dataset, ...)`:
the Loader reads the images from the dataset's array and converts its transform. Each epoch
prints its loss, img/s and where the set lives (`describe()["keep"]`).
"""
from __future__ import annotations

import argparse
import os
import pickle
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
BATCHES = {"train": [f"data_batch_{i}" for i in range(1, 6)], "test": ["test_batch"]}


def make_demo(folder: str, n: int = 2000) -> str:
    """A stand-in for CIFAR-10 in torchvision's file format: n 32x32 crops of scikit-image's
    photographs for training and n // 5 more for the test split, labelled by photograph."""
    from PIL import Image
    from skimage import data as photos

    names = ("astronaut", "coffee", "chelsea", "rocket", "camera")
    pictures = [np.asarray(getattr(photos, p)()) for p in names]
    pictures = [np.stack([p] * 3, -1) if p.ndim == 2 else p for p in pictures]
    rng = np.random.default_rng(0)
    base = os.path.join(folder, "cifar-10-batches-py")
    os.makedirs(base, exist_ok=True)

    def batch(count: int) -> dict:
        rows, labels = [], []
        for _ in range(count):
            c = int(rng.integers(len(pictures)))
            p = pictures[c]
            s = int(rng.integers(32, min(p.shape[:2]) // 2))
            t, l = int(rng.integers(0, p.shape[0] - s)), int(rng.integers(0, p.shape[1] - s))
            img = np.asarray(Image.fromarray(p[t:t + s, l:l + s]).resize((32, 32), Image.Resampling.BILINEAR))
            rows.append(img.transpose(2, 0, 1).reshape(-1))
            labels.append(c)
        return {"data": np.stack(rows), "labels": labels}

    for name in BATCHES["train"]:
        with open(os.path.join(base, name), "wb") as f:
            pickle.dump(batch(n // 5), f)
    with open(os.path.join(base, "test_batch"), "wb") as f:
        pickle.dump(batch(n // 5), f)
    with open(os.path.join(base, "batches.meta"), "wb") as f:
        pickle.dump({"label_names": list(names) + [f"class{i}" for i in range(len(names), 10)]}, f)
    return folder


def stand_in_cifar10() -> type:
    """torchvision's CIFAR10 class for make_demo's files: they are not CIFAR's, so only
    their checksums go unchecked (loading and __getitem__ are torchvision's own)."""
    import torchvision

    class StandIn(torchvision.datasets.CIFAR10):
        def _check_integrity(self) -> bool:
            return True

        def _load_meta(self) -> None:
            with open(os.path.join(self.root, self.base_folder, "batches.meta"), "rb") as f:
                self.classes = pickle.load(f)["label_names"]
            self.class_to_idx = {c: i for i, c in enumerate(self.classes)}

    return StandIn


def net(classes: int = 10, width: int = 64) -> nn.Module:
    """A small residual-free CIFAR net in the fast trainers' shape: conv-BN-GELU blocks, each
    stage max-pooled, a linear head."""
    def block(cin: int, cout: int) -> nn.Sequential:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.GELU(),
                             nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.GELU(),
                             nn.MaxPool2d(2))
    return nn.Sequential(nn.Conv2d(3, width // 2, 3, padding=1, bias=False), nn.BatchNorm2d(width // 2), nn.GELU(),
                         block(width // 2, width), block(width, 2 * width), block(2 * width, 4 * width),
                         nn.AdaptiveMaxPool2d(1), nn.Flatten(), nn.Linear(4 * width, classes, bias=False))


def loaders(args: argparse.Namespace, device: str):
    """(train, test) as iterables of (images, labels) on `device`: torchvision's CIFAR10
    datasets with torchvision's transforms, fed by gpudecode's Loader (the set kept
    resident), or with --torchvision by DataLoader."""
    import torchvision
    import torchvision.transforms as tvt

    policy = [tvt.AutoAugment(tvt.AutoAugmentPolicy.CIFAR10)] if args.autoaugment else []
    train_tf = tvt.Compose([tvt.RandomCrop(32, padding=4), tvt.RandomHorizontalFlip(), *policy, tvt.ToTensor(),
                            tvt.Normalize(MEAN, STD)])
    test_tf = tvt.Compose([tvt.ToTensor(), tvt.Normalize(MEAN, STD)])
    cifar = stand_in_cifar10() if args.demo else torchvision.datasets.CIFAR10
    train = cifar(args.data, train=True, transform=train_tf, download=False)
    test = cifar(args.data, train=False, transform=test_tf, download=False)
    if args.torchvision:
        kw = dict(num_workers=args.workers, pin_memory=device.startswith("cuda"), persistent_workers=args.workers > 0)
        return (torch.utils.data.DataLoader(train, batch_size=args.batch_size, shuffle=True, drop_last=True, **kw),
                torch.utils.data.DataLoader(test, batch_size=1000, **kw))
    import gpudecode

    return (gpudecode.Loader(train, batch_size=args.batch_size, device=device, drop_last=True, seed=args.seed,
                             keep="auto"),
            gpudecode.Loader(test, batch_size=1000, device=device, shuffle=False, seed=args.seed, keep="auto"))


def check_data(args: argparse.Namespace) -> None:
    """Refuses a DATA folder without CIFAR-10's python files, saying where they come from."""
    if not os.path.exists(os.path.join(args.data, "cifar-10-batches-py", "data_batch_1")):
        sys.exit(f"{args.data}: no cifar-10-batches-py/ inside: torchvision.datasets.CIFAR10({args.data!r}, "
                 "download=True) fetches it (or run with --demo)")


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", nargs="?", help="the folder holding cifar-10-batches-py/")
    p.add_argument("--demo", action="store_true", help="a CIFAR-sized stand-in set, made in a temporary folder")
    p.add_argument("--demo-size", type=int, default=2000, help="the stand-in's images (a fifth more for its test split)")
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--steps", type=int, default=0, help="stop each epoch after this many steps (0: the whole epoch)")
    p.add_argument("--lr", type=float, default=0.2)
    p.add_argument("--width", type=int, default=64, help="the net's first stage's channels")
    p.add_argument("--device", default="auto", help="auto (a GPU when there is one), cpu, cuda, cuda:N")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--autoaugment", action="store_true", help="AutoAugment's CIFAR10 policy after the flip")
    p.add_argument("--torchvision", action="store_true", help="feed it with torchvision's CIFAR10 + DataLoader")
    p.add_argument("--workers", type=int, default=4, help="DataLoader's worker processes (with --torchvision)")
    args = p.parse_args(argv)
    if args.demo == (args.data is not None):
        p.error("give DATA or --demo")
    if args.demo and args.demo_size < 10:
        p.error("--demo-size must be at least 10")
    tmp = None
    if args.demo:
        tmp = tempfile.TemporaryDirectory()
        args.data = make_demo(tmp.name, args.demo_size)
    check_data(args)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    torch.manual_seed(args.seed)
    train, test = loaders(args, device)
    model = net(width=args.width).to(device, memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, nesterov=True, weight_decay=5e-4)
    steps_per_epoch = args.steps or len(train)
    total_steps = args.epochs * steps_per_epoch
    # (OneCycle needs a step or more in each phase: a run of a few steps keeps a constant rate)
    sched = (torch.optim.lr_scheduler.OneCycleLR(opt, args.lr, total_steps=total_steps,
                                                 pct_start=min(0.5, max(0.25, 2 / total_steps)))
             if total_steps >= 4 else None)
    report: dict = {"device": device, "epochs": []}
    for epoch in range(args.epochs):
        if hasattr(train, "set_epoch"):
            train.set_epoch(epoch)
        model.train()
        t0, seen, total = time.perf_counter(), 0, 0.0
        for step, (images, labels) in enumerate(train):
            images = images.to(device, non_blocking=True, memory_format=torch.channels_last)
            labels = labels.to(device, non_blocking=True)
            loss = F.cross_entropy(model(images), labels, label_smoothing=0.2)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if sched is not None:
                sched.step()
            seen += len(labels)
            total += loss.detach() * len(labels)  # (no host sync a step)
            if step + 1 >= steps_per_epoch:
                break
        dt = time.perf_counter() - t0
        kept = train.describe()["keep"] if hasattr(train, "describe") else {"tier": None}
        row = {"epoch": epoch, "loss": float(total) / max(1, seen), "img_s": seen / dt, "kept": kept}
        report["epochs"].append(row)
        where = (f"kept in {kept['tier']} ({kept['bytes'] / 2**20:.0f} MiB)" if kept.get("tier")
                 else "streamed" if not args.torchvision else "torchvision DataLoader")
        print(f"epoch {epoch}: loss {row['loss']:.3f}, {row['img_s']:,.0f} img/s (training included), {where}",
              flush=True)
    model.eval()
    correct = count = 0
    with torch.no_grad():
        for images, labels in test:
            images = images.to(device, memory_format=torch.channels_last)
            correct += int((model(images).argmax(1) == labels.to(device)).sum())
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
