"""One source, two targets: compile `_pixel` (and kernel bodies that call it) for CUDA
or for the CPU.

Plain Python functions are rebuilt with a globals dict in which every helper name
points at that helper compiled for the target, then handed to the target's decorator.
Compilation is lazy and cached per target.
"""
from __future__ import annotations

import functools
import inspect
import types
from typing import Callable

from . import _pixel

HELPERS = [name for name, fn in vars(_pixel).items()
           if inspect.isfunction(fn) and fn.__module__ == _pixel.__name__]


def _rebind(fn: Callable, namespace: dict) -> Callable:
    new = types.FunctionType(fn.__code__, namespace, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__qualname__ = fn.__qualname__
    new.__doc__ = fn.__doc__
    return new


def _namespace(jit: Callable, extra: dict | None = None, overrides: dict | None = None) -> dict:
    ns = dict(vars(_pixel))
    if extra:
        ns.update(extra)
    for name in HELPERS:
        ns[name] = jit(_rebind((overrides or {}).get(name, getattr(_pixel, name)), ns))
    return ns


@functools.cache
def cuda_namespace() -> dict:
    """Helpers as CUDA device functions (inlined: compile_ptx needs no device then)."""
    from numba import cuda

    return _namespace(lambda f: cuda.jit(device=True, inline="always")(f), {"cuda": cuda})


@functools.cache
def cpu_namespace() -> dict:
    """Helpers as numba CPU functions."""
    import numba

    import numpy as np

    def floorf(x):  # float in, float out: vectorizes (math.floor goes through int64)
        return np.floor(x)

    # error_model="numpy": no ZeroDivisionError checks, whose branches stop vectorization
    # inline="always": numba inlines the helpers itself (LLVM would not inline adjust_hue)
    return _namespace(lambda f: numba.njit(nogil=True, error_model="numpy", inline="always")(f),
                      {"np": np},
                      overrides={"floorf": floorf})
