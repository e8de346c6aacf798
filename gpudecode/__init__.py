"""gpudecode: read compressed images from tar shards (or image files as they lie) on CPU
threads, decode them on the GPU (nvImageCodec, DALI's mixed decoder or torchcodec, all
nvJPEG) or on the CPU (libjpeg-turbo, libpng), augment with fused numba kernels.

Heavy and optional parts (torch, numba, DALI) load on first use of what needs them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _builtins  # noqa: F401  (the builtins as they are now: numba is imported with them, _builtins.py)
from ._version import __version__
from .errors import (BackendUnavailableError, ConcurrentIterationError, DecodeError, FieldError, GpuDecodeError,
                     InternalError, KernelLaunchError, LabelError, PlanError, ResourceError, ShardFormatError, ShardReadError,
                     ShardWriteError, Skipped, TransformError)

if TYPE_CHECKING:
    from .io.reader import Sample, ShardReader
    from .io.remote import RemoteOptions
    from .loader import Loader, LoaderIterator
    from .pipeline import Batch
    from ._probe import ImageInfo, probe, probe_batch
    from .profiling import ProfileReport, profile
    from .planning import plan
    from .fields import Boxes, Mask
    from .transforms.ragged import RaggedBatch

_LAZY = {
    "ShardReader": ("gpudecode.io.reader", "ShardReader"),
    "Source": ("gpudecode.io.epoch", "Source"),
    "EpochPlan": ("gpudecode.io.epoch", "EpochPlan"),
    "Sample": ("gpudecode.io.reader", "Sample"),
    "probe": ("gpudecode._probe", "probe"),
    "probe_batch": ("gpudecode._probe", "probe_batch"),
    "ImageInfo": ("gpudecode._probe", "ImageInfo"),
    "expand_urls": ("gpudecode.io.shards", "expand_urls"),
    "Loader": ("gpudecode.loader", "Loader"),
    "LoaderIterator": ("gpudecode.loader", "LoaderIterator"),
    "RemoteOptions": ("gpudecode.io.remote", "RemoteOptions"),
    "Batch": ("gpudecode.pipeline", "Batch"),
    "transforms": ("gpudecode.transforms", None),
    "profile": ("gpudecode.profiling", "profile"),
    "ProfileReport": ("gpudecode.profiling", "ProfileReport"),
    "plan": ("gpudecode.planning", "plan"),
    "Mask": ("gpudecode.fields", "Mask"),
    "Boxes": ("gpudecode.fields", "Boxes"),
    "RaggedBatch": ("gpudecode.transforms.ragged", "RaggedBatch"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        mod = importlib.import_module(module)
        value = mod if attr is None else getattr(mod, attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'gpudecode' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_LAZY))


__all__ = [
    "__version__", "GpuDecodeError", "ShardFormatError", "ShardReadError", "ShardWriteError", "DecodeError",
    "LabelError", "FieldError", "BackendUnavailableError", "ResourceError", "KernelLaunchError", "TransformError", "ConcurrentIterationError",
    "PlanError", "InternalError",
    "Skipped", *_LAZY,
]
