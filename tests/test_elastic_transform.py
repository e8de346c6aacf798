"""ElasticTransform as a canvas step (first, before the geometry): each image displaced by
a field of its own size, drawn as torchvision draws it (uniform noise, its gaussian, alpha
over the side) from a generator seeded by the sample's stream, and sampled as F.elastic
samples it. Against torchvision's F.elastic replaying our fields on real photographs (the
canvas bit for bit; through a crop within a level), the fields' distribution against
torchvision's make_params, and the places it cannot stand refused with the reason."""
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
    return [torch.from_numpy(np.ascontiguousarray(p[::7, ::6].transpose(2, 0, 1))) for p in photos.values()]


@pytest.mark.parametrize("interpolation,fill", [("bilinear", 0), ("nearest", (200, 30, 90)), ("bilinear", None)])
def test_the_canvas_is_torchvisions_elastic_of_our_field(photo_batch, interpolation, fill):
    """A CenterCrop of the image's own size reads the canvas back: F.elastic's uint8 image
    for the same field, bit for bit (the same torch ops)."""
    mode = tv.InterpolationMode.NEAREST if interpolation == "nearest" else tv.InterpolationMode.BILINEAR
    el = T.ElasticTransform(80.0, (4.0, 6.0), interpolation, fill)
    for img in photo_batch[:3]:
        size = tuple(img.shape[1:])
        tf = T.Compose([el, T.CenterCrop(size)])
        for seed in range(2):
            p = tf.make_params([size], seed)[0]
            want = F.elastic(img, el.displacement(p, size), mode, fill=list(fill) if isinstance(fill, tuple) else fill)
            assert torch.equal(tf([img], [p])[0], want), (seed, size)


def test_elastic_then_a_crop_matches_torchvision(photo_batch):
    el = T.ElasticTransform(50.0, 5.0, fill=(123, 117, 104))
    tf = T.Compose([el, T.RandomResizedCrop((36, 40)), T.RandomHorizontalFlip(), T.ToDtype(torch.float32, scale=True)])
    sizes = [tuple(im.shape[1:]) for im in photo_batch]
    params = tf.make_params(sizes, 3)
    got = tf(photo_batch, params)
    for k, (img, p) in enumerate(zip(photo_batch, params)):
        x = F.elastic(img, el.displacement(p, sizes[k]), fill=[123, 117, 104])
        x = F.resized_crop(F.to_dtype(x, torch.float32, scale=True), *p["crop"], [36, 40], antialias=True)
        if p["flip"]:
            x = F.horizontal_flip(x)
        assert float(((got[k] - x.clamp(0, 1)).abs() * 255).max()) <= 1.0 + 1e-3, k


def test_fields_are_distributed_as_torchvisions():
    """At the centre and across a few pixels (the blur's correlation), per axis: KS of our
    fields' values against torchvision's make_params' over 300 draws each."""
    n, size = 300, (36, 44)
    ours_t = T.ElasticTransform(40.0, (3.0, 2.0))
    tf = T.Compose([ours_t, T.CenterCrop(8)])
    ours = torch.cat([ours_t.displacement(p, size) for p in tf.make_params([size] * n, 9)])
    theirs_t = tv.ElasticTransform(40.0, (3.0, 2.0))
    torch.manual_seed(1)
    img = torch.zeros((3, *size), dtype=torch.uint8)
    theirs = torch.cat([theirs_t.make_params([img])["displacement"] for _ in range(n)])
    assert ours.shape == theirs.shape == (n, *size, 2)
    for axis in (0, 1):
        for name, pick in (("centre", lambda d, a: d[:, 18, 22, a]),
                           ("step of 3", lambda d, a: d[:, 18, 22, a] - d[:, 18, 25, a]),
                           ("corner", lambda d, a: d[:, 0, 0, a])):
            assert stats.ks_2samp(pick(ours, axis).numpy(), pick(theirs, axis).numpy()).pvalue > 1e-3, (axis, name)
    assert not torch.equal(ours[0], ours[1])


def test_where_it_stands_and_its_conversion():
    got = T.Compose.from_torchvision(tv.Compose([tv.ElasticTransform(30.0, 4.0, fill=7), tv.CenterCrop(32)]))
    el = got.plan.canvas
    assert isinstance(el, T.ElasticTransform) and el.alpha == (30.0, 30.0) and el.sigma == (4.0, 4.0)
    assert el.fill == 7 and got.plan.program == ()
    with pytest.raises(TransformError, match=r"(?s)field is drawn at the decoded image's size.*comes first"):
        T.Compose.from_torchvision(tv.Compose([tv.RandomResizedCrop(32), tv.ElasticTransform()]))
    with pytest.raises(TransformError, match=r"(?s)inside\s+RandomApply"):
        T.Compose([T.RandomResizedCrop(16), T.RandomApply([T.ElasticTransform()], 0.5)])
    with pytest.raises(TransformError, match="(?s)geometry step.*must follow it"):
        T.Compose([T.ElasticTransform()])
    with pytest.raises(ValueError, match="too small"):
        T.Compose([T.ElasticTransform(sigma=5.0), T.CenterCrop(4)])(torch.zeros((3, 12, 12), dtype=torch.uint8))
