"""Tar parsing: a native index over memory-mapped files, and a parser of streams.

Reads ustar, GNU (long names, 'L') and pax ('x') headers, and checks every header's
checksum. Only regular files are yielded; directories, links and the like are passed
over. Nothing here decodes pixels or copies member data it is not asked for.
"""
from __future__ import annotations

import re
import struct
import zlib
from dataclasses import dataclass
from typing import BinaryIO, Iterator

from ..errors import ShardFormatError

BLOCK = 512
_REGULAR = (b"0", b"\0", b"7")
_NO_DATA = (b"1", b"2", b"3", b"4", b"5", b"6")  # links, devices, directories, fifos: header only
_EXTENDED = (b"x", b"g", b"L", b"K")
_META = re.compile(r"__[^/]*__($|/)")
_SPACES = b" " * 8


@dataclass(slots=True)
class Member:
    """A regular file in a tar: its name, where its data starts and its size in bytes."""

    name: str
    offset: int
    size: int


# name, size, chksum, typeflag, magic, prefix (mode/uid/gid, mtime, linkname, version,
# uname/gname and device numbers are of no use here)
_HEADER = struct.Struct("100s24x12s12x8sc100x6s2x32x32x16x155s12x")
_ZERO_BLOCK = bytes(BLOCK)


def _number(field: bytes, what: str, shard: str, pos: int) -> int:
    if field[:1] and field[0] & 0x80:  # GNU base-256, for sizes of 8 GiB and more
        value = int.from_bytes(field[1:], "big")
        return -value if field[0] & 0x40 else value
    digits = field.rstrip(b"\0 ")
    if not digits:
        return 0
    try:
        return int(digits, 8)
    except ValueError:
        raise ShardFormatError(f"bad {what} field {field!r} in tar header", shard=shard, offset=pos) from None


def _checksum_ok(hdr: bytes, chksum: bytes, stored: int) -> bool:
    # The tar checksum is the byte sum of the header with its checksum field read as
    # eight spaces. adler32's low half is (1 + byte sum) mod 65521: one C call decides,
    # catching any corruption short of one that moves the sum by a multiple of 65521.
    total = (zlib.adler32(hdr) & 0xFFFF) - 1 - sum(chksum) + 256
    if (total - stored) % 65521 == 0:
        return True
    # Some old writers summed signed chars.
    signed = sum(b - 256 if b > 127 else b for b in hdr[:148] + _SPACES + hdr[156:])
    return signed == stored


def _pax_records(data: bytes, shard: str, pos: int) -> dict[str, str]:
    records: dict[str, str] = {}
    i = 0
    n = len(data)
    while i < n and data[i] != 0:
        sp = data.find(b" ", i)
        try:
            length = int(data[i:sp]) if sp > 0 else 0
        except ValueError:
            length = 0
        if length <= 0 or i + length > n or data[i + length - 1] != 10:
            raise ShardFormatError("bad pax extended header record", shard=shard, offset=pos)
        k, _, v = data[sp + 1:i + length - 1].partition(b"=")
        records[k.decode("utf-8", "surrogateescape")] = v.decode("utf-8", "surrogateescape")
        i += length
    return records


def _parse_header(hdr: bytes, shard: str, pos: int) -> tuple[str, int, bytes] | None:
    """Returns (name, size, typeflag), or None at the end-of-archive block."""
    name, size_f, chksum, kind, magic, prefix = _HEADER.unpack(hdr)
    if hdr[0] == 0 and hdr == _ZERO_BLOCK:
        return None
    stored = _number(chksum, "checksum", shard, pos)
    if not _checksum_ok(hdr, chksum, stored):
        raise ShardFormatError("tar header checksum mismatch (not a tar, or corrupt)", shard=shard, offset=pos)
    size = _number(size_f, "size", shard, pos)
    if size < 0:
        raise ShardFormatError("negative member size", shard=shard, offset=pos)
    nul = name.find(b"\0")
    if nul >= 0:
        name = name[:nul]
    if magic == b"ustar\x00" and prefix[:1] != b"\0":  # POSIX ustar: the prefix extends the name
        name = prefix.split(b"\0", 1)[0] + b"/" + name
    return name.decode("utf-8", "surrogateescape"), size, kind


def _padded(size: int) -> int:
    return (size + BLOCK - 1) // BLOCK * BLOCK


def index_members(buf, shard: str) -> Iterator[Member]:
    """Regular files of a tar held in memory (bytes or mmap), without copying data.
    The header scan is native (gpudecode._native.index_tar, GIL released); it applies
    the same rules as `iter_stream`. Members before a fault are yielded, then the fault
    is raised.

    Raises:
        ShardFormatError: truncated archive, bad checksum, bad header fields.
    """
    from .. import _native

    names, offsets, sizes, error, error_offset = _native.index_tar(buf)
    for name, off, size in zip(names, offsets.tolist(), sizes.tolist()):
        yield Member(name, off, size)
    if error is not None:
        raise ShardFormatError(error, shard=shard, offset=error_offset)


def _read_exact(stream: BinaryIO, size: int) -> bytes:
    chunks = []
    left = size
    while left > 0:
        chunk = stream.read(left)
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def iter_stream(stream: BinaryIO, shard: str) -> Iterator[tuple[str, bytes]]:
    """Regular files of a tar read sequentially from a stream (gzip, http, s3 ...):
    yields (name, data)."""
    pos = 0
    long_name: str | None = None
    pax: dict[str, str] = {}
    while True:
        hdr = _read_exact(stream, BLOCK)
        if not hdr:
            return
        if len(hdr) < BLOCK:
            raise ShardFormatError("truncated tar: partial header block", shard=shard, offset=pos)
        parsed = _parse_header(hdr, shard, pos)
        if parsed is None:
            return
        name, size, kind = parsed
        padded = _padded(size)
        if kind in _EXTENDED:
            payload = _read_exact(stream, padded)
            if len(payload) < padded:
                raise ShardFormatError("truncated tar: extended header cut off", shard=shard, offset=pos)
            if kind == b"x":
                pax = _pax_records(payload[:size], shard, pos)
            elif kind == b"L":
                long_name = payload[:size].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
            pos += BLOCK + padded
            continue
        if "path" in pax:
            name = pax["path"]
        elif long_name is not None:
            name = long_name
        if "size" in pax:
            size = int(pax["size"])
            padded = _padded(size)
        long_name = None
        pax = {}
        if kind in _NO_DATA:
            pos += BLOCK
            continue
        if kind == b"S":
            raise ShardFormatError(f"GNU sparse member {name!r} is not supported", shard=shard, offset=pos)
        payload = _read_exact(stream, padded)
        if len(payload) < size:
            raise ShardFormatError(
                f"truncated tar: member {name!r} needs {size} bytes, {len(payload)} left", shard=shard, offset=pos)
        if kind in _REGULAR:
            yield name, payload[:size] if padded != size else payload
        pos += BLOCK + padded


def split_key(name: str) -> tuple[str, str] | None:
    """WebDataset's convention: key = path up to the first dot of the basename,
    extension = the rest, lower-cased. None for names that have no extension or whose
    basename starts with a dot."""
    slash = name.rfind("/") + 1
    dot = name.find(".", slash)
    if dot <= slash:
        return None
    return name[:dot], name[dot + 1:].lower()


def is_metadata(name: str) -> bool:
    """Members webdataset passes over: `__...__` names such as `__index__`."""
    return _META.match(name) is not None or ("/" not in name and name.startswith("__") and name.endswith("__"))
