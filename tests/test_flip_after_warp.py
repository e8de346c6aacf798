"""A flip after a rotation or affine warp (`[Resize((224, 224)), RandomRotation(15),
RandomHorizontalFlip(), ToTensor()]`, as many scripts write it): torchvision warps, then
flips. The kernel flips first, while it resamples, so the warps before the flip are drawn
mirrored where a sample is flipped (a mirrored rotation turns the other way; an affine
warp's shears and its translation along the mirrored axis change sign), which is the same
image. References: torchvision's functional ops in the Compose's order replaying each
sample's draws on the float image, a tv_tensors.Mask and BoundingBoxes, on real
photographs."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision.transforms as v1
import torchvision.transforms.v2.functional as F
from torchvision import tv_tensors
from torchvision.transforms import InterpolationMode as IM

from gpudecode import transforms as T
from gpudecode.errors import TransformError

from test_boxes import random_boxes, tv_moved, tv_sanitized
from test_masks import centre, slic_mask, tv_mask
from test_warped_targets import tv_warps


def chw(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a.transpose(2, 0, 1)))


@pytest.fixture(scope="module")
def images(photos):
    return [chw(np.ascontiguousarray(p[k:k + 81 + 2 * k, 2 * k:2 * k + 97 - k])) for k, p in enumerate(photos.values())]


def _flips(x, p: dict):
    x = F.horizontal_flip(x) if p.get("flip") else x
    return F.vertical_flip(x) if p.get("vflip") else x


def _unflipped(p: dict) -> dict:
    return {**p, "flip": False, "vflip": False}


WARPS = {
    "rotation, nearest": (T.RandomRotation(25, fill=(10, 200, 30)),
                          lambda x, p: F.rotate(x, p["rotation"]["angle"], fill=[10 / 255, 200 / 255, 30 / 255])),
    "rotation, bilinear": (T.RandomRotation(40, "bilinear"),
                           lambda x, p: F.rotate(x, p["rotation"]["angle"], IM.BILINEAR, fill=0.0)),
    "affine, nearest": (T.RandomAffine(20, (0.1, 0.2), (0.8, 1.2), (-10, 10, -5, 5)),
                        lambda x, p: F.affine(x, **p["affine"], fill=0.0)),
    "affine, bilinear": (T.RandomAffine(15, (0.2, 0.1), (0.9, 1.3), 8, "bilinear", fill=(40, 40, 40)),
                         lambda x, p: F.affine(x, **p["affine"], interpolation=IM.BILINEAR, fill=[40 / 255] * 3)),
}


@pytest.mark.parametrize("name", list(WARPS))
def test_a_flip_after_a_warp_is_torchvisions_warp_then_flip(images, name):
    warp, replay = WARPS[name]
    tf = T.Compose([T.Resize((48, 64)), warp, T.ColorJitter(0.2), T.RandomHorizontalFlip(), T.RandomVerticalFlip(),
                    T.ToDtype(torch.float32, scale=True)])
    assert tf.plan.flip_at == (2, 2)
    sizes = [tuple(i.shape[1:]) for i in images]
    params = tf.make_params(sizes, 3) + tf.make_params(sizes, 4) + tf.make_params(sizes, 5)
    imgs = images * 3
    assert {(p["flip"], p["vflip"]) for p in params} == {(False, False), (False, True), (True, False), (True, True)}
    got = tf(imgs, params)
    over = total = 0
    for k, (img, p) in enumerate(zip(imgs, params)):
        x = replay(F.resize(F.to_dtype(img, torch.float32, scale=True), [48, 64], antialias=True), p)
        x = _jitter(x, p)
        want = _flips(x, p)
        err = (got[k] - want).abs() * 255
        over, total = over + int((err > 1 + 1e-3).sum()), total + err.numel()
    # (nearest: a point within float32 rounding of a half-way may pick the other pixel, mirrored or not)
    assert over <= total * (0.002 if "nearest" in name else 0), (name, over, total)


def _jitter(x: torch.Tensor, p: dict) -> torch.Tensor:
    """torchvision's ColorJitter with the drawn order and factors."""
    ops = (F.adjust_brightness, F.adjust_contrast, F.adjust_saturation, F.adjust_hue)
    names = ("brightness", "contrast", "saturation", "hue")
    for fn in p["order"]:
        if p[names[fn]] is not None:
            x = ops[fn](x, p[names[fn]])
    return x


def test_a_flip_between_two_warps_mirrors_only_the_first(images):
    """[rotation, flip, affine]: the rotation is drawn mirrored, the affine warp as drawn."""
    tf = T.Compose([T.Resize((40, 40)), T.RandomRotation(30, "bilinear"), T.RandomHorizontalFlip(),
                    T.RandomAffine(0, (0.2, 0.1), None, (-15, 15), "bilinear"), T.ToDtype(torch.float32, scale=True)])
    assert tf.plan.flip_at == (1, 0)
    sizes = [tuple(i.shape[1:]) for i in images]
    params = tf.make_params(sizes, 1) + tf.make_params(sizes, 2)
    got = tf(images * 2, params)
    for k, (img, p) in enumerate(zip(images * 2, params)):
        x = F.rotate(F.resize(F.to_dtype(img, torch.float32, scale=True), [40, 40], antialias=True),
                     p["rotation"]["angle"], IM.BILINEAR, fill=0.0)
        x = F.horizontal_flip(x) if p["flip"] else x
        want = F.affine(x, **p["affine"], interpolation=IM.BILINEAR, fill=0.0)
        assert float((got[k] - want).abs().max()) * 255 < 0.01, (k, p)


def test_masks_and_boxes_follow_a_flip_after_the_warps(photos):
    """Compose.masks and Compose.boxes with the draws: torchvision's resized crop, then the
    warps, then the flips, on a tv_tensors.Mask (nearest, a pixel in 10,000 may differ: a
    half-way point) and BoundingBoxes (then SanitizeBoundingBoxes' choice)."""
    tf = T.Compose([T.RandomResizedCrop(24, scale=(0.3, 1.0)), T.RandomApply([T.RandomRotation(35)], p=0.8),
                    T.RandomAffine(10, (0.1, 0.1), shear=6), T.RandomHorizontalFlip(), T.RandomVerticalFlip()])
    sizes = [(37, 41), (50, 33), (64, 64), (31, 70), (28, 28), (40, 40)]
    names = sorted(photos)
    masks = [torch.from_numpy(slic_mask(centre(photos[names[k % len(names)]], h, w))) for k, (h, w) in enumerate(sizes)]
    rng = np.random.default_rng(0)
    pixels = differ = kept = 0
    flipped = set()
    for seed in range(10):
        d = tf.draw_batch(sizes, seed)
        out = tf.masks(masks, d, fill=255)
        entries = [{"boxes": random_boxes(rng, h, w), "labels": np.arange(7)} for h, w in sizes]
        boxes = tf.boxes(entries, d, sizes=sizes)
        for k, m in enumerate(masks):
            p = d[k]
            flipped.add((p["flip"], p["vflip"]))
            ref = tv_tensors.Mask(tv_mask(m, _unflipped(p), (24, 24), 255)[None])
            for step in tf.plan.program:
                ref = tv_warps(ref, step, p, 255)
            ref = _flips(ref, p)[0].as_subclass(torch.Tensor)
            n = int((out[k] != ref).sum())
            assert n <= 1, (seed, k, n)
            pixels, differ = pixels + ref.numel(), differ + n
            x = tv_tensors.BoundingBoxes(torch.as_tensor(entries[k]["boxes"]), format="XYXY", canvas_size=sizes[k])
            x = F.clamp_bounding_boxes(tv_moved(x, _unflipped(p), (24, 24)))
            for step in tf.plan.program:
                x = tv_warps(x, step, p)
            want, keep = tv_sanitized(_flips(x, p))
            assert boxes[k]["labels"].tolist() == torch.nonzero(keep)[:, 0].tolist(), (seed, k)
            torch.testing.assert_close(boxes[k]["boxes"], want, rtol=0, atol=1e-4)
            kept += len(want)
    assert len(flipped) == 4 and kept > 150
    assert differ <= pixels // 10_000 + 1, (pixels, differ)


def test_torchvisions_recipe_converts_and_what_cannot_be_mirrored_is_refused():
    tf = T.Compose.from_torchvision(v1.Compose([v1.Resize((224, 224)), v1.RandomRotation(15),
                                                v1.RandomHorizontalFlip(), v1.ToTensor()]))
    assert tf.plan.flip_at == (1, 0)
    for steps, stuck in [([T.Resize((32, 32)), T.RandomPerspective(), T.RandomHorizontalFlip()], "RandomPerspective"),
                         ([T.Resize((32, 32)), T.RandomRotation(10, center=(3, 4)), T.RandomVerticalFlip()],
                          "RandomRotation"),
                         ([T.Resize((32, 32)), T.TrivialAugmentWide(), T.RandomHorizontalFlip()], "TrivialAugmentWide")]:
        with pytest.raises(TransformError, match=f"(?s)after {stuck} cannot be fused.*mirrors only"):
            T.Compose(steps)
