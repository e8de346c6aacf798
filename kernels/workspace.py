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
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["Workspace"]


class Workspace:
    """Named buffers, reused launch after launch (see the module doc); for one launch at
    a time (one thread, one stream), as its owner makes them."""

    def __init__(self) -> None:
        self._arrays: dict[str, np.ndarray] = {}
        self._tensors: dict[tuple, Any] = {}
        self._copied: Any = None  # the CUDA event after the last copy out of the pinned host buffers
        self.made = 0

    def array(self, name: str, shape: tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
        """A numpy array of `shape` (contents undefined), a view of the buffer kept as `name`."""
        count = math.prod(shape)
        buf = self._arrays.get(name)
        if buf is None or buf.dtype != np.dtype(dtype) or buf.size < count:
            buf = self._arrays[name] = np.empty(_grown(count, buf.size if buf is not None else 0), dtype)
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
        import torch

        device = torch.device(device)
        count = math.prod(shape)
        key = (name, str(device))
        buf = self._tensors.get(key)
        if buf is None or buf.dtype != dtype or buf.numel() < count:
            size = _grown(count, buf.numel() if buf is not None else 0)
            buf = self._tensors[key] = torch.empty(size, dtype=dtype, device=device, pin_memory=pin_memory)
            self.made += 1
        out = buf[:count].view(*shape)
        return out.zero_() if zero else out

    def upload(self, name: str, host: np.ndarray, device: Any) -> Any:
        """`host` on `device`: copied into a pinned host buffer, then to a device buffer on
        the current stream, without blocking (both kept as `name`)."""
        import torch

        if self._copied is not None:
            self._copied.synchronize()  # the last copy out of the pinned buffers has completed
            self._copied = None
        staged = self.tensor(name + "/host", host.shape, _torch_dtype(host.dtype), "cpu",
                             pin_memory=torch.cuda.is_available())
        staged.numpy()[...] = host
        dev = self.tensor(name, host.shape, staged.dtype, device)
        dev.copy_(staged, non_blocking=True)
        return dev

    def uploaded(self) -> None:
        """Marks the end of a launch's uploads (see upload): an event on the current stream."""
        import torch

        self._copied = torch.cuda.Event()
        self._copied.record()


def _grown(count: int, held: int) -> int:
    """The size to make for `count` elements: as asked the first time, then half as large
    again as the larger of the two."""
    return count if held == 0 else max(count, held + held // 2)


def _torch_dtype(dtype: np.dtype) -> Any:
    import torch

    return torch.from_numpy(np.empty(0, dtype)).dtype
