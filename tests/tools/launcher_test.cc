// Drives the Launcher with /bin/sh scripts in place of ps_server and
// ps_worker. The scripts get the launcher's flags as positional arguments:
// $1 --config, $2 <file>, $3 --shard/--rank, $4 <index>, $5 --log-level,
// $6 <level>. Servers and workers synchronise through files in a temporary
// directory, never through sleeps, so the tests are deterministic.
#include "tools/launcher.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/subprocess.h"
#include "tests/util/status_matchers.h"
#include "tests/util/test_job.h"
#include "tools/launch_plan.h"

namespace ps {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// A server: stops cleanly on SIGTERM, says it is up, then marks itself ready.
// Short sleeps: dash runs a trap only between commands, and a SIGTERM that
// lands before `sleep` is forked would otherwise wait for all of it.
constexpr char kServer[] = R"(trap 'echo "stopping on TERM"; exit 0' TERM
echo "up shard=$4 config=$2 level=$6"
touch "@DIR@/server_$4"
while :; do sleep 0.05; done
)";

// A worker: waits for server 0, then finishes with code 0.
constexpr char kWorker[] =
    R"(while [ ! -e "@DIR@/server_0" ]; do sleep 0.01; done
echo "rank $4 done"
printf 'last line without newline'
)";

// kWorker for jobs of two servers: waits for both, so neither is stopped at
// the end of the job before it said it is up (and set its TERM trap).
constexpr char kWorkerOfTwoServers[] =
    R"(while [ ! -e "@DIR@/server_0" ] || [ ! -e "@DIR@/server_1" ]; do sleep 0.01; done
echo "rank $4 done"
printf 'last line without newline'
)";

// A worker that runs until stopped, once server 0 is up.
constexpr char kWaitingWorker[] =
    R"(while [ ! -e "@DIR@/server_0" ]; do sleep 0.01; done
echo "waiting"
sleep 10
)";

// Lines received from the launcher, thread-safe.
class Lines {
 public:
  void Add(std::string_view line) {
    std::lock_guard<std::mutex> lock(mu_);
    lines_.emplace_back(line);
    cv_.notify_all();
  }

  std::vector<std::string> Get() const {
    std::lock_guard<std::mutex> lock(mu_);
    return lines_;
  }

  bool Contains(const std::string& line) const {
    std::lock_guard<std::mutex> lock(mu_);
    return std::find(lines_.begin(), lines_.end(), line) != lines_.end();
  }

  // Waits until `line` has been received.
  bool WaitFor(const std::string& line,
               milliseconds timeout = milliseconds(3000)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] {
      return std::find(lines_.begin(), lines_.end(), line) != lines_.end();
    });
  }

  // Pids from the "[launch] started <name> (pid <pid>): ..." and
  // "[launch] ...; restarted it (restart <n> of <m>, pid <pid>): ..." lines.
  std::vector<pid_t> Pids() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<pid_t> pids;
    for (const std::string& line : lines_) {
      if (line.rfind("[launch] ", 0) != 0) continue;
      size_t at = line.rfind("pid ", line.find("): "));
      if (at != std::string::npos && (line.rfind("[launch] started ", 0) == 0 ||
                                      line.find("restarted it (") != std::string::npos)) {
        pids.push_back(static_cast<pid_t>(std::atol(line.c_str() + at + 4)));
      }
    }
    return pids;
  }

  std::string Dump() const {
    std::string text;
    for (const std::string& line : Get()) text += line + "\n";
    return text;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> lines_;
};

// Live (non-zombie) processes whose process group is `pgid`.
int LiveMembersOfGroup(pid_t pgid) {
  int live = 0;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return 0;
  while (dirent* entry = ::readdir(proc)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    std::ifstream stat(std::string("/proc/") + entry->d_name + "/stat");
    std::string content;
    std::getline(stat, content);  // "<pid> (<comm>) <state> <ppid> <pgrp>"
    size_t paren = content.rfind(')');
    if (paren == std::string::npos) continue;
    char state = 0;
    long ppid = 0;
    long pgrp = 0;
    if (std::sscanf(content.c_str() + paren + 1, " %c %ld %ld", &state, &ppid,
                    &pgrp) != 3) {
      continue;
    }
    if (pgrp == pgid && state != 'Z' && state != 'X') ++live;
  }
  ::closedir(proc);
  return live;
}

// Every recorded child is reaped, and nothing is left running in its group.
void ExpectNoLeftovers(const std::vector<pid_t>& pids) {
  for (pid_t pid : pids) {
    EXPECT_EQ(::kill(pid, 0), -1) << "pid " << pid << " still exists";
    EXPECT_EQ(errno, ESRCH) << "pid " << pid;
    const auto deadline = Clock::now() + milliseconds(2000);
    while (LiveMembersOfGroup(pid) > 0 && Clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(5));
    }
    EXPECT_EQ(LiveMembersOfGroup(pid), 0) << "group " << pid;
  }
}

class LauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/ps_launcher_test_XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
    config_ = dir_ + "/job.yaml";
  }

  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  static JobOptions Job(int servers, uint32_t workers) {
    return TestJob().Servers(static_cast<uint32_t>(servers), 5000).Workers(workers).Build();
  }

  std::vector<std::string> Sh(std::string script) const {
    for (size_t at; (at = script.find("@DIR@")) != std::string::npos;) {
      script.replace(at, 5, dir_);
    }
    return {"/bin/sh", "-c", script, "sh"};
  }

  LauncherOptions Options(const std::string& server_script,
                          const std::string& worker_script) {
    LauncherOptions options;
    options.server_command = Sh(server_script);
    options.worker_command = Sh(worker_script);
    options.grace = milliseconds(2000);
    options.handle_signals = false;
    options.output = [this](std::string_view line) { lines_.Add(line); };
    return options;
  }

  std::string dir_;
  std::string config_;
  Lines lines_;
};

TEST_F(LauncherTest, PrefixesEveryLineWithItsProcess) {
  Launcher launcher(Job(2, 2), config_, Options(kServer, kWorkerOfTwoServers));
  StatusOr<int> code = launcher.Run();
  ASSERT_OK(code);
  EXPECT_EQ(*code, 0) << lines_.Dump();
  for (const std::string shard : {"0", "1"}) {
    EXPECT_TRUE(lines_.Contains("[server " + shard + "] up shard=" + shard +
                                " config=" + config_ + " level=info"))
        << lines_.Dump();
    EXPECT_TRUE(
        lines_.Contains("[worker " + shard + "] rank " + shard + " done"))
        << lines_.Dump();
    // A partial last line comes out when the child exits.
    EXPECT_TRUE(
        lines_.Contains("[worker " + shard + "] last line without newline"))
        << lines_.Dump();
  }
  ExpectNoLeftovers(lines_.Pids());
}

TEST_F(LauncherTest, StartsServersFirstWithTheirFlags) {
  Launcher launcher(Job(2, 1), config_, Options(kServer, kWorker));
  StatusOr<int> code = launcher.Run();
  ASSERT_OK(code);
  std::vector<std::string> started;
  for (const std::string& line : lines_.Get()) {
    if (line.rfind("[launch] started ", 0) == 0) started.push_back(line);
  }
  ASSERT_EQ(started.size(), 3u) << lines_.Dump();
  EXPECT_NE(started[0].find("started server 0 "), std::string::npos);
  EXPECT_NE(started[1].find("started server 1 "), std::string::npos);
  EXPECT_NE(started[2].find("started worker 0 "), std::string::npos);
  EXPECT_NE(
      started[1].find("--config " + config_ + " --shard 1 --log-level info"),
      std::string::npos)
      << started[1];
  EXPECT_NE(
      started[2].find("--config " + config_ + " --rank 0 --log-level info"),
      std::string::npos)
      << started[2];
  // worker.cpu_threads 0 (auto): the worker gets its share of this host.
  EXPECT_NE(started[2].find(" --cpu-threads " + std::to_string(WorkerCpuShare(1))),
            std::string::npos)
      << started[2];
  EXPECT_EQ(started[1].find("--cpu-threads"), std::string::npos) << started[1];
  ExpectNoLeftovers(lines_.Pids());
}

TEST(WorkerCpuShareTest, EqualShareOfTheHostAtLeastOne) {
  EXPECT_EQ(WorkerCpuShare(1, 16), 16u);
  EXPECT_EQ(WorkerCpuShare(4, 16), 4u);
  EXPECT_EQ(WorkerCpuShare(3, 16), 5u);
  EXPECT_EQ(WorkerCpuShare(4, 2), 1u);
  EXPECT_EQ(WorkerCpuShare(4, 0), 1u);  // unknown hardware
  EXPECT_EQ(WorkerCpuShare(0, 8), 8u);
}

TEST_F(LauncherTest,
       AllWorkersSucceedingStopsServersWithSigtermAndReturnsZero) {
  Launcher launcher(Job(2, 3), config_, Options(kServer, kWorkerOfTwoServers));
  const auto start = Clock::now();
  StatusOr<int> code = launcher.Run();
  ASSERT_OK(code);
  EXPECT_EQ(*code, 0) << lines_.Dump();
  EXPECT_LT(Clock::now() - start, milliseconds(2000));  // no grace expired
  EXPECT_TRUE(
      lines_.Contains("[launch] all 3 workers finished; stopping the servers"))
      << lines_.Dump();
  for (const std::string shard : {"0", "1"}) {
    EXPECT_TRUE(lines_.Contains("[server " + shard + "] stopping on TERM"))
        << lines_.Dump();
    EXPECT_TRUE(
        lines_.Contains("[launch] server " + shard + " exited with code 0"))
        << lines_.Dump();
  }
  EXPECT_TRUE(lines_.Contains("[launch] worker 2 exited with code 0"));
  EXPECT_EQ(lines_.Get().back(), "[launch] job succeeded: all 3 workers finished (exit 0)")
      << lines_.Dump();
  ExpectNoLeftovers(lines_.Pids());
}

// cluster.evaluator: ps_worker --evaluator runs beside the workers, and the
// job ends (the servers are stopped) only once it has exited.
constexpr char kWorkerOrEvaluator[] = R"sh(while [ ! -e "@DIR@/server_0" ]; do sleep 0.01; done
if [ "$3" = --evaluator ]; then
  while [ ! -e "@DIR@/worker_done" ]; do sleep 0.01; done
  sleep 0.3
  echo "last evaluation"
  exit "$(cat "@DIR@/evaluator_code" 2>/dev/null || echo 0)"
fi
echo "rank $4 done"
touch "@DIR@/worker_done"
)sh";

TEST_F(LauncherTest, TheEvaluatorIsStartedAndWaitedForBeforeTheServersStop) {
  JobOptions job = Job(1, 1);
  job.cluster.evaluator = true;
  Launcher launcher(job, config_, Options(kServer, kWorkerOrEvaluator));
  StatusOr<int> code = launcher.Run();
  ASSERT_OK(code);
  EXPECT_EQ(*code, 0) << lines_.Dump();
  const std::vector<std::string> lines = lines_.Get();
  auto at = [&](const std::string& text) {
    return std::find_if(lines.begin(), lines.end(), [&](const std::string& l) {
             return l.find(text) != std::string::npos;
           }) - lines.begin();
  };
  const auto started = at("[launch] started evaluator (pid ");
  ASSERT_LT(started, static_cast<ptrdiff_t>(lines.size())) << lines_.Dump();
  EXPECT_NE(lines[started].find("--config " + config_ + " --evaluator --log-level info"),
            std::string::npos)
      << lines[started];
  EXPECT_LT(at("[launch] all workers are done; waiting for the evaluator's last evaluation"),
            at("[evaluator] last evaluation"))
      << lines_.Dump();
  EXPECT_LT(at("[evaluator] last evaluation"), at("[server 0] stopping on TERM")) << lines_.Dump();
  EXPECT_EQ(lines.back(), "[launch] job succeeded: all 1 workers finished (exit 0)");
  ExpectNoLeftovers(lines_.Pids());
}

TEST_F(LauncherTest, AFailedEvaluatorLetsTheWorkersFinishAndFailsTheJob) {
  JobOptions job = Job(1, 2);
  job.cluster.evaluator = true;
  std::ofstream(dir_ + "/evaluator_code") << "3";
  Launcher launcher(job, config_, Options(kServer, kWorkerOrEvaluator));
  StatusOr<int> code = launcher.Run();
  ASSERT_OK(code);
  EXPECT_EQ(*code, 1) << lines_.Dump();
  // Started again liveness.worker_restarts (3) times, then given up.
  EXPECT_TRUE(lines_.Contains("[launch] evaluator exited with code 3; training goes on without "
                              "evaluations (it was restarted 3 times already "
                              "(liveness.worker_restarts); the shards stop waiting for it after "
                              "liveness.timeout_ms)"))
      << lines_.Dump();
  size_t restarts = 0;
  for (const std::string& line : lines_.Get()) {
    restarts += line.find("evaluator exited with code 3; restarted it (restart ") != std::string::npos &&
                line.find("--evaluator") != std::string::npos;
  }
  EXPECT_EQ(restarts, 3u) << lines_.Dump();
  EXPECT_TRUE(lines_.Contains("[worker 0] rank 0 done")) << lines_.Dump();
  EXPECT_TRUE(lines_.Contains("[worker 1] rank 1 done")) << lines_.Dump();
  EXPECT_EQ(lines_.Get().back(),
            "[launch] job failed: the workers finished, but the evaluator failed, so the job "
            "has no final evaluation (exit 1)");
  ExpectNoLeftovers(lines_.Pids());
}

TEST_F(LauncherTest, FailingWorkerStopsTheOthersAndIsNamed) {
  const std::string worker = R"(
while [ ! -e "@DIR@/server_0" ]; do sleep 0.01; done
if [ "$4" = 1 ]; then echo "rank 1 failing"; exit 3; fi
sleep 10
)";
  Launcher launcher(Job(1, 3), config_, Options(kServer, worker));
  const auto start = Clock::now();
  StatusOr<int> code = launcher.Run();
  ASSERT_OK(code);
  EXPECT_EQ(*code, 1);
  EXPECT_LT(Clock::now() - start, milliseconds(2000));
  EXPECT_TRUE(lines_.Contains("[worker 1] rank 1 failing")) << lines_.Dump();
  EXPECT_TRUE(lines_.Contains("[launch] worker 1 exited with code 3; stopping the job "
                              "(liveness.on_dead_worker: fail; with drop the job would go on "
                              "without it)"))
      << lines_.Dump();
  EXPECT_TRUE(
      lines_.Contains("[launch] worker 0 killed by signal 15 (Terminated)"))
      << lines_.Dump();
  EXPECT_TRUE(lines_.Contains("[server 0] stopping on TERM")) << lines_.Dump();
  EXPECT_EQ(lines_.Get().back(), "[launch] job failed: worker 1 exited with code 3 (exit 1)")
      << lines_.Dump();
  ExpectNoLeftovers(lines_.Pids());
}

// Under on_dead_worker: drop a failed worker is started again and the job
// goes on; the restarted process gets the same flags.
TEST_F(LauncherTest, UnderDropAFailedWorkerIsRestartedAndTheJobGoesOn) {
  const std::string worker = R"(
while [ ! -e "@DIR@/server_0" ]; do sleep 0.01; done
if [ "$4" = 1 ] && [ ! -e "@DIR@/failed_once" ]; then
  touch "@DIR@/failed_once"; echo "rank 1 failing"; exit 3
fi
echo "rank $4 done: $*"
)";
  JobOptions job = Job(1, 3);
  job.liveness.on_dead_worker = DeadWorkerPolicy::kDrop;
  job.liveness.worker_restarts = 1;
  Launcher launcher(job, config_, Options(kServer, worker));
  StatusOr<int> code = launcher.Run();
  ASSERT_OK(code);
  EXPECT_EQ(*code, 0) << lines_.Dump();
  bool restarted = false;
  for (const std::string& line : lines_.Get()) {
    restarted = restarted ||
                line.rfind("[launch] worker 1 exited with code 3; restarted it (restart 1 of 1, "
                           "pid ", 0) == 0;
  }
  EXPECT_TRUE(restarted) << lines_.Dump();
  EXPECT_TRUE(lines_.Contains("[worker 1] rank 1 done: --config " + config_ +
                              " --rank 1 --log-level info --cpu-threads " +
                              std::to_string(WorkerCpuShare(3))))
      << lines_.Dump();
  EXPECT_EQ(lines_.Get().back(), "[launch] job succeeded: all 3 workers finished (exit 0)")
      << lines_.Dump();
  ExpectNoLeftovers(lines_.Pids());
}

TEST_F(LauncherTest, UnderDropAWorkerPastItsRestartsIsLeftOutAndTheOthersFinish) {
  const std::string worker = R"(
while [ ! -e "@DIR@/server_0" ]; do sleep 0.01; done
if [ "$4" = 1 ]; then echo "rank 1 failing"; exit 3; fi
echo "rank $4 done"
)";
  JobOptions job = Job(1, 3);
  job.liveness.on_dead_worker = DeadWorkerPolicy::kDrop;
  job.liveness.worker_restarts = 2;
  Launcher launcher(job, config_, Options(kServer, worker));
  StatusOr<int> code = launcher.Run();
  ASSERT_OK(code);
  EXPECT_EQ(*code, 0) << lines_.Dump();
  EXPECT_TRUE(lines_.Contains("[launch] worker 1 exited with code 3; the job goes on without it "
                              "(liveness.on_dead_worker: drop; it was restarted 2 times already "
                              "(liveness.worker_restarts))"))
      << lines_.Dump();
  EXPECT_EQ(lines_.Get().back(),
            "[launch] job succeeded without worker 1: 2 of 3 workers finished "
            "(liveness.on_dead_worker: drop) (exit 0)")
      << lines_.Dump();
  ExpectNoLeftovers(lines_.Pids());
}

TEST_F(LauncherTest, UnderDropEveryWorkerFailingFailsTheJob) {
  const std::string worker = R"(
while [ ! -e "@DIR@/server_0" ]; do sleep 0.01; done
exit 4
)";
  JobOptions job = Job(1, 2);
  job.liveness.on_dead_worker = DeadWorkerPolicy::kDrop;
  job.liveness.worker_restarts = 0;
  Launcher launcher(job, config_, Options(kServer, worker));
  StatusOr<int> code = launcher.Run();
  ASSERT_OK(code);
  EXPECT_EQ(*code, 1) << lines_.Dump();
  EXPECT_EQ(lines_.Get().back(),
            "[launch] job failed: every worker failed (liveness.on_dead_worker: drop) (exit 1)")
      << lines_.Dump();
  ExpectNoLeftovers(lines_.Pids());
}

TEST_F(LauncherTest, ServerThatDiesStopsTheJob) {
  const std::string server = R"(
if [ "$4" = 1 ]; then
  while [ ! -e "@DIR@/server_0" ]; do sleep 0.01; done
  kill -9 $$
fi
)" + std::string(kServer);
  Launcher launcher(Job(2, 2), config_, Options(server, kWaitingWorker));
  StatusOr<int> code = launcher.Run();
  ASSERT_OK(code);
  EXPECT_EQ(*code, 1);
  EXPECT_TRUE(lines_.Contains(
      "[launch] server 1 killed by signal 9 (Killed); it cannot be restarted without "
      "checkpoints (set checkpoint.dir, and checkpoint.restore: true, to let ps_launch restart a "
      "crashed server); stopping the job"))
      << lines_.Dump();
  EXPECT_TRUE(lines_.Contains("[server 0] stopping on TERM")) << lines_.Dump();
  ExpectNoLeftovers(lines_.Pids());
}

// With checkpoints, a server that dies by a signal comes back with the
// same flags (but no --restore-clock: it takes its own newest generation),
// told which workers already finished; the job goes on and succeeds.
TEST_F(LauncherTest, CrashedServerIsRestartedAndTheJobGoesOn) {
  // Server 1 kills itself once worker 0 has finished and been reaped (its
  // /proc entry is gone), so the restart knows worker 0 left.
  const std::string server = R"sh(
if [ "$4" = 1 ] && [ ! -e "@DIR@/crashed" ]; then
  touch "@DIR@/crashed"
  while [ ! -e "@DIR@/worker_0_pid" ]; do sleep 0.01; done
  while [ -e "/proc/$(cat "@DIR@/worker_0_pid")" ]; do sleep 0.01; done
  kill -9 $$
fi
if [ -e "@DIR@/crashed" ] && [ "$4" = 1 ]; then echo "restarted with: $*"; touch "@DIR@/back"; fi
)sh" + std::string(kServer);
  const std::string worker = R"(
while [ ! -e "@DIR@/server_0" ]; do sleep 0.01; done
if [ "$4" = 0 ]; then echo $$ > "@DIR@/worker_0_pid.tmp"; mv "@DIR@/worker_0_pid.tmp" "@DIR@/worker_0_pid"; exit 0; fi
while [ ! -e "@DIR@/back" ]; do sleep 0.01; done
echo "rank $4 saw server 1 back"
)";
  JobOptions job = Job(2, 2);
  job.checkpoint.dir = dir_ + "/ckpt";
  Launcher launcher(job, config_, Options(server, worker));
  StatusOr<int> code = launcher.Run();
  ASSERT_OK(code);
  EXPECT_EQ(*code, 0) << lines_.Dump();
  bool restarted = false;
  for (const std::string& line : lines_.Get()) {
    if (line.rfind("[launch] server 1 killed by signal 9 (Killed); restarted it (restart 1 of 10, "
                   "pid ", 0) == 0) {
      restarted = true;
      EXPECT_NE(line.find("it restores its newest checkpoint"), std::string::npos) << line;
    }
  }
  EXPECT_TRUE(restarted) << lines_.Dump();
  EXPECT_TRUE(lines_.Contains("[server 1] restarted with: --config " + config_ +
                              " --shard 1 --log-level info --left-workers 0"))
      << lines_.Dump();
  EXPECT_TRUE(lines_.Contains("[worker 1] rank 1 saw server 1 back")) << lines_.Dump();
  EXPECT_TRUE(lines_.Contains("[launch] all 2 workers finished; stopping the servers"))
      << lines_.Dump();
  ExpectNoLeftovers(lines_.Pids());
}

// Under replication.authority etcd the launcher is no authority: a replica
// that dies is started again with its own flags (no --join, no
// MEMBERSHIP), and etcd tells it what it is.
TEST_F(LauncherTest, UnderEtcdADeadReplicaIsStartedAgainAsAJoiningBackupOfItsOwnReplica) {
  // Replica 0 of shard 1 kills itself once; backups ("--replica 1") never
  // do.
  const std::string server = R"sh(
if [ "$4" = 1 ] && [ "$5" != "--replica" ] && [ ! -e "@DIR@/crashed" ]; then
  touch "@DIR@/crashed"
  kill -9 $$
fi
if [ -e "@DIR@/crashed" ] && [ "$4" = 1 ] && [ "$6" = 0 ]; then
  echo "restarted with: $*"; touch "@DIR@/back"
fi
)sh" + std::string(kServer);
  const std::string worker = R"(
while [ ! -e "@DIR@/back" ]; do sleep 0.01; done
echo "rank $4 saw replica 0 of shard 1 back"
)";
  JobOptions job = Job(2, 1);
  job.replication.factor = 2;
  job.replication.authority = ReplicationAuthority::kEtcd;
  job.replication.etcd.endpoints = {"127.0.0.1:9"};  // the launcher never asks it
  Launcher launcher(job, config_, Options(server, worker));
  StatusOr<int> code = launcher.Run();
  ASSERT_OK(code);
  EXPECT_EQ(*code, 0) << lines_.Dump();
  // --join: it never takes the shard afresh from a checkpoint (etcd's key
  // may be free for a moment), it joins whichever replica etcd names.
  EXPECT_TRUE(lines_.Contains("[server 1] restarted with: --config " + config_ +
                              " --shard 1 --replica 0 --join --log-level info"))
      << lines_.Dump();
  bool said = false;
  for (const std::string& line : lines_.Get()) {
    EXPECT_EQ(line.find("is shard 1's primary now"), std::string::npos) << line;
    if (line.rfind("[launch] server 1 killed by signal 9 (Killed); restarted it", 0) == 0) {
      said = line.find("etcd (replication.authority) decides which replica serves") !=
             std::string::npos;
    }
  }
  EXPECT_TRUE(said) << lines_.Dump();
  EXPECT_TRUE(lines_.Contains("[worker 0] rank 0 saw replica 0 of shard 1 back")) << lines_.Dump();
  ExpectNoLeftovers(lines_.Pids());
}

// A reshard under etcd where one backup was left out of its primary's log
// (it waits for a copy of its own, sent to its previous process): its
// primary hands the shard over without it, and it stops on its own with
// code 4 once the primary is gone. Its shard's part of the handover
// generation is on disk, so the job goes on: the next map starts and the
// worker finishes. Any other server dying during a reshard still stops the
// job (ServerThatDiesStopsTheJob's reshard cousin in e2e).
TEST_F(LauncherTest, UnderEtcdABackupThatStopsAfterItsShardHandedOverLeavesTheReshardGoingOn) {
  JobOptions job = Job(2, 1);
  job.replication.factor = 2;
  job.replication.authority = ReplicationAuthority::kEtcd;
  job.replication.etcd.endpoints = {"127.0.0.1:9"};  // the launcher never asks it
  job.checkpoint.dir = dir_ + "/ckpt";
  std::filesystem::create_directories(job.checkpoint.dir);
  // The next map on the same addresses, as a reshard from 2 to 2 servers:
  // it starts only once every old replica left its port.
  {
    std::ofstream out(dir_ + "/job2.yaml");
    out << "cluster: { servers: [\"" << job.cluster.servers[0] << "\", \""
        << job.cluster.servers[1] << "\"], workers: 1 }\n"
        << "tables:\n  - { name: w, rows: 8, dim: 1, optimizer: { type: add } }\n"
        << "replication: { factor: 2, port_offset: " << job.replication.port_offset
        << ", authority: etcd, etcd: { endpoints: [\"127.0.0.1:9\"] } }\n"
        << "checkpoint: { dir: \"" << job.checkpoint.dir << "\" }\n";
  }
  // Map 0: each replica says it is up and waits for the go. Primaries
  // write their shard's part of generation 7 and exit 3; backup 1 of shard
  // 0 follows its primary (exit 3), backup 1 of shard 1 (left out) stops
  // with 4 once its shard's part is there. Map 1 (--map-epoch 1) serves.
  const std::string server = R"sh(
case "$*" in
  *--map-epoch*) touch "@DIR@/map1_$4" ;;
  *)
    r=0; [ "$5" = "--replica" ] && r=$6
    touch "@DIR@/up_$4_$r"
    while [ ! -e "@DIR@/go" ]; do sleep 0.01; done
    if [ $r = 0 ]; then mkdir -p "@DIR@/ckpt/shard-$4/gen-7"; exit 3; fi
    while [ ! -d "@DIR@/ckpt/shard-$4/gen-7" ]; do sleep 0.01; done
    if [ "$4" = 1 ]; then echo "left out of the log; stopping"; exit 4; fi
    exit 3 ;;
esac
)sh" + std::string(kServer);
  const std::string worker = R"sh(
for f in up_0_0 up_0_1 up_1_0 up_1_1; do while [ ! -e "@DIR@/$f" ]; do sleep 0.01; done; done
printf 'epoch 1\nclock 7\nconfig @DIR@/job2.yaml\n' > "@DIR@/ckpt/reshard-1.plan"
touch "@DIR@/go"
while [ ! -e "@DIR@/map1_0" ] || [ ! -e "@DIR@/map1_1" ]; do sleep 0.01; done
echo "rank $4 saw map 1"
)sh";
  Launcher launcher(job, config_, Options(server, worker));
  StatusOr<int> code = launcher.Run();
  ASSERT_OK(code);
  EXPECT_EQ(*code, 0) << lines_.Dump();
  EXPECT_TRUE(lines_.Contains("[launch] server 1 backup 1 exited with code 4: shard 1 handed its "
                              "rows over at clock 7 already, so it holds nothing the job needs"))
      << lines_.Dump();
  EXPECT_TRUE(lines_.Contains("[worker 0] rank 0 saw map 1")) << lines_.Dump();
  ExpectNoLeftovers(lines_.Pids());
}

// --resume refuses, starting nothing, when there is nothing to resume from;
// with a generation every shard holds, every server gets its clock.
TEST_F(LauncherTest, ResumeNeedsACheckpointEveryShardHolds) {
  JobOptions job = Job(2, 1);
  LauncherOptions options = Options(kServer, kWorker);
  options.resume = true;
  {
    Launcher launcher(job, config_, options);
    StatusOr<int> code = launcher.Run();
    ASSERT_FALSE(code.ok());
    EXPECT_EQ(code.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(code.status().message().find("has no checkpoint.dir"), std::string::npos)
        << code.status().ToString();
  }
  job.checkpoint.dir = dir_ + "/ckpt";
  {
    Launcher launcher(job, config_, options);
    StatusOr<int> code = launcher.Run();
    ASSERT_FALSE(code.ok());
    EXPECT_NE(code.status().message().find(dir_ + "/ckpt holds no checkpoint generation"),
              std::string::npos)
        << code.status().ToString();
  }
  EXPECT_TRUE(lines_.Pids().empty()) << lines_.Dump();  // nothing was started
  // Generations are folders gen-<clock>; 20 is the newest both shards hold.
  for (const char* gen : {"shard-0/gen-10", "shard-0/gen-20", "shard-1/gen-20", "shard-1/gen-30"}) {
    std::filesystem::create_directories(dir_ + "/ckpt/" + gen);
  }
  const std::string server = R"(echo "args: $*"
)" + std::string(kServer);
  LauncherOptions resuming = Options(server, kWorkerOfTwoServers);
  resuming.resume = true;
  Launcher launcher(job, config_, resuming);
  StatusOr<int> code = launcher.Run();
  ASSERT_OK(code);
  EXPECT_EQ(*code, 0) << lines_.Dump();
  EXPECT_TRUE(lines_.Contains("[server 1] args: --config " + config_ +
                              " --shard 1 --log-level info --restore-clock 20"))
      << lines_.Dump();
  ExpectNoLeftovers(lines_.Pids());
}

// liveness.server_restarts bounds the restarts; an error exit is never
// restarted (the server found a problem a restart would meet again).
TEST_F(LauncherTest, ServerRestartsAreBoundedAndErrorExitsStopTheJob) {
  const std::string crashing = R"(
while [ ! -e "@DIR@/server_0" ] && [ "$4" = 1 ]; do sleep 0.01; done
if [ "$4" = 1 ]; then kill -9 $$; fi
)" + std::string(kServer);
  JobOptions job = Job(2, 1);
  job.checkpoint.dir = dir_ + "/ckpt";
  job.liveness.server_restarts = 2;
  {
    Launcher launcher(job, config_, Options(crashing, kWaitingWorker));
    StatusOr<int> code = launcher.Run();
    ASSERT_OK(code);
    EXPECT_EQ(*code, 1) << lines_.Dump();
    EXPECT_TRUE(lines_.Contains(
        "[launch] server 1 killed by signal 9 (Killed); it was restarted 2 times already "
        "(liveness.server_restarts); stopping the job"))
        << lines_.Dump();
    ExpectNoLeftovers(lines_.Pids());
  }
  const std::string failing = R"(
while [ ! -e "@DIR@/server_0" ] && [ "$4" = 1 ]; do sleep 0.01; done
if [ "$4" = 1 ]; then exit 1; fi
)" + std::string(kServer);
  Launcher launcher(job, config_, Options(failing, kWaitingWorker));
  StatusOr<int> code = launcher.Run();
  ASSERT_OK(code);
  EXPECT_EQ(*code, 1) << lines_.Dump();
  EXPECT_TRUE(lines_.Contains("[launch] server 1 exited with code 1; stopping the job"))
      << lines_.Dump();
  ExpectNoLeftovers(lines_.Pids());
}

TEST_F(LauncherTest, ServerIgnoringSigtermIsKilledAfterGraceAndFailsTheJob) {
  // '' TERM is inherited by sleep: the whole group ignores SIGTERM.
  const std::string server = R"(trap '' TERM
touch "@DIR@/server_$4"
sleep 10
)";
  LauncherOptions options = Options(server, kWorker);
  options.grace = milliseconds(200);
  Launcher launcher(Job(1, 1), config_, options);
  const auto start = Clock::now();
  StatusOr<int> code = launcher.Run();
  const auto elapsed = Clock::now() - start;
  ASSERT_OK(code);
  EXPECT_EQ(*code, 1);
  EXPECT_GE(elapsed, milliseconds(200));
  EXPECT_LT(elapsed, milliseconds(2000));
  EXPECT_TRUE(lines_.Contains(
      "[launch] server 0 still running 200 ms after SIGTERM; sending SIGKILL"))
      << lines_.Dump();
  EXPECT_TRUE(
      lines_.Contains("[launch] server 0 killed by signal 9 (Killed) "
                      "while shutting down; the job fails"))
      << lines_.Dump();
  ExpectNoLeftovers(lines_.Pids());
}

TEST_F(LauncherTest, MissingBinaryIsAnErrorAndStopsWhatStarted) {
  LauncherOptions options = Options(kServer, kWorker);
  options.worker_command.clear();
  options.bin_dir = dir_ + "/no_such_dir";
  Launcher launcher(Job(2, 1), config_, options);
  StatusOr<int> code = launcher.Run();
  ASSERT_FALSE(code.ok());
  EXPECT_EQ(code.status().code(), StatusCode::kNotFound);
  EXPECT_NE(code.status().message().find("worker 0"), std::string::npos)
      << code.status().ToString();
  EXPECT_NE(code.status().message().find(dir_ + "/no_such_dir/ps_worker"),
            std::string::npos)
      << code.status().ToString();
  EXPECT_EQ(lines_.Pids().size(), 2u) << lines_.Dump();
  ExpectNoLeftovers(lines_.Pids());
}

TEST_F(LauncherTest, RejectsJobWithoutWorkersOrServers) {
  Launcher no_workers(Job(1, 0), config_, Options(kServer, kWorker));
  EXPECT_EQ(no_workers.Run().status().code(), StatusCode::kInvalidArgument);
  Launcher no_servers(Job(0, 1), config_, Options(kServer, kWorker));
  EXPECT_EQ(no_servers.Run().status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(lines_.Pids().empty());
}

TEST_F(LauncherTest, RefusesMoreProcessesThanTheHostShouldRun) {
  Launcher huge(Job(2, 100000), config_, Options(kServer, kWorker));
  StatusOr<int> code = huge.Run();
  EXPECT_EQ(code.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(code.status().message().find("has 100002 processes (2 servers + 100000 workers)"),
            std::string::npos)
      << code.status().ToString();
  EXPECT_NE(code.status().message().find("--max-processes"), std::string::npos);
  EXPECT_TRUE(lines_.Pids().empty()) << "nothing may start";
  LauncherOptions options = Options(kServer, kWorker);
  options.max_processes = 2;
  Launcher three(Job(1, 2), config_, options);
  EXPECT_EQ(three.Run().status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(lines_.Pids().empty());
}

TEST(MaxLaunchProcessesTest, SixteenPerHardwareThreadAtLeast64UnlessGiven) {
  EXPECT_EQ(MaxLaunchProcesses(0, 2), 64u);
  EXPECT_EQ(MaxLaunchProcesses(0, 8), 128u);
  EXPECT_EQ(MaxLaunchProcesses(0, 0), 64u);
  EXPECT_EQ(MaxLaunchProcesses(10, 64), 10u);
}

TEST_F(LauncherTest, SigintToLauncherInAThreadStopsTheJobWith130) {
  LauncherOptions options = Options(kServer, kWaitingWorker);
  options.handle_signals = true;
  Launcher launcher(Job(1, 2), config_, options);
  StatusOr<int> code = InternalError("not run");
  std::atomic<bool> done{false};
  std::thread runner([&] {
    code = launcher.Run();
    done = true;
  });
  bool ready = lines_.WaitFor("[worker 0] waiting") &&
               lines_.WaitFor("[worker 1] waiting");
  // Process-directed: whichever thread takes it, the handler wakes Run().
  // (Once Run() has returned, SIGINT would kill the test binary.)
  if (!done) ::kill(::getpid(), SIGINT);
  runner.join();
  ASSERT_TRUE(ready) << lines_.Dump();
  ASSERT_OK(code);
  EXPECT_EQ(*code, 130);
  EXPECT_TRUE(lines_.Contains("[launch] received SIGINT; stopping the job"))
      << lines_.Dump();
  EXPECT_TRUE(lines_.Contains("[server 0] stopping on TERM")) << lines_.Dump();
  ExpectNoLeftovers(lines_.Pids());
}

TEST_F(LauncherTest, SecondSignalKillsChildrenAtOnce) {
  const std::string server = R"(trap '' TERM
touch "@DIR@/server_$4"
sleep 10
)";
  LauncherOptions options = Options(server, kWaitingWorker);
  options.handle_signals = true;
  options.grace = milliseconds(10000);
  Launcher launcher(Job(1, 1), config_, options);
  StatusOr<int> code = InternalError("not run");
  const auto start = Clock::now();
  std::atomic<bool> done{false};
  std::thread runner([&] {
    code = launcher.Run();
    done = true;
  });
  bool ready = lines_.WaitFor("[worker 0] waiting");
  if (!done) ::kill(::getpid(), SIGINT);
  bool stopping = lines_.WaitFor("[launch] received SIGINT; stopping the job");
  if (!done) ::kill(::getpid(), SIGINT);
  runner.join();
  ASSERT_TRUE(ready && stopping) << lines_.Dump();
  EXPECT_LT(Clock::now() - start, milliseconds(5000));  // well before grace
  ASSERT_OK(code);
  EXPECT_EQ(*code, 130);
  EXPECT_TRUE(lines_.Contains("[launch] received SIGINT while stopping"))
      << lines_.Dump();
  EXPECT_TRUE(
      lines_.Contains("[launch] server 0 still running after a "
                      "second signal; sending SIGKILL"))
      << lines_.Dump();
  EXPECT_TRUE(lines_.Contains("[launch] server 0 killed by signal 9 (Killed)"))
      << lines_.Dump();
  ExpectNoLeftovers(lines_.Pids());
}

TEST_F(LauncherTest, SigtermToForkedLauncherStopsTheJobWith143) {
  int report[2];
  ASSERT_EQ(::pipe(report), 0);
  pid_t launcher_pid = ::fork();
  ASSERT_GE(launcher_pid, 0);
  if (launcher_pid == 0) {
    ::close(report[0]);
    LauncherOptions options = Options(kServer, kWaitingWorker);
    options.handle_signals = true;
    options.output = [fd = report[1]](std::string_view line) {
      std::string text = std::string(line) + "\n";
      if (::write(fd, text.data(), text.size()) < 0) ::_exit(100);
    };
    Launcher launcher(Job(2, 1), config_, options);
    StatusOr<int> code = launcher.Run();
    ::_exit(code.ok() ? *code : 101);
  }
  ::close(report[1]);
  // Lines from the forked launcher, until `want` or EOF (it exited).
  LineReader reader;
  std::vector<std::string> lines;
  auto read_until = [&](const std::string& want) {
    const auto deadline = Clock::now() + milliseconds(3000);
    while (Clock::now() < deadline) {
      if (std::find(lines.begin(), lines.end(), want) != lines.end()) {
        return true;
      }
      pollfd pfd{report[0], POLLIN, 0};
      if (::poll(&pfd, 1, 100) <= 0) continue;
      char buffer[4096];
      ssize_t n = ::read(report[0], buffer, sizeof(buffer));
      if (n <= 0) return false;
      reader.Feed(std::string_view(buffer, static_cast<size_t>(n)), &lines);
    }
    return false;
  };
  // Every child must have set up its TERM trap before the signal comes.
  bool ready = read_until("[worker 0] waiting");
  for (int shard = 0; shard < 2 && ready; ++shard) {
    ready = read_until("[server " + std::to_string(shard) + "] up shard=" + std::to_string(shard) +
                       " config=" + config_ + " level=info");
  }
  ::kill(launcher_pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(::waitpid(launcher_pid, &status, 0), launcher_pid);
  read_until("<EOF>");  // the rest, up to EOF
  ::close(report[0]);
  for (const std::string& line : lines) lines_.Add(line);

  ASSERT_TRUE(ready) << lines_.Dump();
  ASSERT_TRUE(WIFEXITED(status)) << DescribeWaitStatus(status);
  EXPECT_EQ(WEXITSTATUS(status), 143) << lines_.Dump();
  EXPECT_TRUE(lines_.Contains("[launch] received SIGTERM; stopping the job"))
      << lines_.Dump();
  EXPECT_TRUE(lines_.Contains("[server 1] stopping on TERM")) << lines_.Dump();
  EXPECT_EQ(lines_.Pids().size(), 3u);
  ExpectNoLeftovers(lines_.Pids());
}

}  // namespace
}  // namespace ps
