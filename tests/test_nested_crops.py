"""A crop of a crop (`[Resize(256), CenterCrop(256), RandomCrop(224), ...]`, as tutorials
write it; `[flip, vflip, CenterCrop(256), RandomCrop(224)]`; refused before): one crop of
the image at the two offsets added. Pixels against torchvision's two crops replaying the
draws on photographs (padded where the image is smaller than the first crop, flipped
first, resized first), the second crop's offsets over its whole range, a padded first
crop, boxes and masks against torchvision's two crops, the Loader, the refusals."""
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
from conftest import loader_is_compose
from test_boxes import _padded_crop as box_crop, random_boxes, tv_sanitized
from test_masks import _padded_crop as mask_crop, centre, slic_mask

f32 = tv.ToDtype(torch.float32, scale=True)


@pytest.fixture(scope="module")
def photo_batch(photos):
    """The photographs, and three cut smaller than the first crop (64) on a side."""
    out = [torch.from_numpy(np.ascontiguousarray(p.transpose(2, 0, 1))) for p in photos.values()]
    coffee = photos["coffee"]
    out += [torch.from_numpy(np.ascontiguousarray(a.transpose(2, 0, 1)))
            for a in (coffee[:50, :90], coffee[100:190, 40:100], coffee[:61, :57])]
    return out


def _centre(size, crop):
    """torchvision's CenterCrop offsets (top, left) of `crop` in an image of `size` (a side
    shorter than the crop padded by half the difference, rounded down, before it)."""
    return tuple(-((c - s) // 2) if c > s else int(round((s - c) / 2.0)) for s, c in zip(size, crop))


def _second(p, frame, first=(64, 64)):
    """The second crop's offsets in the first crop's output, from the drawn crop."""
    t0, l0 = _centre(frame, first)
    i, j = p["crop"][0] - t0, p["crop"][1] - l0
    assert 0 <= i <= first[0] - p["crop"][2] and 0 <= j <= first[1] - p["crop"][3], (p, frame)
    return i, j


def test_the_tutorial_recipe_is_torchvisions_two_crops(photo_batch):
    """`[Resize(64), CenterCrop(64), RandomCrop(56), flip, ToTensor(), Normalize]` (v1, on
    PIL images): the resize in float, then torchvision's CenterCrop and its crop at the
    second crop's offsets, then the flip, within float rounding; each second offset from
    0 to 8 drawn on each axis."""
    steps = [tv1.Resize(64), tv1.CenterCrop(64), tv1.RandomCrop(56), tv1.RandomHorizontalFlip(), tv1.ToTensor(),
             tv1.Normalize([0.5] * 3, [0.25] * 3)]
    ours = T.Compose.from_torchvision(tv1.Compose(steps))
    assert ours.out_size == (56, 56) and not ours.plan.first and ours.plan.native_spec is not None  # (drawn natively)
    sizes = [tuple(i.shape[1:]) for i in photo_batch]
    rows, cols = set(), set()
    for seed in range(6):
        params = ours.make_params(sizes, seed)
        got = ours(photo_batch, params)
        for k, (img, p) in enumerate(zip(photo_batch, params)):
            x = F.resize(f32(img), [64], antialias=True)
            assert tuple(p["resize"]) == tuple(x.shape[1:])
            i, j = _second(p, x.shape[1:])
            rows.add(i), cols.add(j)
            want = F.crop(F.center_crop(x, [64, 64]), i, j, 56, 56)
            want = F.normalize(F.horizontal_flip(want) if p["flip"] else want, [0.5] * 3, [0.25] * 3)
            assert float((got[k] - want).abs().max()) * 0.25 * 255 < 1e-3, (seed, k)
    assert rows == cols == set(range(9))


def test_flipped_first_and_padded_where_the_image_is_smaller(photo_batch):
    """`[flip, vflip, CenterCrop(64), RandomCrop(56)]` (a skin-lesion script's) on uint8
    photographs, some smaller than 64 on a side: torchvision's flips of the image, its
    CenterCrop (zeros where it pads) and its crop, bit for bit."""
    tf = T.Compose([T.RandomHorizontalFlip(), T.RandomVerticalFlip(), T.CenterCrop(64), T.RandomCrop(56)])
    assert tf.plan.mirror == (True, True)
    sizes = [tuple(i.shape[1:]) for i in photo_batch]
    for seed in range(4):
        params = tf.make_params(sizes, seed)
        got = tf(photo_batch, params)
        for k, (img, p) in enumerate(zip(photo_batch, params)):
            x = F.horizontal_flip(img) if p["flip"] else img
            x = F.vertical_flip(x) if p["vflip"] else x
            want = F.crop(F.center_crop(x, [64, 64]), *_second(p, x.shape[1:]), 56, 56)
            assert torch.equal(got[k], want), (seed, k)


def test_a_padded_first_crop():
    """`[RandomCrop(36, padding=4), CenterCrop(32)]` (the second crop unpadded, inside the
    first): the padded image's window at the offsets added, bit for bit, its zeros where
    the first crop reaches past the image; the offsets' spread is the first crop's."""
    rng = np.random.default_rng(3)
    imgs = [torch.from_numpy(rng.integers(0, 256, (3, 32, 32), dtype=np.uint8)) for _ in range(64)]
    tf = T.Compose([T.RandomCrop(36, padding=4), T.CenterCrop(32)])
    params = tf.make_params([(32, 32)] * 64, 2)
    got = tf(imgs, params)
    for k, (img, p) in enumerate(zip(imgs, params)):
        t, l, h, w = p["crop"]
        assert -4 <= t <= 4 and -4 <= l <= 4 and (h, w) == (32, 32)
        assert torch.equal(got[k], F.crop(F.pad(img, [4]), t + 4, l + 4, 32, 32)), k
    assert {p["crop"][0] for p in params} == set(range(-2, 3))  # (the first crop's 0..8, less the centre's 2)


def test_boxes_and_masks_follow_both_crops(photos):
    """Compose.boxes and Compose.masks: torchvision's CenterCrop, then its crop, on a
    BoundingBoxes and a Mask, with the second crop's offsets; the same boxes kept."""
    rng = np.random.default_rng(4)
    tf = T.Compose([T.CenterCrop((40, 44)), T.RandomCrop((32, 36)), T.RandomHorizontalFlip()])
    sizes = [(37, 61), (50, 47), (64, 64), (31, 70), (45, 45), (52, 40)] * 2
    params = tf.make_params(sizes, 5)
    boxes = [random_boxes(rng, h, w) for h, w in sizes]
    got = tf.boxes(boxes, params, sizes=sizes)
    names = sorted(photos)
    masks = [torch.from_numpy(slic_mask(centre(photos[names[k % len(names)]], h, w))) for k, (h, w) in enumerate(sizes)]
    moved = tf.masks(masks, params, fill=255)
    for k, (p, size) in enumerate(zip(params, sizes)):
        i, j = _second(p, size, (40, 44))
        # (the first crop where the image's CenterCrop puts it: torchvision's center_crop of boxes rounds a padded
        # offset otherwise than that of their image, -1.5 to -2 where the image pads 1; test_boxes' reference alike)
        first = (*_centre(size, (40, 44)), 40, 44)
        b = tv_tensors.BoundingBoxes(torch.as_tensor(boxes[k]), format="XYXY", canvas_size=size)
        b = F.crop(box_crop(b, first), i, j, 32, 36)
        m = F.crop(mask_crop(tv_tensors.Mask(masks[k][None]), first, 255), i, j, 32, 36)
        if p["flip"]:
            b, m = F.horizontal_flip(b), F.horizontal_flip(m)
        want, _ = tv_sanitized(b)
        assert torch.allclose(got[k]["boxes"], want, atol=1e-4), k
        assert torch.equal(moved[k], m[0].as_subclass(torch.Tensor)), k


def test_through_the_loader(tmp_path, photos):
    """`[Resize(48), CenterCrop(48), RandomCrop(40), flip]` through the Loader (a PNG shard,
    two epochs): the Compose called on Pillow's decode with the Loader's draws."""
    imgs = [np.ascontiguousarray(photos[n][::5, ::4]) for n in ("astronaut", "coffee", "chelsea")]
    tf = T.Compose([T.Resize(48), T.CenterCrop(48), T.RandomCrop(40), T.RandomHorizontalFlip()])
    loader = loader_is_compose(tmp_path, imgs, tf, 8)
    assert loader.describe()["transform"] == ["Resize", "CenterCrop", "RandomCrop", "RandomHorizontalFlip"]


def test_what_a_crop_of_a_crop_refuses():
    """A second crop that pads, or is larger than the first: refused, naming the steps."""
    with pytest.raises(TransformError, match=r"unsupported geometry \['CenterCrop', 'RandomCrop'\]"):
        T.Compose([T.CenterCrop(64), T.RandomCrop(56, padding=4)])
    with pytest.raises(TransformError, match=r"unsupported geometry \['CenterCrop', 'RandomCrop'\]"):
        T.Compose([T.CenterCrop(50), T.RandomCrop(56)])
