// libFuzzer harness: the tar index over memory, and over a file read with pread through
// read-ahead windows of two sizes. All three must agree exactly (one state machine,
// three ways to feed it), and every result must hold the index's invariants.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "tar.h"

using gpudecode::TarIndex;

static void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "tar_fuzzer: %s\n", what);
    std::abort();
  }
}

static void same(const TarIndex& a, const TarIndex& b) {
  check(a.names == b.names, "names differ between drivers");
  check(a.offsets == b.offsets && a.sizes == b.sizes && a.types == b.types, "members differ between drivers");
  check(a.error == b.error && a.error_offset == b.error_offset, "faults differ between drivers");
  check(a.error_member == b.error_member && a.has_error_member == b.has_error_member,
        "cut-off member differs between drivers");
  check(a.after_end == b.after_end, "after-end flag differs between drivers");
  check(!a.io_error && !b.io_error, "io error on an unchanging file");
}

static int memfd() {
  static int fd = -1;
  if (fd < 0) fd = memfd_create("tar_fuzzer", 0);
  return fd;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const TarIndex mem = gpudecode::index_tar(data, size);
  int64_t last = -1;
  for (size_t i = 0; i < mem.offsets.size(); ++i) {
    check(mem.offsets[i] > last, "member offsets do not strictly advance");
    check(mem.sizes[i] >= 0 && mem.offsets[i] + mem.sizes[i] <= int64_t(size), "member outside the data");
    check(mem.offsets[i] % 512 == 0, "member data not block aligned");
    last = mem.offsets[i];
  }
  check(mem.error.empty() == (mem.error_offset < 0), "error and its offset disagree");
  const int fd = memfd();
  check(fd >= 0, "memfd_create failed");
  check(ftruncate(fd, 0) == 0, "ftruncate failed");
  check(size == 0 || pwrite(fd, data, size, 0) == ssize_t(size), "pwrite failed");
  same(mem, gpudecode::index_tar_fd(fd, int64_t(size), 512));
  same(mem, gpudecode::index_tar_fd(fd, int64_t(size), 1 << 16));
  // small members held from the header reads: the same index, each held member's bytes the data's
  for (const int64_t window : {int64_t(512), int64_t(1) << 16}) {
    const TarIndex held = gpudecode::index_tar_fd(fd, int64_t(size), window, 0, 0, 700);
    same(mem, held);
    check(held.held.size() == held.names.size(), "held is not one entry a member");
    for (size_t i = 0; i < held.held.size(); ++i) {
      if (held.held[i] < 0) continue;
      check(held.sizes[i] <= 700 && held.types[i] == '0', "a member held that should not be");
      check(held.held[i] + held.sizes[i] <= int64_t(held.held_bytes.size()), "held bytes out of range");
      check(held.held_bytes.compare(size_t(held.held[i]), size_t(held.sizes[i]),
                                    reinterpret_cast<const char*>(data + held.offsets[i]), size_t(held.sizes[i])) == 0,
            "held bytes differ from the member's data");
    }
  }
  // a few members at a time, resuming where each call stopped: the same index
  TarIndex chunked;
  int64_t at = 0;
  const int64_t step = 1 + int64_t(size % 3);
  for (int guard = 0; guard < 100000; ++guard) {
    TarIndex part = gpudecode::index_tar_fd(fd, int64_t(size), 512, at, step);
    chunked.names.insert(chunked.names.end(), part.names.begin(), part.names.end());
    chunked.offsets.insert(chunked.offsets.end(), part.offsets.begin(), part.offsets.end());
    chunked.sizes.insert(chunked.sizes.end(), part.sizes.begin(), part.sizes.end());
    chunked.types.insert(chunked.types.end(), part.types.begin(), part.types.end());
    check(part.resume < 0 || part.resume > at, "a resumed index did not advance");
    if (part.resume < 0) {
      chunked.error = part.error;
      chunked.error_offset = part.error_offset;
      chunked.error_member = part.error_member;
      chunked.has_error_member = part.has_error_member;
      chunked.after_end = part.after_end;
      break;
    }
    at = part.resume;
  }
  same(mem, chunked);
  // starting at any member's headers gives the rest of the index
  if (!mem.chains.empty()) {
    const size_t k = size % mem.chains.size();
    const TarIndex tail = gpudecode::index_tar_fd(fd, int64_t(size), 4096, mem.chains[k], 0);
    check(tail.names.size() == mem.names.size() - k && tail.error == mem.error && tail.error_offset == mem.error_offset,
          "an index started at a member's chain differs from the whole");
  }
  // the same file, announced larger than it is: an io error, never a crash
  const TarIndex grown = gpudecode::index_tar_fd(fd, int64_t(size) + 4096, 512);
  check(grown.io_error || !grown.error.empty(), "a shrunken file read as whole");
  return 0;
}
