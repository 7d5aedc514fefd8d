#include "python/arrays.h"

#include <string>
#include <string_view>

namespace py = pybind11;

namespace ps::python {
namespace {

// "(4, 2)", as numpy prints a shape.
std::string ShapeText(const std::vector<py::ssize_t>& shape) {
  std::string text = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    text += (i > 0 ? ", " : "") + std::to_string(shape[i]);
  }
  return text + (shape.size() == 1 ? ",)" : ")");
}

// The element type of `obj` as its user knows it: a numpy dtype's name,
// else the buffer's struct format.
std::string ElementType(py::handle obj, const py::buffer_info& view) {
  if (py::hasattr(obj, "dtype")) return py::str(obj.attr("dtype"));
  return "format '" + view.format + "'";
}

// Whether a struct format names `kind` ('f', or one of the 8-byte unsigned
// 'Q' and, on LP64, 'L') in native or little-endian order.
bool FormatIs(std::string_view format, std::string_view kinds, size_t itemsize,
              size_t wanted_size) {
  if (!format.empty() && (format[0] == '@' || format[0] == '=' || format[0] == '<')) {
    format.remove_prefix(1);
  }
  return format.size() == 1 && kinds.find(format[0]) != std::string_view::npos &&
         itemsize == wanted_size;
}

// Numpy's C order: each stride the product of the later extents.
bool CContiguous(const py::buffer_info& view) {
  py::ssize_t expected = view.itemsize;
  for (size_t i = view.shape.size(); i-- > 0;) {
    if (view.shape[i] != 1 && view.strides[i] != expected) return false;
    expected *= view.shape[i];
  }
  return true;
}

// The view of `obj`, or a TypeError saying what was expected when it has
// no buffer.
View Request(py::handle obj, const char* name, const char* expected) {
  if (!PyObject_CheckBuffer(obj.ptr())) {
    throw py::type_error(std::string(name) + ": expected " + expected + ", got " +
                         std::string(py::str(obj.get_type().attr("__name__"))));
  }
  return std::make_unique<py::buffer_info>(py::reinterpret_borrow<py::buffer>(obj).request());
}

}  // namespace

View FloatView(py::handle obj, const char* name, std::vector<int64_t> shape, bool writable) {
  constexpr const char* kExpected = "a float32 array (numpy.float32, C-contiguous)";
  View view = Request(obj, name, kExpected);
  if (!FormatIs(view->format, "f", static_cast<size_t>(view->itemsize), sizeof(float))) {
    throw py::type_error(std::string(name) + ": expected " + kExpected + ", got " +
                         ElementType(obj, *view) + " (convert with numpy.asarray(" + name +
                         ", dtype=numpy.float32))");
  }
  const std::vector<py::ssize_t> wanted(shape.begin(), shape.end());
  if (view->shape != wanted) {
    throw py::value_error(std::string(name) + ": expected shape " + ShapeText(wanted) +
                          ", got " + ShapeText(view->shape));
  }
  if (!CContiguous(*view)) {
    throw py::value_error(std::string(name) + ": expected a C-contiguous array, got strides " +
                          ShapeText(view->strides) + " (pass numpy.ascontiguousarray(" + name +
                          "))");
  }
  if (writable && view->readonly) {
    throw py::value_error(std::string(name) + ": expected a writable array, got a read-only one");
  }
  return view;
}

View IdView(py::handle obj, const char* name) {
  constexpr const char* kExpected = "a one-dimensional uint64 array (numpy.uint64)";
  View view = Request(obj, name, kExpected);
  if (!FormatIs(view->format, sizeof(unsigned long) == 8 ? "QL" : "Q",
                static_cast<size_t>(view->itemsize), sizeof(uint64_t))) {
    throw py::type_error(std::string(name) + ": expected " + kExpected + ", got " +
                         ElementType(obj, *view) + " (convert with numpy.asarray(" + name +
                         ", dtype=numpy.uint64))");
  }
  if (view->ndim != 1) {
    throw py::value_error(std::string(name) + ": expected one dimension, got shape " +
                          ShapeText(view->shape));
  }
  if (!CContiguous(*view)) {
    throw py::value_error(std::string(name) + ": expected a contiguous array, got stride " +
                          std::to_string(view->strides[0]) + " (pass numpy.ascontiguousarray(" +
                          name + "))");
  }
  return view;
}

}  // namespace ps::python
