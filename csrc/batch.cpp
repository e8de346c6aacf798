#include "batch.h"

#ifdef GPUDECODE_HAVE_PNG
#include "png_decode.h"
#endif

namespace gpudecode {

int default_threads() { return int(std::max(1u, std::thread::hardware_concurrency())); }

std::vector<std::string> probe_batch(const std::vector<ByteView>& items, std::vector<ImageInfo>& infos,
                                     int num_threads) {
  std::vector<std::string> errs(items.size());
  infos.assign(items.size(), ImageInfo{});
  parallel_for(items.size(), num_threads > 0 ? num_threads : 1,
               [&](size_t i) { errs[i] = probe_image(items[i].data, items[i].size, infos[i]); });
  return errs;
}

std::string check_jpeg_batch(size_t n, const int32_t* bx, const int32_t* sc, const int64_t* off, int64_t cap) {
  for (size_t i = 0; i < n; ++i) {
    const int64_t h = bx[4 * i + 2], w = bx[4 * i + 3];
    if (bx[4 * i] < 0 || bx[4 * i + 1] < 0) return "crop box of item " + std::to_string(i) + " starts outside the image";
    if (h <= 0 || w <= 0) return "crop box of item " + std::to_string(i) + " must have a positive size";
    const int64_t need = h * w * 3;  // int32 * int32 * 3 fits int64
    if (off[i] < 0 || off[i] > cap || need > cap - off[i])
      return "output buffer too small for item " + std::to_string(i);
    if (sc[i] != 1 && sc[i] != 2 && sc[i] != 4 && sc[i] != 8) return "scale_denom must be 1, 2, 4 or 8";
  }
  return "";
}

std::vector<std::string> decode_batch(const std::vector<ByteView>& items, const uint8_t* kinds, const int32_t* bx,
                                      const int32_t* sc, const int64_t* off, uint8_t* out, bool fast,
                                      int64_t max_pixels, int num_threads, const uint8_t* stop) {
  const size_t n = items.size();
  std::vector<std::string> errs(n);
  parallel_for(n, num_threads > 0 ? num_threads : default_threads(), [&](size_t i) {
    Box b{bx[4 * i], bx[4 * i + 1], bx[4 * i + 2], bx[4 * i + 3]};
    if (stop_requested(stop)) {
      errs[i] = kStopped;
    } else if (kinds[i] == kJpeg) {
      DecodeOptions opt{fast, sc[i], max_pixels, stop};
      errs[i] = decode_jpeg_crop(items[i].data, items[i].size, b, opt, out + off[i]);
    } else if (kinds[i] == kPng) {
#ifdef GPUDECODE_HAVE_PNG
      errs[i] = sc[i] == 1 ? decode_png_crop(items[i].data, items[i].size, b, max_pixels, out + off[i], stop)
                           : "PNG windows cannot be scaled (scale_denom must be 1)";
#else
      errs[i] = "this build of gpudecode._native has no PNG decoder (libpng was not found)";
#endif
    } else {
      errs[i] = "unknown image kind " + std::to_string(int(kinds[i]));
    }
  });
  return errs;
}

bool has_png() {
#ifdef GPUDECODE_HAVE_PNG
  return true;
#else
  return false;
#endif
}

std::vector<std::string> decode_jpeg_batch(const std::vector<ByteView>& items, const int32_t* bx,
                                           const int32_t* sc, const int64_t* off, uint8_t* out, bool fast,
                                           int64_t max_pixels, int num_threads, const uint8_t* stop) {
  const std::vector<uint8_t> kinds(items.size(), kJpeg);
  return decode_batch(items, kinds.data(), bx, sc, off, out, fast, max_pixels, num_threads, stop);
}

}  // namespace gpudecode
