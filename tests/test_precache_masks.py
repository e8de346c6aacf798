"""Masks moved by precache itself (`precache(masks=["seg.png"])`, `gpudecode precache
--mask seg.png`): where an image is resized or cut, its mask is moved with it once and
written back in its own form (a palette PNG with its palette, 16-bit grey as 16 bits, a
1-bit PNG, an .npy of its dtype), the record saying so (`"moved"`); the Loader then reads
it at the stored size. Held to the Loader moving the unmoved mask each epoch (the same
batches, through random crops and rotations), which tests/test_stored_records.py holds to
torchvision; a set precached twice, with and without moving; `gpudecode verify` on moved
members; a mask that is not one, each its sample's error."""
from __future__ import annotations

import io
import json
import re
import tarfile

import numpy as np
import pytest
import torch
from PIL import Image

from gpudecode import FieldError, Loader, Mask
from gpudecode import transforms as T
from gpudecode.precache import precache, verify
from gpudecode.transforms.stored import RECORD, read_record

from conftest import encode, make_shard, replace_members
from test_masks import centre, npy, palette_png, png, slic_mask

SIZES = [(70, 90), (96, 64), (120, 150), (50, 50), (83, 101), (64, 200)]


def _forms(mask: np.ndarray, k: int) -> bytes:
    """The mask in one of the forms a Mask field reads: a palette PNG, 16-bit grey, 1 bit,
    8-bit grey, an .npy of int16."""
    form = k % 5
    if form == 0:
        return palette_png(mask)
    if form == 1:
        return png(mask.astype(np.uint16) * 1000)
    if form == 2:
        return png(mask % 2 == 1)
    if form == 3:
        return png(mask * 7)
    return npy(mask.astype(np.int16) - 3)


def _samples(photos, n: int = 18) -> list[dict]:
    names = sorted(photos)
    out = []
    for k in range(n):
        h, w = SIZES[k % len(SIZES)]
        img = centre(photos[names[k % len(names)]], h, w)
        out.append({"__key__": f"s{k:03d}", "jpg": encode(img), "cls": str(k % 3),
                    "seg.png": _forms(slic_mask(img), k)})
    return out


@pytest.fixture(scope="module")
def seg(tmp_path_factory, photos):
    d = tmp_path_factory.mktemp("precache-masks")
    samples = _samples(photos)
    return make_shard(d / "seg-000000.tar", samples), samples


def _members(shard: str) -> dict[str, dict[str, bytes]]:
    out: dict[str, dict[str, bytes]] = {}
    with tarfile.open(shard) as tf:
        for m in tf.getmembers():
            key, ext = m.name.split(".", 1)
            out.setdefault(key, {})[ext] = tf.extractfile(m).read()
    return out


def _batches(shards, tf, **kw):
    ld = Loader(shards, batch_size=5, transform=tf, device="cpu", shuffle=True, seed=3, labels=False,
                fields={"seg.png": Mask(fill=255, dtype=torch.int32)}, **kw)
    ld.set_epoch(1)
    return [(b.keys, b.images, b[1]) for b in ld]


def test_precache_moves_each_mask_once_in_its_own_form(seg, tmp_path):
    """Precached at 48 with its centre, masks=["seg.png"]: every mask member is 48x48 in
    its own form (mode and palette, 16 bits, 1 bit, the .npy's dtype), its record says it
    moved it through both steps; the Loader's batches, through random crops, flips and a
    rotation, equal those of the same set precached without moving its masks (the Loader
    moving each mask each epoch), images and masks alike; `gpudecode verify` passes."""
    url, samples = seg
    moved = precache([url], str(tmp_path / "moved"), size=48, crop="center", masks=["seg.png"])
    plain = precache([url], str(tmp_path / "plain"), size=48, crop="center")
    got, src = _members(moved.shards[0]), {s["__key__"]: s for s in samples}
    assert sorted(got) == sorted(src)
    for key, m in got.items():
        rec = read_record(m[RECORD])
        assert rec.size == (48, 48) and rec.moved == (("seg.png", len(rec.steps)),) and len(rec.steps) in (1, 2)
        before, after = src[key]["seg.png"], m["seg.png"]
        if before[:6] == b"\x93NUMPY":
            a, b = np.load(io.BytesIO(before)), np.load(io.BytesIO(after))
            assert b.dtype == a.dtype and b.shape == (48, 48)
            continue
        with Image.open(io.BytesIO(before)) as a, Image.open(io.BytesIO(after)) as b:
            assert b.size == (48, 48) and b.mode == a.mode, (key, a.mode, b.mode)
            if a.mode == "P":
                assert b.getpalette() == a.getpalette()
            if a.mode.startswith("I"):
                assert np.array(b).max() > 255  # (still 16 bits)
        assert "npy" in m and m["cls"] == src[key]["cls"].encode()  # (the image stored, the rest copied)
    assert verify(tmp_path / "moved") == [] and verify(tmp_path / "plain") == []
    tf = T.Compose([T.RandomResizedCrop(32, scale=(0.3, 1.0)), T.RandomHorizontalFlip(), T.RandomRotation(20)])
    a, b = _batches(moved.shards, tf), _batches(plain.shards, tf)
    assert [k for k, _, _ in a] == [k for k, _, _ in b] and sum(len(k) for k, _, _ in a) == 18
    for (_, ia, ma), (_, ib, mb) in zip(a, b):
        assert torch.equal(ia, ib) and torch.equal(ma, mb)
    with open(moved.manifest) as f:
        assert json.load(f)["settings"]["masks"] == ["seg.png"]
    with open(plain.manifest) as f:
        assert "masks" not in json.load(f)["settings"]  # (a run without it is as it was made)


def test_a_set_precached_twice_moves_its_masks_through_the_steps_left(seg, tmp_path):
    """Moved once at 64, then precached again at 30x30 without moving: the record keeps the
    steps the mask has been through, and the Loader moves it through the rest; moved again:
    through every step. Both read as the set precached twice without moving any mask."""
    url, _ = seg
    once = precache([url], str(tmp_path / "once"), size=64, masks=["seg.png"])
    left = precache(once.shards, str(tmp_path / "left"), size=(30, 30))
    again = precache(once.shards, str(tmp_path / "again"), size=(30, 30), masks=["seg.png"])
    never = precache(precache([url], str(tmp_path / "n1"), size=64).shards, str(tmp_path / "never"), size=(30, 30))
    for key, m in _members(left.shards[0]).items():
        rec = read_record(m[RECORD])
        assert rec.steps[-1] == ("resize", 30, 30) and rec.done("seg.png") == len(rec.steps) - 1, (key, rec)
        again_rec = read_record(_members(again.shards[0])[key][RECORD])
        assert again_rec.done("seg.png") == len(again_rec.steps)
    assert verify(tmp_path / "left") == [] and verify(tmp_path / "again") == []
    tf = T.Compose([T.RandomCrop(24), T.RandomVerticalFlip()])
    ref = _batches(never.shards, tf)
    for out in (left, again):
        got = _batches(out.shards, tf)
        assert len(got) == len(ref)
        for (ka, _, ma), (kb, _, mb) in zip(got, ref):
            assert ka == kb and torch.equal(ma, mb)


def test_verify_names_a_moved_mask_of_the_wrong_size(seg, tmp_path):
    """A moved mask member that is not the size its record says (here put back at its
    source size) is a problem `gpudecode verify` names, with the member and both sizes."""
    url, samples = seg
    rep = precache([url], str(tmp_path / "out"), size=48, crop="center", masks=["seg.png"])
    shard = rep.shards[0]
    replace_members(shard, {"s000.seg.png": samples[0]["seg.png"]}, rep.manifest)
    problems = verify(tmp_path / "out")
    assert len(problems) == 1 and re.search(r"sample 's000': member \.seg\.png is 70x90, its \.gpudecode\.json says "
                                            r"it was moved to 48x48", problems[0]), problems
    # the Loader: that sample's FieldError, skipped alone
    ld = Loader([shard], batch_size=6, transform=T.Compose([]), device="cpu", shuffle=False, on_error="skip",
                fields={"seg.png": Mask(dtype=torch.int32)})  # (the masks' forms differ in dtype: one for the batch)
    assert sum(len(b.keys) for b in ld) == 17 and [s.key for s in ld.skipped] == ["s000"]
    assert re.search(r"field \.seg\.png is a mask of 70x90; its image was 48x48 after 2 of the steps that stored it "
                     r"at 48x48", ld.skipped[0].reason), ld.skipped[0].reason


def test_a_mask_that_is_not_one_is_its_samples_error_and_the_names_are_checked(seg, tmp_path, photos):
    """With masks=, a mask member that is not a mask (a colour PNG) or not its image's size
    is that sample's FieldError, naming shard and key: skipped and listed under skip,
    raised otherwise; a sample without the member, or whose image is not resized, is
    written as it is. masks= takes members' names, not an image's extension."""
    _, samples = seg
    bad = [dict(s) for s in samples[:6]]
    img = centre(photos[sorted(photos)[0]], 70, 90)
    bad[1]["seg.png"] = encode(img, "PNG")  # (three channels: a colour PNG)
    bad[2]["seg.png"] = png(np.zeros((10, 10), np.uint8))  # (not its image's size)
    del bad[3]["seg.png"]
    bad[4]["jpg"] = encode(centre(img, 40, 40))  # (under the size: not resized, its mask as it was)
    bad[4]["seg.png"] = png(np.ones((40, 40), np.uint8))
    url = make_shard(tmp_path / "bad-000000.tar", bad)
    rep = precache([url], str(tmp_path / "out"), size=48, masks=["seg.png"], on_error="skip")
    assert [s.key for s in rep.skipped] == ["s001", "s002"] and rep.samples == 4
    why = {s.key: s.reason for s in rep.skipped}
    assert why["s001"].startswith("member .seg.png is a PNG of mode RGB: a mask has one channel")
    assert re.match(r"member \.seg\.png is a mask of 10x10; its image was \d+x\d+ before it was stored", why["s002"])
    got = _members(rep.shards[0])
    assert "seg.png" not in got["s003"] and got["s004"]["seg.png"] == bad[4]["seg.png"] and RECORD not in got["s004"]
    with pytest.raises(FieldError, match=r"(?s)member \.seg\.png is a PNG of mode RGB.*key 's001'"):
        precache([url], str(tmp_path / "raise"), size=48, masks=["seg.png"])
    for masks, why_ in ((["jpg"], "an image extension"), (["a/b"], "names members by their extension"),
                        ([".seg"], "names members"), ([RECORD], "names members")):
        with pytest.raises(ValueError, match=why_):
            precache([url], str(tmp_path / "never"), size=48, masks=masks)


def test_the_cli_takes_mask(seg, tmp_path, capsys):
    """`gpudecode precache --mask seg.png` moves the masks (the manifest says so)."""
    from gpudecode.cli import main

    url, _ = seg
    assert main(["precache", url, str(tmp_path / "out"), "--size", "40", "--mask", "seg.png", "--quiet"]) == 0
    with open(tmp_path / "out" / "manifest.json") as f:
        assert json.load(f)["settings"]["masks"] == ["seg.png"]
    m = _members(sorted(p for p in (tmp_path / "out").glob("*.tar"))[0].as_posix())["s000"]
    assert read_record(m[RECORD]).done("seg.png") == 1
    assert "wrote 18 samples" in capsys.readouterr().out
