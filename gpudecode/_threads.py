"""The threads gpudecode starts, and how they end.

Every blocking point of a gpudecode thread (a full queue, an empty one) waits in short
slices and checks a stop event, so setting it ends the whole pipeline within a slice plus
the native call in flight. `ThreadGroup` starts threads and always joins them. At
interpreter exit, every group still running is stopped and joined *before* Python
finalizes: a daemon thread that returns from native code (GIL released) during
finalization is ended by the interpreter from inside a C++ destructor, and the process
aborts ("terminate called without an active exception").
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import sys
import threading
import warnings
import weakref
from typing import Any, Callable, Iterator

POLL = 0.05  # seconds between stop checks of a blocked thread
_STOPPED = object()


def put_until_stopped(q: queue.Queue, item: object, stop: threading.Event) -> bool:
    """Puts item on a bounded queue, waiting while it is full; False if `stop` was set
    first (the consumer went away), so producer threads never block forever."""
    while not stop.is_set():
        try:
            q.put(item, timeout=POLL)
            return True
        except queue.Full:
            continue
    return False


def get_until_stopped(q: queue.Queue, stop: threading.Event, *,
                      alive: Callable[[], bool] | None = None) -> Any:
    """The next item of `q`; `STOPPED` if `stop` was set first, or if `alive()` says the
    producers are gone and the queue is empty (so a consumer never waits forever)."""
    while not stop.is_set():
        try:
            return q.get(timeout=POLL)
        except queue.Empty:
            if alive is not None and not alive():
                try:
                    return q.get_nowait()
                except queue.Empty:
                    return _STOPPED
    return _STOPPED


STOPPED = _STOPPED

_OPENMP: list[Any] | None = None  # omp_set_num_threads of each OpenMP runtime loaded, torch's first


def _openmp_setters() -> list[Any]:
    """omp_set_num_threads of the OpenMP runtimes this process has loaded (torch's own
    first), found once; none where torch's CPU ops do not run on OpenMP."""
    global _OPENMP
    if _OPENMP is None:
        import torch

        found: list[Any] = []
        if "parallel backend: OpenMP" in torch.__config__.parallel_info():
            names = ("libgomp", "libiomp", "libomp")
            here = os.path.join(os.path.dirname(torch.__file__), "lib")
            paths = []
            try:
                with open("/proc/self/maps") as maps:
                    paths = [line.split()[-1] for line in maps if any(n in line for n in names)]
            except OSError:  # (no /proc: the runtimes torch ships)
                if os.path.isdir(here):
                    paths = [os.path.join(here, n) for n in sorted(os.listdir(here)) if n.startswith(names)]
            for path in sorted(dict.fromkeys(paths), key=lambda p: not p.startswith(here)):
                try:
                    found.append(ctypes.CDLL(path).omp_set_num_threads)
                except (OSError, AttributeError):
                    continue
        _OPENMP = found
    return _OPENMP


def one_torch_thread() -> bool:
    """Makes the torch CPU ops this thread calls run on this thread alone, as DataLoader's
    worker processes run theirs (each calls torch.set_num_threads(1)); True if they do.

    A gpudecode thread that paints canvases or moves masks with torch's ops would otherwise
    start torch's intra-op threads (one a core) beside the decoder's, on the same cores.
    torch.set_num_threads cannot be called here: it also sets the count that threads made
    later start with (the trainer's among them) and resizes a pool the process shares. The
    OpenMP runtime keeps a count for each thread, which is set here. torch.get_num_threads
    comes first: it is ATen's first-use set-up of this thread's count, which would
    otherwise undo this one at the thread's first parallel op. Where torch's ops do not
    run on OpenMP, or torch is not loaded (a reader's threads under `gpudecode inspect`), nothing
    is changed (False)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    if torch.get_num_threads() == 1:
        return True
    for set_threads in _openmp_setters():
        set_threads(1)
        if torch.get_num_threads() == 1:
            return True
    return False

_LIVE: "weakref.WeakSet[ThreadGroup]" = weakref.WeakSet()
_HOOKED = False
_HOOK_LOCK = threading.Lock()


def _stop_all_at_exit() -> None:
    for group in list(_LIVE):
        group.stop(timeout=5.0, warn=False)


def _install_exit_hook() -> None:
    global _HOOKED
    with _HOOK_LOCK:
        if _HOOKED:
            return
        # threading's own exit hooks run before non-daemon threads are joined and long
        # before finalization (concurrent.futures uses the same); atexit otherwise.
        register = getattr(threading, "_register_atexit", None)
        if register is not None:
            register(_stop_all_at_exit)
        else:  # pragma: no cover - other Pythons
            import atexit

            atexit.register(_stop_all_at_exit)
        _HOOKED = True


class ThreadGroup:
    """Threads sharing one stop event. `stop()` sets it, runs the cancel hooks of calls
    that cannot poll it (a network read blocked in the kernel), and joins every thread."""

    def __init__(self, name: str, stop: threading.Event | None = None) -> None:
        self.name = name
        self.stop_event = stop if stop is not None else threading.Event()
        self.threads: list[threading.Thread] = []
        self._cancels: dict[int, Callable[[], None]] = {}
        self._lock = threading.Lock()
        _install_exit_hook()
        _LIVE.add(self)

    @contextlib.contextmanager
    def cancelling(self, cancel: Callable[[], None]) -> Iterator[None]:
        """While inside, stop() calls `cancel` (from the stopping thread) before joining."""
        token = id(cancel)
        with self._lock:
            self._cancels[token] = cancel
        try:
            if self.stop_event.is_set():
                cancel()
            yield
        finally:
            with self._lock:
                self._cancels.pop(token, None)

    def on_stop(self, cancel: Callable[[], None]) -> None:
        """stop() calls `cancel` (from the stopping thread) before joining, for as long as
        the group lives: how a native call that looks at its own flag is told to end."""
        with self._lock:
            self._cancels[id(cancel)] = cancel

    def start(self, target: Callable[..., None], *args: Any, name: str) -> threading.Thread:
        """Starts `target(*args)` on a thread of the group, its torch ops on one thread
        (one_torch_thread)."""
        def run() -> None:
            one_torch_thread()
            target(*args)

        t = threading.Thread(target=run, daemon=True, name=f"gpudecode-{name}")
        self.threads.append(t)
        t.start()
        return t

    def alive(self) -> bool:
        return any(t.is_alive() for t in self.threads)

    def stop(self, *, timeout: float = 30.0, warn: bool = True) -> None:
        """Stops and joins every thread (a thread in a native call ends when it returns)."""
        self.stop_event.set()
        with self._lock:
            cancels = list(self._cancels.values())
        for cancel in cancels:
            try:
                cancel()
            except Exception:  # a stream already closed: nothing to cancel
                pass
        me = threading.current_thread()
        for t in self.threads:
            if t is not me and t.ident is not None:  # (one never started: interrupted before its start)
                t.join(timeout)
                if t.is_alive() and warn:
                    warnings.warn(f"gpudecode thread {t.name} did not stop within {timeout:.0f} s",
                                  RuntimeWarning, stacklevel=2)
        _LIVE.discard(self)
