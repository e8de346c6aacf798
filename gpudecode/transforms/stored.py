"""The size an image is stored at: precache's downsizing rule, which the resident store
(`Loader(keep=...)`) follows too, so that `keep` and `precache` agree on what an image
becomes. Here, below both, so neither imports the other.

Where precache resizes or cuts an image, it writes beside it a record of how (the member
RECORD: the size the sample's other members were made for, then each step), so that the
members which lie on the image (a Mask's pixels, Boxes' coordinates) can be brought to
where the stored image lies when they are read (stored_boxes, stored_mask; the record itself: _record), as
torchvision.transforms.v2's Resize and CenterCrop move them beside their image."""
from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch

from .._record import RECORD, Record, made, read_record
from .geometry import CenterCrop, Resize


def stored_size(height: int, width: int, size: int | tuple[int, int]) -> tuple[int, int]:
    """The size an image of (height, width) is resized to before any crop: torchvision's
    Resize(size) where the shorter side is over `size` (never upscaled), or exactly
    (H, W) when `size` is a pair."""
    if not isinstance(size, int):
        return size
    if min(height, width) <= size:
        return height, width
    return Resize(size).output_size(height, width)


def downsizing(h: int, w: int, size: int | tuple[int, int], crop: str) -> tuple[tuple[int, int] | None,
                                                                               tuple[int, int] | None]:
    """(the resize, the centre cut) an image of (h, w) gets when stored at `size` with
    `crop` ("none" or "center"); None where it gets none."""
    target = stored_size(h, w, size)
    resize = None if target == (h, w) else target
    cut = None
    if crop == "center" and isinstance(size, int) and target != (size, size):
        cut = (size, size)
    return resize, cut


def stored_boxes(rec: Record, xyxy: np.ndarray) -> np.ndarray:
    """XYXY boxes (float32 [K, 4]) on the source image moved onto the stored one, step by
    step as torchvision moves a BoundingBoxes (scaled and clamped to the resized image;
    shifted by the cut and clamped to it), with the image's own placement
    (CenterCrop.offsets): none dropped, so labels and any other list stay aligned. The
    float32 operations are move_boxes' for a scale alone and a shift alone (its result
    to the bit), without its general form's cost: a record is moved a sample at a time."""
    b = np.array(xyxy, np.float32).reshape(-1, 4)
    h, w = rec.source
    for op, th, tw in rec.steps:
        if op == "resize":
            b *= np.array([tw / w, th / h] * 2, np.float64).astype(np.float32)
        else:
            top, left = _cut(th, tw).offsets(h, w)
            b -= np.array([left, top] * 2, np.float32)
        np.clip(b, 0, np.array([tw, th] * 2, np.float32), out=b)
        h, w = th, tw
    return b


@functools.lru_cache(maxsize=256)
def _cut(h: int, w: int) -> CenterCrop:
    return CenterCrop((h, w))


def stored_mask(rec: Record, mask: torch.Tensor, done: int = 0) -> torch.Tensor:
    """A mask [H, W] of the source image's size moved onto the stored image as the
    image was (nearest neighbour as torchvision resizes a Mask; 0 where a cut pads);
    `done`: the steps it has been through already (Record.done: precache moved it), the
    mask then of the image's size after them, moved through the rest."""
    from .masks import warp_masks

    size = rec.size_after(done)
    if tuple(mask.shape) != size:
        when = "before it was stored at" if not done else f"after {done} of the steps that stored it at"
        raise ValueError(f"is a mask of {mask.shape[0]}x{mask.shape[1]}; its image was {size[0]}x{size[1]} {when} "
                         f"{rec.size[0]}x{rec.size[1]} (.{RECORD}): a mask has its image's size")
    for part in _parts(rec.steps[done:]):  # (a resize and its cut at a time: one plan the kernel has)
        tf = _compose(part)
        mask = warp_masks(tf.plan, [mask], tf.draw_batch([size], 0))[0]
        size = part[-1][1:]
    return mask


def _parts(steps: tuple[tuple[str, int, int], ...]) -> list[tuple[tuple[str, int, int], ...]]:
    """The steps in parts of a resize and the cut after it (or a cut alone)."""
    parts: list[list[tuple[str, int, int]]] = []
    for step in steps:
        if step[0] == "crop" and parts and len(parts[-1]) == 1 and parts[-1][0][0] == "resize":
            parts[-1].append(step)
        else:
            parts.append([step])
    return [tuple(p) for p in parts]


@functools.lru_cache(maxsize=64)
def _compose(steps: tuple[tuple[str, int, int], ...]) -> Any:
    from .compose import Compose

    return Compose([Resize((h, w)) if op == "resize" else CenterCrop((h, w)) for op, h, w in steps])


__all__ = ["stored_size", "downsizing", "stored_boxes", "stored_mask", "RECORD", "Record", "made", "read_record"]
