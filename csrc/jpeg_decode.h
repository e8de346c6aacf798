// Crop-window JPEG decoding over libjpeg-turbo.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace gpudecode {

struct Box {
  int top, left, height, width;
};

// "" where `box` lies inside an H x W image, else the error the decoders give for it.
inline std::string box_outside(const Box& box, int64_t H, int64_t W) {
  // int64: a box near INT_MAX must be refused, not overflow
  if (box.top < 0 || box.left < 0 || box.height <= 0 || box.width <= 0 || int64_t(box.top) + box.height > H ||
      int64_t(box.left) + box.width > W)
    return "crop box (top=" + std::to_string(box.top) + ", left=" + std::to_string(box.left) +
           ", height=" + std::to_string(box.height) + ", width=" + std::to_string(box.width) + ") is outside the " +
           std::to_string(H) + "x" + std::to_string(W) + " image";
  return "";
}

struct DecodeOptions {
  // Exact mode (fast == false): accurate integer IDCT and fancy upsampling, and the
  // window grown by one pixel so chroma upsampling sees its neighbours: the output
  // equals a full decode cropped to the box, bit for bit.
  // Fast mode: fast integer IDCT, plain upsampling, no grown window.
  bool fast = false;
  // 1, 2, 4 or 8: DCT-domain downscaling; the box is in scaled coordinates then.
  int scale_denom = 1;
  // Refuse images with more pixels than this (decompression bombs); 0 means no limit.
  int64_t max_pixels = 0;
  // A stop flag the caller may set from another thread (nonzero: stop); nullptr for none.
  // The decoder looks at it between rows and scans and returns kStopped when it is set.
  const uint8_t* stop = nullptr;
};

// What a decode returns when its stop flag was set before the image was finished.
inline const char* const kStopped = "stopped: the decode was cancelled before this image was finished";

inline bool stop_requested(const uint8_t* stop) { return stop != nullptr && __atomic_load_n(stop, __ATOMIC_RELAXED); }

// Decodes the box of a JPEG into `out` (box.height * box.width * 3 bytes, RGB, HWC).
// Returns "" on success, otherwise what went wrong (and `out` is unspecified).
// The libjpeg API version the module was built against (62 for libjpeg62-turbo).
int libjpeg_api_version();

std::string decode_jpeg_crop(const uint8_t* data, size_t size, const Box& box, const DecodeOptions& opt,
                             uint8_t* out);

}  // namespace gpudecode
