"""Where gpudecode keeps what it can reuse across processes: compiled CPU kernels and
shard sample counts. $GPUDECODE_CACHE_DIR, else $XDG_CACHE_HOME/gpudecode
(~/.cache/gpudecode); GPUDECODE_CACHE_DIR=0 turns every such cache off."""
from __future__ import annotations

import os


def cache_dir() -> str | None:
    env = os.environ.get("GPUDECODE_CACHE_DIR")
    if env == "0":
        return None
    if env:
        return env
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "gpudecode")
