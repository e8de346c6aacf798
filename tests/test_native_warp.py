"""A nearest warp's canvas picked natively on the CPU (csrc/warp.h): the course recipe's
`[RandomRotation(30), RandomResizedCrop(224), ...]` and RandomAffine before the geometry
paint each image's canvas through it. It must pick torch's grid_sample's pixel for every
output pixel: against torch's own ops sampling the same grid (the path it replaces, kept
where the native one cannot be exact), on strided images, windows, fills and affine
matrices, at grid points placed on the rounding's ties; and against torchvision's F.rotate
and F.affine on a real photograph."""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch
import torchvision.transforms.v2.functional as F
from torchvision.transforms.v2 import InterpolationMode

from gpudecode import _native
from gpudecode.transforms import warped
from gpudecode.transforms.args import BILINEAR, NEAREST  # (the interpolation codes the warps hold)
from gpudecode.transforms.warps import inverse_affine, rotation_matrix

exact = pytest.mark.skipif(not warped.nearest_is_exact(), reason="the native nearest warp is not exact here (a CPU "
                           "without FMA, or a torch whose grid_sample rounds otherwise): torch's ops sample it")


def _torch_path(monkeypatch: pytest.MonkeyPatch, *args, **kw) -> torch.Tensor:
    with monkeypatch.context() as m:
        m.setattr(warped, "_NEAREST_EXACT", False)
        return warped.grid_warp(*args, **kw)


def _case(rng: random.Random) -> tuple:
    """A strided image, an affine inverse matrix, an output size, a window and a fill."""
    h, w = rng.randint(1, 300), rng.randint(1, 300)
    base = torch.randint(0, 256, (h + 2, w + 3, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(rng.randrange(1 << 30)))
    chw = base[1:1 + h, 2:2 + w].permute(2, 0, 1)  # (HWC at the decoded batch's strides, read as [3, h, w])
    kind = rng.randrange(3)
    if kind == 0:
        m = rotation_matrix(rng.uniform(-180, 180), (h, w), None if rng.random() < 0.7 else [rng.uniform(0, w), rng.uniform(0, h)])
    else:  # (RandomAffine's: a scale of 2 or 0.5 puts many centres on ties)
        scale = rng.choice([2.0, 0.5, rng.uniform(0.3, 3.0)])
        m = inverse_affine([0.0, 0.0], rng.choice([0.0, rng.uniform(-45, 45)]), [float(rng.randint(-20, 20)),
                           float(rng.randint(-20, 20))], scale, [rng.choice([0.0, rng.uniform(-20, 20)]), 0.0])
    if m is None:
        m = inverse_affine([0.0, 0.0], 0.0, [0.0, 0.0], 2.0, [0.0, 0.0])
    oh, ow = (h, w) if rng.random() < 0.5 else (rng.randint(1, 320), rng.randint(1, 320))
    window = None
    if rng.random() < 0.5:
        t, l = rng.randrange(oh), rng.randrange(ow)
        window = (t, l, rng.randint(1, oh - t), rng.randint(1, ow - l))
    fill = rng.choice([None, 0, [0.0, 0.0, 0.0], [255.0], (10, 20, 30), 7.0])
    return chw, m, (oh, ow), window, fill


@exact
def test_the_native_pick_is_torchs_grid_sample_pick(monkeypatch):
    rng = random.Random(0)
    for k in range(300):
        chw, m, size, window, fill = _case(rng)
        got = warped.grid_warp(chw, m, size, NEAREST, fill, window)
        want = _torch_path(monkeypatch, chw, m, size, NEAREST, fill, window)
        assert torch.equal(got, want), (k, tuple(chw.shape), m, size, window, fill, int((got != want).sum()))


def _beside_edges(size: int, fused: bool) -> np.ndarray:
    """Grid points up to 4 floats either side of each place where the unnormalized
    coordinate is a half pixel; `fused`: only those where an unfused multiply and add
    ((g + 1) * size / 2, rounded, then - 0.5) round to another pixel than the fused one
    (emulated in extended precision)."""
    k = np.arange(-2, size + 1)
    g = ((k + 1) / (size / 2) - 1).astype(np.float32)
    points = [g]
    for toward in (-9.0, 9.0):
        moved = g
        for _ in range(4):
            moved = np.nextafter(moved, np.float32(toward))
            points.append(moved)
    g = np.concatenate(points)
    if not fused:
        return g
    half, one = np.float32(size / 2), np.float32(1)
    unfused = np.rint((g + one) * half - np.float32(0.5))
    exact = np.rint(((g + one).astype(np.longdouble) * half - 0.5).astype(np.float32))
    return g[unfused != exact]


@exact
def test_grid_points_beside_the_pixels_edges_pick_as_torch_picks():
    """Grid points a few floats either side of where the unnormalized coordinate is a
    half pixel, given straight as the grid (an identity scale), against torch's
    grid_sample of the same image: among them the points where a multiply and an add
    rounded apart (not fused, as torch fuses them) would pick another pixel."""
    gen = np.random.default_rng(1)
    sensitive = 0
    for h, w in ((194, 257), (97, 514), (673, 3), (375, 500), (1, 1)):  # (sizes with such points: 97, 194, 257, ...)
        img = torch.from_numpy(gen.integers(0, 256, (3, h, w), dtype=np.uint8))
        for fused in (False, True):
            xs, ys = _beside_edges(w, fused), _beside_edges(h, fused)
            if fused:  # (each with a few points of the other kind, so that neither is empty)
                sensitive += len(xs) + len(ys)
                xs = np.concatenate([xs, _beside_edges(w, False)[::max(1, w // 8)]])
                ys = np.concatenate([ys, _beside_edges(h, False)[::max(1, h // 8)]])
            else:
                ys = ys[::max(1, len(ys) // 200)]
            out = np.empty((3, len(ys), len(xs)), np.uint8)
            _native.warp_affine_nearest(img.numpy(), xs, ys, np.array([1, 0, 0, 1, 0, 0], np.float32),
                                        np.zeros(3, np.uint8), out)
            grid = torch.stack(torch.broadcast_tensors(torch.from_numpy(xs).view(1, -1), torch.from_numpy(ys).view(-1, 1)), -1)
            want = torch.nn.functional.grid_sample(img.float()[None], grid[None], mode="nearest", padding_mode="zeros",
                                                   align_corners=False)[0].to(torch.uint8)
            assert torch.equal(torch.from_numpy(out), want), (h, w, fused, int((torch.from_numpy(out) != want).sum()))
    assert sensitive >= 5, sensitive  # (the test would catch an unfused unnormalize: such points are rare)


@exact
def test_ties_round_as_torch_rounds(monkeypatch):
    """A zoom by 2 (and by 4) about the centre puts output centres on the image's half
    pixels: ties, rounded half to even after torch's fused unnormalize."""
    for h, w in ((7, 9), (64, 48), (37, 101)):
        img = torch.arange(h * w * 3, dtype=torch.int64).remainder(251).to(torch.uint8).view(h, w, 3).permute(2, 0, 1)
        for zoom in (2.0, 4.0, 0.5):
            m = inverse_affine([0.0, 0.0], 0.0, [0.0, 0.0], zoom, [0.0, 0.0])
            got = warped.grid_warp(img, m, (h, w), NEAREST, None)
            assert torch.equal(got, _torch_path(monkeypatch, img, m, (h, w), NEAREST, None)), (h, w, zoom)
            want = F.affine(img, angle=0.0, translate=[0.0, 0.0], scale=zoom, shear=[0.0, 0.0],
                            interpolation=InterpolationMode.NEAREST)
            assert torch.equal(got, want), (h, w, zoom)


@exact
def test_rotate_and_affine_as_torchvision_makes_them(photos):
    img = torch.from_numpy(np.ascontiguousarray(photos["astronaut"][::3, ::2])).permute(2, 0, 1)
    h, w = img.shape[1:]
    for angle in (30.0, -12.25, 45.0, 89.999, 135.0, 0.001):
        for fill in (None, [40, 50, 60]):
            m = rotation_matrix(angle, (h, w), None)
            want = F.rotate(img, angle, InterpolationMode.NEAREST, fill=fill)
            assert torch.equal(warped.grid_warp(img, m, (h, w), NEAREST, fill), want), (angle, fill)
    for angle, translate, scale, shear in ((10.0, [3.0, -7.0], 1.3, [5.0, -2.0]), (0.0, [0.0, 0.0], 2.0, [0.0, 0.0]),
                                           (-25.0, [12.0, 4.0], 0.8, [0.0, 11.0])):
        m = inverse_affine([0.0, 0.0], angle, translate, scale, shear)
        want = F.affine(img, angle=angle, translate=translate, scale=scale, shear=shear,
                        interpolation=InterpolationMode.NEAREST)
        assert torch.equal(warped.grid_warp(img, m, (h, w), NEAREST, 0), want), (angle, translate, scale, shear)


@exact
def test_it_writes_into_the_canvas_given(monkeypatch):
    """`out`: the canvas's own memory written (no copy), or a non-contiguous one filled
    through a copy; the bytes the same either way."""
    rng = random.Random(3)
    chw, m, size, window, fill = _case(rng)
    oh, ow = size if window is None else window[2:]
    out = torch.full((3, oh, ow), 1, dtype=torch.uint8)
    assert warped.grid_warp(chw, m, size, NEAREST, fill, window, out=out) is out
    want = _torch_path(monkeypatch, chw, m, size, NEAREST, fill, window)
    assert torch.equal(out, want)
    strided = torch.zeros((oh, ow, 3), dtype=torch.uint8).permute(2, 0, 1)
    assert warped.grid_warp(chw, m, size, NEAREST, fill, window, out=strided) is strided
    assert torch.equal(strided, want)


def test_the_native_path_is_taken_only_where_it_is_exact():
    img = torch.zeros((3, 8, 8), dtype=torch.uint8)
    here = warped.nearest_is_exact()
    assert (warped.native_nearest(img, NEAREST, None) is not None) == here
    if here:
        assert warped.native_nearest(img, NEAREST, None).tolist() == [0, 0, 0]
        assert warped.native_nearest(img, NEAREST, 9).tolist() == [9, 9, 9]
        assert warped.native_nearest(img, NEAREST, (1, 2, 3)).tolist() == [1, 2, 3]
    assert warped.native_nearest(img, BILINEAR, None) is None  # (bilinear: torch's weights and blend)
    assert warped.native_nearest(img, NEAREST, 12.5) is None  # (a fill torch rounds after the blend)
    assert warped.native_nearest(img, NEAREST, [300.0]) is None
    assert warped.native_nearest(img, NEAREST, [1.0, 2.0]) is None
    assert warped.native_nearest(img.float(), NEAREST, None) is None
    assert warped.native_nearest(img.to("meta"), NEAREST, None) is None  # (another device: torch's ops there)


def test_the_native_call_refuses_what_does_not_fit():
    src = np.zeros((3, 4, 5), np.uint8)
    xs, ys = np.zeros(6, np.float32), np.zeros(2, np.float32)
    scale, fill = np.zeros(6, np.float32), np.zeros(3, np.uint8)
    _native.warp_affine_nearest(src, xs, ys, scale, fill, np.empty((3, 2, 6), np.uint8))
    for bad in (dict(out=np.empty((3, 6, 2), np.uint8)), dict(src=np.zeros((4, 4, 5), np.uint8)),
                dict(src=np.zeros((3, 0, 5), np.uint8)), dict(fill=np.zeros(2, np.uint8)),
                dict(scale=np.zeros(4, np.float32)), dict(src=np.zeros((3, 4, 5), np.float32))):
        args = dict(src=src, xs=xs, ys=ys, scale=scale, fill=fill, out=np.empty((3, 2, 6), np.uint8)) | bad
        with pytest.raises(ValueError):
            _native.warp_affine_nearest(**args)
