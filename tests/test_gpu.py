"""The GPU path on a real CUDA device (`make gpu-check` runs these; without CUDA every test
here is skipped with that reason, and their CPU-side twins run elsewhere: the kernels
under the CUDA simulator in test_kernels.py, each GPU decoder built for the CPU in
test_decode.py, the Loader with those decoders in test_loader.py).

- the CUDA kernels against the CPU twin on real photos, and against torchvision's
  functional ops on CUDA tensors;
- each GPU decoder on CUDA against the CPU decoder;
- the Loader on CUDA end to end (every decoder, the CPU decoder with an upload), with a
  consumer slower than the producer holding on to a batch while the next is made;
- precache with device="cuda"; stats with GPU stage times.
"""
from __future__ import annotations

import contextlib
import io
import functools
import os
import re
import time
import warnings
import zlib

import numpy as np
import pytest
import torch

import gpudecode
from gpudecode import Loader
from gpudecode import transforms as T
from gpudecode.decode import Request, available, make_decoder
from gpudecode.decode.cpu import CpuDecoder

from conftest import GPU_BACKENDS, decoded_image, encode, make_shard
from tvref import torchvision_apply

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or os.environ.get("NUMBA_ENABLE_CUDASIM") == "1",
                       reason="needs a CUDA GPU (torch.cuda.is_available() is False)"),
]
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
BACKENDS = list(GPU_BACKENDS)  # each one a test: a backend missing here is skipped, with why


@pytest.fixture(autouse=True)
def _backend_present(request):
    """A GPU decoder the machine lacks is skipped with the reason (not silently dropped
    from the parameter list, which would pass a broken install)."""
    callspec = getattr(request.node, "callspec", None)
    name = callspec.params.get("backend", callspec.params.get("decoder")) if callspec else None
    if name in GPU_BACKENDS:
        ok, why = available(name)
        if not ok:
            pytest.skip(f"decoder {name!r} is not usable here: {why}")


def train_tf(size=64):
    return T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1),
                      T.Normalize(MEAN, STD)])


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(float) - b.astype(float)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255 ** 2 / mse)


def test_cuda_kernel_equals_cpu_twin_on_photos(photos):
    tf = train_tf(96)
    imgs = [torch.from_numpy(p).permute(2, 0, 1).contiguous() for p in photos.values()]
    params = tf.make_params([tuple(i.shape[1:]) for i in imgs], 7)
    cpu = tf(imgs, params)
    gpu = tf([i.cuda() for i in imgs], params)
    torch.testing.assert_close(gpu.cpu(), cpu, atol=2e-4, rtol=0)


def test_a_cuda_batch_in_any_strides_is_read_where_it_lies_as_on_the_cpu(photos):
    """A batch tensor on the device, CHW views of HWC device memory, and separate device
    images (a view, a contiguous one, a crop of a larger one) are read where they lie (no
    copy: the buffer the kernel reads starts at the lowest image) and give the CPU twin's
    output for the same params; out= on the device."""
    from gpudecode.transforms.compose import _sources

    tf = train_tf(64)
    hwc = torch.from_numpy(np.stack([photos["astronaut"][:200, :240], photos["coffee"][:200, :240]]))
    params = tf.make_params([(200, 240)] * 2, 11)
    cpu = tf(hwc.permute(0, 3, 1, 2).contiguous(), params)
    larger = torch.from_numpy(photos["coffee"][:210, :250]).cuda().permute(2, 0, 1).contiguous()
    separate = [hwc[0].cuda().permute(2, 0, 1), larger[:, :200, :240]]
    for images in (hwc.cuda().permute(0, 3, 1, 2), hwc.permute(0, 3, 1, 2).contiguous().cuda(), separate):
        torch.testing.assert_close(tf(images, params).cpu(), cpu, atol=2e-4, rtol=0)
        out = torch.empty((2, 3, 64, 64), device="cuda")
        assert tf(images, params, out=out) is out
        torch.testing.assert_close(out.cpu(), cpu, atol=2e-4, rtol=0)
    pixels, offsets, _ = _sources(separate, torch.device("cuda"))
    lowest = min(im.data_ptr() for im in separate)
    assert pixels.data_ptr() == lowest
    assert [pixels.data_ptr() + int(o) for o in offsets] == [im.data_ptr() for im in separate]


def test_cuda_kernel_against_torchvision_on_cuda_tensors(photos):
    tf = train_tf(80)
    imgs = [torch.from_numpy(p).permute(2, 0, 1).contiguous().cuda() for p in photos.values()]
    params = tf.make_params([tuple(i.shape[1:]) for i in imgs], 3)
    ours = tf(imgs, params)
    for k, (img, p) in enumerate(zip(imgs, params)):
        ref = torchvision_apply(img, p, (80, 80), mean=MEAN, std=STD)
        torch.testing.assert_close(ours[k], ref, atol=2e-3, rtol=0)  # the CPU suite's bound for jitter


def test_kernel_program_on_cuda_tensors_equals_the_cpu_twin(photos):
    """Every barrier op and policy (kernel 1, then one segment launch per barrier level,
    statistics reduced per block) on CUDA tensors against the CPU twin: equal to 2e-4
    but for equalize's bin edges (a value an ulp apart may take the next level)."""
    from gpudecode import transforms as T

    tf = T.Compose([T.RandomResizedCrop(96), T.RandomHorizontalFlip(), T.RandomApply([T.ColorJitter(0.4, 0.4, 0.2, 0.1)],
                                                                                     0.8),
                    T.RandomGrayscale(0.2), T.RandomAutocontrast(0.5), T.RandomEqualize(0.5), T.RandAugment(3, 12),
                    T.TrivialAugmentWide(interpolation="bilinear", fill=(10, 20, 30)), T.RandomAdjustSharpness(2.0, 0.5),
                    T.GaussianBlur(23, (0.1, 2.0)), T.RandomAffine(15, (0.1, 0.1), (0.9, 1.1), 5, "bilinear", fill=128),
                    T.Normalize(MEAN, STD)])
    imgs = [torch.from_numpy(p).permute(2, 0, 1).contiguous() for p in photos.values()] * 4
    params = tf.make_params([tuple(i.shape[1:]) for i in imgs], 5)
    cpu = tf(imgs, params)
    gpu = tf([i.cuda() for i in imgs], params).cpu()
    far = (gpu - cpu).abs() > 2e-4
    assert float(far.float().mean()) <= 0.01, float((gpu - cpu).abs().max())


def test_newer_ops_on_cuda_tensors_equal_the_cpu_twin(photos):
    """The ops added after the first GPU check was written (the canvas of RandomZoomOut,
    made with torch's ops on the device; RandomPerspective, RandomPhotometricDistort,
    RandomChannelPermutation, GaussianNoise; the drawn resizes; RandomRotation(expand=True)
    and ElasticTransform, whose canvases are torch's grid_sample on the device, and
    ElasticTransform after the crop, on the kernel's output; a crop's padding in the edge,
    reflect and symmetric modes) on CUDA tensors against the CPU twin, equal to 2e-4 for
    99% of values (FMA contraction on CUDA)."""
    from gpudecode import transforms as T

    imgs = [torch.from_numpy(p).permute(2, 0, 1).contiguous() for p in photos.values()] * 3
    sizes = [tuple(i.shape[1:]) for i in imgs]
    for tf in (T.Compose([T.RandomZoomOut((123, 117, 104), (1.0, 2.5), p=0.7), T.RandomResizedCrop(80),
                          T.RandomPhotometricDistort(p=0.7), T.RandomChannelPermutation(),
                          T.RandomPerspective(0.4, 0.5, fill=(20, 40, 60)), T.ToDtype(torch.float32, scale=True),
                          T.GaussianNoise(sigma=0.05), T.Normalize(MEAN, STD)]),
               T.Compose([T.RandomShortestSize([64, 80, 96], 160), T.RandomCrop(72, pad_if_needed=True),
                          T.RandomHorizontalFlip(), T.ToDtype(torch.float32, scale=True)]),
               T.Compose([T.RandomRotation(30, "bilinear", expand=True, fill=(9, 99, 199)), T.RandomResizedCrop(64),
                          T.ToDtype(torch.float32, scale=True)]),
               T.Compose([T.ElasticTransform(50.0, 5.0, fill=(1, 2, 3)), T.RandomResizedCrop(64),
                          T.ToDtype(torch.float32, scale=True)]),
               T.Compose([T.RandomResizedCrop(64), T.RandomHorizontalFlip(), T.ElasticTransform(40.0, 4.0),
                          T.Normalize(MEAN, STD)]),
               *(T.Compose([T.Resize((70, 90)), T.RandomCrop((80, 96), padding=(12, 7, 5, 9), padding_mode=mode),
                            T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)]) for mode in ("edge", "reflect", "symmetric"))):
        params = tf.make_params(sizes, 8)
        cpu = tf(imgs, params)
        gpu = tf([i.cuda() for i in imgs], params).cpu()
        far = (gpu - cpu).abs() > 2e-4
        assert float(far.float().mean()) <= 0.01, (tf, float((gpu - cpu).abs().max()))


def test_the_first_pass_on_cuda_equals_the_cpu_twin(photos):
    """Steps before the geometry (transforms.first: ColorJitter first, then the crop; SSD's
    preset as written, the distortion before RandomZoomOut and RandomIoUCrop, ragged; a
    policy first) on CUDA tensors against the CPU twin: the first pass writes uint8
    levels, where FMA contraction may round a value to the next one, so within a level,
    and a tenth of one on average."""
    imgs = [torch.from_numpy(p).permute(2, 0, 1).contiguous() for p in photos.values()] * 2
    sizes = [tuple(i.shape[1:]) for i in imgs]
    boxes = [{"boxes": np.array([[2.0, 3.0, 40.0, 50.0], [10.0, 5.0, 90.0, 70.0]], np.float32),
              "labels": np.array([1, 2])} for _ in imgs]
    for tf in (T.Compose([T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.RandomGrayscale(0.3), T.RandomResizedCrop(64),
                          T.RandomHorizontalFlip(), T.ToDtype(torch.float32, scale=True)]),
               T.Compose([T.RandomPhotometricDistort(p=1.0), T.RandomZoomOut((123, 117, 104), p=0.7),
                          T.RandomIoUCrop(), T.RandomHorizontalFlip(), T.ToDtype(torch.float32, scale=True)],
                         ragged=True),
               T.Compose([T.TrivialAugmentWide(), T.GaussianBlur(5), T.Resize((56, 72)),
                          T.ToDtype(torch.float32, scale=True)])):  # (a policy's nearest warp: a pick may differ)
        params = tf.draw_batch(sizes, 8, boxes=[b["boxes"] for b in boxes]) if tf.plan.reads_boxes else \
            tf.make_params(sizes, 8)
        cpu, gpu = tf(imgs, params), tf([i.cuda() for i in imgs], params)
        if tf.ragged:
            assert torch.equal(gpu.sizes.cpu(), cpu.sizes)
            cpu, gpu = cpu.padded, gpu.padded
        diff = (gpu.cpu() - cpu).abs()
        assert float((diff > 1.01 / 255).float().mean()) <= (0.005 if tf.plan.first[0].moves else 0.0), tf
        assert float(diff.mean()) <= 0.1 / 255, (tf, float(diff.max()))


def test_a_resize_first_on_cuda_is_torchvisions_resize_there(photos):
    """`[Resize(96), RandomResizedCrop(64), ...]` on CUDA tensors: each image resized first
    as torchvision's F.resize of a uint8 CUDA image (the float resample rounded, bit for
    bit), then the kernel's crop of it, the CPU twin's crop of that same resized image."""
    tvf = pytest.importorskip("torchvision.transforms.v2.functional")
    imgs = [torch.from_numpy(p).permute(2, 0, 1).contiguous() for p in photos.values()]
    tf = T.Compose([T.Resize(96), T.RandomResizedCrop(64), T.RandomHorizontalFlip(), T.ToDtype(torch.float32, scale=True)])
    params = tf.make_params([tuple(i.shape[1:]) for i in imgs], 2)
    gpu = tf([i.cuda() for i in imgs], params)
    crop = T.Compose([T.RandomResizedCrop(64), T.RandomHorizontalFlip(), T.ToDtype(torch.float32, scale=True)])
    resized = [tvf.resize(i.cuda(), [96], antialias=True).cpu() for i in imgs]
    assert [tuple(r.shape[1:]) for r in resized] == [tuple(p["first_resize"]) for p in params]
    want = crop(resized, [{k: v for k, v in p.items() if k != "first_resize"} for p in params])
    assert float((gpu.cpu() - want).abs().max()) <= 2e-4


def test_one_channel_outputs_on_cuda_equal_the_cpu_twin(photos):
    """Grayscale(1) and grey images (Compose(grey=True)): the kernel writing one channel
    three times (a stride-0 view), the one-channel contrast and noise, the erasing and a
    bfloat16 NHWC output, on CUDA tensors against the CPU twin."""
    imgs = [torch.from_numpy(p).permute(2, 0, 1).contiguous() for p in photos.values()] * 2
    greys = [i[1:2].contiguous() for i in imgs]
    sizes = [tuple(i.shape[1:]) for i in imgs]
    steps = [T.RandomResizedCrop(48), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1),
             T.ToDtype(torch.float32, scale=True), T.GaussianNoise(sigma=0.05), T.Normalize([0.5], [0.25]),
             T.RandomErasing(p=0.5, value="random")]
    cases = [(T.Compose([steps[0], T.Grayscale(), *steps[1:]]), imgs),
             (T.Compose(steps, grey=True), greys),
             (T.Compose([T.Resize((40, 36)), T.Grayscale(), T.ToDtype(torch.bfloat16, scale=True)], layout="NHWC"),
              imgs)]
    for tf, batch in cases:
        params = tf.make_params(sizes, 8)
        cpu = tf(batch, params)
        gpu = tf([i.cuda() for i in batch], params).cpu()
        assert gpu.shape == cpu.shape and 1 in gpu.shape[1::2]
        far = (gpu.float() - cpu.float()).abs() > (2e-4 if cpu.dtype == torch.float32 else 1e-2)
        assert float(far.float().mean()) <= 0.01, (tf, float((gpu.float() - cpu.float()).abs().max()))


def test_recipes_through_the_loader_on_cuda(shards):
    """torchvision's reference recipe (TrivialAugmentWide, RandomErasing, MixUp/CutMix on
    the GPU batch), DINO's 2 + 6 views with blur, and TenCrop's ten, from torchvision
    Composes."""
    import torchvision.transforms.v2 as tv

    from gpudecode import Loader

    urls = shards
    recipe = tv.Compose([tv.RandomResizedCrop(64), tv.RandomHorizontalFlip(), tv.TrivialAugmentWide(),
                         tv.ToDtype(torch.float32, scale=True), tv.Normalize(MEAN, STD), tv.RandomErasing(0.5)])
    mix = tv.RandomChoice([tv.MixUp(alpha=0.2, num_classes=5), tv.CutMix(alpha=1.0, num_classes=5)])
    ld = Loader(urls, batch_size=8, transform=recipe, batch_transform=mix, device="cuda", decoder="cpu", seed=1)
    got = [(b.images.cpu(), b.labels.cpu()) for b in ld]  # (the CPU decoder on both sides: the kernels compared)
    cpu = [(b.images, b.labels) for b in Loader(urls, batch_size=8, transform=recipe, batch_transform=mix,
                                               device="cpu", seed=1)]
    assert len(got) == len(cpu) and all(g[1].shape[1] == 5 for g in got)
    for (gi, gl), (ci, cl) in zip(got, cpu):
        torch.testing.assert_close(gl, cl)
        assert float(((gi - ci).abs() > 2e-3).float().mean()) <= 0.01
    blur = [tv.Compose([tv.RandomResizedCrop(s), tv.RandomApply([tv.GaussianBlur(23 if s > 40 else 9)], p=0.5),
                        tv.RandomSolarize(128, 0.2), tv.ToDtype(torch.float32, scale=True)]) for s in (64, 64)]
    local = tv.Compose([tv.RandomResizedCrop(32), tv.RandomGrayscale(0.2), tv.ToDtype(torch.float32, scale=True)])
    views = next(iter(Loader(urls, batch_size=8, transform=blur + [local] * 6, device="cuda", seed=2))).images
    assert len(views) == 8 and views[0].is_cuda and views[7].shape[-1] == 32
    ten = tv.Compose([tv.Resize(48), tv.TenCrop(40, vertical_flip=True), tv.ToDtype(torch.float32, scale=True),
                      tv.Normalize(MEAN, STD)])  # (evaluation's ten crops: ten views, the CPU Loader's within 2e-3)
    crops = [b.images for b in Loader(urls, batch_size=8, transform=ten, device="cpu", shuffle=False)]
    for g, c in zip((b.images for b in Loader(urls, batch_size=8, transform=ten, device="cuda", decoder="cpu",
                                              shuffle=False)), crops):
        assert len(g) == len(c) == 10 and g[9].is_cuda
        assert all(float(((x.cpu() - y).abs() > 2e-3).float().mean()) <= 0.01 for x, y in zip(g, c))


@pytest.mark.parametrize("backend", BACKENDS)
def test_gpu_decoders_against_the_cpu_decoder(photos, backend):
    """nvJPEG on the GPU does its own IDCT and upsampling: close to libjpeg-turbo, not equal."""
    reqs = []
    rng = np.random.default_rng(0)
    for name, img in photos.items():
        for data, fmt in ((encode(img, "JPEG", quality=90), "jpeg"), (encode(img, "PNG"), "png")):
            h, w = img.shape[:2]
            bh, bw = int(rng.integers(h // 3, h + 1)), int(rng.integers(w // 3, w + 1))
            box = (int(rng.integers(0, h - bh + 1)), int(rng.integers(0, w - bw + 1)), bh, bw)
            reqs.append(Request(data, fmt, h, w, box, "s", name))
    cpu = CpuDecoder().decode(reqs)
    gpu = make_decoder(backend, device="cuda", num_threads=4, max_pixels=0).decode(reqs)
    assert gpu.pixels.is_cuda
    for k, r in enumerate(reqs):
        assert gpu.errors[k] is None, (r.key, gpu.errors[k])
        a, b = decoded_image(cpu, k), decoded_image(gpu, k)
        if r.format == "png":
            np.testing.assert_array_equal(a, b)
        else:
            assert psnr(a, b) > 38, (r.key, psnr(a, b))


@pytest.fixture(scope="module")
def shards(photos, tmp_path_factory):
    d = tmp_path_factory.mktemp("gpu")
    names = list(photos)
    samples = []
    for k in range(48):
        img = photos[names[k % len(names)]]
        h, w = img.shape[:2]
        crop = np.ascontiguousarray(img[k % 7:h - k % 5, k % 11:w - k % 3])
        ext, data = ("png", encode(crop, "PNG")) if k % 8 == 0 else ("jpg", encode(crop, "JPEG", quality=90))
        samples.append({"__key__": f"s{k:03d}", ext: data, "cls": str(k % 5).encode()})
    return [make_shard(d / f"g-{j}.tar", samples[j * 16:(j + 1) * 16]) for j in range(3)]


@pytest.mark.parametrize("decoder", ["cpu", *BACKENDS])
def test_loader_on_cuda_matches_the_cpu_loader(shards, decoder):
    kw = dict(batch_size=8, transform=train_tf(), seed=1, shuffle=True)
    cpu = [(b.keys, b.images.clone()) for b in Loader(shards, device="cpu", **kw)]
    gpu = [(b.keys, b.images.cpu(), b.labels.device.type) for b in Loader(shards, device="cuda", decoder=decoder, **kw)]
    assert [c[0] for c in cpu] == [g[0] for g in gpu] and {g[2] for g in gpu} == {"cuda"}
    atol = 1e-4 if decoder == "cpu" else 0.1  # nvJPEG's IDCT differs slightly from libjpeg-turbo's
    for (_, a), (_, b, _) in zip(cpu, gpu):
        torch.testing.assert_close(b, a, atol=atol, rtol=0)
        if decoder != "cpu":
            # the bound above allows about 6 grey levels at a pixel; on average a GPU decoder is
            # within about one (1/255/0.225 = 0.017 after Normalize)
            assert (b - a).abs().mean() < 0.02, float((b - a).abs().mean())


@pytest.mark.parametrize("decoder", ["auto", "cpu-engine-alone"])
def test_the_split_decoder_on_cuda_matches_the_cpu_loader(shards, decoder):
    """Every engine at once (decoder "auto" on CUDA), and the CPU engine alone through the
    split's own upload (one copy from its pinned ring): the CPU Loader's batches, within a
    GPU decoder's rounding where a GPU engine decoded, bit for bit where none did."""
    spec = {"cpu": 1.0} if decoder == "cpu-engine-alone" else decoder
    kw = dict(batch_size=8, transform=train_tf(), seed=1, shuffle=True)
    cpu = [(b.keys, b.images.clone()) for b in Loader(shards, device="cpu", **kw)]
    with Loader(shards, device="cuda", decoder=spec, **kw) as ld:
        gpu = [(b.keys, b.images.cpu()) for b in ld]
        described = ld.describe()
    assert [c[0] for c in cpu] == [g[0] for g in gpu]
    gpu_engines = [k for k, v in described.get("decoder_engines", {}).items() if k != "cpu" and v["images"]]
    atol = 0.1 if gpu_engines else 1e-4
    for (_, a), (_, b) in zip(cpu, gpu):
        torch.testing.assert_close(b, a, atol=atol, rtol=0)
        assert (b - a).abs().mean() < 0.02, float((b - a).abs().mean())
    if decoder == "auto" and described["decoder"] == "split":
        assert sum(v["images"] for v in described["decoder_engines"].values()) == 48


def test_the_split_decoder_on_cuda_gives_each_image_its_engines_own_decode(photos):
    from gpudecode.decode.split import SplitDecoder

    dec = make_decoder("auto", device="cuda", num_threads=2, max_pixels=0)
    if not isinstance(dec, SplitDecoder):
        pytest.skip(f"one decoding engine here ({dec.backend}): nothing to split")
    names = list(photos)
    reqs = []
    for k in range(24):
        img = photos[names[k % len(names)]]
        h, w = img.shape[:2]
        fmt = "png" if k % 6 == 5 else "jpeg"
        data = encode(img, "PNG") if fmt == "png" else encode(img, "JPEG", quality=90)
        box = (k % 9, k % 13, h // 2 + k, w // 2 + k)
        reqs.append(Request(data, fmt, h, w, box, "s", str(k)))
    got = dec.decode(reqs).settle()
    torch.cuda.synchronize()
    assert got.pixels.device.type == "cuda" and got.errors.count(None) == len(reqs)
    images = [decoded_image(got, k) for k in range(len(reqs))]  # (copied before the engines decode again)
    assignment = dec.last_assignment.copy()
    assert len(set(assignment.tolist())) > 1, dec.backend
    for k, r in enumerate(reqs):
        engine = dec.engines[int(assignment[k])]
        alone = engine.decoder.decode([r]).settle()
        torch.cuda.synchronize()
        assert np.array_equal(images[k], decoded_image(alone, 0)), (k, engine.name)
    dec.close()


@pytest.mark.parametrize("keep", ["gpu", "ram"])
def test_a_resident_set_on_cuda_gives_the_streamed_batches(shards, keep):
    """keep="gpu" (the set in device memory, read in place) and keep="ram" (RAM, each batch's
    windows packed into the upload's page-locked staging and uploaded): the streamed batches on CUDA with the CPU decoder, bit for
    bit, over two epochs; after the first, no image bytes go up for keep="gpu"."""
    kw = dict(batch_size=8, transform=train_tf(), seed=1, shuffle=True, device="cuda", decoder="cpu")

    def run(loader):
        out = []
        for e in range(2):
            loader.set_epoch(e)
            out += [(b.keys, b.images.cpu(), b.labels.cpu()) for b in loader]
        return out

    with Loader(shards, **kw) as ld:
        want = run(ld)
    with Loader(shards, keep=keep, **kw) as ld:
        got = run(ld)
        described = ld.describe()["keep"]
        h2d = ld.stats.summary()["h2d_bytes"]
    assert described["tier"] == keep and described["images"] == 48
    for (ka, ia, la), (kb, ib, lb) in zip(want, got):
        assert ka == kb and torch.equal(la, lb) and torch.equal(ia, ib)
    if keep == "gpu":
        assert h2d == 0


def test_masks_on_cuda_equal_the_cpu_loaders(photos, tmp_path):
    """gpudecode.Mask fields on CUDA: each batch's masks (uint8 up, int64 made on the
    device) on the device, equal to the CPU Loader's, streamed and from keep="gpu"; and
    Compose.masks on CUDA tensors equal to its CPU result."""
    from PIL import Image

    from gpudecode import Mask

    samples = []
    names = list(photos)
    for k in range(24):
        img = np.ascontiguousarray(photos[names[k % len(names)]][:90 + k, :100])
        seg = Image.fromarray((img.mean(2) // 40).astype(np.uint8))
        b = io.BytesIO()
        seg.save(b, "PNG")
        samples.append({"__key__": f"m{k:03d}", "jpg": encode(img), "cls": str(k % 3), "seg.png": b.getvalue()})
    url = make_shard(tmp_path / "masks-000000.tar", samples)
    tf = T.Compose([T.RandomResize(60, 120), T.RandomCrop(80, pad_if_needed=True), T.RandomHorizontalFlip(),
                    T.Normalize(MEAN, STD)])
    kw = dict(batch_size=8, transform=tf, seed=2, fields={"seg.png": Mask(fill=255, dtype=torch.int64)})
    cpu = [(b.keys, b[2].clone()) for b in Loader([url], device="cpu", **kw)]
    for keep in (None, "gpu"):
        with Loader([url], device="cuda", decoder="cpu", keep=keep, **kw) as ld:
            got = [(b.keys, b[2]) for b in ld]
        assert [k for k, _ in got] == [k for k, _ in cpu]
        for (_, a), (_, m) in zip(cpu, got):
            assert m.device.type == "cuda" and m.dtype == torch.int64 and torch.equal(m.cpu(), a)
    masks = [torch.randint(0, 9, (40 + k, 50), dtype=torch.uint8) for k in range(6)]
    d = tf.draw_batch([tuple(m.shape) for m in masks], 5)
    on_gpu = tf.masks([m.cuda() for m in masks], d, fill=255)
    assert on_gpu.device.type == "cuda" and torch.equal(on_gpu.cpu(), tf.masks(masks, d, fill=255))
    # through the warps (an expanded rotation's canvas, an affine warp and a perspective after
    # the crop), sampled on the device: the CPU's masks, to a rounding at a half-way point
    warped = T.Compose([T.RandomRotation(20, expand=True), T.RandomResize(60, 120), T.RandomCrop(80, pad_if_needed=True),
                        T.RandomAffine(25, shear=5), T.RandomPerspective(0.3, p=0.8)])
    d = warped.draw_batch([tuple(m.shape) for m in masks], 6)
    on_gpu = warped.masks([m.cuda() for m in masks], d, fill=255)
    on_cpu = warped.masks(masks, d, fill=255)
    assert on_gpu.device.type == "cuda" and int((on_gpu.cpu() != on_cpu).sum()) <= on_cpu.numel() // 10_000


@pytest.mark.parametrize("recipe", ["lsj", "ssd", "ssdlite", "multiscale"])
def test_boxes_on_cuda_equal_the_cpu_loaders(photos, tmp_path, recipe):
    """gpudecode.Boxes fields on CUDA: each batch's targets on the device (the batch's boxes
    and labels each one copy), equal to the CPU Loader's, streamed and from keep="gpu";
    with SSD's recipe (RandomIoUCrop drawn from the boxes, a window of RandomZoomOut's
    canvas made on the device) the images too; ssdlite's and multiscale's as written, images
    of their own sizes (ragged=True: RaggedBatch on the device, each image at its own size,
    contrast's statistics and the zeros around each from the CUDA kernels)."""
    import json

    from gpudecode import Boxes

    samples = []
    names = list(photos)
    rng = np.random.default_rng(0)
    for k in range(24):
        img = np.ascontiguousarray(photos[names[k % len(names)]][:90 + k, :100])
        x0, y0 = rng.uniform(0, 60, 3), rng.uniform(0, 50, 3)
        boxes = np.stack([x0, y0, x0 + rng.uniform(5, 40, 3), y0 + rng.uniform(5, 40, 3)], 1)
        member = json.dumps({"boxes": boxes.tolist(), "labels": [k, k + 1, k + 2]}).encode()
        samples.append({"__key__": f"b{k:03d}", "jpg": encode(img), "cls": str(k % 3), "json": member})
    url = make_shard(tmp_path / "boxes-000000.tar", samples)
    geometry = {"lsj": [T.ScaleJitter((80, 80)), T.RandomCrop(80, pad_if_needed=True)],
                "ssd": [T.RandomZoomOut(fill=(123, 117, 104), p=0.7), T.RandomIoUCrop(), T.Resize((80, 80))],
                "ssdlite": [T.RandomIoUCrop()],
                "multiscale": [T.RandomShortestSize((48, 64, 80), max_size=120)]}[recipe]
    ragged = recipe in ("ssdlite", "multiscale")
    colour = [T.ColorJitter(0.3, 0.3, 0.3)] if ragged else []  # (contrast: each image's own grey mean)
    tf = T.Compose([*geometry, T.RandomHorizontalFlip(), *colour, T.Normalize(MEAN, STD)], ragged=ragged)
    kw = dict(batch_size=8, transform=tf, seed=2, labels=False, fields={"json": Boxes()})
    cpu_images = [b.images for b in Loader([url], device="cpu", **kw)]
    cpu = [(b.keys, b[1]) for b in Loader([url], device="cpu", **kw)]
    assert sum(len(t["boxes"]) for _, ts in cpu for t in ts) > 30
    for keep in (None, "gpu"):
        with Loader([url], device="cuda", decoder="cpu", keep=keep, **kw) as ld:
            got, images = [], []
            for b in ld:
                got.append((b.keys, b[1]))
                images.append(b.images if ragged else b.images.cpu())
        assert [k for k, _ in got] == [k for k, _ in cpu]
        for a, b in zip(cpu_images, images):
            if ragged:
                assert isinstance(b, gpudecode.RaggedBatch) and b.padded.device.type == "cuda"
                assert torch.equal(b.sizes, a.sizes)
                a, b = a.padded, b.padded.cpu()
            torch.testing.assert_close(b, a, atol=1e-4, rtol=0)
        for (_, want), (_, ts) in zip(cpu, got):
            for a, t in zip(want, ts):
                assert t["boxes"].device.type == "cuda" and t["labels"].device.type == "cuda"
                assert torch.equal(t["boxes"].cpu(), a["boxes"]) and torch.equal(t["labels"].cpu(), a["labels"])


def test_batches_survive_a_slow_consumer(shards):
    """The trainer holds batch k while the loader makes k+1, k+2 (output ring, events on the
    trainer's stream guard reuse): batch k must not change under it."""
    ld = Loader(shards, batch_size=4, transform=train_tf(), device="cuda", seed=2, prefetch_factor=2)
    prev, snapshot = None, None
    for b in ld:
        x = b.images
        torch.cuda._sleep(20_000_000)  # the trainer's stream lags: its work on batch k is queued late
        y = (x * 2).sum()  # work of the trainer's on batch k, on its stream
        time.sleep(0.02)   # and the host is slow too: the producers run ahead on both counts
        if prev is not None:
            torch.cuda.current_stream().synchronize()
            torch.testing.assert_close(prev, snapshot, atol=0, rtol=0)  # batch k-1 untouched so far
        prev, snapshot = x, x.clone()
        del y


def test_precache_on_cuda(photos, shards, tmp_path):
    from gpudecode.precache import precache

    a = precache(shards, str(tmp_path / "cpu" / "t-%06d.tar"), size=64, device="cpu")
    b = precache(shards, str(tmp_path / "gpu" / "t-%06d.tar"), size=64, device="cuda")
    assert a.samples == b.samples
    ra = {s.key: s.fields for s in gpudecode_reader(a.shards)}
    rb = {s.key: s.fields for s in gpudecode_reader(b.shards)}
    assert ra.keys() == rb.keys()
    for k in ra:
        x, y = np.load(_bytes(ra[k]["npy"])), np.load(_bytes(rb[k]["npy"]))
        assert x.shape == y.shape and psnr(x, y) > 38, k
        # the same record of each resize beside its image (the masks and boxes follow it)
        assert ra[k].get("gpudecode.json") == rb[k].get("gpudecode.json") and "gpudecode.json" in ra[k], k


def gpudecode_reader(urls):
    from gpudecode import ShardReader

    return ShardReader(urls)


def _bytes(b: bytes):
    import io

    return io.BytesIO(b)


def test_stats_on_cuda_time_the_gpu_work(shards):
    ld = Loader(shards, batch_size=8, transform=train_tf(), device="cuda", decoder="cpu", seed=0)
    for _ in ld:
        pass
    torch.cuda.synchronize()
    s = ld.stats.summary()
    assert set(s["gpu_median_s"]) == {"decode", "h2d", "augment"}
    elapsed = ld.stats.batches[-1].delivered - ld.stats.started
    g = s["gpu_median_s"]
    assert all(0 <= t < elapsed for t in g.values()), (g, elapsed)  # within the epoch
    assert g["augment"] > 0 and g["h2d"] > 0  # the kernel ran; the CPU decoder's pixels went up
    assert s["h2d_bytes"] > 0


# --- the GPU path checked against what would race or fail on a first run (issue 23) ---------


def _cpu_reference(shards, **kw):
    return [(b.keys, b.images.clone(), b.labels.clone()) for b in Loader(shards, device="cpu", **kw)]


@pytest.mark.parametrize("decoder", ["cpu", *BACKENDS])
def test_gpu_lagging_consumer_across_two_epochs(shards, decoder):
    """The trainer's stream lags far behind the loader (a long kernel queued with
    torch.cuda._sleep each step, the host free to run ahead) across an epoch boundary:
    every batch's pixels and labels, read on the trainer's stream after its queued work,
    equal the CPU loader's; nothing handed over is overwritten while the trainer's work
    on it is still queued."""
    kw = dict(batch_size=8, transform=train_tf(), seed=5, shuffle=True, prefetch_factor=2)
    ref = [_cpu_reference(shards, **kw)]
    ld_cpu = Loader(shards, device="cpu", **kw)
    list(ld_cpu)
    ref.append([(b.keys, b.images.clone(), b.labels.clone()) for b in ld_cpu])  # epoch 1
    ld = Loader(shards, device="cuda", decoder=decoder, **kw)
    got = []
    for _ in range(2):
        seen = []
        for b in ld:
            torch.cuda._sleep(50_000_000)  # ~tens of ms of GPU time queued before the trainer reads
            seen.append((b.keys, b.images.clone(), b.labels * 1))  # copies queued after the sleep
        got.append(seen)
    torch.cuda.synchronize()
    # pixel by pixel, as test_loader_on_cuda_matches_the_cpu_loader compares (the first GPU run
    # compared sums of 12,288 pixels at atol 1e-3 with the CPU decoder: the float rounding of
    # the CUDA kernel against the CPU twin, summed, can pass that bound with no race at all)
    atol = 1e-4 if decoder == "cpu" else 0.1
    for epoch in range(2):
        assert [g[0] for g in got[epoch]] == [r[0] for r in ref[epoch]]
        for (keys, img, lab), (_, rimg, rlab) in zip(got[epoch], ref[epoch]):
            assert torch.equal(lab.cpu(), rlab), keys  # labels by value, not only their device
            torch.testing.assert_close(img.cpu(), rimg, atol=atol, rtol=0, msg=lambda m, keys=keys: f"{keys}: {m}")
            if decoder != "cpu":
                assert (img.cpu() - rimg).abs().mean() < 0.02, keys


def test_pinned_batches_copied_behind_a_lagging_stream_are_not_overwritten(shards):
    """pin_memory=True on the CPU path: each batch is copied to the GPU with
    non_blocking=True behind tens of ms of queued GPU work, then let go at once; the host
    runs ahead, and every slot comes round again while copies from it may still be queued.
    Each copy, read after the queue drains, equals the batch the same Loader gives without
    pinning (its slots wait for the copies: SlotRelease)."""
    kw = dict(batch_size=4, transform=train_tf(), seed=7, shuffle=True, prefetch_factor=1)
    ref = [(b.keys, b.images.clone()) for b in Loader(shards, device="cpu", **kw)]
    ld = Loader(shards, device="cpu", pin_memory=True, **kw)
    got = []
    for b in ld:
        assert b.images.is_pinned()
        torch.cuda._sleep(50_000_000)  # the trainer's stream lags far behind the host
        got.append((b.keys, b.images.to("cuda", non_blocking=True)))
        del b
    torch.cuda.synchronize()
    assert [k for k, _ in got] == [k for k, _ in ref]
    for (keys, dev), (_, want) in zip(got, ref):
        assert torch.equal(dev.cpu(), want), keys


def _odd_jpegs(photos) -> dict[str, bytes]:
    img = np.ascontiguousarray(photos["chelsea"][:120, :160])
    exif = __import__("PIL.Image", fromlist=["Exif"]).Exif()
    exif[0x0112] = 6
    return {"exif6": encode(img, "JPEG", exif=exif.tobytes()), "cmyk": encode(img, "JPEG", mode="CMYK"),
            "progressive": encode(img, "JPEG", progressive=True), "grey": encode(img, "JPEG", mode="L"),
            "corrupt": encode(img, "JPEG")[:900]}


@pytest.mark.parametrize("backend", BACKENDS)
def test_gpu_decoders_on_odd_jpegs(photos, backend):
    """EXIF-rotated (never applied), CMYK, progressive, grey and cut-off JPEGs through each
    GPU decoder: the first four like the CPU decoder (nvJPEG's IDCT: close, not equal); the
    cut one is refused by the probe before any decoder sees it (nvJPEG does not promise to
    notice: what it does with it is printed, for the record)."""
    from gpudecode._probe import JPEG_CUT, probe_columns
    from gpudecode.io.reader import Sample

    encs = _odd_jpegs(photos)
    failed: list = []
    probe_columns([Sample("corrupt", {"jpg": encs["corrupt"]}, "s", 0)], ["jpg"], 0, failed.append)
    assert len(failed) == 1 and str(failed[0]).startswith(JPEG_CUT)
    reqs = [Request(d, "jpeg", 120, 160, (0, 0, 120, 160), "s", n) for n, d in encs.items()]
    cpu = CpuDecoder().decode(reqs)
    gpu = make_decoder(backend, device="cuda", num_threads=2, max_pixels=0).decode(reqs).settle()
    for k, r in enumerate(reqs):
        if r.key == "corrupt":
            print(f"{backend} on a JPEG cut mid-scan, given it directly: error {gpu.errors[k]!r}")
            continue
        if cpu.errors[k] is not None:  # (a CMYK the CPU decoder refuses is not compared)
            continue
        assert gpu.errors[k] is None, (r.key, gpu.errors[k])
        a, b = decoded_image(cpu, k), decoded_image(gpu, k)
        assert a.shape == b.shape, r.key
        assert psnr(a, b) > 30, (r.key, psnr(a, b))


@pytest.mark.parametrize("layout,dtype", [("NCHW", torch.float32), ("NCHW", torch.float16), ("NHWC", torch.float32),
                                          ("NHWC", torch.bfloat16),
                                          ("NCHW", torch.uint8)])
def test_every_output_layout_and_dtype_through_the_loader(shards, layout, dtype):
    steps = [T.RandomResizedCrop(48), T.RandomHorizontalFlip()]
    steps += [T.ToDtype(torch.uint8)] if dtype == torch.uint8 else [T.Normalize(MEAN, STD), T.ToDtype(dtype)]
    tf = T.Compose(steps, layout=layout)
    kw = dict(batch_size=8, transform=tf, seed=3, shuffle=False)
    cpu = [b.images.clone() for b in Loader(shards, device="cpu", **kw)]
    gpu = [b.images.cpu() for b in Loader(shards, device="cuda", decoder="cpu", **kw)]
    for a, b in zip(cpu, gpu):
        assert a.dtype == b.dtype == dtype and a.shape == b.shape
        atol = {torch.uint8: 1, torch.float16: 1e-2, torch.bfloat16: 4e-2, torch.float32: 2e-3}[dtype]  # (their roundings)
        torch.testing.assert_close(b.float(), a.float(), atol=atol, rtol=0)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs: cuda:1 while cuda:0 is current")
def test_loader_and_compose_on_a_device_that_is_not_current(shards, photos):
    torch.cuda.set_device(0)
    kw = dict(batch_size=8, transform=train_tf(), seed=4, shuffle=False)
    cpu = [b.images for b in Loader(shards, device="cpu", **kw)]
    gpu = [b.images for b in Loader(shards, device="cuda:1", decoder="cpu", **kw)]
    assert {g.device for g in gpu} == {torch.device("cuda:1")}
    for a, b in zip(cpu, gpu):
        torch.testing.assert_close(b.cpu(), a, atol=1e-4, rtol=0)
    tf = train_tf(64)
    imgs = [torch.from_numpy(p).permute(2, 0, 1).contiguous() for p in photos.values()]
    params = tf.make_params([tuple(i.shape[1:]) for i in imgs], 1)
    torch.testing.assert_close(tf([i.to("cuda:1") for i in imgs], params).cpu(), tf(imgs, params), atol=2e-4,
                               rtol=0)


def test_decode_and_augment_streams_overlap(shards):
    """Decoding runs on its own stream, the kernel on another: the Loader's two streams are
    distinct and neither is the trainer's."""
    ld = Loader(shards, batch_size=8, transform=train_tf(), device="cuda", decoder="cpu", seed=0)
    next(iter(ld))
    gpu = ld.pipeline.gpu
    assert gpu is not None and gpu.decode != gpu.augment
    assert torch.cuda.current_stream() not in (gpu.decode, gpu.augment)
    ld.close()


def test_memory_outside_torch_is_reported(shards):
    """Peak device memory from the driver (mem_get_info: nvImageCodec's pool, DALI, nvJPEG
    count there) beside torch's own count, as bench/gpu.py reports them."""
    torch.cuda.synchronize()
    free0, total = torch.cuda.mem_get_info()
    reserved0 = torch.cuda.memory_reserved()
    ld = Loader(shards, batch_size=8, transform=train_tf(), device="cuda", seed=0)
    for _ in ld:
        pass
    torch.cuda.synchronize()
    free1, _ = torch.cuda.mem_get_info()
    # what torch reserved is part of what the device lost; decoders' pools come on top
    assert free0 - free1 >= torch.cuda.memory_reserved() - reserved0 - (2 << 20)
    from gpudecode.bench.common import device_memory  # what bench/gpu.py reports

    mem = device_memory(free0)
    assert mem["driver_used_mb"] >= mem["torch_reserved_mb"] - reserved0 / 2**20 - 2
    ld.close()


# --- issue 34: what would cap the GPU rate, or leave work running behind the user -------


def test_cuda_kernels_load_from_the_disk_cache_in_a_second_process(tmp_path):
    """The CUDA kernels are compiled once (10-20 s a variant) and a second process, or DDP
    rank, loads them from GPUDECODE_CACHE_DIR."""
    import subprocess
    import sys

    code = ("import time, torch\n"
            "from gpudecode import transforms as T\n"
            "tf = T.Compose([T.RandomResizedCrop(32), T.Normalize([0.5] * 3, [0.25] * 3)])\n"
            "img = torch.randint(0, 256, (3, 40, 36), dtype=torch.uint8, device='cuda')\n"
            "t = time.perf_counter(); tf([img], tf.make_params([(40, 36)], 0)); torch.cuda.synchronize()\n"
            "from gpudecode.kernels import fused\n"
            "hits = sum(sum(k._cache_hits.values()) if hasattr(getattr(k, '_cache_hits', None), 'values') else 0 "
            "for k in fused.cuda_kernels())\n"
            "print('RESULT', time.perf_counter() - t, hits)\n")
    env = dict(os.environ, GPUDECODE_CACHE_DIR=str(tmp_path))
    runs = []
    for _ in range(2):
        p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
        line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT")), None)
        assert line is not None, f"the probe process failed (exit {p.returncode}): {(p.stderr or p.stdout)[-2000:]}"
        runs.append((float(line.split()[1]), int(line.split()[2])))
    print("CUDA kernels: first process", runs[0], "second", runs[1])
    assert list(tmp_path.rglob("*.nbi")), "no index file in the cache"
    assert runs[1][1] > 0 or runs[1][0] < runs[0][0] / 3, runs


def test_close_waits_for_the_last_kernels(shards):
    """Loader.close() returns with nothing of the loader's still running on the GPU (the
    decoder's buffers go right after)."""
    ld = Loader(shards, batch_size=8, transform=train_tf(), device="cuda", decoder="cpu", seed=0)
    it = iter(ld)
    next(it)
    gpu = ld.pipeline.gpu
    with torch.cuda.stream(gpu.augment):
        torch.cuda._sleep(200_000_000)  # work still queued on the loader's stream
    ld.close()
    assert gpu.augment.query() and gpu.decode.query()



@contextlib.contextmanager
def sync_is_an_error():
    """torch's sync debug mode set to "error" (a host synchronization raises) for the block,
    always put back; its 'prototype feature' UserWarning, which the suite's warnings-as-errors
    made a failure before the mode was reset (the H200 run of 2026-11-28: every later test
    then failed on its first upload), silenced."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Synchronization debug mode is a prototype", UserWarning)
        torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Synchronization debug mode is a prototype", UserWarning)
            torch.cuda.set_sync_debug_mode("default")


def _counted(fn):
    """(aten ops that do work, uploads through decode._span.to_device) of fn(), with any
    host synchronization an error (torch's sync debug mode)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    import gpudecode.decode._span as span_mod

    class Ops(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Ops.n += 0 if func.is_view else 1  # (views launch nothing; torch adds one for a one-image index)
            return func(*args, **(kwargs or {}))

    calls = []
    real = span_mod.to_device
    span_mod.to_device = lambda host, device: calls.append(1) or real(host, device)
    Ops.n = 0
    try:
        with sync_is_an_error(), Ops():
            fn()
    finally:
        span_mod.to_device = real
    return Ops.n, len(calls)


@pytest.mark.parametrize("what", ["erase-fill", "erase-random", "mixup", "cutmix"])
def test_batch_steps_on_cuda_issue_a_fixed_number_of_launches_and_no_host_sync(what):
    """Per batch of 256 on CUDA: RandomErasing at p=0.25, MixUp and CutMix issue as many
    operations and uploads as for a batch of 16, none synchronizing with the host, and the
    same values as on the CPU."""
    import random

    from gpudecode.mixing import CutMix, MixUp

    counts = {}
    for n in (16, 256):
        host = torch.randn(n, 3, 32, 32)
        images = host.cuda()
        torch.cuda.synchronize()
        if what.startswith("erase"):
            er = T.RandomErasing(p=0.25, value="random" if what == "erase-random" else 0.5)
            rng = random.Random(n)
            params = [er.draw(rng, (32, 32)) for _ in range(n)]
            payload = er.erase_payload(params)
            counts[n] = _counted(functools.partial(er.erase_on_device, images, *payload))
            er.erase(host, params)  # the CPU's per-image form
            out = images
        else:
            step = MixUp(alpha=0.2, num_classes=10) if what == "mixup" else CutMix(alpha=1.0, num_classes=10)
            params = step.make_params(tuple(images.shape), random.Random(n))
            labels = torch.randint(0, 10, (n,))
            lab_gpu = labels.cuda()
            counts[n] = _counted(functools.partial(step.apply, images, lab_gpu, params))
            step.apply(host, labels, params)
            out = images
        torch.testing.assert_close(out.cpu(), host, atol=0, rtol=0)
    assert counts[16] == counts[256], counts


def test_an_all_tensor_batch_goes_up_in_one_copy(photos, tmp_path):
    """Tensor samples (.npy) through a GPU decoder: one pinned upload a batch of 256, not
    one synchronizing copy a sample."""
    from gpudecode.tensors import encode_npy
    import gpudecode.decode._span as span_mod

    img = np.ascontiguousarray(photos["coffee"][:64, :80])
    reqs = [Request(encode_npy(img), "npy", 64, 80, (k % 5, k % 7, 40, 50), "s", f"k{k}") for k in range(256)]
    for backend in BACKENDS:
        if not available(backend)[0]:
            continue
        dec = make_decoder(backend, device="cuda", num_threads=2, max_pixels=0)
        calls = []
        real = span_mod.to_device
        span_mod.to_device = lambda host, device, calls=calls, real=real: calls.append(1) or real(host, device)
        try:
            out = dec.decode(reqs).settle()
        finally:
            span_mod.to_device = real
        assert calls == [1], (backend, len(calls))
        assert out.errors == [None] * 256
        from conftest import decoded_image

        np.testing.assert_array_equal(decoded_image(out, 9), img[4:44, 2:52])


def test_no_allocation_per_launch_with_a_workspace(photos):
    """The CUDA kernel's scratch, statistics, histograms, aux planes and per-sample arrays
    live in the caller's Workspace (kernels.workspace): after the first launch, ten more
    allocate nothing on the device (torch's allocator counts) and make no buffer, and the
    pixels are those of a launch without one. (Barrier ops at p=1: every batch has the
    same two barrier levels; a batch with more levels than any before grows the buffers.)"""
    from gpudecode.kernels import fused
    from gpudecode.kernels.workspace import Workspace

    tf = T.Compose([T.RandomResizedCrop(96), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1),
                    T.RandomEqualize(1.0), T.RandomAutocontrast(1.0), T.Normalize(MEAN, STD)])
    img = photos["astronaut"]
    h, w, n = img.shape[0], img.shape[1], 8
    packed = torch.from_numpy(np.concatenate([img.reshape(-1)] * n)).cuda()
    sizes = [(h, w)] * n
    out, view = tf.new_output(n, "cuda")

    def launch(seed: int, ws) -> None:
        geom, f, o = tf.encode(tf.make_params(sizes, seed), sizes)
        geom[:, fused.OFFSET] = np.arange(n) * h * w * 3
        geom[:, fused.H], geom[:, fused.W] = h, w
        geom[:, fused.SY], geom[:, fused.SX], geom[:, fused.SC] = w * 3, 3, 1
        tf.run(packed, geom, f, o, view, workspace=ws)

    ws = Workspace()
    launch(0, ws)
    torch.cuda.synchronize()
    before, made = torch.cuda.memory_stats()["allocation.all.allocated"], ws.made
    for seed in range(1, 11):
        launch(seed, ws)
    torch.cuda.synchronize()
    assert torch.cuda.memory_stats()["allocation.all.allocated"] == before and ws.made == made
    launch(11, ws)
    kept = out.clone()
    launch(11, None)
    assert torch.equal(out, kept)


def test_canvas_steps_and_the_post_warp_on_cuda_make_no_host_sync(photos):
    """The canvas steps (RandomZoomOut with an RGB fill, RandomRotation(expand=True),
    ElasticTransform first) and ElasticTransform after the crop build their small tensors
    (matrices, fills, fields) on the host and send them from pinned memory: a batch on
    CUDA never waits for the stream (torch's sync debug mode raises on a synchronizing
    call), after a first batch (RandomZoomOut keeps its fill row a device), and the
    canvases equal the CPU's."""
    from gpudecode.decode._base import DecodedBatch
    from gpudecode.kernels.workspace import Workspace
    from gpudecode.transforms import canvas

    img = photos["astronaut"][::4, ::4]
    h, w, n = img.shape[0], img.shape[1], 6
    packed = np.concatenate([img.reshape(-1)] * n)
    shapes = np.array([[h, w]] * n, np.int64)

    def decoded(pixels):
        return DecodedBatch(pixels, np.arange(n, dtype=np.int64) * h * w * 3, shapes,
                            np.tile(np.array([[w * 3, 3, 1]], np.int64), (n, 1)),
                            np.concatenate([np.zeros((n, 2), np.int64), shapes], axis=1), [None] * n)

    import random

    for step in (T.RandomZoomOut((123, 117, 104), (1.0, 2.0), p=1.0),
                 T.RandomRotation(25, "bilinear", expand=True, fill=(9, 99, 199)),
                 T.ElasticTransform(30.0, 4.0, fill=(1, 2, 3))):
        params = [step.draw(random.Random(k), (h, w)) for k in range(n)]
        sizes, rows = [(h, w)] * n, np.arange(n)
        cpu = canvas.build(step, decoded(torch.from_numpy(packed)), params, sizes, rows)
        ws = Workspace()
        on_gpu = decoded(torch.from_numpy(packed).cuda())
        canvas.build(step, on_gpu, params, sizes, rows, ws)  # (the first: RandomZoomOut's fill row goes up)
        torch.cuda.synchronize()
        with sync_is_an_error():
            gpu = canvas.build(step, on_gpu, params, sizes, rows, ws)
        assert np.array_equal(gpu.offsets, cpu.offsets) and np.array_equal(gpu.shapes, cpu.shapes)
        far = (gpu.pixels.cpu().int() - cpu.pixels.int()).abs() > 1
        assert float(far.float().mean()) <= 0.01, step
    el = T.ElasticTransform(40.0, 4.0, fill=(1, 2, 3))
    params = [el.draw(random.Random(k), (48, 40)) for k in range(n)]
    host = torch.rand(n, 3, 48, 40)
    images = host.cuda()
    torch.cuda.synchronize()
    with sync_is_an_error():
        el.warp_output(images, params, levels=True)
    el.warp_output(host, params, levels=True)
    assert float(((images.cpu() - host).abs() > 1.5 / 255).float().mean()) <= 0.01


@pytest.mark.parametrize("inflate", ["nvcomp", "zlib", "nvcomp refuses"])
def test_png_in_two_halves_on_cuda_equals_libpng(inflate, monkeypatch):
    """PNG decoded on the GPU (decode/png.py: nvCOMP's batched inflate, or zlib on the
    host, and the CUDA unfilter kernel) equals the CPU decoder's libpng bit for bit, on
    every colour type and depth with every filter; a bad filter type, a short or long
    stream, a wrong Adler-32 and bytes after the stream (checked by the CUDA kernel after
    nvCOMP, its verdict in zlib's words) are each that image's error, as libpng refuses
    them (issue 56). An nvCOMP call that raises sends
    the batch to zlib (detours() counts it)."""
    from gpudecode.decode.png import PngDecoder
    from test_png_halves import FILTERS, KINDS, _broken, _rebuild, _req, _samples, idat_after_the_stream, write_png

    rng = np.random.default_rng(11)
    datas = []
    for color, depth in KINDS:
        for f in FILTERS.values():
            pal = rng.integers(0, 256, (1 << min(depth, 8), 3)) if color == 3 else None
            datas.append(write_png(_samples(rng, 37, 53, color, depth), color, depth, f, palette=pal))
    datas.append(idat_after_the_stream(datas[-1]))  # (its last four bytes are no Adler-32: zlib on the host takes it)
    broken = _broken()
    good = broken["filter type 7"][0]
    broken["a zlib header only"] = (_rebuild(good, b"x\x9c"), "not enough image data")  # (nvCOMP never sees it)
    bad = ("filter type 7", "too little data", "too much data", "wrong Adler-32", "a zlib header only",
           "bytes after the zlib stream")
    datas += [broken[name][0] for name in bad]
    reqs = [_req(d, str(k)) for k, d in enumerate(datas)]
    dec = PngDecoder(device="cuda", num_threads=4)
    if inflate == "zlib":
        dec._nvcomp = None
    elif dec._nvcomp is None:
        pytest.skip(f"nvCOMP is not usable here: {dec.backend}")
    elif inflate == "nvcomp refuses":  # the whole call raises: the batch goes to zlib, nothing lost
        def refuse(*a, **k):
            raise RuntimeError("refused (this test)")
        dec._nvcomp = type("Refusing", (), {"decode": staticmethod(refuse)})()
    got = dec.decode(reqs).settle()
    assert got.pixels.device.type == "cuda"
    ref = CpuDecoder(num_threads=2).decode(reqs).settle()
    for k in range(len(reqs) - len(bad)):
        assert got.errors[k] is None and ref.errors[k] is None, (k, got.errors[k])
        assert np.array_equal(decoded_image(got, k), decoded_image(ref, k)), k
    for k, name in enumerate(bad, len(reqs) - len(bad)):
        assert got.errors[k] is not None and re.search(broken[name][1], got.errors[k], re.I), (name, got.errors[k])
        assert ref.errors[k] is not None, name
    refused = inflate == "nvcomp refuses"
    assert dec.detours()["batches_inflated_by_zlib"] == int(refused)
    assert ("refused (this test)" in dec.detours()["nvcomp_refused"]) if refused else dec.detours()["nvcomp_refused"] is None


def test_png_on_cuda_reuses_the_sizes_nvcomp_found_for_images_of_one_size():
    """Batches whose PNGs have the sizes of an earlier batch's reuse the sizes nvCOMP found
    for it (its pass over the streams made once: decode/png.py's _nvcomp_decode), with
    libpng's pixels and no image sent to zlib; behind the same IHDR sizes, a stream with too
    little or too much data is still that image's error, in zlib's words."""
    from gpudecode.decode.png import PngDecoder
    from test_png_halves import FILTERS, _idats, _rebuild, _req, write_png

    rng = np.random.default_rng(14)
    goods = [write_png(rng.integers(0, 256, (24, 31, 3)), 2, 8, FILTERS["each-row"]) for _ in range(6)]
    reqs = [_req(d, str(k)) for k, d in enumerate(goods)]
    dec = PngDecoder(device="cuda", num_threads=2)
    if dec._nvcomp is None:
        pytest.skip(f"nvCOMP is not usable here: {dec.backend}")
    ref = CpuDecoder(num_threads=2).decode(reqs).settle()
    for _ in range(3):
        got = dec.decode(reqs).settle()
        for k in range(len(reqs)):
            assert got.errors[k] is None and np.array_equal(decoded_image(got, k), decoded_image(ref, k)), k
    d = dec.detours()
    assert "nvcomp_sizes_not_kept" not in d, d
    assert (d["nvcomp_sizes_reused"], d["adler_by_zlib"], d["batches_inflated_by_zlib"]) == (2, 0, 0), d
    raw = zlib.decompress(b"".join(_idats(goods[0])))
    mixed = list(goods)
    mixed[1] = _rebuild(goods[0], zlib.compress(raw[:-7]))
    mixed[3] = _rebuild(goods[0], zlib.compress(raw + b"\0" * 50))
    got = dec.decode([_req(x, str(k)) for k, x in enumerate(mixed)]).settle()
    assert re.search("not enough image data", got.errors[1]) and re.search("more image data", got.errors[3]), \
        got.errors
    for k in (0, 2, 4, 5):
        assert got.errors[k] is None and np.array_equal(decoded_image(got, k), decoded_image(ref, k)), k


def test_png_on_cuda_reads_deflate_codings_zlib_refuses_as_one_of_the_cpu_paths_does():
    """Deflate codings zlib calls invalid and libdeflate reads (a length symbol 286, a distance
    symbol 30, in a block of fixed codes: test_png.fixed_code_pngs). What nvCOMP makes of them
    is not documented, so the GPU path is held to one of the CPU's two verdicts: libpng's
    refusal, or the pixels of libdeflate's reading (those of the stream as encoders write it);
    which one is printed for the notes."""
    from gpudecode.decode.png import PngDecoder
    from test_png import fixed_code_pngs
    from test_png_halves import _req

    pngs = fixed_code_pngs()
    reqs = [_req(d, name) for name, d in pngs.items()]
    dec = PngDecoder(device="cuda", num_threads=2)
    if dec._nvcomp is None:
        pytest.skip(f"nvCOMP is not usable here: {dec.backend}")
    got = dec.decode(reqs).settle()
    assert got.errors[0] is None
    want = decoded_image(got, 0)
    ref = CpuDecoder(num_threads=1).decode(reqs[:1]).settle()
    assert np.array_equal(want, decoded_image(ref, 0))
    for k, name in enumerate(list(pngs)[1:], 1):
        print(f"nvCOMP on a stream with a {name}: {got.errors[k] or 'decoded'}")
        if got.errors[k] is None:
            assert np.array_equal(decoded_image(got, k), want), name
        else:  # (refused as libpng refuses it, in zlib's words)
            assert re.search("invalid (literal/length|distance) code", got.errors[k]), (name, got.errors[k])


def test_the_png_engine_in_a_split_on_cuda_gives_the_cpu_loaders_batches(tmp_path):
    """decoder=("png",) on CUDA (PNGs decoded in two halves on the GPU): the batches the CPU
    decoder gives on CUDA, bit for bit (the same pixels into the same kernel)."""
    rng = np.random.default_rng(12)
    samples = [{"__key__": f"{k:04d}", "png": encode(rng.integers(0, 256, (60 + k, 70, 3), dtype=np.uint8), "PNG"),
                "cls": b"1"} for k in range(24)]
    shard = make_shard(tmp_path / "p-0.tar", samples)
    kw = dict(batch_size=8, transform=train_tf(), seed=3, device="cuda")
    want = [b.images.cpu() for b in Loader(shard, decoder="cpu", **kw)]
    with Loader(shard, decoder=("png",), **kw) as ld:
        got = [b.images.cpu() for b in ld]
    assert len(got) == len(want) == 3
    for a, b in zip(got, want):
        assert torch.equal(a, b)
