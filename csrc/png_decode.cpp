#include "png_decode.h"

#include <png.h>

#include <algorithm>
#include <csetjmp>
#include <cstring>
#include <new>
#include <vector>

#ifdef GPUDECODE_HAVE_ZLIB
#include <zlib.h>
#ifdef GPUDECODE_HAVE_LIBDEFLATE
#include <libdeflate.h>

#include <memory>
#endif
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "png_walk.h"
#endif

namespace gpudecode {
namespace {

#ifdef GPUDECODE_HAVE_ZLIB
// ---- The direct path: libpng's result without libpng, where that result is sure ----
//
// The chunks walked (png_walk.h, which checks every IDAT CRC), the joined zlib stream
// inflated in one call (libdeflate where it was found, else zlib; libpng inflates a row at a
// time through zlib), each row unfiltered in place by a loop for its filter type (Paeth and
// Average a pixel at a time in SIMD lanes), and the box's rows turned to RGB as libpng's
// transforms below turn them (its speed against libpng: bench/RESULTS.md). It decides only
// what it is sure libpng decides the same way; anything else goes to libpng, which then says
// what is wrong in its own words: a walk that refuses, an interlaced image, a stream that
// does not inflate to exactly the rows' bytes with a right Adler-32, bytes after the stream
// in the IDAT chunk it ends in, a declared window under 32 KiB that the image data outgrows
// (libpng's zlib keeps only that much history), a filter type over 4, an image of over
// kDirectMax filtered bytes (libpng holds a row, this path the whole image).
// tests/test_png.py and the png fuzzer hold the two paths to the same verdicts and pixels,
// with one difference where libdeflate inflates: it reads some Deflate streams that zlib (so
// libpng) calls invalid, each a well-formed reading with a right Adler-32 over the rows it
// gives: a length symbol 286 or 287 (read as 258, as 285 is) or a distance symbol 30 or 31
// (read as 29) in a block of fixed codes; more than 286 length or 30 distance codes declared
// in a block's header; a run of code lengths that runs past the last one (the extra ones
// dropped); a code-length code of a single codeword; a code of one codeword read through the
// bit pattern it leaves unused (read as that codeword), and a distance code of no codewords
// that a match uses anyway (read as distance 1). zlib refuses each, libdeflate decodes it.
// No encoder writes them: a bit flipped in a real file that lands there leaves the image's
// own pixels (its Adler-32 still right), and anything else it changes fails the Adler-32.

constexpr size_t kDirectMax = size_t(1) << 26;  // bytes of filtered image data (a 4K RGB image is 25 MB)

inline uint8_t paeth(int a, int b, int c) {
  const int p = b - c, q = a - c;
  const int pa = p < 0 ? -p : p, pb = q < 0 ? -q : q, pc = (p + q) < 0 ? -(p + q) : (p + q);
  const int bc = pb <= pc ? b : c;
  const int m = -int((pa <= pb) & (pa <= pc));  // branch-free: a photo's choices are unpredictable
  return uint8_t((a & m) | (bc & ~m));
}

// Paeth with one or two bytes a pixel: each lane's byte to the left carried in a register
// (through memory, each byte's chain would add a store-to-load forwarding to the Paeth
// arithmetic); wider pixels go a pixel at a time in SIMD lanes (paeth_row below).
template <size_t BPP>
void paeth_row_narrow(uint8_t* cur, const uint8_t* prev, size_t n) {
  if (n < BPP) return;
  int a[BPP], c[BPP];
  for (size_t k = 0; k < BPP; ++k) {
    a[k] = cur[k] = uint8_t(cur[k] + prev[k]);
    c[k] = prev[k];
  }
  for (size_t i = BPP; i + BPP <= n; i += BPP)
    for (size_t k = 0; k < BPP; ++k) {
      const int b = prev[i + k];
      a[k] = cur[i + k] = uint8_t(cur[i + k] + paeth(a[k], b, c[k]));
      c[k] = b;
    }
}

template <size_t BPP>
void unfilter_row(int filter, uint8_t* cur, const uint8_t* prev, size_t n) {
  if constexpr (BPP <= 2) {  // (n is a whole number of pixels: a row of 1 or 2 bytes a pixel)
    if (filter == 4) return paeth_row_narrow<BPP>(cur, prev, n);
  }
  switch (filter) {
    case 1:
      for (size_t i = BPP; i < n; ++i) cur[i] = uint8_t(cur[i] + cur[i - BPP]);
      break;
    case 2:
      for (size_t i = 0; i < n; ++i) cur[i] = uint8_t(cur[i] + prev[i]);
      break;
    case 3:
      for (size_t i = 0; i < BPP && i < n; ++i) cur[i] = uint8_t(cur[i] + (prev[i] >> 1));
      for (size_t i = BPP; i < n; ++i) cur[i] = uint8_t(cur[i] + ((cur[i - BPP] + prev[i]) >> 1));
      break;
    case 4:
      for (size_t i = 0; i < BPP && i < n; ++i) cur[i] = uint8_t(cur[i] + prev[i]);
      for (size_t i = BPP; i < n; ++i) cur[i] = uint8_t(cur[i] + paeth(cur[i - BPP], prev[i], prev[i - BPP]));
      break;
    default:  // 0: none (over 4 was refused before)
      break;
  }
}

#ifdef __SSE2__
// Paeth and Average for pixels of 3, 4, 6 or 8 bytes, a pixel at a time in 16-bit lanes:
// each pixel's chain of dependence on the pixel to its left is then one vector chain,
// not `bpp` byte chains of the same length. Reads up to 8 bytes at a pixel (the caller
// pads both rows); writes exactly the row's bytes.
template <size_t BPP>
inline __m128i load_px(const uint8_t* p) {
  if constexpr (BPP <= 4) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm_unpacklo_epi8(_mm_cvtsi32_si128(v), _mm_setzero_si128());
  } else {
    return _mm_unpacklo_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)), _mm_setzero_si128());
  }
}

template <size_t BPP>
inline void store_px(uint8_t* p, __m128i v) {
  const __m128i b = _mm_packus_epi16(v, v);
  if constexpr (BPP <= 4) {
    const int32_t w = _mm_cvtsi128_si32(b);
    std::memcpy(p, &w, BPP);
  } else {
    const int64_t w = _mm_cvtsi128_si64(b);
    std::memcpy(p, &w, BPP);
  }
}

inline __m128i abs16(__m128i v) { return _mm_max_epi16(v, _mm_sub_epi16(_mm_setzero_si128(), v)); }

template <size_t BPP>
void paeth_row(uint8_t* cur, const uint8_t* prev, size_t n) {
  const __m128i low = _mm_set1_epi16(0xFF);
  __m128i a = _mm_setzero_si128(), c = _mm_setzero_si128();
  for (size_t i = 0; i < n; i += BPP) {
    const __m128i b = load_px<BPP>(prev + i), x = load_px<BPP>(cur + i);
    const __m128i p = _mm_sub_epi16(b, c), q = _mm_sub_epi16(a, c);
    const __m128i pa = abs16(p), pb = abs16(q), pc = abs16(_mm_add_epi16(p, q));
    const __m128i not_a = _mm_or_si128(_mm_cmpgt_epi16(pa, pb), _mm_cmpgt_epi16(pa, pc));
    const __m128i take_c = _mm_cmpgt_epi16(pb, pc);
    const __m128i bc = _mm_or_si128(_mm_andnot_si128(take_c, b), _mm_and_si128(take_c, c));
    const __m128i pred = _mm_or_si128(_mm_andnot_si128(not_a, a), _mm_and_si128(not_a, bc));
    a = _mm_and_si128(_mm_add_epi16(x, pred), low);
    c = b;
    store_px<BPP>(cur + i, a);
  }
}

template <size_t BPP>
void average_row(uint8_t* cur, const uint8_t* prev, size_t n) {
  const __m128i low = _mm_set1_epi16(0xFF);
  __m128i a = _mm_setzero_si128();
  for (size_t i = 0; i < n; i += BPP) {
    const __m128i b = load_px<BPP>(prev + i), x = load_px<BPP>(cur + i);
    a = _mm_and_si128(_mm_add_epi16(x, _mm_srli_epi16(_mm_add_epi16(a, b), 1)), low);
    store_px<BPP>(cur + i, a);
  }
}
#endif

void unfilter(int filter, uint8_t* cur, const uint8_t* prev, size_t n, size_t bpp) {
#ifdef __SSE2__
  if (filter == 3 || filter == 4) {
    switch (bpp) {
      case 3: return filter == 4 ? paeth_row<3>(cur, prev, n) : average_row<3>(cur, prev, n);
      case 4: return filter == 4 ? paeth_row<4>(cur, prev, n) : average_row<4>(cur, prev, n);
      case 6: return filter == 4 ? paeth_row<6>(cur, prev, n) : average_row<6>(cur, prev, n);
      case 8: return filter == 4 ? paeth_row<8>(cur, prev, n) : average_row<8>(cur, prev, n);
      default: break;
    }
  }
#endif
  switch (bpp) {
    case 1: return unfilter_row<1>(filter, cur, prev, n);
    case 2: return unfilter_row<2>(filter, cur, prev, n);
    case 3: return unfilter_row<3>(filter, cur, prev, n);
    case 4: return unfilter_row<4>(filter, cur, prev, n);
    case 6: return unfilter_row<6>(filter, cur, prev, n);
    default: return unfilter_row<8>(filter, cur, prev, n);
  }
}

// Row `r` (unfiltered samples) as RGB, pixels [x0, x0 + w) into `out`: palette expanded,
// grey of 1-4 bits scaled to 8 (bit replication), 16-bit samples to their high byte,
// alpha dropped, grey to three channels; what libpng's transforms in decode_png_crop give.
void row_to_rgb(const uint8_t* r, int depth, int color, const uint8_t* palette, int64_t x0, int64_t w, uint8_t* out) {
  if (depth < 8) {
    const int mask = (1 << depth) - 1, scale = 255 / mask;
    for (int64_t x = x0; x < x0 + w; ++x, out += 3) {
      const int64_t bit = x * depth;
      const int v = (r[bit >> 3] >> (8 - depth - int(bit & 7))) & mask;
      if (color == 3) {
        std::memcpy(out, palette + 3 * v, 3);
      } else {
        out[0] = out[1] = out[2] = uint8_t(v * scale);
      }
    }
    return;
  }
  const int64_t step = depth >> 3;  // bytes a sample (the high byte first)
  if (color == 3) {
    for (int64_t x = x0; x < x0 + w; ++x, out += 3) std::memcpy(out, palette + 3 * r[x], 3);
  } else if (color == 0 || color == 4) {
    const int64_t px = step * (color == 0 ? 1 : 2);
    for (int64_t x = x0; x < x0 + w; ++x, out += 3) out[0] = out[1] = out[2] = r[x * px];
  } else if (color == 2 && step == 1) {
    std::memcpy(out, r + 3 * x0, size_t(w) * 3);
  } else {  // 2 (16 bits), 6
    const int64_t px = step * (color == 2 ? 3 : 4);
    for (int64_t x = x0; x < x0 + w; ++x, out += 3) {
      const uint8_t* s = r + x * px;
      out[0] = s[0];
      out[1] = s[step];
      out[2] = s[2 * step];
    }
  }
}

#ifdef GPUDECODE_HAVE_LIBDEFLATE
struct FreeDecompressor {
  void operator()(libdeflate_decompressor* d) const { libdeflate_free_decompressor(d); }
};
#endif

// The zlib stream `in` inflated into exactly `want` bytes of `out`, its Adler-32 checked;
// `used`: the bytes of `in` it took. False for anything else (less or more data, bad data).
// libdeflate where it was found (the faster: bench/RESULTS.md), else zlib.
bool inflate_whole(const std::vector<uint8_t>& in, uint8_t* out, size_t want, size_t& used) {
#ifdef GPUDECODE_HAVE_LIBDEFLATE
  thread_local std::unique_ptr<libdeflate_decompressor, FreeDecompressor> d(libdeflate_alloc_decompressor());
  if (!d) return false;
  return libdeflate_zlib_decompress_ex(d.get(), in.data(), in.size(), out, want, &used, nullptr) ==
         LIBDEFLATE_SUCCESS;
#else
  z_stream z{};
  if (inflateInit(&z) != Z_OK) return false;
  z.next_in = const_cast<uint8_t*>(in.data());
  z.avail_in = unsigned(in.size());
  z.next_out = out;
  z.avail_out = unsigned(want);
  const int ret = inflate(&z, Z_FINISH);
  used = size_t(z.total_in);
  const size_t made = size_t(z.total_out);
  inflateEnd(&z);
  return ret == Z_STREAM_END && made == want;
#endif
}

// The walked image's rows (`stride` bytes each after its filter-type byte, `want` bytes in
// all) inflated into `rows`, still filtered: false where libpng might decide otherwise (see
// above: a window under 32 KiB that the data outgrows, a stream that is not exactly the rows,
// bytes after it in its IDAT chunk, a filter type over 4).
bool inflated_rows(const uint8_t* data, const PngChunks& c, size_t stride, size_t want, std::vector<uint8_t>& rows) {
  std::vector<uint8_t> stream(c.stream_size);
  std::vector<size_t> ends;  // where each IDAT payload ends in the joined stream
  ends.reserve(c.idat.size());
  size_t at = 0;
  for (const auto& [off, len] : c.idat) {
    std::memcpy(stream.data() + at, data + off, len);
    ends.push_back(at += len);
  }
  // a window under 32 KiB that the image data outgrows: libpng's zlib, inflating a row at a
  // time, holds only that much history and refuses a distance past it, which one whole-buffer
  // inflate would take (where the data fits the window, no distance can reach past it)
  if (stream.size() < 2 || ((stream[0] >> 4) != 7 && want > (size_t(1) << ((stream[0] >> 4) + 8)))) return false;
  size_t used = 0;
  if (!inflate_whole(stream, rows.data(), want, used)) return false;
  // libpng refuses the rest of the IDAT chunk the stream ends in, and reads no chunk after it
  if (used != stream.size() && !std::binary_search(ends.begin(), ends.end(), used)) return false;
  for (size_t y = 0; y < want; y += stride + 1)  // libpng unfilters every row: a bad filter type anywhere is its error
    if (rows[y] > 4) return false;
  return true;
}

// True when it decided (`result`: "" for the pixels written, or the box's error, or
// kStopped); false to leave the image to libpng (nothing written to `out` that matters).
bool decode_direct(const uint8_t* data, size_t size, const Box& box, int64_t max_pixels, uint8_t* out,
                   const uint8_t* stop, std::string& result) {
  PngChunks c;
  if (!png_walk(data, size, max_pixels, c).empty() || c.interlace || !c.fault.empty()) return false;
  const int64_t H = c.height, W = c.width;
  static const int kChannels[7] = {1, 0, 3, 1, 2, 0, 4};
  const size_t channels = size_t(kChannels[c.color]);
  const size_t stride = (size_t(W) * channels * size_t(c.depth) + 7) / 8;
  const size_t bpp = std::max<size_t>(1, channels * size_t(c.depth) / 8);
  const size_t want = size_t(H) * (stride + 1);
  if (want > kDirectMax || c.stream_size > 0xFFFFFFFFu) return false;
  result = box_outside(box, H, W);
  if (!result.empty()) return true;
  if (stop_requested(stop)) {
    result = kStopped;
    return true;
  }
  // (a refused allocation throws std::bad_alloc: the caller then leaves the image to libpng)
  std::vector<uint8_t> rows(want + 8), zero(stride + 8);  // (+ 8: 8-byte reads at a row's end)
  if (!inflated_rows(data, c, stride, want, rows)) return false;
  const int64_t bottom = int64_t(box.top) + box.height;
  for (int64_t y = 0; y < bottom; ++y) {
    if ((y & 63) == 0 && stop_requested(stop)) {
      result = kStopped;
      return true;
    }
    uint8_t* row = rows.data() + size_t(y) * (stride + 1);
    unfilter(row[0], row + 1, y ? row + 1 - (stride + 1) : zero.data(), stride, bpp);
    if (y >= box.top)
      row_to_rgb(row + 1, c.depth, c.color, c.palette, box.left, box.width,
                 out + size_t(y - box.top) * size_t(box.width) * 3);
  }
  return true;
}

// Row `r` (unfiltered samples of a grey or palette image) as Pillow's mode for it gives its
// values, `w` of them into `out`: 8 bits as they are; palette indices of 1-4 bits as they
// are; grey of 2 and 4 bits scaled to 8 (Pillow's "L;2", "L;4"); 1-bit grey 0 or 1 (mode
// "1", a bool each); 16 bits as an int32 (mode "I;16", widened).
void row_to_samples(const uint8_t* r, int depth, int color, int64_t w, uint8_t* out) {
  if (depth == 16) {
    for (int64_t x = 0; x < w; ++x) {
      const int32_t v = (int32_t(r[2 * x]) << 8) | r[2 * x + 1];
      std::memcpy(out + 4 * x, &v, 4);
    }
  } else if (depth == 8) {
    std::memcpy(out, r, size_t(w));
  } else {
    const int mask = (1 << depth) - 1, scale = color == 0 && depth > 1 ? 255 / mask : 1;
    for (int64_t x = 0; x < w; ++x) {
      const int64_t bit = x * depth;
      out[x] = uint8_t(((r[bit >> 3] >> (8 - depth - int(bit & 7))) & mask) * scale);
    }
  }
}
#endif

}  // namespace

bool decode_png_samples(const uint8_t* data, size_t size, int64_t max_pixels, uint8_t* out, size_t out_size) {
#ifdef GPUDECODE_HAVE_ZLIB
  PngChunks c;
  if (!png_walk(data, size, max_pixels, c).empty() || c.interlace || !c.fault.empty()) return false;
  if (c.color != 0 && c.color != 3) return false;
  const int64_t H = c.height, W = c.width;
  const size_t stride = (size_t(W) * size_t(c.depth) + 7) / 8;
  const size_t bpp = std::max<size_t>(1, size_t(c.depth) / 8);
  const size_t want = size_t(H) * (stride + 1);
  const size_t item = c.depth == 16 ? 4 : 1;
  if (want > kDirectMax || c.stream_size > 0xFFFFFFFFu || out_size != size_t(H) * size_t(W) * item) return false;
  try {
    std::vector<uint8_t> rows(want + 8), zero(stride + 8);  // (+ 8: 8-byte reads at a row's end)
    if (!inflated_rows(data, c, stride, want, rows)) return false;
    for (int64_t y = 0; y < H; ++y) {
      uint8_t* row = rows.data() + size_t(y) * (stride + 1);
      unfilter(row[0], row + 1, y ? row + 1 - (stride + 1) : zero.data(), stride, bpp);
      row_to_samples(row + 1, c.depth, c.color, W, out + size_t(y) * size_t(W) * item);
    }
  } catch (const std::bad_alloc&) {
    return false;
  }
  return true;
#else
  (void)data, (void)size, (void)max_pixels, (void)out, (void)out_size;
  return false;
#endif
}

namespace {

struct Source {
  const uint8_t* data;
  size_t size;
  size_t pos;
};

struct Status {
  std::string message;
  bool rows_started = false;  // warnings from here on concern the pixel data: errors
};

void on_read(png_structp png, png_bytep dst, png_size_t n) {
  auto* src = static_cast<Source*>(png_get_io_ptr(png));
  if (n > src->size - src->pos) png_error(png, "the data ends inside the image");
  std::memcpy(dst, src->data + src->pos, n);
  src->pos += n;
}

void on_error(png_structp png, png_const_charp msg) {
  auto* st = static_cast<Status*>(png_get_error_ptr(png));
  st->message = msg ? msg : "error";
  png_longjmp(png, 1);
}

// libpng reports some faults as warnings (its "benign errors"). Before the pixel data
// they concern ancillary chunks (a bad iCCP, a bad tEXt CRC: the pixels are unaffected,
// and Pillow accepts such files too). From the first row on they concern the pixels
// themselves (the zlib stream's checksum, extra or missing data): those are errors.
void on_warning(png_structp png, png_const_charp msg) {
  auto* st = static_cast<Status*>(png_get_error_ptr(png));
  if (st->rows_started) {
    st->message = msg ? msg : "warning in the image data";
    png_longjmp(png, 1);
  }
}

}  // namespace

std::string decode_png_crop(const uint8_t* data, size_t size, const Box& box, int64_t max_pixels, uint8_t* out,
                            const uint8_t* stop, bool direct, bool* decided_directly) {
  if (decided_directly != nullptr) *decided_directly = false;
#ifdef GPUDECODE_HAVE_ZLIB
  std::string decided;
  bool done = false;
  try {  // (memory refused, in the walk or the buffers: libpng decides; nothing may throw on a pool thread)
    done = direct && decode_direct(data, size, box, max_pixels, out, stop, decided);
  } catch (const std::bad_alloc&) {
    done = false;
  }
  if (done) {
    if (decided_directly != nullptr) *decided_directly = true;
    return decided;
  }
#else
  (void)direct;
#endif
  Source src{data, size, 0};
  Status st;
  // Everything that must survive a longjmp is made before setjmp and not reassigned after.
  std::vector<uint8_t> scratch;
  std::vector<png_bytep> rows;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &st, on_error, on_warning);
  if (png == nullptr) return "libpng: cannot create a read struct";
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    return "libpng: cannot create an info struct";
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return "libpng: " + st.message;
  }
  png_set_read_fn(png, &src, on_read);
  png_read_info(png, info);
  const int64_t W = png_get_image_width(png, info), H = png_get_image_height(png, info);
  if (max_pixels > 0 && W * H > max_pixels) {
    png_destroy_read_struct(&png, &info, nullptr);
    return "image of " + std::to_string(W) + "x" + std::to_string(H) + " pixels is over the limit of " +
           std::to_string(max_pixels) + " pixels";
  }
  const std::string outside = box_outside(box, H, W);
  if (!outside.empty()) {
    png_destroy_read_struct(&png, &info, nullptr);
    return outside;
  }
  const int color = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (depth == 16) png_set_strip_16(png);  // the high byte
  if (color & PNG_COLOR_MASK_ALPHA || png_get_valid(png, info, PNG_INFO_tRNS)) png_set_strip_alpha(png);
  if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
  const int passes = png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) != size_t(W) * 3 || png_get_channels(png, info) != 3 ||
      png_get_bit_depth(png, info) != 8) {
    png_destroy_read_struct(&png, &info, nullptr);
    return "libpng: unexpected row layout after conversion to RGB";
  }
  st.rows_started = true;
  const size_t row_bytes = size_t(W) * 3, box_bytes = size_t(box.width) * 3, col = size_t(box.left) * 3;
  // The stop flag is looked at before every row (a row of a 16k-wide image is
  // milliseconds), so a cancelled decode ends promptly, never mid-way through libpng.
  if (passes > 1) {  // interlaced: the passes fill the whole image, then the box is copied out
    scratch.resize(size_t(H) * row_bytes);
    rows.resize(size_t(H));
    for (int64_t y = 0; y < H; ++y) rows[size_t(y)] = scratch.data() + size_t(y) * row_bytes;
    for (int p = 0; p < passes; ++p)  // what png_read_image does, pass by pass, row by row
      for (int64_t y = 0; y < H; ++y) {
        if (stop_requested(stop)) {
          png_destroy_read_struct(&png, &info, nullptr);
          return kStopped;
        }
        png_read_row(png, rows[size_t(y)], nullptr);
      }
    for (int y = 0; y < box.height; ++y)
      std::memcpy(out + size_t(y) * box_bytes, rows[size_t(box.top + y)] + col, box_bytes);
  } else {
    // rows of the box spanning the whole width go straight into `out`
    const bool direct = box.left == 0 && int64_t(box.width) == W;
    scratch.resize(row_bytes);
    for (int64_t y = 0; y < H; ++y) {
      if (stop_requested(stop)) {
        png_destroy_read_struct(&png, &info, nullptr);
        return kStopped;
      }
      const bool inside = y >= box.top && y < int64_t(box.top) + box.height;
      uint8_t* dst = inside ? out + size_t(y - box.top) * box_bytes : nullptr;
      png_read_row(png, inside && direct ? dst : scratch.data(), nullptr);
      if (inside && !direct) std::memcpy(dst, scratch.data() + col, box_bytes);
    }
  }
  png_destroy_read_struct(&png, &info, nullptr);
  return "";
}

LibpngVersions libpng_versions() {
#ifdef GPUDECODE_PNG_STATIC
  const bool linked_in = true;
#else
  const bool linked_in = false;
#endif
#ifdef GPUDECODE_HAVE_ZLIB
  const char* zlib = zlibVersion();
#else
  const char* zlib = "";  // (libpng's own, not reachable without zlib's headers)
#endif
  return {PNG_LIBPNG_VER_STRING, png_get_libpng_ver(nullptr), zlib, linked_in};
}

}  // namespace gpudecode
