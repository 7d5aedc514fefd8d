// The C++ side of the Python module's Worker: one ps::Client of one worker
// of a job, driven from Python threads.
//
// The job file is read by LoadJobFile (common/config.h) and the rank found
// by ResolveRankFromFlags (common/rank.h), the sources and precedence of
// ps_worker; Join() and Leave() are the Client's, as ps_worker calls them.
// Every Push, Pull and Clock is the Client's; this layer adds only what
// Python needs around it:
//   - the GIL is released while a call sends or waits, so other Python
//     threads run (a data loader during a pull held by the staleness bound);
//   - the Client is not thread-safe, so calls from several Python threads
//     take turns on `mu_` (taken after the GIL is released, never the other
//     way round, so no thread holds one lock while waiting for the other);
//     a wait holds it in slices (kWaitSliceMs), so a thread blocked on one
//     call does not hold back another thread's next call;
//   - the arrays a call reads or writes stay alive until the call is done:
//     a pull's ids and `out` until its ticket completes (PendingCall), a
//     push's values until ZeroMQ releases its frames, possibly on its I/O
//     thread, which holds no GIL: those views are handed to a Graveyard and
//     released by the next call that holds the GIL.
// C++ errors are thrown as StatusError, which the module raises as the
// ps.Error subclass of their code (module.cc).
//
// Thread safety: every method is called with the GIL held, from any
// thread; calls to one Worker are serialized.
#ifndef PS_PYTHON_WORKER_H_
#define PS_PYTHON_WORKER_H_

#include <pybind11/pybind11.h>

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "client/client.h"
#include "common/options.h"
#include "common/status.h"
#include "python/arrays.h"

namespace ps::python {

// A non-OK Status on its way to Python (module.cc's translator).
class StatusError : public std::exception {
 public:
  explicit StatusError(Status status)
      : status_(std::move(status)), text_(status_.ToString()) {}
  const Status& status() const { return status_; }
  const char* what() const noexcept override { return text_.c_str(); }

 private:
  Status status_;
  std::string text_;
};

// Throws StatusError unless `status` is OK.
void ThrowIfError(const Status& status);

// Views released by threads that may not hold the GIL (ZeroMQ's I/O
// thread, when it is done with a push's frames), kept until a thread that
// holds it calls Release(). Thread-safe.
class Graveyard {
 public:
  Graveyard() = default;
  // Views still here were never released (the interpreter is going away
  // or no thread held the GIL since): they leak rather than touch Python
  // without the GIL.
  ~Graveyard();
  Graveyard(const Graveyard&) = delete;
  Graveyard& operator=(const Graveyard&) = delete;

  // Any thread.
  void Bury(pybind11::buffer_info* view);
  // REQUIRES: the GIL is held.
  void Release();

 private:
  std::mutex mu_;
  std::vector<pybind11::buffer_info*> views_;  // guarded by mu_
};

// One Push, Pull or Clock issued and not yet waited for, or one batch of
// pushes (Worker::PushBatch): a ticket of the client per push.
struct PendingCall {
  // The key of the call in Worker::pending_.
  uint64_t id = 0;
  // Its client tickets; those before `next` are consumed (their status is
  // in `status`). Touched under Worker::mu_ once issued.
  std::vector<Ticket> tickets;
  size_t next = 0;
  // The arrays the call reads or writes while in flight (a pull's ids and
  // out). Touched with the GIL held.
  std::vector<View> views;
  // What Wait returns: a pull's array, None for a push or a clock.
  pybind11::object result = pybind11::none();
  // Set once, under Worker::mu_, when every ticket was consumed (or a wait
  // failed); `status` is the first error of its tickets.
  bool finished = false;
  Status status;
  // Keeps the first error.
  void Record(const Status& s) {
    if (status.ok()) status = s;
  }
};

// A mutex that lets threads in in the order they asked (a ticket lock), so
// that a thread waiting in slices, which takes it again at once after each,
// cannot starve another thread's call. Thread-safe.
class TurnLock {
 public:
  void lock();
  void unlock();

 private:
  std::mutex mu_;
  std::condition_variable turn_;
  uint64_t next_ = 0;     // guarded by mu_: the ticket of the next thread to ask
  uint64_t serving_ = 0;  // guarded by mu_: the ticket that holds the lock
};

class Worker;

// How long one wait holds a worker before other threads may use it, at
// most (a reply ends the slice at once), milliseconds.
inline constexpr int kWaitSliceMs = 20;

// The result of an *_async call. Holds its worker alive.
class Future {
 public:
  Future(std::shared_ptr<Worker> worker, std::shared_ptr<PendingCall> call)
      : worker_(std::move(worker)), call_(std::move(call)) {}
  // Waits (GIL released) until the call completed; returns a pull's array
  // or None, or throws its error. Later calls return or throw the same.
  pybind11::object Wait();
  // True when Wait would return without waiting. Handles the replies
  // that arrived (no wait).
  bool Done();

 private:
  std::shared_ptr<Worker> worker_;
  std::shared_ptr<PendingCall> call_;
};

class Worker : public std::enable_shared_from_this<Worker> {
 public:
  // Reads the job file at `config`, resolves this worker's rank (`rank`,
  // else the host name's ordinal when `rank_from_hostname`, else the
  // launcher's environment: common/rank.h) and connects a Client to every
  // server (without waiting for them). Throws StatusError: NotFound or
  // InvalidArgument from the job file (naming file, path and line),
  // InvalidArgument for a rank that cannot be resolved or is outside the
  // job, and the Client's errors. Keeps freed message memory in the process
  // as ps_worker does (KeepMessageMemory, common/transport.h: process-wide).
  static std::shared_ptr<Worker> Open(const std::string& config, std::optional<int64_t> rank,
                                      bool rank_from_hostname, const std::string& log_level);
  // Closes (Close()) and logs what fails.
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  const JobOptions& job() const { return job_; }
  uint32_t rank() const { return rank_; }
  const std::string& rank_source() const { return rank_source_; }
  bool joined();
  bool closed();
  // The servers the worker's requests go to now: the job file's, or those a
  // reshard moved the job onto (client/client.h, map_epoch).
  uint32_t num_servers();
  // The worker's clock (Client::clock()).
  int64_t current_clock();

  // Client::Join (the rendezvous with every shard), GIL released.
  // FailedPrecondition when closed or joined already.
  void Join();
  // Waits for every call still in flight (their futures keep their
  // results), then Client::Leave when joined, and disconnects. Idempotent.
  // Throws the first error of Leave.
  void Close();

  // The calls below issue a call of the Client and return its Future. With
  // `wait` they also wait for it before the GIL is taken back (one release
  // of the GIL and no tracking of the call: what a blocking call from
  // Python needs); the returned Future is done.

  // Client::Clock.
  Future Clock(bool wait = false);
  // Pulls the whole table (`ids` None) or the rows `ids` into `out` (None:
  // a new array) of shape (rows, dim). TypeError or ValueError for an
  // array of the wrong type or shape, StatusError for the Client's errors.
  Future Pull(uint32_t table, pybind11::handle ids, pybind11::handle out, bool wait = false);
  // Pushes `values` of shape (rows, dim): the whole table (`ids` None) or
  // the rows `ids`. The values are read in place until the push is sent.
  Future Push(uint32_t table, pybind11::handle ids, pybind11::handle values, bool wait = false);
  // One push of a batch: as Push's arguments.
  struct BatchPush {
    uint32_t table = 0;
    pybind11::object ids;  // None: the whole table
    pybind11::object values;
  };
  // Issues the pushes in order, in one turn of the client (the GIL is
  // released once), and returns one Future that is done when every one of
  // them is; its error is the first of theirs. Every argument is checked
  // before the first push is issued (TypeError, ValueError naming
  // "pushes[i].grads" when `batch`, else as Push), so a wrong one sends
  // nothing. Should the client refuse a later push, those issued before go
  // on (their arrays are kept until done) and the error is thrown.
  Future PushBatch(const std::vector<BatchPush>& pushes, bool batch = true, bool wait = false);

 private:
  friend class Future;
  Worker(JobOptions job, uint32_t rank, std::string rank_source,
         std::unique_ptr<Client> client);
  // FailedPrecondition naming `call` when the worker was closed.
  // REQUIRES: mu_ held.
  Status CheckOpen(const char* call) const;
  // Issues the call `what` ("pull()") through `issue` (GIL released, mu_
  // held), which appends the client's tickets to its second argument, and
  // tracks it with the views it keeps; with `wait`, waits for it instead,
  // with the GIL still released (also for what was issued before an error
  // of `issue`, which is then thrown).
  template <typename Issue>
  Future Track(const char* what, Issue issue, std::vector<View> views, pybind11::object result,
               bool wait);
  // The frames' owner of a push's values: its view goes to the graveyard,
  // whoever drops it last (ZeroMQ may send the frames on its own thread).
  SharedFloats Share(View values, size_t size) const;
  // The rows a pull or push names: the whole table (`ids` None), or the
  // ids, whose view goes to *views.
  struct Rows {
    bool dense = false;
    std::span<const uint64_t> ids;
    int64_t count = 0;  // rows
    int64_t dim = 0;
  };
  // `name` names the ids in errors.
  Rows RowsOf(uint32_t table, pybind11::handle ids, std::vector<View>* views,
              const char* name = "ids") const;
  // One slice of a wait for `call`: polls the client up to kWaitSliceMs
  // unless the call completed. True (status set, finished) when it did.
  // REQUIRES: mu_ held.
  bool WaitSlice(PendingCall& call);
  // Future::Wait and Future::Done.
  pybind11::object Wait(const std::shared_ptr<PendingCall>& call);
  bool Done(const PendingCall& call);
  // Forgets a finished call and drops its views. REQUIRES: the GIL.
  void Forget(const std::shared_ptr<PendingCall>& call);

  const JobOptions job_;
  const uint32_t rank_;
  const std::string rank_source_;
  const std::shared_ptr<Graveyard> graveyard_ = std::make_shared<Graveyard>();

  TurnLock mu_;
  std::unique_ptr<Client> client_;  // guarded by mu_; null once closed
  bool joined_ = false;             // guarded by mu_
  // Calls in flight by id, also those whose Future was dropped (their
  // arrays must live until they complete). Touched with the GIL held.
  std::unordered_map<uint64_t, std::shared_ptr<PendingCall>> pending_;
  uint64_t next_call_id_ = 1;  // touched with the GIL held
};

}  // namespace ps::python

#endif  // PS_PYTHON_WORKER_H_
