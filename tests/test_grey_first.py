"""A first pass on images of one channel (refused before): `Grayscale()` first, then
per-image steps or warps before the geometry, as emotion-recognition (FER2013) and X-ray
scripts write them (`[Grayscale(), RandomApply([RandomRotation(45)], p=0.6),
RandomApply([RandomPerspective(0.3)], p=0.5), RandomHorizontalFlip(), Resize((48, 48)), ...]`);
and a grey set's images (Compose(grey=True): MNIST's) through a first pass. The first pass
writes its one channel, which the canvas or the geometry reads as three, and the rest of the
Compose runs on one channel.

Against torchvision's ops on the one-channel float image (the kernel computes in float, as
torchvision does on a float image; on uint8 it truncates after each op) replaying each
image's draws on real photographs: within a level, the first pass's output rounded once to
uint8 (but for the few pixels a nearest pick rounds the other way); and bit for bit the same
Compose with the geometry first where the two orders give one image (a crop inside, a pixel
op)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision.transforms as tv1
import torchvision.transforms.v2.functional as F

from gpudecode import transforms as T
from conftest import loader_is_compose


@pytest.fixture(scope="module")
def imgs(photos):
    return [torch.from_numpy(np.ascontiguousarray(p[:60, 5:75].transpose(2, 0, 1))) for p in photos.values()]


def _within_a_level(tf, imgs, replay, seeds=2):
    """Each uint8 image within a level of torchvision's ops on the float image [0, 1]
    (`replay`), but for 0.5% of its values (a nearest pick that rounds the other way)."""
    for seed in range(seeds):
        params = tf.make_params([tuple(x.shape[1:]) for x in imgs], seed)
        got = tf(imgs, params)
        for k, (img, p) in enumerate(zip(imgs, params)):
            want = replay(img.float() / 255, p)
            assert got[k].shape == want.shape, (got[k].shape, want.shape)
            err = (got[k].float() - want.clamp(0, 1) * 255).abs()
            assert float((err > 1 + 1e-3).float().mean()) <= 0.005, (seed, k, p, float(err.max()))


def test_grayscale_then_warps_before_the_geometry(imgs):
    """`[Grayscale(), RandomRotation(10), CenterCrop(40)]` (a canvas of the grey image) and
    `[Grayscale(), RandomApply([RandomRotation(45)]), RandomApply([RandomPerspective(0.3)]),
    CenterCrop(40)]` (a first pass): one channel out, torchvision's within a level."""
    grey = F.rgb_to_grayscale
    for channels in (1, 3):  # (Grayscale(3): X-rays for an ImageNet model, three grey channels out)
        tf = T.Compose.from_torchvision(tv1.Compose([tv1.Grayscale(channels), tv1.RandomRotation(10),
                                                     tv1.CenterCrop(40)]))
        assert tf.plan.first and tf.plan.canvas is not None and tf.plan.channels == channels
        _within_a_level(tf, imgs, lambda x, p, c=channels: F.center_crop(F.rotate(grey(x, c), p["rotation"]["angle"]),
                                                                         [40, 40]))

    def replay(x, p):
        x = grey(x)
        x = F.rotate(x, p["rotation"]["angle"]) if "rotation" in p else x
        if "perspective" in p:
            x = F.perspective(x, None, None, coefficients=p["perspective"]["coefficients"], fill=[0.0],
                              interpolation=tv1.InterpolationMode.BILINEAR)
        return F.center_crop(x, [40, 40])

    tf = T.Compose.from_torchvision(tv1.Compose([tv1.Grayscale(), tv1.RandomApply([tv1.RandomRotation(45)], p=0.6),
                                                 tv1.RandomApply([tv1.RandomPerspective(0.3)], p=0.5),
                                                 tv1.CenterCrop(40)]))
    _within_a_level(tf, imgs, replay, seeds=4)


def test_colour_jitter_on_the_grey_image(imgs):
    """`[Grayscale(), ColorJitter(0.4, 0.4), CenterCrop(40)]`: the brightness and the contrast
    (the one channel's mean) on the whole grey image, then the crop, as torchvision."""
    from tvref import OPS

    def replay(x, p):
        x = F.rgb_to_grayscale(x)
        for op in p["order"]:
            name, fn = OPS[op]
            x = fn(x, p[name]) if p.get(name) is not None else x
        return F.center_crop(x, [40, 40])

    tf = T.Compose.from_torchvision(tv1.Compose([tv1.Grayscale(), tv1.ColorJitter(0.4, 0.4), tv1.CenterCrop(40)]))
    _within_a_level(tf, imgs, replay, seeds=3)


def test_a_grey_first_pass_is_the_grey_program(imgs):
    """Where the order does not matter (a pixel op, a crop inside the image) the first pass
    on one channel gives the program's image, bit for bit: `[Grayscale(), RandomInvert(1.0),
    CenterCrop(40)]` is `[CenterCrop(40), Grayscale(), RandomInvert(1.0)]`; so on a grey
    set's images (grey=True), `[RandomSolarize(100, 1.0), CenterCrop(40)]`."""
    first = T.Compose([T.Grayscale(), T.RandomInvert(1.0), T.CenterCrop(40)])
    after = T.Compose([T.CenterCrop(40), T.Grayscale(), T.RandomInvert(1.0)])
    assert first.plan.first and not after.plan.first
    assert torch.equal(first(imgs, first.make_params([tuple(x.shape[1:]) for x in imgs], 0)),
                       after(imgs, after.make_params([tuple(x.shape[1:]) for x in imgs], 0)))
    grey = [F.rgb_to_grayscale(x) for x in imgs]
    first = T.Compose([T.RandomSolarize(100, 1.0), T.CenterCrop(40)], grey=True)
    after = T.Compose([T.CenterCrop(40), T.RandomSolarize(100, 1.0)], grey=True)
    assert first.plan.first
    got = first(grey, first.make_params([tuple(x.shape[1:]) for x in grey], 0))
    assert got.shape[1] == 1 and torch.equal(got, after(grey, after.make_params([tuple(x.shape[1:]) for x in grey], 0)))
    assert torch.equal(got, torch.stack([F.center_crop(F.solarize(x, 100), [40, 40]) for x in grey]))


def test_the_fer_recipe_in_the_loader(tmp_path, photos):
    """The emotion-recognition script's recipe (a grey first pass, a flip, a Resize, a blur
    after) through the Loader: its batches are the Compose's with the Loader's draws."""
    tf = T.Compose.from_torchvision(tv1.Compose([
        tv1.Grayscale(), tv1.RandomApply([tv1.RandomRotation(45)], p=0.6),
        tv1.RandomApply([tv1.RandomPerspective(0.3)], p=0.5), tv1.RandomHorizontalFlip(), tv1.Resize((48, 48)),
        tv1.RandomApply([tv1.GaussianBlur(3)], p=0.3), tv1.ToTensor()]))
    loader = loader_is_compose(tmp_path, [p[:64, :80] for p in photos.values()], tf, seed=4)
    assert next(iter(loader)).images.shape[1] == 1
