#include "python/worker.h"

#include <pybind11/numpy.h>

#include <span>
#include <utility>

#include "common/config.h"
#include "common/logging.h"
#include "common/rank.h"
#include "common/transport.h"

namespace py = pybind11;

namespace ps::python {

void ThrowIfError(const Status& status) {
  if (!status.ok()) throw StatusError(status);
}

Graveyard::~Graveyard() {
  // Deliberately leaked (see the header): releasing needs the GIL.
  views_.clear();
}

void Graveyard::Bury(py::buffer_info* view) {
  std::lock_guard<std::mutex> lock(mu_);
  views_.push_back(view);
}

void Graveyard::Release() {
  std::vector<py::buffer_info*> views;
  {
    std::lock_guard<std::mutex> lock(mu_);
    views.swap(views_);
  }
  for (py::buffer_info* view : views) delete view;
}

void TurnLock::lock() {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t ticket = next_++;
  turn_.wait(lock, [&] { return serving_ == ticket; });
}

void TurnLock::unlock() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++serving_;
  }
  turn_.notify_all();
}

py::object Future::Wait() { return worker_->Wait(call_); }

bool Future::Done() { return worker_->Done(*call_); }

std::shared_ptr<Worker> Worker::Open(const std::string& config, std::optional<int64_t> rank,
                                     bool rank_from_hostname, const std::string& log_level) {
  StatusOr<JobOptions> job = LoadJobFile(config);
  ThrowIfError(job.status());
  StatusOr<ResolvedRank> resolved = ResolveRankFromFlags(
      RankFlags{.value = rank, .from_hostname = rank_from_hostname},
      static_cast<uint32_t>(job->cluster.servers.size()), job->cluster.workers, "rank");
  ThrowIfError(resolved.status());
  ThrowIfError(InitLogging("worker " + std::to_string(resolved->rank), log_level));
  // As ps_worker does: a step's pulls of every table in flight at once
  // must not cost fresh zeroed pages for each reply.
  KeepMessageMemory();
  StatusOr<std::unique_ptr<Client>> client = Client::Create(*job, resolved->rank);
  ThrowIfError(client.status());
  return std::shared_ptr<Worker>(new Worker(std::move(*job), resolved->rank,
                                            std::move(resolved->source), std::move(*client)));
}

Worker::Worker(JobOptions job, uint32_t rank, std::string rank_source,
               std::unique_ptr<Client> client)
    : job_(std::move(job)),
      rank_(rank),
      rank_source_(std::move(rank_source)),
      client_(std::move(client)) {}

Worker::~Worker() {
  try {
    Close();
  } catch (const std::exception& e) {
    PS_LOG_WARN("worker {}: closing: {}", rank_, e.what());
  }
}

bool Worker::joined() {
  py::gil_scoped_release release;
  std::lock_guard<TurnLock> lock(mu_);
  return joined_;
}

bool Worker::closed() {
  py::gil_scoped_release release;
  std::lock_guard<TurnLock> lock(mu_);
  return client_ == nullptr;
}

uint32_t Worker::num_servers() {
  py::gil_scoped_release release;
  std::lock_guard<TurnLock> lock(mu_);
  return client_ != nullptr ? client_->num_shards()
                            : static_cast<uint32_t>(job().cluster.servers.size());
}

Status Worker::CheckOpen(const char* call) const {
  if (client_ != nullptr) return Status::Ok();
  return FailedPreconditionError(std::string(call) + ": worker " + std::to_string(rank_) +
                                 " is closed (it left the job); make a new ps.Worker");
}

int64_t Worker::current_clock() {
  py::gil_scoped_release release;
  std::lock_guard<TurnLock> lock(mu_);
  ThrowIfError(CheckOpen("current_clock"));
  return client_->clock();
}

void Worker::Join() {
  graveyard_->Release();
  Status joined;
  {
    py::gil_scoped_release release;
    std::lock_guard<TurnLock> lock(mu_);
    joined = CheckOpen("join()");
    if (joined.ok() && joined_) {
      joined = FailedPreconditionError("join(): worker " + std::to_string(rank_) +
                                       " joined the job already");
    }
    if (joined.ok()) joined = client_->Join();
    joined_ = joined.ok();
  }
  ThrowIfError(joined);
}

void Worker::Close() {
  std::vector<std::shared_ptr<PendingCall>> calls;
  calls.reserve(pending_.size());
  for (const auto& [id, call] : pending_) calls.push_back(call);
  Status left;
  {
    py::gil_scoped_release release;
    std::lock_guard<TurnLock> lock(mu_);
    if (client_ != nullptr) {
      // Each call's own status stays with its future.
      for (const std::shared_ptr<PendingCall>& call : calls) {
        if (call->finished) continue;
        for (; call->next < call->tickets.size(); ++call->next) {
          call->Record(client_->Wait(call->tickets[call->next]));
        }
        call->finished = true;
      }
      if (joined_) left = client_->Leave();
      joined_ = false;
      // Its ZeroMQ context ends here and releases every frame it held.
      client_.reset();
    }
  }
  pending_.clear();
  graveyard_->Release();
  ThrowIfError(left);
}

template <typename Issue>
Future Worker::Track(const char* what, Issue issue, std::vector<View> views, py::object result,
                     bool wait) {
  graveyard_->Release();
  auto call = std::make_shared<PendingCall>();
  call->views = std::move(views);
  call->result = std::move(result);
  const Status issued = [&]() -> Status {
    py::gil_scoped_release release;
    Status status;
    {
      std::lock_guard<TurnLock> lock(mu_);
      status = CheckOpen(what);
      if (status.ok()) status = issue(*client_, call->tickets);
    }
    if (wait && !call->tickets.empty()) {
      // As Wait does, in slices; the call is this thread's alone.
      for (bool done = false; !done;) {
        std::lock_guard<TurnLock> lock(mu_);
        done = WaitSlice(*call);
      }
      if (status.ok()) status = call->status;
    }
    return status;
  }();
  if (wait) {
    call->finished = true;
    call->views.clear();
    graveyard_->Release();
  } else if (!call->tickets.empty()) {
    // What was issued is tracked, also when a later part of the call
    // failed: its arrays must live until it is done.
    call->id = next_call_id_++;
    pending_[call->id] = call;
  }
  ThrowIfError(issued);
  return Future(shared_from_this(), std::move(call));
}

bool Worker::WaitSlice(PendingCall& call) {
  if (call.finished) return true;
  while (call.next < call.tickets.size()) {
    const Ticket ticket = call.tickets[call.next];
    if (client_ == nullptr) {
      call.Record(CheckOpen("wait()"));
      break;
    }
    if (Status waitable = client_->CheckWait(ticket); !waitable.ok()) {
      call.Record(waitable);
    } else if (client_->Done(ticket)) {
      call.Record(client_->Wait(ticket));  // at once: it is done
    } else {
      // Poll's error ends the wait as Wait's does.
      const Status polled = client_->Poll(kWaitSliceMs);
      if (polled.ok()) return false;
      call.Record(polled);
      break;
    }
    ++call.next;
  }
  call.finished = true;
  return true;
}

py::object Worker::Wait(const std::shared_ptr<PendingCall>& call) {
  if (call->finished && call->id == 0) {
    // Waited for already (Track's `wait`, or an empty batch): nothing to
    // release the GIL for.
    ThrowIfError(call->status);
    return call->result;
  }
  Status status;
  {
    py::gil_scoped_release release;
    // In slices, so that other threads' calls to this worker (the next
    // pull, another worker's future) go on while this one waits.
    for (;;) {
      std::lock_guard<TurnLock> lock(mu_);
      if (WaitSlice(*call)) {
        status = call->status;
        break;
      }
    }
  }
  Forget(call);
  ThrowIfError(status);
  return call->result;
}

bool Worker::Done(const PendingCall& call) {
  py::gil_scoped_release release;
  std::lock_guard<TurnLock> lock(mu_);
  if (call.finished || client_ == nullptr) return true;
  ThrowIfError(client_->Poll(0));
  for (size_t i = call.next; i < call.tickets.size(); ++i) {
    if (!client_->Done(call.tickets[i])) return false;
  }
  return true;
}

void Worker::Forget(const std::shared_ptr<PendingCall>& call) {
  pending_.erase(call->id);
  call->views.clear();
  graveyard_->Release();
}

Future Worker::Clock(bool wait) {
  return Track(
      "clock()",
      [](Client& client, std::vector<Ticket>& tickets) -> Status {
        PS_ASSIGN_OR_RETURN(const Ticket ticket, client.Clock());
        tickets.push_back(ticket);
        return Status::Ok();
      },
      {}, py::none(), wait);
}

Worker::Rows Worker::RowsOf(uint32_t table, py::handle ids, std::vector<View>* views,
                            const char* name) const {
  const TableOptions& options = job_.tables.at(table);
  Rows rows;
  rows.dense = ids.is_none();
  rows.dim = static_cast<int64_t>(options.dim);
  if (rows.dense) {
    rows.count = static_cast<int64_t>(options.rows);
    return rows;
  }
  views->push_back(IdView(ids, name));
  rows.ids = {static_cast<const uint64_t*>(views->back()->ptr), IdCount(views->back())};
  rows.count = static_cast<int64_t>(rows.ids.size());
  return rows;
}

Future Worker::Pull(uint32_t table, py::handle ids, py::handle out, bool wait) {
  std::vector<View> views;
  const Rows rows = RowsOf(table, ids, &views);
  const int64_t count = rows.count, dim = rows.dim;
  py::object result = out.is_none() ? py::array_t<float>({count, dim})
                                    : py::reinterpret_borrow<py::object>(out);
  views.push_back(FloatView(result, "out", {count, dim}, /*writable=*/true));
  float* into = static_cast<float*>(views.back()->ptr);
  return Track(
      "pull()",
      [&](Client& client, std::vector<Ticket>& tickets) -> Status {
        PS_ASSIGN_OR_RETURN(const Ticket ticket, rows.dense ? client.PullDense(table, into)
                                                            : client.Pull(table, rows.ids, into));
        tickets.push_back(ticket);
        return Status::Ok();
      },
      std::move(views), std::move(result), wait);
}

SharedFloats Worker::Share(View values, size_t size) const {
  const auto* data = static_cast<const float*>(values->ptr);
  std::shared_ptr<const void> owner(
      values.release(), [graveyard = graveyard_](py::buffer_info* view) { graveyard->Bury(view); });
  return SharedFloats(std::move(owner), data, size);
}

Future Worker::Push(uint32_t table, py::handle ids, py::handle values, bool wait) {
  return PushBatch({BatchPush{.table = table,
                              .ids = py::reinterpret_borrow<py::object>(ids),
                              .values = py::reinterpret_borrow<py::object>(values)}},
                   /*batch=*/false, wait);
}

Future Worker::PushBatch(const std::vector<BatchPush>& pushes, bool batch, bool wait) {
  // Every argument is checked before anything is sent.
  std::vector<View> views;
  std::vector<Rows> rows;
  std::vector<SharedFloats> shared;
  rows.reserve(pushes.size());
  shared.reserve(pushes.size());
  for (size_t i = 0; i < pushes.size(); ++i) {
    const BatchPush& push = pushes[i];
    // A batch names the push of a wrong argument: "pushes[2].grads".
    const std::string prefix = batch ? "pushes[" + std::to_string(i) + "]." : "";
    rows.push_back(RowsOf(push.table, push.ids, &views, (prefix + "ids").c_str()));
    const Rows& r = rows.back();
    View grads = FloatView(push.values, (prefix + "grads").c_str(), {r.count, r.dim},
                           /*writable=*/false);
    shared.push_back(Share(std::move(grads), static_cast<size_t>(r.count * r.dim)));
  }
  return Track(
      batch ? "push_batch()" : "push()",
      [&](Client& client, std::vector<Ticket>& tickets) -> Status {
        for (size_t i = 0; i < pushes.size(); ++i) {
          const uint32_t table = pushes[i].table;
          PS_ASSIGN_OR_RETURN(const Ticket ticket,
                              rows[i].dense ? client.PushDense(table, shared[i])
                                            : client.Push(table, rows[i].ids, shared[i]));
          tickets.push_back(ticket);
        }
        return Status::Ok();
      },
      std::move(views), py::none(), wait);
}

}  // namespace ps::python
