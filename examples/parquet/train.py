"""A Hugging Face image set in Parquet, trained from as it lies: the files the hub stores
(an `image` column of {bytes, path}, a `label` ClassLabel) given to the Loader directly,
or the `datasets.Dataset` a script already loads.

    python examples/parquet/train.py --data "imagenet-1k/data/train-*.parquet" --epochs 1
    python examples/parquet/train.py --data DIR --as-dataset    # through datasets.load_dataset
    python examples/parquet/train.py --make-demo DIR            # write a small set (offline), then train on it

DATA: Parquet files (a glob, a directory of them, a list), local or fsspec URLs (hf://,
s3://). Their ClassLabel's names are `loader.reader.classes`: the model's head is sized
from them. The Loader reads only the image and label columns, row group by row group, on
its threads; images decode and augment on the GPU where there is one, else on the CPU.
"""
from __future__ import annotations

import argparse
import glob
import io
import os
import time

import torch
import torch.nn as nn

import gpudecode
from gpudecode import transforms as T

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def make_demo(out: str, per_class: int = 24) -> str:
    """Three classes of photograph crops (scikit-image's), JPEG and PNG rows, written as
    `datasets` writes a hub set: two files of train-0000K-of-00002.parquet."""
    import datasets
    import numpy as np
    from PIL import Image
    from skimage import data

    photos = {"astronaut": data.astronaut(), "coffee": data.coffee(), "chelsea": data.chelsea()}
    rng = np.random.default_rng(0)
    rows, labels = [], []
    for label, img in enumerate(photos.values()):
        h, w = img.shape[:2]
        for k in range(per_class):
            t, l = int(rng.integers(0, h // 3)), int(rng.integers(0, w // 3))
            b = io.BytesIO()
            Image.fromarray(img[t:t + h // 2, l:l + w // 2]).save(b, "PNG" if k % 4 == 3 else "JPEG")
            rows.append({"bytes": b.getvalue(), "path": None})
            labels.append(label)
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=list(photos))})
    ds = datasets.Dataset.from_dict({"image": rows, "label": labels}, features=features).shuffle(seed=0)
    os.makedirs(out, exist_ok=True)
    for k in range(2):
        ds.shard(2, k, contiguous=True).to_parquet(os.path.join(out, f"train-{k:05d}-of-00002.parquet"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=None, help="Parquet files: a glob, a directory, a URL")
    ap.add_argument("--make-demo", default=None, metavar="DIR", help="write a small set into DIR and train on it")
    ap.add_argument("--as-dataset", action="store_true", help="load it with datasets.load_dataset first")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    data = make_demo(args.make_demo) if args.make_demo else args.data
    if data is None:
        ap.error("give --data or --make-demo")
    if os.path.isdir(data):
        data = os.path.join(data, "*.parquet")
    source = data
    if args.as_dataset:
        import datasets

        files = sorted(glob.glob(data)) if "://" not in data else data
        source = datasets.load_dataset("parquet", data_files=files, split="train")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    train = T.Compose([T.RandomResizedCrop(args.image_size), T.RandomHorizontalFlip(),
                       T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD)])
    loader = gpudecode.Loader(source, batch_size=args.batch_size, transform=train, device=device,
                              num_threads=args.threads, shuffle=True, seed=0)
    classes = loader.reader.classes
    print(f"{len(loader.dataset)} images, {len(classes)} classes ({', '.join(classes[:5])}"
          f"{', ...' if len(classes) > 5 else ''}), {len(loader)} batches an epoch on {device}")
    model = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(16, len(classes))).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with loader:
        for epoch in range(args.epochs):
            loader.set_epoch(epoch)
            t, seen, total = time.perf_counter(), 0, 0.0
            for images, labels in loader:
                loss = nn.functional.cross_entropy(model(images), labels)
                opt.zero_grad()
                loss.backward()
                opt.step()
                seen += len(labels)
                total += loss.item() * len(labels)
            print(f"epoch {epoch}: {seen} images, loss {total / max(seen, 1):.3f}, "
                  f"{seen / (time.perf_counter() - t):,.0f} img/s")


if __name__ == "__main__":
    main()
