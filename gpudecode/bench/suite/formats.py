"""The same images stored three ways, through the same Loader, in one run: JPEG
(quality 90), PNG, and tensor shards written by `gpudecode precache` (shorter side 256,
uint8). RandomResizedCrop(224) + flip + ColorJitter(0.4, 0.4, 0.4, 0.1) + Normalize,
CPU path. Prints img/s, ratios to JPEG, bytes per sample, and the Loader's stage
timings (where each format stalls).

    python bench/formats.py [--images 1024] [--threads 2] [--repeat 3]
"""
from __future__ import annotations

import io
import os
import time

from ..common import machine
from . import OUT, pipeline_args, save

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def build(n: int) -> dict[str, list[str]]:
    """{format: shards} of n ImageNet-like 500x375 images from scikit-image's photos."""
    import numpy as np
    from PIL import Image
    from skimage import data

    from gpudecode.io.writer import ShardWriter
    from gpudecode.precache import precache

    root = OUT / f"formats_{n}"
    found = {f: sorted(str(p) for p in root.glob(f"{f}-*.tar")) for f in ("jpeg", "png", "tensor")}
    if all(found.values()):
        return found
    base = [data.astronaut(), data.coffee(), data.chelsea(), data.rocket(), data.immunohistochemistry()]
    rng = np.random.default_rng(0)
    shards = {}
    for fmt, ext, kw in (("jpeg", "jpg", {"format": "JPEG", "quality": 90}), ("png", "png", {"format": "PNG"})):
        with ShardWriter(str(root / f"{fmt}-%06d.tar"), maxcount=256) as w:
            for k in range(n):
                img = base[k % len(base)]
                h, wd = img.shape[:2]
                t, l = int(rng.integers(0, h // 4)), int(rng.integers(0, wd // 4))
                b = io.BytesIO()
                Image.fromarray(img[t:, l:]).resize((500, 375), Image.Resampling.BILINEAR).save(b, **kw)
                w.write({"__key__": f"{k:07d}", ext: b.getvalue(), "cls": str(k % len(base))})
        shards[fmt] = w.shards
        rng = np.random.default_rng(0)  # the same crops for both
    report = precache(shards["jpeg"], str(root / "tensor-%06d.tar"), size=256, shard_size=256)
    shards["tensor"] = report.shards
    return shards


def main() -> None:
    ap = pipeline_args(__doc__, images=1024)
    a = ap.parse_args()
    import statistics

    from gpudecode import Loader
    from gpudecode import transforms as T

    shards = build(a.images)
    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1),
                    T.Normalize(MEAN, STD)])
    rows, stats, sizes = {}, {}, {}
    for fmt, urls in shards.items():
        loader = Loader(urls, batch_size=a.batch, transform=tf, device="cpu", num_threads=a.threads, seed=0)
        rates = []
        for epoch in range(a.repeat + 1):  # epoch 0 warms up (kernel load, page cache)
            loader.set_epoch(epoch)
            t = time.perf_counter()
            n = sum(b.images.shape[0] for b in loader)
            if epoch:
                rates.append(n / (time.perf_counter() - t))
        rows[fmt] = statistics.median(rates)
        stats[fmt] = str(loader.stats)
        sizes[fmt] = sum(os.path.getsize(u) for u in urls) / a.images
    print(f"{a.images} images (500x375 photos), RandomResizedCrop(224) + flip + ColorJitter + Normalize, "
          f"gpudecode Loader on the CPU, {a.threads} threads, batch {a.batch}")
    print(f"{'format':8s} {'img/s':>8s} {'x JPEG':>7s} {'KB/sample':>10s}")
    for fmt, r in rows.items():
        print(f"{fmt:8s} {r:8.0f} {r / rows['jpeg']:7.2f} {sizes[fmt] / 1024:10.1f}")
    for fmt, s in stats.items():
        print(f"{fmt}: {s}")
    save("formats", {"machine": machine(), "args": vars(a), "img_per_s": rows, "bytes_per_sample": sizes,
                     "stats": stats})


if __name__ == "__main__":
    main()
