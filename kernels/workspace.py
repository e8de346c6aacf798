"""What a launch of the fused kernel works in, declared by the kernel and held by its caller.

The kernels declare the buffers a launch needs, by name and shape, for a batch of N at
an output size (`fused.cpu_work_shape` and `cpu_twin.small_shapes`, `fused.scratch_shape`,
`fused.hist_shape`, `fused.aux_shape`, the small per-sample arrays); whoever launches into one output holds a
`Workspace` and hands it to every launch (the Loader's Pipeline: one per view, made once).
A buffer is made the first time a name is asked for, and again only when a launch needs
more than it holds (a larger batch or size); otherwise each launch gets a view of the same
memory. A buffer that must grow is made half as large again as asked (a batch's widest
crop window sets the CPU twin's rows, and it varies from batch to batch), so a run makes
a few at most. `made` counts the buffers made (tests/test_ownership.py: none over ten
batches of a Loader after its first).

On a GPU the device buffers are reused in stream order (every launch of a Pipeline is on
its augment stream, so a launch never overlaps the one before it); the pinned host copies
of the per-sample arrays are rewritten only after the copy out of them has completed (an
event recorded after it, waited on the host before the next write: long done by then).

A launch's host work is kept per launch, not per array (at the CIFAR-sized target of
1,000,000 img/s a batch of 1024 leaves the host 1 ms): the small per-sample arrays go up
packed, one copy (`upload_packed`), and a buffer's view of a shape is made once, with its
form for the kernel (`convert`: numba's wrapper of a CUDA tensor, which costs microseconds
of Python each: bench/RESULTS.md), and given again while the buffer and the shape stay
(`converted_tensor`).
"""
from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["ALIGN", "HUGE_FROM", "Workspace", "huge_pages"]

ALIGN = 256  # bytes: where each part of a packed upload starts (any dtype's alignment, and CUDA's)
HUGE_FROM = 4 << 20  # bytes: host memory this large is advised into transparent huge pages (huge_pages)


def huge_pages(memory: Any, *, touch: bool = False) -> Any:
    """`memory` (a CPU tensor or numpy array, contiguous, freshly made: not yet touched)
    advised into transparent huge pages where it is HUGE_FROM bytes or more and the
    kernel gives them to madvised memory: its first touch then faults once per 2 MiB
    instead of once per 4 KiB, and the kernels' passes over it miss the TLB less
    (bench/huge_pages.py; bench/RESULTS.md). Advice only: nothing changes where the kernel
    says no. Pinned and device memory are left as they are; GPUDECODE_HUGE_PAGES=0 in the
    environment (read at each call) leaves everything. With `touch` (memory about to be
    written whole, by several threads) the advised memory is also faulted in here, one
    write per 2 MiB from this thread: threads faulting the same huge page in at once wait
    on each other (bench/RESULTS.md). Returns `memory`."""
    small = (memory.nbytes if isinstance(memory, np.ndarray) else memory.numel() * memory.element_size()) < HUGE_FROM
    if small or os.environ.get("GPUDECODE_HUGE_PAGES", "1") == "0":  # (a small one first: a direct call's)
        return memory
    from .._native import huge_pages as advise

    if isinstance(memory, np.ndarray):
        if memory.nbytes >= HUGE_FROM and memory.flags.c_contiguous:
            advise(flat := memory.reshape(-1).view(np.uint8))
            if touch:
                flat[::2 << 20] = 0
        return memory
    import torch

    if (memory.device.type == "cpu" and memory.numel() * memory.element_size() >= HUGE_FROM
            and memory.is_contiguous() and not memory.is_pinned()):
        huge_pages(memory.reshape(-1).view(torch.uint8).numpy(), touch=touch)
    return memory


class Workspace:
    """Named buffers, reused launch after launch (see the module doc); for one launch at
    a time (one thread, one stream), as its owner makes them."""

    def __init__(self) -> None:
        self._arrays: dict[str, np.ndarray] = {}
        self._tensors: dict[tuple, Any] = {}
        self._copied: Any = None  # the CUDA event after the last copy out of the pinned host buffers
        self._views: dict[tuple, tuple] = {}  # key -> (buffer, spec, view, converted)
        self._packed: dict[tuple, tuple] = {}  # (name, device) -> upload_packed's layout
        self._children: dict[str, "Workspace"] = {}
        self.made = 0
        self.converted = 0  # views converted by a launch's `convert` (tests: none after a launch's first)

    def child(self, name: str) -> "Workspace":
        """A Workspace of its own kept as `name` (a launch before this one's, in the same
        batch: a first pass's, whose buffers and uploads are not this one's)."""
        held = self._children.get(name)
        if held is None:
            held = self._children[name] = Workspace()
        return held

    def array(self, name: str, shape: tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
        """A numpy array of `shape` (contents undefined), a view of the buffer kept as `name`."""
        count = math.prod(shape)
        buf = self._arrays.get(name)
        if buf is None or buf.dtype != np.dtype(dtype) or buf.size < count:
            buf = self._arrays[name] = huge_pages(np.empty(_grown(count, buf.size if buf is not None else 0), dtype))
            self.made += 1
        return buf[:count].reshape(shape)

    def reserve(self, name: str, shape: tuple[int, ...], dtype: Any = np.float32) -> None:
        """Makes the array kept as `name` hold at least `shape` (array() then cuts views
        of it)."""
        self.array(name, shape, dtype)

    def tensor(self, name: str, shape: tuple[int, ...], dtype: Any, device: Any, *, pin_memory: bool = False,
               zero: bool = False) -> Any:
        """A torch tensor of `shape` on `device` (zeroed with `zero`, on the current stream;
        else contents undefined), a view of the buffer kept as `name` for that device."""
        count = math.prod(shape)
        out = self._buffer(name, count, dtype, device, pin_memory)[:count].view(*shape)
        return out.zero_() if zero else out

    def converted_tensor(self, name: str, shape: tuple[int, ...], dtype: Any, device: Any,
                  convert: Callable[[Any], Any]) -> tuple[Any, Any]:
        """(tensor(name, shape, dtype, device), convert of it), both kept while the buffer
        and the shape stay, so a launch after the first converts nothing."""
        count = math.prod(shape)
        buf = self._buffer(name, count, dtype, device, False)
        return self._view((name, str(device)), buf, (tuple(shape), dtype), lambda: buf[:count].view(*shape), convert)

    def _buffer(self, name: str, count: int, dtype: Any, device: Any, pin_memory: bool) -> Any:
        """The 1-D buffer kept as `name` for `device`, of `count` elements at least (made
        again, half as large again, where it holds fewer or another dtype)."""
        import torch

        key = (name, str(torch.device(device)))
        buf = self._tensors.get(key)
        if buf is None or buf.dtype != dtype or buf.numel() < count:
            size = _grown(count, buf.numel() if buf is not None else 0)
            buf = self._tensors[key] = huge_pages(torch.empty(size, dtype=dtype, device=device,
                                                              pin_memory=pin_memory))
            self.made += 1
        return buf

    def _view(self, key: tuple, buf: Any, spec: tuple, make: Callable[[], Any],
              convert: Callable[[Any], Any]) -> tuple[Any, Any]:
        """The view of `buf` that `make` makes, and its converted form, kept (one for each
        key: the last asked for) and given again while `buf` is the same buffer and `spec`
        (the view's shape, dtype, place) the same."""
        held = self._views.get(key)
        if held is not None and held[0] is buf and held[1] == spec:
            return held[2], held[3]
        view = make()
        converted = convert(view)
        self.converted += 1
        self._views[key] = (buf, spec, view, converted)
        return view, converted

    def upload_packed(self, name: str, parts: Sequence[np.ndarray], device: Any, *,
                      convert: Callable[[Any], Any] | None = None) -> list[Any]:
        """The arrays `parts` on `device` in one copy: each written at its own offset (a
        multiple of ALIGN bytes) of one pinned host buffer, the bytes in use then copied
        on the current stream, without blocking, into one device buffer (both kept as
        `name`). Returns each part's view of the device buffer, in order; with `convert`,
        each part's converted form instead (see `converted_tensor`). Every part is copied
        as it is (C order); the views have the parts' shapes and dtypes. The layout (each part's
        place, the views, their converted forms) is kept: parts of the same shapes and
        dtypes again cost their bytes' copies and the one copy up."""
        key = (name, str(device))
        spec = tuple((a.shape, a.dtype) for a in parts)
        self._wait_copied()  # (the pinned buffer rewritten, or made again, only after its last copy out)
        held = self._packed.get(key)
        if held is None or held[0] != spec or held[1] is not convert:
            held = self._packed[key] = (spec, convert, *self._pack_layout(name, device, parts, convert))
        for dst, a in zip(held[2], parts):
            dst[...] = a
        held[3].copy_(held[4], non_blocking=True)
        return held[5]

    def _pack_layout(self, name: str, device: Any, parts: Sequence[np.ndarray],
                     convert: Callable[[Any], Any] | None) -> tuple[list[np.ndarray], Any, Any, list[Any]]:
        """(the parts' numpy views of the pinned host buffer, the device bytes in use, the
        host's, the parts' device views or their converted forms), the buffers grown as
        needed."""
        import torch

        offsets, end = [], 0
        for a in parts:
            offsets.append(end)
            end += -(-a.nbytes // ALIGN) * ALIGN
        staged = self.tensor(name + "/host", (max(end, 1),), torch.uint8, "cpu", pin_memory=torch.cuda.is_available())
        dev = self.tensor(name, (max(end, 1),), torch.uint8, device)
        host = staged.numpy()
        dsts = [host[off:off + a.nbytes].view(a.dtype).reshape(a.shape) for a, off in zip(parts, offsets)]
        views = [dev[off:off + a.nbytes].view(_torch_dtype(a.dtype)).view(*a.shape) for a, off in zip(parts, offsets)]
        if convert is not None:
            views = [convert(v) for v in views]
            self.converted += len(views)
        return dsts, dev[:end], staged[:end], views

    def _wait_copied(self) -> None:
        if self._copied is not None:
            self._copied.synchronize()  # the last copy out of the pinned buffers has completed
            self._copied = None

    def uploaded(self) -> None:
        """Marks the end of a launch's uploads (upload_packed's): an event on the current
        stream, which the next upload waits for before it writes the pinned buffer again."""
        import torch

        self._copied = torch.cuda.Event()
        self._copied.record()


def _grown(count: int, held: int) -> int:
    """The size to make for `count` elements: as asked the first time, then half as large
    again as the larger of the two."""
    return count if held == 0 else max(count, held + held // 2)


@functools.cache
def _torch_dtype(dtype: np.dtype) -> Any:
    import torch

    return torch.from_numpy(np.empty(0, dtype)).dtype
