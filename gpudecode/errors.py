"""The exception hierarchy. Every error is a `GpuDecodeError` and also the builtin it
resembles, so `except ValueError` keeps working for callers who know nothing of us."""
from __future__ import annotations


class GpuDecodeError(Exception):
    """Base class of every error gpudecode raises on purpose."""


class LocatedError(GpuDecodeError):
    """An error about one shard, and where in it: byte offset and/or sample key."""

    def __init__(self, message: str, *, shard: str | None = None, key: str | None = None,
                 offset: int | None = None) -> None:
        self.shard = shard
        self.key = key
        self.offset = offset
        where = []
        if shard is not None:
            where.append(f"shard {shard!r}")
        if key is not None:
            where.append(f"key {key!r}")
        if offset is not None:
            where.append(f"byte offset {offset}")
        self.reason = message
        super().__init__(f"{message} ({', '.join(where)})" if where else message)

    def __reduce__(self):  # picklable across processes with its attributes
        return (_rebuild, (type(self), self.reason, self.shard, self.key, self.offset))


def _rebuild(cls, reason, shard, key, offset):
    return cls(reason, shard=shard, key=key, offset=offset)


class ShardFormatError(LocatedError, ValueError):
    """A shard is not a readable tar: truncated, bad header checksum, not a tar at all,
    an unsupported member type, or a sample with a repeated extension."""


class ShardReadError(LocatedError, OSError):
    """A shard could not be opened or read (missing file, permission, network)."""


class DecodeError(LocatedError, ValueError):
    """An image could not be decoded (corrupt data, unsupported format, over the pixel limit)."""


class LabelError(LocatedError, ValueError):
    """A sample has no label, or a label that is not an integer."""


class BackendUnavailableError(GpuDecodeError, ImportError):
    """An optional backend (DALI, CUDA, nvJPEG) was asked for but cannot be used here."""


class KernelLaunchError(GpuDecodeError, RuntimeError):
    """A kernel could not be launched with the given arguments."""


class TransformError(GpuDecodeError, ValueError):
    """A transform or composition that the fused kernel cannot express, or bad arguments."""


__all__ = [
    "GpuDecodeError", "LocatedError", "ShardFormatError", "ShardReadError", "DecodeError", "LabelError",
    "BackendUnavailableError", "KernelLaunchError", "TransformError",
]
