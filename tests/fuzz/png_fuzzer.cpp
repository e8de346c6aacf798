// libFuzzer harness: crop-window PNG decoding (libpng) with random boxes. The first 8
// bytes choose the box (relative to the image's size, or out of it on purpose) and the
// pixel limit, the rest is the PNG. The output buffer is exactly the box's size, so ASan
// catches any write outside it.
#include <cstdint>
#include <vector>

#include "fuzz_box.h"
#include "png_decode.h"
#include "probe.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  const uint8_t* o = data;
  const uint8_t* img = data + 8;
  const size_t n = size - 8;
  const int64_t max_pixels = (o[0] & 1) ? int64_t(1) << 22 : int64_t(1) << 12;
  gpudecode::ImageInfo info;
  int64_t H = 64, W = 64;
  if (gpudecode::probe_image(img, n, info).empty()) {
    H = info.height;
    W = info.width;
  }
  gpudecode::Box box;
  if (!fuzz_box(o, H, W, box)) return 0;
  std::vector<uint8_t> out(size_t(box.height) * size_t(box.width) * 3);
  gpudecode::decode_png_crop(img, n, box, max_pixels, out.data());
  return 0;
}
