"""Views: several Composes of each image called together (FiveCrop's and TenCrop's crops,
transforms.crops, or views of one's own), as the Loader runs them."""
from __future__ import annotations

import random
from typing import Any, Iterable

from ..decode._base import is_pil
from ..errors import TransformError
from .compose import Compose, _pil_tensor
from .convert import convert
from .crops import split
from .rng import view_seed


class Views(list):
    """Several Composes of each image, called together: a call returns the tuple of their
    outputs, as a torchvision transform with FiveCrop or TenCrop returns its crops (and
    DataLoader collates a list of batches, the Loader's `images` with these views). A list:
    the Loader takes it as its transform, one view each.

    `Views.from_torchvision(tf)` converts a transform holding a FiveCrop or TenCrop (see
    transforms.crops), or any other as one view; `Views([g, g, local])` holds Composes of
    your own (DINO's views: each draws apart, view 0 as a one-view call with the seed)."""

    def __init__(self, views: Iterable[Any]) -> None:
        super().__init__(views)
        if not self or not all(isinstance(v, Compose) for v in self):
            raise TransformError("Views takes one gpudecode.transforms.Compose or more (Views.from_torchvision "
                                 "converts torchvision's)")
        self._rng = random.Random()

    @classmethod
    def from_torchvision(cls, tv: Any, *, layout: str = "NCHW") -> "Views":
        """A torchvision (or timm) transform, or a list of steps, as views: one a crop of a
        FiveCrop or TenCrop, else one."""
        steps = convert(tv)
        made = split(steps) or [steps]
        return cls(Compose(v, layout=layout) for v in made)  # type: ignore[arg-type]

    def __call__(self, images: Any, *, seed: int | None = None) -> tuple:
        """Each view's output of `images` (what a Compose takes: one image, a list, a
        batch, PIL images), in order; `seed` fixes the draws (view v draws from
        view_seed(seed, v), as in the Loader)."""
        if is_pil(images):  # (its pixels read once for every view)
            images = _pil_tensor(images, 0)
        elif isinstance(images, (list, tuple)) and any(is_pil(im) for im in images):
            images = [_pil_tensor(im, k) if is_pil(im) else im for k, im in enumerate(images)]
        seed = self._rng.getrandbits(63) if seed is None else seed
        return tuple(v(images, seed=view_seed(seed, k)) for k, v in enumerate(self))

    def __repr__(self) -> str:
        return f"Views({list.__repr__(self)})"
