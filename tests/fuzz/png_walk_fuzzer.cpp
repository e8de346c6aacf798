// libFuzzer harness: PNG's host half, the chunk walk (csrc/png_walk.cpp). The input is the
// PNG. Whatever it accepts must describe the input: IDAT spans inside it, in order, not
// overlapping, adding up to the stream; a header libpng allows; the zlib header checked.
#include <cstdint>
#include <cstdlib>

#include "png_walk.h"

#define CHECK(c) do { if (!(c)) std::abort(); } while (0)

static uint32_t bitwise_crc(const uint8_t* p, size_t n) {  // the definition, a bit at a time
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
  }
  return c ^ 0xFFFFFFFFu;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  CHECK(gpudecode::png_crc32(data, size < 4096 ? size : 4096) == bitwise_crc(data, size < 4096 ? size : 4096));
  gpudecode::PngChunks c;
  const long long limit = size && (data[size - 1] & 1) ? 4096 : 0;
  const std::string err = gpudecode::png_walk(data, size, limit, c);
  if (!err.empty()) return 0;
  CHECK(c.width > 0 && c.width <= 1000000 && c.height > 0 && c.height <= 1000000);
  CHECK(limit == 0 || static_cast<long long>(c.width) * c.height <= limit);
  CHECK(c.interlace == 0 || c.interlace == 1);
  CHECK(!c.idat.empty());
  size_t total = 0, last_end = 8;
  for (const auto& [off, len] : c.idat) {
    CHECK(off >= last_end + 8 && off + len + 4 <= size);  // after its length and type, before its CRC
    CHECK(gpudecode::png_crc32(data + off - 4, len + 4) ==
          (uint32_t(data[off + len]) << 24 | uint32_t(data[off + len + 1]) << 16 |
           uint32_t(data[off + len + 2]) << 8 | uint32_t(data[off + len + 3])));
    last_end = off + len + 4;
    total += len;
  }
  CHECK(total == c.stream_size && total >= 2);
  return 0;
}
