"""Today's recipes on this machine's cores, gpudecode against the classic DataLoader
running the same augmentations with torchvision, in one run (ImageNet-like JPEGs,
500x375 q90, the images of bench/loader.py):

- multi-crop (DINO's shape): 2 global views at 224 (RandomResizedCrop scale 0.4-1, flip,
  ColorJitter(0.4, 0.4, 0.2, 0.1), Normalize) and 6 local views at 96 (scale 0.05-0.4,
  the same steps), each image decoded once for its 8 views; torchvision: a dataset
  transform returning the 8 crops, as DINO's DataAugmentationDINO does. (DINO's
  RandomApply, RandomGrayscale, GaussianBlur and RandomSolarize are not fused yet: both
  sides run without them, so the comparison is like for like.)
- the reference recipe's batch step: RandomResizedCrop(224) + flip + Normalize, then
  RandomChoice([MixUp(0.2), CutMix(1.0)]) on each batch (gpudecode's batch_transform;
  torchvision's v2 transforms in the DataLoader's collate_fn, as its reference script
  does). (TrivialAugmentWide and RandomErasing are not fused yet: both sides without.)

- each step's added cost per image over RRC(224) + flip + Normalize on the same Loader
  (--ops): ColorJitter, RandomErasing (p=0.1, and p=1 with "random"), MixUp/CutMix, a
  second view.

    python bench/recipes.py [--images 1024] [--threads 2] [--repeat 3] [--ops]
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from _common import machine, save  # noqa: E402
from loader import MEAN, STD, build, timed  # noqa: E402

CLASSES = 1000


def _dino_views(T):
    def view(size, scale):
        return T.Compose([T.RandomResizedCrop(size, scale=scale), T.RandomHorizontalFlip(),
                          T.ColorJitter(0.4, 0.4, 0.2, 0.1), T.Normalize(MEAN, STD)])
    return [view(224, (0.4, 1.0))] * 2 + [view(96, (0.05, 0.4))] * 6


def _epochs(ld):
    """A callable running the Loader's next epoch, returning the images it gave."""
    epoch = [0]

    def go():
        ld.set_epoch(epoch[0])
        epoch[0] += 1
        return sum(b.labels.shape[0] for b in ld)
    return go


def gpudecode_multicrop(shards, threads, batch):
    from gpudecode import Loader
    from gpudecode import transforms as T

    return _epochs(Loader(shards, batch_size=batch, transform=_dino_views(T), device="cpu", num_workers=threads))


def torchvision_multicrop(folder, threads, batch):
    import torch
    import torchvision.transforms as v1
    from torchvision.datasets import ImageFolder

    views = []
    for tf in _dino_views(v1):  # the same classes: torchvision's own
        views.append(v1.Compose([*tf.transforms[:-1], v1.ToTensor(), tf.transforms[-1]]))

    def crops(img):
        return [tf(img) for tf in views]

    dl = torch.utils.data.DataLoader(ImageFolder(folder, transform=crops), batch_size=batch, shuffle=True,
                                     num_workers=threads, persistent_workers=True, prefetch_factor=2)

    def go():
        return sum(y.shape[0] for _, y in dl)
    return go


def gpudecode_mix(shards, threads, batch):
    from torchvision.transforms import v2

    from gpudecode import Loader
    from gpudecode import transforms as T

    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)])
    mix = v2.RandomChoice([v2.MixUp(alpha=0.2, num_classes=CLASSES), v2.CutMix(alpha=1.0, num_classes=CLASSES)])
    return _epochs(Loader(shards, batch_size=batch, transform=tf, device="cpu", num_workers=threads,
                          batch_transform=mix))


def torchvision_mix(folder, threads, batch):
    import torch
    import torchvision.transforms as v1
    from torch.utils.data import default_collate
    from torchvision.datasets import ImageFolder
    from torchvision.transforms import v2

    tf = v1.Compose([v1.RandomResizedCrop(224), v1.RandomHorizontalFlip(), v1.ToTensor(), v1.Normalize(MEAN, STD)])
    mix = v2.RandomChoice([v2.MixUp(alpha=0.2, num_classes=CLASSES), v2.CutMix(alpha=1.0, num_classes=CLASSES)])

    def collate(items):  # as torchvision's reference train.py does
        return mix(*default_collate(items))

    dl = torch.utils.data.DataLoader(ImageFolder(folder, transform=tf), batch_size=batch, shuffle=True,
                                     num_workers=threads, persistent_workers=True, prefetch_factor=2,
                                     collate_fn=collate)

    def go():
        return sum(y.shape[0] for _, y in dl)
    return go


def op_costs(shards, threads, batch, repeat) -> dict[str, float]:
    """img/s of the base recipe and of the base with each step added, in one run."""
    from torchvision.transforms import v2

    from gpudecode import Loader
    from gpudecode import transforms as T

    crop = [T.RandomResizedCrop(224), T.RandomHorizontalFlip()]
    norm = [T.Normalize(MEAN, STD)]
    mix = v2.RandomChoice([v2.MixUp(alpha=0.2, num_classes=CLASSES), v2.CutMix(alpha=1.0, num_classes=CLASSES)])
    cases = {
        "RRC + flip + Normalize (base)": dict(transform=T.Compose(crop + norm)),
        "+ ColorJitter(0.4, 0.4, 0.4, 0.1)": dict(transform=T.Compose(crop + [T.ColorJitter(0.4, 0.4, 0.4, 0.1)]
                                                                      + norm)),
        "+ RandomErasing(p=0.1)": dict(transform=T.Compose(crop + norm + [T.RandomErasing(p=0.1)])),
        "+ RandomErasing(p=1, value='random')": dict(transform=T.Compose(crop + norm
                                                                         + [T.RandomErasing(1.0, value="random")])),
        "+ MixUp/CutMix (batch)": dict(transform=T.Compose(crop + norm), batch_transform=mix),
        "+ a second view (2 x 224)": dict(transform=[T.Compose(crop + norm)] * 2),
    }
    return {name: timed(_epochs(Loader(shards, batch_size=batch, device="cpu", num_workers=threads, **kw)), repeat)
            for name, kw in cases.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--images", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--ops", action="store_true", help="only each step's added cost (no torchvision rows)")
    a = ap.parse_args()
    shards, folder = build(a.images)
    if a.ops:
        costs = op_costs(shards, a.threads, a.batch, a.repeat)
        base = next(iter(costs.values()))
        print(f"{a.images} JPEGs 500x375 q90, batch {a.batch}, {a.threads} threads, {os.cpu_count()} cores")
        print(f"{'gpudecode Loader (CPU)':40s} {'img/s':>8s} {'added us/img':>13s}")
        for name, r in costs.items():
            print(f"{name:40s} {r:8.0f} {1e6 / r - 1e6 / base:13.0f}")
        save("recipe_ops", {"machine": machine(), "args": vars(a), "img_per_s": costs})
        return
    rows = {
        "multi-crop 2x224 + 6x96: gpudecode Loader": timed(gpudecode_multicrop(shards, a.threads, a.batch), a.repeat),
        "multi-crop 2x224 + 6x96: torchvision DataLoader": timed(torchvision_multicrop(folder, a.threads, a.batch),
                                                                 a.repeat),
        "RRC + flip + Normalize + MixUp/CutMix: gpudecode Loader": timed(gpudecode_mix(shards, a.threads, a.batch),
                                                                        a.repeat),
        "RRC + flip + Normalize + MixUp/CutMix: torchvision DataLoader": timed(
            torchvision_mix(folder, a.threads, a.batch), a.repeat),
    }
    print(f"{a.images} JPEGs 500x375 q90, batch {a.batch}, {a.threads} threads/workers, {os.cpu_count()} cores")
    print(f"{'recipe and pipeline':62s} {'img/s':>8s}")
    for name, r in rows.items():
        print(f"{name:62s} {r:8.0f}")
    keys = list(rows)
    ratios = {"multi-crop": rows[keys[0]] / rows[keys[1]], "mixup/cutmix": rows[keys[2]] / rows[keys[3]]}
    for name, r in ratios.items():
        print(f"{name}: gpudecode / torchvision = {r:.2f}x")
    save("recipes", {"machine": machine(), "args": vars(a), "img_per_s": rows, "ratios": ratios})


if __name__ == "__main__":
    main()
