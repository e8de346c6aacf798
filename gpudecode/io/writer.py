"""Writing WebDataset-style tar shards, atomically: each shard is written to a
temporary name and renamed into place when complete, so a crash never leaves a
shard that looks whole but is not."""
from __future__ import annotations

import io
import os
import tarfile
from types import TracebackType


def format_pattern(pattern: str, index: int) -> str:
    """`out/train-%06d.tar` or `out/train-{:06d}.tar` with the shard number filled in."""
    if "%" in pattern:
        return pattern % index
    if "{" in pattern:
        return pattern.format(index)
    raise ValueError(f"shard pattern {pattern!r} needs a %d or {{}} placeholder for the shard number")


class ShardWriter:
    """Writes samples ({"__key__": key, ext: bytes, ...}) into shards of at most
    `maxcount` samples or about `maxsize` bytes; a context manager."""

    def __init__(self, pattern: str, *, maxcount: int = 10000, maxsize: int = 3 << 30) -> None:
        format_pattern(pattern, 0)
        if maxcount < 1:
            raise ValueError("maxcount must be >= 1")
        self.pattern = pattern
        self.maxcount = maxcount
        self.maxsize = maxsize
        self.shards: list[str] = []
        self.counts: list[int] = []  # samples per shard, as self.shards
        self._tar: tarfile.TarFile | None = None
        self._tmp = ""
        self._count = 0
        self._size = 0

    def _next(self) -> None:
        self._finish()
        path = format_pattern(self.pattern, len(self.shards))
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self._tmp = path + ".partial"
        self._tar = tarfile.open(self._tmp, "w", format=tarfile.USTAR_FORMAT)
        self.shards.append(path)
        self.counts.append(0)
        self._count = self._size = 0

    def _finish(self) -> None:
        if self._tar is not None:
            self._tar.close()
            os.replace(self._tmp, self.shards[-1])
            self._tar = None

    def write(self, sample: dict) -> None:
        key = sample["__key__"]
        if "." in key.rsplit("/", 1)[-1]:
            raise ValueError(f"sample key {key!r} must not contain a dot")
        if self._tar is None or self._count >= self.maxcount or self._size >= self.maxsize:
            self._next()
        assert self._tar is not None
        for ext, data in sample.items():
            if ext == "__key__":
                continue
            if isinstance(data, str):
                data = data.encode()
            info = tarfile.TarInfo(f"{key}.{ext}")
            info.size = len(data)
            info.mode = 0o444
            info.uname = info.gname = "gpudecode"
            self._tar.addfile(info, io.BytesIO(data))
            self._size += 512 + (len(data) + 511) // 512 * 512
        self._count += 1
        self.counts[-1] += 1

    def close(self) -> None:
        self._finish()

    def __enter__(self) -> "ShardWriter":
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        if et is None:
            self.close()
        elif self._tar is not None:  # leave no partial shard behind on failure
            self._tar.close()
            os.unlink(self._tmp)
            self.shards.pop()
            self._tar = None
