"""RandomPerspective's canvas made natively on the CPU (transforms.perspective): byte for
byte torch's ops (F.perspective's grid by bmm, grid_sample, the fill's blend, rounding), on
random sizes, draws and fills, nearest and bilinear; its grid's floats as the bmm's (the
premise: three products summed in the bmm's order); RandomPerspective before the geometry
against torchvision's F.perspective on photographs; torch's ops where the probe disagrees."""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch
import torchvision.transforms.v2.functional as F

from gpudecode import transforms as T
from gpudecode.transforms import perspective, warped
from gpudecode.transforms.args import BILINEAR, NEAREST

pytestmark = pytest.mark.skipif(not perspective.perspective_is_exact(NEAREST),
                                reason="the native warps do not run on this CPU (no AVX2 and FMA, or the probe "
                                       "disagreed): torch's ops make the canvas")


def _draw(seed, size, scale=0.6):
    return T.RandomPerspective(scale, 1.0).draw(random.Random(seed), size)["perspective"]["coefficients"]


def test_the_grid_is_the_bmms(photos):
    """The premise: F.perspective's bmm grid equals the three products summed in its order
    (each rounded), divided, less 1, as the native warp makes it, on 60 random sizes."""
    for seed in range(60):
        rng = random.Random(seed)
        h, w = rng.randrange(2, 500), rng.randrange(2, 500)
        c = _draw(seed, (h, w), rng.random())
        xs, ys, scale = (torch.from_numpy(v) for v in perspective._native_args(c, (h, w)))
        num_x = (xs[None] * scale[0] + ys[:, None] * scale[2]) + scale[4]
        num_y = (xs[None] * scale[1] + ys[:, None] * scale[3]) + scale[5]
        den = (xs[None] * scale[6] + ys[:, None] * scale[7]) + scale[8]
        grid = warped.perspective_image_grid(c, (h, w), torch.device("cpu"))[0]
        assert torch.equal(grid[..., 0], num_x / den - 1) and torch.equal(grid[..., 1], num_y / den - 1), (h, w)


@pytest.mark.parametrize("interpolation", [NEAREST, BILINEAR])
def test_native_is_torchs_ops(interpolation):
    """Random sizes, distortions and fills (none, zero, a colour, a fractional one where
    bilinear blends it; HWC and planar images): the canvas equals grid_sample_filled's."""
    for seed in range(40):
        rng = random.Random(100 + seed)
        h, w = rng.randrange(1, 90), rng.randrange(1, 90)
        img = torch.randint(0, 256, (h, w, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))
        chw = img.permute(2, 0, 1) if seed % 2 else img.permute(2, 0, 1).contiguous()
        fill = [None, 0, (10, 200, 31), (0.5, 99.25, 255.0)][seed % 4]
        c = _draw(seed, (h, w), rng.random())
        out = torch.empty((3, h, w), dtype=torch.uint8)
        ran = perspective.native_perspective(chw, c, interpolation, fill, out)
        assert ran == (warped.native_warp(interpolation, fill) is not None), (seed, fill)
        want = warped.grid_sample_filled(chw, warped.perspective_image_grid(c, (h, w), chw.device), interpolation, fill)
        if ran:
            assert torch.equal(out, want), (seed, h, w, fill, int((out != want).sum()))


def test_random_perspective_first_is_torchvisions(photos):
    """`[RandomPerspective(0.5, 1.0, interpolation, fill), CenterCrop(its size)]`: F.perspective
    of the photograph, byte for byte (the native canvas)."""
    imgs = [torch.from_numpy(np.ascontiguousarray(p.transpose(2, 0, 1))) for p in photos.values()][:4]
    for interpolation, fill in (("bilinear", 0), ("nearest", (30, 60, 90)), ("bilinear", None)):
        for img in imgs:
            size = tuple(img.shape[1:])
            tf = T.Compose([T.RandomPerspective(0.5, 1.0, interpolation, fill), T.CenterCrop(size)])
            p = tf.make_params([size], 7)[0]
            mode = F.InterpolationMode.NEAREST if interpolation == "nearest" else F.InterpolationMode.BILINEAR
            want = F.perspective(img, None, None, mode, fill=None if fill is None else list(fill) if
                                 isinstance(fill, tuple) else fill, coefficients=p["perspective"]["coefficients"])
            assert torch.equal(tf([img], [p])[0], want), (interpolation, fill)


def test_torchs_ops_where_the_probe_disagrees(monkeypatch, photos):
    """A probe that disagrees (another BLAS's rounding) leaves the canvas to torch's ops:
    the same bytes, made by grid_sample."""
    img = torch.from_numpy(np.ascontiguousarray(next(iter(photos.values())).transpose(2, 0, 1)))
    size = tuple(img.shape[1:])
    tf = T.Compose([T.RandomPerspective(0.5, 1.0), T.CenterCrop(size)])
    p = tf.make_params([size], 3)
    native = tf([img], p)[0]
    monkeypatch.setattr(perspective, "_EXACT", {NEAREST: False, BILINEAR: False})
    out = torch.empty((3, *size), dtype=torch.uint8)
    assert not perspective.native_perspective(img, p[0]["perspective"]["coefficients"], BILINEAR, 0, out)
    assert torch.equal(tf([img], p)[0], native)
