// Tar parsing: ONE state machine (TarParser) that decides what every header means, and
// drivers that feed it bytes: a buffer in memory, a file read with pread (never mmap, so
// a shard that shrinks under the reader is an error, not SIGBUS), and Python streams
// (gzip, http, ...) through the bindings. The drivers only move bytes; every rule (checksums,
// number fields, extended headers, limits, what ends an archive) lives in TarParser, so
// all paths accept and refuse exactly the same archives with the same message and offset.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gpudecode {

constexpr int64_t kTarBlock = 512;
// Sizes above this are refused as out of range: every offset computed from a size
// (header + data + padding) then stays far from int64 overflow.
constexpr int64_t kTarMaxSize = int64_t(1) << 62;
// pax ('x', 'g') and GNU long-name ('L', 'K') payloads are held in memory: bounded.
constexpr int64_t kTarMaxExtended = int64_t(1) << 20;

enum class TarStepKind : int {
  kMember = 0,    // a regular file: its data (size bytes, then padding) follows
  kExtended = 1,  // an extended header: pass its size bytes of payload to extended()
  kNoData = 2,    // a link, directory, device or fifo: header only
  kEnd = 3,       // the end-of-archive block
  kError = 4,     // the archive is refused here
};

struct TarStep {
  TarStepKind kind = TarStepKind::kError;
  char type = 0;         // the header's type flag ('0', '2', '5', ...)
  std::string name;      // kMember: the member's full name (pax path / GNU long name applied)
  int64_t header = 0;    // offset of the header block this step is about
  int64_t chain = 0;     // offset where this entry's headers begin (its extended headers, if any)
  int64_t data = 0;      // offset of the data after it
  int64_t size = 0;      // bytes of data (member or extended payload)
  int64_t next = 0;      // offset of the next header
  std::string error;     // kError: why
};

class TarParser {
 public:
  // A parser reading from `start`: 0, or where an entry's header chain begins (see
  // TarStep::chain; between entries the state is clean, so parsing from there gives what
  // parsing from the start gives).
  explicit TarParser(int64_t start = 0) : pos_(start), last_header_(start), chain_(start) {}

  // The offset of the next header the parser expects.
  int64_t position() const { return pos_; }

  // `block`: the 512 bytes at position(). Advances position() past the entry's data.
  TarStep header(const uint8_t* block);

  // The payload (size bytes) of the extended header header() just announced.
  // Returns "" or the error (its offset: that extended header's).
  std::string extended(const uint8_t* payload, int64_t size);

  // Offset of the last header handed to header(): where a fault in its data is reported.
  int64_t last_header() const { return last_header_; }

  // After extended() refused a pax header for a bad size record (its records framed
  // well, so a path record, wherever it stood, was read): the name of the member the
  // header was for, from that path or from `block` (the header at position()) when its
  // checksum holds; "" when neither tells. Names the fault, so the sample before it, of
  // another key, is known complete.
  std::string refused_member(const uint8_t* block) const;

 private:
  int64_t pos_ = 0;
  int64_t last_header_ = 0;
  int64_t chain_ = 0;      // where the entry being read began
  bool in_chain_ = false;  // extended headers seen, their entry not yet
  char pending_kind_ = 0;  // the extended header whose payload extended() expects
  std::string long_name_, pax_path_;
  bool has_long_ = false, has_path_ = false, has_size_ = false;
  bool bad_size_ = false;  // extended() refused a size record, the rest read
  int64_t pax_size_ = 0;
};

// Messages shared by every driver, so that each reports a fault in the same words.
std::string tar_truncated_member(const std::string& name, int64_t need, int64_t left);
extern const char* const kTarTruncatedHeader;    // 1..511 bytes where a header should be
extern const char* const kTarNoEnd;              // the data ends where a header should be
extern const char* const kTarEmpty;              // nothing at all
extern const char* const kTarExtendedCut;        // an extended header's payload is cut off
extern const char* const kTarTrailingData;       // non-zero bytes after the end-of-archive block

// What a driver found: every regular member up to the end or to the first fault.
struct TarIndex {
  std::vector<std::string> names;
  std::vector<int64_t> offsets;  // where each member's data starts
  std::vector<int64_t> sizes;
  std::vector<char> types;       // '0': regular file; '1' / '2': hard / symbolic link (no data)
  std::vector<int64_t> chains;   // where each member's headers begin (a place parsing can start from)
  int64_t resume = -1;           // stopped after max_members: where to go on from (else -1)
  std::string error;             // "" when the whole archive (and what follows it) was read
  int64_t error_offset = -1;     // the header the error is about (or the first bad trailing block)
  std::string error_member;      // the member whose data was cut off, when that is the fault
  bool has_error_member = false; // (a member's name may be empty)
  bool io_error = false;         // the error is the file changing or failing under the reader
  bool after_end = false;        // the error is in what follows the end-of-archive block
  // (index_tar_fd with keep > 0) the data of each member of at most `keep` bytes that the
  // reads of its headers brought in anyway: held[i] is its start in held_bytes, or -1
  // (not held: larger, or not in the read window). A label beside a large image is read
  // with its header, and needs no read of its own.
  std::vector<int64_t> held;
  std::string held_bytes;
};

// A tar held in memory.
TarIndex index_tar(const uint8_t* data, size_t size);

// A tar file of `size` bytes (its size when opened) read with pread on `fd`, through a
// read-ahead window of `window` bytes. If the file turns out shorter than `size`, the
// result is an io_error naming where (the file shrank), never a signal. Parsing starts
// at `start` (0, or a member's chain offset) and, with max_members > 0, stops after that
// many members, setting `resume` to where a next call goes on.
// With keep > 0, members of at most `keep` bytes whose data came in with the header reads
// are held (TarIndex::held).
TarIndex index_tar_fd(int fd, int64_t size, int64_t window = 1 << 16, int64_t start = 0, int64_t max_members = 0,
                      int64_t keep = 0);

// WebDataset's rule for one member name (gpudecode.io.tario's split_key and is_metadata,
// which stay the reference): kField (key = the path up to the first dot of the basename,
// a leading "./" dropped; ext = the rest, lower-cased), kNone (metadata such as
// `__index__`, or no extension: no sample's field), or kUnsure for a name with a byte
// outside printable ASCII, where Unicode lower-casing and the regex's `$` differ from
// byte rules: the caller decides those in Python.
enum class NameKind : uint8_t { kField, kNone, kUnsure };
struct NameSplit {
  NameKind kind;
  std::string_view key, ext;  // (kField) ext not yet lower-cased
};
NameSplit split_name(std::string_view name);

}  // namespace gpudecode
