"""Grayscale(num_output_channels=1): an output of one channel, [N, 1, H, W], as torchvision
gives it, and the steps after it acting as torchvision's do on one channel (saturation, hue,
grayscale and channel permutation change nothing; contrast blends with that channel's mean;
the noise and erasing are one channel's). The kernel holds the channel as three equal ones
and writes the first; torchvision's functional ops on the 1-channel image are the reference."""
from __future__ import annotations

import textwrap

import numpy as np
import pytest
import torch
import torchvision.transforms.v2 as tv
import torchvision.transforms.v2.functional as F
from torch.utils.data import TensorDataset

import gpudecode
from gpudecode import transforms as T
from gpudecode.errors import TransformError
from simulator import run_code


def chw(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a.transpose(2, 0, 1)))


@pytest.fixture(scope="module")
def photo_batch(photos):
    return [chw(p) for p in photos.values()] + [chw(np.ascontiguousarray(photos["coffee"][::3, ::2]))]


_JITTER = ["brightness", "contrast", "saturation", "hue"]


def _replay(img: torch.Tensor, p: dict, out: int, *, after=(), mean=None, std=None) -> torch.Tensor:
    """torchvision's functional ops on the float image: the crop resized, the flip,
    rgb_to_grayscale to one channel, the jitter in its drawn order, `after` ((params key,
    function) pairs), Normalize."""
    x = F.to_dtype(img, torch.float32, scale=True)
    t, l, h, w = p["crop"]
    x = F.resized_crop(x, t, l, h, w, [out, out], antialias=True)
    if p.get("flip"):
        x = F.horizontal_flip(x)
    x = F.rgb_to_grayscale(x, num_output_channels=1)
    for op in p.get("order", []):
        if p.get(_JITTER[op]) is not None:
            x = getattr(F, f"adjust_{_JITTER[op]}")(x, p[_JITTER[op]])
    for key, fn in after:
        if p.get(key):
            x = fn(x)
    return x if mean is None else F.normalize(x, mean, std)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_the_jitter_after_grayscale_1_matches_torchvision_on_one_channel(photo_batch, layout):
    """Contrast takes the channel's own mean (torchvision's on one channel), saturation and
    hue change nothing; the float output agrees to float32 rounding, on real photographs."""
    tf = T.Compose.from_torchvision(tv.Compose([
        tv.RandomResizedCrop(40), tv.RandomHorizontalFlip(), tv.Grayscale(),
        tv.ColorJitter(0.4, 0.6, 0.8, 0.2), tv.RandomSolarize(150, 0.5), tv.RandomInvert(0.5),
        tv.ToDtype(torch.float32, scale=True), tv.Normalize((0.1307,), (0.3081,))]), layout=layout)
    assert tf.plan.channels == 1
    sizes = [tuple(im.shape[1:]) for im in photo_batch]
    params = tf.make_params(sizes, 11)
    got = tf(photo_batch, params)
    assert tuple(got.shape) == ((len(sizes), 1, 40, 40) if layout == "NCHW" else (len(sizes), 40, 40, 1))
    if layout == "NHWC":
        got = got.permute(0, 3, 1, 2)
    after = [("solarize", lambda x: F.solarize(x, 150 / 255)), ("invert", F.invert)]
    worst = 0.0
    for k, (img, p) in enumerate(zip(photo_batch, params)):
        assert p["contrast"] is not None and p["saturation"] is not None
        ref = _replay(img, p, 40, after=after, mean=[0.1307], std=[0.3081])
        assert ref.shape == (1, 40, 40)
        err = (got[k] - ref).abs() * 0.3081 * 255  # (in levels of the image before Normalize)
        assert (err > 1.0).float().mean() <= 0.002, (k, p, float(err.max()))  # (solarize at its threshold)
        worst = max(worst, float(torch.quantile(err.flatten(), 0.99)))
    assert worst < 1e-3, worst


def test_one_channel_equals_the_first_of_three_where_nothing_after_reads_across_channels(photo_batch):
    """Grayscale(1) then steps that treat each channel alike (flip, solarize, sharpness,
    autocontrast, blur, the noise: the first channel's) is the 3-channel pipeline's first
    channel, bit for bit, in every output dtype."""
    def steps(n, dtype):
        return [T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.Grayscale(n), T.RandomSolarize(100, 0.5),
                T.RandomAdjustSharpness(2.0, 0.5), T.RandomAutocontrast(0.5), T.GaussianBlur(3, (0.1, 1.0)),
                T.ToDtype(dtype, scale=True)] + ([T.GaussianNoise(sigma=0.1)] if dtype.is_floating_point else [])

    sizes = [tuple(im.shape[1:]) for im in photo_batch]
    for dtype in (torch.float32, torch.uint8, torch.bfloat16, torch.float16):
        one, three = T.Compose(steps(1, dtype)), T.Compose(steps(3, dtype))
        params = one.make_params(sizes, 5)
        assert params == three.make_params(sizes, 5)
        a, b = one(photo_batch, params), three(photo_batch, params)
        assert a.shape[1] == 1 and a.dtype == dtype
        assert torch.equal(a, b[:, :1]), dtype
        # (the 3-channel pipeline's noise differs by channel; the rest keeps its channels equal)
        assert torch.equal(b[:, 0], b[:, 1]) == (not dtype.is_floating_point), dtype


def test_erasing_and_linear_transformation_after_grayscale_1(photo_batch):
    """RandomErasing's fill and noise have one channel (the CPU's image-by-image erasing and
    the batched one agree), LinearTransformation takes D = 1 x h x w."""
    imgs = photo_batch[:4]
    sizes = [tuple(im.shape[1:]) for im in imgs]
    tf = T.Compose([T.RandomResizedCrop(16), T.Grayscale(), T.Normalize([0.5], [0.5]),
                    T.RandomErasing(p=1.0, value="random")])
    params = tf.make_params(sizes, 2)
    got = tf(imgs, params)
    plain = T.Compose([T.RandomResizedCrop(16), T.Grayscale(), T.Normalize([0.5], [0.5])])(imgs, params)
    changed = (got != plain).flatten(1).sum(1)
    for k, p in enumerate(params):
        e = p["erase"]
        assert changed[k] <= e["h"] * e["w"] and got.shape[1] == 1
        box = got[k, :, e["i"]:e["i"] + e["h"], e["j"]:e["j"] + e["w"]]
        g = torch.Generator().manual_seed(e["noise"])
        assert torch.equal(box, torch.empty((1, e["h"], e["w"])).normal_(generator=g))  # (torchvision's shape)
    batched = plain.clone()
    tf.plan.erase.erase(batched, params, batched=True)
    assert torch.equal(batched, got)
    filled = T.Compose([T.RandomResizedCrop(16), T.Grayscale(), T.ToDtype(torch.float32, scale=True),
                        T.RandomErasing(p=1.0, value=0.25)])(imgs, params)
    assert ((filled == 0.25).flatten(1).sum(1) >= torch.tensor([p["erase"]["h"] * p["erase"]["w"] for p in params])).all()

    d = 16 * 16
    gen = torch.Generator().manual_seed(0)
    matrix, mean = torch.randn(d, d, generator=gen) / 16, torch.rand(d, generator=gen)
    steps = [tv.CenterCrop(16), tv.ToDtype(torch.float32, scale=True), tv.Grayscale(),  # (torchvision's grey of
             tv.LinearTransformation(matrix, mean)]  # uint8 is truncated to uint8; the kernel's stays float)
    ours = T.Compose.from_torchvision(tv.Compose(steps))(imgs)
    theirs = torch.stack([tv.Compose(steps)(im) for im in imgs])
    assert ours.shape == theirs.shape == (4, 1, 16, 16)
    assert torch.allclose(ours, theirs, atol=1e-5, rtol=1e-5)
    with pytest.raises(TransformError, match="1 x 16 x 16 = 256"):
        T.Compose([T.CenterCrop(16), T.Grayscale(), T.ToDtype(torch.float32, scale=True),
                   T.LinearTransformation(torch.eye(3 * d), torch.zeros(3 * d))])


def test_out_views_and_single_images_of_one_channel(photos):
    img = chw(photos["chelsea"])
    tf = T.Compose([T.CenterCrop(24), T.Grayscale(), T.ToDtype(torch.float32, scale=True)])
    one = tf(img)
    assert one.shape == (1, 24, 24)
    ref = F.rgb_to_grayscale(F.center_crop(F.to_dtype(img, torch.float32, scale=True), [24, 24]), 1)
    assert torch.allclose(one, ref, atol=1e-6)
    out = torch.empty(2, 1, 24, 24)
    assert tf([img, img], out=out) is out and torch.equal(out[0], one)
    with pytest.raises(ValueError, match=r"\[2, 1, 24, 24\]"):
        tf([img, img], out=torch.empty(2, 3, 24, 24))
    views = T.Views.from_torchvision(tv.Compose([tv.Resize(32), tv.TenCrop(24), tv.Grayscale(),
                                                 tv.ToDtype(torch.float32, scale=True)]))(img)
    assert len(views) == 10 and all(v.shape == (1, 24, 24) for v in views)
    theirs = tv.Compose([tv.Resize(32), tv.TenCrop(24)])(F.to_dtype(img, torch.float32, scale=True))
    assert all((v - F.rgb_to_grayscale(t, 1)).abs().max() < 2 / 255 for v, t in zip(views, theirs))


@pytest.mark.parametrize("keep", [None, "ram"])
def test_the_loader_gives_the_first_channel_of_the_three_channel_pipeline(photos, keep):
    """A Loader with Grayscale(1) gives [N, 1, h, w] batches: the same Loader with
    Grayscale(3) gives those values in each channel (the steps after it treat channels
    alike), batch for batch, streamed and kept in RAM."""
    imgs = torch.stack([chw(p[:64, :64]) for p in photos.values()] * 3)
    ds = TensorDataset(imgs, torch.arange(len(imgs)))

    def loader(n):
        steps = tv.Compose([tv.RandomCrop(28, padding=2), tv.Grayscale(n), tv.RandomHorizontalFlip(),
                            tv.ColorJitter(brightness=0.3), tv.ToDtype(torch.float32, scale=True),
                            tv.Normalize((0.1307,), (0.3081,))])
        return gpudecode.Loader(ds, transform=steps, batch_size=8, seed=4, shuffle=True,
                                **({} if keep is None else {"keep": keep}))

    seen = 0
    for (a, la), (b, lb) in zip(loader(1), loader(3)):
        assert a.shape == (len(la), 1, 28, 28) and a.is_contiguous() and torch.equal(la, lb)
        assert torch.equal(a, b[:, :1]) and torch.equal(b[:, 1:2], b[:, :1])
        seen += len(la)
    assert seen == len(imgs)


def test_what_grayscale_1_refuses():
    with pytest.raises(TransformError, match="1 or 3"):
        T.Grayscale(2)
    with pytest.raises(TransformError, match="1 or 3 channels"):
        T.Compose([T.RandomResizedCrop(8), T.RandomApply([T.Grayscale()], p=0.5)])
    with pytest.raises(TransformError, match="RandomRotation with a fill of three different values"):
        T.Compose([T.RandomResizedCrop(8), T.Grayscale(), T.RandomRotation(10, fill=(1, 2, 3))])
    with pytest.raises(TransformError, match="RandomErasing with a fill"):
        T.Compose([T.RandomResizedCrop(8), T.Grayscale(), T.ToDtype(torch.float32, scale=True),
                   T.RandomErasing(value=[0.1, 0.2, 0.3])])
    with pytest.raises(TransformError, match="ragged=True"):
        T.Compose([T.Resize(8), T.Grayscale()], ragged=True)
    # what stays: equal values, a fill of one number, Grayscale(3) and its fingerprint's form; three means: three
    assert T.Compose([T.RandomResizedCrop(8), T.Grayscale(), T.RandomRotation(10, fill=7),
                      T.Normalize([0.5] * 3, [0.2] * 3)]).channels == 1
    assert T.Compose([T.RandomResizedCrop(8), T.Grayscale(), T.Normalize([0.4, 0.5, 0.6], [0.2] * 3)]).channels == 3
    assert repr(T.Grayscale(3)) == "Grayscale(num_output_channels=3)" and repr(T.Grayscale()) == \
        "Grayscale(num_output_channels=1)"
    assert T.Compose.from_torchvision(tv.Compose([tv.CenterCrop(8), tv.Grayscale(3)])).plan.channels == 3


def test_the_one_channel_kernel_under_the_cuda_simulator_equals_the_cpu_twin():
    """The kernel writing one channel three times (a stride-0 view), with the one-channel
    contrast and noise arguments, through the CUDA kernel (simulator) and the CPU twin."""
    code = textwrap.dedent("""
        import numpy as np, torch
        from gpudecode import transforms as T
        from gpudecode.kernels import fused
        from skimage import data
        from tvref import pack_hwc
        photos = [data.astronaut(), data.coffee(), data.chelsea()]
        imgs = [torch.from_numpy(np.ascontiguousarray(p[40:53 + k, 70:85].transpose(2, 0, 1)))
                for k, p in enumerate(photos)]
        tf = T.Compose([T.RandomResizedCrop((9, 11)), T.Grayscale(), T.ColorJitter(0.4, 0.5, 0.4, 0.1),
                        T.RandomAutocontrast(0.5), T.ToDtype(torch.float32, scale=True), T.GaussianNoise(sigma=0.2),
                        T.Normalize([0.5], [0.25])])
        sizes = [tuple(i.shape[1:]) for i in imgs]
        params = tf.make_params(sizes, 3)
        cpu = tf(imgs, params).numpy()
        geom, args, order = tf.encode(params, sizes)
        assert (order == 1).any() and (args[order == 1][:, 1] > 0).all() and not (order == 2).any()
        assert ((order == 20).sum(1) == 1).all() and (args[order == 20][:, 5] == 1).all()
        src = pack_hwc(imgs, geom, sizes)
        mean, std = tf._norm_arrays()
        out = np.zeros((3, 1, 9, 11), np.float32)
        view = np.lib.stride_tricks.as_strided(out, (3, 3, 9, 11), (out.strides[0], 0, *out.strides[2:]))
        fused.fused_cuda(src, geom, args, order, mean, std, view, normalize=True)
        assert np.abs(out - cpu).max() < 1e-4, np.abs(out - cpu).max()
        print("ok")
        """)
    run_code(code, timeout=300)


# -- images of one channel from the start: Compose(grey=True), a grey set's Loader ---------------

def test_grey_images_through_the_steps_as_torchvision_on_one_channel(photos):
    """Compose(grey=True) on [1, H, W] images (real photographs made grey) against
    torchvision's functional ops on those tensors, replaying the draws: the jitter (contrast
    with the channel's mean, saturation and hue nothing), Grayscale(1) and RandomGrayscale
    nothing; Grayscale(3) makes three equal channels of it, as torchvision repeats it."""
    greys = [torch.from_numpy(np.ascontiguousarray(p[..., 1]))[None] for p in photos.values()]
    sizes = [tuple(g.shape[1:]) for g in greys]
    steps = [T.RandomResizedCrop(36), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.6, 0.8, 0.2),
             T.RandomGrayscale(0.5), T.RandomAutocontrast(0.5), T.ToDtype(torch.float32, scale=True),
             T.Normalize([0.5], [0.25])]
    tf = T.Compose(steps, grey=True)
    assert tf.channels == 1 and "grey=True" in repr(tf)
    params = tf.make_params(sizes, 8)
    got = tf(greys, params)
    assert got.shape == (len(greys), 1, 36, 36)
    for k, (img, p) in enumerate(zip(greys, params)):
        x = F.to_dtype(img, torch.float32, scale=True)
        t, l, h, w = p["crop"]
        x = F.resized_crop(x, t, l, h, w, [36, 36], antialias=True)
        x = F.horizontal_flip(x) if p["flip"] else x
        for op in p["order"]:
            if p.get(_JITTER[op]) is not None:
                x = getattr(F, f"adjust_{_JITTER[op]}")(x, p[_JITTER[op]])
        x = F.rgb_to_grayscale(x, 1) if p["grayscale"] else x  # (one channel in, one out: itself)
        x = F.autocontrast(x) if p["autocontrast"] else x
        x = F.normalize(x, [0.5], [0.25])
        assert (got[k] - x).abs().max() < 1e-4, (k, p)
    three = T.Compose([T.CenterCrop(20), T.Grayscale(3), T.ColorJitter(saturation=0.5)], grey=True)
    out = three(greys[:2])
    assert out.shape == (2, 3, 20, 20) and torch.equal(out[:, 0], out[:, 2])
    assert torch.equal(out[:, :1], torch.stack([F.center_crop(g, [20, 20]) for g in greys[:2]]))
    assert T.Compose([T.CenterCrop(20), T.Grayscale()], grey=True).channels == 1
    with pytest.raises(ValueError, match="image 1 has 3 channels"):
        tf([greys[0], chw(photos["coffee"])])
    # a Normalize of three means makes three channels, as torchvision v2's broadcasts them
    imagenet = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    three = T.Compose([T.CenterCrop(20), T.ColorJitter(contrast=0.5), T.Normalize(*imagenet)], grey=True)
    params = three.make_params(sizes[:2], 1)
    out = three(greys[:2], params)
    want = [tv.Normalize(*imagenet)(F.adjust_contrast(F.to_dtype(F.center_crop(g, [20, 20]), torch.float32, scale=True),
                                                      p["contrast"])) for g, p in zip(greys[:2], params)]
    assert out.shape == (2, 3, 20, 20) and all(w.shape == (3, 20, 20) for w in want)
    assert max(float((o - w).abs().max()) for o, w in zip(out, want)) < 1e-4
    with pytest.raises(TransformError, match="RandomCrop with a fill of three different values on images of one"):
        T.Compose([T.RandomCrop(20, padding=2, fill=(1, 2, 3))], grey=True)
    with pytest.raises(TransformError, match="1 or 3 channels"):
        T.Compose([T.CenterCrop(20), T.RandomApply([T.Grayscale(3)], p=0.5)], grey=True)


@pytest.mark.parametrize("keep", [None, "ram"])
def test_a_grey_sets_loader_gives_one_channel_streamed_or_kept(photos, keep):
    """A TensorDataset of grey [N, H, W] images: one channel (native draws, the jitter made
    one channel's), the same batches streamed and kept in RAM, and the Compose's call on
    the images with the Loader's draws."""
    grey = torch.stack([torch.from_numpy(np.ascontiguousarray(p[:40, :40, 0])) for p in photos.values()] * 4)
    ds = TensorDataset(grey, torch.arange(len(grey)))
    steps = tv.Compose([tv.RandomCrop(32, padding=4), tv.RandomHorizontalFlip(), tv.ColorJitter(0.3, 0.3, 0.3, 0.1),
                        tv.ToDtype(torch.float32, scale=True), tv.Normalize((0.1307,), (0.3081,))])
    ld = gpudecode.Loader(ds, transform=steps, batch_size=8, seed=6, shuffle=False,
                          **({} if keep is None else {"keep": keep}))
    assert ld.transform.grey and ld.transform.native_spec is not None
    got = torch.cat([b for b, _ in ld])
    assert got.shape == (len(grey), 1, 32, 32)
    tf = ld.transform
    for start in range(0, len(grey), 8):
        idx = list(range(start, min(start + 8, len(grey))))
        params = tf.make_params([(40, 40)] * len(idx), ld.seed, indices=idx)
        assert torch.equal(tf(grey[idx][:, None], params), got[idx])


def test_a_grey_compose_as_a_grey_datasets_transform_gives_torchvisions_one_channel(photos):
    """from_torchvision(..., grey=True) as a grey set's transform (PIL "L" images, MNIST's):
    [1, H, W], as torchvision's own transform gives; [1, H, W] tensors and a [N, 1, H, W]
    batch alike. Without grey=True a call reads grey images as RGB (three channels), as it
    always did."""
    import torchvision.transforms as v1
    from PIL import Image

    steps = v1.Compose([v1.CenterCrop(24), v1.ToTensor(), v1.Normalize((0.1307,), (0.3081,))])
    ours = T.Compose.from_torchvision(steps, grey=True)
    grey = [Image.fromarray(np.ascontiguousarray(p[:60, :50, 0])) for p in photos.values()]
    for im in grey:
        got = ours(im)
        assert got.shape == (1, 24, 24)
        torch.testing.assert_close(got, steps(im), atol=1e-6, rtol=0)
    tensors = [torch.from_numpy(np.array(im))[None] for im in grey]
    assert ours(tensors).shape == (len(grey), 1, 24, 24) and ours(torch.stack(tensors)).shape == (len(grey), 1, 24, 24)
    rgb = T.Compose.from_torchvision(steps)
    assert rgb(tensors).shape == (len(grey), 3, 24, 24) and torch.equal(rgb(tensors)[:, :1], ours(tensors))
