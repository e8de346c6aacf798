// Every part of libpng the decoder reaches, so the link pulls in their objects.
#include <png.h>
#include <zlib.h>

extern "C" __attribute__((visibility("default"))) int check() {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  png_warning(png, "check");
  png_set_read_fn(png, nullptr, nullptr);
  png_set_palette_to_rgb(png);
  png_set_expand_gray_1_2_4_to_8(png);
  png_set_gray_to_rgb(png);
  png_set_strip_16(png);
  png_set_strip_alpha(png);
  png_set_interlace_handling(png);
  png_read_info(png, info);
  png_read_update_info(png, info);
  png_read_row(png, nullptr, nullptr);
  (void)png_get_rowbytes(png, info);
  (void)png_get_valid(png, info, PNG_INFO_tRNS);
  png_destroy_read_struct(&png, &info, nullptr);
  return zlibVersion() != nullptr;
}
