"""RandomIoUCrop (SSD's crop; torchvision's detection reference, "ssd" and "ssdlite"): a
crop drawn from the image's boxes, the one geometry step whose draw reads the sample's
target. It stands first in the geometry (after a canvas step, RandomZoomOut in SSD's
recipe), and a Resize((h, w)) follows it, so that a batch has one size: the kernel reads
the crop and resizes it, as for RandomResizedCrop.

torchvision's make_params, in its float32 arithmetic: an option drawn (a minimum IoU; one
of 1 or more leaves the image as it is), then up to `trials` crops of sides U(min_scale,
max_scale) each, kept where the aspect ratio is in range, the crop is not empty, some box's
centre lies strictly inside it and one of those boxes overlaps the crop by at least the
option's IoU. Its numbers come from a stream of the crop's own, keyed by one number of the
sample's generator, a block of them a round: the crop takes one number of the sample's,
whatever it tries, and each trial takes its numbers in torchvision's order
(tests/test_iou_crop.py gives them to torchvision's make_params and gets its crop). A
batch's crops are drawn natively (`crops`: _native.iou_crops, in the same float32
arithmetic, with the GIL released); `crop`, numpy over a round's trials and the boxes, is
its reference, and the tests hold the two equal. The boxes whose centres lie outside are
made empty (each the crop's corner, which every later step keeps empty), and the Boxes
field drops them after the last step, as SanitizeBoundingBoxes after torchvision's does.

Two choices of ours, where torchvision's loop has no end: an image with no box never finds
a crop, so torchvision loops until it draws a "leave as is" option; here such an image is
left as it is at once (the outcome torchvision reaches, without its draws). And where the
options hold no "leave as is" and no crop is found in `MAX_ROUNDS` options (fewer for a
member of many boxes: about 2^28 trial-box pairs in all), the image is its sample's error,
not a hang. The native draw holds a box's centre and area at a time (memory of the
member's own size); the reference checks a round's trials against the boxes at most 2^20
trial-box pairs at a time."""
from __future__ import annotations

import math
import random
from typing import Any, Sequence

import numpy as np

from .. import _native
from ..errors import TransformError
from .base import Transform

__all__ = ["RandomIoUCrop", "MAX_ROUNDS", "emptied", "uniforms"]

MAX_ROUNDS = 1000  # options drawn before an image is its sample's error (torchvision: no end)
_GAMMA = 0x9E3779B97F4A7C15  # (SplitMix64's increment, as transforms.rng)
_CELLS = 1 << 20  # trial-box pairs checked at once (a member of a million boxes: a trial at a time)
_WORK = 1 << 28  # trial-box pairs tried, where no option leaves the image as it is, before it is an error
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
        if not 0.0 <= self.min_scale <= self.max_scale <= 1.0:
            raise TransformError(f"RandomIoUCrop needs 0 <= min_scale <= max_scale <= 1 (a crop inside the image), not "
                                 f"{min_scale!r}, {max_scale!r}")
        if not 0.0 < self.min_aspect_ratio <= self.max_aspect_ratio:
            raise TransformError(f"RandomIoUCrop needs 0 < min_aspect_ratio <= max_aspect_ratio, not "
                                 f"{min_aspect_ratio!r}, {max_aspect_ratio!r}")
        options = list(_DEFAULT_OPTIONS if sampler_options is None else sampler_options)
        if not options:
            raise TransformError("RandomIoUCrop needs at least one sampler option")
        self.sampler_options = [_number(v, "sampler option") for v in options]
        if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
            raise TransformError(f"RandomIoUCrop trials must be a positive int, not {trials!r}")
        self.trials = trials
        self._f32 = (np.float32(self.min_scale), np.float32(self.max_scale - self.min_scale))
        self._as_is = any(v >= 1.0 for v in self.sampler_options)
        self._spec = (float(self._f32[0]), float(self._f32[1]), self.min_aspect_ratio, self.max_aspect_ratio,
                      self.sampler_options, trials, MAX_ROUNDS, _WORK)  # (as _native.iou_crops reads it)

    def draw(self, rng: random.Random, size: tuple[int, int], boxes: np.ndarray | None = None) -> dict:
        """{"crop": (top, left, height, width), "inside": bool [K]} (the boxes whose centres
        are inside), or {"crop": the whole image} where the option drawn leaves it as it
        is. `boxes`: XYXY float32 [K, 4] in this image's coordinates. One number of `rng`
        keys the crop's own stream (uniforms): a round (an option and its trials) takes
        1 + 4 * trials of it, each trial torchvision's (2 numbers, 2 more where the aspect
        ratio holds), all of a round's trials checked at once.

        Raises:
            ValueError: no crop found in MAX_ROUNDS options drawn (options with none of 1
                or more), or an image too small for min_scale (torchvision's division by
                zero)."""
        if boxes is None:
            raise TransformError("RandomIoUCrop draws its crop from each image's boxes: give them (the Loader does, "
                                 "from its gpudecode.Boxes field; Compose.draw_batch(sizes, seed, boxes=[...]))")
        key = rng.getrandbits(64)  # (taken whatever the boxes: the sample's later draws never depend on them)
        return self.crop(key, size, np.asarray(boxes, np.float32).reshape(-1, 4))

    def crop(self, key: int, size: tuple[int, int], b: np.ndarray, start: int = 0) -> dict:
        """`draw`'s result for the crop's stream `key` (rounds from `start` on): the
        reference the batched `crops` equals."""
        h, w = size
        whole = {"crop": (0, 0, h, w)}
        if not len(b):
            if self._as_is:
                return whole
            raise ValueError("RandomIoUCrop finds no crop for an image with no box, and its sampler options leave "
                             "no image as it is (none of 1 or more)")
        centres = (np.float32(0.5) * (b[:, 0] + b[:, 2]), np.float32(0.5) * (b[:, 1] + b[:, 3]))
        area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
        block = 1 + 4 * self.trials
        rounds = self._rounds(len(b))
        for r in range(start, rounds):
            u = uniforms(key, r * block, block)
            least = self._option(float(u[0]))
            if least >= 1.0:
                return whole
            found = self._round(u[1:].astype(np.float32), (h, w), b, centres, area, least)
            if found is not None:
                return found
        raise ValueError(f"RandomIoUCrop found no crop in {rounds} options drawn, {self.trials} tries each, for "
                         f"{len(b)} boxes (its sampler options leave no image as it is: none of 1 or more)")

    def _option(self, u: float) -> float:
        """The minimum IoU a round's first number draws (torch.randint's over the options)."""
        options = self.sampler_options
        return options[min(int(u * len(options)), len(options) - 1)]

    def _trials(self, ws: list[int], hs: list[int]) -> tuple[list[int], bool]:
        """A round's trials over its crops' sides (`ws`, `hs`: each place's, as the numbers
        give them): the places of those whose aspect ratio holds, in order (a trial takes 2
        numbers, 4 where it holds), and whether a crop of height 0 came (torchvision
        divides by it there: an error, unless a trial before it finds a crop)."""
        starts: list[int] = []
        at = 0
        for _ in range(self.trials):
            cw, ch = ws[at], hs[at + 1]
            if ch == 0:
                return starts, True
            if self.min_aspect_ratio <= cw / ch <= self.max_aspect_ratio:
                starts.append(at)
                at += 4
            else:
                at += 2
        return starts, False

    def _rounds(self, boxes: int) -> int:
        """The options drawn before an image is its error: options with "leave as is" end soon
        (1 in len(options) rounds); without, the work bounds them."""
        return MAX_ROUNDS if self._as_is else max(1, min(MAX_ROUNDS, _WORK // (self.trials * boxes)))

    def crops(self, keys: Sequence[int], sizes: Sequence[tuple[int, int]], boxes: Sequence[np.ndarray]) -> list[dict]:
        """`crop` of each image (its stream's key, its size, its boxes XYXY float32 [K, 4]) for
        a batch, in one native call (_native.iou_crops, with the GIL released): equal to
        `crop` image by image, whose Python is its reference.

        Raises:
            ValueError: an image `crop` raises for (the batch's draws are then made an
                image at a time, each error its sample's)."""
        n = len(keys)
        counts = np.fromiter((len(b) for b in boxes), np.int64, n)
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        flat = np.concatenate([np.asarray(b, np.float32).reshape(-1, 4) for b in boxes]) if n else np.zeros((0, 4), np.float32)
        made, status, inside = _native.iou_crops(self._spec, np.array(keys, np.uint64), np.array(sizes, np.int64).reshape(n, 2),
                                                 flat, offsets)
        out: list[dict] = []
        for i, (row, st) in enumerate(zip(made.tolist(), status.tolist())):
            if st == 0:
                out.append({"crop": tuple(row), "inside": inside[offsets[i]:offsets[i + 1]]})
            elif st == 1:
                out.append({"crop": tuple(row)})
            else:
                self.crop(keys[i], sizes[i], boxes[i])  # (raises: the reference says why)
                raise RuntimeError(f"RandomIoUCrop's native draw found no crop for a {sizes[i]} image of "
                                   f"{len(boxes[i])} boxes where its reference does: report this")
        return out

    def _round(self, v: np.ndarray, size: tuple[int, int], b: np.ndarray, centres: tuple[np.ndarray, np.ndarray],
               area: np.ndarray, least: float) -> dict | None:
        """One option's trials over the float32 uniforms `v` (4 * trials): the first crop
        torchvision's loop would take, or None."""
        h, w = size
        lo, span = self._f32
        s = lo + span * v  # (each place's side factor, float32 as torch computes it)
        new_w, new_h = (np.float32(w) * s).astype(np.int64), (np.float32(h) * s).astype(np.int64)
        starts, zero = self._trials(new_w.tolist(), new_h.tolist())
        found = None
        step = max(1, _CELLS // len(b))  # (trials checked together: at most _CELLS trial-box pairs at once)
        for first in range(0, len(starts), step):
            found = self._first(np.asarray(starts[first:first + step]), v, new_w, new_h, size, b, centres, area, least)
            if found is not None:
                break
        if found is None and zero:
            raise ValueError(f"RandomIoUCrop draws a crop of height 0 from this {h}x{w} image "
                             f"(min_scale {self.min_scale:g})")
        return found

    @staticmethod
    def _first(at: np.ndarray, v: np.ndarray, new_w: np.ndarray, new_h: np.ndarray, size: tuple[int, int],
               b: np.ndarray, centres: tuple[np.ndarray, np.ndarray], area: np.ndarray, least: float) -> dict | None:
        """The first of the trials starting at places `at` (their aspect ratios in range)
        whose crop is not empty, holds a box's centre and overlaps one of those by `least`."""
        h, w = size
        cw, ch = new_w[at], new_h[at + 1]
        left = ((np.float32(w) - cw.astype(np.float32)) * v[at + 2]).astype(np.int64)
        top = ((np.float32(h) - ch.astype(np.float32)) * v[at + 3]).astype(np.int64)
        right, bottom = left + cw, top + ch
        cx, cy = centres
        inside = (left[:, None] < cx) & (cx < right[:, None]) & (top[:, None] < cy) & (cy < bottom[:, None])
        best = np.where(inside, _iou(b, area, left, top, right, bottom), np.float32(-1)).max(axis=1)
        hit = np.flatnonzero((cw > 0) & (ch > 0) & inside.any(axis=1) & ~(best < np.float32(least)))
        if not hit.size:
            return None
        i = int(hit[0])
        return {"crop": (int(top[i]), int(left[i]), int(ch[i]), int(cw[i])), "inside": inside[i]}


def uniforms(key: int | np.ndarray, start: int, n: int) -> np.ndarray:
    """Numbers `start` .. `start + n` of the SplitMix64 stream keyed by `key` (the sample
    generator's, transforms.rng), as float64 uniforms in [0, 1): made at once; [n], or
    [len(key), n] for an array of keys (uint64)."""
    i = np.arange(start + 1, start + n + 1, dtype=np.uint64)
    z = (np.uint64(key) if np.ndim(key) == 0 else np.asarray(key, np.uint64)[:, None]) + i * np.uint64(_GAMMA)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)


def _iou(b: np.ndarray, area: np.ndarray, left: np.ndarray, top: np.ndarray, right: np.ndarray,
         bottom: np.ndarray) -> np.ndarray:
    """torchvision's box_iou of boxes `b` (XYXY float32 [K, 4], their areas `area`) with each
    crop (int64 [C] corners), in float32: [C, K]."""
    l, t, r, bt = (x.astype(np.float32)[:, None] for x in (left, top, right, bottom))
    iw = np.clip(np.minimum(b[:, 2], r) - np.maximum(b[:, 0], l), 0, None)
    ih = np.clip(np.minimum(b[:, 3], bt) - np.maximum(b[:, 1], t), 0, None)
    inter = iw * ih
    with np.errstate(invalid="ignore", divide="ignore"):  # (0 / 0 for a box turned over: NaN, which passes)
        return inter / (area + (r - l) * (bt - t) - inter)


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
