// PNG's host half (issue 56): the chunks walked and checked as libpng checks them before the
// pixels (gpudecode/decode/png.py's module doc lists what is refused), with no pixel work:
// the header, the palette and where the IDAT payloads are (the zlib stream the inflate
// reads, joined by the caller). Pure C++ with no library: it runs with the GIL released.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gpudecode {

struct PngChunks {
  uint32_t width = 0, height = 0;
  int depth = 0, color = 0, interlace = 0;
  uint8_t palette[768] = {};                       // PLTE's entries (at most 2**depth), the rest 0
  std::vector<std::pair<size_t, size_t>> idat;     // (offset, length) of each IDAT payload, in order
  size_t stream_size = 0;                           // their total
  // What ended the walk after the first IDAT chunk, where it was a fault (a later IDAT chunk
  // cut short or failing its CRC, a chunk header that is not one): libpng reads on from the
  // image data only as its stream asks, so this refuses the PNG only where the stream reaches
  // it. "" when the image data ended cleanly (a chunk of another kind, or the end of the data).
  std::string fault;
};

// Walks `data`; returns "" and fills `out`, or what is wrong (the message the Python walker
// gave: tests compare them). `max_pixels` > 0 refuses larger images. After the first IDAT
// chunk nothing is refused: what follows is read as libpng reads it, only as far as the
// image data goes (`out.fault`).
std::string png_walk(const uint8_t* data, size_t size, long long max_pixels, PngChunks& out);

// CRC-32 (PNG's, zlib's crc32) of `size` bytes.
uint32_t png_crc32(const uint8_t* data, size_t size);

}  // namespace gpudecode
