// The Python module's read_checkpoint: a generation of a job's checkpoint
// folder read into numpy arrays through CheckpointArrays
// (server/checkpoint_arrays.h), without a running job. ps.read_checkpoint
// (ps/__init__.py) wraps what it returns.
#ifndef PS_PYTHON_CHECKPOINT_H_
#define PS_PYTHON_CHECKPOINT_H_

#include <pybind11/pybind11.h>

namespace ps::python {

// Adds _read_checkpoint(checkpoint_dir, clock=None) to `m`: a dict of
// table name -> dict of the table's fields and arrays (see its docstring).
void BindCheckpoint(pybind11::module_& m);

}  // namespace ps::python

#endif  // PS_PYTHON_CHECKPOINT_H_
