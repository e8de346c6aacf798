// Memory for the members a reader reads (a JPEG's bytes), recycled: a fresh allocation a
// member (a bytes object) is memory glibc hands back to the system as soon as it is
// freed, so each next read faults its pages in again (5-7 page faults a sample, a third
// of the JPEG pipeline's system time). A BlockPool keeps the freed blocks (up to a limit
// of bytes) and lends them out again; each is handed to Python as the exporter of a
// read-only memoryview, and comes back to the pool when the last view of it is gone.
#pragma once
#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

namespace gpudecode {

// Every call happens with the GIL held (blocks are taken while a read's objects are made,
// given back from a Python object's deallocation): the GIL orders them, and no lock of the
// pool's own can be held across a fork (a child process takes and gives back as usual).
class BlockPool {
 public:
  explicit BlockPool(size_t limit) : limit_(limit) {}
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // A block of at least n bytes (its capacity in *cap: n's size class), or nullptr when
  // memory runs out.
  uint8_t* take(size_t n, size_t* cap);
  // Back to the pool (freed when the pool holds `limit` bytes already).
  void give(uint8_t* p, size_t cap);

  // Frees every free block (blocks lent out come back later as usual).
  void release();
  size_t free_bytes() const;
  size_t limit() const { return limit_; }
  // Size classes: 4 KiB, then steps of about 2^(1/4) rounded up to 4 KiB (a block wastes at
  // most about a sixth of itself).
  static size_t size_class(size_t n);

 private:
  size_t limit_;
  std::map<size_t, std::vector<uint8_t*>> free_;  // by capacity, the last freed last
  size_t free_bytes_ = 0;
};

// A Python object holding one block of `pool` with `size` bytes of data: the exporter of a
// read-only buffer (what a memoryview is made over). *data is where to write the bytes
// (before anyone sees the object). Raises MemoryError when no block can be had.
pybind11::object new_block(const std::shared_ptr<BlockPool>& pool, size_t size, uint8_t** data);

// The BlockPool class for Python (gpudecode._native.BlockPool(limit_bytes)).
void register_blocks(pybind11::module_& m);

// The pool behind a Python BlockPool object (the caller holds the GIL).
std::shared_ptr<BlockPool> pool_of(const pybind11::handle& obj);

}  // namespace gpudecode
