"""Today's training recipes on gpudecode, written as torchvision Composes and passed as
they are:

- torchvision's ResNet-50 reference recipe: RandomResizedCrop, flip, TrivialAugmentWide,
  Normalize, RandomErasing(0.1), then MixUp(0.2) or CutMix(1.0) on each batch;
- DINO's multi-crop: 2 global views at 224 and 6 local views at 96, with ColorJitter in
  RandomApply, RandomGrayscale, GaussianBlur and RandomSolarize; each image is decoded
  once for its 8 views.

    python examples/recipes.py SHARDS [--recipe reference|dino] [--device cpu|cuda]
        [--batch-size 64] [--steps 5]
    python examples/recipes.py --demo     (makes a few shards of scikit-image's photographs)

Each step prints what the trainer would get; replace the print with the model's step.
"""
from __future__ import annotations

import argparse
import os
import tempfile

import torch
from torchvision.transforms import v2

import gpudecode

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def reference(num_classes: int, size: int = 224):
    """torchvision's classification reference (ClassificationPresetTrain, auto_augment
    "ta_wide", random_erase 0.1) and its MixUp/CutMix, as its train.py builds them."""
    train = v2.Compose([v2.RandomResizedCrop(size, antialias=True), v2.RandomHorizontalFlip(0.5),
                        v2.TrivialAugmentWide(interpolation=v2.InterpolationMode.BILINEAR), v2.PILToTensor(),
                        v2.ToDtype(torch.float, scale=True), v2.Normalize(MEAN, STD), v2.RandomErasing(0.1),
                        v2.ToPureTensor()])
    mix = v2.RandomChoice([v2.MixUp(alpha=0.2, num_classes=num_classes),
                           v2.CutMix(alpha=1.0, num_classes=num_classes)])
    return train, mix


def dino(global_size: int = 224, local_size: int = 96, local_crops: int = 6):
    """DINO's DataAugmentationDINO in torchvision v2 terms (its PIL blur as GaussianBlur)."""
    flip_and_jitter = v2.Compose([v2.RandomHorizontalFlip(p=0.5),
                                  v2.RandomApply([v2.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8),
                                  v2.RandomGrayscale(p=0.2)])
    norm = v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])
    kernel = 23 if local_size > 22 else 5  # (the reflect padding needs half the kernel under the size)

    def blur(p):
        return v2.RandomApply([v2.GaussianBlur(kernel, (0.1, 2.0))], p=p)

    global1 = v2.Compose([v2.RandomResizedCrop(global_size, scale=(0.4, 1.0)), flip_and_jitter, blur(1.0), norm])
    global2 = v2.Compose([v2.RandomResizedCrop(global_size, scale=(0.4, 1.0)), flip_and_jitter, blur(0.1),
                          v2.RandomSolarize(128, p=0.2), norm])
    local = v2.Compose([v2.RandomResizedCrop(local_size, scale=(0.05, 0.4)), flip_and_jitter, blur(0.5), norm])
    return [global1, global2] + [local] * local_crops


def demo_shards(folder: str) -> str:
    """Four small shards of scikit-image's photographs, 3 classes."""
    import io

    import numpy as np
    from PIL import Image
    from skimage import data

    from gpudecode.io.writer import ShardWriter

    photos = [data.astronaut(), data.coffee(), data.chelsea(), data.rocket()]
    pattern = os.path.join(folder, "demo-%06d.tar")
    with ShardWriter(pattern, maxcount=16) as w:
        for k in range(64):
            img = np.ascontiguousarray(np.roll(photos[k % 4], 17 * k, axis=1))
            buf = io.BytesIO()
            Image.fromarray(img).save(buf, "JPEG", quality=90)
            w.write({"__key__": f"s{k:04d}", "jpg": buf.getvalue(), "cls": str(k % 3).encode()})
    return pattern


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("shards", nargs="?", help="shards (a pattern, folder, list file or URLs)")
    ap.add_argument("--demo", action="store_true", help="make a few shards of photographs and use them")
    ap.add_argument("--recipe", choices=("reference", "dino"), default="reference")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--num-classes", type=int, default=3)
    ap.add_argument("--size", type=int, default=224, help="training size (DINO's global views)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        shards = demo_shards(tmp) if a.demo else a.shards
        if not shards:
            ap.error("give shards, or --demo")
        if a.recipe == "reference":
            train, mix = reference(a.num_classes, a.size)
            kw = dict(transform=train, batch_transform=mix)
        else:
            kw = dict(transform=dino(a.size, max(8, a.size * 96 // 224)))
        loader = gpudecode.Loader(shards, batch_size=a.batch_size, shuffle=True, device=a.device, seed=0, **kw)
        print(loader.describe())
        for step, batch in enumerate(loader):
            if step == a.steps:
                break
            images, labels = batch.images, batch.labels
            shapes = [tuple(v.shape) for v in images] if isinstance(images, list) else tuple(images.shape)
            print(f"step {step}: images {shapes} on {batch.labels.device}, labels {tuple(labels.shape)}")
        loader.close()


if __name__ == "__main__":
    main()
