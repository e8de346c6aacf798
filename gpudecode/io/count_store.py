"""Where counted shards' sample counts are kept: in this process's memory and on disk
(cache_dir()/counts, keyed by path, size and modification time), each with where every
sample begins (its chain offset), so a dataset is scanned once and a reader can enter a
shard at any sample. The bottom of io/'s counting: io/counts.py counts (through
io/assembly.py, which reads `sample_starts` from here to seek)."""
from __future__ import annotations

import hashlib
import os
import threading

import numpy as np

from .._cache import cache_dir
from ..errors import ShardReadError
from . import shards as _shards

_COUNTS: dict[tuple, int] = {}
_STARTS: dict[tuple, np.ndarray] = {}
_LOCK = threading.Lock()


def _reset_lock_in_child() -> None:  # a lock a parent's thread held at fork would never be released
    global _LOCK
    _LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_lock_in_child)


def count_key(url: str) -> tuple:
    """(real path, size, mtime_ns) of a local shard, (url,) of a remote one.

    Raises:
        ShardReadError: a local shard that cannot be opened.
    """
    if _shards.is_local(url):
        path = _shards.local_path(url)
        try:
            st = os.stat(path)
        except OSError as e:
            raise ShardReadError(f"cannot open shard: {e.strerror or e}", shard=url) from e
        return (os.path.realpath(path), st.st_size, st.st_mtime_ns)
    return (url,)


def _disk_path(key: tuple) -> str | None:
    root = cache_dir()
    if root is None or len(key) != 3:
        return None
    digest = hashlib.sha1(key[0].encode("utf-8", "surrogateescape")).hexdigest()[:20]
    return os.path.join(root, "counts", f"{digest}-{key[1]}-{key[2]}")


def known_count(key: tuple) -> int | None:
    """The kept count of the shard `key` names (memory, else disk), or None."""
    with _LOCK:
        n = _COUNTS.get(key)
    if n is None and (path := _disk_path(key)) is not None:
        try:
            with open(path) as f:
                n = int(f.read())
        except (OSError, ValueError):
            n = None
    return n


def remember(key: tuple, n: int, starts: np.ndarray) -> None:
    """A whole shard's count and sample starts, kept in memory and (local shards) on disk."""
    with _LOCK:
        _COUNTS[key] = n
        if len(key) == 3:
            _STARTS[key] = starts
    path = _disk_path(key)
    if path is None:
        return
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        # the starts first: a count on disk promises its starts are there too
        tmp = f"{path}.starts.{os.getpid()}.partial"
        starts.tofile(tmp)
        os.replace(tmp, path + ".starts")
        tmp = f"{path}.{os.getpid()}.partial"
        with open(tmp, "w") as f:
            f.write(str(n))
        os.replace(tmp, path)
    except OSError:  # a read-only cache is no reason to fail
        pass


def sample_starts(url: str) -> np.ndarray | None:
    """Where each sample of a counted local shard begins (chain offsets), or None."""
    try:
        key = count_key(url)
    except ShardReadError:
        return None
    with _LOCK:
        found = _STARTS.get(key)
    if found is None and (path := _disk_path(key)) is not None:
        try:
            found = np.fromfile(path + ".starts", dtype=np.int64)
        except (OSError, ValueError):
            return None
        with _LOCK:
            _STARTS[key] = found
    return found


def forget_count(url: str) -> None:
    """Drops this process's count of one shard (a remote shard that changed: counted again)."""
    with _LOCK:
        _COUNTS.pop(count_key(url), None)


def forget_counts() -> None:
    """Drops this process's memory of shard sample counts (the disk cache stays): the next
    count scans the headers again, or reads the disk cache (e.g. a bench's timing from scratch)."""
    with _LOCK:
        _COUNTS.clear()
        _STARTS.clear()
