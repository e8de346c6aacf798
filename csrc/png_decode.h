// Crop-window PNG decoding over libpng (built where libpng's headers are found: see
// CMakeLists.txt; `_native.has_png` says whether this module has it).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "jpeg_decode.h"  // Box

namespace gpudecode {

// Decodes a PNG and writes the box of its pixels into `out` (box.height * box.width * 3
// bytes, RGB, HWC), as Pillow's convert("RGB") would except for 16-bit samples:
// grey to three equal channels, palette expanded, alpha and tRNS dropped (not
// composited), 16-bit samples to their high byte, no gamma correction, interlacing
// undone. Every row is decoded (so every IDAT chunk's CRC and the zlib stream's
// checksum are checked before the pixels are trusted), only the box's are kept.
// Returns "" on success, otherwise what went wrong (and `out` is unspecified); kStopped
// when `stop` (may be nullptr) was set from another thread before the last row.
// `direct` (where zlib's headers were found): most PNGs decoded without libpng, to the
// same pixels and verdicts (png_decode.cpp says which, and why it is faster); false: libpng
// always (the reference the tests and the fuzzer hold the direct path to).
// `decided_directly` (may be nullptr): set to whether the direct path decided this image.
std::string decode_png_crop(const uint8_t* data, size_t size, const Box& box, int64_t max_pixels, uint8_t* out,
                            const uint8_t* stop = nullptr, bool direct = true, bool* decided_directly = nullptr);

// A PNG of one channel (grey or palette, not interlaced) decoded to its samples as Pillow's
// np.array gives them, into `out` (height * width items: uint8, bool for 1-bit grey, int32
// for 16 bits; png_decode.cpp's row_to_samples says how each depth reads): the direct
// path's walk, inflate and unfilter, with the GIL's owner free to run (it takes none).
// Returns whether it decided: false (nothing that matters written) for an image it is not
// sure of, any other colour type, interlacing, a size that is not `out_size`'s, or a
// build without zlib; the caller then reads the image another way.
bool decode_png_samples(const uint8_t* data, size_t size, int64_t max_pixels, uint8_t* out, size_t out_size);

// The libpng this module was compiled against, the one that runs (the same unless a shared
// libpng was linked and another of its SONAME was loaded first), and the zlib that runs.
struct LibpngVersions {
  std::string built, running, zlib;
  bool linked_in;  // the static archive (CMakeLists.txt's GPUDECODE_STATIC_PNG)
};
LibpngVersions libpng_versions();

}  // namespace gpudecode
