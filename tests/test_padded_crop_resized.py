"""A padded crop, then a Resize (CIFAR upscaled for an ImageNet model: `[RandomCrop(32,
padding=4), RandomHorizontalFlip(), Resize((224, 224)), ...]`; refused before): the crop's
padding by a fill made a Pad's canvas, the flip between the crop and the Resize taken
after the Resize (a resize of a mirrored image is the mirrored resize), flips first read
mirrored in an evenly padded canvas. Also a flip before a Pad's canvas (`[flip, Pad(4),
RandomCrop(32), Resize(...)]`), which read the wrong part of each flipped image before
this change. Pixels against torchvision's ops in the Compose's order replaying each
image's draws, on photographs; boxes and masks; the Loader; the refusals."""
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
from conftest import drawn_outputs, loader_is_compose
from test_boxes import moved_targets, tv_sanitized
from test_flip_after_resize import _flips

f32 = tv.ToDtype(torch.float32, scale=True)
FILL = (10, 200, 30)


@pytest.fixture(scope="module")
def cifar(photos):
    """Photographs cut to 32x32 (CIFAR's size), each of several places in them."""
    return cifar_cuts(photos)


def cifar_cuts(photos) -> list[torch.Tensor]:
    """Each photograph's 32x32 cuts (every eighth pixel) at two places, CHW uint8."""
    return [torch.from_numpy(np.ascontiguousarray(p[y:y + 256:8, x:x + 256:8].transpose(2, 0, 1)))
            for p in photos.values() for y, x in ((0, 0), (40, 90))]


def _check(ours, imgs, resize, pad, fill=(0, 0, 0), first=False, seeds=range(4)):
    """`ours` against torchvision's pad (the fill), crop at the drawn place (in the padded
    image), flips (before the pad with `first`, else after the crop) and float resize,
    within float rounding; each flip and several crop offsets drawn."""
    flipped, lefts = set(), set()
    for img, p, got in drawn_outputs(ours, imgs, seeds):
        x = F.pad(_flips(img, p) if first else img, list(pad), fill=list(fill))
        x = F.crop(f32(x), *p["crop"])
        x = F.resize(x if first else _flips(x, p), list(resize), antialias=True)
        assert float((got - x).abs().max()) * 255 < 2e-3, p
        flipped.add(p.get("flip")), lefts.add(p["crop"][1])
    assert flipped == {False, True} and len(lefts) >= min(5, pad[0] + pad[2] + 1)


def test_cifar_upscaled_is_torchvisions(cifar):
    """`[RandomCrop(32, padding=4), flip, Resize((64, 64))]` as CIFAR fine-tuning scripts write
    it (v1, v2): a Pad's canvas, the crop, the Resize, the flip last; torchvision's pad, crop,
    flip and resize within float rounding; a fill of three levels and paddings of every form;
    an int Resize; the steps kept as written."""
    for mod in (tv1, tv):
        tvc = mod.Compose([mod.RandomCrop(32, padding=4), mod.RandomHorizontalFlip(), mod.Resize((64, 64)),
                           tv.ToDtype(torch.float32, scale=True)])
        ours = T.Compose.from_torchvision(tvc)
        assert [type(t).__name__ for t in ours.plan.steps] == [type(t).__name__ for t in tvc.transforms]
        assert isinstance(ours.plan.canvas, T.Pad) and ours.plan.mirror == (False, False) and ours.out_size == (64, 64)
        _check(ours, cifar, (64, 64), (4, 4, 4, 4))
    for padding, size in ((2, 56), ((1, 3), 48), ((1, 2, 3, 4), 40)):
        ours = T.Compose([T.RandomCrop(32, padding=padding, fill=list(FILL)), T.RandomHorizontalFlip(),
                          T.RandomVerticalFlip(), T.Resize(size), T.ToDtype(torch.float32, scale=True)])
        _check(ours, cifar, (size, size), T.Pad(padding).padding, FILL)


def test_flips_first_read_the_crop_mirrored_in_an_even_canvas(cifar):
    """`[flip, vflip, RandomCrop(32, padding=4), Resize(48)]` and `[flip, Pad(...), RandomCrop(32),
    Resize(48)]` with even paddings: torchvision flips, pads, crops and resizes; ours reads the
    crop mirrored in the unflipped canvas (the mirrored image's canvas) and flips last. The
    second form gave another part of each flipped image before (the decoder's part of it
    was not mirrored)."""
    for steps, pad in (([T.RandomCrop(32, padding=4, fill=list(FILL))], (4, 4, 4, 4)),
                       ([T.Pad((4, 2), fill=list(FILL)), T.RandomCrop(32)], (4, 2, 4, 2)),
                       ([T.Pad((3, 1, 3, 5), fill=list(FILL)), T.RandomCrop(32)], (3, 1, 3, 5))):
        flips = [T.RandomHorizontalFlip()] + ([T.RandomVerticalFlip()] if pad[1] == pad[3] else [])
        ours = T.Compose([*flips, *steps, T.Resize(48), T.ToDtype(torch.float32, scale=True)])
        assert isinstance(ours.plan.canvas, T.Pad) and ours.plan.mirror == (True, len(flips) == 2)
        _check(ours, cifar, (48, 48), pad, FILL, first=True)


def test_a_flip_before_a_pads_canvas_and_each_geometry(cifar):
    """A flip before an even Pad's canvas and each geometry after it (a CenterCrop whose
    offset rounds, a RandomResizedCrop, a Resize): torchvision's flip, pad and geometry
    within float rounding."""
    sizes = [tuple(i.shape[1:]) for i in cifar]
    for geometry in (T.CenterCrop((35, 37)), T.RandomResizedCrop(40), T.Resize((44, 40))):
        ours = T.Compose([T.RandomHorizontalFlip(), T.Pad(5, fill=list(FILL)), geometry,
                          T.ToDtype(torch.float32, scale=True)])
        assert isinstance(ours.plan.canvas, T.Pad) and ours.plan.mirror == (True, False)
        params = ours.make_params(sizes, 2)
        got = ours(cifar, params)
        assert {p["flip"] for p in params} == {False, True}
        for k, (img, p) in enumerate(zip(cifar, params)):
            x = f32(F.pad(_flips(img, p), [5], fill=list(FILL)))
            if isinstance(geometry, T.CenterCrop):
                x = F.center_crop(x, [35, 37])
            elif isinstance(geometry, T.RandomResizedCrop):
                x = F.resized_crop(x, *p["crop"], [40, 40], antialias=True)
            else:
                x = F.resize(x, [44, 40], antialias=True)
            assert float((got[k] - x).abs().max()) * 255 < 2e-3, (geometry, k, p)


def test_center_crop_flip_resize_is_torchvisions(photos):
    """`[CenterCrop(148), flip, vflip, Resize(64)]` (a CelebA recipe with the flip in the
    middle): the flips after the Resize, within float rounding of torchvision's order."""
    imgs = [torch.from_numpy(np.ascontiguousarray(p[::2, ::2].transpose(2, 0, 1))) for p in photos.values()] * 2
    ours = T.Compose([T.CenterCrop(148), T.RandomHorizontalFlip(), T.RandomVerticalFlip(), T.Resize(64),
                      T.ToDtype(torch.float32, scale=True)])
    assert ours.plan.canvas is None and ours.plan.mirror == (False, False)
    sizes = [tuple(i.shape[1:]) for i in imgs]
    params = ours.make_params(sizes, 5)
    got = ours(imgs, params)
    assert {(p["flip"], p["vflip"]) for p in params} >= {(False, False), (True, True)}
    for k, (img, p) in enumerate(zip(imgs, params)):
        want = F.resize(_flips(F.center_crop(f32(img), [148, 148]), p), [64, 64], antialias=True)
        assert float((got[k] - want).abs().max()) * 255 < 2e-3, (k, p)


def test_boxes_and_masks_follow_the_cifar_recipe(photos):
    """Boxes and masks follow `[RandomCrop(32, padding=4), flip, vflip, Resize((64, 48))]`:
    torchvision pads, crops, flips and resizes a BoundingBoxes and a Mask (nearest, so the
    flip before the resize picks other pixels than one after it), the same boxes kept."""
    rng = np.random.default_rng(4)
    tf = T.Compose([T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), T.RandomVerticalFlip(),
                    T.Resize((64, 48))])
    assert tf.plan.masks_mirrored == (True, True)
    sizes = [(32, 32), (36, 33), (40, 50)] * 4
    params, boxes, masks, got, moved = moved_targets(tf, photos, sizes, 3, rng)
    assert {p["flip"] for p in params} == {p["vflip"] for p in params} == {False, True}
    for k, (p, size) in enumerate(zip(params, sizes)):
        b = F.pad(tv_tensors.BoundingBoxes(torch.as_tensor(boxes[k]), format="XYXY", canvas_size=size), [4])
        m = F.pad(tv_tensors.Mask(masks[k][None]), [4], fill=255)
        b, m = (F.resize(_flips(F.crop(x, *p["crop"]), p), [64, 48]) for x in (b, m))
        want, _ = tv_sanitized(b)
        assert torch.allclose(got[k]["boxes"], want, atol=1e-4), k
        assert torch.equal(moved[k], m[0].as_subclass(torch.Tensor)), (k, p)


def test_through_the_loader(tmp_path, photos):
    """The CIFAR recipe through the Loader (a PNG shard, two epochs): the Compose called on
    Pillow's decode with the Loader's draws."""
    imgs = [np.ascontiguousarray(p[y:y + 256:8, x:x + 256:8]) for p in photos.values() for y, x in ((0, 0), (64, 8))]
    tf = T.Compose([T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), T.Resize((64, 64)),
                    T.ToDtype(torch.float32, scale=True), T.Normalize([0.5] * 3, [0.25] * 3)])
    loader_is_compose(tmp_path, imgs, tf, 7)


def test_refusals_say_why():
    """A flip before a padding that differs on its axis moves the image in its canvas; a
    flip between the crop and a nearest Resize picks other pixels; a padding that reads
    the image (reflect) before a Resize keeps its refusal; Normalize before the padded
    crop, and a canvas over the pixel limit, are refused naming the RandomCrop's padding."""
    with pytest.raises(TransformError, match=r"(?s)RandomHorizontalFlip before a RandomCrop padded by \[1, 2, 3, 4\].*"
                                             r"differs\s+left\s+and right"):
        T.Compose([T.RandomHorizontalFlip(), T.RandomCrop(32, padding=(1, 2, 3, 4)), T.Resize(64)])
    with pytest.raises(TransformError, match=r"(?s)RandomVerticalFlip before Pad\(padding=\[4, 1, 4, 2\].*differs\s+top"):
        T.Compose([T.RandomVerticalFlip(), T.Pad((4, 1, 4, 2)), T.RandomCrop(32), T.Resize(64)])
    with pytest.raises(TransformError, match=r"(?s)RandomHorizontalFlip before Resize with nearest"):
        T.Compose([T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), T.Resize(64, interpolation="nearest")])
    with pytest.raises(TransformError, match=r"(?s)Resize after RandomCrop cannot be fused"):
        T.Compose([T.RandomCrop(32, padding=4, padding_mode="reflect"), T.Resize(64)])
    with pytest.raises(TransformError, match=r"(?s)with RandomCrop's padding after it, whose padding\s+torchvision fills"):
        T.Compose.from_torchvision(tv1.Compose([tv1.ToTensor(), tv1.Normalize((0.13,), (0.3,)), tv1.RandomCrop(28, padding=4),
                                                tv1.Resize(32)]), grey=True)  # (a public MNIST script's, refused: the
    with pytest.raises(ValueError, match=r"under RandomCrop's padding"):  # messages name the user's step)
        T.Compose([T.RandomCrop(32, padding=100000), T.Resize(64)]).make_params([(32, 32)], 0)
