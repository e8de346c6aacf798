"""ElasticTransform as a canvas step (first, before the geometry), and after the geometry
on the kernel's output (last, before Normalize): each image displaced by a field of its
own size, drawn as torchvision draws it (uniform noise, its gaussian, alpha
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

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


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
    after = T.Compose.from_torchvision(tv.Compose([tv.RandomResizedCrop(32), tv.ElasticTransform()]))
    assert isinstance(after.plan.post, T.ElasticTransform) and after.plan.canvas is None and after.plan.post_levels
    alone = T.Compose([T.ElasticTransform()])  # (no geometry: it warps each image at its own size)
    assert alone.plan.post is not None and alone.plan.canvas is None
    with pytest.raises(TransformError, match=r"(?s)inside\s+RandomApply"):
        T.Compose([T.RandomResizedCrop(16), T.RandomApply([T.ElasticTransform()], 0.5)])
    with pytest.raises(TransformError, match=r"(?s)ColorJitter after ElasticTransform.*only Normalize, ToDtype\s+and\s+"
                                             r"RandomErasing"):
        T.Compose([T.RandomResizedCrop(16), T.ElasticTransform(), T.ColorJitter(0.4)])
    with pytest.raises(TransformError, match="ElasticTransform after Normalize"):
        T.Compose([T.RandomResizedCrop(16), T.Normalize(MEAN, STD), T.ElasticTransform()])
    with pytest.raises(TransformError, match="ElasticTransform after ElasticTransform"):
        T.Compose([T.RandomResizedCrop(16), T.ElasticTransform(), T.ElasticTransform()])
    with pytest.raises(TransformError, match="(?s)geometry step.*must follow it"):
        T.Compose([T.RandomZoomOut()])
    with pytest.raises(ValueError, match="too small"):
        T.Compose([T.ElasticTransform(sigma=5.0), T.CenterCrop(4)])(torch.zeros((3, 12, 12), dtype=torch.uint8))


def _tv_after(img, p, el, size, interpolation, levels):
    """torchvision's RandomResizedCrop, flip and elastic of `img` replaying our params."""
    x = F.resized_crop(img, *p["crop"], list(size), antialias=True)
    if p["flip"]:
        x = F.horizontal_flip(x)
    if not levels:
        x = F.to_dtype(x, torch.float32, scale=True)
    mode = tv.InterpolationMode.NEAREST if interpolation == "nearest" else tv.InterpolationMode.BILINEAR
    fill = None if el.fill is None else [float(v) / (1 if levels else 255) for v in (
        el.fill if isinstance(el.fill, tuple) else (el.fill,) * 3)]
    x = F.elastic(x, el.displacement(p, size), mode, fill=fill)
    return F.to_dtype(x, torch.float32, scale=True)


@pytest.mark.parametrize("interpolation,fill", [("bilinear", 0), ("nearest", (200, 30, 90))])
def test_after_the_crop_it_matches_torchvision_on_photographs(photo_batch, interpolation, fill):
    """RandomResizedCrop + flip + ElasticTransform (+ Normalize): the field drawn at the
    output's size, torchvision's F.elastic replaying it on its own crop of uint8 images,
    within a level (bilinear; nearest: 99% of values, a level's difference before the warp
    can move a nearest pick), and the same after Normalize."""
    el = T.ElasticTransform(40.0, (3.0, 4.0), interpolation, fill)
    size = (56, 60)
    tf = T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), el, T.ToDtype(torch.float32, scale=True)])
    norm = T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), el, T.Normalize(MEAN, STD)])
    sizes = [tuple(im.shape[1:]) for im in photo_batch]
    params = tf.make_params(sizes, 4)
    assert [p["displacement_seed"] for p in params] == [p["displacement_seed"] for p in norm.make_params(sizes, 4)]
    got, got_norm = tf(photo_batch, params), norm(photo_batch, params)
    mean, std = torch.tensor(MEAN).view(3, 1, 1), torch.tensor(STD).view(3, 1, 1)
    for k, (img, p) in enumerate(zip(photo_batch, params)):
        want = _tv_after(img, p, el, size, interpolation, True)
        far = ((got[k] - want).abs() * 255 > 1.0 + 1e-3).float().mean()
        assert float(far) <= (0.01 if interpolation == "nearest" else 0.0), k
        near = ((got_norm[k] - (want - mean) / std).abs() * std * 255 <= 1.0 + 1e-3).float().mean()
        assert float(near) >= (0.99 if interpolation == "nearest" else 1.0), k


def test_after_a_float_conversion_it_warps_floats(photo_batch):
    """ToDtype(float) before it: torchvision warps the float image (no rounding to levels)."""
    el = T.ElasticTransform(30.0, 3.0, fill=(10, 20, 30))
    size = (48, 48)
    tf = T.Compose([T.RandomResizedCrop(size), T.ToDtype(torch.float32, scale=True), el])
    assert not tf.plan.post_levels
    sizes = [tuple(im.shape[1:]) for im in photo_batch]
    params = tf.make_params(sizes, 2)
    got = tf(photo_batch, params)
    for k, (img, p) in enumerate(zip(photo_batch, params)):
        want = _tv_after(img, {**p, "flip": False}, el, size, "bilinear", False)
        assert float(((got[k] - want).abs() * 255).max()) <= 1.0 + 1e-3, k


def test_after_the_crop_through_the_loader_as_the_compose(tmp_path, photos):
    """Through the Loader (PNG shards; the decoder asked for the crop's window only): the
    Compose called on Pillow's decode with the Loader's draws, value for value."""
    import io

    from PIL import Image

    import gpudecode
    from conftest import encode, make_shard

    imgs = [photos["astronaut"][::8, ::8], photos["coffee"][::7, ::9], photos["chelsea"][::5, ::6]]
    shard = make_shard(tmp_path / "e-000000.tar", [{"__key__": f"{i:03d}", "png": encode(a, "PNG"), "cls": b"1"}
                                                    for i, a in enumerate(imgs)])
    tf = T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip(), T.ElasticTransform(20.0, 2.0),
                    T.Normalize(MEAN, STD)])
    loader = gpudecode.Loader(shard, batch_size=3, transform=tf, device="cpu", shuffle=False, seed=7)
    loader.set_epoch(1)
    (images, labels), = list(loader)
    assert images.shape == (3, 3, 24, 24) and images.dtype == torch.float32
    decoded = [torch.from_numpy(np.array(Image.open(io.BytesIO(encode(a, "PNG"))).convert("RGB"))).permute(2, 0, 1)
               for a in imgs]
    params = tf.make_params([tuple(d.shape[1:]) for d in decoded], 7, epoch=1, indices=[0, 1, 2])
    assert torch.equal(images, tf([d.contiguous() for d in decoded], params))


@pytest.mark.parametrize("size,sigma", [((224, 224), (5.0, 5.0)), ((36, 44), (3.0, 2.0)), ((7, 9), (0.4, 0.7)),
                                        ((300, 200), (2.0, 7.0))])
def test_the_fields_blur_is_torchvisions_conv2d_pair(size, sigma):
    """The field's blur (kernels/cpu_passes._blur_field: separable, vectorized) against
    torchvision's F.pad(reflect) + F.conv2d by kx then ky on the same noise: within float32
    rounding."""
    from gpudecode.kernels.cpu_twin import blur_field
    from gpudecode.transforms.warps import _blur_kernel

    h, w = size
    k = int(8 * sigma[0] + 1)
    k += 1 - k % 2
    d = torch.rand(1, 1, h, w, generator=torch.Generator().manual_seed(3)) * 2 - 1
    kx, ky = _blur_kernel(k, sigma[0]), _blur_kernel(k, sigma[1])
    ref = torch.nn.functional.pad(d, [k // 2] * 4, mode="reflect")
    ref = torch.nn.functional.conv2d(torch.nn.functional.conv2d(ref, kx.view(1, 1, 1, k)), ky.view(1, 1, k, 1))
    got = np.empty((h, w), np.float32)
    blur_field(d[0, 0].numpy(), kx.numpy(), ky.numpy(), got, np.empty(w + k - 1, np.float32), np.empty((h, w), np.float32))
    np.testing.assert_allclose(got, ref[0, 0].numpy(), rtol=0, atol=2e-7)


@pytest.mark.parametrize("interpolation,fill", [("bilinear", 0), ("nearest", (1, 2, 3)), ("bilinear", None)])
@pytest.mark.parametrize("levels", [True, False])
def test_the_post_warps_batch_form_equals_image_by_image(interpolation, fill, levels):
    """ElasticTransform after the crop warps a batch in one grid_sample on CUDA (its fields
    in one upload); on the CPU image by image: the same values, bit for bit (the batch form
    run here on the CPU)."""
    import random

    el = T.ElasticTransform(40.0, 4.0, interpolation=interpolation, fill=fill)
    params = [el.draw(random.Random(k), (48, 40)) for k in range(5)]
    host = torch.rand(5, 3, 48, 40, generator=torch.Generator().manual_seed(2))
    a, b = host.clone(), host.clone()
    el.warp_output(a, params, levels, batched=False)
    el.warp_output(b, params, levels, batched=True)
    assert torch.equal(a, b) and not torch.equal(a, host)
    el.warp_output(host[:0], [], levels, batched=True)  # (an empty batch: nothing to do)
