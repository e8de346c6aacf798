#include "probe.h"

#include <cstring>

namespace gpudecode {
namespace {

inline int be16(const uint8_t* p) { return (p[0] << 8) | p[1]; }
inline uint32_t be32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

std::string subsampling_name(const int h[], const int v[], int ncomp) {
  if (ncomp == 1) return "gray";
  // chroma components must agree with each other and be the smallest factors
  for (int c = 2; c < ncomp && c < 3; ++c)
    if (h[c] != h[1] || v[c] != v[1]) return "other";
  if (h[1] == 0 || v[1] == 0 || h[0] % h[1] || v[0] % v[1]) return "other";
  const int rh = h[0] / h[1], rv = v[0] / v[1];
  if (rh == 1 && rv == 1) return "4:4:4";
  if (rh == 2 && rv == 1) return "4:2:2";
  if (rh == 2 && rv == 2) return "4:2:0";
  if (rh == 1 && rv == 2) return "4:4:0";
  if (rh == 4 && rv == 1) return "4:1:1";
  if (rh == 4 && rv == 2) return "4:1:0";
  return "other";
}

std::string probe_jpeg(const uint8_t* d, size_t n, ImageInfo& info) {
  size_t pos = 2;
  bool jfif = false;
  int adobe_transform = -1;
  while (true) {
    // find the next marker: 0xFF followed by a non-0xFF byte (fill bytes allowed)
    if (pos >= n) return "truncated JPEG: no frame header (SOF) before the end of the data";
    if (d[pos] != 0xFF) return "corrupt JPEG: expected a marker at byte " + std::to_string(pos);
    while (pos < n && d[pos] == 0xFF) ++pos;
    if (pos >= n) return "truncated JPEG: no frame header (SOF) before the end of the data";
    const int marker = d[pos++];
    if (marker == 0xD8 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) continue;  // standalone
    if (marker == 0xD9) return "corrupt JPEG: end of image before any frame header";
    if (marker == 0xDA) return "corrupt JPEG: scan data before any frame header";
    if (pos + 2 > n) return "truncated JPEG: segment length cut off";
    const int len = be16(d + pos);
    if (len < 2) return "corrupt JPEG: segment length < 2 at byte " + std::to_string(pos);
    const uint8_t* seg = d + pos + 2;
    const size_t seglen = size_t(len) - 2;
    const bool is_sof = marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
    if (is_sof) {
      if (pos + 2 + 6 > n || seglen < 6) return "truncated JPEG: frame header cut off";
      info.format = "jpeg";
      info.bit_depth = seg[0];
      info.height = be16(seg + 1);
      info.width = be16(seg + 3);
      info.channels = seg[5];
      info.progressive = marker == 0xC2 || marker == 0xC6 || marker == 0xCA || marker == 0xCE;
      info.arithmetic = marker >= 0xC9;
      const int nc = info.channels;
      if (nc != 1 && nc != 3 && nc != 4) return "unsupported JPEG: " + std::to_string(nc) + " components";
      if (seglen < size_t(6 + 3 * nc) || pos + 2 + 6 + 3 * nc > n) return "truncated JPEG: frame header cut off";
      int h[4], v[4], ids[4];
      for (int c = 0; c < nc; ++c) {
        ids[c] = seg[6 + 3 * c];
        h[c] = seg[7 + 3 * c] >> 4;
        v[c] = seg[7 + 3 * c] & 15;
      }
      if (info.width == 0) return "corrupt JPEG: width 0";
      if (info.height == 0) return "unsupported JPEG: height given by a DNL marker";
      info.subsampling = subsampling_name(h, v, nc);
      if (nc == 1) {
        info.color_space = "gray";
      } else if (nc == 3) {
        // libjpeg's rule (jdapimin.c default_decompress_parms)
        if (jfif) info.color_space = "ycbcr";
        else if (adobe_transform == 0) info.color_space = "rgb";
        else if (adobe_transform > 0) info.color_space = "ycbcr";
        else if (ids[0] == 'R' && ids[1] == 'G' && ids[2] == 'B') info.color_space = "rgb";
        else info.color_space = "ycbcr";
      } else {
        info.color_space = adobe_transform == 2 ? "ycck" : "cmyk";
      }
      return "";
    }
    // the whole segment must be there before anything in it is read (its length is the file's word)
    if (pos + size_t(len) > n) return "truncated JPEG: segment cut off at byte " + std::to_string(pos);
    if (marker == 0xE0 && seglen >= 5 && std::memcmp(seg, "JFIF\0", 5) == 0) jfif = true;
    if (marker == 0xEE && seglen >= 12 && std::memcmp(seg, "Adobe", 5) == 0) adobe_transform = seg[11];
    pos += size_t(len);
  }
}

std::string probe_png(const uint8_t* d, size_t n, ImageInfo& info) {
  if (n < 8 + 8 + 13) return "truncated PNG: header cut off";
  if (be32(d + 8) != 13 || std::memcmp(d + 12, "IHDR", 4) != 0) return "corrupt PNG: first chunk is not IHDR";
  const uint8_t* h = d + 16;
  const uint32_t w = be32(h), ht = be32(h + 4);
  const int depth = h[8], ctype = h[9];
  if (w == 0 || ht == 0 || w > 0x7fffffffu || ht > 0x7fffffffu) return "corrupt PNG: bad image size";
  int channels;
  bool ok_depth;
  switch (ctype) {
    case 0: channels = 1; ok_depth = depth == 1 || depth == 2 || depth == 4 || depth == 8 || depth == 16; break;
    case 2: channels = 3; ok_depth = depth == 8 || depth == 16; break;
    case 3: channels = 1; ok_depth = depth == 1 || depth == 2 || depth == 4 || depth == 8; break;
    case 4: channels = 2; ok_depth = depth == 8 || depth == 16; break;
    case 6: channels = 4; ok_depth = depth == 8 || depth == 16; break;
    default: return "corrupt PNG: unknown colour type " + std::to_string(ctype);
  }
  if (!ok_depth) return "corrupt PNG: bit depth " + std::to_string(depth) + " with colour type " + std::to_string(ctype);
  info.format = "png";
  info.width = int(w);
  info.height = int(ht);
  info.channels = channels;
  info.bit_depth = depth;
  info.color_type = ctype;
  info.interlaced = h[12] != 0;
  info.color_space = ctype == 3 ? "palette" : (ctype == 0 || ctype == 4) ? "gray" : "rgb";
  return "";
}

}  // namespace

std::string probe_image(const uint8_t* data, size_t size, ImageInfo& info) {
  static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF) return probe_jpeg(data, size, info);
  if (size >= 8 && std::memcmp(data, png_sig, 8) == 0) return probe_png(data, size, info);
  if (size == 0) return "empty data";
  return "not a JPEG or PNG (unknown signature)";
}

}  // namespace gpudecode
