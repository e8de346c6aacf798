"""Image header probe: size and encoding without decoding (native, GIL released)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from . import _native
from .errors import DecodeError


@dataclass(frozen=True, slots=True)
class ImageInfo:
    """What the first bytes of a JPEG or PNG say.

    `channels` counts the components stored in the file (JPEG 1/3/4; PNG 1 gray or
    palette, 2 gray+alpha, 3 RGB, 4 RGBA). `subsampling` is JPEG only; `color_type`
    and `interlaced` are PNG only; `bit_depth` is the sample precision.
    """

    format: str
    height: int
    width: int
    channels: int
    bit_depth: int
    color_space: str
    subsampling: str | None
    progressive: bool
    arithmetic: bool
    color_type: int | None
    interlaced: bool


def probe(data: bytes, *, shard: str | None = None, key: str | None = None) -> ImageInfo:
    """Header facts of one JPEG or PNG.

    Raises:
        DecodeError: the data is not a JPEG/PNG header it can read; names shard and key.
    """
    try:
        return ImageInfo(**_native.probe(data))
    except ValueError as e:
        raise DecodeError(str(e), shard=shard, key=key) from None


def probe_batch(items: Sequence[bytes], *, num_threads: int = 1) -> list[ImageInfo | str]:
    """Probe many images; an entry is the ImageInfo, or the error message."""
    return [ImageInfo(**r) if isinstance(r, dict) else r for r in _native.probe_batch(list(items), num_threads)]


def probe_format(data: bytes, *, shard: str | None = None, key: str | None = None,
                 why: str | None = None) -> tuple[str, int, int]:
    """(format, height, width) of any image the decoders take: "jpeg"/"png" (native
    probe), "npy" (a tensor sample, see gpudecode.tensors) or "other" (what Pillow
    opens). `why`: the native probe's message when the caller already ran it.

    Raises:
        DecodeError: none of them reads it; names shard and key.
    """
    import io

    from PIL import Image, UnidentifiedImageError

    from .tensors import MAGIC, npy_layout

    if why is None:
        try:
            info = _native.probe(data)
            return info["format"], info["height"], info["width"]
        except ValueError as e:
            why = str(e)
    if bytes(data[:6]) == MAGIC:
        try:
            h, w, _ = npy_layout(data)
        except ValueError as e:
            raise DecodeError(f"not a readable tensor sample ({e})", shard=shard, key=key) from None
        return "npy", h, w
    try:
        with Image.open(io.BytesIO(data)) as im:
            return "other", im.height, im.width
    except (UnidentifiedImageError, OSError, ValueError):
        raise DecodeError(f"not a readable image ({why})", shard=shard, key=key) from None
