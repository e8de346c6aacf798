// libFuzzer harness: crop-window PNG decoding with random boxes, the direct path
// (png_decode.cpp, where built with zlib) against libpng alone: the same error, or the same
// pixels (a difference traps). One difference is allowed where libdeflate inflates: a stream
// libpng refuses in one of zlib's words for the Deflate readings libdeflate takes (the list in
// png_decode.cpp), which the direct path decodes. The first 8 bytes choose the box (relative
// to the image's size, or out of it on purpose) and the pixel limit, the rest is the PNG. Each
// output buffer is exactly the box's size, so ASan catches any write outside it.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_box.h"
#include "png_decode.h"
#include "png_walk.h"
#include "probe.h"

// The PNG with every whole chunk's CRC made right: a mutation then reaches the zlib stream and
// the header's fields instead of stopping at a CRC error (option bit o[0] & 2).
std::vector<uint8_t> crcs_made_right(const uint8_t* png, size_t n) {
  std::vector<uint8_t> out(png, png + n);
  size_t pos = 8;
  while (pos + 12 <= n) {
    const size_t len = size_t(out[pos]) << 24 | size_t(out[pos + 1]) << 16 | size_t(out[pos + 2]) << 8 | out[pos + 3];
    if (len > n - pos - 12) break;
    const uint32_t crc = gpudecode::png_crc32(out.data() + pos + 4, len + 4);
    for (int k = 0; k < 4; ++k) out[pos + 8 + len + size_t(k)] = uint8_t(crc >> (24 - 8 * k));
    pos += 12 + len;
  }
  return out;
}

// Whether libpng's error is zlib's for a Deflate reading libdeflate takes (png_decode.cpp).
bool libdeflate_reads_it(const std::string& ref_err) {
#ifdef GPUDECODE_HAVE_LIBDEFLATE
  for (const char* zlib_says : {"invalid bit length repeat", "too many length or distance symbols",
                                "invalid literal/length code", "invalid distance code", "invalid code lengths set"})
    if (ref_err == std::string("libpng: IDAT: ") + zlib_says) return true;
#else
  (void)ref_err;
#endif
  return false;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  const uint8_t* o = data;
  std::vector<uint8_t> fixed;
  const uint8_t* img = data + 8;
  const size_t n = size - 8;
  if (o[0] & 2) {
    fixed = crcs_made_right(img, n);
    img = fixed.data();
  }
  const int64_t max_pixels = (o[0] & 1) ? int64_t(1) << 22 : int64_t(1) << 12;
  gpudecode::ImageInfo info;
  int64_t H = 64, W = 64;
  if (gpudecode::probe_image(img, n, info).empty()) {
    H = info.height;
    W = info.width;
  }
  gpudecode::Box box;
  if (!fuzz_box(o, H, W, box)) return 0;
  const size_t bytes = size_t(box.height) * size_t(box.width) * 3;
  std::vector<uint8_t> out(bytes), ref(bytes);
  const std::string err = gpudecode::decode_png_crop(img, n, box, max_pixels, out.data());
  const std::string ref_err = gpudecode::decode_png_crop(img, n, box, max_pixels, ref.data(), nullptr, false);
  if (err != ref_err && !(err.empty() && libdeflate_reads_it(ref_err))) __builtin_trap();
  if (err != ref_err) return 0;
  if (err.empty() && std::memcmp(out.data(), ref.data(), bytes) != 0) __builtin_trap();
  // the samples path (gpudecode.Mask's): it writes within its buffer, exactly the image's size, and
  // where it decides, libpng takes the whole image too (tests/fuzz/harness.py's mask target
  // compares the values with Pillow's and libpng's)
  gpudecode::PngChunks c;
  if (!gpudecode::png_walk(img, n, max_pixels, c).empty() || (c.color != 0 && c.color != 3)) return 0;
  std::vector<uint8_t> samples(size_t(c.width) * size_t(c.height) * (c.depth == 16 ? 4 : 1));
  if (!gpudecode::decode_png_samples(img, n, max_pixels, samples.data(), samples.size())) return 0;
  const gpudecode::Box whole{0, 0, int(c.height), int(c.width)};
  std::vector<uint8_t> full(size_t(c.width) * size_t(c.height) * 3);
  const std::string whole_err = gpudecode::decode_png_crop(img, n, whole, max_pixels, full.data(), nullptr, false);
  if (!whole_err.empty() && !libdeflate_reads_it(whole_err)) __builtin_trap();
  return 0;
}
