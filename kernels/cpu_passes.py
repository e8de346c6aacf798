"""The CPU twin's passes over one sample's image: the resample's axis weights and each op
of the program (kernels/ops.py) as a pass over the image's channel rows, and the program's
interpreter (_program). Every function here is compiled for the CPU by cpu_twin.py in the
namespace of kernels/_pixel.py (the per-pixel formulas CUDA shares)."""
from __future__ import annotations

from ._compile import fastmath, inline_once


# ---------------------------------------------------------------------------------------
# CPU twin: the same helpers, in separable passes arranged so that every inner loop runs
# over contiguous memory and every ColorJitter loop over unit-stride channel rows:
#   vertical    source rows -> vert [oh, bw*3]    (interleaved, as the source)
#   transpose   vert -> vt [bw*3, oh]             (row 3*i + c: box column i, channel c)
#   horizontal  vt -> px [ow*3, oh]               (row 3*x + c: output column x, channel c)
#   ColorJitter op by op over px (r, g, b of column x are rows 3x, 3x+1, 3x+2)
#   transpose   px -> out[c] [oh, ow], one channel at a time, applying Normalize on the
#               way (the uint8 scaling is a pass of its own before it)
# The transposes are 8x8 vector shuffles (_simd), the output ones with non-temporal
# stores where aligned. One sample at a time, GIL released.

def _axis_weights(out_size, vsize, voff, box, flip, antialias, mode, index, wbuf, pad):
    """Per output index: first source index, tap count, and normalized weights; and a
    validity mask (1: inside) for indices that fall outside the resized frame (padding).
    `mode`: the filter (FILTER: bilinear, bicubic, nearest-exact, nearest, PIL's nearest). Written into
    the caller's memory (no allocation): first, count and valid are index[:3 * out_size]
    (int64), the weights [out_size, taps] the start of wbuf (float32; held too short for
    the taps, the reshape raises: cpu_twin.axis_taps bounds them). `pad`: the padding's
    mode (frame_index: where a padded index reads the frame)."""
    cubic = mode == 1
    scale = float32(box) / float32(vsize)
    first = index[:out_size]
    count = index[out_size:2 * out_size]
    valid = index[2 * out_size:3 * out_size]
    first[:] = 0
    count[:] = 0
    valid[:] = 0
    taps = 1
    for o in range(out_size):
        v = frame_index((out_size - 1 - o if flip else o) + voff, vsize, pad)
        if v >= 0 and v < vsize:
            c, inv, lo, hi = filter_window(v, scale, box, vsize, antialias, mode)
            first[o] = lo
            count[o] = hi - lo
            valid[o] = 1
            taps = max(taps, hi - lo)
    weights = wbuf[:out_size * taps].reshape((out_size, taps))
    weights[:, :] = 0.0
    for o in range(out_size):
        if valid[o]:
            v = frame_index((out_size - 1 - o if flip else o) + voff, vsize, pad)
            c, inv, lo, hi = filter_window(v, scale, box, vsize, antialias, mode)
            total = float32(0.0)
            if cubic:  # (one loop per filter: the bilinear one as it was, with no branch in it)
                for j in range(lo, hi):
                    total += cubic_weight(j, c, inv)
                for j in range(lo, hi):
                    weights[o, j - lo] = cubic_weight(j, c, inv) / total
            else:
                for j in range(lo, hi):
                    total += tri_weight(j, c, inv)
                for j in range(lo, hi):
                    weights[o, j - lo] = tri_weight(j, c, inv) / total
    return first, count, weights, valid


def _axis_taps(geom):
    """The most filter taps _axis_weights gives any output pixel of these samples along
    either axis, bounded from above (filter_window: at most 2 * support + 1 source pixels,
    the support the filter's radius stretched by box / frame when antialiasing a
    downscale), at least 4: the weights' row the caller holds for them."""
    taps = 4
    for i in range(geom.shape[0]):
        g = geom[i]
        mode = g[FILTER]
        radius = 2.0 if mode == 1 else (0.5 if mode >= 2 else 1.0)
        stretch = max(1.0, g[BH] / max(g[VH], 1), g[BW] / max(g[VW], 1))
        taps = max(taps, int(2.0 * radius * stretch) + 3)
    return taps


# Index arithmetic below is cast to unsigned (U) or goes through per-row slices: numba
# checks signed indices for negative wraparound, and that check stops vectorization.

def _op_pass(px, ow, op, factor, mean):
    """One ColorJitter op in place over px [ow*3, n] (channel rows, see above); one
    loop per op, so each loop has a fixed body the compiler vectorizes."""
    n = px.shape[1]
    if op == BRIGHTNESS or op == CONTRAST or op == SOLARIZE or op == INVERT or op == POSTERIZE or op == SOLARIZE_ADD:
        flat = px.reshape(ow * 3 * n)
        if op == SOLARIZE_ADD:
            for i in range(ow * 3 * n):
                flat[i] = solarize_add(flat[i], factor)
        elif op == BRIGHTNESS:
            for i in range(ow * 3 * n):
                flat[i] = clamp01(flat[i] * factor)
        elif op == CONTRAST:
            for i in range(ow * 3 * n):
                flat[i] = blend(flat[i], mean, factor)
        elif op == SOLARIZE:
            for i in range(ow * 3 * n):
                flat[i] = solarize(flat[i], factor)
        elif op == POSTERIZE:
            for i in range(ow * 3 * n):
                flat[i] = posterize(flat[i], factor)
        else:
            for i in range(ow * 3 * n):
                flat[i] = float32(1.0) - flat[i]
        return
    for x in range(ow):
        if op == SATURATION:
            _saturation_rows(px[3 * x], px[3 * x + 1], px[3 * x + 2], factor)
        elif op == HUE:
            _hue_rows(px[3 * x], px[3 * x + 1], px[3 * x + 2], factor)
        elif op == GRAYSCALE:
            _gray_rows(px[3 * x], px[3 * x + 1], px[3 * x + 2])
        else:  # any other per-pixel op: its formula (_pixel.apply_op) over the rows
            _pixel_rows(px[3 * x], px[3 * x + 1], px[3 * x + 2], op, factor)


# The channel rows go to these as separate arguments: LLVM then checks at run time that
# they do not overlap and vectorizes (with the three rows as slices of one array in one
# function, it gives up and the loops run scalar, 5-10x slower).

def _pixel_rows(r, g, b, op, factor):
    for i in range(r.shape[0]):
        r[i], g[i], b[i] = apply_op(op, r[i], g[i], b[i], factor, float32(0.0))


def _saturation_rows(r, g, b, factor):
    for i in range(r.shape[0]):
        l = gray(r[i], g[i], b[i])
        r[i] = blend(r[i], l, factor)
        g[i] = blend(g[i], l, factor)
        b[i] = blend(b[i], l, factor)


def _hue_rows(r, g, b, factor):
    for i in range(r.shape[0]):
        rr, gg, bb = adjust_hue(r[i], g[i], b[i], factor)
        r[i] = rr
        g[i] = gg
        b[i] = bb


def _gray_rows(r, g, b):
    for i in range(r.shape[0]):
        l = gray(r[i], g[i], b[i])
        r[i] = l
        g[i] = l
        b[i] = l


@fastmath("reassoc", "contract")  # float64 accumulators: the grey sum vectorizes
def _gray_sum_rows(r, g, b):
    total = 0.0
    for i in range(r.shape[0]):
        total += gray(r[i], g[i], b[i])
    return total


def _gray_sum(px, ow):
    total = 0.0
    for x in range(ow):
        total += _gray_sum_rows(px[3 * x], px[3 * x + 1], px[3 * x + 2])
    return total


def _image(px, ow, oh):
    """px [ow*3, oh] (row 3x + c: column x, channel c) as the image [ow, 3, oh] that the
    CPU's `fetch` reads as (c, y, x)."""
    return px.reshape((ow, 3, oh))


@fastmath("nnan", "ninf", "nsz", "reassoc")
def _min_max_row(row, lo, hi):
    """(min, max) of lo, hi and the row's values (compiled with fastmath: it vectorizes;
    min and max round nothing)."""
    for i in range(row.shape[0]):
        lo = min(lo, row[i])
        hi = max(hi, row[i])
    return lo, hi


def _statistic(op, px, ow, st, lut, hist):
    """The statistic barrier `op` needs of the image (its op table entry names it), into
    the statistic row st (_barrier.STAT_WIDTH) or, for a histogram, as the equalize
    tables in lut: the CPU's reductions, vectorized over the channel rows."""
    n = px.shape[1]
    if (MEAN_MASK >> op) & 1:
        st[0] = _gray_sum(px, ow)
    elif (RANGE_MASK >> op) & 1:
        for c in range(3):
            lo = float32(2.0)
            hi = float32(-2.0)
            for x in range(ow):
                lo, hi = _min_max_row(px[3 * x + c], lo, hi)
            st[1 + c] = lo
            st[4 + c] = hi
    elif (HISTOGRAM_MASK >> op) & 1:
        total = ow * n  # (hist: 256 int64 of the caller's)
        for c in range(3):
            hist[:] = 0
            for x in range(ow):
                row = px[3 * x + c]
                for i in range(n):
                    hist[quantize(row[i])] += 1
            top = 255
            while hist[top] == 0:
                top -= 1
            rest = total - hist[top]
            before = 0
            for k in range(256):
                lut[c * 256 + k] = equalize_entry(k, before, rest)
                before += hist[k]


def _autocontrast_pass(px, ow, st):
    n = px.shape[1]
    for c in range(3):
        low, scale = autocontrast_bounds(float32(st[1 + c]), float32(st[4 + c]))
        for x in range(ow):
            row = px[3 * x + c]
            for i in range(n):
                row[i] = autocontrast(row[i], low, scale)


def _lut_pass(px, ow, lut):
    """Each channel through its table (equalize)."""
    n = px.shape[1]
    for c in range(3):
        for x in range(ow):
            row = px[3 * x + c]
            for i in range(n):
                row[i] = lut[c * 256 + quantize(row[i])]


def _sharpness_pass(px, px2, ow, oh, factor):
    """adjust_sharpness over whole rows: output row 3x + c from rows 3(x-1)+c, 3x+c and
    3(x+1)+c of the image before it, shifted by -1, 0, +1 (so each loop vectorizes)."""
    if oh <= 2 or ow <= 2:  # (torchvision's: the image as it is)
        return
    px2[:, :] = px
    m = oh - 2
    for x in range(1, ow - 1):
        for c in range(3):
            a = px2[3 * (x - 1) + c]
            b = px2[3 * x + c]
            d = px2[3 * (x + 1) + c]
            _sharpen_row(px[3 * x + c][1:oh - 1], a[0:m], a[1:m + 1], a[2:m + 2], b[0:m], b[1:m + 1], b[2:m + 2],
                         d[0:m], d[1:m + 1], d[2:m + 2], factor)
    _clamp_rows(px, 0, 3)  # the border keeps its values, clamped (torchvision's blend clamps)
    _clamp_rows(px, 3 * (ow - 1), 3 * ow)
    for r in range(3, 3 * (ow - 1)):
        px[r, 0] = clamp01(px[r, 0])
        px[r, oh - 1] = clamp01(px[r, oh - 1])


def _clamp_rows(px, first, last):
    for r in range(first, last):
        row = px[r]
        for i in range(row.shape[0]):
            row[i] = clamp01(row[i])


def _sharpen_row(out, a0, a1, a2, b0, b1, b2, d0, d1, d2, factor):
    for i in range(out.shape[0]):
        ring = a0[i] + a1[i] + a2[i] + b0[i] + b2[i] + d0[i] + d1[i] + d2[i]
        out[i] = sharpen_value(b1[i], ring, factor)


def _blur_x_pass(px, px2, ow, a, w):
    """torchvision's gaussian_blur along x (reflect padding): each output row 3x + c a
    weighted sum of whole rows 3x' + c, into px2, then back (w: barrier_prepare's
    weights)."""
    k = int(a[0])
    first = int(w[MAX_BLUR])
    last = k - first
    half = k // 2
    n = px.shape[1]
    for x in range(ow):
        for c in range(3):
            dst = px2[3 * x + c]
            src = px[3 * reflect(x + first - half, ow) + c]
            w0 = w[first]
            for i in range(n):
                dst[i] = w0 * src[i]
            for j in range(first + 1, last):
                src = px[3 * reflect(x + j - half, ow) + c]
                wj = w[j]
                for i in range(n):
                    dst[i] += wj * src[i]
    px[:, :] = px2


def _blur_y_pass(px, px2, oh, a, w):
    """The same along y, in place: each row through a reflect-padded copy of itself (in
    px2's memory: the kernel is at most twice the side, so the padded row fits there)."""
    k = int(a[0])
    first = int(w[MAX_BLUR])
    last = k - first
    half = k // 2
    pad = px2.reshape(px2.size)[:oh + 2 * half]
    for r in range(px.shape[0]):
        row = px[r]
        for i in range(oh + 2 * half):
            pad[i] = row[reflect(i - half, oh)]
        w0 = w[first]
        p0 = pad[first:first + oh]
        for i in range(oh):
            row[i] = w0 * p0[i]
        for j in range(first + 1, last):
            wj = w[j]
            pj = pad[j:j + oh]
            for i in range(oh):
                row[i] += wj * pj[i]


@inline_once
def _barrier_pass(op, px, px2, ow, oh, a, st, lut, wts):
    """Barrier op `op` by its formula (_barrier.barrier_pixel) at every pixel, column by
    column (each output row of px is contiguous), reading a copy of the image before it:
    any barrier of the table runs here, correct but slow (a 15-degree rotation of a 224x224
    image took 2.1 ms nearest and 2.3 ms bilinear here against 0.18 and 0.45 ms in
    _warp_pass, AMD EPYC Zen 5: the per-pixel call through barrier_pixel, which reads the
    image, stays a call with the image's reference counting in the loop); a barrier whose
    cost matters gets a pass in _barrier_fast."""
    px2[:, :] = px
    img = _image(px2, ow, oh)
    for x in range(ow):
        r0 = px[3 * x]
        r1 = px[3 * x + 1]
        r2 = px[3 * x + 2]
        for y in range(oh):
            r0[y], r1[y], r2[y] = barrier_pixel(op, a, img, y, x, oh, ow, st, lut, wts)


def _warp_pass(px, px2, ow, oh, a, perspective):
    """AFFINE or PERSPECTIVE (barrier_pixel's formulas for them: affine_pixel,
    perspective_pixel), column by column, one loop per interpolation. The nearest loop
    reads its pixels itself: the same steps through sample_nearest, a helper that reads
    the image, ran 6.5x slower (1.13 ms against 0.17 ms, a 15-degree rotation of a 224x224
    image, AMD EPYC Zen 5; inline="always" or "never" alike: numba leaves that call a
    call, with NRT reference counting of the image in the loop). The bilinear loops call
    their helpers and lose nothing by it (0.45 ms either way: the taps' gathers dominate)."""
    px2[:, :] = px
    img = _image(px2, ow, oh)
    mode = a[6]
    fill = a[7] == a[7]  # NaN: none (zeros); (sample_nearest's test, out of the loop)
    f0 = a[7] if fill else float32(0.0)
    f1 = a[8] if fill else float32(0.0)
    f2 = a[9] if fill else float32(0.0)
    for x in range(ow):
        r0 = px[3 * x]
        r1 = px[3 * x + 1]
        r2 = px[3 * x + 2]
        if mode <= float32(0.0):  # (sample_nearest's, with the fill's test out of the loop: 10x faster; < 0: mirrored)
            for y in range(oh):
                if perspective:
                    sx, sy, inside = perspective_nearest_source(y, x, oh, ow, a)
                else:
                    sx, sy, inside = nearest_source(y, x, oh, ow, a)
                if inside:
                    r0[y] = img[sx, 0, sy]
                    r1[y] = img[sx, 1, sy]
                    r2[y] = img[sx, 2, sy]
                else:
                    r0[y] = f0
                    r1[y] = f1
                    r2[y] = f2
        elif perspective:
            for y in range(oh):
                r0[y], r1[y], r2[y] = perspective_bilinear(img, y, x, oh, ow, a)
        elif mode == float32(1.0):
            for y in range(oh):
                r0[y], r1[y], r2[y] = affine_bilinear(img, y, x, oh, ow, a)
        elif mode >= float32(3.0):
            for y in range(oh):
                r0[y], r1[y], r2[y] = affine_pil(img, y, x, oh, ow, a)
        else:
            for y in range(oh):
                r0[y], r1[y], r2[y] = affine_integer(img, y, x, oh, ow, a)


@inline_once
def _barrier_fast(op, px, px2, ow, oh, a, st, lut, wts):
    """The barriers with a vectorized pass of their own (whole channel rows at a time),
    each equal to barrier_pixel's formula (tests/test_barrier_interpreter.py); False for
    the others, which go through _barrier_pass."""
    if op == CONTRAST:
        _op_pass(px, ow, op, a[0], contrast_mean(st, oh, ow, a))
    elif op == AUTOCONTRAST:
        _autocontrast_pass(px, ow, st)
    elif op == EQUALIZE:
        _lut_pass(px, ow, lut)
    elif op == SHARPNESS:
        _sharpness_pass(px, px2, ow, oh, a[0])
    elif op == BLUR_X:
        _blur_x_pass(px, px2, ow, a, wts)
    elif op == BLUR_Y:
        _blur_y_pass(px, px2, oh, a, wts)
    elif op == AFFINE or op == PERSPECTIVE:
        _warp_pass(px, px2, ow, oh, a, op == PERSPECTIVE)
    else:
        return False
    return True


def _noise_pass(px, ow, a):
    """GaussianNoise over the channel rows (row 3x + c holds column x's channel c, y along
    it): each value's noise is that of its place, as the CUDA kernel's."""
    n = px.shape[1]
    key = noise_key(a[3], a[4])
    one = a[5] > float32(0.5)  # (one channel: every channel the first's noise)
    for x in range(ow):
        for c in range(3):
            row = px[3 * x + c]
            k = 0 if one else c
            for i in range(n):
                row[i] = add_noise(row[i], a[0], a[1], a[2], key, i, x, k)


def _mix_pass(px, keep, mix, op, w):
    """AugMix's ops over the whole image (apply_ops' per pixel): keep and start the mix,
    add a chain's result and restore the original, or end with the mix."""
    flat = px.reshape(px.size)
    if op == MIX_SAVE:
        for i in range(flat.shape[0]):
            keep[i] = flat[i]
            mix[i] = w * flat[i]
    elif op == MIX_ADD:
        for i in range(flat.shape[0]):
            mix[i] = mix[i] + w * flat[i]
            flat[i] = keep[i]
    else:
        for i in range(flat.shape[0]):
            flat[i] = mix[i]


@inline_once
def _program(px, px2, aux, ow, oh, order, args, st, lut, wts, hist):
    """A sample's program, op by op over the whole image: a barrier with the statistic of
    the image at its turn (_statistic), its set-up and its formula (kernels/_barrier.py,
    as the CUDA kernel's), by a vectorized pass where it has one; aux: AugMix's two
    image areas; st (float64, STAT_WIDTH), lut (768), wts (MAX_BLUR + 1) and hist (256
    int64): the caller's scratch."""
    st[:] = 0.0
    for k in range(order.shape[0]):
        op = order[k]
        if op < 0:
            break
        a = args[k]
        if is_barrier(op):
            _statistic(op, px, ow, st, lut, hist)
            barrier_prepare(op, a, wts)
            if not _barrier_fast(op, px, px2, ow, oh, a, st, lut, wts):
                _barrier_pass(op, px, px2, ow, oh, a, st, lut, wts)
        elif op == MIX_SAVE or op == MIX_ADD or op == MIX_END:
            _mix_pass(px, aux[0], aux[1], op, a[0])
        elif op == GAUSSIAN_NOISE:
            _noise_pass(px, ow, a)
        else:
            _op_pass(px, ow, op, a[0], float32(0.0))


def _blur_field(src, kx, ky, out, pad, tmp):
    """A field [h, w] (float32) reflect-padded and blurred by kx along x, then by ky along
    y, into out: ElasticTransform's F.conv2d pair (transforms.warps), separable and
    vectorized (pad: a row of w + len(kx) - 1, tmp: [h, w], the caller's)."""
    h = src.shape[0]
    w = src.shape[1]
    k = kx.shape[0]
    half = k // 2
    for y in range(h):
        row = src[y]
        for i in range(w + 2 * half):
            pad[i] = row[reflect(i - half, w)]
        t = tmp[y]
        w0 = kx[0]
        for x in range(w):
            t[x] = w0 * pad[x]
        for j in range(1, k):
            wj = kx[j]
            pj = pad[j:j + w]
            for x in range(w):
                t[x] += wj * pj[x]
    for y in range(h):
        o = out[y]
        r0 = tmp[reflect(y - half, h)]
        w0 = ky[0]
        for x in range(w):
            o[x] = w0 * r0[x]
        for j in range(1, k):
            wj = ky[j]
            rj = tmp[reflect(y + j - half, h)]
            for x in range(w):
                o[x] += wj * rj[x]


def _encode_pass(px, ow, mean, std, normalize, to_uint8):
    """Normalize (or the uint8 scaling) in place over the channel rows."""
    n = px.shape[1]
    for x in range(ow):
        for c in range(3):
            row = px[3 * x + c]
            for i in range(n):
                row[i] = encode_output(row[i], c, mean, std, normalize, to_uint8)
