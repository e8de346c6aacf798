"""InterpolationMode.NEAREST and NEAREST_EXACT for Resize and RandomResizedCrop: one
source pixel an output pixel, ATen's index (floor((i + 0.5) * scale) and floor(i *
scale), in float32, at most the last), so the same values as torchvision's resize on
real photographs, on the CPU twin (exactly) and under the CUDA simulator (uint8
exactly, float to an ulp). And "pil-nearest", Pillow's NEAREST (timm's "nearest"), equal
to Pillow's resize the same ways."""
from __future__ import annotations

import textwrap

import numpy as np
import pytest
import torch
import torchvision.transforms.v2 as tv
import torchvision.transforms.v2.functional as F

from gpudecode import transforms as T
from gpudecode.errors import TransformError
from simulator import run_code

MODES = {"nearest": tv.InterpolationMode.NEAREST, "nearest-exact": tv.InterpolationMode.NEAREST_EXACT}


@pytest.fixture(scope="module")
def photo_batch(photos):
    out = [torch.from_numpy(np.ascontiguousarray(p[::3, ::3].transpose(2, 0, 1))) for p in photos.values()]
    out.append(torch.from_numpy(np.ascontiguousarray(photos["coffee"][::7, ::2].transpose(2, 0, 1))))
    return out


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("size", [(37, 53), (160, 150), (301, 97)])  # down, about the same, up in one side
def test_resize_is_torchvisions_exactly(photo_batch, mode, size):
    tf = T.Compose([T.Resize(size, interpolation=MODES[mode]), T.RandomHorizontalFlip()])
    sizes = [tuple(im.shape[1:]) for im in photo_batch]
    params = tf.make_params(sizes, 0)
    got = tf(photo_batch, params)
    for k, (img, p) in enumerate(zip(photo_batch, params)):
        want = F.resize(img, list(size), interpolation=MODES[mode])
        if p["flip"]:
            want = F.horizontal_flip(want)
        assert torch.equal(got[k], want), (mode, size, k)


@pytest.mark.parametrize("mode", list(MODES))
def test_random_resized_crop_and_resize_crop_are_torchvisions(photo_batch, mode):
    sizes = [tuple(im.shape[1:]) for im in photo_batch]
    rrc = T.Compose([T.RandomResizedCrop((48, 40), interpolation=MODES[mode]), T.ToDtype(torch.float32, scale=True)])
    rc = T.Compose([T.Resize(70, interpolation=MODES[mode]), T.RandomCrop(64)])
    for seed in range(3):
        params = rrc.make_params(sizes, seed)
        got = rrc(photo_batch, params)
        for k, (img, p) in enumerate(zip(photo_batch, params)):
            want = F.to_dtype(F.resized_crop(img, *p["crop"], [48, 40], interpolation=MODES[mode]), torch.float32,
                              scale=True)
            assert torch.equal(got[k], want), (seed, k, p["crop"])
        params = rc.make_params(sizes, seed)
        got = rc(photo_batch, params)
        for k, (img, p) in enumerate(zip(photo_batch, params)):
            want = F.crop(F.resize(img, [70], interpolation=MODES[mode]), *p["crop"])
            assert torch.equal(got[k], want), (seed, k)


def test_from_torchvision_and_what_is_refused():
    c = T.Compose.from_torchvision(tv.Compose([tv.RandomResizedCrop(32, interpolation=tv.InterpolationMode.NEAREST_EXACT)]))
    assert c.plan.resample == 2 and c.plan.geometry[0].interpolation == "nearest-exact"
    c = T.Compose.from_torchvision(tv.Compose([tv.Resize((32, 32), interpolation=tv.InterpolationMode.NEAREST,
                                                          antialias=True)]))  # (antialias: ignored for nearest)
    assert c.plan.resample == 3
    assert T.Compose([T.Resize((8, 8), interpolation=0)]).plan.resample == 3  # (PIL's NEAREST)
    with pytest.raises(TransformError, match="a mode drawn an image is bilinear or bicubic"):
        T.RandomResizedCrop(32, interpolation=["nearest", "bilinear"])
    with pytest.raises(TransformError, match="cannot be fused"):
        T.Resize(32, interpolation=tv.InterpolationMode.BOX)


def test_pil_nearest_index_is_pillows_on_ramps():
    """kernels/_filters.pil_nearest_index against Pillow resizing a ramp (each pixel its
    own index, mode "I"), over sizes where the source position falls on pixel edges
    (halvings, 3:2) and random ones: every index equal. (torch's nearest-exact differs from
    Pillow on some of these: the reason the mode exists.)"""
    from PIL import Image

    from gpudecode.kernels._filters import pil_nearest_index

    rng = np.random.default_rng(0)
    pairs = [(8, 4), (6, 4), (300, 200), (600, 224), (224, 600), (177, 123), (5, 1), (1, 5)]
    pairs += [tuple(int(v) for v in rng.integers(1, 700, 2)) for _ in range(120)]
    aten_differs = 0
    for n_in, n_out in pairs:
        ramp = np.tile(np.arange(n_in, dtype=np.int32), (2, 1))
        pil = np.asarray(Image.fromarray(ramp, mode="I").resize((n_out, 2), Image.Resampling.NEAREST))[0]
        ours = np.array([pil_nearest_index(i, n_in, n_out) for i in range(n_out)])
        assert np.array_equal(ours, pil), (n_in, n_out)
        exact = np.floor((np.arange(n_out, dtype=np.float32) + np.float32(0.5)) * np.float32(n_in / n_out))
        aten_differs += int((np.minimum(exact, n_in - 1) != pil).sum())
    assert aten_differs > 0


@pytest.mark.parametrize("size", [(37, 53), (150, 171), (512, 341), (301, 97)])
def test_pil_nearest_resize_and_crop_are_pillows_exactly(photos, size):
    """Resize and RandomResizedCrop (with a flip) in "pil-nearest" equal Pillow's resize of
    the same crop, on real photographs (sizes that put source positions on pixel edges
    included: 512 -> 341 and 300 -> 150)."""
    from PIL import Image

    imgs = [photos["astronaut"][:300, :400], photos["coffee"], photos["chelsea"][::2, ::3]]
    batch = [torch.from_numpy(np.ascontiguousarray(p.transpose(2, 0, 1))) for p in imgs]
    sizes = [tuple(i.shape[1:]) for i in batch]
    tf = T.Compose([T.Resize(size, interpolation="pil-nearest")])
    got = tf(batch, tf.make_params(sizes, 0))
    for k, img in enumerate(imgs):
        want = np.asarray(Image.fromarray(img).resize(size[::-1], Image.Resampling.NEAREST))
        assert np.array_equal(got[k].permute(1, 2, 0).numpy(), want), (size, k)
    rrc = T.Compose([T.RandomResizedCrop(size, interpolation="pil-nearest"), T.RandomHorizontalFlip()])
    for seed in range(3):
        params = rrc.make_params(sizes, seed)
        got = rrc(batch, params)
        for k, (img, p) in enumerate(zip(imgs, params)):
            top, left, h, w = p["crop"]
            want = np.asarray(Image.fromarray(img).crop((left, top, left + w, top + h)).resize(
                size[::-1], Image.Resampling.NEAREST))
            if p["flip"]:
                want = want[:, ::-1]
            assert np.array_equal(got[k].permute(1, 2, 0).numpy(), want), (size, seed, k, p["crop"])


def test_a_nearest_resize_before_totensor_is_pils(photos):
    """torchvision's NEAREST on PIL images (the steps before ToTensor, as an ImageFolder
    pipeline runs them) is Pillow's resize: converted as "pil-nearest", and the Loader's
    levels equal torchvision's run on the PIL image; after ToTensor (on tensors) it stays
    ATen's."""
    import torchvision.transforms as v1
    from PIL import Image

    tv_tf = v1.Compose([v1.Resize(150, interpolation=v1.InterpolationMode.NEAREST), v1.CenterCrop(128),
                        v1.ToTensor()])
    ours = T.Compose.from_torchvision(tv_tf)
    assert ours.plan.geometry[0].interpolation == "pil-nearest"
    imgs = [photos["astronaut"], photos["coffee"][:, :500]]
    batch = [torch.from_numpy(np.ascontiguousarray(p.transpose(2, 0, 1))) for p in imgs]
    got = ours(batch, ours.make_params([i.shape[:2] for i in imgs], 0))
    for k, img in enumerate(imgs):
        want = tv_tf(Image.fromarray(img))  # (levels over 255: the same levels, the floats to an ulp)
        assert torch.equal((got[k] * 255).round(), (want * 255).round()) and (got[k] - want).abs().max() <= 1e-7, k
    after = T.Compose.from_torchvision(tv.Compose([tv.ToImage(), tv.Resize((150, 150), interpolation=tv.InterpolationMode.NEAREST)]))
    assert after.plan.geometry[0].interpolation == "nearest"


def test_the_cuda_kernel_takes_the_same_pixel_under_the_simulator():
    """A batch in each nearest mode: the CUDA kernel (simulator) and the CPU twin equal to
    an ulp, torchvision's pixels (uint8 output: exactly)."""
    code = textwrap.dedent("""
        import numpy as np, torch
        import torchvision.transforms.v2.functional as F
        from torchvision.transforms.v2 import InterpolationMode as IM
        from gpudecode import transforms as T
        from gpudecode.kernels import fused
        from skimage import data
        from tvref import pack_hwc
        photo = data.astronaut()
        imgs = [torch.from_numpy(np.ascontiguousarray(photo[40 + 7 * k:70 + 9 * k, 100:127 + 3 * k].transpose(2, 0, 1)))
                for k in range(3)]
        sizes = [tuple(i.shape[1:]) for i in imgs]
        outs = []
        from PIL import Image
        for mode in (IM.NEAREST, IM.NEAREST_EXACT, "pil-nearest"):  # (bilinear, bicubic: test_kernels, test_transforms)
            tf = T.Compose([T.RandomResizedCrop((11, 13), interpolation=mode), T.ToDtype(torch.float32, scale=True)])
            params = tf.make_params(sizes, 3)
            cpu = tf(imgs, params).numpy()
            geom, args, order = tf.encode(params, sizes)
            src = pack_hwc(imgs, geom, sizes)
            mean, std = tf._norm_arrays()
            out = np.zeros((3, 3, 11, 13), np.float32)
            fused.fused_cuda(src, geom, args, order, mean, std, out, normalize=False)
            assert np.abs(out - cpu).max() <= 1e-6, (mode, np.abs(out - cpu).max())
            u8 = np.zeros((3, 3, 11, 13), np.uint8)  # (float: the level over 255, to an ulp; uint8: exactly)
            fused.fused_cuda(src, geom, args, order, mean, std, u8, normalize=False)
            for k, p in enumerate(params):
                if mode == "pil-nearest":
                    top, left, h, w = p["crop"]
                    crop = Image.fromarray(imgs[k].permute(1, 2, 0).numpy()).crop((left, top, left + w, top + h))
                    want = np.asarray(crop.resize((13, 11), Image.Resampling.NEAREST)).transpose(2, 0, 1)
                else:
                    want = F.resized_crop(imgs[k], *p["crop"], [11, 13], interpolation=mode).numpy()
                assert np.array_equal(u8[k], want), (mode, k)
                assert np.abs(out[k] - want / np.float32(255)).max() <= 1e-7, (mode, k)
        print("ok")
        """)
    run_code(code, timeout=600)
