"""Object detection from WebDataset shards (`<key>.jpg` beside `<key>.json`, its COCO
annotations: `[{"bbox": [x, y, w, h], "category_id": c}, ...]`): each sample's boxes moved
with its image by the image's own draws (`fields={"json": gpudecode.Boxes("XYWH", ...)}`),
batches of (images, targets) as torchvision's detection models take them.

    python examples/detection/train.py --data "coco/train-{000000..000117}.tar" --classes 91
    python examples/detection/train.py --make-demo DIR    # write small shards (offline), then train
    python examples/detection/train.py --make-demo DIR --precache 96   # decode once to tensors first
    python examples/detection/train.py --make-demo DIR --recipe ssd    # SSD's zoom-out and IoU crop
    python examples/detection/train.py --make-demo DIR --recipe ssdlite   # images of their own sizes

The transform is the large-scale-jitter recipe of torchvision's detection reference
(references/detection/presets.py, "lsj") at the demo's size: ScaleJitter to the square,
the reference's FixedSizeCrop (the image at the top-left, filled with the mean colour
where it is smaller), RandomHorizontalFlip; the boxes a crop leaves too small are dropped
with their labels (SanitizeBoundingBoxes' rule). With `--recipe ssd`, SSD's ("ssd" in the
same presets), in its order: RandomPhotometricDistort (first, on each whole image),
RandomZoomOut onto a canvas of the mean colour, RandomIoUCrop (its crop drawn from the
sample's boxes: the boxes whose centres it leaves out are dropped), a Resize to the square
so that a batch has one size, then the flip. With `--recipe ssdlite`
or `--recipe multiscale`, those presets as written (RandomIoUCrop alone;
RandomShortestSize), each image at its own size: `Compose(..., ragged=True)`, a batch a
`gpudecode.RaggedBatch` (a list of images, views of one padded batch), which the model
takes as it is. The model is torchvision's Faster R-CNN on MobileNetV3,
untrained. A sample whose annotations are not boxes (a negative width, a box that is not
a number) is skipped and named (`on_error="skip"`).

With `--precache S`, the images are first decoded once into tensor shards at shorter side
S (`gpudecode.precache.precache`, beside the data), and training reads those: no JPEG is
decoded again. The annotations are copied as they are; beside each resized image a record
of its resize lets the Loader move the boxes onto the stored image before the recipe.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import time

import torch

import gpudecode
from gpudecode import transforms as T

SHAPES = ("rectangle", "ellipse", "triangle")  # the demo's classes 1, 2, 3 (0 is the background)


def make_demo(out: str, per_photo: int = 12) -> list[str]:
    """Crops of scikit-image's photographs, each with one to three flat shapes pasted on it,
    their boxes as COCO annotations (XYWH, category 1 + the shape's index)."""
    import numpy as np
    from PIL import Image, ImageDraw
    from skimage import data

    from gpudecode.io.writer import ShardWriter

    photos = [data.astronaut(), data.coffee(), data.chelsea(), data.rocket()]
    rng = np.random.default_rng(0)
    os.makedirs(out, exist_ok=True)
    with ShardWriter(os.path.join(out, "det-%06d.tar"), maxcount=per_photo * len(photos) // 2) as w:
        for k in range(per_photo):
            for p, img in enumerate(photos):
                h, wd = img.shape[0] // 3, img.shape[1] // 3
                t, l = int(rng.integers(0, img.shape[0] - h)), int(rng.integers(0, img.shape[1] - wd))
                im = Image.fromarray(np.ascontiguousarray(img[t:t + h, l:l + wd]))
                draw = ImageDraw.Draw(im)
                anns = []
                for _ in range(int(rng.integers(1, 4))):
                    bw, bh = int(rng.integers(wd // 6, wd // 2)), int(rng.integers(h // 6, h // 2))
                    x0, y0 = int(rng.integers(0, wd - bw)), int(rng.integers(0, h - bh))
                    kind = int(rng.integers(0, len(SHAPES)))
                    colour = tuple(int(v) for v in rng.integers(0, 256, 3))
                    box = [x0, y0, x0 + bw - 1, y0 + bh - 1]
                    if kind == 0:
                        draw.rectangle(box, fill=colour, outline=(0, 0, 0))
                    elif kind == 1:
                        draw.ellipse(box, fill=colour, outline=(0, 0, 0))
                    else:
                        draw.polygon([(x0, y0 + bh - 1), (x0 + bw - 1, y0 + bh - 1), (x0 + bw // 2, y0)], fill=colour,
                                     outline=(0, 0, 0))
                    anns.append({"bbox": [x0, y0, bw, bh], "category_id": kind + 1, "iscrowd": 0})
                b = io.BytesIO()
                im.save(b, "JPEG", quality=90)
                w.write({"__key__": f"p{p}-{k:04d}", "jpg": b.getvalue(), "json": json.dumps(anns).encode()})
    return w.shards


def main() -> None:
    from torchvision.models.detection import fasterrcnn_mobilenet_v3_large_320_fpn

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=None, help="tar shards: a brace pattern, a glob, a directory, URLs")
    ap.add_argument("--make-demo", default=None, metavar="DIR", help="write small shards with boxes into DIR, train")
    ap.add_argument("--classes", type=int, default=len(SHAPES) + 1, help="with the background")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--size", type=int, default=128, help="ScaleJitter's target and the crop's size")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--recipe", choices=("lsj", "ssd", "ssdlite", "multiscale"), default="lsj",
                    help="large-scale jitter; SSD's (RandomZoomOut, RandomIoUCrop, Resize); ssdlite's or multiscale's "
                         "as written (images of their own sizes)")
    ap.add_argument("--precache", type=int, default=None, metavar="S",
                    help="decode once into tensor shards at shorter side S first (DIR-precached-S), train from them")
    args = ap.parse_args()
    data = make_demo(args.make_demo) if args.make_demo else args.data
    if data is None:
        ap.error("give --data or --make-demo")
    if args.precache:
        from gpudecode.precache import precache

        base = args.make_demo or (args.data if os.path.isdir(args.data) else "data")
        out = f"{os.path.abspath(base).rstrip(os.sep)}-precached-{args.precache}"
        report = precache(data, out, size=args.precache, resume=True)  # (a second run keeps what is done)
        print(f"precached {report.samples} images (shorter side at most {args.precache}) into {out}, "
              f"{report.written} decoded now")
        data = out
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.recipe == "ssd":  # (the distortion first, as the preset has it: on each whole image)
        geometry = [T.RandomPhotometricDistort(), T.RandomZoomOut(fill=(123, 117, 104)), T.RandomIoUCrop(),
                    T.Resize((args.size, args.size))]
    elif args.recipe == "ssdlite":  # (its crop kept at its size: ragged=True below)
        geometry = [T.RandomIoUCrop()]
    elif args.recipe == "multiscale":  # (the reference's sizes, scaled to the demo's)
        geometry = [T.RandomShortestSize([args.size * s // 800 for s in range(480, 801, 32)], max_size=args.size * 5 // 3)]
    else:
        geometry = [T.ScaleJitter((args.size, args.size), scale_range=(0.5, 1.5)),
                    T.FixedSizeCrop(args.size, fill=(123, 117, 104))]
    train = T.Compose([*geometry, T.RandomHorizontalFlip(), T.ToDtype(torch.float32, scale=True)],
                      ragged=args.recipe in ("ssdlite", "multiscale"))
    loader = gpudecode.Loader(data, batch_size=args.batch_size, transform=train, device=device, labels=False,
                              fields={"json": gpudecode.Boxes("XYWH", out_format="XYXY")},
                              num_threads=args.threads, shuffle=True, seed=0, on_error="skip", drop_last=True)
    print(f"{loader.total_samples} images with boxes, {len(loader)} batches an epoch on {device}; "
          f"a batch is {loader.describe()['batch']}")
    # (the images come at the crop's size, or near it: the model's own resize is told to keep it)
    model = fasterrcnn_mobilenet_v3_large_320_fpn(weights=None, weights_backbone=None, num_classes=args.classes,
                                                  min_size=args.size, max_size=args.size).to(device)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    with loader:
        for epoch in range(args.epochs):
            loader.set_epoch(epoch)
            t, seen, boxes, total = time.perf_counter(), 0, 0, 0.0
            for images, targets in loader:
                losses = model(list(images), targets)  # (a RaggedBatch is a list already)
                loss = sum(losses.values())
                opt.zero_grad()
                loss.backward()  # type: ignore[union-attr]
                opt.step()
                seen += len(images)
                boxes += sum(len(tg["boxes"]) for tg in targets)
                total += loss.item() * len(images)  # type: ignore[union-attr]
            print(f"epoch {epoch}: {seen} images, {boxes} boxes, loss {total / max(seen, 1):.3f}, "
                  f"{seen / (time.perf_counter() - t):,.1f} images/s")
    if loader.skipped:
        print(f"skipped {len(loader.skipped)}: {loader.skipped[0].key}: {loader.skipped[0].reason}")


if __name__ == "__main__":
    main()
