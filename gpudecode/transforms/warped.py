"""Detection targets through the warps: a sample's boxes and mask moved by a rotation, an
affine or a perspective warp exactly as torchvision.transforms.v2 moves a
`tv_tensors.BoundingBoxes` and a `tv_tensors.Mask` beside the image the warp is drawn for.

Boxes: each box's four corners through the warp's forward map (torchvision's: the affine
matrix built with inverted=False in pixel coordinates, about the image's centre or the
warp's `center`; a perspective's coefficients inverted), the box around them, clamped to
the result (an expanded rotation first shifts them onto its canvas). Masks: sampled by
nearest neighbour on the image's own grid (the matrix or coefficients the kernel warps
the image with), the mask's fill outside; as a gather of the mask's own values, so a mask
of any integer dtype keeps them exactly (torchvision samples a float32 copy: the same
values below 2 ** 24). Where torchvision rotates exactly (a quarter turn, no centre) the
mask is turned as the image is.

A `Drawn` is one warp as drawn for one image; the warp steps make them (warps.py:
`drawn`), transforms.masks gathers them for a batch (`drawn_warps`).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch

from .. import _native
from ..errors import TransformError, known
from .args import BILINEAR, NEAREST, on_device


__all__ = ["Drawn", "rotate_shear", "forward_affine", "affine_grid", "perspective_grid", "identity_grid",
           "nearest_sample", "warp_boxes_by", "perspective_coefficients", "grid_warp", "grid_sample_filled",
           "sample_filled", "sample_filled_batch", "perspective_image_grid", "warp_read_box", "native_nearest",
           "native_warp", "nearest_is_exact", "bilinear_is_exact", "edge_points"]

# whether the native nearest warp picks torch's pixels here (nearest_is_exact): None until first asked
_NEAREST_EXACT: bool | None = None
_BILINEAR_EXACT: bool | None = None  # (bilinear_is_exact)

_CORNERS = [[0, 1], [2, 1], [2, 3], [0, 3]]  # (XYXY columns: top-left, top-right, bottom-right, bottom-left)


def rotate_shear(angle: float, shear: Sequence[float]) -> tuple[float, float, float, float]:
    """The rotation-shear matrix RSS = R(angle) Sh(shear) (degrees; unit determinant),
    [[a, b], [c, d]], in torchvision's order of operations."""
    rot = math.radians(angle)
    sx, sy = math.radians(shear[0]), math.radians(shear[1])
    cos_sy, tan_sx = math.cos(sy), math.tan(sx)
    a = math.cos(rot - sy) / cos_sy
    b = -(a * tan_sx + math.sin(rot))
    c = math.sin(rot - sy) / cos_sy
    return a, b, c, math.cos(rot) - c * tan_sx


def forward_affine(center: Sequence[float], angle: float, translate: Sequence[float], scale: float,
                   shear: Sequence[float]) -> list[float]:
    """The matrix mapping input to output pixel coordinates of a warp rotating by `angle`
    degrees, scaling, shearing (degrees) and translating about `center` (pixels): T C RSS
    C^-1, in torchvision's order of operations (its inverted=False matrix, by which it
    moves boxes)."""
    cx, cy = center
    tx, ty = translate
    a, b, c, d = rotate_shear(angle, shear)
    m = [a * scale, b * scale, 0.0, c * scale, d * scale, 0.0]
    m[2] += cx + tx - m[0] * cx - m[1] * cy
    m[5] += cy + ty - m[3] * cx - m[4] * cy
    return m


def _inverted_perspective(c: Sequence[float]) -> tuple[list[float], list[float]]:
    """A perspective's coefficients (output to input) inverted, as torchvision inverts them
    to move boxes: (numerator rows [2, 3], denominator rows [2, 3]), in Python floats."""
    denom = c[0] * c[4] - c[1] * c[3]
    if denom == 0:
        raise ValueError(f"perspective coefficients {list(c)} cannot be inverted to move boxes")
    inv = [(c[4] - c[5] * c[7]) / denom, (-c[1] + c[2] * c[7]) / denom, (c[1] * c[5] - c[2] * c[4]) / denom,
           (-c[3] + c[5] * c[6]) / denom, (c[0] - c[2] * c[6]) / denom, (-c[0] * c[5] + c[2] * c[3]) / denom,
           (-c[4] * c[6] + c[3] * c[7]) / denom, (-c[0] * c[7] + c[1] * c[6]) / denom]
    return inv[:6], [inv[6], inv[7], 1.0] * 2


def _axes(oh: int, ow: int, centred: bool, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The output pixels' centres, x [1, ow] and y [oh, 1] (centred on the image, or from
    its corner), float32 as torchvision's grids hold them."""
    lo_x, lo_y = (-ow * 0.5 + 0.5, -oh * 0.5 + 0.5) if centred else (0.5, 0.5)
    return (torch.linspace(lo_x, lo_x + ow - 1, steps=ow, device=device).view(1, ow),
            torch.linspace(lo_y, lo_y + oh - 1, steps=oh, device=device).view(oh, 1))


def _rows(m: Sequence[float], x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """m [2, 3] (Python floats, taken as float32) applied to the points (x, y) of a grid:
    (m00 x + (m01 y + m02), m10 x + (m11 y + m12)), each [oh, ow], float32."""
    f = torch.tensor(m, dtype=torch.float32).tolist()
    return (x * f[0] + (y * f[1] + f[2]), x * f[3] + (y * f[4] + f[5]))


def affine_grid(matrix: Sequence[float], size: tuple[int, int], out: tuple[int, int],
                device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Where each output pixel of an affine warp of an image of `size` (h, w) to `out`
    (oh, ow) samples it, as (x, y) [oh, ow] in grid_sample's [-1, 1] coordinates: the
    output pixels' centres through `matrix` (output to input, centred), divided by the
    input's half size, in float32 as torchvision's tensor warps make them (to a rounding:
    its bmm's sums may round otherwise; the gather below sends a point to another pixel
    only where it falls within a rounding of the half-way between two)."""
    (h, w), (oh, ow) = size, out
    theta = torch.tensor(matrix, dtype=torch.float64).reshape(2, 3).to(torch.float32)
    scaled = (theta / torch.tensor([[0.5 * w], [0.5 * h]], dtype=torch.float32)).tolist()
    x, y = _axes(int(oh), int(ow), True, torch.device(device))
    return _rows(scaled[0] + scaled[1], x, y)


def perspective_grid(coefficients: Sequence[float], size: tuple[int, int],
                     device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Where each pixel of a perspective warp of an image of `size` (h, w) by
    `coefficients` (output to input pixels) samples it, as (x, y) [h, w] in grid_sample's
    coordinates, float32 as torchvision's grid (affine_grid's rounding)."""
    h, w = size
    c = [float(v) for v in coefficients]
    theta1 = torch.tensor([[c[0], c[1], c[2]], [c[3], c[4], c[5]]], dtype=torch.float32)
    scaled = (theta1 / torch.tensor([[0.5 * w], [0.5 * h]], dtype=torch.float32)).tolist()
    x, y = _axes(int(h), int(w), False, torch.device(device))
    nx, ny = _rows(scaled[0] + scaled[1], x, y)
    den = _rows([c[6], c[7], 1.0] * 2, x, y)[0]
    return nx.div_(den).sub_(1.0), ny.div_(den).sub_(1.0)


def identity_grid(h: int, w: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """The pixels' centres [1, h, w, 2] in grid_sample's [-1, 1] coordinates, as
    torchvision's elastic warps make them (the grid a displacement field is added to)."""
    grid = torch.empty(1, h, w, 2, dtype=torch.float32, device=device)
    grid[..., 0].copy_(torch.linspace((-w + 1) / w, (w - 1) / w, w, device=device))
    grid[..., 1].copy_(torch.linspace((-h + 1) / h, (h - 1) / h, h, device=device).unsqueeze_(-1))
    return grid


def nearest_sample(mask: torch.Tensor, grid: tuple[torch.Tensor, torch.Tensor], fill: int) -> torch.Tensor:
    """A mask [h, w] sampled at `grid` ((x, y) [oh, ow], grid_sample's coordinates) as
    grid_sample samples it (nearest, align_corners=False: the unnormalized coordinate
    rounded half to even), `fill` where a sample falls outside: [oh, ow] of the mask's
    dtype, its values gathered unchanged."""
    h, w = mask.shape
    gx, gy = grid
    padded = mask.new_full((h + 2, w + 2), fill)  # (a border of the fill: where a point outside is sent)
    padded[1:-1, 1:-1] = mask
    ux = gx.add(1).mul_(float(w)).mul_(0.5).sub_(0.5).round_().nan_to_num_(nan=-1.0).clamp_(-1, w).add_(1)
    uy = gy.add(1).mul_(float(h)).mul_(0.5).sub_(0.5).round_().nan_to_num_(nan=-1.0).clamp_(-1, h).add_(1)
    return torch.take(padded, uy.to(torch.int64).mul_(w + 2).add_(ux.to(torch.int64)))


@dataclass(frozen=True)
class Drawn:
    """One warp as drawn for one image of `size` (h, w), its result of `out` (h, w): an
    expanded rotation's canvas, else `size`.

    kind "affine": `forward` (6: input to output pixels, torchvision's box matrix),
    `inverse` (6: output to input, centred: the image's own, as the kernel samples it; None
    where torchvision turns the image exactly, by `turns` quarter turns), `shift` (x, y:
    an expanded rotation's, from the image's centre to its canvas's, where the image lies
    on it). kind "perspective": `coefficients` (8: output to input pixels). kind "field":
    `displacement()` makes the field [1, h, w, 2] (ElasticTransform's, drawn when asked
    for: a field a sample is a few MB), the image sampled at the identity grid plus it;
    its boxes move as torchvision's elastic_bounding_boxes moves them (each corner, its
    coordinates rounded up, to the identity grid minus the field there: an approximate
    inverse, torchvision's)."""

    kind: str
    size: tuple[int, int]
    out: tuple[int, int]
    forward: tuple[float, ...] = ()
    inverse: tuple[float, ...] | None = None
    turns: int = 0
    shift: tuple[float, float] = (0.0, 0.0)
    coefficients: tuple[float, ...] = ()
    displacement: Callable[[], torch.Tensor] | None = field(default=None, compare=False, repr=False)

    @property
    def collapses(self) -> bool:
        """A perspective that maps its whole image onto a line (its coefficients cannot be
        inverted: a side of one pixel draws four corners on one line), which no box
        survives: its boxes become empty ones at the origin, where torchvision raises."""
        c = self.coefficients
        return self.kind == "perspective" and c[0] * c[4] - c[1] * c[3] == 0

    def points(self, pts: np.ndarray) -> np.ndarray:
        """Points [K, 2] (x, y, float32) where the warp takes them, float32 [K, 2] (an
        expanded rotation's on its canvas)."""
        p = np.asarray(pts, np.float32).reshape(-1, 2)
        if self.kind == "field":
            return self._field_points(p)
        if self.kind == "perspective":
            num, den = (np.asarray(v, np.float32).reshape(2, 3) for v in _inverted_perspective(self.coefficients))
            return (_apply(num, p) / _apply(den, p)).astype(np.float32)
        moved = _apply(np.asarray(self.forward, np.float32).reshape(2, 3), p)
        if self.shift != (0.0, 0.0):  # (onto an expanded rotation's canvas, where its image lies)
            moved = moved + np.asarray(self.shift, np.float32)
        return moved.astype(np.float32)

    def _field_points(self, p: np.ndarray) -> np.ndarray:
        h, w = self.size
        inverse = identity_grid(h, w).sub_(known(self.displacement, "an elastic warp's field")())
        at = torch.from_numpy(np.ceil(p)).to(torch.int64)
        x, y = at[:, 0].clamp(0, w - 1), at[:, 1].clamp(0, h - 1)
        half = torch.tensor([w, h], dtype=torch.float32) * 0.5
        return inverse[0, y, x, :].add_(1).mul_(half).sub_(0.5).numpy()

    def boxes(self, xyxy: np.ndarray) -> np.ndarray:
        """XYXY boxes (float32 [K, 4]) warped: the box around each one's moved corners,
        clamped to the result's size (each empty where the warp `collapses`)."""
        b = np.asarray(xyxy, np.float32).reshape(-1, 4)
        if not len(b):
            return b.copy()
        if self.collapses:
            return np.zeros_like(b)
        pts = self.points(b[:, _CORNERS].reshape(-1, 2)).reshape(-1, 4, 2)
        oh, ow = (np.float32(v) for v in self.out)
        lo, hi = pts.min(axis=1), pts.max(axis=1)
        out = np.nan_to_num(np.concatenate([lo, hi], axis=1), nan=0.0)  # (a corner on the warp's horizon: 0/0)
        np.clip(out[:, 0::2], 0, ow, out=out[:, 0::2])
        np.clip(out[:, 1::2], 0, oh, out=out[:, 1::2])
        return out.astype(np.float32)

    def mask(self, mask: torch.Tensor, fill: int) -> torch.Tensor:
        """A mask [h, w] (of `size`) warped as the image is, by nearest neighbour, `fill`
        outside: [oh, ow] of its dtype, on its device."""
        if tuple(mask.shape) != tuple(self.size):
            raise ValueError(f"a {mask.shape[0]}x{mask.shape[1]} mask for a warp of a {self.size[0]}x{self.size[1]} "
                             "image")
        if self.kind == "field":
            field = known(self.displacement, "an elastic warp's field")()
            grid = identity_grid(*self.size, device=mask.device).add_(field.to(mask.device))[0]
            return nearest_sample(mask, (grid[..., 0], grid[..., 1]), fill)
        if self.kind == "perspective":
            return nearest_sample(mask, perspective_grid(self.coefficients, self.size, mask.device), fill)
        if self.inverse is None:
            return torch.rot90(mask, k=self.turns, dims=(0, 1)).clone() if self.turns else mask.clone()
        return nearest_sample(mask, affine_grid(self.inverse, self.size, self.out, mask.device), fill)


@dataclass(frozen=True)
class Mirrored:
    """A warp `drawn` of an image flipped after it (along x: `h`, y: `v`), applied where
    the kernel has flipped the image already (it flips first, mirrors.mirror_ops): its masks
    and boxes flipped back, warped, flipped again, which is torchvision's warp, then the
    flips."""

    drawn: Drawn
    h: bool
    v: bool

    def _flipped(self, xyxy: np.ndarray, size: tuple[int, int]) -> np.ndarray:
        b = np.asarray(xyxy, np.float32).reshape(-1, 4).copy()
        if self.h:
            b[:, [0, 2]] = np.float32(size[1]) - b[:, [2, 0]]
        if self.v:
            b[:, [1, 3]] = np.float32(size[0]) - b[:, [3, 1]]
        return b

    def boxes(self, xyxy: np.ndarray) -> np.ndarray:
        return self._flipped(self.drawn.boxes(self._flipped(xyxy, self.drawn.size)), self.drawn.out)

    def mask(self, mask: torch.Tensor, fill: int) -> torch.Tensor:
        dims = [d for d, on in ((0, self.v), (1, self.h)) if on]
        return torch.flip(self.drawn.mask(torch.flip(mask, dims), fill), dims)


@dataclass(frozen=True)
class Flipped:
    """An image of `size` (h, w) flipped (along x: `h`, y: `v`) before a warp makes its
    canvas (plan.canvas_flip): its masks and boxes flipped alike, first."""

    size: tuple[int, int]
    h: bool
    v: bool

    def boxes(self, xyxy: np.ndarray) -> np.ndarray:
        b = np.asarray(xyxy, np.float32).reshape(-1, 4).copy()
        if self.h:
            b[:, [0, 2]] = np.float32(self.size[1]) - b[:, [2, 0]]
        if self.v:
            b[:, [1, 3]] = np.float32(self.size[0]) - b[:, [3, 1]]
        return b

    def mask(self, mask: torch.Tensor, fill: int) -> torch.Tensor:
        dims = [d for d, on in ((0, self.v), (1, self.h)) if on]
        return torch.flip(mask, dims) if dims else mask


def mirrored(drawn: Drawn, h: bool, v: bool) -> "Drawn | Mirrored":
    """`drawn`, or its Mirrored where a flip along either axis follows it."""
    return Mirrored(drawn, h, v) if h or v else drawn


def _apply(m: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Points [K, 2] through rows m [2, 3] (x' = m00 x + m01 y + m02, ...), in float32."""
    return p @ m[:, :2].T + m[:, 2]


def warp_boxes_by(xyxy: np.ndarray, drawn: "Sequence[Drawn | Mirrored]") -> np.ndarray:
    """XYXY boxes (float32 [K, 4]) through each warp of `drawn` in turn, clamped after each
    as torchvision clamps after each transform."""
    for d in drawn:
        xyxy = d.boxes(xyxy)
    return xyxy


def perspective_coefficients(startpoints: Sequence[Sequence[int]],
                             endpoints: Sequence[Sequence[int]]) -> list[float]:
    """torchvision's _get_perspective_coeffs: the 8 coefficients mapping output to input
    pixels, (x, y) -> ((a x + b y + c) / (g x + h y + 1), (d x + e y + f) / (g x + h y + 1)),
    solved in float64 from the four corners (startpoints: the input's, endpoints: where
    they go), then rounded to float32 as torchvision rounds them."""
    rows, rhs = [], []
    for (x, y), (u, v) in zip(endpoints, startpoints):
        rows.append([x, y, 1, 0, 0, 0, -u * x, -u * y])
        rows.append([0, 0, 0, x, y, 1, -v * x, -v * y])
        rhs += [u, v]
    solution = np.linalg.lstsq(np.asarray(rows, np.float64), np.asarray(rhs, np.float64), rcond=None)[0]
    return solution.astype(np.float32).tolist()


def grid_warp(chw: torch.Tensor, matrix: Sequence[float], size: tuple[int, int], interpolation: float,
              fill: Any, window: Sequence[int] | None = None, out: torch.Tensor | None = None,
              part: tuple[int, int, int, int] | None = None) -> torch.Tensor:
    """An affine warp of a uint8 image [3, h, w] to [3, oh, ow] (`size`) as torchvision's
    tensor warps make it: the output pixels' centres through `matrix` (centred, scaled to
    grid_sample's [-1, 1] by the input's half size), then `grid_sample_filled`. `window`
    (top, left, height, width of the output): only those pixels, each as the whole
    output's (its centre's coordinate taken from the whole output's linspace). `out` (uint8
    [3, wh, ww]): written and returned. A nearest warp on the CPU picks its pixels natively
    (native_nearest), the same ones; there `part` (top, left, height, width) says `chw` is
    the part of an image of that size at (top, left) (a decoder's of `warp_read_box`).

    Raises:
        TransformError: a part where the native pick cannot run, or a pick outside it."""
    h, w = chw.shape[-2:] if part is None else part[2:]
    oh, ow = size
    t, l, wh, ww = (0, 0, oh, ow) if window is None else (int(v) for v in window)
    dev = chw.device
    native = _native_for(chw, interpolation, fill)
    if native is not None:  # (the same floats as below, made in numpy: a small image's warp is mostly this call's)
        scale_np = np.asarray(matrix, np.float32).reshape(2, 3).T / np.array([0.5 * w, 0.5 * h], np.float32)
        made = torch.empty((3, wh, ww), dtype=torch.uint8) if out is None or not out.is_contiguous() else out
        sample = _native.warp_affine_nearest if native[0] == NEAREST else _native.warp_affine_bilinear
        missing = sample(chw.numpy(), _centres(ow)[l:l + ww], _centres(oh)[t:t + wh], np.ascontiguousarray(scale_np),
                         native[1], made.numpy(), part)
        if missing:
            raise TransformError(f"a warp's window read {missing} pixels outside the part {part} decoded of its image")
        return made if out is None else (out if made is out else out.copy_(made))
    theta = torch.tensor(matrix, dtype=torch.float32).reshape(1, 2, 3)
    xs = torch.linspace(-ow * 0.5 + 0.5, ow * 0.5 - 0.5, steps=ow, device=dev)[l:l + ww]
    ys = torch.linspace(-oh * 0.5 + 0.5, oh * 0.5 - 0.5, steps=oh, device=dev)[t:t + wh]
    scale = theta[0].t().div(torch.tensor([0.5 * w, 0.5 * h], dtype=torch.float32))
    if part is not None and tuple(part) != (0, 0, *chw.shape[-2:]):
        raise TransformError(f"a warp's canvas needs the whole image here (the native warp on the CPU reads a part): "
                             f"{tuple(chw.shape[-2:])} pixels of {tuple(part[2:])}")
    scale = on_device(scale, dev)
    # torchvision's grid is the centres [x, y, 1] times `scale` by bmm: here its three products, summed in that
    # order, the same floats (tests/test_rotation_expand.py), made by rows and columns (a bmm of three is slow on the
    # CPU)
    grid = torch.add(xs.view(1, 1, ww, 1) * scale[0], ys.view(1, wh, 1, 1) * scale[1]).add_(scale[2])
    made = grid_sample_filled(chw, grid, interpolation, fill)
    return made if out is None else out.copy_(made)


@functools.lru_cache(maxsize=512)
def _centres(n: int) -> np.ndarray:
    """The pixel centres of a side of `n`, centred (torch.linspace's floats, as grid_warp's
    grid has them), read-only: kept for the next warp of that size."""
    out = torch.linspace(-n * 0.5 + 0.5, n * 0.5 - 0.5, steps=n).numpy()
    out.setflags(write=False)
    return out


def warp_read_box(matrix: Sequence[float] | None, size: tuple[int, int], canvas: tuple[int, int],
                  window: Sequence[int]) -> tuple[int, int, int, int]:
    """The part of an image of `size` (top, left, height, width) that the nearest picks of
    `window` (top, left, height, width) of a warp's canvas of `canvas` size read, under
    grid_warp's `matrix` (None: an exact quarter turn, which reads the whole image): the
    box around the window's corners mapped into the image, a pixel wider each way than the
    rounding can reach, inside the image; (0, 0, 1, 1) where the window picks none of it
    (fill only). What a decoder need decode of it."""
    h, w = size
    if matrix is None:
        return (0, 0, h, w)
    a, b, c, d, e, f = (float(v) for v in matrix)
    oh, ow = canvas
    t, l, wh, ww = (int(v) for v in window)
    xs = (l - ow * 0.5 + 0.5, l + ww - 1 - ow * 0.5 + 0.5)  # (the window's outer pixel centres, centred)
    ys = (t - oh * 0.5 + 0.5, t + wh - 1 - oh * 0.5 + 0.5)
    px = [x * a + y * b + c + w * 0.5 - 0.5 for x in xs for y in ys]  # (in the image's pixel units)
    py = [x * d + y * e + f + h * 0.5 - 0.5 for x in xs for y in ys]
    x0, x1 = max(0, math.floor(min(px)) - 1), min(w - 1, math.ceil(max(px)) + 1)
    y0, y1 = max(0, math.floor(min(py)) - 1), min(h - 1, math.ceil(max(py)) + 1)
    if x0 > x1 or y0 > y1:
        return (0, 0, 1, 1)
    return (y0, x0, y1 - y0 + 1, x1 - x0 + 1)


def nearest_is_exact() -> bool:
    """Whether `_native.warp_affine_nearest` picks the pixels torch's CPU grid_sample picks
    here. torch's source unnormalizes a grid point as (g + 1) * size / 2 - 0.5; its x86
    wheels' AVX2 and AVX-512 kernels round it as one fused multiply-subtract (measured:
    tests/test_native_warp.py), and the native code fuses it alike on a CPU with FMA; a
    torch built otherwise would round some points apart. So it is asked once: the CPU (AVX2
    and FMA, and torch's own capability), then a probe of points beside a size's pixel
    edges, one of them where the two roundings pick another pixel, sampled both ways."""
    global _NEAREST_EXACT
    if _NEAREST_EXACT is None:
        _NEAREST_EXACT = bool(getattr(_native, "warp_nearest_exact", False)) and \
            torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512") and _probe_agrees()
    return _NEAREST_EXACT


def bilinear_is_exact() -> bool:
    """Whether `_native.warp_affine_bilinear` makes torch's bilinear warp here, byte for
    byte: where the nearest pick is exact (nearest_is_exact) and a probe agrees (the four
    taps summed as torch's wheels fuse them: measured, tests/test_native_warp.py)."""
    global _BILINEAR_EXACT
    if not nearest_is_exact():
        return False
    if _BILINEAR_EXACT is None:
        _BILINEAR_EXACT = _bilinear_probe_agrees()
    return _BILINEAR_EXACT


def edge_points(size: int, floats: int = 4) -> np.ndarray:
    """grid_sample's coordinates (float32) where a side of `size` pixels has its pixels'
    edges (each unnormalizes to a half pixel), and `floats` floats either side of each:
    where a rounding apart picks the neighbouring pixel."""
    edges = ((np.arange(-2, size + 1) + 1) / (size / 2) - 1).astype(np.float32)
    points = [edges]
    for toward in (-9.0, 9.0):
        moved = edges
        for _ in range(floats):
            moved = np.nextafter(moved, np.float32(toward))
            points.append(moved)
    return np.concatenate(points)


def _probe_agrees() -> bool:
    """The native pick against grid_sample's on a row of 194 pixels, at each pixel edge's
    grid point and 4 floats either side (at -0.9896907 an unfused unnormalize picks pixel 0,
    a fused one pixel 1)."""
    size = 194
    xs, ys = edge_points(size), np.zeros(1, np.float32)
    img = torch.arange(size, dtype=torch.uint8).view(1, 1, size).expand(3, 1, size)
    got = np.empty((3, 1, len(xs)), np.uint8)
    _native.warp_affine_nearest(img.numpy(), xs, ys, np.array([1, 0, 0, 1, 0, 0], np.float32),
                                np.full(3, 255, np.uint8), got)
    grid = torch.from_numpy(np.stack([xs, np.zeros_like(xs)], -1)).view(1, 1, -1, 2)
    want = torch.nn.functional.grid_sample(img[:1].float()[None], grid, mode="nearest", padding_mode="zeros",
                                           align_corners=False)[0, 0, 0]
    inside = torch.nn.functional.grid_sample(torch.ones(1, 1, 1, size), grid, mode="nearest", padding_mode="zeros",
                                             align_corners=False)[0, 0, 0] > 0.5
    return bool(torch.equal(torch.from_numpy(got[0, 0]).float(), torch.where(inside, want, 255.0)))


def probe_image(h: int, w: int) -> torch.Tensor:
    """The native warps' probes' image: uint8 [3, h, w] of levels scattered over 0-255
    (each pixel's own, no run of equal neighbours), so that a tap or pick apart shows."""
    return torch.arange(h * w * 3, dtype=torch.int64).mul_(7919).remainder_(256).to(torch.uint8).view(3, h, w)


def _bilinear_probe_agrees() -> bool:
    """The native bilinear warp against torch's ops (grid_sample_filled) on a 37x53 image
    of levels, at points beside its pixel edges and between them, with a fill and without."""
    h, w = 37, 53
    img = probe_image(h, w)
    xs, ys = edge_points(w, 2)[::3].copy(), edge_points(h, 2)[::2].copy()
    grid = torch.stack(torch.broadcast_tensors(torch.from_numpy(xs).view(1, -1), torch.from_numpy(ys).view(-1, 1)), -1)
    for fill in (None, (10.0, 20.0, 30.0)):
        got = np.empty((3, len(ys), len(xs)), np.uint8)
        _native.warp_affine_bilinear(img.numpy(), xs, ys, np.array([1, 0, 0, 1, 0, 0], np.float32),
                                     None if fill is None else np.array(fill, np.float32), got)
        if not torch.equal(torch.from_numpy(got), grid_sample_filled(img, grid[None], BILINEAR, fill)):
            return False
    return True


def _native_for(chw: torch.Tensor, interpolation: float, fill: Any) -> tuple[float, np.ndarray | None] | None:
    """native_warp's answer for a warp of `chw`: None unless it is a uint8 image on the CPU."""
    return native_warp(interpolation, fill) if chw.device.type == "cpu" and chw.dtype == torch.uint8 else None


def native_nearest(chw: torch.Tensor, interpolation: float, fill: Any) -> np.ndarray | None:
    """The fill's 3 levels (uint8) where `_native.warp_affine_nearest` picks torch's pixels
    for this warp of `chw` (grid_warp's choice, for nearest), else None."""
    native = _native_for(chw, interpolation, fill) if interpolation == NEAREST else None
    return None if native is None else native[1]


def native_warp(interpolation: float, fill: Any) -> tuple[float, np.ndarray | None] | None:
    """(interpolation, the fill's levels) where a warp of `interpolation` and `fill` of a
    uint8 image on the CPU is made natively, else None: nearest (levels uint8 [3]; none:
    zeros) where nearest_is_exact, a fill of whole levels; bilinear (levels float32 [3], or
    None: no fill) where bilinear_is_exact; levels from 0 to 255."""
    if interpolation not in (NEAREST, BILINEAR) or not nearest_is_exact():
        return None
    if interpolation == BILINEAR and not bilinear_is_exact():
        return None
    if fill is None:
        return (interpolation, np.zeros(3, np.uint8) if interpolation == NEAREST else None)
    levels = [float(v) for v in (fill if isinstance(fill, Sequence) else [fill])]
    levels = levels * (3 // len(levels)) if len(levels) in (1, 3) else []
    if len(levels) != 3 or not all(0 <= v <= 255 for v in levels):
        return None
    if interpolation == BILINEAR:
        return (interpolation, np.array(levels, np.float32))
    return None if any(v != int(v) for v in levels) else (interpolation, np.array(levels, np.uint8))


def grid_sample_filled(chw: torch.Tensor, grid: torch.Tensor, interpolation: float, fill: Any) -> torch.Tensor:
    """A uint8 image [3, h, w] sampled at `grid` ([1, oh, ow, 2], grid_sample's [-1, 1]
    coordinates) as torchvision's tensor warps sample it: grid_sample (zeros outside), the
    fill (levels; None: none) blended by the sampled coverage (nearest: where it is under
    half), rounded to uint8 [3, oh, ow]."""
    return sample_filled_batch(chw.unsqueeze(0), grid, interpolation, fill)[0].round_().to(torch.uint8)


def sample_filled(chw: torch.Tensor, grid: torch.Tensor, interpolation: float, fill: Any,
                  scale: float = 1.0) -> torch.Tensor:
    """grid_sample_filled of a float image [3, h, w], unrounded: float32 [3, oh, ow]; the
    fill's levels times `scale` (1/255 for an image on the [0, 1] scale)."""
    return sample_filled_batch(chw.unsqueeze(0), grid, interpolation, fill, scale)[0]


def sample_filled_batch(images: torch.Tensor, grid: torch.Tensor, interpolation: float, fill: Any,
                        scale: float = 1.0) -> torch.Tensor:
    """sample_filled of images [N, 3, h, w] (float, or uint8: converted as they are
    copied) at grids [N, oh, ow, 2] in one grid_sample (each image's values as alone:
    grid_sample and the fill's blend work pixel by pixel): float32 [N, 3, oh, ow]."""
    n, _, h, w = images.shape
    oh, ow = grid.shape[1:3]
    dev = images.device
    levels = None if fill is None else [float(v) * scale for v in (fill if isinstance(fill, Sequence) else [fill] * 3)]
    mode = "nearest" if interpolation == NEAREST else "bilinear"
    if levels is not None and mode == "nearest" and not any(levels):  # (a zero fill where nearest picks outside:
        levels = None  # grid_sample's zeros already, and the blend's coverage channel not sampled)
    if levels is not None:  # (a fourth channel of ones: the coverage the fill is blended by)
        img = torch.empty((n, 4, h, w), dtype=torch.float32, device=dev)
        img[:, :3].copy_(images)
        img[:, 3].fill_(1)
    else:
        img = images.to(torch.float32)
    out = torch.nn.functional.grid_sample(img, grid, mode=mode, padding_mode="zeros", align_corners=False)
    if levels is not None:
        out, mask = out[:, :3], out[:, 3:].expand(n, 3, oh, ow)
        fill_img = on_device(torch.tensor(levels * (3 // len(levels)), dtype=torch.float32), dev).view(1, 3, 1, 1)
        if mode == "nearest":  # (the fill where the coverage is under half: a mask of one channel, filled in place)
            out, outside = out.contiguous(), mask[:, :1] < 0.5
            for c, level in enumerate(levels * (3 // len(levels))):
                out[:, c:c + 1].masked_fill_(outside, level)
        else:
            out = out.sub_(fill_img).mul_(mask).add_(fill_img)  # (in place: grid_sample's own output)
    return out


def mirrored_perspective(c: list[float], size: tuple[int, int], h: bool, v: bool) -> list[float]:
    """torchvision's perspective coefficients `c` (a pixel (x, y) of the output, at its
    centre x + 0.5, reads the input at ((c0 x + c1 y + c2) / D, (c3 x + c4 y + c5) / D),
    D = c6 x + c7 y + 1) of the warp conjugated by a mirror of each axis `h` and `v` (x to
    w - x, y to h - y on an image of `size`), scaled so that D's constant is 1 again."""
    height, width = size
    if h:
        k, w = c[6] * width + 1.0, float(width)
        c = [(c[0] - w * c[6]) / k, (w * c[7] - c[1]) / k, (w * k - c[0] * w - c[2]) / k, -c[3] / k, c[4] / k,
             (c[3] * w + c[5]) / k, -c[6] / k, c[7] / k]
    if v:
        k, t = c[7] * height + 1.0, float(height)
        c = [c[0] / k, -c[1] / k, (c[1] * t + c[2]) / k, (t * c[6] - c[3]) / k, (c[4] - t * c[7]) / k,
             (t * k - c[4] * t - c[5]) / k, c[6] / k, -c[7] / k]
    return c


def perspective_image_grid(coefficients: Sequence[float], size: tuple[int, int], device: torch.device) -> torch.Tensor:
    """F.perspective's sampling grid for an image of `size` [1, h, w, 2] (grid_sample's
    coordinates), made with the same float32 ops as torchvision makes it for an image: the
    pixel centres through the numerator's and the denominator's rows by bmm, divided, less
    1; so grid_sample picks the pixels F.perspective picks. (perspective_grid, the masks',
    rounds otherwise: about 1e-4 of an image's pixels differ by a level through it.)"""
    h, w = size
    c = [float(v) for v in coefficients]
    num = torch.tensor([[c[0], c[1], c[2]], [c[3], c[4], c[5]]], dtype=torch.float32, device=device)[None]
    den = torch.tensor([[c[6], c[7], 1.0], [c[6], c[7], 1.0]], dtype=torch.float32, device=device)[None]
    centres = torch.empty(1, h, w, 3, dtype=torch.float32, device=device)
    centres[..., 0].copy_(torch.linspace(0.5, w - 0.5, steps=w, device=device))
    centres[..., 1].copy_(torch.linspace(0.5, h - 0.5, steps=h, device=device).unsqueeze_(-1))
    centres[..., 2].fill_(1)
    flat = centres.view(1, h * w, 3)
    scaled = num.transpose(1, 2).div_(torch.tensor([0.5 * w, 0.5 * h], dtype=torch.float32, device=device))
    return flat.bmm(scaled).div_(flat.bmm(den.transpose(1, 2))).sub_(1.0).view(1, h, w, 2)
