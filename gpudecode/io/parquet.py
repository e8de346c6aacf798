"""Parquet files read as shards (issue 58): each row a sample, read by row groups on the
reader's threads, only the image column and the label column (and the columns a Loader's
`fields=` names, by pyarrow, a row group at a time: `_Layout.extra`).

The Hugging Face `datasets` layout is recognised as it lies: an `image` column of
{bytes, path} structs (what `datasets.Image()` writes) and a `label` column (a
ClassLabel: its names, from the schema's `huggingface` metadata, are `classes()`). Other
layouts: the first column named image, img, jpg, jpeg, png or webp (binary, or a struct
with `bytes`) and the first named label, labels, cls or target (integer); none found is
the file's error, naming the columns there are.

A row becomes Sample(key, {ext: image bytes, "cls": label}, url, index): `ext` from the
bytes' signature (jpg, png, webp, else the row's path suffix, else "img"), the key the
file's name without its suffix, a slash and the row's number (nine digits:
"train-00003-of-00010/000000042", unique across a set's files as a tar sample's key is
within its set), so the Loader reads a Parquet file exactly as a tar shard:
counts from the file's metadata (no scan), shuffle, rank shares, `even`, elastic resume
and random access (`loader.dataset`) by row. A row without image bytes is that sample's
Failure (its key); a file pyarrow cannot read is the shard's (ShardFormatError).

Local files, and any fsspec URL (s3://, gs://, https://, hf://) where fsspec is installed.
pyarrow is an optional extra: `pip install 'gpudecode[parquet]'`.

The image bytes are read as they lie where they can be: in a local file, an image column
chunk stored uncompressed and PLAIN-encoded (what `datasets` writes) has its pages walked
here (plain_pages: the Thrift page headers, the definition levels, each value's length and
first bytes), once, the walk kept from one epoch to the next. Its images are then read as
a tar shard's members are (one native call a slice of rows: bytes, the reader's pooled
blocks, or views of the mapping for `map_extensions`), so Parquet and tar cost the same
copies. A row group's first read in the Loader (pooled) reads its whole chunk in one read
and walks it in memory; otherwise the walk goes through small reads (_FileRegion).
pyarrow's read_row_group decodes each image into its own buffers first, a copy more than a
tar shard costs (bench/RESULTS.md has the rates). Anything else (compressed or dictionary pages,
repeated columns, a header this walk does not know, a damaged chunk, a remote file) is
read by pyarrow, whose errors are the file's."""
from __future__ import annotations

import json
import os
import struct as _struct
import threading
from typing import Any, Iterator, Sequence

import numpy as np

from .. import _native
from ..errors import ShardFormatError, ShardReadError
from . import shards as _shards
from .members import Failure, Sample, _Mapping, _MapCache, _Pooled

IMAGE_COLUMNS = ("image", "img", "jpg", "jpeg", "png", "webp")
LABEL_COLUMNS = ("label", "labels", "cls", "target")
ROWS_A_READ = 256  # rows a list of samples holds (a row group is read in slices of this many)


def is_parquet(url: str) -> bool:
    return url.split("?", 1)[0].lower().endswith(_shards.PARQUET_SUFFIXES)


def _pyarrow(url: str) -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError as e:
        raise ShardReadError(f"reading Parquet needs pyarrow ({e}): pip install 'gpudecode[parquet]'",
                             shard=url) from e
    return pq


_FOOTERS: dict[tuple[int, int, int, int], Any] = {}  # a local file's parsed footer (FileMetaData), by _stat_key


def _keep(cache: dict, key: Any, value: Any) -> None:
    """value kept under key in one of the per-file caches (_FOOTERS, _CLASSES): at most 4,096
    files each, all dropped past that (a file's entry is cheap to make again)."""
    if len(cache) >= 4096:
        cache.clear()
    cache[key] = value


def _open(url: str, key: tuple[int, int, int, int] | None = None) -> Any:
    """The file as pyarrow's ParquetFile (local, or through fsspec). A local file's footer
    is parsed once (the reader's count, then each read of it, reuse it; by its stat:
    `key`, _stat_key's, where the caller has it)."""
    pq = _pyarrow(url)
    try:
        if _shards.is_local(url):
            key = key if key is not None else _stat_key(url)
            pf = pq.ParquetFile(_shards.local_path(url), memory_map=True,
                                metadata=_FOOTERS.get(key) if key is not None else None)
            if key is not None and key not in _FOOTERS:
                _keep(_FOOTERS, key, pf.metadata)
            return pf
        import fsspec

        return pq.ParquetFile(fsspec.open(url, "rb").open())
    except ImportError as e:
        raise ShardReadError(f"a remote Parquet file needs fsspec ({e})", shard=url) from e
    except OSError as e:
        raise ShardReadError(f"cannot open Parquet file: {e}", shard=url) from e
    except Exception as e:  # pyarrow's ArrowInvalid (a bad footer, magic, ...)
        raise ShardFormatError(f"not a readable Parquet file: {type(e).__name__}: {e}", shard=url) from e


def _columns(pf: Any, url: str) -> tuple[str, bool, str | None]:
    """(image column, whether it is a struct with `bytes`, label column or None)."""
    import pyarrow as pa

    schema = pf.schema_arrow
    names = list(schema.names)
    image = next((n for n in names if n.lower() in IMAGE_COLUMNS), None)
    if image is None:
        raise ShardFormatError(f"no image column (one of {', '.join(IMAGE_COLUMNS)}) among the columns "
                               f"{', '.join(names)}", shard=url)
    t = schema.field(image).type
    struct = pa.types.is_struct(t)
    if struct and t.get_field_index("bytes") < 0:
        raise ShardFormatError(f"image column {image!r} is a struct without 'bytes' ({t})", shard=url)
    if not struct and not (pa.types.is_binary(t) or pa.types.is_large_binary(t)):
        raise ShardFormatError(f"image column {image!r} holds {t}, not bytes", shard=url)
    label = next((n for n in names if n.lower() in LABEL_COLUMNS and pa.types.is_integer(schema.field(n).type)), None)
    return image, struct, label


def column_names(url: str) -> list[str]:
    """The file's columns, by name (its schema: nothing is scanned)."""
    with _open(url) as pf:
        return list(pf.schema_arrow.names)


def count(url: str) -> int:
    """Rows of the file (its metadata: nothing is scanned)."""
    with _open(url) as pf:
        return int(pf.metadata.num_rows)


def _stat_key(url: str) -> tuple[int, int, int, int] | None:
    """A local file's (device, inode, size, mtime): what keeps its walk and its classes;
    None for a remote file, or one that cannot be stat'ed (its reader names it)."""
    if not _shards.is_local(url):
        return None
    try:
        st = os.stat(_shards.local_path(url))
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


_CLASSES: dict[tuple[int, int, int, int], tuple[str, ...]] = {}  # a local file's classes, by _stat_key


def classes(url: str) -> tuple[str, ...]:
    """The label column's class names where `datasets` wrote them (a ClassLabel), else ();
    a local file's are kept (by its stat: a file rewritten is read again), so that
    `reader.classes` opens it once."""
    key = _stat_key(url)
    if key is not None and key in _CLASSES:
        return _CLASSES[key]
    names = _read_classes(url, key)
    if key is not None:
        _keep(_CLASSES, key, names)
    return names


def _read_classes(url: str, key: tuple[int, int, int, int] | None) -> tuple[str, ...]:
    with _open(url, key) as pf:
        meta = pf.schema_arrow.metadata or {}
        label = _columns(pf, url)[2]
    raw = meta.get(b"huggingface")
    if not raw:
        return ()
    try:
        features = json.loads(raw)["info"]["features"]
    except (ValueError, KeyError, TypeError):
        return ()
    f = features.get(label, {}) if label else {}
    return tuple(f.get("names", ())) if isinstance(f, dict) and f.get("_type") == "ClassLabel" else ()


class _Unsupported(Exception):
    """A column chunk plain_pages does not read (pyarrow reads it instead)."""


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        out |= (b & 0x7F) << shift
        if b < 0x80:
            return out, pos
        shift += 7
        if shift > 63:
            raise _Unsupported("a varint past 64 bits")


def _zigzag(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def _thrift_value(buf: bytes, pos: int, kind: int, depth: int) -> tuple[Any, int]:
    """One value of Thrift's compact protocol (integers and structs kept; binaries,
    doubles, lists and maps skipped: a page header needs none of them)."""
    if kind in (1, 2):  # a boolean field: its value is the type
        return kind == 1, pos
    if kind == 3:
        return buf[pos], pos + 1
    if kind in (4, 5, 6):
        v, pos = _varint(buf, pos)
        return _zigzag(v), pos
    if kind == 7:
        return None, pos + 8
    if kind == 8:
        n, pos = _varint(buf, pos)
        return None, pos + n
    if kind in (9, 10):  # list, set: size and element type, then the elements
        head = buf[pos]
        pos += 1
        n, elem = head >> 4, head & 0x0F
        if n == 15:
            n, pos = _varint(buf, pos)
        if n > len(buf) - pos:  # (every element takes a byte at least)
            raise _Unsupported("a list longer than its bytes")
        for _ in range(n):
            pos = pos + 1 if elem in (1, 2) else _thrift_value(buf, pos, elem, depth + 1)[1]
        return None, pos
    if kind == 11:  # map: size, then key and value types
        n, pos = _varint(buf, pos)
        if 2 * n > len(buf) - pos:
            raise _Unsupported("a map longer than its bytes")
        if n:
            kv = buf[pos]
            pos += 1
            for _ in range(n):
                for t in (kv >> 4, kv & 0x0F):
                    pos = pos + 1 if t in (1, 2) else _thrift_value(buf, pos, t, depth + 1)[1]
        return None, pos
    if kind == 12:
        return _thrift_struct(buf, pos, depth + 1)
    raise _Unsupported(f"Thrift type {kind}")


def _thrift_struct(buf: bytes, pos: int, depth: int = 0) -> tuple[dict, int]:
    if depth > 8:
        raise _Unsupported("Thrift structs nested too deep")
    fields: dict[int, Any] = {}
    fid = 0
    while True:
        head = buf[pos]
        pos += 1
        if head == 0:
            return fields, pos
        if head >> 4:
            fid += head >> 4
        else:
            v, pos = _varint(buf, pos)
            fid = _zigzag(v)
        fields[fid], pos = _thrift_value(buf, pos, head & 0x0F, depth)


def _levels(buf: Any, pos: int, end: int, count: int, width: int) -> np.ndarray:
    """`count` definition levels of `width` bits, RLE/bit-packed hybrid, from buf[pos:end]."""
    runs = []
    got = 0
    nbytes = (width + 7) // 8
    while got < count:
        if pos >= end:
            raise _Unsupported("definition levels cut short")
        head, pos = _varint(buf, pos)
        if head & 1:  # bit-packed: groups of 8 values
            size = (head >> 1) * width
            if size == 0 or pos + size > end:
                raise _Unsupported("a bit-packed run past its levels")
            bits = np.unpackbits(np.frombuffer(bytes(buf[pos:pos + size]), np.uint8), bitorder="little")
            vals = bits.reshape(-1, width) @ (1 << np.arange(width))
            pos += size
        else:  # a run of one value
            n = min(head >> 1, count - got)
            if n == 0 or pos + nbytes > end:
                raise _Unsupported("an empty or cut run of levels")
            vals = np.full(n, int.from_bytes(buf[pos:pos + nbytes], "little"))
            pos += nbytes
        runs.append(vals)
        got += len(vals)
    return np.concatenate(runs)[:count]


def _check_values(n: Any, encoding: Any, before: int, rows: int, size: int) -> None:
    """A data page's count and encoding, before its levels are decoded: a count past the
    rows, or past what a page of `size` bytes plausibly holds (a run of levels can say any
    count in two bytes), would have them allocate what the page cannot hold; pyarrow reads
    such a page (writers keep pages to about 20,000 rows: pyarrow's
    data_page_row_count_limit)."""
    if encoding != 0 or not isinstance(n, int) or n < 0 or before + n > rows or n > 64 * size + 1024:
        raise _Unsupported("not PLAIN, or more values than rows")


def _page_header(chunk: Any, pos: int) -> tuple[dict, int]:
    """The page header at `pos`, parsed from a window of the chunk's bytes (a larger one
    where it runs past: statistics may be long), and the position after it."""
    for span in (256, 4096, 1 << 20):
        window = bytes(chunk[pos:pos + span])
        try:
            header, used = _thrift_struct(window, 0)
            return header, pos + used
        except IndexError:
            if len(window) < span:
                raise _Unsupported("a page header cut short") from None
    raise _Unsupported("a page header over 1 MiB")


def plain_pages(chunk: Any, rows: int, max_def: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(offsets, lengths, heads) of each row's value in an uncompressed column chunk (bytes,
    a memoryview or a _FileRegion) of PLAIN BYTE_ARRAY data pages (v1 or v2, no
    repetition): a null value's length is -1; heads its first 12 bytes (zeros past its end),
    for the format's signature. _Unsupported for anything else (pyarrow reads it)."""
    width = max_def.bit_length()
    offs: list[int] = []
    lens: list[int] = []
    heads: list[bytes] = []
    count = 0
    pos = 0
    while pos < len(chunk):
        header, pos = _page_header(chunk, pos)
        kind, size = header.get(1), header.get(3)
        if not isinstance(size, int) or size < 0 or pos + size > len(chunk):
            raise _Unsupported("a page past its chunk")
        p, end = pos, pos + size
        pos = end
        if kind == 0 and isinstance(header.get(5), dict):  # data page v1: levels with their length first
            d = header[5]
            n, encoding = d.get(1), d.get(2)
            _check_values(n, encoding, count, rows, size)
            levels = None
            if max_def:
                if d.get(3) != 3 or p + 4 > end:
                    raise _Unsupported("definition levels not RLE")
                length = int.from_bytes(chunk[p:p + 4], "little")
                if length > end - p - 4:
                    raise _Unsupported("levels past the page")
                levels = _levels(bytes(chunk[p + 4:p + 4 + length]), 0, length, n, width)
                p += 4 + length
        elif kind == 3 and isinstance(header.get(8), dict):  # v2: the levels' lengths in the header
            d = header[8]
            n, encoding, dl, rl = d.get(1), d.get(4), d.get(5, 0), d.get(6, 0)
            _check_values(n, encoding, count, rows, size)
            if rl or not isinstance(dl, int) or not 0 <= dl <= end - p:
                raise _Unsupported("repetition levels, or levels past the page")
            levels = _levels(bytes(chunk[p:p + dl]), 0, dl, n, width) if max_def else None
            p += dl
        elif kind == 1:  # an index page: nothing of the rows'
            continue
        else:
            raise _Unsupported(f"page type {kind}")
        present = None if levels is None or (levels == max_def).all() else (levels == max_def).tolist()
        region = isinstance(chunk, _FileRegion)
        for k in range(n):  # (each value's length, then its bytes)
            if present is not None and not present[k]:
                offs.append(0)
                lens.append(-1)
                continue
            if p + 4 > end:
                raise _Unsupported("a value past its page")
            if region:  # (its length and head in one read)
                b = chunk.read(p, 16)
                length = int.from_bytes(b[:4], "little")
                heads.append(b[4:4 + min(length, 12)])
            else:
                length = _U32(chunk, p)[0]
            offs.append(p + 4)
            lens.append(length)
            p += 4 + length
        if p > end:
            raise _Unsupported("a value past its page")
        count += n
    if count != rows:
        raise _Unsupported("fewer values than rows")
    offsets, lengths = np.array(offs, np.int64), np.array(lens, np.int64)
    if isinstance(chunk, _FileRegion):
        real = np.flatnonzero(lengths >= 0)
        head = np.zeros((len(offsets), 12), np.uint8)
        if len(real):
            head[real] = np.frombuffer(b"".join(bytes(h).ljust(12, b"\0") for h in heads), np.uint8).reshape(-1, 12)
        return offsets, lengths, head
    return offsets, lengths, _heads(chunk, offsets, lengths)


_U32 = _struct.Struct("<I").unpack_from


def _heads(buf: Any, offsets: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Each value's first 12 bytes (zeros past its end, and for a null) from an in-memory
    chunk: one gather."""
    raw = np.frombuffer(buf, np.uint8)
    if not len(raw):
        return np.zeros((len(offsets), 12), np.uint8)
    idx = offsets[:, None] + np.arange(12)
    inside = idx < (offsets + np.maximum(lengths, 0))[:, None]
    return np.where(inside, raw[np.minimum(idx, len(raw) - 1)], 0).astype(np.uint8)


class _FileRegion:
    """`size` bytes of a file from `start`, read as plain_pages slices them: small preads
    (a window of WINDOW bytes kept), so a walk reads page headers, levels, lengths and
    heads alone (a fresh mapping of the file costs a page fault an image, more than these
    reads: bench/RESULTS.md). A file shorter than its metadata says is
    _Unsupported (pyarrow then reads it, and names it)."""

    WINDOW = 512

    def __init__(self, fd: int, start: int, size: int) -> None:
        self.fd, self.start, self.size = fd, start, size
        self.lo, self.buf = 0, b""

    def __len__(self) -> int:
        return self.size

    def read(self, a: int, n: int) -> bytes:
        """n bytes from a (fewer at the end), in one pread of their own (a value's length and
        head: the values lie far apart, no window would hold two)."""
        n = min(n, self.size - a)
        b = os.pread(self.fd, n, self.start + a) if n > 0 else b""
        if len(b) < n:
            raise _Unsupported("the file is shorter than its metadata says")
        return b

    def _hold(self, a: int, b: int) -> None:
        if a < self.lo or b > self.lo + len(self.buf):
            want = min(max(b - a, self.WINDOW), self.size - a)
            self.buf, self.lo = os.pread(self.fd, want, self.start + a), a
            if len(self.buf) < min(b, self.size) - a:
                raise _Unsupported("the file is shorter than its metadata says")

    def __getitem__(self, k: slice) -> bytes:
        a, b = max(k.start or 0, 0), min(self.size if k.stop is None else k.stop, self.size)
        if a >= b:
            return b""
        self._hold(a, b)
        return self.buf[a - self.lo:b - self.lo]


class _Group:
    """A row group walked in place: each row's image as its offset in the file and its
    length (-1: null), its format by signature (else its path's suffix), and its label
    (valid where not null)."""

    def __init__(self, offsets: np.ndarray, lengths: np.ndarray, exts: list[str], labels: np.ndarray | None,
                 valid: np.ndarray | None) -> None:
        self.offsets, self.lengths, self.exts, self.labels, self.valid = offsets, lengths, exts, labels, valid
        self.end = int((offsets + np.maximum(lengths, 0)).max()) if len(offsets) else 0

    def rows(self, url: str, path: str, offset: int, n: int, first: int, mapped: frozenset[str],
             maps: _MapCache | None, pooled: _Pooled | None, extensions: frozenset[str] | None,
             fresh: tuple[memoryview, int] | None = None) -> list[Sample | Failure] | None:
        """Rows offset..offset+n-1 as Samples, their image bytes read as the reader reads a
        tar member (views of the mapping for `mapped` formats, the pool's blocks for its
        formats, else bytes), or views of `fresh` (the chunk the walk just read, and where
        in the file it starts); None if the file no longer holds them."""
        at = self.offsets[offset:offset + n]
        size = np.maximum(self.lengths[offset:offset + n], 0)
        exts = self.exts[offset:offset + n]
        hole = (self.lengths[offset:offset + n] <= 0).tolist()
        datas: list[Any] = [b""] * n
        if fresh is not None:
            chunk, start = fresh
            for k, (a, m) in enumerate(zip((at - start).tolist(), size.tolist())):
                if not hole[k]:
                    datas[k] = chunk[a:a + m]
            return self._finish(url, offset, n, first, datas, hole, exts, extensions)
        by_map = [k for k in range(n) if not hole[k] and exts[k] in mapped]
        rest = [k for k in range(n) if not hole[k] and exts[k] not in mapped]
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None
        try:
            file_size = os.fstat(fd).st_size
            if file_size < self.end:
                return None
            if by_map:
                view = (maps.get(fd, file_size) if maps is not None else _Mapping(fd, file_size)).view
                for k in by_map:
                    datas[k] = view[int(at[k]):int(at[k] + size[k])]
            if rest:
                read: Sequence[bytes | memoryview]
                if pooled is not None:
                    flags = np.array([exts[k] in pooled.exts for k in rest], np.uint8)
                    read, _, error = _native.read_ranges(fd, at[rest], size[rest], pooled.pool, flags)
                else:
                    read, _, error = _native.read_ranges(fd, at[rest], size[rest])
                if error is not None or len(read) < len(rest):
                    return None
                for k, d in zip(rest, read):
                    datas[k] = d
        finally:
            os.close(fd)
        return self._finish(url, offset, n, first, datas, hole, exts, extensions)

    def _finish(self, url: str, offset: int, n: int, first: int, datas: list[Any], hole: list[bool],
                exts: list[str], extensions: frozenset[str] | None) -> list[Sample | Failure]:
        labels: list[bytes | None] = [None] * n
        if self.labels is not None and self.valid is not None and (extensions is None or "cls" in extensions):
            values = self.labels[offset:offset + n].tolist()
            labels = [b"%d" % v if ok else None for v, ok in zip(values, self.valid[offset:offset + n].tolist())]
        return _rows(url, first, datas, hole, exts, labels, extensions)


WHOLE_CHUNK = 64 << 20  # a chunk up to this many bytes is read whole into a pooled block by its first walk


def _walk(pf: Any, url: str, g: int, image: str, struct: bool, label: str | None,
          pooled: _Pooled | None = None) -> tuple[_Group | None, tuple[memoryview, int] | None]:
    """Row group g's image column chunk walked by plain_pages through small reads
    (_FileRegion; its labels and, where a signature is not known, paths read by pyarrow: their columns
    alone), or None where pyarrow reads the group instead (compressed, dictionary
    pages, ... or damaged: pyarrow then names what is wrong)."""
    target = f"{image}.bytes" if struct else image
    rg = pf.metadata.row_group(g)
    for i in range(rg.num_columns):
        col = rg.column(i)
        if col.path_in_schema != target:
            continue
        leaf = pf.schema.column(i)
        if (col.compression != "UNCOMPRESSED" or col.has_dictionary_page or leaf.max_repetition_level
                or leaf.physical_type != "BYTE_ARRAY"):
            return None, None
        start, size = col.data_page_offset, col.total_compressed_size
        fresh = None
        try:
            fd = os.open(_shards.local_path(url), os.O_RDONLY)
            try:
                if not (0 <= start and 0 < size <= os.fstat(fd).st_size - start):
                    return None, None
                if pooled is not None and size <= WHOLE_CHUNK:
                    # (the Loader's reads: the chunk in one read into a recycled block, walked there,
                    # its images handed out as views of it; later epochs read the images alone)
                    read, _, error = _native.read_ranges(fd, np.array([start], np.int64), np.array([size], np.int64),
                                                         pooled.pool, np.ones(1, np.uint8))
                    if error is None and len(read) == 1 and len(read[0]) == size:
                        fresh = (memoryview(read[0]), start)
                where: Any = fresh[0] if fresh is not None else _FileRegion(fd, start, size)
                offsets, lengths, heads = plain_pages(where, rg.num_rows, leaf.max_definition_level)
            finally:
                os.close(fd)
            offsets += start
        except (_Unsupported, IndexError, ValueError, OSError, _struct.error):
            return None, None
        paths: list[Any] = [None] * len(offsets)
        exts = _exts(heads, paths)
        if struct and "img" in exts and pf.schema_arrow.field(image).type.get_field_index("path") >= 0:
            c = pf.read_row_group(g, columns=[f"{image}.path"], use_threads=False).column(image).combine_chunks()
            exts = _exts(heads, c.field("path").to_pylist())
        labels = valid = None
        if label is not None:
            c = pf.read_row_group(g, columns=[label], use_threads=False).column(label).combine_chunks()
            valid = c.is_valid().to_numpy(zero_copy_only=False)
            labels = c.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        return _Group(offsets, lengths, exts, labels, valid), fresh
    return None, None


class _Layout:
    """A local file as walked: its columns, rows a row group, and the groups walked so far
    (None: pyarrow reads that group)."""

    def __init__(self, image: str, struct: bool, label: str | None, rows: list[int], names: Sequence[str] = ()) -> None:
        self.image, self.struct, self.label, self.rows = image, struct, label, rows
        self.names = list(names)  # (every column's name: the ones a Loader's fields= asks for are read too)
        self.groups: dict[int, _Group | None] = {}

    def extra(self, extensions: frozenset[str] | None) -> list[str]:
        """The columns read as fields (their names, lower-cased, in `extensions`): neither
        the image column nor the label column nor one named as an image column is."""
        if not extensions:
            return []
        return [n for n in self.names if n.lower() in extensions and n not in (self.image, self.label)
                and n.lower() not in IMAGE_COLUMNS]


# Files walked, kept from one epoch to the next (their stat: device, inode, size, mtime):
# a later epoch reads the images with no walk and no pyarrow call; a file replaced or
# rewritten is walked anew. About 33 bytes a row; LAYOUT_ROWS rows at most (oldest out
# first). The lock is made anew in a forked child (a parent's thread may hold it).
_LAYOUTS: dict[tuple[int, int, int, int], _Layout] = {}
_LAYOUT_ROWS_HELD = [0]
_LAYOUT_LOCK = threading.Lock()
LAYOUT_ROWS = 1 << 21


def _new_lock_in_child() -> None:
    global _LAYOUT_LOCK
    _LAYOUT_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_in_child)


def _remember(key: tuple[int, int, int, int], layout: _Layout) -> None:
    with _LAYOUT_LOCK:
        old = _LAYOUTS.pop(key, None)
        _LAYOUT_ROWS_HELD[0] += sum(layout.rows) - (sum(old.rows) if old is not None else 0)
        _LAYOUTS[key] = layout
        while _LAYOUT_ROWS_HELD[0] > LAYOUT_ROWS and len(_LAYOUTS) > 1:
            _LAYOUT_ROWS_HELD[0] -= sum(_LAYOUTS.pop(next(iter(_LAYOUTS))).rows)


def forget_layouts() -> None:
    """Drop every walk kept (the next read of each file walks it again)."""
    with _LAYOUT_LOCK:
        _LAYOUTS.clear()
        _LAYOUT_ROWS_HELD[0] = 0


def sample_lists(url: str, *, start: int = 0, stop: int | None = None, extensions: frozenset[str] | None = None,
                 mapped: frozenset[str] = frozenset(), maps: _MapCache | None = None,
                 pooled: _Pooled | None = None) -> Iterator[list[Sample | Failure]]:
    """Rows start..stop-1 as Samples, ROWS_A_READ at a time, reading only the row groups
    they lie in; a file that cannot be read is one fatal Failure (the last item). A
    local file's groups stored as _walk reads them are read in place (module doc)."""
    pf = None
    try:
        layout = path = None
        key = _stat_key(url)  # (None where it cannot be stat'ed: _open names it)
        if _shards.is_local(url):
            path = _shards.local_path(url)
            layout = _LAYOUTS.get(key) if key is not None else None
        if layout is None:
            pf = _open(url, key)
            image, struct, label = _columns(pf, url)
            meta = pf.metadata
            layout = _Layout(image, struct, label, [meta.row_group(g).num_rows for g in range(meta.num_row_groups)],
                             pf.schema_arrow.names)
            if key is not None:
                _remember(key, layout)
        image, struct, label = layout.image, layout.struct, layout.label
        extra = layout.extra(extensions)  # (columns a Loader's fields= names: read by pyarrow, a group at a time)
        total = sum(layout.rows)
        end = total if stop is None else min(stop, total)
        first = 0
        for g, rows in enumerate(layout.rows):
            lo, hi = max(start, first), min(end, first + rows)
            if lo < hi:
                group = layout.groups.get(g, False) if path is not None else None
                fresh = None
                if group is False:
                    pf = pf or _open(url)
                    # (the whole chunk read at once only where the whole group is wanted)
                    group, fresh = _walk(pf, url, g, image, struct, label,
                                         pooled if (lo, hi) == (first, first + rows) else None)
                    layout.groups[g] = group
                table = None
                more = None
                if extra:
                    pf = pf or _open(url)
                    more = pf.read_row_group(g, columns=extra, use_threads=False)
                for a in range(lo, hi, ROWS_A_READ):
                    b = min(hi, a + ROWS_A_READ)
                    got = group.rows(url, path, a - first, b - a, a, mapped, maps, pooled, extensions, fresh) \
                        if isinstance(group, _Group) and path is not None else None
                    if got is not None:
                        yield _with_columns(got, more, a - first, a) if more is not None else got
                        continue
                    if isinstance(group, _Group):  # the file changed under it: pyarrow reads it, and names it
                        group = layout.groups[g] = None
                    if table is None:
                        pf = pf or _open(url)  # (stat again: the file may have changed)
                        # (use_threads=False: the reader's threads already read files side by side)
                        table = pf.read_row_group(g, columns=[image] + ([label] if label else []), use_threads=False)
                    read = _samples(url, table.slice(a - first, b - a), a, image, struct, label, extensions)
                    yield _with_columns(read, more, a - first, a) if more is not None else read
            first += rows
            if first >= end:
                break
    except (ShardFormatError, ShardReadError) as e:
        yield [Failure(e, fatal=True)]
    except Exception as e:  # pyarrow's errors on a damaged row group
        yield [Failure(ShardFormatError(f"Parquet file cannot be read: {type(e).__name__}: {e}", shard=url), fatal=True)]
    finally:
        if pf is not None:
            pf.close()


def _with_columns(rows: list[Sample | Failure], table: Any, at: int, first: int) -> list[Sample | Failure]:
    """Each Sample of `rows` (the file's rows from `first`, the group's from `at`) with the
    values of `table`'s columns in its fields, by the column's lower-cased name, as pyarrow
    gives them (a str, an int, a list, bytes); a null is no field."""
    n = max((r.index - first + 1 for r in rows if isinstance(r, Sample)), default=0)
    cols = {name.lower(): table.column(name).slice(at, n).to_pylist() for name in table.column_names}
    for r in rows:
        if isinstance(r, Sample):
            for name, values in cols.items():
                v = values[r.index - first]
                if v is not None:
                    r.fields[name] = v
    return rows


def _binary_views(arr: Any) -> tuple[list[Any], np.ndarray, np.ndarray]:
    """A (large) binary array's values as memoryviews over its data buffer (no copy: the
    image bytes stay where pyarrow read them), which are null or empty, and each value's
    first 12 bytes (zeros past its end) for the format's signature."""
    import pyarrow as pa

    validity, offsets_buf, data_buf = arr.buffers()[:3]
    wide = pa.types.is_large_binary(arr.type)
    offsets = np.frombuffer(offsets_buf, np.int64 if wide else np.int32)[arr.offset:arr.offset + len(arr) + 1]
    raw = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    starts, ends = offsets[:-1].astype(np.int64), offsets[1:].astype(np.int64)
    empty = ends <= starts
    if validity is not None:
        empty |= arr.is_null().to_numpy(zero_copy_only=False)
    at = starts[:, None] + np.arange(12)
    heads = np.where(at < ends[:, None], raw[np.minimum(at, max(len(raw) - 1, 0))] if len(raw) else 0, 0)
    data = raw.data  # (a memoryview of the buffer)
    return [data[a:b] for a, b in zip(starts.tolist(), ends.tolist())], empty, heads.astype(np.uint8)


def _exts(heads: np.ndarray, paths: list[Any]) -> list[str]:
    """Each value's format from its signature (jpg, png, webp), else its path's suffix, else "img"."""
    jpeg = (heads[:, 0] == 0xFF) & (heads[:, 1] == 0xD8) & (heads[:, 2] == 0xFF)
    png = (heads[:, :8] == np.frombuffer(b"\x89PNG\r\n\x1a\n", np.uint8)).all(axis=1)
    webp = (heads[:, :4] == np.frombuffer(b"RIFF", np.uint8)).all(axis=1) & \
        (heads[:, 8:12] == np.frombuffer(b"WEBP", np.uint8)).all(axis=1)
    out = []
    for k in range(len(heads)):
        if jpeg[k]:
            out.append("jpg")
        elif png[k]:
            out.append("png")
        elif webp[k]:
            out.append("webp")
        else:
            p = paths[k]
            out.append(p.rsplit(".", 1)[1].lower() if isinstance(p, str) and "." in p else "img")
    return out


def _samples(url: str, table: Any, first: int, image: str, struct: bool, label: str | None,
             extensions: frozenset[str] | None) -> list[Sample | Failure]:
    col = table.column(image).combine_chunks()
    values = col.field("bytes") if struct else col
    if struct and col.null_count:  # a null struct: its bytes null too
        import pyarrow.compute as pc

        values = pc.if_else(col.is_null(), None, values)
    datas, empty, heads = _binary_views(values)
    n = len(datas)
    paths = (col.field("path").to_pylist() if struct and col.type.get_field_index("path") >= 0 else [None] * n)
    return _rows(url, first, datas, empty.tolist(), _exts(heads, paths), _labels(table, label, extensions, n),
                 extensions)


def _labels(table: Any, label: str | None, extensions: frozenset[str] | None, n: int) -> list[bytes | None]:
    if label is None or table is None or not (extensions is None or "cls" in extensions):
        return [None] * n
    return [None if v is None else b"%d" % v for v in table.column(label).to_pylist()]


def key_prefix(url: str) -> str:
    """The part of every key of the file's rows before the row number: its name without
    its suffix, and a slash."""
    name = url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    return name.rsplit(".", 1)[0] + "/"


def _rows(url: str, first: int, datas: list[Any], hole: list[bool], exts: list[str], labels: list[bytes | None],
          extensions: frozenset[str] | None) -> list[Sample | Failure]:
    """The rows as Samples ({ext: image bytes, "cls": label}), a row without image bytes
    the Failure of its key."""
    out: list[Sample | Failure] = []
    prefix = key_prefix(url)
    for k in range(len(datas)):
        index = first + k
        key = "%s%09d" % (prefix, index)
        if hole[k]:
            out.append(Failure(ShardFormatError("the row holds no image bytes", shard=url, key=key), fatal=False))
            continue
        fields: dict[str, Any] = {}
        if extensions is None or exts[k] in extensions:
            fields[exts[k]] = datas[k]
        if labels[k] is not None:
            fields["cls"] = labels[k]
        out.append(Sample(key, fields, url, index))
    return out


def read_sample(url: str, index: int, extensions: frozenset[str] | None = None) -> Sample:
    """Row `index` as a Sample (random access: its row group's slice is read)."""
    for items in sample_lists(url, start=index, stop=index + 1, extensions=extensions):
        for item in items:
            if isinstance(item, Sample):
                return item
            raise item.error
    raise IndexError(f"row {index} of Parquet file {url!r} is not there")


def _ext_of(head: bytes, path: Any) -> str:
    """A value's format from its first 12 bytes, else its path's suffix, else "img"."""
    heads = np.frombuffer(bytes(head[:12]).ljust(12, b"\0"), np.uint8).reshape(1, 12)
    return _exts(heads, [path])[0]


def hf_dataset(ds: Any) -> Any:
    """A Hugging Face `datasets.Dataset` as it is (its rows, through its indices where it
    was shuffled, selected or filtered): a made file list (io/files.made) whose sample i
    is row i's image bytes, a view of the Dataset's memory-mapped Arrow table (no copy),
    and its label; the image column is its datasets.Image() feature (else one named as
    IMAGE_COLUMNS), the label its ClassLabel (whose names are the classes) or an integer
    column named as LABEL_COLUMNS. A row without image bytes is that sample's error.

    Raises:
        TypeError: no image column, or a transform set on the Dataset (set_transform,
            with_transform: the Loader decodes and transforms the images itself)."""
    import pyarrow as pa

    from .files import made

    fmt = getattr(ds, "format", None) or {}
    if fmt.get("type") == "custom":
        raise TypeError("Loader() cannot apply this Dataset's own transform (set_transform or with_transform): it "
                        "decodes and transforms the images itself; give the transform to the Loader (transform=) "
                        "and the Dataset without one (ds.reset_format()).")
    features = ds.features
    image = next((k for k, f in features.items() if type(f).__name__ == "Image"), None) or next(
        (k for k in features if k.lower() in IMAGE_COLUMNS), None)
    if image is None:
        raise TypeError(f"Loader() reads a Dataset's images from an Image column (datasets.Image()); this one has "
                        f"the columns {', '.join(features)}.")
    table = getattr(ds.data, "table", ds.data)
    label = next((k for k, f in features.items() if type(f).__name__ == "ClassLabel"), None) or next(
        (k for k in features if k.lower() in LABEL_COLUMNS and pa.types.is_integer(table.schema.field(k).type)), None)
    classes = tuple(features[label].names) if label is not None and type(features[label]).__name__ == "ClassLabel" \
        else ()
    col = table.column(image)
    starts = np.cumsum([0] + [len(c) for c in col.chunks])
    parts = []
    for c in col.chunks:
        values = c.field("bytes") if pa.types.is_struct(c.type) else c
        paths = c.field("path") if pa.types.is_struct(c.type) and c.type.get_field_index("path") >= 0 else None
        _, offs_buf, data_buf = values.buffers()[:3]
        wide = pa.types.is_large_binary(values.type)
        offs = np.frombuffer(offs_buf, np.int64 if wide else np.int32)[values.offset:values.offset + len(values) + 1]
        null = (c.is_null().to_numpy(zero_copy_only=False) | values.is_null().to_numpy(zero_copy_only=False)) \
            if (c.null_count or values.null_count) else None
        parts.append((offs, memoryview(data_buf) if data_buf is not None else memoryview(b""), null, paths))
    indices = getattr(ds, "_indices", None)
    rows = (np.asarray(getattr(indices, "table", indices).column(0).to_numpy(), np.int64) if indices is not None
            else None)
    n = len(ds)
    labels = valid = None
    if label is not None:
        lab = table.column(label).combine_chunks()
        valid = lab.is_valid().to_numpy(zero_copy_only=False)
        labels = lab.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        if rows is not None:
            labels, valid = labels[rows], valid[rows]

    def where(i: int) -> tuple[Any, int]:
        r = int(rows[i]) if rows is not None else i
        k = int(np.searchsorted(starts, r, "right")) - 1
        return parts[k], r - int(starts[k])

    def data(i: int) -> memoryview:
        (offs, buf, null, _), j = where(i)
        if null is not None and null[j] or offs[j + 1] <= offs[j]:
            raise ValueError("the row holds no image bytes")
        return buf[int(offs[j]):int(offs[j + 1])]

    def ext(i: int) -> str:
        (offs, buf, _, paths), j = where(i)
        head = buf[int(offs[j]):min(int(offs[j]) + 12, int(offs[j + 1]))]
        return _ext_of(head, paths[j].as_py() if paths is not None else None)

    def label_of(i: int) -> int | None:
        return int(labels[i]) if labels is not None and valid is not None and valid[i] else None

    def make(i: int) -> tuple[Any, int | None]:
        return data(i), label_of(i)

    others = [k for k in features if k not in (image, label) and k.lower() not in IMAGE_COLUMNS]

    def extra(i: int, names: frozenset[str]) -> dict[str, Any]:  # (the columns a Loader's fields= names)
        r = int(rows[i]) if rows is not None else i
        got = {k.lower(): table.column(k)[r].as_py() for k in others if k.lower() in names}
        return {k: v for k, v in got.items() if v is not None}  # (a null is no field)

    name = f"Dataset({n} rows, {image!r}{', ' + repr(label) if label else ''})"
    return made(name, n, make, ext, label=label_of, classes=classes, rebuild=(hf_dataset, (ds,)), extra=extra,
                extra_names=others)
