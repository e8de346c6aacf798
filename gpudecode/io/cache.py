"""A node-local cache of remote shards (`Loader(..., cache_dir=...)`).

The first time a remote shard is needed it is downloaded into `cache_dir` (under a file
lock, so the ranks of one node share one download): written to a temporary name,
checked against the size the server announced, flushed, and renamed into place, with a
sidecar `<name>.json` holding its URL, size and sha256. Later epochs find the copy (its
size checked against the sidecar) and read it as a local shard: no request is made.
The first time a process uses a copy, its sha256 is checked against the sidecar's (once
per process and copy, so later epochs cost nothing): a copy whose bytes changed on the
node's disk (a flipped bit) is removed and fetched again, never read. A download killed
midway leaves a `.partial` file: the next process to use the cache removes those whose
process is gone, and `limit` counts the ones still being written.
With `limit` (bytes), the least recently used copies are removed once the cache holds
more; without it the cache grows with the dataset (node-local disks are sized for that).
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Iterator

from .._threads import ThreadGroup
from ..errors import ShardReadError, ShardWriteError
from .remote import RemoteOptions, open_remote

_CHUNK = 1 << 20
_VERIFIED: set[tuple[str, int, int]] = set()  # (path, size, mtime_ns) whose sha256 this process checked
_CLEANED: set[str] = set()  # cache folders whose stale partials this process removed


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def file_sha256(path: str | os.PathLike) -> str:
    """The sha256 of a file's bytes, read 1 MiB at a time."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


class ShardCache:
    """Local copies of remote shards in `root` (see the module doc)."""

    def __init__(self, root: str | os.PathLike, *, limit: int | None = None,
                 remote: RemoteOptions | None = None) -> None:
        if limit is not None and limit <= 0:
            raise ValueError(f"cache_limit must be positive bytes (or None), not {limit!r}")
        self.root = Path(root)
        self.limit = limit
        self.remote = remote
        self.downloads = 0  # shards fetched by this object (tests, reports)
        self.replaced = 0  # copies whose bytes no longer matched their sha256 (removed, fetched again)
        self.stale_partials = 0  # partial downloads of dead processes removed by this object

    def path_for(self, url: str) -> Path:
        digest = hashlib.sha1(url.encode("utf-8", "surrogateescape")).hexdigest()[:16]
        name = url.rstrip("/").rsplit("/", 1)[-1].split("?", 1)[0] or "shard"
        return self.root / f"{digest}-{name}"

    def _complete(self, path: Path) -> bool:
        try:
            meta = json.loads(path.with_name(path.name + ".json").read_text())
            st = path.stat()
            if st.st_size != int(meta["size"]):
                return False
        except (OSError, ValueError, KeyError, TypeError):
            return False
        key = (str(path), st.st_size, st.st_mtime_ns)
        if key in _VERIFIED:
            return True
        try:
            good = file_sha256(path) == meta.get("sha256")
        except OSError:
            return False
        if not good:  # changed on disk since it was fetched: never read, fetched again
            for p in (path.with_name(path.name + ".json"), path):
                with contextlib.suppress(OSError):
                    p.unlink()
            self.replaced += 1
            return False
        _VERIFIED.add(key)
        return True

    def clean_partials(self) -> int:
        """Removes the `.partial` downloads of processes that are gone (a killed job's);
        returns how many. Done once per process and folder by fetch()."""
        removed = 0
        try:
            names = list(self.root.glob("*.partial"))
        except OSError:
            return 0
        for p in names:
            try:
                pid = int(p.name.rsplit(".", 2)[-2])
            except (ValueError, IndexError):
                continue
            if pid != os.getpid() and not _pid_alive(pid):
                with contextlib.suppress(OSError):
                    p.unlink()
                    removed += 1
        self.stale_partials += removed
        return removed

    def local(self, url: str) -> Path | None:
        """The complete local copy of `url`, or None."""
        path = self.path_for(url)
        if self._complete(path):
            with contextlib.suppress(OSError):
                os.utime(path)  # recently used: evicted last
            return path
        return None

    @contextlib.contextmanager
    def _locked(self, path: Path) -> Iterator[None]:
        lock = path.with_name(path.name + ".lock")
        with open(lock, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def fetch(self, url: str, group: ThreadGroup | None = None) -> Path:
        """The local copy of `url`, downloaded first if there is none.

        Raises:
            ShardReadError: the download failed, or came out shorter or longer than announced.
            ShardWriteError: the copy could not be written (names the cache path).
        """
        if str(self.root) not in _CLEANED:
            _CLEANED.add(str(self.root))
            self.clean_partials()
        found = self.local(url)
        if found is not None:
            return found
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ShardWriteError(f"cannot create the shard cache: {e.strerror or e}", shard=str(self.root)) from e
        path = self.path_for(url)
        with self._locked(path):
            if self._complete(path):  # another process fetched it meanwhile
                return path
            self._download(url, path, group)
        self.downloads += 1
        self._evict(keep=path)
        return path

    def _download(self, url: str, path: Path, group: ThreadGroup | None) -> None:
        tmp = path.with_name(f"{path.name}.{os.getpid()}.partial")
        stream = open_remote(url, self.remote)
        raw = getattr(stream, "raw", None)
        cancel = getattr(raw, "cancel", None)
        digest = hashlib.sha256()
        size = 0
        try:
            with stream, (group.cancelling(cancel) if group is not None and cancel is not None
                          else contextlib.nullcontext()):
                try:
                    out = open(tmp, "wb")
                except OSError as e:
                    raise ShardWriteError(f"cannot write the shard cache: {e.strerror or e}", shard=str(tmp)) from e
                with out:
                    while True:
                        try:
                            chunk = stream.read(_CHUNK)
                        except ShardReadError:
                            raise
                        except OSError as e:  # fsspec backends raise their own
                            raise ShardReadError(f"download failed: {e}", shard=url) from e
                        if not chunk:
                            break
                        try:
                            out.write(chunk)
                        except OSError as e:
                            raise ShardWriteError(f"cannot write the shard cache: {e.strerror or e}",
                                                  shard=str(tmp)) from e
                        digest.update(chunk)
                        size += len(chunk)
                    expected = getattr(raw, "expected_size", None)
                    if expected is None:
                        expected = getattr(stream, "size", None)
                    if isinstance(expected, int) and expected != size:
                        raise ShardReadError(f"download of {size} bytes, but the server announced {expected}",
                                             shard=url)
                    out.flush()
                    os.fsync(out.fileno())
            os.replace(tmp, path)
            meta = {"url": url, "size": size, "sha256": digest.hexdigest(), "fetched": time.time()}
            side = path.with_name(path.name + ".json")
            side_tmp = side.with_name(f"{side.name}.{os.getpid()}.partial")
            side_tmp.write_text(json.dumps(meta))
            os.replace(side_tmp, side)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise

    def _evict(self, keep: Path) -> None:
        if self.limit is None:
            return
        copies = []
        for side in self.root.glob("*.json"):
            path = side.with_name(side.name[:-5])
            try:
                st = path.stat()
            except OSError:
                continue
            copies.append((st.st_mtime, st.st_size, path, side))
        total = sum(c[1] for c in copies)
        for part in self.root.glob("*.partial"):  # downloads under way count against the limit too
            with contextlib.suppress(OSError):
                total += part.stat().st_size
        for _, size, path, side in sorted(copies, key=lambda c: c[0]):
            if total <= self.limit:
                break
            if path == keep:
                continue
            for p in (side, path):  # the sidecar first: a copy without one is never used
                with contextlib.suppress(OSError):
                    p.unlink()
            total -= size
