"""InterpolationMode.NEAREST and NEAREST_EXACT for Resize and RandomResizedCrop: one
source pixel an output pixel, ATen's index (floor((i + 0.5) * scale) and floor(i *
scale), in float32, at most the last), so the same values as torchvision's resize on
real photographs, on the CPU twin (exactly) and under the CUDA simulator (uint8
exactly, float to an ulp)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
import torchvision.transforms.v2 as tv
import torchvision.transforms.v2.functional as F

from gpudecode import transforms as T
from gpudecode.errors import TransformError

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
        for mode in (IM.NEAREST, IM.NEAREST_EXACT):  # (bilinear and bicubic: test_kernels, test_transforms)
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
                want = F.resized_crop(imgs[k], *p["crop"], [11, 13], interpolation=mode).numpy()
                assert np.array_equal(u8[k], want), (mode, k)
                assert np.abs(out[k] - want / np.float32(255)).max() <= 1e-7, (mode, k)
        print("ok")
        """)
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1",
               PYTHONPATH=os.path.dirname(__file__) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]
