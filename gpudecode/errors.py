"""The exception hierarchy, and the error policy (on_error="raise" | "warn" | "skip").

Every error is a `GpuDecodeError` and also the builtin it resembles, so `except
ValueError` keeps working for callers who know nothing of us. Errors about data are
`LocatedError`s: they name the shard and, where known, the sample key and byte offset.
"""
from __future__ import annotations

import errno
import warnings
from dataclasses import dataclass
from typing import Literal, TypeVar

_T = TypeVar("_T")


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


class FieldError(LocatedError, ValueError):
    """A sample's field (`Loader(..., fields=)`) is missing, cannot be decoded, or its
    function raised."""


class ShardWriteError(LocatedError, OSError):
    """A shard (or manifest) could not be written: disk full, permissions, ... `shard`
    names the output; nothing partial is left under its name."""


class BackendUnavailableError(GpuDecodeError, ImportError):
    """An optional backend (DALI, CUDA, nvJPEG) was asked for but cannot be used here."""


class KernelLaunchError(GpuDecodeError, RuntimeError):
    """A kernel could not be launched with the given arguments."""


class TransformError(GpuDecodeError, ValueError):
    """A transform or composition that the fused kernel cannot express, or bad arguments.
    Its message is wrapped to lines of at most 100 characters: a refusal fits on a screen."""

    def __init__(self, *args: object) -> None:
        if len(args) == 1 and isinstance(args[0], str):
            args = (_wrap(args[0]),)
        super().__init__(*args)


def _wrap(text: str, width: int = 100) -> str:
    """Each line of `text` wrapped to `width` columns, continuation lines indented."""
    import textwrap

    return "\n".join(textwrap.fill(line, width, subsequent_indent="  ", break_long_words=False,
                                    break_on_hyphens=False) or line for line in text.split("\n"))


class PlanError(GpuDecodeError, ValueError):
    """`gpudecode plan`'s inputs are missing, contradictory or out of range."""


class ResourceError(GpuDecodeError, OSError):
    """The machine or its environment failed, not the data: no file descriptors left,
    memory, a full disk, a missing or unwritable temporary folder, permissions. Raised
    under every on_error policy (`skip` is for bad data only), naming what ran out."""


# errno values that say the environment failed, whatever file was being read
RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOSPC, errno.EDQUOT, errno.EACCES,
                             errno.EPERM, errno.EROFS})


def resource_error(err: OSError, what: str) -> "ResourceError":
    """`err` as a ResourceError saying what was being done (the original as __cause__)."""
    out = ResourceError(f"{what}: {err.strerror or err} (errno {errno.errorcode.get(err.errno or 0, err.errno)}); "
                        "this is the machine's or the environment's fault, not the data's, so it stops the run "
                        "under every on_error policy")
    out.__cause__ = err
    return out


class ConcurrentIterationError(GpuDecodeError, RuntimeError):
    """A second iterator over a Loader while the first is still active (they would share
    its output buffers): finish the first, or call its close()."""


class Cancelled(GpuDecodeError, RuntimeError):
    """Work was stopped from another thread before it finished (a Loader closed, or
    Ctrl-C, while its decoder was busy): nothing about the data."""


class InternalError(GpuDecodeError, RuntimeError):
    """A state gpudecode's own code promised did not hold: a bug of ours, never a user's
    input (report it with the traceback). What `assert` would say, kept under `python -O`."""


def known(value: _T | None, what: str) -> _T:
    """`value`, which the caller's state says is set; an InternalError naming `what` where
    it is None."""
    if value is None:
        raise InternalError(f"{what} is unset here (a gpudecode bug: please report it)")
    return value


# -- the error policy ------------------------------------------------------------------------

OnError = Literal["raise", "warn", "skip"]


@dataclass(slots=True)
class Skipped:
    """Something passed over under on_error="skip" or "warn", and why."""

    shard: str
    key: str | None
    offset: int | None
    reason: str
    error: str  # the exception's class name


def check_on_error(on_error: str) -> str:
    if on_error not in ("raise", "warn", "skip"):
        raise ValueError(f"on_error must be 'raise', 'warn' or 'skip', not {on_error!r}")
    return on_error


def record_failure(err: BaseException, on_error: str, skipped: list[Skipped], *, who: str = "gpudecode",
                   stacklevel: int = 3) -> None:
    """What on_error="skip"/"warn" do with a bad shard or sample: list it in `skipped`,
    and warn under "warn". (on_error="raise" is the caller's: it raises instead.) A
    ResourceError is never skipped: it is raised here, under every policy."""
    if isinstance(err, ResourceError):
        raise err
    skipped.append(Skipped(getattr(err, "shard", None) or "", getattr(err, "key", None),
                           getattr(err, "offset", None), getattr(err, "reason", str(err)), type(err).__name__))
    if on_error == "warn":
        warnings.warn(f"{who} skipped: {err}", RuntimeWarning, stacklevel=stacklevel + 1)


class ErrorPolicy:
    """What happens to bad data, for every stage of a pipeline at once (webdataset's
    handlers are the model): "raise" raises it; "warn" and "skip" pass over it, listed in
    `skipped` ("warn" also warns). One object is shared by the reader, the probe and the
    decoder of a Loader (or a precache unit), so one list holds everything skipped. A
    ResourceError (the environment, not the data) is raised under every policy."""

    __slots__ = ("on_error", "who", "skipped")

    def __init__(self, on_error: str = "raise", *, who: str = "gpudecode") -> None:
        self.on_error = check_on_error(on_error)
        self.who = who  # names the warning's source
        self.skipped: list[Skipped] = []

    @property
    def raises(self) -> bool:
        return self.on_error == "raise"

    def __call__(self, err: BaseException, *, stacklevel: int = 2) -> None:
        """Raises `err` under "raise", else records it (see record())."""
        if self.on_error == "raise":
            raise err
        self.record(err, stacklevel=stacklevel + 1)

    def record(self, err: BaseException, *, stacklevel: int = 2) -> None:
        """Lists `err` in `skipped` (and warns under "warn"); a ResourceError is raised."""
        record_failure(err, self.on_error, self.skipped, who=self.who, stacklevel=stacklevel + 1)

    def reset(self) -> None:
        """A new `skipped` list (a new epoch); the old one stays with whoever holds it."""
        self.skipped = []

    def __repr__(self) -> str:
        return f"ErrorPolicy({self.on_error!r}, skipped={len(self.skipped)})"


def wrap_data_error(err: BaseException, cls: type[LocatedError], what: str, *, shard: str | None,
                    key: str | None = None, offset: int | None = None) -> LocatedError:
    """`err`, met on data (a library's own exception, an overflow, MemoryError, ...), as
    the project's `cls` naming shard and key; the original stays as __cause__."""
    if isinstance(err, (LocatedError, ResourceError)):
        return err  # type: ignore[return-value]
    if isinstance(err, OSError) and err.errno in RESOURCE_ERRNOS:
        return resource_error(err, f"{what} (shard {shard!r})")  # type: ignore[return-value]
    detail = str(err).splitlines()[0] if str(err) else ""
    out = cls(f"{what}: {type(err).__name__}{': ' + detail if detail else ''}", shard=shard, key=key, offset=offset)
    out.__cause__ = err
    return out


__all__ = [
    "PlanError",
    "GpuDecodeError", "LocatedError", "ShardFormatError", "ShardReadError", "ShardWriteError", "DecodeError",
    "LabelError", "BackendUnavailableError", "ResourceError", "KernelLaunchError", "TransformError", "ConcurrentIterationError",
    "InternalError", "known", "OnError", "Skipped", "ErrorPolicy", "check_on_error", "record_failure", "wrap_data_error",
]
