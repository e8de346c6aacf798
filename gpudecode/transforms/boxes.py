"""Bounding boxes moved with their images: a detection target's boxes cropped, scaled,
shifted by the padding, clamped and flipped exactly as the fused kernel moves the image
they belong to, with the image's own draws; then the boxes left too small dropped, with
their labels.

torchvision.transforms.v2 moves a `tv_tensors.BoundingBoxes` beside its image with the same
parameters: a crop subtracts its corner and clamps to the new canvas, a resize multiplies
by new / old (float32 of the Python ratio), padding adds its offset, a flip mirrors, and
`SanitizeBoundingBoxes` (min_size, min_area: 1 by default) drops the boxes whose width,
height or area fell below them, and their labels. Every such chain is one affine map an
axis and one clamp to the output, which this module reads from the kernel's geometry
columns (kernels/layout.py: the source box, the size it is resized to, the output
window's offset in it, the flips), as transforms/masks.py does for a mask. (A chain's
inner clamps are each to a window holding the output's, so the last clamp is theirs.)

RandomIoUCrop's crop is such a crop; the boxes whose centres it leaves out are emptied
there (transforms.iou_crop.emptied), as torchvision zeroes them, and dropped at the end.
A canvas step that places the image unchanged on a larger canvas (RandomZoomOut) is
followed as torchvision's pad moves boxes: shifted to the image's place, clamped to the
canvas (on_canvas). The warps (RandomRotation, expanded or not, RandomAffine,
RandomPerspective) move each box as torchvision moves it: its four corners through the
warp, the box around them, clamped (transforms.warped); the boxes too small are dropped
after the last step, as SanitizeBoundingBoxes at the end of a torchvision pipeline drops
them. ElasticTransform moves them as torchvision's elastic_bounding_boxes does. What
moves pixels otherwise (the policies' geometric ops) is refused, as for masks
(transforms.masks.refusal).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np
import torch

from ..errors import TransformError
from ..kernels import fused
from .geometry_choice import crops_resized
from .iou_crop import emptied
from .masks import drawn_warps, places, refusal
from .warped import Drawn, Mirrored, warp_boxes_by

if TYPE_CHECKING:
    from .draws import Draws
    from .plan import _Plan

__all__ = ["Stored", "FORMATS", "as_boxes", "entries", "box_moves", "on_canvas", "move_boxes", "kept", "warped_boxes",
           "scale_boxes", "warp_boxes", "target", "check_format", "refused"]

FORMATS = ("XYXY", "XYWH", "CXCYWH")  # (torchvision's axis-aligned BoundingBoxFormat names)
_BOX_KEYS = ("boxes", "bbox", "bboxes")
_LABEL_KEYS = ("labels", "category_id", "category", "categories")


@dataclass(frozen=True)
class Stored:
    """A sample's boxes as read, before they move: XYXY float32 [K, 4], labels int64 [K] or
    None (one object, not a tuple: the resident store keeps it in an object array)."""

    xyxy: np.ndarray
    labels: np.ndarray | None


def to_xyxy(b: np.ndarray, fmt: str) -> np.ndarray:
    """Boxes [K, 4] (float32) of format `fmt` as XYXY, in float32 as torchvision converts them."""
    if fmt == "XYXY":
        return b.copy()
    if fmt == "XYWH":
        return np.concatenate([b[:, :2], b[:, :2] + b[:, 2:]], axis=1)
    corner = b[:, :2] - b[:, 2:] / np.float32(2)  # (torchvision's order: x1 = cx - w / 2, then x2 = x1 + w)
    return np.concatenate([corner, corner + b[:, 2:]], axis=1)


def from_xyxy(b: np.ndarray, fmt: str) -> np.ndarray:
    if fmt == "XYXY":
        return b
    wh = b[:, 2:] - b[:, :2]
    if fmt == "XYWH":
        return np.concatenate([b[:, :2], wh], axis=1)
    return np.concatenate([(b[:, :2] * np.float32(2) + wh) / np.float32(2), wh], axis=1)  # (torchvision's order)


def as_boxes(value: Any, fmt: str = "XYXY") -> tuple[np.ndarray, np.ndarray | None]:
    """A sample's boxes as stored, checked: (XYXY float32 [K, 4], labels int64 [K] or None).

    Takes an array or tensor [K, 4]; a list of boxes (4 numbers each); a dict with the boxes
    under "boxes" or "bbox" (a Hugging Face detection set's `objects`) and the labels under
    "labels", "category_id" or "category"; or a list of COCO annotations, each a dict with
    "bbox" and "category_id". The boxes are read in `fmt` (COCO's are XYWH).

    Raises:
        ValueError: anything else, with what it is: a box not of 4 finite numbers, one of
            negative width or height, labels that are not integers, or not one a box."""
    labels: Any = None
    said = getattr(getattr(value, "format", None), "name", None)  # (a tv_tensors.BoundingBoxes says its own)
    if said is not None and said != fmt:
        raise ValueError(f"holds BoundingBoxes of format {said}, read as {fmt}: give that format")
    if isinstance(value, Mapping):
        boxes = next((value[k] for k in _BOX_KEYS if k in value), None)
        if boxes is None:
            raise ValueError(f"is a record with no boxes (looked for {', '.join(repr(k) for k in _BOX_KEYS)}; "
                             f"it has {', '.join(repr(str(k)) for k in list(value)[:6]) or 'no keys'})")
        labels = next((value[k] for k in _LABEL_KEYS if k in value), None)
    elif isinstance(value, (list, tuple)) and value and all(type(a) is dict or isinstance(a, Mapping) for a in value):
        if not all(any(k in a for k in _BOX_KEYS) for a in value):
            raise ValueError("is a list of records, not each with a box (COCO's annotations have \"bbox\")")
        boxes = [next(a[k] for k in _BOX_KEYS if k in a) for a in value]
        found = [next((a[k] for k in _LABEL_KEYS if k in a), None) for a in value]
        if any(x is not None for x in found):
            if any(x is None for x in found):
                raise ValueError("is a list of records, some with a label and some without")
            labels = found
    else:
        boxes = value
    b = _numbers(boxes, "boxes")
    if b.shape == (0,):  # (no box: an empty list)
        b = b.reshape(0, 4)
    if b.ndim != 2 or b.shape[1] != 4:
        raise ValueError(f"holds boxes of shape {tuple(b.shape)}: boxes are [K, 4] ({fmt})")
    b = b.astype(np.float32)
    if not np.isfinite(b).all():
        raise ValueError("holds a box that is not finite (nan or inf)")
    xyxy = to_xyxy(b, fmt)
    bad = np.flatnonzero((xyxy[:, 2] < xyxy[:, 0]) | (xyxy[:, 3] < xyxy[:, 1]))
    if bad.size:
        raise ValueError(f"holds box {int(bad[0])}, {b[bad[0]].tolist()}, of negative width or height as {fmt}")
    lab = None
    if labels is not None:
        lab_a = _numbers(labels, "labels")
        if lab_a.shape == (0,):  # (an empty list: numpy's float64)
            lab_a = lab_a.astype(np.int64)
        if lab_a.dtype.kind not in "iu" or lab_a.ndim != 1:
            raise ValueError(f"holds labels that are not a list of integers ({tuple(lab_a.shape)} {lab_a.dtype})")
        if len(lab_a) != len(b):
            raise ValueError(f"holds {len(b)} boxes and {len(lab_a)} labels: one label a box")
        if lab_a.dtype == np.uint64 and (lab_a > np.iinfo(np.int64).max).any():
            raise ValueError(f"holds a label over int64's range ({int(lab_a.max())})")
        lab = lab_a.astype(np.int64)
    return xyxy, lab


def _numbers(v: Any, what: str) -> np.ndarray:
    if isinstance(v, torch.Tensor):
        v = v.detach().cpu().numpy()
    if isinstance(v, np.ndarray):
        a = v
    else:
        if isinstance(v, (str, bytes)) or not isinstance(v, (list, tuple)):
            raise ValueError(f"holds {what} that are a {type(v).__name__}, not a list of numbers")
        if _has_bool(v):
            raise ValueError(f"holds {what} with a bool among the numbers")
        try:
            a = np.asarray(v)
        except ValueError:
            raise ValueError(f"holds {what} of ragged lengths: [K, 4] numbers") from None
    if a.dtype.kind not in "iuf" or a.dtype.itemsize > 8:
        raise ValueError(f"holds {what} that are not numbers ({a.dtype})")
    return a


def _has_bool(v: Any) -> bool:
    """Whether a bool lies anywhere in nested lists and tuples `v` (numpy would take it as
    a number)."""
    stack = [v]
    while stack:
        for x in stack.pop():
            t = type(x)
            if t is float or t is int:  # (the usual: JSON's numbers)
                continue
            if t is bool or isinstance(x, np.bool_):
                return True
            if isinstance(x, (list, tuple)):
                stack.append(x)
    return False


def box_moves(geom: np.ndarray, cropped: Any = False) -> np.ndarray:
    """Each sample's map of box coordinates under the kernel's geometry `geom` [N, GEOM]:
    [N, 10] float64 (scale x, scale y, left, top, flip, vflip, shift x, shift y, frame w,
    frame h): x_out = (x - left) * scale x, clamped to the frame (the resized crop, where
    `cropped`: a crop resized, which torchvision's crop and resize clamp to; else no
    bound), - shift x, then the clamp to the output and the flips. The scales are float32
    of the ratio (resized / source size), as torchvision makes them."""
    g = np.asarray(geom, np.int64).reshape(-1, fused.GEOM)
    out = np.full((len(g), 10), np.inf, np.float64)
    c = np.broadcast_to(np.asarray(cropped, bool), (len(g),))  # (one flag, or one an image: a choice of geometries)
    out[c, 8], out[c, 9] = g[c, fused.VW], g[c, fused.VH]
    out[:, 0] = (g[:, fused.VW] / np.maximum(g[:, fused.BW], 1)).astype(np.float32)
    out[:, 1] = (g[:, fused.VH] / np.maximum(g[:, fused.BH], 1)).astype(np.float32)
    out[:, 2], out[:, 3] = g[:, fused.LEFT], g[:, fused.TOP]
    out[:, 4], out[:, 5] = g[:, fused.FLIP] != 0, g[:, fused.VFLIP] != 0
    out[:, 6], out[:, 7] = g[:, fused.OX], g[:, fused.OY]
    return out


def on_canvas(xyxy: np.ndarray, placed: np.ndarray) -> np.ndarray:
    """XYXY boxes (float32 [K, 4]) in the coordinates of their images' canvases (`placed`:
    their samples' rows of masks.places, [K, 6] or [6]), clamped to the canvas, as
    torchvision's pad moves them."""
    p = np.broadcast_to(np.asarray(placed, np.int64), (len(xyxy), 6)).astype(np.float32)
    b = np.asarray(xyxy, np.float32).reshape(-1, 4)
    x = np.clip(b[:, 0::2] + p[:, 1:2], 0, p[:, 5:6])
    y = np.clip(b[:, 1::2] + p[:, 0:1], 0, p[:, 4:5])
    return np.stack([x[:, 0], y[:, 0], x[:, 1], y[:, 1]], axis=1).astype(np.float32)


def move_boxes(xyxy: np.ndarray, move: np.ndarray, out_size: tuple[int, int], *, min_size: float = 1.0,
               min_area: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """XYXY boxes (float32 [K, 4]) moved by their samples' rows of box_moves (`move`: [K, 10],
    one a box, or [10] for all): (the boxes moved, XYXY float32 [K, 4]; whether each is kept
    [K], its width and height at least `min_size` and its area at least `min_area`, as
    SanitizeBoundingBoxes keeps it). Every box is clamped to the output (h, w) `out_size`
    (or [K, 2], each box's image's: images of their own sizes) after its scale, so a box
    that reaches the crop's edge ends on the output's, never a float32 rounding past it."""
    m = np.broadcast_to(np.asarray(move, np.float64), (len(xyxy), 10)).astype(np.float32)
    size = np.asarray(out_size, np.float32)
    oh, ow = (size[:, 0:1], size[:, 1:2]) if size.ndim == 2 else (size[0], size[1])
    b = np.asarray(xyxy, np.float32).reshape(-1, 4)
    x = (b[:, 0::2] - m[:, 2:3]) * m[:, 0:1]
    y = (b[:, 1::2] - m[:, 3:4]) * m[:, 1:2]
    framed = np.isfinite(m[:, 8:9])
    if framed.any():  # (a crop resized: clamped to its frame before a window of it is cut)
        x = np.clip(x, np.where(framed, 0, -np.inf), m[:, 8:9])
        y = np.clip(y, np.where(framed, 0, -np.inf), m[:, 9:10])
    x -= m[:, 6:7]
    y -= m[:, 7:8]
    np.clip(x, 0, ow, out=x)
    np.clip(y, 0, oh, out=y)
    x = np.where(m[:, 4:5] != 0, ow - x[:, ::-1], x)
    y = np.where(m[:, 5:6] != 0, oh - y[:, ::-1], y)
    out = np.stack([x[:, 0], y[:, 0], x[:, 1], y[:, 1]], axis=1).astype(np.float32)
    return out, kept(out, min_size=min_size, min_area=min_area)


def kept(xyxy: np.ndarray, *, min_size: float = 1.0, min_area: float = 1.0) -> np.ndarray:
    """Which XYXY boxes SanitizeBoundingBoxes keeps [K]: width and height at least
    `min_size`, area at least `min_area`."""
    w, h = xyxy[:, 2] - xyxy[:, 0], xyxy[:, 3] - xyxy[:, 1]
    return (w >= min_size) & (h >= min_size) & (w * h >= min_area)


def warped_boxes(xyxy: np.ndarray, counts: "Sequence[int] | np.ndarray",
                 drawn: Sequence[Sequence[Drawn | Mirrored]]) -> np.ndarray:
    """XYXY boxes (float32 [K, 4], `counts` an image, in order) each through its image's
    warps (`drawn`: one list an image; warped.warp_boxes_by)."""
    out = np.asarray(xyxy, np.float32).reshape(-1, 4).copy()
    start = 0
    for n, ds in zip(counts, drawn):
        if n and ds:
            out[start:start + n] = warp_boxes_by(out[start:start + n], ds)
        start += int(n)
    return out


def scale_boxes(xyxy: np.ndarray, size: tuple[int, int], to: tuple[int, int]) -> np.ndarray:
    """XYXY boxes of an image of `size` (h, w) in the coordinates of that image resized to
    `to` (the resident store's keep_size), as torchvision's resize moves them."""
    (h, w), (nh, nw) = size, to
    r = np.array([nw / w, nh / h, nw / w, nh / h], np.float32)
    return (xyxy * r).astype(np.float32)


def warp_boxes(plan: "_Plan", boxes: Sequence[Any], draws: "Draws", *, fmt: str = "XYXY", out_fmt: str | None = None,
               min_size: float = 1.0, min_area: float = 1.0) -> list[dict[str, torch.Tensor]]:
    """Each image's boxes moved as the kernel moves the image under `draws` (one entry an
    image, in order; anything as_boxes takes, in `fmt`): {"boxes": float32 [K', 4] in
    `out_fmt` (default `fmt`), and
    "labels": int64 [K'] where the entry has labels}, the boxes dropped by min_size /
    min_area gone with their labels.

    Raises:
        TransformError: a plan whose steps move pixels boxes cannot follow (refusal);
        ValueError: boxes as_boxes refuses, named by their place."""
    refused(plan)
    if len(boxes) != len(draws):
        raise ValueError(f"{len(boxes)} entries of boxes for {len(draws)} images")
    if not len(boxes):
        return []
    moves = box_moves(draws.encode()[0], crops_resized(plan, draws.dicts()))
    placed = places(plan, draws)
    before, after = drawn_warps(plan, draws)
    out_size: Any = draws.out_sizes() if plan.ragged else plan.output_size(draws.sizes)
    dicts = draws.dicts() if plan.reads_boxes else None
    out = []
    for k, (xyxy, labels) in enumerate(entries(boxes, fmt)):
        if placed is not None:
            xyxy = on_canvas(xyxy, placed[k])
        if before is not None:
            xyxy = warp_boxes_by(xyxy, before[k])
        if dicts is not None:  # (RandomIoUCrop's: the boxes whose centres its crop leaves out, emptied)
            xyxy = emptied(xyxy, dicts[k])
        moved, ok = move_boxes(xyxy, moves[k], out_size[k] if plan.ragged else out_size, min_size=min_size,
                               min_area=min_area)
        if after is not None and after[k]:
            moved = warp_boxes_by(moved, after[k])
            ok = kept(moved, min_size=min_size, min_area=min_area)
        out.append(target(moved[ok], None if labels is None else labels[ok], out_fmt or fmt))
    return out


def entries(boxes: Sequence[Any], fmt: str) -> list[tuple[np.ndarray, np.ndarray | None]]:
    """A caller's boxes, one entry an image (anything as_boxes takes, in `fmt`), read:
    as_boxes' (XYXY, labels) each.

    Raises:
        ValueError: an entry as_boxes refuses, named by its place."""
    out = []
    for k, v in enumerate(boxes):
        try:
            out.append(as_boxes(v, fmt))
        except ValueError as e:
            raise ValueError(f"entry {k} {e}") from None
    return out


def target(xyxy: np.ndarray, labels: np.ndarray | None, fmt: str) -> dict[str, torch.Tensor]:
    """A sample's detection target as torchvision's detection models take it."""
    t = {"boxes": torch.from_numpy(np.ascontiguousarray(from_xyxy(xyxy, fmt), np.float32))}
    if labels is not None:
        t["labels"] = torch.from_numpy(np.ascontiguousarray(labels, np.int64))
    return t


def check_format(fmt: Any) -> str:
    """A box format's name, upper-cased (a tv_tensors.BoundingBoxFormat's name is taken too).

    Raises:
        ValueError: not an axis-aligned format."""
    name = getattr(fmt, "name", fmt)
    if not isinstance(name, str) or name.upper() not in FORMATS:
        raise ValueError(f"a box format is one of {', '.join(FORMATS)}, not {fmt!r}")
    return name.upper()


def refused(plan: "_Plan") -> None:
    """Raises TransformError where boxes cannot follow images under `plan` (masks' refusal)."""
    why = refusal(plan)
    if why is None and plan.pad_mode != 0:
        why = ("a crop's padding that reads the image's own pixels (padding_mode edge, reflect or symmetric), which "
               "torchvision refuses for boxes too")
    if why is not None:
        raise TransformError(f"boxes cannot follow the images: {why}")
