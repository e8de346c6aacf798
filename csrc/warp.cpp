// Built with -ffp-contract=off (CMakeLists.txt): each product and sum is rounded as torch's
// elementwise ops round it; the one fused multiply-add is written as one.
#include "warp.h"

#include <algorithm>
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

GPUDECODE_FMA_TARGET
int64_t warp_affine_nearest(const uint8_t* src, int64_t h, int64_t w, int64_t top, int64_t left, int64_t ph,
                            int64_t pw, int64_t sy, int64_t sx, int64_t sc, const float* xs, int64_t ww,
                            const float* ys, int64_t wh, const float* scale, const uint8_t* fill, uint8_t* out) {
  // grid_sample's unnormalize (align_corners=False): (g + 1) * (size / 2) - 0.5, as one fma
  const float half_w = float(w) / 2.0f, half_h = float(h) / 2.0f;
  const float last_x = float(w - 1), last_y = float(h - 1);
  // the part's columns and rows in the image (integers: exact as floats below 2 ** 24)
  const float part_x0 = float(left), part_y0 = float(top);
  const float part_x1 = float(left + pw - 1), part_y1 = float(top + ph - 1);
  const float part_w = float(pw - 1), part_h = float(ph - 1);
  // per column: the x products (xs[j] * scale[0], xs[j] * scale[1]); per row, the pixel each
  // output pixel picks (in the part; -> (0, 0) where it picks none), made in a loop the
  // compiler vectorizes
  std::vector<float> col_x(static_cast<size_t>(ww)), col_y(static_cast<size_t>(ww));
  std::vector<int32_t> pick_x(static_cast<size_t>(ww)), pick_y(static_cast<size_t>(ww));
  std::vector<uint8_t> inside(static_cast<size_t>(ww));
  for (int64_t j = 0; j < ww; ++j) {
    col_x[size_t(j)] = xs[j] * scale[0];
    col_y[size_t(j)] = xs[j] * scale[1];
  }
  // The part read through once in memory order first: a decoder has just written it, often
  // on another core, and a rotation's picks walk across its rows, which the hardware's
  // prefetchers do not follow; read in order it streams into this core's cache.
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
  const int64_t plane = wh * ww;
  int64_t missing = 0;
  for (int64_t i = 0; i < wh; ++i) {
    const float row_x = ys[i] * scale[2], row_y = ys[i] * scale[3];
    const float* cx = col_x.data();
    const float* cy = col_y.data();
    int32_t* px = pick_x.data();
    int32_t* py = pick_y.data();
    uint8_t* in = inside.data();
    int32_t row_missing = 0;  // (a row's: ww < 2 ** 31)
    for (int64_t j = 0; j < ww; ++j) {
      const float gx = (cx[j] + row_x) + scale[4];
      const float gy = (cy[j] + row_y) + scale[5];
      const float x = std::nearbyint(std::fma(gx + 1.0f, half_w, -0.5f));
      const float y = std::nearbyint(std::fma(gy + 1.0f, half_h, -0.5f));
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

GPUDECODE_FMA_TARGET
int64_t warp_affine_bilinear(const uint8_t* src, int64_t h, int64_t w, int64_t top, int64_t left, int64_t ph,
                             int64_t pw, int64_t sy, int64_t sx, int64_t sc, const float* xs, int64_t ww,
                             const float* ys, int64_t wh, const float* scale, const float* fill, uint8_t* out) {
  const float half_w = float(w) / 2.0f, half_h = float(h) / 2.0f;
  const float last_x = float(w - 1), last_y = float(h - 1);
  const float part_x0 = float(left), part_y0 = float(top);
  const float part_x1 = float(left + pw - 1), part_y1 = float(top + ph - 1);
  std::vector<float> col_x(static_cast<size_t>(ww)), col_y(static_cast<size_t>(ww));
  for (int64_t j = 0; j < ww; ++j) {
    col_x[size_t(j)] = xs[j] * scale[0];
    col_y[size_t(j)] = xs[j] * scale[1];
  }
  const int64_t plane = wh * ww;
  int64_t missing = 0;
  for (int64_t i = 0; i < wh; ++i) {
    const float row_x = ys[i] * scale[2], row_y = ys[i] * scale[3];
    uint8_t* o = out + i * ww;
    for (int64_t j = 0; j < ww; ++j) {
      const float gx = (col_x[size_t(j)] + row_x) + scale[4];
      const float gy = (col_y[size_t(j)] + row_y) + scale[5];
      const float x = std::fma(gx + 1.0f, half_w, -0.5f);
      const float y = std::fma(gy + 1.0f, half_h, -0.5f);
      const float x_w = std::floor(x), y_n = std::floor(y);
      const float dx = x - x_w, e = 1.0f - dx, dy = y - y_n, s = 1.0f - dy;
      const float weight[4] = {s * e, s * dx, dy * e, dy * dx};  // (nw, ne, sw, se)
      float value[3][4] = {};
      float cover[4] = {};
      bool miss = false;
      for (int t = 0; t < 4; ++t) {
        const float tx = x_w + float(t & 1), ty = y_n + float(t >> 1);
        if (!(tx >= 0.0f && tx <= last_x && ty >= 0.0f && ty <= last_y)) continue;  // (outside, or NaN: 0)
        cover[t] = 1.0f;
        if (!(tx >= part_x0 && tx <= part_x1 && ty >= part_y0 && ty <= part_y1)) {
          miss = true;  // (in the image, not in the part: not read; the call is refused)
          continue;
        }
        const uint8_t* p = src + int64_t(ty - part_y0) * sy + int64_t(tx - part_x0) * sx;
        value[0][t] = float(p[0]);
        value[1][t] = float(p[sc]);
        value[2][t] = float(p[2 * sc]);
      }
      missing += miss;
      const float coverage =
          std::fma(cover[3], weight[3], std::fma(cover[2], weight[2], std::fma(cover[1], weight[1], cover[0] * weight[0])));
      for (int c = 0; c < 3; ++c) {
        const float* v = value[c];
        float r = std::fma(v[3], weight[3], std::fma(v[2], weight[2], std::fma(v[1], weight[1], v[0] * weight[0])));
        if (fill != nullptr) r = ((r - fill[c]) * coverage) + fill[c];
        r = std::nearbyint(r);
        o[c * plane + j] = uint8_t(std::min(255.0f, std::max(0.0f, r)));  // (NaN: 0)
      }
    }
  }
  return missing;
}

}  // namespace gpudecode
