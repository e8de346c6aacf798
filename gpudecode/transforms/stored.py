"""The size an image is stored at: precache's downsizing rule, which the resident store
(`Loader(keep=...)`) follows too, so that `keep` and `precache` agree on what an image
becomes. Here, below both, so neither imports the other.

Where precache resizes or cuts an image, it writes beside it a record of how (the member
RECORD: the size the sample's other members were made for, then each step), so that the
members which lie on the image (a Mask's pixels, Boxes' coordinates) can be brought to
where the stored image lies when they are read (Record.boxes, Record.mask), as
torchvision.transforms.v2's Resize and CenterCrop move them beside their image."""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .geometry import CenterCrop, Resize

RECORD = "gpudecode.json"  # the member (extension) of a sample's record
_VERSION = 1
_MAX_STEPS = 16  # steps a record may hold (a record is a shard's data: read as untrusted)
_MAX_SIDE = (1 << 31) - 1
_MAX_BYTES = 4096


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


@dataclass(frozen=True)
class Record:
    """How a stored image was made from the image its sample's other members lie on:
    `source` (height, width), then `steps`, each ("resize", h, w) (torchvision's Resize to
    exactly (h, w)) or ("crop", h, w) (CenterCrop: cut, or zero-padded where smaller)."""

    source: tuple[int, int]
    steps: tuple[tuple[str, int, int], ...]

    @property
    def size(self) -> tuple[int, int]:
        """The stored image's (height, width)."""
        return (self.steps[-1][1], self.steps[-1][2]) if self.steps else self.source

    def then(self, resize: tuple[int, int] | None, cut: tuple[int, int] | None) -> "Record":
        """This record with a further downsizing (resize, then centre cut) after it."""
        more = [("resize", *resize)] if resize is not None else []
        if cut is not None:
            more.append(("crop", *cut))
        return Record(self.source, (*self.steps, *more))

    def member(self) -> bytes:
        """The record as the member precache writes (compact JSON)."""
        doc = {"version": _VERSION, "from": list(self.source), "steps": [{op: [h, w]} for op, h, w in self.steps]}
        return json.dumps(doc, separators=(",", ":")).encode()

    def boxes(self, xyxy: np.ndarray) -> np.ndarray:
        """XYXY boxes (float32 [K, 4]) on the source image moved onto the stored one, step by
        step as torchvision moves a BoundingBoxes (scaled and clamped to the resized image;
        shifted by the cut and clamped to it), with the image's own placement
        (CenterCrop.offsets): none dropped, so labels and any other list stay aligned."""
        from .boxes import move_boxes  # (boxes.py is below: no circle)

        b = np.asarray(xyxy, np.float32).reshape(-1, 4)
        h, w = self.source
        for op, th, tw in self.steps:
            if op == "resize":
                move = [tw / w, th / h, 0, 0, 0, 0, 0, 0]
            else:
                top, left = CenterCrop((th, tw)).offsets(h, w)
                move = [1, 1, left, top, 0, 0, 0, 0]
            b, _ = move_boxes(b, np.array(move, np.float64), (th, tw), min_size=0, min_area=0)
            h, w = th, tw
        return b

    def mask(self, mask: torch.Tensor) -> torch.Tensor:
        """A mask [H, W] of the source image's size moved onto the stored image as the
        image was (nearest neighbour as torchvision resizes a Mask; 0 where a cut pads)."""
        from .masks import warp_masks

        if tuple(mask.shape) != self.source:
            raise ValueError(f"is a mask of {mask.shape[0]}x{mask.shape[1]}; its image was "
                             f"{self.source[0]}x{self.source[1]} before it was stored at {self.size[0]}x{self.size[1]} "
                             f"(.{RECORD}): a mask has its image's size")
        size = self.source
        for part in _parts(self.steps):  # (a resize and its cut at a time: one plan the kernel has)
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


def made(height: int, width: int, resize: tuple[int, int] | None, cut: tuple[int, int] | None,
         earlier: Record | None = None) -> Record | None:
    """The record of an image of (height, width) downsized by (resize, cut) (downsizing's),
    after `earlier` (the record it came with: an image stored once already); None where
    the image is kept as it is and came with none."""
    if resize is None and cut is None:
        return earlier
    if earlier is None:
        earlier = Record((int(height), int(width)), ())
    return earlier.then(resize, cut)


def read_record(data: Any) -> Record:
    """A sample's RECORD member, checked (it is a shard's data, read as untrusted).

    Raises:
        ValueError: not a record this version reads, with the reason."""
    if not isinstance(data, (bytes, bytearray, memoryview)) or len(data) > _MAX_BYTES:
        raise ValueError(f"is not a record of how its image was stored (not JSON bytes of at most {_MAX_BYTES})")
    try:
        doc = json.loads(bytes(data))
    except (ValueError, RecursionError):
        raise ValueError("is not a record of how its image was stored (not JSON)") from None
    if not isinstance(doc, dict) or set(doc) != {"version", "from", "steps"}:
        raise ValueError('is not a record of how its image was stored ({"version", "from", "steps"})')
    if doc["version"] != _VERSION or isinstance(doc["version"], bool):
        raise ValueError(f"is a record of version {doc['version']!r}: this gpudecode reads version {_VERSION}")
    source = _size(doc["from"], "from")
    steps = doc["steps"]
    if not isinstance(steps, list) or len(steps) > _MAX_STEPS:
        raise ValueError(f"is a record whose steps are not a list of at most {_MAX_STEPS}")
    out = []
    for step in steps:
        if not isinstance(step, dict) or len(step) != 1 or next(iter(step)) not in ("resize", "crop"):
            raise ValueError(f'is a record with a step {str(step)[:40]}: a step is {{"resize": [h, w]}} or '
                             '{"crop": [h, w]}')
        (op, size), = step.items()
        out.append((op, *_size(size, op)))
    return Record(source, tuple(out))


def _size(v: Any, what: str) -> tuple[int, int]:
    if (not isinstance(v, list) or len(v) != 2 or any(isinstance(x, bool) or not isinstance(x, int) for x in v)
            or not all(1 <= x <= _MAX_SIDE for x in v)):
        raise ValueError(f"is a record whose {what} is {str(v)[:40]}, not a size [height, width]")
    return int(v[0]), int(v[1])
