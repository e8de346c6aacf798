// Compiled with -ffp-contract=off (CMakeLists.txt): every product and sum rounds as
// Python's floats do, so the draws agree with the Python path bit for bit.
#include "draws.h"

#include <algorithm>
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

// FiveCrop's crops (geometry.CornerCrop): false where the crop does not fit
bool corner_crop(const GeomStep& g, int64_t height, int64_t width, int64_t* row) {
  const int64_t ch = int64_t(g.a[0]), cw = int64_t(g.a[1]);
  const int corner = int(g.a[2]), mirror = int(g.a[3]);
  if (ch > height || cw > width) return false;
  int64_t top = corner < 2 ? 0 : corner < 4 ? height - ch : round_int(double(height - ch) / 2.0);
  int64_t left = corner == 4 ? round_int(double(width - cw) / 2.0) : corner % 2 ? width - cw : 0;
  if (mirror == 1) left = width - cw - left;
  if (mirror == 2) top = height - ch - top;
  row[kTop] = top, row[kLeft] = left, row[kCropH] = ch, row[kCropW] = cw;
  return true;
}

// A Pad ending the geometry (geometry.PadWindow): the window from (-top, -left), larger by the padding
void pad_window(const GeomStep& g, int64_t height, int64_t width, int64_t* row) {
  const int64_t left = int64_t(g.a[0]), top = int64_t(g.a[1]), right = int64_t(g.a[2]), bottom = int64_t(g.a[3]);
  row[kTop] = -top, row[kLeft] = -left, row[kCropH] = height + top + bottom, row[kCropW] = width + left + right;
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
        case kPadWindow: pad_window(g, height, width, row); break;
        case kCornerCrop:
          if (!corner_crop(g, height, width, row)) return "the crop is larger than the image";
          break;
        case kRandomCrop:
          if (!random_crop(g, rng, height, width, row)) return "the image is smaller than RandomCrop's crop";
          break;
        case kWindowCenter:
        case kWindowRandom: {  // (of the RandomResizedCrop's output, whose crop stays in the crop columns)
          GeomStep crop;
          for (int k = 0; k + 2 < 10; ++k) crop.a[k] = g.a[k + 2];
          const int64_t fh = int64_t(g.a[0]), fw = int64_t(g.a[1]);
          int64_t window[kDrawCols] = {0};
          if (g.kind == kWindowCenter) {
            center_crop(crop, fh, fw, window);
          } else if (!random_crop(crop, rng, fh, fw, window)) {
            return "the image is smaller than RandomCrop's crop";
          }
          row[kWinTop] = window[kTop], row[kWinLeft] = window[kLeft];
          break;
        }
        case kNestedCrop: {  // (of the crop just drawn: its offsets added, its size the crop's)
          GeomStep second;
          second.a[0] = g.a[3], second.a[1] = g.a[4];  // (no padding: it lies inside the first crop)
          const int64_t fh = int64_t(g.a[0]), fw = int64_t(g.a[1]);
          int64_t inner[kDrawCols] = {0};
          if (int(g.a[2]) == kCenterCrop) {
            center_crop(second, fh, fw, inner);
          } else if (!random_crop(second, rng, fh, fw, inner)) {
            return "the crop is larger than the crop before it";
          }
          row[kTop] += inner[kTop], row[kLeft] += inner[kLeft];
          row[kCropH] = inner[kCropH], row[kCropW] = inner[kCropW];
          break;
        }
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

namespace {

// Number j of the stream keyed by `key` (iou_crop.uniforms): a float64 in [0, 1)
double stream_uniform(uint64_t key, uint64_t j) {
  return double(SplitMix::mix(key + (j + 1) * 0x9E3779B97F4A7C15ULL) >> 11) * (1.0 / 9007199254740992.0);
}

// numpy's minimum, maximum and clip(x, 0, None) in float32: a NaN goes through
float np_min(float a, float b) { return std::isnan(a) || std::isnan(b) ? NAN : (b < a ? b : a); }
float np_max(float a, float b) { return std::isnan(a) || std::isnan(b) ? NAN : (b > a ? b : a); }
float clip0(float x) { return std::isnan(x) ? x : (x < 0.0f ? 0.0f : x); }

// A box's centre and area (the reference's float32 products)
struct BoxPre {
  float cx, cy, area;
};

// Whether the crop (left, top, cw, ch) holds a box's centre and one of those boxes
// overlaps it by `least` (torchvision's box_iou in float32; the IoUs' maximum a NaN
// where one is, as numpy's max); `inside` its flags where it does.
bool iou_hit(const float* b, const BoxPre* pre, int64_t k, int64_t left, int64_t top, int64_t cw, int64_t ch,
             float least, uint8_t* inside) {
  const double l = double(left), t = double(top), r = double(left + cw), bt = double(top + ch);
  const float lf = float(left), tf = float(top), rf = float(left + cw), bf = float(top + ch);
  const float carea = (rf - lf) * (bf - tf);
  bool any = false;
  float best = -1.0f;
  for (int64_t j = 0; j < k; ++j) {
    const BoxPre& p = pre[j];
    if (!(l < double(p.cx) && double(p.cx) < r && t < double(p.cy) && double(p.cy) < bt)) continue;
    any = true;
    const float* x = b + 4 * j;
    const float iw = clip0(np_min(x[2], rf) - np_max(x[0], lf));
    const float ih = clip0(np_min(x[3], bf) - np_max(x[1], tf));
    const float inter = iw * ih;
    const float denom = (p.area + carea) - inter;
    best = np_max(best, inter / denom);
  }
  if (!any || best < least) return false;
  for (int64_t j = 0; j < k; ++j) {
    const BoxPre& p = pre[j];
    inside[j] = l < double(p.cx) && double(p.cx) < r && t < double(p.cy) && double(p.cy) < bt;
  }
  return true;
}

int8_t iou_crop(const IouCropSpec& s, bool as_is, uint64_t key, int64_t h, int64_t w, const float* b, int64_t k,
                int64_t* crop, uint8_t* inside, std::vector<BoxPre>& pre) {
  crop[0] = 0, crop[1] = 0, crop[2] = h, crop[3] = w;
  if (k == 0) return as_is ? kIouWhole : kIouError;
  pre.resize(size_t(k));
  for (int64_t j = 0; j < k; ++j) {
    const float* x = b + 4 * j;
    pre[j] = BoxPre{0.5f * (x[0] + x[2]), 0.5f * (x[1] + x[3]), (x[2] - x[0]) * (x[3] - x[1])};
  }
  int64_t rounds = s.max_rounds;
  if (!as_is) {  // (the reference's max(1, min(MAX_ROUNDS, work // (trials * boxes))), without overflow)
    const int64_t by_work = s.trials > s.work / k ? 0 : s.work / (s.trials * k);
    rounds = std::max<int64_t>(1, std::min(s.max_rounds, by_work));
  }
  const uint64_t block = 1 + 4 * uint64_t(s.trials);
  const size_t n_opt = s.options.size();
  const float fw = float(w), fh = float(h);
  for (int64_t round = 0; round < rounds; ++round) {
    const uint64_t base = uint64_t(round) * block;
    size_t o = size_t(stream_uniform(key, base) * double(n_opt));  // (torch.randint over the options)
    if (o > n_opt - 1) o = n_opt - 1;
    if (s.options[o] >= 1.0) return kIouWhole;
    const float least = float(s.options[o]);
    uint64_t at = base + 1;  // (this trial's first number)
    for (int64_t trial = 0; trial < s.trials; ++trial) {
      const float sw = s.min_scale + s.scale_span * float(stream_uniform(key, at));
      const float sh = s.min_scale + s.scale_span * float(stream_uniform(key, at + 1));
      const int64_t cw = int64_t(fw * sw), ch = int64_t(fh * sh);
      if (ch == 0) return kIouError;  // (torchvision divides by it: the reference names it)
      const double aspect = double(cw) / double(ch);
      if (!(s.min_aspect <= aspect && aspect <= s.max_aspect)) {
        at += 2;
        continue;
      }
      const int64_t left = int64_t((fw - float(cw)) * float(stream_uniform(key, at + 2)));
      const int64_t top = int64_t((fh - float(ch)) * float(stream_uniform(key, at + 3)));
      at += 4;
      if (cw > 0 && iou_hit(b, pre.data(), k, left, top, cw, ch, least, inside)) {
        crop[0] = top, crop[1] = left, crop[2] = ch, crop[3] = cw;
        return kIouCrop;
      }
    }
  }
  return kIouError;
}

}  // namespace

void iou_crops(const IouCropSpec& spec, const uint64_t* keys, const int64_t* sizes, const float* boxes,
               const int64_t* offsets, size_t n, int64_t* crops, int8_t* status, uint8_t* inside) {
  bool as_is = false;
  for (double v : spec.options) as_is = as_is || v >= 1.0;
  std::vector<BoxPre> pre;
  for (size_t i = 0; i < n; ++i) {
    const int64_t at = offsets[i], k = offsets[i + 1] - offsets[i];
    status[i] = iou_crop(spec, as_is, keys[i], sizes[2 * i], sizes[2 * i + 1], boxes + 4 * at, k, crops + 4 * i,
                         inside + at, pre);
  }
}

}  // namespace gpudecode
