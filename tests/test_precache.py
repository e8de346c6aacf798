"""gpudecode precache: tensor shards checked with tarfile, numpy and torchvision, read
back by the Loader, and bad input named by shard and key."""
from __future__ import annotations

import hashlib
import io
import json
import tarfile

import numpy as np
import pytest
import torch
import torchvision.transforms.v2.functional as F
from PIL import Image

from gpudecode import DecodeError, Loader
from gpudecode import transforms as T
from gpudecode.cli import main
from gpudecode.precache import precache, stored_size
from gpudecode.tensors import encode_npy, npy_layout
from gpudecode.transforms.stored import RECORD, Record, read_record

from tvref import torchvision_apply
from conftest import GPU_BACKENDS, cpu_built_decoder, encode, make_shard

SIZE = 96


def _pil_rgb(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as im:
        return np.array(im.convert("RGB"))


@pytest.fixture(scope="module")
def source(photos, tmp_path_factory):
    """2 shards of real photos (JPEG, PNG, grey JPEG, one small image kept as it is),
    each sample with a label and a JSON field that must be copied as they are."""
    d = tmp_path_factory.mktemp("src")
    samples = []
    for k, (name, img) in enumerate(list(photos.items()) * 2):
        if k == 3:
            img = np.ascontiguousarray(img[:60, :90])  # shorter side under SIZE: stored unchanged
        ext, data = ("png", encode(img, "PNG")) if k % 3 == 1 else ("jpg", encode(img, "JPEG", quality=92))
        if k == 5:
            data = encode(img, "JPEG", mode="L")
        samples.append({"__key__": f"p{k:03d}", ext: data, "cls": str(k % 4).encode(),
                        "json": json.dumps({"name": name}).encode()})
    return [make_shard(d / "src-0.tar", samples[:8]), make_shard(d / "src-1.tar", samples[8:])], samples


@pytest.fixture(scope="module")
def cached(source, tmp_path_factory):
    urls, _ = source
    out = tmp_path_factory.mktemp("cache")
    report = precache(urls, str(out / "train-%06d.tar"), size=SIZE, shard_size=5, num_threads=2)
    return out, report


def _members(path):
    """{key: {ext: (member, bytes)}} in tar order, read by Python's tarfile."""
    out: dict = {}
    with tarfile.open(path) as tf:
        for m in tf.getmembers():
            key, ext = m.name.split(".", 1)
            out.setdefault(key, {})[ext] = (m, tf.extractfile(m).read())
    return out


def test_tensor_shards_match_torchvision_resize(source, cached):
    _, samples = source
    out, report = cached
    assert report.samples == len(samples) and not report.skipped
    seen = {}
    for shard in report.shards:
        for key, fields in _members(shard).items():
            seen[key] = (shard, fields)
    assert list(seen) == [s["__key__"] for s in samples]  # all of them, in source order
    for s in samples:
        shard, fields = seen[s["__key__"]]
        assert fields["cls"][1] == s["cls"] and fields["json"][1] == s["json"]  # copied as they are
        member, data = fields["npy"]
        stored = np.load(io.BytesIO(data))
        src = _pil_rgb(s.get("jpg", s.get("png")))
        h, w = src.shape[:2]
        assert stored.dtype == np.uint8 and stored.shape == (*stored_size(h, w, SIZE), 3)
        # a record of the resize beside each image resized (where masks and boxes follow it from)
        assert set(fields) == {"npy", "cls", "json"} | ({RECORD} if min(h, w) > SIZE else set())
        if min(h, w) > SIZE:
            assert read_record(fields[RECORD][1]) == Record((h, w), (("resize", *stored.shape[:2]),))
        if min(h, w) <= SIZE:
            np.testing.assert_array_equal(stored, src)
        else:
            assert min(stored.shape[:2]) == SIZE
            ref = F.resize(torch.from_numpy(src).permute(2, 0, 1), [SIZE], antialias=True).permute(1, 2, 0).numpy()
            assert np.abs(stored.astype(int) - ref.astype(int)).max() <= 1, s["__key__"]
        # the pixels start 64-byte aligned in the shard file and map in place
        _, _, offset = npy_layout(data)
        assert (member.offset_data + offset) % 64 == 0
        mm = np.memmap(shard, np.uint8, mode="r", offset=member.offset_data + offset, shape=stored.shape)
        np.testing.assert_array_equal(mm, stored)


def test_manifest_counts_and_checksums(cached):
    out, report = cached
    doc = json.loads((out / "train-manifest.json").read_text())
    assert report.manifest == str(out / "train-manifest.json")
    assert doc["samples"] == report.samples == sum(e["samples"] for e in doc["shards"])
    assert doc["pixels"]["shorter_side_at_most"] == SIZE and doc["skipped"] == []
    for entry, path in zip(doc["shards"], report.shards):
        with open(path, "rb") as f:
            data = f.read()
        assert (out / entry["path"]).samefile(path)
        assert entry["sha256"] == hashlib.sha256(data).hexdigest() and entry["bytes"] == len(data)
        assert entry["samples"] == len(_members(path))
    # a source shard's samples go to its own output shards: 8 -> 5 + 3, 6 -> 5 + 1
    assert [e["samples"] for e in doc["shards"]] == [5, 3, 5, 1]
    assert [e["path"] for e in doc["shards"]] == ["train-000000.tar", "train-000001.tar", "train-001000.tar",
                                                  "train-001001.tar"]
    assert [e["source"] for e in doc["shards"]] == [s for s in doc["sources"] for _ in (0, 1)]


def _train_tf():
    return T.Compose([T.RandomResizedCrop(40), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1),
                      T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])


def test_loader_reads_tensor_shards(cached):
    """The Loader on tensor shards equals the transforms API on the stored arrays with
    the loader's params; labels come through."""
    _, report = cached
    stored = {key: np.load(io.BytesIO(f["npy"][1])) for p in report.shards for key, f in _members(p).items()}
    tf = _train_tf()
    loader = Loader(report.shards, batch_size=4, transform=tf, device="cpu", shuffle=False, seed=5)
    loader.set_epoch(2)
    pos = 0
    for images, labels in loader:
        keys = [f"p{pos + i:03d}" for i in range(images.shape[0])]
        imgs = [torch.from_numpy(stored[k]).permute(2, 0, 1).contiguous() for k in keys]
        params = tf.make_params([tuple(i.shape[1:]) for i in imgs], 5, epoch=2, indices=list(range(pos, pos + len(keys))))
        torch.testing.assert_close(images, tf(imgs, params), atol=1e-5, rtol=0)
        # the specification: torchvision's functional ops on the stored arrays, same parameters
        spec = torch.stack([torchvision_apply(i, p, (40, 40), mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
                            for i, p in zip(imgs, params)])
        torch.testing.assert_close(images, spec, atol=2e-3, rtol=0)
        assert labels.tolist() == [int(k[1:]) % 4 for k in keys]
        pos += len(keys)
    assert pos == report.samples


@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_tensor_shards_through_the_other_decoders(cached, backend):
    _, report = cached
    dec = cpu_built_decoder(backend, max_batch_size=4) if backend == "dali" else cpu_built_decoder(backend)
    kw = dict(batch_size=4, transform=_train_tf(), device="cpu", seed=1)
    ref = [(b.keys, b.images.clone()) for b in Loader(report.shards, **kw)]
    got = [(b.keys, b.images.clone()) for b in Loader(report.shards, decoder=dec, **kw)]
    assert [k for k, _ in got] == [k for k, _ in ref]
    for (_, a), (_, b) in zip(got, ref):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


def test_bad_source_image_names_shard_and_key(source, tmp_path):
    urls, samples = source
    bad = [dict(s) for s in samples[:4]]
    bad[2] = {"__key__": bad[2]["__key__"], "jpg": bad[0].get("jpg", b"")[:300] or b"\xff\xd8junk", "cls": b"1"}
    src = make_shard(tmp_path / "bad.tar", bad)
    with pytest.raises(DecodeError) as e:
        precache(src, str(tmp_path / "a" / "t-%06d.tar"), size=SIZE)
    assert "bad.tar" in str(e.value) and "p002" in str(e.value)
    with pytest.warns(RuntimeWarning, match="p002"):
        report = precache(src, str(tmp_path / "b" / "t-%06d.tar"), size=SIZE, on_error="warn")
    assert report.samples == 3 and [s.key for s in report.skipped] == ["p002"]
    with open(report.manifest) as f:
        doc = json.load(f)
    assert doc["samples"] == 3 and doc["skipped"][0]["key"] == "p002" and "bad.tar" in doc["skipped"][0]["shard"]
    assert sorted(_members(report.shards[0])) == ["p000", "p001", "p003"]


@pytest.mark.parametrize("what", ["float32", "four channels", "truncated", "not npy"])
def test_bad_tensor_sample_names_shard_and_key(tmp_path, what):
    good = encode_npy(np.zeros((20, 30, 3), np.uint8))
    buf = io.BytesIO()
    if what == "float32":
        np.save(buf, np.zeros((20, 30, 3), np.float32))
        data = buf.getvalue()
    elif what == "four channels":
        np.save(buf, np.zeros((20, 30, 4), np.uint8))
        data = buf.getvalue()
    elif what == "truncated":
        data = good[:-100]
    else:
        data = b"\x93NUMPY junk"
    samples = [{"__key__": f"t{k}", "npy": good, "cls": b"0"} for k in range(3)]
    samples[1]["npy"] = data
    shard = make_shard(tmp_path / "tensors.tar", samples)
    loader = Loader(shard, batch_size=4, transform=_train_tf(), device="cpu")
    with pytest.raises(DecodeError) as e:
        list(loader)
    assert "tensors.tar" in str(e.value) and "t1" in str(e.value) and "tensor sample" in str(e.value)
    loader = Loader(shard, batch_size=4, transform=_train_tf(), device="cpu", shuffle=False, on_error="skip")
    assert [b.keys for b in loader] == [["t0", "t2"]]
    assert [s.key for s in loader.skipped] == ["t1"]


def test_cli_precache(source, tmp_path, capsys):
    urls, samples = source
    rc = main(["precache", urls[0], str(tmp_path / "c" / "v-%06d.tar"), "--size", "64", "--quiet", "--threads", "1"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "wrote 8 samples from 1 source shard in" in out and "8 samples in 1 tensor shard," in out and "manifest -> " in out
    doc = json.loads((tmp_path / "c" / "v-manifest.json").read_text())
    assert doc["samples"] == 8 and doc["shards"][0]["path"] == "v-000000.tar"
    rc = main(["precache", str(tmp_path / "missing.tar"), str(tmp_path / "d" / "v-%06d.tar"), "--quiet"])
    assert rc == 1
    assert "missing.tar" in capsys.readouterr().err


@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_precache_through_the_gpu_decoders_on_cpu(source, cached, tmp_path, backend):
    """The decoders precache uses with device="cuda" (nvImageCodec's Images in place, DALI's
    packed HWC, torchcodec's CHW tensors), built for the CPU here: the same tensor shards
    as the CPU decoder's. nvImageCodec and DALI match libjpeg-turbo exactly; torchcodec
    does here too, and is allowed 3 levels because it ships its own libjpeg-turbo, whose
    version may differ from the system's."""
    urls, samples = source
    _, ref = cached
    dec = cpu_built_decoder(backend, max_batch_size=8) if backend == "dali" else cpu_built_decoder(backend)
    report = precache(urls, str(tmp_path / "t-%06d.tar"), size=SIZE, shard_size=5, decoder=dec)
    assert report.samples == ref.samples
    want = {k: f["npy"][1] for p in ref.shards for k, f in _members(p).items()}
    got = {k: f["npy"][1] for p in report.shards for k, f in _members(p).items()}
    assert list(got) == list(want)
    for key in want:
        a, b = np.load(io.BytesIO(got[key])), np.load(io.BytesIO(want[key]))
        assert a.shape == b.shape
        tol = 3 if backend == "torchcodec" else 0
        assert np.abs(a.astype(int) - b.astype(int)).max() <= tol, key


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_cuda_without_a_gpu_is_refused(source, tmp_path):
    from gpudecode import BackendUnavailableError

    urls, _ = source
    with pytest.raises(BackendUnavailableError, match="no CUDA device"):
        precache(urls, str(tmp_path / "t-%06d.tar"), device="cuda")
    with pytest.raises(BackendUnavailableError, match="no CUDA device"):
        Loader(urls, batch_size=4, transform=_train_tf(), device="cuda:0")
    with pytest.raises(ValueError, match="device must be"):
        Loader(urls, batch_size=4, transform=_train_tf(), device="gpu")
    assert not (tmp_path / "t-000000.tar").exists()


def test_images_over_max_pixels_are_refused(source, tmp_path):
    urls, _ = source
    with pytest.raises(DecodeError, match="over the limit") as e:
        precache(urls, str(tmp_path / "a" / "t-%06d.tar"), max_pixels=5000)
    assert "src-0.tar" in str(e.value) and "p000" in str(e.value)
    report = precache(urls, str(tmp_path / "b" / "t-%06d.tar"), size=SIZE, max_pixels=5400, on_error="skip")
    assert report.samples == 1  # the 60x90 image fits
    assert [s.key for s in report.skipped] == [f"p{k:03d}" for k in range(14) if k != 3]


def test_disk_full_during_precache_names_the_output_and_leaves_no_partial(source, tmp_path, monkeypatch, capsys):
    import errno
    import os

    from gpudecode import ShardWriteError
    from gpudecode.io.writer import ShardWriter

    class Full(io.FileIO):
        def write(self, b):
            if self.tell() + len(b) > 200_000:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return super().write(b)

    monkeypatch.setattr(ShardWriter, "_open", lambda self, path: Full(path, "wb"))
    urls, _ = source
    out = tmp_path / "out"
    with pytest.raises(ShardWriteError, match="no space left on device") as ei:
        precache(urls, str(out / "t-%06d.tar"), size=SIZE, shard_size=100, num_threads=1)
    assert ei.value.shard == str(out / "t-000000.tar")
    assert not [p for p in os.listdir(out) if p.endswith(".partial")]
    assert main(["precache", urls[0], str(tmp_path / "cli" / "t-%06d.tar"), "--size", "256", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "no space left on device" in err and "t-000000.tar" in err and "Traceback" not in err


def test_long_keys_survive_precache(photos, tmp_path):
    key = "k" * 150 + "/" + "é" * 60
    src = make_shard(tmp_path / "src.tar", [{"__key__": key, "jpg": encode(photos["coffee"][:80, :90]), "cls": b"1"}])
    r = precache(src, str(tmp_path / "out" / "t-%06d.tar"), size=64)
    assert r.samples == 1
    with tarfile.open(r.shards[0]) as tf:
        assert sorted(m.name for m in tf) == sorted([f"{key}.npy", f"{key}.cls", f"{key}.{RECORD}"])


def test_source_key_with_nul_is_refused_by_the_reader(tmp_path):
    import tarcorpus as tc

    from gpudecode import ShardFormatError

    data = tc.pax({b"path": b"a\0b.jpg"}) + tc.member(b"x.jpg", b"123") + tc.END
    src = tmp_path / "nul.tar"
    src.write_bytes(data)
    with pytest.raises(ShardFormatError, match="NUL"):
        precache(str(src), str(tmp_path / "out" / "t-%06d.tar"), size=64)


def test_one_key_rule_for_reading_and_writing(tmp_path, capsys):
    """`./k0000.jpg` (what `tar -C dir .` writes) is sample `k0000` for the reader, for
    webdataset's grouping (the same members together) and for precache, which writes it;
    a key no shard may hold (`a/../k`, a newline) is a ShardFormatError naming shard and
    key, and --keep-going skips it and goes on, as the README says."""
    import io as _io
    import tarfile

    from gpudecode import ShardFormatError, ShardReader
    from gpudecode.cli import main

    img = encode(np.full((20, 24, 3), 90, np.uint8))
    src = tmp_path / "dot.tar"
    with tarfile.open(src, "w") as t:
        for name, data in [("./k0000.jpg", img), ("./k0000.cls", b"1"), ("a/../k0001.jpg", img),
                           ("a/../k0001.cls", b"2"), ("./k0002.jpg", img), ("./k0002.cls", b"3")]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, _io.BytesIO(data))
    assert [s.key for s in ShardReader(str(src))] == ["k0000", "a/../k0001", "k0002"]
    with pytest.raises(ShardFormatError, match="sample key cannot be written to a shard") as e:
        precache(str(src), tmp_path / "out", size=16, num_threads=1)
    assert e.value.key == "a/../k0001" and e.value.shard.endswith("dot.tar")
    with pytest.warns(RuntimeWarning, match="skipped: sample key cannot be written"):
        assert main(["precache", str(src), str(tmp_path / "out2"), "--size", "16", "--keep-going", "--quiet"]) == 0
    assert "a/../k0001" in capsys.readouterr().err  # listed at the end too
    written = []
    for p in sorted((tmp_path / "out2").glob("*.tar")):
        with tarfile.open(p) as t:
            written += [m.name for m in t.getmembers()]
    assert sorted(written) == [f"k0000.{e}" for e in ("cls", RECORD, "npy")] + [f"k0002.{e}" for e in ("cls", RECORD, "npy")]
