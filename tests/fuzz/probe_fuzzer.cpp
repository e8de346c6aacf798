// libFuzzer harness: the image header probe.
#include <cstdio>
#include <cstdlib>

#include "probe.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gpudecode::ImageInfo info;
  const std::string err = gpudecode::probe_image(data, size, info);
  if (err.empty()) {
    const bool ok = info.width > 0 && info.height > 0 && (info.format == "jpeg" || info.format == "png") &&
                    info.channels >= 1 && info.channels <= 4;
    if (!ok) {
      std::fprintf(stderr, "probe_fuzzer: accepted a header with impossible facts\n");
      std::abort();
    }
  }
  return 0;
}
