"""Masks and boxes of precached shards (`gpudecode precache --size`, transforms/stored.py):
precache writes beside each image it resizes or cuts a record of how (`.gpudecode.json`),
and the Loader moves a Mask's pixels and Boxes' coordinates onto the stored image by it.
Against torchvision.transforms.v2's Resize and CenterCrop on a tv_tensors.Mask and a
BoundingBoxes beside their image (the boxes clamped at each step: `clamping_mode="hard"`),
on real photographs' segmentations and on flat rectangles whose pixels tell where their
box and mask must lie; a set precached twice; shards precached before the record existed
refused with boxes and masks; each bad record its sample's error, in the Loader and in
precache."""
from __future__ import annotations

import json
import os
import re
import tarfile

import numpy as np
import pytest
import torch
import torchvision.transforms.v2.functional as F
from torchvision import tv_tensors

from gpudecode import Boxes, FieldError, Loader, Mask
from gpudecode import transforms as T
from gpudecode.precache import precache
from gpudecode.transforms.stored import RECORD, Record, downsizing, made, read_record, stored_boxes, stored_mask

from conftest import encode, make_shard, replace_members
from test_boxes import _rectangles, tv_boxes
from test_masks import centre, png, slic_mask


def tv_stored(boxes: np.ndarray | None, mask: torch.Tensor | None, size, resize, cut):
    """torchvision's Resize then CenterCrop on a BoundingBoxes (clamped at each step) and a
    Mask of an image of `size`: (boxes XYXY, mask)."""
    bb = None if boxes is None else tv_tensors.BoundingBoxes(torch.from_numpy(boxes), format="XYXY",
                                                             canvas_size=tuple(size), clamping_mode="hard")
    m = None if mask is None else tv_tensors.Mask(mask[None])
    for step, arg in (("resize", resize), ("crop", cut)):
        if arg is None:
            continue
        fn = F.resize if step == "resize" else F.center_crop
        bb = None if bb is None else fn(bb, list(arg))
        m = None if m is None else fn(m, list(arg))
    return (None if bb is None else bb.as_subclass(torch.Tensor).numpy()), (None if m is None else m[0])


def _cases(n: int, seed: int = 0):
    """(h, w, size, crop) of images precache resizes, cuts or pads: odd and even margins."""
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < n:
        h, w = int(rng.integers(30, 400)), int(rng.integers(30, 400))
        pad = rng.random() < 0.3  # (a centre cut larger than the image: padded)
        size = max(h, w) + int(rng.integers(1, 9)) if pad else int(rng.integers(20, 200))
        crop = "center" if pad else ("none", "center")[int(rng.integers(2))]
        if downsizing(h, w, size, crop) != (None, None):
            out.append((h, w, size, crop))
    return out


def test_a_record_moves_boxes_as_the_stored_image_moved():
    """stored_boxes (after its member's round trip) equals the transforms' own box moves
    (Compose.boxes) for Resize + CenterCrop, and torchvision's Resize + CenterCrop on a
    BoundingBoxes, where the cut crops or pads by an even margin. Where it pads by an odd
    one, torchvision places its image (pad (c - h) // 2 before) a pixel from where it places
    the boxes (round((h - c) / 2)): the boxes follow the image, its rectangle bounded
    exactly (checked on torchvision's own padded image)."""
    rng = np.random.default_rng(1)
    odd = even = 0
    for h, w, size, crop in _cases(150):
        resize, cut = downsizing(h, w, size, crop)
        rec = read_record(made(h, w, resize, cut).member())
        x0, y0 = rng.uniform(0, w, 9), rng.uniform(0, h, 9)
        boxes = np.stack([x0, y0, x0 + rng.uniform(0, w, 9), y0 + rng.uniform(0, h, 9)], 1)
        boxes = np.minimum(boxes, [w, h, w, h]).astype(np.float32)
        ours = stored_boxes(rec, boxes)
        tf = T.Compose([*([T.Resize(resize)] if resize else []), *([T.CenterCrop(cut)] if cut else [])])
        own = tf.boxes([boxes], tf.draw_batch([(h, w)], 0), min_size=0, min_area=0)[0]["boxes"].numpy()
        np.testing.assert_array_equal(ours, own)
        theirs, _ = tv_stored(boxes, None, (h, w), resize, cut)
        mid = resize or (h, w)
        if cut is None or all((c - m) % 2 == 0 for c, m in zip(cut, mid) if c > m):
            np.testing.assert_allclose(ours, theirs, atol=2e-4)
            even += 1
        else:
            odd += 1
    assert even > 100 and odd > 10
    for h, w, c in ((33, 50, 52), (40, 41, 44), (21, 30, 31)):  # pads by odd margins: no resize
        img, box = _rectangles(h * w, h, w)
        got = F.center_crop(torch.from_numpy(img).permute(2, 0, 1), [c, c])
        ys, xs = torch.nonzero(got[0] > 0, as_tuple=True)
        where = [float(xs.min()), float(ys.min()), float(xs.max()) + 1, float(ys.max()) + 1]
        assert stored_boxes(made(h, w, None, (c, c)), box).tolist() == [where]


def test_a_record_moves_a_mask_as_torchvision_moves_a_mask(photos):
    """stored_mask equals torchvision's Resize (nearest) then CenterCrop (0 where it pads)
    on a tv_tensors.Mask, on the photographs' segmentations, odd margins included; a mask
    not of the image's size before it was stored is refused, naming both sizes."""
    names = sorted(photos)
    for i, (h, w, size, crop) in enumerate(_cases(40, seed=2)):
        mask = torch.from_numpy(slic_mask(centre(photos[names[i % len(names)]], h, w)).astype(np.uint8))
        resize, cut = downsizing(h, w, size, crop)
        rec = read_record(made(h, w, resize, cut).member())
        _, theirs = tv_stored(None, mask, (h, w), resize, cut)
        assert torch.equal(stored_mask(rec, mask), theirs)
        assert stored_mask(rec, mask).shape == rec.size
    with pytest.raises(ValueError, match=r"is a mask of 30x40; its image was 60x80 before it was stored at 30x40"):
        stored_mask(made(60, 80, (30, 40), None), torch.zeros(30, 40, dtype=torch.uint8))


def _rect_samples(n: int, *, coco: bool = False) -> list[dict]:
    """Flat rectangles (PNG), each with its mask (PNG) and its box (JSON: a record with its
    label, or COCO annotations with their other keys)."""
    out = []
    for i in range(n):
        img, box = _rectangles(100 + i, 70 + (i % 5) * 19, 90 + (i % 3) * 29)
        if coco:
            x0, y0, x1, y1 = box[0].tolist()
            ann = json.dumps([{"bbox": [x0, y0, x1 - x0, y1 - y0], "category_id": i, "iscrowd": 0}]).encode()
        else:
            ann = json.dumps({"boxes": box.tolist(), "labels": [i]}).encode()
        out.append({"__key__": f"r{i:03d}", "png": encode(img, "PNG"), "cls": str(i % 3),
                    "seg.png": png((img[..., 0] > 0).astype(np.uint8)), "json": ann})
    return out


@pytest.fixture(scope="module")
def rects(tmp_path_factory):
    d = tmp_path_factory.mktemp("stored")
    samples = _rect_samples(18)
    return make_shard(d / "rects-000000.tar", samples), samples


def _reference(samples, size, crop):
    """{key: (boxes as the Loader hands them out, mask)} by torchvision, with an identity
    transform after the stored steps (clamped and sanitized at Boxes' defaults)."""
    out = {}
    for s in samples:
        img, box = _rectangles(100 + int(s["__key__"][1:]), *_size_of(s))
        h, w = img.shape[:2]
        resize, cut = downsizing(h, w, size, crop)
        mask = torch.from_numpy((img[..., 0] > 0).astype(np.uint8))
        boxes, m = tv_stored(box, mask, (h, w), resize, cut)
        final = m.shape
        out[s["__key__"]] = (tv_boxes(boxes, "XYXY", final, {}, final)[0], m)
    return out


def _size_of(s: dict) -> tuple[int, int]:
    i = int(s["__key__"][1:])
    return 70 + (i % 5) * 19, 90 + (i % 3) * 29


@pytest.mark.parametrize("keep", [None, "ram"])
def test_precached_boxes_and_masks_are_torchvisions_beside_the_stored_images(rects, tmp_path, keep):
    """Rectangles precached at 48 (centre cut) and read with an identity transform: each
    sample's boxes and mask are torchvision's Resize + CenterCrop of the originals, streamed
    and resident; every sample has its record, and its other members are copied as they
    were (the record written after them)."""
    url, samples = rects
    rep = precache([url], str(tmp_path / "out"), size=48, crop="center")
    with tarfile.open(rep.shards[0]) as tf:
        names = tf.getnames()
        first = {m.name.split(".", 1)[1]: tf.extractfile(m).read() for m in tf.getmembers()[:5]}
    assert names[:5] == ["r000.npy", "r000.cls", "r000.json", "r000.seg.png", f"r000.{RECORD}"]
    assert first["json"] == samples[0]["json"] and first["seg.png"] == samples[0]["seg.png"]
    assert read_record(first[RECORD]) == Record((70, 90), (("resize", 48, 61), ("crop", 48, 48)))
    refs = _reference(samples, 48, "center")
    ld = Loader(rep.shards, batch_size=6, transform=T.Compose([]), device="cpu", shuffle=False, keep=keep,
                fields={"json": Boxes(), "seg.png": Mask()})
    seen = 0
    for b in ld:
        images, _, targets, masks = b
        assert images.shape[-2:] == (48, 48)
        for key, t, m in zip(b.keys, targets, masks):
            boxes, mask = refs[key]
            torch.testing.assert_close(t["boxes"], boxes, rtol=0, atol=2e-4)
            assert t["labels"].tolist() == [int(key[1:])] and torch.equal(m, mask)
        seen += len(targets)
    assert seen == 18


def _interior_agrees(bright: torch.Tensor, mask: torch.Tensor) -> float:
    """The share of the pixels away from the mask's edges (their 5x5 neighbourhood of one
    value, inside the output: nearest neighbour and the bilinear image differ by up to a
    scale's width there, twice: precache's resize, then the crop's) where the image is
    bright exactly where the mask is set."""
    m = mask.float()[None, None]
    pad = torch.nn.functional.pad(m, (2, 2, 2, 2), value=-1.0)
    lo = -torch.nn.functional.max_pool2d(-pad, 5, 1)[0, 0]
    hi = torch.nn.functional.max_pool2d(pad, 5, 1)[0, 0]
    inner = lo == hi
    return float((bright[inner] == mask.bool()[inner]).float().mean())


@pytest.mark.parametrize("crop", ["none", "center"])
def test_precached_boxes_and_masks_lie_on_their_rectangles_after_random_crops(rects, tmp_path, crop):
    """Rectangles precached (shorter side 40, or its 40x40 centre) with COCO annotations
    and a mask, then trained with random resized crops and both flips: inside each box the
    image is the rectangle's colour and outside it black, and the mask agrees with the
    image; the same shards without their records would not (the box where the rectangle
    was before the resize)."""
    _, samples = rects
    src = make_shard(tmp_path / "coco-000000.tar", _rect_samples(18, coco=True))
    rep = precache([src], str(tmp_path / "out"), size=40, crop=crop)
    tf = T.Compose([T.RandomResizedCrop(32, scale=(0.3, 1.0)), T.RandomHorizontalFlip(), T.RandomVerticalFlip()])
    boxes = Boxes("XYWH", out_format="XYXY", min_size=3, min_area=9)
    ld = Loader(rep.shards, batch_size=6, transform=tf, device="cpu", seed=4, labels=False,
                fields={"json": boxes, "seg.png": Mask()})
    checked = 0
    for epoch in range(2):
        ld.set_epoch(epoch)
        for images, targets, masks in ld:
            for img, t, m in zip(images, targets, masks):
                assert _interior_agrees(img.float().mean(0) > 60, m) > 0.995
                for box in t["boxes"].tolist():
                    assert _on_rectangle(img, box), (box, t["boxes"])
                    checked += 1
    assert checked > 25
    stripped = tmp_path / "stripped-000000.tar"  # (the records taken out: the boxes stay where they were)
    with tarfile.open(rep.shards[0]) as src, tarfile.open(stripped, "w") as dst:
        for member in src.getmembers():
            if not member.name.endswith(RECORD):
                dst.addfile(member, src.extractfile(member))
    ld = Loader([str(stripped)], batch_size=6, transform=tf, device="cpu", seed=4, labels=False,
                fields={"json": boxes})
    on = []
    for epoch in range(2):
        ld.set_epoch(epoch)
        on += [_on_rectangle(img, box) for images, targets in ld for img, t in zip(images, targets)
               for box in t["boxes"].tolist()]
    assert len(on) >= 8 and np.mean(on) < 0.5


def _on_rectangle(img: torch.Tensor, box: list[float]) -> bool:
    """Whether the box bounds the image's bright rectangle (to a pixel and a half)."""
    ys, xs = torch.nonzero(img.float().mean(0) > 60, as_tuple=True)
    if not len(xs):
        return False
    got = [float(xs.min()), float(ys.min()), float(xs.max()) + 1, float(ys.max()) + 1]
    return bool(np.allclose(got, box, atol=1.5))


def test_a_set_precached_twice_keeps_one_record_of_both(rects, tmp_path):
    """Precaching a precached set again (shorter side 48 with its centre, then 30x30) keeps one
    record of every step from the original image; its boxes and masks are torchvision's
    steps one after the other."""
    url, samples = rects
    once = precache([url], str(tmp_path / "once"), size=48, crop="center")
    twice = precache(once.shards, str(tmp_path / "twice"), size=(30, 30))
    with tarfile.open(twice.shards[0]) as tf:
        rec = read_record(tf.extractfile(f"r000.{RECORD}").read())
    assert rec == Record((70, 90), (("resize", 48, 61), ("crop", 48, 48), ("resize", 30, 30)))
    ld = Loader(twice.shards, batch_size=6, transform=T.Compose([]), device="cpu", shuffle=False, labels=False,
                fields={"json": Boxes(min_size=0, min_area=0), "seg.png": Mask()})
    n = 0
    for b in ld:
        _, targets, masks = b
        for key, t, m in zip(b.keys, targets, masks):
            s = samples[int(key[1:])]
            img, box = _rectangles(100 + int(key[1:]), *_size_of(s))
            h, w = img.shape[:2]
            b, mm = tv_stored(box, torch.from_numpy((img[..., 0] > 0).astype(np.uint8)), (h, w),
                              *downsizing(h, w, 48, "center"))
            b, mm = tv_stored(b, mm, (48, 48), (30, 30), None)
            torch.testing.assert_close(t["boxes"], torch.from_numpy(b), rtol=0, atol=2e-4)
            assert torch.equal(m, mm)
        n += len(targets)
    assert n == 18


def test_shards_precached_before_the_record_are_refused_with_boxes_or_masks(rects, tmp_path):
    """A manifest of version 2 (precache before it wrote records): Boxes or Mask fields are
    refused when the Loader is made, naming the manifest; the images alone still read."""
    url, _ = rects
    rep = precache([url], str(tmp_path / "out"), size=48, crop="center")
    with open(rep.manifest) as f:
        doc = json.load(f)
    doc["version"] = 2
    with open(rep.manifest, "w") as f:
        json.dump(doc, f)
    for fields in ({"json": Boxes()}, {"seg.png": Mask()}):
        with pytest.raises(ValueError, match=r"precached by an older gpudecode \(.*manifest\.json: version 2\)"):
            Loader(rep.shards, batch_size=6, transform=T.Compose([]), device="cpu", fields=fields)
    assert sum(len(b.keys) for b in Loader(rep.shards, batch_size=6, transform=T.Compose([]), device="cpu",
                                           fields="json")) == 18


def test_remote_shards_precached_before_the_record_are_refused_too(rects, tmp_path, http_server):
    """Over HTTP: the manifest beside the shards (manifest.json) is read once where a Boxes
    or Mask field follows the images; a version-2 one is refused as the local one is, naming
    its URL; a current one reads as the local set does; none there says nothing."""
    url, _ = rects
    rep = precache([url], str(tmp_path / "out"), size=48, crop="center")
    shard = os.path.basename(rep.shards[0])
    with open(rep.shards[0], "rb") as f:
        http_server.files[f"/set/{shard}"] = f.read()
    with open(rep.manifest) as f:
        doc = json.load(f)
    remote = [http_server.url(f"/set/{shard}")]
    kw = dict(batch_size=6, transform=T.Compose([]), device="cpu", shuffle=False, labels=False)
    local = [t["boxes"] for b in Loader(rep.shards, fields={"json": Boxes()}, **kw) for t in b[1]]
    assert len(local) == 18
    http_server.files["/set/manifest.json"] = json.dumps(doc).encode()
    got = [t["boxes"] for b in Loader(remote, fields={"json": Boxes()}, **kw) for t in b[1]]
    assert all(torch.equal(a, b) for a, b in zip(got, local)) and len(got) == 18
    doc["version"] = 2
    http_server.files["/set/manifest.json"] = json.dumps(doc).encode()
    for fields in ({"json": Boxes()}, {"seg.png": Mask()}):
        with pytest.raises(ValueError, match=r"precached by an older gpudecode \(http://127\.0\.0\.1:\d+/set/manifest\.json: "
                                             r"version 2\)"):
            Loader(remote, fields=fields, **kw)
    assert sum(len(b.keys) for b in Loader(remote, fields="json", **kw)) == 18  # (no field follows: not read)
    del http_server.files["/set/manifest.json"]
    assert sum(len(b.keys) for b in Loader(remote, fields={"json": Boxes()}, **kw)) == 18


BAD_RECORDS = [
    (b"not json", r"not JSON"),
    (b"[1, 2]", r'\{"version", "from", "steps"\}'),
    (b'{"version": 1, "from": [70, 90], "steps": [], "more": 1}', r'\{"version", "from", "steps"\}'),
    (b'{"version": 2, "from": [70, 90], "steps": []}', r"version 2: this gpudecode reads version 1"),
    (b'{"version": true, "from": [70, 90], "steps": []}', r"version True"),
    (b'{"version": 1, "from": [70, true], "steps": []}', r"from is \[70, True\], not a size"),
    (b'{"version": 1, "from": [70, 0], "steps": []}', r"from is \[70, 0\], not a size"),
    (b'{"version": 1, "from": [70, 90], "steps": [{"rotate": [1, 1]}]}', r"a step is"),
    (b'{"version": 1, "from": [70, 90], "steps": [{"resize": [1, 1], "crop": [1, 1]}]}', r"a step is"),
    (b'{"version": 1, "from": [70, 90], "steps": [{"crop": [2.5, 1]}]}', r"crop is \[2.5, 1\], not a size"),
    (json.dumps({"version": 1, "from": [70, 90], "steps": [{"crop": [70, 90]}] * 17}).encode(), r"at most 16"),
    (b"[" * 5000, r"at most 4096"),
    (b'{"version": 1, "from": [70, 90], "steps": [{"crop": [9, 9]}], "moved": ["seg.png"]}', r"moved is not a mapping"),
    (b'{"version": 1, "from": [70, 90], "steps": [{"crop": [9, 9]}], "moved": {"a/b": 1}}', r"named 'a/b', not a"),
    (b'{"version": 1, "from": [70, 90], "steps": [{"crop": [9, 9]}], "moved": {"gpudecode.json": 1}}', r"not a member"),
    (b'{"version": 1, "from": [70, 90], "steps": [{"crop": [9, 9]}], "moved": {"seg.png": 0}}', r"through 0 steps"),
    (b'{"version": 1, "from": [70, 90], "steps": [{"crop": [9, 9]}], "moved": {"seg.png": 2}}', r"not 1 to its 1"),
    (b'{"version": 1, "from": [70, 90], "steps": [{"crop": [9, 9]}], "moved": {"seg.png": true}}', r"through True"),
    (json.dumps({"version": 1, "from": [70, 90], "steps": [{"crop": [9, 9]}],
                 "moved": {f"m{i}": 1 for i in range(17)}}).encode(), r"at most 16 members"),
]


@pytest.mark.parametrize("data,why", BAD_RECORDS)
def test_each_bad_record_says_what_it_is(data, why):
    with pytest.raises(ValueError, match=why):
        read_record(data)


def test_a_bad_record_is_its_samples_error_in_the_loader_and_in_precache(tmp_path):
    """Samples whose record is not one, is not its image's, or whose mask is not the size
    the record says the image was: each its own FieldError naming shard and key, skipped
    alone under on_error="skip", in the Loader and in precache (which records it); the
    others read."""
    samples = _rect_samples(8)
    for s in samples:
        img = np.zeros((*_size_of(s), 3), np.uint8)
        s["png"] = encode(img, "PNG")  # (the image at its own size: a record of 60x80 -> that size)
        s[RECORD] = made(60, 80, _size_of(s), None).member()
    samples[1][RECORD] = b"not json"
    samples[3][RECORD] = made(60, 80, (10, 10), None).member()  # (not this image's size)
    samples[5]["seg.png"] = png(np.zeros((20, 20), np.uint8))  # (not the record's 60x80)
    for s in samples:
        s["seg.png"] = s["seg.png"] if s["__key__"] == "r005" else png(np.zeros((60, 80), np.uint8))
    url = make_shard(tmp_path / "bad-000000.tar", samples)
    ld = Loader([url], batch_size=4, transform=T.Resize((24, 24)), device="cpu", shuffle=False, on_error="skip",
                fields={"json": Boxes(), "seg.png": Mask()})
    keys = [k for b in ld for k in b.keys]
    assert keys == ["r000", "r002", "r004", "r006", "r007"]
    assert {s.key: (s.shard, s.error) for s in ld.skipped} == {k: (url, "FieldError") for k in ("r001", "r003", "r005")}
    why = {s.key: s.reason for s in ld.skipped}
    assert re.search(rf"member \.{RECORD} is not a record of how its image was stored", why["r001"])
    h, w = _size_of(samples[3])
    assert re.search(rf"says its image was stored at 10x10, the image is {h}x{w}", why["r003"])
    assert re.search(r"field \.seg\.png is a mask of 20x20; its image was 60x80", why["r005"])
    with pytest.raises(FieldError, match=r"not JSON.*key 'r001'"):
        list(Loader([url], batch_size=4, transform=T.Resize((24, 24)), device="cpu", shuffle=False,
                    fields={"json": Boxes()}))
    rep = precache([url], str(tmp_path / "out"), size=30, on_error="skip")
    assert [s.key for s in rep.skipped] == ["r001", "r003"] and rep.samples == 6
    with open(rep.manifest) as f:
        doc = json.load(f)
    assert [s["key"] for s in doc["skipped"]] == ["r001", "r003"]
    assert os.path.getsize(rep.shards[0]) > 0


def test_verify_checks_each_record_against_its_image(rects, tmp_path):
    """`gpudecode verify` reads each sample's record: one that is not a record, and one
    whose stored size is not its image's, are problems naming shard and sample (the
    shard's bytes and sha256 otherwise the manifest's)."""
    from gpudecode.precache import verify

    url, _ = rects
    rep = precache([url], str(tmp_path / "out"), size=48, crop="center")
    assert verify(tmp_path / "out") == []
    shard = rep.shards[0]
    changed = {f"r002.{RECORD}": made(70, 90, (30, 30), None).member(), f"r004.{RECORD}": b"junk"}
    replace_members(shard, changed, rep.manifest)
    name = os.path.basename(shard)
    assert verify(tmp_path / "out") == [
        f"{name}: sample 'r002' is 48x48, its .{RECORD} says 30x30",
        f"{name}: sample 'r004': member .{RECORD} is not a record of how its image was stored (not JSON)"]
