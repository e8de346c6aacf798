"""Flips before a warp that makes each image a canvas (`[RandomHorizontalFlip(),
RandomRotation(10), Resize((224, 224)), ...]`, as many scripts write it; refused before):
each flipped sample's image is flipped before its canvas is made, as torchvision flips it
before the warp, and the kernel does not flip it again; and flips after such a warp,
before the geometry (the window mirrored in the canvas). Against torchvision's ops in the
Compose's order replaying the draws, on photographs (bit for bit where the geometry reads
the canvas 1:1); masks and boxes against torchvision's Mask and BoundingBoxes; the Loader."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision.transforms as tv1
import torchvision.transforms.v2 as tv
import torchvision.transforms.v2.functional as F

from gpudecode import transforms as T
from conftest import loader_is_compose
from test_flip_after_resize import _flips
from test_rotation_expand import _affine, _perspective

NEAREST, BILINEAR = tv.InterpolationMode.NEAREST, tv.InterpolationMode.BILINEAR
f32 = tv.ToDtype(torch.float32, scale=True)


@pytest.fixture(scope="module")
def photo_batch(photos):
    return [torch.from_numpy(np.ascontiguousarray(p[k::3, ::4].transpose(2, 0, 1))) for k, p in
            enumerate(photos.values())] * 2


WARPS = {  # v1's (nearest, but the perspective's bilinear; v1's fill=0: a fill given), and torchvision's replay
    "rotation": (tv1.RandomRotation(25), lambda x, p: F.rotate(x, p["rotation"]["angle"], NEAREST, fill=[0.0] * 3)),
    "affine": (tv1.RandomAffine(20, translate=(0.1, 0.2), shear=(-5, 5)),
               lambda x, p: _affine(x, p, NEAREST, [0.0] * 3)),
    "perspective": (tv1.RandomPerspective(0.6, 1.0), lambda x, p: _perspective(x, p, BILINEAR, [0.0] * 3)),
}


@pytest.mark.parametrize("after", [False, True])
@pytest.mark.parametrize("kind", list(WARPS))
def test_flips_around_a_warp_then_a_crop_are_torchvisions(photo_batch, kind, after):
    """`[flip, vflip, warp, CenterCrop(32)]` and `[warp, flip, vflip, CenterCrop(32)]` (v1):
    torchvision's flips and warp of the uint8 image, in the Compose's order, and its crop,
    bit for bit (flips first: the image flipped before its canvas; after: the crop's window
    mirrored in the canvas, only that part painted, the flips last); both flips drawn either
    way. After the warp, `[warp, flip, Resize((40, 44))]` and `[warp, flip,
    RandomResizedCrop(32)]` within float rounding."""
    warp, replay = WARPS[kind]
    flips = [tv1.RandomHorizontalFlip(), tv1.RandomVerticalFlip()]
    tf = T.Compose.from_torchvision(tv1.Compose([*([warp, *flips] if after else [*flips, warp]), tv1.CenterCrop(32),
                                                 tv1.PILToTensor()]))
    assert tf.plan.canvas is not None
    assert (tf.plan.mirror, tf.plan.canvas_flip) == (((True, True), (False, False)) if after else
                                                     ((False, False), (True, True)))
    sizes = [tuple(i.shape[1:]) for i in photo_batch]
    params = tf.make_params(sizes, 3 if after else 5)
    got = tf(photo_batch, params)
    for k, (img, p) in enumerate(zip(photo_batch, params)):
        made = _flips(replay(img, p), p) if after else replay(_flips(img, p), p)
        assert torch.equal(got[k], F.center_crop(made, [32, 32])), (kind, after, k, p["flip"], p["vflip"])
    assert {p["flip"] for p in params} == {p["vflip"] for p in params} == {False, True}
    if after:
        _then_resized(photo_batch, [warp, tv1.RandomHorizontalFlip()], 4, lambda img, p: _flips(replay(img, p), p))


@pytest.mark.parametrize("after", [False, True])
def test_a_resize_first_then_flips_around_a_warp_then_a_crop(photo_batch, after):
    """`[Resize(48), flip, vflip, RandomRotation(25), CenterCrop(40)]` and `[Resize(48),
    RandomRotation(25), flip, vflip, CenterCrop(40)]` (fine-tuning scripts; refused before):
    each image resized first (torchvision's uint8 resize), then flipped and rotated in the
    Compose's order and cropped: torchvision's ops, bit for bit; both flips drawn."""
    flips = [tv1.RandomHorizontalFlip(), tv1.RandomVerticalFlip()]
    warp = tv1.RandomRotation(25)
    tf = T.Compose.from_torchvision(tv1.Compose([tv1.Resize(48), *([warp, *flips] if after else [*flips, warp]),
                                                 tv1.CenterCrop(40), tv1.PILToTensor()]))
    assert tf.plan.first and tf.plan.canvas is not None
    assert (tf.plan.mirror, tf.plan.canvas_flip) == (((True, True), (False, False)) if after else
                                                     ((False, False), (True, True)))
    sizes = [tuple(i.shape[1:]) for i in photo_batch]
    params = tf.make_params(sizes, 2)
    got = tf(photo_batch, params)
    for k, (img, p) in enumerate(zip(photo_batch, params)):
        x = F.resize(img, [48], antialias=True)
        x = _flips(F.rotate(x, p["rotation"]["angle"], NEAREST), p) if after else \
            F.rotate(_flips(x, p), p["rotation"]["angle"], NEAREST)
        assert torch.equal(got[k], F.center_crop(x, [40, 40])), (after, k, p)
    assert {p["flip"] for p in params} == {p["vflip"] for p in params} == {False, True}


def test_the_recipe_as_written_resizes_the_flipped_warped_image(photo_batch):
    """`[flip, RandomRotation(10), Resize((40, 44)), ToTensor()]`: torchvision's flip and
    rotation of the uint8 image, then its resize of the float one, within float rounding;
    and `[flip, RandomRotation(20), RandomResizedCrop(32)]`."""
    for params in _then_resized(photo_batch, [tv1.RandomHorizontalFlip(), tv1.RandomRotation(15)], 8,
                                lambda img, p: F.rotate(_flips(img, p), p["rotation"]["angle"], NEAREST)):
        assert {p["flip"] for p in params} == {False, True}


def _then_resized(photo_batch, before: list, seed: int, made) -> list[list[dict]]:
    """`before` (v1 steps), then Resize((40, 44)) or RandomResizedCrop(32), then ToTensor():
    torchvision's resize or resized crop of the float image `made(img, p)` makes of each
    image (its uint8 image before them), within float rounding. Each Compose's draws."""
    sizes, drawn = [tuple(i.shape[1:]) for i in photo_batch], []
    for steps, size in (([tv1.Resize((40, 44))], (40, 44)), ([tv1.RandomResizedCrop(32)], (32, 32))):
        tf = T.Compose.from_torchvision(tv1.Compose([*before, *steps, tv1.ToTensor()]))
        params = tf.make_params(sizes, seed)
        got = tf(photo_batch, params)
        for k, (img, p) in enumerate(zip(photo_batch, params)):
            x = f32(made(img, p))
            want = F.resized_crop(x, *p["crop"], list(size), antialias=True) if "crop" in p else \
                F.resize(x, list(size), antialias=True)
            assert float((got[k] - want).abs().max()) * 255 < 1e-3, (before, k, p)
        drawn.append(params)
    return drawn


def test_through_the_loader(tmp_path, photos):
    """Through the Loader (a PNG shard, two epochs): the Compose called on Pillow's decode
    with the Loader's draws."""
    from gpudecode.transforms.masks import refusal

    imgs = [np.ascontiguousarray(photos[n][::4, ::3]) for n in ("astronaut", "coffee", "chelsea", "rocket")]
    tf = T.Compose([T.RandomHorizontalFlip(), T.RandomRotation(10), T.Resize((40, 44)),
                    T.ToDtype(torch.float32, scale=True), T.Normalize([0.5] * 3, [0.25] * 3)])
    loader_is_compose(tmp_path, imgs, tf, 6)
    assert refusal(tf.plan) is None  # (masks and boxes follow it: test_masks_and_boxes_follow_the_flips)


@pytest.mark.parametrize("after", [False, True])
def test_masks_and_boxes_follow_the_flips(photos, after):
    """`[flip, vflip, RandomRotation(25), CenterCrop(32)]` and `[RandomRotation(25), flip,
    vflip, CenterCrop(32)]`: Compose.masks and Compose.boxes as torchvision's flips,
    rotation and crop of a Mask and a BoundingBoxes, in the Compose's order."""
    from torchvision import tv_tensors

    from test_boxes import random_boxes, tv_sanitized
    from test_masks import centre, slic_mask

    flips, rot = [T.RandomHorizontalFlip(), T.RandomVerticalFlip()], T.RandomRotation(25)
    tf = T.Compose([rot, *flips, T.CenterCrop(32)] if after else [*flips, rot, T.CenterCrop(32)])
    rng = np.random.default_rng(2)
    sizes = [(48, 40), (37, 61), (50, 50), (44, 36)] * 3
    params = tf.make_params(sizes, 7)
    names = sorted(photos)
    masks = [torch.from_numpy(slic_mask(centre(photos[names[k % len(names)]], h, w))) for k, (h, w) in enumerate(sizes)]
    boxes = [random_boxes(rng, h, w) for h, w in sizes]
    moved, got = tf.masks(masks, params, fill=255), tf.boxes(boxes, params, sizes=sizes)
    for k, (p, size) in enumerate(zip(params, sizes)):
        m = tv_tensors.Mask(masks[k][None])
        b = tv_tensors.BoundingBoxes(torch.as_tensor(boxes[k]), format="XYXY", canvas_size=size)
        angle = p["rotation"]["angle"]
        if after:
            m, b = _flips(F.rotate(m, angle, fill=255), p), _flips(F.rotate(b, angle), p)
        else:
            m, b = F.rotate(_flips(m, p), angle, fill=255), F.rotate(_flips(b, p), angle)
        m, b = F.center_crop(m, [32, 32]), F.center_crop(b, [32, 32])
        assert torch.equal(moved[k], m[0].as_subclass(torch.Tensor)), (after, k)
        want, _ = tv_sanitized(b)
        assert torch.allclose(got[k]["boxes"], want, atol=1e-3), (after, k)
    assert {p["flip"] for p in params} == {p["vflip"] for p in params} == {False, True}
