"""Recycled memory for the members a reader reads (csrc/blocks.cpp: a BlockPool's blocks,
lent out as read-only memoryviews, back to the pool when the last view is gone), against
os.pread and Python's tarfile as the references."""
from __future__ import annotations

import gc
import os
import pickle

import numpy as np
import pytest

from gpudecode import _native
from gpudecode.io.reader import ShardReader, iter_shard

from conftest import make_shard, seeded_bytes, tar_samples


def _address(view) -> int:
    return np.frombuffer(view, np.uint8).ctypes.data


def test_pooled_ranges_are_the_file_bytes_read_only(tmp_path):
    data = seeded_bytes(300_000, "pool")
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    offsets = np.array([0, 7, 5_000, 100_000, 299_990], np.int64)
    sizes = np.array([3, 150_000, 0, 1, 10], np.int64)
    pool = _native.BlockPool(1 << 20)
    fd = os.open(path, os.O_RDONLY)
    try:
        read, got, err = _native.read_ranges(fd, offsets, sizes, pool, np.array([1, 1, 1, 0, 1], np.uint8))
        assert err is None and got == 0 and len(read) == 5
        for (o, n), r in zip(zip(offsets.tolist(), sizes.tolist()), read):
            assert bytes(r) == os.pread(fd, n, o) == data[o:o + n]
        assert [type(r) for r in read] == [memoryview, memoryview, memoryview, bytes, memoryview]
        assert all(r.readonly for r in read if isinstance(r, memoryview))
        with pytest.raises(ValueError, match="read-only"):
            np.frombuffer(read[1], np.uint8)[0] = 1  # (numpy's view of it is read-only too)
        # a range past the end: the ranges before it, and how much of it there was
        short, got, err = _native.read_ranges(fd, np.array([0, 299_000], np.int64), np.array([10, 2_000], np.int64),
                                              pool, np.array([1, 1], np.uint8))
        assert [bytes(r) for r in short] == [data[:10]] and got == 1_000 and err is None
    finally:
        os.close(fd)
    with pytest.raises(TypeError):
        _native.PooledBlock()  # only a read makes one


def test_blocks_come_back_and_are_lent_again(tmp_path):
    """A block goes back to the pool when its last view is gone (a slice of a view keeps
    it), the next read of a member of its size class gets it again, and the pool keeps no
    more free bytes than its limit."""
    path = tmp_path / "f.bin"
    path.write_bytes(seeded_bytes(1 << 20, "again"))
    cls = _native.BlockPool.size_class(100_000)
    assert cls >= 100_000 and cls % 4096 == 0 and cls < 100_000 * 1.2
    pool = _native.BlockPool(2 * cls)
    fd = os.open(path, os.O_RDONLY)
    try:
        def read(n: int, k: int):
            got, _, _ = _native.read_ranges(fd, np.arange(k, dtype=np.int64) * 1000, np.full(k, n, np.int64), pool,
                                            np.ones(k, np.uint8))
            return got

        views = read(100_000, 3)
        where = {_address(v) for v in views}
        assert pool.free_bytes == 0
        part = views[0][10:20]
        del views
        gc.collect()
        assert pool.free_bytes == 2 * cls  # (the third block over the limit: freed)
        again = read(99_000, 2)  # the same size class
        assert {_address(v) for v in again} <= where and pool.free_bytes == 0
        assert bytes(part) == (path.read_bytes()[10:20])  # the block kept by its slice holds its bytes
        del part, again
        gc.collect()
        assert pool.free_bytes == 2 * cls
    finally:
        os.close(fd)
    none = _native.BlockPool(0)  # a pool that keeps nothing: every block freed when done
    fd = os.open(path, os.O_RDONLY)
    try:
        got, _, _ = _native.read_ranges(fd, np.array([0], np.int64), np.array([5000], np.int64), none,
                                        np.ones(1, np.uint8))
        del got
        assert none.free_bytes == 0
    finally:
        os.close(fd)


def test_reader_pools_its_images_and_nothing_is_altered(tmp_path, photos):
    """A reader with pool_extensions gives those fields as read-only memoryviews over its
    recycled blocks, the others as bytes, every one as tarfile reads it; samples kept from
    an epoch keep their bytes while later epochs reuse the pool; a pickled reader (as sent
    to DataLoader workers) gets a pool of its own."""
    from conftest import encode

    imgs = list(photos.values())
    # (images over 4 KiB: a smaller member comes with the index's read of its header, as bytes)
    noise = [np.random.default_rng(i).integers(0, 256, (96 + i, 128, 3), dtype=np.uint8) for i in range(40)]
    samples = [{"__key__": f"s{i:03d}", "jpg": encode(imgs[i % len(imgs)][i:] if i % 2
                                                      else noise[i]),
                "cls": str(i).encode(), "json": b'{"i": %d}' % i} for i in range(40)]
    assert min(len(s["jpg"]) for s in samples) > 4096
    url = make_shard(tmp_path / "a.tar", samples)
    want = dict(tar_samples(url))
    rd = ShardReader([url], shuffle=True, seed=3, pool_extensions=["jpg"], pool_limit=1 << 20)
    kept = list(rd)
    for epoch in range(3):
        rd.set_epoch(epoch)
        for s in rd:
            assert isinstance(s.fields["jpg"], memoryview) and s.fields["jpg"].readonly
            assert isinstance(s.fields["cls"], bytes) and isinstance(s.fields["json"], bytes)
            assert {e: bytes(d) for e, d in s.fields.items()} == want[s.key]
    assert sorted(s.key for s in kept) == sorted(want)
    for s in kept:  # read an epoch before the others: unchanged
        assert {e: bytes(d) for e, d in s.fields.items()} == want[s.key]
    assert rd.segments.pooled is not None and 0 < rd.segments.pooled.pool.free_bytes <= 1 << 20
    rd.close()  # (its free blocks freed)
    assert rd.segments.pooled.pool.free_bytes == 0
    other = pickle.loads(pickle.dumps(rd))
    assert other.segments.pooled is not None and other.segments.pooled.pool is not rd.segments.pooled.pool
    assert sorted(s.key for s in other) == sorted(want)
    # iter_shard without a pool: bytes, the same bytes
    plain = {s.key: s.fields for s in iter_shard(url)}
    assert all(isinstance(f["jpg"], bytes) for f in plain.values()) and plain == want


def test_a_forked_child_reads_with_the_pool(tmp_path):
    """The pool has no lock of its own (the GIL orders its calls): a child forked while
    blocks are lent out gives them back and reads again."""
    samples = [{"__key__": f"s{i:02d}", "jpg": seeded_bytes(6000 + 100 * i, "fork", i), "cls": b"1"}
               for i in range(12)]
    url = make_shard(tmp_path / "f.tar", samples)
    want = dict(tar_samples(url))
    rd = ShardReader([url], pool_extensions=["jpg"])
    kept = list(rd)
    assert all(isinstance(s.fields["jpg"], memoryview) for s in kept)
    pid = os.fork()
    if pid == 0:  # (the child: its exit code says what it found)
        code = 3
        try:
            ok = all({e: bytes(d) for e, d in s.fields.items()} == want[s.key] for s in kept)
            del kept[:]
            gc.collect()
            again = {s.key: {e: bytes(d) for e, d in s.fields.items()} for s in rd}
            code = 0 if ok and again == want else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert {s.key: {e: bytes(d) for e, d in s.fields.items()} for s in kept} == want
