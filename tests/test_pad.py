"""Pad (torchvision's, padding_mode "constant"): a canvas step at a fixed place, folded into
a RandomCrop that follows it (the crop's own padding: no canvas made, the native draws and
the resident fast path as for RandomCrop(padding=)). Pixels against torchvision's
functional pad and geometry replaying our parameters on real photographs; the fold against
RandomCrop(padding=) bit for bit, in a Compose and through the Loader; conversions of
torchvision's v1 and v2 Pad; the padding modes it cannot take refused by name."""
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
    converts with its padding read as torchvision reads it; padding modes that read the
    image's own pixels are refused by name, as is a negative padding."""
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
    for mode in ("reflect", "edge", "symmetric"):
        with pytest.raises(TransformError, match=f"Pad\\(padding_mode='{mode}'\\) cannot be fused"):
            T.Compose.from_torchvision(tv.Compose([tv.Pad(4, padding_mode=mode), tv.RandomCrop(32)]))
    with pytest.raises(ValueError, match="padding must be >= 0"):
        T.Pad((1, -2))
    with pytest.raises(TransformError, match=r"(?s)geometry step.*must follow\s+it"):
        T.Compose([T.Pad(4), T.RandomHorizontalFlip()])


def test_the_loader_takes_pad_and_crop_as_random_crops_padding(tmp_path, photos):
    """Through the Loader, streamed and resident (keep="ram"): CIFAR's old recipe written
    with a Pad (torchvision's, converted) gives the batches RandomCrop(32, padding=4) gives,
    bit for bit."""
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
    for keep in (None, "ram"):
        got = [gpudecode.Loader(shard, batch_size=5, transform=t, device="cpu", seed=11, keep=keep)
               for t in (theirs, plain)]
        for epoch in (0, 1):
            for ld in got:
                ld.set_epoch(epoch)
            a, b = list(got[0]), list(got[1])
            assert len(a) == len(b) == 3
            for (xa, ya), (xb, yb) in zip(a, b):
                assert torch.equal(xa, xb) and torch.equal(ya, yb), (keep, epoch)
