// libFuzzer harness: the batched entry points (probe_batch, and decode_batch over JPEGs
// and, where built with libpng, PNGs; two native threads) on up to four images cut from
// the input, each decoded whole or to a box, into one shared buffer at computed offsets.
#include <cstdint>
#include <vector>

#include "batch.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t count = 1 + data[0] % 4;
  const uint8_t mode = data[1];
  std::vector<gpudecode::ByteView> items;
  size_t pos = 2;
  for (size_t k = 0; k < count && pos + 2 <= size; ++k) {
    size_t len = size_t(data[pos]) << 8 | data[pos + 1];
    pos += 2;
    if (k + 1 == count || len > size - pos) len = size - pos;
    items.push_back({data + pos, len});
    pos += len;
  }
  std::vector<gpudecode::ImageInfo> infos;
  const std::vector<std::string> errs = gpudecode::probe_batch(items, infos, 2);
  std::vector<int32_t> boxes, scales;
  std::vector<int64_t> offsets;
  std::vector<uint8_t> kinds;
  std::vector<gpudecode::ByteView> jpegs;
  int64_t total = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!errs[i].empty() || (infos[i].format != "jpeg" && !(gpudecode::has_png() && infos[i].format == "png")))
      continue;
    const int64_t h = infos[i].height, w = infos[i].width;
    if (h * w > (int64_t(1) << 20)) continue;
    const bool half = (mode >> i) & 1;
    boxes.insert(boxes.end(), {int32_t(half ? h / 4 : 0), int32_t(half ? w / 4 : 0),
                               int32_t(half ? std::max<int64_t>(1, h / 2) : h),
                               int32_t(half ? std::max<int64_t>(1, w / 2) : w)});
    scales.push_back(1);
    kinds.push_back(infos[i].format == "png" ? gpudecode::kPng : gpudecode::kJpeg);
    offsets.push_back(total);
    total += int64_t(boxes[boxes.size() - 2]) * boxes.back() * 3;
    jpegs.push_back(items[i]);
  }
  std::vector<uint8_t> out(size_t(total) + 1);
  if (!gpudecode::check_jpeg_batch(jpegs.size(), boxes.data(), scales.data(), offsets.data(), total).empty()) return 0;
  gpudecode::decode_batch(jpegs, kinds.data(), boxes.data(), scales.data(), offsets.data(), out.data(), mode & 0x80,
                          int64_t(1) << 22, 2);
  return 0;
}
