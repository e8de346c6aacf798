// libFuzzer harness: the image header probe (JPEG, PNG, .npy tensor samples).
#include <cstdio>
#include <cstdlib>

#include "probe.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gpudecode::ImageInfo info;
  const std::string err = gpudecode::probe_image(data, size, info);
  if (err.empty()) {
    bool ok = info.width > 0 && info.height > 0 && info.channels >= 1 && info.channels <= 4 &&
              (info.format == "jpeg" || info.format == "png" || info.format == "npy");
    if (info.format == "npy")  // the pixels lie inside the data
      ok = ok && info.channels == 3 && info.data_offset >= 10 && uint64_t(info.data_offset) <= size &&
           uint64_t(info.height) * uint64_t(info.width) * 3u <= size - uint64_t(info.data_offset);
    else
      ok = ok && info.data_offset == 0;
    if (!ok) {
      std::fprintf(stderr, "probe_fuzzer: accepted a header with impossible facts\n");
      std::abort();
    }
  }
  return 0;
}
