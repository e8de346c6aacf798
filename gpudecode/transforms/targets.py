"""The steps of a detection pipeline that change no pixel, only the boxes beside the image:
torchvision's SanitizeBoundingBoxes, ConvertBoundingBoxFormat and ClampBoundingBoxes,
taken in a Compose so that a torchvision detection pipeline (its references' presets end
on ConvertBoundingBoxFormat("XYXY") and SanitizeBoundingBoxes) converts as written. They
set what a `gpudecode.Boxes` field hands out (fields.Boxes.following): the format, and the
sizes under which a box is dropped with its label, after the last step. The boxes are
clamped after every step already, so ClampBoundingBoxes changes nothing.

Where SanitizeBoundingBoxes drops boxes is where it stands in torchvision's pipeline; here
it drops them after the last step, so a step after it that moves boxes (a crop, a flip, a
warp) is refused rather than dropping boxes it would have dropped sooner (a zero-width box
a rotation after it would widen again).
"""
from __future__ import annotations

from typing import Any, Sequence

from ..errors import TransformError
from .base import Transform
from .boxes import check_format

__all__ = ["SanitizeBoundingBoxes", "ConvertBoundingBoxFormat", "ClampBoundingBoxes", "box_settings"]


class _BoxStep(Transform):
    group = "targets"


class SanitizeBoundingBoxes(_BoxStep, converts="torchvision.SanitizeBoundingBoxes"):
    """torchvision's SanitizeBoundingBoxes: the boxes whose width or height is under
    `min_size`, or area under `min_area`, dropped with their labels, after the last step
    (the Boxes field's min_size and min_area). Only its default labels_getter is taken:
    the labels dropped with their boxes."""

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(t.min_size, getattr(t, "min_area", 1.0), t.labels_getter)

    def __init__(self, min_size: float = 1.0, min_area: float = 1.0, labels_getter: Any = "default") -> None:
        if labels_getter != "default":
            raise TransformError(f"SanitizeBoundingBoxes(labels_getter={labels_getter!r}) cannot be fused: a Boxes "
                                 "field drops each box's label with it (labels_getter='default')")
        for name, v in (("min_size", min_size), ("min_area", min_area)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
                raise ValueError(f"SanitizeBoundingBoxes({name}=) is a number of pixels, 0 or more, not {v!r}")
        self.min_size, self.min_area = float(min_size), float(min_area)


class ConvertBoundingBoxFormat(_BoxStep, converts="torchvision.ConvertBoundingBoxFormat"):
    """torchvision's ConvertBoundingBoxFormat: the boxes handed out in `format` (the Boxes
    field's out_format)."""

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(t.format)

    def __init__(self, format: Any) -> None:
        self.format = check_format(format)


class ClampBoundingBoxes(_BoxStep, converts="torchvision.ClampBoundingBoxes"):
    """torchvision's ClampBoundingBoxes: nothing to do (every step clamps the boxes to its
    image already; axis-aligned boxes clamp alike in its modes)."""

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls()


def box_settings(steps: Sequence[Transform], names: str) -> tuple[str | None, tuple[float, float] | None]:
    """What a Compose's box steps set: (the format handed out, or None; (min_size,
    min_area), or None), the last of each kind.

    Raises:
        TransformError: a SanitizeBoundingBoxes with a step after it that moves pixels."""
    fmt: str | None = None
    sizes: tuple[float, float] | None = None
    sanitized = None
    for t in steps:
        if isinstance(t, ConvertBoundingBoxFormat):
            fmt = t.format
        elif isinstance(t, SanitizeBoundingBoxes):
            sizes, sanitized = (t.min_size, t.min_area), t
        elif sanitized is not None and t.group != "targets" and _moves(t):
            raise TransformError(f"{type(t).__name__} after SanitizeBoundingBoxes cannot be fused: the boxes are "
                                 f"dropped after the last step that moves them, so put SanitizeBoundingBoxes after "
                                 f"it (where torchvision's references put it: last) [{names}]")
    return fmt, sizes


def _moves(t: Transform) -> bool:
    """Whether a step moves pixels (and so boxes): a canvas or geometry step, a flip, a warp."""
    return t.group in ("canvas", "geometry", "flips") or bool(getattr(t, "moves", False)) or bool(
        getattr(t, "after_kernel", False))
