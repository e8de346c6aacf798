"""Python time per sample: what reading and the Loader's pipeline cost under the GIL,
apart from their native calls.

Each part runs alone on this thread, with every function of `gpudecode._native` (tar
index, reads, grouping, probes, decodes, tensor layouts) and the CPU kernel timed around
each call: the part's wall time minus the time inside those calls is the Python it runs
(numpy and torch bookkeeping included: they hold the GIL too). The parts are the
reader's (`iter_shard` over every shard: index, read, group, assemble) and the
pipeline's two stages (`Pipeline.prepare`: probe, labels, draws, decode requests;
`Pipeline.finish`: the kernel's launch, labels, the slot), on chunks read beforehand.
A Loader runs the reader and the two stages on three threads, so their Python is what
one core must give to each sample whatever the number of threads.

Beside them, what the tensor pipeline's rate is made of: its kernel stage alone
(`finish_alone`) and the memory's rate for its output (`conversion_rate`).
"""
from __future__ import annotations

import os
import resource
import threading
import time
from typing import Any, Sequence

from ..profiling import NativeClock, native_calls_timed



def python_per_sample(urls: Sequence[str], transform: Any, *, batch_size: int = 64, repeat: int = 3) -> dict:
    """{part: {"python_us", "native_us"}} per sample, the median of `repeat` runs, for
    "reader", "prepare" and "finish", and their sum as "loader"; "samples": how many;
    "ceiling_img_per_s": the pipeline's native work per image (prepare's: the decode of
    the windows, the probe; finish's: the kernel), each measured on one core, as the rate
    of every core doing only that, 1 / (1/decode + 1/kernel) x cores."""
    from ..loader import Loader

    clock = NativeClock()
    ld = Loader(list(urls), batch_size=batch_size, transform=transform, device="cpu", num_threads=1, seed=0)
    rd = ld.reader

    samples = _read_as_loader(rd, urls)  # page cache warm
    n = len(samples)
    if not n:
        raise ValueError("no samples in the shards")
    pipe = ld.pipeline
    pipe.ensure_decoder()
    _one_native_thread(pipe.decoder)
    chunks = [samples[i:i + batch_size] for i in range(0, n, batch_size)]

    def pipeline() -> tuple[float, float, float, float]:
        """(prepare wall, its native, finish wall, its native): each batch prepared then
        finished, in a Loader's order."""
        pw = pn = fw = fn = 0.0
        for i, c in enumerate(chunks):
            t0, c0 = time.perf_counter(), clock.seconds
            p = pipe.prepare(c, seed=0, epoch=0, position=i * batch_size)
            t1, c1 = time.perf_counter(), clock.seconds
            pipe.finish(p)
            t2, c2 = time.perf_counter(), clock.seconds
            pw, pn, fw, fn = pw + t1 - t0, pn + c1 - c0, fw + t2 - t1, fn + c2 - c1
        return pw, pn, fw, fn

    pipeline()  # the kernel compiled or loaded, the slots made
    runs: dict[str, list[tuple[float, float]]] = {"reader": [], "prepare": [], "finish": []}
    with native_calls_timed(clock):
        for _ in range(repeat):
            clock.seconds = 0.0
            t = time.perf_counter()
            _read_as_loader(rd, urls)
            wall = time.perf_counter() - t
            runs["reader"].append((wall - clock.seconds, clock.seconds))
            pw, pn, fw, fn = pipeline()
            runs["prepare"].append((pw - pn, pn))
            runs["finish"].append((fw - fn, fn))
    pipe.close()
    ld.close()
    parts: dict[str, Any] = {}
    for name, rs in runs.items():
        py, nat = sorted(rs)[len(rs) // 2]
        parts[name] = {"python_us": py / n * 1e6, "native_us": nat / n * 1e6}
    parts["loader"] = {k: sum(parts[p][k] for p in runs) for k in ("python_us", "native_us")}
    parts["samples"] = n
    # the pipeline's ceiling on this machine: its native work (the decode of the windows,
    # the kernel, each on one core) run back to back on every core, nothing else
    cores = os.cpu_count() or 1
    parts["ceiling_img_per_s"] = cores * 1e6 / (parts["prepare"]["native_us"] + parts["finish"]["native_us"])
    return parts


def _read_as_loader(rd: Any, urls: Sequence[str]) -> list:
    """Every sample of the shards, read as the Loader's reader `rd` reads them (its
    extensions and mapped extensions)."""
    return [s for u in urls for s in rd.read_shard(u)]


def finish_alone(urls: Sequence[str], transform: Any, *, batch_size: int = 64, num_threads: int = 2,
                 repeat: int = 5) -> float:
    """img/s of a Loader's second stage alone (`Pipeline.finish`: the kernel into the output
    slots on `num_threads` threads, the labels, the batch) over batches of tensor samples
    prepared beforehand, the best of `repeat` passes: the kernel's rate with nothing
    beside it (no reader, no first stage, no hand-offs). Tensor shards only (their
    pixels are read in place, so every prepared batch stays valid)."""
    from ..loader import Loader

    ld = Loader(list(urls), batch_size=batch_size, transform=transform, device="cpu", num_threads=num_threads, seed=0)
    try:
        samples = _read_as_loader(ld.reader, urls)
        pipe = ld.pipeline
        pipe.ensure_decoder()
        chunks = [samples[i:i + batch_size] for i in range(0, len(samples), batch_size)]
        # (other images are decoded into the decoder's ring, which later batches overwrite)
        formats = {f for c in chunks for f in pipe.probe(c).formats}
        if formats != {"npy"}:
            raise ValueError(f"finish_alone needs shards of tensor samples only (these hold {sorted(formats)})")
        prepared = [pipe.prepare(c, seed=0, epoch=0, position=i * batch_size) for i, c in enumerate(chunks)]
        best = float("inf")
        for r in range(repeat + 1):  # the first pass loads the kernel and makes the slots
            t = time.perf_counter()
            for p in prepared:
                pipe.finish(p)
            if r:
                best = min(best, time.perf_counter() - t)
        return len(samples) / best
    finally:
        ld.close()


def conversion_rate(*, size: int = 224, batch_size: int = 64, num_threads: int = 2, repeat: int = 5) -> float:
    """img/s of numpy converting uint8 pixels into float32 (a cast into a reused buffer,
    nothing else), a batch of `size` x `size` x 3 a call on each of `num_threads` threads,
    the best of `repeat` passes of 10 calls: what writing a float32 output of that size
    costs this machine's memory, with no transform's work (numpy releases the GIL)."""
    import numpy as np

    n = batch_size * size * size * 3
    srcs = [np.full(n, 7, np.uint8) for _ in range(num_threads)]
    outs = [np.zeros(n, np.float32) for _ in range(num_threads)]

    def work(i: int) -> None:
        for _ in range(10):
            np.copyto(outs[i], srcs[i], casting="unsafe")

    best = float("inf")
    for r in range(repeat + 1):
        threads = [threading.Thread(target=work, args=(i,)) for i in range(num_threads)]
        t = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        if r:
            best = min(best, time.perf_counter() - t)
    return num_threads * 10 * batch_size / best


def _one_native_thread(decoder: Any) -> None:
    """The CPU decoder decodes on one native thread (a Loader gives it num_threads + 1):
    the wall time of its calls is then the CPU time of the decode, one core's."""
    if hasattr(decoder, "num_threads") and getattr(decoder, "name", "") == "cpu":
        decoder.num_threads = 1


def loader_python_per_sample(urls: Sequence[str], transform: Any, *, batch_size: int = 64, num_threads: int = 2,
                             epochs: int = 3, **loader_kw: Any) -> dict:
    """Python per sample of a running Loader, every thread counted (the reader threads,
    their hand-off and shuffle, both pipeline stages, the kernel's launch): the process's
    CPU time over an epoch minus the time inside native calls (every function of
    `gpudecode._native` and each thread's part of the CPU kernel, timed on the thread
    that runs it, in that thread's CPU time), per sample; the median of `epochs` epochs
    after a first one. The CPU decoder decodes on one native thread here (on the calling
    thread: its CPU time is then the decode's). {"python_us", "native_us", "gc_us" (of
    python_us: Python's garbage collections, timed by gc.callbacks in CPU time), "sys_us" (the process's
    system time a sample over all the epochs, native calls' included: reads, page faults,
    the threads' waits and wake-ups), "samples", "img_per_s"}."""
    import gc

    from ..loader import Loader

    clock = NativeClock(cpu=True)
    ld = Loader(list(urls), batch_size=batch_size, transform=transform, device="cpu", num_threads=num_threads,
                seed=0, **loader_kw)
    ld.pipeline.ensure_decoder()
    _one_native_thread(ld.pipeline.decoder)
    for _ in ld:  # the kernel compiled or loaded, the slots made, the page cache warm
        pass
    collected = [0.0, 0.0]  # (seconds in collections, the one running's start)

    def on_gc(phase: str, info: dict) -> None:
        # in the collecting thread's CPU time, like python_us (a collection holds the GIL:
        # its start and stop come on one thread, none between)
        if phase == "start":
            collected[1] = time.thread_time()
        else:
            collected[0] += time.thread_time() - collected[1]

    runs = []
    gc.callbacks.append(on_gc)
    try:
        with native_calls_timed(clock):
            # (the system time over every epoch together: the kernel accounts it in ticks)
            sys_before = resource.getrusage(resource.RUSAGE_SELF).ru_stime
            for _ in range(epochs):
                clock.seconds = collected[0] = 0.0
                n = 0
                c, t = time.process_time(), time.perf_counter()
                for b in ld:
                    n += len(b.keys)
                cpu, wall = time.process_time() - c, time.perf_counter() - t
                runs.append(((cpu - clock.seconds) / n * 1e6, clock.seconds / n * 1e6, collected[0] / n * 1e6,
                             n / wall, n))
            sys_us = (resource.getrusage(resource.RUSAGE_SELF).ru_stime - sys_before) / sum(r[-1] for r in runs) * 1e6
    finally:
        gc.callbacks.remove(on_gc)
        ld.close()
    python_us, native_us, gc_us, rate, n = sorted(runs)[len(runs) // 2]
    return {"python_us": python_us, "native_us": native_us, "gc_us": gc_us, "sys_us": sys_us, "samples": n,
            "img_per_s": rate}
