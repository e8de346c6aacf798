"""`gpudecode precache`: image shards -> tensor shards of decoded, downsized pixels.

Each image is decoded once, its shorter side brought down to `size` (antialiased
bilinear, torchvision's Resize; smaller images are kept as they are, never upscaled) and
stored as a `.npy` field (uint8 RGB, HWC; see gpudecode.tensors) in the same
WebDataset layout, with the sample's other fields (labels, metadata) copied as they
are. The Loader reads these shards like any others: the random crop, flip and
ColorJitter still happen at train time, on pixels that need no decoding.

A manifest (JSON) beside the shards lists the sources, the stored size, each shard's
sample count, byte size and sha256, and every skipped sample.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch

from ._version import __version__
from .decode import Request
from .decode.cpu import CpuDecoder
from .errors import DecodeError, LocatedError
from .io.reader import OnError, Sample, ShardReader, Skipped, check_on_error
from .io.writer import ShardWriter, format_pattern
from ._probe import probe_format
from .tensors import encode_npy
from . import transforms as T

IMAGE_EXTS = ("jpg", "jpeg", "png", "webp", "npy")


@dataclass
class PrecacheReport:
    shards: list[str]
    samples: int
    manifest: str
    skipped: list[Skipped] = field(default_factory=list)


def manifest_path(pattern: str) -> str:
    """`out/train-%06d.tar` -> `out/train-manifest.json`."""
    head = pattern.split("%", 1)[0].split("{", 1)[0]
    return head + "manifest.json" if head.endswith(("-", "_", "/")) or not head else head + "-manifest.json"


def stored_size(height: int, width: int, size: int) -> tuple[int, int]:
    """The stored (height, width): torchvision's Resize(size) where the shorter side is
    over `size`, else unchanged."""
    if min(height, width) <= size:
        return height, width
    return T.Resize(size).output_size(height, width)


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class _Resizer:
    """Resizes decoded HWC images with the fused kernel, a batch per output size."""

    def __init__(self, num_threads: int) -> None:
        self.num_threads = num_threads
        self._tfs: dict[tuple[int, int], T.Compose] = {}

    def __call__(self, images: list[np.ndarray], sizes: list[tuple[int, int]]) -> list[np.ndarray]:
        out: list[np.ndarray | None] = [None] * len(images)
        groups: dict[tuple[int, int], list[int]] = {}
        for k, (img, size) in enumerate(zip(images, sizes)):
            if size == img.shape[:2]:
                out[k] = img
            else:
                groups.setdefault(size, []).append(k)
        for size, idx in groups.items():
            tf = self._tfs.get(size)
            if tf is None:
                tf = self._tfs[size] = T.Compose([T.Resize(size), T.ToDtype(torch.float32, scale=True)])
            batch = [torch.from_numpy(images[k]).permute(2, 0, 1) for k in idx]
            res = tf(batch, [{"resize": size}] * len(idx))
            # to uint8 by rounding, as torchvision's Resize on uint8 images does
            res = res.mul_(255.0).round_().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1).contiguous()
            for j, k in enumerate(idx):
                out[k] = res[j].numpy()
        return out  # type: ignore[return-value]


def precache(sources: str | Sequence[str], pattern: str, *, size: int = 256, shard_size: int = 1000,
             image_ext: str | Sequence[str] = IMAGE_EXTS, num_threads: int | None = None,
             on_error: OnError = "raise", max_pixels: int = 0, manifest: str | None = None,
             progress: Callable[[int], None] | None = None) -> PrecacheReport:
    """Writes tensor shards (`pattern`, e.g. `out/train-%06d.tar`) of the images in
    `sources` (any shard list ShardReader takes), in source order, shorter side at most
    `size`, `shard_size` samples per shard, and the manifest (default: beside the shards,
    see manifest_path). on_error: "raise" stops at the first bad shard or image with an
    error naming shard and key; "skip"/"warn" leave it out and list it in the manifest.

    Raises:
        DecodeError, ShardFormatError, ShardReadError: bad input, with on_error="raise".
        ValueError: bad arguments.
    """
    if size < 1:
        raise ValueError(f"size must be >= 1, not {size}")
    format_pattern(pattern, 0)
    check_on_error(on_error)
    threads = max(1, num_threads or os.cpu_count() or 1)
    exts = [e.strip().lower().lstrip(".") for e in (image_ext.split(";") if isinstance(image_ext, str) else image_ext)]
    reader = ShardReader(sources, shuffle=False, on_error=on_error, num_threads=min(threads, 2))
    decoder = CpuDecoder(num_threads=threads, max_pixels=max_pixels)
    resize = _Resizer(threads)
    skipped: list[Skipped] = []
    counts: list[int] = []
    written = 0

    def fail(err: LocatedError) -> None:
        if on_error == "raise":
            raise err
        skipped.append(Skipped(err.shard or "", err.key, err.offset, err.reason, type(err).__name__))
        if on_error == "warn":
            import warnings

            warnings.warn(f"gpudecode precache skipped: {err}", RuntimeWarning, stacklevel=3)

    def flush(chunk: list[Sample], writer: ShardWriter) -> None:
        nonlocal written
        requests, kept = [], []
        for s in chunk:
            ext = next((e for e in exts if e in s.fields), None)
            if ext is None:
                fail(DecodeError(f"no image (looked for .{', .'.join(exts)})", shard=s.shard, key=s.key))
                continue
            data = s.fields[ext]
            try:
                fmt, h, w = probe_format(data, shard=s.shard, key=s.key)
            except LocatedError as e:
                fail(e)
                continue
            requests.append(Request(data, fmt, h, w, (0, 0, h, w), s.shard, s.key))
            kept.append(s)
        if not requests:
            return
        decoded = decoder.decode(requests)
        pixels = decoded.pixels.numpy()
        images, sizes, good = [], [], []
        for k, s in enumerate(kept):
            if decoded.errors[k] is not None:
                fail(DecodeError(f"cannot decode: {decoded.errors[k]}", shard=s.shard, key=s.key))
                continue
            h, w = (int(v) for v in decoded.shapes[k])
            images.append(pixels[decoded.offsets[k]:decoded.offsets[k] + h * w * 3].reshape(h, w, 3))
            sizes.append(stored_size(h, w, size))
            good.append(s)
        for s, img in zip(good, resize(images, sizes)):
            fields = {e: d for e, d in s.fields.items() if e not in exts}
            writer.write({"__key__": s.key, "npy": encode_npy(img), **fields})
            while len(counts) < len(writer.shards):
                counts.append(0)
            counts[-1] += 1
            written += 1
        if progress is not None:
            progress(written)

    with ShardWriter(pattern, maxcount=shard_size) as writer:
        chunk: list[Sample] = []
        for sample in reader:
            chunk.append(sample)
            if len(chunk) == 64:
                flush(chunk, writer)
                chunk = []
        flush(chunk, writer)
        shards = list(writer.shards)
    decoder.close()
    skipped = list(reader.skipped) + skipped
    path = manifest or manifest_path(pattern)
    entries = [{"path": os.path.relpath(p, os.path.dirname(os.path.abspath(path))), "samples": n,
                "bytes": os.path.getsize(p), "sha256": _sha256(p)} for p, n in zip(shards, counts)]
    doc = {
        "format": "gpudecode tensor shards", "version": 1, "created_by": f"gpudecode {__version__}",
        "pixels": {"field": "npy", "dtype": "uint8", "layout": "HWC", "channels": 3,
                   "shorter_side_at_most": size, "resize": "bilinear, antialiased; rounded to uint8; never upscaled"},
        "sources": list(reader.urls), "samples": written, "shards": entries,
        "skipped": [{"shard": s.shard, "key": s.key, "offset": s.offset, "reason": s.reason, "error": s.error}
                    for s in skipped],
    }
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".partial"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)
    return PrecacheReport(shards, written, path, skipped)
