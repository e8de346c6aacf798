// gpudecode._native: CPU-side codec work. Every entry point releases the GIL while it
// touches image bytes, so Python reader/decoder threads run in parallel.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "jpeg_decode.h"
#include "probe.h"
#include "tar_index.h"

namespace py = pybind11;
using namespace gpudecode;

namespace {

struct View {
  const uint8_t* data;
  size_t size;
};

// Buffers are read while the GIL is released: the caller's list keeps them alive.
View view_of(const py::buffer& b) {
  py::buffer_info info = b.request();
  if (info.itemsize != 1) throw py::type_error("expected a bytes-like object of bytes");
  return View{static_cast<const uint8_t*>(info.ptr), size_t(info.size)};
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
  return d;
}

template <class F>
void parallel_for(size_t n, int num_threads, F&& f) {
  const int t = std::max(1, std::min<int>(num_threads, int(n)));
  if (t == 1) {
    for (size_t i = 0; i < n; ++i) f(i);
    return;
  }
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  pool.reserve(t);
  for (int k = 0; k < t; ++k)
    pool.emplace_back([&] {
      for (size_t i = next++; i < n; i = next++) f(i);
    });
  for (auto& th : pool) th.join();
}

int default_threads() { return int(std::max(1u, std::thread::hardware_concurrency())); }

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "gpudecode native codecs: image header probe and crop-window JPEG decoding (libjpeg-turbo).";
  m.attr("JPEG_LIB_VERSION") = libjpeg_api_version();

  m.def(
      "index_tar",
      [](py::buffer data) {
        View v = view_of(data);
        TarIndex idx;
        {
          py::gil_scoped_release nogil;
          idx = index_tar(v.data, v.size);
        }
        py::list names;
        for (auto& n : idx.names)  // tar names are bytes; undecodable ones keep their bytes
          names.append(py::reinterpret_steal<py::object>(
              PyUnicode_DecodeUTF8(n.data(), Py_ssize_t(n.size()), "surrogateescape")));
        py::array_t<int64_t> offsets(idx.offsets.size()), sizes(idx.sizes.size());
        std::copy(idx.offsets.begin(), idx.offsets.end(), offsets.mutable_data());
        std::copy(idx.sizes.begin(), idx.sizes.end(), sizes.mutable_data());
        py::object err = idx.error.empty() ? py::object(py::none()) : py::object(py::str(idx.error));
        return py::make_tuple(names, offsets, sizes, err, idx.error_offset);
      },
      py::arg("data"),
      "Index a tar in memory: (names, offsets, sizes, error or None, error offset). Members "
      "before an error are returned.");

  m.def(
      "probe",
      [](py::buffer data) {
        View v = view_of(data);
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
      "probe_batch",
      [](const std::vector<py::buffer>& items, int num_threads) {
        std::vector<View> views;
        views.reserve(items.size());
        for (const auto& b : items) views.push_back(view_of(b));
        std::vector<ImageInfo> infos(views.size());
        std::vector<std::string> errs(views.size());
        {
          py::gil_scoped_release nogil;
          parallel_for(views.size(), num_threads > 0 ? num_threads : 1,
                       [&](size_t i) { errs[i] = probe_image(views[i].data, views[i].size, infos[i]); });
        }
        py::list out;
        for (size_t i = 0; i < views.size(); ++i) {
          if (errs[i].empty()) out.append(info_to_dict(infos[i]));
          else out.append(py::str(errs[i]));
        }
        return out;
      },
      py::arg("items"), py::arg("num_threads") = 1,
      "Probe many images; each entry is a dict, or the error message as a str.");

  m.def(
      "decode_jpeg_crop",
      [](py::buffer data, std::tuple<int, int, int, int> box, bool fast, int scale_denom, int64_t max_pixels) {
        View v = view_of(data);
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
      [](const std::vector<py::buffer>& items, py::array_t<int32_t, py::array::c_style> boxes,
         py::array_t<int32_t, py::array::c_style> scale_denoms, py::array_t<int64_t, py::array::c_style> offsets,
         py::array_t<uint8_t, py::array::c_style> out, bool fast, int64_t max_pixels, int num_threads) {
        const size_t n = items.size();
        if (boxes.ndim() != 2 || size_t(boxes.shape(0)) != n || boxes.shape(1) != 4)
          throw py::value_error("boxes must be int32 [N, 4]");
        if (size_t(scale_denoms.size()) != n || size_t(offsets.size()) != n)
          throw py::value_error("scale_denoms and offsets need one entry per item");
        std::vector<View> views;
        views.reserve(n);
        for (const auto& b : items) views.push_back(view_of(b));
        const int32_t* bx = boxes.data();
        const int32_t* sc = scale_denoms.data();
        const int64_t* off = offsets.data();
        uint8_t* dst = out.mutable_data();
        const int64_t cap = out.size();
        for (size_t i = 0; i < n; ++i) {
          const int64_t need = int64_t(bx[4 * i + 2]) * bx[4 * i + 3] * 3;
          if (bx[4 * i + 2] <= 0 || bx[4 * i + 3] <= 0) throw py::value_error("crop box must have a positive size");
          if (off[i] < 0 || off[i] + need > cap) throw py::value_error("output buffer too small for item " + std::to_string(i));
          if (sc[i] != 1 && sc[i] != 2 && sc[i] != 4 && sc[i] != 8) throw py::value_error("scale_denom must be 1, 2, 4 or 8");
        }
        std::vector<std::string> errs(n);
        {
          py::gil_scoped_release nogil;
          parallel_for(n, num_threads > 0 ? num_threads : default_threads(), [&](size_t i) {
            Box b{bx[4 * i], bx[4 * i + 1], bx[4 * i + 2], bx[4 * i + 3]};
            DecodeOptions opt{fast, sc[i], max_pixels};
            errs[i] = decode_jpeg_crop(views[i].data, views[i].size, b, opt, dst + off[i]);
          });
        }
        return errs;
      },
      py::arg("items"), py::arg("boxes"), py::arg("scale_denoms"), py::arg("offsets"), py::arg("out"),
      py::arg("fast") = false, py::arg("max_pixels") = 0, py::arg("num_threads") = 0,
      "Decode item i's box into out[offsets[i]:] (RGB HWC) on native threads; returns one error "
      "message per item (\"\" when it decoded).");
}
