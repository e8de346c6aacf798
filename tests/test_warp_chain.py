"""Warps in a row before the geometry (refused before): `[RandomRotation(15),
RandomAffine(degrees=0, translate=(0.1, 0.1)), RandomCrop(28, padding=2), ...]` (an MNIST
script's, three times in a search), `[RandomPerspective(0.19, p=0.65), RandomAffine(4, ...),
Resize((224, 224))]`: one canvas (warp_chain.WarpChain), each warp made from the one before
as torchvision makes it. Bit for bit torchvision's ops replaying each image's draws on real
photographs (uint8, no resampling after), within a level after a RandomResizedCrop; flips
before and after the warps; a Resize first; masks and boxes; the Loader; the refusals."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision.transforms as tv1
import torchvision.transforms.v2.functional as F

from gpudecode import transforms as T
from gpudecode.errors import TransformError
from gpudecode.transforms.warp_chain import WarpChain
from conftest import loader_is_compose


@pytest.fixture(scope="module")
def imgs(photos):
    return [torch.from_numpy(np.ascontiguousarray(p[:44, 8:60].transpose(2, 0, 1))) for p in photos.values()]


def _rot_affine(x, p):
    return F.affine(F.rotate(x, p["rotation"]["angle"]), **p["affine"])


def _check(tf, imgs, replay, seeds=3):
    for seed in range(seeds):
        params = tf.make_params([tuple(x.shape[1:]) for x in imgs], seed)
        got = tf(imgs, params)
        for k, (img, p) in enumerate(zip(imgs, params)):
            assert torch.equal(got[k], replay(img, p)), (seed, k, p)


def test_the_mnist_scripts_warps_then_a_padded_crop(imgs):
    """`[RandomRotation(15), RandomAffine(0, translate=(0.1, 0.1)), RandomCrop(28, padding=2)]`:
    the rotation, the affine warp of the rotated image, then torchvision's padded crop."""
    tf = T.Compose.from_torchvision(tv1.Compose([tv1.RandomRotation(15), tv1.RandomAffine(0, translate=(0.1, 0.1)),
                                                 tv1.RandomCrop(28, padding=2)]))
    assert isinstance(tf.plan.canvas, WarpChain) and tf.plan.program == ()
    _check(tf, imgs, lambda x, p: F.crop(_rot_affine(x, p), *p["crop"]))  # (its crop where it pads: past the image)


def test_three_warps_flips_before_or_after_them_and_a_resize_first(imgs):
    """A perspective warp, a rotation and an affine warp, with a flip before them (the image
    flipped before them) or after them (the crop's window mirrored), then a CenterCrop; and
    `[Resize(40), RandomRotation(10), RandomAffine(...), CenterCrop(32)]` (the first pass)."""
    warps = [tv1.RandomPerspective(0.3, 0.7), tv1.RandomRotation(20, fill=(9, 99, 199)),
             tv1.RandomAffine(5, (0.05, 0.1), (0.9, 1.1), 3)]

    def warped(x, p):
        if "perspective" in p:
            x = F.perspective(x, None, None, coefficients=p["perspective"]["coefficients"],
                              interpolation=tv1.InterpolationMode.BILINEAR, fill=[0.0] * 3)  # (v1's fill=0, blended)
        return F.affine(F.rotate(x, p["rotation"]["angle"], fill=[9, 99, 199]), **p["affine"])

    before = T.Compose.from_torchvision(tv1.Compose([tv1.RandomHorizontalFlip(), *warps, tv1.CenterCrop(36)]))
    _check(before, imgs, lambda x, p: F.center_crop(warped(F.horizontal_flip(x) if p["flip"] else x, p), [36, 36]),
           seeds=4)
    after = T.Compose.from_torchvision(tv1.Compose([*warps, tv1.RandomVerticalFlip(), tv1.CenterCrop(36)]))
    _check(after, imgs, lambda x, p: F.center_crop(F.vertical_flip(warped(x, p)) if p["vflip"] else warped(x, p),
                                                   [36, 36]), seeds=4)
    first = T.Compose.from_torchvision(tv1.Compose([tv1.Resize(40), tv1.RandomRotation(10),
                                                    tv1.RandomAffine(0, (0.1, 0.1)), tv1.CenterCrop(32)]))
    _check(first, imgs, lambda x, p: F.center_crop(_rot_affine(F.resize(x, [40]), p), [32, 32]))


def test_a_resized_crop_of_the_warps(imgs):
    """RandomResizedCrop after two warps (the last painted for its window only): within a
    level of torchvision's on the float image."""
    tf = T.Compose.from_torchvision(tv1.Compose([tv1.RandomRotation(20), tv1.RandomAffine(0, (0.1, 0.1)),
                                                 tv1.RandomResizedCrop(24), tv1.ToTensor()]))
    params = tf.make_params([tuple(x.shape[1:]) for x in imgs], 5)
    got = tf(imgs, params)
    for k, (img, p) in enumerate(zip(imgs, params)):
        x = F.to_dtype(_rot_affine(img, p), torch.float32, scale=True)
        want = F.resized_crop(x, *p["crop"], [24, 24], antialias=True)
        assert float((got[k] - want).abs().max()) * 255 <= 1.0 + 1e-3, k


def test_masks_and_boxes_follow_each_warp(imgs):
    """A mask and boxes through the two warps and the crop: torchvision's ops on the
    tv_tensors with the same draws."""
    from test_rotation_expand import targets_follow

    targets_follow(imgs[1], T.Compose([T.RandomRotation(25), T.RandomAffine(0, (0.1, 0.1)), T.RandomCrop((36, 40))]),
                   _rot_affine)


def test_the_loader_gives_the_composes_batches(tmp_path, photos):
    tf = T.Compose.from_torchvision(tv1.Compose([tv1.RandomRotation(15), tv1.RandomAffine(0, translate=(0.1, 0.1)),
                                                 tv1.RandomCrop(28, padding=2), tv1.PILToTensor()]))
    loader_is_compose(tmp_path, [p[:40, :48] for p in photos.values()], tf, seed=2)


def test_what_stays_refused():
    """Two warps that draw under one key; warps in a row with no geometry after them run in
    each sample's program (no canvas); an expanded rotation does not chain."""
    with pytest.raises(TransformError, match="two warps that draw 'rotation'"):
        T.Compose([T.RandomRotation(10), T.RandomRotation(20), T.RandomCrop(28)])
    tf = T.Compose([T.CenterCrop(28), T.RandomRotation(10), T.RandomAffine(0, (0.1, 0.1))])
    assert tf.plan.canvas is None and len(tf.plan.program) == 2
    with pytest.raises(TransformError, match="a geometry step"):
        T.Compose([T.RandomRotation(10, expand=True), T.RandomAffine(0, (0.1, 0.1)), T.RandomCrop(28)])
