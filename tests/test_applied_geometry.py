"""RandomApply over crops and resizes (`[RandomApply([RandomCrop(48)], p=0.4), Resize(64)]`,
`[RandomApply([RandomCrop(28)]), RandomHorizontalFlip(), Resize(224)]`, as public training
scripts write them; refused before): a choice of two geometries, the steps or none, each
ended by the steps after it. Pixels against torchvision's functional ops replaying each
image's draws on photographs; the coin's frequency against p; a Resize(int) that needs
square images (refused by image where one is not); a Resize before it (the first pass);
boxes and masks; the Loader; pickle; the refusals."""
from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
import torch
import torchvision.transforms as tv1
import torchvision.transforms.v2 as tv
import torchvision.transforms.v2.functional as F
from torchvision import tv_tensors

from gpudecode import transforms as T
from gpudecode.errors import TransformError
from gpudecode.transforms.geometry_choice import AppliedGeometry
from conftest import drawn_outputs, loader_is_compose
from test_boxes import moved_targets, tv_sanitized
from test_flip_after_resize import _flips
from test_masks import centre, slic_mask
from test_padded_crop_resized import cifar_cuts

f32 = tv.ToDtype(torch.float32, scale=True)


@pytest.fixture(scope="module")
def photo_batch(photos):
    """Each photograph twice, cut to differ in shape."""
    return [torch.from_numpy(np.ascontiguousarray(p[k::3, ::2].transpose(2, 0, 1))) for p in photos.values()
            for k in (0, 1)]


@pytest.fixture(scope="module")
def squares(photos):
    """Square cuts of the photographs (32x32, CIFAR's size), several a photograph."""
    return cifar_cuts(photos)


def test_a_crop_applied_or_not_then_resized_is_torchvisions(photo_batch):
    """`[RandomApply([RandomCrop(48)], p=0.4), Resize((64, 56))]` (v1 and v2 as written): an
    image that won the coin is cropped, then resized; one that lost it is resized whole;
    torchvision's ops on the float image within float rounding; both drawn."""
    for mod in (tv1, tv):
        tvc = mod.Compose([mod.RandomApply([mod.RandomCrop(48)], p=0.4), mod.Resize((64, 56)),
                           tv.ToDtype(torch.float32, scale=True)])
        ours = T.Compose.from_torchvision(tvc)
        applied = ours.plan.geometry[0]
        assert isinstance(applied, AppliedGeometry) and applied.p == [0.4, 0.6] and ours.out_size == (64, 56)
        assert repr(applied).startswith("RandomApply([RandomCrop(size=(48, 48)") and repr(applied).endswith("p=0.4)")
        won = set()
        for img, p, got in drawn_outputs(ours, photo_batch, range(3)):
            x = f32(img)
            if p["geometry_choice"] == 0:
                x = F.crop(x, *p["crop"])
                assert tuple(p["crop"][2:]) == (48, 48)
            want = F.resize(x, [64, 56], antialias=True)
            assert float((got - want).abs().max()) * 255 < 2e-3, p
            won.add(p["geometry_choice"])
        assert won == {0, 1}


def test_the_coin_falls_with_probability_p():
    """Over 4,000 images the steps run on a share p of them (within four standard errors),
    for p of 0, 0.25 and 1."""
    n = 4000
    for p in (0.0, 0.25, 1.0):
        tf = T.Compose([T.RandomApply([T.CenterCrop(40)], p=p), T.Resize((32, 32))])
        won = np.array([d["geometry_choice"] == 0 for d in tf.make_params([(50, 60)] * n, 9)])
        assert abs(won.mean() - p) <= 4 * np.sqrt(p * (1 - p) / n) + 1e-9, (p, won.mean())


def test_a_flip_between_and_a_resize_of_the_shorter_side(squares):
    """`[RandomApply([RandomCrop(28)]), RandomHorizontalFlip(), Resize(64)]` (CIFAR scripts, a
    Resize(int) of square images): the flip after the Resize; torchvision's crop or not,
    flip and resize within float rounding. An image that is not square would make another
    size where the coin is lost: its draw is refused, naming the sizes."""
    ours = T.Compose([T.RandomApply([T.RandomCrop(28)]), T.RandomHorizontalFlip(), T.Resize(64),
                      T.ToDtype(torch.float32, scale=True)])
    assert ours.out_size == (64, 64) and ours.plan.masks_mirrored == (True, False)
    seen = set()
    for img, p, got in drawn_outputs(ours, squares, range(3)):
        x = f32(img)
        x = F.crop(x, *p["crop"]) if p["geometry_choice"] == 0 else x
        want = F.resize(_flips(x, p), [64, 64], antialias=True)
        assert float((got - want).abs().max()) * 255 < 2e-3, p
        seen.add((p["geometry_choice"], p["flip"]))
    assert seen == {(0, False), (0, True), (1, False), (1, True)}
    with pytest.raises(ValueError, match=r"an image of 32x40 makes 64x80 where it loses the coin, not the "
                                         r"batch's 64x64"):
        ours.make_params([(32, 40)], 0)


def test_a_resize_first_then_a_random_resized_crop_applied_or_not(photo_batch):
    """`[Resize((48, 40)), RandomApply([RandomResizedCrop((48, 40))], p=0.5)]`: each image
    resized first (torchvision's uint8 resize, bit for bit: the first pass), then its crop
    resized (within a level: the uint8 output rounded), or kept as it is (then bit for bit)."""
    ours = T.Compose([T.Resize((48, 40)), T.RandomApply([T.RandomResizedCrop((48, 40))], p=0.5)])
    assert ours.plan.first and ours.out_size == (48, 40)
    sizes = [tuple(i.shape[1:]) for i in photo_batch]
    params = ours.make_params(sizes, 4)
    got = ours(photo_batch, params)
    assert {p["geometry_choice"] for p in params} == {0, 1}
    for k, (img, p) in enumerate(zip(photo_batch, params)):
        x = F.resize(img, [48, 40], antialias=True)
        if p["geometry_choice"] == 1:
            assert torch.equal(got[k], x), k
        else:
            want = F.resized_crop(f32(x), *p["crop"], [48, 40], antialias=True)
            assert float((f32(got[k]) - want).abs().max()) * 255 <= 1 + 1e-3, (k, p)  # (the output rounded)


def test_boxes_and_masks_follow_the_coin(photos):
    """Boxes and masks under `[RandomApply([RandomCrop(40)], p=0.5), flip, Resize((48, 40))]`:
    torchvision crops (or not), flips and resizes a BoundingBoxes and a Mask (nearest: the
    flip before the resize picks other pixels than one after it), the same boxes kept."""
    rng = np.random.default_rng(8)
    tf = T.Compose([T.RandomApply([T.RandomCrop(40)], p=0.5), T.RandomHorizontalFlip(), T.Resize((48, 40))])
    sizes = [(50, 47), (64, 64), (45, 70), (41, 52)] * 4
    params, boxes, masks, got, moved = moved_targets(tf, photos, sizes, 3, rng)
    assert {(p["geometry_choice"], p["flip"]) for p in params} == {(0, False), (0, True), (1, False), (1, True)}
    for k, (p, size) in enumerate(zip(params, sizes)):
        b = tv_tensors.BoundingBoxes(torch.as_tensor(boxes[k]), format="XYXY", canvas_size=size)
        m = tv_tensors.Mask(masks[k][None])
        if p["geometry_choice"] == 0:
            b, m = F.crop(b, *p["crop"]), F.crop(m, *p["crop"])
        b, m = (F.resize(_flips(x, p), [48, 40]) for x in (b, m))
        want, _ = tv_sanitized(b)
        assert torch.allclose(got[k]["boxes"], want, atol=1e-4), (k, p)
        assert torch.equal(moved[k], m[0].as_subclass(torch.Tensor)), (k, p)


def test_through_the_loader_and_copies(tmp_path, photos):
    """Through the Loader (a PNG shard, two epochs): the Compose on Pillow's decode with the
    Loader's draws; describe() names RandomApply; pickle and deepcopy draw alike."""
    imgs = [np.ascontiguousarray(photos[n][::4, ::3]) for n in ("astronaut", "coffee", "chelsea", "rocket")]
    tf = T.Compose([T.RandomApply([T.RandomCrop(60)], p=0.5), T.RandomHorizontalFlip(), T.Resize((48, 48)),
                    T.ColorJitter(0.3, 0.3), T.Normalize([0.5] * 3, [0.25] * 3)])
    loader = loader_is_compose(tmp_path, imgs, tf, 3)
    assert loader.describe()["transform"] == ["RandomApply", "RandomHorizontalFlip", "Resize", "ColorJitter",
                                              "Normalize"]
    for again in (copy.deepcopy(tf), pickle.loads(pickle.dumps(tf))):
        assert repr(again) == repr(tf) and again.make_params([(70, 80)] * 5, 3) == tf.make_params([(70, 80)] * 5, 3)


def test_over_per_sample_steps_it_stays_a_step_and_refusals_say_why():
    """RandomApply over colour steps is still a step of each sample's program; over a crop
    and a colour step, after a flip: refused, saying why; over a crop with no size after it,
    an image that the lost coin leaves at another size is refused as drawn."""
    assert type(T.RandomApply([T.ColorJitter(0.2)], p=0.3)) is T.RandomApply
    with pytest.raises(TransformError, match=r"(?s)RandomApply\(\[RandomCrop, ColorJitter\]\) cannot be fused: "
                                             r"applied, Compose.*does\s+not\s+fuse\s+alone"):
        T.Compose([T.RandomApply([T.RandomCrop(48), T.ColorJitter(0.2)], p=0.4), T.Resize((64, 64))])
    alone = T.Compose([T.RandomApply([T.RandomCrop(48)]), T.RandomHorizontalFlip()])  # (images of 48x48 only)
    assert alone.out_size == (48, 48) and len(alone.make_params([(48, 48)] * 4, 0)) == 4
    with pytest.raises(ValueError, match=r"an image of 60x50 makes 60x50 where it loses the coin, not the batch's "
                                         r"48x48"):
        alone.make_params([(60, 50)], 0)
    with pytest.raises(TransformError, match=r"after\s+a\s+flip\s+cannot\s+be\s+fused"):
        T.Compose([T.RandomHorizontalFlip(), T.RandomApply([T.RandomCrop(48)]), T.Resize((64, 64))])
    with pytest.raises(ValueError, match="probability should be between 0 and 1"):
        T.RandomApply([T.RandomCrop(48)], p=1.5)


@pytest.mark.parametrize("canvas", ["rotation", "expand", "zoom", "pad"])
def test_a_choice_after_a_canvas_step(photo_batch, canvas):
    """A choice of geometries after a canvas step (`[RandomRotation(15), RandomApply(
    [RandomCrop(...)]), Resize(...)]`, refused before): each whole canvas made, then the
    option each image drew read of it; torchvision's rotation (or expanded rotation, zoom
    out, Pad) then the option's ops, within float rounding; every option drawn."""
    step = {"rotation": T.RandomRotation(15), "expand": T.RandomRotation(15, expand=True),
            "zoom": T.RandomZoomOut(fill=9, p=1.0), "pad": T.Pad((3, 5, 7, 2), fill=9)}[canvas]
    ours = T.Compose([step, T.RandomChoice([T.RandomResizedCrop((48, 56)), T.Compose([T.CenterCrop(70), T.Resize((48, 56))]),
                                            T.Resize((48, 56))]), T.ToDtype(torch.float32, scale=True)])
    assert ours.plan.canvas is step
    seen = set()
    for img, p, got in drawn_outputs(ours, photo_batch, range(2)):
        if "padding" in p:
            x = F.pad(img, list(p["padding"]), fill=9)
        else:
            x = F.rotate(img, p["rotation"]["angle"], expand=canvas == "expand")
        x, c = f32(x), p["geometry_choice"]
        if c == 0:
            x = F.resized_crop(x, *p["crop"], [48, 56], antialias=True)
        else:
            x = F.resize(F.center_crop(x, [70, 70]) if c == 1 else x, [48, 56], antialias=True)
        assert float((got - x).abs().max()) * 255 < 2e-3, p
        seen.add(c)
    assert seen == {0, 1, 2}


def test_boxes_and_masks_after_a_canvas_and_a_choice(photos):
    """Boxes and masks under `[RandomZoomOut(p=1), RandomApply([RandomCrop(60)]), Resize((48,
    40))]` and `[RandomRotation(20), ...]`: torchvision zooms out (or rotates), crops or not
    and resizes a BoundingBoxes and a Mask, the same boxes kept."""
    rng = np.random.default_rng(2)
    sizes = [(50, 47), (64, 64), (45, 70), (61, 52)] * 3
    for step in (T.RandomZoomOut(p=1.0), T.RandomRotation(20)):
        tf = T.Compose([step, T.RandomApply([T.RandomCrop(40)]), T.Resize((48, 40))])
        params, boxes, masks, got, moved = moved_targets(tf, photos, sizes, 1, rng)
        assert {p["geometry_choice"] for p in params} == {0, 1}
        for k, (p, size) in enumerate(zip(params, sizes)):
            b = tv_tensors.BoundingBoxes(torch.as_tensor(boxes[k]), format="XYXY", canvas_size=size)
            m = tv_tensors.Mask(masks[k][None])
            if "padding" in p:
                b, m = F.pad(b, list(p["padding"])), F.pad(m, list(p["padding"]), fill=255)
            else:
                b, m = F.rotate(b, p["rotation"]["angle"]), F.rotate(m, p["rotation"]["angle"], fill=255)
            if p["geometry_choice"] == 0:
                b, m = F.crop(b, *p["crop"]), F.crop(m, *p["crop"])
            b, m = F.resize(b, [48, 40]), F.resize(m, [48, 40])
            want, _ = tv_sanitized(b)
            assert torch.allclose(got[k]["boxes"], want, atol=1e-3), (step, k, p)
            assert torch.equal(moved[k], m[0].as_subclass(torch.Tensor)), (step, k, p)


def test_a_canvas_a_choice_a_flip_then_a_resize(photo_batch, photos):
    """`[RandomRotation(15), RandomApply([RandomCrop(60)]), flip, Resize((64, 56))]` (a script's,
    refused before): the flip after the Resize; torchvision's rotation, crop or not, flip and
    resize within float rounding; masks as torchvision's nearest picks of the flipped mask."""
    tf = T.Compose([T.RandomRotation(15), T.RandomApply([T.RandomCrop(60)]), T.RandomHorizontalFlip(),
                    T.Resize((64, 56)), T.ToDtype(torch.float32, scale=True)])
    assert tf.plan.masks_mirrored == (True, False)
    sizes = [tuple(i.shape[1:]) for i in photo_batch]
    params = tf.make_params(sizes, 6)
    got = tf(photo_batch, params)
    assert {(p["geometry_choice"], p["flip"]) for p in params} == {(0, False), (0, True), (1, False), (1, True)}
    names = sorted(photos)
    masks = [torch.from_numpy(slic_mask(centre(photos[names[k % len(names)]], h, w))) for k, (h, w) in enumerate(sizes)]
    moved = tf.masks(masks, params, fill=255)
    for k, (img, p) in enumerate(zip(photo_batch, params)):
        x, m = f32(F.rotate(img, p["rotation"]["angle"])), F.rotate(tv_tensors.Mask(masks[k][None]),
                                                                   p["rotation"]["angle"], fill=255)
        if p["geometry_choice"] == 0:
            x, m = F.crop(x, *p["crop"]), F.crop(m, *p["crop"])
        want = F.resize(_flips(x, p), [64, 56], antialias=True)
        assert float((got[k] - want).abs().max()) * 255 < 2e-3, (k, p)
        assert torch.equal(moved[k], F.resize(_flips(m, p), [64, 56])[0].as_subclass(torch.Tensor)), (k, p)


def test_a_resize_to_the_size_it_is_given_does_nothing(photo_batch):
    """A Resize whose input already has its size returns it, as torchvision's does: `[RandomApply(
    [RandomCrop((40, 30)), Resize((64, 48))], p=0.5), Resize((64, 48))]` (a script's, refused
    before) is torchvision's crop and resize, or resize, within float rounding; `[CenterCrop(40),
    Resize(40)]` is its CenterCrop, bit for bit, drawn natively."""
    tf = T.Compose([T.RandomApply([T.RandomCrop((40, 30)), T.Resize((64, 48))], p=0.5), T.Resize((64, 48)),
                    T.ToDtype(torch.float32, scale=True)])
    sizes = [tuple(i.shape[1:]) for i in photo_batch]
    params = tf.make_params(sizes, 1)
    got = tf(photo_batch, params)
    assert {p["geometry_choice"] for p in params} == {0, 1}
    for k, (img, p) in enumerate(zip(photo_batch, params)):
        x = f32(img)
        x = F.resize(F.crop(x, *p["crop"]) if p["geometry_choice"] == 0 else x, [64, 48], antialias=True)
        assert float((got[k] - x).abs().max()) * 255 < 2e-3, (k, p)
    twice = T.Compose([T.CenterCrop(40), T.Resize(40)])
    assert twice.native_spec is not None and [type(g) for g in twice.plan.geometry] == [T.CenterCrop]
    assert torch.equal(twice(photo_batch), torch.stack([F.center_crop(i, [40, 40]) for i in photo_batch]))


def test_an_image_of_another_shape_is_its_own_samples_error(tmp_path, photos):
    """Through the Loader with on_error="skip": under `[RandomApply([RandomCrop(24)]), Resize(48)]`
    an image that is not square (it would make another size where the coin is lost) is
    skipped alone, named by its shard and key; the square ones are delivered, in order;
    with on_error="raise" the error names the shard and key."""
    from gpudecode import Loader
    from gpudecode.errors import LocatedError

    from conftest import encode, make_shard

    square = [np.ascontiguousarray(p[:96:3, :96:3]) for p in photos.values()]
    oblong = np.ascontiguousarray(photos["coffee"][:90:3, :120:3])
    samples = [{"__key__": f"s{k}", "png": encode(a, "PNG"), "cls": b"1"} for k, a in enumerate(square)]
    samples.insert(2, {"__key__": "oblong", "png": encode(oblong, "PNG"), "cls": b"1"})
    url = make_shard(tmp_path / "shape-000000.tar", samples)
    tf = T.Compose([T.RandomApply([T.RandomCrop(24)]), T.Resize(48)])
    ld = Loader([url], batch_size=len(samples), transform=tf, device="cpu", shuffle=False, seed=1, on_error="skip")
    (batch,) = list(ld)
    assert list(batch.keys) == [f"s{k}" for k in range(len(square))] and batch.images.shape[1:] == (3, 48, 48)
    (skipped,) = ld.skipped
    assert skipped.shard == url and skipped.key == "oblong" and "makes 48x64 where it loses the coin" in skipped.reason
    with pytest.raises(LocatedError, match="loses the coin") as e:
        list(Loader([url], batch_size=len(samples), transform=tf, device="cpu", shuffle=False, seed=1))
    assert e.value.shard == url and e.value.key == "oblong"
