"""A crop of a crop: `[Resize(256), CenterCrop(256), RandomCrop(224), ...]`, as tutorials
write it (and `[CenterCrop(256), RandomCrop(224)]` after flips). The second crop, unpadded
and no larger than the first, lies inside the first one's output, so its pixels are the
image's at the two offsets added, padded where the first crop pads (past the image): one
crop of the image, read 1:1 by the kernel as a RandomCrop's is. Each crop draws as
torchvision's does, in order, the second on the first one's output size."""
from __future__ import annotations

import random
from typing import Any, Sequence

import numpy as np

from .base import Transform
from .geometry import CenterCrop, RandomCrop

__all__ = ["CropOfCrop", "nested"]


class CropOfCrop(Transform):
    """`first` (a CenterCrop or RandomCrop, padded as it may be), then `second` (a
    CenterCrop or RandomCrop of its output, unpadded, no larger): make_params' "crop" is
    the second crop in the image's coordinates (the two offsets added), of the second's
    size; the padding (fill, mode) is the first's."""

    group = "geometry"
    _taken = 2  # (the Compose's steps it stands for: plan.py counts them)

    def __init__(self, first: Transform, second: Transform) -> None:
        self.first: Any = first
        self.second: Any = second

    def __repr__(self) -> str:
        return f"{self.first!r}, {self.second!r}"

    @property
    def size(self) -> tuple[int, int]:
        return tuple(self.second.size)  # type: ignore[return-value]

    @property
    def crop_fill(self) -> tuple[int, int, int] | None:  # type: ignore[override]
        return self.first.crop_fill

    @property
    def pad_mode(self) -> int:
        return int(getattr(self.first, "pad_mode", 0))

    def reflects(self, sizes: np.ndarray) -> np.ndarray:
        """The first crop's (its padding reads the image)."""
        return self.first.reflects(sizes) if hasattr(self.first, "reflects") else np.ones(len(sizes), bool)

    def output_size(self, height: int, width: int) -> tuple[int, int]:
        return self.size

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        t, l, _, _ = self.first.draw(rng, size)["crop"]
        i, j, h, w = self.second.draw(rng, tuple(self.first.size))["crop"]
        return {"crop": (t + i, l + j, h, w)}


def nested(geometry: Sequence[Transform]) -> list[Transform]:
    """`geometry` with a crop of a crop (two CenterCrops or RandomCrops in a row, the second
    unpadded and no larger than the first) made one CropOfCrop; else as it is."""
    out = list(geometry)
    for k in range(len(out) - 1):
        a: Any = out[k]
        b: Any = out[k + 1]
        if type(a) in (CenterCrop, RandomCrop) and type(b) in (CenterCrop, RandomCrop) and \
                not (type(b) is RandomCrop and any(b.padding)) and b.size[0] <= a.size[0] and b.size[1] <= a.size[1]:
            return [*out[:k], CropOfCrop(a, b), *out[k + 2:]]
    return out
