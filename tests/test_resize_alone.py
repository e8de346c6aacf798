"""A Resize of the shorter side alone (`[Resize(32), ToTensor(), Normalize(...)]` on MNIST,
`[Resize(224), ToTensor(), ...]` on CIFAR for a pretrained model), as DataLoader takes it:
each image resized keeping its shape, and a batch stacked where they share one output size
(torchvision's collate raises otherwise: here the image of another size is its sample's
error, named). References: torchvision's F.resize on real photographs; tarfile-made shards
read by the Loader."""
from __future__ import annotations

import io

import numpy as np
import pytest
import torch
import torchvision.transforms as v1
import torchvision.transforms.v2.functional as F
from conftest import encode, make_shard
from PIL import Image
from torch.utils.data import TensorDataset

import gpudecode
from gpudecode import DecodeError, TransformError
from gpudecode import transforms as T


def chw(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a.transpose(2, 0, 1)))


@pytest.fixture(scope="module")
def pairs(photos):
    """Each photograph at two sizes of one shape (96x144, 48x72): one output size."""
    out = []
    for p in photos.values():
        big = chw(np.ascontiguousarray(p[:96, :144]))
        out += [big, F.resize(big, [48, 72], antialias=True)]
    return out


def test_a_resize_alone_is_torchvisions_resize_of_each_image(pairs):
    tf = T.Compose.from_torchvision(v1.Compose([v1.Resize(32), v1.RandomHorizontalFlip(), v1.ToTensor(),
                                                v1.Normalize((0.5,) * 3, (0.25,) * 3)]))
    assert tf.plan.out_size is None and tf.native_spec is not None
    sizes = [tuple(i.shape[1:]) for i in pairs]
    params = tf.make_params(sizes, 1)
    assert {p["flip"] for p in params} == {False, True}
    got = tf(pairs, params)
    assert got.shape == (len(pairs), 3, 32, 48)
    torch.testing.assert_close(got, tf(pairs, tf._python_params(sizes, 1)), atol=0, rtol=0)  # (native = Python draws)
    for k, (img, p) in enumerate(zip(pairs, params)):
        x = F.resize(F.to_dtype(img, torch.float32, scale=True), [32], antialias=True)
        want = F.normalize(F.horizontal_flip(x) if p["flip"] else x, [0.5] * 3, [0.25] * 3)
        assert float((got[k] - want).abs().max()) * 255 * 0.25 < 1e-3, k


def test_images_of_other_output_sizes_are_refused_in_one_call(pairs):
    tf = T.Compose([T.Resize(16, max_size=20), T.ToDtype(torch.float32, scale=True)])
    assert tf([pairs[0], pairs[1]]).shape == (2, 3, 13, 20)  # (max_size: the longer side 20)
    with pytest.raises(ValueError, match=r"2 output sizes.*Resize alone keeps each image's shape"):
        tf([pairs[0], pairs[0][:, :, :96]])


@pytest.mark.parametrize("keep", [None, "ram"])
def test_the_loader_takes_a_resize_alone_and_names_the_image_of_another_shape(tmp_path, photos, keep):
    """JPEG shards of one shape and one square image: the square one is its sample's
    error (shard and key named); skipped, the rest are torchvision's resize of the decode."""
    arrays = [np.ascontiguousarray(p[:60, :90]) for p in photos.values()]
    samples = [{"__key__": f"k{i}", "jpg": encode(a, quality=95), "cls": str(i).encode()} for i, a in enumerate(arrays)]
    samples.insert(2, {"__key__": "square", "jpg": encode(arrays[0][:60, :60], quality=95), "cls": b"9"})
    shard = make_shard(tmp_path / "s.tar", samples)
    steps = v1.Compose([v1.Resize(24), v1.ToTensor()])
    ld = gpudecode.Loader(shard, batch_size=3, transform=steps, shuffle=False, **({} if keep is None else {"keep": keep}))
    with pytest.raises(DecodeError, match=r"(?s)60x60, resized to 24x24, the others to 24x36.*s.tar', key 'square'"):
        list(ld)
    ld = gpudecode.Loader(shard, batch_size=3, transform=steps, shuffle=False, on_error="skip",
                          **({} if keep is None else {"keep": keep}))
    got = [(b, y) for b, y in ld]
    assert [s.key for s in ld.skipped] == ["square"]
    images, labels = torch.cat([b for b, _ in got]), torch.cat([y for _, y in got])
    assert images.shape == (len(arrays), 3, 24, 36) and labels.tolist() == list(range(len(arrays)))
    for k in range(len(arrays)):
        jpg = samples[k + (k >= 2)]["jpg"]  # (the square one is third)
        decoded = torch.from_numpy(np.array(Image.open(io.BytesIO(jpg)).convert("RGB"))).permute(2, 0, 1)
        want = F.resize(F.to_dtype(decoded, torch.float32, scale=True), [24], antialias=True)
        assert float((images[k] - want).abs().max()) * 255 < 2.5, k  # (the two JPEG decoders: a level or two)


def test_a_grey_set_resized_alone(photos):
    """MNIST's LeNet recipe on images of one channel: one channel out."""
    grey = torch.from_numpy(np.ascontiguousarray(next(iter(photos.values()))[:28, :28].mean(axis=2).astype(np.uint8)))
    imgs = torch.stack([grey, grey.flip(0)])[:, None]
    steps = v1.Compose([v1.Resize(32), v1.ToTensor(), v1.Normalize((0.1307,), (0.3081,))])
    ld = gpudecode.Loader(TensorDataset(imgs, torch.arange(2)), transform=steps, batch_size=2, shuffle=False)
    b, _ = next(iter(ld))
    assert b.shape == (2, 1, 32, 32)
    want = F.normalize(F.resize(F.to_dtype(imgs, torch.float32, scale=True), [32], antialias=True), [0.1307], [0.3081])
    assert float((b - want).abs().max()) * 255 * 0.3081 < 1e-3


def test_a_warp_of_the_images_size_before_a_resize_alone(pairs):
    """[RandomRotation(20), Resize(24)]: the rotation's canvas has the image's size, so each
    output is the image's resize: F.rotate, then F.resize (nearest picks: within a
    rounding of a half-way, a pixel may differ)."""
    tf = T.Compose([T.RandomRotation(20), T.Resize(24), T.ToDtype(torch.float32, scale=True)])
    params = tf.make_params([tuple(i.shape[1:]) for i in pairs], 4)
    got = tf(pairs, params)
    assert got.shape == (len(pairs), 3, 24, 36)
    for k, (img, p) in enumerate(zip(pairs, params)):
        want = F.to_dtype(F.resize(F.rotate(img, p["rotation"]["angle"]), [24], antialias=True), torch.float32,
                          scale=True)
        assert float(((got[k] - want).abs() * 255 > 1 + 1e-3).float().mean()) <= 0.01, k


@pytest.mark.parametrize("steps, match", [
    ([T.RandomRotation(10, expand=True), T.Resize(32)], "(?s)RandomRotation.*before Resize alone"),
    ([T.RandomShortestSize([24, 32])], "RandomShortestSize alone gives differently sized images"),
])
def test_what_would_give_each_image_its_own_size_is_still_refused(steps, match):
    with pytest.raises(TransformError, match=match):
        T.Compose(steps)


def test_v2s_resize_of_the_longer_side(pairs):
    """v2's Resize(None, max_size=m): the longer side to m, the shorter truncated, alone
    (a batch of one output size) or before a crop; torchvision's sizes and pixels (within a
    level: it rounds the uint8 image after resizing)."""
    import torchvision.transforms.v2 as v2

    for steps in ([v2.Resize(None, max_size=50)], [v2.Resize(None, max_size=50), v2.CenterCrop(30)]):
        tv = v2.Compose([*steps, v2.ToImage(), v2.ToDtype(torch.float32, scale=True)])
        tf = T.Compose.from_torchvision(tv)
        got = tf(pairs[:2])
        for k in range(2):
            want = tv(pairs[k])
            assert got[k].shape == want.shape, steps
            assert float((got[k] - want).abs().max()) * 255 <= 1.0 + 1e-3, steps
    assert T.Resize(None, max_size=50).output_size(30, 90) == (16, 50)
    with pytest.raises(ValueError, match="max_size must be an integer when size is None"):
        T.Resize(None)


@pytest.mark.parametrize("keep", [None, "ram"])
def test_a_sliver_made_huge_by_the_resize_is_its_samples_error(tmp_path, photos, keep):
    """A 2-pixel-high strip under Resize(24) would be 24 x 7,200: over max_pixels it is its
    sample's error, named, before anything is made of it; skipped, the rest go on (a batch
    of slivers only, skipped, yields nothing)."""
    a = np.ascontiguousarray(next(iter(photos.values()))[:60, :90])
    sliver = np.ascontiguousarray(np.tile(a[:2], (1, 7, 1))[:, :600])
    samples = [{"__key__": "strip", "jpg": encode(sliver, quality=95), "cls": b"0"}, {"__key__": "strip2",
               "jpg": encode(sliver, quality=95), "cls": b"0"}]
    samples += [{"__key__": f"k{i}", "jpg": encode(a, quality=95), "cls": b"1"} for i in range(3)]
    shard = make_shard(tmp_path / "s.tar", samples)
    kw = {"batch_size": 2, "transform": v1.Compose([v1.Resize(24), v1.ToTensor()]), "shuffle": False,
          "max_pixels": 100_000, **({} if keep is None else {"keep": keep})}
    with pytest.raises(DecodeError, match=r"(?s)2x600, resized to 24x7200: over the limit of 100000.*key 'strip'"):
        list(gpudecode.Loader(shard, **kw))
    ld = gpudecode.Loader(shard, on_error="skip", **kw)
    got = torch.cat([b for b, _ in ld])
    assert got.shape == (3, 3, 24, 36) and [s.key for s in ld.skipped] == ["strip", "strip2"]


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_a_random_crop_then_a_resize_is_torchvisions(photos, mode):
    """`[RandomCrop(300), Resize(224), ...]` (a crop of a fixed size at a random place,
    then resized, as fine-tuning scripts write it): the crop resized in one pass of the
    kernel, as CenterCrop + Resize is, and torchvision's F.crop then F.resize of the float
    image replaying the same draws (bicubic's overshoot clamped, as torchvision's uint8 and
    PIL images have it); the decoder asked for the crop alone. A crop larger than its
    image (pad_if_needed) is that sample's error; a crop padded with the edge is refused."""
    interpolation = v1.InterpolationMode(mode)
    tf = T.Compose.from_torchvision(v1.Compose([v1.RandomCrop((280, 330)), v1.Resize(150, interpolation=interpolation),
                                                v1.ToTensor(), v1.Normalize((0.5,) * 3, (0.25,) * 3)]))
    assert tf.plan.crop_resized and tf.plan.out_size == (150, 176)
    imgs = [chw(p) for p in photos.values()]
    sizes = [tuple(i.shape[1:]) for i in imgs]
    params = tf.make_params(sizes, 4)
    assert tf.decode_boxes(params, sizes) == [tuple(p["crop"]) for p in params]  # (the crop alone decoded)
    got = tf(imgs, params)
    for k, (img, p) in enumerate(zip(imgs, params)):
        t, l, h, w = p["crop"]
        assert (h, w) == (280, 330) and 0 <= t <= sizes[k][0] - h and 0 <= l <= sizes[k][1] - w
        x = F.resize(F.crop(F.to_dtype(img, torch.float32, scale=True), t, l, h, w), [150], interpolation=interpolation,
                     antialias=True).clamp(0, 1)
        err = (got[k] - F.normalize(x, [0.5] * 3, [0.25] * 3)).abs() * 0.25 * 255
        assert float(err.max()) < 1e-2, (k, float(err.max()))
    small = T.Compose([T.RandomCrop(64, pad_if_needed=True), T.Resize(32), T.ToDtype(torch.float32, scale=True)])
    assert small([imgs[0][:, :80, :90]]).shape == (1, 3, 32, 32)
    with pytest.raises(ValueError, match=r"RandomCrop's 64x64 crop is larger than the 50x90 image, and a Resize"):
        small([imgs[0][:, :50, :90]])
    with pytest.raises(TransformError, match=r"(?s)Resize after RandomCrop cannot be fused: a Resize of the crop only, "
                                             r"and a crop padded with a fill\s+alone"):
        T.Compose([T.RandomCrop(64, padding=4, padding_mode="edge"), T.Resize(32)])  # (a fill: test_padded_crop_resized)


def test_a_resize_then_a_random_crop_then_a_resize(photos):
    """`[Resize(300), RandomCrop(256), Resize(224), ...]`: the first Resize of each whole
    image (torchvision's F.resize of a uint8 image, bit for bit: torch's own ops), then its
    crop resized by the kernel as above; its size drawn under a key of its own, so the
    geometry's Resize does not take it. torchvision's ops replaying the draws."""
    tf = T.Compose.from_torchvision(v1.Compose([v1.Resize(120), v1.RandomCrop((96, 100)), v1.Resize(64),
                                                v1.ToTensor()]))
    assert isinstance(tf.plan.first[0], T.Resize) and tf.plan.crop_resized and tf.plan.out_size == (64, 66)
    imgs = [chw(p[::2, ::2]) for p in photos.values()]
    sizes = [tuple(i.shape[1:]) for i in imgs]
    params = tf.make_params(sizes, 7)
    assert tf.decode_boxes(params, sizes) == [(0, 0, h, w) for h, w in sizes]  # (whole images: the first pass's)
    got = tf(imgs, params)
    for k, (img, p) in enumerate(zip(imgs, params)):
        resized = F.resize(img, [120], antialias=True)
        assert tuple(p["first_resize"]) == tuple(resized.shape[1:])
        x = F.resize(F.crop(F.to_dtype(resized, torch.float32, scale=True), *p["crop"]), [64], antialias=True)
        assert float((got[k] - x).abs().max()) * 255 < 1e-2, k


def test_a_random_crop_then_a_resize_in_the_loader(tmp_path, photos):
    """Through the Loader from PNG shards, two epochs: each batch the Compose's call on
    Pillow's decode with the Loader's draws, value for value."""
    imgs = [np.ascontiguousarray(p[:200, :260]) for p in photos.values()]
    url = make_shard(tmp_path / "crop-000000.tar", [{"__key__": f"k{i:03d}", "png": encode(a, "PNG"),
                                                     "cls": b"%d" % i} for i, a in enumerate(imgs)])
    tf = T.Compose([T.RandomCrop((120, 150)), T.Resize((60, 64)), T.RandomHorizontalFlip(),
                    T.ToDtype(torch.float32, scale=True)])
    ld = gpudecode.Loader([url], batch_size=len(imgs), transform=tf, device="cpu", shuffle=False, seed=9)
    decoded = [chw(np.asarray(Image.open(io.BytesIO(encode(a, "PNG"))).convert("RGB"))) for a in imgs]
    for epoch in (0, 1):
        ld.set_epoch(epoch)
        (images, labels), = list(ld)
        assert images.shape == (len(imgs), 3, 60, 64) and labels.tolist() == list(range(len(imgs)))
        params = tf.make_params([tuple(d.shape[1:]) for d in decoded], 9, epoch=epoch, indices=range(len(imgs)))
        assert torch.equal(images, tf(decoded, params)), epoch
