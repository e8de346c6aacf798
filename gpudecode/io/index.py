"""Random access to a reader's samples: sample i of a shard or file list (`SampleIndex`),
what `Loader.dataset[i]`, a resident store's misses and torch's map-style datasets read.

A local shard's members are indexed once (a header scan; the last _INDEXES shards kept),
then a sample is one native ranged read of its members (not the shard entered at the
sample each time); a remote or gzipped shard is read up to the sample.
"""
from __future__ import annotations

import collections
import os
import threading

import numpy as np

from .. import _native
from ..errors import ShardReadError
from . import shards as _shards
from .assembly import iter_shard
from .cache import ShardCache
from .files import iter_files
from .members import Grouper, Sample, _stream_error
from .parquet import is_parquet, read_sample as parquet_read_sample
from .remote import RemoteOptions
from .sources import Sources
from .tario import index_file, split_key

_INDEXES = 64  # shards whose member index is kept

__all__ = ["SampleIndex"]


class SampleIndex:
    """Sample `index` of any source of `inputs`, with a reader's extensions and limits."""

    def __init__(self, inputs: Sources, *, extensions: frozenset[str] | None, max_file_bytes: int,
                 remote: RemoteOptions | None = None, cache: ShardCache | None = None) -> None:
        self.inputs, self.extensions, self.max_file_bytes = inputs, extensions, max_file_bytes
        self.remote, self.cache = remote, cache
        self._lock = threading.Lock()
        self._indexes: collections.OrderedDict[str, list] = collections.OrderedDict()

    def __getstate__(self) -> dict:  # (to spawned workers: the lock and the indexes are made anew there)
        return {k: v for k, v in self.__dict__.items() if k not in ("_lock", "_indexes")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._indexes = collections.OrderedDict()

    def read(self, url: str, index: int) -> Sample:
        """Sample `index` of source `url`: a shard's index-th sample, a file list's
        index-th file in list order.

        Raises:
            ShardReadError, ShardFormatError, ...: the sample cannot be read (named).
            IndexError: the shard holds fewer samples (it changed since it was counted).
        """
        flist = self.inputs.files.get(url)
        if flist is not None:
            for path, _, fields, err in iter_files(flist, [index], 0, 1, extensions=self.extensions,
                                                    max_bytes=self.max_file_bytes):
                if err is not None:
                    raise err
                return Sample(flist.keys[index], fields, path, index)
        if is_parquet(url):
            return parquet_read_sample(url, index, self.extensions)
        if _shards.is_local(url) and not url.endswith((".tgz", ".tar.gz")):
            return self._ranged(url, index)
        for item in iter_shard(url, extensions=self.extensions, remote=self.remote, start=index, stop=index + 1,
                               cache=self.cache):
            if isinstance(item, Sample):
                return item
            raise item.error
        raise IndexError(f"sample {index} of shard {url!r} is not there (the shard changed since it was counted)")

    def _ranged(self, url: str, index: int) -> Sample:
        by_sample = self._members(url)
        if index >= len(by_sample):
            raise IndexError(f"sample {index} of shard {url!r} is not there (it holds {len(by_sample)}: the "
                             "shard changed since it was counted)")
        members = by_sample[index]
        key = split_key(members[0].name)[0]  # type: ignore[index]
        exts = [(split_key(m.name) or ("", ""))[1] for m in members]
        take = [(e, m) for e, m in zip(exts, members) if m.type == "0"
                and (self.extensions is None or e.lower() in self.extensions)]
        with open(_shards.local_path(url), "rb") as f:
            datas, got, error = _native.read_ranges(f.fileno(), np.array([m.offset for _, m in take], np.int64),
                                                    np.array([m.size for _, m in take], np.int64))
        if len(datas) < len(take):  # the shard shrank (or failed) since it was indexed
            m = take[len(datas)][1]
            raise ShardReadError(error or f"shard shrank while being read: member {m.name!r} needs {m.size} "
                                 f"bytes at offset {m.offset}, {got} left", shard=url, key=key)
        return Sample(key, {e: d for (e, _), d in zip(take, datas)}, url, index)

    def _members(self, url: str) -> list:
        """Per sample of a local shard: its members (name, offset, size, type), indexed once
        per process (the last _INDEXES shards kept)."""
        with self._lock:
            found = self._indexes.get(url)
            if found is not None:
                self._indexes.move_to_end(url)
                return found
        try:
            with open(_shards.local_path(url), "rb") as f:
                members, _, _ = index_file(f.fileno(), os.fstat(f.fileno()).st_size)
        except OSError as e:
            raise _stream_error(e, url) from e
        grouper = Grouper()
        by_sample: list[list] = []
        for m in members:
            g = grouper.group(m.name)
            if g is None:
                continue
            if g == len(by_sample):
                by_sample.append([])
            by_sample[g].append(m)
        with self._lock:
            self._indexes[url] = by_sample
            while len(self._indexes) > _INDEXES:
                self._indexes.popitem(last=False)
        return by_sample
