"""The numba CUDA simulator, as the tests run it: `quicken()` gives its block scheduler a
loop that lets the block's threads run, and `run_code(code)` runs a test's script in a
process of its own under the simulator.

The simulator runs each CUDA thread of a block as a Python thread, and a scheduler loop
on the launching thread releases them from syncthreads() once all are waiting. numba's
loop polls the threads without pause, so it holds the GIL for most of each switch
interval while the threads it waits for cannot run: a launch of our kernels spends about
half its time there. quicken() replaces that loop with one that yields the GIL on each
turn (time.sleep(0)) and is otherwise the same: the threads are released together when
all live ones wait, the first exception aborts the others and is raised. It changes no
thread's work, only when the scheduler looks; where numba's BlockManager is not the one
it was written for (its attributes differ), it leaves numba's loop in place. The block's
threads run without a trace function: under coverage (which omits the kernels' device
code, pyproject.toml) each Python call there would still reach its tracer, and the
simulator makes many. quicken() also keys cuda.shared.array by its caller without reading
the stack's source (`_quick_shared_arrays`).

Tried and not kept: a barrier in place of the loop (the last thread to arrive releases the
others, each asleep on its own event) was no faster, and slower at the default switch
interval: each woken thread waits for the GIL (a trivial kernel's block of 256 threads with
5 syncthreads: 333 ms with numba's loop, 149 with this one, 316 with the barrier)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np

__all__ = ["quicken", "run_code"]


def quicken() -> bool:
    """Installs the yielding scheduler loop (under NUMBA_ENABLE_CUDASIM=1 only); whether
    it is in place."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        return False
    from numba.cuda.simulator import kernel

    manager = getattr(kernel, "BlockManager", None)
    thread = getattr(kernel, "BlockThread", None)
    if manager is None or thread is None or not all(
            hasattr(thread, name) for name in ("syncthreads", "run")) or not hasattr(manager, "run"):
        return False
    if getattr(manager.run, "yields", False):
        return True

    def run(self, grid_point, *args):  # (BlockManager.run's contract: run one block to its end)
        def target():
            sys.settrace(None)  # (no line tracing of the device code: coverage omits it, pyproject.toml)
            self._f(*args)

        threads = [thread(target, self, grid_point, point, self._debug) for point in np.ndindex(*self._block_dim)]
        for t in threads:
            t.start()
        live = threads
        while live:
            time.sleep(0)  # (the GIL to the block's threads)
            failed = next((t for t in live if t.exception), None)
            if failed is not None:
                for t in threads:  # (each waiting thread wakes to its abort flag)
                    t.abort = True
                    t.syncthreads_blocked = False
                    t.syncthreads_event.set()
                raise failed.exception[0].with_traceback(failed.exception[1])
            live = [t for t in live if t.is_alive()]
            if live and all(t.syncthreads_blocked for t in live):
                for t in live:
                    t.syncthreads_blocked = False
                    t.syncthreads_event.set()
        failed = next((t for t in threads if t.exception), None)
        if failed is not None:
            raise failed.exception[0].with_traceback(failed.exception[1])

    run.yields = True  # type: ignore[attr-defined]
    manager.run = run
    _quick_shared_arrays()
    return True


def _quick_shared_arrays() -> None:
    """cuda.shared.array keyed by its caller's file and line without reading the stack's
    source. numba's FakeCUDAShared.array takes that key from traceback.extract_stack,
    which reads each frame's line through linecache (an os.stat a frame), in every
    thread of every block: most of a launch's work in our kernels (a launch 42% shorter
    without it). The key, the allocation and what is returned are numba's; dynamic shared
    memory and an alignment go to numba's own method. Left as it is where the class is
    not the one this was written for."""
    from numba.cuda.simulator import kernelapi

    shared = getattr(kernelapi, "FakeCUDAShared", None)
    as_dtype = getattr(getattr(kernelapi, "numpy_support", None), "as_dtype", None)
    numba_type = getattr(getattr(kernelapi, "types", None), "Type", None)
    if shared is None or as_dtype is None or numba_type is None or getattr(shared.array, "quick", False):
        return
    numbas_array = shared.array

    def array(self, shape, dtype, alignment=None):
        allocations = getattr(self, "_allocations", None)
        if alignment is not None or shape == 0 or not isinstance(allocations, dict):
            return numbas_array(self, shape, dtype, alignment)
        caller = sys._getframe(1)
        key = (caller.f_code.co_filename, caller.f_lineno)  # (numba's extract_stack(...)[-2][0:2])
        res = allocations.get(key)
        if res is None:  # (setdefault: a block's threads racing here share one array)
            res = allocations.setdefault(key, np.empty(shape, as_dtype(dtype) if isinstance(dtype, numba_type)
                                                       else dtype))
        return res

    array.quick = True  # type: ignore[attr-defined]
    shared.array = array


def run_code(code: str, timeout: float) -> None:
    """`code` (a script that prints "ok" last) in a new process under the simulator, the
    tests' folder importable (tvref, this module) and quicken() first; fails the test with
    the script's error where it does not end with "ok"."""
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1",
               PYTHONPATH=here + os.pathsep + os.environ.get("PYTHONPATH", ""))
    script = "import simulator\nsimulator.quicken()\n" + code
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=timeout)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]
