// libFuzzer harness: the native warps (csrc/warp.h: nearest, and bilinear with a fill or
// none; affine, or perspective: a denominator) over any floats their caller could pass (NaN, infinities, huge or tiny scales and
// centres), of a whole image or of a part of it: they read only the part's own pixels (each
// part here is exactly its bytes, so AddressSanitizer sees a read past it) and count no
// pixel missing from a whole image; nearest writes each output pixel as one of the part's
// pixels or the fill.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "warp.h"

namespace {

struct Bytes {
  const uint8_t* data;
  size_t size;
  size_t at = 0;
  uint8_t byte() { return at < size ? data[at++] : 0; }
  float number() {  // four bytes as a float, any bit pattern
    uint32_t bits = 0;
    for (int k = 0; k < 4; ++k) bits |= uint32_t(byte()) << (8 * k);
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (!gpudecode::warp_nearest_exact()) return 0;  // (no AVX2 and FMA: never called here)
  Bytes in{data, size};
  const int64_t h = 1 + in.byte() % 48, w = 1 + in.byte() % 48, wh = 1 + in.byte() % 40, ww = 1 + in.byte() % 40;
  const uint8_t flags = in.byte();  // (1: planar; 2: bilinear; 4: bilinear without a fill; 8: perspective)
  const bool planar = flags & 1, bilinear = flags & 2;
  float scale[6], den[3];
  for (float& s : scale) s = in.number();
  if (flags & 8)
    for (float& d : den) d = in.number();
  const float* denominator = (flags & 8) ? den : nullptr;
  std::vector<float> xs(static_cast<size_t>(ww)), ys(static_cast<size_t>(wh));
  for (float& x : xs) x = in.number();
  for (float& y : ys) y = in.number();
  const uint8_t fill[3] = {in.byte(), in.byte(), in.byte()};
  int64_t top = 0, left = 0, ph = h, pw = w;
  if (in.byte() & 1) {  // (a part of the image: what a decoder gave of a window's box)
    top = in.byte() % h;
    left = in.byte() % w;
    ph = 1 + in.byte() % (h - top);
    pw = 1 + in.byte() % (w - left);
  }
  std::vector<uint8_t> src(static_cast<size_t>(ph * pw * 3));
  for (size_t k = 0; k < src.size(); ++k) src[k] = uint8_t(k * 7 + 1);
  if (src.size() > 0 && in.at < size) src[0] = data[in.at];
  const int64_t sy = planar ? pw : pw * 3, sx = planar ? 1 : 3, sc = planar ? ph * pw : 1;
  std::vector<uint8_t> out(static_cast<size_t>(3 * wh * ww), 0xAB);
  const float levels[3] = {float(fill[0]), float(fill[1]), float(fill[2])};
  const int64_t missing =
      bilinear ? gpudecode::warp_affine_bilinear(src.data(), h, w, top, left, ph, pw, sy, sx, sc, xs.data(), ww,
                                                 ys.data(), wh, scale, denominator, (flags & 4) ? nullptr : levels,
                                                 out.data())
               : gpudecode::warp_affine_nearest(src.data(), h, w, top, left, ph, pw, sy, sx, sc, xs.data(), ww,
                                                ys.data(), wh, scale, denominator, fill, out.data());
  if (missing < 0 || missing > wh * ww || (ph == h && pw == w && missing != 0)) {
    std::fprintf(stderr, "warp_fuzzer: %lld pixels missing from the part\n", static_cast<long long>(missing));
    std::abort();
  }
  if (bilinear) return 0;
  const int64_t plane = wh * ww;
  for (int64_t p = 0; p < plane; ++p) {  // each pixel: the fill, or some pixel of the part
    const uint8_t r = out[size_t(p)], g = out[size_t(plane + p)], b = out[size_t(2 * plane + p)];
    bool seen = r == fill[0] && g == fill[1] && b == fill[2];
    for (int64_t y = 0; y < ph && !seen; ++y)
      for (int64_t x = 0; x < pw && !seen; ++x) {
        const uint8_t* q = src.data() + y * sy + x * sx;
        seen = q[0] == r && q[sc] == g && q[2 * sc] == b;
      }
    if (!seen) {
      std::fprintf(stderr, "warp_fuzzer: an output pixel neither the fill nor a pixel of the part\n");
      std::abort();
    }
  }
  return 0;
}
