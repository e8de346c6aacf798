// The crop box the decode harnesses try, chosen by option bytes o[1..7] relative to an
// H x W image, or out of it on purpose (past the edge, negative: must be refused).
// false: a box not worth trying (empty, or over 4 Mpixels).
#pragma once
#include <cstdint>

#include "jpeg_decode.h"

inline bool fuzz_box(const uint8_t* o, int64_t H, int64_t W, gpudecode::Box& box) {
  box.top = int(o[1] * H / 256);
  box.left = int(o[2] * W / 256);
  box.height = int(1 + o[3] * (H - box.top) / 256);
  box.width = int(1 + o[4] * (W - box.left) / 256);
  if (o[5] & 1) box.top += o[6];
  if (o[5] & 2) box.width += o[7];
  if (o[5] & 4) box.height = -box.height;
  return box.height > 0 && box.width > 0 && int64_t(box.height) * box.width <= (int64_t(1) << 22);
}
