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
from typing import Any, Callable, Sequence, cast

import numpy as np
import torch

from ._version import __version__
from .decode import DecodedBatch, DecoderName, Request, check_device, make_decoder
from .errors import DecodeError, LocatedError, ShardWriteError
from ._probe import DEFAULT_MAX_PIXELS, probe_samples
from .errors import OnError, Skipped, check_on_error, record_failure
from .io.reader import Sample, ShardReader, split_exts
from .io.writer import ShardWriter, format_pattern
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
    """Resizes decoded images straight from the decoder's pixels (any layout, CPU or CUDA)
    with the transforms' kernel (Compose.apply), one launch per output size, to uint8
    rounded to nearest."""

    # Normalize with mean -0.5/255 and std 1/255 turns the kernel's [0, 1] result v into
    # 255 * v + 0.5, so truncating to uint8 rounds to nearest, as torchvision's Resize on
    # uint8 images does: one float pass and one cast, no separate scale and round passes.
    _ROUND = T.Normalize([-0.5 / 255] * 3, [1 / 255] * 3)

    def __init__(self, num_threads: int) -> None:
        self.num_threads = num_threads
        self._tfs: dict[tuple[int, int], T.Compose] = {}

    def __call__(self, decoded: DecodedBatch, ks: Sequence[int], targets: Sequence[tuple[int, int]],
                 stream: Any = None) -> list[np.ndarray]:
        """Images ks of `decoded` (CPU or CUDA pixels, HWC or CHW) at their target sizes,
        as host uint8 HWC arrays."""
        out: list[np.ndarray | None] = [None] * len(ks)
        groups: dict[tuple[int, int], list[int]] = {}
        for j, (k, target) in enumerate(zip(ks, targets)):
            if (int(decoded.boxes[k][2]), int(decoded.boxes[k][3])) == target:  # kept as it is
                out[j] = self._host_window(decoded, k)
            else:
                groups.setdefault(target, []).append(j)
        for target, idx in groups.items():
            tf = self._tfs.get(target)
            if tf is None:
                tf = self._tfs[target] = T.Compose([T.Resize(target), self._ROUND], layout="NHWC")
            rows = [ks[j] for j in idx]
            sizes: list = [None] * len(decoded.boxes)  # the box (the whole image) is what is resized
            params: list = [None] * len(decoded.boxes)
            for k, prm in zip(rows, tf.make_params([(int(decoded.boxes[k][2]), int(decoded.boxes[k][3]))
                                                    for k in rows], 0)):
                sizes[k] = (int(decoded.boxes[k][2]), int(decoded.boxes[k][3]))
                params[k] = prm
            res, view = tf.new_output(len(idx), decoded.pixels.device)
            tf.apply(decoded, params, sizes, view, rows=rows, stream=stream, num_threads=self.num_threads)
            u8 = res.to(torch.uint8).cpu().numpy()  # values in [0.5, 255.5]: truncation rounds
            for i, j in enumerate(idx):
                out[j] = u8[i]
        return out  # type: ignore[return-value]

    @staticmethod
    def _host_window(decoded: DecodedBatch, k: int) -> np.ndarray:
        t, l, bh, bw = (int(v) for v in decoded.boxes[k])
        sy, sx, sc = (int(v) for v in decoded.strides[k])
        start = int(decoded.offsets[k]) + t * sy + l * sx
        img = decoded.pixels[start:].as_strided((bh, bw, 3), (sy, sx, sc))  # any layout the decoder gave
        return img.cpu().numpy().copy()


def precache(sources: str | Sequence[str], pattern: str, *, size: int = 256, shard_size: int = 1000,
             image_ext: str | Sequence[str] = IMAGE_EXTS, num_threads: int | None = None,
             on_error: OnError = "raise", max_pixels: int = DEFAULT_MAX_PIXELS, manifest: str | None = None,
             progress: Callable[[int], None] | None = None, device: str = "cpu",
             decoder: DecoderName | Any = "auto") -> PrecacheReport:
    """Writes tensor shards (`pattern`, e.g. `out/train-%06d.tar`) of the images in
    `sources` (any shard list ShardReader takes), in source order, shorter side at most
    `size`, `shard_size` samples per shard, and the manifest (default: beside the shards,
    see manifest_path). on_error: "raise" stops at the first bad shard or image with an
    error naming shard and key; "skip"/"warn" leave it out and list it in the manifest.
    device "cuda" decodes (decoder "auto": nvImageCodec, else DALI, else torchcodec) and
    resizes on the GPU; "cpu" (default) uses libjpeg-turbo and the CPU kernel. `decoder` may
    also be a decoder instance (see gpudecode.decode). Images over `max_pixels` are
    refused (default: twice Pillow's decompression-bomb limit, as the Loader).

    Raises:
        DecodeError, ShardFormatError, ShardReadError: bad input, with on_error="raise".
        ValueError: bad arguments.
    """
    if size < 1:
        raise ValueError(f"size must be >= 1, not {size}")
    format_pattern(pattern, 0)
    check_on_error(on_error)
    device = check_device(device)
    threads = max(1, num_threads or os.cpu_count() or 1)
    exts = split_exts(image_ext)
    reader = ShardReader(sources, shuffle=False, on_error=on_error, num_threads=min(threads, 2))
    dec: Any = decoder if not isinstance(decoder, str) else make_decoder(
        cast(DecoderName, decoder), device=device, num_threads=threads, max_pixels=max_pixels)
    resize = _Resizer(threads)
    skipped: list[Skipped] = []
    written = 0

    def fail(err: LocatedError) -> None:
        if on_error == "raise":
            raise err
        record_failure(err, on_error, skipped, who="gpudecode precache", stacklevel=3)

    def flush(chunk: list[Sample], writer: ShardWriter) -> None:
        nonlocal written
        probed = probe_samples(chunk, exts, max_pixels, fail)
        requests = [Request(p.data, p.format, p.height, p.width, (0, 0, p.height, p.width), p.sample.shard,
                            p.sample.key) for p in probed]
        kept = [p.sample for p in probed]
        if not requests:
            return
        decoded = dec.decode(requests)
        ks, targets, good = [], [], []
        for k, s in enumerate(kept):
            if decoded.errors[k] is not None:
                fail(DecodeError(f"cannot decode: {decoded.errors[k]}", shard=s.shard, key=s.key))
                continue
            ks.append(k)
            targets.append(stored_size(int(decoded.boxes[k][2]), int(decoded.boxes[k][3]), size))
            good.append(s)
        for s, img in zip(good, resize(decoded, ks, targets)):
            fields = {e: d for e, d in s.fields.items() if e not in exts}
            writer.write({"__key__": s.key, "npy": encode_npy(img), **fields})
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
    shards, counts = list(writer.shards), list(writer.counts)
    if isinstance(decoder, str) and hasattr(dec, "close"):
        dec.close()
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
    write_json_atomic(path, doc)
    return PrecacheReport(shards, written, path, skipped)


def write_json_atomic(path: str, doc: dict) -> None:
    """Writes `doc` to `path` through `path.partial` and a rename.

    Raises:
        ShardWriteError: it could not be written (names the path; nothing partial is left).
    """
    tmp = path + ".partial"
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise ShardWriteError(f"cannot write the manifest: {e.strerror or e}", shard=path) from e
