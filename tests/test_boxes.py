"""Bounding boxes moved with their images (`Loader(..., fields={"json":
gpudecode.Boxes()})`, transforms/boxes.py): against torchvision.transforms.v2, which moves
a tv_tensors.BoundingBoxes beside its image with the same parameters and drops the boxes
SanitizeBoundingBoxes drops; through the Loader (its draws replayed) on crops of real
photographs; an alignment check independent of torchvision (a flat rectangle and its box,
streamed and resident with keep_size); every member form (JSON lists, records, COCO
annotations, .npy, Parquet); each bad member its sample's FieldError; what boxes cannot
follow refused."""
from __future__ import annotations

import io
import json
import re

import numpy as np
import pytest
import torch
import torchvision.transforms.v2.functional as F
from torchvision import tv_tensors
from torchvision.transforms.v2.functional._misc import _get_sanitize_bounding_boxes_mask

import gpudecode
from gpudecode import Boxes, Loader, TransformError
from gpudecode import transforms as T
from gpudecode.fields import _targets_to, decode_boxes

from conftest import encode, make_shard
from test_masks import PLANS, centre, npy

FORMATS = ("XYXY", "XYWH", "CXCYWH")


def tv_boxes(boxes: np.ndarray, fmt: str, size, p: dict, out_size, frame=None) -> tuple[torch.Tensor, torch.Tensor]:
    """torchvision.transforms.v2.functional on a tv_tensors.BoundingBoxes (of `fmt`) with
    the image's params, then as XYXY, clamped to the output and sanitized at its defaults:
    (the boxes kept, XYXY; which were kept). (The clamp at the end is the one difference
    from torchvision's own chain: see test_a_box_at_the_crops_edge_is_kept.)"""
    x = tv_moved(tv_tensors.BoundingBoxes(torch.as_tensor(boxes), format=fmt, canvas_size=tuple(size)), p, out_size,
                 frame)
    return tv_sanitized(x)


def tv_sanitized(x) -> tuple[torch.Tensor, torch.Tensor]:
    """BoundingBoxes as XYXY, clamped to their canvas, and which SanitizeBoundingBoxes keeps
    at its defaults: (the boxes kept, which were kept)."""
    x = F.clamp_bounding_boxes(F.convert_bounding_box_format(x, new_format="XYXY"))
    keep = _get_sanitize_bounding_boxes_mask(x.as_subclass(torch.Tensor), x.format, x.canvas_size)
    return x.as_subclass(torch.Tensor)[keep], keep


def _padded_crop(x, box):
    """F.crop of `box` (top, left, h, w) of BoundingBoxes, padded where it reaches out."""
    t, l, h, w = box
    H, W = x.canvas_size
    pad = [max(0, -l), max(0, -t), max(0, l + w - W), max(0, t + h - H)]
    return F.crop(F.pad(x, pad), t + pad[1], l + pad[0], h, w)


def tv_moved(x, p: dict, out_size, frame=None):
    """torchvision's functional ops on a BoundingBoxes with the image's params: the canvas
    (RandomZoomOut's), the geometry, the flips; `frame`: RandomResizedCrop's size where a
    crop of its output follows ("window")."""
    if "padding" in p:  # (RandomZoomOut's canvas)
        x = F.pad(x, list(p["padding"]))
    if "resize" in p:
        x = F.resize(x, list(p["resize"]))
    if "crop" in p:
        t, l, h, w = p["crop"]
        if "window" in p:  # RandomResizedCrop, then a crop of its output
            x = _padded_crop(F.resized_crop(x, t, l, h, w, list(frame)), p["window"])
        elif "resize" not in p and (h, w) != tuple(out_size):  # RandomResizedCrop
            x = F.resized_crop(x, t, l, h, w, list(out_size))
        else:  # a crop in the (resized) image's coordinates, padded where it reaches out
            x = _padded_crop(x, p["crop"])
    if p.get("flip"):
        x = F.horizontal_flip(x)
    if p.get("vflip"):
        x = F.vertical_flip(x)
    return x


def as_xyxy(boxes: torch.Tensor, fmt: str, size) -> torch.Tensor:
    return F.convert_bounding_box_format(tv_tensors.BoundingBoxes(boxes, format=fmt, canvas_size=tuple(size)),
                                         new_format="XYXY").as_subclass(torch.Tensor)


def random_boxes(rng, h: int, w: int, n: int = 7) -> np.ndarray:
    """n XYXY boxes over an h x w image, some reaching out of it (as COCO's sometimes do)."""
    x1, y1 = rng.uniform(-3, w, n), rng.uniform(-3, h, n)
    return np.stack([x1, y1, x1 + rng.uniform(0, w, n), y1 + rng.uniform(0, h, n)], 1).astype(np.float32)


def moved_targets(tf, photos, sizes: list, seed: int, rng) -> tuple[list, list, list, list, list]:
    """Boxes (random_boxes, from `rng`) and masks (a photograph's superpixels) of images of
    `sizes`, moved by the Compose `tf` with its draws for `seed`: (the draws, the boxes, the
    masks, Compose.boxes' entries, Compose.masks' masks with the fill 255)."""
    from test_masks import slic_mask

    params = tf.make_params(sizes, seed)
    boxes = [random_boxes(rng, h, w) for h, w in sizes]
    names = sorted(photos)
    masks = [torch.from_numpy(slic_mask(centre(photos[names[k % len(names)]], h, w))) for k, (h, w) in enumerate(sizes)]
    return params, boxes, masks, tf.boxes(boxes, params, sizes=sizes), tf.masks(masks, params, fill=255)


def in_format(xyxy: np.ndarray, fmt: str, size) -> np.ndarray:
    b = tv_tensors.BoundingBoxes(torch.from_numpy(xyxy), format="XYXY", canvas_size=tuple(size))
    return F.convert_bounding_box_format(b, new_format=fmt).as_subclass(torch.Tensor).numpy()


def test_boxes_move_as_torchvision_moves_bounding_boxes():
    """Compose.boxes with the images' draws equals torchvision's functional ops on a
    tv_tensors.BoundingBoxes with the same params, then SanitizeBoundingBoxes' choice: for
    every geometry (crops that pad, upscales, downscales, flips of both kinds, none), in
    each format, the same boxes kept (with their labels) at the same places (float32)."""
    rng = np.random.default_rng(0)
    sizes = [(37, 41), (50, 33), (64, 64), (31, 70), (20, 20), (32, 40)]
    kept = dropped = 0
    for name, make in PLANS.items():
        tf = make()
        sz = [(32, 40)] * 6 if name == "no-geometry" else sizes
        for fmt in FORMATS:
            for seed in range(10):
                entries = [{"boxes": in_format(random_boxes(rng, h, w), fmt, (h, w)), "labels": np.arange(7) * 3}
                           for h, w in sz]
                d = tf.draw_batch(sz, seed)
                out = tf.boxes(entries, d, format=fmt)
                osz = tf.output_size(sz)
                for k, (e, got) in enumerate(zip(entries, out)):
                    ref, keep = tv_boxes(e["boxes"], fmt, sz[k], d[k], osz,
                                         tf.plan.geometry[0].size if tf.plan.rrc_window else None)
                    assert got["labels"].tolist() == (torch.nonzero(keep)[:, 0] * 3).tolist(), (name, fmt, seed, k)
                    assert got["boxes"].dtype == torch.float32 and got["labels"].dtype == torch.int64
                    torch.testing.assert_close(as_xyxy(got["boxes"], fmt, osz), ref, rtol=0, atol=1e-4)
                    kept, dropped = kept + len(ref), dropped + int((~keep).sum())
    assert kept > 1000 and dropped > 300  # (both branches taken, often)
    # read in one format, handed out in another (COCO's XYWH to the XYXY detection models take)
    xyxy = [random_boxes(rng, h, w) for h, w in sizes]
    tf = PLANS["rrc+flips"]()
    d = tf.draw_batch(sizes, 3)
    a = tf.boxes([in_format(b, "XYWH", s) for b, s in zip(xyxy, sizes)], d, format="XYWH", out_format="XYXY")
    b = tf.boxes(xyxy, d)
    assert all(torch.allclose(x["boxes"], y["boxes"], atol=1e-4) for x, y in zip(a, b))
    assert repr(Boxes("xywh", out_format="XYXY")) == "Boxes('XYWH', out_format='XYXY', min_size=1, min_area=1)"


def test_a_box_at_the_crops_edge_is_kept():
    """The one place the moves differ from torchvision's chain on purpose: torchvision's
    resized_crop clamps a box to the crop and then scales it by a float32 ratio, which can
    put the crop's edge a rounding past the output's (21 * float32(24 / 21) > 24), where
    SanitizeBoundingBoxes drops the box as outside the image. Here the clamp comes after
    the scale: the box ends on the output's edge and is kept."""
    box = np.array([[10, 12, 40, 36]], np.float32)  # (reaching past the crop's right and bottom)
    x = tv_tensors.BoundingBoxes(torch.from_numpy(box), format="XYXY", canvas_size=(37, 41))
    theirs = F.resized_crop(x, 8, 5, 21, 21, [24, 24])
    assert float(theirs[0, 2]) > 24  # (torchvision's: a rounding past the edge)
    assert not _get_sanitize_bounding_boxes_mask(theirs.as_subclass(torch.Tensor), theirs.format, (24, 24))[0]
    tf = T.Compose([T.RandomResizedCrop(24)])
    d = tf.draw_batch([(37, 41)], 0)[0]
    d["crop"] = (8, 5, 21, 21)
    ours = tf.boxes([box], [d], sizes=[(37, 41)])[0]["boxes"]
    torch.testing.assert_close(ours, theirs.as_subclass(torch.Tensor).clamp(0, 24), rtol=0, atol=1e-5)
    assert float(ours[0, 2]) == 24.0 and float(ours[0, 3]) == 24.0


def _det_samples(photos, n: int, start: int = 0) -> list[dict]:
    """JPEG crops of the photographs, each with boxes in one of the member forms: a JSON
    record {"boxes", "labels"}, a list of COCO annotations (XYWH boxes made XYXY here: the
    field reads XYXY), a bare JSON list, an .npy; a few with no box at all."""
    names = sorted(photos)
    rng = np.random.default_rng(start)
    out = []
    for i in range(start, start + n):
        h, w = 36 + (i * 7) % 30, 40 + (i * 11) % 30
        img = centre(photos[names[i % len(names)]], h, w)
        boxes = random_boxes(rng, h, w, n=(i % 6))
        labels = [int(c) for c in rng.integers(1, 91, len(boxes))]
        form = i % 4
        if form == 0:
            member = json.dumps({"boxes": boxes.tolist(), "labels": labels}).encode()
        elif form == 1:
            member = json.dumps([{"bbox": b.tolist(), "category_id": c, "iscrowd": 0}
                                 for b, c in zip(boxes, labels)]).encode()
        elif form == 2:
            member = json.dumps(boxes.tolist()).encode()
        else:
            member = npy(boxes.astype(np.float64))
        s = {"__key__": f"d{i:03d}", "jpg": encode(img), "cls": "0", "boxes": member}
        out.append(s)
    return out


def _reference(samples) -> dict:
    """{key: (XYXY boxes float32, labels or None)} as json and numpy read each member."""
    out = {}
    for s in samples:
        data = s["boxes"]
        if data[:6] == b"\x93NUMPY":
            out[s["__key__"]] = (np.load(io.BytesIO(data)).astype(np.float32).reshape(-1, 4), None)
            continue
        v = json.loads(data)
        if isinstance(v, dict):
            out[s["__key__"]] = (np.array(v["boxes"], np.float32).reshape(-1, 4), np.array(v["labels"]))
        elif v and isinstance(v[0], dict):
            out[s["__key__"]] = (np.array([a["bbox"] for a in v], np.float32).reshape(-1, 4),
                                 np.array([a["category_id"] for a in v]))
        else:
            out[s["__key__"]] = (np.array(v, np.float32).reshape(-1, 4), None)
    return out


@pytest.fixture(scope="module")
def det_shards(tmp_path_factory, photos):
    d = tmp_path_factory.mktemp("boxes")
    samples = _det_samples(photos, 40)
    return [make_shard(d / "det-000000.tar", samples[:22]), make_shard(d / "det-000001.tar", samples[22:])], samples


def _check(tf, refs, keys, targets, sizes, seed, epoch, positions):
    """Each target equals torchvision's moves of its boxes with the draws the Loader made."""
    d = tf.draw_batch(sizes, seed, epoch=epoch, indices=positions)
    osz = tf.output_size(sizes)
    for i, (key, t) in enumerate(zip(keys, targets)):
        boxes, labels = refs[key]
        ref, keep = tv_boxes(boxes, "XYXY", sizes[i], d[i], osz, tf.plan.geometry[0].size if tf.plan.rrc_window else None)
        torch.testing.assert_close(t["boxes"], ref, rtol=0, atol=1e-4)
        if labels is None:
            assert "labels" not in t
        else:
            assert t["labels"].tolist() == labels[keep.numpy()].tolist()


def test_the_loaders_boxes_are_torchvisions_with_the_loaders_draws(det_shards, photos):
    """Each batch's targets equal torchvision's moves of the boxes as json / numpy read
    them, with the draws the Loader made for its images; the images are what they are
    without boxes; a batch is (images, targets) without labels."""
    urls, samples = det_shards
    refs = _reference(samples)
    sizes = {s["__key__"]: (36 + (i * 7) % 30, 40 + (i * 11) % 30) for i, s in enumerate(samples)}
    for name in ("rrc+flips", "resize+centercrop(pad)", "randomcrop(padding)", "segmentation-reference",
                 "rrc+randomcrop(padding)"):
        tf = PLANS[name]()
        ld = Loader(urls, batch_size=8, transform=tf, device="cpu", shuffle=False, seed=5, labels=False,
                    fields={"boxes": Boxes()})
        plain = Loader(urls, batch_size=8, transform=tf, device="cpu", shuffle=False, seed=5, labels=False)
        ld.set_epoch(2)
        plain.set_epoch(2)
        pos, boxes_seen = 0, 0
        for b, p in zip(ld, plain):
            images, targets = b
            assert b._fields == ("images", "boxes") and torch.equal(images, p.images)
            assert isinstance(targets, list) and len(targets) == len(b.keys)
            _check(tf, refs, b.keys, targets, [sizes[k] for k in b.keys], 5, 2, list(range(pos, pos + len(b.keys))))
            pos += len(b.keys)
            boxes_seen += sum(len(t["boxes"]) for t in targets)
        assert pos == 40 and boxes_seen > 20, name


def _rectangles(seed: int, h: int, w: int) -> tuple[np.ndarray, np.ndarray]:
    """An image of black with one flat coloured rectangle, and its box (XYXY)."""
    rng = np.random.default_rng(seed)
    y0, x0 = int(rng.integers(2, h // 2)), int(rng.integers(2, w // 2))
    y1, x1 = int(rng.integers(y0 + 12, h - 1)), int(rng.integers(x0 + 12, w - 1))
    img = np.zeros((h, w, 3), np.uint8)
    img[y0:y1, x0:x1] = (230, 180, 40)
    return img, np.array([[x0, y0, x1, y1]], np.float32)


@pytest.mark.parametrize("keep", [None, "ram"])
def test_a_box_lies_on_its_rectangle_through_every_geometry(rect_shards, keep):
    """Images of one coloured rectangle and its box: after crops, resizes, padding and both
    flips, streamed and resident (keep_size resizing the stored image and its boxes), the
    image is the rectangle's colour inside the box and black outside it (a pixel's margin
    for the filter); a mirrored image does not lie on its box."""
    def inside_and_out(images, targets):
        ins, outs = [], []
        for img, t in zip(images, targets):
            bright = img.float().mean(0) > 60
            hh, ww = bright.shape
            for x0, y0, x1, y1 in t["boxes"].tolist():
                yy, xx = torch.meshgrid(torch.arange(hh) + 0.5, torch.arange(ww) + 0.5, indexing="ij")
                inner = (xx > x0 + 1.5) & (xx < x1 - 1.5) & (yy > y0 + 1.5) & (yy < y1 - 1.5)
                outer = (xx < x0 - 1.5) | (xx > x1 + 1.5) | (yy < y0 - 1.5) | (yy > y1 + 1.5)
                ins.append(bright[inner].float().mean() if inner.any() else torch.tensor(1.0))
                outs.append(bright[outer].float().mean() if outer.any() else torch.tensor(0.0))
        return ins, outs

    for name in ("rrc+flips", "randomcrop(padding)", "resize+centercrop(pad)", "zoomout+resize", "rrc+centercrop"):
        tf = PLANS[name]()
        ld = Loader(rect_shards, batch_size=8, transform=tf, device="cpu", seed=1, num_workers=2, keep=keep,
                    keep_size=40 if keep else None, labels=False, image_ext="png",
                    fields={"json": Boxes(min_size=3, min_area=9)})
        n, mirrored = 0, []
        for epoch in range(2):
            ld.set_epoch(epoch)
            for images, targets in ld:
                ins, outs = inside_and_out(images, targets)
                assert all(v > 0.99 for v in ins) and all(v < 0.01 for v in outs), name
                n += len(ins)
                mi, _ = inside_and_out(images.flip(-1), targets)
                mirrored += [float(v) for v in mi]
        assert n > 30 and np.mean(mirrored) < 0.9, name
        if keep:
            assert ld.describe()["keep"]["tier"] == "ram"


def test_a_mask_and_boxes_of_one_sample_move_together(tmp_path):
    """A Mask field and a Boxes field of the same samples (instance and panoptic sets hold
    both): each kept box bounds its rectangle's pixels in the moved mask, to a pixel."""
    from test_masks import png

    samples = []
    for i in range(16):
        img, box = _rectangles(i, 60 + (i % 4) * 9, 70 + (i % 3) * 13)
        samples.append({"__key__": f"r{i:03d}", "jpg": encode(img), "seg.png": png((img[..., 0] > 0).astype(np.uint8)),
                        "json": json.dumps(box.tolist()).encode()})
    url = make_shard(tmp_path / "both-000000.tar", samples)
    checked = 0
    for name, epoch in [(n, e) for n in ("rrc+flips", "zoomout+rrc") for e in range(3)]:
        ld = Loader([url], batch_size=8, transform=PLANS[name](), device="cpu", seed=3, labels=False,
                    fields={"seg.png": gpudecode.Mask(fill=0), "json": Boxes(min_size=2, min_area=4)})
        ld.set_epoch(epoch)
        for _, masks, targets in ld:
            for m, t in zip(masks, targets):
                ys, xs = torch.nonzero(m, as_tuple=True)
                if not len(t["boxes"]):
                    continue
                (x0, y0, x1, y1), = t["boxes"].tolist()
                got = [float(xs.min()), float(ys.min()), float(xs.max()) + 1, float(ys.max()) + 1]
                assert np.allclose(got, [x0, y0, x1, y1], atol=1.0), (got, t["boxes"])
                checked += 1
    assert checked > 60


def test_each_member_form_reads_as_json_and_numpy_read_it():
    """A JSON record with labels (or a Hugging Face detection set's "bbox" / "category"), a
    list of COCO annotations, a bare list, an empty list, an .npy of floats or ints, and
    the values a Parquet column gives (a dict of lists, a list of dicts): each the boxes
    (XYXY float32, from the format given) and labels they hold."""
    b = [[1.5, 2, 10, 12], [0, 0, 3, 4]]
    xyxy = np.array(b, np.float32)
    for data, fmt, want, labels in [
            (json.dumps({"boxes": b, "labels": [3, 7]}).encode(), "XYXY", xyxy, [3, 7]),
            (json.dumps({"bbox": b, "category": [3, 7]}).encode(), "XYXY", xyxy, [3, 7]),
            (json.dumps([{"bbox": x, "category_id": c} for x, c in zip(b, [5, 6])]).encode(), "XYWH",
             np.array([[1.5, 2, 11.5, 14], [0, 0, 3, 4]], np.float32), [5, 6]),
            (json.dumps(b).encode(), "CXCYWH", np.array([[-3.5, -4, 6.5, 8], [-1.5, -2, 1.5, 2]], np.float32), None),
            (b"[]", "XYXY", np.zeros((0, 4), np.float32), None),
            (npy(np.array(b)), "XYXY", xyxy, None),
            (npy(np.array([[1, 2, 3, 4]], np.int16)), "XYXY", np.array([[1, 2, 3, 4]], np.float32), None),
            ({"bbox": b, "category": [3, 7]}, "XYXY", xyxy, [3, 7]),
            ([{"bbox": x, "category_id": c} for x, c in zip(b, [5, 6])], "XYXY", xyxy, [5, 6])]:
        got = decode_boxes(data, fmt)
        np.testing.assert_array_equal(got.xyxy, want)
        assert got.xyxy.dtype == np.float32
        assert (got.labels is None) == (labels is None) and (labels is None or got.labels.tolist() == labels)


@pytest.mark.parametrize("data, why", [
    (b"{\"boxes\": [[0, 0, 1]]}", "boxes of shape \\(1, 3\\)"),
    (b"[[0, 0, NaN, 4]]", "not finite"),
    (b"[[5, 0, 1, 4]]", "box 0, \\[5.0, 0.0, 1.0, 4.0\\], of negative width"),
    (b"[[0, 0, 1, 4], [1, 2]]", "ragged"),
    (b"{\"boxes\": [[0, 0, 1, 4]], \"labels\": [1, 2]}", "1 boxes and 2 labels"),
    (b"{\"boxes\": [[0, 0, 1, 4]], \"labels\": [\"cat\"]}", "labels that are not"),
    (b"{\"boxes\": [[0, 0, 1, 4]], \"labels\": [1.5]}", "labels that are not a list of integers"),
    (b"{\"labels\": [1]}", "a record with no boxes"),
    (b"{\"boxes\": [[0, 0, 1, 4]], \"labels\": [18446744073709551615]}", "a label over int64's range"),
    (b"[[true, 0, 1, 4]]", "a bool among the numbers"),
    (b"[[]]", "boxes of shape \\(1, 0\\)"),
    (b"[{\"bbox\": [], \"category\": []}]", "boxes of shape \\(1, 0\\)"),
    (b"{\"boxes\": [], \"labels\": [[]]}", "labels that are not a list of integers"),
    (b"\"0 0 1 4\"", "a str, not a list of numbers"),
    (b"[{\"bbox\": [0, 0, 1, 1], \"category_id\": 1}, {\"bbox\": [0, 0, 2, 2]}]", "some with a label"),
    (b"\xff\xfe not json", "is not valid JSON"),
])
def test_each_bad_member_says_what_it_is(data, why):
    with pytest.raises(ValueError, match=why):
        decode_boxes(data)


def test_each_bad_member_is_its_samples_error_and_skipped_alone(tmp_path, photos):
    """A box that is not finite, one of negative width, labels not one a box, a member that
    is not JSON, and a missing member: each its sample's FieldError naming shard and key,
    skipped alone; the others keep their boxes."""
    samples = _det_samples(photos, 12)
    bad = {"d000": b"[[0, 0, NaN, 4]]", "d001": b"[[5, 0, 1, 4]]", "d002": b"{\"boxes\": [], \"labels\": [1]}",
           "d003": b"<xml/>", "d004": None}
    why = {"d000": "field .boxes holds a box that is not finite", "d001": "of negative width or height as XYXY",
           "d002": "0 boxes and 1 labels", "d003": "is not valid JSON", "d004": "no field .boxes"}
    for s in samples:
        if s["__key__"] in bad:
            if bad[s["__key__"]] is None:
                del s["boxes"]
            else:
                s["boxes"] = bad[s["__key__"]]
    url = make_shard(tmp_path / "bad-000000.tar", samples)
    refs = _reference([s for s in samples if s["__key__"] not in bad])
    tf = PLANS["rrc+flips"]()
    ld = Loader([url], batch_size=6, transform=tf, device="cpu", shuffle=False, seed=2, on_error="skip",
                labels=False, fields={"boxes": Boxes()})
    seen = [k for b in ld for k in b.keys]
    assert sorted(seen) == sorted(refs)
    skipped = {s.key: s for s in ld.skipped}
    assert sorted(skipped) == sorted(bad)
    for key, text in why.items():
        s = skipped[key]
        assert s.shard == url and s.error == "FieldError" and re.search(text, s.reason), (key, s.reason)


def test_what_boxes_cannot_follow_is_refused_when_the_loader_is_made(det_shards):
    urls, _ = det_shards
    for tf, what in [(T.Compose([T.RandomResizedCrop(24), T.RandAugment()]), "RandAugment moves pixels"),
                     (T.Compose([T.Resize((24, 24)), T.AugMix()]), "AugMix moves pixels"),
                     ([PLANS["rrc+flips"](), T.Compose([T.Resize((24, 24)), T.TrivialAugmentWide()])],
                      r"Boxes cannot follow their image \(view 1\): TrivialAugmentWide moves pixels")]:
        with pytest.raises(TransformError, match=what):
            Loader(urls, batch_size=4, transform=tf, device="cpu", labels=False, fields={"boxes": Boxes()})
    with pytest.raises(TransformError, match="mixes\\s+images"):
        Loader(urls, batch_size=4, transform=PLANS["segmentation-reference"](), device="cpu", fields={"boxes": Boxes()},
               batch_transform=T.CutMix(num_classes=5))
    bb = tv_tensors.BoundingBoxes([[1, 2, 3, 4]], format="CXCYWH", canvas_size=(9, 9))
    with pytest.raises(ValueError, match="entry 0 holds BoundingBoxes of format CXCYWH, read as XYXY"):
        PLANS["rrc+flips"]().boxes([bb], PLANS["rrc+flips"]().draw_batch([(9, 9)], 0))
    assert len(PLANS["rrc+flips"]().boxes([bb], PLANS["rrc+flips"]().draw_batch([(9, 9)], 0), format="CXCYWH")) == 1
    with pytest.raises(ValueError, match="a box format is one of XYXY, XYWH, CXCYWH, not 'XYXYXYXY'"):
        Boxes("XYXYXYXY")
    with pytest.raises(ValueError, match="Boxes\\(min_size=\\) is a number of pixels"):
        Boxes(min_size=-1)
    assert Boxes(tv_tensors.BoundingBoxFormat.CXCYWH).format == "CXCYWH" and Boxes("xywh").format == "XYWH"
    with pytest.raises(TransformError, match="TrivialAugmentWide moves pixels"):
        T.Compose([T.Resize((24, 24)), T.TrivialAugmentWide()]).boxes([np.zeros((0, 4))],
                                                                     T.Compose([T.Resize((8, 8))]).draw_batch([(9, 9)], 0))


def made_up(tmp_path, samples: list[dict], transform) -> tuple:
    """(a batch of the first 3 samples, the batch even="pad" makes up of them), the last 3
    samples' images spoiled (each skipped), read with a Boxes field."""
    part = [dict(s) for s in samples[:6]]
    for s in part[3:]:
        s["jpg"] = b"not an image"
    url = make_shard(tmp_path / "even-000000.tar", part)
    ld = Loader([url], batch_size=3, transform=transform, device="cpu", shuffle=False, on_error="skip", labels=False,
                even="pad", rank=0, world_size=1, fields={"boxes": Boxes()})
    first, made = list(ld)
    return first, made


def test_the_dataset_even_and_a_device_carry_the_boxes(det_shards, tmp_path, photos):
    """The dataset's item holds its target; a batch made up under even repeats its targets;
    a batch's targets go to a device in one copy of boxes and one of labels, each sample's
    a part of it (the meta device stands in for a GPU here; test_gpu runs CUDA)."""
    urls, samples = det_shards
    refs = _reference(samples)
    tf = PLANS["rrc+flips"]()
    ld = Loader(urls, batch_size=8, transform=tf, device="cpu", shuffle=False, seed=4, labels=False,
                fields={"boxes": Boxes()})
    image, t = ld.dataset[5]
    _check(tf, refs, ["d005"], [t], [(36 + 35 % 30, 40 + 55 % 30)], 4, 0, [5])
    first, made = made_up(tmp_path, _det_samples(photos, 6), tf)
    assert made.keys == first.keys and all(torch.equal(a["boxes"], b["boxes"]) for a, b in zip(made[1], first[1]))
    targets = [{"boxes": torch.rand(n, 4), "labels": torch.arange(n)} for n in (3, 0, 5)] + [{"boxes": torch.rand(2, 4)}]
    moved = _targets_to(targets, "meta")
    assert [tuple(t["boxes"].shape) for t in moved] == [(3, 4), (0, 4), (5, 4), (2, 4)]
    assert all(t["boxes"].device.type == "meta" for t in moved) and "labels" not in moved[3]
    assert len({t["boxes"].untyped_storage().data_ptr() for t in moved}) == 1  # (one copy, handed out in parts)
    assert _targets_to(targets, "cpu")[0]["boxes"] is targets[0]["boxes"]


def test_boxes_from_a_parquet_struct_column(tmp_path, photos):
    """A Hugging Face detection set's `objects` column ({"bbox": [...], "category": [...]},
    a struct of lists as Parquet keeps it) is a Boxes field by the column's name."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    samples = _det_samples(photos, 10)
    refs = _reference(samples)
    objects = [{"bbox": refs[s["__key__"]][0].tolist(), "category": list(range(len(refs[s["__key__"]][0])))}
               for s in samples]
    image = pa.array([{"bytes": s["jpg"], "path": f"{s['__key__']}.jpg"} for s in samples],
                     pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    path = tmp_path / "det.parquet"
    pq.write_table(pa.table({"image": image, "objects": objects, "label": [0] * len(samples)}), path)
    tf = PLANS["rrc+flips"]()
    ld = Loader(str(path), batch_size=5, transform=tf, device="cpu", shuffle=False, seed=3,
                fields={"objects": Boxes()})
    got = [t for b in ld for t in b[-1]]
    assert len(got) == 10
    sizes = [(36 + (i * 7) % 30, 40 + (i * 11) % 30) for i in range(10)]
    d = tf.draw_batch(sizes[:5], 3, indices=list(range(5)))
    want = tf.boxes([objects[i] for i in range(5)], d)
    for g, w in zip(got[:5], want):
        torch.testing.assert_close(g["boxes"], w["boxes"], rtol=0, atol=0)
        assert g["labels"].tolist() == w["labels"].tolist()
