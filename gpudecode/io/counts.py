"""Samples per shard: counted by reading a shard's headers once (through io/assembly.py),
kept by io/count_store.py in memory and on disk with where each sample begins, so a
dataset is scanned once and a reader can enter a shard at any sample."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

import numpy as np

from ..errors import GpuDecodeError, ResourceError
from .assembly import iter_shard
from .cache import ShardCache
from .count_store import count_key, forget_count, forget_counts, known_count, remember
from .members import Failure
from .parquet import count as parquet_count, is_parquet
from .remote import RemoteOptions

__all__ = ["count_samples", "shard_counts", "forget_count", "forget_counts"]


def count_samples(url: str, *, remote: RemoteOptions | None = None, tolerant: bool = False,
                  cache: ShardCache | None = None, starts: list[int] | None = None) -> int:
    """Samples in one shard, in Grouper's numbering (bad samples count: they hold an
    index); local shards: headers only, streams are read through. With `tolerant`, a
    shard with a tar fault counts the samples before it (the one it cut off excluded),
    as the reader will deliver them under on_error="skip". `starts` (a list) receives the
    chain offset of each counted sample's first header (where reading it can begin).

    Raises:
        ShardFormatError, ShardReadError: the shard cannot be read to its end (not tolerant).
    """
    if is_parquet(url):  # its metadata says
        try:
            return parquet_count(url)
        except GpuDecodeError:
            if tolerant:
                return 0
            raise
    found: list[int] = []
    n = 0
    for item in iter_shard(url, on_error="skip", extensions=frozenset(), remote=remote, cache=cache, starts=found):
        if isinstance(item, Failure) and item.fatal:
            if tolerant and not isinstance(item.error, ResourceError):  # the environment failed: never tolerated
                break
            raise item.error
        n += 1
    if starts is not None:
        starts.extend(found[:n])
    return n


def shard_counts(urls: Sequence[str], *, remote: RemoteOptions | None = None, tolerant: bool = False,
                 threads: int = 4, cache: ShardCache | None = None) -> dict[str, int]:
    """Samples per shard for every url (see count_samples), on `threads` threads. Counts of
    whole local shards are kept in memory and on disk (cache_dir()/counts, keyed by path,
    size and modification time, with where each sample begins), so a dataset is scanned
    once and a reader can enter a shard at any sample."""
    out: dict[str, int] = {}
    todo = []
    for u in urls:
        key = count_key(u)
        n = known_count(key)
        if n is None:
            todo.append((u, key))
        else:
            out[u] = n
    if todo:
        def one(item: tuple[str, tuple]) -> tuple[str, tuple, int, bool, list[int]]:
            u, key = item
            starts: list[int] = []
            try:
                return u, key, count_samples(u, remote=remote, cache=cache, starts=starts), True, starts
            except GpuDecodeError:
                if not tolerant:
                    raise
                starts.clear()
                return u, key, count_samples(u, remote=remote, tolerant=True, cache=cache, starts=starts), False, starts

        with ThreadPoolExecutor(max(1, min(threads, len(todo))), thread_name_prefix="gpudecode-count") as pool:
            for u, key, n, whole, starts in pool.map(one, todo):
                out[u] = n
                if whole:  # a shard with a fault is counted again next time
                    remember(key, n, np.asarray(starts, np.int64))
    return {u: out[u] for u in urls}
