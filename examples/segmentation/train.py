"""Semantic segmentation from WebDataset shards (`<key>.jpg` beside its mask
`<key>.seg.png`, a palette PNG of class indices, as VOC and ADE20K keep them): each mask
moved with its image by the image's own draws (`fields={"seg.png": gpudecode.Mask(...)}`),
batches of (images, masks).

    python examples/segmentation/train.py --data "ade20k/train-{000000..000099}.tar" --classes 150
    python examples/segmentation/train.py --make-demo DIR    # write small shards (offline), then train
    python examples/segmentation/train.py --make-demo DIR --rotate 20   # RandomRotation(20) too
    python examples/segmentation/train.py --make-demo DIR --precache 64  # decode once to tensors first

The transform is torchvision's segmentation reference (references/segmentation/presets.py)
scaled to the demo's images: RandomResize(0.5 x base, 2 x base), RandomCrop(crop,
pad_if_needed), RandomHorizontalFlip, Normalize; the masks padded with 255, the ignore
index of its loss. (The reference flips before its crop; the kernel flips its output, so
the flip is written after the crop: the same distribution.) A sample whose mask does not
decode or is not its image's size is skipped and named (`on_error="skip"`).

With `--rotate DEG`, RandomRotation(DEG) follows the flip (as satellite, medical and
document sets are often trained): each mask is rotated with its image, by nearest
neighbour, and the corners the rotation brings in are the ignore index in the mask (its
fill), so the loss leaves them out.

With `--precache S`, the images are first decoded once into tensor shards at shorter side
S (`gpudecode.precache.precache`, beside the data), their masks moved with them there,
once (`masks=["seg.png"]`: written back as palette PNGs of the stored size), and training
reads those: no JPEG is decoded again, and each mask decoded is the stored image's size.
"""
from __future__ import annotations

import argparse
import io
import os
import time

import torch
import torch.nn as nn

import gpudecode
from gpudecode import transforms as T

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
IGNORE = 255
# the demo's classes: a superpixel's mean colour nearest to one of these
COLOURS = [(20, 20, 20), (235, 235, 235), (190, 60, 50), (70, 150, 70), (60, 90, 190), (150, 110, 70)]


def make_demo(out: str, per_photo: int = 12) -> list[str]:
    """Crops of scikit-image's photographs, each with its segmentation as a palette PNG:
    SLIC superpixels, each labelled by the nearest of COLOURS to its mean colour."""
    import numpy as np
    from PIL import Image
    from skimage import data
    from skimage.segmentation import slic

    from gpudecode.io.writer import ShardWriter

    photos = [data.astronaut(), data.coffee(), data.chelsea(), data.rocket()]
    ref = np.array(COLOURS, np.float32)
    rng = np.random.default_rng(0)
    os.makedirs(out, exist_ok=True)
    with ShardWriter(os.path.join(out, "seg-%06d.tar"), maxcount=per_photo * len(photos) // 2) as w:
        for k in range(per_photo):
            for p, img in enumerate(photos):
                h, wd = img.shape[:2]
                t, l = int(rng.integers(0, h // 3)), int(rng.integers(0, wd // 3))
                crop = np.ascontiguousarray(img[t:t + h // 3, l:l + wd // 3])
                seg = slic(crop, n_segments=24, start_label=0, channel_axis=-1)
                mean = np.stack([crop[seg == s].mean(0) for s in range(seg.max() + 1)])
                cls = ((mean[:, None] - ref[None]) ** 2).sum(-1).argmin(1).astype(np.uint8)
                mask = Image.fromarray(cls[seg])
                mask.putpalette([v for c in COLOURS for v in c])  # (a palette PNG: its indices are the classes)
                b, m = io.BytesIO(), io.BytesIO()
                Image.fromarray(crop).save(b, "JPEG", quality=90)
                mask.save(m, "PNG")
                w.write({"__key__": f"p{p}-{k:04d}", "jpg": b.getvalue(), "seg.png": m.getvalue()})
    return w.shards


class TinyFCN(nn.Module):
    """Three convolutions down by 4, a 1x1 classifier, upsampled back to the input size."""

    def __init__(self, classes: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 24, 3, padding=1), nn.ReLU(),
                                  nn.Conv2d(24, 32, 3, stride=2, padding=1), nn.ReLU(),
                                  nn.Conv2d(32, 48, 3, stride=2, padding=1), nn.ReLU(), nn.Conv2d(48, classes, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.interpolate(self.body(x), size=x.shape[-2:], mode="bilinear", align_corners=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=None, help="tar shards: a brace pattern, a glob, a directory, URLs")
    ap.add_argument("--make-demo", default=None, metavar="DIR", help="write small shards with masks into DIR, train")
    ap.add_argument("--classes", type=int, default=len(COLOURS))
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--base-size", type=int, default=96, help="RandomResize draws the shorter side in [0.5, 2) x this")
    ap.add_argument("--crop-size", type=int, default=80)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rotate", type=float, default=0.0, metavar="DEG", help="RandomRotation(DEG) after the flip")
    ap.add_argument("--precache", type=int, default=None, metavar="S",
                    help="decode once into tensor shards at shorter side S first, the masks moved there too "
                    "(DIR-precached-S), train from them")
    args = ap.parse_args()
    data = make_demo(args.make_demo) if args.make_demo else args.data
    if data is None:
        ap.error("give --data or --make-demo")
    if args.precache:
        from gpudecode.precache import precache

        base = args.make_demo or (args.data if os.path.isdir(args.data) else "data")
        out = f"{os.path.abspath(base).rstrip(os.sep)}-precached-{args.precache}"
        report = precache(data, out, size=args.precache, resume=True, masks=["seg.png"])  # (a second run keeps them)
        print(f"precached {report.samples} images and their masks (shorter side at most {args.precache}) into "
              f"{out}, {report.written} decoded now")
        data = out
    device = "cuda" if torch.cuda.is_available() else "cpu"
    train = T.Compose([T.RandomResize(args.base_size // 2, args.base_size * 2),
                       T.RandomCrop(args.crop_size, pad_if_needed=True), T.RandomHorizontalFlip(),
                       *([T.RandomRotation(args.rotate)] if args.rotate else []),
                       T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD)])
    loader = gpudecode.Loader(data, batch_size=args.batch_size, transform=train, device=device, labels=False,
                              fields={"seg.png": gpudecode.Mask(fill=IGNORE, dtype=torch.int64)},
                              num_threads=args.threads, shuffle=True, seed=0, on_error="skip", drop_last=True)
    print(f"{loader.total_samples} images with masks, {len(loader)} batches an epoch on {device}; "
          f"a batch is {loader.describe()['batch']}")
    model = TinyFCN(args.classes).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    with loader:
        for epoch in range(args.epochs):
            loader.set_epoch(epoch)
            t, seen, total, right, counted, ignored = time.perf_counter(), 0, 0.0, 0, 0, 0
            for images, masks in loader:
                logits = model(images)
                loss = nn.functional.cross_entropy(logits, masks, ignore_index=IGNORE)
                opt.zero_grad()
                loss.backward()
                opt.step()
                valid = masks != IGNORE
                seen += len(images)
                total += loss.item() * len(images)
                right += int((logits.argmax(1)[valid] == masks[valid]).sum())
                counted += int(valid.sum())
                ignored += int((~valid).sum())
            print(f"epoch {epoch}: {seen} images, loss {total / max(seen, 1):.3f}, pixel accuracy "
                  f"{right / max(counted, 1):.2f}, {100 * ignored / max(ignored + counted, 1):.1f}% of pixels "
                  f"ignored (padding, rotated-in corners), {seen / (time.perf_counter() - t):,.0f} images/s")
    if loader.skipped:
        print(f"skipped {len(loader.skipped)}: {loader.skipped[0].key}: {loader.skipped[0].reason}")


if __name__ == "__main__":
    main()
