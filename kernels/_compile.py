"""One source, two targets: compile `_pixel` (and kernel bodies that call it) for CUDA
or for the CPU.

Plain Python functions are rebuilt with a globals dict in which every helper name
points at that helper compiled for the target, then handed to the target's decorator.
Compilation is lazy and cached per target.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import os
import tempfile
import threading
import time
import types
from typing import Callable, Iterator

from .._cache import cache_dir
from . import _barrier, _colour, _filters, _noise, _pixel

_HELPER_MODULES = (_pixel, _colour, _noise, _filters, _barrier)  # (_pixel imports _colour's, _noise's, _filters'; _barrier _pixel's)
_HELPER_NAMES = {m.__name__ for m in _HELPER_MODULES}
_HELPER_FUNCTIONS = {name: fn for module in (_pixel, _colour, _barrier) for name, fn in vars(module).items()
                     if inspect.isfunction(fn) and fn.__module__ in _HELPER_NAMES}
HELPERS = list(_HELPER_FUNCTIONS)


def rebind(fn: Callable, namespace: dict) -> Callable:
    new = types.FunctionType(fn.__code__, namespace, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__qualname__ = fn.__qualname__
    new.__doc__ = fn.__doc__
    return new


def _namespace(jit: Callable, extra: dict | None = None, overrides: dict | None = None) -> dict:
    ns = {k: v for m in _HELPER_MODULES for k, v in vars(m).items()}  # (the helpers' own globals too: uint64)
    if extra:
        ns.update(extra)
    for name in HELPERS:
        ns[name] = jit(rebind((overrides or {}).get(name, _HELPER_FUNCTIONS[name]), ns))
    return ns


def cuda_device(fn: Callable) -> Callable:
    """`fn` as a CUDA device function that NVVM inlines into its callers (forceinline: the
    `alwaysinline` attribute). numba's own inline="always" copies the callee's IR into every
    call site before typing; over the kernels' hundreds of calls that copying was about 80%
    of the compile (both kernels of one variant: 83 s on a 2-core AMD EPYC, 16 s with
    forceinline; the PTX has no calls either way, and ptxas gives the same registers: 70
    and 64 on sm_80). Such a device function is compiled for the current device
    (numba-cuda's Dispatcher.compile_device): `compiling_for` names one where there is no GPU."""
    from numba import config, cuda

    if getattr(config, "ENABLE_CUDASIM", False):  # (the simulator's jit has no forceinline;
        return cuda.jit(device=True)(fn)         # mypy reads that one's signature)
    return cuda.jit(device=True, forceinline=True)(fn)  # type: ignore[call-arg]


@contextlib.contextmanager
def compiling_for(cc: tuple[int, int]) -> Iterator[None]:
    """Within: device functions are compiled for compute capability `cc` instead of the
    current device's (compile_ptx names the kernel's; a machine without a GPU has no
    current device, and asking for one raises)."""
    from numba.cuda import dispatcher

    real = dispatcher.get_current_device
    dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=cc)
    try:
        yield
    finally:
        dispatcher.get_current_device = real


def _build_cuda_namespace() -> dict:
    from numba import cuda

    return _namespace(cuda_device, {"cuda": cuda})


@functools.cache
def cuda_namespace() -> dict:
    """Helpers as CUDA device functions, built once a process (`fresh_cuda_namespace`: new
    device functions, compiled anew, for another compute capability)."""
    return _build_cuda_namespace()


fresh_cuda_namespace = _build_cuda_namespace


# ---------------------------------------------------------------------------------------
# On-disk cache of the CPU twin (compiling it takes tens of seconds per process otherwise).
# numba's own locators stamp a cached function with its own file only; ours inline
# helpers from other files (_pixel, _simd), so our stamp hashes every kernels/*.py:
# editing any of them recompiles. The folder is named by the numba and llvmlite versions
# and that stamp, not by where the package is installed, so every virtualenv of the
# machine with the same versions loads the same compiled kernel.

KERNEL_DIR = os.path.dirname(os.path.abspath(__file__))


@functools.cache
def _sources_stamp() -> str:
    digest = hashlib.sha256()
    for name in sorted(os.listdir(KERNEL_DIR)):
        if name.endswith(".py"):
            with open(os.path.join(KERNEL_DIR, name), "rb") as f:
                digest.update(name.encode() + b"\0" + f.read())
    return digest.hexdigest()


@functools.cache
def _register_locator() -> bool:
    """Puts our locator first in numba's list (it answers for kernels/ files only).
    False when there is no writable cache directory: then nothing is cached."""
    from numba.core import caching

    return _install_locator(caching, "numba")


@functools.cache
def cuda_cache() -> bool:
    """The same for numba-cuda's CUDA kernels (its own caching module since 0.2x, numba's
    before): True when they are cached on disk, compiled once per machine, GPU
    architecture and numba-cuda version instead of in every process and DDP rank (10-20 s
    a kernel variant, first batch)."""
    try:
        from numba.cuda.core import caching
    except ImportError:
        try:
            from numba.core import caching  # an older numba-cuda: numba's own machinery
        except ImportError:
            return False
    if not hasattr(caching, "_CacheLocator") or not hasattr(caching, "CacheImpl"):
        return False
    try:
        from numba_cuda import __version__ as version  # type: ignore[import-not-found]
    except ImportError:
        version = "numba"
    return _install_locator(caching, f"numba-cuda-{version}")


def _install_locator(caching, folder: str) -> bool:
    root = cache_dir()
    if root is None:
        return False
    try:
        os.makedirs(root, exist_ok=True)
        tempfile.TemporaryFile(dir=root).close()
    except OSError:
        return False

    import llvmlite
    import numba

    # one folder per numba/llvmlite version and kernel source, not per install: every
    # environment on the machine with the same versions and sources shares the compiled kernel
    shared = os.path.join(root, folder, f"numba-{numba.__version__}-llvmlite-{llvmlite.__version__}",
                          _sources_stamp()[:16])

    class KernelCacheLocator(caching._CacheLocator):  # noqa: SLF001 (numba's cache has no public locator hook)
        def __init__(self, py_func, py_file):
            self._lineno = py_func.__code__.co_firstlineno
            self._path = os.path.join(shared, os.path.splitext(os.path.basename(py_file))[0])

        def get_cache_path(self):
            return self._path

        def get_source_stamp(self):
            return _sources_stamp()

        def get_disambiguator(self):
            return str(self._lineno)

        @classmethod
        def from_function(cls, py_func, py_file):
            if os.path.dirname(os.path.abspath(py_file)) != KERNEL_DIR:
                return None
            self = cls(py_func, py_file)
            try:
                self.ensure_cache_path()
            except OSError:
                return None
            return self

    caching.CacheImpl._locator_classes.insert(0, KernelCacheLocator)  # noqa: SLF001
    return True


def cpu_jit(**options) -> Callable:
    """numba.njit for the CPU twin's kernels: GIL released, no division checks, cached
    on disk by KernelCacheLocator when a cache directory is writable."""
    import numba

    return numba.njit(nogil=True, error_model="numpy", cache=_register_locator(), **options)


@functools.cache
def cpu_namespace() -> dict:
    """Helpers as numba CPU functions."""
    import numba

    import numpy as np

    def floorf(x):  # float in, float out: vectorizes (math.floor goes through int64)
        return np.floor(x)

    def nearbyint(x):  # one rounding instruction (half to even) instead of branches
        return np.rint(x)

    def fetch(img, c, y, x):  # the CPU twin's image layout: [w, 3, h] (rows 3x + c of length h)
        return img[x, c, y]

    # error_model="numpy": no ZeroDivisionError checks, whose branches stop vectorization
    # forceinline: LLVM inlines every helper into its callers (alwaysinline; left to itself it
    # would not inline adjust_hue). numba's inline="always" did the same by copying the helper's
    # IR into each of thousands of call sites before typing: most of the compile (bench/RESULTS.md)
    return _namespace(lambda f: numba.njit(nogil=True, error_model="numpy", forceinline=True)(f),
                      {"np": np},
                      overrides={"floorf": floorf, "nearbyint": nearbyint, "fetch": fetch})


def inline_once(fn: Callable) -> Callable:
    """Marks a large CPU twin function with one call site to be copied into its caller by
    numba before typing (inline="always"; cpu_twin.py reads the mark). As a function of its
    own, its library was optimized and made machine code, then optimized again inside its
    caller's library, at each level of the sample's call tree (the compile's share in
    bench/RESULTS.md). The helpers called everywhere are inlined by LLVM instead
    (cpu_namespace): copying them into thousands of call sites cost more."""
    fn.inline = "always"  # type: ignore[attr-defined]
    return fn


def fastmath(*flags: str) -> Callable:
    """Marks a CPU twin function to be compiled with these fastmath flags (cpu_twin.py reads
    the mark): a reduction that may reassociate so that it vectorizes."""
    def mark(fn: Callable) -> Callable:
        fn.fastmath = set(flags)  # type: ignore[attr-defined]
        return fn
    return mark


# ---- the first call of a kernel variant in a process: say when it compiles -------------

_SEEN: set = set()
_STARTED: set = set()  # variants whose first call has begun (its thread says so if it compiles)
_SEEN_LOCK = threading.Lock()
NOTICE_AFTER_S = 2.0  # a first call still running after this long is compiling: say so


_KNOWN = contextlib.nullcontext()  # (stateless: one for every call of a variant already loaded)


def first_use(variant: tuple, target: str = "CPU") -> contextlib.AbstractContextManager[None]:
    """The first call of each kernel variant in a process loads it from the on-disk cache
    (about 0.5 s) or compiles it (tens of seconds, once per machine and numba version):
    when it is still running after NOTICE_AFTER_S, a line on stderr says what is going
    on, and another how long it took. `target`: "CPU" or "CUDA" (its variants are
    compiled per GPU architecture, 10-20 s each). A variant already loaded costs a set
    lookup (a direct call of one small image pays this every call)."""
    return _KNOWN if variant in _SEEN else _announce(variant, target)


@contextlib.contextmanager
def _announce(variant: tuple, target: str) -> Iterator[None]:
    with _SEEN_LOCK:
        first = variant not in _SEEN and variant not in _STARTED
        _STARTED.add(variant)
    if not first:  # known, or another thread's first call is announcing it
        yield
        return
    import sys

    t0 = time.perf_counter()
    said = threading.Event()

    def notice() -> None:
        said.set()
        where = cache_dir()
        kept = (f"once: the result is kept in {where} for every environment with this numba" if where else
                "in every process: the kernel cache is off (GPUDECODE_CACHE_DIR=0 or not writable)")
        what = ("the CPU kernel for this machine (it takes up to a minute or so" if target == "CPU" else
                "the CUDA kernels for this GPU (10-20 s for each output type and layout")
        print(f"gpudecode: compiling {what}, {kept})...", file=sys.stderr, flush=True)

    timer = threading.Timer(NOTICE_AFTER_S, notice)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        _SEEN.add(variant)
        if said.is_set():
            print(f"gpudecode: {target} kernel compiled in {time.perf_counter() - t0:.0f} s", file=sys.stderr,
                  flush=True)


def _after_fork_in_child() -> None:
    """A forked child may have inherited the lock held mid-call; a first call another
    thread had begun is not this process's."""
    global _SEEN_LOCK, _STARTED
    _SEEN_LOCK = threading.Lock()
    _STARTED = set(_SEEN)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
