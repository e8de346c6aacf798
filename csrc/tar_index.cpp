#include "tar_index.h"

#include <cstring>

namespace gpudecode {
namespace {

constexpr size_t kBlock = 512;

bool parse_number(const uint8_t* f, size_t n, int64_t& out) {
  if (f[0] & 0x80) {  // GNU base-256
    if (f[0] & 0x40) return false;  // negative
    int64_t v = 0;
    for (size_t i = 1; i < n; ++i) {
      if (v >> 55) return false;
      v = (v << 8) | f[i];
    }
    out = v;
    return true;
  }
  size_t i = 0;
  while (i < n && f[i] == ' ') ++i;
  int64_t v = 0;
  bool any = false;
  for (; i < n && f[i] >= '0' && f[i] <= '7'; ++i) {
    v = v * 8 + (f[i] - '0');
    any = true;
  }
  for (; i < n; ++i)
    if (f[i] != 0 && f[i] != ' ') return false;
  out = any ? v : 0;
  return true;
}

bool checksum_ok(const uint8_t* h, int64_t stored) {
  int64_t u = 0, s = 0;
  for (size_t i = 0; i < kBlock; ++i) {
    const int b = (i >= 148 && i < 156) ? ' ' : h[i];
    u += b;
    s += static_cast<int8_t>(b);
  }
  return u == stored || s == stored;
}

std::string cstr(const uint8_t* f, size_t n) {
  const void* nul = std::memchr(f, 0, n);
  return std::string(reinterpret_cast<const char*>(f), nul ? static_cast<const uint8_t*>(nul) - f : n);
}

int64_t padded(int64_t n) { return (n + int64_t(kBlock) - 1) / int64_t(kBlock) * int64_t(kBlock); }

// pax records "LEN key=value\n"; picks path and size.
bool parse_pax(const uint8_t* d, int64_t n, std::string& path, bool& has_path, int64_t& size, bool& has_size) {
  int64_t i = 0;
  while (i < n && d[i] != 0) {
    int64_t len = 0, j = i;
    while (j < n && d[j] >= '0' && d[j] <= '9') len = len * 10 + (d[j++] - '0');
    if (j >= n || d[j] != ' ' || len <= 0 || i + len > n || d[i + len - 1] != '\n') return false;
    const char* rec = reinterpret_cast<const char*>(d + j + 1);
    const int64_t rlen = i + len - 1 - (j + 1);
    const char* eq = static_cast<const char*>(std::memchr(rec, '=', size_t(rlen)));
    if (eq) {
      const std::string key(rec, eq - rec);
      const std::string value(eq + 1, rec + rlen - (eq + 1));
      if (key == "path") { path = value; has_path = true; }
      else if (key == "size") {
        size = 0;
        for (char c : value) {
          if (c < '0' || c > '9') return false;
          size = size * 10 + (c - '0');
        }
        has_size = true;
      }
    }
    i += len;
  }
  return true;
}

}  // namespace

TarIndex index_tar(const uint8_t* data, size_t n) {
  TarIndex idx;
  int64_t pos = 0;
  const int64_t end = int64_t(n);
  std::string long_name, pax_path;
  bool has_long = false, has_path = false, has_size = false;
  int64_t pax_size = 0;
  auto fail = [&](const std::string& msg) {
    idx.error = msg;
    idx.error_offset = pos;
    return idx;
  };
  while (pos < end) {
    if (pos + int64_t(kBlock) > end) return fail("truncated tar: partial header block");
    const uint8_t* h = data + pos;
    if (h[0] == 0) {
      bool zero = true;
      for (size_t i = 0; i < kBlock && zero; ++i) zero = h[i] == 0;
      if (zero) return idx;
    }
    int64_t stored, size;
    if (!parse_number(h + 148, 8, stored)) return fail("bad checksum field in tar header");
    if (!checksum_ok(h, stored)) return fail("tar header checksum mismatch (not a tar, or corrupt)");
    if (!parse_number(h + 124, 12, size)) return fail("bad size field in tar header");
    const char kind = char(h[156]);
    const int64_t dpos = pos + int64_t(kBlock);
    if (kind == 'x' || kind == 'g' || kind == 'L' || kind == 'K') {
      if (dpos + size > end) return fail("truncated tar: extended header cut off");
      if (kind == 'x') {
        if (!parse_pax(data + dpos, size, pax_path, has_path, pax_size, has_size))
          return fail("bad pax extended header record");
      } else if (kind == 'L') {
        long_name = cstr(data + dpos, size_t(size));
        has_long = true;
      }
      pos = dpos + padded(size);
      continue;
    }
    std::string name;
    if (has_path) name = pax_path;
    else if (has_long) name = long_name;
    else {
      name = cstr(h, 100);
      if (std::memcmp(h + 257, "ustar\0", 6) == 0 && h[345] != 0) name = cstr(h + 345, 155) + "/" + name;
    }
    if (has_size) size = pax_size;
    has_path = has_long = has_size = false;
    if (kind >= '1' && kind <= '6') {  // links, devices, directories, fifos: no data
      pos = dpos;
      continue;
    }
    if (kind == 'S') return fail("GNU sparse member '" + name + "' is not supported");
    if (dpos + size > end)
      return fail("truncated tar: member '" + name + "' needs " + std::to_string(size) + " bytes, " +
                  std::to_string(end - dpos > 0 ? end - dpos : 0) + " left");
    if (kind == '0' || kind == 0 || kind == '7') {
      idx.names.push_back(std::move(name));
      idx.offsets.push_back(dpos);
      idx.sizes.push_back(size);
    }
    pos = dpos + padded(size);
  }
  return idx;
}

}  // namespace gpudecode
