"""Where gpudecode keeps what it can reuse across processes: compiled kernels (numba loads
them as pickles: code) and shard sample counts. $GPUDECODE_CACHE_DIR, else
$XDG_CACHE_HOME/gpudecode (~/.cache/gpudecode); GPUDECODE_CACHE_DIR=0 turns every such
cache off.

What this process loads must be written by this user only, as ssh treats its keys: the
folder is made private (0700) when gpudecode makes it, and one that another user owns, or
that its group or others may write to (a shared /tmp path, a group scratch), is not used:
a warning says so and the caches are off (kernels are compiled in each process, shards
counted again)."""
from __future__ import annotations

import functools
import os
import stat
import warnings


def cache_dir() -> str | None:
    """The cache folder, made if need be, or None: off, or not safe to load from."""
    env = os.environ.get("GPUDECODE_CACHE_DIR")
    if env == "0":
        return None
    if env:
        return _private(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return _private(os.path.join(base, "gpudecode"))


def unsafe(path: str) -> str | None:
    """Why a folder that exists must not be loaded from (another user owns it, or its
    group or others may write to it), or None. A folder with the sticky bit that only
    its owner may write to is fine; /tmp itself is not a cache folder."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"it belongs to another user (uid {st.st_uid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"its group or other users may write to it (mode {stat.S_IMODE(st.st_mode):o})"
    return None


@functools.lru_cache(maxsize=16)
def _private(path: str) -> str | None:
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError:
        return path  # (whoever writes there finds out and says so: each cache has its own fallback)
    why = unsafe(path)
    if why is None:
        return path
    warnings.warn(f"gpudecode: the cache folder {path} is not used: {why}, so another user could plant compiled "
                  "code or counts in it. Make it private (chmod 700) or set GPUDECODE_CACHE_DIR to one of your own "
                  "(0: no cache)", RuntimeWarning, stacklevel=3)
    return None
