#include "blocks.h"

#include <Python.h>

#include <cstdlib>
#include <new>

namespace py = pybind11;

namespace gpudecode {

BlockPool::~BlockPool() {
  for (auto& [cap, blocks] : free_)
    for (uint8_t* p : blocks) std::free(p);
}

size_t BlockPool::size_class(size_t n) {
  constexpr size_t kPage = 4096;
  size_t c = kPage;
  while (c < n) {
    const size_t next = c + c / 4 - c / 16 - c / 64;  // x 1.17 (about 2^(1/4))
    c = (next + kPage - 1) / kPage * kPage;
  }
  return c;
}

uint8_t* BlockPool::take(size_t n, size_t* cap) {
  const size_t c = size_class(n);
  *cap = c;
  auto it = free_.find(c);
  if (it != free_.end() && !it->second.empty()) {
    uint8_t* p = it->second.back();
    it->second.pop_back();
    free_bytes_ -= c;
    return p;
  }
  return static_cast<uint8_t*>(std::malloc(c));
}

void BlockPool::give(uint8_t* p, size_t cap) {
  if (free_bytes_ + cap <= limit_) {
    free_[cap].push_back(p);
    free_bytes_ += cap;
    return;
  }
  std::free(p);
}

void BlockPool::release() {
  std::map<size_t, std::vector<uint8_t*>> drop;
  drop.swap(free_);
  free_bytes_ = 0;
  for (auto& [cap, blocks] : drop)
    for (uint8_t* p : blocks) std::free(p);
}

size_t BlockPool::free_bytes() const { return free_bytes_; }

namespace {

struct BlockObject {
  PyObject_HEAD
  std::shared_ptr<BlockPool> pool;  // (constructed in place)
  uint8_t* data;
  Py_ssize_t size;
  size_t cap;
};

int block_getbuffer(PyObject* self, Py_buffer* view, int flags) {
  auto* o = reinterpret_cast<BlockObject*>(self);
  return PyBuffer_FillInfo(view, self, o->data, o->size, /*readonly=*/1, flags);
}

void block_dealloc(PyObject* self) {
  auto* o = reinterpret_cast<BlockObject*>(self);
  if (o->data != nullptr) o->pool->give(o->data, o->cap);
  o->pool.~shared_ptr<BlockPool>();
  PyTypeObject* tp = Py_TYPE(self);
  tp->tp_free(self);
  Py_DECREF(tp);
}

Py_ssize_t block_length(PyObject* self) { return reinterpret_cast<BlockObject*>(self)->size; }

PyType_Slot block_slots[] = {
    {Py_bf_getbuffer, reinterpret_cast<void*>(block_getbuffer)},
    {Py_tp_dealloc, reinterpret_cast<void*>(block_dealloc)},
    {Py_sq_length, reinterpret_cast<void*>(block_length)},
    {Py_tp_doc, const_cast<char*>("A block of a BlockPool holding one member's bytes (read-only buffer); back to "
                                  "the pool when the last view of it is gone.")},
    {0, nullptr},
};

PyType_Spec block_spec = {
    "gpudecode._native.PooledBlock", sizeof(BlockObject), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, block_slots,
};

PyTypeObject* block_type = nullptr;

}  // namespace

py::object new_block(const std::shared_ptr<BlockPool>& pool, size_t size, uint8_t** data) {
  size_t cap = 0;
  uint8_t* p = pool->take(size, &cap);
  if (p == nullptr) throw std::bad_alloc();
  PyObject* obj = block_type->tp_alloc(block_type, 0);
  if (obj == nullptr) {
    pool->give(p, cap);
    throw py::error_already_set();
  }
  auto* o = reinterpret_cast<BlockObject*>(obj);
  new (&o->pool) std::shared_ptr<BlockPool>(pool);
  o->data = p;
  o->size = Py_ssize_t(size);
  o->cap = cap;
  *data = p;
  return py::reinterpret_steal<py::object>(obj);
}

std::shared_ptr<BlockPool> pool_of(const py::handle& obj) { return obj.cast<std::shared_ptr<BlockPool>>(); }

void register_blocks(py::module_& m) {
  block_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&block_spec));
  if (block_type == nullptr) throw py::error_already_set();
  m.add_object("PooledBlock", py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(block_type)));
  py::class_<BlockPool, std::shared_ptr<BlockPool>>(
      m, "BlockPool",
      "Recycled memory for the members a reader reads: read_ranges(..., pool=, pooled=) reads the members "
      "marked pooled into its blocks, as read-only memoryviews; a block comes back when its last view is "
      "gone, and the pool keeps up to `limit` bytes of free blocks (their pages stay mapped: no page faults "
      "for the next reads).")
      .def(py::init<size_t>(), py::arg("limit"))
      .def_property_readonly("free_bytes", &BlockPool::free_bytes, "bytes of free blocks held")
      .def("release", &BlockPool::release, "frees the free blocks held (those lent out come back as usual)")
      .def_property_readonly("limit", &BlockPool::limit)
      .def_static("size_class", &BlockPool::size_class, py::arg("n"), "the capacity of the block n bytes get");
}

}  // namespace gpudecode
