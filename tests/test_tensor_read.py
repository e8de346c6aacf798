"""The read path of tensor shards: samples mapped from the shard (no copy) and read by the
kernel in place; transforms without resampling (flip + Normalize, RandomCrop with
padding) through the Loader, against torchvision on the stored arrays; faults named."""
from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision.transforms.v2.functional as F

from gpudecode import DecodeError, Loader, ShardReadError, ShardReader
from gpudecode import transforms as T
from gpudecode.io.reader import Failure, iter_shard
from gpudecode.precache import precache
from gpudecode.tensors import encode_npy

from conftest import encode, make_shard

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


@pytest.fixture(scope="module")
def stored(photos, tmp_path_factory):
    """Real photos precached at 48, centre crop: every sample 48x48 (the training size)."""
    d = tmp_path_factory.mktemp("stored")
    samples = []
    for k, img in enumerate(list(photos.values()) * 3):
        samples.append({"__key__": f"s{k:03d}", "jpg": encode(img[k:, 2 * k:], "JPEG", quality=90),
                        "cls": str(k % 3).encode()})
    src = [make_shard(d / "src-0.tar", samples[:10]), make_shard(d / "src-1.tar", samples[10:])]
    report = precache(src, d / "out", size=48, crop="center", num_threads=1)
    arrays = {}
    for p in report.shards:
        with tarfile.open(p) as tf:
            for m in tf.getmembers():
                if m.name.endswith(".npy"):
                    arrays[m.name[:-4]] = np.load(io.BytesIO(tf.extractfile(m).read()))
    return report, arrays


def test_mapped_fields_are_views_of_the_shard(stored, tmp_path):
    report, arrays = stored
    plain = {s.key: s.fields for s in ShardReader(report.shards)}
    mapped = {s.key: s.fields for s in ShardReader(report.shards, map_extensions=["npy"])}
    assert plain.keys() == mapped.keys() == arrays.keys()
    for key, fields in mapped.items():
        assert isinstance(fields["npy"], memoryview) and fields["npy"].readonly
        assert isinstance(fields["cls"], bytes)
        assert bytes(fields["npy"]) == plain[key]["npy"]
    # gzip shards are unpacked to a temporary file, mapped the same way
    import gzip

    gz = tmp_path / "t.tar.gz"
    gz.write_bytes(gzip.compress(Path(report.shards[0]).read_bytes()))
    got = {s.key: bytes(s.fields["npy"]) for s in ShardReader(str(gz), map_extensions=["npy"])}
    assert got == {k: plain[k]["npy"] for k in got} and len(got) > 0


@pytest.mark.parametrize("cut", [0.3, 0.75])
def test_a_shard_truncated_in_place_is_a_read_error(tmp_path, cut):
    """Truncated while being read (after the first of its 256-member read batches): the
    mapped read checks the size before each batch and ends the shard as pread does, with
    the same samples delivered and the same error as the unmapped reader. (The views of
    the batch mapped before the cut are not touched here: reading those would fault,
    the one case the size check cannot catch; see ShardReader's map_extensions.)"""
    samples = [{"__key__": f"t{k:04d}", "npy": encode_npy(np.full((8, 8, 3), k % 251, np.uint8)),
                "cls": str(k).encode()} for k in range(400)]
    results = []
    for i, mapped in enumerate((frozenset(), frozenset({"npy"}))):
        path = make_shard(tmp_path / f"t{i}.tar", samples)
        size = os.path.getsize(path)
        keys, err = [], None
        for k, item in enumerate(iter_shard(path, mapped=mapped)):
            if k == 0:
                assert isinstance(item.fields["npy"], memoryview if mapped else bytes)
                with open(path, "r+b") as f:
                    f.truncate(int(size * cut) // 512 * 512)
            if isinstance(item, Failure):
                err = item.error
                break
            keys.append(item.key)
        results.append((keys, type(err), str(err).replace(f"t{i}.tar", "t.tar")))
    assert results[0][1] in (ShardReadError, __import__("gpudecode").ShardFormatError), results[0]
    assert 0 < len(results[0][0]) < 400
    assert results[1] == results[0]


def _loader_vs_torchvision(report, arrays, tf, *, levels, **kw):
    """Every batch of the Loader against torchvision's functional ops (tests/tvref.py) on
    the stored arrays, replaying the parameters the transform drew for each position: at
    most `levels` grey levels apart (of 255) before Normalize. Returns the loader."""
    from tvref import torchvision_apply

    loader = Loader(report.shards, batch_size=8, transform=tf, device="cpu", shuffle=False, seed=3, **kw)
    loader.set_epoch(1)
    std = torch.tensor(STD).view(3, 1, 1)
    pos = 0
    for batch in loader:
        imgs = [torch.from_numpy(arrays[k]).permute(2, 0, 1).contiguous() for k in batch.keys]
        params = tf.make_params([tuple(i.shape[1:]) for i in imgs], 3, epoch=1, indices=list(range(pos, pos + len(imgs))))
        for got, img, p in zip(batch.images, imgs, params):
            ref = torchvision_apply(img, p, tuple(got.shape[1:]), mean=MEAN, std=STD)
            err = float(((got - ref).abs() * std).max()) * 255
            assert err <= levels, (p, err)
        pos += len(imgs)
    assert pos == len(arrays)
    return loader


def test_flip_and_normalize_through_the_loader(stored):
    """No geometry: the Loader reads the 48x48 stored pixels in place; the result is the
    transforms API's on the stored arrays, which is torchvision's flip + normalize."""
    report, arrays = stored
    tf = T.Compose([T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)])
    loader = _loader_vs_torchvision(report, arrays, tf, levels=0.01)
    assert loader.reader.map_extensions == {"npy"}
    loader.set_epoch(4)
    first = next(iter(loader))
    assert first.images.shape == (8, 3, 48, 48)
    # torchvision's functional ops on the stored arrays, each flipped where its drawn params say
    imgs = [torch.from_numpy(arrays[k]).permute(2, 0, 1) for k in first.keys]
    params = tf.make_params([tuple(i.shape[1:]) for i in imgs], 3, epoch=4, indices=list(range(len(imgs))))
    assert {bool(p.get("flip")) for p in params} == {True, False}  # both kinds are checked
    for img, p, got in zip(imgs, params, first.images):
        ref = F.normalize(F.to_dtype(img, torch.float32, scale=True), MEAN, STD)
        torch.testing.assert_close(got, F.horizontal_flip(ref) if p.get("flip") else ref, atol=2e-6, rtol=0)


def test_random_crop_with_padding_through_the_loader(stored):
    report, arrays = stored
    tf = T.Compose([T.RandomCrop(48, padding=4), T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)])
    _loader_vs_torchvision(report, arrays, tf, levels=0.01)  # zeros outside, as F.crop pads
    tf = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1),
                    T.Normalize(MEAN, STD)])
    _loader_vs_torchvision(report, arrays, tf, levels=2.0)  # resampling and jitter read the mapped pixels too


def test_no_geometry_with_mixed_sizes_names_the_odd_sample(stored, tmp_path):
    report, arrays = stored
    odd = {"__key__": "odd", "npy": encode_npy(np.zeros((40, 48, 3), np.uint8)), "cls": b"1"}
    good = [{"__key__": k, "npy": encode_npy(a), "cls": b"0"} for k, a in list(arrays.items())[:5]]
    shard = make_shard(tmp_path / "mixed.tar", good[:2] + [odd] + good[2:])
    tf = T.Compose([T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)])
    with pytest.raises(DecodeError, match="40x48, the others 48x48") as e:
        list(Loader(shard, batch_size=4, transform=tf, device="cpu", shuffle=False))
    assert "mixed.tar" in str(e.value) and "odd" in str(e.value)
    loader = Loader(shard, batch_size=4, transform=tf, device="cpu", shuffle=False, on_error="skip")
    assert [k for b in loader for k in b.keys] == [g["__key__"] for g in good]
    assert [s.key for s in loader.skipped] == ["odd"]


def test_mappings_are_kept_between_epochs_and_renewed_for_a_new_file(stored, tmp_path):
    """A reader keeps its shard mappings from one epoch to the next (no new page faults),
    maps a file again when it was replaced (a rename: new inode) or rewritten (size or
    time), keeps no more than its limit, and close() drops them; what it reads is always
    the file's current content."""
    import shutil

    from gpudecode.io.members import _MapCache

    report, arrays = stored
    shards = [shutil.copy(p, tmp_path / f"copy-{k}.tar") for k, p in enumerate(report.shards)]
    r = ShardReader(shards, map_extensions=["npy"])

    def read():
        return {s.key: bytes(s.fields["npy"]) for s in r}

    first = read()
    maps = dict(r.segments.maps._maps)
    assert len(maps) == len(shards)
    assert read() == first and all(r.segments.maps._maps[k] is m for k, m in maps.items())  # the same mappings
    # replace one shard by a rename (as every gpudecode writer does): its new content is read
    other = make_shard(tmp_path / "other.tar", [{"__key__": "z000", "npy": encode_npy(np.full((4, 5, 3), 7, np.uint8)),
                                                 "cls": b"1"}])
    os.replace(other, shards[0])
    before = {s.key for s in ShardReader(report.shards[0])}
    got = read()
    assert set(got) == (set(first) - before) | {"z000"}
    assert got["z000"] == encode_npy(np.full((4, 5, 3), 7, np.uint8))
    assert len(r.segments.maps._maps) == len(shards) + 1  # the old file's mapping waits for the limit (or close)
    r.close()
    assert len(r.segments.maps) == 0 and read() == got  # iterable after close: mapped again
    # the limit: least recently used out first, the newest always kept
    cache = _MapCache(limit=1)
    fds = [os.open(p, os.O_RDONLY) for p in shards]
    try:
        a = cache.get(fds[0], os.fstat(fds[0]).st_size)
        b = cache.get(fds[1], os.fstat(fds[1]).st_size)
        assert len(cache) == 1 and cache.get(fds[1], os.fstat(fds[1]).st_size) is b
        assert cache.get(fds[0], os.fstat(fds[0]).st_size) is not a
    finally:
        for fd in fds:
            os.close(fd)


def test_tensor_layouts_agree_with_numpy(stored):
    """_native.tensor_layouts (the CPU decoder's one call per batch) gives each sample's
    address, shape and pixel offset as numpy reads them, and refuses what is not a uint8
    [H, W, 3] C-order array, truncated ones included; the decoder then asks numpy's parser
    (which reads headers the native one does not) and names what is wrong."""
    from gpudecode import _native
    from gpudecode.decode import Request
    from gpudecode.decode.cpu import CpuDecoder
    from gpudecode.tensors import npy_layout

    report, arrays = stored
    good = [encode_npy(a) for a in list(arrays.values())[:3]]
    buf = io.BytesIO()
    np.save(buf, np.zeros((5, 6, 3), np.float32))
    bad = [buf.getvalue(), good[0][:-10], b"\x93NUMPY junk", b"not npy at all"]
    addr, hs, ws, starts, errors = _native.tensor_layouts(good + bad)
    for k, data in enumerate(good):
        assert errors[k] == "" and (hs[k], ws[k], starts[k]) == npy_layout(data)
        assert np.array_equal(np.frombuffer(data, np.uint8, offset=int(starts[k])).reshape(hs[k], ws[k], 3),
                              np.load(io.BytesIO(data)))
    assert all(errors[len(good):])
    # a header numpy reads and the native parser does not (the dtype by name): read through numpy
    h, w, start = npy_layout(good[0])
    text = f"{{'descr': 'uint8', 'fortran_order': False, 'shape': ({h}, {w}, 3), }}"
    text += " " * ((-(10 + len(text) + 1)) % 64) + "\n"
    odd = b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text.encode("latin1") + good[0][start:]
    assert np.array_equal(np.load(io.BytesIO(odd)), np.load(io.BytesIO(good[0])))
    assert _native.tensor_layouts([odd])[4][0] != ""
    dec = CpuDecoder(num_threads=1)
    reqs = [Request(d, "npy", h, w, (0, 0, h, w), "s.tar", f"k{i}") for i, d in enumerate([good[0], odd])]
    reqs.append(Request(good[1], "npy", h + 1, w, (0, 0, h + 1, w), "s.tar", "wrong"))  # probe said otherwise
    out = dec.decode(reqs)
    try:
        assert out.errors[:2] == [None, None]
        assert out.errors[2] is not None and "its probe said" in out.errors[2]
        px = out.pixels.numpy()
        for k in (0, 1):
            img = px[out.offsets[k]:out.offsets[k] + h * w * 3].reshape(h, w, 3)
            assert np.array_equal(img, np.load(io.BytesIO(good[0])))
    finally:
        dec.close()


def test_many_mapped_shards_under_a_small_descriptor_limit(tmp_path):
    """300 tensor shards read (mapped) twice with RLIMIT_NOFILE at 128: the reader keeps at
    most a quarter of the limit mapped (each mapping holds a descriptor), so nothing runs
    out; every sample comes, as tarfile lists them. (1,100 shards under the default 1,024
    used to fail with 'Too many open files'.)"""
    import subprocess
    import sys

    code = f"""
import resource, sys, tarfile
sys.path.insert(0, {os.path.dirname(__file__)!r})
import numpy as np
from conftest import make_shard
from gpudecode import ShardReader
from gpudecode.tensors import encode_npy
paths = [make_shard({str(tmp_path)!r} + f"/t{{j:03d}}.tar", [{{"__key__": f"s{{j:03d}}", "npy": encode_npy(np.full((4, 5, 3), j % 250, np.uint8)), "cls": b"1"}}]) for j in range(300)]
resource.setrlimit(resource.RLIMIT_NOFILE, (128, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
r = ShardReader(paths, map_extensions=["npy"], num_threads=2)
for _ in range(2):
    got = [(s.key, bytes(s.fields["npy"])[-1]) for s in r]
want = []
for p in paths:
    with tarfile.open(p) as t:
        want += [m.name[:-4] for m in t.getmembers() if m.name.endswith(".npy")]
assert [k for k, _ in got] == want, (len(got), len(want))
assert all(v == int(k[1:]) % 250 for k, v in got)
assert len(r.segments.maps._maps) <= 32, len(r.segments.maps._maps)
print("ok", len(got))
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and res.stdout.strip() == "ok 300", (res.returncode, res.stdout[-500:], res.stderr[-3000:])
