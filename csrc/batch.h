// Batched entry points over many images, run on native threads with the caller's
// buffers. Kept apart from the Python bindings so the fuzzers drive exactly this code.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <system_error>
#include <thread>
#include <vector>
#include <atomic>
#include <algorithm>

#include "jpeg_decode.h"
#include "probe.h"

namespace gpudecode {

struct ByteView {
  const uint8_t* data;
  size_t size;
};

// Runs f(0) .. f(n-1) on up to `num_threads` threads (the caller's thread is one of
// them). If the system refuses a thread, the threads already started and the caller do
// the work: every started thread is always joined, so nothing can terminate the process.
template <class F>
void parallel_for(size_t n, int num_threads, F&& f) {
  const int t = std::max(1, std::min<int>(num_threads, int(std::min<size_t>(n, 1 << 16))));
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < n; i = next++) f(i);
  };
  std::vector<std::thread> pool;
  pool.reserve(size_t(t - 1));
  for (int k = 1; k < t; ++k) {
    try {
      pool.emplace_back(work);
    } catch (const std::system_error&) {
      break;
    }
  }
  work();
  for (auto& th : pool) th.join();
}

int default_threads();

// Probes every item; errs[i] is "" (infos[i] filled) or why item i is not readable.
std::vector<std::string> probe_batch(const std::vector<ByteView>& items, std::vector<ImageInfo>& infos,
                                     int num_threads);

// Checks the arguments of decode_jpeg_batch: "" or what is wrong (boxes [N, 4] as
// top, left, height, width; one scale denominator and one output offset per item;
// every box's pixels inside out[0, capacity)).
std::string check_jpeg_batch(size_t n, const int32_t* boxes, const int32_t* scale_denoms, const int64_t* offsets,
                             int64_t capacity);

// Decodes box i of item i into out + offsets[i] (RGB, HWC) on native threads; one error
// message per item, "" where it decoded. Call check_jpeg_batch first.
std::vector<std::string> decode_jpeg_batch(const std::vector<ByteView>& items, const int32_t* boxes,
                                           const int32_t* scale_denoms, const int64_t* offsets, uint8_t* out,
                                           bool fast, int64_t max_pixels, int num_threads,
                                           const uint8_t* stop = nullptr);

// Item kinds of decode_batch.
constexpr uint8_t kJpeg = 0, kPng = 1;

// decode_jpeg_batch over JPEGs (kinds[i] == kJpeg) and PNGs (kPng: whole image decoded,
// the box kept; scale denominator 1) alike, one pool of threads for the batch. PNG needs
// a build with libpng (has_png()); without it those items get an error. When `stop`
// (may be nullptr) is set from another thread, the images in progress end within a row
// and the rest are not started: their errors are kStopped.
std::vector<std::string> decode_batch(const std::vector<ByteView>& items, const uint8_t* kinds, const int32_t* boxes,
                                      const int32_t* scale_denoms, const int64_t* offsets, uint8_t* out, bool fast,
                                      int64_t max_pixels, int num_threads, const uint8_t* stop = nullptr);

bool has_png();

}  // namespace gpudecode
