"""FiveCrop and TenCrop: several fixed crops of each image, each crop a view.

torchvision's FiveCrop makes a tuple of five crops of each image (its four corners and its
centre), TenCrop ten (those five, then the five of the image mirrored), and the steps after
it run on each crop; DataLoader's collate turns the tuples into a list of five (ten)
batches. Here each crop is a view of its own: a Compose of the steps before the crop step,
the crop at its place (CornerCrop), TenCrop's mirror, and the steps after. The
Loader takes such a transform as it takes a list of views (every image decoded once for
all its crops; `images` a list of the crops' batches, as DataLoader's), and `Views` calls
them on images (a tuple, as torchvision's transform returns).

The crops draw nothing, but torchvision draws a random step's parameters once for all the
crops of an image, and separate views would draw them apart: a random step before or after
the crop step is refused (evaluation pipelines, where these are used, have none). Before
it, a Resize (the crop is taken of the resized image); after it, the output steps
(Normalize, ToDtype, ToTensor, LinearTransformation) and Grayscale; RGB anywhere.
"""
from __future__ import annotations

from typing import Any, Sequence

from ..errors import TransformError
from .base import Transform
from .colour import Grayscale
from .output import LinearTransformation
from .geometry import CenterCrop, RandomHorizontalFlip, RandomVerticalFlip, Resize, ResizeKeepRatio, _RandomSize, \
    _setup_size


CORNERS = ("top-left", "top-right", "bottom-left", "bottom-right", "center")  # FiveCrop's order


class CornerCrop(CenterCrop):
    """One of FiveCrop's crops: at a corner of the image or its centre,
    as torchvision's five_crop places it; `mirror` "h" or "v": the crop TenCrop takes of
    the image flipped so, placed in the image as it is (the flip that follows it in its
    view mirrors the crop). The crop must fit in the image (torchvision's refusal)."""

    def __init__(self, size: int | Sequence[int], corner: str, mirror: str | None = None) -> None:
        super().__init__(size)
        if corner not in CORNERS or mirror not in (None, "h", "v"):
            raise ValueError(f"CornerCrop: corner must be one of {CORNERS} and mirror None, 'h' or 'v', not "
                             f"{corner!r}, {mirror!r}")
        self.corner = corner
        self.mirror = mirror

    def __repr__(self) -> str:
        return Transform.__repr__(self)

    @property
    def native(self) -> tuple[int, int]:
        """(corner, mirror) as _native.draw_batch reads them: CORNERS' index, 0 / 1 ("h") / 2 ("v")."""
        return CORNERS.index(self.corner), (None, "h", "v").index(self.mirror)

    def offsets(self, height: int, width: int) -> tuple[int, int]:
        ch, cw = self.size
        if ch > height or cw > width:
            raise ValueError(f"the crop of {ch}x{cw} is larger than the {height}x{width} image (torchvision's FiveCrop "
                             "and TenCrop refuse it so)")
        top = {"top": 0, "bottom": height - ch}.get(self.corner.split("-")[0], int(round((height - ch) / 2.0)))
        left = {"left": 0, "right": width - cw}.get(self.corner.split("-")[-1], int(round((width - cw) / 2.0)))
        if self.mirror == "h":  # (the crop of the mirrored image at `left`: columns from the other side here)
            left = width - cw - left
        elif self.mirror == "v":
            top = height - ch - top
        return top, left


class _Crops(Transform):
    """A step that makes several crops of each image: a view each (`views`)."""

    group = "views"
    size: tuple[int, int]

    def crops(self) -> list[list[Transform]]:
        """The steps each crop's view puts where this step stands: its crop, and its mirror."""
        raise NotImplementedError

    def views(self, steps: Sequence[Transform]) -> list[list[Transform]]:
        """`steps` (holding this step once) as one list of steps a crop, the steps before
        and after it checked (see the module doc)."""
        at = steps.index(self)
        before, after = list(steps[:at]), list(steps[at + 1:])
        name = type(self).__name__
        for t in before:
            if t.group not in ("targets", "channels") and not (isinstance(t, (Resize, ResizeKeepRatio))
                                                    and not isinstance(t, _RandomSize)):
                raise TransformError(f"{type(t).__name__} before {name} cannot be fused: only a Resize may come "
                                     f"before it (each crop is a view of its own, and torchvision takes the "
                                     f"crops of one image)")
        for t in after:
            if t.group not in ("then", "targets", "channels") and type(t) not in (Grayscale, LinearTransformation):
                raise TransformError(
                    f"{type(t).__name__} after {name} cannot be fused: torchvision draws a step's parameters once "
                    f"for all the crops of an image, and each crop here is a view that draws its own; only "
                    f"Normalize, ToDtype, Grayscale and LinearTransformation may follow it")
        return [before + crop + after for crop in self.crops()]


def _crop_size(size: Any) -> tuple[int, int]:
    got = _setup_size(size)
    if min(got) < 0:
        raise ValueError(f"a crop's size cannot be negative, got {size!r}")
    return got


class FiveCrop(_Crops, converts="torchvision.FiveCrop"):
    """torchvision's FiveCrop: the image's top-left, top-right, bottom-left, bottom-right
    and centre crops of `size`, five views (see the module doc)."""

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(t.size)

    def __init__(self, size: int | Sequence[int]) -> None:
        self.size = _crop_size(size)

    def crops(self) -> list[list[Transform]]:
        return [[CornerCrop(self.size, corner)] for corner in CORNERS]


class TenCrop(_Crops, converts="torchvision.TenCrop"):
    """torchvision's TenCrop: FiveCrop's five crops, then the five of the image mirrored
    left to right (`vertical_flip`: top to bottom), ten views (see the module doc)."""

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(t.size, t.vertical_flip)

    def __init__(self, size: int | Sequence[int], vertical_flip: bool = False) -> None:
        self.size = _crop_size(size)
        self.vertical_flip = bool(vertical_flip)

    def crops(self) -> list[list[Transform]]:
        mirror, flip = ("v", RandomVerticalFlip) if self.vertical_flip else ("h", RandomHorizontalFlip)
        five: list[list[Transform]] = [[CornerCrop(self.size, corner)] for corner in CORNERS]
        return five + [[CornerCrop(self.size, corner, mirror), flip(1.0)] for corner in CORNERS]


def split(steps: list[Transform]) -> list[list[Transform]] | None:
    """The views a list of steps holding a FiveCrop or TenCrop makes (one list of steps a
    crop); None where it holds none."""
    crops = [t for t in steps if isinstance(t, _Crops)]
    if not crops:
        return None
    if len(crops) > 1:
        raise TransformError(f"{type(crops[0]).__name__} and {type(crops[1]).__name__} in one transform cannot be "
                             "fused: one step that makes several crops of each image")
    return crops[0].views(steps)
