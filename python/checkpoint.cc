#include "python/checkpoint.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "python/worker.h"
#include "server/checkpoint_arrays.h"

namespace py = pybind11;

namespace ps::python {
namespace {

template <typename T>
std::span<std::byte> Bytes(py::array_t<T>& a) {
  return {reinterpret_cast<std::byte*>(a.mutable_data()), static_cast<size_t>(a.nbytes())};
}

// numpy arrays for every table of a generation, made with the GIL held
// before the read, so that the read (GIL released) calls no Python.
class NumpyTarget final : public ArrayTarget {
 public:
  struct Table {
    py::array_t<float> values;
    std::vector<py::array_t<float>> slots;
    py::object ids = py::none();  // a hashed table's uint64 array
    TableArrays spans;
  };

  explicit NumpyTarget(const ArrayGeneration& g) {
    for (const ArrayTable& t : g.tables) {
      const std::vector<py::ssize_t> shape = {static_cast<py::ssize_t>(t.rows),
                                              static_cast<py::ssize_t>(t.dim)};
      Table a;
      a.values = py::array_t<float>(shape);
      a.spans.values = Bytes(a.values);
      for (size_t k = 0; k < t.slot_names.size(); ++k) {
        a.slots.emplace_back(shape);
        a.spans.slots.push_back(Bytes(a.slots.back()));
      }
      if (t.hashed) {
        py::array_t<uint64_t> ids(static_cast<py::ssize_t>(t.rows));
        a.spans.ids = Bytes(ids);
        a.ids = std::move(ids);
      }
      tables_.push_back(std::move(a));
    }
  }

  StatusOr<TableArrays> Arrays(size_t index, const ArrayTable&) override {
    return tables_[index].spans;
  }

  std::vector<Table>& tables() { return tables_; }

 private:
  std::vector<Table> tables_;
};

py::dict ReadCheckpoint(const std::string& dir, std::optional<int64_t> clock) {
  StatusOr<std::unique_ptr<CheckpointArrays>> open = [&] {
    py::gil_scoped_release release;
    return CheckpointArrays::Open(dir, clock);
  }();
  ThrowIfError(open.status());
  const ArrayGeneration& g = (*open)->generation();
  NumpyTarget target(g);
  const Status read = [&] {
    py::gil_scoped_release release;
    return (*open)->ReadInto(&target, nullptr);
  }();
  ThrowIfError(read);
  py::dict out;
  for (size_t i = 0; i < g.tables.size(); ++i) {
    const ArrayTable& t = g.tables[i];
    NumpyTarget::Table& a = target.tables()[i];
    py::dict table;
    table["name"] = t.name;
    table["kind"] = t.hashed ? "hashed" : "range";
    table["rows"] = t.rows;
    table["dim"] = t.dim;
    const std::string_view settings = t.optimizer;
    table["optimizer"] = std::string(settings.substr(0, settings.find_first_of(" \n")));
    table["optimizer_settings"] = t.optimizer;
    table["slots"] = t.slot_names;
    table["hash_slots"] = t.hashed ? py::object(py::int_(t.hash_slots)) : py::object(py::none());
    table["clock"] = g.clock;
    table["values"] = a.values;
    table["ids"] = a.ids;
    py::dict state;
    for (size_t k = 0; k < t.slot_names.size(); ++k) state[py::str(t.slot_names[k])] = a.slots[k];
    table["state"] = state;
    out[py::str(t.name)] = table;
  }
  return out;
}

}  // namespace

void BindCheckpoint(py::module_& m) {
  m.def("_read_checkpoint", &ReadCheckpoint, py::arg("checkpoint_dir"),
        py::arg("clock") = py::none(),
        "Reads generation `clock` (None: the newest that every shard's folder\n"
        "holds complete) of a job's checkpoint.dir, every shard-<i> folder, into\n"
        "numpy arrays, the GIL released while it reads. Returns a dict of table\n"
        "name -> dict with name, kind ('range' or 'hashed'), rows, dim,\n"
        "optimizer, optimizer_settings, slots, hash_slots, clock, values\n"
        "(rows x dim float32), ids (hashed: uint64 ascending; else None) and\n"
        "state (slot name -> array like values). ps.read_checkpoint wraps it.\n"
        "Raises ps.NotFoundError (no such folder, a shard's folder missing, no\n"
        "common generation), ps.DataLossError (a corrupt generation, naming its\n"
        "path) and the other errors of server/checkpoint_arrays.h.");
}

}  // namespace ps::python
