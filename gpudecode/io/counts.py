"""Samples per shard: counted by reading a shard's headers once, kept in memory and on disk
(cache_dir()/counts, keyed by path, size and modification time) with where each sample
begins, so a dataset is scanned once and a reader can enter a shard at any sample."""
from __future__ import annotations

import hashlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

import numpy as np


from .._cache import cache_dir
from ..errors import (GpuDecodeError, ResourceError, ShardReadError)
from . import shards as _shards
from .cache import ShardCache
from .remote import RemoteOptions
from .members import Failure


__all__ = ["count_samples", "shard_counts", "forget_counts"]


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
    from .assembly import iter_shard  # (it reads sample_starts from here: imported when first counted)

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


_COUNTS: dict[tuple, int] = {}
_STARTS: dict[tuple, np.ndarray] = {}
_COUNTS_LOCK = threading.Lock()


def _reset_lock_in_child() -> None:  # a lock a parent's thread held at fork would never be released
    global _COUNTS_LOCK
    _COUNTS_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_lock_in_child)


def _count_key(url: str) -> tuple:
    if _shards.is_local(url):
        path = _shards.local_path(url)
        try:
            st = os.stat(path)
        except OSError as e:
            raise ShardReadError(f"cannot open shard: {e.strerror or e}", shard=url) from e
        return (os.path.realpath(path), st.st_size, st.st_mtime_ns)
    return (url,)


def _disk_count_path(key: tuple) -> str | None:
    root = cache_dir()
    if root is None or len(key) != 3:
        return None
    digest = hashlib.sha1(key[0].encode("utf-8", "surrogateescape")).hexdigest()[:20]
    return os.path.join(root, "counts", f"{digest}-{key[1]}-{key[2]}")


def sample_starts(url: str) -> np.ndarray | None:
    """Where each sample of a counted local shard begins (chain offsets), or None."""
    try:
        key = _count_key(url)
    except ShardReadError:
        return None
    with _COUNTS_LOCK:
        found = _STARTS.get(key)
    if found is None and (path := _disk_count_path(key)) is not None:
        try:
            found = np.fromfile(path + ".starts", dtype=np.int64)
        except (OSError, ValueError):
            return None
        with _COUNTS_LOCK:
            _STARTS[key] = found
    return found


def forget_count(url: str) -> None:
    """Drops this process's count of one shard (a remote shard that changed: counted again)."""
    with _COUNTS_LOCK:
        _COUNTS.pop(_count_key(url), None)


def forget_counts() -> None:
    """Drops this process's memory of shard sample counts (the disk cache stays): the next
    count scans the headers again, or reads the disk cache (e.g. a bench's timing from scratch)."""
    with _COUNTS_LOCK:
        _COUNTS.clear()
        _STARTS.clear()


def shard_counts(urls: Sequence[str], *, remote: RemoteOptions | None = None, tolerant: bool = False,
                 threads: int = 4, cache: ShardCache | None = None) -> dict[str, int]:
    """Samples per shard for every url (see count_samples), on `threads` threads. Counts of
    whole local shards are kept in memory and on disk (cache_dir()/counts, keyed by path,
    size and modification time, with where each sample begins), so a dataset is scanned
    once and a reader can enter a shard at any sample."""
    out: dict[str, int] = {}
    todo = []
    for u in urls:
        key = _count_key(u)
        with _COUNTS_LOCK:
            n = _COUNTS.get(key)
        if n is None and (path := _disk_count_path(key)) is not None:
            try:
                with open(path) as f:
                    n = int(f.read())
            except (OSError, ValueError):
                n = None
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
                    arr = np.asarray(starts, np.int64)
                    with _COUNTS_LOCK:
                        _COUNTS[key] = n
                        if len(key) == 3:
                            _STARTS[key] = arr
                    _save_count(_disk_count_path(key), n, arr if len(key) == 3 else None)
    return {u: out[u] for u in urls}


def _save_count(path: str | None, n: int, starts: np.ndarray | None) -> None:
    if path is None:
        return
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if starts is not None:  # first: a count on disk promises its starts are there too
            tmp = f"{path}.starts.{os.getpid()}.partial"
            starts.tofile(tmp)
            os.replace(tmp, path + ".starts")
        tmp = f"{path}.{os.getpid()}.partial"
        with open(tmp, "w") as f:
            f.write(str(n))
        os.replace(tmp, path)
    except OSError:  # a read-only cache is no reason to fail
        pass

