#include "png_walk.h"

#include <cstring>

#ifdef GPUDECODE_HAVE_ZLIB
#include <zlib.h>
#endif

namespace gpudecode {
namespace {

const uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
constexpr uint32_t kUserLimit = 1000000;  // libpng's default PNG_USER_WIDTH_MAX / HEIGHT_MAX

#ifndef GPUDECODE_HAVE_ZLIB
// Slicing-by-8 tables of the reflected CRC-32 polynomial 0xEDB88320.
struct CrcTables {
  uint32_t t[8][256];
  CrcTables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
  }
};

const CrcTables& tables() {
  static const CrcTables made;
  return made;
}
#endif

uint32_t be32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

bool letter(uint8_t c) { return (c >= 65 && c <= 90) || (c >= 97 && c <= 122); }

std::string kind_repr(const uint8_t* k) {  // as Python's repr of the 4 bytes (letters only here)
  return "b'" + std::string(reinterpret_cast<const char*>(k), 4) + "'";
}

std::string name(const uint8_t* k) { return std::string(reinterpret_cast<const char*>(k), 4); }

bool is(const uint8_t* k, const char* s) { return std::memcmp(k, s, 4) == 0; }

bool critical_kind(const uint8_t* k) {
  return is(k, "IHDR") || is(k, "PLTE") || is(k, "IDAT") || is(k, "IEND");
}

std::string with_commas(unsigned long long v) {
  std::string s = std::to_string(v), out;
  int n = 0;
  for (auto it = s.rbegin(); it != s.rend(); ++it, ++n) {
    if (n && n % 3 == 0) out.insert(out.begin(), ',');
    out.insert(out.begin(), *it);
  }
  return out;
}

bool depth_allowed(int color, int depth) {
  switch (color) {
    case 0: return depth == 1 || depth == 2 || depth == 4 || depth == 8 || depth == 16;
    case 2: case 4: case 6: return depth == 8 || depth == 16;
    case 3: return depth == 1 || depth == 2 || depth == 4 || depth == 8;
    default: return false;
  }
}

std::string ihdr(const uint8_t* b, long long max_pixels, PngChunks& out) {
  const uint32_t w = be32(b), h = be32(b + 4);
  const int depth = b[8], color = b[9], compression = b[10], filt = b[11], interlace = b[12];
  if (!(w > 0 && w <= kUserLimit) || !(h > 0 && h <= kUserLimit))
    return "image size " + std::to_string(w) + "x" + std::to_string(h) + " is 0 or over libpng's limit of " +
           with_commas(kUserLimit) + " a side";
  if (!depth_allowed(color, depth))
    return "bit depth " + std::to_string(depth) + " is not allowed with colour type " + std::to_string(color);
  if (compression || filt || interlace > 1)
    return "unknown compression (" + std::to_string(compression) + "), filter (" + std::to_string(filt) +
           ") or interlace (" + std::to_string(interlace) + ") method";
  if (max_pixels > 0 && static_cast<long long>(w) * h > max_pixels)
    return "image of " + std::to_string(w) + "x" + std::to_string(h) + " pixels is over the limit of " +
           std::to_string(max_pixels) + " pixels";
  out.width = w;
  out.height = h;
  out.depth = depth;
  out.color = color;
  out.interlace = interlace;
  return "";
}

}  // namespace

uint32_t png_crc32(const uint8_t* p, size_t n) {
#ifdef GPUDECODE_HAVE_ZLIB
  uLong c = crc32(0L, Z_NULL, 0);
  while (n > 0) {  // (zlib takes a uInt length)
    const uInt step = n > (1u << 30) ? (1u << 30) : static_cast<uInt>(n);
    c = crc32(c, p, step);
    p += step;
    n -= step;
  }
  return static_cast<uint32_t>(c);
#else
  const auto& t = tables().t;
  uint32_t c = 0xFFFFFFFFu;
  while (n >= 8) {
    const uint32_t a = c ^ (uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24);
    c = t[7][a & 0xff] ^ t[6][(a >> 8) & 0xff] ^ t[5][(a >> 16) & 0xff] ^ t[4][a >> 24] ^ t[3][p[4]] ^
        t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]];
    p += 8;
    n -= 8;
  }
  while (n--) c = t[0][(c ^ *p++) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
#endif
}

std::string png_walk(const uint8_t* buf, size_t n, long long max_pixels, PngChunks& out) {
  out = PngChunks();
  if (n < 8 || std::memcmp(buf, kSignature, 8) != 0) return "not a PNG file (its signature is wrong)";
  size_t pos = 8;
  bool header = false, have_plte = false;
  while (pos + 8 <= n) {
    const uint32_t length = be32(buf + pos);
    const uint8_t* kind = buf + pos + 4;
    // After the image data began, a fault ends it and is kept (PngChunks::fault), not refused.
    const bool later = !out.idat.empty();
    std::string fault;
    if (length > 0x7FFFFFFFu) fault = "chunk at byte " + std::to_string(pos) + " has a length over 2**31 - 1";
    else if (!(letter(kind[0]) && letter(kind[1]) && letter(kind[2]) && letter(kind[3]))) {
      // (Python's repr of the 4 bytes: double quotes when they hold ' and no ", \xNN for the rest)
      const bool dq = std::memchr(kind, '\'', 4) && !std::memchr(kind, '"', 4);
      const char quote = dq ? '"' : '\'';
      static const char* hex = "0123456789abcdef";
      std::string shown = std::string("b") + quote;
      for (int i = 0; i < 4; ++i) {
        const uint8_t c = kind[i];
        if (c == '\\' || c == uint8_t(quote)) { shown += '\\'; shown += char(c); }
        else if (c == '\t') shown += "\\t";
        else if (c == '\n') shown += "\\n";
        else if (c == '\r') shown += "\\r";
        else if (c >= 32 && c < 127) shown += char(c);
        else { shown += "\\x"; shown += hex[c >> 4]; shown += hex[c & 15]; }
      }
      shown += quote;
      fault = "invalid chunk type " + shown + " at byte " + std::to_string(pos);
    }
    if (fault.empty() && later && !is(kind, "IDAT")) break;  // the image data is over: libpng reads no further
    const size_t end = pos + 8 + length;
    if (fault.empty() && end + 4 > n) {
      if (!critical_kind(kind)) break;
      fault = "the data ends inside the " + name(kind) + " chunk at byte " + std::to_string(pos);
    }
    const bool critical = !(kind[0] & 32);
    if (fault.empty() && critical && png_crc32(buf + pos + 4, length + 4) != be32(buf + end))
      fault = "CRC error in the " + name(kind) + " chunk at byte " + std::to_string(pos);
    if (!fault.empty()) {
      if (!later) return fault;
      out.fault = fault;
      break;
    }
    const uint8_t* body = buf + pos + 8;
    if (!header) {
      if (!is(kind, "IHDR") || length != 13) return "the first chunk is not an IHDR of 13 bytes";
      std::string err = ihdr(body, max_pixels, out);
      if (!err.empty()) return err;
      header = true;
    } else if (is(kind, "IHDR")) {
      return "a second IHDR chunk";
    } else if (is(kind, "PLTE")) {
      if (have_plte) return "a second PLTE chunk";
      if (out.color == 3) {
        if (length == 0 || length % 3 || length > 768) return "invalid palette length " + std::to_string(length);
        const size_t count = std::min<size_t>(length / 3, size_t(1) << out.depth);  // (libpng drops the rest)
        std::memcpy(out.palette, body, count * 3);
      }
      have_plte = true;
    } else if (is(kind, "IDAT")) {
      if (out.color == 3 && !have_plte) return "a palette image without a PLTE chunk before its image data";
      out.idat.emplace_back(pos + 8, length);
      out.stream_size += length;
    } else if (critical && !is(kind, "IEND")) {
      return "unknown critical chunk " + kind_repr(kind);
    } else if (is(kind, "IEND")) {
      break;
    }
    pos = end + 4;
  }
  if (!header) return "the data ends before the IHDR chunk";
  if (out.idat.empty()) return "no image data (IDAT chunk)";
  // the zlib header: deflate, a window PNG allows, its check bits, no preset dictionary
  uint8_t b0 = 0, b1 = 0;
  size_t got = 0;
  for (const auto& [off, len] : out.idat) {
    for (size_t i = 0; i < len && got < 2; ++i, ++got) (got == 0 ? b0 : b1) = buf[off + i];
    if (got == 2) break;
  }
  if (got < 2 || (b0 & 15) != 8 || (b0 >> 4) > 7 || ((b0 << 8) | b1) % 31 || (b1 & 32))
    return "the image data is not a zlib stream PNG allows";
  return "";
}

}  // namespace gpudecode
