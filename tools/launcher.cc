#include "tools/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>

#include "client/control_client.h"
#include "common/endpoint.h"
#include "common/subprocess.h"
#include "server/checkpoint.h"
#include "worker/progress.h"

namespace ps {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Without pidfds (kernel < 5.3) exits are noticed by polling this often.
constexpr milliseconds kReapTick(50);
// Most bytes read from one child per wake-up, so that a chatty child cannot
// starve the others or the signal pipe.
constexpr size_t kReadChunk = 64 * 1024;
// Most bytes drained from a child's pipe right after it exited.
constexpr size_t kDrainLimit = 1 << 20;

// Write end of the self-pipe of the Run() that handles signals, or -1.
// A global because a signal handler can reach nothing else; SignalCatcher
// owns it and makes sure only one Run() uses it at a time.
std::atomic<int> g_signal_pipe{-1};

extern "C" void OnLauncherSignal(int signo) {
  int saved_errno = errno;
  int fd = g_signal_pipe.load();
  if (fd >= 0) {
    unsigned char byte = static_cast<unsigned char>(signo);
    ssize_t ignored = ::write(fd, &byte, 1);  // full pipe: already woken
    (void)ignored;
  }
  errno = saved_errno;
}

// Routes SIGINT and SIGTERM into a pipe that the poll loop watches, for the
// lifetime of the object, then restores the previous handlers.
class SignalCatcher {
 public:
  static StatusOr<std::unique_ptr<SignalCatcher>> Install() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
      return InternalError(std::string("launcher: pipe2: ") +
                           std::strerror(errno));
    }
    int expected = -1;
    if (!g_signal_pipe.compare_exchange_strong(expected, fds[1])) {
      ::close(fds[0]);
      ::close(fds[1]);
      return FailedPreconditionError(
          "launcher: another Launcher::Run() is already handling SIGINT and "
          "SIGTERM; set LauncherOptions::handle_signals = false on one");
    }
    auto catcher = std::unique_ptr<SignalCatcher>(new SignalCatcher(fds));
    struct sigaction action;
    std::memset(&action, 0, sizeof(action));
    action.sa_handler = OnLauncherSignal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    ::sigaction(SIGINT, &action, &catcher->saved_int_);
    ::sigaction(SIGTERM, &action, &catcher->saved_term_);
    return catcher;
  }

  ~SignalCatcher() {
    ::sigaction(SIGINT, &saved_int_, nullptr);
    ::sigaction(SIGTERM, &saved_term_, nullptr);
    g_signal_pipe.store(-1);
    ::close(read_fd_);
    ::close(write_fd_);
  }

  SignalCatcher(const SignalCatcher&) = delete;
  SignalCatcher& operator=(const SignalCatcher&) = delete;

  int read_fd() const { return read_fd_; }

  // The signals received since the last call, in order.
  std::vector<int> Drain() {
    std::vector<int> signals;
    unsigned char buffer[64];
    ssize_t n;
    while ((n = ::read(read_fd_, buffer, sizeof(buffer))) > 0 ||
           (n < 0 && errno == EINTR)) {
      for (ssize_t i = 0; i < n; ++i) signals.push_back(buffer[i]);
    }
    return signals;
  }

 private:
  explicit SignalCatcher(const int fds[2])
      : read_fd_(fds[0]), write_fd_(fds[1]) {
    std::memset(&saved_int_, 0, sizeof(saved_int_));
    std::memset(&saved_term_, 0, sizeof(saved_term_));
  }

  const int read_fd_;
  const int write_fd_;
  struct sigaction saved_int_;
  struct sigaction saved_term_;
};

std::string SignalName(int signo) {
  const char* abbrev = ::sigabbrev_np(signo);
  return abbrev != nullptr ? std::string("SIG") + abbrev
                           : "signal " + std::to_string(signo);
}

std::string JoinArgv(const std::vector<std::string>& argv) {
  std::string text;
  for (const std::string& arg : argv) {
    if (!text.empty()) text += ' ';
    text += arg;
  }
  return text;
}

struct Child {
  std::string name;  // "server 0", "worker 1", "evaluator"
  bool is_server = false;
  bool is_evaluator = false;  // ps_worker --evaluator (cluster.evaluator)
  uint32_t index = 0;     // shard or rank
  // Servers: the replica it is, whose address it holds for good
  // (ReplicaAddress: 0 the shard's own, j >= 1 backup j's), whichever role
  // it has: the primary of its shard is the replica at primary_slot_.
  uint32_t replica = 0;
  bool rejoin_on_exit = false;  // stopped because it followed an old primary
  uint32_t restarts = 0;  // times restarted (a server after a crash, a worker under drop)
  std::unique_ptr<Subprocess> process;
  LineReader reader;
  bool output_open = true;
  bool exited = false;  // its exit has been handled
  bool killed = false;  // we sent it SIGKILL
};

// The state of one Launcher::Run().
class JobRun {
 public:
  JobRun(const JobOptions& job, const std::string& config_path,
         const LauncherOptions& options)
      : job_(job), config_path_(config_path), options_(options) {}

  StatusOr<int> Run();

 private:
  enum class Outcome { kUndecided, kSucceeded, kFailed, kSignalled };

  void Emit(std::string_view line);
  void Say(const std::string& message) { Emit("[launch] " + message); }

  // `restart`: a server restarted while the job runs (it restores its own
  // newest generation and is told which workers already finished).
  // `join`: a backup that takes its state from the running primary
  // (ps_server --join).
  std::vector<std::string> CommandFor(bool is_server, uint32_t index, bool restart = false,
                                      uint32_t replica = 0, bool join = false,
                                      bool evaluator = false) const;
  Status StartAll();
  // A server died by a signal while the job runs: starts it again when the
  // job allows (checkpoints, liveness.server_restarts). False when it
  // cannot be restarted; `why_not` says why.
  bool MaybeRestart(Child& child, const std::string& how, std::string* why_not);
  // replication.factor >= 2: a replica died by a signal. This launcher is
  // the authority over each shard's replicas: for a dead primary it
  // promotes the next live backup on the ring (which serves at its own address), for a
  // dead backup it tells the primary to stop waiting for it, each at a new
  // epoch. False when neither is possible (`why_not` says why).
  bool FailOver(Child& child, const std::string& how, std::string* why_not);
  // Starts `child` (exited) again as a backup of its shard at its own address
  // (--join), and tells the primary to send it a copy (a new epoch); it is a
  // full replica once it applied the copy. Within liveness.server_restarts.
  bool Rejoin(Child& child, const std::string& how, std::string* why_not);
  // Sends MEMBERSHIP to replica `replica` of shard `shard`.
  Status SendMembership(uint32_t shard, uint32_t replica, uint32_t flags, uint32_t backup,
                        int64_t epoch);
  // Starts `child` again unless it was restarted `limit` times already
  // (`setting` names the limit); says so with `then`, what happens next.
  bool Respawn(Child& child, uint32_t limit, const std::string& setting, const std::string& how,
               const std::string& then, std::string* why_not, uint32_t replica = 0,
               bool join = false);
  // A worker failed (exit code or signal): under liveness.on_dead_worker
  // drop the job goes on (restarting it when liveness.worker_restarts
  // allows); under fail the job stops naming it.
  void WorkerFailed(Child& child, const std::string& how);
  // Every worker finished or was dropped: the job ends.
  void MaybeFinish();
  // The job's result, the last line of the run.
  void SayResult();
  void Loop(SignalCatcher* catcher);

  void PumpOutput(Child& child, size_t max_bytes);
  void HandleExit(Child& child, int wait_status);
  void HandleSignal(int signo);
  void BeginStop();
  void KillAll(const std::string& why);
  bool AnyRunning() const;

  const JobOptions& job_;
  const std::string& config_path_;
  const LauncherOptions& options_;

  std::vector<Child> children_;
  int64_t restore_clock_ = -1;  // --restore-clock for every server; -1: none
  // Per shard: the epoch of its replicas, and which replica is its primary
  // (0 at the start; a promoted backup's after a fail-over).
  std::vector<int64_t> epoch_;
  std::vector<uint32_t> primary_slot_;
  Outcome outcome_ = Outcome::kUndecided;
  int exit_code_ = 0;
  uint32_t workers_succeeded_ = 0;
  bool evaluator_failed_ = false;  // it exited with an error or a signal
  std::vector<uint32_t> finished_workers_;  // ranks that exited with code 0
  std::vector<uint32_t> dropped_workers_;   // ranks that failed under policy drop
  std::string failure_;  // why the job failed, for the result line
  bool stopping_ = false;
  bool killed_all_ = false;
  Clock::time_point deadline_;
};

void JobRun::Emit(std::string_view line) {
  if (options_.output) {
    options_.output(line);
    return;
  }
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

std::vector<std::string> JobRun::CommandFor(bool is_server, uint32_t index, bool restart,
                                            uint32_t replica, bool join, bool evaluator) const {
  const std::vector<std::string>& prefix =
      is_server ? options_.server_command : options_.worker_command;
  std::vector<std::string> argv = prefix;
  if (argv.empty()) {
    const char* binary = is_server ? "ps_server" : "ps_worker";
    argv.push_back(options_.bin_dir.empty() ? binary
                                            : options_.bin_dir + "/" + binary);
  }
  argv.insert(argv.end(), {"--config", config_path_});
  if (evaluator) {
    argv.push_back("--evaluator");
  } else {
    argv.insert(argv.end(), {is_server ? "--shard" : "--rank", std::to_string(index)});
  }
  if (replica > 0 || join) argv.insert(argv.end(), {"--replica", std::to_string(replica)});
  if (join) argv.push_back("--join");
  if (!options_.log_level.empty()) {
    argv.insert(argv.end(), {"--log-level", options_.log_level});
  }
  // Every worker runs on this host: each gets its share of the cores for
  // its BLAS, not all of them (worker.cpu_threads 0 = auto).
  if (!is_server && job_.worker.cpu_threads == 0) {
    argv.insert(argv.end(),
                {"--cpu-threads", std::to_string(WorkerCpuShare(job_.cluster.workers +
                                                                (job_.cluster.evaluator ? 1 : 0)))});
  }
  if (is_server && restore_clock_ >= 0 && !restart) {
    argv.insert(argv.end(), {"--restore-clock", std::to_string(restore_clock_)});
  }
  if (is_server && restart && !join && !finished_workers_.empty()) {
    std::string ranks;
    for (uint32_t r : finished_workers_) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
    argv.insert(argv.end(), {"--left-workers", ranks});
  }
  return argv;
}

Status JobRun::StartAll() {
  // Every shard restores the same generation: the newest one they all have.
  if (options_.resume) {
    if (job_.checkpoint.dir.empty()) {
      return FailedPreconditionError("--resume: the job in '" + config_path_ +
                                     "' has no checkpoint.dir, so there is nothing to resume from");
    }
    if (!job_.checkpoint.restore) {
      return FailedPreconditionError("--resume: checkpoint.restore is false in '" + config_path_ +
                                     "'; set it to true to resume");
    }
  }
  PS_ASSIGN_OR_RETURN(restore_clock_, CommonRestoreClock(job_));
  if (options_.resume && restore_clock_ < 0) {
    return FailedPreconditionError("--resume: " + job_.checkpoint.dir +
                                   " holds no checkpoint generation; run without --resume to "
                                   "start the job afresh");
  }
  if (restore_clock_ >= 0) {
    Say("checkpoint: every shard restores clock " + std::to_string(restore_clock_) + " from " +
        job_.checkpoint.dir);
  }
  // Each run starts a new metrics file; the previous run's is kept aside.
  if (!options_.metrics_csv.empty()) {
    StatusOr<bool> moved = MetricsCsv::SetAside(options_.metrics_csv);
    if (!moved.ok()) return moved.status();
    if (*moved) {
      Say("metrics: moved the previous run's " + options_.metrics_csv + " to " +
          options_.metrics_csv + ".prev");
    }
  }
  // Every shard's replicas (backups first: the primaries connect to them),
  // then the workers.
  const auto shards = static_cast<uint32_t>(job_.cluster.servers.size());
  const uint32_t factor = job_.replication.factor;
  epoch_.assign(shards, 0);
  primary_slot_.assign(shards, 0);
  const uint32_t servers = shards * factor;
  const uint32_t processes = servers + job_.cluster.workers;
  const uint32_t total = processes + (job_.cluster.evaluator ? 1 : 0);
  children_.reserve(total);
  for (uint32_t i = 0; i < total; ++i) {
    const bool is_server = i < servers;
    const bool is_evaluator = i == processes;  // last
    const uint32_t replica = is_server ? factor - 1 - i / shards : 0;
    const uint32_t index = is_server ? i % shards : is_evaluator ? 0 : i - servers;
    std::string name = is_evaluator ? std::string("evaluator")
                                    : (is_server ? "server " : "worker ") + std::to_string(index) +
                                          (replica > 0 ? " backup " + std::to_string(replica) : "");
    SubprocessOptions spawn;
    spawn.argv = CommandFor(is_server, index, /*restart=*/false, replica, /*join=*/false,
                            is_evaluator);
    spawn.capture_output = true;
    StatusOr<std::unique_ptr<Subprocess>> process = Subprocess::Spawn(spawn);
    if (!process.ok()) {
      return process.status().WithContext("launcher: " + name);
    }
    Say("started " + name + " (pid " + std::to_string((*process)->pid()) +
        "): " + JoinArgv(spawn.argv));
    Child& child = children_.emplace_back();
    child.name = std::move(name);
    child.is_server = is_server;
    child.is_evaluator = is_evaluator;
    child.index = index;
    child.replica = replica;
    child.process = std::move(process).value();
  }
  return Status::Ok();
}

bool JobRun::AnyRunning() const {
  return std::any_of(children_.begin(), children_.end(),
                     [](const Child& c) { return !c.exited; });
}

void JobRun::PumpOutput(Child& child, size_t max_bytes) {
  if (!child.output_open) return;
  std::vector<std::string> lines;
  StatusOr<bool> eof =
      child.reader.ReadFrom(child.process->output_fd(), &lines, max_bytes);
  const std::string prefix = "[" + child.name + "] ";
  for (const std::string& line : lines) Emit(prefix + line);
  if (!eof.ok()) {
    Say("cannot read the output of " + child.name + ": " +
        eof.status().ToString());
    child.output_open = false;
  } else if (*eof) {
    child.output_open = false;
  }
}

void JobRun::BeginStop() {
  if (stopping_) return;
  stopping_ = true;
  deadline_ = Clock::now() + options_.grace;
  for (Child& child : children_) {
    if (child.exited) continue;
    Status sent = child.process->Signal(SIGTERM);
    if (!sent.ok()) Say("cannot stop " + child.name + ": " + sent.ToString());
  }
}

void JobRun::KillAll(const std::string& why) {
  killed_all_ = true;
  for (Child& child : children_) {
    if (child.exited) continue;
    Say(child.name + " " + why + "; sending SIGKILL");
    child.killed = true;
    child.process->Signal(SIGKILL).IgnoreError();
  }
}

Status JobRun::SendMembership(uint32_t shard, uint32_t replica, uint32_t flags, uint32_t backup,
                              int64_t epoch) {
  JobOptions job = job_;
  job.client.request_timeout_ms = 5000;
  std::vector<std::string> endpoints;
  for (uint32_t s = 0; s < job.cluster.servers.size(); ++s) {
    PS_ASSIGN_OR_RETURN(const HostPort where,
                        ReplicaAddress(job, s, s == shard ? replica : primary_slot_[s]));
    endpoints.push_back(ConnectEndpoint(where));
  }
  PS_ASSIGN_OR_RETURN(auto control, ControlClient::Create(job, endpoints));
  return control->Membership(shard, flags, backup, epoch);
}

bool JobRun::FailOver(Child& child, const std::string& how, std::string* why_not) {
  const uint32_t shard = child.index;
  auto live = [&](uint32_t replica) -> Child* {
    for (Child& c : children_) {
      if (c.is_server && c.index == shard && c.replica == replica && !c.exited) return &c;
    }
    return nullptr;
  };
  const auto start = Clock::now();
  const uint32_t primary = primary_slot_[shard];
  const uint32_t factor = job_.replication.factor;
  if (child.replica != primary) {
    // A backup: the primary goes on without it, and it comes back as a
    // backup that takes a copy.
    if (live(primary) == nullptr) {
      *why_not = "shard " + std::to_string(shard) + " has no primary left";
      return false;
    }
    const int64_t epoch = ++epoch_[shard];
    Status dropped = SendMembership(shard, primary, kMembershipDropBackup, child.replica, epoch);
    if (!dropped.ok()) {
      *why_not = "its shard's primary did not take the news: " + dropped.ToString();
      return false;
    }
    Say(how + "; shard " + std::to_string(shard) + "'s primary goes on without it (epoch " +
        std::to_string(epoch) + ")");
    return Rejoin(child, how, why_not);
  }
  // The next live replica on the ring after the dead primary.
  for (uint32_t k = 1; k < factor; ++k) {
    const uint32_t j = (primary + k) % factor;
    Child* backup = live(j);
    if (backup == nullptr) continue;
    const int64_t epoch = ++epoch_[shard];
    Status promoted = SendMembership(shard, j, kMembershipPromote, 0, epoch);
    if (!promoted.ok()) {
      // Still taking a copy (it holds no whole state), or gone.
      Say(how + "; " + backup->name + " cannot be promoted: " + promoted.ToString());
      continue;
    }
    primary_slot_[shard] = j;
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    char took[32];
    std::snprintf(took, sizeof(took), "%.0f", ms);
    Say(how + "; " + backup->name + " is shard " + std::to_string(shard) +
        "'s primary now (epoch " + std::to_string(epoch) + ", promoted in " + took +
        " ms) and serves at its own address; the workers find it there and send it what was "
        "not acknowledged");
    // The other backups held the old primary's log, not the new one's:
    // they come back as backups that take a copy.
    for (Child& c : children_) {
      if (c.is_server && c.index == shard && c.replica != j && !c.exited) {
        Say("stopping " + c.name + ": it follows the old primary; it joins again after");
        c.rejoin_on_exit = true;
        c.process->Signal(SIGTERM).IgnoreError();
      }
    }
    // The dead primary comes back as a backup, at its own address.
    return Rejoin(child, how, why_not);
  }
  *why_not = "no replica of shard " + std::to_string(shard) + " is left to take over";
  return false;
}

bool JobRun::Rejoin(Child& child, const std::string& how, std::string* why_not) {
  const uint32_t shard = child.index;
  const uint32_t slot = child.replica;  // it comes back at its own address
  if (!Respawn(child, job_.liveness.server_restarts, "liveness.server_restarts", how,
               "it joins shard " + std::to_string(shard) + " as backup " + std::to_string(slot) +
                   " and takes a copy from its primary",
               why_not, slot, /*join=*/true)) {
    // The shard goes on with fewer copies.
    Say(child.name + " is not started again (" + *why_not + "); shard " + std::to_string(shard) +
        " goes on with fewer replicas");
    return true;
  }
  const int64_t epoch = ++epoch_[shard];
  Status added =
      SendMembership(shard, primary_slot_[shard], kMembershipAddBackup, slot, epoch);
  if (!added.ok()) {
    *why_not = "shard " + std::to_string(shard) + "'s primary did not take backup " +
               std::to_string(slot) + ": " + added.ToString();
    return false;
  }
  Say("shard " + std::to_string(shard) + "'s primary sends " + child.name +
      " a copy (epoch " + std::to_string(epoch) + ")");
  return true;
}

bool JobRun::MaybeRestart(Child& child, const std::string& how, std::string* why_not) {
  if (job_.replication.factor > 1 &&
      job_.replication.authority == ReplicationAuthority::kEtcd) {
    // etcd decides who serves (a backup takes over once the dead one's
    // lease lapses); started again, it asks etcd and rejoins as a backup.
    return Respawn(child, job_.liveness.server_restarts, "liveness.server_restarts", how,
                   "etcd (replication.authority) decides which replica serves; it rejoins as "
                   "a backup",
                   why_not, child.replica);
  }
  if (job_.replication.factor > 1) return FailOver(child, how, why_not);
  if (job_.checkpoint.dir.empty() || !job_.checkpoint.restore) {
    *why_not = "it cannot be restarted without checkpoints (set checkpoint.dir, and "
               "checkpoint.restore: true, to let ps_launch restart a crashed server)";
    return false;
  }
  return Respawn(child, job_.liveness.server_restarts, "liveness.server_restarts", how,
                 "it restores its newest checkpoint and the workers go on", why_not);
}

bool JobRun::Respawn(Child& child, uint32_t limit, const std::string& setting,
                     const std::string& how, const std::string& then, std::string* why_not,
                     uint32_t replica, bool join) {
  if (child.restarts >= limit) {
    *why_not = limit == 0 ? "restarts are off (" + setting + ": 0)"
                          : "it was restarted " + std::to_string(child.restarts) +
                                " times already (" + setting + ")";
    return false;
  }
  SubprocessOptions spawn;
  spawn.argv = CommandFor(child.is_server, child.index, /*restart=*/true, replica, join,
                          child.is_evaluator);
  spawn.capture_output = true;
  StatusOr<std::unique_ptr<Subprocess>> process = Subprocess::Spawn(spawn);
  if (!process.ok()) {
    *why_not = "restarting it failed: " + process.status().ToString();
    return false;
  }
  ++child.restarts;
  Say(how + "; restarted it (restart " + std::to_string(child.restarts) + " of " +
      std::to_string(limit) + ", pid " + std::to_string((*process)->pid()) +
      "): " + then + ": " + JoinArgv(spawn.argv));
  child.process = std::move(process).value();
  child.output_open = true;
  child.exited = false;
  child.killed = false;
  return true;
}

void JobRun::HandleExit(Child& child, int wait_status) {
  child.exited = true;
  const std::string how = child.name + " " + DescribeWaitStatus(wait_status);
  const bool success = ExitedSuccessfully(wait_status);
  if (!stopping_) {
    // A server that died by a signal crashed (or was killed): it comes back
    // from its checkpoint. One that exited with an error code found a
    // problem a restart would meet again.
    std::string why_not;
    if (child.is_server && child.rejoin_on_exit) {
      // Stopped by this launcher: it followed a primary that is gone.
      child.rejoin_on_exit = false;
      if (Rejoin(child, how, &why_not)) return;
      Say(how + "; " + why_not + "; stopping the job");
      failure_ = how;
      outcome_ = Outcome::kFailed;
      exit_code_ = 1;
      BeginStop();
      return;
    }
    if (child.is_evaluator) {
      // Training never waits for it. It holds no state: started again, it
      // reads from the job's current clock on. Past its restarts a failed
      // evaluator costs the job its evaluations, and the result says so.
      if (success) {
        Say(how);
      } else {
        if (Respawn(child, job_.liveness.worker_restarts, "liveness.worker_restarts", how,
                    "it evaluates from the job's current clock on", &why_not)) {
          return;
        }
        Say(how + "; training goes on without evaluations (" + why_not +
            "; the shards stop waiting for it after liveness.timeout_ms)");
        evaluator_failed_ = true;
      }
      MaybeFinish();
      return;
    }
    if (child.is_server && WIFSIGNALED(wait_status)) {
      if (MaybeRestart(child, how, &why_not)) return;
      why_not = "; " + why_not;
    }
    if (!success && !child.is_server) {
      WorkerFailed(child, how);
    } else if (!success) {
      Say(how + why_not + "; stopping the job");
      failure_ = how;
      outcome_ = Outcome::kFailed;
      exit_code_ = 1;
      BeginStop();
    } else if (child.is_server) {
      // Servers exit by themselves once every worker has said goodbye
      // (server.exit_when_workers_leave), which may be just before the
      // last worker process exits; or an operator ran ps_ctl shutdown.
      // Workers that still need it fail on their own.
      Say(how);
    } else {
      Say(how);
      finished_workers_.push_back(child.index);
      ++workers_succeeded_;
      MaybeFinish();
    }
    return;
  }
  // Stopping: after a success, a server must end by exit code 0 or by the
  // SIGTERM it was sent; anything else is a shutdown bug.
  const bool clean =
      success || (WIFSIGNALED(wait_status) && WTERMSIG(wait_status) == SIGTERM);
  if (outcome_ == Outcome::kSucceeded && child.is_server && !clean) {
    Say(how + " while shutting down; the job fails");
    exit_code_ = 1;
  } else {
    Say(how);
  }
}

void JobRun::WorkerFailed(Child& child, const std::string& how) {
  const LivenessOptions& liveness = job_.liveness;
  if (liveness.on_dead_worker != DeadWorkerPolicy::kDrop || liveness.heartbeat_ms == 0) {
    Say(how + "; stopping the job (liveness.on_dead_worker: fail; with drop the job would go on "
              "without it)");
    failure_ = how;
    outcome_ = Outcome::kFailed;
    exit_code_ = 1;
    BeginStop();
    return;
  }
  std::string why_not;
  if (Respawn(child, liveness.worker_restarts, "liveness.worker_restarts", how,
              "it rejoins at the clock the servers hold for it (liveness.on_dead_worker: drop)",
              &why_not)) {
    return;
  }
  Say(how + "; the job goes on without it (liveness.on_dead_worker: drop; " + why_not + ")");
  dropped_workers_.push_back(child.index);
  MaybeFinish();
}

void JobRun::MaybeFinish() {
  if (workers_succeeded_ + dropped_workers_.size() < job_.cluster.workers) return;
  for (const Child& child : children_) {
    if (child.is_evaluator && !child.exited) {
      // Its last evaluation reads the final model; the servers serve it
      // until it leaves, then exit.
      Say("all workers are done; waiting for the evaluator's last evaluation");
      return;
    }
  }
  if (workers_succeeded_ == 0) {
    Say("every worker failed; stopping the servers");
    failure_ = "every worker failed (liveness.on_dead_worker: drop)";
    outcome_ = Outcome::kFailed;
    exit_code_ = 1;
  } else {
    Say(dropped_workers_.empty()
            ? "all " + std::to_string(workers_succeeded_) + " workers finished; stopping the servers"
            : std::to_string(workers_succeeded_) + " of " + std::to_string(job_.cluster.workers) +
                  " workers finished, the others were dropped; stopping the servers");
    outcome_ = Outcome::kSucceeded;
    exit_code_ = evaluator_failed_ ? 1 : 0;
  }
  BeginStop();
}

void JobRun::SayResult() {
  std::string dropped;
  for (uint32_t r : dropped_workers_) dropped += (dropped.empty() ? "" : ", ") + std::to_string(r);
  switch (outcome_) {
    case Outcome::kSucceeded:
      if (evaluator_failed_) {
        Say("job failed: the workers finished, but the evaluator failed, so the job has no "
            "final evaluation (exit 1)");
      } else if (exit_code_ != 0) {
        Say("job failed: the workers finished, but a server did not shut down cleanly (exit 1)");
      } else if (dropped.empty()) {
        Say("job succeeded: all " + std::to_string(workers_succeeded_) + " workers finished (exit 0)");
      } else {
        Say("job succeeded without worker" + std::string(dropped_workers_.size() > 1 ? "s " : " ") +
            dropped + ": " + std::to_string(workers_succeeded_) + " of " +
            std::to_string(job_.cluster.workers) +
            " workers finished (liveness.on_dead_worker: drop) (exit 0)");
      }
      return;
    case Outcome::kFailed:
      Say("job failed: " + failure_ + " (exit " + std::to_string(exit_code_) + ")");
      return;
    case Outcome::kSignalled:
      Say("job stopped by a signal (exit " + std::to_string(exit_code_) + ")");
      return;
    case Outcome::kUndecided:
      Say("job ended with no result (exit " + std::to_string(exit_code_) + ")");
      return;
  }
}

void JobRun::HandleSignal(int signo) {
  if (!stopping_) {
    Say("received " + SignalName(signo) + "; stopping the job");
    outcome_ = Outcome::kSignalled;
    exit_code_ = 128 + signo;
    BeginStop();
  } else if (!killed_all_) {
    Say("received " + SignalName(signo) + " while stopping");
    KillAll("still running after a second signal");
  }
}

void JobRun::Loop(SignalCatcher* catcher) {
  std::vector<pollfd> fds;
  while (AnyRunning()) {
    fds.clear();
    if (catcher != nullptr) fds.push_back({catcher->read_fd(), POLLIN, 0});
    bool need_tick = false;
    for (const Child& child : children_) {
      if (child.output_open) {
        fds.push_back({child.process->output_fd(), POLLIN, 0});
      }
      if (!child.exited) {
        if (child.process->exit_fd() >= 0) {
          fds.push_back({child.process->exit_fd(), POLLIN, 0});
        } else {
          need_tick = true;
        }
      }
    }
    milliseconds timeout(-1);
    if (need_tick) timeout = kReapTick;
    if (stopping_ && !killed_all_) {
      // Round up so that the wake-up is not just before the deadline.
      auto left = std::chrono::ceil<milliseconds>(deadline_ - Clock::now());
      left = std::max(left, milliseconds(0));
      timeout = timeout.count() < 0 ? left : std::min(timeout, left);
    }
    int ready = ::poll(fds.data(), fds.size(),
                       static_cast<int>(std::min<milliseconds::rep>(
                           timeout.count(), 1 << 30)));
    if (ready < 0 && errno != EINTR) {
      // Cannot happen with valid descriptors; avoid spinning if it does.
      Say(std::string("poll failed: ") + std::strerror(errno));
      ::usleep(10000);
    }

    if (catcher != nullptr) {
      for (int signo : catcher->Drain()) HandleSignal(signo);
    }
    for (Child& child : children_) {
      if (child.output_open) PumpOutput(child, kReadChunk);
    }
    for (Child& child : children_) {
      if (child.exited) continue;
      std::optional<int> status = child.process->TryWait();
      if (!status) continue;
      // Print what it wrote before saying how it ended.
      PumpOutput(child, kDrainLimit);
      if (std::optional<std::string> tail = child.reader.Flush()) {
        Emit("[" + child.name + "] " + *tail);
      }
      HandleExit(child, *status);
    }
    if (stopping_ && !killed_all_ && Clock::now() >= deadline_ &&
        AnyRunning()) {
      KillAll("still running " + std::to_string(options_.grace.count()) +
              " ms after SIGTERM");
    }
  }
  // Everything is reaped and its group killed; take what is left in the
  // pipes without waiting for writers that escaped the group.
  for (Child& child : children_) {
    PumpOutput(child, kDrainLimit);
    if (std::optional<std::string> tail = child.reader.Flush()) {
      Emit("[" + child.name + "] " + *tail);
    }
  }
}

StatusOr<int> JobRun::Run() {
  if (job_.cluster.servers.empty()) {
    return InvalidArgumentError("launcher: cluster.servers is empty in '" +
                                config_path_ +
                                "'; list one host:port per shard");
  }
  if (job_.cluster.workers == 0) {
    return InvalidArgumentError("launcher: cluster.workers is 0 in '" +
                                config_path_ + "'; the job needs >= 1 worker");
  }
  if (config_path_.empty()) {
    return InvalidArgumentError("launcher: empty config path");
  }
  const uint64_t processes =
      job_.cluster.servers.size() * uint64_t{job_.replication.factor} + job_.cluster.workers +
      (job_.cluster.evaluator ? 1 : 0);
  const uint32_t limit = MaxLaunchProcesses(options_.max_processes);
  if (processes > limit) {
    return InvalidArgumentError(
        "launcher: '" + config_path_ + "' has " + std::to_string(processes) + " processes (" +
        std::to_string(job_.cluster.servers.size()) + " servers + " +
        std::to_string(job_.cluster.workers) +
        " workers" + (job_.cluster.evaluator ? std::string(" + the evaluator") : "") +
        ") and ps_launch starts every one on this host; the limit is " +
        std::to_string(limit) +
        (options_.max_processes == 0 ? " (16 per hardware thread, at least 64)" : "") +
        ". Run a job this size across hosts (mpirun, srun, Kubernetes), lower cluster.workers, "
        "or raise the limit with --max-processes");
  }
  if (options_.grace < milliseconds(0)) {
    return InvalidArgumentError("launcher: grace period " +
                                std::to_string(options_.grace.count()) +
                                " ms is negative");
  }
  std::unique_ptr<SignalCatcher> catcher;
  if (options_.handle_signals) {
    PS_ASSIGN_OR_RETURN(catcher, SignalCatcher::Install());
  }

  Status started = StartAll();
  if (!started.ok()) {
    Say(started.ToString() + "; stopping the job");
    outcome_ = Outcome::kFailed;
    exit_code_ = 1;
    BeginStop();
  }
  if (!started.ok()) failure_ = started.ToString();
  Loop(catcher.get());
  SayResult();
  if (!started.ok()) return started;
  return exit_code_;
}

}  // namespace

uint32_t MaxLaunchProcesses(uint32_t max_processes, unsigned hardware_threads) {
  if (max_processes != 0) return max_processes;
  return std::max<uint32_t>(64, 16 * std::max(hardware_threads, 1u));
}

uint32_t WorkerCpuShare(uint32_t workers, unsigned hardware_threads) {
  return std::max<uint32_t>(1, std::max(hardware_threads, 1u) / std::max(workers, 1u));
}

Launcher::Launcher(JobOptions job, std::string config_path,
                   LauncherOptions options)
    : job_(std::move(job)),
      config_path_(std::move(config_path)),
      options_(std::move(options)) {}

StatusOr<int> Launcher::Run() {
  JobRun run(job_, config_path_, options_);
  return run.Run();
}

StatusOr<int64_t> CommonRestoreClock(const JobOptions& job) {
  if (job.checkpoint.dir.empty() || !job.checkpoint.restore) return -1;
  std::vector<std::vector<int64_t>> per_shard;
  bool any = false;
  for (size_t s = 0; s < job.cluster.servers.size(); ++s) {
    PS_ASSIGN_OR_RETURN(auto dir,
                        CheckpointDir::Open(ShardCheckpointDir(job.checkpoint.dir,
                                                               static_cast<uint32_t>(s))));
    PS_ASSIGN_OR_RETURN(std::vector<int64_t> clocks, dir->Generations());
    any = any || !clocks.empty();
    per_shard.push_back(std::move(clocks));
  }
  if (!any) return -1;  // a new job
  for (auto it = per_shard[0].rbegin(); it != per_shard[0].rend(); ++it) {
    bool everywhere = true;
    for (const auto& clocks : per_shard) {
      everywhere = everywhere && std::binary_search(clocks.begin(), clocks.end(), *it);
    }
    if (everywhere) return *it;
  }
  std::string have;
  for (size_t s = 0; s < per_shard.size(); ++s) {
    have += "; shard " + std::to_string(s) + ":";
    if (per_shard[s].empty()) have += " none";
    for (int64_t c : per_shard[s]) have += " " + std::to_string(c);
  }
  return FailedPreconditionError(
      "checkpoint.dir " + job.checkpoint.dir +
      ": no checkpoint clock is held by every shard, so the job cannot resume consistently" + have +
      "; move the folder aside to start the job afresh");
}

}  // namespace ps
