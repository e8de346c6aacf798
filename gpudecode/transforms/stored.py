"""The size an image is stored at: precache's downsizing rule, which the resident store
(`Loader(keep=...)`) follows too, so that `keep` and `precache` agree on what an image
becomes. Here, below both, so neither imports the other."""
from __future__ import annotations

from .geometry import Resize


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
