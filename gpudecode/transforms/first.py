"""The first pass: the per-sample steps and policies a Compose holds before its geometry
(`[ColorJitter(...), RandomResizedCrop(224), ...]`; SSD's `[RandomPhotometricDistort(),
RandomZoomOut(...), RandomIoUCrop(), ...]`; `[RandAugment(), Resize((224, 224)), ...]`),
run as torchvision runs them: on each whole image at its size, before the crop. A
contrast reads the whole image's mean, a colour step does not commute with a resize's
filter, a policy's warp turns the whole image, so they cannot wait for the fused kernel's
program. The same kernel runs them first, as a Compose of their own without geometry
(`Compose.first_pass`), into uint8 images [3, h, w] packed one after the other, which the
canvas step or the geometry then reads as it reads decoded images. Images of several sizes
share a launch, each written at the top-left of the launch's largest size (the kernel's
ragged path), where that wastes at most as much memory as the images hold, up to
LAUNCH_PIXELS a launch (the kernel's float scratch grows with them); on the CPU a launch of
large images takes fewer threads, each thread's work rows being image-sized
(CPU_WORK_BYTES in all)."""
from __future__ import annotations

import os
import platform
from typing import Any, Sequence

import numpy as np
import torch

from ..decode._base import DecodedBatch
from ..errors import TransformError
from ..kernels.cpu_twin import each_on_threads
from ..kernels.fused import cpu_work_shape
from ..kernels.workspace import Workspace

__all__ = ["build", "groups", "resize_image", "resized_images", "LAUNCH_PIXELS", "CPU_WORK_BYTES"]

LAUNCH_PIXELS = 1 << 25  # the most pixels a launch's images take together (an image larger: a launch alone)
CPU_WORK_BYTES = 1 << 30  # the CPU twin's work rows of a launch, all threads together (one thread at least)


def build(first: Any, decoded: DecodedBatch, params: Sequence[dict], sizes: Sequence[tuple[int, int]],
          rows: np.ndarray, *, resize: Any = None, stream: Any = None, num_threads: int | None = None,
          workspace: Workspace | None = None) -> DecodedBatch:
    """Images `rows` of `decoded` (whole images of `sizes`, drawn for with `params`)
    through the Compose `first` (None: no such steps), then the first pass's `resize` (a
    Resize before a RandomResizedCrop or a canvas step: resized_images), as a DecodedBatch of its outputs in
    `rows`' order: uint8 [3, h, w] each, in one buffer on the images' device (the
    workspace's "first" buffer, reused batch after batch; a new one without it), each at
    the top-left of its launch's size (`groups`): its strides say where its rows lie.

    Raises:
        TransformError: an image decoded in part (the first pass needs the whole image).
    """
    for k in rows.tolist():
        h, w = (int(v) for v in sizes[k])
        if tuple(decoded.boxes[k].tolist()) != (0, 0, h, w) or tuple(decoded.shapes[k].tolist()) != (h, w):
            what = first.transforms[0] if first is not None else resize
            raise TransformError(f"{type(what).__name__} before the geometry needs whole decoded "
                                 f"images: image {k} is the {tuple(decoded.boxes[k].tolist())} window of "
                                 f"{tuple(decoded.shapes[k].tolist())}")
    if first is not None:
        decoded = _kernel_pass(first, decoded, params, sizes, rows, stream, num_threads, workspace)
        params, sizes, rows = [params[k] for k in rows.tolist()], [sizes[k] for k in rows.tolist()], np.arange(len(rows))
    if resize is not None:
        decoded = resized_images(resize, decoded, [tuple(params[k]["first_resize"]) for k in rows.tolist()], rows,
                                 num_threads=num_threads, workspace=workspace)
    return decoded


def _kernel_pass(first: Any, decoded: DecodedBatch, params: Sequence[dict], sizes: Sequence[tuple[int, int]],
                 rows: np.ndarray, stream: Any, num_threads: int | None, workspace: Workspace | None) -> DecodedBatch:
    """build's launches of the Compose `first` (the kernel, ragged)."""
    keys = {k for t in first.transforms for u in t.inner() for k in u.keys}  # (its steps' draws alone: not the
    params = [{k: v for k, v in p.items() if k in keys} for p in params]  # crop's, which would move its output)
    out_sizes = [(int(sizes[k][0]), int(sizes[k][1])) for k in rows.tolist()]
    launches = groups(out_sizes)
    total = sum(len(members) * h * w * 3 for (h, w), members in launches)
    device = decoded.pixels.device
    buf = (workspace.tensor("first", (max(total, 1),), torch.uint8, device) if workspace is not None
           else torch.empty(max(total, 1), dtype=torch.uint8, device=device))
    own = None if workspace is None else workspace.child("first")  # (its launches' buffers: not the main pass's)
    offsets = np.zeros(len(rows), np.int64)
    strides = np.zeros((len(rows), 3), np.int64)
    at = 0
    cpu = stream is None and device.type == "cpu"
    for (h, w), members in launches:
        n = len(members)
        view = buf[at:at + n * 3 * h * w].view(n, 3, h, w)
        threads = num_threads
        if cpu:  # (each thread's work rows hold images of the launch's size)
            per = cpu_work_shape(1, w, (n, 3, h, w), False)[1] * 4
            threads = max(1, min(num_threads or os.cpu_count() or 1, CPU_WORK_BYTES // per))
        first.apply(decoded, params, sizes, view, rows=rows[members], stream=stream, num_threads=threads,
                    workspace=own)
        offsets[members] = at + np.arange(n, dtype=np.int64) * (3 * h * w)
        # (row, column, channel) byte strides of the launch's [3, h, w]; one channel read as three where the pass
        # writes one (after a Grayscale(1), or of a grey set)
        strides[members] = (w, 1, h * w if first.plan.channels == 3 else 0)
        at += n * 3 * h * w
    return DecodedBatch.made(buf, out_sizes, offsets=offsets, strides=strides)


def resize_image(image: torch.Tensor, size: tuple[int, int], mode: str, antialias: bool) -> torch.Tensor:
    """torchvision's F.resize of a uint8 image [3, h, w] to `size`, bit for bit: torch's
    uint8 resample where torchvision takes it (the nearest modes; on the CPU bicubic, and
    bilinear with AVX2 or on ARM), else the float resample rounded (bicubic clamped
    first); the image itself at its own size."""
    if tuple(size) == tuple(image.shape[1:]):
        return image
    nearest = mode.startswith("nearest")
    native = nearest or (image.device.type == "cpu" and (mode == "bicubic" or (mode == "bilinear" and (
        torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512") or platform.machine() in ("aarch64", "arm64")))))
    x = image.unsqueeze(0)
    kw: dict = {} if nearest else {"align_corners": False, "antialias": antialias}
    if native:
        return torch.nn.functional.interpolate(x, size=list(size), mode=mode, **kw)[0]
    y = torch.nn.functional.interpolate(x.float(), size=list(size), mode=mode, **kw)
    if mode == "bicubic":
        y = y.clamp_(0, 255)
    return y.round_().to(torch.uint8)[0]


def resized_images(resize: Any, decoded: DecodedBatch, out_sizes: Sequence[tuple[int, int]], rows: np.ndarray, *,
                   num_threads: int | None = None, workspace: Workspace | None = None) -> DecodedBatch:
    """Images `rows` of `decoded` resized by `resize` (a Resize) to `out_sizes`, as
    torchvision's Resize of a uint8 image (resize_image), [3, h, w] each, packed in the
    workspace's "resized" buffer on their device; on the CPU on up to `num_threads`
    threads, an image at a time each."""
    out_sizes = [(int(h), int(w)) for h, w in out_sizes]
    total = sum(h * w * 3 for h, w in out_sizes)
    device = decoded.pixels.device
    buf = (workspace.tensor("resized", (max(total, 1),), torch.uint8, device) if workspace is not None
           else torch.empty(max(total, 1), dtype=torch.uint8, device=device))
    made = DecodedBatch.made(buf, out_sizes)
    offsets, mode, ks = made.offsets, resize.filter_modes[0], rows.tolist()

    def one(i: int) -> None:
        k = ks[i]
        h, w = (int(v) for v in decoded.shapes[k])
        sy, sx, sc = decoded.strides[k].tolist()
        image = decoded.pixels.as_strided((3, h, w), (sc, sy, sx), int(decoded.offsets[k]))
        oh, ow = out_sizes[i]
        buf[int(offsets[i]):int(offsets[i]) + 3 * oh * ow].view(3, oh, ow).copy_(
            resize_image(image, (oh, ow), mode, resize.antialias))

    each_on_threads(one, len(ks), (num_threads or os.cpu_count() or 1) if device.type == "cpu" else 1)
    return made


def groups(sizes: Sequence[tuple[int, int]], waste: float = 2.0,
           most: int = LAUNCH_PIXELS) -> list[tuple[tuple[int, int], list[int]]]:
    """The images of `sizes` in launches: (the launch's size, the images' indices), the
    largest images first; an image joins the launch before it where the launch's memory
    (its count times the largest height and width) stays within `waste` times its images'
    pixels and within `most` (one size: one launch, up to `most` pixels)."""
    out: list[tuple[tuple[int, int], list[int]]] = []
    held = 0
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i][0] * sizes[i][1], sizes[i])):
        h, w = sizes[i]
        if out:
            (lh, lw), members = out[-1]
            th, tw = max(lh, h), max(lw, w)
            if (len(members) + 1) * th * tw <= min(waste * (held + h * w), most):
                members.append(i)
                out[-1] = ((th, tw), members)
                held += h * w
                continue
        out.append(((h, w), [i]))
        held = h * w
    return out
