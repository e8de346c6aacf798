"""A shard's members: tar members read (local shards with pread, in read batches of runs;
streams and remote shards as they come), grouped into samples by key (webdataset's rule),
and the memory they are read into (mapped shards, pooled blocks). The reader's lowest
layer: gpudecode.io.assembly makes samples of these members, gpudecode.io.reader epochs
of those samples; the module doc of reader.py says what is delivered around a fault."""
from __future__ import annotations

import contextlib
import errno
import gzip
import operator
import os
import tempfile
import threading
import zlib
from dataclasses import dataclass
from typing import IO, Callable, Iterator, Sequence, cast

import numpy as np

from .. import _native

from .._threads import ThreadGroup
from ..errors import (RESOURCE_ERRNOS, GpuDecodeError, LocatedError, ResourceError, ShardFormatError,
                      ShardReadError, resource_error, wrap_data_error)
from . import shards as _shards
from .cache import ShardCache
from .remote import RemoteOptions, open_remote
from .tario import BLOCK, Member, TarFault, index_file_lists, is_metadata, iter_stream, split_key


_READ_BATCH = 256  # members read from a local shard per native call
_INDEX_CHUNK = 512  # members indexed per native call
_HELD = 4096  # members this small come with the index's reads of their headers, where those brought them in
_GZIP_MAGIC = b"\x1f\x8b"

__all__ = ["Sample", "Failure", "Grouper", "iter_members", "stream_members", "split_exts"]




@dataclass(slots=True)
class Sample:
    """One sample: the members of a shard that share a key."""

    key: str
    fields: dict[str, bytes]  # (read-only memoryviews for the reader's map_extensions: bytes-like)
    shard: str
    index: int  # position of the sample in its shard


@dataclass(slots=True)
class Failure:
    """What iter_shard gives in place of a sample it could not read: the error, and
    whether the rest of the shard is lost with it."""

    error: GpuDecodeError
    fatal: bool  # the rest of the shard is lost


_END = object()


def _stream_error(e: BaseException, url: str) -> LocatedError:
    """An exception of a shard stream as the project's error naming the shard."""
    if isinstance(e, LocatedError):
        return e
    if isinstance(e, (zlib.error, gzip.BadGzipFile, EOFError)):
        return wrap_data_error(e, ShardFormatError, "corrupt or cut-off gzip stream", shard=url)
    if isinstance(e, OSError):
        return wrap_data_error(e, ShardReadError, "read failed", shard=url)
    return wrap_data_error(e, ShardReadError, "reading the shard failed", shard=url)


class Grouper:
    """Numbers a shard's samples as its members go by (webdataset's key rule): `group(name)`
    is the index of the sample the member belongs to, or None for a member that is no
    sample's field (metadata such as `__index__`, a name without an extension). The one
    numbering counting, splitting and reading all use."""

    def __init__(self, first: int = 0) -> None:
        self.key: str | None = None
        self.index = first - 1

    def group(self, name: str) -> int | None:
        if is_metadata(name):
            return None
        parts = split_key(name)
        if parts is None:
            return None
        if parts[0] != self.key:
            self.key = parts[0]
            self.index += 1
        return self.index


Want = Callable[[str, "int | None"], bool]
Item = "tuple[Member, bytes | None, int | None] | TarFault"


class _Want:
    """Which members a shard read delivers the bytes of: those of samples start..end-1
    (Grouper's numbering), with an extension in `extensions` (None: any). A plain
    function (name, sample index) -> bool does as well; this one also lets a local read
    choose members a read batch at a time."""

    __slots__ = ("start", "end", "extensions")

    def __init__(self, start: int = 0, end: float = float("inf"), extensions: frozenset[str] | None = None) -> None:
        self.start, self.end, self.extensions = start, end, extensions

    def __call__(self, name: str, g: int | None) -> bool:
        if g is None or not self.start <= g < self.end:
            return False
        if self.extensions is None:
            return True
        parts = split_key(name)
        return parts is not None and parts[1] in self.extensions


_want_all = _Want()


def _gunzip(f: IO[bytes]) -> IO[bytes]:
    return cast(IO[bytes], gzip.GzipFile(fileobj=f, mode="rb"))


def _open_local(path: str, url: str):
    try:
        return open(path, "rb")
    except OSError as e:
        if e.errno in RESOURCE_ERRNOS:  # descriptors, memory, permissions: not the shard's fault
            raise resource_error(e, f"cannot open shard {url!r}") from e
        raise ShardReadError(f"cannot open shard: {e.strerror or e}", shard=url) from e


def iter_members(url: str, *, want: Want = _want_all, remote: RemoteOptions | None = None,
                 group: ThreadGroup | None = None, cache: ShardCache | None = None,
                 seek: tuple[int, int] | None = None, mapped: frozenset[str] = frozenset(),
                 maps: _MapCache | None = None, runs: bool = False, pooled: "_Pooled | None" = None
                 ) -> Iterator["tuple[Member, bytes | memoryview | None, int | None] | TarFault | _Runs"]:
    """(member, data, sample index) for every member of a shard, then a last TarFault if
    the tar is refused. data is None where want(name, sample index) is False, and for a
    link; the sample index is Grouper's (None: not a sample's field).

    Local uncompressed shards are indexed natively and their members read with pread.
    A gzip shard (by content, local or remote) is first decompressed into an anonymous
    temporary file (in GPUDECODE_TMPDIR, else the system's), reading the gzip stream to its
    end so its CRC and length are checked before any sample is delivered; the file is then
    read as a local shard. Remote uncompressed shards are parsed as streams, or, with
    `cache`, read from their local copy (downloaded first if there is none). With `group`,
    its stop() cancels a remote read blocked on the network. `seek` = (chain offset, sample
    index) starts a local shard at that sample (offsets recorded when it was counted).
    Members with an extension in `mapped` are read-only memoryviews over the mapped file
    where it is a file (local, cached or spooled), bytes otherwise; `maps` keeps the
    mappings of shard files (not of spooled ones) for the next time. With `runs` (and a
    `_Want`), a local shard's plain read batches come as `_Runs` (see _file_members).

    Raises:
        ShardReadError: the shard cannot be opened or read (names it).
        ShardFormatError: a corrupt gzip stream (CRC, length, deflate data).
    """
    local = _shards.local_path(url) if _shards.is_local(url) else None
    if local is None and cache is not None:
        local = str(cache.fetch(url, group))
    if local is not None:
        f = _open_local(local, url)
        with f:
            if f.peek(2)[:2] == _GZIP_MAGIC:
                with _spooled(f, url) as tmp:
                    yield from _file_members(tmp, url, want, seek, mapped, runs=runs, pooled=pooled)
            else:
                yield from _file_members(f, url, want, seek, mapped, maps, runs, pooled)
        return
    stream = open_remote(url, remote)
    cancel = getattr(getattr(stream, "raw", None), "cancel", None)
    with stream, (group.cancelling(cancel) if group is not None and cancel is not None else contextlib.nullcontext()):
        if stream.peek(2)[:2] == _GZIP_MAGIC:
            with _spooled(stream, url) as tmp:
                yield from _file_members(tmp, url, want, mapped=mapped, runs=runs, pooled=pooled)
        else:
            yield from stream_members(stream, url, want=want)


@contextlib.contextmanager
def _spooled(stream: IO[bytes], url: str) -> Iterator[IO[bytes]]:
    """The gunzipped bytes of `stream` in an anonymous temporary file, CRC and length checked."""
    where = os.environ.get("GPUDECODE_TMPDIR") or None
    try:
        tmp = tempfile.TemporaryFile(dir=where)
    except OSError as e:  # a missing, full or unwritable temporary folder is no bad shard
        raise resource_error(e, f"cannot make the temporary file that gzip shard {url!r} is unpacked to "
                                f"(in {where or tempfile.gettempdir()}; GPUDECODE_TMPDIR sets the folder)") from e
    try:
        try:
            gz = _gunzip(stream)
            while True:
                chunk = gz.read(1 << 20)
                if not chunk:
                    break
                try:
                    tmp.write(chunk)
                except OSError as e:
                    raise resource_error(e, f"cannot write the unpacked gzip shard {url!r} to "
                                            f"{where or tempfile.gettempdir()}") from e
            tmp.flush()
        except ResourceError:
            raise
        except (OSError, EOFError, zlib.error, MemoryError, OverflowError) as e:
            raise _stream_error(e, url) from e
        yield tmp  # type: ignore[misc]
    finally:
        tmp.close()


class _Mapping:
    """A shard file mapped read-only, for members handed out as memoryviews (no copy).
    For each batch of members the reader thread asks the system to read their pages ahead
    (MADV_WILLNEED: the disk reads start here, well before the views are read; faulting
    the pages in here with MADV_POPULATE_READ instead halved the reader's rate for data
    already cached, more work than the faults it saves). Before every batch the file's
    size is checked: a shard truncated in place is then a read error, as with pread,
    rather than a SIGBUS; one truncated after its views were handed out still faults."""

    def __init__(self, fd: int, size: int) -> None:
        import mmap

        self.size = size
        self.mm = mmap.mmap(fd, size, prot=mmap.PROT_READ) if size else None
        self.view = memoryview(self.mm) if self.mm is not None else memoryview(b"")

    def views(self, offsets: list[int], sizes: list[int]) -> list[memoryview] | None:
        """The views of the members at `offsets` of `sizes` bytes; None if the file no
        longer holds them."""
        if not offsets or self.mm is None:
            return [self.view[o:o + n] for o, n in zip(offsets, sizes)]
        lo = offsets[0]
        hi = max(map(operator.add, offsets, sizes))
        # (natively: the system call without the GIL)
        if _native.will_need(self.view, lo, hi - lo) in (errno.EFAULT, errno.ENOMEM):
            return None  # pages past the end of the file: it was truncated
        view = self.view
        return [view[o:o + n] for o, n in zip(offsets, sizes)]


class _MapCache:
    """A reader's shard mappings, kept from one epoch to the next (least recently used
    first out past `limit` mapped bytes; default half the machine's memory). A mapping is
    reused only for the same file in the same state (device, inode, size, modification
    time): a shard replaced by a rename or rewritten is mapped anew. Keeping them saves
    the page faults of mapping every shard again each epoch: the kernel's first touch of
    each page of a fresh mapping cost about a fifth of its time on page-cached tensor
    shards (3.5 against 2.8 ms for 64 images of 224x224 on 2 threads). Mapped pages stay
    page cache: the system can still reclaim them. close() drops them all (views handed
    out keep theirs alive). Each mapping holds a file descriptor (Python's mmap keeps a
    duplicate), so at most `max_maps` are kept: a quarter of the process's descriptor
    limit (RLIMIT_NOFILE), leaving the rest to everything else; 1,100 shards under the
    default limit of 1,024 no longer run out."""

    def __init__(self, limit: int | None = None, max_maps: int | None = None) -> None:
        if limit is None:
            try:
                limit = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
            except (ValueError, OSError, AttributeError):
                limit = 1 << 34
        if max_maps is None:
            try:
                import resource

                soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
                max_maps = max(8, (soft if soft != resource.RLIM_INFINITY else 1 << 16) // 4)
            except (ImportError, OSError, ValueError):
                max_maps = 256
        self.limit = limit
        self.max_maps = max_maps
        self._maps: dict[tuple[int, int, int, int], _Mapping] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, fd: int, size: int) -> _Mapping:
        st = os.fstat(fd)
        key = (st.st_dev, st.st_ino, size, st.st_mtime_ns)
        with self._lock:
            m = self._maps.pop(key, None)
            if m is not None:
                self._maps[key] = m  # most recent last
                return m
        m = _Mapping(fd, size)
        with self._lock:
            old = self._maps.pop(key, None)
            if old is not None:  # another thread mapped it meanwhile
                self._bytes -= old.size
            self._maps[key] = m
            self._bytes += size
            while (self._bytes > self.limit or len(self._maps) > self.max_maps) and len(self._maps) > 1:
                first = next(iter(self._maps))
                self._bytes -= self._maps.pop(first).size
        return m

    def close(self) -> None:
        with self._lock:
            self._maps.clear()
            self._bytes = 0

    def __len__(self) -> int:
        return len(self._maps)

    def __getstate__(self) -> dict:  # a reader goes to DataLoader's spawned workers: its maps stay here
        return {"limit": self.limit, "max_maps": self.max_maps}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["limit"], state["max_maps"])  # type: ignore[misc]


def _file_members(f: IO[bytes], url: str, want: Want, seek: tuple[int, int] | None = None,
                  mapped: frozenset[str] = frozenset(), maps: _MapCache | None = None, runs: bool = False,
                  pooled: "_Pooled | None" = None
                  ) -> Iterator["tuple[Member, bytes | memoryview | None, int | None] | TarFault | _Runs"]:
    """The members of a local tar, indexed _INDEX_CHUNK at a time (a caller that stops
    early indexes no further) and read _READ_BATCH at a time (one native call each).
    Members with an extension in `mapped` come as memoryviews over the mapped file, those
    with one of `pooled`'s as memoryviews over its recycled blocks.
    With `runs`, where `want` is a `_Want` and a read batch is plain (regular files, printable-ASCII
    names: the common case), it is grouped in one native call and comes as one `_Runs`
    (the runs of each sample's members there, as columns) instead of member by member."""
    try:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        offset, first = seek if seek is not None else (0, 0)
        grouper = Grouper(first)
        reader = _PartReader(fd, size, mapped, maps, pooled)
        # a short run of samples (an elastic split's, a map-style read) indexes about what it
        # needs first (3 members a sample, then twice as many each time it needs more), not
        # _INDEX_CHUNK members: indexing the 512 members past a run of 16 samples cost 8x
        # the run's own read
        chunk = _INDEX_CHUNK
        if isinstance(want, _Want) and want.end != float("inf"):
            chunk = int(min(_INDEX_CHUNK, max(16, 3 * (want.end - max(want.start, first)) + 4)))
        while True:
            names, offsets, sizes, types, chains, fault, resume, held = index_file_lists(
                fd, size, start=offset, max_members=chunk, keep=_HELD)
            chunk = min(_INDEX_CHUNK, 2 * chunk)
            for lo in range(0, len(names), _READ_BATCH):
                part = _Part(names[lo:lo + _READ_BATCH], offsets[lo:lo + _READ_BATCH], sizes[lo:lo + _READ_BATCH],
                             types[lo:lo + _READ_BATCH], chains[lo:lo + _READ_BATCH],
                             held[lo:lo + _READ_BATCH] if held is not None else None)
                plain = _plain_runs(part, grouper, want, reader) if runs and isinstance(want, _Want) else None
                if plain is not None:
                    yield plain  # (the batch's runs as one item)
                    continue
                members = [Member(*m) for m in zip(part.names, part.offsets, part.sizes, part.types, part.chains)]
                groups = [grouper.group(m.name) for m in members]
                wanted = [i for i, (m, g) in enumerate(zip(members, groups)) if m.type == "0" and want(m.name, g)]
                data_of, short = reader.read(part, wanted)
                for i, (m, g) in enumerate(zip(members, groups)):
                    if short is not None and i == short[0]:  # the file shrank, or failed, under the reader
                        why = short[2] or (f"shard shrank while being read: member {m.name!r} needs {m.size} bytes "
                                           f"at offset {m.offset}, {short[1]} left (the file was {size} bytes when "
                                           "opened)")
                        yield TarFault(why, m.offset - BLOCK, m.name, io=True)
                        return
                    yield m, data_of.get(i), g
            if fault is not None:
                yield fault
                return
            if resume is None:
                return
            offset = resume
    except (OSError, MemoryError, OverflowError) as e:
        raise _stream_error(e, url) from e


@dataclass(slots=True)
class _Part:
    """A read batch of a local shard's index: its members' fields, as lists."""

    names: list[str]
    offsets: list[int]
    sizes: list[int]
    types: str
    chains: list[int]
    held: list[bytes | None] | None = None  # the small members' bytes the index read brought in


@dataclass(slots=True)
class _Run:
    """The members of one sample next to each other in a plain read batch: what
    iter_shard assembles in one step. `datas` is None where the member is not wanted;
    the sample may go on in the next batch (the same `g`)."""

    g: int
    key: str
    exts: list[str]
    datas: list
    part: _Part
    at: int  # index of the run's first member in `part`


@dataclass(slots=True)
class _Runs:
    """A plain read batch as runs of one sample's members, in columns: run j is sample
    `gs[j]` (key `keys[j]`), members bounds[j]..bounds[j + 1] of `exts` and `datas`
    (the batch's fields, metadata members left out), the first at `at[j]` in `part`."""

    gs: list[int]
    keys: list[str]
    bounds: list[int]
    exts: list[str]
    datas: list
    at: list[int]
    part: _Part

    def run(self, j: int) -> _Run:
        a, b = self.bounds[j], self.bounds[j + 1]
        return _Run(self.gs[j], self.keys[j], self.exts[a:b], self.datas[a:b], self.part, self.at[j])


@dataclass(frozen=True)
class _Pooled:
    """Members read into recycled memory: those with an extension in `exts`, into the
    blocks of `pool` (see ShardReader's pool_extensions)."""

    exts: frozenset[str]
    pool: _native.BlockPool

    def __reduce__(self) -> tuple:  # (a reader sent to DataLoader's spawned workers gets a pool of its own)
        return _fresh_pool, (self.exts, self.pool.limit)


def _fresh_pool(exts: frozenset[str], limit: int) -> _Pooled:
    return _Pooled(exts, _native.BlockPool(limit))


class _PartReader:
    """Reads the wanted members of read batches of one local shard: memoryviews over the
    mapped file for the `mapped` extensions, one native pread call for the rest (into
    `pooled`'s blocks for its extensions)."""

    def __init__(self, fd: int, size: int, mapped: frozenset[str], maps: _MapCache | None,
                 pooled: _Pooled | None = None) -> None:
        self.fd, self.size, self.mapped, self.maps, self.pooled = fd, size, mapped, maps, pooled
        self.mapping: _Mapping | None = None

    def read(self, part: _Part, wanted: list[int], exts: list | None = None
             ) -> tuple[dict[int, bytes | memoryview], tuple[int, int, str | None] | None]:
        """{index in part: data} for the members `wanted`, and, if the file shrank or failed
        under the reader, (index of the first member not read, bytes it had, error).
        `exts`: the members' extensions where the caller has them (else from their names)."""
        views: list[bytes | memoryview] = []
        order = wanted
        if self.mapped and wanted:
            mapped = self.mapped
            is_mapped = ([exts[i] in mapped for i in wanted] if exts is not None else
                         [(split_key(part.names[i]) or ("", ""))[1] in mapped for i in wanted])
            by_map = [i for i, y in zip(wanted, is_mapped) if y]
            # a file that shrank is read with pread below, which delivers what it still
            # holds and names the first member cut off, as for any shard
            if by_map and os.fstat(self.fd).st_size >= self.size:
                if self.mapping is None:
                    self.mapping = self.maps.get(self.fd, self.size) if self.maps is not None else _Mapping(
                        self.fd, self.size)
                got_views = self.mapping.views([part.offsets[i] for i in by_map], [part.sizes[i] for i in by_map])
                if got_views is not None:
                    views = list[bytes | memoryview](got_views)
                    order = by_map + [i for i, y in zip(wanted, is_mapped) if not y]
        rest = order[len(views):]
        held = part.held
        if held is not None and rest:  # small members (labels) the index's reads brought in: no read of their own
            have = [i for i in rest if held[i] is not None]
            if have:
                views += [held[i] for i in have]  # type: ignore[misc]  # (not None: have)
                order = order[:len(order) - len(rest)] + have + [i for i in rest if held[i] is None]
                rest = order[len(views):]
        offsets = np.array([part.offsets[i] for i in rest], np.int64)
        sizes = np.array([part.sizes[i] for i in rest], np.int64)
        pooled = self.pooled
        flags = None
        if pooled is not None and rest:
            flags = np.array([exts[i] in pooled.exts for i in rest] if exts is not None else
                             [(split_key(part.names[i]) or ("", ""))[1] in pooled.exts for i in rest], np.uint8)
        read: Sequence[bytes | memoryview]
        if pooled is not None and flags is not None and flags.any():
            read, got, error = _native.read_ranges(self.fd, offsets, sizes, pooled.pool, flags)
        else:
            read, got, error = _native.read_ranges(self.fd, offsets, sizes)
        datas: list[bytes | memoryview] = [*views, *read]
        data_of = dict(zip(order, datas))
        if len(datas) < len(order):
            return data_of, (order[len(datas)], got, error)
        return data_of, None


def _plain_runs(part: _Part, grouper: Grouper, want: "_Want", reader: _PartReader) -> _Runs | None:
    """The read batch as runs of one sample's members (grouped natively, read in one
    call), Grouper brought on past it; None where the batch is not plain (a link, a name
    that is not printable ASCII) or the file failed under the reader: the caller then
    goes member by member, which names the fault."""
    if part.types.count("0") != len(part.types):
        return None
    grouped = _native.group_names(part.names, grouper.key)
    if grouped is None:
        return None
    rel_arr, exts, keys = grouped
    rel = rel_arr.tolist()
    base = grouper.index
    lo, hi, only = want.start - base, want.end - base, want.extensions
    if only is None:
        wanted = [i for i, r in enumerate(rel) if r >= 0 and lo <= r < hi]
    else:
        wanted = [i for i, r in enumerate(rel) if r >= 0 and lo <= r < hi and exts[i] in only]
    data_of, short = reader.read(part, wanted, exts)
    if short is not None:
        return None
    datas = [data_of.get(i) for i in range(len(rel))] if len(wanted) != len(rel) else [data_of[i] for i in wanted]
    fields = rel_arr >= 0
    if not fields.all():  # metadata members between a sample's fields are no part of it
        keep = np.flatnonzero(fields)
        at = keep.tolist()
        rs = rel_arr[keep]
        exts, datas = [exts[i] for i in at], [datas[i] for i in at]
    else:
        at = None
        rs = rel_arr
    n = len(rs)
    if not n:
        return _Runs([], [], [0], [], [], [], part)
    bounds = [0, *(np.flatnonzero(np.diff(rs)) + 1).tolist(), n]
    firsts = bounds[:-1]
    rl = rs[firsts].tolist()
    prev_key = grouper.key  # (a first run of rel 0 goes on with the sample before the batch)
    run_keys = [keys[r - 1] if r else prev_key for r in rl] if not rl[0] else [keys[r - 1] for r in rl]
    if keys:
        grouper.key = keys[-1]
        grouper.index = base + len(keys)
    return _Runs([base + r for r in rl], run_keys, bounds, exts, datas,  # type: ignore[arg-type]
                 firsts if at is None else [at[a] for a in firsts], part)


def stream_members(stream: IO[bytes], url: str, *, want: Want = _want_all
                   ) -> Iterator[tuple[Member, bytes | None, int | None] | TarFault]:
    """iter_stream over a shard stream, gunzipped when its first bytes say gzip, with
    Grouper's sample index; the stream's own exceptions (network, gzip CRC, length or
    deflate errors) come out as ShardReadError / ShardFormatError naming `url`."""
    grouper = Grouper()
    current: list[int | None] = [None]

    def want_name(name: str) -> bool:
        current[0] = g = grouper.group(name)
        return want(name, g)

    try:
        head = stream.peek(2)[:2] if hasattr(stream, "peek") else b""
        gz = head == _GZIP_MAGIC or (not head and url.endswith((".tgz", ".tar.gz")))
        for item in iter_stream(_gunzip(stream) if gz else stream, want=want_name):
            if isinstance(item, TarFault):
                yield item
            else:
                m, d = item
                # links do not go through want(): number them here
                yield m, d, current[0] if m.type == "0" else grouper.group(m.name)
    except (OSError, EOFError, zlib.error, MemoryError, OverflowError) as e:
        raise _stream_error(e, url) from e


def split_exts(exts: str | Sequence[str]) -> list[str]:
    items = exts.split(";") if isinstance(exts, str) else list(exts)
    return [e.strip().lower().lstrip(".") for e in items if e.strip()]


def _link_kind(t: str) -> str:
    return "hard link" if t == "1" else "symbolic link"


