"""RandomIoUCrop (SSD's crop, torchvision's detection reference "ssd" and "ssdlite"), whose
crop is drawn from the sample's boxes: its draws are torchvision's make_params given the
same random numbers; the image and its boxes are torchvision's functional ops with those
params (the boxes whose centres fall outside the crop dropped, as SanitizeBoundingBoxes
after torchvision's RandomIoUCrop drops them); through the Loader from a Boxes field,
streamed and resident, with a Mask beside it, under the error policy; what it needs and
cannot take refused by name."""
from __future__ import annotations

import json
import random
from collections import defaultdict

import numpy as np
import pytest
import torch
import torchvision.transforms.v2 as tv
import torchvision.transforms.v2.functional as F
from torchvision import tv_tensors

import gpudecode
from gpudecode import Boxes, Loader, TransformError
from gpudecode import transforms as T
from gpudecode.transforms.iou_crop import MAX_ROUNDS

from conftest import encode, make_shard
from test_boxes import _rectangles, random_boxes, tv_sanitized
from test_masks import png
from test_transforms import max_err_levels


def _theirs(monkeypatch, t: tv.RandomIoUCrop, blocks: list, size, boxes: np.ndarray) -> dict:
    """torchvision's make_params given our draw's numbers: each torch.randint the first of
    a round's block (an option), each torch.rand the block's next (float32)."""
    rounds = iter(blocks)
    at = {"block": None, "next": 0}

    def randint(low, high, size):
        at["block"], at["next"] = next(rounds), 1
        return torch.tensor([min(int(at["block"][0] * high), high - 1)])

    def rand(n):
        k = at["next"]
        at["next"] += n
        return torch.tensor(at["block"][k:k + n], dtype=torch.float32)

    image = tv_tensors.Image(torch.zeros((3, *size), dtype=torch.uint8))
    bb = tv_tensors.BoundingBoxes(torch.from_numpy(boxes), format="XYXY", canvas_size=tuple(size))
    with monkeypatch.context() as m:
        m.setattr(torch, "randint", randint)
        m.setattr(torch, "rand", rand)
        return t.make_params([image, bb])


def test_the_draws_are_torchvisions_make_params(monkeypatch):
    """For images of many sizes and boxes (some reaching out of the image, some tiny), under
    the default options and others: our draw's crop and the boxes it keeps are torchvision's
    make_params', given the same numbers (each round's block of the crop's stream, read in
    torchvision's order); "leave as is" is the whole image."""
    from gpudecode.transforms import iou_crop

    blocks: list = []
    made = iou_crop.uniforms
    monkeypatch.setattr(iou_crop, "uniforms", lambda *a: blocks.append(made(*a)) or blocks[-1])
    rng = np.random.default_rng(0)
    cases = [({}, 300), ({"sampler_options": [0.3, 0.5, 0.9], "trials": 5}, 120),
             ({"min_scale": 0.1, "max_scale": 0.6, "min_aspect_ratio": 0.8, "max_aspect_ratio": 1.25}, 120)]
    crops = as_is = 0
    for kw, n in cases:
        ours, theirs = T.RandomIoUCrop(**kw), tv.RandomIoUCrop(**kw)
        for i in range(n):
            h, w = int(rng.integers(8, 300)), int(rng.integers(8, 300))
            boxes = random_boxes(rng, h, w, n=int(rng.integers(1, 9)))
            if kw:  # (options with no "leave as is": an image and boxes a crop can meet, else torchvision never ends)
                w = max(8, int(h * rng.uniform(0.8, 1.25)))
                boxes = (boxes.clip(0, None) % np.float32(min(h, w) / 2)).astype(np.float32)
                boxes[:, 2:] = boxes[:, :2] + np.float32(min(h, w) / 2)
            if i % 7 == 0 and not kw:  # (small boxes: high IoUs are hard to reach; "leave as is" ends the loop)
                boxes[:, 2:] = boxes[:, :2] + rng.uniform(0.5, 6, (len(boxes), 2)).astype(np.float32)
            blocks.clear()
            got = ours.draw(random.Random(i), (h, w), boxes)
            want = _theirs(monkeypatch, theirs, list(blocks), (h, w), boxes)
            if not want:
                assert got == {"crop": (0, 0, h, w)}, (kw, i)
                as_is += 1
                continue
            assert got["crop"] == (want["top"], want["left"], want["height"], want["width"]), (kw, i)
            assert got["inside"].tolist() == want["is_within_crop_area"].tolist(), (kw, i)
            crops += 1
    assert crops > 300 and as_is > 30


def test_a_batchs_crops_are_each_images_own():
    """crops() draws a batch natively (_native.iou_crops): each image's crop and
    inside-flags are crop()'s (the Python reference) for its key alone, for images of no
    box, a few, many, under the default options, options without "leave as is", and few
    trials (several rounds); an image crop() refuses is refused by the batch."""
    rng = np.random.default_rng(7)
    cases = [{}, {"sampler_options": [0.1, 0.3, 0.5, 0.7], "trials": 3}, {"trials": 1, "min_scale": 0.5},
             {"min_aspect_ratio": 0.9, "max_aspect_ratio": 1.1, "sampler_options": [0.5, 0.9, 1.0]}]
    many = 0
    for kw in cases:
        t = T.RandomIoUCrop(**kw)
        for _ in range(6):
            n = int(rng.integers(1, 40))
            sizes = [(int(rng.integers(20, 200)), int(rng.integers(20, 200))) for _ in range(n)]
            if kw:  # (options without "leave as is": images a crop can meet, of aspect near the ratios')
                sizes = [(h, int(np.clip(w, h * 0.8, h * 1.3))) for h, w in sizes]
            boxes = []
            for h, w in sizes:
                k = int(rng.choice([0, 1, 3, 9, 300])) if not kw.get("sampler_options") or 1.0 in kw["sampler_options"] \
                    else int(rng.choice([1, 3, 9]))
                xy = rng.uniform(0, 0.6, (k, 2)) * (w, h)
                b = np.concatenate([xy, xy + rng.uniform(0.2, 0.4, (k, 2)) * (w, h)], 1).astype(np.float32)
                boxes.append(b)
                many += k > 256
            keys = [int(v) for v in rng.integers(0, 2**63, n)]
            got = t.crops(keys, sizes, boxes)
            for key, size, b, g in zip(keys, sizes, boxes, got):
                want = t.crop(key, size, b)
                assert g["crop"] == want["crop"], (kw, size, len(b))
                assert np.array_equal(g.get("inside", np.zeros(0)), want.get("inside", np.zeros(0)))
    assert many > 3
    one_row = [np.array([[0, 0, 10, 1]], np.float32)]
    with pytest.raises(ValueError, match="height 0"):
        T.RandomIoUCrop().crops([1], [(1, 50)], one_row)


def _same(t: T.RandomIoUCrop, keys, sizes, boxes) -> int:
    """crops() against crop() image by image: the same crop and flags, or the same error
    (crops raises the first image's); how many images crop() refuses."""
    want, errors = [], 0
    for key, size, b in zip(keys, sizes, boxes):
        try:
            want.append(t.crop(key, size, b))
        except ValueError as e:
            want.append(e)
            errors += 1
    first = next((w for w in want if isinstance(w, ValueError)), None)
    if first is not None:
        with pytest.raises(ValueError) as got:
            t.crops(keys, sizes, boxes)
        assert str(got.value) == str(first)
        return errors
    for g, w, b in zip(t.crops(keys, sizes, boxes), want, boxes):
        assert g["crop"] == w["crop"]
        assert ("inside" in g) == ("inside" in w) and np.array_equal(g.get("inside", ()), w.get("inside", ()))
        assert "inside" not in g or g["inside"].shape == (len(b),)
    return errors


def test_the_native_draws_are_the_references_on_odd_boxes_and_sizes():
    """The native draws against the Python reference where float32 edges lie: boxes of no
    width or height, turned over (x2 < x1: not what a Boxes field reads, but what a caller
    may pass), past the image, covering it, NaN and infinite corners, an IoU of 0 / 0 (numpy's
    NaN rules in the IoU's maximum), images of one row or column (the height-0 error), a side that float32
    rounds up to a whole number, very large images, one trial, narrow aspect ratios, options of 0 alone and of 0.99 alone."""
    rng = np.random.default_rng(11)
    kinds = [{}, {"trials": 1}, {"sampler_options": [0.0]}, {"sampler_options": [0.99], "trials": 2},
             {"min_aspect_ratio": 0.98, "max_aspect_ratio": 1.02}, {"min_scale": 0.0, "max_scale": 0.1},
             {"min_scale": 1.0, "max_scale": 1.0}]
    errors = images = 0
    for kw in kinds:
        t = T.RandomIoUCrop(**kw)
        for _ in range(12):
            n = int(rng.integers(1, 12))
            sizes = [(int(v), int(u)) for v, u in rng.choice([1, 2, 3, 17, 64, 301, 10_000], (n, 2))]
            boxes = []
            for h, w in sizes:
                k = int(rng.integers(0, 7))
                b = rng.uniform(-0.3, 1.3, (k, 4)) * np.float32([w, h, w, h])
                kind = rng.integers(0, 6, k)
                b[kind == 0, 2] = b[kind == 0, 0]  # (no width)
                b[kind == 1] = [0, 0, w, h]  # (the whole image)
                b[kind == 2, 3] = np.nan
                b[kind == 3, 0] = -np.inf
                b[kind == 4] = b[kind == 4][:, [2, 3, 0, 1]]  # (turned over)
                boxes.append(b.astype(np.float32))
            keys = [int(v) for v in rng.integers(0, 2**63, n, dtype=np.int64)]
            if _same(t, keys, sizes, boxes):
                errors += 1
            for one in range(n):  # (each image alone too: the batch's error is its first image's)
                errors += _same(t, keys[one:one + 1], sizes[one:one + 1], boxes[one:one + 1])
                images += 1
    assert errors > 20 and images > 300
    # an IoU of 0 / 0 (a box turned over whose negative area cancels the crop's): NaN, which
    # numpy's maximum keeps and its comparison passes, so the crop is taken
    whole = T.RandomIoUCrop(min_scale=1.0, max_scale=1.0, sampler_options=[0.99])
    over = [np.array([[64, 0, 0, 64]], np.float32)]
    assert whole.crop(5, (64, 64), over[0])["crop"] == (0, 0, 64, 64)
    _same(whole, [5], [(64, 64)], over)
    # float32 sides, as torch's: 10 * float32(0.7) is 6.99999988 in float64, 7 in float32
    seven = T.RandomIoUCrop(min_scale=0.7, max_scale=0.7, sampler_options=[0.0])
    full = [np.array([[0, 0, 10, 10]], np.float32)]
    assert seven.crop(5, (10, 10), full[0])["crop"][2:] == (7, 7)
    _same(seven, [5], [(10, 10)], full)


def test_the_native_call_checks_its_arrays():
    """_native.iou_crops refuses arrays that do not fit together (offsets past the boxes,
    falling, not from 0; sizes not [N, 2]) with a ValueError, never a read out of bounds."""
    from gpudecode import _native

    t = T.RandomIoUCrop()
    b = np.zeros((3, 4), np.float32)
    keys, sizes = np.array([1, 2], np.uint64), np.array([[9, 9], [9, 9]], np.int64)
    for off in ([0, 2, 4], [0, 2, 1], [1, 2, 3], [0, 3]):
        with pytest.raises(ValueError, match="offsets"):
            _native.iou_crops(t._spec, keys, sizes, b, np.array(off, np.int64))
    with pytest.raises(ValueError, match="sizes"):
        _native.iou_crops(t._spec, keys, sizes[:1], b, np.array([0, 1, 3], np.int64))
    with pytest.raises(ValueError, match="boxes"):
        _native.iou_crops(t._spec, keys, sizes, b.reshape(-1), np.array([0, 1, 3], np.int64))
    crops, status, inside = _native.iou_crops(t._spec, keys, sizes, b, np.array([0, 1, 3], np.int64))
    assert crops.shape == (2, 4) and status.shape == (2,) and inside.shape == (3,)


def test_an_image_without_boxes_and_options_that_never_end(monkeypatch):
    """No box: torchvision draws until "leave as is" comes; the outcome is the image as it
    is, here at once. Options with no "leave as is" and no box that can meet them: the
    image's error (ValueError, the Loader's DecodeError), not a hang."""
    assert T.RandomIoUCrop().draw(random.Random(0), (40, 50), np.zeros((0, 4), np.float32)) == {"crop": (0, 0, 40, 50)}
    with pytest.raises(ValueError, match="no box"):
        T.RandomIoUCrop(sampler_options=[0.5]).draw(random.Random(0), (40, 50), np.zeros((0, 4), np.float32))
    tiny = np.array([[0, 0, 0.5, 0.5]], np.float32)  # (IoU with any crop far under 0.9)
    with pytest.raises(ValueError, match=f"no crop in {MAX_ROUNDS} options"):
        T.RandomIoUCrop(sampler_options=[0.9], trials=2).draw(random.Random(0), (40, 50), tiny)
    with pytest.raises(ValueError, match="height 0"):
        T.RandomIoUCrop().draw(random.Random(1), (1, 50), np.array([[0, 0, 10, 1]], np.float32))


def test_a_member_of_many_boxes_is_checked_in_parts(monkeypatch):
    """200,000 boxes (a hostile member): the trials are checked against them a few at a
    time (never more than 2^20 trial-box pairs at once), the crop the one a trial at a time
    finds; with options that never leave the image as it is, the rounds are fewer, bounded
    by the work, and the image is its error."""
    from gpudecode.transforms import iou_crop

    rng = np.random.default_rng(3)
    xy = rng.uniform(0, 300, (200_000, 2)).astype(np.float32)
    many = np.concatenate([xy, xy + np.float32(2)], 1)
    seen: list = []
    made = iou_crop._iou
    monkeypatch.setattr(iou_crop, "_iou", lambda b, *a: seen.append(len(a[1]) * len(b)) or made(b, *a))
    got = T.RandomIoUCrop().draw(random.Random(0), (320, 320), many)
    assert seen and max(seen) <= 1 << 20 and "crop" in got
    monkeypatch.setattr(iou_crop, "_CELLS", 1 << 30)  # (all of a round's trials at once: the same crop)
    again = T.RandomIoUCrop().draw(random.Random(0), (320, 320), many)
    assert again["crop"] == got["crop"] and np.array_equal(again.get("inside"), got.get("inside"))
    with pytest.raises(ValueError, match=r"no crop in 33 options drawn, 40 tries each, for 200000 boxes"):
        T.RandomIoUCrop(sampler_options=[0.99]).draw(random.Random(0), (320, 320), many)


SSD = lambda size=(40, 40): T.Compose([  # noqa: E731  (torchvision's "ssd" preset, a batch of one size)
    T.RandomZoomOut(fill=(123, 117, 104), side_range=(1.0, 3.0), p=0.6), T.RandomIoUCrop(), T.Resize(size),
    T.RandomHorizontalFlip(), T.ToDtype(torch.float32, scale=True), T.SanitizeBoundingBoxes()])


def _tv_chain(img: torch.Tensor, boxes: np.ndarray, labels: np.ndarray, p: dict, size, fill):
    """torchvision's functional ops on an image and its BoundingBoxes with our params:
    RandomZoomOut's pad, RandomIoUCrop's crop and its zeroing of the boxes outside, the
    Resize, the flip, SanitizeBoundingBoxes: (image float32, boxes kept, their labels)."""
    x = tv_tensors.Image(F.to_dtype(img, torch.float32, scale=True))  # (resized in float, as the kernel does)
    b = tv_tensors.BoundingBoxes(torch.from_numpy(boxes), format="XYXY", canvas_size=tuple(img.shape[-2:]))
    if "padding" in p:
        x, b = F.pad(x, list(p["padding"]), fill=[v / 255 for v in fill]), F.pad(b, list(p["padding"]))
    t, l, h, w = p["crop"]
    x, b = F.crop(x, t, l, h, w), F.crop(b, t, l, h, w)
    if "inside" in p:
        b[~torch.from_numpy(p["inside"])] = 0
    x, b = F.resize(x, list(size), antialias=True), F.resize(b, list(size))
    if p["flip"]:
        x, b = F.horizontal_flip(x), F.horizontal_flip(b)
    kept, keep = tv_sanitized(b)
    return x.as_subclass(torch.Tensor), kept, labels[keep.numpy()]


def test_the_image_and_its_boxes_are_torchvisions_with_those_draws(photos):
    """SSD's recipe (RandomZoomOut, RandomIoUCrop, Resize, flip) on crops of photographs
    with boxes: the kernel's images within a level of torchvision's functional ops with
    our draws, and Compose.boxes their boxes and labels, the centres left out dropped."""
    tf = SSD()
    rng = np.random.default_rng(1)
    names = sorted(photos)
    imgs, entries = [], []
    for i in range(24):
        h, w = int(rng.integers(30, 90)), int(rng.integers(30, 90))
        src = photos[names[i % len(names)]]
        imgs.append(torch.from_numpy(np.ascontiguousarray(src[:h, :w])).permute(2, 0, 1).contiguous())
        boxes = random_boxes(rng, h, w, n=int(rng.integers(0, 6)))
        entries.append({"boxes": boxes, "labels": np.arange(len(boxes)) + 10 * i})
    sizes = [tuple(im.shape[-2:]) for im in imgs]
    dropped = cropped = 0
    for seed in range(4):
        d = tf.draw_batch(sizes, seed, boxes=entries)
        got = tf(imgs, d)
        targets = tf.boxes(entries, d)
        for k, (img, e, p) in enumerate(zip(imgs, entries, d)):
            want, boxes, labels = _tv_chain(img, e["boxes"], e["labels"], p, (40, 40), (123, 117, 104))
            assert max_err_levels(got[k], want) <= 1.0, (seed, k, p)
            torch.testing.assert_close(targets[k]["boxes"], boxes, rtol=0, atol=1e-4)
            assert targets[k]["labels"].tolist() == labels.tolist()
            cropped += p["crop"][2:] != (sizes[k] if "padding" not in p else tf.plan.canvas.canvas_size(p, sizes[k]))
            dropped += int((~p["inside"]).sum()) if "inside" in p else 0
    assert cropped > 30 and dropped > 10


def _rect_samples(n: int, mask: bool = False) -> list[dict]:
    """Images of one flat rectangle (and sometimes a second, far smaller one) with their
    boxes as JSON; with `mask`, the rectangles' mask as a PNG."""
    out = []
    for i in range(n):
        img, box = _rectangles(i, 60 + (i % 5) * 9, 70 + (i % 3) * 13)
        boxes, labels = box.tolist(), [1]
        seg = (img[..., 0] > 0).astype(np.uint8)
        if i % 3 == 0:  # (a second object, a 4x4 block in a corner, of another colour)
            img[1:5, 1:5], seg[1:5, 1:5] = (40, 200, 230), 2
            boxes.append([1, 1, 5, 5])
            labels.append(2)
        s = {"__key__": f"r{i:03d}", "png": encode(img, "PNG"),
             "json": json.dumps({"boxes": boxes, "labels": labels}).encode()}
        if mask:
            s["seg.png"] = png(seg)
        out.append(s)
    return out


@pytest.fixture(scope="module")
def rects(tmp_path_factory):
    d = tmp_path_factory.mktemp("ioucrop")
    return make_shard(d / "rects-000000.tar", _rect_samples(24, mask=True))


@pytest.mark.parametrize("keep", [None, "ram"])
def test_the_loader_draws_from_its_boxes_field(rects, keep):
    """Through the Loader, streamed and resident: each batch's targets are Compose.boxes of
    the samples' boxes with the draws made from them (the Loader's seed, epoch and places),
    the images those draws' (bit for bit: the same images through the Compose), and each
    kept box bounds its rectangle in the image."""
    from PIL import Image
    import io

    samples = {s["__key__"]: s for s in _rect_samples(24)}
    tf = T.Compose([T.RandomIoUCrop(), T.Resize((48, 48)), T.RandomHorizontalFlip()])
    ld = Loader([rects], batch_size=8, transform=tf, device="cpu", seed=4, labels=False, image_ext="png",
                keep=keep, shuffle=False, fields={"json": Boxes()})
    boxes_seen = 0
    for epoch in range(2):
        ld.set_epoch(epoch)
        pos = 0
        for images, targets in ld:
            entries = [json.loads(samples[f"r{k:03d}"]["json"]) for k in range(pos, pos + len(images))]
            decoded = [torch.from_numpy(np.array(Image.open(io.BytesIO(samples[f"r{k:03d}"]["png"])))).permute(2, 0, 1)
                       .contiguous() for k in range(pos, pos + len(images))]
            sizes = [tuple(im.shape[-2:]) for im in decoded]
            d = tf.draw_batch(sizes, 4, epoch=epoch, indices=list(range(pos, pos + len(images))), boxes=entries)
            assert torch.equal(images, tf(decoded, d))
            for t, want in zip(targets, tf.boxes(entries, d)):
                torch.testing.assert_close(t["boxes"], want["boxes"], rtol=0, atol=0)
                assert t["labels"].tolist() == want["labels"].tolist()
                boxes_seen += len(t["boxes"])
            for img, t in zip(images, targets):
                bright = img.float().mean(0) > 60
                for x0, y0, x1, y1 in t["boxes"].tolist():
                    inner = bright[int(y0) + 2:int(np.ceil(y1)) - 2, int(x0) + 2:int(np.ceil(x1)) - 2]
                    assert inner.numel() == 0 or inner.float().mean() > 0.99
            pos += len(images)
        assert pos == 24
    assert boxes_seen > 30
    if keep:
        assert ld.describe()["keep"]["tier"] == "ram"


def test_a_mask_follows_the_crop_drawn_from_the_boxes(rects):
    """A Mask beside the Boxes field: each kept box bounds its object's pixels in the moved
    mask, to a pixel; under two views (each its own crop, drawn from the same boxes)."""
    tf = [T.Compose([T.RandomZoomOut(side_range=(1.0, 2.0)), T.RandomIoUCrop(), T.Resize((40, 40)),
                     T.RandomHorizontalFlip()]),
          T.Compose([T.RandomIoUCrop(min_scale=0.5), T.Resize((32, 32))])]
    ld = Loader([rects], batch_size=8, transform=tf, device="cpu", seed=2, labels=False, image_ext="png",
                fields={"seg.png": gpudecode.Mask(fill=0), "json": Boxes(min_size=2, min_area=4)})
    checked = 0
    for epoch in range(3):
        ld.set_epoch(epoch)
        for _, masks, targets in ld:
            for view_masks, view_targets in zip(masks, targets):
                for m, t in zip(view_masks, view_targets):
                    for (x0, y0, x1, y1), lab in zip(t["boxes"].tolist(), t["labels"].tolist()):
                        ys, xs = torch.nonzero(m == lab, as_tuple=True)
                        got = [float(xs.min()), float(ys.min()), float(xs.max()) + 1, float(ys.max()) + 1]
                        assert np.allclose(got, [x0, y0, x1, y1], atol=1.0), (got, t["boxes"])
                        checked += 1
    assert checked > 40


def test_what_it_needs_and_cannot_take_is_refused(rects, tmp_path):
    """No Boxes field, two, a Resize(int) or nothing after it, a draw without boxes: each
    refused by name; a sample whose boxes cannot be read is its FieldError, the others
    drawn and kept; a sample with no box is resized whole."""
    with pytest.raises(TransformError, match=r"(?s)RandomIoUCrop\s+draws.*no\s+field\s+is\s+one"):
        Loader([rects], batch_size=4, transform=SSD(), device="cpu", labels=False, image_ext="png")
    with pytest.raises(TransformError, match=r"(?s)2\s+fields\s+are"):
        Loader([rects], batch_size=4, transform=SSD(), device="cpu", labels=False, image_ext="png",
               fields={"json": Boxes(), "seg.png": Boxes()})
    for geometry in ([T.RandomIoUCrop()], [T.RandomIoUCrop(), T.Resize(40)], [T.RandomIoUCrop(), T.CenterCrop(8)]):
        with pytest.raises(TransformError, match=r"(?s)RandomIoUCrop\s+gives\s+differently\s+sized"):
            T.Compose(geometry)
    for bad in (dict(max_scale=1.5), dict(min_scale=0.8, max_scale=0.5), dict(min_aspect_ratio=2.0, max_aspect_ratio=1.0),
                dict(min_aspect_ratio=0.0), dict(sampler_options=[]), dict(trials=0), dict(min_scale=float("nan"))):
        with pytest.raises(TransformError, match="RandomIoUCrop"):
            T.RandomIoUCrop(**bad)
    with pytest.raises(TransformError, match=r"(?s)draws\s+its\s+crop\s+from\s+each\s+image's\s+boxes"):
        SSD().draw_batch([(30, 30)], 0)
    with pytest.raises(TransformError, match=r"(?s)draws\s+its\s+crop"):
        SSD()(torch.zeros((3, 30, 30), dtype=torch.uint8))

    img, box = _rectangles(0, 60, 70)
    bad = [{"__key__": "a", "png": encode(img, "PNG"), "json": json.dumps([box.tolist()[0]]).encode()},
           {"__key__": "b", "png": encode(img, "PNG"), "json": b"[[1, 2, 3]]"},
           {"__key__": "c", "png": encode(img, "PNG"), "json": b"[]"}]
    url = make_shard(tmp_path / "bad.tar", bad)
    tf = T.Compose([T.RandomIoUCrop(), T.Resize((30, 30))])
    ld = Loader([url], batch_size=3, transform=tf, device="cpu", labels=False, image_ext="png", on_error="skip",
                fields={"json": Boxes()}, seed=0)
    (images, targets), = list(ld)
    assert len(images) == 2 and [s.key for s in ld.skipped] == ["b"]
    assert "field .json" in ld.skipped[0].reason
    whole = torch.from_numpy(img).permute(2, 0, 1).contiguous()
    assert torch.equal(images[1], T.Compose([T.Resize((30, 30))])(whole)) and len(targets[1]["boxes"]) == 0


def test_torchvisions_ssd_preset_converts():
    """torchvision's SSD steps convert (the photometric distortion after the geometry, where
    the kernel runs it; the zoom-out's {type: fill} read for the image: the mean, not the
    masks' 0), and the draws keep torchvision's arguments."""
    mean = (123.0, 117.0, 104.0)
    fill = defaultdict(lambda: mean, {tv_tensors.Mask: 0})
    ours = T.Compose.from_torchvision(tv.Compose([
        tv.RandomZoomOut(fill=fill), tv.RandomIoUCrop(min_scale=0.2, sampler_options=[0.1, 0.5, 2.0], trials=9),
        tv.Resize((300, 300)), tv.RandomHorizontalFlip(), tv.RandomPhotometricDistort(),
        tv.ToDtype(torch.float32, scale=True), tv.SanitizeBoundingBoxes()]))
    zoom, crop = ours.transforms[0], ours.transforms[1]
    assert isinstance(crop, T.RandomIoUCrop) and crop.min_scale == 0.2 and crop.trials == 9
    assert crop.sampler_options == [0.1, 0.5, 2.0]
    assert tuple(zoom._fill) == (123, 117, 104)
    assert ours.plan.rrc and ours.plan.reads_boxes and ours.out_size == (300, 300)
    # as the preset writes it, the distortion first: its first pass (tests/test_first_pass.py), with a Resize here
    first = T.Compose.from_torchvision(tv.Compose([tv.RandomPhotometricDistort(), tv.RandomZoomOut(fill=fill),
                                                   tv.RandomIoUCrop(), tv.Resize((300, 300)),
                                                   tv.RandomHorizontalFlip()]))
    assert isinstance(first.plan.first[0], T.RandomPhotometricDistort) and first.plan.reads_boxes


@pytest.mark.parametrize("fill", [0, (123, 117, 104)])
def test_a_canvas_window_is_that_window_of_the_canvas(photos, fill):
    """A crop of RandomZoomOut's canvas makes only the crop (canvas.build's windows), from
    only the part of the image inside it (read_window: what the decoder is asked for),
    given in a whole decode or alone: each window equal to that part of the whole canvas,
    whether it holds the whole image, a part of it, or only the fill."""
    from gpudecode.decode._base import DecodedBatch
    from gpudecode.transforms import canvas

    img = torch.from_numpy(np.ascontiguousarray(photos[sorted(photos)[0]][:30, :40]))
    step = T.RandomZoomOut(fill=fill, side_range=(2.0, 3.0), p=1.0)
    p = {"padding": [25, 10, 15, 20]}  # (a 60 x 80 canvas, the image at top 10, left 25)
    flat = img.reshape(-1).clone()

    def decoded(box):  # (the whole image decoded, `box` the part asked for in it, as a direct call gives it)
        return DecodedBatch(flat, np.zeros(1, np.int64), np.array([[30, 40]]), np.array([[120, 3, 1]]),
                            np.array([box]), [None])

    full = canvas.build(step, decoded((0, 0, 30, 40)), [p], [(30, 40)], np.array([0])).pixels.view(60, 80, 3)
    for window in [(0, 0, 60, 80), (10, 25, 30, 40), (12, 30, 10, 5), (0, 0, 9, 20), (5, 20, 40, 50), (40, 0, 20, 80)]:
        part = canvas.read_window(step, p, (30, 40), window)
        t, l, h, w = window
        for given in (decoded(part), DecodedBatch(  # (and that part alone, as a crop decoder gives it)
                img[part[0]:part[0] + part[2], part[1]:part[1] + part[3]].reshape(-1).clone(), np.zeros(1, np.int64),
                np.array([part[2:]]), np.array([[part[3] * 3, 3, 1]]), np.array([(0, 0, *part[2:])]), [None])):
            got = canvas.build(step, given, [p], [(30, 40)], np.array([0]), windows=np.array([window]))
            assert tuple(got.shapes[0]) == (h, w)
            assert torch.equal(got.pixels.view(h, w, 3), full[t:t + h, l:l + w]), window
    assert canvas.read_window(step, p, (30, 40), (40, 0, 20, 80)) == (0, 0, 1, 1)  # (fill only: one pixel asked)
    assert canvas.read_window(step, p, (30, 40), (5, 20, 40, 50)) == (0, 0, 30, 40)


def test_the_dataset_item_and_even_draw_from_the_boxes(rects, tmp_path):
    """The dataset's item is its sample as the batch gives it (the fields read before its
    draw); a batch made up under even repeats its samples' images and targets."""
    tf = T.Compose([T.RandomIoUCrop(), T.Resize((32, 32)), T.RandomHorizontalFlip()])
    kw = dict(transform=tf, device="cpu", shuffle=False, seed=6, labels=False, image_ext="png",
              fields={"json": Boxes()})
    ld = Loader([rects], batch_size=8, **kw)
    images, targets = next(iter(ld))
    for i in (0, 3, 7):
        image, t = ld.dataset[i]
        assert torch.equal(image, images[i]) and torch.equal(t["boxes"], targets[i]["boxes"])
        assert torch.equal(t["labels"], targets[i]["labels"])
    part = _rect_samples(6)
    for s in part[3:]:
        s["png"] = b"not an image"
    url = make_shard(tmp_path / "even-000000.tar", part)
    first, made = list(Loader([url], batch_size=3, on_error="skip", even="pad", rank=0, world_size=1, **kw))
    assert made.keys == first.keys and torch.equal(made.images, first.images)
    assert all(torch.equal(a["boxes"], b["boxes"]) for a, b in zip(made[1], first[1]))


def test_the_crop_sees_the_boxes_where_a_canvas_puts_them():
    """After a canvas step the crop is drawn from the boxes on the canvas: an expanded
    rotation by 90 degrees (a box's corners land exactly: (x, y) -> (y, W - x)) and
    RandomZoomOut (shifted by the padding): each draw's boxes inside are those whose moved
    centres its crop holds."""
    b = np.array([[5, 5, 25, 15], [30, 20, 55, 38], [1, 30, 9, 39]], np.float32)
    for first, moved in ((T.RandomRotation((90, 90), expand=True),
                          lambda p: np.stack([b[:, 1], 60 - b[:, 2], b[:, 3], 60 - b[:, 0]], 1)),
                         (T.RandomZoomOut(p=0.7), lambda p: b + np.float32(p.get("padding", [0, 0])[:2] * 2))):
        tf = T.Compose([first, T.RandomIoUCrop(), T.Resize((32, 32))])
        d = tf.draw_batch([(40, 60)] * 40, 1, boxes=[b] * 40)
        cropped = 0
        for p in d:
            if "inside" not in p:
                continue
            m = moved(p)
            cx, cy = (m[:, 0] + m[:, 2]) / 2, (m[:, 1] + m[:, 3]) / 2
            t, l, h, w = p["crop"]
            assert p["inside"].tolist() == ((l < cx) & (cx < l + w) & (t < cy) & (cy < t + h)).tolist(), p
            cropped += 1
        assert cropped > 10, first
