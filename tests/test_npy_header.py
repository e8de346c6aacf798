"""The native .npy header parser (the probe's fast path for tensor samples) against
numpy's own: everything numpy writes for uint8 [H, W, 3] is read, and wherever the
native parser accepts a header, numpy reads the same shape, dtype and pixel offset."""
from __future__ import annotations

import io
import itertools

import numpy as np
import pytest

from gpudecode import _native
from gpudecode.tensors import encode_npy, npy_layout

from fuzz.harness import _numpy_header, npy as npy_target


def _raw(header: str, version=(1, 0), pixels: int = 10_000) -> bytes:
    h = header.encode("latin1")
    pre = b"\x93NUMPY" + bytes(version)
    size = len(h).to_bytes(2 if version == (1, 0) else 4, "little")
    return pre + size + h + bytes(pixels)


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
@pytest.mark.parametrize("shape", [(1, 1, 3), (224, 224, 3), (7, 3000, 3), (70000, 1, 3)])
def test_what_numpy_writes_is_read(version, shape):
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.zeros(shape, np.uint8), version=version)
    data = buf.getvalue()
    info = _native.probe(data)
    ref = _numpy_header(data)
    assert (info["format"], info["height"], info["width"]) == ("npy", shape[0], shape[1])
    assert ref is not None and info["data_offset"] == ref[3] == len(data) - shape[0] * shape[1] * 3
    assert npy_layout(data) == (shape[0], shape[1], ref[3])
    npy_target(data)


HEADERS = [
    "{'descr': '|u1', 'fortran_order': False, 'shape': (4, 5, 3), }",
    "{'shape': (4, 5, 3), 'fortran_order': False, 'descr': '<u1'}",
    '{"descr": "u1", "fortran_order": False, "shape": (4,5,3)}\n',
    "  {'descr':'|u1','fortran_order':False,'shape':(4 , 5 , 3 ,)}   \n",
    "{'descr': '|u1',\r\n 'fortran_order': False,\n\t'shape': (4, 5, 3)}\t\r\n",  # inside the braces: any space
    # refused natively (outside the braces the header is Python lines, where indentation
    # counts: numpy refuses the first two, a fuzzer's find); numpy decides (some it
    # reads, most it refuses)
    "{'descr': '|u1', 'fortran_order': False, 'shape': (1 , 1, 3), }        \r\r\r          ",
    "{'descr': '|u1', 'fortran_order': False, 'shape': (4, 5, 3)}\n  ",
    "\n{'descr': '|u1', 'fortran_order': False, 'shape': (4, 5, 3)}",
    "{'descr': 'uint8', 'fortran_order': False, 'shape': (4, 5, 3), }",
    "{'descr': '|u1', 'fortran_order': True, 'shape': (4, 5, 3), }",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 5, 3), }",
    "{'descr': '|u1', 'fortran_order': False, 'shape': (4, 5), }",
    "{'descr': '|u1', 'fortran_order': False, 'shape': (4, 5, 3, 1), }",
    "{'descr': '|u1', 'fortran_order': False, 'shape': (4, 5, 4), }",
    "{'descr': '|u1', 'fortran_order': False, 'shape': (04, 5, 3), }",
    "{'descr': '|u1', 'fortran_order': False, 'shape': (4_0, 5, 3), }",
    "{'descr': '|u1', 'fortran_order': False, 'shape': (0, 5, 3), }",
    "{'descr': '|u1', 'fortran_order': False, 'shape': (99999999999, 5, 3), }",
    "{'descr': '|u1', 'fortran_order': False, 'shape': (-4, 5, 3), }",
    "{'descr': '|u1', 'fortran_order': False, 'shape': (4., 5, 3), }",
    "{'descr': '|u1', 'fortran_order': False, 'shape': (4, 5, 3), 'x': 1}",
    "{'descr': '|u1', 'fortran_order': False, 'shape': (4, 5, 3), 'shape': (4, 5, 3)}",
    "{'descr': '|u1', 'fortran_order': False}",
    "{'descr': '|u1', 'fortran_order': False, 'shape': (4, 5, 3)} x",
    "{'descr': '|u1', 'fortran_order': False, 'shape': (4, 5, 3)",
    "{'descr': '|u\\x31', 'fortran_order': False, 'shape': (4, 5, 3)}",
    "{'descr': '|u1', 'fortran_order': Falsey, 'shape': (4, 5, 3)}",
    "{'descr': '|u1', 'fortran_order': 0, 'shape': (4, 5, 3)}",
    "{'descr': '|u1' 'fortran_order': False, 'shape': (4, 5, 3)}",
    "",
]


@pytest.mark.parametrize("header", HEADERS)
@pytest.mark.parametrize("version", [(1, 0), (2, 0)])
def test_native_accepts_a_subset_of_numpy(header, version):
    data = _raw(header, version)
    npy_target(data)  # the differential check (also what `make fuzz` drives)
    native_ok = True
    try:
        _native.probe(data)
    except ValueError:
        native_ok = False
    assert native_ok == (HEADERS.index(header) < 5)


def test_truncations_and_pixels_cut_off():
    good = encode_npy(np.arange(4 * 5 * 3, dtype=np.uint8).reshape(4, 5, 3))
    for n in range(len(good)):
        data = good[:n]
        npy_target(data)
        with pytest.raises(ValueError):
            _native.probe(data)
        with pytest.raises(ValueError):
            npy_layout(data)
    # header fields flipped byte by byte: never read out of bounds, never disagreeing with numpy
    for i, bit in itertools.product(range(6, 128), (0x01, 0x20, 0x80)):
        data = bytearray(good)
        data[i] ^= bit
        npy_target(bytes(data))
