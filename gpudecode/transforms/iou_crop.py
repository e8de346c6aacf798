"""RandomIoUCrop (SSD's crop; torchvision's detection reference, "ssd" and "ssdlite"): a
crop drawn from the image's boxes, the one geometry step whose draw reads the sample's
target. It stands first in the geometry (after a canvas step, RandomZoomOut in SSD's
recipe), and a Resize((h, w)) follows it, so that a batch has one size: the kernel reads
the crop and resizes it, as for RandomResizedCrop.

torchvision's make_params, in its order and float32 arithmetic: an option drawn (a minimum
IoU; one of 1 or more leaves the image as it is), then up to `trials` crops of sides
U(min_scale, max_scale) each, kept where the aspect ratio is in range, the crop is not
empty, some box's centre lies strictly inside it and one of those boxes overlaps the crop
by at least the option's IoU. The boxes whose centres lie outside are made empty (each the
crop's corner, which every later step keeps empty), and the Boxes field drops them after
the last step, as SanitizeBoundingBoxes after torchvision's does.

Two choices of ours, where torchvision's loop has no end: an image with no box never finds
a crop, so torchvision loops until it draws a "leave as is" option; here such an image is
left as it is at once (the outcome torchvision reaches, without its draws). And where the
options hold no "leave as is" and no crop is found in `MAX_ROUNDS` options, the image is
its sample's error, not a hang."""
from __future__ import annotations

import math
import random
from typing import Any, Sequence

import numpy as np

from ..errors import TransformError
from .base import Transform

__all__ = ["RandomIoUCrop", "MAX_ROUNDS", "emptied"]

MAX_ROUNDS = 1000  # options drawn before an image is its sample's error (torchvision: no end)
_DEFAULT_OPTIONS = (0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0)


def _number(v: Any, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise TransformError(f"RandomIoUCrop {what} must be a finite number, not {v!r}")
    return float(v)


class RandomIoUCrop(Transform, converts="torchvision.RandomIoUCrop"):
    """torchvision's RandomIoUCrop: a crop whose IoU with one of the image's boxes (their
    centres inside it) is at least an option drawn from `sampler_options`; the boxes
    whose centres fall outside are dropped after the last step. It reads the sample's
    boxes (a `gpudecode.Boxes` field; `Compose.draw_batch(..., boxes=)`), and a
    Resize((h, w)) follows it."""

    group = "geometry"
    reads_boxes = True

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(t.min_scale, t.max_scale, t.min_aspect_ratio, t.max_aspect_ratio, list(t.options), t.trials)

    def __init__(self, min_scale: float = 0.3, max_scale: float = 1.0, min_aspect_ratio: float = 0.5,
                 max_aspect_ratio: float = 2.0, sampler_options: Sequence[float] | None = None,
                 trials: int = 40) -> None:
        self.min_scale, self.max_scale = _number(min_scale, "min_scale"), _number(max_scale, "max_scale")
        self.min_aspect_ratio = _number(min_aspect_ratio, "min_aspect_ratio")
        self.max_aspect_ratio = _number(max_aspect_ratio, "max_aspect_ratio")
        if not 0.0 <= self.min_scale <= self.max_scale:
            raise TransformError(f"RandomIoUCrop needs 0 <= min_scale <= max_scale, not {min_scale!r}, {max_scale!r}")
        options = list(_DEFAULT_OPTIONS if sampler_options is None else sampler_options)
        if not options:
            raise TransformError("RandomIoUCrop needs at least one sampler option")
        self.sampler_options = [_number(v, "sampler option") for v in options]
        if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
            raise TransformError(f"RandomIoUCrop trials must be a positive int, not {trials!r}")
        self.trials = trials
        self._f32 = (np.float32(self.min_scale), np.float32(self.max_scale - self.min_scale))
        self._as_is = any(v >= 1.0 for v in self.sampler_options)

    def draw(self, rng: random.Random, size: tuple[int, int], boxes: np.ndarray | None = None) -> dict:
        """{"crop": (top, left, height, width), "inside": bool [K]} (the boxes whose centres
        are inside), or {"crop": the whole image} where the option drawn leaves it as it
        is. `boxes`: XYXY float32 [K, 4] in this image's coordinates.

        Raises:
            ValueError: no crop found in MAX_ROUNDS options drawn (options with none of 1
                or more), or an image too small for min_scale (torchvision's division by
                zero)."""
        if boxes is None:
            raise TransformError("RandomIoUCrop draws its crop from each image's boxes: give them (the Loader does, "
                                 "from its gpudecode.Boxes field; Compose.draw_batch(sizes, seed, boxes=[...]))")
        h, w = size
        whole = {"crop": (0, 0, h, w)}
        b = np.asarray(boxes, np.float32).reshape(-1, 4)
        if not len(b):
            if self._as_is:
                return whole
            raise ValueError("RandomIoUCrop finds no crop for an image with no box, and its sampler options leave "
                             "no image as it is (none of 1 or more)")
        cx = np.float32(0.5) * (b[:, 0] + b[:, 2])
        cy = np.float32(0.5) * (b[:, 1] + b[:, 3])
        area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
        lo, span = self._f32
        options = self.sampler_options
        for _ in range(MAX_ROUNDS):
            least = options[rng.randrange(len(options))]
            if least >= 1.0:
                return whole
            for _ in range(self.trials):
                new_w = int(np.float32(w) * (lo + span * np.float32(rng.random())))
                new_h = int(np.float32(h) * (lo + span * np.float32(rng.random())))
                if new_h == 0:
                    raise ValueError(f"RandomIoUCrop draws a crop of height 0 from this {h}x{w} image "
                                     f"(min_scale {self.min_scale:g})")
                if not self.min_aspect_ratio <= new_w / new_h <= self.max_aspect_ratio:
                    continue
                left = int(np.float32(w - new_w) * np.float32(rng.random()))
                top = int(np.float32(h - new_h) * np.float32(rng.random()))
                right, bottom = left + new_w, top + new_h
                if left == right or top == bottom:
                    continue
                inside = (left < cx) & (cx < right) & (top < cy) & (cy < bottom)
                if not inside.any():
                    continue
                if _iou(b[inside], area[inside], left, top, right, bottom).max() < np.float32(least):
                    continue
                return {"crop": (top, left, new_h, new_w), "inside": inside}
        raise ValueError(f"RandomIoUCrop found no crop in {MAX_ROUNDS} options drawn, {self.trials} tries each "
                         "(its sampler options leave no image as it is: none of 1 or more)")


def _iou(b: np.ndarray, area: np.ndarray, left: int, top: int, right: int, bottom: int) -> np.ndarray:
    """torchvision's box_iou of boxes `b` (XYXY float32 [K, 4], their areas `area`) with one
    box, in float32."""
    crop = np.array([left, top, right, bottom], np.float32)
    wh = np.clip(np.minimum(b[:, 2:], crop[2:]) - np.maximum(b[:, :2], crop[:2]), 0, None)
    inter = wh[:, 0] * wh[:, 1]
    return inter / (area + (crop[2] - crop[0]) * (crop[3] - crop[1]) - inter)


def emptied(xyxy: np.ndarray, p: dict) -> np.ndarray:
    """A sample's boxes (XYXY float32 [K, 4], where its RandomIoUCrop draw `p` sees them)
    with those whose centres lie outside its crop made empty: each the crop's top-left
    corner, which the crop takes to 0 and every later step keeps empty, where torchvision
    sets them to 0 after its crop."""
    inside = p.get("inside")
    if inside is None or inside.all():
        return xyxy
    top, left = p["crop"][:2]
    out = np.array(xyxy, np.float32, copy=True)
    out[~inside] = np.array([left, top, left, top], np.float32)
    return out
