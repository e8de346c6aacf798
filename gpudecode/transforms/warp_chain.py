"""Warps in a row before the geometry (`[RandomRotation(15), RandomAffine(0, translate=(0.1,
0.1)), RandomCrop(28, padding=2), ...]`, as MNIST scripts write them; `[RandomPerspective(),
RandomAffine(...), Resize((224, 224))]`): torchvision warps the whole image, then warps that
image, then crops. One canvas step (`WarpChain`) stands for them: each image's canvas made
by the first warp, the next warp made of that, and so on, each with torch's ops as the warp
alone makes its canvas (transforms.warps), so each is torchvision's, byte for byte; only the
last is made for the window the geometry reads. Its boxes and masks follow each warp in
turn."""
from __future__ import annotations

import random
from typing import Any, Sequence

import torch

from ..errors import TransformError
from .base import Transform

__all__ = ["WarpChain", "chained", "chain_warps"]


class WarpChain(Transform):
    """Warps that keep the image's size (RandomRotation without expand, RandomAffine,
    RandomPerspective), one after another before the geometry: a canvas of the image's size
    (`canvas_first`), each warp's draws in the sample's make_params under its own keys."""

    group = "per-sample"
    canvas_first = True
    canvas_layout = "CHW"
    moves = True
    keeps_size = True
    mirrors = False  # (a flip after it in the program: refused; between it and the geometry: leading.flips_after_canvas)

    def __init__(self, warps: Sequence[Any]) -> None:
        self.warps = list(warps)
        keys = [k for w in self.warps for k in w.keys]
        twice = next((k for k in keys if keys.count(k) > 1), None)
        if twice is not None:
            raise TransformError(f"two warps that draw {twice!r} in a row ({', '.join(type(w).__name__ for w in self.warps)}) "
                                 f"cannot be fused: one of them per Compose")
        self.keys = tuple(keys)

    @property
    def follows(self) -> bool:
        return all(w.follows for w in self.warps)

    @property
    def paints_window(self) -> bool:
        """The last warp paints the window the geometry reads (the warps before it, whole)."""
        return bool(getattr(self.warps[-1], "paints_window", False))

    def inner(self) -> list:
        return [self, *self.warps]

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        out: dict = {}
        for w in self.warps:  # (in order, as torchvision draws them)
            out.update(w.draw(rng, size))
        return out

    def canvas_size(self, p: dict, size: tuple[int, int]) -> tuple[int, int]:
        return size

    def drawn(self, p: dict, size: tuple[int, int]) -> list:
        return [d for w in self.warps for d in w.drawn(p, size)]

    def paint(self, canvas: torch.Tensor, image: torch.Tensor, p: dict, window: Sequence[int] | None = None) -> None:
        """The warps of `image` (uint8 HWC) in turn, the last into `canvas` (uint8 [3, h, w],
        the image's size; with `window`, that part of it only)."""
        h, w = int(image.shape[0]), int(image.shape[1])
        for warp in self.warps[:-1]:
            made = torch.empty((3, h, w), dtype=torch.uint8, device=image.device)
            warp.paint(made, image, p)
            image = made.permute(1, 2, 0)  # (HWC at CHW's strides: what paint reads)
        self.warps[-1].paint(canvas, image, p, **({} if window is None else {"window": window}))

    def __repr__(self) -> str:
        return " then ".join(repr(w) for w in self.warps)


def _chains(t: Transform) -> bool:
    """A warp that keeps the image's size, which a warp may follow in a canvas."""
    return bool(getattr(t, "canvas_first", False) and getattr(t, "keeps_size", False) and getattr(t, "moves", False)
                and not getattr(t, "canvas", False) and not isinstance(t, WarpChain))


def chained(steps: list[Transform]) -> list[Transform]:
    """`steps` with each run of two or more warps that keep the size, followed by a geometry
    step (flips between them: leading.flips_after_canvas), made one WarpChain (the steps' own
    objects otherwise)."""
    out: list[Transform] = []
    i = 0
    while i < len(steps):
        n = next((j for j in range(i, len(steps)) if not _chains(steps[j])), len(steps))
        after = next((j for j in range(n, len(steps)) if steps[j].group != "flips"), len(steps))
        if n - i > 1 and after < len(steps) and steps[after].group == "geometry":
            out.append(WarpChain(steps[i:n]))
            i = n
            continue
        out.append(steps[i])
        i += 1
    return out


def chain_warps(steps: list[Transform], every: list[Transform]) -> tuple[list[Transform], list[Transform]]:
    """`steps` and `every` (a Compose's, with its RGB steps) with each run of warps before a
    geometry step made one canvas step (chained)."""
    made = chained(steps)
    if len(made) == len(steps):
        return steps, every
    out = []
    for t in every:
        chain = next((c for c in made if isinstance(c, WarpChain) and any(t is w for w in c.warps)), None)
        if chain is None or t is chain.warps[0]:
            out.append(t if chain is None else chain)
    return made, out
