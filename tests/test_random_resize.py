"""RandomResize, RandomShortestSize and ScaleJitter (torchvision's segmentation and
detection references' resizes): a Resize whose size is drawn for each image, fused when a
crop fixes the output size after it, refused alone. Pixels against torchvision's
functional resize and crop replaying the same parameters on real photographs; sizes drawn
as torchvision draws them."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision.transforms.v2 as tv
import torchvision.transforms.v2.functional as F
from scipy import stats

from gpudecode import transforms as T
from gpudecode.errors import TransformError


@pytest.fixture(scope="module")
def photo_batch(photos):
    out = [torch.from_numpy(np.ascontiguousarray(p[::4, ::4].transpose(2, 0, 1))) for p in photos.values()]
    out.append(torch.from_numpy(np.ascontiguousarray(photos["coffee"][::5, ::3].transpose(2, 0, 1))))
    return out


def _theirs(img: torch.Tensor, p: dict, crop: tuple[int, int], interpolation) -> torch.Tensor:
    x = F.to_dtype(img, torch.float32, scale=True)
    x = F.resize(x, list(p["resize"]), interpolation=interpolation, antialias=True)
    if "crop" in p:  # RandomCrop: (top, left, h, w) in the resized image (outside it: zeros)
        return F.crop(x, *p["crop"])
    return F.center_crop(x, list(crop))


@pytest.mark.parametrize("make,crop,mode", [
    (lambda: [T.RandomResize(40, 80), T.RandomCrop(36, pad_if_needed=True)], (36, 36), "bilinear"),
    (lambda: [T.RandomShortestSize([30, 45, 60], 90, "bicubic"), T.CenterCrop((32, 40))], (32, 40), "bicubic"),
    (lambda: [T.ScaleJitter((48, 56), (0.5, 1.5)), T.RandomCrop((30, 34), pad_if_needed=True)], (30, 34), "bilinear"),
])
def test_random_resizes_match_torchvision_on_real_photos(photo_batch, make, crop, mode):
    tf = T.Compose([*make(), T.RandomHorizontalFlip(), T.ToDtype(torch.float32, scale=True)])
    sizes = [tuple(im.shape[1:]) for im in photo_batch]
    interpolation = tv.InterpolationMode.BICUBIC if mode == "bicubic" else tv.InterpolationMode.BILINEAR
    seen = set()
    for seed in range(3):
        params = tf.make_params(sizes, seed)
        got = tf(photo_batch, params)
        assert got.shape[-2:] == crop
        for k, (img, p) in enumerate(zip(photo_batch, params)):
            want = _theirs(img, p, crop, interpolation)
            if p["flip"]:
                want = F.horizontal_flip(want)
            err = float(((got[k] - want.clamp(0, 1)).abs() * 255).max())
            assert err <= 1.0 + 1e-3, (k, p, err)
            seen.add(tuple(p["resize"]))
    assert len(seen) > len(photo_batch)  # (sizes drawn per image and per seed)


def test_sizes_are_drawn_as_torchvisions():
    n, size = 3000, (300, 400)
    img = torch.zeros((3, *size), dtype=torch.uint8)
    torch.manual_seed(0)
    ours = [p["resize"] for p in T.Compose([T.RandomResize(200, 260), T.CenterCrop(100)]).make_params([size] * n, 1)]
    theirs = [tv.RandomResize(200, 260).make_params([img])["size"][0] for _ in range(n)]
    assert {min(r) for r in ours} <= set(range(200, 260))
    assert stats.chisquare(np.bincount([min(r) - 200 for r in ours], minlength=60)).pvalue > 1e-3
    assert stats.ks_2samp([min(r) for r in ours], theirs).pvalue > 1e-3
    for r in ours[:50]:  # the long side as Resize(short) gives it
        assert tuple(F.resize(torch.zeros((1, *size)), [min(r)], antialias=True).shape[-2:]) == r

    ours = [p["resize"] for p in T.Compose([T.RandomShortestSize([240, 280, 330], 420), T.CenterCrop(100)]
                                           ).make_params([size] * n, 2)]
    tp = tv.RandomShortestSize([240, 280, 330], 420)
    theirs = [tuple(tp.make_params([img])["size"]) for _ in range(n)]
    assert set(ours) == set(theirs) and len(set(ours)) == 3  # the same sizes, torchvision's formula
    counts = [[seq.count(s) for s in sorted(set(ours))] for seq in (ours, theirs)]
    assert stats.chisquare(counts[0]).pvalue > 1e-3 and stats.chi2_contingency(counts).pvalue > 1e-3

    ours = [p["resize"] for p in T.Compose([T.ScaleJitter((256, 320), (0.3, 1.7)), T.CenterCrop(64)]
                                           ).make_params([size] * n, 3)]
    tj = tv.ScaleJitter((256, 320), (0.3, 1.7))
    theirs = [tuple(tj.make_params([img])["size"]) for _ in range(n)]
    for k in (0, 1):
        assert stats.ks_2samp([r[k] for r in ours], [r[k] for r in theirs]).pvalue > 1e-3, k


def test_conversion_and_refusals():
    ours = T.Compose.from_torchvision(tv.Compose([tv.RandomShortestSize([200, 240], 400), tv.RandomCrop(
        192, pad_if_needed=True), tv.RandomHorizontalFlip(), tv.ToDtype(torch.float32, scale=True)]))
    step = ours.transforms[0]
    assert isinstance(step, T.RandomShortestSize) and (step.min_size, step.max_size) == ([200, 240], 400)
    ours = T.Compose.from_torchvision(tv.Compose([tv.RandomResize(100, 200, antialias=True), tv.CenterCrop(96)]))
    assert isinstance(ours.transforms[0], T.RandomResize) and ours.out_size == (96, 96)
    for alone in (T.RandomResize(40, 80), T.RandomShortestSize(50), T.ScaleJitter((64, 64))):
        with pytest.raises(TransformError, match="alone gives differently sized images: add CenterCrop or RandomCrop"):
            T.Compose([alone, T.ToDtype(torch.float32, scale=True)])
    with pytest.raises(TransformError, match="min_size < max_size"):
        T.RandomResize(80, 80)
    with pytest.raises(TransformError, match="positive int"):
        T.RandomShortestSize([0, 20])
    with pytest.raises(TransformError, match="scale_range"):
        T.ScaleJitter((64, 64), (0.0, 1.0))
