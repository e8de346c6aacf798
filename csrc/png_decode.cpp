#include "png_decode.h"

#include <png.h>

#include <algorithm>
#include <csetjmp>
#include <cstring>
#include <vector>

namespace gpudecode {
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
                            const uint8_t* stop) {
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
  // int64: a box near INT_MAX must be refused, not overflow
  if (box.top < 0 || box.left < 0 || box.height <= 0 || box.width <= 0 || int64_t(box.top) + box.height > H ||
      int64_t(box.left) + box.width > W) {
    png_destroy_read_struct(&png, &info, nullptr);
    return "crop box (top=" + std::to_string(box.top) + ", left=" + std::to_string(box.left) +
           ", height=" + std::to_string(box.height) + ", width=" + std::to_string(box.width) +
           ") is outside the " + std::to_string(H) + "x" + std::to_string(W) + " image";
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

}  // namespace gpudecode
