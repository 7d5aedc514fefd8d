// The checks of the arrays the Python module takes: float32 values and
// uint64 ids, read in place through the buffer protocol (numpy arrays and
// anything else that exports a buffer). A buffer of the wrong element type
// is a TypeError, one of the wrong shape, strides or writability a
// ValueError; each message names the argument, what was expected and what
// was given ("out: expected shape (4, 2), got (2, 4)").
//
// Call with the GIL held. The returned views keep the exporting object
// alive and its memory in place; release them with the GIL held.
#ifndef PS_PYTHON_ARRAYS_H_
#define PS_PYTHON_ARRAYS_H_

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace ps::python {

// A view of an argument's memory (the buffer protocol's Py_buffer).
using View = std::unique_ptr<pybind11::buffer_info>;

// A C-contiguous float32 buffer of exactly `shape` (rows, dim). `writable`:
// the buffer must also be writable (an `out=` argument).
View FloatView(pybind11::handle obj, const char* name, std::vector<int64_t> shape,
               bool writable);

// A one-dimensional C-contiguous uint64 buffer (row ids, or any id of a
// hashed table).
View IdView(pybind11::handle obj, const char* name);

// The number of ids in an IdView.
inline size_t IdCount(const View& ids) { return static_cast<size_t>(ids->shape[0]); }

}  // namespace ps::python

#endif  // PS_PYTHON_ARRAYS_H_
