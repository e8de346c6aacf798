"""FiveCrop and TenCrop: several fixed crops of each image, each crop a view.

torchvision's FiveCrop makes a tuple of five crops of each image (its four corners and its
centre), TenCrop ten (those five, then the five of the image mirrored), and the steps after
it run on each crop; DataLoader's collate turns the tuples into a list of five (ten)
batches. Here each crop is a view of its own: a Compose of the steps before the crop step,
the crop at its place (geometry.CornerCrop), TenCrop's mirror, and the steps after. The
Loader takes such a transform as it takes a list of views (every image decoded once for
all its crops; `images` a list of the crops' batches, as DataLoader's), and `Views` calls
them on images (a tuple, as torchvision's transform returns).

The crops draw nothing, but torchvision draws a random step's parameters once for all the
crops of an image, and separate views would draw them apart: a random step before or after
the crop step is refused (evaluation pipelines, where these are used, have none). Before
it, a Resize (the crop is taken of the resized image); after it, the output steps
(Normalize, ToDtype, ToTensor) and Grayscale.
"""
from __future__ import annotations

import random
from typing import Any, Iterable, Sequence

from ..errors import TransformError
from .base import Transform
from .colour import Grayscale
from .convert import convert
from .geometry import CORNERS, CornerCrop, RandomHorizontalFlip, RandomVerticalFlip, Resize, ResizeKeepRatio, \
    _RandomSize, _setup_size
from .rng import view_seed


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
            if t.group not in ("targets",) and not (isinstance(t, (Resize, ResizeKeepRatio))
                                                    and not isinstance(t, _RandomSize)):
                raise TransformError(f"{type(t).__name__} before {name} cannot be fused: only a Resize may come "
                                     f"before it (each crop is a view of its own, and torchvision takes the "
                                     f"crops of one image)")
        for t in after:
            if t.group not in ("then", "targets") and type(t) is not Grayscale:
                raise TransformError(
                    f"{type(t).__name__} after {name} cannot be fused: torchvision draws a step's parameters once "
                    f"for all the crops of an image, and each crop here is a view that draws its own; only "
                    f"Normalize, ToDtype and Grayscale may follow it")
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


class Views(list):
    """Several Composes of each image, called together: a call returns the tuple of their
    outputs, as a torchvision transform with FiveCrop or TenCrop returns its crops (and
    DataLoader collates a list of batches, the Loader's `images` with these views). A list:
    the Loader takes it as its transform, one view each.

    `Views.from_torchvision(tf)` converts a transform holding a FiveCrop or TenCrop (see
    transforms.crops), or any other as one view; `Views([g, g, local])` holds Composes of
    your own (DINO's views: each draws apart, view 0 as a one-view call with the seed)."""

    def __init__(self, views: Iterable[Any]) -> None:
        from .compose import Compose

        super().__init__(views)
        if not self or not all(isinstance(v, Compose) for v in self):
            raise TransformError("Views takes one gpudecode.transforms.Compose or more (Views.from_torchvision "
                                 "converts torchvision's)")
        self._rng = random.Random()

    @classmethod
    def from_torchvision(cls, tv: Any, *, layout: str = "NCHW") -> "Views":
        """A torchvision (or timm) transform, or a list of steps, as views: one a crop of a
        FiveCrop or TenCrop, else one."""
        from .compose import Compose

        steps = convert(tv)
        made = split(steps) or [steps]
        return cls(Compose(v, layout=layout) for v in made)  # type: ignore[arg-type]

    def __call__(self, images: Any, *, seed: int | None = None) -> tuple:
        """Each view's output of `images` (what a Compose takes: one image, a list, a
        batch, PIL images), in order; `seed` fixes the draws (view v draws from
        view_seed(seed, v), as in the Loader)."""
        from .compose import _pil_tensor
        from ..decode._base import is_pil

        if is_pil(images):  # (its pixels read once for every view)
            images = _pil_tensor(images, 0)
        elif isinstance(images, (list, tuple)) and any(is_pil(im) for im in images):
            images = [_pil_tensor(im, k) if is_pil(im) else im for k, im in enumerate(images)]
        seed = self._rng.getrandbits(63) if seed is None else seed
        return tuple(v(images, seed=view_seed(seed, k)) for k, v in enumerate(self))

    def __repr__(self) -> str:
        return f"Views({list.__repr__(self)})"
