"""ShardWriter: atomic shards, keys of any length, refused keys, and write faults (disk
full) that leave nothing partial behind and name the output."""
from __future__ import annotations

import errno
import io
import os
import tarfile

import pytest

from gpudecode import ShardReader, ShardWriteError
from gpudecode.io.writer import ShardWriter

from conftest import seeded_bytes, tar_samples


class FullDisk(io.FileIO):
    """A file that refuses writes past `limit` bytes with ENOSPC, as a full disk does."""

    limit = 4096

    def write(self, b):  # type: ignore[override]
        if self.tell() + len(b) > self.limit:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return super().write(b)


class FullDiskWriter(ShardWriter):
    def _open(self, path):
        return FullDisk(path, "wb")


def test_long_and_unicode_keys_round_trip(tmp_path):
    keys = ["k" * 150, "dir/" * 40 + "x", "é/ü-" + "ç" * 80, "plain"]
    with ShardWriter(str(tmp_path / "s-%03d.tar")) as w:
        for i, k in enumerate(keys):
            w.write({"__key__": k, "jpg": b"x" * (i + 1), "cls": str(i)})
    assert w.shards == [str(tmp_path / "s-000.tar")] and w.counts == [4]
    want = [(k, {"jpg": b"x" * (i + 1), "cls": str(i).encode()}) for i, k in enumerate(keys)]
    assert tar_samples(w.shards[0]) == want  # Python's tarfile, not our reader, says what is there
    got = [(s.key, s.fields["jpg"], s.fields["cls"]) for s in ShardReader(w.shards)]
    assert got == [(k, f["jpg"], f["cls"]) for k, f in want]
    with tarfile.open(w.shards[0]) as tf:  # the reference reads the same names
        assert [m.name for m in tf][::2] == [f"{k}.jpg" for k in keys]


def test_the_bytes_are_pythons_tarfile_pax_bytes_and_the_sha256s_theirs(tmp_path):
    """The writer puts members down itself (one header build, the data unstaged); the file is
    what Python's tarfile writes for the same members in PAX format, byte for byte: long and
    unicode names (pax headers), every size around a block, bytes, bytearray, contiguous and
    strided buffers, shards split by count and by size; sha256s as hashlib's of the file."""
    import hashlib

    import numpy as np

    rng = np.random.default_rng(0)
    samples = []
    for k in range(60):
        key = f"{k:05d}" if k % 7 else ("dir/" * 40 + f"long{k}" if k % 2 else f"ünï/{k}")
        sample: dict = {"__key__": key, "cls": str(k)}
        for ext in ("jpg", "json"):
            data = seeded_bytes(int(rng.choice([0, 1, 511, 512, 513, 1024, 7000, 30000])), k)
            sample[ext] = [data, bytearray(data), memoryview(data), data.hex()][k % 4]
        if k % 5 == 0:
            sample["npy"] = memoryview(np.arange(64, dtype=np.uint8).reshape(8, 8)[:, ::2])  # strided
        if k % 3 == 0:  # parts, written as their concatenation (precache's npy header and pixels)
            sample["raw"] = (b"head", memoryview(seeded_bytes(700, k)), bytearray(b"tail"), "")
        samples.append(sample)
    for maxcount, maxsize in ((10000, 3 << 30), (17, 3 << 30), (10000, 200_000), (1, 1)):
        out = tmp_path / f"{maxcount}-{maxsize}"
        with ShardWriter(str(out / "s-%04d.tar"), maxcount=maxcount, maxsize=maxsize) as w:
            for sample in samples:
                w.write(sample)
        assert sum(w.counts) == len(samples) and len(w.shards) > (1 if maxcount < 10000 or maxsize < 1 << 30 else 0)
        done = 0
        for path, count, sha in zip(w.shards, w.counts, w.sha256s):
            ref = io.BytesIO()
            with tarfile.open(fileobj=ref, mode="w", format=tarfile.PAX_FORMAT) as tf:
                for sample in samples[done:done + count]:
                    for ext, data in sample.items():
                        if ext == "__key__":
                            continue
                        pieces = data if isinstance(data, tuple) else (data,)
                        raw = b"".join(p.encode() if isinstance(p, str) else bytes(p) for p in pieces)
                        info = tarfile.TarInfo(f"{sample['__key__']}.{ext}")
                        info.size, info.mode, info.uname, info.gname = len(raw), 0o444, "gpudecode", "gpudecode"
                        tf.addfile(info, io.BytesIO(raw))
            done += count
            with open(path, "rb") as f:
                assert f.read() == ref.getvalue(), path
            assert sha == hashlib.sha256(ref.getvalue()).hexdigest()


@pytest.mark.parametrize("name", ["k.jpg", "d/e/f.npy", "a" * 96 + ".cls", "a" * 97 + ".cls", "ü/x.jpg",
                                  "tab\there.x", "\udcff.x"])
@pytest.mark.parametrize("size", [0, 1, 511, 512, 8 ** 11 - 1, 8 ** 11])
def test_a_members_header_is_tarfiles_for_any_name_and_size(name, size):
    """The header built from a template (ASCII names of 100 bytes or fewer, sizes ustar
    holds) and the ones tarfile builds (pax: longer or non-ASCII names, 8 GiB or more) are
    what tarfile's TarInfo.tobuf gives in PAX format."""
    from gpudecode.io.writer import _header

    info = tarfile.TarInfo(name)
    info.size, info.mode, info.uname, info.gname = size, 0o444, "gpudecode", "gpudecode"
    assert _header(name, size) == info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


def test_npy_parts_are_encode_npys_bytes_without_a_copy_of_the_pixels():
    import numpy as np

    from gpudecode.tensors import encode_npy, npy_parts

    rng = np.random.default_rng(0)
    for shape in [(1, 1, 3), (375, 500, 3), (7, 13, 3)]:
        img = rng.integers(0, 256, shape, dtype=np.uint8)
        head, pixels = npy_parts(img)
        assert head + bytes(pixels) == encode_npy(img) and np.shares_memory(np.frombuffer(pixels, np.uint8), img)
        strided = img[:, ::2]  # (not contiguous: copied once)
        assert b"".join(bytes(p) for p in npy_parts(strided)) == encode_npy(strided)
    with pytest.raises(ValueError, match="uint8 \\[H, W, 3\\]"):
        npy_parts(np.zeros((4, 4), np.uint8))


@pytest.mark.parametrize("key", ["", "a\0b", "a\nb", "/abs", "a/../b", "a//b", "./a", "a/.", "x.y", "d/x.y", 7])
def test_bad_keys_are_refused(tmp_path, key):
    with ShardWriter(str(tmp_path / "s-%03d.tar")) as w:
        with pytest.raises(ValueError, match="key"):
            w.write({"__key__": key, "jpg": b"x"})
        w.write({"__key__": "ok", "jpg": b"x"})
    assert [s.key for s in ShardReader(w.shards)] == ["ok"]


def test_bad_fields_are_refused(tmp_path):
    with ShardWriter(str(tmp_path / "s-%03d.tar")) as w:
        with pytest.raises(ValueError, match="field"):
            w.write({"__key__": "a", "jpg": 3})
        with pytest.raises(ValueError, match="extension"):
            w.write({"__key__": "a", "j/pg": b"x"})


def test_disk_full_names_the_shard_and_leaves_nothing(tmp_path):
    pattern = str(tmp_path / "out" / "s-%03d.tar")
    w = FullDiskWriter(pattern, maxcount=2)
    with pytest.raises(ShardWriteError, match="no space left on device") as ei:
        with w:
            for i in range(10):
                w.write({"__key__": f"k{i}", "bin": seeded_bytes(1500, "w1", i)})
    assert ei.value.shard == str(tmp_path / "out" / "s-000.tar")
    assert isinstance(ei.value, OSError)
    assert sorted(os.listdir(tmp_path / "out")) == []  # no .partial, no half shard
    assert w.shards == []


def test_disk_full_on_a_later_shard_keeps_the_complete_ones(tmp_path):
    pattern = str(tmp_path / "s-%03d.tar")

    class Later(ShardWriter):
        def _open(self, path):
            return FullDisk(path, "wb") if path.endswith("001.tar.partial") else open(path, "wb")

    w = Later(pattern, maxcount=1)
    with pytest.raises(ShardWriteError) as ei:
        with w:
            for i in range(4):
                w.write({"__key__": f"k{i}", "bin": seeded_bytes(5000, "w2", i)})
    assert ei.value.shard == str(tmp_path / "s-001.tar")
    assert sorted(os.listdir(tmp_path)) == ["s-000.tar"]
    assert [s.key for s in ShardReader(w.shards)] == ["k0"]
    assert tar_samples(w.shards[0]) == [("k0", {"bin": seeded_bytes(5000, "w2", 0)})]  # whole, by tarfile


def test_a_stale_partial_is_replaced(tmp_path):
    stale = tmp_path / "s-000.tar.partial"
    stale.write_bytes(b"left by a killed run")
    with ShardWriter(str(tmp_path / "s-%03d.tar")) as w:
        w.write({"__key__": "a", "cls": "1"})
    assert sorted(os.listdir(tmp_path)) == ["s-000.tar"]


def test_an_exception_in_the_with_block_removes_the_partial(tmp_path):
    with pytest.raises(RuntimeError):
        with ShardWriter(str(tmp_path / "s-%03d.tar"), maxcount=1) as w:
            w.write({"__key__": "a", "cls": "1"})
            w.write({"__key__": "b", "cls": "1"})
            raise RuntimeError("stop")
    assert sorted(os.listdir(tmp_path)) == ["s-000.tar"]


@pytest.mark.parametrize("pattern", ["out-{:06d}.tar", "out-{}.tar", "out-%06d.tar", "x%y/out-{:03d}.tar"])
def test_what_shardwriter_writes_its_pattern_reads_back(tmp_path, pattern):
    """One pattern grammar for writing and reading: `ShardWriter("out-{:06d}.tar")` wrote
    shards that `expand_urls("out-{:06d}.tar")` could not find (issue 37); Python's tarfile
    is the reference for what is in them."""
    import tarfile

    from gpudecode.io.shards import expand_urls
    from gpudecode.io.writer import ShardWriter

    path = str(tmp_path / pattern)
    with ShardWriter(path, maxcount=2) as w:
        for i in range(5):
            w.write({"__key__": f"k{i}", "cls": str(i).encode()})
    found = expand_urls(path)
    assert found == w.shards and len(found) == 3
    keys = []
    for u in found:
        with tarfile.open(u) as t:
            keys += [m.name.split(".")[0] for m in t.getmembers()]
    assert keys == [f"k{i}" for i in range(5)]


@pytest.mark.parametrize("pattern", ["train-%06d.tar", "train-{:06d}.tar", "train-{}.tar", "train-{:d}.tar",
                                     "train-%d.tar"])
def test_the_writer_and_the_reader_read_one_pattern_alike(tmp_path, pattern):
    """One grammar (io/pattern.py): what the writer writes under a pattern, the reader reads
    back by the same pattern, every shard once, in number order."""
    from gpudecode.io.pattern import ShardPattern
    from gpudecode.io.reader import ShardReader
    from gpudecode.io.writer import ShardWriter

    with ShardWriter(str(tmp_path / pattern), maxcount=2) as w:
        for k in range(11):
            w.write({"__key__": f"{k:03d}", "cls": str(k).encode()})
    p = ShardPattern(str(tmp_path / pattern))
    written = p.written()
    assert len(written) == 6 and [p.number(f) for f in written] == list(range(6))
    r = ShardReader(str(tmp_path / pattern))
    assert r.urls == written
    assert [s.key for s in r] == [f"{k:03d}" for k in range(11)]


@pytest.mark.parametrize("pattern", ["train-{:6}.tar", "train-%6d.tar", "train-{:6d}.tar"])
def test_a_field_that_pads_with_spaces_is_refused_by_the_writer(tmp_path, pattern):
    from gpudecode.io.pattern import ShardPattern
    from gpudecode.io.writer import ShardWriter

    with pytest.raises(ValueError, match="pads the shard number with spaces: write it with a leading zero"):
        with ShardWriter(str(tmp_path / pattern), maxcount=2) as w:
            w.write({"__key__": "a", "cls": b"1"})
    assert not list(tmp_path.iterdir())  # nothing written under a name no one means
    assert ShardPattern(pattern).regex.fullmatch("train-000005.tar")  # (as a reader's pattern: 6 digits or more)
