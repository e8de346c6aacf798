// The order a shuffle buffer gives samples out in (gpudecode/io/planner.py's _shuffled),
// computed for a whole epoch at once: Python's random.Random (MT19937, its state as
// getstate() gives it) drawn exactly as _shuffled and random.shuffle draw it, so the
// order equals the Python generator's, sample for sample.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gpudecode {

// CPython's random.Random generator (Modules/_randommodule.c): MT19937 from a state of
// 624 words and an index, continued exactly.
class PyMersenne {
 public:
  // state: 624 words; index: getstate()'s last entry (0..624).
  PyMersenne(const uint32_t* state, int index);
  uint32_t next();
  // random.Random._randbelow_with_getrandbits(n), 0 < n < 2**32
  uint32_t below(uint64_t n);

 private:
  uint32_t mt_[624];
  int index_;
};

// The positions 0..n-1 in the order _shuffled(iter(range(n)), size, rng, initial) gives
// them out (rng: a PyMersenne from the Random's state): out[k] is the k-th given out.
// size and initial as _shuffled takes them (size >= 1; initial clamped to [1, size]).
// Returns "" or why not (a buffer of 2**32 samples or more).
std::string shuffle_order(int64_t n, int64_t size, int64_t initial, PyMersenne& rng, int64_t* out);

}  // namespace gpudecode
