// libFuzzer harness: crop-window JPEG decoding with random boxes, scales and modes. The
// first 8 bytes choose the options and the box (relative to the image's size, or out of
// it on purpose), the rest is the JPEG. The output buffer is exactly the box's size, so
// ASan catches any write outside it.
#include <cstdint>
#include <vector>

#include "fuzz_box.h"
#include "jpeg_decode.h"
#include "probe.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  const uint8_t* o = data;
  const uint8_t* img = data + 8;
  const size_t n = size - 8;
  gpudecode::DecodeOptions opt;
  opt.fast = o[0] & 1;
  opt.scale_denom = 1 << ((o[0] >> 1) & 3);
  opt.max_pixels = int64_t(1) << 22;
  gpudecode::ImageInfo info;
  int64_t H = 64, W = 64;
  if (gpudecode::probe_image(img, n, info).empty()) {
    H = (int64_t(info.height) + opt.scale_denom - 1) / opt.scale_denom;
    W = (int64_t(info.width) + opt.scale_denom - 1) / opt.scale_denom;
  }
  gpudecode::Box box;
  if (!fuzz_box(o, H, W, box)) return 0;
  std::vector<uint8_t> out(size_t(box.height) * size_t(box.width) * 3);
  gpudecode::decode_jpeg_crop(img, n, box, opt, out.data());
  return 0;
}
