"""The first pass: the steps that move no pixel written before the geometry
(`[ColorJitter(...), RandomResizedCrop(224), ...]`; SSD's preset, RandomPhotometricDistort
before RandomZoomOut and RandomIoUCrop) run on each whole image at its size, as torchvision
runs them, then the canvas and the geometry read their output. Pixels against
torchvision's functional ops replaying our draws on real photographs (in float, the
kernel's semantics: the first pass writes uint8 levels, so within a level); the SSD preset
as written with its boxes; through the Loader (shards, the resident store); what the
decoders are asked for; refusals."""
from __future__ import annotations

import io
from collections import defaultdict

import numpy as np
import pytest
import torch
import torchvision.transforms as tv1
import torchvision.transforms.v2 as tv
import torchvision.transforms.v2.functional as F
from PIL import Image
from torchvision import tv_tensors

import gpudecode
from gpudecode import transforms as T
from gpudecode.errors import TransformError
from conftest import encode, make_shard
from test_boxes import random_boxes, tv_sanitized

OUT = (40, 44)
JITTER = [("brightness", F.adjust_brightness), ("contrast", F.adjust_contrast),
          ("saturation", F.adjust_saturation), ("hue", F.adjust_hue)]
FILL = (123, 117, 104)


@pytest.fixture(scope="module")
def photo_batch(photos):
    out = [torch.from_numpy(np.ascontiguousarray(p.transpose(2, 0, 1))) for p in photos.values()]
    out.append(torch.from_numpy(np.ascontiguousarray(photos["coffee"][::3, ::2].transpose(2, 0, 1))))
    out.append(torch.from_numpy(np.ascontiguousarray(photos["coffee"][::3, ::2].transpose(2, 0, 1))))  # (a size twice)
    return out


def _jitter(x: torch.Tensor, p: dict) -> torch.Tensor:
    for op in p["order"]:
        name, fn = JITTER[op]
        if p.get(name) is not None:
            x = fn(x, p[name])
    return x


def _photometric(x: torch.Tensor, p: dict) -> torch.Tensor:
    params = {k: p[k] for k in T.RandomPhotometricDistort.keys}
    perm = params["channel_permutation"]
    params["channel_permutation"] = None if perm is None else torch.tensor(perm)
    return tv.RandomPhotometricDistort().transform(x, params)


STEPS = {  # a step, and torchvision's functional form of it replaying our draw
    "jitter": (lambda: T.ColorJitter(0.4, 0.4, 0.4, 0.1), _jitter),
    "photometric": (lambda: T.RandomPhotometricDistort(p=0.8), _photometric),
    "blur": (lambda: T.GaussianBlur(5, (0.5, 2.0)), lambda x, p: F.gaussian_blur(x, [5, 5], p["sigma"])),
    "sharpness": (lambda: T.RandomAdjustSharpness(2.5, p=1.0), lambda x, p: F.adjust_sharpness(x, 2.5)),
    "grey then jitter": (lambda: [T.RandomGrayscale(0.5), T.ColorJitter(0.3, 0.3)],
                         lambda x, p: _jitter(F.rgb_to_grayscale(x, 3) if p["grayscale"] else x, p)),
}


def _theirs(img: torch.Tensor, p: dict, colour, flip_first: bool = False) -> torch.Tensor:
    """torchvision on the float image: the flip (first, where the Compose has it so), the
    colour step on the whole image, the crop resized, the flip (after)."""
    x = F.to_dtype(img, torch.float32, scale=True)
    if flip_first and p["flip"]:
        x = F.horizontal_flip(x)
    x = colour(x, p).clamp(0, 1)
    x = F.resized_crop(x, *p["crop"], list(OUT), antialias=True)
    return F.horizontal_flip(x) if p["flip"] and not flip_first else x


@pytest.mark.parametrize("name", list(STEPS))
def test_a_step_before_the_crop_runs_on_the_whole_image_as_torchvisions(photo_batch, name):
    make, colour = STEPS[name]
    made = make()
    first = made if isinstance(made, list) else [made]
    tf = T.Compose([*first, T.RandomResizedCrop(OUT), T.RandomHorizontalFlip(), T.ToDtype(torch.float32, scale=True)])
    assert tf.plan.first == tuple(first) and tf.native_spec is None
    sizes = [tuple(im.shape[1:]) for im in photo_batch]
    worst, means = 0.0, []
    for seed in range(3):
        params = tf.make_params(sizes, seed)
        got = tf(photo_batch, params)
        for k, (img, p) in enumerate(zip(photo_batch, params)):
            err = (got[k] - _theirs(img, p, colour)).abs() * 255
            worst = max(worst, float(err.max()))
            means.append(float(err.mean()))
    # the first pass's uint8 levels: within one (its float value truncated once), a quarter level on average
    assert worst <= 1.0 + 1e-3 and np.mean(means) < 0.35, (worst, np.mean(means))


def test_a_policy_before_the_crop_warps_the_whole_image(photo_batch):
    """TrivialAugmentWide before the crop: its op (a shear, a rotation, a colour op) on the
    whole image at its size, as torchvision's, then the crop; within a level but for 1%
    of values (the policies' own bound: nearest warps), and refused for boxes and masks."""
    policy = tv.TrivialAugmentWide()

    def theirs(x, p):
        for name, m in p["trivial_augment"]:
            x = policy._apply_image_or_video_transform(x, name, m, interpolation=policy.interpolation,
                                                       fill=policy._fill)
        return x

    tf = T.Compose([T.TrivialAugmentWide(), T.RandomResizedCrop(OUT), T.RandomHorizontalFlip(),
                    T.ToDtype(torch.float32, scale=True)])
    sizes = [tuple(im.shape[1:]) for im in photo_batch]
    names = set()
    for seed in range(4):
        params = tf.make_params(sizes, seed)
        got = tf(photo_batch, params)
        for k, (img, p) in enumerate(zip(photo_batch, params)):
            err = (got[k] - _theirs(img, p, theirs)).abs() * 255
            assert float((err > 1.0 + 1e-3).float().mean()) <= 0.01, (k, p["trivial_augment"])
            names.update(n for n, _ in p["trivial_augment"])
    assert len(names) >= 6
    from gpudecode.transforms.masks import refusal

    assert refusal(tf.plan) == "TrivialAugmentWide before the geometry moves pixels in each whole image"
    assert refusal(T.Compose([T.ColorJitter(0.3), T.RandomResizedCrop(OUT)]).plan) is None


def test_the_whole_images_mean_is_the_contrasts(photo_batch):
    """A contrast before the crop blends with the whole image's grey mean (torchvision's);
    after it, with the crop's: the two orders differ, and each is torchvision's."""
    before = T.Compose([T.ColorJitter(contrast=(0.3, 0.3)), T.RandomResizedCrop(OUT, scale=(0.05, 0.1))])
    after = T.Compose([T.RandomResizedCrop(OUT, scale=(0.05, 0.1)), T.ColorJitter(contrast=(0.3, 0.3))])
    img = photo_batch[0]
    p = before.make_params([tuple(img.shape[1:])], 0)
    q = dict(p[0])
    a, b = before(img, p), after(img, [q])
    want = F.resized_crop(F.adjust_contrast(img, 0.3), *q["crop"], list(OUT), antialias=True)
    assert (a.int() - want.int()).abs().max() <= 2  # (torchvision's uint8 blend truncates; the kernel's once)
    assert (a.int() - b.int()).abs().float().mean() > 5


def test_a_flip_before_the_colour_step_and_the_crop(photo_batch):
    """[RandomHorizontalFlip(), ColorJitter, RandomResizedCrop]: flipped, jittered, then
    the crop of the flipped image (the crop's window mirrored, as for a flip first)."""
    tf = T.Compose([T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.RandomResizedCrop(OUT),
                    T.ToDtype(torch.float32, scale=True)])
    assert tf.plan.mirror == (True, False)
    sizes = [tuple(im.shape[1:]) for im in photo_batch]
    flipped = 0
    for seed in range(3):
        params = tf.make_params(sizes, seed)
        got = tf(photo_batch, params)
        for k, (img, p) in enumerate(zip(photo_batch, params)):
            assert float(((got[k] - _theirs(img, p, _jitter, flip_first=True)).abs() * 255).max()) <= 1.0 + 1e-3
            flipped += p["flip"]
    assert flipped > 3


def _ssd_chain(img: torch.Tensor, boxes: np.ndarray, p: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """torchvision's SSD preset replaying our draws on the float image and its boxes:
    the distortion, RandomZoomOut's pad, RandomIoUCrop's crop, the flip, the sanitizing."""
    x = tv_tensors.Image(_photometric(F.to_dtype(img, torch.float32, scale=True), p).clamp(0, 1))
    b = tv_tensors.BoundingBoxes(torch.from_numpy(boxes), format="XYXY", canvas_size=tuple(img.shape[-2:]))
    if "padding" in p:
        x, b = F.pad(x, list(p["padding"]), fill=[v / 255 for v in FILL]), F.pad(b, list(p["padding"]))
    x, b = F.crop(x, *p["crop"]), F.crop(b, *p["crop"])
    if "inside" in p:
        b[~torch.from_numpy(p["inside"])] = 0
    if p["flip"]:
        x, b = F.horizontal_flip(x), F.horizontal_flip(b)
    return x.as_subclass(torch.Tensor), tv_sanitized(b)[0]


def test_torchvisions_ssd_preset_as_written(photos):
    """The detection reference's SSD preset, as it writes it (the distortion first, images
    of their own sizes): within a level of torchvision's functional chain with our draws,
    the boxes as torchvision moves them."""
    fill = defaultdict(lambda: FILL, {tv_tensors.Mask: 0})
    tf = T.Compose.from_torchvision(tv.Compose([
        tv.RandomPhotometricDistort(p=1.0), tv.RandomZoomOut(fill=fill), tv.RandomIoUCrop(),
        tv.RandomHorizontalFlip(p=0.5), tv.ToDtype(torch.float32, scale=True), tv.SanitizeBoundingBoxes()]),
        ragged=True)
    assert isinstance(tf.plan.first[0], T.RandomPhotometricDistort) and isinstance(tf.plan.canvas, T.RandomZoomOut)
    rng = np.random.default_rng(3)
    names = sorted(photos)
    imgs, entries = [], []
    for i in range(12):
        h, w = int(rng.integers(30, 90)), int(rng.integers(30, 90))
        imgs.append(torch.from_numpy(np.ascontiguousarray(photos[names[i % len(names)]][:h, :w])).permute(2, 0, 1))
        boxes = random_boxes(rng, h, w, n=int(rng.integers(1, 6)))
        entries.append({"boxes": boxes, "labels": np.arange(len(boxes))})
    sizes = [tuple(im.shape[-2:]) for im in imgs]
    zoomed = 0
    for seed in range(3):
        d = tf.draw_batch(sizes, seed, boxes=entries)
        got = tf([im.contiguous() for im in imgs], d)
        targets = tf.boxes(entries, d)
        for k, (img, e, p) in enumerate(zip(imgs, entries, d)):
            want, boxes = _ssd_chain(img, e["boxes"], p)
            assert got[k].shape == want.shape
            assert float(((got[k] - want).abs() * 255).max()) <= 1.0 + 1e-3, (seed, k)
            torch.testing.assert_close(targets[k]["boxes"], boxes, rtol=0, atol=1e-4)
            zoomed += "padding" in p
    assert zoomed > 3


@pytest.mark.parametrize("keep", [None, "ram"])
def test_the_loader_gives_the_compose_on_the_decoded_images(tmp_path, photos, keep):
    """Through the Loader (PNG shards: the decoder asked for whole images; and kept in RAM
    after the first epoch): the Compose called on Pillow's decode with the Loader's draws,
    value for value, on a batch of two sizes."""
    imgs = [photos["astronaut"][::8, ::8], photos["coffee"][::7, ::9], photos["chelsea"][::5, ::6],
            photos["astronaut"][1::8, ::8]]
    shard = make_shard(tmp_path / "c-000000.tar", [{"__key__": f"{i:03d}", "png": encode(a, "PNG"), "cls": b"1"}
                                                    for i, a in enumerate(imgs)])
    tf = T.Compose([T.RandomApply([T.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8), T.RandomGrayscale(0.3),
                    T.RandomResizedCrop(24), T.RandomHorizontalFlip()])
    loader = gpudecode.Loader(shard, batch_size=4, transform=tf, device="cpu", shuffle=False, seed=7, keep=keep)
    decoded = [torch.from_numpy(np.array(Image.open(io.BytesIO(encode(a, "PNG"))).convert("RGB"))).permute(2, 0, 1)
               for a in imgs]
    for epoch in (1, 2):
        loader.set_epoch(epoch)
        (images, labels), = list(loader)
        assert images.shape == (4, 3, 24, 24) and labels.tolist() == [1] * 4
        params = tf.make_params([tuple(d.shape[1:]) for d in decoded], 7, epoch=epoch, indices=[0, 1, 2, 3])
        assert torch.equal(images, tf([d.contiguous() for d in decoded], params)), epoch


def test_the_decoders_are_asked_for_whole_images():
    """The crop's window alone is not enough: the step before it reads the whole image
    (its contrast's mean, its blur's neighbours), so the decoders decode it whole."""
    tf = T.Compose([T.ColorJitter(0.4, 0.4), T.RandomResizedCrop(16)])
    sizes = [(40, 50), (33, 21)]
    assert tf.decode_boxes(tf.make_params(sizes, 0), sizes) == [(0, 0, 40, 50), (0, 0, 33, 21)]
    zoom = T.Compose([T.ColorJitter(0.4), T.RandomZoomOut(p=1.0), T.RandomResizedCrop(16, scale=(0.02, 0.1))])
    assert zoom.decode_boxes(zoom.make_params(sizes, 0), sizes) == [(0, 0, 40, 50), (0, 0, 33, 21)]


def test_a_resize_before_the_random_resized_crop(photo_batch):
    """`[Resize(256), RandomResizedCrop(224), ...]` (v1, as tutorials write it): each whole
    image resized in the first pass, torchvision's Resize of a uint8 image bit for bit
    (torch's own ops), the crop drawn in the resized image and read from it by the kernel;
    with ColorJitter before the Resize, the jitter first, at the image's size. The
    decoders decode whole images."""
    tf = T.Compose.from_torchvision(tv1.Compose([tv1.Resize(96), tv1.RandomResizedCrop(64), tv1.RandomHorizontalFlip(),
                                                 tv1.ToTensor()]))
    assert isinstance(tf.plan.first[0], T.Resize) and isinstance(tf.plan.geometry[0], T.RandomResizedCrop)
    sizes = [tuple(i.shape[1:]) for i in photo_batch]
    params = tf.make_params(sizes, 3)
    assert tf.decode_boxes(params, sizes) == [(0, 0, h, w) for h, w in sizes]
    got = tf(photo_batch, params)
    for k, (img, p) in enumerate(zip(photo_batch, params)):
        resized = F.resize(img, [96], antialias=True)
        assert tuple(p["first_resize"]) == tuple(resized.shape[1:])
        t, l, h, w = p["crop"]
        assert t + h <= resized.shape[1] and l + w <= resized.shape[2]
        want = F.resized_crop(F.to_dtype(resized, torch.float32, scale=True), t, l, h, w, [64, 64], antialias=True)
        want = F.horizontal_flip(want) if p["flip"] else want
        err = (got[k] - want).abs() * 255
        assert float(err.max()) < 1e-3, (k, float(err.max()))
    assert {p["flip"] for p in params} == {False, True}
    drawn = T.Compose([T.RandomShortestSize((80, 96, 112), max_size=200), T.RandomResizedCrop(48),
                       T.ToDtype(torch.float32, scale=True)])  # (a size drawn an image: the crop drawn in it)
    params = drawn.make_params(sizes, 1)
    got = drawn(photo_batch, params)
    for k, (img, p) in enumerate(zip(photo_batch, params)):
        resized = F.resize(img, list(p["first_resize"]), antialias=True)
        want = F.resized_crop(F.to_dtype(resized, torch.float32, scale=True), *p["crop"], [48, 48], antialias=True)
        assert float((got[k] - want).abs().max()) * 255 < 1e-3, k
    assert len({tuple(p["first_resize"]) for p in params}) > 1
    jitter = T.Compose([T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.Resize((80, 90)), T.RandomResizedCrop(48),
                        T.ToDtype(torch.float32, scale=True)])
    assert [type(t) for t in jitter.plan.first] == [T.ColorJitter, T.Resize]
    params = jitter.make_params(sizes, 5)
    got = jitter(photo_batch, params)
    for k, (img, p) in enumerate(zip(photo_batch, params)):  # (the jitter of the float image, truncated once)
        jittered = F.to_dtype(_jitter(F.to_dtype(img, torch.float32, scale=True), p), torch.uint8, scale=True)
        resized = F.resize(jittered, [80, 90], antialias=True)
        want = F.resized_crop(F.to_dtype(resized, torch.float32, scale=True), *p["crop"], [48, 48], antialias=True)
        err = (got[k] - want).abs() * 255
        assert float(err.max()) < 1.0 + 1e-3 and float((err > 0.5).float().mean()) < 0.01, k


def test_a_resize_then_a_resize(photo_batch, tmp_path, photos):
    """`[Resize(s1), Resize(s2)]` (and a crop after them): the first resize of each whole
    image in the first pass, torchvision's Resize of a uint8 image bit for bit, then the
    kernel's of it, as torchvision's of the float image, and within a level of
    torchvision's second resize of the uint8 one; a flip before them."""
    f32 = tv.ToDtype(torch.float32, scale=True)
    for steps, first, rest in (([tv.Resize(120), tv.Resize(64)], [120], [tv.Resize(64)]),
                               ([tv.Resize((100, 90)), tv.Resize(50), tv.CenterCrop(48)], [100, 90],
                                [tv.Resize(50), tv.CenterCrop(48)]),
                               ([tv.RandomHorizontalFlip(), tv.Resize(100), tv.Resize((40, 60))], [100],
                                [tv.Resize((40, 60))])):
        ours = T.Compose.from_torchvision(tv.Compose([*steps, f32]))
        assert isinstance(ours.plan.first[0], T.Resize) and isinstance(ours.plan.geometry[0], T.Resize)
        for img in photo_batch:
            params = ours.make_params([tuple(img.shape[1:])] * 2, 3)
            got = ours([img, img], params)
            for k, p in enumerate(params):  # (torchvision's: the flip, its Resize of the uint8 image, the rest)
                resized = F.resize(F.horizontal_flip(img) if p["flip"] else img, first, antialias=True)
                assert tuple(p["first_resize"]) == tuple(resized.shape[1:])
                want = tv.Compose([f32, *rest])(resized)  # (the kernel resamples in float)
                assert got[k].shape == want.shape and float((got[k] - want).abs().max()) * 255 < 1e-3, (steps, k)
                rounded = tv.Compose([*rest, f32])(resized)  # (torchvision's resize of uint8 rounds: a level)
                assert float((got[k] - rounded).abs().max()) * 255 <= 1.0 + 1e-3, (steps, k)
    # through the Loader: the output's size that of the first resize's output resized
    imgs = [np.ascontiguousarray(photos[n][:150, :200]) for n in ("coffee", "rocket", "chelsea")]
    shard = make_shard(tmp_path / "rr-000000.tar", [{"__key__": f"{i:03d}", "png": encode(a, "PNG"), "cls": b"1"}
                                                     for i, a in enumerate(imgs)])
    tf = T.Compose([T.Resize(61), T.Resize(23), T.ToDtype(torch.float32, scale=True)])
    batches = list(gpudecode.Loader(shard, batch_size=2, transform=tf, device="cpu", shuffle=False, seed=2))
    decoded = [torch.from_numpy(np.ascontiguousarray(a.transpose(2, 0, 1))) for a in imgs]
    assert [tuple(b.images.shape) for b in batches] == [(2, 3, 23, 30), (1, 3, 23, 30)]  # (61x81, then 23x30)
    for b, chunk, at in zip(batches, (decoded[:2], decoded[2:]), (0, 2)):
        params = tf.make_params([tuple(d.shape[1:]) for d in chunk], 2, indices=list(range(at, at + len(chunk))))
        assert torch.equal(b.images, tf(chunk, params))


@pytest.mark.parametrize("keep", [None, "ram"])
def test_a_resize_before_the_crop_through_the_loader(tmp_path, photos, keep):
    """`[Resize(40), RandomResizedCrop(24), flip]` through the Loader (PNG shards, two
    epochs, streamed and kept in RAM, images of two sizes): the Compose called on Pillow's
    decode with the Loader's draws, value for value. Boxes and masks do not follow it."""
    from gpudecode.transforms.masks import refusal

    imgs = [photos["astronaut"][::8, ::8], photos["coffee"][::7, ::9], photos["chelsea"][::5, ::6]]
    shard = make_shard(tmp_path / "r-000000.tar", [{"__key__": f"{i:03d}", "png": encode(a, "PNG"), "cls": b"2"}
                                                    for i, a in enumerate(imgs)])
    tf = T.Compose([T.Resize(40), T.RandomResizedCrop(24), T.RandomHorizontalFlip(),
                    T.ToDtype(torch.float32, scale=True)])
    assert refusal(tf.plan) == "Resize before RandomResizedCrop resizes each whole image first"
    loader = gpudecode.Loader(shard, batch_size=3, transform=tf, device="cpu", shuffle=False, seed=4, keep=keep)
    decoded = [torch.from_numpy(np.array(Image.open(io.BytesIO(encode(a, "PNG"))).convert("RGB"))).permute(2, 0, 1)
               for a in imgs]
    for epoch in (1, 2):
        loader.set_epoch(epoch)
        (images, labels), = list(loader)
        assert images.shape == (3, 3, 24, 24) and labels.tolist() == [2] * 3
        params = tf.make_params([tuple(d.shape[1:]) for d in decoded], 4, epoch=epoch, indices=[0, 1, 2])
        assert torch.equal(images, tf([d.contiguous() for d in decoded], params)), epoch


@pytest.mark.parametrize("steps,match", [
    (lambda: [T.ToDtype(torch.float32, scale=True), T.Resize(32), T.RandomResizedCrop(16)],
     r"(?s)Resize on a float image before the geometry.*writes\s+uint8\s+levels"),
    (lambda: [T.ToDtype(torch.float32, scale=True), T.ColorJitter(0.4), T.RandomResizedCrop(16)],
     r"(?s)ColorJitter on a float image before the geometry.*writes\s+uint8\s+levels"),
    (lambda: [T.ColorJitter(0.4), T.RandomResizedCrop(16), T.ColorJitter(0.2)], r"two ColorJitters"),
    (lambda: [T.RandomHorizontalFlip(), T.RandAugment(), T.RandomResizedCrop(16)],
     r"(?s)RandomHorizontalFlip before RandAugment.*moves\s+pixels.*put\s+the\s+flip\s+after\s+RandAugment"),
    (lambda: [T.ColorJitter(0.2), T.RandomVerticalFlip(), T.TrivialAugmentWide(), T.RandomResizedCrop(16)],
     r"(?s)RandomVerticalFlip before TrivialAugmentWide"),
])
def test_what_it_cannot_take_is_refused(steps, match):
    with pytest.raises(TransformError, match=match):
        T.Compose(steps())


def test_images_of_one_channel_take_a_first_pass_of_one_channel():
    """(Refused before.) A grey set's first pass runs on its one channel, which the geometry
    reads as three: tests/test_grey_first.py checks the pixels."""
    tf = T.Compose([T.ColorJitter(0.4), T.Resize((16, 16))], grey=True)
    assert tf.plan.first and tf.first_pass is not None and tf.first_pass.plan.channels == 1 and tf.plan.channels == 1


def test_a_flip_after_a_policy_first_is_the_crops():
    """[TrivialAugmentWide(), RandomHorizontalFlip(), RandomResizedCrop]: the policy on the
    whole image, then the flip, then the crop of the flipped image (a flip first, after the
    first pass): torchvision's order, within its bound."""
    policy = tv.TrivialAugmentWide()
    tf = T.Compose([T.TrivialAugmentWide(), T.RandomHorizontalFlip(), T.RandomResizedCrop(OUT),
                    T.ToDtype(torch.float32, scale=True)])
    assert tf.plan.mirror == (True, False) and tf.plan.first
    img = torch.from_numpy(np.ascontiguousarray(np.random.default_rng(0).integers(0, 255, (60, 70, 3),
                                                                                  dtype=np.uint8).transpose(2, 0, 1)))
    flipped = 0
    for seed in range(8):
        p = tf.make_params([(60, 70)], seed)
        x = F.to_dtype(img, torch.float32, scale=True)
        for name, m in p[0]["trivial_augment"]:
            x = policy._apply_image_or_video_transform(x, name, m, interpolation=policy.interpolation,
                                                       fill=policy._fill)
        x = F.horizontal_flip(x) if p[0]["flip"] else x
        want = F.resized_crop(x.clamp(0, 1), *p[0]["crop"], list(OUT), antialias=True)
        err = (tf(img, p) - want).abs() * 255
        assert float((err > 1.0 + 1e-3).float().mean()) <= 0.01, (seed, p[0]["trivial_augment"])
        flipped += p[0]["flip"]
    assert 0 < flipped < 8


def test_a_float_conversion_after_it_and_no_geometry():
    """A conversion after the first pass's steps is the output's (the same plan as
    ToTensor after the crop); without a geometry step they are the program's."""
    a = T.Compose([T.ColorJitter(0.4), T.ToDtype(torch.float32, scale=True), T.Resize((16, 16))])
    assert a.plan.first and a.plan.dtype == torch.float32
    b = T.Compose([T.ColorJitter(0.4), T.ToDtype(torch.float32, scale=True)])
    assert not b.plan.first and len(b.plan.program) == 1


def test_images_of_several_sizes_share_a_launch_within_the_memory_bound():
    """first.groups: every image once, in a launch as large as its largest member, whose
    memory is at most twice its images' pixels; one size, one launch; portrait and
    landscape photographs of one size together."""
    from gpudecode.transforms.first import groups

    assert groups([(32, 32)] * 5) == [((32, 32), [0, 1, 2, 3, 4])]
    assert groups([(375, 500), (500, 375)]) == [((500, 500), [0, 1])]
    rng = np.random.default_rng(0)
    for n in (1, 7, 64):
        sizes = [(int(h), int(w)) for h, w in rng.integers(1, 900, (n, 2))]
        launches = groups(sizes)
        assert sorted(i for _, m in launches for i in m) == list(range(n))
        for (h, w), members in launches:
            assert all(sizes[i][0] <= h and sizes[i][1] <= w for i in members)
            assert len(members) * h * w <= 2.0 * sum(sizes[i][0] * sizes[i][1] for i in members)
            assert h == max(sizes[i][0] for i in members) and w == max(sizes[i][1] for i in members)
    # a launch's pixels bounded (its float scratch): one size in several launches, a larger image alone
    launches = groups([(100, 100)] * 10 + [(300, 300)], most=35_000)
    assert launches == [((300, 300), [10]), ((100, 100), [0, 1, 2]), ((100, 100), [3, 4, 5]),
                        ((100, 100), [6, 7, 8]), ((100, 100), [9])]


def test_the_first_pass_on_the_cuda_kernel_under_the_simulator(photos, monkeypatch):
    """The first pass's launch (whole images of three sizes in one ragged launch, uint8
    out; RandomPhotometricDistort, a blur and a policy) through the
    CUDA kernels under the simulator, each the CPU twin's byte for byte; then the crop of
    its images, as the Compose gives it. (On a GPU, tests/test_gpu.py runs it for real.)"""
    import os

    from gpudecode.kernels import fused
    from gpudecode.transforms import compose

    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        pytest.skip("the simulator's form of a launch (on a GPU, tests/test_gpu.py launches for real)")
    crops = [np.ascontiguousarray(p[50 + 7 * k:50 + 7 * k + h, 80:80 + w].transpose(2, 0, 1))
             for k, (p, (h, w)) in enumerate(zip(photos.values(), [(14, 13), (11, 17), (14, 13), (8, 6)]))]
    # (the images views of one buffer: a direct call reads them in place, and the simulator copies what it
    # is given, all of it, back after the launch)
    one = torch.from_numpy(np.concatenate([c.reshape(-1) for c in crops]))
    at = np.cumsum([0] + [c.size for c in crops])
    imgs = [one[at[k]:at[k + 1]].view(*c.shape) for k, c in enumerate(crops)]
    launches: list = []
    real = compose.launch

    def both(src, geom, args, order, mean, std, out, **kw):
        real(src, geom, args, order, mean, std, out, **kw)
        if out.dtype == torch.uint8:  # (the first pass's: the crop's writes floats)
            n, _, oh, ow = out.shape
            rows, ragged = fused.own_sizes(geom.copy(), oh, ow)
            got = np.full(tuple(out.shape), 7, np.uint8)
            fused.fused_cuda(src.numpy().copy(), rows, args.copy(), order.copy(), mean, std, got,
                             normalize=kw["normalize"], ragged=ragged)
            launches.append((tuple(out.shape), ragged, fused.barrier_levels(order), np.array_equal(got, out.numpy())))

    monkeypatch.setattr(compose, "launch", both)
    tf = T.Compose([T.RandomPhotometricDistort(p=1.0), T.GaussianBlur(3, (0.5, 1.5)), T.RandAugment(1, 12),
                    T.RandomResizedCrop((6, 7)), T.Normalize([0.5] * 3, [0.25] * 3)])
    out = tf(imgs, seed=5)
    assert out.shape == (4, 3, 6, 7) and torch.isfinite(out).all()
    assert [(shape, ragged) for shape, ragged, _, _ in launches] == [((4, 3, 14, 17), True)]
    assert all(levels >= 1 for _, _, levels, _ in launches)  # (the contrast's mean, the blur: barriers)
    assert all(same for *_, same in launches), launches


def test_a_launch_of_large_images_takes_fewer_cpu_threads(photo_batch, monkeypatch):
    """On the CPU each thread's work rows are image-sized: under a budget of a byte, every
    launch runs on one thread, and the output is the one of all threads (it never depends
    on their count)."""
    from gpudecode.transforms import first

    tf = T.Compose([T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.RandomResizedCrop(OUT)])
    sizes = [tuple(im.shape[1:]) for im in photo_batch]
    params = tf.make_params(sizes, 5)
    want = tf(photo_batch, params)
    seen = []
    apply = type(tf).apply

    def spy(self, *args, **kw):
        seen.append(kw.get("num_threads"))
        return apply(self, *args, **kw)

    monkeypatch.setattr(first, "CPU_WORK_BYTES", 1)
    monkeypatch.setattr(T.Compose, "apply", spy)
    assert torch.equal(tf(photo_batch, params), want)
    # (the main pass's call first, with the call's threads; within it, the first pass's launches)
    assert len(seen) >= 3 and seen[0] == torch.get_num_threads() and seen[1:] == [1] * (len(seen) - 1)


def test_an_image_too_small_for_a_first_pass_blur_is_its_samples_error(tmp_path):
    """A blur first whose kernel reaches past a small image's reflection (torchvision's
    F.gaussian_blur raises there) is that sample's DecodeError, naming the shard and key,
    skipped under on_error="skip"; a 1x1 image through a ColorJitter first is an image."""
    rng = np.random.default_rng(0)
    imgs = {"a": (60, 80), "tiny": (1, 1), "small": (6, 9), "b": (70, 50)}
    shard = make_shard(tmp_path / "h-000000.tar", [
        {"__key__": k, "png": encode(rng.integers(0, 255, (*hw, 3), dtype=np.uint8), "PNG"), "cls": b"1"}
        for k, hw in imgs.items()])
    blur = T.Compose([T.GaussianBlur(23), T.RandomResizedCrop(16)])
    with pytest.raises(gpudecode.DecodeError, match=r"(?s)GaussianBlur.*key 'tiny'"):
        list(gpudecode.Loader(shard, batch_size=4, transform=blur, device="cpu", shuffle=False))
    (images, _), = list(gpudecode.Loader(shard, batch_size=4, transform=blur, device="cpu", shuffle=False,
                                         on_error="skip"))
    assert images.shape == (2, 3, 16, 16)
    jitter = T.Compose([T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.RandomResizedCrop(16)])
    (images, _), = list(gpudecode.Loader(shard, batch_size=4, transform=jitter, device="cpu", shuffle=False))
    assert images.shape == (4, 3, 16, 16)


def test_views_one_with_a_first_pass(tmp_path, photos):
    """Several views of each image (one decode for all): a view whose steps begin before
    the geometry beside one that crops first; each equals its Compose on Pillow's decode
    with the Loader's draws."""
    from gpudecode.pipeline import view_seed

    imgs = [photos["astronaut"][::8, ::8], photos["coffee"][::7, ::9], photos["chelsea"][::5, ::6]]
    shard = make_shard(tmp_path / "v-000000.tar", [{"__key__": f"{i:03d}", "png": encode(a, "PNG"), "cls": b"1"}
                                                    for i, a in enumerate(imgs)])
    views = [T.Compose([T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.RandomResizedCrop(24)]),
             T.Compose([T.RandomResizedCrop(16, scale=(0.05, 0.3)), T.RandomHorizontalFlip()])]
    loader = gpudecode.Loader(shard, batch_size=3, transform=views, device="cpu", shuffle=False, seed=3)
    (images, _), = list(loader)
    decoded = [torch.from_numpy(np.array(Image.open(io.BytesIO(encode(a, "PNG"))).convert("RGB"))).permute(2, 0, 1)
               for a in imgs]
    sizes = [tuple(d.shape[1:]) for d in decoded]
    for v, tf in enumerate(views):
        params = tf.make_params(sizes, view_seed(3, v), epoch=0, indices=[0, 1, 2])
        assert torch.equal(images[v], tf([d.contiguous() for d in decoded], params)), v
