"""`gpudecode demo`: shards from bundled real photos, then the loader over them on the CPU."""
from __future__ import annotations

import io
import os
import shutil
import time
from pathlib import Path

import numpy as np

from ._text import plural

PHOTOS = ["astronaut", "coffee", "chelsea", "rocket", "camera", "immunohistochemistry", "hubble_deep_field", "cat"]


def photos() -> list[tuple[str, np.ndarray]]:
    """scikit-image's bundled photographs (those this version has), as (name, RGB HWC uint8)."""
    from skimage import data

    out = []
    for name in PHOTOS:
        try:
            img = getattr(data, name)()
        except (AttributeError, OSError, ValueError):  # a photo this scikit-image lacks
            continue
        if img.ndim == 2:
            img = np.stack([img] * 3, axis=-1)
        out.append((name, np.ascontiguousarray(img[..., :3])))
    return out


def build_demo_shards(workdir: str | os.PathLike, images: int = 512, *, shard_size: int = 128, seed: int = 0) -> list[str]:
    """JPEG (quality 90) and some PNG samples: crops of real photos at ImageNet-like sizes,
    labelled by the photo they come from."""
    from PIL import Image

    from .io.writer import ShardWriter

    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    photos_ = photos()
    with ShardWriter(str(workdir / "demo-%06d.tar"), maxcount=shard_size) as w:
        for i in range(images):
            label, (name, img) = i % len(photos_), photos_[i % len(photos_)]
            h, w_ = img.shape[:2]
            ch, cw = int(rng.integers(h // 2, h + 1)), int(rng.integers(w_ // 2, w_ + 1))
            t, l = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w_ - cw + 1))
            im = Image.fromarray(img[t:t + ch, l:l + cw]).resize((500, 375) if i % 3 else (375, 500))
            b = io.BytesIO()
            fmt = "png" if i % 16 == 0 else "jpg"
            im.save(b, format="PNG" if fmt == "png" else "JPEG", quality=90)
            w.write({"__key__": f"{name}_{i:06d}", fmt: b.getvalue(), "cls": str(label)})
    return w.shards


def run_demo(workdir: str, *, images: int = 512, batch_size: int = 64, seed: int = 0) -> int:
    import torch

    from . import Loader
    from . import transforms as T

    shards = build_demo_shards(workdir, images, seed=seed)
    print(f"built {plural(len(shards), 'shard')} of real photos in {workdir}/ ({plural(images, 'sample')}, "
          "JPEG and PNG)")
    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1),
                    T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    loader = Loader(shards, batch_size=batch_size, transform=tf, device="cpu", seed=seed)
    print("loader:", loader.describe())

    def run_epoch(loader: Loader, epoch: int, what: str) -> None:
        loader.set_epoch(epoch)
        t = time.perf_counter()
        n = 0
        for images_, labels in loader:  # noqa: B007 (the last batch is reported below)
            n += images_.shape[0]
            if images_.shape[1:] != (3, 224, 224) or images_.dtype != torch.float32:
                raise SystemExit(f"the demo's batch is {images_.dtype} {tuple(images_.shape)}, not float32 [N, 3, 224, 224]")
        dt = time.perf_counter() - t
        print(f"{what} epoch {epoch}: {n} images in {dt:.2f} s = {n / dt:.0f} img/s; "
              f"last batch mean {float(images_.mean()):+.3f}, labels {labels[:8].tolist()}")
        print("  ", loader.stats)

    print("(the first epoch also loads the compiled kernel, about 0.5 s, or on a machine's first run compiles it "
          "once: up to a minute or so, said while it runs)")
    for epoch in range(2):
        run_epoch(loader, epoch, "JPEG/PNG shards,")
    from .precache import precache

    out = os.path.join(workdir, "tensors")
    shutil.rmtree(out, ignore_errors=True)  # a fresh run each time (precache refuses a used folder)
    report = precache(shards, out, size=256)
    print(f"precache: {plural(report.samples, 'sample')} -> {plural(len(report.shards), 'tensor shard')} in "
          f"{report.seconds:.1f} s, manifest {report.manifest}")
    tensors = Loader(report.shards, batch_size=batch_size, transform=tf, device="cpu", seed=seed)
    for epoch in range(2):
        run_epoch(tensors, epoch, "tensor shards,")
    kept = Loader(shards, batch_size=batch_size, transform=tf, device="cpu", seed=seed, keep="ram")
    for epoch in range(2):
        run_epoch(kept, epoch, "JPEG/PNG shards kept in RAM (keep='ram'),")
    where = kept.describe()["keep"]
    print(f"   the set kept: {where.get('images')} images, {where.get('bytes', 0) / 2**20:.0f} MiB in "
          f"{where.get('tier')}, decoded once in {where.get('fill_s')} s; later epochs read and decode nothing")
    for ld in (loader, tensors, kept):
        ld.close()
    print(f"(on {os.cpu_count()} cores. The JPEG/PNG epochs decode 500x375 images, ImageNet's typical size, on the "
          "CPU: decoding is most of their time. The tensor-shard epochs skip it, as the README's CPU figures for "
          "tensor shards do, and a kept set's later epochs skip the reading too; `gpudecode bench formats` compares "
          "the formats and torchvision's DataLoader in one run.)")
    return 0
