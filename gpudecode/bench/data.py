"""`gpudecode bench make-data`: realistic images cut, scaled and flipped from real
photographs (scikit-image's bundled ones; how much detail an image holds drives its
decode time, so never flat noise), stored in each format as shards (for gpudecode) and
as an ImageFolder tree of files (for torchvision's classic pipeline, DALI and SPDL), all
with the same pixels and labels."""
from __future__ import annotations

import io
import json
import os
import re
import shutil
from pathlib import Path
from typing import Sequence

import numpy as np

FORMATS = ("png", "jpg", "tensor")  # the default set
# every format make-data writes: the default set, and the others data sets hold (AVIF with
# Pillow's own codec, HEIC and JPEG XL through the [formats] extra's plugins)
ALL_FORMATS = FORMATS + ("webp", "tiff", "avif", "heic", "jxl")
EXT = {"png": "png", "jpg": "jpg", "tensor": "npy", "webp": "webp", "tiff": "tiff", "avif": "avif", "heic": "heic",
       "jxl": "jxl"}
_PILLOW = {"png": "PNG", "jpg": "JPEG", "webp": "WEBP", "tiff": "TIFF", "avif": "AVIF", "heic": "HEIF", "jxl": "JXL"}


def parse_size(text: str | int | Sequence[int]) -> tuple[int, int]:
    """224 -> (224, 224); "640x480" (W x H) -> (480, 640) as (height, width).

    Raises:
        ValueError: anything else.
    """
    if isinstance(text, int):
        return text, text
    if not isinstance(text, str):
        h, w = text
        return int(h), int(w)
    m = re.fullmatch(r"\s*(\d+)\s*(?:[xX]\s*(\d+)\s*)?", text)
    if m is None or int(m.group(1)) < 8 or (m.group(2) and int(m.group(2)) < 8):
        raise ValueError(f"size must be S or WxH (8 or more), not {text!r}")
    if m.group(2) is None:
        return int(m.group(1)), int(m.group(1))
    return int(m.group(2)), int(m.group(1))


def _photos() -> list[tuple[str, np.ndarray]]:
    from ..demo import photos

    found = photos()
    if not found:
        raise RuntimeError("scikit-image's bundled photos are missing (pip install scikit-image)")
    return found


def _view(rng: np.random.Generator, img: np.ndarray, h: int, w: int) -> np.ndarray:
    """A random crop of `img` (10-100% of its area, aspect near the target's), flipped
    at random, resized to h x w (antialiased)."""
    from PIL import Image

    ih, iw = img.shape[:2]
    aspect = w / h * float(np.exp(rng.uniform(-0.3, 0.3)))
    area = ih * iw * rng.uniform(0.1, 1.0)
    ch = int(min(ih, max(8, round(np.sqrt(area / aspect)))))
    cw = int(min(iw, max(8, round(ch * aspect))))
    t, l = int(rng.integers(0, ih - ch + 1)), int(rng.integers(0, iw - cw + 1))
    crop = img[t:t + ch, l:l + cw]
    if rng.random() < 0.5:
        crop = crop[:, ::-1]
    return np.asarray(Image.fromarray(np.ascontiguousarray(crop)).resize((w, h), Image.Resampling.BILINEAR,
                                                                         reducing_gap=None))


def make_image(rng: np.random.Generator, photos: list[tuple[str, np.ndarray]], h: int, w: int) -> tuple[np.ndarray, int]:
    """One image (uint8 HWC) and its label (the photo it comes from). Large images are a
    2 x 2 mosaic of views of four photos, so their detail per pixel stays that of a
    photograph rather than an upscaled one."""
    label = int(rng.integers(0, len(photos)))
    if min(h, w) <= 512:
        return _view(rng, photos[label][1], h, w), label
    out = np.empty((h, w, 3), np.uint8)
    hs, ws = [0, h // 2, h], [0, w // 2, w]
    for i in range(2):
        for j in range(2):
            k = label if i == j == 0 else int(rng.integers(0, len(photos)))
            out[hs[i]:hs[i + 1], ws[j]:ws[j + 1]] = _view(rng, photos[k][1], hs[i + 1] - hs[i], ws[j + 1] - ws[j])
    return out, label


def encode(img: np.ndarray, fmt: str, quality: int = 90) -> bytes:
    from PIL import Image

    from ..tensors import encode_npy

    if fmt == "tensor":
        return encode_npy(img)
    from ..decode._base import pillow_formats

    if fmt not in _PILLOW:
        raise ValueError(f"unknown format {fmt!r} (one of {', '.join(ALL_FORMATS)})")
    pillow_formats()  # (the [formats] plugins registered)
    if _PILLOW[fmt] not in Image.SAVE:
        raise ValueError(f"Pillow here cannot write {fmt}: pip install 'gpudecode[formats]'")
    buf = io.BytesIO()
    # lossy formats at the same quality setting as JPEG's (their scales differ: the bytes per
    # image in dataset.json say what each made of it); PNG and TIFF lossless
    opts = {"png": {}, "tiff": {"compression": "tiff_lzw"}}.get(fmt, {"quality": quality})
    Image.fromarray(img).save(buf, format=_PILLOW[fmt], **opts)
    return buf.getvalue()


def make_data(out: str | os.PathLike, *, count: int = 2048, size: str | int | Sequence[int] = 224,
              formats: Sequence[str] = FORMATS, seed: int = 0, shard_size: int = 256, quality: int = 90,
              show_progress: bool = True) -> dict:
    """Writes the dataset into `out` (emptied first if it holds an earlier make-data's
    dataset; refused if it holds anything else) and returns its description (also in
    out/dataset.json): shards per format, file trees per format, bytes per image.

    Raises:
        ValueError: bad arguments, or `out` holds other files.
    """
    from ..io.writer import ShardWriter
    from .common import progress

    h, w = parse_size(size)
    formats = list(dict.fromkeys(formats))
    bad = [f for f in formats if f not in ALL_FORMATS]
    if bad or not formats:
        raise ValueError(f"formats must be among {', '.join(ALL_FORMATS)}, not {', '.join(bad) or 'none'}")
    if count < 1 or shard_size < 1:
        raise ValueError("count and shard_size must be >= 1")
    root = Path(out)
    if root.exists() and any(root.iterdir()):
        if not (root / "dataset.json").exists():
            raise ValueError(f"{root} is not empty and holds no gpudecode bench dataset: give an empty or new folder")
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)
    photos = _photos()
    rng = np.random.default_rng(seed)
    writers = {f: ShardWriter(str(root / "shards" / f / "shard-%06d.tar"), maxcount=shard_size) for f in formats}
    sizes = {f: 0 for f in formats}
    with progress(count, f"make-data {w}x{h}", enabled=show_progress) as bar:
        for k in range(count):
            img, label = make_image(rng, photos, h, w)
            key = f"{k:08d}"
            for f in formats:
                data = encode(img, f, quality)
                sizes[f] += len(data)
                writers[f].write({"__key__": key, EXT[f]: data, "cls": str(label)})
                d = root / "files" / f / f"c{label:02d}"
                d.mkdir(parents=True, exist_ok=True)
                (d / f"{key}.{EXT[f]}").write_bytes(data)
            bar.update(1)
    for wr in writers.values():
        wr.close()
    doc = {
        "format": "gpudecode bench dataset", "count": count, "size": [h, w], "formats": formats, "seed": seed,
        "quality": quality, "photos": [name for name, _ in photos], "classes": len(photos),
        "bytes_per_image": {f: sizes[f] / count for f in formats},
        "shards": {f: [os.path.relpath(p, root) for p in writers[f].shards] for f in formats},
        "files": {f: os.path.join("files", f) for f in formats},
    }
    (root / "dataset.json").write_text(json.dumps(doc, indent=1))
    return doc


def load(data: str | os.PathLike) -> tuple[Path, dict]:
    """(root, description) of a dataset written by make_data.

    Raises:
        ValueError: no dataset.json there.
    """
    root = Path(data)
    try:
        return root, json.loads((root / "dataset.json").read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{root} is not a gpudecode bench dataset (no readable dataset.json; make one with "
                         "`gpudecode bench make-data`)") from e
