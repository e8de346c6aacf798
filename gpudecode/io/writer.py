"""Writing WebDataset-style tar shards, atomically.

Each shard is written to `<name>.partial` and renamed into place only when complete, so
a shard under its real name is always whole. A write that fails (disk full, permissions,
an I/O error) raises `ShardWriteError` naming the shard and removes the partial file; a
`.partial` left by a killed process is replaced when that shard is written again.

Keys of any length are written (pax headers where a name does not fit ustar's 100+155
bytes, as gpudecode's reader and Python's tarfile read them); a key that is empty, holds
a NUL byte or a control character, is absolute, or has an empty, `.` or `..` path
component is refused, as is a dot in its last component (it would move the split between
key and extension).
"""
from __future__ import annotations

import errno
import hashlib
import os
import tarfile
from types import TracebackType
from typing import Any, BinaryIO, Callable

from ..errors import ShardWriteError, known
from .pattern import ShardPattern


def format_pattern(pattern: str, index: int) -> str:
    """`out/train-%06d.tar` or `out/train-{:06d}.tar` with the shard number filled in (in
    the file name: the folder part is taken as it is; io/pattern.py has the grammar).

    Raises:
        ValueError: the file name has no shard number field, or more than one, or one
            that pads with spaces."""
    return ShardPattern(pattern).format(index)


def pattern_head(pattern: str) -> str:
    """What comes before the shard number: `out/train-%06d.tar` -> `out/train-` (a run's
    state folder, manifest and class index are named from it)."""
    return ShardPattern.head_of(pattern)


def written_by(pattern: str) -> list[str]:
    """The files that `pattern` (`out/train-%06d.tar`, `out/train-{:06d}.tar`) names for
    some shard number and that exist, in number order: what an earlier run left."""
    p = ShardPattern(pattern)
    p.format(0)  # raises: a field that pads with spaces
    return p.written()


def check_key(key: object) -> str:
    """`key` if it can be written as a sample key (see the module doc).

    Raises:
        ValueError: why it cannot.
    """
    if not isinstance(key, str) or not key:
        raise ValueError(f"sample key must be a non-empty str, not {key!r}")
    if any(ord(c) < 32 or ord(c) == 127 for c in key):
        raise ValueError(f"sample key {key!r} holds a NUL or control character")
    if key.startswith("/"):
        raise ValueError(f"sample key {key!r} is an absolute path")
    parts = key.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"sample key {key!r} has an empty, '.' or '..' path component")
    if "." in parts[-1]:
        raise ValueError(f"sample key {key!r} must not contain a dot in its last component")
    return key


def _describe(e: OSError) -> str:
    if e.errno == errno.ENOSPC:
        return "no space left on device"
    return e.strerror or str(e)


BLOCK = tarfile.BLOCKSIZE
_ZEROS = bytes(tarfile.RECORDSIZE + 2 * BLOCK)  # (the most zeros written at once: the end of an archive)


def _buffer(data: object, ext: str, key: str) -> bytes | memoryview:
    """A field's bytes (or one part of them) as written: a str encoded, a contiguous buffer
    as it is (flat), another copied."""
    if isinstance(data, str):
        return data.encode()
    if isinstance(data, bytes):
        return data
    if not isinstance(data, (bytearray, memoryview)):
        raise ValueError(f"field {ext!r} of sample {key!r} must be bytes or str (or a tuple of them), "
                         f"not {type(data).__name__}")
    view = memoryview(data)
    return view.cast("B") if view.c_contiguous else view.tobytes()


# The ustar header block tarfile writes (PAX format) for a member whose name is ASCII and
# fits ustar's 100 bytes, mode 444, owner gpudecode, mtime 0 (device numbers NULs, as a
# file's), with the name, size and checksum fields to fill: the common member, built from
# this instead of by tarfile's slower tobuf (bench/RESULTS.md); every other member is
# tarfile's own (test_writer checks both against tarfile).
_USTAR = (b"\0" * 100 + b"0000444\0" + b"0000000\0" * 2 + b"\0" * 12 + b"00000000000\0" + b" " * 8 + b"0"
          + b"\0" * 100 + b"ustar\x0000" + b"gpudecode".ljust(32, b"\0") * 2).ljust(BLOCK, b"\0")


def _header(name: str, size: int) -> bytes:
    """A member's header blocks, as tarfile's TarInfo.tobuf writes them in PAX format."""
    raw = name.encode("utf-8", "surrogateescape")
    if len(raw) <= 100 and name.isascii() and size < 8 ** 11:
        block = bytearray(_USTAR)
        block[0:len(raw)] = raw
        block[124:136] = b"%011o\0" % size
        block[148:155] = b"%06o\0" % sum(block)  # (summed with the field as spaces, as tarfile does)
        return bytes(block)
    info = tarfile.TarInfo(name)
    info.size = size
    info.mode = 0o444
    info.uname = info.gname = "gpudecode"
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


def _file_size(members: int) -> int:
    """A tar file's size with `members` bytes of members: the end-of-archive blocks added,
    padded to tarfile's record size."""
    return -(-(members + 1024) // tarfile.RECORDSIZE) * tarfile.RECORDSIZE


class ShardWriter:
    """Writes samples ({"__key__": key, ext: bytes | str | bytes-like, ...}; a tuple of
    them is written as their concatenation, with no copy made) into shards of at most
    `maxcount` samples and `maxsize` bytes (a new shard starts before a sample that would
    take the file past maxsize; a single sample larger than that gets a shard of its own);
    a context manager. Shard i is named by `pattern`
    (`%d` or `{}` filled with i) or by `namer(i)`. A shard is renamed into place once
    complete, after an fsync (`fsync=False` leaves the writing back to the system: for
    callers that check what they find, as precache's resume does by sha256). `shards`, `counts`
    and `sha256s` list the complete shards, their sample counts and sha256s (hashed as
    written: the file is not read back). The bytes are those Python's tarfile writes in
    PAX format for the same members."""

    def __init__(self, pattern: str | None = None, *, maxcount: int = 10000, maxsize: int = 3 << 30,
                 namer: Callable[[int], str] | None = None, fsync: bool = True) -> None:
        if (pattern is None) == (namer is None):
            raise ValueError("give a shard pattern or a namer, one of them")
        if pattern is not None:
            format_pattern(pattern, 0)
        if maxcount < 1 or maxsize < 1:
            raise ValueError("maxcount and maxsize must be >= 1")
        self.pattern = pattern
        self.namer = namer
        self.fsync = fsync
        self.maxcount = maxcount
        self.maxsize = maxsize
        self.shards: list[str] = []
        self.counts: list[int] = []  # samples per shard, as self.shards
        self.sha256s: list[str] = []  # each complete shard's sha256, as self.shards (hashed while written)
        self._file: BinaryIO | None = None
        self._hash: Any = None  # the shard's sha256 so far
        self._path = ""
        self._tmp = ""
        self._count = 0
        self._size = 0

    def _open(self, path: str) -> BinaryIO:
        """The file a shard is written to (a seam for fault-injection tests)."""
        return open(path, "wb")

    def _fail(self, e: OSError, what: str) -> ShardWriteError:
        self._discard()
        err = ShardWriteError(f"cannot {what}: {_describe(e)}", shard=self._path or None)
        err.__cause__ = e
        return err

    def _discard(self) -> None:
        """Drops the shard being written: closes it and removes the partial file."""
        f, tmp = self._file, self._tmp
        self._file = self._hash = None
        self._tmp = ""
        if f is not None:
            try:
                f.close()
            except OSError:
                pass
        if tmp:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass

    def _next(self) -> None:
        self._finish()
        i = len(self.shards)
        path = self.namer(i) if self.namer is not None else format_pattern(self.pattern or "", i)
        self._path, self._tmp = path, path + ".partial"
        try:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            self._file = self._open(self._tmp)
            self._hash = hashlib.sha256()
        except OSError as e:
            raise self._fail(e, "start the shard") from None
        self._count = self._size = 0

    def _finish(self) -> None:
        if self._file is None:
            return
        try:
            # the end of the archive as tarfile writes it: two zero blocks, then zeros to its record size
            self._put(_ZEROS[:_file_size(self._size) - self._size])
            self._file.flush()
            if self.fsync:
                os.fsync(self._file.fileno())
            self._file.close()
            os.replace(self._tmp, self._path)
        except OSError as e:
            raise self._fail(e, "finish the shard") from None
        self.sha256s.append(self._hash.hexdigest())
        self._file = self._hash = None
        self._tmp = ""
        self.shards.append(self._path)
        self.counts.append(self._count)

    def _put(self, data: bytes | memoryview) -> None:
        known(self._file, "the open shard's file").write(data)
        self._hash.update(data)

    def write(self, sample: dict) -> None:
        """Writes one sample.

        Raises:
            ValueError: a bad key or field (nothing is written).
            ShardWriteError: the shard could not be written (it is removed).
        """
        key = check_key(sample.get("__key__"))
        fields = []
        for ext, data in sample.items():
            if ext == "__key__":
                continue
            if not isinstance(ext, str) or not ext or "/" in ext or "\0" in ext:
                raise ValueError(f"field name {ext!r} of sample {key!r} is not a valid extension")
            parts = [_buffer(p, ext, key) for p in (data if isinstance(data, tuple) else (data,))]
            fields.append((ext, parts, sum(len(p) for p in parts)))
        members = []
        need = 0
        for ext, parts, size in fields:
            header = _header(f"{key}.{ext}", size)
            members.append((header, parts, size))
            need += len(header) + -(-size // BLOCK) * BLOCK
        if (self._file is None or self._count >= self.maxcount
                or (self._count and _file_size(self._size + need) > self.maxsize)):
            self._next()
        try:
            for header, parts, size in members:
                self._put(header)
                for part in parts:
                    self._put(part)
                if size % BLOCK:
                    self._put(_ZEROS[:BLOCK - size % BLOCK])
            self._size += need
        except OSError as e:
            raise self._fail(e, "write the shard") from None
        self._count += 1

    def close(self) -> None:
        self._finish()

    def __enter__(self) -> "ShardWriter":
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        if et is None:
            self.close()
        else:  # leave no partial shard behind on failure
            self._discard()
