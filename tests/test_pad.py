"""Pad: a canvas step at a fixed place, folded into a RandomCrop that follows it (the crop's
own padding: no canvas made, the native draws and the resident fast path as for
RandomCrop(padding=)); and a crop's padding modes that read the image's own pixels (edge,
reflect, symmetric: the kernel reads the frame at the reflected place). Pixels against
torchvision's functional pad and geometry replaying our parameters on real photographs;
the fold against RandomCrop(padding=) bit for bit, in a Compose and through the Loader;
the CUDA kernel against the twin under the simulator; masks; conversions of torchvision's
v1 and v2 Pad and RandomCrop; what they cannot take refused by name."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision.transforms as tv1
import torchvision.transforms.v2 as tv
import torchvision.transforms.v2.functional as F
from torchvision import tv_tensors

from gpudecode import transforms as T
from gpudecode.errors import TransformError

FILL = (123, 117, 104)


@pytest.fixture(scope="module")
def photo_batch(photos):
    out = [torch.from_numpy(np.ascontiguousarray(p[::6, ::5].transpose(2, 0, 1))) for p in photos.values()]
    out.append(torch.from_numpy(np.ascontiguousarray(photos["coffee"][::9, ::4].transpose(2, 0, 1))))
    return out


def _theirs(img: torch.Tensor, pad: tuple, fill, p: dict, geometry: str, size, crop_fill=(0, 0, 0)) -> torch.Tensor:
    """torchvision's F.pad (uint8, with the fill), then the geometry with our draws `p`
    (a RandomCrop reaching past the padded image: its own fill there)."""
    x = F.pad(img, list(pad), fill=list(fill))
    x = F.pad(x, [100], fill=list(crop_fill)) if geometry == "random" else x
    x = F.to_dtype(x, torch.float32, scale=True)
    if geometry == "resize":
        x = F.resize(x, list(size), antialias=True)
    elif geometry == "rrc":
        x = F.resized_crop(x, *p["crop"], list(size), antialias=True)
    elif geometry == "center":
        x = F.center_crop(x, list(size))
    else:  # a RandomCrop: its crop (top, left, h, w) in the canvas, or folded, in the image (less the padding)
        left, top = (100, 100) if "padding" in p else (pad[0] + 100, pad[1] + 100)
        t, l, h, w = p["crop"]
        x = F.crop(x, t + top, l + left, h, w)
    return F.horizontal_flip(x) if p["flip"] else x


@pytest.mark.parametrize("geometry,make", [
    ("random", lambda: T.RandomCrop((44, 56))),
    ("random", lambda: T.RandomCrop((64, 76), pad_if_needed=True, fill=list(FILL))),
    ("random", lambda: T.RandomCrop((64, 76), pad_if_needed=True)),
    ("center", lambda: T.CenterCrop((72, 64))),
    ("resize", lambda: T.Resize((40, 48))),
    ("rrc", lambda: T.RandomResizedCrop((40, 48))),
])
def test_pad_then_a_geometry_is_torchvisions_on_real_photos(photo_batch, geometry, make):
    """Pad then each geometry (a RandomCrop folded into the crop's padding where it pads
    with the Pad's fill or not at all; the others read a canvas): within one level of
    torchvision's pad and geometry with the same draws."""
    pad = (3, 5, 7, 2)
    step = make()
    tf = T.Compose([T.Pad(list(pad), fill=list(FILL)), step, T.RandomHorizontalFlip(),
                    T.ToDtype(torch.float32, scale=True)])
    folds = geometry == "random" and (not step.pad_if_needed or step.crop_fill == FILL)
    assert (tf.plan.canvas is None) == folds
    sizes = [tuple(im.shape[1:]) for im in photo_batch]
    for seed in range(3):
        params = tf.make_params(sizes, seed)
        got = tf(photo_batch, params)
        for k, (img, p) in enumerate(zip(photo_batch, params)):
            assert ("padding" in p) == (not folds)  # (folded: the crop's draw over the padded size)
            want = _theirs(img, pad, FILL, p, geometry, tf.out_size, getattr(step, "crop_fill", (0, 0, 0)))
            err = float(((got[k] - want.clamp(0, 1)).abs() * 255).max())
            assert err <= 1.0 + 1e-3, (geometry, k, p, err)


def test_pad_before_random_crop_is_random_crops_padding_bit_for_bit(photo_batch):
    """Pad(p) + RandomCrop(s) folds into RandomCrop(s, padding=p) (the paddings added, the
    Pad's fill): the same draws (natively) and the same pixels, bit for bit, for an int, a
    pair and four paddings, a grey and an RGB fill, and a crop that pads too with that fill;
    a crop that pads with another fill keeps the canvas (and still gives torchvision's)."""
    cifar = [im[:, :32, :32].contiguous() for im in photo_batch]
    sizes = [(32, 32)] * len(cifar)
    cases = [(4, 0, T.RandomCrop(32)), ((2, 6), 9, T.RandomCrop(36)), ((1, 2, 3, 4), FILL, T.RandomCrop(30)),
             (4, FILL, T.RandomCrop(32, padding=2, fill=list(FILL))), (4, 0, T.RandomCrop(48, pad_if_needed=True))]
    for pad, fill, crop in cases:
        padded = T.Compose([T.Pad(pad, fill=fill), crop, T.RandomHorizontalFlip(), T.Normalize([0.5] * 3, [0.25] * 3)])
        assert padded.plan.canvas is None and padded.native_spec is not None, pad
        total = tuple(a + b for a, b in zip(T.Pad(pad).padding, crop.padding))
        fills = list(fill) if isinstance(fill, tuple) else [fill] * 3
        plain = T.Compose([T.RandomCrop(crop.size, padding=list(total), pad_if_needed=crop.pad_if_needed, fill=fills),
                           T.RandomHorizontalFlip(), T.Normalize([0.5] * 3, [0.25] * 3)])
        for seed in range(3):
            a, b = padded.make_params(sizes, seed), plain.make_params(sizes, seed)
            assert a == b
            assert torch.equal(padded(cifar, a), plain(cifar, b)), (pad, fill, seed)
    kept = T.Compose([T.Pad(2, fill=9), T.RandomCrop(34, padding=1), T.ToDtype(torch.float32, scale=True)])
    assert isinstance(kept.plan.canvas, T.Pad)  # (the crop pads with 0, the Pad with 9: not one padding)
    params = kept.make_params(sizes, 1)
    got = kept(cifar, params)
    for k, (img, p) in enumerate(zip(cifar, params)):
        x = F.to_dtype(F.pad(F.pad(img, [2], fill=9), [1], fill=0), torch.float32, scale=True)
        t, l, h, w = p["crop"]
        assert torch.equal(got[k], F.crop(x, t + 1, l + 1, h, w)), (k, p)


def test_from_torchvision_v1_and_v2_and_refusals():
    """torchvision's Pad (v1 and v2; an int, a pair, four; a fill, v2's fill by type)
    converts with its padding read as torchvision reads it; a padding mode torch has not
    is refused by name, as is a negative padding."""
    for mod in (tv, tv1):
        for padding, want in ((4, (4, 4, 4, 4)), ([2, 6], (2, 6, 2, 6)), ((1, 2, 3, 4), (1, 2, 3, 4))):
            got = T.Compose.from_torchvision(mod.Compose([mod.Pad(padding, fill=7), mod.CenterCrop(20)]))
            pad = got.plan.canvas
            assert isinstance(pad, T.Pad) and pad.padding == want and pad._fill == (7, 7, 7), (mod, padding)
    folded = T.Compose.from_torchvision(tv.Compose([tv.Pad(4, fill={tv_tensors.Image: 5}), tv.RandomCrop(32),
                                                    tv.ToDtype(torch.float32, scale=True)]))
    crop = folded.plan.geometry[0]
    assert folded.plan.canvas is None and crop.padding == (4, 4, 4, 4) and crop.crop_fill == (5, 5, 5)
    assert repr(T.Pad((1, 2), fill=3)) == "Pad(padding=[1, 2, 1, 2], fill=[3, 3, 3], padding_mode='constant')"
    with pytest.raises(TransformError, match="Pad\\(padding_mode='wrap'\\) cannot be fused"):
        T.Pad(4, padding_mode="wrap")
    for mode in ("reflect", "edge", "symmetric"):  # (read from the image: fused as the crop's padding, test below)
        got = T.Compose.from_torchvision(tv.Compose([tv.Pad(4, padding_mode=mode), tv.RandomCrop(32)]))
        assert got.plan.canvas is None and got.plan.geometry[0].padding_mode == mode
    with pytest.raises(ValueError, match="padding must be >= 0"):
        T.Pad((1, -2))
    with pytest.raises(TransformError, match=r"(?s)geometry step.*must follow\s+it"):
        T.Compose([T.RandomZoomOut(), T.RandomHorizontalFlip()])


def test_the_loader_takes_pad_and_crop_as_random_crops_padding(tmp_path, photos):
    """Through the Loader, streamed and resident (keep="ram"): CIFAR's old recipe written
    with a Pad (torchvision's, converted) gives the batches RandomCrop(32, padding=4) gives,
    bit for bit; with the flip between the Pad and the crop, a flip before them."""
    import gpudecode
    from conftest import encode, make_shard

    rng = np.random.default_rng(3)
    names = list(photos)
    samples = []
    for i in range(12):
        p = photos[names[i % len(names)]]
        y, x = int(rng.integers(0, p.shape[0] - 64)), int(rng.integers(0, p.shape[1] - 64))
        samples.append({"__key__": f"{i:03d}", "png": encode(np.ascontiguousarray(p[y:y + 64:2, x:x + 64:2]), "PNG"),
                        "cls": str(i % 3).encode()})
    shard = make_shard(tmp_path / "c-000000.tar", samples)
    norm = ([0.49, 0.48, 0.45], [0.25, 0.24, 0.26])
    theirs = tv.Compose([tv.Pad(4), tv.RandomCrop(32), tv.RandomHorizontalFlip(), tv.ToImage(),
                         tv.ToDtype(torch.float32, scale=True), tv.Normalize(*norm)])
    plain = T.Compose([T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), T.Normalize(*norm)])
    # and with the flip between the Pad and the crop (a Lightning CIFAR module's): the flip first, padded alike
    between = tv.Compose([tv.Pad(4), tv.RandomHorizontalFlip(), tv.RandomCrop(32), tv.ToImage(),
                          tv.ToDtype(torch.float32, scale=True), tv.Normalize(*norm)])
    first = T.Compose([T.RandomHorizontalFlip(), T.RandomCrop(32, padding=4), T.Normalize(*norm)])
    for keep, (one, other) in ((None, (theirs, plain)), ("ram", (theirs, plain)), (None, (between, first))):
        got = [gpudecode.Loader(shard, batch_size=5, transform=t, device="cpu", seed=11, keep=keep)
               for t in (one, other)]
        for epoch in (0, 1):
            for ld in got:
                ld.set_epoch(epoch)
            a, b = list(got[0]), list(got[1])
            assert len(a) == len(b) == 3
            for (xa, ya), (xb, yb) in zip(a, b):
                assert torch.equal(xa, xb) and torch.equal(ya, yb), (keep, epoch)
    assert got[0].describe()["transform"][:3] == ["Pad", "RandomHorizontalFlip", "RandomCrop"]


# --- the padding modes that read the image's own pixels ------------------------------------

MODES = {"edge": "edge", "reflect": "reflect", "symmetric": "symmetric"}


def _crop_theirs(img: torch.Tensor, p: dict, mode: str, resize=None) -> torch.Tensor:
    """torchvision's functional ops with our draws: the resize (where one comes first), the
    pad by the crop's reach past the frame in `mode`, the crop, the flip."""
    x = F.to_dtype(img, torch.float32, scale=True)
    if resize is not None:
        x = F.resize(x, list(resize), antialias=True)
    t, l, h, w = p["crop"]
    fh, fw = x.shape[-2:]
    pad = [max(0, -l), max(0, -t), max(0, l + w - fw), max(0, t + h - fh)]
    x = F.pad(x, pad, padding_mode=mode)
    x = F.crop(x, t + pad[1], l + pad[0], h, w)
    return F.horizontal_flip(x) if p["flip"] else x


@pytest.mark.parametrize("mode", list(MODES))
def test_a_crops_padding_mode_is_torchvisions_pad_on_real_photos(photo_batch, mode):
    """RandomCrop(padding=, padding_mode=edge / reflect / symmetric), alone and after a
    Resize, flipped, into float32, uint8 and NHWC: torchvision's pad in that mode and its
    crop with the same draws, within float32 rounding (the same source pixels: the kernel
    reads the frame at the reflected place). Drawn natively, as RandomCrop is."""
    sizes = [tuple(im.shape[1:]) for im in photo_batch]
    for resize in (None, (40, 52)):
        geometry = ([T.Resize(resize)] if resize else []) + [T.RandomCrop((36, 44), padding=(9, 6, 3, 11),
                                                                          padding_mode=mode)]
        tf = T.Compose([*geometry, T.RandomHorizontalFlip(), T.ToDtype(torch.float32, scale=True)])
        assert tf.native_spec is not None and tf.plan.pad_mode == {"edge": 1, "reflect": 2, "symmetric": 3}[mode]
        for seed in range(3):
            params = tf.make_params(sizes, seed)
            got = tf(photo_batch, params)
            for k, (img, p) in enumerate(zip(photo_batch, params)):
                want = _crop_theirs(img, p, MODES[mode], resize)
                err = float(((got[k] - want.clamp(0, 1)).abs() * 255).max())
                assert err <= (1e-3 if resize is None else 1.0 + 1e-3), (mode, resize, k, p, err)
        u8 = T.Compose([*geometry, T.RandomHorizontalFlip()])
        params = u8.make_params(sizes, 4)
        want = torch.stack([F.to_dtype(_crop_theirs(im, p, MODES[mode], resize).clamp(0, 1), torch.uint8, scale=True)
                            for im, p in zip(photo_batch, params)])
        assert (u8(photo_batch, params).int() - want.int()).abs().max() <= (0 if resize is None else 1)
        nhwc = T.Compose([*geometry, T.RandomHorizontalFlip(), T.ToDtype(torch.float32, scale=True)], layout="NHWC")
        params = nhwc.make_params(sizes, 5)
        assert torch.equal(nhwc(photo_batch, params).permute(0, 3, 1, 2), tf(photo_batch, params))


def test_the_cuda_kernel_reads_the_padding_as_the_twin_under_the_simulator():
    """The CUDA resample's padding (frame_index) against the CPU twin's, for each mode, a
    flip and a crop reaching past every side of small images (the simulator's sizes); the
    crop of a RandomResizedCrop's frame (with flips between the crops too), and a Pad read
    as a window, alike."""
    import os

    from gpudecode.kernels import fused

    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        pytest.skip("runs under numba's CUDA simulator (on a GPU, tests/test_gpu.py compares the targets)")
    rng = np.random.default_rng(5)
    imgs = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in ((9, 11), (12, 7), (10, 10))]
    last = [T.RandomHorizontalFlip(), T.Normalize([0.5] * 3, [0.25] * 3)]
    for mode, tf in [*((m, T.Compose([T.RandomCrop((14, 16), padding=(5, 4, 6, 3), padding_mode=[*MODES][m - 1]),
                                      *last])) for m in (1, 2, 3)),
                     (2, T.Compose([T.RandomResizedCrop((12, 13)), T.RandomCrop((14, 16), padding=(2, 1, 3, 2),
                                                                               padding_mode="reflect"), *last])),
                     (3, T.Compose([T.Resize((10, 12)), T.Pad((2, 1, 2, 3), padding_mode="symmetric"), *last])),
                     (1, T.Compose([T.RandomResizedCrop((12, 13)), T.RandomHorizontalFlip(), T.RandomVerticalFlip(),
                                    T.RandomCrop((14, 16), padding=(2, 1, 3, 2), padding_mode="edge"), last[-1]]))]:
        sizes = [im.shape[:2] for im in imgs]
        geom, args, order = tf.encode(tf.make_params(sizes, mode), sizes)
        src = np.concatenate([im.reshape(-1) for im in imgs])
        starts = np.cumsum([0] + [im.size for im in imgs[:-1]])
        geom[:, fused.OFFSET] = starts
        geom[:, fused.SY], geom[:, fused.SX], geom[:, fused.SC] = [im.shape[1] * 3 for im in imgs], 3, 1
        assert (geom[:, fused.PAD] == mode).all()
        mean, std = np.full(3, 0.5, np.float32), np.full(3, 0.25, np.float32)
        gpu = np.zeros((3, 3, 14, 16), np.float32)
        cpu = np.zeros_like(gpu)
        fused.fused_cuda(src, geom, args, order, mean, std, gpu, normalize=True)
        fused.fused_cpu(src, geom, args, order, mean, std, cpu, normalize=True)
        np.testing.assert_allclose(gpu, cpu, atol=2e-6, rtol=0)


def test_padding_modes_convert_fold_and_are_refused_where_torchvision_refuses():
    """torchvision's RandomCrop(padding_mode=...) (v1 and v2) converts; Pad(reflect) folds
    into a RandomCrop that pads no more, and is refused elsewhere; a padding past one
    reflection is the sample's error (torch's pad refuses it), natively drawn or not;
    boxes are refused (torchvision refuses them too); FixedSizeCrop stays constant."""
    for mod in (tv, tv1):
        got = T.Compose.from_torchvision(mod.Compose([mod.RandomCrop(32, padding=4, padding_mode="reflect"),
                                                      mod.RandomHorizontalFlip()]))
        crop = got.plan.geometry[0]
        assert crop.padding_mode == "reflect" and got.plan.pad_mode == 2 and got.native_spec is not None
        assert "padding_mode='reflect'" in repr(crop)
    folded = T.Compose([T.Pad(4, padding_mode="reflect"), T.RandomCrop(32)])
    assert folded.plan.canvas is None and folded.plan.pad_mode == 2 and folded.plan.geometry[0].padding == (4, 4, 4, 4)
    with pytest.raises(TransformError, match="fuses only before a RandomCrop"):
        T.Compose([T.Pad(4, padding_mode="reflect"), T.Resize((8, 8))])
    with pytest.raises(TransformError, match="fuses only before a RandomCrop"):  # (a reflection of a reflection)
        T.Compose([T.Pad(4, padding_mode="reflect"), T.RandomCrop(32, padding=2, padding_mode="reflect")])
    edge = T.Compose([T.Pad(4, padding_mode="edge"), T.RandomCrop(32, padding=2, padding_mode="edge")])
    assert edge.plan.canvas is None and edge.plan.geometry[0].padding == (6, 6, 6, 6)  # (edge twice: edge once)
    with pytest.raises(TransformError, match="reflects twice"):
        T.RandomCrop(32, padding=2, pad_if_needed=True, padding_mode="reflect")
    with pytest.raises(TransformError, match="only 'constant'"):
        T.FixedSizeCrop(32, padding_mode="reflect")
    wide = T.Compose([T.RandomCrop(16, padding=8, padding_mode="reflect")])
    for seed in range(2):  # (the native draws leave it to the Python path, which names it when drawing)
        with pytest.raises(ValueError, match="by more than it holds"):
            wide.draw_batch([(20, 20), (8, 30)], seed)
        assert wide.draw_batch([(20, 20), (9, 30)], seed).columns is not None
    forged = wide.draw_batch([(20, 20), (9, 30)], 0)  # (arrays for a frame it was not drawn for: refused too)
    with pytest.raises(ValueError, match="by more than it holds"):
        wide.encode(forged.dicts(), [(20, 20), (8, 30)])
    with pytest.raises(ValueError, match="by more than it holds"):
        wide._python_params([(8, 30)], 0)
    assert T.Compose([T.RandomCrop(16, padding=8, padding_mode="symmetric")])._python_params([(8, 30)], 0)
    from gpudecode.transforms.boxes import refused

    with pytest.raises(TransformError, match="torchvision refuses for boxes too"):
        refused(T.Compose([T.RandomCrop(32, padding=4, padding_mode="edge")]).plan)


def test_a_mask_reads_the_padding_as_its_image(photo_batch):
    """A mask through RandomCrop(padding_mode=reflect / edge / symmetric) is torchvision's
    pad of the mask in that mode and its crop (the image's draws), flips included."""
    sizes = [tuple(im.shape[1:]) for im in photo_batch]
    masks = [torch.from_numpy(np.random.default_rng(k).integers(0, 9, s, dtype=np.int64)) for k, s in enumerate(sizes)]
    for mode in MODES:
        tf = T.Compose([T.RandomCrop((30, 40), padding=(7, 5, 8, 9), padding_mode=mode), T.RandomHorizontalFlip()])
        params = tf.make_params(sizes, 2)
        got = tf.masks(masks, params, fill=255)
        for k, (m, p) in enumerate(zip(masks, params)):
            t, l, h, w = p["crop"]
            fh, fw = m.shape
            pad = [max(0, -l), max(0, -t), max(0, l + w - fw), max(0, t + h - fh)]
            x = F.pad(tv_tensors.Mask(m[None]), pad, padding_mode=mode)
            want = F.crop(x, t + pad[1], l + pad[0], h, w)[0]
            want = want.flip(-1) if p["flip"] else want
            assert torch.equal(got[k], want.as_subclass(torch.Tensor)), (mode, k, p)


def test_the_loader_reads_a_reflected_padding_streamed_and_resident(tmp_path, photos):
    """CIFAR's recipe with a reflected padding (RandomCrop(32, padding=4,
    padding_mode="reflect"), airbench's) through the Loader, streamed and keep="ram": each
    batch is the Compose on the decoded images with the Loader's draws, value for value,
    and its padding is torchvision's reflection of each image."""
    import io

    from PIL import Image

    import gpudecode
    from conftest import encode, make_shard

    names = list(photos)
    arrays = [np.ascontiguousarray(photos[names[i % len(names)]][8 * i:8 * i + 64:2, 5 * i:5 * i + 64:2])
              for i in range(6)]
    shard = make_shard(tmp_path / "r-000000.tar", [{"__key__": f"{i:03d}", "png": encode(a, "PNG"), "cls": b"0"}
                                                    for i, a in enumerate(arrays)])
    tf = T.Compose([T.RandomCrop(32, padding=4, padding_mode="reflect"), T.RandomHorizontalFlip(),
                    T.ToDtype(torch.float32, scale=True)])
    decoded = [torch.from_numpy(np.array(Image.open(io.BytesIO(encode(a, "PNG"))).convert("RGB"))).permute(2, 0, 1)
               .contiguous() for a in arrays]
    for keep in (None, "ram"):
        loader = gpudecode.Loader(shard, batch_size=6, transform=tf, device="cpu", shuffle=False, seed=3, keep=keep)
        for epoch in (0, 1):
            loader.set_epoch(epoch)
            (images, _), = list(loader)
            params = tf.make_params([(32, 32)] * 6, 3, epoch=epoch, indices=list(range(6)))
            assert torch.equal(images, tf(decoded, params)), (keep, epoch)
            for k, p in enumerate(params):
                want = _crop_theirs(decoded[k], p, "reflect")
                assert float((images[k] - want).abs().max()) < 1e-6, (keep, epoch, k)


def test_frame_index_is_numpys_pad_for_every_mode_and_size():
    """The kernels' frame_index (and the masks' frame_indices, its numpy form) against
    numpy's own np.pad of an index ramp, in each mode, for frames of 1 to 24 pixels and
    every padding one reflection reaches (reflect: less than the frame; symmetric and edge:
    up to it)."""
    from gpudecode.kernels._filters import frame_index
    from gpudecode.transforms.masks import frame_indices

    for mode, name in ((1, "edge"), (2, "reflect"), (3, "symmetric")):
        for n in range(1, 25):
            for pad in range(0, n if mode == 2 else n + 1):
                v = np.arange(-pad, n + pad)
                want = np.pad(np.arange(n), pad, mode=name)
                assert [frame_index(int(i), n, mode) for i in v] == want.tolist(), (name, n, pad)
                assert frame_indices(v, np.int64(n), np.int64(mode)).tolist() == want.tolist(), (name, n, pad)
    assert [frame_index(i, 5, 0) for i in (-3, 2, 7)] == [-3, 2, 7]  # (constant: as it is; the caller fills)


# ---- Pad where it ends the geometry: a window of the image, padded (PadWindow) ------------

@pytest.mark.parametrize("mode", ["constant", *MODES])
def test_pad_alone_is_torchvisions_pad_byte_for_byte(photo_batch, mode):
    """`[Pad(p)]` with nothing geometric after it (LeNet's `[Pad(2), ToTensor(), ...]`):
    each image is torchvision's F.pad of it, byte for byte as uint8 and as floats, in every
    padding mode and padding form; no canvas is made; images of several sizes with
    ragged=True, each its own padded size; one size a batch otherwise (named)."""
    for padding in (2, (1, 3), (4, 0, 2, 5)):
        kw = {"fill": FILL} if mode == "constant" else {"padding_mode": mode}
        steps = tv.Compose([tv.Pad(padding, **kw)])
        ours = T.Compose.from_torchvision(steps)
        assert ours.plan.canvas is None and ours.plan.makes_images is False
        for img in photo_batch:
            got = ours([img, img])
            want = F.pad(img, list(T.Pad(padding).padding), fill=list(FILL) if mode == "constant" else 0,
                         padding_mode=mode)
            assert got.dtype == torch.uint8 and torch.equal(got[0], want) and torch.equal(got[1], want), (padding, mode)
        floats = T.Compose.from_torchvision(tv.Compose([tv.Pad(padding, **kw), tv.ToDtype(torch.float32, scale=True)]))
        img = photo_batch[0]
        assert torch.equal(floats([img])[0], F.to_dtype(steps(img), torch.float32, scale=True))
        ragged = T.Compose.from_torchvision(steps, ragged=True)
        got = ragged(photo_batch)
        assert [tuple(g.shape) for g in got] == [tuple(steps(i).shape) for i in photo_batch]
        assert all(torch.equal(g, steps(i)) for g, i in zip(got, photo_batch))
    with pytest.raises(ValueError, match=r"Pad\(padding=\[2, 2, 2, 2\].*keeps each image's shape, padded"):
        T.Compose([T.Pad(2)])(photo_batch[:2])


def test_pad_after_a_resize_or_a_random_resized_crop_and_after_flips(photo_batch):
    """`[Resize((h, w)), Pad]`, `[Resize(s), Pad]` (one output size a batch of one image
    size), `[RandomResizedCrop(s), Pad(reflect)]` (the crop's window, padded from it) and
    flips before a Pad: torchvision's, replaying the draws, within a level where a resize
    rounds (torchvision resizes the uint8 image) and exact otherwise."""
    img = photo_batch[1]
    for steps in ([tv.Resize((28, 30)), tv.Pad(2, fill=FILL)], [tv.Resize(28), tv.Pad((2, 3), padding_mode="edge")]):
        tvc = tv.Compose([*steps, tv.ToDtype(torch.float32, scale=True)])
        got = T.Compose.from_torchvision(tvc)([img, img])
        want = tvc(img)
        assert got.shape[1:] == want.shape and float((got[0] - want).abs().max()) * 255 <= 1.0 + 1e-3, steps
    rrc = T.Compose([T.RandomResizedCrop((20, 24)), T.Pad((3, 1, 2, 4), padding_mode="reflect"),
                     T.ToDtype(torch.float32, scale=True)])
    assert rrc.plan.rrc_window and rrc.out_size == (25, 29)
    params = rrc.make_params([tuple(img.shape[1:])] * 6, 4)
    got = rrc([img] * 6, params)
    for k, p in enumerate(params):
        x = F.resized_crop(F.to_dtype(img, torch.float32, scale=True), *p["crop"], [20, 24], antialias=True)
        want = F.pad(x, [3, 1, 2, 4], padding_mode="reflect")
        assert float((got[k] - want).abs().max()) * 255 <= 1e-3, (k, p)
    flipped = T.Compose.from_torchvision(tv1.Compose([tv1.RandomHorizontalFlip(), tv1.RandomVerticalFlip(),
                                                      tv1.Pad((1, 2, 3, 4), fill=9)]))
    assert flipped.plan.mirror == (True, True)
    params = flipped.make_params([tuple(img.shape[1:])] * 8, 0)
    assert len({(p["flip"], p["vflip"]) for p in params}) == 4
    got = flipped([img] * 8, params)
    for k, p in enumerate(params):
        x = F.horizontal_flip(img) if p["flip"] else img
        x = F.vertical_flip(x) if p["vflip"] else x
        assert torch.equal(got[k], F.pad(x, [1, 2, 3, 4], fill=9)), p
    folded = T.Compose.from_torchvision(tv1.Compose([tv1.RandomHorizontalFlip(), tv1.Pad(4), tv1.RandomCrop(32)]))
    assert folded.plan.mirror == (True, False) and folded.plan.canvas is None
    with pytest.raises(TransformError, match="RandomResize alone gives differently sized images"):
        T.Compose([T.RandomResize(20, 30), T.Pad(2)])


def test_pad_alone_moves_masks_and_boxes_as_torchvision(photo_batch):
    """A mask and boxes through `[Pad, flip]` and `[Resize((h, w)), Pad]`: torchvision's
    pad of a tv_tensors.Mask (its own fill) and of a BoundingBoxes, with the draws."""
    img = photo_batch[2]
    h, w = img.shape[1:]
    mask = torch.from_numpy(np.random.default_rng(3).integers(0, 7, (h, w), dtype=np.uint8))
    box = np.array([[3.0, 4.0, w - 2.0, h / 2], [w / 3, 1.0, w / 2, h - 3.0]], np.float32)
    for steps in ([T.Pad((1, 2, 5, 3), fill=4), T.RandomHorizontalFlip()], [T.Resize((30, 34)), T.Pad(3)]):
        tf = T.Compose(steps)
        d = tf.draw_batch([(h, w)] * 4, 1)
        masks = tf.masks([mask] * 4, d, fill=255)
        targets = tf.boxes([box] * 4, d, min_size=0, min_area=0)
        for k in range(4):
            m = tv_tensors.Mask(mask[None])
            b = tv_tensors.BoundingBoxes(torch.from_numpy(box), format="XYXY", canvas_size=(h, w))
            if "resize" in d[k]:
                m, b = F.resize(m, [30, 34]), F.resize(b, [30, 34])
            pad = list(steps[-1].padding if isinstance(steps[-1], T.Pad) else steps[0].padding)
            m, b = F.pad(m, pad, fill=255), F.pad(b, pad)
            if d[k]["flip"]:
                m, b = F.horizontal_flip(m), F.horizontal_flip(b)
            assert torch.equal(masks[k], m[0].as_subclass(torch.Tensor)), (steps, k)
            torch.testing.assert_close(targets[k]["boxes"], b.as_subclass(torch.Tensor), atol=1e-4, rtol=0)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "symmetric"])
def test_a_flip_between_pad_and_random_crop_is_torchvisions(photo_batch, mode):
    """`[Pad(4), RandomHorizontalFlip(), RandomCrop(32)]` (CIFAR scripts write it so; so do
    their Lightning modules): torchvision pads, flips the padded image and crops it. Fused as
    the flip before the Pad (an even padding mirrored is itself): the crop's padding, the
    native draws, torchvision's pixels bit for bit on real photographs in every padding
    mode, a vertical flip too; masks and boxes as torchvision moves them; the steps kept as
    written; an uneven padding refused by name."""
    cifar = [im[:, :32, :32].contiguous() for im in photo_batch] * 3
    sizes = [(32, 32)] * len(cifar)
    fill = FILL if mode == "constant" else 0
    both = [tv1.RandomHorizontalFlip(), tv1.RandomVerticalFlip()]
    for flips, pad in (([tv1.RandomHorizontalFlip()], 4), (both, (4, 2))):
        tvc = tv1.Compose([tv1.Pad(pad, fill=fill, padding_mode=mode), *flips, tv1.RandomCrop(32)])
        ours = T.Compose.from_torchvision(tvc)
        assert ours.plan.canvas is None and ours.native_spec is not None, (mode, pad)
        assert [type(t).__name__ for t in ours.plan.steps] == [type(t).__name__ for t in tvc.transforms]
        moved = T.Compose.from_torchvision(tv1.Compose([*flips, tv1.Pad(pad, fill=fill, padding_mode=mode),
                                                        tv1.RandomCrop(32)]))
        params = ours.make_params(sizes, 5)
        assert params == moved.make_params(sizes, 5)
        assert {(p["flip"], p.get("vflip", False)) for p in params} >= {(True, False), (False, False)}
        got = ours(cifar, params)
        left, top = T.Pad(pad).padding[:2]
        for k, p in enumerate(params):  # torchvision's order: pad, flip the padded image, crop it
            x = F.pad(cifar[k], list(T.Pad(pad).padding), fill=fill, padding_mode=mode)
            x = F.horizontal_flip(x) if p["flip"] else x
            x = F.vertical_flip(x) if p.get("vflip") else x
            t, l, h, w = p["crop"]  # (in the image: the padding off)
            assert torch.equal(got[k], F.crop(x, t + top, l + left, h, w)), (mode, pad, k, p)
    tf = T.Compose([T.Pad(3, fill=4), T.RandomHorizontalFlip(), T.RandomCrop(30)])
    img = cifar[1]
    mask = torch.from_numpy(np.random.default_rng(5).integers(0, 7, (32, 32), dtype=np.uint8))
    box = np.array([[3.0, 4.0, 30.0, 16.0], [10.0, 1.0, 16.0, 29.0]], np.float32)
    d = tf.draw_batch([(32, 32)] * 6, 2)
    masks, targets = tf.masks([mask] * 6, d, fill=255), tf.boxes([box] * 6, d, min_size=0, min_area=0)
    for k in range(6):
        m = F.pad(tv_tensors.Mask(mask[None]), [3], fill=255)
        b = F.pad(tv_tensors.BoundingBoxes(torch.from_numpy(box), format="XYXY", canvas_size=(32, 32)), [3])
        m, b = (F.horizontal_flip(m), F.horizontal_flip(b)) if d[k]["flip"] else (m, b)
        t, l, h, w = d[k]["crop"]
        m, b = F.crop(m, t + 3, l + 3, h, w), F.crop(b, t + 3, l + 3, h, w)
        assert torch.equal(masks[k], m[0].as_subclass(torch.Tensor)), k
        torch.testing.assert_close(targets[k]["boxes"], b.as_subclass(torch.Tensor), atol=1e-4, rtol=0)
    assert tf(img[None]).shape == (1, 3, 30, 30)
    with pytest.raises(TransformError, match=r"(?s)RandomHorizontalFlip after Pad\(padding=\[1, 2, 3, 4\].*"
                                             r"differs\s+left\s+and\s+right"):
        T.Compose([T.Pad((1, 2, 3, 4)), T.RandomHorizontalFlip(), T.RandomCrop(32)])
    with pytest.raises(TransformError, match=r"(?s)differs top\s+and bottom"):
        T.Compose([T.Pad((2, 1, 2, 3)), T.RandomHorizontalFlip(), T.RandomVerticalFlip(), T.RandomCrop(32)])
    centred = T.Compose([T.Pad(4), T.RandomHorizontalFlip(), T.CenterCrop(33)])  # (refused before: now the flip
    params = centred.make_params([(32, 32)] * len(cifar), 1)  # first, the window mirrored in the Pad's canvas)
    assert isinstance(centred.plan.canvas, T.Pad) and {p["flip"] for p in params} == {False, True}
    for k, (got, p) in enumerate(zip(centred(cifar, params), params)):
        x = F.pad(cifar[k], [4])
        assert torch.equal(got, F.center_crop(F.horizontal_flip(x) if p["flip"] else x, [33, 33])), k
