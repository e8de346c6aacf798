#include "jpeg_decode.h"
#include "probe.h"

#include <csetjmp>
#include <cstdio>
#include <algorithm>
#include <vector>

extern "C" {
#include <jpeglib.h>
#include <jerror.h>
}

namespace gpudecode {
namespace {

struct ErrorManager {
  jpeg_error_mgr pub;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void on_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  longjmp(err->jump, 1);
}

// Warnings that mean the pixels are wrong are errors: libjpeg would go on and fill the
// rest of the image with grey (a premature end of data, a marker or a bad code inside
// the entropy-coded data, a lost restart marker). Nothing damaged is returned as if it
// were whole. Warnings that leave the pixels right (extraneous bytes between markers,
// an odd JFIF version or progression) are tolerated, as Pillow tolerates them.
void on_emit_message(j_common_ptr cinfo, int msg_level) {
  if (msg_level != -1) return;
  switch (cinfo->err->msg_code) {
    case JWRN_JPEG_EOF:
    case JWRN_HIT_MARKER:
    case JWRN_HUFF_BAD_CODE:
    case JWRN_ARITH_BAD_CODE:
    case JWRN_MUST_RESYNC:
      on_error_exit(cinfo);
      break;
    default:
      break;
  }
}

// Pillow's conversion of Adobe (inverted) CMYK to RGB, so both agree exactly:
// with C, M, Y, K the uninverted inks, out = (255-K) - (C*(255-K))/255, rounded.
inline uint8_t muldiv255(int a, int b) {
  const int t = a * b + 128;
  return uint8_t(((t >> 8) + t) >> 8);
}

inline void cmyk_row_to_rgb(const uint8_t* in, uint8_t* out, int n, bool inverted) {
  for (int i = 0; i < n; ++i) {
    int c = in[4 * i], m = in[4 * i + 1], y = in[4 * i + 2], k = in[4 * i + 3];
    if (inverted) { c = 255 - c; m = 255 - m; y = 255 - y; k = 255 - k; }
    const int nk = 255 - k;
    out[3 * i] = uint8_t(std::clamp(nk - int(muldiv255(c, nk)), 0, 255));
    out[3 * i + 1] = uint8_t(std::clamp(nk - int(muldiv255(m, nk)), 0, 255));
    out[3 * i + 2] = uint8_t(std::clamp(nk - int(muldiv255(y, nk)), 0, 255));
  }
}

// A progressive JPEG may hold any number of scans, each a pass over the whole image: a
// 1.2 MB file of 2,090 valid scans took 10 s to decode. libjpeg-turbo documents this
// denial of service and its tools cap the scan count; so do we. Real encoders write at
// most a few dozen scans (cjpeg's progressive script: 10). The probe refuses such a file
// before any decoder sees it (probe.h kMaxJpegScans); this is the same limit for a caller
// that decodes without probing.
constexpr int kMaxScans = kMaxJpegScans;

// libjpeg calls the progress monitor between scans and between rows of each pass, so a
// stop requested from another thread is seen within a row of work.
struct Progress {
  jpeg_progress_mgr pub;  // first: libjpeg sees only this
  const uint8_t* stop;
};

void on_progress(j_common_ptr cinfo) {
  if (!cinfo->is_decompressor) return;
  auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (stop_requested(reinterpret_cast<Progress*>(cinfo->progress)->stop)) {
    auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
    std::snprintf(err->message, sizeof err->message, "%s", kStopped);
    longjmp(err->jump, 2);
  }
  if (jpeg_has_multiple_scans(d) && d->input_scan_number > kMaxScans) {
    auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
    std::snprintf(err->message, sizeof err->message,
                  "progressive JPEG with more than %d scans (a known denial of service: refused)", kMaxScans);
    longjmp(err->jump, 1);
  }
}

}  // namespace

std::string decode_jpeg_crop(const uint8_t* data, size_t size, const Box& box, const DecodeOptions& opt,
                             uint8_t* out) {
  jpeg_decompress_struct cinfo;
  ErrorManager err;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = on_error_exit;
  err.pub.emit_message = on_emit_message;
  // Everything that must survive a longjmp lives above this line or is volatile.
  std::vector<uint8_t> row_storage;
  std::vector<JSAMPROW> rows;
  Progress progress{};
  progress.pub.progress_monitor = on_progress;
  progress.stop = opt.stop;
  if (const int why = setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return why == 2 ? std::string(kStopped) : std::string("libjpeg: ") + err.message;
  }
  jpeg_create_decompress(&cinfo);
  cinfo.progress = &progress.pub;
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  if (opt.max_pixels > 0 && int64_t(cinfo.image_width) * int64_t(cinfo.image_height) > opt.max_pixels) {
    const std::string msg = "image of " + std::to_string(cinfo.image_width) + "x" + std::to_string(cinfo.image_height) +
                            " pixels is over the limit of " + std::to_string(opt.max_pixels) + " pixels";
    jpeg_destroy_decompress(&cinfo);
    return msg;
  }
  const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  cinfo.dct_method = opt.fast ? JDCT_IFAST : JDCT_ISLOW;
  cinfo.do_fancy_upsampling = opt.fast ? FALSE : TRUE;
  cinfo.scale_num = 1;
  cinfo.scale_denom = static_cast<unsigned>(opt.scale_denom);
  jpeg_start_decompress(&cinfo);

  const int W = int(cinfo.output_width), H = int(cinfo.output_height);
  const std::string outside = box_outside(box, H, W);
  if (!outside.empty()) {
    jpeg_destroy_decompress(&cinfo);
    return outside;
  }
  const int margin = opt.fast ? 0 : 1;
  const int x0 = std::max(0, box.left - margin);
  const int x1 = std::min(W, box.left + box.width + margin);
  JDIMENSION xoff = JDIMENSION(x0), cw = JDIMENSION(x1 - x0);
  if (cw < JDIMENSION(W)) jpeg_crop_scanline(&cinfo, &xoff, &cw);  // widens to iMCU boundaries
  const int y0 = std::max(0, box.top - margin);
  if (y0 > 0) jpeg_skip_scanlines(&cinfo, JDIMENSION(y0));

  const int comps = int(cinfo.output_components);
  const int rows_at_once = std::max(1, int(cinfo.rec_outbuf_height));
  row_storage.resize(size_t(cw) * comps * rows_at_once);
  rows.resize(rows_at_once);
  for (int r = 0; r < rows_at_once; ++r) rows[r] = row_storage.data() + size_t(r) * cw * comps;
  const int col = box.left - int(xoff);
  const bool inverted = cinfo.saw_Adobe_marker;
  int y = int(cinfo.output_scanline);
  const int y_end = box.top + box.height;
  // When the decoded rows are exactly the box's (full width, RGB), libjpeg writes the
  // box's rows straight into `out`; rows outside the box (the margin) go to the scratch rows.
  const bool direct = !cmyk && col == 0 && int(cw) == box.width;
  while (y < y_end) {
    if (direct)
      for (int r = 0; r < rows_at_once; ++r) {
        const int yy = y + r;
        rows[r] = (yy >= box.top && yy < y_end) ? out + size_t(yy - box.top) * box.width * 3
                                                : row_storage.data() + size_t(r) * cw * comps;
      }
    const int got = int(jpeg_read_scanlines(&cinfo, rows.data(), JDIMENSION(rows_at_once)));
    if (got <= 0) {
      jpeg_destroy_decompress(&cinfo);
      return "libjpeg: no scanline returned at row " + std::to_string(y);
    }
    for (int r = 0; r < got; ++r, ++y) {
      if (direct || y < box.top || y >= y_end) continue;
      uint8_t* dst = out + size_t(y - box.top) * box.width * 3;
      const uint8_t* src = rows[r] + size_t(col) * comps;
      if (cmyk) cmyk_row_to_rgb(src, dst, box.width, inverted);
      else std::copy(src, src + size_t(box.width) * 3, dst);
    }
  }
  // Reading stops at the box: abort the rest instead of decoding it.
  jpeg_abort_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return "";
}

}  // namespace gpudecode

namespace gpudecode {
int libjpeg_api_version() { return JPEG_LIB_VERSION; }
}  // namespace gpudecode
