"""A flip after a warp (`[Resize((224, 224)), RandomRotation(15), RandomHorizontalFlip(),
ToTensor()]`, `[RandomResizedCrop(224), RandAugment(), RandomHorizontalFlip()]`, as many
scripts write them): torchvision warps, then flips. The kernel flips first, while it
resamples, so where a sample is flipped the warps before the flip are mirrored
(mirrors.mirror_ops: a nearest warp evaluated at the mirrored pixel, a bilinear one
conjugated), which is the same image; its masks and boxes are flipped back, warped and
flipped again (warped.Mirrored). References: torchvision's functional ops in the
Compose's order replaying each sample's draws on the float image, a tv_tensors.Mask and
BoundingBoxes, on real photographs."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision.transforms as v1
import torchvision.transforms.v2 as v2
import torchvision.transforms.v2.functional as F
from torchvision import tv_tensors
from torchvision.transforms import InterpolationMode as IM

from gpudecode import transforms as T
from gpudecode.errors import TransformError

from test_augment import _augmix_ref, _policy_ref
from test_boxes import random_boxes, tv_moved, tv_sanitized
from test_masks import centre, slic_mask, tv_mask
from test_warped_targets import tv_warps


def chw(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a.transpose(2, 0, 1)))


@pytest.fixture(scope="module")
def images(photos):
    return [chw(np.ascontiguousarray(p[k:k + 81 + 2 * k, 2 * k:2 * k + 97 - k])) for k, p in enumerate(photos.values())]


def _flips(x, p: dict):
    x = F.horizontal_flip(x) if p.get("flip") else x
    return F.vertical_flip(x) if p.get("vflip") else x


def _unflipped(p: dict) -> dict:
    return {**p, "flip": False, "vflip": False}


WARPS = {
    "rotation, nearest": (T.RandomRotation(25, fill=(10, 200, 30)),
                          lambda x, p: F.rotate(x, p["rotation"]["angle"], fill=[10 / 255, 200 / 255, 30 / 255])),
    "rotation, bilinear": (T.RandomRotation(40, "bilinear"),
                           lambda x, p: F.rotate(x, p["rotation"]["angle"], IM.BILINEAR, fill=0.0)),
    "affine, nearest": (T.RandomAffine(20, (0.1, 0.2), (0.8, 1.2), (-10, 10, -5, 5)),
                        lambda x, p: F.affine(x, **p["affine"], fill=0.0)),
    "affine, bilinear": (T.RandomAffine(15, (0.2, 0.1), (0.9, 1.3), 8, "bilinear", fill=(40, 40, 40)),
                         lambda x, p: F.affine(x, **p["affine"], interpolation=IM.BILINEAR, fill=[40 / 255] * 3)),
}


@pytest.mark.parametrize("name", list(WARPS))
def test_a_flip_after_a_warp_is_torchvisions_warp_then_flip(images, name):
    warp, replay = WARPS[name]
    tf = T.Compose([T.Resize((48, 64)), warp, T.ColorJitter(0.2), T.RandomHorizontalFlip(), T.RandomVerticalFlip(),
                    T.ToDtype(torch.float32, scale=True)])
    assert tf.plan.flip_at == (2, 2)
    sizes = [tuple(i.shape[1:]) for i in images]
    params = tf.make_params(sizes, 3) + tf.make_params(sizes, 4) + tf.make_params(sizes, 5)
    imgs = images * 3
    assert {(p["flip"], p["vflip"]) for p in params} == {(False, False), (False, True), (True, False), (True, True)}
    got = tf(imgs, params)
    over = total = 0
    for k, (img, p) in enumerate(zip(imgs, params)):
        x = replay(F.resize(F.to_dtype(img, torch.float32, scale=True), [48, 64], antialias=True), p)
        x = _jitter(x, p)
        want = _flips(x, p)
        err = (got[k] - want).abs() * 255
        over, total = over + int((err > 1 + 1e-3).sum()), total + err.numel()
    # (nearest too: a mirrored nearest warp is evaluated at the mirrored pixel, so a half-way point rounds as
    # torchvision rounds it)
    assert over == 0, (name, over, total)


POLICIES = {  # (ours, torchvision's op application replaying our draws)
    "RandAugment": (lambda: T.RandAugment(3, 12), lambda x, p: _policy_ref(v2.RandAugment(3, 12))(x, p["rand_augment"])),
    "TrivialAugmentWide, bilinear, fill": (
        lambda: T.TrivialAugmentWide(interpolation="bilinear", fill=[10, 200, 30]),
        lambda x, p: _policy_ref(v2.TrivialAugmentWide(interpolation=IM.BILINEAR, fill=[10 / 255, 200 / 255, 30 / 255])
                                 )(x, p["trivial_augment"])),
    "AutoAugment, SVHN": (lambda: T.AutoAugment(v2.AutoAugmentPolicy.SVHN),
                          lambda x, p: _policy_ref(v2.AutoAugment(v2.AutoAugmentPolicy.SVHN))(x, p["auto_augment"])),
    "AugMix": (lambda: T.AugMix(severity=5, interpolation="bilinear"),
               lambda x, p: _augmix_ref(v2.AugMix(severity=5, interpolation=IM.BILINEAR))(x, p["augmix"])),
    "RandomPerspective, bilinear": (
        lambda: T.RandomPerspective(0.6, 0.9),
        lambda x, p: x if "perspective" not in p else F.perspective(
            x, None, None, IM.BILINEAR, fill=0.0, coefficients=p["perspective"]["coefficients"])),
    "RandomPerspective, nearest, fill": (
        lambda: T.RandomPerspective(0.6, 0.9, "nearest", fill=(255, 0, 128)),
        lambda x, p: x if "perspective" not in p else F.perspective(
            x, None, None, IM.NEAREST, fill=[1.0, 0.0, 128 / 255], coefficients=p["perspective"]["coefficients"])),
}
WARPED = {"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "perspective"}


def _warps_drawn(p: dict) -> list[str]:
    """The names of the warps a sample drew (a policy's, a perspective warp)."""
    if "augmix" in p:
        ops = [o[0] for chain in p["augmix"]["chains"] for o in chain]
    else:
        ops = [o[0] for key in ("rand_augment", "trivial_augment", "auto_augment") for o in p.get(key) or ()]
    return [o for o in ops + ["perspective"] * ("perspective" in p) if o in WARPED]


@pytest.mark.parametrize("name", list(POLICIES))
def test_a_flip_after_a_policy_or_a_perspective_warp_is_torchvisions_then_the_flip(images, name):
    """`[RandomResizedCrop, RandAugment, RandomHorizontalFlip]` as scripts write it (and
    TrivialAugmentWide, AutoAugment, AugMix, RandomPerspective; nearest and bilinear):
    where a sample is flipped, each warp it drew is mirrored for the kernel, which flips
    first, and the result is torchvision's policy, then the flip, within a level, on real
    photographs, flipped along either axis, both or neither. (Nearest warps pick
    torchvision's pixel even at the policies' half-way points, where a shear's whole rows
    lie.)"""
    make, replay = POLICIES[name]
    tf = T.Compose([T.Resize((48, 64)), make(), T.RandomHorizontalFlip(), T.RandomVerticalFlip(),
                    T.ToDtype(torch.float32, scale=True)])
    assert tf.plan.flip_at == (1, 1)
    sizes = [tuple(i.shape[1:]) for i in images]
    warped: set = set()
    for seed in range(6):
        params = tf.make_params(sizes, seed)
        got = tf(images, params)
        for k, (img, p) in enumerate(zip(images, params)):
            x = F.resize(F.to_dtype(img, torch.float32, scale=True), [48, 64], antialias=True)
            want = _flips(replay(x, p).clamp(0, 1), p)
            err = (got[k] - want).abs() * 255
            assert int((err > 1 + 1e-3).sum()) == 0, (name, seed, k, p, float(err.max()))
            warped.update((op, p["flip"], p["vflip"]) for op in _warps_drawn(p))
    assert len({(h, v) for _, h, v in warped}) == 4, warped  # (warps under each of the four flips)
    assert len({op for op, *_ in warped}) >= (1 if "Perspective" in name else 4), warped


def test_the_mirrored_perspective_is_the_conjugated_warp():
    """mirrored_perspective against the homography conjugated by the mirrors as matrices
    (numpy, in float64): M @ H @ M, rescaled so that its corner is 1."""
    from gpudecode.transforms.warped import mirrored_perspective, perspective_coefficients

    rng = np.random.default_rng(4)
    for _ in range(20):
        h, w = int(rng.integers(8, 300)), int(rng.integers(8, 300))
        start = [[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]]
        end = [[int(rng.integers(0, w // 4 + 1)), int(rng.integers(0, h // 4 + 1))],
               [w - 1 - int(rng.integers(0, w // 4 + 1)), int(rng.integers(0, h // 4 + 1))],
               [w - 1 - int(rng.integers(0, w // 4 + 1)), h - 1 - int(rng.integers(0, h // 4 + 1))],
               [int(rng.integers(0, w // 4 + 1)), h - 1 - int(rng.integers(0, h // 4 + 1))]]
        c = perspective_coefficients(start, end)
        m = np.array([[c[0], c[1], c[2]], [c[3], c[4], c[5]], [c[6], c[7], 1.0]])
        for hf, vf in [(True, False), (False, True), (True, True)]:
            mirror = np.diag([-1.0 if hf else 1.0, -1.0 if vf else 1.0, 1.0])
            mirror[0, 2], mirror[1, 2] = (w if hf else 0), (h if vf else 0)
            want = mirror @ m @ mirror
            want /= want[2, 2]
            got = mirrored_perspective(list(c), (h, w), hf, vf)
            np.testing.assert_allclose(got, want.reshape(-1)[:8], rtol=1e-9, atol=1e-9)


def _jitter(x: torch.Tensor, p: dict) -> torch.Tensor:
    """torchvision's ColorJitter with the drawn order and factors."""
    ops = (F.adjust_brightness, F.adjust_contrast, F.adjust_saturation, F.adjust_hue)
    names = ("brightness", "contrast", "saturation", "hue")
    for fn in p["order"]:
        if p[names[fn]] is not None:
            x = ops[fn](x, p[names[fn]])
    return x


def test_a_flip_between_two_warps_mirrors_only_the_first(images):
    """[rotation, flip, affine]: the rotation is drawn mirrored, the affine warp as drawn."""
    tf = T.Compose([T.Resize((40, 40)), T.RandomRotation(30, "bilinear"), T.RandomHorizontalFlip(),
                    T.RandomAffine(0, (0.2, 0.1), None, (-15, 15), "bilinear"), T.ToDtype(torch.float32, scale=True)])
    assert tf.plan.flip_at == (1, 0)
    sizes = [tuple(i.shape[1:]) for i in images]
    params = tf.make_params(sizes, 1) + tf.make_params(sizes, 2)
    got = tf(images * 2, params)
    for k, (img, p) in enumerate(zip(images * 2, params)):
        x = F.rotate(F.resize(F.to_dtype(img, torch.float32, scale=True), [40, 40], antialias=True),
                     p["rotation"]["angle"], IM.BILINEAR, fill=0.0)
        x = F.horizontal_flip(x) if p["flip"] else x
        want = F.affine(x, **p["affine"], interpolation=IM.BILINEAR, fill=0.0)
        assert float((got[k] - want).abs().max()) * 255 < 0.01, (k, p)


def test_masks_and_boxes_follow_a_flip_after_the_warps(photos):
    """Compose.masks and Compose.boxes with the draws: torchvision's resized crop, then the
    warps (a rotation, an affine and a perspective warp), then the flips, on a
    tv_tensors.Mask (to the pixel: a flipped sample's mask is flipped back, warped as drawn
    and flipped again, warped.Mirrored) and BoundingBoxes (then SanitizeBoundingBoxes'
    choice)."""
    tf = T.Compose([T.RandomResizedCrop(24, scale=(0.3, 1.0)), T.RandomApply([T.RandomRotation(35)], p=0.8),
                    T.RandomAffine(10, (0.1, 0.1), shear=6), T.RandomPerspective(0.4, 0.6), T.RandomHorizontalFlip(),
                    T.RandomVerticalFlip()])
    sizes = [(37, 41), (50, 33), (64, 64), (31, 70), (28, 28), (40, 40)]
    names = sorted(photos)
    masks = [torch.from_numpy(slic_mask(centre(photos[names[k % len(names)]], h, w))) for k, (h, w) in enumerate(sizes)]
    rng = np.random.default_rng(0)
    pixels = differ = kept = 0
    flipped = set()
    for seed in range(10):
        d = tf.draw_batch(sizes, seed)
        out = tf.masks(masks, d, fill=255)
        entries = [{"boxes": random_boxes(rng, h, w), "labels": np.arange(7)} for h, w in sizes]
        boxes = tf.boxes(entries, d, sizes=sizes)
        for k, m in enumerate(masks):
            p = d[k]
            flipped.add((p["flip"], p["vflip"]))
            ref = tv_tensors.Mask(tv_mask(m, _unflipped(p), (24, 24), 255)[None])
            for step in tf.plan.program:
                ref = tv_warps(ref, step, p, 255)
            ref = _flips(ref, p)[0].as_subclass(torch.Tensor)
            n = int((out[k] != ref).sum())
            assert n == 0, (seed, k, n)
            pixels, differ = pixels + ref.numel(), differ + n
            x = tv_tensors.BoundingBoxes(torch.as_tensor(entries[k]["boxes"]), format="XYXY", canvas_size=sizes[k])
            x = F.clamp_bounding_boxes(tv_moved(x, _unflipped(p), (24, 24)))
            for step in tf.plan.program:
                x = tv_warps(x, step, p)
            want, keep = tv_sanitized(_flips(x, p))
            assert boxes[k]["labels"].tolist() == torch.nonzero(keep)[:, 0].tolist(), (seed, k)
            torch.testing.assert_close(boxes[k]["boxes"], want, rtol=0, atol=1e-4)
            kept += len(want)
    assert len(flipped) == 4 and kept > 150
    assert differ == 0 and pixels > 30_000, (pixels, differ)


def test_torchvisions_recipe_converts_and_what_cannot_be_mirrored_is_refused():
    tf = T.Compose.from_torchvision(v1.Compose([v1.Resize((224, 224)), v1.RandomRotation(15),
                                                v1.RandomHorizontalFlip(), v1.ToTensor()]))
    assert tf.plan.flip_at == (1, 0)
    tf = T.Compose([T.Resize((32, 32)), T.RandomRotation(10, center=(3, 4)), T.RandomVerticalFlip()])
    assert tf.plan.flip_at == (0, 1)  # (a warp about another centre mirrors too: the op is, not its draw)
    timm = pytest.importorskip("timm.data")
    ra = timm.rand_augment_transform("rand-m9-mstd0.5", {})
    with pytest.raises(TransformError, match="(?s)after TimmRandAugment cannot be fused.*put the flip before"):
        T.Compose.from_torchvision(v1.Compose([v1.Resize((32, 32)), ra, v1.RandomHorizontalFlip()]))
