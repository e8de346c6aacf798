"""gpudecode.transforms against torchvision.transforms.v2: same parameter distributions,
and, given the same parameters, the same pixels (on real photographs)."""
from __future__ import annotations

import collections
import itertools
import pickle

import numpy as np
import pytest
import torch
import torchvision.transforms.v2 as tv
from scipy import stats

from gpudecode import DecodeError, TransformError
from gpudecode import transforms as T

from simulator import run_code
from tvref import torchvision_apply

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def chw(img: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(img).permute(2, 0, 1).contiguous()


def max_err_levels(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max()) * 255


@pytest.fixture(scope="module")
def photo_batch(photos):
    """Real photos at several sizes and aspect ratios, one forcing RRC's fallback."""
    out = [chw(p) for p in photos.values()]
    rocket = photos["rocket"]
    out.append(chw(np.ascontiguousarray(rocket[:40])))            # 40 x 640: ratio 16, fallback
    out.append(chw(np.ascontiguousarray(photos["coffee"][::3, ::2])))  # odd size, downscaled
    return out


@pytest.mark.parametrize("jitter,tol", [(None, 1.0), ((0.4, 0.4, 0.4, 0.0), 1.0), ((0.4, 0.4, 0.4, 0.1), 2.0)])
def test_train_pipeline_matches_torchvision(photo_batch, jitter, tol):
    steps = [T.RandomResizedCrop(224), T.RandomHorizontalFlip()]
    if jitter:
        steps.append(T.ColorJitter(*jitter))
    tf = T.Compose(steps + [T.ToDtype(torch.float32, scale=True)])
    sizes = [tuple(im.shape[1:]) for im in photo_batch]
    for seed in range(3):
        params = tf.make_params(sizes, seed)
        out = tf(photo_batch, params)
        assert out.shape == (len(photo_batch), 3, 224, 224) and out.dtype == torch.float32
        for k, (im, p) in enumerate(zip(photo_batch, params)):
            ref = torchvision_apply(im, p, (224, 224))
            err = max_err_levels(out[k], ref)
            assert err <= tol, (k, p, err)


def test_normalize_and_fallback(photo_batch):
    tf = T.Compose([T.RandomResizedCrop(224), T.Normalize(MEAN, STD)])
    im = photo_batch[-2]  # 40 x 640
    params = tf.make_params([tuple(im.shape[1:])] * 20, seed=1)
    assert all(p["crop"] == (0, 293, 40, 53) for p in params)  # centred fallback, ratio 4/3
    out = tf([im], params[:1])
    ref = torchvision_apply(im, params[0], (224, 224), mean=MEAN, std=STD)
    assert float((out[0] - ref).abs().max()) * 255 * min(STD) <= 1.0


@pytest.mark.parametrize("steps,resize", [
    ([T.Resize(256), T.CenterCrop(224)], True),
    ([T.Resize((100, 150))], True),
    ([T.CenterCrop(600)], False),  # pads the smaller photos with zeros
])
def test_eval_pipelines(photo_batch, steps, resize):
    tf = T.Compose(steps + [T.Normalize(MEAN, STD)])
    params = tf.make_params([tuple(im.shape[1:]) for im in photo_batch], seed=0)
    out = tf(photo_batch, params)
    for k, (im, p) in enumerate(zip(photo_batch, params)):
        x = torch.from_numpy(np.asarray(im)).float() / 255
        if isinstance(steps[0], T.Resize):
            x = tv.functional.resize(x, list(p["resize"]), antialias=True)
        if isinstance(steps[-1], T.CenterCrop):
            x = tv.functional.center_crop(x, list(steps[-1].size))
        ref = tv.functional.normalize(x, MEAN, STD)
        assert float((out[k] - ref).abs().max()) * min(STD) * 255 <= 1.0


def test_edge_sizes_and_gray():
    rng = np.random.default_rng(0)
    tf = T.Compose([T.RandomResizedCrop((17, 9)), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1),
                    T.ToDtype(torch.float32, scale=True)])
    imgs = [torch.from_numpy(rng.integers(0, 256, (3, h, w), dtype=np.uint8)) for h, w in
            [(1, 1), (1, 300), (300, 1), (7, 13), (2, 2)]]
    gray = torch.from_numpy(rng.integers(0, 256, (1, 31, 23), dtype=np.uint8))
    imgs.append(gray)
    params = tf.make_params([tuple(i.shape[1:]) for i in imgs], seed=4)
    out = tf(imgs, params)
    for k, (im, p) in enumerate(zip(imgs, params)):
        assert max_err_levels(out[k], torchvision_apply(im, p, (17, 9))) <= 2.0
    # grey read as RGB == the same image expanded to three channels
    expanded = tf([gray.expand(3, -1, -1).contiguous()], params[-1:])
    torch.testing.assert_close(expanded[0], out[-1], atol=1e-6, rtol=0)


def test_uint8_output_and_nhwc(photos):
    im = chw(photos["chelsea"])
    tf = T.Compose([T.RandomResizedCrop(64), T.RandomHorizontalFlip()])
    p = tf.make_params([tuple(im.shape[1:])], seed=2)
    out = tf(im, p)
    assert out.dtype == torch.uint8 and out.shape == (3, 64, 64)
    ref = tv.functional.to_dtype(torchvision_apply(im, p[0], (64, 64)), torch.uint8, scale=True)
    assert int((out.int() - ref.int()).abs().max()) <= 1
    nhwc = T.Compose([T.RandomResizedCrop(64), T.RandomHorizontalFlip()], layout="NHWC")(im, p)
    assert nhwc.shape == (64, 64, 3) and torch.equal(nhwc.permute(2, 0, 1), out)
    half = T.Compose([T.RandomResizedCrop(64), T.Normalize(MEAN, STD), T.ToDtype(torch.float16)])
    h = half(im, p)
    f = T.Compose([T.RandomResizedCrop(64), T.Normalize(MEAN, STD)])(im, p)
    assert h.dtype == torch.float16 and torch.allclose(h.float(), f, atol=1e-2)



@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16_bit_outputs_are_the_float32_output_rounded_once(photos, dtype):
    """float16 and bfloat16 outputs (ToDtype from uint8 with scale, or after Normalize;
    NCHW and NHWC) are the float32 output cast by torch (round to nearest, ties to even),
    bit for bit; and torchvision's float32 pipeline so rounded within the kernel's level."""
    im = chw(photos["astronaut"])
    tv_steps = [tv.RandomResizedCrop(64), tv.RandomHorizontalFlip(), tv.ColorJitter(0.4, 0.4, 0.4, 0.1)]
    for tail, f32_tail in (([tv.ToDtype(dtype, scale=True)], [tv.ToDtype(torch.float32, scale=True)]),
                           ([tv.ToDtype(torch.float32, scale=True), tv.Normalize(MEAN, STD), tv.ToDtype(dtype)],
                            [tv.ToDtype(torch.float32, scale=True), tv.Normalize(MEAN, STD)])):
        for layout in ("NHWC", "NCHW"):
            half = T.Compose.from_torchvision(tv.Compose(tv_steps + tail), layout=layout)
            full = T.Compose.from_torchvision(tv.Compose(tv_steps + f32_tail), layout=layout)
            p = half.make_params([tuple(im.shape[1:])] * 3, seed=5)
            h, f = half([im] * 3, p), full([im] * 3, p)
            assert h.dtype == dtype and h.shape == f.shape and torch.equal(h, f.to(dtype)), layout
        if len(tail) == 1:  # (torchvision's float32 pipeline, rounded to the 16-bit type: the kernel's 1 level)
            ref = torch.stack([torchvision_apply(im, q, (64, 64)) for q in p]).to(dtype)
            assert float((h.float() - ref.float()).abs().max()) <= 1.01 / 255 + torch.finfo(dtype).eps


def test_same_seed_same_output_and_no_mutation(photo_batch):
    tf = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1),
                    T.Normalize(MEAN, STD)])
    before = [im.clone() for im in photo_batch]
    a = tf(photo_batch, seed=7)
    b = tf(photo_batch, seed=7)
    assert torch.equal(a, b) and not torch.equal(a, tf(photo_batch, seed=8))
    # a seed's draws (kept as the native columns) are make_params' dicts for it, given back
    dicts = tf.make_params([tuple(im.shape[1:]) for im in photo_batch], 7)
    assert isinstance(dicts, list) and torch.equal(tf(photo_batch, dicts), a)
    assert all(torch.equal(x, y) for x, y in zip(before, photo_batch))
    assert tf([], seed=0).shape == (0, 3, 32, 32)
    tf2 = pickle.loads(pickle.dumps(tf))
    assert torch.equal(tf2(photo_batch, seed=7), a)


# ---- parameter distributions against torchvision's own draws -------------------------------

def test_rrc_distribution_matches_torchvision():
    torch.manual_seed(0)
    H, W = 375, 500
    ref = tv.RandomResizedCrop(224)
    img = [torch.empty(3, H, W)]
    tv_draws = [ref.make_params(img) for _ in range(3000)]
    ours = T.Compose([T.RandomResizedCrop(224)]).make_params([(H, W)] * 3000, seed=0)
    def features(h, w, t, l):
        return {"area": h * w / (H * W), "ratio": w / h, "top": t, "left": l}

    a = [features(d["height"], d["width"], d["top"], d["left"]) for d in tv_draws]
    b = [features(*p["crop"][2:], *p["crop"][:2]) for p in ours]
    for key in ("area", "ratio", "top", "left"):
        assert stats.ks_2samp([x[key] for x in a], [x[key] for x in b]).pvalue > 1e-3, key


def test_rrc_fallback_frequency_matches_torchvision():
    torch.manual_seed(1)
    H, W = 60, 1000  # most tries fail: the fallback is frequent
    ref = tv.RandomResizedCrop(224, scale=(0.5, 1.0))
    n = 3000
    full = (0, (W - 80) // 2, 60, 80)
    tv_fb = sum((d["top"], d["left"], d["height"], d["width"]) == full
                for d in (ref.make_params([torch.empty(3, H, W)]) for _ in range(n)))
    ours = sum(p["crop"] == full for p in T.Compose([T.RandomResizedCrop(224, scale=(0.5, 1.0))])
               .make_params([(H, W)] * n, seed=3))
    assert tv_fb > 100
    assert abs(tv_fb - ours) < 4 * np.sqrt(tv_fb)


def test_jitter_distribution_and_order():
    tf = T.Compose([T.RandomResizedCrop(8), T.ColorJitter(0.4, 0.3, 0.2, 0.1)])
    params = tf.make_params([(10, 10)] * 4800, seed=0)
    for name, (lo, hi) in [("brightness", (0.6, 1.4)), ("contrast", (0.7, 1.3)), ("saturation", (0.8, 1.2)),
                           ("hue", (-0.1, 0.1))]:
        v = [p[name] for p in params]
        assert stats.kstest(v, stats.uniform(lo, hi - lo).cdf).pvalue > 1e-3
    counts = collections.Counter(tuple(p["order"]) for p in params)
    assert set(counts) == set(itertools.permutations(range(4)))
    assert stats.chisquare(list(counts.values())).pvalue > 1e-3
    flips = T.Compose([T.RandomResizedCrop(8), T.RandomHorizontalFlip(0.3)]).make_params([(9, 9)] * 4000, seed=1)
    assert abs(np.mean([p["flip"] for p in flips]) - 0.3) < 0.03


def test_jitter_ranges_like_torchvision():
    for args in [(0.4, 0.4, 0.4, 0.1), ((0.5, 1.5), 0, (0.9, 1.1), (-0.2, 0.3)), (0, 0, 0, 0)]:
        ours, ref = T.ColorJitter(*args), tv.ColorJitter(*args)
        for name in ("brightness", "contrast", "saturation", "hue"):
            assert getattr(ours, name) == (None if getattr(ref, name) is None else tuple(getattr(ref, name)))
    with pytest.raises(ValueError):
        T.ColorJitter(hue=0.7)
    with pytest.raises(ValueError):
        T.ColorJitter(brightness=-1)


# ---- RandomCrop and no geometry: images read 1:1 (tensor shards at the training size) -----

def _tv_pad_crop(im: torch.Tensor, tf: T.RandomCrop, crop) -> torch.Tensor:
    """torchvision's RandomCrop on `im` with the window our draw chose: F.pad with its
    padding (and pad_if_needed), then F.crop at the drawn position in the padded image."""
    import torchvision.transforms.v2.functional as F

    left, top, right, bottom = tf.padding
    x = F.pad(im, [left, top, right, bottom], fill=0)
    th, tw = tf.size
    if tf.pad_if_needed and x.shape[2] < tw:
        d = tw - x.shape[2]
        x, left = F.pad(x, [d, 0, d, 0], fill=0), left + d
    if tf.pad_if_needed and x.shape[1] < th:
        d = th - x.shape[1]
        x, top = F.pad(x, [0, d, 0, d], fill=0), top + d
    i, j = crop[0] + top, crop[1] + left  # our window is in the image's own coordinates
    assert 0 <= i <= x.shape[1] - th and 0 <= j <= x.shape[2] - tw
    return F.crop(x, i, j, th, tw)


@pytest.mark.parametrize("crop", [T.RandomCrop(64, padding=8), T.RandomCrop((40, 72), padding=(3, 5)),
                                  T.RandomCrop(96, padding=(1, 2, 3, 4), pad_if_needed=True),
                                  T.RandomCrop(48)])
def test_random_crop_matches_torchvision(photos, crop):
    """RandomCrop (+ flip + Normalize): torchvision's pad + crop + flip + normalize with the
    same window, to float rounding; the kernel takes its 1:1 path (no resampling)."""
    import torchvision.transforms.v2.functional as F

    imgs = [chw(np.ascontiguousarray(p[:90, :120])) for p in photos.values()]
    imgs.append(chw(np.ascontiguousarray(photos["coffee"][:50, :60])))  # smaller than some crops
    tf = T.Compose([crop, T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)])
    usable = [im for im in imgs if crop.pad_if_needed or (im.shape[1] + sum(crop.padding[1::2]) >= crop.size[0]
                                                          and im.shape[2] + sum(crop.padding[::2]) >= crop.size[1])]
    for seed in range(3):
        params = tf.make_params([tuple(im.shape[1:]) for im in usable], seed)
        out = tf(usable, params)
        assert out.shape == (len(usable), 3, *crop.size)
        for k, (im, p) in enumerate(zip(usable, params)):
            ref = F.to_dtype(_tv_pad_crop(im, crop, p["crop"]), torch.float32, scale=True)
            if p["flip"]:
                ref = F.horizontal_flip(ref)
            ref = F.normalize(ref, MEAN, STD)
            torch.testing.assert_close(out[k], ref, atol=2e-6, rtol=0)


def test_random_crop_draws_like_torchvision():
    """Every position of the padded image equally likely, as torchvision's randint draws."""
    tf = T.RandomCrop(4, padding=2)
    rng = __import__("random").Random(0)
    seen = collections.Counter(tf.draw(rng, (6, 5))["crop"][:2] for _ in range(20000))
    assert set(seen) == {(i - 2, j - 2) for i in range(6 + 4 - 4 + 1) for j in range(5 + 4 - 4 + 1)}
    assert stats.chisquare(list(seen.values())).pvalue > 1e-3
    with pytest.raises(ValueError, match="smaller than the crop"):
        T.RandomCrop(10).draw(rng, (6, 20))
    assert T.RandomCrop(6).draw(rng, (6, 6))["crop"] == (0, 0, 6, 6)


def test_from_torchvision_random_crop_v1_and_v2():
    import torchvision.transforms as v1

    for mod in (v1, tv):
        ours = T.Compose.from_torchvision(mod.Compose([mod.RandomCrop(32, padding=(1, 2, 3, 4), pad_if_needed=True),
                                                       mod.RandomHorizontalFlip()]))
        rc = ours.plan.geometry[0]
        assert isinstance(rc, T.RandomCrop) and rc.size == (32, 32) and rc.padding == (1, 2, 3, 4)
        assert rc.pad_if_needed and ours.out_size == (32, 32)


def test_no_geometry_keeps_the_size(photos):
    """flip + Normalize alone (tensor shards stored at the training size): torchvision's
    flip + to_dtype + normalize exactly; one size per batch."""
    import torchvision.transforms.v2.functional as F

    tf = T.Compose([T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)])
    assert tf.out_size is None
    imgs = [chw(np.ascontiguousarray(p[:56, :72])) for p in photos.values()]
    params = tf.make_params([(56, 72)] * len(imgs), 4)
    out = tf(imgs, params)
    assert out.shape == (len(imgs), 3, 56, 72) and {p["flip"] for p in params} == {True, False}
    for k, (im, p) in enumerate(zip(imgs, params)):
        ref = F.to_dtype(im, torch.float32, scale=True)
        ref = F.normalize(F.horizontal_flip(ref) if p["flip"] else ref, MEAN, STD)
        torch.testing.assert_close(out[k], ref, atol=2e-6, rtol=0)
    u8 = T.Compose([T.RandomHorizontalFlip(p=1.0)])(imgs[0])
    assert torch.equal(u8, imgs[0].flip(-1))
    with pytest.raises(ValueError, match="one size"):
        tf([imgs[0], chw(np.ascontiguousarray(photos["coffee"][:50, :60]))])


# ---- what cannot be fused is refused, by name --------------------------------------------

@pytest.mark.parametrize("steps,match", [
    ([T.Normalize(MEAN, STD), T.ColorJitter(0.4)], "ColorJitter after Normalize"),
    ([T.RandomResizedCrop(8), T.Normalize(MEAN, STD), T.ColorJitter(0.4)], "ColorJitter after Normalize"),
    ([T.RandomResizedCrop(8), T.RandomResizedCrop(8)], "RandomResizedCrop after other steps|unsupported geometry"),
    ([T.RandomResizedCrop(8), tv.GaussianBlur(3)], "GaussianBlur"),
    ([T.RandomShortestSize([24, 32])], "RandomShortestSize alone gives differently sized images"),
    ([T.RandomResizedCrop(8), T.ColorJitter(0.1), T.ColorJitter(0.2)], "two ColorJitters"),
    ([T.RandomCrop(8), T.CenterCrop(10)], "unsupported geometry"),  # (a crop of a crop fuses where it is inside)
    ([T.RandomResizedCrop(30), T.RandomCrop((31, 20), padding=(0, 0, 5, 0))], "cannot take any image"),
])
def test_refusals(steps, match):
    with pytest.raises(TransformError, match=match):
        T.Compose(steps)


def test_random_crop_refuses_what_the_kernel_cannot_pad():
    """A padding mode torch's pad has not, and a fill between levels, are refused by name
    (the edge, reflect and symmetric modes are taken: tests/test_pad.py)."""
    with pytest.raises(TransformError, match="padding_mode='wrap'"):
        T.RandomCrop(8, padding=2, padding_mode="wrap")
    with pytest.raises(TransformError, match="fill=127.5"):  # (fills are whole levels; 127 pads, see below)
        T.RandomCrop(8, padding=2, fill=127.5)
    assert repr(T.RandomCrop(8, padding=2)) == "RandomCrop(size=(8, 8), padding=(2, 2, 2, 2), pad_if_needed=False)"


def test_from_torchvision():
    ref = tv.Compose([tv.RandomResizedCrop(64, antialias=True), tv.RandomHorizontalFlip(),
                      tv.ColorJitter(0.4, 0.4, 0.4, 0.1), tv.ToDtype(torch.float32, scale=True),
                      tv.Normalize(MEAN, STD)])
    ours = T.Compose.from_torchvision(ref)
    assert ours.out_size == (64, 64) and ours.dtype == torch.float32
    assert ours.plan.jitter.brightness == (0.6, 1.4) and ours.plan.jitter.hue == (-0.1, 0.1)
    with pytest.raises(TransformError, match="JPEG") as e:
        T.Compose.from_torchvision(tv.Compose([tv.RandomResizedCrop(8), tv.JPEG((50, 90))]))
    # the refusal names the step and the ways out, and where the supported ops are listed
    assert "torchvision.transforms.v2.JPEG cannot be fused (step 2 of 2)" in str(e.value)
    assert "for images, labels in loader" in str(e.value) and "`gpudecode ops`" in str(e.value)


def test_sample_rng_is_a_seeded_random_random():
    """sample_rng: random.Random's methods over a stream fixed by (seed, epoch, index): the
    same triple gives the same draws, any other triple others; the draws are uniform
    (chi-square over 40,000 samples' first draws, numpy as the reference for the bins)."""
    import random

    from gpudecode.transforms import sample_rng

    a, b = sample_rng(7, 2, 1234), sample_rng(7, 2, 1234)
    assert isinstance(a, random.Random)
    draws = lambda r: (r.random(), r.uniform(0.5, 1.5), r.randint(0, 10), r.getrandbits(130), r.sample(range(50), 5))
    assert draws(a) == draws(b)
    firsts = {sample_rng(s, e, i).random() for s in (0, 1) for e in (0, 1, 2) for i in range(500)}
    assert len(firsts) == 2 * 3 * 500  # no two (seed, epoch, index) share a stream start
    assert 0 <= min(firsts) and max(firsts) < 1
    with pytest.raises(TypeError):
        a.seed(3)
    xs = np.array([sample_rng(3, 0, i).random() for i in range(40000)])
    counts, _ = np.histogram(xs, bins=20, range=(0, 1))
    chi2 = float(((counts - 2000) ** 2 / 2000).sum())
    assert chi2 < 43.8  # 19 degrees of freedom, p = 0.001
    bits = np.array([sample_rng(4, 1, i).getrandbits(8) for i in range(20000)])
    assert abs(bits.mean() - 127.5) < 2.0 and set(np.unique(bits)) == set(range(256))
    # a shuffle is a permutation, and differs between samples
    perms = {tuple(sample_rng(5, 0, i).sample(range(4), 4)) for i in range(200)}
    assert len(perms) == 24


def test_sample_rng_native_stream_is_the_python_reference():
    """The native SplitMix64 stream (what sample_rng draws from) gives, draw for draw, what
    the Python reference gives: random(), getrandbits of every width (0, within a word,
    several words), and random.Random's methods over them, for any key and index (negative
    and beyond 64 bits included)."""
    import random

    from gpudecode import _native
    from gpudecode.transforms.rng import _epoch_key, _SampleRandom

    def script(r):
        out = [r.random(), r.getrandbits(0), r.getrandbits(1), r.getrandbits(7), r.getrandbits(63),
               r.getrandbits(64), r.getrandbits(65), r.getrandbits(128), r.getrandbits(200), r.uniform(0.5, 1.5),
               r.randint(0, 10), r.randint(-5, 1 << 70), r.randrange(3, 1000, 7), r.choice("abcdef"),
               r.sample(range(50), 5), r.gauss(0.0, 1.0), r.expovariate(2.0), r.triangular(0, 1, 0.3)]
        xs = list(range(30))
        r.shuffle(xs)
        return out + [xs, r.random()]

    for seed, epoch in ((0, 0), (7, 2), (1 << 70, 3), (-1, 1)):
        key = _epoch_key(seed, epoch)
        for index in (0, 1, 1234, -1, -(1 << 65), (1 << 64) + 5, 10 ** 30):
            native, ref = _SampleRandom(key, index), _SampleRandom(key, index, native=False)
            assert isinstance(native, random.Random)
            assert script(native) == script(ref), (seed, epoch, index)
    g = _native.SplitMix(3, 4)
    with pytest.raises(ValueError):
        g.getrandbits(-1)


def test_cuda_launch_failures_are_kernel_launch_errors():
    """What the driver, the compiler or numba raise at a launch becomes a KernelLaunchError
    naming the output shape and device (the original as __cause__); anything else (out of
    memory, a bug) stays what it is. (On a GPU, `make gpu-check` launches for real.)"""
    from numba.core.errors import TypingError
    from numba.cuda.cudadrv import driver

    from gpudecode import GpuDecodeError, KernelLaunchError
    from gpudecode.kernels.launch import MAX_CUDA_BATCH, launch_failure

    errs = [TypingError("No implementation of function")]
    if hasattr(driver, "LinkerError"):  # (not in the simulator's driver module)
        errs.append(driver.LinkerError("ptxas fatal: sm_120"))
    if hasattr(driver, "CudaAPIError"):
        errs.append(driver.CudaAPIError(1, "CUDA_ERROR_INVALID_VALUE"))
    for err in errs:
        out = launch_failure(err, (64, 3, 224, 224), "cuda:1")
        assert isinstance(out, KernelLaunchError) and isinstance(out, GpuDecodeError)
        assert "[64, 3, 224, 224]" in str(out) and "cuda:1" in str(out) and type(err).__name__ in str(out)
    assert launch_failure(MemoryError(), (1, 3, 8, 8), "cuda:0") is None
    assert launch_failure(ValueError("a bug"), (1, 3, 8, 8), "cuda:0") is None
    assert MAX_CUDA_BATCH == 65535


# -- RandomErasing ---------------------------------------------------------------------------

@pytest.mark.parametrize("value", [0, (0.5, -1.0, 2.0), "random"])
def test_random_erasing_matches_torchvision_for_the_same_params(photo_batch, value):
    """The erased output equals torchvision's F.erase of the un-erased output with the same
    rectangle (and, for "random", the same standard normal noise); the other steps' draws
    are what they are without RandomErasing."""
    import torchvision.transforms.v2.functional as F

    base = [T.RandomResizedCrop(40), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.Normalize(MEAN, STD)]
    plain, erasing = T.Compose(base), T.Compose(base + [T.RandomErasing(p=1.0, value=value)])
    sizes = [tuple(im.shape[1:]) for im in photo_batch]
    params = erasing.make_params(sizes, 11)
    assert [{k: v for k, v in p.items() if k != "erase"} for p in params] == plain.make_params(sizes, 11)
    got = erasing(photo_batch, params)
    want = plain(photo_batch, params)
    for k, p in enumerate(params):
        e = p["erase"]
        assert e is not None and 0 < e["h"] < 40 and 0 < e["w"] < 40
        if value == "random":
            v = torch.empty((3, e["h"], e["w"])).normal_(generator=torch.Generator().manual_seed(e["noise"]))
        else:
            v = torch.tensor(value if isinstance(value, tuple) else [value], dtype=torch.float32)[:, None, None]
        want[k] = F.erase(want[k], e["i"], e["j"], e["h"], e["w"], v)
    assert torch.equal(got, want)


def test_random_erasing_draws_like_torchvision():
    """The coin, the rectangle's size and place: KS tests against torchvision v2's own
    draws (torch's generator) on the same output size, 4000 each."""
    torch.manual_seed(0)
    ours_tf = T.Compose([T.CenterCrop(48), T.Normalize(MEAN, STD), T.RandomErasing(p=0.5)])
    theirs = tv.RandomErasing(p=1.0)  # (the coin: torch.rand(1) < p in its forward, checked below)
    ours = [p["erase"] for p in ours_tf.make_params([(64, 64)] * 8000, 3)]
    hit = [e for e in ours if e is not None]
    assert stats.binomtest(len(hit), len(ours), 0.5).pvalue > 1e-3
    x = torch.zeros(3, 48, 48)
    ref = [theirs.make_params([x]) for _ in range(4000)]
    ref = [r for r in ref if r["v"] is not None]
    for key in ("h", "w", "i", "j"):
        assert stats.ks_2samp([e[key] for e in hit[:4000]], [r[key] for r in ref]).pvalue > 1e-3, key


def test_random_erasing_from_torchvision_and_where_it_may_stand():
    import torchvision.transforms as v1

    for t in (tv.RandomErasing(p=0.1, value="random"), v1.RandomErasing(p=0.1, value="random"),
              tv.RandomErasing(value=(1, 2, 3)), v1.RandomErasing(value=0)):
        c = T.Compose.from_torchvision(tv.Compose([tv.RandomResizedCrop(8), tv.ToDtype(torch.float32, scale=True),
                                                   tv.Normalize(MEAN, STD), t]))
        e = c.plan.erase
        assert e is not None and e.p == t.p and e.scale == tuple(t.scale)
    assert T.Compose.from_torchvision(tv.RandomErasing(value="random")).plan.erase.value is None
    with pytest.raises(TransformError, match="after RandomErasing cannot be fused"):
        T.Compose([T.RandomResizedCrop(8), T.RandomErasing(), T.Normalize(MEAN, STD)])
    with pytest.raises(ValueError, match="should be 'random'"):
        T.RandomErasing(value="noise")


# -- RandomApply around ColorJitter (DINO's, SimCLR's, BYOL's) -------------------------------

def test_random_apply_jitter_draws_and_pixels_like_torchvision(photo_batch):
    """The coin first, then the jitter's own draws (torchvision's order): applied in a
    fraction p of the samples (binomial test), and an image that loses the coin comes out
    as without ColorJitter, one that wins as ColorJitter with those factors."""
    jit = T.ColorJitter(0.4, 0.4, 0.2, 0.1)
    base = [T.RandomResizedCrop(32), T.RandomHorizontalFlip()]
    tf = T.Compose(base + [T.RandomApply([jit], p=0.8), T.Normalize(MEAN, STD)])
    params = tf.make_params([(64, 64)] * 4000, 5)
    won = [p["brightness"] is not None for p in params]
    assert stats.binomtest(sum(won), 4000, 0.8).pvalue > 1e-3
    sizes = [tuple(im.shape[1:]) for im in photo_batch]
    ps = tf.make_params(sizes, 9)
    got = tf(photo_batch, ps)
    plain = T.Compose(base + [jit, T.Normalize(MEAN, STD)])
    assert torch.equal(got, plain(photo_batch, ps))  # the same kernel on the same factors (None: off)
    off = [dict(p, brightness=None, contrast=None, saturation=None, hue=None) for p in ps]
    for k, p in enumerate(ps):
        if p["brightness"] is None:
            assert torch.equal(got[k], plain(photo_batch, off)[k])


def test_random_apply_from_torchvision_and_refusals():
    import torchvision.transforms as v1

    dino = v1.Compose([v1.RandomResizedCrop(224, scale=(0.4, 1.0)),
                       v1.Compose([v1.RandomHorizontalFlip(p=0.5),
                                   v1.RandomApply([v1.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8)]),
                       v1.Compose([v1.ToTensor(), v1.Normalize(MEAN, STD)])])
    for src in (dino, tv.Compose([tv.RandomResizedCrop(96), tv.RandomApply([tv.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8),
                                  tv.ToDtype(torch.float32, scale=True), tv.Normalize(MEAN, STD)])):
        c = T.Compose.from_torchvision(src)
        assert isinstance(c.plan.jitter_draw, T.RandomApply) and c.plan.jitter_draw.p == 0.8
    with pytest.raises(TransformError, match=r"(?s)ElasticTransform\(.*inside\s+RandomApply\s+cannot"):
        T.Compose.from_torchvision(tv.RandomApply([tv.ElasticTransform()], p=0.5))
    with pytest.raises(TransformError, match=r"RandomApply is fused around\s+the per-sample"):
        T.Compose.from_torchvision(tv.RandomApply([tv.Normalize([0.5] * 3, [0.2] * 3)], p=0.5))
    flipped = T.Compose.from_torchvision(tv.RandomApply([tv.RandomHorizontalFlip()], p=0.5))  # (a flip in it: drawn
    share = np.mean([p["flip"] for p in flipped.make_params([(8, 8)] * 4000, 0)])  # by it, test_flips_in_containers)
    assert flipped.plan.flip is None and abs(share - 0.25) < 0.03, share
    blur = T.Compose.from_torchvision(tv.RandomApply([tv.GaussianBlur(23)], p=0.5)).plan.program[0]
    assert isinstance(blur, T.RandomApply) and isinstance(blur.transforms[0], T.GaussianBlur)
    # a ColorJitter alone draws as before (no coin): the existing pipelines' draws are unchanged
    a = T.Compose([T.RandomResizedCrop(8), T.ColorJitter(0.4, 0.4, 0.4, 0.1)]).make_params([(20, 30)] * 5, 1)
    b = T.Compose([T.RandomResizedCrop(8), T.RandomApply([T.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=1.0)]
                  ).make_params([(20, 30)] * 5, 1)
    assert all(x["crop"] == y["crop"] for x, y in zip(a, b))


# -- per-pixel ops after ColorJitter: RandomGrayscale, RandomSolarize, RandomInvert ---------

def _pixel_pipeline(p=1.0):
    return [T.RandomResizedCrop(40), T.RandomHorizontalFlip(), T.RandomApply([T.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8),
            T.RandomGrayscale(p), T.RandomSolarize(128, p), T.RandomInvert(p), T.RandomPosterize(3, p)]


@pytest.mark.parametrize("p", [1.0, 0.5])
def test_pixel_ops_match_torchvision_on_real_photos(photo_batch, p):
    """The kernel's program (jitter ops, then grayscale, solarize, invert as each sample
    drew them) against torchvision's functional ops replaying the same params, on the
    float image: at most 1 level off (solarize may flip a value that lies within an ulp of
    its threshold: at most 0.2% of the values)."""
    import torchvision.transforms.v2.functional as F

    tf = T.Compose(_pixel_pipeline(p) + [T.ToDtype(torch.float32, scale=True)])
    sizes = [tuple(im.shape[1:]) for im in photo_batch]
    params = tf.make_params(sizes, 21)
    got = tf(photo_batch, params)
    pixel = [("grayscale", lambda x: F.rgb_to_grayscale(x, num_output_channels=3)),
             ("solarize", lambda x: F.solarize(x, 128 / 255)), ("invert", F.invert),
             ("posterize", lambda x: F.posterize(x, 3))]
    for k, (img, prm) in enumerate(zip(photo_batch, params)):
        ref = torchvision_apply(img, prm, (40, 40), pixel=pixel)
        err = (got[k] - ref).abs() * 255
        assert (err > 1.0).float().mean() <= 0.002, (k, prm, float(err.max()))
    if p == 0.5:
        drawn = [(q["grayscale"], q["solarize"], q["invert"], q["posterize"])
                 for q in tf.make_params([(50, 50)] * 4000, 2)]
        for i in range(4):
            assert stats.binomtest(sum(d[i] for d in drawn), 4000, 0.5).pvalue > 1e-3


def test_pixel_ops_cuda_kernel_equals_cpu_twin_under_the_simulator():
    """Every op id of the program through the CUDA kernel (simulator) and the CPU twin, on
    crops of real photographs (the CPU twin is compared with torchvision above)."""
    import textwrap

    code = textwrap.dedent("""
        import numpy as np, torch
        from gpudecode import transforms as T
        from gpudecode.kernels import fused
        from skimage import data
        from tvref import pack_hwc
        photos = [data.astronaut(), data.coffee(), data.chelsea(), data.rocket()]
        imgs = [torch.from_numpy(np.ascontiguousarray(p[60:73 + k, 90:107].transpose(2, 0, 1)))
                for k, p in enumerate(photos)]  # real photographs' pixels
        tf = T.Compose([T.RandomResizedCrop((9, 11)), T.RandomVerticalFlip(0.5), T.RandomHorizontalFlip(0.5),
                        T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.RandomGrayscale(0.5),
                        T.RandomSolarize(100, 0.7), T.RandomInvert(0.5), T.RandomPosterize(2, 0.6),
                        T.Normalize([0.5] * 3, [0.25] * 3)])
        params = tf.make_params([tuple(i.shape[1:]) for i in imgs], 3)
        cpu = tf(imgs, params).numpy()
        sizes = [tuple(i.shape[1:]) for i in imgs]
        geom, factors, order = tf.encode(params, sizes)
        assert (order >= 4).any(), order
        src = pack_hwc(imgs, geom, sizes)
        mean, std = tf._norm_arrays()
        out = np.zeros((4, 3, 9, 11), np.float32)
        fused.fused_cuda(src, geom, factors, order, mean, std, out, normalize=True)
        assert np.abs(out - cpu).max() < 1e-4, np.abs(out - cpu).max()
        print("ok")
        """)
    run_code(code, timeout=300)


def test_pixel_ops_from_torchvision_and_where_they_may_stand():
    import torchvision.transforms as v1

    dino_global = v1.Compose([
        v1.RandomResizedCrop(224, scale=(0.4, 1.0)),
        v1.Compose([v1.RandomHorizontalFlip(p=0.5), v1.RandomApply([v1.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8),
                    v1.RandomGrayscale(p=0.2)]),
        v1.RandomSolarize(128, p=0.2),
        v1.Compose([v1.ToTensor(), v1.Normalize(MEAN, STD)])])
    c = T.Compose.from_torchvision(dino_global)
    assert [type(o).__name__ for o in c.plan.pixel_ops] == ["RandomGrayscale", "RandomSolarize"]
    assert c.plan.pixel_ops[1].threshold == 128 and c.plan.pixel_ops[0].p == 0.2
    after_float = tv.Compose([tv.RandomResizedCrop(8), tv.ToDtype(torch.float32, scale=True), tv.RandomSolarize(0.5),
                              tv.RandomInvert(), tv.Grayscale(3), tv.RandomPosterize(4, p=0.3)])
    ops = T.Compose.from_torchvision(after_float).plan.pixel_ops
    assert ops[0].threshold == 127.5 and [type(o).__name__ for o in ops] == ["RandomSolarize", "RandomInvert",
                                                                              "Grayscale", "RandomPosterize"]
    assert ops[3].bits == 4 and ops[3].p == 0.3
    # any order: the program runs the steps as the Compose lists them
    before = T.Compose([T.RandomResizedCrop(8), T.RandomGrayscale(), T.ColorJitter(0.4)])
    assert [type(t).__name__ for t in before.plan.program] == ["RandomGrayscale", "ColorJitter"]
    with pytest.raises(TransformError, match="two RandomGrayscales"):
        T.Compose([T.RandomGrayscale(), T.RandomGrayscale()])
    assert T.Compose.from_torchvision(tv.Grayscale()).plan.channels == 1  # (torchvision's default: tests/test_grey_output.py)



@pytest.mark.parametrize("steps", [
    lambda: [T.RandomResizedCrop(40), T.RandomVerticalFlip(1.0)],
    lambda: [T.RandomResizedCrop(40), T.RandomHorizontalFlip(0.5), T.RandomVerticalFlip(0.5)],
    lambda: [T.Resize(48), T.CenterCrop(40), T.RandomVerticalFlip(1.0)],
    lambda: [T.RandomCrop(40, padding=6, pad_if_needed=True), T.RandomVerticalFlip(1.0)],
], ids=["rrc", "rrc-both-flips", "resize-centercrop", "randomcrop-padding"])
def test_random_vertical_flip_matches_torchvision(photo_batch, steps):
    """The kernel reads the output's rows in reverse (CPU twin: the vertical pass's weights
    reversed), as torchvision's vertical_flip of the transformed image; the one-to-one
    fast path is left for flipped samples."""
    tf = T.Compose(steps() + [T.Normalize(MEAN, STD)])
    sizes = [tuple(im.shape[1:]) for im in photo_batch]
    params = tf.make_params(sizes, 13)
    got = tf(photo_batch, params)
    resize = isinstance(tf.plan.geometry[0], T.Resize)
    for k, (img, p) in enumerate(zip(photo_batch, params)):
        ref = torchvision_apply(img, p, (40, 40), mean=MEAN, std=STD, resize=resize)
        assert max_err_levels(got[k], ref) <= 1.0, (k, p)
    draws = [q["vflip"] for q in T.Compose([T.CenterCrop(8), T.RandomVerticalFlip(0.3)]).make_params([(9, 9)] * 4000, 1)]
    assert stats.binomtest(sum(draws), 4000, 0.3).pvalue > 1e-3
    one = T.Compose([T.CenterCrop((30, 40)), T.RandomVerticalFlip(1.0)])  # 1:1, the identity path but flipped
    img = photo_batch[0][:, :30, :40].contiguous()
    assert torch.equal(one([img]), img.flip(1)[None])


@pytest.mark.parametrize("size", [(224, 224), (150, 333), (600, 700)])
def test_bicubic_resize_matches_torchvision_on_photographs(photos, size):
    """Resize(..., "bicubic") (antialiased, torchvision's default for tensors) against
    torchvision's own on uint8 photographs, down and up: within 1 level of 255 on at least
    99.9% of pixels. Measured: 99.95-99.99%, at most 14 levels (coffee, upscaled), at
    sharp edges only: torchvision (as PIL) clips its first (horizontal) pass's overshoot
    to uint8; the kernel keeps floats and clips once, after both passes (numpy: clipping
    the horizontal pass gives at most 1.1 levels, clipping only at the end 13.6)."""
    import torchvision.transforms.v2.functional as F

    for name in ("astronaut", "coffee"):
        x = torch.from_numpy(photos[name]).permute(2, 0, 1).contiguous()
        got = T.Compose([T.Resize(size, "bicubic")])(x)
        ref = F.resize(x, list(size), interpolation=tv.InterpolationMode.BICUBIC, antialias=True)
        d = (got.float() - ref.float()).abs()
        assert (d <= 1).float().mean().item() >= 0.999, name
        assert d.max().item() <= 16, name
        bilinear = T.Compose([T.Resize(size)])(x)
        assert (bilinear.float() - got.float()).abs().max() > 4  # the filter made a difference


def test_interpolation_modes_read_and_refused():
    """torchvision's InterpolationMode, its strings and PIL's constants name a mode; the
    modes the kernel has no filter for, and bicubic without antialias, are refused."""
    assert T.Resize(8, tv.InterpolationMode.BICUBIC).interpolation == "bicubic"
    assert T.RandomResizedCrop(8, interpolation=3).interpolation == "bicubic"
    assert T.RandomResizedCrop(8, interpolation=["bilinear", "bicubic"]).interpolation == ("bilinear", "bicubic")
    assert repr(T.Resize(8)) == "Resize(size=8, max_size=None, antialias=True)"  # as before bicubic existed
    assert "interpolation='bicubic'" in repr(T.Resize(8, "bicubic"))
    assert T.Resize(8, "nearest").interpolation == "nearest"  # (and nearest-exact: tests/test_nearest_resize.py)
    for bad, match in (("box", "'box' interpolation cannot be fused"),
                       (tv.InterpolationMode.LANCZOS, "LANCZOS.* cannot be fused")):
        with pytest.raises(TransformError, match=match):
            T.Resize(8, bad)
    with pytest.raises(TransformError, match="bicubic interpolation with antialias=False"):
        T.RandomResizedCrop(8, interpolation="bicubic", antialias=False)
    with pytest.raises(TransformError, match="one interpolation mode"):
        T.Resize(8, ["bilinear", "bicubic"])


def test_a_mode_drawn_an_image_is_half_bicubic_and_each_image_resampled_so(photos):
    """RandomResizedCrop over two modes (timm's interpolation="random") draws one an image,
    after its crop: about half bicubic (binomial test over 4,000 draws), and each image's
    pixels are torchvision's resized_crop with the mode drawn for it."""
    import torchvision.transforms.v2.functional as F

    tf = T.Compose([T.RandomResizedCrop(64, interpolation=["bilinear", "bicubic"])])
    params = tf.make_params([(300, 400)] * 4000, seed=1)
    cubic = sum(p["cubic"] for p in params)
    assert stats.binomtest(cubic, 4000, 0.5).pvalue > 1e-3
    plain = T.Compose([T.RandomResizedCrop(64)]).make_params([(300, 400)] * 50, seed=1)
    assert [p["crop"] for p in params[:50]] == [p["crop"] for p in plain]  # the crop drawn first, as before
    x = torch.from_numpy(np.ascontiguousarray(photos["chelsea"][:300, :400])).permute(2, 0, 1).contiguous()
    xs = torch.stack([x] * 8)
    p8 = tf.make_params([(300, 400)] * 8, seed=2)
    assert 0 < sum(p["cubic"] for p in p8) < 8
    got = tf(xs, params=p8)
    for k, p in enumerate(p8):
        mode = tv.InterpolationMode.BICUBIC if p["cubic"] else tv.InterpolationMode.BILINEAR
        ref = F.resized_crop(x, *p["crop"], [64, 64], interpolation=mode, antialias=True)
        d = (got[k].float() - ref.float()).abs()
        assert (d <= 1).float().mean().item() >= 0.999 and d.max().item() <= 16


def test_crop_padding_takes_a_fill_as_torchvision_and_timm_pad(photos):
    """RandomCrop(padding, fill) pads with the fill as torchvision's pad + crop does (the
    draw replayed), CenterCrop(fill) as timm's CenterCropOrPad; exact (no resampling)."""
    import torchvision.transforms.v2.functional as F

    x = torch.from_numpy(np.ascontiguousarray(photos["coffee"][:60, :80])).permute(2, 0, 1).contiguous()
    tf = T.Compose.from_torchvision(tv.Compose([tv.RandomCrop(64, padding=(7, 3), fill=(10, 200, 30)),
                                                tv.RandomHorizontalFlip()]))
    params = tf.make_params([(60, 80)] * 6, seed=1)
    got = tf(torch.stack([x] * 6), params=params)
    padded = F.pad(x, [7, 3, 7, 3], fill=[10, 200, 30])
    for k, p in enumerate(params):
        i, j, h, w = p["crop"]
        ref = F.crop(padded, i + 3, j + 7, h, w)
        assert torch.equal(got[k], F.hflip(ref) if p["flip"] else ref)
    timm = pytest.importorskip("timm", reason="timm is in the [test] extra")
    from timm.data.transforms import CenterCropOrPad

    from PIL import Image

    pil = Image.fromarray(x.permute(1, 2, 0).numpy())  # (timm pads a tensor with one level only; a PIL image, RGB)
    for size in ((72, 96), (50, 90), (40, 40)):
        ours = T.Compose.from_torchvision(CenterCropOrPad(size, fill=(124, 116, 104)))
        ref = torch.from_numpy(np.array(CenterCropOrPad(size, fill=(124, 116, 104))(pil))).permute(2, 0, 1)
        assert torch.equal(ours(x), ref), size
    assert timm.__version__
    with pytest.raises(TransformError, match="whole level"):
        T.CenterCrop(8, fill=300)
    assert repr(T.CenterCrop(8)) == "CenterCrop(size=(8, 8))"  # (as before fills: saved states keep their fingerprint)


_REPR_CASES = [
    "T.AugMix(severity=2, interpolation='bilinear')", "T.AutoAugment()", "T.CenterCrop((20, 30))",
    "T.ColorJitter(0.4, 0.4, 0.4, 0.1)", "T.ColorJitter()", "T.ElasticTransform(30.0, 4.0, fill=(1, 2, 3))",
    "T.GaussianBlur(5, (0.1, 2.0))", "T.GaussianNoise(sigma=0.2, clip=False)", "T.Grayscale()", "T.Grayscale(3)",
    "T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])", "T.RandAugment(2, 9)",
    "T.RandomAdjustSharpness(2.0, 0.3)", "T.RandomAffine(10, (0.1, 0.2), (0.9, 1.1), 5, 'bilinear')",
    "T.RandomApply([T.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8)", "T.RandomAutocontrast(0.3)",
    "T.RandomChannelPermutation()", "T.RandomCrop(32, padding=4)", "T.RandomCrop(32, padding=4, padding_mode='reflect', fill=3)",
    "T.Pad((1, 2), fill=5, padding_mode='edge')", "T.RandomEqualize(0.2)",
    "T.RandomErasing(p=0.25, value='random')", "T.RandomErasing(value=0.5)", "T.RandomGrayscale(0.2)",
    "T.RandomHorizontalFlip()", "T.RandomInvert(0.1)", "T.RandomOrder([T.RandomInvert(0.1), T.RandomEqualize(0.2)])",
    "T.RandomPerspective(0.3, 0.4)", "T.RandomPhotometricDistort(p=0.7)", "T.RandomPosterize(4, 0.3)",
    "T.RandomResize(200, 300)", "T.RandomResizedCrop(224, scale=(0.35, 1.0), interpolation='bicubic')",
    "T.RandomRotation(20, expand=True)", "T.RandomRotation((-5, 10), 'bilinear', center=(3, 4), fill=(1, 2, 3))",
    "T.RandomShortestSize([480, 512], 1333)", "T.RandomSolarize(128, 0.2)", "T.RandomVerticalFlip(0.1)",
    "T.RandomZoomOut((123, 117, 104), (1.0, 2.0), p=0.3)", "T.Resize(256)", "T.Resize((256, 300), interpolation='nearest')",
    "T.ResizeKeepRatio(224, longest=0.5, interpolation='bicubic')", "T.ScaleJitter((224, 224))",
    "T.ToDtype(torch.float16, scale=True)", "T.TrivialAugmentWide()",
    "T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.Normalize([0.5] * 3, [0.25] * 3)], layout='NHWC')",
]


@pytest.mark.parametrize("case", _REPR_CASES)
def test_a_transforms_repr_makes_it_again(case):
    """Every public transform's repr is what its constructor takes (the interpolation by
    name, quoted strings, no argument it does not take): evaluated, it gives the same repr."""
    import re

    made = eval(case, {"T": T, "torch": torch})
    text = repr(made)
    assert repr(eval(text, {**vars(T), "torch": torch})) == text
    assert not re.search(r"interpolation=\d", text), text


# Loader.state_dict fingerprints the transforms by their reprs in the form they had when
# states began to be saved (transforms.base.fingerprint_text): these values, taken before
# the reprs were made clearer (warps' and policies' interpolation by name, Compose a step
# a line), must not change, or a state saved before stops resuming.
_SAVED_FINGERPRINTS = {
    "classic": "8bc7f2e5f5a0ce05", "reference": "c32a911e87b21862", "warps": "446f3c652dbbe45b",
    "canvas": "4d73b134d61a27a8", "elastic": "a8d2ce1ebf25761c", "elastic-after": "05c9824a6a89eca0",
    "policies": "9821ba9c0051e07f", "grey": "e75b7d5e9a9854ff",
}


def test_saved_states_keep_their_transform_fingerprint():
    from gpudecode.loader import transforms_fingerprint
    from gpudecode.mixing import CutMix, MixUp, RandomChoice
    from gpudecode.pipeline import PipelineConfig

    n = T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    cases = {
        "classic": (T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1), n]),
                    None),
        "reference": (T.Compose([T.RandomResizedCrop(176), T.RandomHorizontalFlip(),
                                 T.TrivialAugmentWide(interpolation="bilinear"), n, T.RandomErasing(0.1)]),
                      RandomChoice([MixUp(alpha=0.2, num_classes=10), CutMix(alpha=1.0, num_classes=10)])),
        "warps": (T.Compose([T.RandomResizedCrop(160), T.RandomRotation(15),
                             T.RandomAffine(10, (0.1, 0.1), (0.9, 1.1), 5, "bilinear"), T.RandomPerspective(0.3, 0.4), n]),
                  None),
        "canvas": (T.Compose([T.RandomRotation(30, "bilinear", expand=True, fill=(9, 99, 199)), T.RandomResizedCrop(64),
                              n]), None),
        "elastic": (T.Compose([T.ElasticTransform(50.0, 5.0, fill=(1, 2, 3)), T.RandomResizedCrop(64), n]), None),
        "elastic-after": (T.Compose([T.RandomResizedCrop(64), T.ElasticTransform(40.0, 4.0), n,
                                     T.RandomErasing(value="random")]), None),
        "policies": ([T.Compose([T.RandomResizedCrop(96), T.RandAugment(2, 9), n]),
                      T.Compose([T.RandomResizedCrop(96), T.AutoAugment(), n]),
                      T.Compose([T.RandomResizedCrop(96), T.AugMix(severity=2), n])], None),
        "grey": (T.Compose([T.Resize(256), T.CenterCrop(224), T.Grayscale(3), T.ToDtype(torch.float16, scale=True)],
                           layout="NHWC"), None),
    }
    got = {name: transforms_fingerprint(PipelineConfig(transform=tf, batch_size=8, device="cpu", decoder="cpu",
                                                       image_exts=("jpg",), label_exts=("cls",), batch_transform=bt))
           for name, (tf, bt) in cases.items()}
    assert got == _SAVED_FINGERPRINTS


# ---- the direct call's inputs and outputs ------------------------------------------------------

@pytest.mark.parametrize("steps", [
    [T.RandomResizedCrop(48), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.Normalize(MEAN, STD)],
    [T.CenterCrop(64), T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)],  # (read 1:1: the packed fast path)
    [T.Resize(40), T.CenterCrop(40), T.RandomRotation(20)],  # (a canvas step: the images painted first)
])
def test_images_in_any_strides_are_read_where_they_lie_as_their_contiguous_copies(photos, steps, tmp_path):
    from gpudecode.transforms.compose import _batch_source, _sources

    tf = T.Compose(steps)
    mapped = np.memmap(tmp_path / "image.raw", mode="w+", dtype=np.uint8, shape=photos["coffee"].shape)
    mapped[:] = photos["coffee"]  # (a mapping: far from the heap in the address space)
    hwc = torch.from_numpy(np.stack([photos["astronaut"][:200, :240], photos["coffee"][:200, :240]]))
    chelsea = torch.from_numpy(photos["chelsea"])
    cases = {
        "a batch of CHW views of HWC memory": hwc.permute(0, 3, 1, 2),
        "a contiguous batch": hwc.permute(0, 3, 1, 2).contiguous(),
        "one CHW view": chelsea.permute(2, 0, 1),
        "crop and step views of one image": [chelsea.permute(2, 0, 1)[:, 10:190, 5:230],
                                             chelsea.permute(2, 0, 1)[:, ::2, ::3]],
        "separate images, views and grey": [chelsea.permute(2, 0, 1), chw(photos["coffee"]),
                                            torch.from_numpy(photos["astronaut"][:90, :70, :1].copy()).permute(2, 0, 1),
                                            chw(photos["rocket"])[:, 5:, 7:]],
        "a mapped file's image beside a heap one": [torch.from_numpy(mapped).permute(2, 0, 1), chw(photos["chelsea"])],
        "an expanded grey image": [torch.from_numpy(photos["camera"][:80, :90, 0].copy())[None].expand(3, -1, -1),
                                   chw(photos["coffee"])],
        "a grey batch": torch.from_numpy(np.stack([photos["camera"][:80, :90, 0], photos["camera"][5:85, 7:97, 0]]))[:, None],
        "one image expanded to a batch": chw(photos["coffee"])[None].expand(3, -1, -1, -1),
        "every other image of a batch, cropped": torch.stack([chw(p[:120, :150]) for p in photos.values()])[::2, :, 5:,
                                                                                                             3:],
    }
    for name, images in cases.items():
        listed = [images] if isinstance(images, torch.Tensor) and images.ndim == 3 else list(images)
        copies = [im.contiguous().clone() for im in listed]
        got = tf(images, seed=3)
        got = got[None] if got.ndim == 3 else got
        assert torch.equal(got, tf(copies, seed=3)), name
        if isinstance(images, torch.Tensor) and images.ndim == 4:  # (a batch tensor: read as a whole)
            _, _, _, (src, offsets, _) = _batch_source(images)
        else:
            src, offsets, _ = _sources(listed, torch.device("cpu"))  # read where they lie: no copy
        assert [src.data_ptr() + int(o) for o in offsets] == [im.data_ptr() for im in listed], name
    # the reference itself, once: torchvision on the contiguous images
    images = cases["a batch of CHW views of HWC memory"]
    if isinstance(steps[0], T.RandomResizedCrop):
        plain = T.Compose(steps[:2] + [T.ToDtype(torch.float32, scale=True)])
        params = plain.make_params([tuple(im.shape[1:]) for im in images], 5)
        out = plain(images, params)
        for k, p in enumerate(params):
            assert max_err_levels(out[k], torchvision_apply(images[k].contiguous(), p, (48, 48))) <= 1.0


def test_a_call_writes_into_out_when_given_and_refuses_one_that_does_not_fit(photos):
    im = chw(photos["chelsea"])
    batch = [im, chw(photos["coffee"])]
    for layout, shape in (("NCHW", (2, 3, 32, 32)), ("NHWC", (2, 32, 32, 3))):
        tf = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)], layout=layout)
        out = torch.full(shape, float("nan"))
        assert tf(batch, seed=1, out=out) is out and torch.equal(out, tf(batch, seed=1))
        one = torch.empty(shape[1:])
        assert tf(im, seed=2, out=one) is one and torch.equal(one, tf(im, seed=2))
        for bad in (torch.empty(shape[1:]), torch.empty(shape, dtype=torch.float64), torch.empty((3,) + shape[1:])):
            with pytest.raises(ValueError, match=r"out= must be a torch.float32 tensor of shape"):
                tf(batch, seed=1, out=bad)
        big = torch.zeros((2, 40, 40, 3) if layout == "NHWC" else (2, 3, 40, 40))  # an out with gaps
        part = big[:, :32, :32] if layout == "NHWC" else big[:, :, :32, :32]
        assert tf(batch, seed=1, out=part) is part and torch.equal(part, out)
        part.zero_()
        assert not big.any()  # nothing written around it
        with pytest.raises(ValueError, match="does not require grad"):
            tf(batch, seed=1, out=torch.empty(shape, requires_grad=True))
    with pytest.raises(ValueError, match="dense tensors on the CPU or a CUDA device, not meta"):
        tf([torch.empty((3, 8, 8), dtype=torch.uint8, device="meta")])
    with pytest.raises(ValueError, match="dense tensors"):
        tf([torch.zeros((3, 8, 8), dtype=torch.uint8).to_sparse()])
    # a batch tensor is checked as a whole (no per-image pass): the same refusals
    with pytest.raises(ValueError, match="dense tensors on the CPU or a CUDA device, not meta"):
        tf(torch.empty((2, 3, 8, 8), dtype=torch.uint8, device="meta"))
    with pytest.raises(ValueError, match="dense tensors"):
        tf(torch.zeros((2, 3, 8, 8), dtype=torch.uint8).to_sparse())
    for bad in (torch.zeros((2, 3, 8, 8)), torch.zeros((2, 2, 8, 8), dtype=torch.uint8)):
        with pytest.raises(TypeError, match=r"expected a uint8 batch \[N, 3, H, W\] or \[N, 1, H, W\], got"):
            tf(bad)
    batch8 = torch.zeros((2, 3, 8, 8), dtype=torch.uint8)
    with pytest.raises(ValueError, match="shares memory"):
        T.Compose([T.CenterCrop(8)])(batch8[:1], out=batch8[1:])
    same = T.Compose([T.CenterCrop(16)])  # uint8 out: could be the input's own memory
    whole = torch.zeros((2, 3, 40, 40), dtype=torch.uint8)
    with pytest.raises(ValueError, match="shares memory"):
        same(whole[:, :, :16, :16], out=whole[:, :, 20:36, 20:36])


def test_pil_images_are_read_as_torchvisions_pil_to_tensor_makes_them(photos, tmp_path):
    """A Dataset's PIL images go to a call as they come (torchvision's transforms take them):
    RGB and L read as PILToTensor makes them, bit for bit; other modes made RGB as the
    decoders make every image."""
    from PIL import Image

    tf = T.Compose([T.RandomResizedCrop(48), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1),
                    T.Normalize(MEAN, STD)])
    rgb = [Image.fromarray(photos[n]) for n in ("chelsea", "coffee", "rocket")]
    grey = Image.fromarray(photos["camera"][..., 0]).convert("L")
    as_tensors = [tv.functional.pil_to_tensor(im) for im in rgb + [grey]]
    assert [t.shape[0] for t in as_tensors] == [3, 3, 3, 1]
    assert torch.equal(tf(rgb + [grey], seed=7), tf(as_tensors, seed=7))
    one = tf(rgb[0], seed=8)  # one image: one output, as for a [3, H, W] tensor
    assert one.shape == (3, 48, 48) and torch.equal(one, tf(as_tensors[0], seed=8))
    assert torch.equal(tf(tuple(rgb[:2]), seed=9), tf(as_tensors[:2], seed=9))
    # other modes: RGB as the decoders make every image (Pillow's convert("RGB"); 16-bit grey by its high byte)
    for mode in ("RGBA", "P", "LA", "1", "CMYK", "YCbCr"):
        odd = Image.fromarray(photos["chelsea"]).convert(mode)
        want = tv.functional.pil_to_tensor(odd.convert("RGB"))
        assert torch.equal(tf([rgb[0], odd], seed=3), tf([as_tensors[0], want], seed=3)), mode
    levels = photos["camera"][..., 0]
    deep = Image.fromarray(levels.astype(np.uint16) * 256 + 7)
    assert deep.mode == "I;16"
    assert torch.equal(tf(deep, seed=4), tf(torch.from_numpy(levels.copy())[None], seed=4))
    with pytest.raises(TypeError, match=r"image 1: expected a uint8 tensor \[3, H, W\] or \[1, H, W\] or a PIL image, "
                                        r"got <class 'str'>"):
        tf([rgb[0], "photo.jpg"])
    # a file opened lazily, cut short: PIL fails as it decodes, the call says which image and file
    rgb[1].save(tmp_path / "cut.jpg", quality=90)
    data = (tmp_path / "cut.jpg").read_bytes()
    (tmp_path / "cut.jpg").write_bytes(data[:len(data) // 2])
    with Image.open(tmp_path / "cut.jpg") as cut:
        with pytest.raises(DecodeError, match=r"image 1: PIL could not read its pixels \(OSError: image file is "
                                              r"truncated.*\)\. \(key '.*cut\.jpg'\)") as e:
            tf([rgb[0], cut])
    assert isinstance(e.value.__cause__, OSError) and e.value.key == str(tmp_path / "cut.jpg")


def test_a_torchvision_dataset_takes_the_converted_transform_in_place_of_its_own():
    """The drop-in use: torchvision's FakeData (PIL images) with the converted Compose as its
    transform, through DataLoader's workers, against the same dataset with torchvision's."""
    from torchvision.datasets import FakeData

    steps = tv.Compose([tv.PILToTensor(), tv.Resize(40), tv.CenterCrop(32), tv.ToDtype(torch.float32, scale=True),
                        tv.Normalize(MEAN, STD)])
    ours = T.Compose.from_torchvision(steps)
    ref = FakeData(size=12, image_size=(3, 45, 60), num_classes=5, transform=steps, random_offset=3)
    data = FakeData(size=12, image_size=(3, 45, 60), num_classes=5, transform=ours, random_offset=3)
    loaders = [torch.utils.data.DataLoader(d, batch_size=4, num_workers=2) for d in (ref, data)]
    batches = 0
    for (want, want_labels), (got, labels) in zip(*loaders):
        assert got.shape == want.shape == (4, 3, 32, 32) and torch.equal(labels, want_labels)
        # in levels: torchvision resizes the uint8 image and rounds it (half a level), the kernel
        # resizes in float32 (within a level of torchvision's float resize, as above)
        levels = (got - want).abs() * torch.tensor(STD).view(1, 3, 1, 1) * 255
        assert float(levels.max()) <= 1.5 and float(levels.mean()) < 0.4  # (rounding alone: 0.25)
        batches += 1
    assert batches == 3


def test_a_cpu_call_uses_torchs_thread_count(photos, monkeypatch):
    import gpudecode.transforms.compose as compose

    seen = []
    real = compose.launch
    monkeypatch.setattr(compose, "launch", lambda *a, **k: seen.append(k["num_threads"]) or real(*a, **k))
    tf = T.Compose([T.RandomResizedCrop(32), T.Normalize(MEAN, STD)])
    batch = [chw(photos["chelsea"])] * 4
    before = torch.get_num_threads()
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            tf(batch, seed=0)
    finally:
        torch.set_num_threads(before)
    assert seen == [1, 2]
