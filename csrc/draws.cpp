// Compiled with -ffp-contract=off (CMakeLists.txt): every product and sum rounds as
// Python's floats do, so the draws agree with the Python path bit for bit.
#include "draws.h"

#include <cmath>
#include <limits>

namespace gpudecode {

int64_t SplitMix::below(int64_t n) {
  int k = 0;  // n.bit_length()
  for (uint64_t v = uint64_t(n); v; v >>= 1) ++k;
  const uint64_t mask = k >= 64 ? ~uint64_t(0) : (uint64_t(1) << k) - 1;
  uint64_t r = next() & mask;  // getrandbits(k)
  while (r >= uint64_t(n)) r = next() & mask;
  return int64_t(r);
}

namespace {

// Python's int(round(x)) for a float: halves to even (the default rounding mode's)
int64_t round_int(double x) { return int64_t(std::nearbyint(x)); }

// Python's a // b for b > 0
int64_t floordiv(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}

void random_resized_crop(const GeomStep& g, SplitMix& rng, int64_t height, int64_t width, int64_t* row) {
  const double area = double(height * width);
  for (int t = 0; t < 10; ++t) {
    const double target = area * rng.uniform(g.a[0], g.a[1]);
    const double aspect = std::exp(rng.uniform(g.a[2], g.a[3]));
    const int64_t w = round_int(std::sqrt(target * aspect));
    const int64_t h = round_int(std::sqrt(target / aspect));
    if (0 < w && w <= width && 0 < h && h <= height) {
      const int64_t i = rng.randint(0, height - h);
      const int64_t j = rng.randint(0, width - w);
      row[kTop] = i, row[kLeft] = j, row[kCropH] = h, row[kCropW] = w;
      return;
    }
  }
  const double in_ratio = double(width) / double(height);
  int64_t w = width, h = height;
  if (in_ratio < g.a[4]) {
    h = round_int(double(w) / g.a[4]);
  } else if (in_ratio > g.a[5]) {
    w = round_int(double(h) * g.a[5]);
  }
  row[kTop] = floordiv(height - h, 2), row[kLeft] = floordiv(width - w, 2), row[kCropH] = h, row[kCropW] = w;
}

void resize(const GeomStep& g, int64_t& height, int64_t& width, int64_t* row) {
  int64_t h = int64_t(g.a[0]), w = int64_t(g.a[1]);
  if (w < 0) {  // the shorter side to `size`, the longer one keeping the ratio (capped by max_size)
    const int64_t size = h, max_size = int64_t(g.a[2]);
    const int64_t shorter = width <= height ? width : height, longer = width <= height ? height : width;
    int64_t new_short = size, new_long = int64_t(double(size * longer) / double(shorter));
    if (max_size >= 0 && new_long > max_size) {
      new_short = int64_t(double(max_size * new_short) / double(new_long));
      new_long = max_size;
    }
    h = width <= height ? new_long : new_short;
    w = width <= height ? new_short : new_long;
  }
  row[kResizeH] = height = h, row[kResizeW] = width = w;
}

void center_crop(const GeomStep& g, int64_t height, int64_t width, int64_t* row) {
  const int64_t ch = int64_t(g.a[0]), cw = int64_t(g.a[1]);
  row[kTop] = ch > height ? -floordiv(ch - height, 2) : round_int(double(height - ch) / 2.0);
  row[kLeft] = cw > width ? -floordiv(cw - width, 2) : round_int(double(width - cw) / 2.0);
  row[kCropH] = ch, row[kCropW] = cw;
}

bool random_crop(const GeomStep& g, SplitMix& rng, int64_t height, int64_t width, int64_t* row) {
  const int64_t th = int64_t(g.a[0]), tw = int64_t(g.a[1]);
  int64_t left = int64_t(g.a[2]), top = int64_t(g.a[3]);
  const int64_t right = int64_t(g.a[4]), bottom = int64_t(g.a[5]);
  const bool pad_if_needed = g.a[6] != 0;
  int64_t pw = width + left + right, ph = height + top + bottom;
  if (pad_if_needed && pw < tw) {
    left += tw - pw;
    pw += 2 * (tw - pw);
  }
  if (pad_if_needed && ph < th) {
    top += th - ph;
    ph += 2 * (th - ph);
  }
  if (ph < th || pw < tw) return false;
  int64_t i = 0, j = 0;
  if (!(ph == th && pw == tw)) {
    i = rng.randint(0, ph - th);
    j = rng.randint(0, pw - tw);
  }
  row[kTop] = i - top, row[kLeft] = j - left, row[kCropH] = th, row[kCropW] = tw;
  return true;
}

}  // namespace

std::string draw_batch(const DrawPlan& plan, const int64_t* sizes, const int64_t* indices, size_t n, uint64_t key,
                       int64_t* ints, double* factors) {
  const double off = std::numeric_limits<double>::quiet_NaN();
  for (size_t s = 0; s < n; ++s) {
    int64_t height = sizes[2 * s], width = sizes[2 * s + 1];
    if (height <= 0 || width <= 0) return "image size must be positive";
    SplitMix rng = SplitMix::keyed(key, uint64_t(indices[s]));
    int64_t* row = ints + s * kDrawCols;
    double* f = factors + s * 4;
    for (int c = 0; c < kDrawCols; ++c) row[c] = 0;
    for (int c = 0; c < 4; ++c) row[kOrder + c] = c, f[c] = off;
    for (const GeomStep& g : plan.geometry) {
      switch (g.kind) {
        case kRandomResizedCrop: random_resized_crop(g, rng, height, width, row); break;
        case kResize: resize(g, height, width, row); break;
        case kCenterCrop: center_crop(g, height, width, row); break;
        case kRandomCrop:
          if (!random_crop(g, rng, height, width, row)) return "the image is smaller than RandomCrop's crop";
          break;
        default: return "unknown geometry step";
      }
    }
    if (plan.flip >= 0) row[kFlip] = rng.random() < plan.flip;
    if (plan.vflip >= 0) row[kVflip] = rng.random() < plan.vflip;
    if (plan.jitter) {
      int64_t* order = row + kOrder;  // random.Random.shuffle
      for (int i = 3; i >= 1; --i) {
        const int64_t j = rng.below(i + 1);
        const int64_t t = order[i];
        order[i] = order[j], order[j] = t;
      }
      for (int c = 0; c < 4; ++c)
        if (plan.jitter_on[c]) f[c] = rng.uniform(plan.jitter_lo[c], plan.jitter_hi[c]);
    }
  }
  return "";
}

}  // namespace gpudecode
