// Built with -ffp-contract=off (CMakeLists.txt): each product and sum is rounded as torch's
// elementwise ops round it; the one fused multiply-add is written as one.
#include "warp.h"

#include <algorithm>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#include <cmath>
#include <cstdlib>
#include <vector>

namespace gpudecode {

bool warp_nearest_exact() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

#if defined(__x86_64__) || defined(__i386__)
#define GPUDECODE_FMA_TARGET __attribute__((target("avx2,fma")))
#else
#define GPUDECODE_FMA_TARGET
#endif

namespace {

// What both warps read of the image and the grid: grid_sample's unnormalize (align_corners=False)
// is (g + 1) * (size / 2) - 0.5, as one fma; the image's last column and row; the part's columns
// and rows in the image (integers: exact as floats below 2 ** 24); per column, the x products
// (xs[j] * scale[0], xs[j] * scale[1]; a perspective warp's xs[j] * den[0] too); a row's grid
// points (row_grid's).
struct Frame {
  float half_w, half_h, last_x, last_y, part_x0, part_y0, part_x1, part_y1, part_w, part_h;
  std::vector<float> col_x, col_y, col_d, gx, gy;
};

GPUDECODE_FMA_TARGET Frame frame_of(int64_t h, int64_t w, int64_t top, int64_t left, int64_t ph, int64_t pw,
                                    const float* xs, int64_t ww, const float* scale, const float* den) {
  const size_t n = static_cast<size_t>(ww);
  Frame f{float(w) / 2.0f, float(h) / 2.0f, float(w - 1), float(h - 1), float(left), float(top),
          float(left + pw - 1), float(top + ph - 1), float(pw - 1), float(ph - 1),
          std::vector<float>(n), std::vector<float>(n), std::vector<float>(den != nullptr ? n : 0),
          std::vector<float>(n), std::vector<float>(n)};
  for (int64_t j = 0; j < ww; ++j) {
    f.col_x[size_t(j)] = xs[j] * scale[0];
    f.col_y[size_t(j)] = xs[j] * scale[1];
  }
  if (den != nullptr)
    for (int64_t j = 0; j < ww; ++j) f.col_d[size_t(j)] = xs[j] * den[0];
  return f;
}

// The grid points of the output row whose pixel centre is y, into f.gx and f.gy: an affine warp's
// (xs[j] * scale[0] + y * scale[2]) + scale[4] (and the y's alike), as torchvision's grid is the
// centres [x, y, 1] by bmm (these sums in its order: the same floats); a perspective warp's that
// numerator over its denominator (xs[j] * den[0] + y * den[1]) + den[2], less 1, as F.perspective's
// grid. Each product, sum and quotient rounded apart (this file's -ffp-contract=off).
GPUDECODE_FMA_TARGET void row_grid(Frame& f, const float* scale, const float* den, float y, int64_t ww) {
  const float row_x = y * scale[2], row_y = y * scale[3];
  const float *cx = f.col_x.data(), *cy = f.col_y.data();
  float *gx = f.gx.data(), *gy = f.gy.data();
  if (den == nullptr) {
    for (int64_t j = 0; j < ww; ++j) {
      gx[j] = (cx[j] + row_x) + scale[4];
      gy[j] = (cy[j] + row_y) + scale[5];
    }
    return;
  }
  const float row_d = y * den[1];
  const float* cd = f.col_d.data();
  for (int64_t j = 0; j < ww; ++j) {
    const float d = (cd[j] + row_d) + den[2];
    gx[j] = ((cx[j] + row_x) + scale[4]) / d - 1.0f;
    gy[j] = ((cy[j] + row_y) + scale[5]) / d - 1.0f;
  }
}

// The part read through once in memory order: a decoder has just written it, often on another
// core, and a warp's picks walk across its rows, which the hardware's prefetchers do not follow;
// read in order it streams into this core's cache.
void read_through(const uint8_t* src, int64_t ph, int64_t pw, int64_t sy, int64_t sx, int64_t sc) {
  const int64_t step = std::max<int64_t>(1, 64 / std::max<int64_t>(1, std::abs(sx)));
  const int64_t planes = std::abs(sc) * 2 < 64 ? 1 : 3;  // (HWC: a pixel's channels share its line)
  uint32_t touched = 0;
  for (int64_t c = 0; c < planes; ++c)
    for (int64_t y = 0; y < ph; ++y) {
      const uint8_t* row = src + y * sy + c * sc;
      for (int64_t x = 0; x < pw; x += step) touched += row[x * sx];
    }
  volatile uint32_t sink = touched;  // (kept: the reads are the point)
  (void)sink;
}

}  // namespace

GPUDECODE_FMA_TARGET
int64_t warp_affine_nearest(const uint8_t* src, int64_t h, int64_t w, int64_t top, int64_t left, int64_t ph,
                            int64_t pw, int64_t sy, int64_t sx, int64_t sc, const float* xs, int64_t ww,
                            const float* ys, int64_t wh, const float* scale, const float* den, const uint8_t* fill,
                            uint8_t* out) {
  Frame f = frame_of(h, w, top, left, ph, pw, xs, ww, scale, den);
  const float half_w = f.half_w, half_h = f.half_h, last_x = f.last_x, last_y = f.last_y;
  const float part_x0 = f.part_x0, part_y0 = f.part_y0, part_x1 = f.part_x1, part_y1 = f.part_y1;
  const float part_w = f.part_w, part_h = f.part_h;
  // per row, the pixel each output pixel picks (in the part; -> (0, 0) where it picks none), made in a
  // loop the compiler vectorizes
  std::vector<int32_t> pick_x(static_cast<size_t>(ww)), pick_y(static_cast<size_t>(ww));
  std::vector<uint8_t> inside(static_cast<size_t>(ww));
  read_through(src, ph, pw, sy, sx, sc);
  const int64_t plane = wh * ww;
  int64_t missing = 0;
  for (int64_t i = 0; i < wh; ++i) {
    row_grid(f, scale, den, ys[i], ww);
    const float *cgx = f.gx.data(), *cgy = f.gy.data();
    int32_t* px = pick_x.data();
    int32_t* py = pick_y.data();
    uint8_t* in = inside.data();
    int32_t row_missing = 0;  // (a row's: ww < 2 ** 31)
    for (int64_t j = 0; j < ww; ++j) {
      const float x = std::nearbyint(std::fma(cgx[j] + 1.0f, half_w, -0.5f));
      const float y = std::nearbyint(std::fma(cgy[j] + 1.0f, half_h, -0.5f));
      const int32_t image = (x >= 0.0f) & (x <= last_x) & (y >= 0.0f) & (y <= last_y);  // (0 for a NaN)
      const int32_t here = image & (x >= part_x0) & (x <= part_x1) & (y >= part_y0) & (y <= part_y1);
      // (clamped into the part first, NaN to 0: no float outside int32's range is converted; outside the part, pixel
      // (0, 0) of it is read and the fill written)
      px[j] = here * int32_t(std::min(part_w, std::max(0.0f, x - part_x0)));
      py[j] = here * int32_t(std::min(part_h, std::max(0.0f, y - part_y0)));
      in[j] = uint8_t(here);
      row_missing += image - here;
    }
    missing += row_missing;
    uint8_t* o = out + i * ww;
    for (int64_t j = 0; j < ww; ++j) {  // (no branch: a rotation's window is part fill, at no fixed place)
      const uint8_t* p = src + int64_t(py[j]) * sy + int64_t(px[j]) * sx;
      const bool here = in[j];
      o[j] = here ? p[0] : fill[0];
      o[plane + j] = here ? p[sc] : fill[1];
      o[2 * plane + j] = here ? p[2 * sc] : fill[2];
    }
  }
  return missing;
}

#if defined(__x86_64__) || defined(__i386__)
// lanes of v in [lo, hi] (all ones), ordered: false for a NaN
GPUDECODE_FMA_TARGET static inline __m256 avx_within(__m256 v, __m256 lo, __m256 hi) {
  return _mm256_and_ps(_mm256_cmp_ps(v, lo, _CMP_GE_OQ), _mm256_cmp_ps(v, hi, _CMP_LE_OQ));
}

// v clamped into [0, hi] (max first, NaN to 0, as std::max(0.0f, v) gives), as int32
GPUDECODE_FMA_TARGET static inline __m256i avx_clamped(__m256 v, __m256 hi) {
  return _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(v, _mm256_setzero_ps()), hi));
}
#endif

GPUDECODE_FMA_TARGET
int64_t warp_affine_bilinear(const uint8_t* src, int64_t h, int64_t w, int64_t top, int64_t left, int64_t ph,
                             int64_t pw, int64_t sy, int64_t sx, int64_t sc, const float* xs, int64_t ww,
                             const float* ys, int64_t wh, const float* scale, const float* den, const float* fill,
                             uint8_t* out) {
  Frame f = frame_of(h, w, top, left, ph, pw, xs, ww, scale, den);
  const float half_w = f.half_w, half_h = f.half_h, last_x = f.last_x, last_y = f.last_y;
  const float part_x0 = f.part_x0, part_y0 = f.part_y0, part_x1 = f.part_x1, part_y1 = f.part_y1;
  const float part_w = f.part_w, part_h = f.part_h;
  const size_t n = static_cast<size_t>(ww);
  // per row, in arrays of their own (a loop the compiler vectorizes): each output pixel's four
  // taps' weights (nw, ne, sw, se) as torch's kernel forms them, each tap's keep (1 where it
  // lies in the image and the part, else 0: torch reads 0 outside the image), the coverage,
  // and the taps' byte offsets in the part (clamped into it: always a pixel to read)
  std::vector<float> w_nw(n), w_ne(n), w_sw(n), w_se(n), k_nw(n), k_ne(n), k_sw(n), k_se(n), coverage(n);
  std::vector<int32_t> x0(n), x1(n), y0(n), y1(n), miss(n);
  read_through(src, ph, pw, sy, sx, sc);
  const int64_t plane = wh * ww;
  int64_t missing = 0;
  for (int64_t i = 0; i < wh; ++i) {
    row_grid(f, scale, den, ys[i], ww);
    const float *cgx = f.gx.data(), *cgy = f.gy.data();
    float *anw = w_nw.data(), *ane = w_ne.data(), *asw = w_sw.data(), *ase = w_se.data();
    float *bnw = k_nw.data(), *bne = k_ne.data(), *bsw = k_sw.data(), *bse = k_se.data(), *cov = coverage.data();
    int32_t *ax0 = x0.data(), *ax1 = x1.data(), *ay0 = y0.data(), *ay1 = y1.data(), *am = miss.data();
    int64_t j = 0;
#if defined(__x86_64__) || defined(__i386__)
    {  // eight pixels a step (the compiler does not vectorize floorf): the same operations as the loop below
      const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps(), minus_half = _mm256_set1_ps(-0.5f);
      const __m256 v_hw = _mm256_set1_ps(half_w), v_hh = _mm256_set1_ps(half_h);
      const __m256 v_lx = _mm256_set1_ps(last_x), v_ly = _mm256_set1_ps(last_y);
      const __m256 v_px0 = _mm256_set1_ps(part_x0), v_px1 = _mm256_set1_ps(part_x1);
      const __m256 v_py0 = _mm256_set1_ps(part_y0), v_py1 = _mm256_set1_ps(part_y1);
      const __m256 v_pw = _mm256_set1_ps(part_w), v_ph = _mm256_set1_ps(part_h);
      for (; j + 8 <= ww; j += 8) {
        const __m256 gx = _mm256_loadu_ps(cgx + j), gy = _mm256_loadu_ps(cgy + j);
        const __m256 x = _mm256_fmadd_ps(_mm256_add_ps(gx, one), v_hw, minus_half);
        const __m256 y = _mm256_fmadd_ps(_mm256_add_ps(gy, one), v_hh, minus_half);
        const __m256 x_w = _mm256_floor_ps(x), y_n = _mm256_floor_ps(y);
        const __m256 dx = _mm256_sub_ps(x, x_w), e = _mm256_sub_ps(one, dx);
        const __m256 dy = _mm256_sub_ps(y, y_n), s = _mm256_sub_ps(one, dy);
        const __m256 x_e = _mm256_add_ps(x_w, one), y_s = _mm256_add_ps(y_n, one);
        const __m256 nw = _mm256_mul_ps(s, e), ne = _mm256_mul_ps(s, dx);
        const __m256 sw = _mm256_mul_ps(dy, e), se = _mm256_mul_ps(dy, dx);
        const __m256 iw = avx_within(x_w, zero, v_lx), ie = avx_within(x_e, zero, v_lx);
        const __m256 in_ = avx_within(y_n, zero, v_ly), is = avx_within(y_s, zero, v_ly);
        const __m256 pw_ = avx_within(x_w, v_px0, v_px1), pe = avx_within(x_e, v_px0, v_px1);
        const __m256 pn = avx_within(y_n, v_py0, v_py1), ps = avx_within(y_s, v_py0, v_py1);
        const __m256 tnw = _mm256_and_ps(iw, in_), tne = _mm256_and_ps(ie, in_);
        const __m256 tsw = _mm256_and_ps(iw, is), tse = _mm256_and_ps(ie, is);
        const __m256 knw = _mm256_and_ps(tnw, _mm256_and_ps(pw_, pn)), kne = _mm256_and_ps(tne, _mm256_and_ps(pe, pn));
        const __m256 ksw = _mm256_and_ps(tsw, _mm256_and_ps(pw_, ps)), kse = _mm256_and_ps(tse, _mm256_and_ps(pe, ps));
        const __m256 lost = _mm256_or_ps(_mm256_or_ps(_mm256_xor_ps(tnw, knw), _mm256_xor_ps(tne, kne)),
                                         _mm256_or_ps(_mm256_xor_ps(tsw, ksw), _mm256_xor_ps(tse, kse)));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(am + j),
                            _mm256_srli_epi32(_mm256_castps_si256(lost), 31));  // (1 where a tap is lost)
        _mm256_storeu_ps(anw + j, nw), _mm256_storeu_ps(ane + j, ne);
        _mm256_storeu_ps(asw + j, sw), _mm256_storeu_ps(ase + j, se);
        _mm256_storeu_ps(bnw + j, _mm256_and_ps(knw, one)), _mm256_storeu_ps(bne + j, _mm256_and_ps(kne, one));
        _mm256_storeu_ps(bsw + j, _mm256_and_ps(ksw, one)), _mm256_storeu_ps(bse + j, _mm256_and_ps(kse, one));
        const __m256 cover = _mm256_fmadd_ps(
            _mm256_and_ps(tse, one), se,
            _mm256_fmadd_ps(_mm256_and_ps(tsw, one), sw,
                            _mm256_fmadd_ps(_mm256_and_ps(tne, one), ne, _mm256_mul_ps(_mm256_and_ps(tnw, one), nw))));
        _mm256_storeu_ps(cov + j, cover);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(ax0 + j), avx_clamped(_mm256_sub_ps(x_w, v_px0), v_pw));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(ax1 + j), avx_clamped(_mm256_sub_ps(x_e, v_px0), v_pw));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(ay0 + j), avx_clamped(_mm256_sub_ps(y_n, v_py0), v_ph));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(ay1 + j), avx_clamped(_mm256_sub_ps(y_s, v_py0), v_ph));
      }
    }
#endif
    for (; j < ww; ++j) {
      const float x = std::fma(cgx[j] + 1.0f, half_w, -0.5f);
      const float y = std::fma(cgy[j] + 1.0f, half_h, -0.5f);
      const float x_w = std::floor(x), y_n = std::floor(y);
      const float dx = x - x_w, e = 1.0f - dx, dy = y - y_n, s = 1.0f - dy;
      const float x_e = x_w + 1.0f, y_s = y_n + 1.0f;
      const float nw = s * e, ne = s * dx, sw = dy * e, se = dy * dx;
      const int32_t iw = (x_w >= 0.0f) & (x_w <= last_x), ie = (x_e >= 0.0f) & (x_e <= last_x);  // (NaN: 0)
      const int32_t in_ = (y_n >= 0.0f) & (y_n <= last_y), is = (y_s >= 0.0f) & (y_s <= last_y);
      const int32_t pw_ = (x_w >= part_x0) & (x_w <= part_x1), pe = (x_e >= part_x0) & (x_e <= part_x1);
      const int32_t pn = (y_n >= part_y0) & (y_n <= part_y1), ps = (y_s >= part_y0) & (y_s <= part_y1);
      const int32_t tnw = iw & in_, tne = ie & in_, tsw = iw & is, tse = ie & is;
      const int32_t knw = tnw & pw_ & pn, kne = tne & pe & pn, ksw = tsw & pw_ & ps, kse = tse & pe & ps;
      am[j] = (tnw ^ knw) | (tne ^ kne) | (tsw ^ ksw) | (tse ^ kse);  // (a tap in the image, not the part)
      anw[j] = nw, ane[j] = ne, asw[j] = sw, ase[j] = se;
      bnw[j] = float(knw), bne[j] = float(kne), bsw[j] = float(ksw), bse[j] = float(kse);
      cov[j] = std::fma(float(tse), se, std::fma(float(tsw), sw, std::fma(float(tne), ne, float(tnw) * nw)));
      ax0[j] = int32_t(std::min(part_w, std::max(0.0f, x_w - part_x0)));  // (NaN: 0)
      ax1[j] = int32_t(std::min(part_w, std::max(0.0f, x_e - part_x0)));
      ay0[j] = int32_t(std::min(part_h, std::max(0.0f, y_n - part_y0)));
      ay1[j] = int32_t(std::min(part_h, std::max(0.0f, y_s - part_y0)));
    }
    int32_t row_missing = 0;
    for (int64_t j = 0; j < ww; ++j) row_missing += am[j];
    missing += row_missing;
    uint8_t* o = out + i * ww;
    for (int64_t j = 0; j < ww; ++j) {
      const uint8_t* t_nw = src + int64_t(ay0[j]) * sy + int64_t(ax0[j]) * sx;
      const uint8_t* t_ne = src + int64_t(ay0[j]) * sy + int64_t(ax1[j]) * sx;
      const uint8_t* t_sw = src + int64_t(ay1[j]) * sy + int64_t(ax0[j]) * sx;
      const uint8_t* t_se = src + int64_t(ay1[j]) * sy + int64_t(ax1[j]) * sx;
      const float wnw = anw[j], wne = ane[j], wsw = asw[j], wse = ase[j];
      const float knw = bnw[j], kne = bne[j], ksw = bsw[j], kse = bse[j], cj = cov[j];
      for (int c = 0; c < 3; ++c) {
        const int64_t at = c * sc;
        float r = (float(t_nw[at]) * knw) * wnw;
        r = std::fma(float(t_ne[at]) * kne, wne, r);
        r = std::fma(float(t_sw[at]) * ksw, wsw, r);
        r = std::fma(float(t_se[at]) * kse, wse, r);
        if (fill != nullptr) r = ((r - fill[c]) * cj) + fill[c];
        o[c * plane + j] = uint8_t(std::min(255.0f, std::max(0.0f, std::nearbyint(r))));  // (NaN: 0)
      }
    }
  }
  return missing;
}

}  // namespace gpudecode
