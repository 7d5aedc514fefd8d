// The Python module ps._ps: Worker, Table and Future over ps::Client
// (python/worker.h), and the exceptions that carry a Status. ps/__init__.py
// re-exports it; ps/_ps.pyi holds its type hints.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>

#include "common/options.h"
#include "common/status.h"
#include "common/table_options.h"
#include "python/checkpoint.h"
#include "python/worker.h"

namespace py = pybind11;

namespace ps::python {
namespace {

// The last status code (kDataLoss); codes 1..kLastCode have a class each.
constexpr int kLastCode = static_cast<int>(StatusCode::kDataLoss);

// Raises `status` as the ps.Error subclass of its code (ps._ps._error_classes),
// with code, code_name and message set on the exception.
void RaiseStatus(const Status& status) {
  py::module_ module = py::module_::import("ps._ps");
  const int code = static_cast<int>(status.code());
  py::object cls = code >= 1 && code <= kLastCode
                       ? py::object(module.attr("_error_classes")[py::int_(code)])
                       : py::object(module.attr("Error"));
  py::object error = cls(status.ToString());
  error.attr("code") = code;
  error.attr("code_name") = StatusCodeName(status.code());
  error.attr("message") = status.message();
  error.attr("retryable") = status.IsRetryable();
  PyErr_SetObject(cls.ptr(), error.ptr());
}

// ps.Error and one subclass per status code ("InvalidArgumentError", ...).
// Two also derive from the built-in a Python caller would catch:
// InvalidArgument from ValueError, DeadlineExceeded from TimeoutError.
void AddErrors(py::module_& m) {
  py::handle base = PyErr_NewExceptionWithDoc(
      "ps.Error",
      "An error of the parameter server's C++ side. str(e) is the whole\n"
      "message (\"<CodeName>: <message>\"); e.code is the ps::StatusCode\n"
      "(int), e.code_name its name, e.message the message alone and\n"
      "e.retryable is True for Unavailable and DeadlineExceeded.",
      PyExc_Exception, nullptr);
  m.attr("Error") = base;
  py::dict classes;
  for (int code = 1; code <= kLastCode; ++code) {
    const std::string name = StatusCodeName(static_cast<StatusCode>(code)) + "Error";
    py::tuple bases = py::make_tuple(base);
    if (code == static_cast<int>(StatusCode::kInvalidArgument)) {
      bases = py::make_tuple(base, py::handle(PyExc_ValueError));
    } else if (code == static_cast<int>(StatusCode::kDeadlineExceeded)) {
      bases = py::make_tuple(base, py::handle(PyExc_TimeoutError));
    }
    const std::string qualified = "ps." + name;
    const std::string doc = "ps.Error with code " + std::to_string(code) + " (" +
                            StatusCodeName(static_cast<StatusCode>(code)) + ").";
    py::handle cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc.c_str(), bases.ptr(),
                                               nullptr);
    m.attr(name.c_str()) = cls;
    classes[py::int_(code)] = cls;
  }
  m.attr("_error_classes") = classes;
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      RaiseStatus(e.status());
    }
  });
}

// A table of a worker's job, by id.
class Table {
 public:
  Table(std::shared_ptr<Worker> worker, uint32_t id) : worker_(std::move(worker)), id_(id) {}
  const TableOptions& options() const { return worker_->job().tables[id_]; }
  Worker& worker() const { return *worker_; }
  const std::shared_ptr<Worker>& worker_ptr() const { return worker_; }
  uint32_t id() const { return id_; }

 private:
  std::shared_ptr<Worker> worker_;
  uint32_t id_;
};

py::object Rows(const Table& t) {
  if (t.options().hashed()) return py::none();
  return py::int_(t.options().rows);
}

std::string TableRepr(const Table& t) {
  const TableOptions& o = t.options();
  return "<ps.Table " + o.name + " " + std::string(NameOf(kKeyKindNames, o.keys)) +
         (o.hashed() ? "" : " rows=" + std::to_string(o.rows)) + " dim=" + std::to_string(o.dim) +
         " wire=" + std::string(NameOf(kWireTypeNames, o.wire.pull)) + "/" +
         std::string(NameOf(kWireTypeNames, o.wire.push)) + ">";
}

constexpr const char* kPullDoc = R"(Pulls rows of the table and waits for them.

pull() or pull(out=a): the whole table (range tables only), shape (rows, dim).
pull(ids) or pull(ids, out=a): the rows `ids` (numpy.uint64, one dimension;
row numbers of a range table, any id of a hashed one; repeats allowed),
shape (len(ids), dim), in the order of `ids`.

`out`, when given, must be a writable C-contiguous float32 array of that
shape: the values are written into it in place and it is returned.
Otherwise a new array is returned. The GIL is released while the pull
waits (e.g. for slower workers under the staleness bound).

Raises TypeError (wrong element type), ValueError (wrong shape, strides,
read-only out) or ps.Error (e.g. InvalidArgumentError for a row out of
range, DeadlineExceededError naming a server that did not answer).)";

constexpr const char* kPushDoc = R"(Pushes gradients (or values, as the table's update rule reads them)
and waits until every shard accepted them.

push(grads): the whole table, grads of shape (rows, dim) (range tables).
push(ids, grads): the rows `ids` (numpy.uint64, one dimension), grads of
shape (len(ids), dim); a hashed table's repeated id is pushed once with
its rows summed.

grads must be C-contiguous float32; it is sent from its own memory without
a copy. Raises TypeError, ValueError or ps.Error as pull() does.)";

constexpr const char* kPushBatchDoc = R"(Pushes to several tables at once and waits until every
shard accepted every push.

pushes: a sequence of (table, grads) (the whole table, as table.push(grads))
and (table, ids, grads) (rows by id, as table.push(ids, grads)) tuples,
each table a Table of this worker. The pushes are issued in order in one
call to the client (the GIL released once), each from its array's own
memory. Every argument is checked before the first push is sent: a wrong
one raises TypeError or ValueError naming it ("pushes[2].grads: ...") and
sends nothing. Raises ps.Error as push() does (the first push's error).)";

constexpr const char* kPushBatchAsyncDoc =
    "As push_batch(), without waiting: returns one Future, done when every push is;\n"
    "wait() returns None or raises the first error. No array may change until then.";

// The pushes of push_batch(): (table, grads) and (table, ids, grads) tuples
// of tables of `worker`.
std::vector<Worker::BatchPush> BatchPushes(const Worker& worker, const py::sequence& pushes) {
  std::vector<Worker::BatchPush> batch;
  batch.reserve(pushes.size());
  for (size_t i = 0; i < pushes.size(); ++i) {
    const std::string where = "pushes[" + std::to_string(i) + "]";
    py::handle item = pushes[i];
    if (!py::isinstance<py::tuple>(item) || (py::len(item) != 2 && py::len(item) != 3)) {
      throw py::type_error(where +
                           ": expected a (table, grads) or (table, ids, grads) tuple, got " +
                           std::string(py::str(item.get_type().attr("__name__"))));
    }
    const auto entry = py::reinterpret_borrow<py::tuple>(item);
    const py::object first = entry[0];
    if (!py::isinstance<Table>(first)) {
      throw py::type_error(where + ": expected a ps.Table first, got " +
                           std::string(py::str(first.get_type().attr("__name__"))));
    }
    const Table& table = first.cast<const Table&>();
    if (&table.worker() != &worker) {
      throw py::value_error(where + ": table '" + table.options().name +
                            "' is a table of another worker");
    }
    const bool by_id = entry.size() == 3;
    batch.push_back(Worker::BatchPush{.table = table.id(),
                                      .ids = by_id ? py::object(entry[1]) : py::none(),
                                      .values = entry[by_id ? 2 : 1]});
  }
  return batch;
}

constexpr const char* kPullAsyncDoc =
    "As pull(), without waiting: returns a Future whose wait() returns the array.\n"
    "`out` (or the new array) must not be read until the future is done.";
constexpr const char* kPushAsyncDoc =
    "As push(), without waiting: returns a Future whose wait() returns None.\n"
    "grads must not change until the future is done.";

}  // namespace
}  // namespace ps::python

PYBIND11_MODULE(_ps, m) {
  using namespace ps;          // NOLINT: the bindings name many of its types
  using namespace ps::python;  // NOLINT
  m.doc() = "The parameter server's C++ client (see the ps package).";
  AddErrors(m);
  BindCheckpoint(m);

  py::class_<Future>(m, "Future",
                     "The result of a pull_async, push_async or clock_async call.\n"
                     "Dropping it does not cancel the call: the worker keeps its\n"
                     "arrays until it completes, and close() waits for it.")
      .def("wait", &Future::Wait,
           "Waits (GIL released) until the call completed; returns a pull's array,\n"
           "or None. Raises the call's error. Calling it again returns (or raises)\n"
           "the same.")
      .def("done", &Future::Done,
           "True when wait() would return at once. Handles the replies that\n"
           "arrived, without waiting.");

  py::class_<Table>(m, "Table", "A table of the job (w.tables[name]).")
      .def_property_readonly("name", [](const Table& t) { return t.options().name; })
      .def_property_readonly("id", &Table::id, "Its index in the job file's tables.")
      .def_property_readonly("worker", &Table::worker_ptr, "The Worker it belongs to.")
      .def_property_readonly(
          "kind", [](const Table& t) { return std::string(NameOf(kKeyKindNames, t.options().keys)); },
          "\"range\" (rows 0..rows-1 split among the shards) or \"hashed\" (any uint64 id).")
      .def_property_readonly("rows", &Rows, "Row count of a range table; None for a hashed one.")
      .def_property_readonly("dim", [](const Table& t) { return t.options().dim; },
                             "Floats per row.")
      .def_property_readonly(
          "shape", [](const Table& t) { return py::make_tuple(Rows(t), t.options().dim); },
          "(rows, dim); (None, dim) for a hashed table.")
      .def_property_readonly(
          "wire_pull",
          [](const Table& t) { return std::string(NameOf(kWireTypeNames, t.options().wire.pull)); },
          "Type of pulled values on the wire: \"fp32\", \"bf16\" or \"fp16\" (arrays are float32).")
      .def_property_readonly(
          "wire_push",
          [](const Table& t) { return std::string(NameOf(kWireTypeNames, t.options().wire.push)); },
          "Type of pushed values on the wire: \"fp32\", \"bf16\" or \"fp16\".")
      .def(
          "pull",
          [](const Table& t, py::handle ids, py::handle out) {
            return t.worker().Pull(t.id(), ids, out, /*wait=*/true).Wait();
          },
          kPullDoc, py::arg("ids") = py::none(), py::kw_only(), py::arg("out") = py::none())
      .def(
          "pull_async",
          [](const Table& t, py::handle ids, py::handle out) {
            return t.worker().Pull(t.id(), ids, out);
          },
          kPullAsyncDoc, py::arg("ids") = py::none(), py::kw_only(), py::arg("out") = py::none())
      .def(
          "push",
          [](const Table& t, py::handle ids_or_grads, py::handle grads) {
            Future f = grads.is_none()
                           ? t.worker().Push(t.id(), py::none(), ids_or_grads, /*wait=*/true)
                           : t.worker().Push(t.id(), ids_or_grads, grads, /*wait=*/true);
            f.Wait();
          },
          kPushDoc, py::arg("ids_or_grads"), py::arg("grads") = py::none())
      .def(
          "push_async",
          [](const Table& t, py::handle ids_or_grads, py::handle grads) {
            return grads.is_none() ? t.worker().Push(t.id(), py::none(), ids_or_grads)
                                   : t.worker().Push(t.id(), ids_or_grads, grads);
          },
          kPushAsyncDoc, py::arg("ids_or_grads"), py::arg("grads") = py::none())
      .def("__repr__", &TableRepr);

  py::class_<Worker, std::shared_ptr<Worker>>(m, "Worker", py::dynamic_attr(), R"(One worker of a job, over the C++ client.

Worker(config, rank=None, *, rank_from_hostname=False, log_level="info")
reads the job file `config` and finds this worker's rank as ps_worker does
(common/rank.h): `rank` (ps_worker's --rank), else the host name's ordinal
when rank_from_hostname (a StatefulSet pod, "ps-worker-3" is 3), else the
launcher's environment: OMPI_COMM_WORLD_RANK, PMI_RANK or SLURM_PROCID
minus the server count (unless the launcher started the workers alone),
then JOB_COMPLETION_INDEX. It connects to every server without waiting.

`with Worker(...) as w:` joins the job (the rendezvous with every shard,
as ps_worker does before training) and leaves it at the end (close()).

Raises ps.NotFoundError or ps.InvalidArgumentError for the job file (naming
file, YAML path and line) and for a rank that cannot be resolved.

Calls from several threads take turns; the GIL is released while a call
sends or waits.)")
      .def(py::init([](const std::string& config, std::optional<int64_t> rank,
                       bool rank_from_hostname, const std::string& log_level) {
             return Worker::Open(config, rank, rank_from_hostname, log_level);
           }),
           py::arg("config"), py::arg("rank") = py::none(), py::kw_only(),
           py::arg("rank_from_hostname") = false, py::arg("log_level") = "info")
      .def_property_readonly("rank", &Worker::rank, "This worker's rank, 0..workers-1.")
      .def_property_readonly("rank_source", &Worker::rank_source,
                             "Where the rank came from: \"--rank\", \"SLURM_PROCID=3 minus "
                             "offset 2\", ...")
      .def_property_readonly("config", [](const Worker& w) { return w.job().source; },
                             "The job file's path, as given.")
      .def_property_readonly("num_workers", [](const Worker& w) { return w.job().cluster.workers; })
      .def_property_readonly("num_servers", &Worker::num_servers,
                             "The servers the worker's requests go to: the job file's, or those "
                             "ps_ctl reshard moved the running job onto.")
      .def_property_readonly(
          "tables",
          [](const std::shared_ptr<Worker>& w) {
            py::dict tables;
            for (uint32_t i = 0; i < w->job().tables.size(); ++i) {
              tables[py::str(w->job().tables[i].name)] = Table(w, i);
            }
            return tables;
          },
          "The job's tables by name, in the job file's order.")
      .def_property_readonly("joined", &Worker::joined, "True between join() and close().")
      .def_property_readonly("closed", &Worker::closed, "True after close().")
      .def_property_readonly("current_clock", &Worker::current_clock,
                             "This worker's clock: the clock() calls so far, or where join()\n"
                             "resumed (a worker restarted in a running job).")
      .def("join", &Worker::Join,
           "The rendezvous with every shard (GIL released): waits up to\n"
           "rendezvous.timeout_ms for all of them and takes up the clock they hold\n"
           "for this worker. Raises DeadlineExceededError naming each server that\n"
           "did not answer, FailedPreconditionError from a server whose job differs.")
      .def("close", &Worker::Close,
           "Waits for the calls still in flight, leaves the job when joined (the\n"
           "shards no longer wait for this worker) and disconnects. Idempotent.")
      .def(
          "clock",
          [](Worker& w) {
            w.Clock(/*wait=*/true).Wait();
          },
          "Finishes this worker's clock at every shard (after the pushes sent\n"
          "before it) and waits for them to acknowledge it.")
      .def(
          "push_batch",
          [](Worker& w, const py::sequence& pushes) {
            w.PushBatch(BatchPushes(w, pushes), /*batch=*/true, /*wait=*/true).Wait();
          },
          kPushBatchDoc, py::arg("pushes"))
      .def(
          "push_batch_async",
          [](Worker& w, const py::sequence& pushes) { return w.PushBatch(BatchPushes(w, pushes)); },
          kPushBatchAsyncDoc, py::arg("pushes"))
      .def(
          "clock_async", [](Worker& w) { return w.Clock(); },
          "As clock(), without waiting: returns a Future. Later pulls already\n"
          "carry the next clock.")
      .def("__enter__",
           [](const std::shared_ptr<Worker>& w) {
             w->Join();
             return w;
           })
      .def("__exit__",
           [](Worker& w, py::handle type, py::handle, py::handle) {
             // An exception on its way out is the one to see: an error of
             // leaving after it (a server gone) is not raised over it.
             if (type.is_none()) {
               w.Close();
               return;
             }
             try {
               w.Close();
             } catch (const std::exception&) {
             }
           })
      .def("__repr__", [](const Worker& w) {
        return "<ps.Worker rank " + std::to_string(w.rank()) + " of " +
               std::to_string(w.job().cluster.workers) + ", " + w.job().source + ">";
      });
}
