#include "tar.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace gpudecode {

const char* const kTarTruncatedHeader = "truncated tar: partial header block";
const char* const kTarNoEnd = "truncated tar: the data ends without an end-of-archive block";
const char* const kTarEmpty = "empty file is not a tar shard";
const char* const kTarExtendedCut = "truncated tar: extended header cut off";
const char* const kTarTrailingData = "data after the end-of-archive block (a corrupt or concatenated archive)";

std::string tar_truncated_member(const std::string& name, int64_t need, int64_t left) {
  return "truncated tar: member '" + name + "' needs " + std::to_string(need) + " bytes, " +
         std::to_string(left < 0 ? 0 : left) + " left";
}

namespace {

enum class Num { kOk, kBad, kRange };

// A tar number field: octal digits (leading spaces, then NULs or spaces only after
// them), or GNU base-256 (first byte 0x80; 0xC0 and up is negative: refused). An empty
// field is 0.
Num parse_number(const uint8_t* f, size_t n, int64_t& out) {
  if (f[0] & 0x80) {
    if (f[0] & 0x40) return Num::kRange;
    int64_t v = 0;
    for (size_t i = 1; i < n; ++i) {
      if (v > (kTarMaxSize >> 8)) return Num::kRange;
      v = (v << 8) | f[i];
    }
    if (v > kTarMaxSize) return Num::kRange;
    out = v;
    return Num::kOk;
  }
  size_t i = 0;
  while (i < n && f[i] == ' ') ++i;
  int64_t v = 0;  // at most 12 octal digits: 36 bits, no overflow
  for (; i < n && f[i] >= '0' && f[i] <= '7'; ++i) v = v * 8 + (f[i] - '0');
  for (; i < n; ++i)
    if (f[i] != 0 && f[i] != ' ') return Num::kBad;
  out = v;
  return Num::kOk;
}

// The sum of the header's bytes with the checksum field read as spaces; some old
// writers summed signed chars, so either sum is accepted, exactly.
bool checksum_ok(const uint8_t* h, int64_t stored) {
  int64_t u = 0, s = 0;
  for (int64_t i = 0; i < kTarBlock; ++i) {
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

int64_t padded(int64_t n) { return (n + kTarBlock - 1) / kTarBlock * kTarBlock; }

bool is_zero(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (p[i]) return false;
  return true;
}

// Decimal digits only, at least one, within kTarMaxSize.
bool parse_decimal(const char* s, size_t n, int64_t& out) {
  if (n == 0) return false;
  int64_t v = 0;
  for (size_t i = 0; i < n; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    if (v > kTarMaxSize / 10) return false;
    v = v * 10 + (s[i] - '0');
  }
  if (v > kTarMaxSize) return false;
  out = v;
  return true;
}

std::string type_name(char t) {
  if (t == '1') return "a hard link";
  if (t == '2') return "a symbolic link";
  return "of type '" + std::string(1, t) + "'";
}

}  // namespace

TarStep TarParser::header(const uint8_t* h) {
  TarStep s;
  s.header = last_header_ = pos_;
  if (!in_chain_) chain_ = pos_;
  s.chain = chain_;
  in_chain_ = false;  // set again below for an extended header
  auto fail = [&](std::string msg) {
    s.kind = TarStepKind::kError;
    s.error = std::move(msg);
    return s;
  };
  if (is_zero(h, size_t(kTarBlock))) {
    s.kind = TarStepKind::kEnd;
    s.data = s.next = pos_ + kTarBlock;
    return s;
  }
  int64_t stored = 0, size = 0;
  if (parse_number(h + 148, 8, stored) != Num::kOk) return fail("bad checksum field in tar header");
  if (!checksum_ok(h, stored)) return fail("tar header checksum mismatch (not a tar, or corrupt)");
  const char type = char(h[156]);
  // The checksum holds: the header's own name is trusted, so a fault in the rest of it is
  // named by the member it introduces (and the sample before, of another key, is whole).
  const bool is_extended = type == 'x' || type == 'g' || type == 'L' || type == 'K';
  std::string own_name;
  if (!is_extended) {
    if (has_path_) own_name = pax_path_;
    else if (has_long_) own_name = long_name_;
    else {
      own_name = cstr(h, 100);
      if (std::memcmp(h + 257, "ustar\0", 6) == 0 && h[345] != 0) own_name = cstr(h + 345, 155) + "/" + own_name;
    }
  }
  switch (parse_number(h + 124, 12, size)) {
    case Num::kBad: s.name = own_name; return fail("bad size field in tar header");
    case Num::kRange: s.name = own_name; return fail("member size out of range in tar header");
    case Num::kOk: break;
  }
  s.type = type;
  s.data = pos_ + kTarBlock;
  if (type == 'x' || type == 'g' || type == 'L' || type == 'K') {
    if (size > kTarMaxExtended)
      return fail("extended header of " + std::to_string(size) + " bytes is over the limit of " +
                  std::to_string(kTarMaxExtended));
    s.kind = TarStepKind::kExtended;
    s.size = size;
    s.next = pos_ = s.data + padded(size);
    pending_kind_ = type;
    in_chain_ = true;
    return s;
  }
  s.name = own_name;
  if (has_size_) size = pax_size_;
  has_path_ = has_long_ = has_size_ = false;
  long_name_.clear();
  pax_path_.clear();
  if (type >= '1' && type <= '6') {  // links, devices, directories, fifos: a header, no data
    s.kind = TarStepKind::kNoData;
    s.size = 0;
    s.next = pos_ = s.data;
    return s;
  }
  if (type != '0' && type != '\0' && type != '7') {
    if (type == 'S') return fail("GNU sparse member '" + s.name + "' is not supported");
    return fail("member '" + s.name + "' " + type_name(type) + " is not supported");
  }
  s.kind = TarStepKind::kMember;
  s.size = size;
  s.next = pos_ = s.data + padded(size);
  return s;
}

std::string TarParser::extended(const uint8_t* d, int64_t n) {
  const char kind = pending_kind_;
  pending_kind_ = 0;
  if (kind == 'L') {
    long_name_ = cstr(d, size_t(n));
    has_long_ = true;
    return "";
  }
  if (kind == 'K') return "";  // long link target: of no use here
  if (kind != 'x' && kind != 'g') return "extended() without an extended header";
  // pax records: "LEN key=value\n", LEN counting the whole record in decimal.
  bad_size_ = false;
  int64_t i = 0;
  while (i < n && d[i] != 0) {
    int64_t len = 0, j = i;
    while (j < n && d[j] >= '0' && d[j] <= '9') {
      len = len * 10 + (d[j++] - '0');
      if (len > n) return "bad pax extended header record";
    }
    if (j == i || j >= n || d[j] != ' ' || len <= j - i + 1 || i + len > n || d[i + len - 1] != '\n')
      return "bad pax extended header record";
    const char* rec = reinterpret_cast<const char*>(d + j + 1);
    const size_t rlen = size_t(i + len - 1 - (j + 1));
    const char* eq = static_cast<const char*>(std::memchr(rec, '=', rlen));
    if (!eq) return "bad pax extended header record";
    const size_t klen = size_t(eq - rec);
    const char* value = eq + 1;
    const size_t vlen = rlen - klen - 1;
    if (klen >= 11 && std::memcmp(rec, "GNU.sparse.", 11) == 0) return "GNU sparse member is not supported";
    if (kind == 'x') {
      if (klen == 4 && std::memcmp(rec, "path", 4) == 0) {
        if (std::memchr(value, 0, vlen)) return "pax path contains a NUL byte";
        pax_path_.assign(value, vlen);
        has_path_ = true;
      } else if (klen == 4 && std::memcmp(rec, "size", 4) == 0) {
        // refused, but the records after it are still read: a path among them names the member
        if (parse_decimal(value, vlen, pax_size_)) has_size_ = true;
        else bad_size_ = true;
      }
    }
    i += len;
  }
  return bad_size_ ? "bad pax size record" : "";
}

std::string TarParser::refused_member(const uint8_t* block) const {
  if (!bad_size_) return "";
  if (has_path_) return pax_path_;
  int64_t stored = 0;
  if (block == nullptr || is_zero(block, size_t(kTarBlock)) || parse_number(block + 148, 8, stored) != Num::kOk ||
      !checksum_ok(block, stored))
    return "";
  const char type = char(block[156]);
  if (type == 'x' || type == 'g' || type == 'L' || type == 'K') return "";
  if (has_long_) return long_name_;
  std::string name = cstr(block, 100);
  if (std::memcmp(block + 257, "ustar\0", 6) == 0 && block[345] != 0) name = cstr(block + 345, 155) + "/" + name;
  return name;
}

// -- drivers ------------------------------------------------------------------------------

namespace {

// A tar in memory: every fetch is a pointer into it.
struct MemorySource {
  const uint8_t* data;
  int64_t size;
  std::string error;
  const uint8_t* fetch(int64_t off, int64_t n) { return off >= 0 && off + n <= size ? data + off : nullptr; }
  const uint8_t* peek(int64_t off, int64_t n) { return fetch(off, n); }
};

// A file read with pread through a read-ahead window. A short read where the size
// taken at open promised bytes means the file shrank under the reader.
constexpr int64_t kSparseRead = 4096;

struct FileSource {
  int fd;
  int64_t size;
  int64_t window;
  std::vector<uint8_t> buf;
  int64_t buf_off = 0, buf_len = 0;
  std::string error;

  const uint8_t* fetch(int64_t off, int64_t n) {
    if (off >= buf_off && off + n <= buf_off + buf_len) return buf.data() + (off - buf_off);
    // Past a gap (a member's data skipped) the next header is alone: a page around it,
    // not the whole window (a 64 KiB read per header of large members copied 128 KiB a
    // sample that nothing looked at). Reading on from the end of the last window (runs of
    // small members) takes the whole window.
    const bool gap = buf_len > 0 && off > buf_off + buf_len;
    const int64_t ahead = gap ? std::min<int64_t>(window, kSparseRead) : window;
    const int64_t want = std::min(std::max(n, ahead), size - off);
    if (want < n) return fail_short(off, n, size - off);
    buf.resize(size_t(want));
    int64_t got = 0;
    while (got < want) {
      const ssize_t r = ::pread(fd, buf.data() + got, size_t(want - got), off_t(off + got));
      if (r < 0) {
        if (errno == EINTR) continue;
        error = std::string("read failed: ") + std::strerror(errno);
        buf_len = 0;
        return nullptr;
      }
      if (r == 0) break;
      got += r;
    }
    buf_off = off;
    buf_len = got;
    if (got < n) return fail_short(off, n, got);
    return buf.data();
  }

  // Bytes already in the window, or nullptr: never a read.
  const uint8_t* peek(int64_t off, int64_t n) const {
    return off >= buf_off && off + n <= buf_off + buf_len ? buf.data() + (off - buf_off) : nullptr;
  }

  const uint8_t* fail_short(int64_t off, int64_t n, int64_t got) {
    error = "shard shrank while being read: " + std::to_string(n) + " bytes expected at offset " +
            std::to_string(off) + ", the file now ends at " + std::to_string(off + (got < 0 ? 0 : got)) +
            " (it was " + std::to_string(size) + " bytes when opened)";
    buf_len = 0;
    return nullptr;
  }
};

template <class Source>
TarIndex run_index(Source& src, int64_t end, int64_t start = 0, int64_t max_members = 0, int64_t keep = 0) {
  TarIndex idx;
  TarParser p(start);
  auto fail = [&](const std::string& msg, int64_t off) {
    idx.error = msg;
    idx.error_offset = off;
    return idx;
  };
  auto io_fail = [&](int64_t off) {
    idx.io_error = true;
    return fail(src.error, off);
  };
  while (true) {
    const int64_t pos = p.position();
    const int64_t left = end - pos;
    if (left <= 0) return fail(pos == 0 ? kTarEmpty : kTarNoEnd, pos);
    if (left < kTarBlock) return fail(kTarTruncatedHeader, pos);
    const uint8_t* h = src.fetch(pos, kTarBlock);
    if (!h) return io_fail(pos);
    const TarStep s = p.header(h);
    switch (s.kind) {
      case TarStepKind::kError:
        if (!s.name.empty()) {  // a header whose checksum holds names its member
          idx.error_member = s.name;
          idx.has_error_member = true;
        }
        return fail(s.error, s.header);
      case TarStepKind::kEnd: {
        // What follows must be zeros (the second end block, record padding): anything
        // else is a damaged or concatenated archive, never silently ignored.
        for (int64_t off = s.next; off < end;) {
          const int64_t n = std::min<int64_t>(end - off, 1 << 16);
          const uint8_t* t = src.fetch(off, n);
          if (!t) return io_fail(off);
          for (int64_t i = 0; i < n; ++i)
            if (t[i]) {
              idx.after_end = true;
              return fail(kTarTrailingData, (off + i) / kTarBlock * kTarBlock);
            }
          off += n;
        }
        return idx;
      }
      case TarStepKind::kExtended: {
        if (s.data + s.size > end) return fail(kTarExtendedCut, s.header);
        const uint8_t* d = s.size ? src.fetch(s.data, s.size) : h;
        if (!d) return io_fail(s.data);
        const std::string err = p.extended(d, s.size);
        if (!err.empty()) {
          const int64_t at = p.position();
          // (a pax path names the member even where the archive ends before the next header)
          const std::string name = p.refused_member(at + kTarBlock <= end ? src.fetch(at, kTarBlock) : nullptr);
          if (!name.empty()) {
            idx.error_member = name;
            idx.has_error_member = true;
          }
          return fail(err, s.header);
        }
        break;
      }
      case TarStepKind::kNoData:
        if (s.type == '1' || s.type == '2') {  // links are listed: the reader refuses them by key
          idx.names.push_back(s.name);
          idx.offsets.push_back(s.data);
          idx.sizes.push_back(0);
          idx.types.push_back(s.type);
          idx.chains.push_back(s.chain);
          if (keep > 0) idx.held.push_back(-1);
        }
        break;
      case TarStepKind::kMember:
        if (s.data + s.size > end) {
          idx.error_member = s.name;
          idx.has_error_member = true;
          return fail(tar_truncated_member(s.name, s.size, end - s.data), s.header);
        }
        idx.names.push_back(s.name);
        idx.offsets.push_back(s.data);
        idx.sizes.push_back(s.size);
        idx.types.push_back('0');
        idx.chains.push_back(s.chain);
        if (keep > 0) {
          const uint8_t* d = s.size <= keep ? src.peek(s.data, s.size) : nullptr;
          idx.held.push_back(d ? int64_t(idx.held_bytes.size()) : -1);
          if (d) idx.held_bytes.append(reinterpret_cast<const char*>(d), size_t(s.size));
        }
        break;
    }
    // between entries the parser's state is clean: a later call may start here
    if (max_members > 0 && int64_t(idx.names.size()) >= max_members && s.kind != TarStepKind::kExtended) {
      idx.resume = p.position();
      return idx;
    }
  }
}

}  // namespace

TarIndex index_tar(const uint8_t* data, size_t size) {
  MemorySource src{data, int64_t(size), {}};
  return run_index(src, int64_t(size));
}

TarIndex index_tar_fd(int fd, int64_t size, int64_t window, int64_t start, int64_t max_members, int64_t keep) {
  FileSource src{fd, size, std::max<int64_t>(window, kTarBlock), {}, 0, 0, {}};
  return run_index(src, size, start, max_members, keep);
}

NameSplit split_name(std::string_view name) {
  for (const char c : name)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) return {NameKind::kUnsure, {}, {}};
  // metadata: the first path component is `__...__` (four characters at least when a
  // path follows it), as `__[^/]*__($|/)` matched at the start, or the whole name is
  const size_t first_slash = name.find('/');
  const std::string_view c = name.substr(0, first_slash);
  const bool dunder = c.size() >= 2 && c.substr(0, 2) == "__" && c.substr(c.size() - 2) == "__";
  if (dunder && (c.size() >= 4 || first_slash == std::string_view::npos)) return {NameKind::kNone, {}, {}};
  while (name.substr(0, 2) == "./") name.remove_prefix(2);
  const size_t r = name.rfind('/');
  const size_t base = r == std::string_view::npos ? 0 : r + 1;
  const size_t dot = name.find('.', base);
  if (dot == std::string_view::npos || dot <= base) return {NameKind::kNone, {}, {}};
  return {NameKind::kField, name.substr(0, dot), name.substr(dot + 1)};
}

}  // namespace gpudecode
