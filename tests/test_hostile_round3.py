"""Issue 35's third hostile pass, a test for each fault it found (each failed on the
commit before its fix): files as they lie that are not what their names say, trees and
list files that would mix labels, archives damaged after a whole sample, arguments that
torchvision refuses or fails on, one image a transform cannot take, and labels past what
a batch transform mixes into. Bad input gets the project's own error naming the file or
shard and key; under on_error="skip" one sample's fault is that sample's alone.

Real photographs (scikit-image's), torchvision's ImageFolder and Python's tarfile are the
references where there is one.
"""
from __future__ import annotations

import io
import os
import tarfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
import torchvision.transforms.v2
from PIL import Image

from gpudecode import DecodeError, LabelError, Loader, ShardReadError, ShardReader, TransformError
from gpudecode import transforms as T

from conftest import encode, make_shard


def _tf(size=24):
    return T.Compose([T.Resize(size), T.CenterCrop(size), T.ToDtype(torch.float32, scale=True)])


def _tree(root, photos, n=6, classes=("cat", "dog")):
    for k in range(n):
        d = root / classes[k % len(classes)]
        d.mkdir(parents=True, exist_ok=True)
        img = np.ascontiguousarray(list(photos.values())[k % len(photos)][:80, :100])
        Image.fromarray(img).save(d / f"img{k}.jpg", quality=90)
    return root


# ---------------------------------------------------------------------------------------
# 3, 8: a file that is not a regular image file is its own sample's fault, at once


def test_a_device_a_huge_sparse_file_and_a_fifo_are_named_and_skipped_alone(tmp_path, photos):
    root = _tree(tmp_path / "t", photos, n=10)
    (root / "cat" / "zero.jpg").symlink_to("/dev/zero")  # endless bytes
    with open(root / "dog" / "huge.jpg", "wb") as f:  # 16 GB, sparse: nothing on disk
        f.truncate(16 << 30)
    os.mkfifo(root / "dog" / "pipe.jpg")  # open() of it for reading waits for a writer
    ld = Loader(str(root), batch_size=4, transform=_tf(), device="cpu", on_error="skip", shuffle=False)
    t = time.monotonic()
    keys = [k for b in ld for k in b.keys]
    assert time.monotonic() - t < 60
    assert sorted(keys) == sorted(f"{c}/img{k}" for k, c in zip(range(10), ["cat", "dog"] * 5))
    why = {s.key: s.reason for s in ld.skipped}
    assert set(why) == {"cat/zero", "dog/huge", "dog/pipe"}
    assert "character device" in why["cat/zero"] and "FIFO" in why["dog/pipe"]
    assert "17,179,869,184 bytes" in why["dog/huge"]
    assert all(s.shard.endswith((".jpg")) for s in ld.skipped)  # the file, not the folder
    with pytest.raises(ShardReadError, match="zero.jpg.*character device|character device.*zero.jpg"):
        list(Loader(str(root), batch_size=4, transform=_tf(), device="cpu", shuffle=False))


def test_close_from_another_thread_returns_while_a_fifo_is_in_the_tree(tmp_path, photos):
    root = _tree(tmp_path / "t", photos, n=4)
    for k in range(3):
        os.mkfifo(root / "cat" / f"p{k}.jpg")
    ld = Loader(str(root), batch_size=2, transform=_tf(), device="cpu", on_error="skip", shuffle=False)
    it = iter(ld)
    next(it)
    closer = threading.Thread(target=ld.close)
    t = time.monotonic()
    closer.start()
    closer.join(15)
    assert not closer.is_alive() and time.monotonic() - t < 15


# ---------------------------------------------------------------------------------------
# 4, 5: labels that would mean two things, or that Python's int() reads leniently


def test_two_trees_with_different_classes_are_refused(tmp_path, photos):
    a = _tree(tmp_path / "a", photos, classes=("cat", "dog"))
    b = _tree(tmp_path / "b", photos, classes=("ant", "bee", "cow"))
    with pytest.raises(ValueError, match=r"different classes.*'cat'.*'ant'"):
        Loader([str(a), str(b)], batch_size=2, transform=_tf(), device="cpu")
    c = _tree(tmp_path / "c", photos, classes=("cat", "dog"))  # the same classes: read as one set
    ld = Loader([str(a), str(c)], batch_size=2, transform=_tf(), device="cpu")
    assert ld.total_samples == 12 and ld.reader.classes == ["cat", "dog"]


@pytest.mark.parametrize("label", ["1_0", "\uff17", "\u0663", "1.0", "0x1", " "])
def test_a_list_files_labels_are_read_as_a_cls_member_is(tmp_path, photos, label):
    root = _tree(tmp_path / "t", photos, n=2)
    lst = tmp_path / "list.txt"
    lst.write_text(f"{root}/cat/img0.jpg 1\n{root}/dog/img1.jpg {label}\n", encoding="utf-8")
    if label.strip():
        with pytest.raises(LabelError, match=r"line 2: .*integer label") as e:
            ShardReader(str(lst))
        assert e.value.shard == str(lst)
    # the same text in a .cls member is refused too (the reference)
    url = make_shard(tmp_path / "s.tar", [{"__key__": "k", "jpg": encode(np.zeros((8, 8, 3), np.uint8)),
                                           "cls": label.encode()}])
    with pytest.raises(LabelError):
        list(Loader(url, batch_size=1, transform=_tf(8), device="cpu"))


# ---------------------------------------------------------------------------------------
# 6: torchvision's image extensions are samples; shard and precache agree with the Loader


def test_torchvision_extensions_are_samples_and_shard_packs_what_imagefolder_takes(tmp_path, photos, capsys):
    from gpudecode.cli import main

    root = tmp_path / "t" / "c0"
    root.mkdir(parents=True)
    img = np.ascontiguousarray(photos["coffee"][:60, :80])
    for ext, fmt in (("jpg", "JPEG"), ("bmp", "BMP"), ("tif", "TIFF"), ("tiff", "TIFF"), ("ppm", "PPM"),
                     ("webp", "WEBP")):
        Image.fromarray(img).save(root / f"a_{ext}.{ext}", fmt)
    Image.fromarray(img[..., 0]).save(root / "a_pgm.pgm", "PPM")
    Image.fromarray(img).save(root / "a_gif.gif", "GIF")  # not an ImageFolder sample
    (root / "dangling.jpg").symlink_to(tmp_path / "nowhere.jpg")
    os.mkfifo(root / "fifo.jpg")
    tv = torchvision.datasets.ImageFolder(str(tmp_path / "t"), allow_empty=True)
    tv_files = sorted(os.path.basename(p) for p, _ in tv.samples)
    assert "a_gif.gif" not in tv_files and "a_bmp.bmp" in tv_files
    ld = Loader(str(tmp_path / "t"), batch_size=16, transform=_tf(), device="cpu", on_error="skip", shuffle=False)
    got = [k for b in ld for k in b.keys]
    images = {f.rsplit(".", 1)[0] for f in tv_files if f.startswith("a_")}
    assert sorted(got) == sorted(f"c0/{k}" for k in images)  # every image ImageFolder lists, decoded
    assert {s.key for s in ld.skipped} == {"c0/dangling", "c0/fifo"}
    out = tmp_path / "shards"
    capsys.readouterr()
    assert main(["shard", str(tmp_path / "t"), str(out / "s-%06d.tar"), "--quiet"]) == 0
    err = capsys.readouterr().err
    with tarfile.open(out / "s-000000.tar") as t:
        packed = [m for m in t.getnames() if m.endswith(".cls")]
    assert len(packed) == len(images)
    for name in ("a_gif.gif", "dangling.jpg", "fifo.jpg"):
        assert name in err, name
    again = Loader(str(out), batch_size=16, transform=_tf(), device="cpu", shuffle=False)
    assert sum(len(b.keys) for b in again) == len(images)


def test_precache_of_a_list_file_that_climbs_out_of_its_folder(tmp_path, photos, capsys):
    from gpudecode.cli import main

    imgs = _tree(tmp_path / "imgs", photos, n=4)
    (tmp_path / "lists").mkdir()
    lst = tmp_path / "lists" / "train.txt"
    lst.write_text("".join(f"../imgs/{c}/img{k}.jpg {k % 2}\n" for k, c in zip(range(4), ["cat", "dog"] * 2)))
    ld = Loader(str(lst), batch_size=4, transform=_tf(), device="cpu", shuffle=False)
    keys = [k for b in ld for k in b.keys]
    assert len(keys) == 4 and not any(".." in k for k in keys)
    assert main(["precache", str(lst), str(tmp_path / "pc"), "--size", "32", "--quiet"]) == 0
    pc = Loader(str(tmp_path / "pc"), batch_size=4, transform=T.Compose([T.CenterCrop(32)]), device="cpu",
                shuffle=False)
    assert sorted(k for b in pc for k in b.keys) == sorted(keys)
    del imgs


# ---------------------------------------------------------------------------------------
# 7: the whole sample before a damaged GNU long-name header


def _long_named_tar(n: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
        for i in range(n):
            for ext, data in (("jpg", encode(np.full((8, 8, 3), 10 * i, np.uint8))), ("cls", b"1")):
                ti = tarfile.TarInfo(("d" * 110) + f"/k{i}.{ext}")
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def test_the_whole_sample_before_a_damaged_long_name_header_is_delivered(tmp_path):
    raw = bytearray(_long_named_tar(10))
    headers = [pos for pos in range(0, len(raw), 512) if raw[pos + 156:pos + 157] == b"L"
               and raw[pos:pos + 13] == b"././@LongLink"]
    target = headers[18]  # the long-name header of k9's first member
    # its size field damaged (its checksum fixed up: the header is a header, its size is not)
    raw[target + 124:target + 136] = b"77777777777\0"
    raw[target + 148:target + 156] = b" " * 8
    raw[target + 148:target + 155] = f"{sum(raw[target:target + 512]):06o}\0".encode()
    url = tmp_path / "ln.tar"
    url.write_bytes(bytes(raw))
    with pytest.raises(tarfile.TarError):  # (Python's tarfile refuses the damaged header too)
        with tarfile.open(url) as t:
            t.getmembers()
    r = ShardReader([str(url)], on_error="skip")
    keys = [s.key.rsplit("/", 1)[1] for s in r]
    assert keys == [f"k{i}" for i in range(9)]  # k8 is whole: delivered
    assert len(r.skipped) == 1 and "after sample" in r.skipped[0].reason and r.skipped[0].key is None


# ---------------------------------------------------------------------------------------
# 9: a file name that is not UTF-8


def test_a_file_name_that_is_not_utf8_survives_a_checkpoint(tmp_path, photos):
    root = _tree(tmp_path / "t", photos, n=4)
    os.rename(root / "cat" / "img0.jpg", os.path.join(os.fsencode(root / "cat"), b"caf\xe9.jpg"))
    ld = Loader(str(root), batch_size=2, transform=_tf(), device="cpu", shuffle=False)
    it = iter(ld)
    first = next(it)
    state = ld.state_dict()  # used to raise UnicodeEncodeError
    it.close()
    again = Loader(str(root), batch_size=2, transform=_tf(), device="cpu", shuffle=False)
    again.load_state_dict(state)
    rest = [k for b in again for k in b.keys]
    assert sorted(first.keys + rest) == sorted(k for b in Loader(str(root), batch_size=2, transform=_tf(),
                                                                device="cpu", shuffle=False) for k in b.keys)


# ---------------------------------------------------------------------------------------
# 10: arguments refused when the transform is made, not at the first batch


@pytest.mark.parametrize("make", [
    lambda: T.RandAugment(magnitude=31),
    lambda: T.RandAugment(num_magnitude_bins=1),
    lambda: T.TrivialAugmentWide(num_magnitude_bins=1),
    lambda: T.RandomErasing(ratio=(0, 3.3)),
    lambda: T.Resize(64, max_size=32),
    lambda: T.Compose.from_torchvision(torchvision.transforms.v2.RandAugment(magnitude=31)),
    lambda: T.Compose.from_torchvision(torchvision.transforms.v2.RandomErasing(ratio=(0.0, 3.3))),
], ids=["randaugment-31", "randaugment-1-bin", "trivial-1-bin", "erasing-ratio-0", "resize-max-size",
        "tv-randaugment-31", "tv-erasing-ratio-0"])
def test_arguments_torchvision_fails_on_are_refused_at_construction(make):
    with pytest.raises(ValueError, match="magnitude|ratio|max_size"):
        make()


def test_torchvision_itself_fails_on_those_arguments_at_the_first_image():
    """The reference: torchvision takes them and fails (or, for Resize, refuses) when an
    image comes; gpudecode says so when the transform is made."""
    import torchvision.transforms.v2 as v2

    img = torch.zeros(3, 40, 40, dtype=torch.uint8)
    with pytest.raises((IndexError, ValueError, RuntimeError)):
        for _ in range(20):
            v2.RandAugment(magnitude=31)(img)
    with pytest.raises(ValueError, match="max_size"):
        v2.Resize(64, max_size=32)(img)


# ---------------------------------------------------------------------------------------
# 11, 12: one image the transform cannot take; labels past what MixUp mixes into


def _shard(tmp_path, photos, sizes, labels=None):
    samples = []
    for k, (h, w) in enumerate(sizes):
        img = np.ascontiguousarray(photos["astronaut"][k:k + h, k:k + w])
        samples.append({"__key__": f"k{k}", "jpg": encode(img), "cls": str((labels or [1] * len(sizes))[k]).encode()})
    return make_shard(tmp_path / "s.tar", samples)


def test_an_image_smaller_than_a_random_crop_is_that_samples_error(tmp_path, photos):
    url = _shard(tmp_path, photos, [(60, 60), (20, 20), (50, 70), (40, 40)])
    tf = T.Compose([T.RandomCrop(32), T.ToDtype(torch.float32, scale=True)])
    ld = Loader(url, batch_size=4, transform=tf, device="cpu", on_error="skip", shuffle=False)
    got = [b.keys for b in ld]
    assert got == [["k0", "k2", "k3"]]
    assert [(s.key, s.error) for s in ld.skipped] == [("k1", "DecodeError")]
    assert "smaller than the crop" in ld.skipped[0].reason
    with pytest.raises(DecodeError, match="k1") as e:
        list(Loader(url, batch_size=4, transform=tf, device="cpu", shuffle=False))
    assert e.value.key == "k1"


def test_mixup_and_the_loader_must_agree_on_the_classes(tmp_path, photos):
    url = _shard(tmp_path, photos, [(40, 40)] * 4, labels=[0, 1, 7, 2])
    tf = T.Compose([T.CenterCrop(32), T.ToDtype(torch.float32, scale=True)])
    with pytest.raises(TransformError, match="disagree on the number of classes"):
        Loader(url, batch_size=4, transform=tf, device="cpu", num_classes=10, batch_transform=T.MixUp(num_classes=5))
    with pytest.raises(TransformError, match="disagree"):
        Loader(url, batch_size=4, transform=tf, device="cpu",
               batch_transform=T.RandomChoice([T.MixUp(num_classes=5), T.CutMix(num_classes=6)]))
    with pytest.raises(LabelError) as e:  # label 7 of 5 classes: named, not torch's one_hot error
        list(Loader(url, batch_size=4, transform=tf, device="cpu", batch_transform=T.MixUp(num_classes=5)))
    assert e.value.key == "k2"
    ld = Loader(url, batch_size=4, transform=tf, device="cpu", batch_transform=T.MixUp(num_classes=5),
                on_error="skip", shuffle=False)
    assert [b.labels.shape for b in ld] == [(3, 5)] and [s.key for s in ld.skipped] == ["k2"]


# ---------------------------------------------------------------------------------------
# the unclear kinds, decided


def test_a_list_file_with_a_byte_order_mark_reads_its_first_image(tmp_path, photos):
    root = _tree(tmp_path / "t", photos, n=2)
    lst = tmp_path / "list.txt"
    lst.write_bytes(b"\xef\xbb\xbf" + f"{root}/cat/img0.jpg 0\n{root}/dog/img1.jpg 1\n".encode())
    r = ShardReader(str(lst))
    assert sorted(s.key.rsplit("/", 1)[-1] for s in r) == ["img0", "img1"]


def test_the_same_data_named_twice_is_refused_however_it_is_named(tmp_path, photos):
    root = _tree(tmp_path / "t", photos, n=2)
    (tmp_path / "alias").symlink_to(root)
    with pytest.raises(ValueError, match="same tree"):
        ShardReader([str(root), str(tmp_path / "alias")])
    url = make_shard(tmp_path / "s-000000.tar", [{"__key__": "k", "jpg": b"x", "cls": b"1"}])
    make_shard(tmp_path / "s-000001.tar", [{"__key__": "k2", "jpg": b"x", "cls": b"1"}])
    with pytest.raises(ValueError, match="is named by .* and by .* twice an epoch"):  # overlapping patterns
        ShardReader([str(tmp_path / "s-*.tar"), str(tmp_path / "s-%06d.tar")])
    (tmp_path / "link.tar").symlink_to(url)
    with pytest.raises(ValueError, match="twice an epoch"):  # a shard and a link to it
        ShardReader([url, str(tmp_path / "link.tar")])


def test_a_symlink_loop_in_a_tree_lists_each_file_once_and_says_so(tmp_path, photos):
    root = _tree(tmp_path / "t", photos, n=4)
    (root / "cat" / "again").symlink_to(root / "cat")  # cat/again/again/... for ever
    with pytest.warns(RuntimeWarning, match="read once"):
        r = ShardReader(str(root))
    keys = [s.key for s in r]
    assert sorted(keys) == ["cat/img0", "cat/img2", "dog/img1", "dog/img3"]


def test_gpudecode_shard_packs_what_imagefolder_lists_through_links_and_says_of_a_loop(tmp_path, photos):
    """`gpudecode shard` (folder.shard_folder) takes the files torchvision's ImageFolder
    takes: images in a folder a class reaches through a symbolic link too (it packed only
    the class folder's own tree before), in nested folders, and a class folder that is a
    link; the shards read back by tarfile hold each file's bytes once, with its label. A
    loop is packed once and said, as the Loader's tree reader says it."""
    import json

    from torchvision.datasets import ImageFolder

    from gpudecode.folder import shard_folder

    root = _tree(tmp_path / "t", photos, n=6)
    elsewhere = _tree(tmp_path / "elsewhere", photos, n=4, classes=("more", "deeper/down"))
    (root / "cat" / "linked").symlink_to(elsewhere)  # cat/linked/more/img0.jpg, cat/linked/deeper/down/img1.jpg
    (root / "cat" / "a").mkdir()
    (root / "cat" / "a" / "z.png").write_bytes(encode(np.zeros((5, 7, 3), np.uint8), "png"))
    (root / "bird").symlink_to(elsewhere / "more")  # a class folder that is a link
    want = sorted((os.path.relpath(p, root), label) for p, label in ImageFolder(str(root)).samples)
    assert len(want) == 13 and any("linked" in p for p, _ in want)

    def packed(out):
        got = []
        for shard in sorted(out.glob("*.tar")):
            with tarfile.open(shard) as tf:
                members = {m.name: tf.extractfile(m).read() for m in tf if m.isfile()}
            for name, data in members.items():
                if name.endswith(".json"):
                    meta = json.loads(data)
                    image = [v for k, v in members.items() if k.startswith(name[:-5] + ".") and
                             not k.endswith((".json", ".cls"))]
                    assert image == [(root / meta["path"]).read_bytes()], meta
                    assert int(members[name[:-5] + ".cls"]) == meta["label"]
                    got.append((meta["path"], meta["label"]))
        return sorted(got)

    report = shard_folder(root, str(tmp_path / "out" / "t-%06d.tar"), shard_size=4, progress=False)
    assert report.written == 13 and report.rejected == [] and report.classes == {"bird": 0, "cat": 1, "dog": 2}
    assert packed(tmp_path / "out") == want
    (root / "cat" / "a" / "again").symlink_to(root / "cat")  # cat/a/again/a/again/... for ever
    with pytest.warns(RuntimeWarning, match=r"1 folder\(s\) reached again through symbolic links .* packed once"):
        report = shard_folder(root, str(tmp_path / "out2" / "t-%06d.tar"), progress=False)
    assert packed(tmp_path / "out2") == want


def _many_scans(data: bytes, extra: int) -> bytes:
    """A progressive JPEG whose last scan is repeated `extra` times (a scan count only a
    hostile file has; the probe refuses it before anything decodes it)."""
    starts = [i for i in range(len(data) - 1) if data[i] == 0xFF and data[i + 1] == 0xDA]
    last = data[starts[-1]:len(data) - 2]
    return data[:len(data) - 2] + last * extra + b"\xff\xd9"


def test_a_progressive_jpeg_of_thousands_of_scans_is_refused(tmp_path, photos):
    """libjpeg-turbo's documented denial of service (a 1.2 MB file of 2,090 scans took 17 s
    to decode): more than 256 scans is refused at the probe, by name; ordinary progressive
    JPEGs (about 10 scans) are read."""
    from gpudecode._probe import JPEG_SCANS, probe_columns
    from gpudecode.io.reader import Sample

    img = np.ascontiguousarray(photos["chelsea"][:64, :64])
    normal = encode(img, "JPEG", progressive=True)
    chunk = [Sample("ok", {"jpg": normal}, "s.tar", 0), Sample("many", {"jpg": _many_scans(normal, 300)}, "s.tar", 1),
             Sample("some", {"jpg": _many_scans(normal, 100)}, "s.tar", 2)]
    failed: list = []
    kept = probe_columns(chunk, ["jpg"], 0, failed.append)
    assert [s.key for s in kept.samples] == ["ok", "some"]
    assert [e.key for e in failed] == ["many"] and str(failed[0]).startswith(JPEG_SCANS)


def test_a_cache_folder_others_can_write_is_not_loaded_from(tmp_path, monkeypatch):
    """Compiled kernels are pickles numba loads: a cache folder its group or other users may
    write to (or another user's) is not used, with a warning; gpudecode makes its own 0700;
    a shard cache there is refused."""
    import stat

    from gpudecode import _cache
    from gpudecode.io.cache import ShardCache

    mine = tmp_path / "mine"
    monkeypatch.setenv("GPUDECODE_CACHE_DIR", str(mine))
    _cache._private.cache_clear()
    assert _cache.cache_dir() == str(mine) and stat.S_IMODE(os.stat(mine).st_mode) == 0o700
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    monkeypatch.setenv("GPUDECODE_CACHE_DIR", str(shared))
    _cache._private.cache_clear()
    with pytest.warns(RuntimeWarning, match="not used: its group or other users may write to it"):
        assert _cache.cache_dir() is None
    with pytest.raises(ValueError, match="not safe to keep shard copies"):
        ShardCache(shared)
    _cache._private.cache_clear()


def test_a_lossless_jpeg_is_read_as_imagefolder_reads_it(tmp_path):
    """SOF3 (lossless JPEG, tests/data/lossless-sof3.jpg: a crop of scikit-image's coffee,
    written by imagecodecs' libjpeg-turbo 3): this build's libjpeg-turbo does not decode it,
    Pillow (ImageFolder's reader) does: the probe hands it to Pillow, and the pixels are
    Pillow's, exactly (lossless)."""
    from skimage import data

    raw = (Path(__file__).parent / "data" / "lossless-sof3.jpg").read_bytes()
    with Image.open(io.BytesIO(raw)) as im:
        ref = np.asarray(im.convert("RGB"))
    np.testing.assert_array_equal(ref, data.coffee()[100:148, 200:264])  # lossless: the photo's own pixels
    (tmp_path / "t" / "c").mkdir(parents=True)
    (tmp_path / "t" / "c" / "a.jpg").write_bytes(raw)
    tf = T.Compose([T.CenterCrop((48, 64)), T.ToDtype(torch.uint8)])
    got = next(iter(Loader(str(tmp_path / "t"), batch_size=1, transform=tf, device="cpu"))).images[0]
    np.testing.assert_array_equal(got.permute(1, 2, 0).numpy(), ref)
