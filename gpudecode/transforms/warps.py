"""The warps of a sample's program (barriers: each output pixel reads the whole image),
with torchvision's names, arguments and draws: RandomRotation, RandomAffine,
RandomPerspective; and the matrices the policies' warps share."""
from __future__ import annotations

import functools
import math
import numbers
import random
from typing import Any, Sequence

import numpy as np
import torch

from ..errors import TransformError, known
from ..kernels.cpu_twin import blur_field
from ..kernels.ops import AFFINE, PERSPECTIVE
from .base import Transform, _Step, in_fingerprint
from .args import NEAREST, fill_rgb, on_device, warp_interpolation
from .convert import warp_fill
from .perspective import native_perspective
from .warped import (Drawn, forward_affine, grid_sample_filled, grid_warp, identity_grid, perspective_coefficients,
                     perspective_image_grid, rotate_shear, sample_filled, sample_filled_batch)


INTEGER_MAP = 2.0  # AFFINE's interpolation argument (NEAREST, BILINEAR: args.py)


def interpolation_name(code: float) -> str:
    """The name a warp's interpolation code is given by (what its constructor takes)."""
    return "nearest" if code == NEAREST else "bilinear"


def named_repr(t: Transform) -> str:
    """The repr of a warp or a policy as its constructor takes it: its public attributes,
    the interpolation by name (its kernel code is internal), no center where its class
    takes none; in a fingerprint (base.fingerprint_text), the earlier form (every public
    attribute as it is)."""
    import inspect

    if in_fingerprint():
        return Transform.__repr__(t)
    takes = inspect.signature(type(t).__init__).parameters
    shown = {k: v for k, v in vars(t).items() if not k.startswith("_") and (k != "center" or k in takes)}
    shown["interpolation"] = interpolation_name(shown["interpolation"])
    return f"{type(t).__name__}({', '.join(f'{k}={v!r}' for k, v in shown.items())})"


def inverse_affine(center: Sequence[float], angle: float, translate: Sequence[float], scale: float,
                   shear: Sequence[float]) -> list[float]:
    """The matrix mapping output to input coordinates (centred on the image) of a warp
    rotating by `angle` degrees, scaling, shearing (degrees) and translating about
    `center`: rotation-shear RSS = R(angle) Sh(shear); inverse = C RSS^-1 / scale C^-1 T^-1.
    The same formula and order of operations as torchvision's, so the same float32 theta."""
    cx, cy = center
    tx, ty = translate
    a, b, c, d = rotate_shear(angle, shear)
    m = [d / scale, -b / scale, 0.0, -c / scale, a / scale, 0.0]
    m[2] += m[0] * (-(cx + tx)) + m[1] * (-(cy + ty))
    m[5] += m[3] * (-(cx + tx)) + m[4] * (-(cy + ty))
    m[2] += cx
    m[5] += cy
    return m


def affine_args(matrix: Sequence[float], size: tuple[int, int], interpolation: float,
                fill: tuple[float, float, float] | None) -> tuple[float, ...]:
    """AFFINE's kernel arguments: theta's rows divided by (w/2, h/2) in float32, as
    torchvision's _affine_grid divides them, then the interpolation and the fill (NaN:
    none)."""
    h, w = size
    theta = np.asarray(matrix, np.float32)  # (numpy's float32 arithmetic is torch's: IEEE, one rounding a step)
    half = np.asarray([0.5 * w] * 3 + [0.5 * h] * 3, np.float32)
    scaled = (theta / half).tolist()
    return (*scaled, interpolation, *(fill if fill is not None else (math.nan,) * 3))


def rotation_args(angle: float, size: tuple[int, int], interpolation: float, fill: Any,
                  center: Sequence[float] | None = None) -> tuple[float, ...] | None:
    """F.rotate's warp as AFFINE args (None: the identity). Where torchvision takes its
    exact fast paths (no center; 0 and 180 degrees; 90 and 270 on square images) the
    kernel maps integer pixels instead, so the result is the same exact permutation."""
    h, w = size
    angle = angle % 360
    if center is None:
        if angle == 0:
            return None
        if angle == 180 or (h == w and angle in (90, 270)):
            # source (x, y) = (a0 x + a1 y + a2, a3 x + a4 y + a5), in pixels
            maps = {180: (-1, 0, w - 1, 0, -1, h - 1), 90: (0, -1, w - 1, 1, 0, 0), 270: (0, 1, 0, -1, 0, h - 1)}
            return (*map(float, maps[int(angle)]), INTEGER_MAP, math.nan, math.nan, math.nan)
    cf = [0.0, 0.0] if center is None else [c - s * 0.5 for c, s in zip(center, (w, h))]
    return affine_args(inverse_affine(cf, -angle, (0.0, 0.0), 1.0, (0.0, 0.0)), size, interpolation, fill)


def warp_args(size: tuple[int, int], angle: float, translate: Sequence[float], scale: float, shear: Sequence[float],
              interpolation: float, fill: Any, center: Sequence[float] | None = None) -> tuple[float, ...]:
    """F.affine's warp as AFFINE args."""
    h, w = size
    cf = [0.0, 0.0] if center is None else [c - s * 0.5 for c, s in zip(center, (w, h))]
    return affine_args(inverse_affine(cf, angle, [float(t) for t in translate], scale, shear), size, interpolation,
                       fill)


class _Warp(_Step):
    moves = True
    follows = True  # (boxes and masks follow it: `drawn`)
    # first, before a geometry step, a warp is a canvas (transforms.canvas): the whole image warped as torchvision
    # warps it, then cropped; elsewhere a step of the program. `paint` makes it, grid_sample's planar layout
    canvas_first = True
    canvas_layout = "CHW"

    def canvas_size(self, p: dict, size: tuple[int, int]) -> tuple[int, int]:
        """A canvas of the image's size (an expanded rotation's and the elastic field's say otherwise)."""
        return size

    @property
    def keeps_size(self) -> bool:
        """Its canvas has the image's size (a Resize of the shorter side alone may follow it)."""
        return not getattr(self, "expand", False)

    @property
    def mirrors(self) -> bool:
        """A flip may follow it in the program: its op (AFFINE, PERSPECTIVE) is mirrored
        where the sample is flipped (mirrors.mirror_ops), as the kernel flips first. Not an
        expanded rotation (its canvas is not the image's size)."""
        return self.keeps_size

    def _setup(self, interpolation: Any, fill: Any, center: Sequence[float] | None) -> None:
        self.interpolation = warp_interpolation(interpolation)
        self.fill = fill
        self._fill = fill_rgb(fill)
        if center is not None and len(center) != 2:
            raise ValueError("center should be a sequence of length 2")
        self.center = None if center is None else (float(center[0]), float(center[1]))

    def __repr__(self) -> str:
        return named_repr(self)


def _degrees(degrees: Any, name: str = "degrees") -> tuple[float, float]:
    if isinstance(degrees, numbers.Real):
        if degrees < 0:
            raise ValueError(f"If {name} is a single number, it must be positive.")
        return _finite((-float(degrees), float(degrees)), name)
    if isinstance(degrees, Sequence) and len(degrees) == 2:
        return _finite((float(degrees[0]), float(degrees[1])), name)
    raise TypeError(f"{name} should be a single number or a sequence with length 2.")


def _finite(pair: tuple[float, float], name: str) -> tuple[float, float]:
    """`pair`, when both are finite numbers (NaN and infinities refused where given: each
    would fail, or drop every image, only when drawn)."""
    if not all(math.isfinite(v) for v in pair):
        raise ValueError(f"{name} must be finite numbers, not {pair}")
    return pair


class RandomRotation(_Warp, converts="torchvision.RandomRotation"):
    """torchvision's RandomRotation: the image rotated by an angle uniform in `degrees`
    (make_params: "rotation": {"angle"}), nearest or bilinear, `fill` (uint8 levels;
    torchvision's default 0) outside, about `center`. expand=False: a step of each
    sample's program, the output keeps its size, or, first and followed by a geometry step
    (`[RandomRotation(30), RandomResizedCrop(224), ...]`), a canvas of the image's size
    that the geometry crops, as torchvision rotates the whole image before its crop;
    expand=True: a canvas step (first, before the geometry: transforms.canvas), the whole
    rotated image on a canvas of its bounding box, as F.rotate(expand=True) makes it."""

    keys = ("rotation",)

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(t.degrees, t.interpolation, bool(t.expand), t.center, warp_fill(t, floats))

    def __init__(self, degrees: Any, interpolation: Any = "nearest", expand: bool = False,
                 center: Sequence[float] | None = None, fill: Any = 0) -> None:
        self.degrees = _degrees(degrees)
        self.expand = bool(expand)
        self._setup(interpolation, fill, center)

    canvas_why = "it changes the image's size"

    @property
    def turns(self) -> int | None:
        """The quarter turns of the one angle it draws, where F.rotate turns the image exactly
        (no centre, degrees (a, a), a a multiple of 90: torch.rot90's pixels, expanded or
        not); else None."""
        a, b = self.degrees
        return int(a % 360) // 90 if self.center is None and a == b and a % 90 == 0 else None

    @property
    def canvas(self) -> bool:
        """A canvas step (expand=True): the image's size changes, so it comes first. Not an
        exact half turn (or none), which keeps every image's size."""
        return self.expand and self.turns not in (0, 2)

    @property
    def keeps_size(self) -> bool:
        return not self.canvas

    @property
    def square_turn(self) -> bool:
        """An exact quarter turn, expanded: a square image keeps its size (after a geometry step
        that makes squares, as a non-expanded turn: after._AfterGeometry)."""
        return self.expand and self.turns in (1, 3)

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        return {"rotation": {"angle": rng.uniform(*self.degrees)}}

    def emit(self, p: dict, size: tuple[int, int], prog: list) -> None:
        r = p.get("rotation")
        if r is not None:
            a = rotation_args(r["angle"], size, self.interpolation, self._fill, self.center)
            if a is not None:
                prog.append((AFFINE, a))

    def drawn(self, p: dict, size: tuple[int, int]) -> list[Drawn]:
        r = p.get("rotation")
        return [] if r is None else [rotation_drawn(r["angle"], size, self.center, self.expand)]

    def canvas_size(self, p: dict, size: tuple[int, int]) -> tuple[int, int]:
        """The rotated image's (h, w): with expand=True its bounding box's, as F.rotate
        gives it; else the image's."""
        return expanded_rotation(p["rotation"]["angle"], size, self.center)[0] if self.expand else size

    def paint(self, canvas: torch.Tensor, image: torch.Tensor, p: dict,
              window: Sequence[int] | None = None, part: tuple[int, int, int, int] | None = None) -> None:
        """F.rotate(expand=self.expand) of `image` (uint8 HWC) into `canvas` (uint8 [3, h,
        w], canvas_size's; with `window`, that part of it only: `paints_window`). `part`
        (top, left, height, width): `image` is that part of an image of that size (a nearest
        warp on the CPU: grid_warp's)."""
        size = part[2:] if part is not None else (int(image.shape[0]), int(image.shape[1]))
        matrix = self.sampling_matrix(p, size)
        chw = image.permute(2, 0, 1)
        t, l, ch, cw = (0, 0, *canvas.shape[1:]) if window is None else window
        if matrix is None:  # torchvision's exact paths: a quarter turn, or none (of the whole image: warp_read_box)
            turns = int(p["rotation"]["angle"] % 360) // 90
            canvas.copy_((torch.rot90(chw, k=turns, dims=(-2, -1)) if turns else chw)[:, t:t + ch, l:l + cw])
            return
        grid_warp(chw, matrix, self.canvas_size(p, size), self.interpolation, self.fill, window, out=canvas, part=part)

    def sampling_matrix(self, p: dict, size: tuple[int, int]) -> list[float] | None:
        """The inverse matrix `paint` samples an image of `size` through (grid_warp's), or
        None where torchvision turns it exactly (a quarter turn about the centre, or none)."""
        angle = p["rotation"]["angle"] % 360
        h, w = size
        matrix = rotation_matrix(angle, (h, w), self.center)
        if matrix is None and not self.expand and angle in (90.0, 270.0) and h != w:  # (a quarter turn keeps a
            matrix = inverse_affine([0.0, 0.0], -angle, (0.0, 0.0), 1.0, (0.0, 0.0))  # square's size only)
        return matrix

    paints_window = True  # (paint(window=): the part of the canvas a crop reads, as the whole canvas has it)


def rotation_matrix(angle: float, size: tuple[int, int], center: Sequence[float] | None) -> list[float] | None:
    """F.rotate's inverse matrix for an image of `size` (None where torchvision takes a
    transpose: no center, a multiple of 90 degrees)."""
    h, w = size
    angle = angle % 360
    if center is None and angle in (0.0, 90.0, 180.0, 270.0):
        return None
    cf = [0.0, 0.0] if center is None else [c - s * 0.5 for c, s in zip(center, (w, h))]
    return inverse_affine(cf, -angle, (0.0, 0.0), 1.0, (0.0, 0.0))


def rotation_drawn(angle: float, size: tuple[int, int], center: Sequence[float] | None, expand: bool) -> Drawn:
    """F.rotate's warp of an image of `size` as its boxes and mask follow it: the boxes by
    torchvision's forward matrix of the angle as drawn (rotate_bounding_boxes'), the mask
    as the image is sampled (turned exactly where torchvision turns it). Expanded, the
    boxes are shifted onto the canvas where the image lies on it (its centre on the
    canvas's, as F.rotate samples it), and clamped to the image's canvas: torchvision
    shifts them by the least of the image's moved corners and clamps them to a canvas it
    works out anew, which can be a pixel off the image's (F.rotate's boxes then lie up to
    a pixel off their image, and a resize after it scales them by another ratio)."""
    h, w = size
    forward = forward_affine([w * 0.5, h * 0.5] if center is None else center, -angle, (0.0, 0.0), 1.0, (0.0, 0.0))
    a = angle % 360
    out, inverse = expanded_rotation(angle, size, center) if expand else ((h, w), rotation_matrix(angle, size, center))
    turns = int(a) // 90 if inverse is None else 0
    if inverse is None and not expand and a in (90.0, 270.0) and h != w:  # (a quarter turn keeps a square's size only)
        inverse = inverse_affine([0.0, 0.0], -a, (0.0, 0.0), 1.0, (0.0, 0.0))
        turns = 0
    shift = ((out[1] - w) * 0.5, (out[0] - h) * 0.5)  # (the image's centre is its canvas's: F.rotate's grid)
    return Drawn("affine", (h, w), out, tuple(forward), None if inverse is None else tuple(inverse), turns, shift)


def expanded_rotation(angle: float, size: tuple[int, int], center: Sequence[float] | None
                      ) -> tuple[tuple[int, int], list[float] | None]:
    """F.rotate(expand=True)'s output (h, w) for an image of `size`, and its inverse matrix
    (None where torchvision takes a transpose: no center, a multiple of 90 degrees). The
    size is the bounding box of the matrix's corners, computed with torch's float32 ops in
    torchvision's order (its 1e-4 truncation before the ceil and floor)."""
    h, w = size
    matrix = rotation_matrix(angle, size, center)
    if matrix is None:
        return ((w, h) if angle % 360 in (90.0, 270.0) else (h, w)), None
    hw, hh = 0.5 * w, 0.5 * h
    corners = torch.tensor([[-hw, -hh, 1.0], [-hw, hh, 1.0], [hw, hh, 1.0], [hw, -hh, 1.0]])
    moved = torch.matmul(corners, torch.tensor(matrix, dtype=torch.float).view(2, 3).T)
    lo, hi = moved.aminmax(dim=0)
    half = torch.tensor((hw, hh))
    lo, hi = lo + half, hi + half
    hi = (hi * 1e4).trunc() * 1e-4
    lo = (lo * 1e4).trunc() * 1e-4
    extent = hi.ceil() - lo.floor()
    return (int(extent[1]), int(extent[0])), matrix


def _pair(value: Any, name: str) -> tuple[float, float]:
    if isinstance(value, numbers.Real):
        return _finite((float(value), float(value)), name)
    if isinstance(value, Sequence) and len(value) in (1, 2):
        return _finite((float(value[0]), float(value[-1])), name)
    raise TypeError(f"{name} should be a number or a sequence of one or two numbers, not {value!r}")


def _blur_kernel(size: int, sigma: float) -> torch.Tensor:
    """torchvision's 1-D gaussian: size points evenly over +-(size - 1) / (2 sqrt 2),
    softmax of -(x / sigma)^2."""
    lim = (size - 1) / (2.0 * math.sqrt(2.0))
    return torch.softmax(torch.linspace(-lim, lim, steps=size).div(sigma).pow(2).neg(), dim=0)


class ElasticTransform(_Warp, converts="torchvision.ElasticTransform"):
    """torchvision's ElasticTransform, as a canvas step (first, before the geometry): each
    image displaced by a field of its own size — per axis uniform noise in [-1, 1) blurred
    by torchvision's gaussian (kernel int(8 sigma + 1), made odd; reflected edges),
    scaled by alpha / the side — then sampled (nearest or bilinear, `fill` outside) as
    F.elastic samples it. The field's noise comes from torch.rand on a generator seeded
    from the sample's stream (make_params: "displacement_seed"; `displacement` makes the
    field from it), so it is torchvision's distribution and the same for a seed, not
    torchvision's global generator's numbers. The blur is applied a side at a time (the 2-D
    kernel is their product). After the geometry (last, then only Normalize, ToDtype,
    RandomErasing), or with no geometry, it warps the kernel's output instead
    (warp_output: the field drawn at the output's size). Masks and boxes follow it either
    way (`drawn`: the same field; transforms.warped)."""

    @property
    def mirrors(self) -> bool:  # (it warps the kernel's output, after the flips: only the output's steps follow it)
        return False

    group = "canvas"
    canvas = True
    keys = ("displacement_seed",)
    canvas_why = "its field is drawn at the decoded image's size and sampled from the whole image"
    after_kernel = True  # after the geometry too: last, on the kernel's output (warp_output)

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(list(t.alpha), list(t.sigma), t.interpolation, warp_fill(t, floats))

    def __init__(self, alpha: Any = 50.0, sigma: Any = 5.0, interpolation: Any = "bilinear", fill: Any = 0) -> None:
        self.alpha = _pair(alpha, "alpha")
        self.sigma = _pair(sigma, "sigma")
        self._setup(interpolation, fill, None)

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        seed = rng.getrandbits(63)
        self.check_size(size)  # (an image too small for the blur: its own error, when drawn)
        return {"displacement_seed": seed}

    def check_size(self, size: tuple[int, int]) -> None:
        """Refuses an image (or, after the crop, an output size) too small for the field's
        blur (TransformError, a ValueError: a drawn image's is that image's error)."""
        h, w = size
        for sigma in self.sigma:
            k = int(8 * sigma + 1) if sigma > 0.0 else 1
            k += 1 - k % 2
            if sigma > 0.0 and k // 2 >= min(h, w):
                raise TransformError(f"ElasticTransform(sigma={list(self.sigma)}) blurs with a kernel of {k}: a "
                                     f"{h}x{w} image is too small for its reflected edges")

    def canvas_size(self, p: dict, size: tuple[int, int]) -> tuple[int, int]:
        return size

    def displacement(self, p: dict, size: tuple[int, int], device: Any = "cpu") -> torch.Tensor:
        """The field [1, h, w, 2] of these params (torchvision's make_params' "displacement")."""
        h, w = size
        gen = torch.Generator().manual_seed(int(p["displacement_seed"]))
        sides = []
        for axis, extent in ((0, w), (1, h)):
            d = torch.rand(1, 1, h, w, generator=gen) * 2 - 1
            if self.sigma[axis] > 0.0:
                k = int(8 * self.sigma[axis] + 1)
                k += 1 - k % 2
                if k // 2 >= min(h, w):
                    raise ValueError(f"ElasticTransform(sigma={list(self.sigma)}) blurs with a kernel of {k}: a "
                                     f"{h}x{w} image is too small for its reflected edges")
                kx, ky = _blur_kernel(k, self.sigma[0]), _blur_kernel(k, self.sigma[1])
                # F.pad(reflect) then F.conv2d by kx and by ky, as torchvision blurs it: the
                # same sums, separable and vectorized (cpu_twin.blur_field: a 224x224 field
                # pair 2.1 -> 0.8 ms with the draws)
                blurred = torch.empty(1, 1, h, w)
                blur_field(d[0, 0].numpy(), kx.numpy(), ky.numpy(), blurred[0, 0].numpy(),
                           torch.empty(w + k - 1).numpy(), torch.empty(h, w).numpy())
                d = blurred
            sides.append(d * self.alpha[axis] / extent)
        return on_device(torch.cat(sides, 1).permute(0, 2, 3, 1), device)

    def _grid(self, p: dict, h: int, w: int, dev: Any) -> torch.Tensor:
        """F.elastic's sampling grid of these params at (h, w): the identity grid plus the field."""
        return self._identity_grid(h, w, dev).add_(self.displacement(p, (h, w), dev))

    @staticmethod
    def _identity_grid(h: int, w: int, dev: Any) -> torch.Tensor:
        """F.elastic's identity grid [1, h, w, 2] (pixel centres in grid_sample's [-1, 1])."""
        return identity_grid(h, w, dev)

    def drawn(self, p: dict, size: tuple[int, int]) -> list[Drawn]:
        """Its field for an image of `size` as boxes and masks follow it (made when they first
        ask, then kept: a sample's mask and boxes read one field)."""
        if "displacement_seed" not in p:
            return []
        h, w = int(size[0]), int(size[1])
        field = functools.cache(functools.partial(self.displacement, p, (h, w)))
        return [Drawn("field", (h, w), (h, w), displacement=field)]

    def paint(self, canvas: torch.Tensor, image: torch.Tensor, p: dict) -> None:
        """F.elastic of `image` (uint8 HWC) with this field, into `canvas` (uint8 [3, h, w],
        its size)."""
        h, w = int(image.shape[0]), int(image.shape[1])
        grid = self._grid(p, h, w, image.device)
        canvas.copy_(grid_sample_filled(image.permute(2, 0, 1), grid, self.interpolation, self.fill))

    def warp_output(self, images: torch.Tensor, params: Sequence[dict], levels: bool, *,
                    batched: bool | None = None) -> None:
        """After the geometry: F.elastic of each of the kernel's float images [N, 3, h, w]
        (the [0, 1] scale, before Normalize), in place, the field drawn at the output's size
        (as torchvision draws it for the image it is given). `levels`: the image is uint8
        at this step in the Compose (no float conversion before it), so it is taken in
        uint8 levels and the warp's result rounded to them, as torchvision's elastic of a
        uint8 image gives it. On a CUDA tensor (or with batched=True) the batch's fields go
        up in one copy and are sampled in one grid_sample (a fixed number of launches); on
        the CPU image by image (each image's work stays in the caches); the same values."""
        h, w = int(images.shape[2]), int(images.shape[3])
        if not params:
            return
        if levels:
            images.mul_(255.0).round_()
        scale = 1.0 if levels else 1.0 / 255.0
        if batched if batched is not None else images.device.type == "cuda":
            fields = on_device(torch.cat([self.displacement(p, (h, w)) for p in params]), images.device)
            grid = self._identity_grid(h, w, images.device).add(fields)  # (identity + field, as _grid adds them)
            images.copy_(sample_filled_batch(images, grid, self.interpolation, self.fill, scale))
        else:
            for k, p in enumerate(params):
                grid = self._grid(p, h, w, images.device)
                images[k].copy_(sample_filled(images[k], grid, self.interpolation, self.fill, scale))
        if levels:
            images.round_().mul_(1.0 / 255.0)


class RandomAffine(_Warp, converts="torchvision.RandomAffine"):
    """torchvision's RandomAffine: angle, translation (fractions of the size, rounded to
    pixels), scale and shear drawn as torchvision draws them (make_params: "affine":
    {"angle", "translate", "scale", "shear"}), nearest or bilinear, `fill` outside."""

    keys = ("affine",)

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(t.degrees, t.translate, t.scale, t.shear, t.interpolation, warp_fill(t, floats), t.center)

    def __init__(self, degrees: Any, translate: Sequence[float] | None = None, scale: Sequence[float] | None = None,
                 shear: Any = None, interpolation: Any = "nearest", fill: Any = 0,
                 center: Sequence[float] | None = None) -> None:
        self.degrees = _degrees(degrees)
        if translate is not None:
            if len(translate) != 2 or not all(0.0 <= t <= 1.0 for t in translate):
                raise ValueError("translate should be a sequence of length 2 with values between 0 and 1")
            translate = (float(translate[0]), float(translate[1]))
        if scale is not None:
            if len(scale) != 2 or any(s <= 0 for s in scale):
                raise ValueError("scale values should be positive")
            scale = (float(scale[0]), float(scale[1]))
        shears: tuple[float, ...] | None = None
        if shear is not None:
            if isinstance(shear, numbers.Real):
                shears = _degrees(shear, "shear")
            elif len(shear) in (2, 4):
                shears = tuple(float(v) for v in shear)
            else:
                raise TypeError("shear should be a single number or a sequence of 2 or 4 numbers")
        self.translate = translate
        self.scale = scale
        self.shear = shears
        self._setup(interpolation, fill, center)

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        height, width = size
        angle = rng.uniform(*self.degrees)
        tx = ty = 0
        if self.translate is not None:
            max_dx, max_dy = self.translate[0] * width, self.translate[1] * height
            tx, ty = int(round(rng.uniform(-max_dx, max_dx))), int(round(rng.uniform(-max_dy, max_dy)))
        scale = rng.uniform(*self.scale) if self.scale is not None else 1.0
        shear_x = shear_y = 0.0
        if self.shear is not None:
            shear_x = rng.uniform(self.shear[0], self.shear[1])
            if len(self.shear) == 4:
                shear_y = rng.uniform(self.shear[2], self.shear[3])
        return {"affine": {"angle": angle, "translate": (tx, ty), "scale": scale, "shear": (shear_x, shear_y)}}

    def drawn(self, p: dict, size: tuple[int, int]) -> list[Drawn]:
        a = p.get("affine")
        if a is None:
            return []
        h, w = size
        translate, center = [float(t) for t in a["translate"]], self.center
        forward = forward_affine([w * 0.5, h * 0.5] if center is None else center, a["angle"], translate, a["scale"],
                                 a["shear"])
        cf = [0.0, 0.0] if center is None else [c - s * 0.5 for c, s in zip(center, (w, h))]
        inverse = inverse_affine(cf, a["angle"], translate, a["scale"], a["shear"])
        return [Drawn("affine", (h, w), (h, w), tuple(forward), tuple(inverse))]


    paints_window = True

    def paint(self, canvas: torch.Tensor, image: torch.Tensor, p: dict,
              window: Sequence[int] | None = None, part: tuple[int, int, int, int] | None = None) -> None:
        """F.affine of `image` (uint8 HWC) into `canvas` (uint8 [3, h, w], its size; or
        `window` of it); `part` as RandomRotation.paint's."""
        size = part[2:] if part is not None else (int(image.shape[0]), int(image.shape[1]))
        grid_warp(image.permute(2, 0, 1), self.sampling_matrix(p, size), size, self.interpolation, self.fill, window,
                  out=canvas, part=part)

    def sampling_matrix(self, p: dict, size: tuple[int, int]) -> list[float]:
        """The inverse matrix `paint` samples an image of `size` through (grid_warp's)."""
        return list(known(self.drawn(p, size)[0].inverse, "an affine warp's inverse"))  # (one always: no exact turn)

    def emit(self, p: dict, size: tuple[int, int], prog: list) -> None:
        a = p.get("affine")
        if a is not None:
            prog.append((AFFINE, warp_args(size, a["angle"], a["translate"], a["scale"], a["shear"],
                                           self.interpolation, self._fill, self.center)))


class RandomPerspective(_Warp, converts="torchvision.RandomPerspective"):
    """torchvision's RandomPerspective: with probability p, the four corners each moved
    inwards by up to distortion_scale of half the size (whole pixels, drawn as torchvision
    draws them), the image warped so (make_params: "perspective": {"coefficients"}),
    nearest or bilinear, `fill` outside (torchvision's default 0)."""

    keys = ("perspective",)

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(t.distortion_scale, t.p, t.interpolation, warp_fill(t, floats))

    def __init__(self, distortion_scale: float = 0.5, p: float = 0.5, interpolation: Any = "bilinear",
                 fill: Any = 0) -> None:
        if not 0 <= distortion_scale <= 1:
            raise ValueError("Argument distortion_scale value should be between 0 and 1")
        if not 0.0 <= p <= 1.0:
            raise ValueError("p should be a probability between 0 and 1")
        self.distortion_scale = float(distortion_scale)
        self.p = float(p)
        self._setup(interpolation, fill, None)

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        if not rng.random() < self.p:  # torchvision's coin: applied when a uniform draw is under p
            return {}
        height, width = size
        bh = int(self.distortion_scale * (height // 2)) + 1
        bw = int(self.distortion_scale * (width // 2)) + 1
        topleft = [rng.randrange(0, bw), rng.randrange(0, bh)]
        topright = [rng.randrange(width - bw, width), rng.randrange(0, bh)]
        botright = [rng.randrange(width - bw, width), rng.randrange(height - bh, height)]
        botleft = [rng.randrange(0, bw), rng.randrange(height - bh, height)]
        start = [[0, 0], [width - 1, 0], [width - 1, height - 1], [0, height - 1]]
        return {"perspective": {"coefficients": perspective_coefficients(start,
                                                                        [topleft, topright, botright, botleft])}}

    def drawn(self, p: dict, size: tuple[int, int]) -> list[Drawn]:
        d = p.get("perspective")
        if d is None:
            return []
        return [Drawn("perspective", size, size, coefficients=tuple(float(v) for v in d["coefficients"]))]

    def paint(self, canvas: torch.Tensor, image: torch.Tensor, p: dict) -> None:
        """F.perspective of `image` (uint8 HWC) into `canvas` (uint8 [3, h, w], its size),
        or the image as it is where the coin said no."""
        chw, d = image.permute(2, 0, 1), p.get("perspective")
        if d is None:
            canvas.copy_(chw)
            return
        if native_perspective(chw, d["coefficients"], self.interpolation, self.fill, canvas):
            return
        grid = perspective_image_grid(d["coefficients"], (int(chw.shape[1]), int(chw.shape[2])), chw.device)
        canvas.copy_(grid_sample_filled(chw, grid, self.interpolation, self.fill))

    def emit(self, p: dict, size: tuple[int, int], prog: list) -> None:
        d = p.get("perspective")
        if d is not None:
            c = [float(v) for v in d["coefficients"]]
            fill = self._fill if self._fill is not None else (math.nan, math.nan, math.nan)
            prog.append((PERSPECTIVE, (*c[:6], float(self.interpolation), *fill, c[6], c[7])))


# ---- the policies: (op name, magnitude) lists, emitted as kernel ops -----------------------
