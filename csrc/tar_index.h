// Index of a tar held in memory: the regular members' names, data offsets and sizes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gpudecode {

struct TarIndex {
  std::vector<std::string> names;
  std::vector<int64_t> offsets;  // where each member's data starts
  std::vector<int64_t> sizes;
  std::string error;             // "" when the whole archive was read
  int64_t error_offset = -1;     // the header the error is about
};

// Reads ustar, GNU ('L' long names) and pax ('x' path/size) headers, checks each
// header's checksum exactly, and stops at the end-of-archive block, at the end of the
// data, or at the first error (members before it are kept).
TarIndex index_tar(const uint8_t* data, size_t size);

}  // namespace gpudecode
