"""Parquet files read as shards (issue 58): each row a sample, read by row groups on the
reader's threads, only the image column and the label column.

The Hugging Face `datasets` layout is recognised as it lies: an `image` column of
{bytes, path} structs (what `datasets.Image()` writes) and a `label` column (a
ClassLabel: its names, from the schema's `huggingface` metadata, are `classes()`). Other
layouts: the first column named image, img, jpg, jpeg, png or webp (binary, or a struct
with `bytes`) and the first named label, labels, cls or target (integer); none found is
the file's error, naming the columns there are.

A row becomes Sample(key, {ext: image bytes, "cls": label}, url, index): `ext` from the
bytes' signature (jpg, png, webp, else the row's path suffix, else "img"), the key the
row's number (nine digits), so the Loader reads a Parquet file exactly as a tar shard:
counts from the file's metadata (no scan), shuffle, rank shares, `even`, elastic resume
and random access (`loader.dataset`) by row. A row without image bytes is that sample's
Failure (its key); a file pyarrow cannot read is the shard's (ShardFormatError).

Local files, and any fsspec URL (s3://, gs://, https://, hf://) where fsspec is installed.
pyarrow is an optional extra: `pip install 'gpudecode[parquet]'`."""
from __future__ import annotations

import json
from typing import Any, Iterator

import numpy as np

from ..errors import ShardFormatError, ShardReadError
from . import shards as _shards
from .members import Failure, Sample

IMAGE_COLUMNS = ("image", "img", "jpg", "jpeg", "png", "webp")
LABEL_COLUMNS = ("label", "labels", "cls", "target")
ROWS_A_READ = 256  # rows a list of samples holds (a row group is read in slices of this many)


def is_parquet(url: str) -> bool:
    return url.split("?", 1)[0].lower().endswith((".parquet", ".pq"))


def _pyarrow(url: str) -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError as e:
        raise ShardReadError(f"reading Parquet needs pyarrow ({e}): pip install 'gpudecode[parquet]'",
                             shard=url) from e
    return pq


def _open(url: str) -> Any:
    """The file as pyarrow's ParquetFile (local, or through fsspec)."""
    pq = _pyarrow(url)
    try:
        if _shards.is_local(url):
            return pq.ParquetFile(_shards.local_path(url), memory_map=True)
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


def count(url: str) -> int:
    """Rows of the file (its metadata: nothing is scanned)."""
    with _open(url) as pf:
        return int(pf.metadata.num_rows)


def classes(url: str) -> tuple[str, ...]:
    """The label column's class names where `datasets` wrote them (a ClassLabel), else ()."""
    with _open(url) as pf:
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


def sample_lists(url: str, *, start: int = 0, stop: int | None = None,
                 extensions: frozenset[str] | None = None) -> Iterator[list[Sample | Failure]]:
    """Rows start..stop-1 as Samples, ROWS_A_READ at a time, reading only the row groups
    they lie in; a file that cannot be read is one fatal Failure (the last item)."""
    pf = None
    try:
        pf = _open(url)
        image, struct, label = _columns(pf, url)
        meta = pf.metadata
        end = meta.num_rows if stop is None else min(stop, meta.num_rows)
        first = 0
        for g in range(meta.num_row_groups):
            rows = meta.row_group(g).num_rows
            lo, hi = max(start, first), min(end, first + rows)
            if lo < hi:
                # (use_threads=False: the reader's threads already read files side by side)
                table = pf.read_row_group(g, columns=[image] + ([label] if label else []), use_threads=False)
                for a in range(lo, hi, ROWS_A_READ):
                    b = min(hi, a + ROWS_A_READ)
                    yield _samples(url, table.slice(a - first, b - a), a, image, struct, label, extensions)
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
    exts = _exts(heads, paths)
    want_cls = label is not None and (extensions is None or "cls" in extensions)
    labels = [None if v is None else b"%d" % v for v in table.column(label).to_pylist()] if want_cls \
        else [None] * n
    out: list[Sample | Failure] = []
    hole = empty.tolist()  # (a list: numpy's per-element indexing costs a microsecond a row)
    for k in range(n):
        index = first + k
        key = "%09d" % index
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
