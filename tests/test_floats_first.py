"""The float conversion before the geometry (`[ToTensor(), Resize((224, 224)), Normalize]`,
as many scripts and notebooks write it): torchvision then resizes a float image, unrounded,
which is what the kernel does in any order (it resamples in float and rounds nothing until
a uint8 output). A flip after Normalize moves normalized pixels as it moves any. References:
torchvision's functional ops replaying each sample's draws on the float image, on real
photographs; the same Compose with ToTensor after the geometry (the same pixels)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision.transforms as v1
import torchvision.transforms.v2 as tv
import torchvision.transforms.v2.functional as F
from torch.utils.data import TensorDataset

import gpudecode
from gpudecode import transforms as T
from gpudecode.errors import TransformError

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
F32 = T.ToDtype(torch.float32, scale=True)


def chw(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a.transpose(2, 0, 1)))


@pytest.fixture(scope="module")
def images(photos):
    """Real photographs at odd sizes."""
    return [chw(np.ascontiguousarray(p[k:k + 81 + 2 * k, 2 * k:2 * k + 97 - k])) for k, p in enumerate(photos.values())]


# each geometry: our steps, and torchvision's replay of one sample's draws on the float image
GEOMETRIES = {
    "RandomResizedCrop": ([T.RandomResizedCrop(24)],
                          lambda x, p: F.resized_crop(x, *p["crop"], [24, 24], antialias=True)),
    "RandomResizedCrop, no antialias": ([T.RandomResizedCrop(24, antialias=False)],
                                        lambda x, p: F.resized_crop(x, *p["crop"], [24, 24], antialias=False)),
    "RandomCrop, padding": ([T.RandomCrop(72, padding=(3, 1, 6, 2), fill=(9, 99, 200))],
                            lambda x, p: F.crop(F.pad(x, [3, 1, 6, 2], fill=[9 / 255, 99 / 255, 200 / 255]),
                                                p["crop"][0] + 1, p["crop"][1] + 3, 72, 72)),
    "Resize + CenterCrop": ([T.Resize(37), T.CenterCrop(30)],
                            lambda x, p: F.center_crop(F.resize(x, [37], antialias=True), [30, 30])),
    "CenterCrop, padded": ([T.CenterCrop((90, 110))], lambda x, p: F.center_crop(x, [90, 110])),
    "Resize((h, w)), nearest": ([T.Resize((33, 45), interpolation="nearest")],
                                lambda x, p: F.resize(x, [33, 45], interpolation=F.InterpolationMode.NEAREST)),
}


@pytest.mark.parametrize("name", list(GEOMETRIES))
def test_a_float_conversion_first_is_torchvisions_geometry_on_the_float_image(images, name):
    geometry, replay = GEOMETRIES[name]
    first = T.Compose([F32, *geometry, T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)])
    last = T.Compose([*geometry, T.RandomHorizontalFlip(), F32, T.Normalize(MEAN, STD)])
    assert first.plan.dtype == torch.float32 and repr(first.plan) == repr(last.plan)
    sizes = [tuple(i.shape[1:]) for i in images]
    params = first.make_params(sizes, 3) + first.make_params(sizes, 4)
    imgs = images + images
    assert {p["flip"] for p in params} == {False, True}
    got = first(imgs, params)
    torch.testing.assert_close(got, last(imgs, params), atol=0, rtol=0)  # (one plan: one kernel call)
    for k, (img, p) in enumerate(zip(imgs, params)):
        x = replay(F.to_dtype(img, torch.float32, scale=True), p)
        want = F.normalize(F.horizontal_flip(x) if p["flip"] else x, MEAN, STD)
        assert want.shape == got[k].shape, (name, k)
        err = float((got[k] - want).abs().max()) * 255 * 0.225  # (in grey levels before Normalize)
        assert err < 1e-3, (name, k, p, err)


def test_torchvisions_compose_with_totensor_first_converts_and_resumes_alike():
    """The tutorials' orders convert, ToTensor taken where the geometry's float image needs
    it: the plan (and a saved state's fingerprint) that of ToTensor after the geometry."""
    cases = [
        (v1.Compose([v1.ToTensor(), v1.Resize((224, 224)), v1.Normalize(MEAN, STD)]),
         v1.Compose([v1.Resize((224, 224)), v1.ToTensor(), v1.Normalize(MEAN, STD)])),
        (v1.Compose([v1.ToTensor(), v1.RandomCrop(32, padding=4), v1.RandomHorizontalFlip(), v1.Normalize(MEAN, STD)]),
         v1.Compose([v1.RandomCrop(32, padding=4), v1.RandomHorizontalFlip(), v1.ToTensor(), v1.Normalize(MEAN, STD)])),
        (tv.Compose([tv.ToImage(), tv.ToDtype(torch.float32, scale=True), tv.RandomResizedCrop(176),
                     tv.RandomHorizontalFlip(), tv.Normalize(MEAN, STD)]),
         tv.Compose([tv.RandomResizedCrop(176), tv.RandomHorizontalFlip(), tv.ToImage(),
                     tv.ToDtype(torch.float32, scale=True), tv.Normalize(MEAN, STD)])),
        (v1.Compose([v1.PILToTensor(), v1.ConvertImageDtype(torch.float32), v1.RandomHorizontalFlip(),
                     v1.Resize(256), v1.CenterCrop(224)]),
         v1.Compose([v1.RandomHorizontalFlip(), v1.Resize(256), v1.CenterCrop(224), v1.PILToTensor(),
                     v1.ConvertImageDtype(torch.float32)])),
        (v1.Compose([v1.RandomResizedCrop(224), v1.ToTensor(), v1.Normalize(MEAN, STD), v1.RandomHorizontalFlip()]),
         v1.Compose([v1.RandomResizedCrop(224), v1.RandomHorizontalFlip(), v1.ToTensor(), v1.Normalize(MEAN, STD)])),
    ]
    for first, last in cases:
        a, b = T.Compose.from_torchvision(first), T.Compose.from_torchvision(last)
        assert repr(a.plan) == repr(b.plan) and a.plan.mirror == b.plan.mirror, first
        assert a.native_spec == b.native_spec, first


def test_a_nearest_canvas_after_the_float_conversion(images):
    """ToTensor, then a nearest RandomRotation before the crop: the canvas's picks are the
    float image's (F.rotate on it, then the crop); torchvision's fill on the float scale."""
    tf = T.Compose.from_torchvision(v1.Compose([v1.ToTensor(), v1.RandomRotation(25, fill=(0.2, 0.4, 1.0)),
                                                v1.CenterCrop(60)]))
    assert tf.plan.canvas is not None and tf.plan.dtype == torch.float32
    sizes = [tuple(i.shape[1:]) for i in images]
    params = tf.make_params(sizes, 5)
    got = tf(images, params)
    for k, (img, p) in enumerate(zip(images, params)):
        x = F.rotate(F.to_dtype(img, torch.float32, scale=True), p["rotation"]["angle"], fill=[0.2, 0.4, 1.0])
        want = F.center_crop(x, [60, 60])
        assert float((got[k] - want).abs().max()) < 1e-6, (k, p)


@pytest.mark.parametrize("steps, match", [
    ([v1.ToTensor(), v1.Resize((64, 64), interpolation=v1.InterpolationMode.BICUBIC)], "bicubic Resize"),
    ([v1.ToTensor(), v1.RandomResizedCrop(64, interpolation=v1.InterpolationMode.BICUBIC)], "bicubic RandomResizedCrop"),
    ([v1.ToTensor(), v1.RandomRotation(10, interpolation=v1.InterpolationMode.BILINEAR), v1.CenterCrop(32)],
     "RandomRotation.*interpolation"),
    ([v1.ToTensor(), v1.RandomRotation(10, fill=0.5), v1.CenterCrop(32)], "RandomRotation.*fill"),
    ([v1.ToTensor(), v1.Normalize(MEAN, STD), v1.RandomCrop(32, padding=4)], "RandomCrop after it, whose padding"),
    ([v1.ToTensor(), v1.Normalize(MEAN, STD), v1.CenterCrop(32)], "CenterCrop after it, whose padding"),
    ([v1.ToTensor(), v1.Normalize(MEAN, STD), v1.Resize(30), v1.CenterCrop(32)], "CenterCrop after it"),
    ([v1.ToTensor(), v1.Normalize(MEAN, STD), v1.RandomRotation(10), v1.CenterCrop(32)], "RandomRotation.*after it"),
    ([v1.ToTensor(), v1.Normalize(MEAN, STD), v1.ColorJitter(0.2), v1.Resize((8, 8))],
         "ColorJitter on a float image before the geometry"),
])
def test_what_a_float_image_first_would_make_otherwise_is_refused(steps, match):
    with pytest.raises(TransformError, match=f"(?s){match}"):
        T.Compose.from_torchvision(v1.Compose(steps))


def test_the_loader_takes_totensor_first_as_written(images):
    """A notebook's `[ToTensor(), RandomCrop(32, padding=4), RandomHorizontalFlip(),
    Normalize]` in the Loader: each batch is torchvision's float crop, flip, normalize of
    the sample with the Loader's draws."""
    imgs = torch.stack([i[:, :40, :40] for i in images] * 3)
    steps = v1.Compose([v1.ToTensor(), v1.RandomCrop(32, padding=4), v1.RandomHorizontalFlip(),
                        v1.Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))])
    ld = gpudecode.Loader(TensorDataset(imgs, torch.arange(len(imgs))), transform=steps, batch_size=4, seed=2,
                          shuffle=False)
    got = torch.cat([b for b, _ in ld])
    assert got.dtype == torch.float32
    params = ld.transform.make_params([(40, 40)] * len(imgs), ld.seed, indices=list(range(len(imgs))))
    for k, p in enumerate(params):
        x = F.crop(F.pad(F.to_dtype(imgs[k], torch.float32, scale=True), [4]), p["crop"][0] + 4,
                   p["crop"][1] + 4, 32, 32)
        want = F.normalize(F.horizontal_flip(x) if p["flip"] else x, [0.5] * 3, [0.25] * 3)
        assert (got[k] - want).abs().max() < 1e-5, (k, p)


# ---- a grey conversion first (`[Grayscale(3), Resize(256), CenterCrop(224), ...]`, X-rays for ImageNet models) ----


@pytest.mark.parametrize("channels", [1, 3])
def test_a_grayscale_first_is_torchvisions_grey_image_resampled(images, channels):
    """Grayscale before the geometry: a weighted sum of the channels, which a linear
    resample commutes with, run as the program's first step: torchvision's grey float image
    resized, cropped and flipped (to float32 rounding); one channel out for Grayscale(1)."""
    tf = T.Compose.from_torchvision(v1.Compose([v1.Grayscale(channels), v1.RandomHorizontalFlip(), v1.Resize(40),
                                                v1.RandomCrop(36, padding=3), v1.ToTensor(),
                                                v1.Normalize([0.5] * channels, [0.25] * channels)]))
    assert tf.plan.channels == channels
    sizes = [tuple(i.shape[1:]) for i in images]
    params = tf.make_params(sizes, 2) + tf.make_params(sizes, 3)
    imgs = images + images
    got = tf(imgs, params)
    assert got.shape[1] == channels and {p["flip"] for p in params} == {False, True}
    for k, (img, p) in enumerate(zip(imgs, params)):
        x = F.rgb_to_grayscale(F.to_dtype(img, torch.float32, scale=True), channels)
        x = F.resize(F.horizontal_flip(x) if p["flip"] else x, [40], antialias=True)
        t, l = p["crop"][:2]
        want = F.normalize(F.crop(x, t, l, 36, 36), [0.5] * channels, [0.25] * channels)
        err = float((got[k] - want).abs().max()) * 255 * 0.25
        assert err < 0.02, (k, p, err)  # (the kernel's grey weights, 0.2989 + 0.587 + 0.114, in float32)


@pytest.mark.parametrize("steps, match", [
    ([T.Grayscale(3), T.Resize((32, 32), interpolation="bicubic")], "bicubic Resize after it"),
    ([T.Grayscale(3), T.RandomCrop(32, padding=2, fill=(255, 0, 0))], r"a padding of colour \(255, 0, 0\)"),
])
def test_what_a_grey_image_first_would_make_otherwise_is_refused(steps, match):
    with pytest.raises(TransformError, match=f"(?s){match}"):
        T.Compose(steps)


# ---- Normalize first, after the float conversion (`[ToTensor(), Normalize(...), Resize((224, 224))]`) ----

NORMALIZED = {
    "Resize((h, w))": ([v1.Resize((33, 45))], lambda x, p: F.resize(x, [33, 45], antialias=True)),
    "RandomResizedCrop, flip": ([v1.RandomResizedCrop(24), v1.RandomHorizontalFlip()],
                                lambda x, p: _flip(F.resized_crop(x, *p["crop"], [24, 24], antialias=True), p)),
    "Resize + CenterCrop inside it": ([v1.Resize(37), v1.CenterCrop(30)],
                                      lambda x, p: F.center_crop(F.resize(x, [37], antialias=True), [30, 30])),
    "RandomCrop, reflected": ([v1.RandomCrop(80, padding=5, padding_mode="reflect")],
                              lambda x, p: F.crop(F.pad(x, [5], padding_mode="reflect"), p["crop"][0] + 5,
                                                  p["crop"][1] + 5, 80, 80)),
}


def _flip(x: torch.Tensor, p: dict) -> torch.Tensor:
    return F.horizontal_flip(x) if p.get("flip") else x


@pytest.mark.parametrize("name", list(NORMALIZED))
def test_normalize_first_is_torchvisions_geometry_on_the_normalized_image(images, name):
    """A per-channel affine map commutes with a resample whose weights sum to one (and with
    a reflection): the kernel normalizes last, which is torchvision's geometry on the
    normalized image to float32 rounding."""
    geometry, replay = NORMALIZED[name]
    tf = T.Compose.from_torchvision(v1.Compose([v1.ToTensor(), v1.Normalize(MEAN, STD), *geometry]))
    assert tf.plan.normalize is not None
    sizes = [tuple(i.shape[1:]) for i in images]
    params = tf.make_params(sizes, 3) + tf.make_params(sizes, 4)
    got = tf(images + images, params)
    for k, (img, p) in enumerate(zip(images + images, params)):
        want = replay(F.normalize(F.to_dtype(img, torch.float32, scale=True), MEAN, STD), p)
        err = float((got[k] - want).abs().max()) * 255 * 0.225  # (in grey levels before Normalize)
        assert err < 2e-3, (name, k, p, err)


MMDET_MEAN, MMDET_STD = [123.675, 116.28, 103.53], [58.395, 57.12, 57.375]


def test_a_float_conversion_without_scale_is_torchvisions_levels(images, tmp_path):
    """`ToDtype(torch.float32)` without scale (v2's default): torchvision's image.to(float),
    floats of 0 to 255, with a Normalize of mean and std in levels after it (detection and
    segmentation scripts write `[ToDtype(torch.float32), Normalize([123.675, ...],
    [58.395, ...]), Resize(hw)]`), before or after the geometry, or alone: the kernel's
    [0, 1] floats times 255, normalized on the levels. Against torchvision's functional ops
    on real photographs, to float32 rounding (a resize of the uint8 image rounds to levels
    in torchvision; the kernel's floats are unrounded: within a level there); a second
    Normalize's numbers are the user's; what reads 0-to-1 floats after it is refused."""
    sizes = [tuple(i.shape[1:]) for i in images]
    before = T.Compose.from_torchvision(tv.Compose([tv.ToDtype(torch.float32), tv.Normalize(MMDET_MEAN, MMDET_STD),
                                                    tv.Resize((40, 52), antialias=True)]))
    assert before.plan.dtype == torch.float32 and not before.plan.normalize.levels
    got = before(images)
    for k, img in enumerate(images):
        want = F.resize(F.normalize(img.to(torch.float32), MMDET_MEAN, MMDET_STD), [40, 52], antialias=True)
        assert float((got[k] - want).abs().max()) * 58.395 < 2e-3, k  # (in levels)
    for steps, levels in (([tv.RandomResizedCrop(24), tv.RandomHorizontalFlip(), tv.ToDtype(torch.float32)], 1.0),
                          ([tv.ToDtype(torch.float32), tv.RandomResizedCrop(24), tv.RandomHorizontalFlip()], 2e-3),
                          ([tv.RandomResizedCrop(24), tv.ToDtype(torch.float16), tv.Normalize(MMDET_MEAN, MMDET_STD),
                            tv.RandomErasing(1.0)], 1.0)):
        tf = T.Compose.from_torchvision(tv.Compose(steps))
        params = tf.make_params(sizes, 5) + tf.make_params(sizes, 6)
        got = tf(images + images, params)
        assert got.dtype == (torch.float16 if len(steps) == 4 else torch.float32)
        for k, (img, p) in enumerate(zip(images + images, params)):
            x = img.to(torch.float32) if isinstance(steps[0], tv.ToDtype) else img
            x = F.resized_crop(x, *p["crop"], [24, 24], antialias=True).to(torch.float32)
            x = F.horizontal_flip(x) if p["flip"] else x
            if len(steps) == 4:  # (normalized on the levels, then an erased box of zeros)
                x = F.normalize(x, MMDET_MEAN, MMDET_STD) * torch.tensor(MMDET_STD).view(3, 1, 1)
                e = p["erase"]
                x[:, e["i"]:e["i"] + e["h"], e["j"]:e["j"] + e["w"]] = 0
                y = got[k].float() * torch.tensor(MMDET_STD).view(3, 1, 1)
            else:
                y = got[k]
            assert float((y - x).abs().max()) <= levels + 0.6 * (len(steps) == 4), (steps, k, p)
    # a fill after it is a level, as torchvision pads the 0-to-255 floats with it
    padded = tv.Compose([tv.ToDtype(torch.float32), tv.RandomCrop(64, padding=4, fill=128)])
    tf = T.Compose.from_torchvision(padded)
    assert tf.plan.pad_fill == (128, 128, 128)
    params = tf.make_params(sizes, 2)
    got = tf(images, params)
    for k, (img, p) in enumerate(zip(images, params)):
        t, l, h, w = p["crop"]
        want = F.crop(F.pad(img.to(torch.float32), [4], fill=128), t + 4, l + 4, h, w)
        assert float((got[k] - want).abs().max()) < 1e-3, k
    ours = T.Compose([T.RandomResizedCrop(24), T.ToDtype(torch.float32), T.Normalize(MMDET_MEAN, MMDET_STD)])
    scaled = T.Compose([T.RandomResizedCrop(24), T.ToDtype(torch.float32, scale=True),
                        T.Normalize([m / 255 for m in MMDET_MEAN], [s / 255 for s in MMDET_STD])])
    params = ours.make_params(sizes, 1)
    torch.testing.assert_close(ours(images, params), scaled(images, params), atol=0, rtol=0)  # (one plan)
    for after in (T.ColorJitter(0.2), T.ToDtype(torch.uint8)):
        with pytest.raises(TransformError, match=rf"(?s){type(after).__name__} after ToDtype\(torch.float32\) without"
                                                 r"\s+scale=True"):
            T.Compose([T.RandomResizedCrop(24), T.ToDtype(torch.float32), after])
    with pytest.raises(TransformError, match="Normalize after Normalize cannot be fused"):
        T.Compose([T.ToDtype(torch.float32), T.Normalize(MEAN, STD), T.Normalize(MEAN, STD), T.CenterCrop(8)])
    # through the Loader: torchvision's v2 Compose as a detection script writes it
    from conftest import encode, make_shard

    shard = make_shard(tmp_path / "s.tar", [{"__key__": f"{k:03d}", "png": encode(img.permute(1, 2, 0).numpy(), "PNG"),
                                             "cls": b"1"} for k, img in enumerate(images)])
    tvc = tv.Compose([tv.ToDtype(torch.float32), tv.Normalize(MMDET_MEAN, MMDET_STD), tv.Resize((40, 52))])
    batch = next(iter(gpudecode.Loader(shard, batch_size=len(images), transform=tvc, device="cpu", shuffle=False)))
    for k, img in enumerate(images):
        assert float((batch.images[k] - tvc(img)).abs().max()) * 58.395 < 2e-3, k
