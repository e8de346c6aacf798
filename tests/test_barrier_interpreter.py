"""The barrier ops are written once (kernels/_barrier.py: barrier_pixel, barrier_prepare,
the statistic row) and both interpreters run them from there. The CPU twin keeps
vectorized passes of its own for some (cpu_passes._barrier_fast): each must give what
the shared formula gives, pixel for pixel, on real photographs and on values outside
[0, 1] (GaussianNoise(clip=False) leaves those), at ordinary and at tiny sizes. A barrier
op added to the table without arguments here fails the first test."""
from __future__ import annotations

import math

import numpy as np
import pytest

from gpudecode.kernels import cpu_twin, ops

# Each barrier op's argument row (kernels/ops.py's docs say what they are).
_ARGS = {
    "CONTRAST": [0.6],
    "AUTOCONTRAST": [],
    "EQUALIZE": [],
    "SHARPNESS": [1.7],
    "BLUR_X": [7, 1.3],
    "BLUR_Y": [5, 0.9],
    # a 20 degree rotation about the centre, bilinear, a grey fill
    "AFFINE": [math.cos(0.35), -math.sin(0.35), 0.0, math.sin(0.35), math.cos(0.35), 0.0, 1, 0.5, 0.5, 0.5],
    # a mild perspective, nearest, no fill (NaN)
    "PERSPECTIVE": [1.05, 0.02, -0.4, 0.01, 0.97, 0.3, 0, float("nan"), float("nan"), float("nan"), 1e-3, -5e-4],
}
_BARRIERS = [op for op in ops.OPS if op.barrier]


def _images():
    from skimage import data

    photo = data.astronaut()[100:160, 180:227].astype(np.float32) / 255  # 60 x 47, a face's edge
    rng = np.random.default_rng(5)
    wide = (rng.normal(0.5, 0.6, (9, 11, 3))).astype(np.float32)  # outside [0, 1] too
    return {"photo": photo, "out-of-range": wide, "tiny": photo[:2, :5].copy(), "thin": wide[:7, :2].copy()}


def _rows(img: np.ndarray) -> np.ndarray:
    """An HWC image as the CPU twin's channel rows [w*3, h] (row 3x + c)."""
    h, w, _ = img.shape
    return np.ascontiguousarray(img.transpose(1, 2, 0).reshape(w * 3, h))


def test_every_barrier_op_has_arguments_here():
    assert {op.name for op in _BARRIERS} == set(_ARGS)
    for op in _BARRIERS:
        assert len(_ARGS[op.name]) <= op.args


@pytest.mark.parametrize("op", _BARRIERS, ids=lambda op: op.name)
def test_the_cpu_fast_pass_equals_the_shared_formula(op):
    ns = cpu_twin._cpu_namespace()
    a = np.zeros(ops.ARGS, np.float32)
    a[:len(_ARGS[op.name])] = _ARGS[op.name]
    for name, img in _images().items():
        h, w, _ = img.shape
        side = {"BLUR_X": w, "BLUR_Y": h}.get(op.name)
        if side is not None and int(a[0]) // 2 >= side:  # (reflect padding needs more: the plan refuses it)
            continue
        px = _rows(img)
        st = np.zeros(7, np.float64)
        lut = np.zeros(768, np.float32)
        wts = np.zeros(64, np.float32)
        ns["_statistic"](ops.ID[op.name], px, w, st, lut, np.zeros(256, np.int64))
        ns["barrier_prepare"](ops.ID[op.name], a, wts)
        fast, fast2 = px.copy(), np.empty_like(px)
        formula, formula2 = px.copy(), np.empty_like(px)
        ns["_barrier_pass"](ops.ID[op.name], formula, formula2, w, h, a, st, lut, wts)
        assert np.isfinite(formula).all()
        if not ns["_barrier_fast"](ops.ID[op.name], fast, fast2, w, h, a, st, lut, wts):
            np.testing.assert_array_equal(fast, px)  # (no pass of its own: untouched)
            continue
        np.testing.assert_array_equal(fast, formula, err_msg=f"{op.name} on {name} ({h}x{w})")


def test_the_statistics_are_the_images():
    """The CPU's reductions against numpy: the grey sum, the channels' ranges, and the
    equalize table against torchvision's equalize of the quantized image."""
    import torch
    from torchvision.transforms.v2 import functional as F

    ns = cpu_twin._cpu_namespace()
    img = _images()["photo"]
    h, w, _ = img.shape
    px = _rows(img)
    st = np.zeros(7, np.float64)
    lut = np.zeros(768, np.float32)
    ns["_statistic"](ops.ID["CONTRAST"], px, w, st, lut, np.zeros(256, np.int64))
    grey = 0.2989 * img[..., 0] + 0.587 * img[..., 1] + 0.114 * img[..., 2]
    assert st[0] == pytest.approx(float(grey.astype(np.float64).sum()), rel=1e-6)
    ns["_statistic"](ops.ID["AUTOCONTRAST"], px, w, st, lut, np.zeros(256, np.int64))
    np.testing.assert_array_equal(st[1:4], img.reshape(-1, 3).min(0))
    np.testing.assert_array_equal(st[4:7], img.reshape(-1, 3).max(0))
    ns["_statistic"](ops.ID["EQUALIZE"], px, w, st, lut, np.zeros(256, np.int64))
    levels = np.floor(img * np.float32(255.999)).clip(0, 255).astype(np.uint8)
    expected = F.equalize(torch.from_numpy(levels).permute(2, 0, 1)).permute(1, 2, 0).numpy()
    got = np.stack([lut[c * 256 + levels[..., c].astype(np.int64)] for c in range(3)], -1)
    np.testing.assert_array_equal(np.round(got * 255).astype(np.uint8), expected)


def test_sharpness_of_values_outside_the_unit_range_is_torchvisions():
    """GaussianNoise(clip=False) leaves values outside [0, 1]; torchvision's
    adjust_sharpness clamps the whole result (its blend), the border too, and leaves an
    image under 3 pixels a side as it is."""
    import torch
    from torchvision.transforms.v2 import functional as F

    ns = cpu_twin._cpu_namespace()
    for name in ("out-of-range", "thin"):
        img = _images()[name]
        h, w, _ = img.shape
        px = _rows(img)
        ns["_sharpness_pass"](px, np.empty_like(px), w, h, np.float32(1.7))
        got = px.reshape(w, 3, h).transpose(2, 0, 1)
        expected = F.adjust_sharpness(torch.from_numpy(img).permute(2, 0, 1).contiguous(), 1.7).permute(1, 2, 0)
        np.testing.assert_allclose(got, expected.numpy(), atol=2e-6, err_msg=name)
