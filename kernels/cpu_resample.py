"""The CPU twin's resample and its batch loop: source rows to the output, in separable
passes (the layout in cpu_passes.py's header), the 1:1 path, one sample at a time.
Every function here is compiled for the CPU by cpu_twin.py."""
from __future__ import annotations

from ._compile import inline_once


def _rows_u8(dst, src, p, step, w, count, n):
    """dst[t] = sum_k w[k] * src[p + k*step + t] for t < n: up to three taps in one store
    per element (the order of the sum is that of accumulating tap by tap)."""
    s0 = src[p:p + n]
    w0 = w[0]
    if count == 1:
        for t in range(n):
            dst[t] = w0 * float32(s0[t])
        return
    s1 = src[p + step:p + step + n]
    w1 = w[1]
    if count == 2:
        for t in range(n):
            dst[t] = w0 * float32(s0[t]) + w1 * float32(s1[t])
        return
    s2 = src[p + 2 * step:p + 2 * step + n]
    w2 = w[2]
    for t in range(n):
        dst[t] = w0 * float32(s0[t]) + w1 * float32(s1[t]) + w2 * float32(s2[t])
    for k in range(3, count):
        sk = src[p + k * step:p + k * step + n]
        wk = w[k]
        for t in range(n):
            dst[t] += wk * float32(sk[t])


def _rows_u8_planar(dst, src, p, step, sc, w, count, n):
    """_rows_u8 for planar pixels (columns adjacent, channel planes `sc` apart: a
    contiguous CHW image, or grey with sc = 0): dst[3t + c] = sum_k w[k] * src[p + k*step
    + c*sc + t] for t < n, the three channels of a tap read as three unit-stride rows and
    stored interleaved in one pass (the sum's order is _rows_u8's)."""
    w0 = w[0]
    r0, g0, b0 = src[p:p + n], src[p + sc:p + sc + n], src[p + 2 * sc:p + 2 * sc + n]
    if count == 1:
        for t in range(n):
            dst[3 * t] = w0 * float32(r0[t])
            dst[3 * t + 1] = w0 * float32(g0[t])
            dst[3 * t + 2] = w0 * float32(b0[t])
        return
    w1 = w[1]
    q = p + step
    r1, g1, b1 = src[q:q + n], src[q + sc:q + sc + n], src[q + 2 * sc:q + 2 * sc + n]
    if count == 2:
        for t in range(n):
            dst[3 * t] = w0 * float32(r0[t]) + w1 * float32(r1[t])
            dst[3 * t + 1] = w0 * float32(g0[t]) + w1 * float32(g1[t])
            dst[3 * t + 2] = w0 * float32(b0[t]) + w1 * float32(b1[t])
        return
    w2 = w[2]
    q = p + 2 * step
    r2, g2, b2 = src[q:q + n], src[q + sc:q + sc + n], src[q + 2 * sc:q + 2 * sc + n]
    for t in range(n):
        dst[3 * t] = w0 * float32(r0[t]) + w1 * float32(r1[t]) + w2 * float32(r2[t])
        dst[3 * t + 1] = w0 * float32(g0[t]) + w1 * float32(g1[t]) + w2 * float32(g2[t])
        dst[3 * t + 2] = w0 * float32(b0[t]) + w1 * float32(b1[t]) + w2 * float32(b2[t])
    for k in range(3, count):
        wk = w[k]
        q = p + k * step
        rk, gk, bk = src[q:q + n], src[q + sc:q + sc + n], src[q + 2 * sc:q + 2 * sc + n]
        for t in range(n):
            dst[3 * t] += wk * float32(rk[t])
            dst[3 * t + 1] += wk * float32(gk[t])
            dst[3 * t + 2] += wk * float32(bk[t])


def _rows_f32(dst, rows, first, w, count):
    """dst[t] = sum_k w[k] * rows[first + k, t]: the float twin of _rows_u8."""
    n = dst.shape[0]
    s0 = rows[first]
    w0 = w[0]
    if count == 1:
        for t in range(n):
            dst[t] = w0 * s0[t]
        return
    s1 = rows[first + 1]
    w1 = w[1]
    if count == 2:
        for t in range(n):
            dst[t] = w0 * s0[t] + w1 * s1[t]
        return
    s2 = rows[first + 2]
    w2 = w[2]
    for t in range(n):
        dst[t] = w0 * s0[t] + w1 * s1[t] + w2 * s2[t]
    for k in range(3, count):
        sk = rows[first + k]
        wk = w[k]
        for t in range(n):
            dst[t] += wk * sk[t]


def _vertical_pass(src, g, yf, yc, yw, yv, oh, work, wrow):
    """Stage 1 of a sample: the box's rows resampled to oh rows, [oh, bw*3] interleaved,
    into work[:oh * bw * 3]; wrow: a row of weights' room (yw.shape[1] at least)."""
    bw = g[BW]
    sy = g[SY]
    sx = g[SX]
    sc = g[SC]
    base = g[OFFSET] + g[TOP] * sy + g[LEFT] * sx
    inv255 = float32(1.0 / 255.0)
    n3 = bw * 3
    vert = work[:oh * n3].reshape((oh, n3))
    packed = sx == 3 and sc == 1
    for y in range(oh):
        row = vert[y]
        if not yv[y]:
            row[:] = 0.0
            continue
        for k in range(yc[y]):
            wrow[k] = yw[y, k] * inv255
        p = base + yf[y] * sy
        if packed:
            if y + 2 < oh and yv[y + 2]:  # the source rows of the row after next on their way meanwhile
                for k in range(yc[y + 2]):
                    q0 = base + (yf[y + 2] + k) * sy
                    for q in range(q0, q0 + n3 + 63, 64):
                        prefetch(src, q)
            _rows_u8(row, src, p, sy, wrow, yc[y], n3)
        elif sx == 1:  # planar: CHW (the direct call's usual image) or grey
            _rows_u8_planar(row, src, p, sy, sc, wrow, yc[y], bw)
        else:
            row[:] = 0.0
            for k in range(yc[y]):
                w = wrow[k]
                for i in range(bw):
                    q = U(p + k * sy + i * sx)
                    j = U(3 * i)
                    row[j] += w * float32(src[q])
                    row[j + U(1)] += w * float32(src[q + U(sc)])
                    row[j + U(2)] += w * float32(src[q + U(2 * sc)])


def _horizontal_pass(work, oh, bw, ow, xf, xc, xw, xv):
    """Stage 3: the transposed rows [bw*3, oh] resampled to [ow*3, oh] (the three channel
    rows of a column are adjacent, so each output column is one contiguous weighted sum
    of [3*oh] blocks), after the two [oh, bw*3] areas of work."""
    n3 = bw * 3
    vt = work[oh * n3:2 * oh * n3].reshape((bw, 3 * oh))
    px3 = work[2 * oh * n3:2 * oh * n3 + ow * 3 * oh].reshape((ow, 3 * oh))
    for x in range(ow):
        if xv[x]:
            _rows_f32(px3[x], vt, xf[x], xw[x], xc[x])
        else:
            px3[x, :] = 0.0


def _pad_fill_pass(px3, g, yv, xv, oh, ow):
    """The padding (rows or columns outside the resized frame) in the fill's colour, in
    px3 [ow, 3*oh] (a column's three channel rows adjacent)."""
    for c in range(3):
        v = float32(g[FILLR + c]) * float32(1.0 / 255.0)
        for x in range(ow):
            row = px3[x, c * oh:(c + 1) * oh]
            if not xv[x]:
                row[:] = v
                continue
            for y in range(oh):
                if not yv[y]:
                    row[y] = v


def _clamp_pass(px):
    for i in range(px.shape[0]):
        px[i] = clamp01(px[i])


def _output_pass(work, oh, bw, ow, mean, std, normalize, to_uint8, dst, doff, nhwc, rs, ps):
    """Stage 5: each channel transposed to [oh, ow] into dst, with Normalize as
    encode_output does it on the way (or after the uint8 scaling); for NHWC, px [ow*3, oh]
    transposed as a whole is [oh, ow*3], the NHWC image: Normalize goes first, in place.
    rs, ps: dst's row and plane strides (the image's own, ow or 3 * ow, and oh * ow; a
    batch's larger ones for a sample of its own size at the top-left of its place)."""
    n3 = bw * 3
    px = work[2 * oh * n3:2 * oh * n3 + ow * 3 * oh].reshape((ow * 3, oh))
    pxs = work[2 * oh * n3:2 * oh * n3 + ow * 3 * oh]
    if nhwc or (to_uint8 and not normalize):
        _encode_pass(px, ow, mean, std, normalize, to_uint8)
    if nhwc:  # the (v - 0) * 1 affine only to get the streaming stores
        transpose(pxs, 0, oh, dst, doff, rs, 3 * ow, oh, True, float32(0.0), float32(1.0))
        return
    for c in range(3):
        m = mean[c] if normalize else float32(0.0)
        s = float32(1.0) / std[c] if normalize else float32(1.0)
        transpose(pxs, c * oh, 3 * oh, dst, doff + c * ps, rs, ow, oh, normalize, m, s)


@inline_once
def _cpu_sample(src, g, args, order, mean, std, normalize, to_uint8, antialias, oh, ow, dst, doff, work, nhwc,
                ints, flts, stats, taps, rs, ps):
    """One sample; writes its float32 result at dst[doff:], as [3, oh, ow], or as [oh, ow,
    3] with `nhwc`, rows `rs` floats apart and planes `ps` (see _output_pass). Its stages are functions of their own, so that a
    benchmark times each (gpudecode.bench.suite.kernels --stages). Its small scratch is
    the caller's (nothing is allocated): ints (int64: the axes' indices, a histogram),
    flts (float32: the axes' weights, `taps` a row, then the program's tables) and stats
    (float64: a barrier's statistic); cpu_twin.small_shapes gives their sizes."""
    bh = g[BH]
    bw = g[BW]
    mode = g[FILTER]
    cubic = mode == 1
    yf, yc, yw, yv = _axis_weights(oh, g[VH], g[OY], bh, g[VFLIP] != 0, antialias, mode, ints[:3 * oh],
                                   flts[:oh * taps], g[PAD])
    xf, xc, xw, xv = _axis_weights(ow, g[VW], g[OX], bw, g[FLIP] != 0, antialias, mode,
                                   ints[3 * oh:3 * (oh + ow)], flts[oh * taps:(oh + ow) * taps], g[PAD])
    n3 = bw * 3
    # 1. vertical: the box's rows resampled to oh rows, [oh, bw*3] interleaved
    _vertical_pass(src, g, yf, yc, yw, yv, oh, work, flts[(oh + ow) * taps:(oh + ow + 1) * taps])
    # 2. transpose to [bw*3, oh], so the horizontal pass reads whole rows too
    transpose(work, 0, n3, work, oh * n3, oh, oh, n3, False, float32(0.0), float32(1.0))
    # 3. horizontal: [ow*3, oh]
    _horizontal_pass(work, oh, bw, ow, xf, xc, xw, xv)
    if cubic:  # the cubic overshoots; a uint8 image resized stays in its range
        _clamp_pass(work[2 * oh * n3:2 * oh * n3 + ow * 3 * oh])
    if g[FILLR] != 0 or g[FILLG] != 0 or g[FILLB] != 0:  # (zeros are there already)
        _pad_fill_pass(work[2 * oh * n3:2 * oh * n3 + ow * 3 * oh].reshape((ow, 3 * oh)), g, yv, xv, oh, ow)
    # 4. the sample's program, op by op over the whole image (a second image-sized area
    # after px for the ops that read neighbours)
    if order[0] >= 0:
        px = work[2 * oh * n3:2 * oh * n3 + ow * 3 * oh].reshape((ow * 3, oh))
        base2 = 2 * oh * n3 + ow * 3 * oh
        px2 = work[base2:base2 + ow * 3 * oh].reshape((ow * 3, oh))
        aux = work[base2 + ow * 3 * oh:base2 + 3 * ow * 3 * oh].reshape((2, ow * 3 * oh))
        tables = (oh + ow + 1) * taps
        _program(px, px2, aux, ow, oh, order, args, stats, flts[tables:tables + 768],
                 flts[tables + 768:tables + 768 + MAX_BLUR + 1], ints[3 * (oh + ow):3 * (oh + ow) + 256])
    # 5. the output, transposed (and normalized) into dst
    _output_pass(work, oh, bw, ow, mean, std, normalize, to_uint8, dst, doff, nhwc, rs, ps)


def _zero_around(flat, doff, sh, sw, oh, ow, nhwc):
    """Zeros around a sample of its own size (sh, sw) written at the top-left of its place
    at flat[doff:] in the batch's [3, oh, ow] (or [oh, ow, 3] with `nhwc`)."""
    planes = 1 if nhwc else 3
    width = 3 * sw if nhwc else sw
    full = 3 * ow if nhwc else ow
    for c in range(planes):
        base = doff + c * oh * full
        for y in range(sh):
            row = flat[base + y * full + width:base + (y + 1) * full]
            for x in range(row.shape[0]):
                row[x] = 0.0
        rest = flat[base + sh * full:base + oh * full]
        for x in range(rest.shape[0]):
            rest[x] = 0.0


def _is_identity(g, order, oh, ow):
    """The sample needs no resampling and no ColorJitter: its box is read 1:1 (a crop,
    flip and padding at most: CenterCrop or RandomCrop of a stored image of the training
    size, or no geometry at all), from packed HWC pixels or planar ones (CHW, grey)."""
    return (g[BH] == g[VH] and g[BW] == g[VW] and order[0] < 0 and ((g[SX] == 3 and g[SC] == 1) or g[SX] == 1)
            and g[VH] >= 1 and g[VW] >= 1 and g[VFLIP] == 0)


def _scale_row(t, src, p, n, inv255):
    """t[i] = src[p + i] / 255 as the resampling's single unit tap computes it."""
    s = src[p:p + n]
    for i in range(n):
        t[i] = inv255 * float32(s[i])


def _fill(o, a, b, v):
    for x in range(a, b):
        o[x] = v


def _pad_row(o, inside, x0, x1, ow, pad):
    """The padded part of an output channel row of the 1:1 path: all of it where the row is
    outside the source, else its columns left of x0 and from x1 on. (_fill, not a slice
    assignment: that cost more per row than the row itself.)"""
    if not inside:
        _fill(o, 0, ow, pad)
        return
    if x0 > 0:
        _fill(o, 0, x0, pad)
    if x1 < ow:
        _fill(o, x1, ow, pad)


def _frame_cols(dst, r0, ps, src, p, sx, sc, x0, x1, ow, ox, vw, flip, pad, inv255, subs, muls):
    """The padded columns of an output row of the 1:1 path (left of x0, from x1 on; the
    three channel rows at dst[r0 + c * ps:]) where a padding mode reads the frame
    (frame_index): column v of the frame row at src[p + v * sx] (channel c sc further),
    as _plane_row computes a pixel; each column's index found once for its three channels."""
    a = min(max(x0, 0), ow) if x1 > x0 else ow  # (the columns left of the window: 0 .. a; right: b .. ow)
    b = max(min(x1, ow), a) if x1 > x0 else ow
    for x in range(a):
        _frame_px(dst, r0, ps, x, src, p + frame_index((ow - 1 - x if flip else x) + ox, vw, pad) * sx, sc,
                  inv255, subs, muls)
    for x in range(b, ow):
        _frame_px(dst, r0, ps, x, src, p + frame_index((ow - 1 - x if flip else x) + ox, vw, pad) * sx, sc,
                  inv255, subs, muls)


def _frame_px(dst, r0, ps, x, src, q, sc, inv255, subs, muls):
    """Output column x's three channels (planes ps apart from dst[r0 + x]) from the pixel at
    src[q] (channel c at q + c * sc)."""
    for c in range(3):
        dst[r0 + c * ps + x] = (inv255 * float32(src[q + c * sc]) - subs[c]) * muls[c]


def _channel_row(o, t, c, x0, x1, v0, sub, mul):
    """o[x] = (t[3 * (v0 + x - x0) + c] - sub) * mul for x0 <= x < x1: one channel out of
    an interleaved row, at a fixed stride (the loop vectorizes)."""
    n = x1 - x0
    oo = o[x0:x1]
    tt = t[3 * v0 + c:]
    for i in range(n):
        oo[i] = (tt[U(3 * i)] - sub) * mul


def _channel_row_flipped(o, t, c, x0, x1, v0, sub, mul):
    """_channel_row reading t backwards from column v0 (a flip): o[x] = (t[3 * (v0 - (x -
    x0)) + c] - sub) * mul. Its own function: one loop choosing its stride at run time
    did not vectorize, and neither direction got the speed of a fixed one."""
    n = x1 - x0
    oo = o[x0:x1]
    first = 3 * v0 + c
    for i in range(n):
        oo[i] = (t[U(first - 3 * i)] - sub) * mul


def _plane_row(o, src, p, x0, x1, v0, inv255, sub, mul):
    """o[x] = (src[p + v0 + x - x0] / 255 - sub) * mul for x0 <= x < x1: a channel row read
    straight from its plane, as _scale_row then _channel_row compute it."""
    n = x1 - x0
    oo = o[x0:x1]
    s = src[p + v0:p + v0 + n]
    for i in range(n):
        oo[i] = (inv255 * float32(s[i]) - sub) * mul


def _plane_row_flipped(o, src, p, x0, x1, v0, inv255, sub, mul):
    """_plane_row reading the plane backwards from column v0 (a flip)."""
    n = x1 - x0
    oo = o[x0:x1]
    s = src[p + v0 - n + 1:p + v0 + 1]
    for i in range(n):
        oo[i] = (inv255 * float32(s[U(n - 1 - i)]) - sub) * mul


def _cpu_identity(src, g, mean, std, normalize, oh, ow, dst, doff, work, flts, rs, ps):
    """The identity-geometry sample (_is_identity) straight to its NCHW float32 output:
    each source row's bytes split into the three channel rows (flipped, padded), scaled
    and normalized on the way. The same arithmetic as _cpu_sample on such a sample (a
    unit tap of 1/255, then (v - mean) * (1 / std)), so the same bits, at memory speed.
    flts: nine floats of the caller's; rs, ps: dst's row and plane strides (ow and oh * ow
    for an image of its own; a batch's for a sample smaller than it)."""
    vh = g[VH]
    vw = g[VW]
    oy = g[OY]
    ox = g[OX]
    flip = g[FLIP] != 0
    inv255 = float32(1.0 / 255.0)
    # the output columns whose source column vx = (flip ? ow - 1 - x : x) + ox is inside
    if flip:  # column x reads vx = ow - 1 - x + ox, descending from v0
        x0 = max(0, ow - 1 + ox - (vw - 1))
        x1 = min(ow, ow + ox)
        v0 = ow - 1 - x0 + ox
    else:
        x0 = max(0, -ox)
        x1 = min(ow, vw - ox)
        v0 = x0 + ox
    x1 = max(x0, x1)
    t = work[:3 * vw]
    subs = flts[0:3]
    muls = flts[3:6]
    pads = flts[6:9]
    subs[:] = 0.0
    muls[:] = 1.0
    for c in range(3):
        if normalize:
            subs[c] = mean[c]
            muls[c] = float32(1.0) / std[c]
        pads[c] = (float32(g[FILLR + c]) * float32(1.0 / 255.0) - subs[c]) * muls[c]  # a padded pixel, normalized
    pad = g[PAD]  # (a padding that reads the frame: each row in it, its padded columns by _frame_cols)
    if g[SX] == 1:  # planar (CHW, or grey with SC 0): each channel row read straight from its plane
        base = g[OFFSET] + g[TOP] * g[SY] + g[LEFT]
        for y in range(oh):
            vy = frame_index(y + oy, vh, pad)
            inside = vy >= 0 and vy < vh and x1 > x0
            for c in range(3):
                start = doff + c * ps + y * rs
                o = dst[start:start + ow]
                _pad_row(o, inside, x0, x1, ow, pads[c])
                if not inside:
                    continue
                p = base + c * g[SC] + vy * g[SY]
                if flip:
                    _plane_row_flipped(o, src, p, x0, x1, v0, inv255, subs[c], muls[c])
                else:
                    _plane_row(o, src, p, x0, x1, v0, inv255, subs[c], muls[c])
            if pad != 0:  # (the three channels' padded columns at once, over _pad_row's fill)
                _frame_cols(dst, doff + y * rs, ps, src, base + vy * g[SY], 1, g[SC], x0, x1, ow, ox, vw, flip, pad,
                            inv255, subs, muls)
        return
    base = g[OFFSET] + g[TOP] * g[SY] + g[LEFT] * 3
    n = x1 - x0
    lo = v0 - n + 1 if flip else v0  # the first source column the window reads
    for y in range(oh):
        vy = frame_index(y + oy, vh, pad)
        inside = vy >= 0 and vy < vh and x1 > x0
        if inside and n < 8:  # (a row of 8 or more reads its bytes straight from src)
            _scale_row(t, src, base + vy * g[SY], 3 * vw, inv255)
        for c in range(3):
            start = doff + c * ps + y * rs
            _pad_row(dst[start:start + ow], inside, x0, x1, ow, pads[c])
        if pad != 0:  # (the three channels' padded columns at once)
            _frame_cols(dst, doff + y * rs, ps, src, base + vy * g[SY], 3, g[SC], x0, x1, ow, ox, vw, flip, pad,
                        inv255, subs, muls)
        if not inside:
            continue
        if n < 8:  # one channel at a time
            for c in range(3):
                start = doff + c * ps + y * rs
                o = dst[start:start + ow]
                if flip:
                    _channel_row_flipped(o, t, c, x0, x1, v0, subs[c], muls[c])
                else:
                    _channel_row(o, t, c, x0, x1, v0, subs[c], muls[c])
            continue
        # eight columns at a time, all three channels at once, from the row's bytes (vector
        # shuffles; the scaling on the way, as _scale_row does it); a width that is not a
        # multiple of 8 ends with one more block, of its last eight columns (some written
        # twice, with the same values), in place of a scalar tail, which cost small crops
        # most of their time (bench/RESULTS.md)
        n8 = n // 8 * 8
        r0 = doff + y * rs
        row = base + vy * g[SY]
        if vy + 1 < vh and y + 1 < oh:  # the next row's window on its way meanwhile (see prefetch)
            for q in range(row + g[SY] + 3 * lo, row + g[SY] + 3 * (lo + n) + 63, 64):
                prefetch(src, q)
        blocks = n8 + (8 if n8 < n else 0)
        for b in range(0, blocks, 8):
            k = b if b < n8 else n - 8
            if flip:
                deinterleave3x8_u8_affine_reversed(src, row + 3 * (v0 - k - 7), dst, r0 + x0 + k,
                                                   r0 + ps + x0 + k, r0 + 2 * ps + x0 + k, inv255,
                                                   subs[0], muls[0], subs[1], muls[1], subs[2], muls[2])
            else:
                deinterleave3x8_u8_affine(src, row + 3 * (v0 + k), dst, r0 + x0 + k, r0 + ps + x0 + k,
                                          r0 + 2 * ps + x0 + k, inv255, subs[0], muls[0], subs[1], muls[1],
                                          subs[2], muls[2])


def _cpu_batch(src, geom, args, order, mean, std, normalize, to_uint8, antialias, out, direct, nhwc, flat_out,
               work, tmp, ints, flts, stats, taps, first, step, fast_identity):
    """Samples first, first + step, ... of the batch. With `direct`, flat_out is out's
    own contiguous float32 buffer (NCHW, or NHWC with `nhwc`) and samples are written
    there; otherwise each goes through `tmp` and is copied (cast) into out, whatever its
    dtype and strides. With `fast_identity`, samples that need no resampling and no
    ColorJitter take _cpu_identity where the output is NCHW float32. ints, flts, stats:
    the small scratch of this part (_cpu_sample), `taps` its weights' row."""
    oh = out.shape[2]
    ow = out.shape[3]
    size = 3 * oh * ow
    for i in range(first, out.shape[0], step):
        # the sample's own size (OH, OW: at the top-left of the batch's, zeros around it), else the batch's
        soh = oh
        sow = ow
        if geom[i, OH] > 0:
            soh = geom[i, OH]
            sow = geom[i, OW]
        if fast_identity and direct and not nhwc and not to_uint8 and _is_identity(geom[i], order[i], soh, sow):
            _cpu_identity(src, geom[i], mean, std, normalize, soh, sow, flat_out, i * size, work, flts, ow, oh * ow)
            if soh != oh or sow != ow:
                _zero_around(flat_out, i * size, soh, sow, oh, ow, False)
            continue
        # one call site, its arguments typed alike either way (no literal 0/False): the sample's
        # code is compiled and inlined once, not once per constant (compile time: RESULTS)
        if direct:  # (in its place in the batch: the batch's strides)
            dst, doff, into_nhwc, rs, ps = flat_out, i * size, nhwc, 3 * ow if nhwc else ow, oh * ow
        else:  # (staged compactly, then copied)
            dst, doff, into_nhwc, rs, ps = tmp, 0, False, sow, soh * sow
        _cpu_sample(src, geom[i], args[i], order[i], mean, std, normalize, to_uint8, antialias, soh, sow,
                    dst, doff, work, into_nhwc, ints, flts, stats, taps, rs, ps)
        if direct and (soh != oh or sow != ow):
            _zero_around(flat_out, i * size, soh, sow, oh, ow, nhwc)
        if not direct:
            o = out[i]
            for c in range(3 if out.strides[1] != 0 else 1):  # (a channel stride of 0: one channel, written once)
                for y in range(oh):
                    orow = o[c, y]
                    if y >= soh:
                        for x in range(ow):
                            orow[x] = float32(0.0)
                        continue
                    row = tmp[(c * soh + y) * sow:(c * soh + y + 1) * sow]
                    for x in range(sow):
                        orow[x] = row[x]
                    for x in range(sow, ow):
                        orow[x] = float32(0.0)
    store_fence()  # the output transposes may stream past the cache: order them first
