"""Tar parsing: one set of rules, three ways to feed it bytes.

Every rule of the format lives in the native state machine (`gpudecode._native.TarParser`,
csrc/tar.cpp): checksums (exact, unsigned or signed byte sums), octal and base-256
number fields, pax ('x', 'g') and GNU long-name ('L', 'K') headers, limits (sizes under
2^62, extended headers under 1 MiB), what ends an archive. The drivers here only move
bytes into it, so they accept and refuse the same archives with the same message and
offset (tests/test_tar_semantics.py runs one corpus through all of them):

- `index_buffer`: a tar in memory (native, GIL released);
- `index_file`: a local file read with pread through a read-ahead window (native, GIL
  released); never memory-mapped, so a file that shrinks under the reader is a
  `TarFault` with `io=True`, not a SIGBUS that kills the process;
- `iter_stream`: a stream read sequentially (gzip, HTTP, fsspec), one header at a time.

What the rules say, in short:
- regular files ('0', NUL, '7') are members; directories, devices and fifos are passed
  over; hard and symbolic links are listed with `type` '1'/'2' (the reader refuses them
  by key: their bytes are not in the shard); any other type is refused;
- the archive ends with a zero block, and everything after it must be zero bytes
  (the second end block, record padding). Non-zero bytes there, or data that ends
  without an end block, are faults: a shard cut at a member boundary is never taken for
  a complete one;
- a pax path with a NUL byte, GNU sparse members and malformed pax records are refused;
- where Python's tarfile reads a name otherwise: the ustar prefix is read only under the
  POSIX magic (old GNU headers keep times there); a pax path wins over a GNU long name
  whatever their order; global pax headers are checked, not applied.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import IO, Callable, Iterator

BLOCK = 512
_META = re.compile(r"__[^/]*__($|/)")
_READ_CHUNK = 1 << 22  # stream reads in pieces of at most this: a size field never sizes one allocation

# TarParser.header() step kinds (csrc/tar.h TarStepKind)
_MEMBER, _EXTENDED, _NO_DATA, _END, _ERROR = range(5)


@dataclass(slots=True)
class Member:
    """A member of a tar: its name, where its data starts, its size in bytes, its type
    ('0' regular file; '1' hard link and '2' symbolic link, which carry no data) and where
    its headers begin (`chain`: its extended headers, if any; parsing may start there)."""

    name: str
    offset: int
    size: int
    type: str = "0"
    chain: int = -1


@dataclass(slots=True)
class TarFault:
    """Where a tar stops being readable. `offset` is the header the fault is about (or
    the first non-zero block after the end of the archive); `member` names the member
    whose data is cut off when that is the fault, or whose header (its checksum valid,
    so its name trusted) is refused; `io` says the file itself failed or
    changed under the reader (rather than holding a bad archive); `after_end` says the
    fault is in what follows the end-of-archive block (so every member before it is whole)."""

    message: str
    offset: int
    member: str | None = None
    io: bool = False
    after_end: bool = False


def _native():
    from .. import _native

    return _native


def _from_index(result) -> tuple[list[Member], TarFault | None, int | None]:
    names, offsets, sizes, types, error, error_offset, member, io, after_end, chains, resume = result
    members = [Member(n, o, s, chr(t), c) for n, o, s, t, c in
               zip(names, offsets.tolist(), sizes.tolist(), types, chains.tolist())]
    fault = None if error is None else TarFault(error, error_offset, member, io, after_end)
    return members, fault, (None if resume < 0 else resume)


def index_buffer(buf) -> tuple[list[Member], TarFault | None]:
    """The members of a tar held in memory (bytes, bytearray, memoryview, numpy), and
    the fault that ended the scan (None when the archive and what follows it are whole)."""
    members, fault, _ = _from_index(_native().index_tar(buf))
    return members, fault


def index_file(fd: int, size: int, *, start: int = 0,
               max_members: int = 0) -> tuple[list[Member], TarFault | None, int | None]:
    """As index_buffer, for an open file of `size` bytes (its size when opened), read
    with pread: only the headers are read (through a 64 KiB read-ahead window). Parsing
    starts at `start` (0, or a member's `chain`); with max_members > 0 it stops after that
    many members and returns where to resume (else None): (members, fault, resume)."""
    return _from_index(_native().index_tar_fd(fd, size, start, max_members))


def index_file_lists(fd: int, size: int, *, start: int = 0, max_members: int = 0, keep: int = 0
                     ) -> tuple[list[str], list[int], list[int], str, list[int], TarFault | None, int | None,
                                list[bytes | None] | None]:
    """index_file's members as lists (names, offsets, sizes, types, chains), for a caller
    that goes through them a batch at a time: no Member object per member. With keep > 0,
    the last item holds the bytes of each member of at most `keep` bytes that the header
    reads brought in anyway (None where not: larger, or not read), else it is None."""
    got = _native().index_tar_fd(fd, size, start, max_members, keep)
    held = None
    if keep > 0:
        got, held = got
    names, offsets, sizes, types, error, error_offset, member, io, after_end, chains, resume = got
    fault = None if error is None else TarFault(error, error_offset, member, io, after_end)
    return (names, offsets.tolist(), sizes.tolist(), types.decode("latin-1"), chains.tolist(), fault,
            None if resume < 0 else resume, held)


def read_exact(stream: IO[bytes], size: int) -> bytes:
    """Up to `size` bytes: fewer only at the end of the stream. Reads in bounded pieces."""
    chunks = []
    left = size
    while left > 0:
        chunk = stream.read(min(left, _READ_CHUNK))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _skip(stream: IO[bytes], size: int) -> int:
    """Reads and drops up to `size` bytes; returns how many there were."""
    got = 0
    while got < size:
        chunk = stream.read(min(size - got, _READ_CHUNK))
        if not chunk:
            break
        got += len(chunk)
    return got


def _padded(size: int) -> int:
    return (size + BLOCK - 1) // BLOCK * BLOCK


def iter_stream(stream: IO[bytes], *, want: Callable[[str], bool] = lambda name: True
                ) -> Iterator[tuple[Member, bytes | None] | TarFault]:
    """The members of a tar read sequentially from `stream`: (member, data) pairs, data
    None where `want(name)` is False (those bytes are read and dropped, never held), and
    a last `TarFault` if the archive is refused. After the end-of-archive block the
    stream is read to its end (so a gzip stream's CRC and length are checked; what
    follows must be zero bytes). Exceptions of the stream itself (network, gzip) pass
    through to the caller."""
    nat = _native()
    p = nat.TarParser()
    while True:
        pos = p.position
        hdr = read_exact(stream, BLOCK)
        if len(hdr) < BLOCK:
            msg = nat.TAR_TRUNCATED_HEADER if hdr else (nat.TAR_EMPTY if pos == 0 else nat.TAR_NO_END)
            yield TarFault(msg, pos)
            return
        kind, type_b, name, header, data, size, _next, error = p.header(hdr)
        if kind == _ERROR:  # a header whose checksum holds names its member
            yield TarFault(error, header, member=name or None)
            return
        if kind == _END:
            off = data
            while True:
                chunk = stream.read(1 << 16)
                if not chunk:
                    return
                nz = len(chunk) - len(chunk.lstrip(b"\0"))
                if nz < len(chunk):
                    yield TarFault(nat.TAR_TRAILING_DATA, (off + nz) // BLOCK * BLOCK, after_end=True)
                    return
                off += len(chunk)
        if kind == _EXTENDED:
            ext = read_exact(stream, _padded(size))
            if len(ext) < size:
                yield TarFault(nat.TAR_EXTENDED_CUT, header)
                return
            error = p.extended(ext[:size])
            if error is not None:  # a bad pax size record: the next header may name the member
                name = p.refused_member(read_exact(stream, BLOCK))
                yield TarFault(error, header, member=name or None)
                return
            continue
        type_ = type_b.decode("latin-1")
        if kind == _NO_DATA:
            if type_ in ("1", "2"):
                yield Member(name, data, 0, type_), None
            continue
        member = Member(name, data, size, "0")
        payload: bytes | None = None
        if want(name):
            payload = read_exact(stream, _padded(size))
            got = len(payload)
        else:
            got = _skip(stream, _padded(size))
        if got < size:
            yield TarFault(nat.tar_truncated_member(name.encode("utf-8", "surrogateescape"), size, got), header, name)
            return
        if payload is not None and len(payload) != size:
            payload = payload[:size]
        yield member, payload


@functools.lru_cache(maxsize=4096)  # each name is split by grouping, filtering and assembly in turn
def split_key(name: str) -> tuple[str, str] | None:
    """WebDataset's convention: key = path up to the first dot of the basename,
    extension = the rest, lower-cased. None for names that have no extension or whose
    basename starts with a dot. A leading "./" (`tar -C dir .` writes one before every
    name) is no part of the key: `./k0000.jpg` is sample `k0000`, as precache and every
    gpudecode writer then write it."""
    while name.startswith("./"):
        name = name[2:]
    slash = name.rfind("/") + 1
    dot = name.find(".", slash)
    if dot <= slash:
        return None
    return name[:dot], name[dot + 1:].lower()


@functools.lru_cache(maxsize=4096)
def is_metadata(name: str) -> bool:
    """Members webdataset passes over: `__...__` names such as `__index__`."""
    return _META.match(name) is not None or ("/" not in name and name.startswith("__") and name.endswith("__"))
