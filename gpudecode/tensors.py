"""Tensor samples: a decoded image stored as a `.npy` field (uint8 RGB, HWC, C order).

`gpudecode precache` writes them; the Loader reads them like any image (format "npy"):
the probe reads the shape from the header (natively, as numpy writes it), and the
kernel reads the pixels in place.
numpy pads its header so that the array starts at a multiple of 64 bytes into the file,
and a tar member's data starts on a 512-byte boundary, so the pixels of a sample in an
uncompressed tensor shard are 64-byte aligned and can be memory-mapped in place.
"""
from __future__ import annotations

import functools
import io

import numpy as np

from . import _native

MAGIC = b"\x93NUMPY"


def encode_npy(img: np.ndarray) -> bytes:
    """The .npy bytes of an RGB uint8 HWC image (numpy's own format: np.load reads them)."""
    head, pixels = npy_parts(img)
    return head + pixels.tobytes()


def npy_parts(img: np.ndarray) -> tuple[bytes, memoryview]:
    """encode_npy's bytes in two parts, its header and the pixels' own memory (no copy of
    them): what a writer that takes parts (ShardWriter) writes one after the other."""
    img = np.asarray(img)
    if img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] != 3:
        raise ValueError(f"a tensor sample is uint8 [H, W, 3], not {img.dtype} {list(img.shape)}")
    img = np.ascontiguousarray(img)
    return _npy_header(img.shape[0], img.shape[1]), memoryview(img.reshape(-1).data)


@functools.lru_cache(maxsize=1024)
def _npy_header(h: int, w: int) -> bytes:
    """The .npy header numpy writes for a C-order uint8 [h, w, 3] array (made once a size:
    numpy's own writer takes 4 us, longer than a small image's pixels)."""
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, {"descr": "|u1", "fortran_order": False, "shape": (h, w, 3)})
    return head.getvalue()


def npy_layout(data: bytes | memoryview) -> tuple[int, int, int]:
    """(height, width, offset of the pixels) of a tensor sample.

    Raises:
        ValueError: not .npy, not uint8 [H, W, 3] in C order, or shorter than its header
        says (truncated).
    """
    if bytes(data[:6]) != MAGIC:
        raise ValueError("not a .npy array (no magic)")
    try:  # the native parser: headers as numpy writes them (a strict subset of what it reads)
        info = _native.probe(data)
        return info["height"], info["width"], info["data_offset"]
    except ValueError:
        pass  # numpy's parser decides, and says what is wrong
    f = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            raise ValueError(f"version {version} is not read here")
    except Exception as e:  # numpy's header parser: ValueError, SyntaxError, TypeError, EOFError ...
        raise ValueError(f"unreadable .npy header: {type(e).__name__}: {e}") from None
    if dtype != np.uint8 or len(shape) != 3 or shape[2] != 3 or fortran:
        order = "Fortran order" if fortran else "C order"
        raise ValueError(f"a tensor sample must be uint8 [H, W, 3] in C order, not {dtype} {list(shape)} in {order}")
    h, w = int(shape[0]), int(shape[1])
    offset = f.tell()
    if len(data) < offset + h * w * 3:
        raise ValueError(f"truncated .npy: {len(data) - offset} bytes of pixels, {h * w * 3} expected")
    if h < 1 or w < 1:
        raise ValueError(f"empty image {h}x{w}")
    return h, w, offset


def npy_rgb(data: bytes | memoryview) -> np.ndarray:
    """The pixels of a tensor sample as a read-only [H, W, 3] view of `data` (no copy)."""
    h, w, offset = npy_layout(data)
    return np.frombuffer(data, np.uint8, count=h * w * 3, offset=offset).reshape(h, w, 3)
