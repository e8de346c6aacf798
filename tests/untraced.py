"""numba's compiles without coverage's tracer, as the tests run them.

numba's compiler (typing, lowering, its passes) is Python. Under `make test` coverage
traces the pytest processes, and its tracer sees every call the compiler makes although
none of them is measured: a compile of the CPU kernel took 121 s there against 71 s
untraced (a 2-core Zen 1). `untrace_compiles()` wraps numba's Dispatcher.compile so that
each compile (and each load from the kernel cache) runs with the calling thread's tracer
paused and restarted as it was afterwards. Nothing gpudecode measures runs as Python
inside a compile (the kernels' bodies are compiled, not run; the typing helpers numba
calls are in kernels/_simd.py, outside coverage's measure). Without a tracer, or with a
tracer other than coverage's C one (one with start()), a compile runs as it would."""
from __future__ import annotations

import functools
import sys

__all__ = ["untrace_compiles"]


def _paused(compile_fn):
    @functools.wraps(compile_fn)
    def compile(self, sig):
        tracer = sys.gettrace()
        if tracer is None or not callable(getattr(tracer, "start", None)):
            return compile_fn(self, sig)
        sys.settrace(None)  # (this frame's own calls untraced until start(): stop and restart in one frame)
        try:
            return compile_fn(self, sig)
        finally:
            tracer.start()  # (CTracer.start: installs itself as this thread's tracer again)

    compile.untraced = True
    return compile


def untrace_compiles() -> bool:
    """Wraps numba's Dispatcher.compile (once); whether it is wrapped."""
    try:
        from numba.core.dispatcher import Dispatcher
    except ImportError:  # (no numba: nothing compiles)
        return False
    if not getattr(Dispatcher.compile, "untraced", False):
        Dispatcher.compile = _paused(Dispatcher.compile)
    return True
