#include "probe.h"

#include <cctype>
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
    if (is_sof && (marker == 0xC3 || marker == 0xC7 || marker == 0xCB || marker == 0xCF))
      // lossless JPEG (SOF3 and its kin): libjpeg-turbo reads it from 3.0 on, this build's may
      // not; callers hand it to Pillow (gpudecode._probe: format "other"), as ImageFolder does
      return "lossless JPEG (a JPEG process this decoder leaves to Pillow)";
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

}  // namespace

const char* const JPEG_CUT_MESSAGE =
    "truncated JPEG: no end-of-image marker after its scans (the compressed data ends early: a cut "
    "download or a partial write); refused rather than decoded with rows of grey or of stale pixels";

bool jpeg_has_end(const uint8_t* d, size_t n) {
  // walk the marker segments to the first start of scan
  size_t pos = 2;
  while (true) {
    if (pos >= n || d[pos] != 0xFF) return false;
    while (pos < n && d[pos] == 0xFF) ++pos;
    if (pos >= n) return false;
    const int marker = d[pos++];
    if (marker == 0xD8 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) continue;
    if (marker == 0xD9) return false;
    if (pos + 2 > n) return false;
    const size_t len = size_t(be16(d + pos));
    if (len < 2 || pos + len > n) return false;
    pos += len;
    if (marker == 0xDA) break;
  }
  // then an FF D9 anywhere after it (trailing bytes after the marker are allowed, as libjpeg allows them)
  for (size_t i = n; i >= pos + 2; --i)
    if (d[i - 2] == 0xFF && d[i - 1] == 0xD9) return true;
  return false;
}

int jpeg_scans(const uint8_t* d, size_t n, int stop) {
  // FF DA occurs only as a marker: in entropy-coded data FF is followed by 00 or a restart
  // marker, and marker segments before the first scan are walked over by their lengths
  int scans = 0;
  size_t pos = 2;
  while (pos + 4 <= n) {  // the header: segment by segment, to the first scan
    if (d[pos] != 0xFF) return scans;
    while (pos < n && d[pos] == 0xFF) ++pos;
    if (pos >= n) return scans;
    const int marker = d[pos++];
    if (marker == 0xD8 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) continue;
    if (pos + 2 > n) return scans;
    const size_t len = size_t(be16(d + pos));
    if (marker == 0xDA) { ++scans; pos += len; break; }
    pos += len;
  }
  for (const uint8_t* p = d + pos; scans < stop;) {  // then every later start of scan
    const uint8_t* f = static_cast<const uint8_t*>(std::memchr(p, 0xFF, size_t(d + n - p)));
    if (f == nullptr || f + 1 >= d + n) break;
    if (f[1] == 0xDA) ++scans;
    p = f + 1;
  }
  return scans;
}

namespace {

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

// .npy headers as numpy writes them for a uint8 [H, W, 3] C-order array: a strict subset
// of what numpy reads (its header is a Python literal). Anything else is refused here
// and left to the Python probe (numpy's own parser), so the two never disagree on what
// this accepts.
class NpyHeader {
 public:
  NpyHeader(const uint8_t* p, size_t n) : p_(p), n_(n) {}

  // "" and the fields set, or what is wrong
  std::string parse(int64_t& h, int64_t& w) {
    bool have_descr = false, have_order = false, have_shape = false;
    // Outside the braces the header is Python source lines, where indentation counts:
    // only blanks before '{', and blanks then one line break after '}' (what numpy
    // writes); inside them any whitespace goes.
    skip_blanks();
    if (!eat('{')) return "no '{'";
    for (;;) {
      skip_space();
      if (eat('}')) break;
      std::string key;
      if (!string(key)) return "bad key";
      skip_space();
      if (!eat(':')) return "no ':'";
      skip_space();
      if (key == "descr" && !have_descr) {
        std::string d;
        if (!string(d)) return "bad descr";
        if (d != "|u1" && d != "<u1" && d != ">u1" && d != "u1") return "dtype is not uint8";
        have_descr = true;
      } else if (key == "fortran_order" && !have_order) {
        if (!word("False")) return "not C order";
        have_order = true;
      } else if (key == "shape" && !have_shape) {
        int64_t dims[3];
        if (!eat('(')) return "bad shape";
        for (int i = 0; i < 3; ++i) {
          skip_space();
          if (!integer(dims[i])) return "bad shape";
          skip_space();
          if (!eat(',') && i < 2) return "not [H, W, 3]";
        }
        skip_space();
        if (!eat(')')) return "not [H, W, 3]";
        if (dims[2] != 3) return "not [H, W, 3]";
        h = dims[0];
        w = dims[1];
        have_shape = true;
      } else {
        return "unexpected key";
      }
      skip_space();
      if (eat(',')) continue;
      skip_space();
      if (eat('}')) break;
      return "bad separator";
    }
    skip_blanks();
    if (!eat('\n') && eat('\r')) eat('\n');
    if (i_ != n_) return "data after the header dict";
    if (!(have_descr && have_order && have_shape)) return "missing key";
    return "";
  }

 private:
  bool eat(char c) {
    if (i_ < n_ && p_[i_] == uint8_t(c)) {
      ++i_;
      return true;
    }
    return false;
  }
  void skip_blanks() {
    while (i_ < n_ && (p_[i_] == ' ' || p_[i_] == '\t')) ++i_;
  }
  void skip_space() {
    while (i_ < n_ && (p_[i_] == ' ' || p_[i_] == '\n' || p_[i_] == '\t' || p_[i_] == '\r')) ++i_;
  }
  bool string(std::string& out) {
    if (i_ >= n_ || (p_[i_] != '\'' && p_[i_] != '"')) return false;
    const uint8_t q = p_[i_++];
    const size_t start = i_;
    while (i_ < n_ && p_[i_] != q) {
      if (p_[i_] == '\\' || p_[i_] < 0x20 || p_[i_] >= 0x7f) return false;  // plain ASCII only
      ++i_;
    }
    if (i_ >= n_) return false;
    out.assign(reinterpret_cast<const char*>(p_ + start), i_ - start);
    ++i_;
    return true;
  }
  bool word(const char* wd) {
    const size_t len = std::strlen(wd);
    if (n_ - i_ < len || std::memcmp(p_ + i_, wd, len) != 0) return false;
    i_ += len;
    return i_ >= n_ || !(std::isalnum(p_[i_]) || p_[i_] == '_');
  }
  bool integer(int64_t& v) {  // decimal, no sign, no leading zero (as Python's literals), < 2^31
    const size_t start = i_;
    v = 0;
    while (i_ < n_ && p_[i_] >= '0' && p_[i_] <= '9') {
      v = v * 10 + (p_[i_] - '0');
      if (v >= (int64_t(1) << 31)) return false;
      ++i_;
    }
    if (i_ == start || (p_[start] == '0' && i_ - start > 1)) return false;
    return i_ >= n_ || !(std::isalnum(p_[i_]) || p_[i_] == '_' || p_[i_] == '.');
  }

  const uint8_t* p_;
  size_t n_;
  size_t i_ = 0;
};

std::string probe_npy(const uint8_t* d, size_t n, ImageInfo& info) {
  if (n < 10) return "truncated .npy header";
  const int major = d[6], minor = d[7];
  if (major < 1 || major > 3 || minor != 0) return "unsupported .npy version";
  size_t hlen, pre;
  if (major == 1) {
    hlen = size_t(d[8]) | (size_t(d[9]) << 8);
    pre = 10;
  } else {
    if (n < 12) return "truncated .npy header";
    hlen = size_t(d[8]) | (size_t(d[9]) << 8) | (size_t(d[10]) << 16) | (size_t(d[11]) << 24);
    pre = 12;
  }
  if (hlen > n - pre) return "truncated .npy header";
  int64_t h = 0, w = 0;
  std::string err = NpyHeader(d + pre, hlen).parse(h, w);
  if (!err.empty()) return "unsupported .npy header: " + err;
  if (h < 1 || w < 1) return "empty image";
  const uint64_t need = uint64_t(h) * uint64_t(w) * 3u;
  const uint64_t offset = pre + hlen;
  if (n - offset < need) return "truncated .npy: pixels cut off";
  info.format = "npy";
  info.height = int(h);
  info.width = int(w);
  info.channels = 3;
  info.bit_depth = 8;
  info.color_space = "rgb";
  info.data_offset = int64_t(offset);
  return "";
}

}  // namespace

std::string probe_image(const uint8_t* data, size_t size, ImageInfo& info) {
  static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  static const uint8_t npy_sig[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF) return probe_jpeg(data, size, info);
  if (size >= 8 && std::memcmp(data, png_sig, 8) == 0) return probe_png(data, size, info);
  if (size >= 6 && std::memcmp(data, npy_sig, 6) == 0) return probe_npy(data, size, info);
  if (size == 0) return "empty data";
  return "not a JPEG or PNG (unknown signature)";
}

}  // namespace gpudecode
