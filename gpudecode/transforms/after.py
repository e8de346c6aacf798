"""The steps after the geometry (the flips, each sample's program, the output's dtype and
normalization, the erasing, a warp of the output), taken one at a time in the Compose's
order and checked where they stand (plan._plan's `rest`)."""
from __future__ import annotations

import copy

import torch

from ..errors import TransformError
from .args import NEAREST
from .base import PROGRAM_GROUPS, FlipStep, Transform, _refuse, _Step, _Wrapper, step_name
from .colour import RGB, Grayscale
from .geometry import RandomHorizontalFlip, RandomVerticalFlip, _Flip
from .output import LinearTransformation, Normalize, RandomErasing, ToDtype


class _AfterGeometry:
    """The steps after the geometry, taken one at a time and checked where they stand."""

    def __init__(self, names: str, size: tuple[int, int] | None = None) -> None:
        self.names = names
        self.size = size  # (the geometry's output size, where it has one)
        self.flip: RandomHorizontalFlip | None = None
        self.vflip: RandomVerticalFlip | None = None
        self.program: list[_Step] = []
        self.keys: dict[str, str] = {}  # make_params key -> the class that draws it
        self.normalize: Normalize | None = None
        self.dtype: torch.dtype | None = None
        self.erase: RandomErasing | None = None
        self.linear: LinearTransformation | None = None
        self.post: Transform | None = None
        self.post_levels = False
        self.one_at: int | None = None  # the program's Grayscale(1) (-1: images of one channel)
        self.one_end: int | None = None  # the Grayscale(3) that makes them three channels again
        self.flip_at = (0, 0)  # (_Plan.flip_at)

    @property
    def on_levels(self) -> bool:
        """A ToDtype(float) without scale made the uint8 image floats of 0 to 255, and no
        Normalize came after it yet: the plan's Normalize is then its own, of mean 0 and
        std 1/255 (the kernel's [0, 1] floats times 255); the user's Normalize after it is
        taken on the levels (mean / 255, std / 255)."""
        return self.normalize is not None and self.normalize.levels

    def add(self, t: Transform) -> None:
        what, names = type(t).__name__, self.names
        if isinstance(t, RGB):
            self._rgb()
            return
        if self.on_levels and not isinstance(t, (Normalize, RandomErasing, _Flip)) and not (
                isinstance(t, ToDtype) and t.dtype.is_floating_point):
            raise TransformError(f"{what} after ToDtype({self.dtype}) without scale=True cannot be fused: its floats "
                                 f"are levels (0 to 255) and torchvision's float ops read 0 to 1; give scale=True, or "
                                 f"put {what} before it [{names}]")
        if self.one_at is not None and self.one_end is None:
            self.one_channel(t, "after Grayscale(num_output_channels=1)" if self.one_at >= 0 else
                             "on images of one channel")
        if self.linear is not None:
            raise TransformError(f"{what} after LinearTransformation cannot be fused: it is the last step [{names}]")
        if isinstance(t, LinearTransformation):
            if self.dtype is None or not self.dtype.is_floating_point:
                raise TransformError(f"LinearTransformation on uint8 images cannot be fused: give a float output "
                                     f"before it (ToDtype(torch.float32, scale=True) or Normalize) [{names}]")
            self.linear = t
            return
        if self.erase is not None and isinstance(t, Normalize) and self.normalize is None and \
                self.dtype is not None and self.dtype.is_floating_point and not self.erase.normalized:
            self.normalize, self.erase = t, self.erase.before_normalize(t)  # (the values it writes normalized)
            return
        if self.erase is not None:
            raise TransformError(f"{what} after RandomErasing cannot be fused: it erases the finished image [{names}]")
        if t.group == "geometry":
            raise TransformError(f"{what} after other steps cannot be fused: geometry comes first "
                                 f"[{names}]")
        if self.post is not None and not isinstance(t, (Normalize, ToDtype, RandomErasing)):
            raise TransformError(f"{what} after {type(self.post).__name__} cannot be fused: there "
                                 f"{type(self.post).__name__} warps the kernel's output, so only Normalize, ToDtype and "
                                 f"RandomErasing may follow it (or put it first, before a geometry step) [{names}]")
        if getattr(t, "after_kernel", False):
            if self.normalize is not None:
                raise TransformError(f"{what} after Normalize cannot be fused [{names}]")
            if self.dtype == torch.uint8:
                raise TransformError(f"{what} after ToDtype(uint8) cannot be fused [{names}]")
            self.post = t
            self.post_levels = self.dtype is None
            return
        if self._canvas(t):
            raise TransformError(f"{t!r} after other steps cannot be fused: {self._why(t)}, so it comes first, "
                                 f"before the geometry [{names}]")
        if self.normalize is not None and not isinstance(t, RandomErasing) and t.group != "flips" and not (
                isinstance(t, ToDtype) and t.dtype.is_floating_point) and not (  # (a flip moves normalized pixels
                isinstance(t, Normalize) and self.on_levels):  # as any; the levels' Normalize: the user's after)
            warped = self._warped_normalized(t)
            if warped is None:
                raise TransformError(f"{what} after Normalize cannot be fused" + (
                    " (a warp, but for a nearest one filling 0)" if getattr(t, "moves", False) else "") + f" [{names}]")
            t = warped
        if t.group == "last":
            self.erase = t  # type: ignore[assignment]
        elif t.group == "flips":
            self.add_flip(t)  # type: ignore[arg-type]
        elif t.group in PROGRAM_GROUPS:
            self._step(t)  # type: ignore[arg-type]
        elif isinstance(t, Normalize):
            if self.dtype == torch.uint8:
                raise TransformError("Normalize needs a float dtype, not ToDtype(uint8)")
            if self.on_levels:  # (on the levels: torchvision's (255 x - mean) / std)
                t = Normalize([m / 255 for m in t.mean], [v / 255 for v in t.std])
            self.normalize = t
            self.dtype = self.dtype or torch.float32
        elif isinstance(t, ToDtype):
            if t.dtype != torch.uint8 and self.normalize is None and not t.scale and not (
                    self.dtype is not None and self.dtype.is_floating_point):  # (uint8 made float: its levels)
                self.normalize = Normalize(0.0, 1 / 255, levels=True)
            self.dtype = t.dtype
        else:
            raise _refuse(f"{what} cannot be fused there [{names}]")

    def _rgb(self) -> None:
        """RGB: one channel made three equal ones from here (the steps before it on one
        channel; the program's next steps on three); on three channels it is no step."""
        if self.one_at is None or self.one_end is not None:
            return
        last = self.linear or self.erase or self.post
        if last is not None:
            raise TransformError(f"RGB after {type(last).__name__} on an image of one channel cannot be fused: put it "
                                 f"before {type(last).__name__} [{self.names}]")
        self.one_end = len(self.program) - 1

    def _square(self, t: Transform) -> bool:
        """An expanded exact quarter turn of the geometry's square output: its size kept, so a
        turn as the non-expanded one (torch.rot90's pixels either way)."""
        return getattr(t, "square_turn", False) and self.size is not None and self.size[0] == self.size[1]

    def _canvas(self, t: Transform) -> bool:
        """A step that changes the image's size, so a canvas step (first, before the geometry)."""
        return getattr(t, "canvas", False) and not self._square(t)

    @staticmethod
    def _why(t: Transform) -> str:
        why = getattr(t, "canvas_why", "")
        return f"{why} (a quarter turn keeps a square's: give a square size first)" if getattr(
            t, "square_turn", False) else why

    def add_flip(self, t: _Flip) -> None:
        what = type(t).__name__
        if (self.vflip if isinstance(t, RandomVerticalFlip) else self.flip) is not None or t.key in self.keys:
            raise TransformError(f"two {what}s [{self.names}]")
        at = self._flip_place(what)
        if isinstance(t, RandomVerticalFlip):
            self.vflip, self.flip_at = t, (self.flip_at[0], at)
        else:
            self.flip, self.flip_at = t, (at, self.flip_at[1])  # type: ignore[assignment]

    def _flip_place(self, what: str) -> int:
        """The flip_at of a flip after the program so far: its length where a warp is in it
        (their ops mirrored where a sample flips, mirrors.mirror_ops), else 0; refused where
        a step that moves pixels cannot be mirrored."""
        moving = [u for s in self.program for u in s.inner() if u.moves and u.inner() == [u]]  # (not the wrappers)
        stuck = next((type(u).__name__ for u in moving if not (getattr(u, "mirrors", False) or self._square(u))), None)
        if stuck is not None:
            raise TransformError(f"{what} after {stuck} cannot be fused: the kernel flips while it resamples, "
                                 f"before the program's warps, and mirrors only torchvision's: rotations, affine and "
                                 f"perspective warps, its policies (put the flip before {stuck}) [{self.names}]")
        return len(self.program) if moving else 0

    def _claim(self, t: _Step) -> None:
        """Takes the make_params keys `t` draws (and its steps') into `keys`, refusing a key
        two steps would draw; the options of a RandomChoice (`exclusive`: one of them
        draws an image) each against the keys before it, so that they may share one
        (`RandomChoice([RandomRotation((a, a)) for a in (0, 90, 180, 270)])`)."""
        for k in t.keys:
            if k in self.keys and getattr(t, "keyed", None) is not None:  # (the Compose's own: _own_key)
                raise TransformError(f"a RandomChoice inside another container beside another RandomChoice cannot be "
                                     f"fused: only the Compose's own RandomChoices draw under keys of their own "
                                     f"[{self.names}]")
            if k in self.keys:
                raise TransformError(f"two {type(t).__name__}s [{self.names}]" if self.keys[k] == type(t).__name__
                                     else f"{type(t).__name__} and {self.keys[k]} both draw {k!r}: one of them "
                                     f"per Compose [{self.names}]")
            self.keys[k] = type(t).__name__
        steps = t.transforms if isinstance(t, _Wrapper) else []
        if not getattr(t, "exclusive", False):
            for u in steps:
                self._claim(u)
            return
        before, drawn = self.keys, {}
        for u in steps:
            self.keys = dict(before)
            self._claim(u)
            drawn.update(self.keys)
        self.keys = drawn

    def _warped_normalized(self, t: Transform) -> Transform | None:
        """`t` where it only moves the normalized image's pixels (nearest warps filling 0,
        flips, containers of them: `[ToTensor(), Normalize(...), RandomRotation(10)]`, as MNIST
        scripts write it), each warp's fill, the normalized image's 0, taken back to the image
        before the Normalize (its mean), where the kernel warps: a pick and a per-channel
        affine map commute. Not a bilinear warp: torchvision blends its edge as (zero-padded
        sample) x coverage + (1 - coverage) x fill, which commutes with no fill. Not another
        fill: its units (levels or [0, 1]) depend on the float conversion before. None where
        `t` does more."""
        norm = self.normalize
        if norm is None or norm.levels or not isinstance(t, _Step):
            return None
        steps = [u for u in t.inner() if u.inner() == [u]]  # (not the wrappers)
        if not steps or any(not (isinstance(u, FlipStep) or (
                u.moves and getattr(u, "canvas_first", False) and getattr(u, "interpolation", None) == NEAREST and
                not any(getattr(u, "_fill", None) or ()))) for u in steps):
            return None
        mean = tuple(norm.mean) * (3 // len(norm.mean))
        out = copy.deepcopy(t)
        for u in out.inner():
            if not isinstance(u, FlipStep) and u.inner() == [u]:
                setattr(u, "_fill", mean)  # noqa: B010 (a warp of this copy: its kernel fill, _Warp._setup's)
        return out

    def _own_key(self, t: _Step) -> _Step:
        """`t`, or, where it is a later RandomChoice of the Compose (its key taken by one
        before it), the same choice drawing under a key of its own ("choice2", ...)."""
        keyed = getattr(t, "keyed", None)
        if keyed is None or t.keys[0] not in self.keys:
            return t
        n = 2
        while f"{t.keys[0]}{n}" in self.keys:
            n += 1
        return keyed(f"{t.keys[0]}{n}")

    def _step(self, t: _Step) -> None:
        if self.dtype == torch.uint8:
            raise TransformError(f"{type(t).__name__} after ToDtype(uint8) cannot be fused [{self.names}]")
        for u in t.inner():
            if self._canvas(u):  # (inside a container: it cannot come first)
                raise TransformError(f"{u!r} inside {step_name(t)} cannot be fused: {self._why(u)}, so it "
                                     f"comes first, before the geometry, on its own [{self.names}]")
        inner_flips = [u for u in t.inner() if isinstance(u, FlipStep)]  # (a flip at the container's place, drawn by it)
        stuck = _warp_then_flip(t)
        if stuck is not None:
            raise TransformError(f"{stuck[1]!r} after {type(stuck[0]).__name__} in one {step_name(t)} cannot be fused: "
                                 f"the kernel flips first, and mirrors only the warps before the container; put the "
                                 f"flip first in it [{self.names}]")
        for u in inner_flips:
            if (self.flip, self.vflip)[u.keys[0] == "vflip"] is not None:
                raise TransformError(f"two {type(u.flip).__name__}s [{self.names}]")
        t = self._own_key(t)
        self._claim(t)
        for u in inner_flips:
            at = self._flip_place(f"{type(u.flip).__name__} in {type(t).__name__}")
            self.flip_at = (at, self.flip_at[1]) if u.keys[0] == "flip" else (self.flip_at[0], at)
        one = self.one_at is not None and self.one_end is None  # (one channel before this step)
        if isinstance(t, Grayscale) and one != (t.num_output_channels == 1):
            if self.one_end is not None:
                raise TransformError(f"{t!r} after RGB made three channels of one cannot be fused: one channel "
                                     f"once a Compose [{self.names}]")
            if one:
                self.one_end = len(self.program)  # (three from here: torchvision repeats the channel)
            else:
                self.one_at = len(self.program)
        elif any(isinstance(u, Grayscale) and one != (u.num_output_channels == 1) for u in t.inner()):
            raise TransformError(f"{next(u for u in t.inner() if isinstance(u, Grayscale))!r} inside "
                                 f"{type(t).__name__} cannot be fused: the images of a batch would have 1 or 3 "
                                 f"channels [{self.names}]")
        self.program.append(t)

    def one_channel(self, t: Transform, where: str) -> None:
        """A step on an image of one channel (after Grayscale(1), or a grey set's): a
        Normalize of three different means or stds makes three channels of it, as
        torchvision v2's broadcasts them (v1's raises); a fill or erasing value of three
        different numbers is refused (torchvision's raise on one channel)."""
        if isinstance(t, Normalize) and (len(set(t.mean)) > 1 or len(set(t.std)) > 1):
            self.one_end = len(self.program)  # (every program step before it on one channel; three after)
            return
        inner = t.inner() if isinstance(t, _Step) else [t]
        for u in inner:
            fill = getattr(u, "_fill", None)
            value = getattr(u, "value", None) if isinstance(u, RandomErasing) else None
            if (fill is not None and len(set(fill)) > 1) or (value is not None and len(set(value)) > 1):
                raise TransformError(f"{type(u).__name__} with a fill of three different values {where}: the image "
                                     f"has one channel (give one value) [{self.names}]")


def _warp_then_flip(t: _Step) -> tuple[_Step, _Step] | None:
    """(a step that moves pixels, a flip after it) in one run of steps inside `t` (a
    RandomApply's steps, a Compose among a container's items), where `t` holds such; a
    RandomChoice's options are not one run: one of them runs."""
    if not isinstance(t, _Wrapper):
        return None
    moved = None
    for u in t.transforms if t.in_order else ():
        if isinstance(u, FlipStep) and moved is not None:
            return moved, u
        moved = moved or (u if u.moves else None)
    for u in t.transforms:
        found = _warp_then_flip(u)
        if found is not None:
            return found
    return None
