"""One tar semantics: every driver (memory, file read with pread, stream, gzip stream,
and the reader's own paths over files, .tar.gz and HTTP) gives exactly the members and
the fault the corpus (tests/tarcorpus.py) expects, with the same message and offset.
Archives written by Python's tarfile and by webdataset are read as tarfile reads them."""
from __future__ import annotations

import gzip
import io
import os
import tarfile
from pathlib import Path

import pytest

from gpudecode import ShardFormatError, ShardReadError
from gpudecode.io.reader import iter_members
from gpudecode.io.tario import TarFault, index_buffer, index_file, iter_stream

import tarcorpus
from conftest import make_shard, seeded_bytes

CASES = tarcorpus.cases()


def _from_index(data: bytes, members, fault):
    return [(m.name, data[m.offset:m.offset + m.size] if m.type == "0" else b"", m.type) for m in members], fault


def run_memory(data: bytes):
    return _from_index(data, *index_buffer(data))


def run_file(data: bytes, tmp_path):
    path = tmp_path / "shard.tar"
    path.write_bytes(data)
    with open(path, "rb") as f:
        members, fault, _ = index_file(f.fileno(), len(data))
        return [(m.name, os.pread(f.fileno(), m.size, m.offset) if m.type == "0" else b"", m.type)
                for m in members], fault


def run_stream(stream):
    members, fault = [], None
    for item in iter_stream(stream):
        if isinstance(item, TarFault):
            fault = item
        else:
            m, d = item
            members.append((m.name, d if d is not None else b"", m.type))
    return members, fault


def _check(case, got, where):
    members, fault = got
    assert members == case.members, where
    if case.fault is None:
        assert fault is None, f"{where}: {fault}"
    else:
        text, offset, member = case.fault
        assert fault is not None, where
        assert text in fault.message and fault.offset == offset and fault.member == member, (where, fault)
        assert not fault.io, where
    return fault


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_driver_agrees_with_the_corpus(case, tmp_path):
    results = {
        "memory": run_memory(case.data),
        "file": run_file(case.data, tmp_path),
        "stream": run_stream(io.BytesIO(case.data)),
        "gzip": run_stream(gzip.GzipFile(fileobj=io.BytesIO(gzip.compress(case.data)))),
    }
    faults = {name: _check(case, got, name) for name, got in results.items()}
    messages = {(f.message, f.offset, f.member) if f else None for f in faults.values()}
    assert len(messages) == 1, faults  # the same words, the same offset, from every driver


@pytest.mark.parametrize("case", [c for c in CASES if "valid" in c.tags], ids=lambda c: c.name)
def test_valid_cases_read_as_tarfile_reads_them(case):
    """Python's tarfile as the reference; where the corpus records that tarfile names a
    member otherwise (three rules, documented in gpudecode.io.tario), exactly that differs."""
    theirs = tarcorpus.tarfile_members(case.data)
    if case.tarfile_names is None:
        assert theirs == case.members
    else:
        assert [n for n, _, _ in theirs] == case.tarfile_names
        assert [(d, t) for _, d, t in theirs] == [(d, t) for _, d, t in case.members]


def _reader_view(url, **kw):
    members, fault = [], None
    try:
        for item in iter_members(url, **kw):
            if isinstance(item, TarFault):
                fault = item
            else:
                m, d, _ = item
                members.append((m.name, d if d is not None else b"", m.type))
    except (ShardFormatError, ShardReadError) as e:
        return members, e
    return members, fault


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_reader_paths_agree(case, tmp_path, http_server):
    """The reader's own ways into a shard: a local file (pread), a local .tar.gz and
    HTTP (streams), plain and gzipped."""
    plain = tmp_path / "s.tar"
    plain.write_bytes(case.data)
    gz = tmp_path / "s.tar.gz"
    gz.write_bytes(gzip.compress(case.data))
    http_server.files["/s.tar"] = case.data
    http_server.files["/s.tar.gz"] = gzip.compress(case.data)
    for where, url in [("file", str(plain)), ("file gz", str(gz)), ("http", http_server.url("/s.tar")),
                       ("http gz", http_server.url("/s.tar.gz"))]:
        _check(case, _reader_view(url), where)


def _tarfile_archive(fmt, names, tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tf:
        for i, n in enumerate(names):
            data = seeded_bytes(10 + 97 * i, "member", i)
            info = tarfile.TarInfo(n)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        d = tarfile.TarInfo("somedir")
        d.type = tarfile.DIRTYPE
        tf.addfile(d)
    return buf.getvalue()


NAMES = ["a.jpg", "a.cls", "dir/b.jpg", "dir/b.cls", "é-ü/ç.jpg", "x" * 99 + ".jpg", "y/" * 70 + "z.jpg",
         "q" * 300 + ".png"]


@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT])
def test_tarfile_archives(fmt, tmp_path):
    names = [n for n in NAMES if fmt != tarfile.USTAR_FORMAT or len(n.encode()) < 100]
    data = _tarfile_archive(fmt, names, tmp_path)
    expected = tarcorpus.tarfile_members(data)
    assert [n for n, _, _ in expected] == names
    for got in (run_memory(data), run_file(data, tmp_path), run_stream(io.BytesIO(data)),
                run_stream(gzip.GzipFile(fileobj=io.BytesIO(gzip.compress(data))))):
        assert got == (expected, None)


def test_webdataset_shard(tmp_path):
    path = make_shard(tmp_path / "w.tar", [{"__key__": f"k{i:03d}", "jpg": seeded_bytes(500 + i, "w", i), "cls": b"%d" % i,
                                            "json": b'{"label": 1}'} for i in range(20)])
    data = Path(path).read_bytes()
    assert run_memory(data) == (tarcorpus.tarfile_members(data), None)


def test_header_positions_strictly_advance():
    for case in CASES:
        members, _ = index_buffer(case.data)
        offsets = [m.offset for m in members]
        assert offsets == sorted(set(offsets)), case.name


def test_file_that_shrinks_under_the_index(tmp_path):
    """A file shorter than the size it had when opened: an io fault naming where, not SIGBUS."""
    data = tarcorpus.cases()[0].data
    path = tmp_path / "s.tar"
    path.write_bytes(data[:1000])
    with open(path, "rb") as f:
        members, fault, _ = index_file(f.fileno(), len(data))
    assert fault is not None and fault.io and "shrank" in fault.message


def test_shard_truncated_while_read(tmp_path):
    """The reader indexes, then the file is cut: reading the next member gives a
    ShardReadError naming the shard and the sample (member data is read with pread,
    never through mmap, so this is an error and not SIGBUS)."""
    from gpudecode.io.reader import Sample, iter_shard

    samples = [{"__key__": f"k{i:03d}", "jpg": seeded_bytes(2000, "big", i), "cls": b"1"} for i in range(300)]
    path = make_shard(tmp_path / "s.tar", samples)
    it = iter_shard(path)
    first = next(it)
    assert isinstance(first, Sample) and first.key == "k000"
    cut = os.path.getsize(path) // 2
    members, _ = index_buffer(Path(path).read_bytes())
    first_lost = next(m for m in members if m.offset + m.size > cut).name.split(".")[0]
    os.truncate(path, cut)
    rest = list(it)
    # every sample whose members were whole before the cut is delivered, intact
    n = int(first_lost[1:])
    assert [r.key for r in rest[:-1]] == [f"k{i:03d}" for i in range(1, n)]
    assert all(r.fields["jpg"] == samples[i + 1]["jpg"] for i, r in enumerate(rest[:-1]))
    err = rest[-1].error
    assert isinstance(err, ShardReadError) and err.shard == path and err.key == first_lost and "shrank" in str(err)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_chunked_and_seeking_index_equal_the_whole(case, tmp_path):
    """Indexing a few members at a time (resuming where the last call stopped), or starting
    at any member's chain offset, gives exactly what one pass over the file gives."""
    path = tmp_path / "s.tar"
    path.write_bytes(case.data)
    with open(path, "rb") as f:
        fd, size = f.fileno(), len(case.data)
        whole, fault, resume = index_file(fd, size)
        assert resume is None
        for chunk in (1, 2, 3):
            got, last, offset = [], None, 0
            while True:
                part, last, offset = index_file(fd, size, start=offset, max_members=chunk)
                got += part
                if offset is None:
                    break
            assert got == whole and last == fault
        for k, m in enumerate(whole):
            tail, tail_fault, _ = index_file(fd, size, start=m.chain)
            assert tail == whole[k:] and tail_fault == fault


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_index_file_over_large_and_small_members(tmp_path, fmt):
    """The file index reads a page around a header that follows a skipped member and a
    whole window through runs of small ones: members of every size around both (a
    header at the end of a window, long names, pax records) are indexed as tarfile lists
    them, offsets and sizes included, as is a cut in the middle of a large member."""
    sizes = [200_000, 1, 70_000, 3_000, 4_096 - 512, 65_536, 0, 511, 512, 513, 130_000, 7, 9, 4_000, 100_000]
    path = tmp_path / "mixed.tar"
    with tarfile.open(path, "w", format=fmt) as tf:
        for i, n in enumerate(sizes):
            name = f"k{i:03d}." + ("x" * 120 if i % 5 == 4 else "bin")  # long names: GNU/pax extra headers
            info = tarfile.TarInfo(name)
            info.size = n
            tf.addfile(info, io.BytesIO(bytes([i]) * n))
    data = path.read_bytes()
    with tarfile.open(path) as tf:
        expected = [(m.name, m.offset_data, m.size) for m in tf.getmembers()]
    with open(path, "rb") as f:
        members, fault, _ = index_file(f.fileno(), len(data))
    assert fault is None and [(m.name, m.offset, m.size) for m in members] == expected
    cut = tmp_path / "cut.tar"
    cut.write_bytes(data[:expected[10][1] + 1000])  # inside the 130,000-byte member
    with open(cut, "rb") as f:
        members, fault, _ = index_file(f.fileno(), cut.stat().st_size)
    assert [m.name for m in members] == [e[0] for e in expected[:10]]
    assert fault is not None and fault.member == expected[10][0]


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_small_members_held_from_the_header_reads(tmp_path, fmt):
    """index_file_lists(keep=n): each member of at most n bytes whose data the header
    reads brought in comes with its bytes (as tarfile reads them), the others with None;
    the index itself is the same as without. A small member after a large one (a label
    beside an image) is held: the reader needs no read of its own for it."""
    from gpudecode.io.tario import index_file_lists

    sizes = [200_000, 1, 70_000, 3_000, 4_096 - 512, 65_536, 0, 511, 512, 513, 130_000, 7, 9, 4_000, 100_000, 2]
    path = tmp_path / "mixed.tar"
    with tarfile.open(path, "w", format=fmt) as tf:
        for i, n in enumerate(sizes):
            info = tarfile.TarInfo(f"k{i:03d}." + ("x" * 120 if i % 5 == 4 else "bin"))
            info.size = n
            tf.addfile(info, io.BytesIO(seeded_bytes(n, i)))
    with tarfile.open(path) as tf:
        want = {m.name: tf.extractfile(m).read() for m in tf.getmembers()}
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        plain = index_file_lists(f.fileno(), size)
        for keep in (1, 600, 4096):
            got = index_file_lists(f.fileno(), size, keep=keep)
            assert got[:7] == plain[:7] and plain[7] is None
            names, held = got[0], got[7]
            assert len(held) == len(names)
            for name, h in zip(names, held):
                if h is not None:  # (None: larger, or not in a window read: the reader reads it itself)
                    assert len(want[name]) <= keep and h == want[name], name
            after_large = [held[i] for i, n in enumerate(sizes) if n <= keep and i and sizes[i - 1] > 60_000]
            assert after_large and all(h is not None for h in after_large)
