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
from gpudecode.io.reader import _Failure, iter_shard
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
            if isinstance(item, _Failure):
                err = item.error
                break
            keys.append(item.key)
        results.append((keys, type(err), str(err).replace(f"t{i}.tar", "t.tar")))
    assert results[0][1] in (ShardReadError, __import__("gpudecode").ShardFormatError), results[0]
    assert 0 < len(results[0][0]) < 400
    assert results[1] == results[0]


def _loader_vs_transform(report, arrays, tf, **kw):
    loader = Loader(report.shards, batch_size=8, transform=tf, device="cpu", shuffle=False, seed=3, **kw)
    loader.set_epoch(1)
    pos = 0
    for batch in loader:
        imgs = [torch.from_numpy(arrays[k]).permute(2, 0, 1).contiguous() for k in batch.keys]
        params = tf.make_params([tuple(i.shape[1:]) for i in imgs], 3, epoch=1, indices=list(range(pos, pos + len(imgs))))
        torch.testing.assert_close(batch.images, tf(imgs, params), atol=0, rtol=0)
        pos += len(imgs)
    assert pos == len(arrays)
    return loader


def test_flip_and_normalize_through_the_loader(stored):
    """No geometry: the Loader reads the 48x48 stored pixels in place; the result is the
    transforms API's on the stored arrays, which is torchvision's flip + normalize."""
    report, arrays = stored
    tf = T.Compose([T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)])
    loader = _loader_vs_transform(report, arrays, tf)
    assert loader.reader.map_extensions == {"npy"}
    first = next(iter(loader))
    assert first.images.shape == (8, 3, 48, 48)
    key = first.keys[0]
    ref = F.normalize(F.to_dtype(torch.from_numpy(arrays[key]).permute(2, 0, 1), torch.float32, scale=True), MEAN, STD)
    assert torch.allclose(first.images[0], ref, atol=2e-6) or torch.allclose(first.images[0], ref.flip(-1), atol=2e-6)


def test_random_crop_with_padding_through_the_loader(stored):
    report, arrays = stored
    tf = T.Compose([T.RandomCrop(48, padding=4), T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)])
    _loader_vs_transform(report, arrays, tf)
    tf = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1),
                    T.Normalize(MEAN, STD)])
    _loader_vs_transform(report, arrays, tf)  # resampling and jitter read the mapped pixels too


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
