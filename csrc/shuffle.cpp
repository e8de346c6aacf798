#include "shuffle.h"

#include <algorithm>
#include <cstring>

namespace gpudecode {

namespace {
constexpr int kN = 624;
constexpr int kM = 397;
constexpr uint32_t kMatrixA = 0x9908b0dfU;
constexpr uint32_t kUpper = 0x80000000U;
constexpr uint32_t kLower = 0x7fffffffU;

int bit_length(uint64_t n) {
  int k = 0;
  while (n) {
    ++k;
    n >>= 1;
  }
  return k;
}
}  // namespace

PyMersenne::PyMersenne(const uint32_t* state, int index) : index_(std::clamp(index, 0, kN)) {
  std::memcpy(mt_, state, sizeof(mt_));
}

uint32_t PyMersenne::next() {
  static const uint32_t mag01[2] = {0x0U, kMatrixA};
  uint32_t y;
  if (index_ >= kN) {  // the next 624 words at once, as genrand_uint32 makes them
    int kk = 0;
    for (; kk < kN - kM; ++kk) {
      y = (mt_[kk] & kUpper) | (mt_[kk + 1] & kLower);
      mt_[kk] = mt_[kk + kM] ^ (y >> 1) ^ mag01[y & 0x1U];
    }
    for (; kk < kN - 1; ++kk) {
      y = (mt_[kk] & kUpper) | (mt_[kk + 1] & kLower);
      mt_[kk] = mt_[kk + (kM - kN)] ^ (y >> 1) ^ mag01[y & 0x1U];
    }
    y = (mt_[kN - 1] & kUpper) | (mt_[0] & kLower);
    mt_[kN - 1] = mt_[kM - 1] ^ (y >> 1) ^ mag01[y & 0x1U];
    index_ = 0;
  }
  y = mt_[index_++];
  y ^= (y >> 11);
  y ^= (y << 7) & 0x9d2c5680U;
  y ^= (y << 15) & 0xefc60000U;
  y ^= (y >> 18);
  return y;
}

uint32_t PyMersenne::below(uint64_t n) {
  // getrandbits(k) for k <= 32 is the next word's top k bits; redrawn while >= n
  const int k = bit_length(n);
  uint32_t r = next() >> (32 - k);
  while (r >= n) r = next() >> (32 - k);
  return r;
}

std::string shuffle_order(int64_t n, int64_t size, int64_t initial, PyMersenne& rng, int64_t* out) {
  if (n <= 0) return "";
  if (size < 1) size = 1;
  if (size >= (int64_t(1) << 32)) return "a shuffle buffer of 2**32 samples or more";
  const int64_t start = std::max<int64_t>(1, std::min(initial, size));
  std::vector<int64_t> buf;
  buf.reserve(size_t(std::min(size, n)) + 1);
  int64_t next_in = 0, given = 0;
  while (next_in < n) {  // `for s in it`
    buf.push_back(next_in++);
    if (int64_t(buf.size()) < size && next_in < n) buf.push_back(next_in++);  // two in while it fills
    if (int64_t(buf.size()) >= start) {
      const uint32_t i = rng.below(buf.size());
      std::swap(buf[i], buf.back());
      out[given++] = buf.back();
      buf.pop_back();
    }
  }
  // random.shuffle(buf): for i in reversed(range(1, len)): j = below(i + 1)
  for (int64_t i = int64_t(buf.size()) - 1; i >= 1; --i) std::swap(buf[size_t(i)], buf[rng.below(uint64_t(i) + 1)]);
  for (int64_t v : buf) out[given++] = v;
  return "";
}

}  // namespace gpudecode
