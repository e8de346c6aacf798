"""A flip between a Resize and the crop (person re-identification's `[Resize((256, 128)),
RandomHorizontalFlip(), Pad(10), RandomCrop((256, 128)), ...]`, CIFAR scripts' `[Resize(32),
RandomHorizontalFlip(), RandomCrop(32, padding=4)]`; refused before): a resize of a
mirrored image is the mirrored resize, so the flip is taken before the Resize, where a
flip first is fused (the crop's window mirrored, the flip last). Pixels against
torchvision's ops in the Compose's order replaying each image's draws, on photographs;
through the Loader; a nearest Resize still refused."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision.transforms as tv1
import torchvision.transforms.v2 as tv
import torchvision.transforms.v2.functional as F

from gpudecode import transforms as T
from gpudecode.errors import TransformError
from conftest import loader_is_compose

f32 = tv.ToDtype(torch.float32, scale=True)


@pytest.fixture(scope="module")
def photo_batch(photos):
    return [torch.from_numpy(np.ascontiguousarray(p[k::2, ::3].transpose(2, 0, 1))) for k, p in
            enumerate(photos.values())] * 2


def _flips(x: torch.Tensor, p: dict) -> torch.Tensor:
    """`x` (an image, a Mask, BoundingBoxes) flipped as the sample's draws `p` say."""
    x = F.horizontal_flip(x) if p.get("flip") else x
    return F.vertical_flip(x) if p.get("vflip") else x


def test_the_reid_recipe_is_torchvisions(photo_batch):
    """`[Resize((64, 32)), flip, Pad(10), RandomCrop((64, 32))]` as written (v1): torchvision
    resizes the image, flips it, pads it and crops it; ours is one pass, the Pad the crop's
    padding and the crop's window of the resize mirrored, the flip last: torchvision's ops
    on the float image within float rounding, and within a level of its uint8 chain as
    written (which rounds the resize). The steps are kept as written; both flips drawn; so
    with a vertical flip too."""
    for flips in ([tv1.RandomHorizontalFlip()], [tv1.RandomHorizontalFlip(), tv1.RandomVerticalFlip()]):
        tvc = tv1.Compose([tv1.Resize((64, 32)), *flips, tv1.Pad(10), tv1.RandomCrop((64, 32))])
        ours = T.Compose.from_torchvision(tvc)
        assert [type(t).__name__ for t in ours.plan.steps] == [type(t).__name__ for t in tvc.transforms]
        assert not ours.plan.first and ours.plan.canvas is None and ours.plan.mirror[0]
        floats = T.Compose.from_torchvision(tv1.Compose([*tvc.transforms, tv.ToDtype(torch.float32, scale=True)]))
        sizes = [tuple(i.shape[1:]) for i in photo_batch]
        params = ours.make_params(sizes, 3)
        got, got_f = ours(photo_batch, params), floats(photo_batch, params)
        assert {p["flip"] for p in params} == {False, True}
        for k, (img, p) in enumerate(zip(photo_batch, params)):
            t, l, h, w = p["crop"]  # (in the resized image: the padding off)
            x = F.pad(_flips(F.resize(f32(img), [64, 32], antialias=True), p), [10])
            assert float((got_f[k] - F.crop(x, t + 10, l + 10, h, w)).abs().max()) * 255 < 1e-3, (k, p)
            x = F.pad(_flips(F.resize(img, [64, 32], antialias=True), p), [10])
            assert int((got[k].int() - F.crop(x, t + 10, l + 10, h, w).int()).abs().max()) <= 1, (k, p)


@pytest.mark.parametrize("name", ["RandomCrop, padding", "RandomResizedCrop", "CenterCrop"])
def test_a_flip_after_the_resize_before_each_crop(photo_batch, name):
    """The flip between a Resize and a RandomCrop with padding (the kernel resamples the
    window), a RandomResizedCrop (each image resized first) or a CenterCrop: torchvision's
    float ops in the Compose's order, within float rounding."""
    crop, replay = {
        "RandomCrop, padding": (T.RandomCrop(32, padding=4), lambda x, p: F.crop(x, *p["crop"])),
        "RandomResizedCrop": (T.RandomResizedCrop(28), lambda x, p: F.resized_crop(x, *p["crop"], [28, 28],
                                                                                     antialias=True)),
        "CenterCrop": (T.CenterCrop((30, 26)), lambda x, p: F.center_crop(x, [30, 26])),
    }[name]
    resize = T.Resize((32, 32)) if name == "RandomCrop, padding" else T.Resize(36)
    tf = T.Compose([resize, T.RandomHorizontalFlip(), T.RandomVerticalFlip(0.3), crop,
                    T.ToDtype(torch.float32, scale=True)])
    sizes = [tuple(i.shape[1:]) for i in photo_batch]
    params = tf.make_params(sizes, 7)
    got = tf(photo_batch, params)
    for k, (img, p) in enumerate(zip(photo_batch, params)):
        x = F.resize(img, resize.size if isinstance(resize.size, tuple) else [resize.size], antialias=True)
        x = f32(x) if tf.plan.first else F.resize(f32(img), list(x.shape[1:]), antialias=True)
        want = replay(_flips(x, p), p)
        assert got[k].shape == want.shape and float((got[k] - want).abs().max()) * 255 < 1e-3, (name, k, p)


def test_through_the_loader(tmp_path, photos):
    """The re-identification recipe through the Loader (a PNG shard, two epochs): the
    Compose called on Pillow's decode with the Loader's draws."""
    imgs = [np.ascontiguousarray(photos[n][::3, ::5]) for n in ("astronaut", "coffee", "chelsea", "rocket")]
    tf = T.Compose([T.Resize((48, 24)), T.RandomHorizontalFlip(), T.Pad(6), T.RandomCrop((48, 24)),
                    T.ToDtype(torch.float32, scale=True), T.Normalize([0.5] * 3, [0.25] * 3), T.RandomErasing()])
    loader_is_compose(tmp_path, imgs, tf, 2)


def test_a_nearest_resize_keeps_its_refusal():
    """A nearest resize is not mirror-symmetric: the flip after it stays refused, saying
    what it said before."""
    with pytest.raises(TransformError, match=r"RandomCrop after other steps cannot be fused"):
        T.Compose([T.Resize((32, 32), interpolation="nearest"), T.RandomHorizontalFlip(), T.RandomCrop(28)])


def test_boxes_and_masks_follow_the_reid_recipe(photos):
    """Boxes and masks follow `[Resize((64, 32)), flip, Pad(10), RandomCrop((64, 32))]` (one
    pass, no image made first): torchvision's resize, flip, pad and crop of a BoundingBoxes
    and a Mask (nearest), the same boxes kept."""
    from torchvision import tv_tensors

    from test_boxes import random_boxes, tv_sanitized
    from test_masks import centre, slic_mask

    rng = np.random.default_rng(6)
    tf = T.Compose([T.Resize((64, 32)), T.RandomHorizontalFlip(), T.Pad(10), T.RandomCrop((64, 32))])
    sizes = [(120, 50), (97, 61), (64, 64), (150, 40)] * 3
    params = tf.make_params(sizes, 1)
    assert {p["flip"] for p in params} == {False, True}
    boxes = [random_boxes(rng, h, w) for h, w in sizes]
    names = sorted(photos)
    masks = [torch.from_numpy(slic_mask(centre(photos[names[k % len(names)]], h, w))) for k, (h, w) in enumerate(sizes)]
    got, moved = tf.boxes(boxes, params, sizes=sizes), tf.masks(masks, params, fill=255)
    for k, (p, size) in enumerate(zip(params, sizes)):
        b = F.resize(tv_tensors.BoundingBoxes(torch.as_tensor(boxes[k]), format="XYXY", canvas_size=size), [64, 32])
        m = F.resize(tv_tensors.Mask(masks[k][None]), [64, 32])
        b, m = (F.horizontal_flip(b), F.horizontal_flip(m)) if p["flip"] else (b, m)
        t, l, h, w = p["crop"]
        b, m = F.crop(F.pad(b, [10]), t + 10, l + 10, h, w), F.crop(F.pad(m, [10], fill=255), t + 10, l + 10, h, w)
        want, _ = tv_sanitized(b)
        assert torch.allclose(got[k]["boxes"], want, atol=1e-4), k
        assert torch.equal(moved[k], m[0].as_subclass(torch.Tensor)), k
