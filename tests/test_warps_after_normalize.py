"""Warps after Normalize (refused before): `[ToTensor(), Normalize((0.1307,), (0.3081,)),
RandomRotation(10)]`, as MNIST and Fashion-MNIST scripts write it. torchvision warps the
normalized image, filling with 0 (the image's mean before the Normalize); the kernel warps
the image before its Normalize, filling with that mean: a nearest pick and a per-channel
affine map commute, so the images agree to float rounding. A bilinear warp stays refused:
torchvision blends its edge as (zero-padded sample) x coverage + (1 - coverage) x fill,
which commutes with no fill; so does another fill (its units depend on the float
conversion before). Against torchvision's ops replaying
each image's draws on real photographs, grey (the MNIST way: one channel) and RGB; the
refusals that stay."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision.transforms as tv1
import torchvision.transforms.v2.functional as F

from gpudecode import transforms as T
from gpudecode.errors import TransformError

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def _chw(photos, size=40):
    return [torch.from_numpy(np.ascontiguousarray(p[:size, 10:10 + size].transpose(2, 0, 1))) for p in photos.values()]


def _close(got, want, what):
    """Equal to float rounding (1e-5 of a normalized value), but for the few values a
    nearest pick may round the other way (torchvision's grid is computed in another order)."""
    off = (got - want).abs() > 1e-5
    assert float(off.float().mean()) <= 0.005, (what, float((got - want).abs().max()), float(off.float().mean()))


def test_rgb_warps_flips_and_containers_after_normalize(photos):
    """A flip, a rotation, an affine warp (fill=0 given), and RandomApply over a perspective
    warp with no fill, all nearest, after Normalize."""
    nearest = tv1.InterpolationMode.NEAREST
    steps = [tv1.ToTensor(), tv1.Normalize(MEAN, STD), tv1.RandomHorizontalFlip(), tv1.RandomRotation(20),
             tv1.RandomAffine(10, (0.1, 0.1), (0.9, 1.1), fill=0),
             tv1.RandomApply([tv1.RandomPerspective(0.3, 1.0, interpolation=nearest)], p=0.5)]
    tf = T.Compose.from_torchvision(tv1.Compose(steps))
    imgs = _chw(photos)
    for seed in range(3):
        params = tf.make_params([tuple(x.shape[1:]) for x in imgs], seed)
        got = tf(imgs, params)
        for k, (img, p) in enumerate(zip(imgs, params)):
            x = F.normalize(img.float() / 255, MEAN, STD)
            x = F.horizontal_flip(x) if p["flip"] else x
            x = F.rotate(x, p["rotation"]["angle"], fill=0.0)
            x = F.affine(x, **p["affine"], fill=0.0)
            if "perspective" in p:
                x = F.perspective(x, None, None, coefficients=p["perspective"]["coefficients"], interpolation=nearest)
            _close(got[k], x, (seed, k))


def test_the_mnist_recipe_on_grey_images(photos):
    """`[ToTensor(), Normalize((0.1307,), (0.3081,)), RandomRotation(10)]` on 28x28 grey
    images of one channel (Compose(grey=True), as MNIST's are read), and with a
    RandomAffine of a fill."""
    grey = [F.rgb_to_grayscale(x[:, :28, :28]) for x in _chw(photos)]
    for extra, ref in (([], lambda x, p: x),
                       ([tv1.RandomAffine(0, translate=(0.1, 0.1), scale=(0.8, 0.9))],
                        lambda x, p: F.affine(x, **p["affine"], fill=0.0))):
        tf = T.Compose.from_torchvision(tv1.Compose([tv1.ToTensor(), tv1.Normalize((0.1307,), (0.3081,)),
                                                     tv1.RandomRotation(10), *extra]), grey=True)
        params = tf.make_params([(28, 28)] * len(grey), 7)
        got = tf(grey, params)
        assert got.shape == (len(grey), 1, 28, 28)
        for k, (img, p) in enumerate(zip(grey, params)):
            x = F.normalize(img.float() / 255, [0.1307], [0.3081])
            x = ref(F.rotate(x, p["rotation"]["angle"], fill=0.0), p)
            _close(got[k], x, k)
            if abs(p["rotation"]["angle"]) > 3 or extra:  # (a corner filled: the normalized fill, 0)
                assert float(got[k][0, 0, 0]) == pytest.approx(0.0, abs=1e-6)


def test_what_stays_refused_after_normalize():
    """A colour op after Normalize; a bilinear warp; a fill other than 0."""
    for steps in ([tv1.ToTensor(), tv1.Normalize(MEAN, STD), tv1.ColorJitter(0.2)],
                  [tv1.ToTensor(), tv1.Normalize(MEAN, STD), tv1.RandomPerspective(0.3)],
                  [tv1.ToTensor(), tv1.Normalize(MEAN, STD), tv1.RandomRotation(10, tv1.InterpolationMode.BILINEAR)],
                  [tv1.ToTensor(), tv1.Normalize(MEAN, STD), tv1.RandomRotation(10, fill=0.5)],
                  [tv1.ToTensor(), tv1.Normalize(MEAN, STD), tv1.RandomApply([tv1.RandomRotation(10),
                                                                              tv1.ColorJitter(0.2)])]):
        with pytest.raises(TransformError, match="after Normalize cannot be fused"):
            T.Compose.from_torchvision(tv1.Compose(steps))


def test_a_normalize_on_levels(photos):
    """v2's `[ToImage(), ToDtype(float32) (levels, no scale), Normalize([120] * 3, [50] * 3),
    RandomRotation(10)]`: the fill is the levels' mean alike."""
    import torchvision.transforms.v2 as v2

    tf = T.Compose.from_torchvision(v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32),
                                                v2.Normalize([120.0] * 3, [50.0] * 3), v2.RandomRotation(10)]))
    imgs = _chw(photos)
    params = tf.make_params([tuple(x.shape[1:]) for x in imgs], 11)
    got = tf(imgs, params)
    for k, (img, p) in enumerate(zip(imgs, params)):
        x = F.rotate(F.normalize(img.float(), [120.0] * 3, [50.0] * 3), p["rotation"]["angle"], fill=0.0)
        _close(got[k], x, k)


def test_the_loader_gives_the_composes_batches(tmp_path, photos):
    """The Fashion-MNIST GAN script's recipe, `[ToTensor(), Normalize((0.5,), (0.5,)),
    RandomHorizontalFlip(), RandomRotation(10)]`, through the Loader (a shard of PNGs of one
    size): each epoch's batch is the Compose's call with the Loader's draws."""
    from conftest import loader_is_compose

    tf = T.Compose.from_torchvision(tv1.Compose([tv1.ToTensor(), tv1.Normalize((0.5,), (0.5,)),
                                                 tv1.RandomHorizontalFlip(), tv1.RandomRotation(10)]))
    loader_is_compose(tmp_path, [p[:48, :48] for p in photos.values()], tf, seed=3)
