// gpudecode._native: CPU-side codec work. Every entry point releases the GIL while it
// touches image bytes, so Python reader/decoder threads run in parallel.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "jpeg_decode.h"
#include "probe.h"
#include "batch.h"
#include "blocks.h"
#include "draws.h"
#include "png_walk.h"
#ifdef GPUDECODE_HAVE_PNG
#include "png_decode.h"
#endif
#include "shuffle.h"
#include "tar.h"
#include "warp.h"

namespace py = pybind11;
using namespace gpudecode;

namespace {

// Buffers are read while the GIL is released: the caller's list keeps them alive.
ByteView view_of(const py::buffer& b) {
  py::buffer_info info = b.request();
  if (info.itemsize != 1) throw py::type_error("expected a bytes-like object of bytes");
  return ByteView{static_cast<const uint8_t*>(info.ptr), size_t(info.size)};
}

py::dict info_to_dict(const ImageInfo& i) {
  py::dict d;
  d["format"] = i.format;
  d["height"] = i.height;
  d["width"] = i.width;
  d["channels"] = i.channels;
  d["bit_depth"] = i.bit_depth;
  d["color_space"] = i.color_space;
  d["subsampling"] = i.format == "jpeg" ? py::object(py::str(i.subsampling)) : py::object(py::none());
  d["progressive"] = i.progressive;
  d["arithmetic"] = i.arithmetic;
  d["color_type"] = i.color_type >= 0 ? py::object(py::int_(i.color_type)) : py::object(py::none());
  d["interlaced"] = i.interlaced;
  d["data_offset"] = i.data_offset;
  return d;
}

// tar names are bytes; undecodable ones keep their bytes (as Python's tarfile does)
py::object name_str(const std::string& n) {
  return py::reinterpret_steal<py::object>(PyUnicode_DecodeUTF8(n.data(), Py_ssize_t(n.size()), "surrogateescape"));
}

py::tuple index_to_tuple(const TarIndex& idx) {
  py::list names;
  for (auto& n : idx.names) names.append(name_str(n));
  py::array_t<int64_t> offsets(idx.offsets.size()), sizes(idx.sizes.size());
  std::copy(idx.offsets.begin(), idx.offsets.end(), offsets.mutable_data());
  std::copy(idx.sizes.begin(), idx.sizes.end(), sizes.mutable_data());
  py::bytes types(idx.types.data(), idx.types.size());
  py::array_t<int64_t> chains(idx.chains.size());
  std::copy(idx.chains.begin(), idx.chains.end(), chains.mutable_data());
  py::object err = idx.error.empty() ? py::object(py::none()) : name_str(idx.error);  // may quote a raw name
  py::object member = idx.has_error_member ? name_str(idx.error_member) : py::object(py::none());
  return py::make_tuple(names, offsets, sizes, types, err, idx.error_offset, member, idx.io_error, idx.after_end,
                        chains, idx.resume);
}

std::vector<ByteView> views_of(const std::vector<py::buffer>& items) {
  std::vector<ByteView> views;
  views.reserve(items.size());
  for (const auto& b : items) views.push_back(view_of(b));
  return views;
}

// probe_batch over Python buffers, the GIL released while it runs: one error ("" when
// probed) per item, `infos` filled.
std::vector<std::string> run_probe_batch(const std::vector<py::buffer>& items, std::vector<ImageInfo>& infos,
                                         int num_threads) {
  const std::vector<ByteView> views = views_of(items);
  py::gil_scoped_release nogil;
  return probe_batch(views, infos, num_threads);
}

// A text label as gpudecode.labels reads it: `\s*[+-]?[0-9]+\s*` (bytes, ASCII whitespace),
// at most 64 bytes, fitting int64. False for anything else (the caller's Python then
// refuses it with its message).
bool parse_text_label(const uint8_t* p, size_t n, int64_t& value) {
  if (n > 64) return false;
  auto space = [](uint8_t c) { return c == ' ' || (c >= '\t' && c <= '\r'); };
  size_t i = 0;
  while (i < n && space(p[i])) ++i;
  bool neg = false;
  if (i < n && (p[i] == '+' || p[i] == '-')) neg = p[i++] == '-';
  const size_t digits = i;
  uint64_t mag = 0;
  for (; i < n && p[i] >= '0' && p[i] <= '9'; ++i) {
    if (mag > (uint64_t(1) << 63) / 10) return false;
    mag = mag * 10 + (p[i] - '0');
    if (mag > (uint64_t(1) << 63)) return false;
  }
  if (i == digits) return false;
  while (i < n && space(p[i])) ++i;
  if (i != n) return false;
  if (!neg && mag > uint64_t(INT64_MAX)) return false;
  value = neg ? int64_t(0 - mag) : int64_t(mag);
  return true;
}

using I32 = py::array_t<int32_t, py::array::c_style>;
using I64 = py::array_t<int64_t, py::array::c_style>;
using U8 = py::array_t<uint8_t, py::array::c_style>;

// decode_batch with its arguments checked, the GIL released while it runs.
std::vector<std::string> run_decode_batch(const std::vector<py::buffer>& items, const std::vector<uint8_t>& kinds,
                                          I32 boxes, I32 scale_denoms, I64 offsets, U8 out, bool fast,
                                          int64_t max_pixels, int num_threads, const py::object& stop) {
  const size_t n = items.size();
  if (boxes.ndim() != 2 || size_t(boxes.shape(0)) != n || boxes.shape(1) != 4)
    throw py::value_error("boxes must be int32 [N, 4]");
  if (size_t(scale_denoms.size()) != n || size_t(offsets.size()) != n)
    throw py::value_error("scale_denoms and offsets need one entry per item");
  const std::vector<ByteView> views = views_of(items);
  const std::string bad = check_jpeg_batch(n, boxes.data(), scale_denoms.data(), offsets.data(), out.size());
  if (!bad.empty()) throw py::value_error(bad);
  // stop: None, or a uint8 array whose first byte another thread sets to end the decode
  // (the images in progress within a row; their errors then read kStopped)
  const uint8_t* flag = nullptr;
  if (!stop.is_none()) {
    // the caller's own array, never a converted copy (a copy would never be set)
    if (!py::isinstance<py::array_t<uint8_t>>(stop) || py::reinterpret_borrow<py::array>(stop).size() < 1)
      throw py::type_error("stop must be a numpy uint8 array of at least one element");
    flag = static_cast<const uint8_t*>(py::reinterpret_borrow<py::array>(stop).data());
  }
  uint8_t* dst = out.mutable_data();
  py::gil_scoped_release nogil;
  return decode_batch(views, kinds.data(), boxes.data(), scale_denoms.data(), offsets.data(), dst, fast, max_pixels,
                      num_threads, flag);
}

// The native warps' common arguments, checked (warp_affine_nearest's and warp_affine_bilinear's): the image
// (or its part) and where it lies, the output's pixel centres, the scale, the output.
struct WarpCall {
  const uint8_t* src;
  int64_t h, w, top, left, ph, pw, sy, sx, sc;
};

WarpCall warp_call(const char* name, const py::array& src, const py::array_t<float, py::array::c_style>& xs,
                   const py::array_t<float, py::array::c_style>& ys, const py::array_t<float, py::array::c_style>& scale,
                   const U8& out, const py::object& part) {
  if (!warp_nearest_exact())  // (its code is built for AVX2 and FMA)
    throw py::value_error(std::string(name) + " needs a CPU with AVX2 and FMA (warp_nearest_exact)");
  if (!py::dtype::of<uint8_t>().is(src.dtype()) || src.ndim() != 3 || src.shape(0) != 3)
    throw py::value_error("src must be a uint8 image [3, h, w]");
  if (xs.ndim() != 1 || ys.ndim() != 1 || (scale.size() != 6 && scale.size() != 9))
    throw py::value_error("xs and ys must be 1-D, scale 6 floats (an affine warp) or 9 (a perspective warp)");
  if (out.ndim() != 3 || out.shape(0) != 3 || out.shape(1) != ys.size() || out.shape(2) != xs.size())
    throw py::value_error("out must be uint8 [3, len(ys), len(xs)]");
  WarpCall c{static_cast<const uint8_t*>(src.data()), 0, 0, 0, 0, src.shape(1), src.shape(2), src.strides(1),
             src.strides(2), src.strides(0)};
  c.h = c.ph, c.w = c.pw;
  if (!part.is_none()) {
    auto p = part.cast<std::tuple<int64_t, int64_t, int64_t, int64_t>>();
    c.top = std::get<0>(p), c.left = std::get<1>(p), c.h = std::get<2>(p), c.w = std::get<3>(p);
  }
  if (c.ph <= 0 || c.pw <= 0 || c.top < 0 || c.left < 0 || c.top + c.ph > c.h || c.left + c.pw > c.w ||
      c.h >= (1 << 24) || c.w >= (1 << 24))
    throw py::value_error("src must hold pixels, a part (top, left, height, width of the image) inside it");
  return c;
}

// A perspective warp's denominator (scale's last 3 floats), or null (an affine warp's 6).
const float* denominator(const py::array_t<float, py::array::c_style>& scale) {
  return scale.size() == 9 ? scale.data() + 6 : nullptr;
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "gpudecode native codecs: image header probe and crop-window JPEG decoding (libjpeg-turbo).";
  m.attr("JPEG_LIB_VERSION") = libjpeg_api_version();

  const char* index_doc =
      "(names, offsets, sizes, types, error or None, error offset, member cut off or None, io error, error after "
      "the end-of-archive block, header-chain offsets, resume offset or -1): every "
      "regular member (type '0') and link ('1', '2'; size 0) before the end of the archive or the first fault.";
  m.def(
      "index_tar",
      [](py::buffer data) {
        ByteView v = view_of(data);
        TarIndex idx;
        {
          py::gil_scoped_release nogil;
          idx = index_tar(v.data, v.size);
        }
        return index_to_tuple(idx);
      },
      py::arg("data"), index_doc);
  m.def(
      "index_tar_fd",
      [](int fd, int64_t size, int64_t start, int64_t max_members, int64_t keep) -> py::object {
        if (size < 0 || start < 0) throw py::value_error("size and start must be >= 0");
        TarIndex idx;
        {
          py::gil_scoped_release nogil;
          idx = index_tar_fd(fd, size, 1 << 16, start, max_members, keep);
        }
        if (keep <= 0) return index_to_tuple(idx);
        py::list held(idx.held.size());
        for (size_t i = 0; i < idx.held.size(); ++i) {
          if (idx.held[i] < 0) {
            held[i] = py::none();
          } else {
            held[i] = py::bytes(idx.held_bytes.data() + idx.held[i], size_t(idx.sizes[i]));
          }
        }
        return py::make_tuple(index_to_tuple(idx), held);
      },
      py::arg("fd"), py::arg("size"), py::arg("start") = 0, py::arg("max_members") = 0, py::arg("keep") = 0,
      "index_tar over a file read with pread (size: the file's size when opened; if it shrinks, io error), "
      "from `start` (0 or a member's chain offset), stopping after max_members (> 0) with a resume offset. "
      "With keep > 0: (that tuple, held): held[i] is the bytes of member i where it has at most `keep` bytes "
      "and the header reads brought them in, else None (a label beside an image needs no read of its own).");

  m.def(
      "group_names",
      [](const py::list& names, const py::object& prev) -> py::object {
        // prev: the key of the sample the last member before these belonged to (or None)
        std::string_view prev_key;
        bool has_prev = false;
        if (!prev.is_none()) {
          Py_ssize_t len = 0;
          const char* p = PyUnicode_Check(prev.ptr()) ? PyUnicode_AsUTF8AndSize(prev.ptr(), &len) : nullptr;
          if (p) {
            prev_key = std::string_view(p, size_t(len));
            has_prev = true;
          } else {
            PyErr_Clear();  // a key with lone surrogates equals no ASCII key: any key is new
          }
        }
        const size_t n = names.size();
        py::array_t<int64_t> groups(static_cast<py::ssize_t>(n));
        int64_t* g = groups.mutable_data();
        py::list exts(n), keys;
        std::vector<std::pair<std::string, py::object>> seen_exts;  // a shard has a few extensions
        std::string low;
        int64_t rel = 0;
        for (size_t i = 0; i < n; ++i) {
          PyObject* o = PyList_GET_ITEM(names.ptr(), Py_ssize_t(i));
          if (!PyUnicode_Check(o)) throw py::type_error("member names must be str");
          if (!PyUnicode_IS_ASCII(o)) return py::none();
          const std::string_view name(reinterpret_cast<const char*>(PyUnicode_1BYTE_DATA(o)),
                                      size_t(PyUnicode_GET_LENGTH(o)));
          const NameSplit s = split_name(name);
          if (s.kind == NameKind::kUnsure) return py::none();
          if (s.kind == NameKind::kNone) {
            g[i] = -1;
            exts[i] = py::none();
            continue;
          }
          if (!has_prev || s.key != prev_key) {
            keys.append(py::str(s.key.data(), s.key.size()));
            prev_key = s.key;  // a view into names[i], alive while the list is
            has_prev = true;
            ++rel;
          }
          g[i] = rel;
          low.assign(s.ext);
          for (char& c : low) c = char(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
          auto hit = std::find_if(seen_exts.begin(), seen_exts.end(), [&](const auto& e) { return e.first == low; });
          if (hit == seen_exts.end()) {
            seen_exts.emplace_back(low, py::str(low));
            hit = seen_exts.end() - 1;
          }
          exts[i] = hit->second;
        }
        return py::make_tuple(groups, exts, keys);
      },
      py::arg("names"), py::arg("prev_key"),
      "WebDataset's grouping of member names in one call: (groups, exts, keys), or None when a name is not "
      "printable ASCII (the caller groups those in Python). groups[i] is -1 for a member that is no sample's field "
      "(metadata, no extension), 0 for one continuing the sample of `prev_key`, j > 0 for one of the j-th sample "
      "begun here, whose key is keys[j - 1]; exts[i] is its extension, lower-cased (None for -1).");

  py::class_<TarParser>(m, "TarParser",
                        "The tar state machine, one header at a time (for streams; index_tar drives the same one).")
      .def(py::init<>())
      .def_property_readonly("position", &TarParser::position)
      .def(
          "header",
          [](TarParser& p, py::bytes block) {
            std::string_view b = block;
            if (b.size() != size_t(kTarBlock)) throw py::value_error("a tar header is 512 bytes");
            const TarStep s = p.header(reinterpret_cast<const uint8_t*>(b.data()));
            return py::make_tuple(int(s.kind), py::bytes(&s.type, 1), name_str(s.name), s.header, s.data, s.size,
                                  s.next, s.error.empty() ? py::object(py::none()) : name_str(s.error));
          },
          py::arg("block"), "(kind, type, name, header offset, data offset, size, next header offset, error)")
      .def(
          "extended",
          [](TarParser& p, py::bytes payload) {
            std::string_view b = payload;
            const std::string err = p.extended(reinterpret_cast<const uint8_t*>(b.data()), int64_t(b.size()));
            return err.empty() ? py::object(py::none()) : name_str(err);
          },
          py::arg("payload"), "Takes an extended header's payload: None, or the error.")
      .def(
          "refused_member",
          [](const TarParser& p, py::bytes block) {
            std::string_view b = block;
            return name_str(p.refused_member(b.size() == size_t(kTarBlock) ? reinterpret_cast<const uint8_t*>(b.data())
                                                                           : nullptr));
          },
          py::arg("block"),
          "After extended() refused a pax size record: the member's name (pax path, or the next header's "
          "if its checksum holds; block: the 512 bytes at position(), or b\"\"), else \"\".");
  m.def(
      "read_ranges",
      [](int fd, py::array_t<int64_t, py::array::c_style> offsets, py::array_t<int64_t, py::array::c_style> sizes,
         const py::object& pool, const py::object& pooled) {
        // The bytes objects (or pooled blocks) are made with the GIL held, then filled with
        // it released (nothing else can see them yet): one GIL hand-off for a whole chunk of
        // members, where a pread per member from Python would convoy on the GIL between threads.
        const size_t n = size_t(offsets.size());
        if (size_t(sizes.size()) != n) throw py::value_error("offsets and sizes differ in length");
        const int64_t* off = offsets.data();
        const int64_t* sz = sizes.data();
        std::shared_ptr<BlockPool> blocks = pool.is_none() ? nullptr : pool_of(pool);
        py::array_t<uint8_t, py::array::c_style | py::array::forcecast> flags;
        if (blocks) {
          flags = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>::ensure(pooled);
          if (!flags || size_t(flags.size()) != n) throw py::value_error("pooled: one flag a member");
        }
        std::vector<py::object> objs;
        std::vector<char*> dst(n);
        std::vector<bool> is_block(n, false);
        objs.reserve(n);
        for (size_t i = 0; i < n; ++i) {
          if (sz[i] < 0 || off[i] < 0) throw py::value_error("negative offset or size");
          if (blocks && flags.data()[i]) {
            uint8_t* p = nullptr;
            objs.push_back(new_block(blocks, size_t(sz[i]), &p));
            dst[i] = reinterpret_cast<char*>(p);
            is_block[i] = true;
            continue;
          }
          PyObject* b = PyBytes_FromStringAndSize(nullptr, Py_ssize_t(sz[i]));
          if (!b) throw py::error_already_set();
          objs.push_back(py::reinterpret_steal<py::object>(b));
          dst[i] = PyBytes_AS_STRING(b);
        }
        size_t done = 0;
        int64_t got_last = 0;
        std::string err;
        {
          py::gil_scoped_release nogil;
          for (; done < n; ++done) {
            int64_t got = 0;
            while (got < sz[done]) {
              const ssize_t r = ::pread(fd, dst[done] + got, size_t(sz[done] - got), off_t(off[done] + got));
              if (r < 0) {
                if (errno == EINTR) continue;
                err = std::string("read failed: ") + std::strerror(errno);
                break;
              }
              if (r == 0) break;
              got += r;
            }
            if (got < sz[done]) {
              got_last = got;
              break;
            }
          }
        }
        py::list out;
        for (size_t i = 0; i < done; ++i) {
          if (!is_block[i]) {
            out.append(objs[i]);
            continue;
          }
          PyObject* v = PyMemoryView_FromObject(objs[i].ptr());  // (read-only: the block's buffer is)
          if (!v) throw py::error_already_set();
          out.append(py::reinterpret_steal<py::object>(v));
        }
        // (members read in full, bytes read of the first short one, error of a failed read or None)
        return py::make_tuple(out, got_last, err.empty() ? py::object(py::none()) : py::object(py::str(err)));
      },
      py::arg("fd"), py::arg("offsets"), py::arg("sizes"), py::arg("pool") = py::none(),
      py::arg("pooled") = py::none(),
      "pread each (offset, size) range into a new bytes object, GIL released: (list of the ranges read "
      "in full, bytes read of the first short one, error or None). With a BlockPool `pool`, the ranges "
      "whose `pooled` flag is set are read into its blocks instead, each a read-only memoryview.");
  register_blocks(m);
  m.attr("TAR_TRUNCATED_HEADER") = kTarTruncatedHeader;
  m.attr("TAR_NO_END") = kTarNoEnd;
  m.attr("TAR_EMPTY") = kTarEmpty;
  m.attr("TAR_EXTENDED_CUT") = kTarExtendedCut;
  m.attr("TAR_TRAILING_DATA") = kTarTrailingData;
  m.attr("TAR_MAX_SIZE") = kTarMaxSize;
  m.def(
      "tar_truncated_member",
      [](py::bytes name, int64_t need, int64_t left) { return name_str(tar_truncated_member(name, need, left)); },
      py::arg("name"), py::arg("need"), py::arg("left"),
      "The message of a member cut off (name: its raw bytes, as in the archive).");

  m.def(
      "probe",
      [](py::buffer data) {
        ByteView v = view_of(data);
        ImageInfo info;
        std::string err;
        {
          py::gil_scoped_release nogil;
          err = probe_image(v.data, v.size, info);
        }
        if (!err.empty()) throw py::value_error(err);
        return info_to_dict(info);
      },
      py::arg("data"),
      "Header facts of a JPEG or PNG as a dict; raises ValueError on anything it cannot read.");

  m.def(
      "shuffle_order",
      [](int64_t n, int64_t size, int64_t initial, py::array_t<uint32_t, py::array::c_style> state, int index) {
        if (state.size() != 624) throw py::value_error("an MT19937 state is 624 words");
        if (n < 0) throw py::value_error("n must be >= 0");
        PyMersenne rng(state.data(), index);
        I64 out(n);
        std::string err;
        {
          py::gil_scoped_release nogil;
          err = shuffle_order(n, size, initial, rng, out.mutable_data());
        }
        if (!err.empty()) throw py::value_error(err);
        return out;
      },
      py::arg("n"), py::arg("size"), py::arg("initial"), py::arg("state"), py::arg("index"),
      "The order 0..n-1 come out of gpudecode.io.planner._shuffled (a shuffle buffer of `size`, giving out once "
      "it holds `initial`) drawing from a random.Random whose getstate() is (3, (*state, index), None): the same "
      "order, computed at once with the GIL released (csrc/shuffle.h).");

  m.attr("warp_nearest_exact") = py::bool_(warp_nearest_exact());
  m.def(
      "warp_affine_nearest",
      [](const py::array& src, py::array_t<float, py::array::c_style> xs, py::array_t<float, py::array::c_style> ys,
         py::array_t<float, py::array::c_style> scale, U8 fill, U8 out, const py::object& part) {
        if (fill.size() != 3) throw py::value_error("fill must be 3 levels");
        const WarpCall c = warp_call("warp_affine_nearest", src, xs, ys, scale, out, part);
        uint8_t* dst = out.mutable_data();
        int64_t missing;
        {
          py::gil_scoped_release nogil;
          missing = warp_affine_nearest(c.src, c.h, c.w, c.top, c.left, c.ph, c.pw, c.sy, c.sx, c.sc, xs.data(),
                                        xs.size(), ys.data(), ys.size(), scale.data(), denominator(scale), fill.data(),
                                        dst);
        }
        return missing;
      },
      py::arg("src"), py::arg("xs"), py::arg("ys"), py::arg("scale"), py::arg("fill"), py::arg("out"),
      py::arg("part") = py::none(),
      "An affine warp's canvas (or a window of it) sampled by nearest neighbour into `out` as torch's CPU "
      "grid_sample picks its pixels from the grid torchvision's warps make (csrc/warp.h): `src` uint8 [3, h, w] "
      "at any strides (with `part` = (top, left, height, width): the part of an image of that size at (top, "
      "left)), `xs`/`ys` the output's pixel centres, `scale` the inverse matrix over the half size ([3, 2]), "
      "`fill` where the grid leaves the image; `scale` of 9 floats: a perspective warp (its numerator's, then "
      "the denominator's [c6, c7, 1]; xs and ys its centres from 0.5). Returns how many pixels picked outside the "
      "part (written as the fill). Exact only where warp_nearest_exact is True.");

  m.def(
      "warp_affine_bilinear",
      [](const py::array& src, py::array_t<float, py::array::c_style> xs, py::array_t<float, py::array::c_style> ys,
         py::array_t<float, py::array::c_style> scale, const py::object& fill, U8 out, const py::object& part) {
        float levels[3];
        const bool filled = !fill.is_none();
        if (filled) {
          auto f = fill.cast<py::array_t<float, py::array::c_style | py::array::forcecast>>();
          if (f.size() != 3) throw py::value_error("fill must be 3 levels, or None");
          for (int k = 0; k < 3; ++k) levels[k] = f.data()[k];
        }
        const WarpCall c = warp_call("warp_affine_bilinear", src, xs, ys, scale, out, part);
        uint8_t* dst = out.mutable_data();
        int64_t missing;
        {
          py::gil_scoped_release nogil;
          missing = warp_affine_bilinear(c.src, c.h, c.w, c.top, c.left, c.ph, c.pw, c.sy, c.sx, c.sc, xs.data(),
                                         xs.size(), ys.data(), ys.size(), scale.data(), denominator(scale),
                                         filled ? levels : nullptr, dst);
        }
        return missing;
      },
      py::arg("src"), py::arg("xs"), py::arg("ys"), py::arg("scale"), py::arg("fill"), py::arg("out"),
      py::arg("part") = py::none(),
      "warp_affine_nearest's warp sampled bilinearly as torch's CPU grid_sample interpolates, then made uint8 as "
      "torchvision's warps make it (`fill`: 3 levels blended by the coverage, or None: zeros outside, no blend; "
      "csrc/warp.h). Returns how many pixels had a tap outside the part. Exact only where warp_nearest_exact is "
      "True and the probe agrees (transforms.warped).");

  m.def(
      "png_walk",
      [](py::buffer data, long long max_pixels) {
        ByteView v = view_of(data);
        PngChunks c;
        std::string err;
        {
          py::gil_scoped_release nogil;
          err = png_walk(v.data, v.size, max_pixels, c);
        }
        if (!err.empty()) throw py::value_error(err);
        PyObject* raw = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(c.stream_size));
        if (raw == nullptr) throw py::error_already_set();
        py::bytes stream = py::reinterpret_steal<py::bytes>(raw);
        char* dst = PyBytes_AS_STRING(raw);
        {
          py::gil_scoped_release nogil;  // (the new bytes object is not seen by anyone yet)
          size_t at = 0;
          for (const auto& [off, len] : c.idat) {
            std::memcpy(dst + at, v.data + off, len);
            at += len;
          }
        }
        py::tuple sizes(c.idat.size());
        for (size_t i = 0; i < c.idat.size(); ++i) sizes[i] = py::int_(c.idat[i].second);
        py::object fault = c.fault.empty() ? py::object(py::none()) : py::object(py::str(c.fault));
        return py::make_tuple(c.width, c.height, c.depth, c.color, c.interlace,
                              py::bytes(reinterpret_cast<const char*>(c.palette), sizeof(c.palette)), stream, sizes,
                              fault);
      },
      py::arg("data"), py::arg("max_pixels") = 0,
      "A PNG's chunks walked and checked with the GIL released (csrc/png_walk.h): (width, height, bit depth, "
      "colour type, interlace, the palette as 768 bytes, the IDAT payloads joined, each payload's size, the fault "
      "that ended the image data or None); raises ValueError saying what libpng would refuse.");

  m.def(
      "probe_batch",
      [](const std::vector<py::buffer>& items, int num_threads) {
        std::vector<ImageInfo> infos;
        const std::vector<std::string> errs = run_probe_batch(items, infos, num_threads);
        py::list out;
        for (size_t i = 0; i < errs.size(); ++i) {
          if (errs[i].empty()) out.append(info_to_dict(infos[i]));
          else out.append(py::str(errs[i]));
        }
        return out;
      },
      py::arg("items"), py::arg("num_threads") = 1,
      "Probe many images; each entry is a dict, or the error message as a str.");

  m.def(
      "probe_sizes",
      [](const std::vector<py::buffer>& items, int num_threads) {
        std::vector<ImageInfo> infos;
        const std::vector<std::string> errs = run_probe_batch(items, infos, num_threads);
        py::str jpeg("jpeg"), png("png"), npy("npy");
        py::list out(errs.size());
        for (size_t i = 0; i < errs.size(); ++i) {
          if (!errs[i].empty()) {
            out[i] = py::str(errs[i]);
            continue;
          }
          const std::string& f = infos[i].format;
          py::str fmt = f == "jpeg" ? jpeg : f == "png" ? png : f == "npy" ? npy : py::str(f);
          out[i] = py::make_tuple(fmt, infos[i].height, infos[i].width);
        }
        return out;
      },
      py::arg("items"), py::arg("num_threads") = 1,
      "probe_batch's format and size only: each entry is (format, height, width), or the error message as a "
      "str (a tuple costs a fraction of the full dict, per image of every batch).");

  // One sample's stream of random draws (gpudecode.transforms._SampleRandom): SplitMix64
  // keyed by (seed, epoch) and the sample's index. transforms.py keeps the same stream in
  // Python as the reference (tests/test_transforms.py compares them draw by draw).
  py::class_<SplitMix>(m, "SplitMix", "A sample's SplitMix64 stream: random() and getrandbits(k) as random.Random's.")
      .def(py::init([](const py::int_& key, const py::int_& index) {
             // (index & 2^64-1) * 0xD1B54A32D192ED03 mod 2^64, xor key, mixed: any Python int
             const uint64_t k = PyLong_AsUnsignedLongLongMask(key.ptr());
             const uint64_t i = PyLong_AsUnsignedLongLongMask(index.ptr());
             if (PyErr_Occurred()) throw py::error_already_set();
             return SplitMix::keyed(k, i);
           }),
           py::arg("key"), py::arg("index"))
      .def_readonly("state", &SplitMix::state)
      .def("random", &SplitMix::random)
      .def(
          "getrandbits",
          [](SplitMix& g, int64_t k) -> py::object {
            if (k < 0) throw py::value_error("number of bits must be non-negative");
            if (k == 0) return py::int_(0);
            if (k <= 64) {
              const uint64_t v = g.next();
              return py::reinterpret_steal<py::object>(
                  PyLong_FromUnsignedLongLong(k == 64 ? v : v & ((uint64_t(1) << k) - 1)));
            }
            // more than one word: little-endian words, the last one cut to k bits
            const size_t words = size_t((k + 63) / 64);
            std::vector<uint8_t> bytes(words * 8);
            for (size_t w = 0; w < words; ++w) {
              uint64_t v = g.next();
              for (int b = 0; b < 8; ++b) bytes[w * 8 + size_t(b)] = uint8_t(v >> (8 * b));
            }
            const int64_t extra = int64_t(words) * 64 - k;
            for (int64_t b = 0; b < extra; ++b) {  // clear the top `extra` bits
              const int64_t bit = k + b;
              bytes[size_t(bit / 8)] &= uint8_t(~(1u << (bit % 8)));
            }
            return py::reinterpret_steal<py::object>(_PyLong_FromByteArray(bytes.data(), bytes.size(), 1, 0));
          },
          py::arg("k"));

  m.def(
      "will_need",
      [](const py::buffer& mapped, int64_t start, int64_t length) -> int {
        py::buffer_info info = mapped.request();
        const int64_t size = int64_t(info.size) * int64_t(info.itemsize);
        if (start < 0 || length < 0 || start > size || length > size - start)
            throw py::value_error("will_need: the range is outside the buffer");
        const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
        const uintptr_t lo = (uintptr_t(info.ptr) + uintptr_t(start)) / page * page;
        const uintptr_t hi = uintptr_t(info.ptr) + uintptr_t(start + length);
        int err = 0;
        {
          py::gil_scoped_release nogil;
          if (hi > lo && madvise(reinterpret_cast<void*>(lo), size_t(hi - lo), MADV_WILLNEED) != 0) err = errno;
        }
        return err;
      },
      py::arg("mapped"), py::arg("start"), py::arg("length"),
      "madvise(MADV_WILLNEED) over bytes start..start+length of a mapped buffer (its pages), the GIL "
      "released: 0, or the errno (EFAULT, ENOMEM: pages past the end of a file that shrank).");

  m.def(
      "huge_pages",
      [](const py::buffer& memory) -> int {
        py::buffer_info info = memory.request(true);
        const uintptr_t huge = uintptr_t(2) << 20;
        const uintptr_t start = uintptr_t(info.ptr);
        const uintptr_t lo = (start + huge - 1) / huge * huge;
        const uintptr_t hi = (start + uintptr_t(info.size) * uintptr_t(info.itemsize)) / huge * huge;
        if (hi <= lo) return 0;
#ifdef MADV_HUGEPAGE
        return madvise(reinterpret_cast<void*>(lo), size_t(hi - lo), MADV_HUGEPAGE) != 0 ? errno : 0;
#else
        return ENOSYS;
#endif
      },
      py::arg("memory"),
      "madvise(MADV_HUGEPAGE) over the whole 2 MiB pages inside a writable buffer (anonymous memory: "
      "a large output or a ring buffer the kernels write each batch): where transparent huge pages are "
      "on for madvised memory, the pages not yet touched come as 2 MiB ones (a fault per 2 MiB, fewer "
      "TLB misses). 0 (also when the buffer holds no whole huge page), or the errno (EINVAL where the "
      "kernel has no transparent huge pages; ENOSYS where the platform has no such advice).");

  m.def(
      "draw_batch",
      [](const py::tuple& spec, const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& sizes,
         const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& indices,
         const py::int_& key) -> py::object {
        DrawPlan plan;
        for (const py::handle& step : spec[0].cast<py::list>()) {
          const auto t = step.cast<py::tuple>();
          GeomStep g;
          g.kind = t[0].cast<int>();
          for (size_t k = 1; k < t.size() && k <= 10; ++k) g.a[k - 1] = t[k].cast<double>();
          plan.geometry.push_back(g);
        }
        plan.flip = spec[1].cast<double>();
        plan.vflip = spec[2].cast<double>();
        if (!spec[3].is_none()) {
          plan.jitter = true;
          const auto ranges = spec[3].cast<py::tuple>();
          for (size_t c = 0; c < 4; ++c) {
            if (ranges[c].is_none()) continue;
            const auto r = ranges[c].cast<py::tuple>();
            plan.jitter_on[c] = true;
            plan.jitter_lo[c] = r[0].cast<double>();
            plan.jitter_hi[c] = r[1].cast<double>();
          }
        }
        const uint64_t k = PyLong_AsUnsignedLongLongMask(key.ptr());
        if (PyErr_Occurred()) throw py::error_already_set();
        const py::ssize_t n = indices.size();
        if (sizes.ndim() != 2 || sizes.shape(0) != n || sizes.shape(1) != 2)
          throw py::value_error("sizes must be [N, 2] for N indices");
        I64 ints({n, py::ssize_t(kDrawCols)});
        py::array_t<double> factors({n, py::ssize_t(4)});
        std::string err;
        {
          py::gil_scoped_release nogil;
          err = draw_batch(plan, sizes.data(), indices.data(), size_t(n), k, ints.mutable_data(),
                           factors.mutable_data());
        }
        if (!err.empty()) return py::none();
        return py::make_tuple(ints, factors);
      },
      py::arg("spec"), py::arg("sizes"), py::arg("indices"), py::arg("key"),
      "A batch's draws (gpudecode._draws): spec (geometry steps, flip p, vflip p, jitter ranges or None), "
      "sizes [N, 2], indices [N], the (seed, epoch) key -> (ints [N, 12], factors [N, 4]), or None where a "
      "sample cannot be drawn (the Python path says why).");

  m.def(
      "iou_crops",
      [](const py::tuple& spec, const py::array_t<uint64_t, py::array::c_style | py::array::forcecast>& keys,
         const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& sizes,
         const py::array_t<float, py::array::c_style | py::array::forcecast>& boxes,
         const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& offsets) -> py::tuple {
        IouCropSpec s;
        s.min_scale = float(spec[0].cast<double>());
        s.scale_span = float(spec[1].cast<double>());
        s.min_aspect = spec[2].cast<double>();
        s.max_aspect = spec[3].cast<double>();
        s.options = spec[4].cast<std::vector<double>>();
        s.trials = spec[5].cast<int64_t>();
        s.max_rounds = spec[6].cast<int64_t>();
        s.work = spec[7].cast<int64_t>();
        if (s.options.empty() || s.trials < 1 || s.max_rounds < 1 || s.work < 1)
          throw py::value_error("iou_crops needs options, and trials, rounds and work of at least 1");
        const py::ssize_t n = keys.size();
        if (sizes.ndim() != 2 || sizes.shape(0) != n || sizes.shape(1) != 2)
          throw py::value_error("sizes must be [N, 2] for N keys");
        if (offsets.ndim() != 1 || offsets.shape(0) != n + 1) throw py::value_error("offsets must be [N + 1] for N keys");
        if (boxes.ndim() != 2 || boxes.shape(1) != 4) throw py::value_error("boxes must be [K, 4]");
        const int64_t* off = offsets.data();
        for (py::ssize_t i = 0; i < n; ++i)
          if (off[i] < 0 || off[i + 1] < off[i] || off[i + 1] > boxes.shape(0))
            throw py::value_error("offsets must rise from 0 to at most the boxes' count");
        if (n > 0 && off[0] != 0) throw py::value_error("offsets must rise from 0 to at most the boxes' count");
        I64 crops({n, py::ssize_t(4)});
        py::array_t<int8_t> status(n);
        py::array_t<bool> inside(boxes.shape(0));
        std::fill_n(inside.mutable_data(), inside.size(), false);
        {
          py::gil_scoped_release nogil;
          iou_crops(s, keys.data(), sizes.data(), boxes.data(), off, size_t(n), crops.mutable_data(),
                    status.mutable_data(), reinterpret_cast<uint8_t*>(inside.mutable_data()));
        }
        return py::make_tuple(crops, status, inside);
      },
      py::arg("spec"), py::arg("keys"), py::arg("sizes"), py::arg("boxes"), py::arg("offsets"),
      "RandomIoUCrop's draws for a batch (gpudecode.transforms.iou_crop): spec (min_scale, the scale's span, "
      "both float32 values; min and max aspect ratio, the options, trials, the rounds at most, the work bound), "
      "keys [N] (each image's stream), sizes [N, 2], boxes XYXY [K, 4] (image i's rows offsets[i] .. "
      "offsets[i + 1]) -> (crops [N, 4] top, left, height, width; status [N]: 0 a crop, 1 the whole image, 2 no "
      "crop (the Python reference says why); inside [K] bool, the boxes whose centres a crop holds).");

  m.def(
      "probe_fields",
      [](const py::list& fields, const std::vector<std::string>& image_exts, const std::vector<std::string>& label_exts,
         int num_threads) {
        const size_t n = fields.size();
        std::vector<py::str> iexts(image_exts.begin(), image_exts.end()), lexts(label_exts.begin(), label_exts.end());
        py::list images(n), fmts(n), errors(n);
        I64 heights(static_cast<py::ssize_t>(n)), widths(static_cast<py::ssize_t>(n)),
            labels(static_cast<py::ssize_t>(n));
        U8 label_ok(static_cast<py::ssize_t>(n));
        int64_t *hs = heights.mutable_data(), *ws = widths.mutable_data(), *ls = labels.mutable_data();
        uint8_t* ok = label_ok.mutable_data();
        std::vector<py::buffer> items;
        std::vector<size_t> which;
        items.reserve(n);
        which.reserve(n);
        for (size_t i = 0; i < n; ++i) {
          PyObject* d = PyList_GET_ITEM(fields.ptr(), Py_ssize_t(i));
          if (!PyDict_Check(d)) throw py::type_error("fields must be a list of dicts");
          hs[i] = ws[i] = ls[i] = 0;
          ok[i] = 0;
          errors[i] = py::none();
          fmts[i] = py::none();
          PyObject* img = nullptr;
          for (const py::str& e : iexts)
            if ((img = PyDict_GetItemWithError(d, e.ptr())) != nullptr) break;
          if (PyErr_Occurred()) throw py::error_already_set();
          if (img) {
            images[i] = py::reinterpret_borrow<py::object>(img);
            items.push_back(py::reinterpret_borrow<py::buffer>(img));
            which.push_back(i);
          } else {
            images[i] = py::none();
          }
          for (size_t j = 0; j < lexts.size(); ++j) {
            PyObject* v = PyDict_GetItemWithError(d, lexts[j].ptr());
            if (PyErr_Occurred()) throw py::error_already_set();
            if (!v) continue;
            if (label_exts[j] != "json") {  // (a .json label, and anything refused, is for parse_label)
              const ByteView b = view_of(py::reinterpret_borrow<py::buffer>(v));
              ok[i] = parse_text_label(b.data, b.size, ls[i]) ? 1 : 0;
            }
            break;
          }
        }
        std::vector<ImageInfo> infos;
        const std::vector<std::string> errs = run_probe_batch(items, infos, num_threads);
        py::str jpeg("jpeg"), png("png"), npy("npy");
        for (size_t k = 0; k < which.size(); ++k) {
          const size_t i = which[k];
          if (!errs[k].empty()) {
            errors[i] = py::str(errs[k]);
            continue;
          }
          const std::string& f = infos[k].format;
          if (f == "jpeg") {  // the whole image must be there: GPU decoders do not promise to say when it is not
            const ByteView b = view_of(items[k]);
            if (!jpeg_has_end(b.data, b.size)) {
              errors[i] = py::str(JPEG_CUT_MESSAGE);
              continue;
            }
            if (infos[k].progressive) {
              const int scans = jpeg_scans(b.data, b.size, kMaxJpegScans + 1);
              if (scans > kMaxJpegScans) {
                errors[i] = py::str("JPEG refused: a progressive JPEG of more than " + std::to_string(kMaxJpegScans) +
                                    " scans (its decoding time grows with them: libjpeg-turbo's documented denial "
                                    "of service; encoders write about 10)");
                continue;
              }
            }
          }
          fmts[i] = f == "jpeg" ? jpeg : f == "png" ? png : f == "npy" ? npy : py::str(f);
          hs[i] = infos[k].height;
          ws[i] = infos[k].width;
        }
        return py::make_tuple(images, fmts, heights, widths, errors, labels, label_ok);
      },
      py::arg("fields"), py::arg("image_exts"), py::arg("label_exts"), py::arg("num_threads") = 1,
      "A read batch's samples (their fields dicts) probed and labelled in one call: (images, formats, heights, "
      "widths, errors, labels, label_ok). images[i] is the first of image_exts present (None: none); formats[i], "
      "heights[i], widths[i] its probe, or errors[i] why not; labels[i] the first of label_exts present, parsed "
      "where label_ok[i] (an ASCII integer of at most 64 bytes in int64, surrounding whitespace allowed), else "
      "for the caller to parse and judge (a .json label, none, or one refused).");

  m.def(
      "tensor_layouts",
      [](const std::vector<py::buffer>& items) {
        const size_t n = items.size();
        I64 addresses(n), heights(n), widths(n), offsets(n);
        int64_t *a = addresses.mutable_data(), *h = heights.mutable_data(), *w = widths.mutable_data(),
                *o = offsets.mutable_data();
        py::list errors(n);
        for (size_t i = 0; i < n; ++i) {
          ByteView v = view_of(items[i]);
          ImageInfo info;
          std::string err = probe_image(v.data, v.size, info);
          if (err.empty() && info.format != "npy") err = "not a .npy array (no magic)";
          a[i] = int64_t(reinterpret_cast<uintptr_t>(v.data));
          h[i] = err.empty() ? info.height : 0;
          w[i] = err.empty() ? info.width : 0;
          o[i] = err.empty() ? info.data_offset : 0;
          errors[i] = py::str(err);
        }
        return py::make_tuple(addresses, heights, widths, offsets, errors);
      },
      py::arg("items"),
      "(addresses, heights, widths, pixel offsets, errors) of tensor samples (.npy uint8 [H, W, 3], C order, "
      "as numpy writes them): each item's buffer address, the pixels at address + offset; errors[i] is \"\" or "
      "what the native parser refuses (numpy's parser may still read it). The caller keeps the items alive.");

  m.def(
      "decode_jpeg_crop",
      [](py::buffer data, std::tuple<int, int, int, int> box, bool fast, int scale_denom, int64_t max_pixels) {
        ByteView v = view_of(data);
        Box b{std::get<0>(box), std::get<1>(box), std::get<2>(box), std::get<3>(box)};
        if (b.height <= 0 || b.width <= 0) throw py::value_error("crop box must have a positive size");
        if (scale_denom != 1 && scale_denom != 2 && scale_denom != 4 && scale_denom != 8)
          throw py::value_error("scale_denom must be 1, 2, 4 or 8");
        py::array_t<uint8_t> out({b.height, b.width, 3});
        uint8_t* dst = out.mutable_data();
        DecodeOptions opt{fast, scale_denom, max_pixels};
        std::string err;
        {
          py::gil_scoped_release nogil;
          err = decode_jpeg_crop(v.data, v.size, b, opt, dst);
        }
        if (!err.empty()) throw py::value_error(err);
        return out;
      },
      py::arg("data"), py::arg("box"), py::arg("fast") = false, py::arg("scale_denom") = 1,
      py::arg("max_pixels") = 0,
      "Decode rows/columns box=(top, left, height, width) of a JPEG to an RGB uint8 array [h, w, 3].");

  m.def(
      "decode_jpeg_batch",
      [](const std::vector<py::buffer>& items, I32 boxes, I32 scale_denoms, I64 offsets, U8 out, bool fast,
         int64_t max_pixels, int num_threads, const py::object& stop) {
        return run_decode_batch(items, std::vector<uint8_t>(items.size(), kJpeg), boxes, scale_denoms, offsets, out,
                                fast, max_pixels, num_threads, stop);
      },
      py::arg("items"), py::arg("boxes"), py::arg("scale_denoms"), py::arg("offsets"), py::arg("out"),
      py::arg("fast") = false, py::arg("max_pixels") = 0, py::arg("num_threads") = 0, py::arg("stop") = py::none(),
      "Decode item i's box into out[offsets[i]:] (RGB HWC) on native threads; returns one error "
      "message per item (\"\" when it decoded).");

  m.attr("has_png") = has_png();
#ifdef GPUDECODE_HAVE_PNG
  {
    const LibpngVersions v = libpng_versions();
    py::dict d;
    d["built"] = v.built;
    d["running"] = v.running;
    d["zlib"] = v.zlib;
    d["linked_in"] = v.linked_in;
    m.attr("libpng") = d;
  }
#else
  m.attr("libpng") = py::none();
#endif
#if defined(GPUDECODE_HAVE_LIBDEFLATE)
  m.attr("png_inflater") = "libdeflate";  // (what inflates a PNG the direct path decodes: png_decode.cpp)
#elif defined(GPUDECODE_HAVE_ZLIB) && defined(GPUDECODE_HAVE_PNG)
  m.attr("png_inflater") = "zlib";
#else
  m.attr("png_inflater") = py::none();
#endif
  m.def(
      "decode_batch",
      [](const std::vector<py::buffer>& items, U8 kinds, I32 boxes, I32 scale_denoms, I64 offsets, U8 out, bool fast,
         int64_t max_pixels, int num_threads, const py::object& stop) {
        if (size_t(kinds.size()) != items.size()) throw py::value_error("kinds need one entry per item");
        return run_decode_batch(items, std::vector<uint8_t>(kinds.data(), kinds.data() + kinds.size()), boxes,
                                scale_denoms, offsets, out, fast, max_pixels, num_threads, stop);
      },
      py::arg("items"), py::arg("kinds"), py::arg("boxes"), py::arg("scale_denoms"), py::arg("offsets"),
      py::arg("out"), py::arg("fast") = false, py::arg("max_pixels") = 0, py::arg("num_threads") = 0,
      py::arg("stop") = py::none(),
      "decode_jpeg_batch over JPEGs (kinds[i] == 0) and PNGs (1; needs has_png) in one pool of "
      "native threads; returns one error message per item (\"\" when it decoded). stop: a uint8 "
      "array another thread may set nonzero to end the decode within a row (errors then: stopped).");
  m.attr("STOPPED") = kStopped;
#ifdef GPUDECODE_HAVE_PNG
  m.def(
      "decode_png",
      [](py::buffer data, std::tuple<int, int, int, int> box, int64_t max_pixels, bool direct) {
        ByteView v = view_of(data);
        const auto [top, left, height, width] = box;
        const Box b{top, left, height, width};
        std::vector<uint8_t> out(height > 0 && width > 0 ? size_t(height) * size_t(width) * 3 : 0);
        std::string err;
        bool by_direct = false;
        {
          py::gil_scoped_release nogil;
          err = decode_png_crop(v.data, v.size, b, max_pixels, out.data(), nullptr, direct, &by_direct);
        }
        return py::make_tuple(err.empty() ? py::object(py::none()) : py::object(py::str(err)),
                              py::bytes(reinterpret_cast<const char*>(out.data()), out.size()),
                              by_direct ? "direct" : "libpng");
      },
      py::arg("data"), py::arg("box"), py::arg("max_pixels") = 0, py::arg("direct") = true,
      "One PNG's box (top, left, height, width) as the CPU decoder decodes it: (error or None, RGB HWC bytes, "
      "'direct' or 'libpng': which path decided). direct=False: through libpng always (csrc/png_decode.h), the "
      "reference of the direct path.");
  m.def(
      "png_samples",
      [](py::buffer data, int64_t max_pixels, py::buffer out) {
        ByteView v = view_of(data);
        py::buffer_info o = out.request(true);
        bool contiguous = o.ndim >= 1 && o.strides.back() == o.itemsize;
        for (py::ssize_t k = o.ndim - 1; contiguous && k > 0; --k)
          contiguous = o.strides[size_t(k - 1)] == o.strides[size_t(k)] * o.shape[size_t(k)];
        if (!o.readonly && contiguous) {
          bool done = false;
          {
            py::gil_scoped_release nogil;
            done = decode_png_samples(v.data, v.size, max_pixels, static_cast<uint8_t*>(o.ptr),
                                      size_t(o.size) * size_t(o.itemsize));
          }
          return done;
        }
        throw py::type_error("png_samples writes into a writable C-contiguous array");
      },
      py::arg("data"), py::arg("max_pixels"), py::arg("out"),
      "A grey or palette PNG's samples as Pillow's np.array gives them, written into `out` (contiguous, "
      "height x width: uint8, bool for 1-bit grey, int32 for 16 bits) with the GIL released: whether it decided "
      "(False: an image the direct path is not sure of, or of another kind; read it another way).");
#endif
}
