// Image header probe: size and encoding facts of a JPEG or PNG without decoding pixels,
// and the shape and pixel offset of a tensor sample (.npy, uint8 [H, W, 3]).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace gpudecode {

struct ImageInfo {
  std::string format;       // "jpeg" | "png" | "npy"
  int height = 0;
  int width = 0;
  int channels = 0;         // components stored in the file (JPEG: 1, 3, 4; PNG: 1, 2, 3, 4; palette: 1)
  // JPEG only
  std::string subsampling;  // "4:4:4", "4:2:2", "4:2:0", "4:4:0", "4:1:1", "4:1:0", "gray", "other"
  std::string color_space;  // "gray", "ycbcr", "rgb", "cmyk", "ycck" (PNG: "gray", "rgb", "palette")
  bool progressive = false;
  bool arithmetic = false;
  // PNG only (0 for JPEG except bit_depth = sample precision)
  int bit_depth = 0;
  int color_type = -1;      // PNG colour type (0, 2, 3, 4, 6); -1 for JPEG
  bool interlaced = false;
  // npy (a tensor sample: uint8 [H, W, 3], C order) only: where the pixels start
  int64_t data_offset = 0;
};

// Fills `info` and returns "" on success; otherwise returns what is wrong with the data.
std::string probe_image(const uint8_t* data, size_t size, ImageInfo& info);

// For a JPEG whose header probe_image read: true when an end-of-image marker (FF D9) follows
// its first scan, i.e. the compressed data is all there. (FF D9 cannot occur inside
// entropy-coded data, where FF is always followed by 00 or a restart marker.)
bool jpeg_has_end(const uint8_t* data, size_t size);

// The message of a JPEG that jpeg_has_end refuses (gpudecode._probe matches its start).
extern const char* const JPEG_CUT_MESSAGE;

// The scans (start-of-scan markers) of a JPEG, counted up to `stop` (a progressive JPEG's
// decoding cost grows with its scans: libjpeg-turbo documents thousands of tiny scans as a
// denial of service and its tools take a scan limit).
int jpeg_scans(const uint8_t* data, size_t size, int stop);
constexpr int kMaxJpegScans = 256;

}  // namespace gpudecode
