"""A node-local cache of remote shards (`Loader(..., cache_dir=...)`).

The first time a remote shard is needed it is downloaded into `cache_dir` (under a file
lock, so the ranks of one node share one download): written to a temporary name,
checked against the size the server announced, flushed, and renamed into place, with a
sidecar `<name>.json` holding its URL, size and sha256. Later epochs find the copy (its
size checked against the sidecar) and read it as a local shard: no request is made.
The first time a process uses a copy, its sha256 is checked against the sidecar's (once
per process and copy, so later epochs cost nothing): a copy whose bytes changed on the
node's disk (a flipped bit) is removed and fetched again, never read. The first use of
a copy in each epoch (`new_epoch()`) also revalidates it against the remote shard: one
small request (`remote.validators`: ETag, Last-Modified, size, as the sidecar recorded
them at download) and a shard that changed is fetched again (`on_change` is told, so
counts are redone). A remote that cannot be reached then does not stop training: the
copy is used, with a warning (once per shard and process). A download killed
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
import threading
import time
import warnings
from pathlib import Path
from typing import Callable, Iterator

from .._threads import ThreadGroup
from ..errors import ShardReadError, ShardWriteError
from .remote import RemoteOptions, Validators, open_remote, validators

_CHUNK = 1 << 20
_VERIFIED: set[tuple[str, int, int]] = set()  # (path, size, mtime_ns) whose sha256 this process checked
_CLEANED: set[str] = set()  # cache folders whose stale partials this process removed
_UNREACHABLE: set[str] = set()  # urls whose failed revalidation this process warned about


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
                 remote: RemoteOptions | None = None, on_change: Callable[[str], None] | None = None) -> None:
        if limit is not None and limit <= 0:
            raise ValueError(f"cache_limit must be positive bytes (or None), not {limit!r}")
        self.root = Path(root)
        from .._cache import unsafe

        why = unsafe(str(self.root))
        if why is not None:  # copies are read back as shards: whoever can write here can change the data
            raise ValueError(f"cache_dir {str(self.root)!r} is not safe to keep shard copies in: {why}; make it "
                             "private (chmod 700) or choose another")
        self.limit = limit
        self.remote = remote
        self.downloads = 0  # shards fetched by this object (tests, reports)
        self.replaced = 0  # copies whose bytes no longer matched their sha256 (removed, fetched again)
        self.stale_partials = 0  # partial downloads of dead processes removed by this object
        self.changed = 0  # copies found stale against their remote shard (removed, fetched again)
        self.on_change = on_change  # told the url of each of those
        self._current: set[str] = set()  # urls revalidated since new_epoch()
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:  # a reader goes to DataLoader's spawned workers
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def new_epoch(self) -> None:
        """Each copy is revalidated against its remote shard at its next use."""
        with self._lock:
            self._current.clear()

    def _revalidate(self, url: str, path: Path) -> bool:
        """False when the remote shard is no longer the one copied (then the copy is gone)."""
        options = self.remote or RemoteOptions()
        with self._lock:
            if not options.revalidate or url in self._current:
                return True
        try:
            meta = json.loads(path.with_name(path.name + ".json").read_text())
            had = Validators(meta.get("etag"), meta.get("last_modified"), int(meta["size"]))
        except (OSError, ValueError, KeyError, TypeError):
            return True  # _complete() just read it: a sidecar gone meanwhile is the next fetch's
        try:
            now = validators(url, options)
        except ShardReadError as e:  # an unreachable remote does not stop training on a checked copy
            if url not in _UNREACHABLE:
                _UNREACHABLE.add(url)
                warnings.warn(f"the cached copy of {url} could not be revalidated ({e}); it is used as fetched "
                              f"at {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(meta.get('fetched', 0)))}",
                              RuntimeWarning, stacklevel=4)
            return True
        if had.same_as(now) is False:
            for p in (path.with_name(path.name + ".json"), path):  # the sidecar first: never used again
                with contextlib.suppress(OSError):
                    p.unlink()
            self.changed += 1
            if self.on_change is not None:
                self.on_change(url)
            return False
        with self._lock:
            self._current.add(url)
        return True

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
        if found is not None and self._revalidate(url, found):
            return found
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as e:
            raise ShardWriteError(f"cannot create the shard cache: {e.strerror or e}", shard=str(self.root)) from e
        path = self.path_for(url)
        with self._locked(path):
            if self._complete(path) and self._revalidate(url, path):  # another process fetched it meanwhile
                return path
            self._download(url, path, group)
            with self._lock:
                self._current.add(url)  # just fetched: current for this epoch
        self.downloads += 1
        self._evict(keep=path)
        return path

    def _download(self, url: str, path: Path, group: ThreadGroup | None) -> None:
        tmp = path.with_name(f"{path.name}.{os.getpid()}.partial")
        # validators of other protocols are asked for first (HTTP's come with the body)
        known = None if url.split("://", 1)[0].lower() in ("http", "https") else validators(url, self.remote)
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
            meta = {"url": url, "size": size, "sha256": digest.hexdigest(), "fetched": time.time(),
                    "etag": known.etag if known else getattr(raw, "etag", None),
                    "last_modified": known.last_modified if known else getattr(raw, "last_modified", None)}
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
