"""A flip before the geometry (`[RandomHorizontalFlip(), RandomResizedCrop(224), ...]`, as
many scripts write it): torchvision flips the image, then crops the flipped one at the drawn
window. The kernel flips last, so a flipped sample reads its window mirrored. References:
torchvision's functional ops replaying each sample's draws in the Compose's order, on real
photographs; and the same Compose with the flip after the geometry on the images flipped
beforehand (the same draws: the same pixels)."""
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


def chw(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a.transpose(2, 0, 1)))


@pytest.fixture(scope="module")
def images(photos):
    """Real photographs at odd sizes (a centre crop's remainder odd both ways)."""
    return [chw(np.ascontiguousarray(p[k:k + 81 + 2 * k, 2 * k:2 * k + 97 - k])) for k, p in enumerate(photos.values())]


def _flipped(img: torch.Tensor, p: dict) -> torch.Tensor:
    img = F.horizontal_flip(img) if p.get("flip") else img
    return F.vertical_flip(img) if p.get("vflip") else img


# each geometry: our steps, and torchvision's replay of one sample's draws on the (flipped) float image
GEOMETRIES = {
    "RandomResizedCrop": ([T.RandomResizedCrop(24)],
                          lambda x, p: F.resized_crop(x, *p["crop"], [24, 24], antialias=True)),
    "RandomCrop, padding": ([T.RandomCrop(72, padding=(3, 1, 6, 2))],
                            lambda x, p: F.crop(x, *p["crop"])),
    "RandomCrop, reflect": ([T.RandomCrop(80, padding=5, padding_mode="reflect")],
                            lambda x, p: F.crop(F.pad(x, [5], padding_mode="reflect"), p["crop"][0] + 5,
                                                p["crop"][1] + 5, 80, 80)),
    "Resize + CenterCrop": ([T.Resize(37), T.CenterCrop(30)],
                            lambda x, p: F.center_crop(F.resize(x, [37], antialias=True), [30, 30])),
    "CenterCrop, padded": ([T.CenterCrop((90, 110))], lambda x, p: F.center_crop(x, [90, 110])),
    "CenterCrop + Resize": ([T.CenterCrop(61), T.Resize((20, 28))],
                            lambda x, p: F.resize(F.center_crop(x, [61, 61]), [20, 28], antialias=True)),
    "RandomCrop + Resize": ([T.RandomCrop((52, 61)), T.Resize(26)],
                            lambda x, p: F.resize(F.crop(x, *p["crop"]), [26], antialias=True)),
    "Resize((h, w))": ([T.Resize((33, 45))], lambda x, p: F.resize(x, [33, 45], antialias=True)),
    "RandomResizedCrop + CenterCrop": ([T.RandomResizedCrop((30, 34)), T.CenterCrop((23, 28))],
                                       lambda x, p: F.center_crop(F.resized_crop(x, *p["crop"], [30, 34], antialias=True),
                                                                  [23, 28])),
    "RandomResizedCrop + RandomCrop, padding": ([T.RandomResizedCrop(30), T.RandomCrop(28, padding=(3, 1, 0, 2))],
                                                lambda x, p: F.crop(F.resized_crop(x, *p["crop"], [30, 30], antialias=True),
                                                                    *p["window"])),
}


@pytest.mark.parametrize("name", list(GEOMETRIES))
def test_a_flip_before_the_geometry_is_torchvisions_flip_then_crop(images, name):
    geometry, replay = GEOMETRIES[name]
    first = T.Compose([T.RandomHorizontalFlip(), T.RandomVerticalFlip(), *geometry,
                       T.ToDtype(torch.float32, scale=True)])
    assert first.plan.mirror == (True, True)
    sizes = [tuple(i.shape[1:]) for i in images]
    params = first.make_params(sizes, 3) + first.make_params(sizes, 4)  # (every flip on some image)
    imgs = images + images
    assert {(p["flip"], p["vflip"]) for p in params} == {(False, False), (False, True), (True, False), (True, True)}
    got = first(imgs, params)
    # torchvision, in the Compose's order: the flips, then the geometry on the flipped image
    worst = 0.0
    for k, (img, p) in enumerate(zip(imgs, params)):
        want = replay(_flipped(F.to_dtype(img, torch.float32, scale=True), p), p)
        assert want.shape == got[k].shape, (name, k)
        err = (got[k] - want).abs() * 255
        worst = max(worst, float(err.max()))
        assert (err > 1 + 1e-3).float().mean() <= 0.001, (name, k, p, float(err.max()))
    assert worst <= 16, worst
    # the same draws with the flips after the geometry, on the images flipped beforehand: the same pixels
    after = T.Compose([*geometry, T.ToDtype(torch.float32, scale=True)])
    plain = [{**p, "flip": False, "vflip": False} for p in params]
    torch.testing.assert_close(after([_flipped(i, p) for i, p in zip(imgs, params)], plain), got,
                               atol=2e-6, rtol=0)


def test_a_flip_before_the_crop_with_native_draws_and_the_decoders_window(images):
    """RandomResizedCrop with the native draws: the window the decoder is asked for (the
    kernel's) is the drawn crop mirrored on flipped samples; the Python path agrees."""
    tf = T.Compose([T.RandomHorizontalFlip(), T.RandomResizedCrop(24), T.ColorJitter(0.3, 0.3),
                    T.Normalize([0.5] * 3, [0.25] * 3)])
    assert tf.native_spec is not None and tf.plan.mirror == (True, False)
    sizes = [tuple(i.shape[1:]) for i in images] * 4
    native, python = tf.draw_batch(sizes, 7), tf._python_params(sizes, 7)
    assert native.dicts() == python
    windows = tf.decode_boxes(native, sizes)
    assert windows == tf.decode_boxes(python, sizes)
    for (t, l, h, w), p, (_, iw) in zip(windows, python, sizes):
        assert (t, h, w) == tuple(p["crop"][i] for i in (0, 2, 3))
        assert l == (iw - p["crop"][1] - w if p["flip"] else p["crop"][1])
    assert any(p["flip"] for p in python) and any(not p["flip"] for p in python)
    imgs = images * 4
    torch.testing.assert_close(tf(imgs, native), tf(imgs, python), atol=0, rtol=0)


@pytest.mark.parametrize("keep", [None, "ram"])
def test_the_loader_takes_a_flip_first_recipe_as_written(images, keep):
    """v1's `[RandomHorizontalFlip(), RandomCrop(32, padding=4), ToTensor(), Normalize]`
    (a CIFAR script's order) in the Loader, streamed and kept: each batch equals the
    Compose's call with the Loader's draws, and flipped samples are torchvision's flip
    then crop."""
    imgs = torch.stack([i[:, :40, :40] for i in images] * 3)
    steps = v1.Compose([v1.RandomHorizontalFlip(), v1.RandomCrop(32, padding=4), v1.ToTensor(),
                        v1.Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))])
    ld = gpudecode.Loader(TensorDataset(imgs, torch.arange(len(imgs))), transform=steps, batch_size=4, seed=2,
                          shuffle=False, **({} if keep is None else {"keep": keep}))
    tf = ld.transform
    assert tf.plan.mirror == (True, False)
    got = torch.cat([b for b, _ in ld])
    params = tf.make_params([(40, 40)] * len(imgs), ld.seed, indices=list(range(len(imgs))))
    for k, p in enumerate(params):
        x = F.to_dtype(_flipped(imgs[k], p), torch.float32, scale=True)
        want = F.normalize(F.crop(x, *p["crop"]), [0.5] * 3, [0.25] * 3)
        assert (got[k] - want).abs().max() < 1e-5, (k, p)


def test_masks_follow_a_flip_first(photos):
    """Masks moved by a flip-first Compose: torchvision's flip then crop of each mask
    (RandomCrop with padding, exact), and for a RandomResizedCrop the flip-after Compose's
    masks of the masks flipped beforehand (the same draws)."""
    img = chw(np.ascontiguousarray(list(photos.values())[1][:70, :90]))
    mask = (img[0] // 32).to(torch.uint8)  # (eight classes, from the photograph)
    sizes = [(70, 90)] * 8
    tf = T.Compose([T.RandomHorizontalFlip(), T.RandomCrop(48, padding=3)])
    params = tf.make_params(sizes, 1)
    assert any(p["flip"] for p in params) and any(not p["flip"] for p in params)
    got = tf.masks([mask] * 8, params)
    for k, p in enumerate(params):
        assert torch.equal(got[k], F.crop(_flipped(mask[None], p), *p["crop"])[0]), (k, p)
    rrc = T.Compose([T.RandomHorizontalFlip(), T.RandomVerticalFlip(), T.RandomResizedCrop(40)])
    params = rrc.make_params(sizes, 2)
    plain = [{**p, "flip": False, "vflip": False} for p in params]
    want = T.Compose([T.RandomResizedCrop(40)]).masks([_flipped(mask[None], p)[0] for p in params], plain)
    assert torch.equal(rrc.masks([mask] * 8, params), want)
    assert any(p["flip"] for p in params) and any(p["vflip"] for p in params)


def test_boxes_follow_a_flip_first():
    """Boxes moved by a flip-first Compose are torchvision v2's: flip, then crop and
    resize, on a tv_tensors.BoundingBoxes with the same draws."""
    from torchvision import tv_tensors

    tf = T.Compose([T.RandomHorizontalFlip(), T.RandomVerticalFlip(), T.RandomResizedCrop(40, scale=(0.3, 1.0))])
    sizes = [(70, 90)] * 12
    boxes = [np.array([[5.0, 8.0, 60.0, 50.0], [30.0, 2.0, 88.0, 69.0], [40.5, 20.25, 47.0, 33.5]])] * 12
    params = tf.draw_batch(sizes, 5)
    got = tf.boxes(boxes, params, min_size=0.0, min_area=0.0)
    for k, p in enumerate(params):
        b = tv_tensors.BoundingBoxes(torch.from_numpy(boxes[k]), format="XYXY", canvas_size=(70, 90))
        b = F.horizontal_flip(b) if p["flip"] else b
        b = F.vertical_flip(b) if p["vflip"] else b
        want = F.resized_crop(b, *p["crop"], [40, 40])
        kept = (want[:, 2] > want[:, 0]) & (want[:, 3] > want[:, 1])
        torch.testing.assert_close(got[k]["boxes"].double(), want[kept].as_subclass(torch.Tensor).double(),
                                   atol=1e-4, rtol=0)
    assert {(p["flip"], p["vflip"]) for p in params} == {(False, False), (False, True), (True, False), (True, True)}


def test_what_a_flip_first_refuses_and_what_it_leaves():
    with pytest.raises(TransformError, match="RandomHorizontalFlip before RandomIoUCrop cannot be fused"):
        T.Compose([T.RandomHorizontalFlip(), T.RandomIoUCrop(), T.Resize((32, 32))])
    with pytest.raises(TransformError, match="before Resize with nearest interpolation cannot be fused"):
        T.Compose.from_torchvision(tv.Compose([tv.RandomVerticalFlip(), tv.Resize(
            (8, 8), interpolation=tv.InterpolationMode.NEAREST)]))
    with pytest.raises(TransformError, match="two RandomHorizontalFlips"):
        T.Compose([T.RandomHorizontalFlip(), T.RandomResizedCrop(8), T.RandomHorizontalFlip()])
    flip = T.RandomHorizontalFlip()  # (one object twice: two flips, refused as two)
    with pytest.raises(TransformError, match="two RandomHorizontalFlips"):
        T.Compose([flip, T.RandomResizedCrop(8), flip])
    # an RGB among the leading flips stays where it is: a grey image made three channels from the start
    assert T.Compose([T.RandomHorizontalFlip(), T.RGB(), T.RandomResizedCrop(8)], grey=True).channels == 3
    # a flip with no geometry after it, or after the geometry: as before
    assert T.Compose([T.RandomHorizontalFlip(), T.ToDtype(torch.float32, scale=True)]).plan.mirror == (False, False)
    assert T.Compose([T.RandomResizedCrop(8), T.RandomHorizontalFlip()]).plan.mirror == (False, False)
    both = T.Compose.from_torchvision(tv.Compose([tv.RandomVerticalFlip(), tv.RandomResizedCrop(8),
                                                  tv.RandomHorizontalFlip()]))
    assert both.plan.mirror == (False, True)


def test_a_flip_between_a_random_resized_crop_and_its_crop(images, photos):
    """`[RandomResizedCrop(s), RandomHorizontalFlip(), RandomVerticalFlip(), RandomCrop(c)]`
    (a public repository's; and with CenterCrop): torchvision flips the resized crop, then
    crops it at the drawn window. The kernel reads the window mirrored in the resized crop's
    frame (the first crop as drawn) and flips last: torchvision's pixels to float32
    rounding on real photographs, with padding and pad_if_needed; native draws equal to the
    Python path's; masks and boxes as torchvision v2 moves them; the first crop (the
    decoder's window) not mirrored."""
    from torchvision import tv_tensors

    sizes = [tuple(i.shape[1:]) for i in images] * 3
    cases = [([T.RandomResizedCrop(40), T.RandomHorizontalFlip(), T.RandomVerticalFlip(),
               T.RandomCrop(30, padding=(3, 1, 0, 2))], (40, 40)),
             ([T.RandomResizedCrop((40, 36)), T.RandomHorizontalFlip(), T.CenterCrop((30, 44))], (40, 36)),
             ([T.RandomResizedCrop(40), T.RandomVerticalFlip(), T.RandomCrop(44, pad_if_needed=True)], (40, 40))]
    for steps, frame in cases:
        tf = T.Compose([*steps, T.ToDtype(torch.float32, scale=True)])
        assert tf.plan.rrc_window and any(tf.plan.window_mirror) and tf.plan.mirror == (False, False)
        assert tf.native_spec is not None
        d = tf.draw_batch(sizes, 3)
        assert list(d) == tf._python_params(sizes, 3)
        np.testing.assert_array_equal(d.boxes(), [p["crop"] for p in d])  # (the first crop as drawn)
        assert len({(p["flip"], p.get("vflip", False)) for p in d}) >= 2
        got = tf(images * 3, d)
        for k, (img, p) in enumerate(zip(images * 3, d)):
            x = F.resized_crop(F.to_dtype(img, torch.float32, scale=True), *p["crop"], list(frame), antialias=True)
            want = F.crop(_flipped(x, p), *p["window"])  # (F.crop pads with zeros past the frame)
            assert float((got[k] - want).abs().max()) < 1e-5, (steps, k, p)
    img = chw(np.ascontiguousarray(list(photos.values())[1][:70, :90]))
    mask = (img[0] // 32).to(torch.uint8)
    boxes = [np.array([[5.0, 8.0, 60.0, 50.0], [30.0, 2.0, 88.0, 69.0], [40.5, 20.25, 47.0, 33.5]])] * 12
    tf = T.Compose(cases[0][0])
    d = tf.draw_batch([(70, 90)] * 12, 5)
    masks, got = tf.masks([mask] * 12, d, fill=0), tf.boxes(boxes, d, min_size=0.0, min_area=0.0)
    for k, p in enumerate(d):
        m = F.crop(_flipped(F.resized_crop(tv_tensors.Mask(mask[None]), *p["crop"], [40, 40]), p), *p["window"])
        assert torch.equal(masks[k], m[0].as_subclass(torch.Tensor)), (k, p)
        b = tv_tensors.BoundingBoxes(torch.from_numpy(boxes[k]), format="XYXY", canvas_size=(70, 90))
        b = F.crop(_flipped(F.resized_crop(b, *p["crop"], [40, 40]), p), *p["window"])  # (min_size 0: all kept)
        torch.testing.assert_close(got[k]["boxes"].double(), b.as_subclass(torch.Tensor).double(), atol=1e-4, rtol=0)
    assert {(p["flip"], p["vflip"]) for p in d} == {(False, False), (False, True), (True, False), (True, True)}
