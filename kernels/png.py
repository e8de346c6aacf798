"""PNG's pixel half, one source for the CPU and the GPU: undo the row filters, then turn
the samples into 8-bit RGB, as libpng does for the CPU decoder (palette to RGB, grey of 1,
2 or 4 bits scaled to 8, 16 bits to their high byte, alpha dropped, grey copied to R, G
and B: csrc/png_decode.cpp's transforms).

The input of a batch is each image's inflated IDAT stream (`src`, one flat uint8 buffer,
image i at `src_off[i]`): `h` rows of one filter-type byte and `stride` bytes. Unfiltering
happens in place, a pixel's bytes at a time (`unfilter_unit`, the one source of the
filters' arithmetic): a pixel depends on the one to its left and on the two above it
(above and above-left). The CPU twin takes an image's pixels in row order. The CUDA kernel
gives each image a block and each of its rows a thread, and runs them as a wavefront: at
step t the thread of row j unfilters pixel t - j, and the block synchronizes between steps,
so every pixel's three neighbours are done one step or more before it (a block of R rows
takes w + R - 1 steps, a chunk of R rows at a time for a taller image, where one thread per
byte lane would walk all w * h pixels of its image in order). A filter type over 4 is the
image's error (BAD_FILTER).

Before them on a GPU, where nvCOMP inflated the streams (raw Deflate: it reads no zlib
wrapper, so it checks no checksum), the Adler-32 of each inflated stream is computed
and compared with the one its zlib wrapper stores, as zlib does for libpng on the CPU: a
mismatch is the image's error (BAD_ADLER). A stream is cut into ADLER_CHUNK-byte pieces,
each summed by one thread (`adler_part`), the pieces added up modulo 65521.

Then every output pixel is independent: a thread per pixel (CUDA), a loop (CPU), reading
the unfiltered samples at their bit depth. `meta` holds, per image, [h, w, stride, bpp,
depth, colour type, out offset]; `palettes` [N, 256, 3] (unused entries 0, what libpng
reads for an index past the palette).
"""
from __future__ import annotations

import functools
from typing import Callable

import numpy as np

# meta's columns
H, W, STRIDE, BPP, DEPTH, COLOR, OUT = range(7)
META = 7
ROWS_MAX = 256  # rows the unfilter kernel's block takes at a time (its threads)
# an image's error codes (errors[i]): its filter, its stream's checksum
BAD_FILTER, BAD_ADLER = 1, 2
ADLER_MOD = 65521  # Adler-32's modulus (RFC 1950)
ADLER_CHUNK = 256  # bytes a thread sums at a time (its sums stay far inside int64)


def unfilter_unit(src, r, row, x0, bpp, y, ft, stride):
    """Bytes x0 .. x0 + bpp of the row at src[r] (its filter type `ft`, 0 to 4, in
    src[r]; `row` bytes from one row to the next, `y` its index) unfiltered in place: a
    pixel's bytes (one byte where samples are packed below 8 bits). Their left neighbours
    and the row above must be unfiltered already."""
    for k in range(bpp):
        x = x0 + k
        if x >= stride:
            return
        i = r + 1 + x
        a = np.int32(src[i - bpp]) if x >= bpp else np.int32(0)
        b = np.int32(src[i - row]) if y > 0 else np.int32(0)
        c = np.int32(src[i - row - bpp]) if (y > 0 and x >= bpp) else np.int32(0)
        v = np.int32(src[i])
        if ft == 1:
            v += a
        elif ft == 2:
            v += b
        elif ft == 3:
            v += (a + b) >> 1
        elif ft == 4:
            p = a + b - c
            pa = abs(p - a)
            pb = abs(p - b)
            pc = abs(p - c)
            if pa <= pb and pa <= pc:
                v += a
            elif pb <= pc:
                v += b
            else:
                v += c
        src[i] = np.uint8(v & 255)


def adler_part(src, base, n, start, end):
    """Bytes start <= p < end of the n-byte stream at src[base:]: (sum of d_p, sum of
    (n - p) * d_p), each modulo ADLER_MOD. Summed over every piece of a stream they give
    its Adler-32: a = 1 + S, b = n + W (mod 65521), the checksum b * 65536 + a."""
    s = np.int64(0)
    t = np.int64(0)
    for j in range(end - start):
        d = np.int64(src[base + start + j])
        s += d
        t += j * d  # (at most 255 * 255 * 256 / 2: no overflow for a piece of ADLER_CHUNK)
    s %= ADLER_MOD
    # sum (n - start - j) d = (n - start) * s - t, kept non-negative before the modulo
    w = ((n - start) % ADLER_MOD * s + ADLER_MOD - t % ADLER_MOD) % ADLER_MOD
    return s, w


def adler_value(n, s, w):
    """The Adler-32 of an n-byte stream from its pieces' sums S and W (adler_part)."""
    a = (1 + s) % ADLER_MOD
    b = (n % ADLER_MOD + w) % ADLER_MOD
    return b * 65536 + a


def rgb_pixel(src, base, stride, depth, color, palette, y, x, out, o):
    """Output pixel (y, x) of an unfiltered image at src[base:] into out[o:o + 3]."""
    r = base + y * (stride + 1) + 1
    if depth < 8:  # grey or palette indices, packed from the high bit
        bit = x * depth
        v = (np.int32(src[r + (bit >> 3)]) >> (8 - depth - (bit & 7))) & ((1 << depth) - 1)
        if color == 3:
            out[o] = palette[v, 0]
            out[o + 1] = palette[v, 1]
            out[o + 2] = palette[v, 2]
        else:
            g = np.uint8(v * (255 // ((1 << depth) - 1)))
            out[o] = g
            out[o + 1] = g
            out[o + 2] = g
        return
    step = depth >> 3  # bytes a sample: 1 or 2 (the high byte first)
    if color == 3:
        v = np.int32(src[r + x])
        out[o] = palette[v, 0]
        out[o + 1] = palette[v, 1]
        out[o + 2] = palette[v, 2]
    elif color == 0 or color == 4:
        s = r + x * step * (1 if color == 0 else 2)
        g = src[s]
        out[o] = g
        out[o + 1] = g
        out[o + 2] = g
    else:  # 2: RGB, 6: RGBA
        s = r + x * step * (3 if color == 2 else 4)
        out[o] = src[s]
        out[o + 1] = src[s + step]
        out[o + 2] = src[s + 2 * step]


# ---- the CPU twin ----------------------------------------------------------------------

@functools.cache
def _cpu():
    import numba

    from ._compile import cpu_jit

    unit = numba.njit(nogil=True, inline="always")(unfilter_unit)
    pixel = numba.njit(nogil=True, inline="always")(rgb_pixel)

    @cpu_jit()
    def decode_cpu(src, src_off, meta, palettes, out, errors, rows):  # pragma: no cover (numba)
        for i in rows:
            base = src_off[i]
            h, w, stride, bpp = meta[i, H], meta[i, W], meta[i, STRIDE], meta[i, BPP]
            row = stride + 1
            bad = 0
            for y in range(h):
                r = base + y * row
                ft = src[r]
                if ft > 4:
                    bad = BAD_FILTER
                    break
                for x0 in range(0, stride, bpp):
                    unit(src, r, row, x0, bpp, y, ft, stride)
            errors[i] = bad
            if bad:
                continue
            o = meta[i, OUT]
            for y in range(h):
                for x in range(w):
                    pixel(src, base, stride, meta[i, DEPTH], meta[i, COLOR], palettes[i], y, x, out, o + (y * w + x) * 3)

    return decode_cpu


@functools.cache
def _adler_cpu():
    import numba

    from ._compile import cpu_jit

    part = numba.njit(nogil=True, inline="always")(adler_part)
    value = numba.njit(nogil=True, inline="always")(adler_value)

    @cpu_jit()
    def adler_cpu(src, src_off, lengths, out):  # pragma: no cover (numba)
        for i in range(src_off.shape[0]):
            n = lengths[i]
            s = np.int64(0)
            w = np.int64(0)
            for start in range(0, n, ADLER_CHUNK):
                cs, cw = part(src, src_off[i], n, start, min(start + ADLER_CHUNK, n))
                s += cs
                w += cw
            out[i] = value(n, s % ADLER_MOD, w % ADLER_MOD)

    return adler_cpu


def adler32_cpu(src: np.ndarray, src_off: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The Adler-32 of each stream src[src_off[i]:src_off[i] + lengths[i]], by the pieces
    the CUDA kernel sums (the twin its test holds to zlib.adler32)."""
    out = np.zeros(len(src_off), np.int64)
    _adler_cpu()(src, np.asarray(src_off, np.int64), np.asarray(lengths, np.int64), out)
    return out


def decode_rgb_cpu(src: np.ndarray, src_off: np.ndarray, meta: np.ndarray, palettes: np.ndarray, out: np.ndarray,
                   errors: np.ndarray, rows: np.ndarray | None = None) -> None:
    """The CPU twin over images `rows` (default all): src unfiltered in place, each
    image's RGB at out[meta[i, OUT]:], errors[i] 0 or the image's error code."""
    if rows is None:
        rows = np.arange(len(src_off), dtype=np.int64)
    _cpu()(src, src_off, meta, palettes, out, errors, rows)


# ---- CUDA --------------------------------------------------------------------------------

def _unfilter_kernel(src, src_off, meta, errors):  # pragma: no cover (numba)
    """A block per image, a thread per row of a chunk of blockDim rows: the wavefront (see
    the module's doc). An image refused already is left whole."""
    i = cuda.blockIdx.x  # (cuda and unit: bound by _cuda_namespace)
    j = cuda.threadIdx.x
    rows = cuda.blockDim.x
    refused = errors[i]
    cuda.syncthreads()  # (every thread has read it before one of them may write it)
    if refused:
        return
    base = src_off[i]
    h, stride, bpp = meta[i, H], meta[i, STRIDE], meta[i, BPP]
    row = stride + 1
    units = (stride + bpp - 1) // bpp
    for y0 in range(0, h, rows):
        y = y0 + j
        r = base + y * row
        live = y < h
        ft = np.uint8(0)
        if live:
            ft = src[r]
            if ft > 4:
                errors[i] = BAD_FILTER
                live = False
        for t in range(units + rows - 1):  # (the same count in every thread: each reaches every barrier)
            u = t - j
            if live and u >= 0 and u < units:
                unit(src, r, row, u * bpp, bpp, y, ft, stride)
            cuda.syncthreads()


def _adler_kernel(src, src_off, lengths, acc):  # pragma: no cover (numba)
    """Blocks along y: one image each; each thread sums pieces of ADLER_CHUNK bytes,
    its totals added into acc[i] (int64 [N, 2], zero at the start)."""
    i = cuda.blockIdx.y
    n = lengths[i]
    s = np.int64(0)
    w = np.int64(0)
    for c in range(cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x, (n + ADLER_CHUNK - 1) // ADLER_CHUNK,
                   cuda.gridDim.x * cuda.blockDim.x):
        start = c * ADLER_CHUNK
        cs, cw = part(src, src_off[i], n, start, min(start + ADLER_CHUNK, n))
        s += cs
        w += cw
    if s != 0 or w != 0:
        cuda.atomic.add(acc, (i, 0), s)
        cuda.atomic.add(acc, (i, 1), w)


def _adler_check_kernel(acc, lengths, expected, errors):  # pragma: no cover (numba)
    """A thread per image: its sums' Adler-32 against the stored one; BAD_ADLER if not."""
    i = cuda.grid(1)
    if i >= lengths.shape[0] or errors[i]:
        return
    if value(lengths[i], acc[i, 0] % ADLER_MOD, acc[i, 1] % ADLER_MOD) != expected[i]:
        errors[i] = BAD_ADLER


def _rgb_kernel(src, src_off, meta, palettes, out, errors):  # pragma: no cover (numba)
    """Blocks along y: one image each; the block's threads stride over its pixels."""
    i = cuda.blockIdx.y
    if errors[i]:
        return
    w = meta[i, W]
    n = meta[i, H] * w
    for p in range(cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x, n,
                   cuda.gridDim.x * cuda.blockDim.x):
        y = p // w
        x = p - y * w
        pixel(src, src_off[i], meta[i, STRIDE], meta[i, DEPTH], meta[i, COLOR], palettes[i], y, x, out,
              meta[i, OUT] + p * 3)


def _cuda_namespace(device) -> dict:
    from numba import cuda

    return {**globals(), "cuda": cuda, "unit": device(unfilter_unit), "pixel": device(rgb_pixel),
            "part": device(adler_part), "value": device(adler_value)}


_KERNELS: dict[str, Callable] = {"unfilter": _unfilter_kernel, "rgb": _rgb_kernel, "adler": _adler_kernel,
                                 "adler_check": _adler_check_kernel}


@functools.cache
def cuda_kernels() -> dict:
    """name -> CUDA kernel (_KERNELS), compiled on first use (and kept on disk)."""
    from numba import cuda

    from ._compile import cuda_cache, cuda_device, rebind

    ns = _cuda_namespace(cuda_device)
    cache = cuda_cache()
    return {name: cuda.jit(cache=cache)(rebind(fn, ns)) for name, fn in _KERNELS.items()}


def check_adler_cuda(src, src_off, lengths, expected, acc, errors, longest: int, stream=0) -> None:
    """On the GPU: errors[i] = BAD_ADLER where the Adler-32 of the stream
    src[src_off[i]:src_off[i] + lengths[i]] is not expected[i]; images with an error
    already are left. Device arrays (numba's, or torch's through
    __cuda_array_interface__), launched on `stream`: src uint8; src_off, lengths,
    expected int64; acc int64 [N, 2] of zeros (the sums); errors int32. `longest`: the
    longest stream's length (the grid's width)."""
    n = int(src_off.shape[0])
    if n == 0:
        return
    k = cuda_kernels()
    threads = 256
    pieces = (int(longest) + ADLER_CHUNK - 1) // ADLER_CHUNK
    across = max(1, min(32, (pieces + threads - 1) // threads))
    k["adler"][(across, n), threads, stream](src, src_off, lengths, acc)
    k["adler_check"][(n + 127) // 128, 128, stream](acc, lengths, expected, errors)


def wavefront_rows(tallest: int) -> int:
    """The unfilter kernel's block: the rows it takes at a time (a multiple of 32, at most
    ROWS_MAX), for a batch whose tallest image has `tallest` rows."""
    return max(32, min(ROWS_MAX, (int(tallest) + 31) // 32 * 32))


def decode_rgb_cuda(src, src_off, meta, palettes, out, errors, stream=0, tallest: int = ROWS_MAX) -> None:
    """The same on the GPU: every argument a device array (numba's, or torch's through
    __cuda_array_interface__), launched on `stream` (numba stream or 0). errors (int32):
    0, or an image refused already (left as it is). `tallest`: the rows of the batch's
    tallest image (the unfilter's block: wavefront_rows)."""
    k = cuda_kernels()
    unfilter, to_rgb = k["unfilter"], k["rgb"]
    n = int(src_off.shape[0])
    if n == 0:
        return
    unfilter[n, wavefront_rows(tallest), stream](src, src_off, meta, errors)
    to_rgb[(16, n), 256, stream](src, src_off, meta, palettes, out, errors)


def compile_ptx(cc: tuple[int, int] = (9, 0)) -> dict[str, str]:
    """Each kernel's PTX (_KERNELS) for compute capability `cc` (no GPU needed): what
    ptxas assembles in the tests (registers, spills)."""
    from numba import cuda, types

    from ._compile import compiling_for, cuda_device, rebind

    u8 = types.Array(types.uint8, 1, "C")
    i64 = types.Array(types.int64, 1, "C")
    m = types.Array(types.int64, 2, "C")
    pal = types.Array(types.uint8, 3, "C")
    i32 = types.Array(types.int32, 1, "C")
    ns = _cuda_namespace(cuda_device)  # (device functions made anew: compiled for `cc`)
    out = {}
    sigs = {"unfilter": (u8, i64, m, i32), "rgb": (u8, i64, m, pal, u8, i32), "adler": (u8, i64, i64, m),
            "adler_check": (m, i64, i64, i32)}
    for name, fn in _KERNELS.items():
        with compiling_for(cc):
            out[name] = cuda.compile_ptx(rebind(fn, ns), sigs[name], cc=cc)[0]
    return out
