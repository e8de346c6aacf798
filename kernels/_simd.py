"""An 8x8 float32 block transpose for the CPU twin, as LLVM vector shuffles (and an
RGB deinterleave of eight pixels' bytes, for the kernel's 1:1 path).

numba compiles a scalar transpose to one load and one store per element (about 90 µs for
a 224x900 float32 matrix on a Zen 4 core); this one loads eight rows as eight 8-wide
vectors, transposes them with three rounds of `shufflevector` (the unpack / shuffle /
128-bit-lane permute sequence every SIMD library uses) and stores eight columns: about
25 µs for the same matrix. `shufflevector` is target-independent LLVM IR, so this is
portable: LLVM picks the instructions (AVX, AVX-512, NEON, or scalar code).
"""
from __future__ import annotations

from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

_I32 = ir.IntType(32)
_I64 = ir.IntType(64)
_VEC = ir.VectorType(ir.FloatType(), 8)


def _shuffle(builder, a, b, lanes):
    return builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(_I32, 8), [ir.Constant(_I32, i) for i in lanes]))


def _splat(builder, value):
    """A float32 scalar in all eight lanes."""
    v = builder.insert_element(ir.Constant(_VEC, ir.Undefined), value, ir.Constant(_I32, 0))
    return _shuffle(builder, v, v, [0] * 8)


def _codegen(affine, stream=False, halves=1):
    """halves=2: sixteen source rows, two 8x8 blocks side by side, so that each of the
    eight destination rows gets 16 floats (one whole 64-byte line) in two adjacent
    stores, one after the other: non-temporal stores that fill a line at once (a
    write-combining buffer completed, not flushed half-full while seven other rows'
    lines are open, as the 8x8 form's do)."""
    def codegen(context, builder, signature, args):
        s, soff_v, sstride_v, d, doff_v, dstride_v = args[:6]
        s_data = context.make_array(signature.args[0])(context, builder, s).data
        d_data = context.make_array(signature.args[3])(context, builder, d).data

        def ptr(data, off, stride, k, extra=0):
            elem = builder.add(builder.add(off, builder.mul(stride, ir.Constant(_I64, k))), ir.Constant(_I64, extra))
            return builder.bitcast(builder.gep(data, [elem]), _VEC.as_pointer())

        blocks = [block8(builder, [builder.load(ptr(s_data, soff_v, sstride_v, 8 * h + i), align=4)
                                   for i in range(8)], args if affine else None) for h in range(halves)]
        for j in range(8):
            for h in range(halves):
                st = builder.store(blocks[h][j], ptr(d_data, doff_v, dstride_v, j, 8 * h),
                                   align=32 if stream else 4)
                if stream:
                    st.set_metadata("nontemporal", builder.module.add_metadata([ir.Constant(_I32, 1)]))
        return context.get_dummy_value()

    return codegen


def block8(builder, rows, affine_args):
    """The 8 columns of 8 loaded rows (an 8x8 transpose in registers), (v - sub) * mul
    applied where `affine_args` (the intrinsic's args: sub and mul at 6 and 7) are given."""
    # 1. interleave pairs of rows (unpacklo/unpackhi within 128-bit lanes)
    t = []
    for i in range(0, 8, 2):
        t.append(_shuffle(builder, rows[i], rows[i + 1], [0, 8, 1, 9, 4, 12, 5, 13]))
        t.append(_shuffle(builder, rows[i], rows[i + 1], [2, 10, 3, 11, 6, 14, 7, 15]))
    # 2. pairs of pairs: each 128-bit lane now holds 4 rows of one column
    lo, hi = [0, 1, 8, 9, 4, 5, 12, 13], [2, 3, 10, 11, 6, 7, 14, 15]
    u = []
    for a, b in ((0, 2), (4, 6)):
        u += [_shuffle(builder, t[a], t[b], lo), _shuffle(builder, t[a], t[b], hi),
              _shuffle(builder, t[a + 1], t[b + 1], lo), _shuffle(builder, t[a + 1], t[b + 1], hi)]
    # 3. join the 128-bit lanes of rows 0-3 and rows 4-7: columns 0-3, then 4-7
    cols = [_shuffle(builder, u[k], u[k + 4], [0, 1, 2, 3, 8, 9, 10, 11]) for k in range(4)]
    cols += [_shuffle(builder, u[k], u[k + 4], [4, 5, 6, 7, 12, 13, 14, 15]) for k in range(4)]
    if affine_args is not None:  # (v - sub) * mul, both broadcast
        sub, mul = _splat(builder, affine_args[6]), _splat(builder, affine_args[7])
        cols = [builder.fmul(builder.fsub(c, sub), mul) for c in cols]
    return cols


def _float32_arrays(*arrays):
    return all(isinstance(a, types.Array) and a.dtype == types.float32 for a in arrays)


@intrinsic
def transpose8x8(typingctx, src, soff, sstride, dst, doff, dstride):
    """dst.data[doff + j*dstride + i] = src.data[soff + i*sstride + j] for i, j < 8:
    element offsets and strides from each float32 array's data pointer. No bounds
    checks: the caller guarantees the 8x8 block lies inside both arrays."""
    if not _float32_arrays(src, dst):
        return None
    return types.void(src, types.int64, types.int64, dst, types.int64, types.int64), _codegen(False)


@intrinsic
def transpose8x8_affine(typingctx, src, soff, sstride, dst, doff, dstride, sub, mul):
    """transpose8x8 storing (v - sub) * mul (float32 scalars)."""
    if not _float32_arrays(src, dst):
        return None
    sig = types.void(src, types.int64, types.int64, dst, types.int64, types.int64, types.float32, types.float32)
    return sig, _codegen(True)


@intrinsic
def transpose8x8_affine_stream(typingctx, src, soff, sstride, dst, doff, dstride, sub, mul):
    """transpose8x8_affine with non-temporal stores; every destination row start must
    be 32-byte aligned."""
    if not _float32_arrays(src, dst):
        return None
    sig = types.void(src, types.int64, types.int64, dst, types.int64, types.int64, types.float32, types.float32)
    return sig, _codegen(True, True)


@intrinsic
def transpose16x8_affine_stream(typingctx, src, soff, sstride, dst, doff, dstride, sub, mul):
    """Sixteen source rows by 8 columns: dst.data[doff + j*dstride + i] = (src.data[soff +
    i*sstride + j] - sub) * mul for i < 16, j < 8, each destination row's 16 floats (one
    64-byte line: its start must be 64-byte aligned) stored non-temporally in two
    adjacent stores, one line after the other."""
    if not _float32_arrays(src, dst):
        return None
    sig = types.void(src, types.int64, types.int64, dst, types.int64, types.int64, types.float32, types.float32)
    return sig, _codegen(True, True, halves=2)


@intrinsic
def prefetch(typingctx, arr, off):
    """A hint to bring arr's element `off` into the cache (llvm.prefetch: a read, kept
    close); never faults, wherever it points. The CPU kernel asks for source rows it will
    read next: a flipped row's bytes are read from its end back, which the hardware's
    stream prefetch did not follow (bench/RESULTS.md, 2026-11-29)."""
    if not isinstance(arr, types.Array):
        return None

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        byte = ir.IntType(8).as_pointer()
        fn = builder.module.declare_intrinsic("llvm.prefetch", fnty=ir.FunctionType(ir.VoidType(), [byte, _I32, _I32,
                                                                                                   _I32]))
        # (read, locality 3: keep in every level, data cache)
        builder.call(fn, [builder.bitcast(builder.gep(data, [args[1]]), byte), ir.Constant(_I32, 0),
                          ir.Constant(_I32, 3), ir.Constant(_I32, 1)])
        return context.get_dummy_value()

    return types.void(arr, types.int64), codegen


@intrinsic
def store_fence(typingctx):
    """A sequentially consistent fence (x86: mfence), which also orders non-temporal
    stores before whatever the thread does next (handing the batch to another thread)."""
    def codegen(context, builder, signature, args):
        builder.fence("seq_cst")
        return context.get_dummy_value()

    return types.void(), codegen


@njit(nogil=True, error_model="numpy")
def transpose(src, soff, sstride, dst, doff, dstride, rows, cols, affine, sub, mul):
    """dst[doff + j*dstride + i] = src[soff + i*sstride + j] for i < rows, j < cols, on
    1-D contiguous float32 arrays: a rows x cols matrix with row stride `sstride` is
    written transposed with row stride `dstride`; with `affine`, (v - sub) * mul is
    written instead. 8x8 vector blocks, scalar edges. The affine blocks go out with
    non-temporal stores when the destination rows are 32-byte aligned (a final output
    that is not read again soon): call store_fence() before another thread reads dst."""
    if rows <= 0 or cols <= 0:
        return
    if soff < 0 or doff < 0 or soff + (rows - 1) * sstride + cols > src.shape[0] \
            or doff + (cols - 1) * dstride + rows > dst.shape[0]:
        raise IndexError("transpose: block outside the arrays")
    r8 = rows - rows % 8
    c8 = cols - cols % 8
    # column strips outermost: a strip reads 8 columns of every source row and fills 8
    # whole destination rows, which stay in L1 while they fill
    stream = affine and (dst.ctypes.data + 4 * doff) % 32 == 0 and dstride % 8 == 0
    # whole 64-byte lines where the destination rows allow it: sixteen source rows a step
    lines = stream and (dst.ctypes.data + 4 * doff) % 64 == 0 and dstride % 16 == 0
    r16 = rows - rows % 16 if lines else 0
    for j0 in range(0, c8, 8):
        for i0 in range(0, r16, 16):
            transpose16x8_affine_stream(src, soff + i0 * sstride + j0, sstride, dst, doff + j0 * dstride + i0,
                                        dstride, sub, mul)
        for i0 in range(r16, r8, 8):
            if stream:
                transpose8x8_affine_stream(src, soff + i0 * sstride + j0, sstride, dst, doff + j0 * dstride + i0,
                                           dstride, sub, mul)
            elif affine:
                transpose8x8_affine(src, soff + i0 * sstride + j0, sstride, dst, doff + j0 * dstride + i0, dstride,
                                    sub, mul)
            else:
                transpose8x8(src, soff + i0 * sstride + j0, sstride, dst, doff + j0 * dstride + i0, dstride)
    for i in range(rows):
        for j in range(c8 if i < r8 else 0, cols):  # the right edge, then the bottom rows
            v = src[soff + i * sstride + j]
            dst[doff + j * dstride + i] = (v - sub) * mul if affine else v


def _deinterleave_codegen(reverse):
    def codegen(context, builder, signature, args):
        s, soff, d, d0, d1, d2, scale = args[:7]
        s_data = context.make_array(signature.args[0])(context, builder, s).data
        d_data = context.make_array(signature.args[2])(context, builder, d).data

        bytes24 = ir.VectorType(ir.IntType(8), 24)
        raw = builder.load(builder.bitcast(builder.gep(s_data, [soff]), bytes24.as_pointer()), align=1)
        for ch, dof in enumerate((d0, d1, d2)):
            pick = [3 * k + ch for k in range(8)]
            order = ir.Constant(ir.VectorType(_I32, 8), [ir.Constant(_I32, i) for i in (pick[::-1] if reverse else pick)])
            # scale * v, the product as the resampling's unit tap computes it; then the affine
            v = builder.fmul(_splat(builder, scale), builder.uitofp(builder.shuffle_vector(raw, raw, order), _VEC))
            v = builder.fmul(builder.fsub(v, _splat(builder, args[7 + 2 * ch])), _splat(builder, args[8 + 2 * ch]))
            builder.store(v, builder.bitcast(builder.gep(d_data, [dof]), _VEC.as_pointer()), align=4)
        return context.get_dummy_value()

    return codegen


def _deinterleave_sig(src, dst):
    if not (isinstance(src, types.Array) and src.dtype == types.uint8 and _float32_arrays(dst)):
        return None
    f = types.float32
    return types.void(src, types.int64, dst, types.int64, types.int64, types.int64, f, f, f, f, f, f, f)


@intrinsic
def deinterleave3x8_u8_affine(typingctx, src, soff, dst, d0, d1, d2, scale, sub0, mul0, sub1, mul1, sub2, mul2):
    """Eight interleaved pixels, the bytes src[soff:soff + 24] of a uint8 array (r, g, b,
    r, g, b, ...), split into their channels, scaled and made affine: dst[dc + k] =
    (scale * float32(src[soff + 3k + c]) - sub_c) * mul_c for k < 8, c < 3. One load, a
    byte shuffle, a conversion and three stores a channel; the same bits as a row scaled
    into floats first and split then, without that row's store and reload (bench/RESULTS.md
    has the 1:1 path's figures). Element offsets; no bounds checks (the caller's)."""
    sig = _deinterleave_sig(src, dst)
    return None if sig is None else (sig, _deinterleave_codegen(False))


@intrinsic
def deinterleave3x8_u8_affine_reversed(typingctx, src, soff, dst, d0, d1, d2, scale, sub0, mul0, sub1, mul1, sub2,
                                       mul2):
    """deinterleave3x8_u8_affine with the eight pixels in reverse order (a flip):
    dst[dc + k] = (scale * float32(src[soff + 3(7 - k) + c]) - sub_c) * mul_c."""
    sig = _deinterleave_sig(src, dst)
    return None if sig is None else (sig, _deinterleave_codegen(True))


__all__ = ["prefetch", "store_fence", "transpose", "transpose8x8", "transpose8x8_affine", "transpose8x8_affine_stream",
           "transpose16x8_affine_stream",
           "deinterleave3x8_u8_affine", "deinterleave3x8_u8_affine_reversed"]
