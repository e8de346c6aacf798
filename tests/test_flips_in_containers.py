"""Flips inside RandomChoice, RandomApply and RandomOrder (`RandomChoice([RandomHorizontalFlip(),
RandomRotation(30), ColorJitter(...)])`, `RandomChoice([RandomHorizontalFlip(),
RandomVerticalFlip()])`, as public training scripts write them; refused before): the flip is
drawn where its container runs it, and the kernel flips that sample's output, the warps
before the container mirrored. Pixels against torchvision's ops replaying each image's
draws on photographs; masks and boxes; the Loader; what stays refused."""
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

NEAREST = tv.InterpolationMode.NEAREST


@pytest.fixture(scope="module")
def photo_batch(photos):
    return [torch.from_numpy(np.ascontiguousarray(p[k::3, ::4].transpose(2, 0, 1))) for k, p in
            enumerate(photos.values())] * 3


def test_a_choice_of_a_flip_a_rotation_and_an_op_is_torchvisions(photo_batch):
    """`[Resize((40, 44)), RandomChoice([RandomHorizontalFlip(p=1), RandomVerticalFlip(p=1),
    RandomRotation(30), RandomInvert(p=1)])]` (v1, as written): each image takes the option it
    drew, torchvision's op on the resized image, bit for bit (the uint8 output: a resize
    rounded as torchvision's float resize is, within a level); every option drawn."""
    tvc = tv1.Compose([tv1.Resize((40, 44)), tv1.RandomChoice([tv1.RandomHorizontalFlip(p=1.0),
                                                                tv1.RandomVerticalFlip(p=1.0), tv1.RandomRotation(30),
                                                                tv1.RandomInvert(p=1.0)]),
                       tv.ToDtype(torch.float32, scale=True)])
    ours = T.Compose.from_torchvision(tvc)
    assert ours.plan.flip is None and ours.plan.vflip is None and ours.plan.flip_at == (0, 0)
    seen = set()
    for img, p, got in drawn_outputs(ours, photo_batch, range(3)):
        x, c = F.resize(tv.ToDtype(torch.float32, scale=True)(img), [40, 44], antialias=True), p["choice"]
        seen.add(c)
        if c == 0:
            assert p["flip"] is True
            x = F.horizontal_flip(x)
        elif c == 1:
            assert p["vflip"] is True
            x = F.vertical_flip(x)
        elif c == 2:
            x = F.rotate(x, p["rotation"]["angle"], NEAREST)
        else:
            x = F.invert(x)
        assert float((got - x).abs().max()) * 255 < 2e-3, p
        assert c == 0 or not p["flip"], p
    assert seen == {0, 1, 2, 3}


def test_a_warp_before_the_choice_is_mirrored_for_the_flipped(photo_batch):
    """`[Resize((40, 44)), RandomRotation(20), RandomChoice([RandomHorizontalFlip(),
    RandomVerticalFlip()])]`: torchvision rotates, then flips (or not, by the option's own
    coin); the kernel flips first and mirrors the rotation, bit for bit through nearest
    sampling."""
    ours = T.Compose([T.Resize((40, 44)), T.RandomRotation(20),
                      T.RandomChoice([T.RandomHorizontalFlip(), T.RandomVerticalFlip()]),
                      T.ToDtype(torch.float32, scale=True)])
    assert ours.plan.flip_at == (1, 1)
    sizes = [tuple(i.shape[1:]) for i in photo_batch]
    params = ours.make_params(sizes, 4)
    got = ours(photo_batch, params)
    assert {(p["flip"], p.get("vflip", False)) for p in params} == {(False, False), (True, False), (False, True)}
    for k, (img, p) in enumerate(zip(photo_batch, params)):
        x = F.resize(tv.ToDtype(torch.float32, scale=True)(img), [40, 44], antialias=True)
        x = F.rotate(x, p["rotation"]["angle"], NEAREST)
        x = F.horizontal_flip(x) if p["flip"] else F.vertical_flip(x) if p.get("vflip") else x
        assert float((got[k] - x).abs().max()) * 255 < 2e-3, (k, p)


def test_flips_before_a_whole_image_rotation_with_no_geometry(photo_batch):
    """`[RandomChoice([RandomHorizontalFlip(), RandomVerticalFlip()]), RandomRotation((0, 360))]`
    (a script's, on images of one size): the flip, then the rotation of the flipped image, as
    torchvision's, bit for bit."""
    same = [i[:, :48, :40] for i in photo_batch]
    ours = T.Compose([T.RandomChoice([T.RandomHorizontalFlip(), T.RandomVerticalFlip()]), T.RandomRotation((0, 360))])
    params = ours.make_params([(48, 40)] * len(same), 2)
    got = ours(same, params)
    for k, (img, p) in enumerate(zip(same, params)):
        x = F.horizontal_flip(img) if p["flip"] else F.vertical_flip(img) if p.get("vflip") else img
        assert torch.equal(got[k], F.rotate(x, p["rotation"]["angle"], NEAREST)), (k, p)


def test_apply_and_order_over_a_flip(photo_batch):
    """`RandomApply([RandomVerticalFlip(p=1)], p=0.3)` flips the share of images that won its
    coin; `RandomOrder([RandomHorizontalFlip(), RandomInvert()])` (the two commute) flips and
    inverts as drawn: torchvision's ops, bit for bit."""
    for step, key in ((T.RandomApply([T.RandomVerticalFlip(p=1.0)], p=0.3), "vflip"),
                      (T.RandomOrder([T.RandomHorizontalFlip(), T.RandomInvert()]), "flip")):
        ours = T.Compose([T.CenterCrop(40), step])
        params = ours.make_params([tuple(i.shape[1:]) for i in photo_batch], 1)
        got = ours(photo_batch, params)
        assert {bool(p.get(key)) for p in params} == {False, True}
        for k, (img, p) in enumerate(zip(photo_batch, params)):
            x = F.center_crop(img, [40, 40])
            x = (F.vertical_flip(x) if key == "vflip" else F.horizontal_flip(x)) if p.get(key) else x
            x = F.invert(x) if p.get("invert") else x
            assert torch.equal(got[k], x), (step, k, p)


def test_a_flip_then_a_warp_in_one_option(photo_batch):
    """`RandomChoice([Compose([RandomHorizontalFlip(p=1), RandomRotation(30)]), RandomInvert(p=1)])`:
    the option flips, then rotates the flipped image, as torchvision's, bit for bit; the
    other order in one option (a rotation, then the flip) is refused, since the kernel
    flips first and mirrors only the warps before the container."""
    ours = T.Compose([T.CenterCrop(40), T.RandomChoice([T.Compose([T.RandomHorizontalFlip(p=1.0), T.RandomRotation(30)]),
                                                        T.RandomInvert(p=1.0)])])
    seen = set()
    for img, p, got in drawn_outputs(ours, photo_batch, range(2)):
        x = F.center_crop(img, [40, 40])
        x = F.rotate(F.horizontal_flip(x), p["rotation"]["angle"], NEAREST) if p["choice"] == 0 else F.invert(x)
        assert torch.equal(got, x), p
        seen.add(p["choice"])
    assert seen == {0, 1}
    with pytest.raises(TransformError, match=r"(?s)RandomHorizontalFlip\(p=1.0\) after RandomRotation in one "
                                             r"RandomChoice cannot\s+be\s+fused"):
        T.Compose([T.CenterCrop(40), T.RandomChoice([T.Compose([T.RandomRotation(30), T.RandomHorizontalFlip(p=1.0)]),
                                                     T.RandomInvert(p=1.0)])])
    with pytest.raises(TransformError, match=r"(?s)RandomVerticalFlip\(p=1.0\) after RandomRotation in one "
                                             r"RandomApply"):
        T.Compose([T.CenterCrop(40), T.RandomApply([T.RandomRotation(30), T.RandomVerticalFlip(p=1.0)])])


def test_masks_and_boxes_follow_a_chosen_flip(photos):
    """Masks and boxes under `[Resize((48, 40)), RandomRotation(20), RandomChoice([flip,
    vflip, RandomInvert()])]`: torchvision's resize, rotation and the chosen flip of a Mask
    and a BoundingBoxes (clamped before the warp, as ours are), the same boxes kept."""
    rng = np.random.default_rng(3)
    tf = T.Compose([T.Resize((48, 40)), T.RandomRotation(20),
                    T.RandomChoice([T.RandomHorizontalFlip(), T.RandomVerticalFlip(), T.RandomInvert()])])
    sizes = [(50, 47), (64, 64), (45, 70), (61, 52)] * 3
    params, boxes, masks, got, moved = moved_targets(tf, photos, sizes, 5, rng)
    assert {p["flip"] for p in params} == {p.get("vflip", False) for p in params} == {False, True}
    for k, (p, size) in enumerate(zip(params, sizes)):
        b = tv_tensors.BoundingBoxes(torch.as_tensor(boxes[k]), format="XYXY", canvas_size=size)
        b = F.clamp_bounding_boxes(F.resize(b, [48, 40]))  # (clamped before the warps: test_warped_targets.py)
        m = F.resize(tv_tensors.Mask(masks[k][None]), [48, 40])
        b, m = F.rotate(b, p["rotation"]["angle"]), F.rotate(m, p["rotation"]["angle"], fill=255)
        if p["flip"]:
            b, m = F.horizontal_flip(b), F.horizontal_flip(m)
        if p.get("vflip"):
            b, m = F.vertical_flip(b), F.vertical_flip(m)
        want, _ = tv_sanitized(b)
        assert torch.allclose(got[k]["boxes"], want, atol=1e-3), (k, p)
        assert torch.equal(moved[k], m[0].as_subclass(torch.Tensor)), (k, p)


def test_through_the_loader(tmp_path, photos):
    """Through the Loader (a PNG shard, two epochs): the Compose on Pillow's decode with the
    Loader's draws; describe() names the choice."""
    imgs = [np.ascontiguousarray(photos[n][::4, ::3]) for n in ("astronaut", "coffee", "chelsea", "rocket")] * 2
    tf = T.Compose([T.Resize((48, 48)), T.RandomChoice([T.RandomHorizontalFlip(), T.RandomRotation(30),
                                                        T.ColorJitter(0.3, 0.2, 0.2, 0.1)]),
                    T.ToDtype(torch.float32, scale=True), T.Normalize([0.5] * 3, [0.25] * 3)])
    loader = loader_is_compose(tmp_path, imgs, tf, 4)
    assert loader.describe()["transform"][:2] == ["Resize", "RandomChoice"]


def test_what_stays_refused():
    """Two flips of one axis; a flip in a container before the geometry (the first pass
    would flip the image and the kernel again); a flip and a warp in a random order."""
    with pytest.raises(TransformError, match=r"two RandomHorizontalFlips"):
        T.Compose([T.RandomResizedCrop(64), T.RandomHorizontalFlip(), T.RandomChoice([T.RandomHorizontalFlip(),
                                                                                       T.ColorJitter(0.2)])])
    with pytest.raises(TransformError, match=r"two RandomHorizontalFlips"):
        T.Compose([T.RandomResizedCrop(64), T.RandomChoice([T.RandomHorizontalFlip(), T.ColorJitter(0.2)]),
                   T.RandomHorizontalFlip()])
    with pytest.raises(TransformError, match=r"(?s)inside RandomChoice before the geometry cannot be fused"):
        T.Compose([T.RandomChoice([T.RandomHorizontalFlip(), T.ColorJitter(0.2)]), T.RandomResizedCrop(64)])
    with pytest.raises(TransformError, match=r"(?s)a flip\s+and\s+a\s+warp\s+in\s+a\s+random\s+order"):
        T.RandomOrder([T.RandomHorizontalFlip(), T.RandomRotation(10)])
